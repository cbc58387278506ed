"""keras_logq's tests run in their own process, one per Keras 3 backend (KERAS_BACKEND).

`tests/keras_logq/test_backends.py` starts `python -m pytest tests_keras3` once per backend;
run one directly with e.g. `KERAS_BACKEND=jax python -m pytest tests_keras3`.
Nothing here imports tfrs_logq (which routes tf.keras to Keras 2).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402  pylint: disable=wrong-import-position
import numpy as np  # noqa: E402  pylint: disable=wrong-import-position
import pytest  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(autouse=True)
def _seeded():
    keras.utils.set_random_seed(0)
    np.random.seed(0)


def pytest_report_header(config):
    del config
    return f"keras {keras.__version__}, backend {keras.backend.backend()}"
