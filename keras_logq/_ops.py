"""The array namespace `logq_core.formulas` runs on, and the tensor checks of keras_logq.

`OPS` is `keras.ops` plus `num_columns`, so every backend runs the formulas
tfrs_logq runs on TensorFlow. The checks are the static ones (dtype, rank,
matching dimensions) in `tfrs_logq._validation`'s words; value checks that
TensorFlow makes with graph assertions have no portable form in Keras 3, so
invalid log-probabilities become NaN (`nan_unless_log_probabilities`), as
tfrs_logq does under XLA: the loss is then NaN, never silently wrong.
"""

import types
from typing import Any, Optional

import keras
from keras import ops


def _num_columns(x):
    """float32 number of columns of a 2-D tensor (static where known)."""
    return ops.cast(ops.shape(x)[1], "float32")


OPS = types.SimpleNamespace(
    **{name: getattr(ops, name) for name in (
        "arange", "argsort", "broadcast_to", "cast", "concatenate", "cumsum", "equal", "exp",
        "expm1", "log", "log1p", "logical_and", "logical_or", "logsumexp", "maximum", "min",
        "minimum", "not_equal", "ones", "reshape", "roll", "scatter", "segment_sum", "shape",
        "sigmoid", "softplus", "stack", "stop_gradient", "sum", "take", "top_k", "where",
        "zeros_like")},
    num_columns=_num_columns,
)


def float_tensor(name: str, value: Any, rank: Optional[int] = None):
    """Converts `value` to a float32 tensor; raises TypeError for non-float input."""
    tensor = ops.convert_to_tensor(value)
    dtype = keras.backend.standardize_dtype(tensor.dtype)
    if not keras.backend.is_float_dtype(dtype):
        raise TypeError(
            f"`{name}` must be a floating-point tensor; received {name} with dtype {dtype}.")
    check_rank(name, tensor, rank)
    return ops.cast(tensor, "float32")


def bool_tensor(name: str, value: Any, rank: Optional[int] = None):
    """Converts `value` to a bool tensor; raises TypeError for other dtypes."""
    tensor = ops.convert_to_tensor(value)
    dtype = keras.backend.standardize_dtype(tensor.dtype)
    if dtype != "bool":
        raise TypeError(
            f"`{name}` must be a bool tensor (True for a valid entry); received {name} "
            f"with dtype {dtype}.")
    check_rank(name, tensor, rank)
    return tensor


def ids_tensor(name: str, value: Any, rank: Optional[int] = 1):
    """Converts `value` to an integer tensor of ids; raises TypeError for other dtypes."""
    tensor = ops.convert_to_tensor(value)
    dtype = keras.backend.standardize_dtype(tensor.dtype)
    if not keras.backend.is_int_dtype(dtype):
        raise TypeError(
            f"`{name}` must be an integer tensor of item ids; received {name} with dtype "
            f"{dtype}. Map string ids to integers first (keras.layers.StringLookup).")
    check_rank(name, tensor, rank)
    return tensor


def check_rank(name: str, tensor, rank: Optional[int]) -> None:
    if rank is not None and len(tensor.shape) != rank:
        raise ValueError(
            f"`{name}` must have rank {rank}; received {name} with shape {tuple(tensor.shape)}.")


def check_compatible_dim(name_a: str, a, axis_a: int, name_b: str, b, axis_b: int) -> None:
    """Raises ValueError when two static dimensions are known and differ."""
    dim_a, dim_b = a.shape[axis_a], b.shape[axis_b]
    if dim_a is not None and dim_b is not None and dim_a != dim_b:
        raise ValueError(
            f"`{name_a}` and `{name_b}` must agree in size: {name_a}.shape={tuple(a.shape)}, "
            f"{name_b}.shape={tuple(b.shape)}.")


def nan_unless_log_probabilities(log_q):
    """`log_q` where it is the log of a probability in (0, 1], NaN elsewhere."""
    valid = ops.logical_and(log_q <= 0.0, log_q > float("-inf"))
    return ops.where(valid, log_q, float("nan"))
