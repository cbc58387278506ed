"""Synthetic Zipf catalogs shared by the benchmarks (no flags here, so any benchmark may
import it)."""

import numpy as np


def zipf_probabilities(num_items: int, exponent: float) -> np.ndarray:
    """q(d) proportional to (rank d + 1)^-exponent, item 0 the most popular."""
    weights = np.arange(1, num_items + 1, dtype=np.float64) ** -exponent
    return weights / weights.sum()
