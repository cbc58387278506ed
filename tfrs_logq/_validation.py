"""Argument checks shared by the library. Every message names the argument and the value."""

from typing import Any, Optional

import numpy as np
import tensorflow as tf

# Checks that need no tensor are shared with keras_logq; re-exported here.
from logq_core.checks import check_bool  # noqa: F401  pylint: disable=unused-import
from logq_core.checks import check_choice  # noqa: F401  pylint: disable=unused-import
from logq_core.checks import check_positive_float  # noqa: F401  pylint: disable=unused-import
from logq_core.checks import check_positive_int  # noqa: F401  pylint: disable=unused-import
from logq_core.checks import check_unit_interval  # noqa: F401  pylint: disable=unused-import


def _short(value: Any) -> str:
    """A short printable form of a value for an error message."""
    if isinstance(value, (tf.Tensor, np.ndarray)):
        try:
            arr = np.asarray(value)
            return np.array2string(arr.ravel()[:6], precision=4) + (
                " ..." if arr.size > 6 else "")
        except Exception:  # pylint: disable=broad-except
            return repr(value)
    return repr(value)


def float_tensor(name: str, value: Any, rank: Optional[int] = None) -> tf.Tensor:
    """Converts `value` to a float32 tensor; raises TypeError for non-float input.

    Integer inputs are rejected rather than cast: an integer tensor of logits or
    embeddings is almost always ids passed in the wrong place.
    """
    tensor = tf.convert_to_tensor(value)
    if not tensor.dtype.is_floating:
        raise TypeError(
            f"`{name}` must be a floating-point tensor; received {name} with "
            f"dtype {tensor.dtype.name}.")
    check_rank(name, tensor, rank)
    return tf.cast(tensor, tf.float32)


def bool_tensor(name: str, value: Any, rank: Optional[int] = None) -> tf.Tensor:
    """Converts `value` to a bool tensor; raises TypeError for other dtypes."""
    tensor = tf.convert_to_tensor(value)
    if tensor.dtype != tf.bool:
        raise TypeError(
            f"`{name}` must be a bool tensor (True for a valid entry); received "
            f"{name} with dtype {tensor.dtype.name}.")
    check_rank(name, tensor, rank)
    return tensor


def ids_tensor(name: str, ids: Any, rank: Optional[int] = 1) -> tf.Tensor:
    """Converts `ids` to an integer or string tensor (of `rank`, if given); else raises."""
    ids = tf.convert_to_tensor(ids)
    if not (ids.dtype.is_integer or ids.dtype == tf.string):
        raise TypeError(
            f"`{name}` must be an integer or string tensor of item ids; received {name} "
            f"with dtype {ids.dtype.name}.")
    check_rank(name, ids, rank)
    return ids


def check_rank(name: str, tensor: tf.Tensor, rank: Optional[int]) -> None:
    """Raises ValueError when the static rank of `tensor` is known and differs from `rank`."""
    if rank is not None and tensor.shape.rank is not None and tensor.shape.rank != rank:
        raise ValueError(
            f"`{name}` must have rank {rank}; received {name} with shape "
            f"{tensor.shape}.")


def check_compatible_dim(name_a: str, a: tf.Tensor, axis_a: int,
                         name_b: str, b: tf.Tensor, axis_b: int) -> None:
    """Raises ValueError when two statically known dimensions differ."""
    dim_a = a.shape[axis_a] if a.shape.rank is not None else None
    dim_b = b.shape[axis_b] if b.shape.rank is not None else None
    if dim_a is not None and dim_b is not None and dim_a != dim_b:
        raise ValueError(
            f"`{name_a}` and `{name_b}` disagree in size: {name_a}.shape="
            f"{a.shape} (axis {axis_a}) but {name_b}.shape={b.shape} "
            f"(axis {axis_b}).")


def _check_values(name: str, values: tf.Tensor, valid: tf.Tensor, message: str,
                  explain=None) -> tf.Tensor:
    """Raises ValueError eagerly, or attaches a graph assertion, when `valid` is not all True.

    XLA (`jit_compile=True`) drops graph assertions, so in a graph the invalid entries are
    also replaced by NaN: compiled, a bad input makes the loss NaN instead of silently
    wrong. Valid entries are returned unchanged.

    Args:
      name: the argument's name, for the message.
      values: the checked tensor.
      valid: bool tensor of the shape of `values`.
      message: what the values must be, starting with the argument's name.
      explain: optional callable mapping the invalid values to a suffix.

    Returns:
      `values`, with the assertion attached when tracing a graph.
    """
    if tf.executing_eagerly():
        if not bool(tf.reduce_all(valid)):
            bad = tf.boolean_mask(tf.reshape(values, [-1]),
                                  tf.logical_not(tf.reshape(valid, [-1])))
            suffix = "" if explain is None else explain(bad)
            raise ValueError(f"{message}; received {name} with invalid values {_short(bad)}"
                             f"{suffix}.")
        return values
    with tf.control_dependencies(
            [tf.debugging.Assert(tf.reduce_all(valid), [message + "; received", values],
                                 summarize=6)]):
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
        name, log_q, valid,
        f"`{name}` must hold log-probabilities of probabilities in (0, 1] (finite and <= 0)",
        explain=lambda bad: f" (probabilities {_short(tf.exp(bad))})")


def check_probabilities(name: str, probabilities: Any) -> tf.Tensor:
    """Converts probabilities to float32 and checks them to lie in (0, 1]."""
    probabilities = float_tensor(name, probabilities)
    valid = tf.logical_and(probabilities > 0.0, probabilities <= 1.0 + 1e-6)
    return _check_values(name, probabilities, valid,
                         f"`{name}` must hold probabilities in (0, 1]")
