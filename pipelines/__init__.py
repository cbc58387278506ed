"""Runnable jobs built on tfrs_logq: data, training, evaluation, export, local clusters.

Importing this package imports no TensorFlow: its numpy-only modules (`pipelines.data`'s
loaders, splits and synthetic catalogs, `pipelines.significance`, `pipelines.memory`) serve
the Keras 3 examples on a machine without TensorFlow. It routes `tf.keras` to Keras 2
(TFRS needs it) for the jobs that do import TensorFlow, as `import tfrs_logq` would.
"""

import os

# Quiet TensorFlow's C++ INFO/WARNING chatter in the jobs' output (errors still show).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("GLOG_minloglevel", "2")
# Before any job imports TensorFlow (tfrs_logq checks it again when imported).
os.environ["TF_USE_LEGACY_KERAS"] = "1"
