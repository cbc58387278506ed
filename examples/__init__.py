"""Examples, run from a clone as `python -m examples.NAME` (not installed with the wheel)."""
