"""Tests of `tfrs_logq`."""
