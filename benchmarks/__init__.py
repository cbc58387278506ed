"""Benchmarks: each prints its figures (ratios measured in one run), none is a timed test."""
