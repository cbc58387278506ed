"""tfrs_logq: sampled-softmax retrieval for TensorFlow Recommenders with logQ corrections.

TensorFlow Recommenders needs Keras 2 (the `tf-keras` package). Importing this
package first sets `TF_USE_LEGACY_KERAS=1` so that `tf.keras` is Keras 2. If
TensorFlow was already imported and `tf.keras` already resolved to Keras 3,
an ImportError names the fix.
"""

import ctypes
import os
import sys
import tempfile

from logq_core import __version__  # noqa: F401  pylint: disable=unused-import

_LEGACY_KERAS_VALUES = ("1", "true", "True")


def _ensure_legacy_keras() -> None:
    """Routes `tf.keras` to Keras 2, or raises an ImportError naming the fix."""
    if os.environ.get("TF_USE_LEGACY_KERAS") not in _LEGACY_KERAS_VALUES:
        # TensorFlow reads the variable when `tf.keras` is first touched, so this
        # works even after `import tensorflow`, as long as `tf.keras` is unused.
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    tf_was_imported = "tensorflow" in sys.modules
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    keras_module = tf.keras.Model.__module__
    if not keras_module.startswith("tf_keras"):
        raise ImportError(
            "tfrs_logq needs Keras 2 (tf-keras), but `tf.keras` is Keras 3 "
            f"({keras_module}): TensorFlow was imported"
            f"{' and tf.keras used' if tf_was_imported else ''} before "
            "TF_USE_LEGACY_KERAS=1 was set. Fix: run with the environment "
            "variable TF_USE_LEGACY_KERAS=1 (e.g. `export TF_USE_LEGACY_KERAS=1`), "
            "or `import tfrs_logq` before anything imports tensorflow or keras."
        )


# What TensorFlow's CUDA build logs as an error on every machine without an NVIDIA driver
# (xla/stream_executor/cuda/cuda_platform.cc, once per process, when devices are first
# listed): its stub of libcuda.so.1 answers cuInit with CUDA_ERROR_SHARED_OBJECT_INIT_FAILED,
# 303, which it cannot name ("E ... cuda_platform.cc:51] failed call to cuInit: INTERNAL:
# CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)" in TensorFlow 2.20).
_NO_DRIVER_LINE = (b"failed call to cuInit", b"UNKNOWN ERROR (303)")


def _list_devices_without_the_no_driver_line() -> None:
    """Lists the physical devices now, dropping TensorFlow's cuInit error line when this
    machine has no NVIDIA driver (libcuda.so.1 does not load), so that a CPU run does not
    print an error that is none. Everything else the listing writes to stderr is written
    back; with a driver nothing is done (a cuInit error is then a real one). No environment
    variable avoids the line: CUDA_VISIBLE_DEVICES does not (the driver library is missing,
    not the devices hidden), and TF_CPP_MIN_LOG_LEVEL=3 would hide every error."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    if not sys.platform.startswith("linux") or not tf.test.is_built_with_cuda():
        return
    try:
        ctypes.CDLL("libcuda.so.1")
        return
    except OSError:
        pass  # No driver.
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        return  # No stderr to filter.
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            tf.config.list_physical_devices()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        kept = [
            line
            for line in captured.read().splitlines(keepends=True)
            if not all(part in line for part in _NO_DRIVER_LINE)
        ]
    if kept:
        os.write(2, b"".join(kept))


_ensure_legacy_keras()
_list_devices_without_the_no_driver_line()

# pylint: disable=g-import-not-at-top,wrong-import-position
from tfrs_logq import _scann

_scann.import_scann()  # Before TFRS loads: TensorFlow 2.21 cannot load ScaNN's ops.

from tfrs_logq import evaluation
from tfrs_logq import frequency
from tfrs_logq import losses
from tfrs_logq import negatives
from tfrs_logq import tasks
from tfrs_logq.evaluation import candidates
from tfrs_logq.frequency import CountMinSketchEstimator
from tfrs_logq.frequency import HashedFrequencyEstimator
from tfrs_logq.frequency import StaticFrequency
from tfrs_logq.losses import SampledSoftmaxLoss
from tfrs_logq.losses import bce_loss
from tfrs_logq.losses import full_softmax_loss
from tfrs_logq.losses import gbce_loss
from tfrs_logq.losses import sampled_softmax_loss
from tfrs_logq.negatives import InBatchSampler
from tfrs_logq.negatives import MixedSampler
from tfrs_logq.negatives import Negatives
from tfrs_logq.negatives import UniformSampler
from tfrs_logq.negatives import make_sampler
from tfrs_logq.tasks import LogQRetrieval

_scann.mark_tfrs_layer()

__all__ = [
    "CountMinSketchEstimator",
    "HashedFrequencyEstimator",
    "InBatchSampler",
    "LogQRetrieval",
    "MixedSampler",
    "Negatives",
    "SampledSoftmaxLoss",
    "StaticFrequency",
    "UniformSampler",
    "bce_loss",
    "candidates",
    "evaluation",
    "frequency",
    "full_softmax_loss",
    "gbce_loss",
    "losses",
    "make_sampler",
    "negatives",
    "sampled_softmax_loss",
    "tasks",
]
