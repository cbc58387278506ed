"""Argument checks; every message names the argument and the value received.

Plain values are checked here in pure Python; tensors through a `Tensors` that each
framework fills in, so TensorFlow and Keras 3 users read the same messages.
"""

import math
from typing import (
    Any,
    Callable,
    Literal,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    overload,
)

import numpy as np

_Choice = TypeVar("_Choice")


def check_choice(name: str, value: Any, choices: Sequence[_Choice]) -> _Choice:
    """Returns `value` if it is one of `choices`, else raises ValueError."""
    if value not in choices:
        raise ValueError(
            f"`{name}` must be one of {', '.join(repr(c) for c in choices)}; "
            f"received {name}={value!r}."
        )
    return value


def check_bool(name: str, value: Any) -> bool:
    """Returns `value` if it is a Python bool; else (1, "yes", None) raises TypeError."""
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be a bool; received {name}={value!r}.")
    return value


@overload
def check_positive_int(name: str, value: Any, allow_none: Literal[False] = ...) -> int: ...


@overload
def check_positive_int(name: str, value: Any, allow_none: bool) -> Optional[int]: ...


def check_positive_int(name: str, value: Any, allow_none: bool = False) -> Optional[int]:
    """Returns `value` as int if it is a positive integer, else raises ValueError."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer; received {name}={value!r}.")
    return int(value)


def check_non_negative_int(name: str, value: Any) -> int:
    """Returns `value` as int if it is an integer >= 0, else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer; received {name}={value!r}.")
    return int(value)


def _finite(value: Any) -> bool:
    """Whether the number `value` is finite (math's, not np.isfinite: torch.compile traces
    numpy calls as tensors, and the branch on one breaks the graph)."""
    try:
        return math.isfinite(value)
    except OverflowError:  # An int beyond float's range.
        return False


@overload
def check_positive_float(name: str, value: Any, allow_none: Literal[False] = ...) -> float: ...


@overload
def check_positive_float(name: str, value: Any, allow_none: bool) -> Optional[float]: ...


def check_positive_float(name: str, value: Any, allow_none: bool = False) -> Optional[float]:
    """Returns `value` as float if it is a finite positive number, else raises ValueError."""
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.number))
        or not _finite(value)
        or value <= 0
    ):
        raise ValueError(f"`{name}` must be a positive number; received {name}={value!r}.")
    return float(value)


def check_unit_interval(name: str, value: Any) -> float:
    """Returns `value` as float if it is a number in (0, 1], else raises ValueError."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.floating))
        or not 0.0 < value <= 1.0
    ):
        raise ValueError(f"`{name}` must be a number in (0, 1]; received {name}={value!r}.")
    return float(value)


def check_seed(name: str, value: Any) -> Optional[int]:
    """Returns `value` if it is an integer or None, else raises ValueError."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
        raise ValueError(f"`{name}` must be an integer or None; received {name}={value!r}.")
    return None if value is None else int(value)


def check_power_of_two(name: str, value: Any) -> int:
    """Returns `value` as int if it is a power of two (>= 2), else raises ValueError."""
    value_ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, np.integer))
        and value >= 2
        and (int(value) & (int(value) - 1)) == 0
    )
    if not value_ok:
        raise ValueError(
            f"`{name}` must be a power of two (2, 4, ..., 2**30); received {name}={value!r}."
        )
    if value > 2**30:
        raise ValueError(
            f"`{name}` must be at most 2**30; received {name}={value!r} "
            f"(2**{math.log2(value):.0f})."
        )
    return int(value)


# ------------------------------------------------------------------ tensor checks
#
# The same static checks (dtype, rank, matching sizes) for TensorFlow and Keras 3 tensors,
# with one wording: each framework describes its tensors with a `Tensors` and binds it
# (`tfrs_logq._validation`, `keras_logq._ops`).


