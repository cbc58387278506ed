"""Argument checks of tfrs_logq: `logq_core.checks` bound to TensorFlow tensors, and the value
checks that run inside graphs. Every message names the argument and the value."""

import functools
from typing import Any, Optional, Tuple, Union

import numpy as np
import tensorflow as tf

from logq_core import checks

# Checks that need no tensor are shared with keras_logq; re-exported here.
from logq_core.checks import check_bool  # noqa: F401  pylint: disable=unused-import
from logq_core.checks import check_choice  # noqa: F401  pylint: disable=unused-import
from logq_core.checks import check_positive_float  # noqa: F401  pylint: disable=unused-import
from logq_core.checks import check_positive_int  # noqa: F401  pylint: disable=unused-import
from logq_core.checks import check_unit_interval  # noqa: F401  pylint: disable=unused-import
from tfrs_logq import _ops


def _short(value: Any) -> str:
    """A short printable form of a value for an error message."""
    if isinstance(value, (tf.Tensor, np.ndarray)):
        try:
            arr = np.asarray(value)
            return np.array2string(arr.ravel()[:6], precision=4) + (" ..." if arr.size > 6 else "")
        except Exception:  # pylint: disable=broad-except
            return repr(value)
    return repr(value)


# The static tensor checks, worded as keras_logq's (`logq_core.checks`).
TENSORS = checks.Tensors(
    convert=tf.convert_to_tensor,
    dtype=lambda tensor: tensor.dtype.name,
    shape=lambda tensor: None if tensor.shape.rank is None else tuple(tensor.shape.as_list()),
    cast=tf.cast,
    string_ids=True,
)
float_tensor = functools.partial(checks.float_tensor, TENSORS)
bool_tensor = functools.partial(checks.bool_tensor, TENSORS)
ids_tensor = functools.partial(checks.ids_tensor, TENSORS)
check_rank = functools.partial(checks.check_rank, TENSORS)


def id_vector(name: str, value: Any) -> tf.Tensor:
    """[N] integer or string ids, one per row, from [N] or [N, 1] (TFRS's tutorials' labels),
    under `logq_core.checks.id_vector`: any other shape raises ValueError naming `name` and
    the shape received."""
    tensor, column = checks.id_vector(TENSORS, name, value)
    return tensor[:, 0] if column else tensor


check_compatible_dim = functools.partial(checks.check_compatible_dim, TENSORS)


def _assert_valid(
    name: str, values: tf.Tensor, valid: tf.Tensor, message: str, explain=None
) -> Optional[tf.Operation]:
    """Raises ValueError eagerly when `valid` is not all True; in a graph returns the
    assertion (InvalidArgumentError with the same message) for the caller to depend on.

    Args:
      name: the argument's name, for the message.
      values: the checked tensor.
      valid: bool tensor of the shape of `values`.
      message: what the values must be, starting with the argument's name.
      explain: optional callable mapping the invalid values to a suffix.
    """
    if tf.executing_eagerly():
        if not bool(tf.reduce_all(valid)):
            bad = tf.boolean_mask(tf.reshape(values, [-1]), tf.logical_not(tf.reshape(valid, [-1])))
            suffix = "" if explain is None else explain(bad)
            raise ValueError(
                f"{message}; received {name} with invalid values {_short(bad)}{suffix}."
            )
        return None
    return tf.debugging.Assert(tf.reduce_all(valid), [message + "; received", values], summarize=6)


def _check_values(
    name: str, values: tf.Tensor, valid: tf.Tensor, message: str, explain=None
) -> tf.Tensor:
    """Raises ValueError eagerly, or attaches a graph assertion, when `valid` is not all True
    (the arguments of `_assert_valid`).

    XLA (`jit_compile=True`) drops graph assertions, so in a graph the invalid entries are
    also replaced by NaN: compiled, a bad input makes the loss NaN instead of silently
    wrong. Valid entries are returned unchanged, with the assertion attached in a graph.
    """
    assertion = _assert_valid(name, values, valid, message, explain)
    if assertion is None:
        return values
    with tf.control_dependencies([assertion]):
        return tf.where(valid, values, tf.constant(float("nan"), values.dtype))


def table_rows(
    name: str, ids: tf.Tensor, num_rows: Union[int, tf.Tensor], table: str
) -> Tuple[tf.Tensor, tf.Tensor]:
    """Rows of a `num_rows`-row table (`table` names it, for the message) for integer `ids`,
    under the one rule for ids (`logq_core.checks.table_rows`).

    An id outside [0, num_rows) raises ValueError eagerly and fails a graph assertion in a
    tf.function (attached to the returned rows). XLA drops the assertion, so the caller
    also marks what it read for the invalid ids: `tf.where(valid, read, nan)`.

    Returns:
      (rows, valid): int64 rows of the shape of `ids`, in bounds (0 for an invalid id),
      and the bool validity of each id.
    """
    static = num_rows if isinstance(num_rows, int) else tf.get_static_value(num_rows)
    bound = num_rows if static is None else int(static)
    # In int64, where every id and bound fits (a uint64 id above 2**63 turns negative).
    valid, rows = checks.table_rows(_ops.TF, tf.cast(ids, tf.int64), tf.cast(bound, tf.int64))
    assertion = _assert_valid(
        name,
        ids,
        valid,
        checks.id_range_message(name, None if static is None else int(static), table),
    )
    if assertion is not None:
        with tf.control_dependencies([assertion]):
            rows = tf.identity(rows)
    return rows, valid


def nan_unless(valid: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """`values` where `valid` (broadcast against them), NaN elsewhere."""
    return tf.where(valid, values, tf.constant(float("nan"), values.dtype))


def check_log_probabilities(name: str, log_q: tf.Tensor) -> tf.Tensor:
    """Checks that `log_q` holds logs of probabilities in (0, 1].

    Executing eagerly, a bad value raises ValueError at once. Inside a
    tf.function the same check runs as a graph assertion (InvalidArgumentError
    with the same message); under XLA, which drops assertions, bad values turn
    into NaN. Nothing invalid reaches the loss silently.
    """
    # A small tolerance above 0 absorbs rounding in estimators' normalisation.
    valid = tf.logical_and(tf.math.is_finite(log_q), log_q <= 1e-6)
    return _check_values(
        name,
        log_q,
        valid,
        f"`{name}` must hold log-probabilities of probabilities in (0, 1] (finite and <= 0)",
        explain=lambda bad: f" (probabilities {_short(tf.exp(bad))})",
    )


def check_probabilities(name: str, probabilities: Any) -> tf.Tensor:
    """Converts probabilities to float32 and checks them to lie in (0, 1]."""
    probabilities = float_tensor(name, probabilities)
    valid = tf.logical_and(probabilities > 0.0, probabilities <= 1.0 + 1e-6)
    return _check_values(name, probabilities, valid, f"`{name}` must hold probabilities in (0, 1]")
