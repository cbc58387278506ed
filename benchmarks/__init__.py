"""Benchmarks: each prints its figures (ratios measured in one run), none is a timed test.

Run from a clone's root as `python -m benchmarks.NAME`; not installed with the wheel. Every
benchmark runs TensorFlow and TFRS, so this package imports tfrs_logq first (tf.keras is then
Keras 2, and ScaNN's import is set up before TFRS loads).
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("GLOG_minloglevel", "2")

import tfrs_logq  # noqa: E402,F401