class Tensors(NamedTuple):
    """How a framework's tensors answer the checks.

    Attributes:
      convert: value -> tensor.
      dtype: tensor -> its dtype's name ("float32", "int64", "bool", "string", ...).
      shape: tensor -> its static shape as a tuple (None for an unknown size), or None
        when even the rank is unknown.
      cast: (tensor, dtype name) -> tensor.
      string_ids: whether ids may be strings (TensorFlow), or must be integers.
    """

    convert: Callable[[Any], Any]
    dtype: Callable[[Any], str]
    shape: Callable[[Any], Optional[Tuple[Optional[int], ...]]]
    cast: Callable[[Any, str], Any]
    string_ids: bool


def float_tensor(
    tensors: Tensors, name: str, value: Any, rank: Optional[int] = None, cast: bool = True
):
    """`value` as a float32 tensor (of `rank`, if given); TypeError for non-float input.

    Integer inputs are rejected rather than cast: an integer tensor of logits or
    embeddings is almost always ids passed in the wrong place. `cast=False` keeps the
    float dtype it came with (embeddings a sampler hands on as they are).
    """
    tensor = tensors.convert(value)
    dtype = tensors.dtype(tensor)
    if not dtype.startswith(("float", "bfloat", "half", "double")):
        raise TypeError(
            f"`{name}` must be a floating-point tensor; received {name} with dtype {dtype}."
        )
    check_rank(tensors, name, tensor, rank)
    return tensors.cast(tensor, "float32") if cast else tensor


def bool_tensor(tensors: Tensors, name: str, value: Any, rank: Optional[int] = None):
    """`value` as a bool tensor (of `rank`, if given); TypeError for other dtypes."""
    tensor = tensors.convert(value)
    dtype = tensors.dtype(tensor)
    if dtype != "bool":
        raise TypeError(
            f"`{name}` must be a bool tensor (True for a valid entry); received "
            f"{name} with dtype {dtype}."
        )
    check_rank(tensors, name, tensor, rank)
    return tensor


def ids_tensor(tensors: Tensors, name: str, value: Any, rank: Optional[int] = 1):
    """`value` as a tensor of item ids (integers, or strings where the framework takes them),
    of `rank` if given; TypeError for other dtypes."""
    tensor = tensors.convert(value)
    dtype = tensors.dtype(tensor)
    if not (dtype.startswith(("int", "uint")) or (tensors.string_ids and dtype == "string")):
        kinds = "an integer or string" if tensors.string_ids else "an integer"
        hint = (
            ""
            if tensors.string_ids
            else " Map string ids to integers first (keras.layers.StringLookup)."
        )
        raise TypeError(
            f"`{name}` must be {kinds} tensor of item ids; received {name} with "
            f"dtype {dtype}.{hint}"
        )
    check_rank(tensors, name, tensor, rank)
    return tensor


def id_vector(tensors: Tensors, name: str, value: Any):
    """`value` as ids, one per row: shape [N], or [N, 1] as TFRS's tutorials give their labels
    (TFRS accepts both). Returns (tensor, column): `column` is True for [N, 1], which the
    caller flattens to [N] (same ids, same results). Any other static shape raises ValueError
    naming the argument and the shape; an unknown rank is left to the caller."""
    tensor = ids_tensor(tensors, name, value, rank=None)
    shape = tensors.shape(tensor)
    if shape is None or len(shape) == 1:
        return tensor, False
    if len(shape) == 2 and shape[1] == 1:
        return tensor, True
    raise ValueError(
        f"`{name}` must have shape [N] or [N, 1] (one id per row); received "
        f"{name} with shape {_shape_text(shape)}."
    )


def _shape_text(shape) -> str:
    return (
        "<unknown>"
        if shape is None
        else "(" + ", ".join(map(str, shape)) + (",)" if len(shape) == 1 else ")")
    )


def check_rank(tensors: Tensors, name: str, tensor, rank: Optional[int]) -> None:
    """Raises ValueError when the static rank of `tensor` is known and differs from `rank`."""
    shape = tensors.shape(tensor)
    if rank is not None and shape is not None and len(shape) != rank:
        raise ValueError(
            f"`{name}` must have rank {rank}; received {name} with shape {_shape_text(shape)}."
        )


