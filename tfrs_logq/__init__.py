"""tfrs_logq: sampled-softmax retrieval for TensorFlow Recommenders with logQ corrections.

TensorFlow Recommenders needs Keras 2 (the `tf-keras` package). Importing this
package first sets `TF_USE_LEGACY_KERAS=1` so that `tf.keras` is Keras 2. If
TensorFlow was already imported and `tf.keras` already resolved to Keras 3,
an ImportError names the fix.
"""

import os
import sys

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
            "or `import tfrs_logq` before anything imports tensorflow or keras.")


_ensure_legacy_keras()

# pylint: disable=g-import-not-at-top,wrong-import-position
from tfrs_logq import frequency
from tfrs_logq import losses
from tfrs_logq import negatives
from tfrs_logq import tasks
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
        "frequency",
        "full_softmax_loss",
        "gbce_loss",
        "losses",
        "make_sampler",
        "negatives",
        "sampled_softmax_loss",
        "tasks",
]
