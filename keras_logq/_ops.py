"""The array namespace `logq_core.formulas` runs on, and the tensor checks of keras_logq.

`OPS` is `keras.ops` plus `num_columns`, so every backend runs the formulas
tfrs_logq runs on TensorFlow. The checks are `logq_core.checks`' static ones
(dtype, rank, matching dimensions, one value per column: `per_column_tensor`)
bound to Keras tensors, run on every argument before anything is broadcast, so a
shape error names the caller's argument and the shapes received; value checks that
TensorFlow makes with graph assertions have no portable form in Keras 3, so
invalid log-probabilities become NaN (`nan_unless_log_probabilities`), as do ids
outside a table (`table_rows`) and `SampledSoftmax` label rows with several
positives, eager or compiled, as tfrs_logq does under XLA: the loss is then NaN,
never silently wrong.
"""

import functools
import types

import keras
import numpy as np
from keras import ops

from logq_core import checks


def _num_columns(x):
    """float32 number of columns of a 2-D tensor (static where known)."""
    return ops.cast(ops.shape(x)[1], "float32")


OPS = types.SimpleNamespace(
    **{
        name: getattr(ops, name)
        for name in (
            "all",
            "arange",
            "argsort",
            "broadcast_to",
            "cast",
            "concatenate",
            "cumsum",
            "einsum",
            "equal",
            "exp",
            "isfinite",
            "isnan",
            "expm1",
            "full_like",
            "log",
            "log1p",
            "logical_and",
            "logical_or",
            "logsumexp",
            "maximum",
            "min",
            "minimum",
            "not_equal",
            "ones",
            "reshape",
            "roll",
            "scatter",
            "scatter_update",
            "segment_sum",
            "shape",
            "sigmoid",
            "softplus",
            "stack",
            "stop_gradient",
            "sum",
            "take",
            "take_along_axis",
            "top_k",
            "where",
            "zeros_like",
        )
    },
    num_columns=_num_columns,
)


def _static_shape(tensor):
    """The static shape as a tuple, or None when not even the rank is known (a symbolic
    TensorFlow tensor of unknown rank)."""
    try:
        return tuple(tensor.shape)
    except (TypeError, ValueError):
        return None


# The static tensor checks, worded as tfrs_logq's (`logq_core.checks`).
TENSORS = checks.Tensors(
    convert=ops.convert_to_tensor,
    dtype=lambda tensor: keras.backend.standardize_dtype(tensor.dtype),
    shape=_static_shape,
    cast=ops.cast,
    string_ids=False,
)
float_tensor = functools.partial(checks.float_tensor, TENSORS)
bool_tensor = functools.partial(checks.bool_tensor, TENSORS)


def _holds_int64() -> bool:
    """Whether the backend keeps 64-bit integers (JAX only with `jax_enable_x64`: without
    it, an int64 array is cut to int32 as it becomes a JAX array)."""
    if keras.backend.backend() != "jax":
        return True
    import jax  # pylint: disable=import-outside-toplevel

    return bool(jax.config.read("jax_enable_x64"))


def check_host_ids(name: str, value, noun: str = "id") -> None:
    """Two checks of host ids (numpy arrays, lists) that their conversion to a backend
    tensor would lose: string ids (which JAX and PyTorch cannot hold) are a TypeError naming
    the argument, and ids beyond int32 on a backend that would cut them to 32 bits (JAX by
    default) a ValueError naming the `noun` ("id"; "value" for data that may hold other
    integers), never a wrapped id. Tensors pass."""
    if isinstance(value, (np.ndarray, list, tuple, str, bytes, int, np.generic)):
        array = np.asarray(value)
        if array.dtype.kind in "USO" and array.size:
            raise TypeError(
                f"`{name}` must be an integer tensor of item ids; received {name} with "
                f"string values ({array.ravel()[:3].tolist()!r}...). Map string ids to "
                "integers first (keras.layers.StringLookup)."
            )
        if array.dtype.kind in "iu" and array.size and not _holds_int64():
            low, high = int(array.min()), int(array.max())
            if low < -(2**31) or high >= 2**31:
                raise ValueError(
                    f"`{name}` holds the {noun} {high if high >= 2**31 else low}, outside "
                    f"int32, which the {keras.backend.backend()} backend would cut to 32 bits "
                    "(jax.config.update('jax_enable_x64', True) keeps int64); map the ids "
                    "to [0, num_items) first."
                )


def ids_tensor(name: str, value, rank=1):
    """`logq_core.checks.ids_tensor` for Keras tensors, after `check_host_ids`."""
    check_host_ids(name, value)
    return checks.ids_tensor(TENSORS, name, value, rank)


check_rank = functools.partial(checks.check_rank, TENSORS)
check_compatible_dim = functools.partial(checks.check_compatible_dim, TENSORS)
check_same_shape = functools.partial(checks.check_same_shape, TENSORS)
per_column_tensor = functools.partial(checks.per_column_tensor, TENSORS)


def nan_unless_log_probabilities(log_q):
    """`log_q` where it is the log of a probability in (0, 1], NaN elsewhere."""
    valid = ops.logical_and(log_q <= 0.0, log_q > float("-inf"))
    return ops.where(valid, log_q, float("nan"))


def table_rows(ids, num_rows):
    """`logq_core.checks.table_rows` for Keras tensors: (valid, int32 rows) of integer `ids`
    in a table of `num_rows` rows (an int, or a scalar tensor), compared as signed integers
    that hold every id (an int64 id of 2**32 + 1 is not compared as 1; a uint id above the
    int32 range turns negative, hence invalid)."""
    wide = (
        "int64"
        if keras.backend.standardize_dtype(ids.dtype) in ("int64", "uint64", "uint32")
        else "int32"
    )
    ids = ops.cast(ids, wide)
    if not isinstance(num_rows, int):
        num_rows = ops.cast(num_rows, wide)
    valid, rows = checks.table_rows(OPS, ids, num_rows)
    return valid, ops.cast(rows, "int32")
