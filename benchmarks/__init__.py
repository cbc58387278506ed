"""Benchmarks: each prints its figures (ratios measured in one run), none is a timed test.

Run from a clone's root as `python -m benchmarks.NAME`; not installed with the wheel. Where
TensorFlow is installed this package imports tfrs_logq first (tf.keras is then Keras 2, and
ScaNN's import is set up before TFRS loads); the Keras 3 benchmarks (`sparse_tables`,
`keras_gpu`) also run on a machine without TensorFlow (a GPU machine with JAX only).
"""

import importlib.util
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("GLOG_minloglevel", "2")

if importlib.util.find_spec("tensorflow") is not None:
    import tfrs_logq  # noqa: F401
