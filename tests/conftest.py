"""Test setup: import tfrs_logq before TensorFlow so that tf.keras is Keras 2, and split the CPU.

The CPU is split into two logical devices (before TensorFlow initialises its
runtime) so that MirroredStrategy tests can run two replicas in this process.
Ops without a strategy still run on /CPU:0.
"""

import functools
import os
import random

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tfrs_logq  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position

# isort: split
import tensorflow as tf  # noqa: E402  pylint: disable=wrong-import-position

NUM_LOGICAL_CPUS = 2

# tf.test.TestCase carries `test_session`, a deprecated graph-mode context manager that no
# test uses; pytest would collect it in every test class and report it as a skip.
del tf.test.TestCase.test_session

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0],
    [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS,
)


@functools.lru_cache(maxsize=None)
def mirrored_strategy() -> tf.distribute.MirroredStrategy:
    """The process's one MirroredStrategy over the two logical CPUs.

    Tests share it: a second MirroredStrategy in the same process starts its
    collective keys where the first did, and their collectives then collide.
    """
    return tf.distribute.MirroredStrategy(
        [d.name for d in tf.config.list_logical_devices("CPU")[:NUM_LOGICAL_CPUS]]
    )


def reset_draws(layer: tf.Module) -> None:
    """Restarts the draws of every negative sampler in `layer` (the same draws again)."""
    from tfrs_logq import negatives  # pylint: disable=import-outside-toplevel

    layers = layer._flatten_layers() if hasattr(layer, "_flatten_layers") else [layer]  # pylint: disable=protected-access
    for sublayer in layers:
        if isinstance(sublayer, negatives.NegativeSampler):
            sublayer.reset()


@pytest.fixture(autouse=True)
def _seeded_python_random():
    """Samplers built without a seed seed their generator from Python's `random`: seed it
    per test, so that every test draws the same numbers whatever ran before it."""
    random.seed(0)


@pytest.fixture(autouse=True, scope="session")
def _temporary_files_removed():
    """Every `tempfile.mkdtemp()` of the session (runs, logs and exports: gigabytes for the
    integration tests) lives under one directory, removed when the session ends."""
    import shutil  # pylint: disable=import-outside-toplevel
    import tempfile  # pylint: disable=import-outside-toplevel

    root = tempfile.mkdtemp(prefix="tfrs_logq_tests_")
    previous, tempfile.tempdir = tempfile.tempdir, root
    environment = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = root  # Child processes (the integration tests' commands) too.
    yield
    tempfile.tempdir = previous
    if environment is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = environment
    shutil.rmtree(root, ignore_errors=True)
