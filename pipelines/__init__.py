"""Runnable jobs built on tfrs_logq: data, training, evaluation, export, benchmarks."""

import os

# Quiet TensorFlow's C++ INFO/WARNING chatter in the jobs' output (errors still show).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("GLOG_minloglevel", "2")

import tfrs_logq  # noqa: E402,F401  Sets TF_USE_LEGACY_KERAS=1 before TensorFlow loads.
