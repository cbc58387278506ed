"""Tests of `pipelines`."""
