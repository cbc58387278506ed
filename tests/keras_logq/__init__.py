"""Tests of `keras_logq`."""
