"""keras_logq (Keras 3) on every installed backend, each in its own process.

Keras 3 picks its backend once per process (KERAS_BACKEND), and this process
runs Keras 2 (tf-keras) for TFRS, so keras_logq's tests (tests_keras3/) run in
a child process per backend. The last test checks that the improved loss and
its gradients agree across the backends and with tfrs_logq to 1e-5.
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests import reference
from tfrs_logq import losses

pytestmark = pytest.mark.backends

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BACKENDS = ("tensorflow", "jax", "torch")


def _child_env(backend):
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_USE_LEGACY_KERAS", None)  # The child runs Keras 3 only.
    return env


def _require(backend):
    module = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}[backend]
    if importlib.util.find_spec(module) is None:
        pytest.skip(
            f"{module} is not installed (the {backend} backend of Keras 3 is optional; "
            f"`pip install {module}` to test it)"
        )


@pytest.mark.parametrize("backend", BACKENDS)
def test_keras3_suite(backend):
    _require(backend)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests_keras3", "-q", "-p", "no:cacheprovider", "-x"],
        cwd=ROOT,
        env=_child_env(backend),
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    summary = result.stdout.strip().splitlines()[-1:] or [""]
    assert result.returncode == 0, (
        f"keras_logq's tests failed on the {backend} backend:\n"
        f"{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    )
    assert "passed" in summary[0], result.stdout[-2000:]


_IMPROVED_SCRIPT = """
import json, sys
import numpy as np
from keras import ops
from keras_logq import losses
from tests import reference
from tests_keras3.backend import gradients, numpy
pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(21, batch=8, num=12)
kwargs = dict(correction="improved", negative_log_q=neg_log_q, positive_log_q=pos_log_q,
              negative_mask=mask)
loss = numpy(losses.sampled_softmax_loss(pos, neg, **kwargs))
d_pos, d_neg = gradients(lambda p, n: ops.sum(losses.sampled_softmax_loss(p, n, **kwargs)),
                         pos, neg)
json.dump(dict(loss=loss.tolist(), d_pos=d_pos.tolist(), d_neg=d_neg.tolist()), sys.stdout)
"""


def test_improved_loss_is_equal_across_backends_and_tfrs_logq():
    pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(21, batch=8, num=12)
    pos_t, neg_t = tf.constant(pos), tf.constant(neg)
    with tf.GradientTape() as tape:
        tape.watch([pos_t, neg_t])
        loss = losses.sampled_softmax_loss(
            pos_t,
            neg_t,
            correction="improved",
            negative_log_q=neg_log_q,
            positive_log_q=pos_log_q,
            negative_mask=mask,
        )
        total = tf.reduce_sum(loss)
    d_pos, d_neg = tape.gradient(total, [pos_t, neg_t])
    want = dict(loss=loss.numpy(), d_pos=d_pos.numpy(), d_neg=d_neg.numpy())
    compared = []
    for backend in BACKENDS:
        module = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}[backend]
        if importlib.util.find_spec(module) is None:
            continue
        result = subprocess.run(
            [sys.executable, "-c", _IMPROVED_SCRIPT],
            cwd=ROOT,
            env=_child_env(backend),
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert result.returncode == 0, f"{backend}:\n{result.stderr[-3000:]}"
        got = json.loads(result.stdout.strip().splitlines()[-1])
        for key, value in want.items():
            np.testing.assert_allclose(
                np.array(got[key]), value, rtol=1e-5, atol=1e-5, err_msg=f"{backend}: {key}"
            )
        compared.append(backend)
    assert {"tensorflow", "jax"} <= set(compared), compared


# Distributions a Keras 3 user on JAX does not have: TensorFlow and everything built on it.
_TENSORFLOW_FAMILY = (
    "tensorflow",
    "tf_keras",
    "tf-keras",
    "tensorboard",
    "scann",
    "keras_rs",
    "keras-rs",
)


def _site_packages_without_tensorflow(directory, family=_TENSORFLOW_FAMILY):
    """A copy of this interpreter's site-packages, as links, without the distributions of
    `family` (by default the TensorFlow family and keras-rs)."""
    site_packages = os.path.dirname(os.path.dirname(np.__file__))
    for entry in os.listdir(site_packages):
        if not entry.lower().startswith(tuple(family)):
            os.symlink(os.path.join(site_packages, entry), os.path.join(directory, entry))
    return directory


def test_keras_logq_imports_and_passes_its_suite_without_tensorflow(tmp_path):
    """keras_logq and logq_core need Keras 3 and a backend, never TensorFlow: in a Python
    whose packages lack the TensorFlow family (`-S` drops site-packages; a copy of it
    without those comes back through PYTHONPATH), they import and their suite passes on
    JAX."""
    _require("jax")
    env = dict(
        _child_env("jax"),
        PYTHONPATH=os.pathsep.join([_site_packages_without_tensorflow(str(tmp_path)), ROOT]),
    )
    probe = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import importlib.util, sys; import keras_logq, logq_core; "
            "print(importlib.util.find_spec('tensorflow'), 'tensorflow' in sys.modules, "
            "keras_logq.__version__)",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    assert probe.stdout.split()[:2] == ["None", "False"], probe.stdout
    result = subprocess.run(
        [
            sys.executable,
            "-S",
            "-m",
            "pytest",
            "tests_keras3",
            "-q",
            "-p",
            "no:cacheprovider",
            "-x",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert result.returncode == 0, f"{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    assert "passed" in result.stdout.strip().splitlines()[-1], result.stdout[-2000:]
