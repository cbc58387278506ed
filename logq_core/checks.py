"""Pure-Python argument checks; every message names the argument and the value received."""

import math
from typing import Any, Optional, Sequence

import numpy as np


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """Returns `value` if it is one of `choices`, else raises ValueError."""
    if value not in choices:
        raise ValueError(
            f"`{name}` must be one of {', '.join(repr(c) for c in choices)}; "
            f"received {name}={value!r}.")
    return value


def check_bool(name: str, value: Any) -> bool:
    """Returns `value` if it is a Python bool; else (1, "yes", None) raises TypeError."""
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be a bool; received {name}={value!r}.")
    return value


def check_positive_int(name: str, value: Any, allow_none: bool = False) -> Optional[int]:
    """Returns `value` as int if it is a positive integer, else raises ValueError."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(
            f"`{name}` must be a positive integer; received {name}={value!r}.")
    return int(value)


def check_non_negative_int(name: str, value: Any) -> int:
    """Returns `value` as int if it is an integer >= 0, else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(
            f"`{name}` must be a non-negative integer; received {name}={value!r}.")
    return int(value)


def check_positive_float(name: str, value: Any, allow_none: bool = False) -> Optional[float]:
    """Returns `value` as float if it is a finite positive number, else raises ValueError."""
    if value is None and allow_none:
        return None
    if (isinstance(value, bool) or not isinstance(value, (int, float, np.number))
            or not np.isfinite(value) or value <= 0):
        raise ValueError(
            f"`{name}` must be a positive number; received {name}={value!r}.")
    return float(value)


def check_unit_interval(name: str, value: Any) -> float:
    """Returns `value` as float if it is a number in (0, 1], else raises ValueError."""
    if (isinstance(value, bool) or not isinstance(value, (int, float, np.floating))
            or not 0.0 < value <= 1.0):
        raise ValueError(f"`{name}` must be a number in (0, 1]; received {name}={value!r}.")
    return float(value)


def check_seed(name: str, value: Any) -> Optional[int]:
    """Returns `value` if it is an integer or None, else raises ValueError."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
        raise ValueError(f"`{name}` must be an integer or None; received {name}={value!r}.")
    return None if value is None else int(value)


def check_power_of_two(name: str, value: Any) -> int:
    """Returns `value` as int if it is a power of two (>= 2), else raises ValueError."""
    value_ok = (not isinstance(value, bool) and isinstance(value, (int, np.integer))
                and value >= 2 and (int(value) & (int(value) - 1)) == 0)
    if not value_ok:
        raise ValueError(
            f"`{name}` must be a power of two (2, 4, ..., 2**30); received {name}={value!r}.")
    if value > 2**30:
        raise ValueError(f"`{name}` must be at most 2**30; received {name}={value!r} "
                         f"(2**{math.log2(value):.0f}).")
    return int(value)
