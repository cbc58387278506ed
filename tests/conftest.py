"""Test setup: import tfrs_logq before TensorFlow so that tf.keras is Keras 2."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tfrs_logq  # noqa: E402,F401  pylint: disable=unused-import,wrong-import-position