def check_compatible_dim(
    tensors: Tensors, name_a: str, a, axis_a: int, name_b: str, b, axis_b: int
) -> None:
    """Raises ValueError when two statically known dimensions differ."""
    shape_a, shape_b = tensors.shape(a), tensors.shape(b)
    dim_a = None if shape_a is None else shape_a[axis_a]
    dim_b = None if shape_b is None else shape_b[axis_b]
    if dim_a is not None and dim_b is not None and dim_a != dim_b:
        raise ValueError(
            f"`{name_a}` and `{name_b}` disagree in size: {name_a}.shape="
            f"{_shape_text(shape_a)} (axis {axis_a}) but {name_b}.shape="
            f"{_shape_text(shape_b)} (axis {axis_b})."
        )


def check_same_shape(tensors: Tensors, name: str, tensor, of_name: str, of) -> None:
    """Raises ValueError when `tensor` (say, a mask) and `of` (the ids it masks) differ in
    static rank or in a statically known size: one entry of `name` per entry of `of_name`,
    never broadcast."""
    shape, of_shape = tensors.shape(tensor), tensors.shape(of)
    if shape is None or of_shape is None:
        return
    if len(shape) != len(of_shape) or any(
        a is not None and b is not None and a != b for a, b in zip(shape, of_shape)
    ):
        raise ValueError(
            f"`{name}` must have the shape of `{of_name}`, one entry per entry; "
            f"received {name} with shape {_shape_text(shape)} and {of_name} with "
            f"shape {_shape_text(of_shape)}."
        )


def per_column_tensor(tensors: Tensors, name: str, tensor, of_name: str, of) -> bool:
    """Checks that `tensor` holds one value per column of the [B, N] `of` (a log Q, ids or a
    mask of the candidates of `of`'s scores): shape [N] or [1, N], shared by every row, or
    [B, N], one per row. Returns True for [1, N] (the caller may reshape it to [N]).

    [B, 1] is refused (unless N = 1): it would give every candidate of a row the same value,
    which is a per-row value (the positive's log Q, say), not one per candidate; broadcast
    silently, it would be meaningless for a log Q (a row's shift cancels in its softmax).
    """
    shape, of_shape = tensors.shape(tensor), tensors.shape(of)
    if shape is None or of_shape is None or len(of_shape) != 2:
        return False
    rows, columns = of_shape

    def fits(size, want):
        return size is None or want is None or size == want

    if len(shape) == 1:
        ok = fits(shape[0], columns)
    elif len(shape) == 2:
        ok = fits(shape[1], columns) and (shape[0] == 1 or fits(shape[0], rows))
    else:
        ok = False
    if not ok:
        hint = ""
        if len(shape) == 2 and shape[1] == 1 and columns not in (None, 1):
            hint = (
                " A [B, 1] column would give every candidate of a row the same value; "
                "pass one value per candidate, as [N] or [1, N]."
            )
        size = ", ".join(
            f"{letter}={value}"
            for letter, value in (("B", rows), ("N", columns))
            if value is not None
        )
        raise ValueError(
            f"`{name}` must have shape [N] or [1, N] (shared by the rows) or [B, N] (per row), "
            f"one value per column of `{of_name}` ({size}); received {name} with shape "
            f"{_shape_text(shape)} and {of_name} with shape {_shape_text(of_shape)}.{hint}"
        )
    return len(shape) == 2 and shape[0] == 1


def logits_inputs(tensors: Tensors, positive_logits, negative_logits, negative_mask=None):
    """The sampled losses' inputs checked and cast: [batch] positive logits, [batch, n]
    negative logits (float32), and an optional [batch, n] bool mask."""
    positive = float_tensor(tensors, "positive_logits", positive_logits, rank=1)
    negative = float_tensor(tensors, "negative_logits", negative_logits, rank=2)
    check_compatible_dim(tensors, "positive_logits", positive, 0, "negative_logits", negative, 0)
    if negative_mask is not None:
        negative_mask = bool_tensor(tensors, "negative_mask", negative_mask, rank=2)
        for axis in (0, 1):
            check_compatible_dim(
                tensors, "negative_mask", negative_mask, axis, "negative_logits", negative, axis
            )
    return positive, negative, negative_mask


