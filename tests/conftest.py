"""Test setup: import tfrs_logq before TensorFlow so that tf.keras is Keras 2, and split the CPU.

The CPU is split into two logical devices (before TensorFlow initialises its
runtime) so that MirroredStrategy tests can run two replicas in this process.
Ops without a strategy still run on /CPU:0.
"""

import contextlib
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
    integration tests) lives under one directory, emptied when the session ends and removed
    as the process exits.

    TensorFlow's test temporary directory (`tf.test.TestCase.get_temp_dir`) is made there too,
    and TensorFlow removes it itself at exit (an `atexit` function): it stays until then, and
    the directory is removed after it (this `atexit` function is registered first, so it runs
    last). Removed at the session's end, TensorFlow found it missing at exit and logged an
    error to pytest's closed stream: a "--- Logging error ---" traceback after the summary."""
    import atexit  # pylint: disable=import-outside-toplevel
    import shutil  # pylint: disable=import-outside-toplevel
    import tempfile  # pylint: disable=import-outside-toplevel

    root = tempfile.mkdtemp(prefix="tfrs_logq_tests_")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    previous, tempfile.tempdir = tempfile.tempdir, root
    environment = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = root  # Child processes (the integration tests' commands) too.
    yield
    tensorflows = tf.compat.v1.test.get_temp_dir()  # TensorFlow's, made now if not yet.
    tempfile.tempdir = previous
    if environment is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = environment
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if path == tensorflows:
            continue
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(path)
