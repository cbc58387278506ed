"""Tests of `examples`."""