def mask_like_logits(tensors: Tensors, name: str, mask, negative_logits):
    """A [batch, n] bool tensor `name` checked to have the shape of `negative_logits`
    (never broadcast: a [n] or [batch, 1] mask is refused)."""
    mask = bool_tensor(tensors, name, mask)
    check_same_shape(tensors, name, mask, "negative_logits", negative_logits)
    return mask


def log_q_tensor(tensors: Tensors, name: str, log_q, logits, of_positives: bool):
    """A log Q checked against the logits it corrects: [batch] for the positives (`logits`
    the positive logits), [n] or [batch, n] for the negatives (the negative logits).
    Its values are the caller's to check (a graph assertion, or NaN)."""
    log_q = float_tensor(tensors, name, log_q)
    if of_positives:
        check_rank(tensors, name, log_q, 1)
        check_compatible_dim(tensors, name, log_q, 0, "positive_logits", logits, 0)
        return log_q
    shape = tensors.shape(log_q)
    if shape is not None:
        if len(shape) not in (1, 2):
            raise ValueError(
                f"`{name}` must have shape [N] or [B, N]; received {name} with "
                f"shape {_shape_text(shape)}."
            )
        check_compatible_dim(tensors, name, log_q, -1, "negative_logits", logits, 1)
        if len(shape) == 2:
            check_compatible_dim(tensors, name, log_q, 0, "negative_logits", logits, 0)
    return log_q


# ------------------------------------------------------------------ item ids
#
# The one rule for ids read from a table by position (a `StaticFrequency`'s probabilities,
# `LogQRetrieval`'s `candidate_table`), in tfrs_logq and keras_logq alike:
#
#   An integer id outside [0, num_rows) is invalid. Executing eagerly (tfrs_logq) it raises a
#   ValueError naming the argument and the bad ids; inside a tf.function a graph assertion
#   fails (InvalidArgumentError, same message); compiled with XLA, which drops assertions, and
#   in keras_logq on every backend (no portable assertions), the entries read for bad ids are
#   NaN, so the loss is NaN. Never a clamped or wrapped row: XLA and GPUs clamp a gather's
#   out-of-range index to the nearest row, JAX wraps -1 to the last one.
#
# Hashed estimators have no table of ids: every integer or string id hashes to buckets in
# range, and an id never seen reads the estimator's floor. A `StaticFrequency` with a
# vocabulary maps a string it lacks to the smallest probability, as it documents.


def id_range_message(name: str, num_rows: Optional[int], table: str) -> str:
    """What `name` must hold under the rule above: `num_rows` ids (None when only known at
    run time), `table` saying what they index ("one per entry of `probabilities`")."""
    if num_rows is None:
        return f"`{name}` must hold ids in [0, N), {table} (N known at run time)"
    return f"`{name}` must hold ids in [0, {num_rows}), {table}"


def table_rows(ops, ids, num_rows: int):
    """(valid, rows) for integer `ids` read from a table of `num_rows` rows.

    valid = 0 <= ids < num_rows; rows = ids where valid, else 0: a gather of `rows` stays in
    bounds on every backend. The caller then marks the entries read for invalid ids (a
    ValueError, a graph assertion, or NaN: the rule above).

    Args:
      ops: the array namespace (`tfrs_logq._ops.TF`, `keras_logq._ops.OPS`).
      ids: signed integer tensor of any shape, as the caller received them (cast, if at all,
        only to a dtype that holds every id, so that an int64 id of 2**32 + 1 is not
        compared as 1).
      num_rows: the table's number of rows (an int, or a scalar tensor of the ids' dtype).
    """
    valid = ops.logical_and(ids >= 0, ids < num_rows)
    return valid, ops.where(valid, ids, ops.zeros_like(ids))
