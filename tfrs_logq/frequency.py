"""Item-frequency sources that feed sampling probabilities to the samplers and the task.

Every source answers two questions about a tensor of item ids:

- `log_q(ids)`: log of the per-draw probability q(d) (sum over the catalog = 1);
- `log_inclusion_probability(ids, num_draws)`: log of 1 - (1 - q(d))^n, the
  probability that d appears at least once among n independent draws.

and takes `update(ids)` once per training step (a no-op for static sources).
Samplers ask for the quantity that matches them: per-draw q for in-batch
negatives without deduplication and for the in-batch half of mixed sampling,
the inclusion probability for deduplicated pools.
"""

from typing import Any, Callable, Optional, Union

import numpy as np
import tensorflow as tf

from tfrs_logq import _ops
from tfrs_logq import _validation as v


class FrequencyEstimator(tf.keras.layers.Layer):
    """Base class of item-frequency sources (Keras layers; state in non-trainable variables).

    Subclasses implement `log_q` (or `log_inclusion_probability`, deriving the
    other) and, for streaming estimators, `update`.
    """

    def update(self, ids: tf.Tensor) -> None:
        """Feeds one training step's item ids. Static sources ignore it."""
        del ids

    def log_q(self, ids: tf.Tensor) -> tf.Tensor:
        """Returns log q(d), the per-draw log probability, with the shape of `ids`."""
        raise NotImplementedError

    def log_inclusion_probability(self, ids: tf.Tensor, num_draws) -> tf.Tensor:
        """Returns log(1 - (1 - q(d))^num_draws), with the shape of `ids`.

        Derived from the per-draw q: (1 - q)^n = exp(n * log1p(-q)).

        Args:
          ids: item ids.
          num_draws: scalar number of independent draws n >= 1 (int or tensor).
        """
        if isinstance(num_draws, (int, np.integer)) and num_draws < 1:
            raise ValueError(
                f"`num_draws` must be a positive integer; received num_draws={num_draws!r}.")
        num_draws = tf.cast(num_draws, tf.float32)
        log_not_drawn_once = _ops.log1mexp(tf.minimum(self.log_q(ids), -1e-7))
        return _ops.log1mexp(tf.minimum(num_draws * log_not_drawn_once, -1e-30))

    def call(self, ids: tf.Tensor) -> tf.Tensor:
        """Same as `log_q`."""
        return self.log_q(ids)


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class StaticFrequency(FrequencyEstimator):
    """Exact, fixed item probabilities: Q(d) = #d / N, the academic setup.

    Build it from probabilities or from counts:

    >>> freq = StaticFrequency(probabilities=[0.5, 0.25, 0.25])
    >>> freq = StaticFrequency.from_counts([2, 1, 1])

    It measures the per-draw q directly and derives the inclusion probability
    from it. Ids are integers in [0, num_items).

    Args:
      probabilities: [num_items] item probabilities, each in (0, 1]. They are
        used as given (not renormalised), so a table over a sub-catalog works.
      **kwargs: standard Keras layer arguments.
    """

    def __init__(self, probabilities: Any, **kwargs):
        super().__init__(**kwargs)
        probabilities = v.check_probabilities("probabilities", probabilities)
        v.check_rank("probabilities", probabilities, 1)
        self.num_items = int(probabilities.shape[0])
        self.log_probabilities = self.add_weight(
            name="log_probabilities", shape=[self.num_items], dtype=tf.float32,
            initializer=tf.constant_initializer(tf.math.log(probabilities).numpy()),
            trainable=False)

    @classmethod
    def from_counts(cls, counts: Any, **kwargs) -> "StaticFrequency":
        """Q(d) = counts[d] / sum(counts). Every count must be positive.

        Args:
          counts: [num_items] non-negative counts; a zero count would give Q = 0,
            which no sampled negative can have, so zeros are rejected.
        """
        counts = np.asarray(counts, dtype=np.float64)
        if counts.ndim != 1 or counts.size == 0 or np.any(counts <= 0) or not np.all(
                np.isfinite(counts)):
            raise ValueError(
                "`counts` must be a non-empty 1-D array of positive counts (add a "
                f"smoothing pseudo-count for unseen items); received counts={counts[:6]!r}"
                f"{' ...' if counts.size > 6 else ''} with shape {counts.shape}.")
        return cls(probabilities=(counts / counts.sum()).astype(np.float32), **kwargs)

    def log_q(self, ids: tf.Tensor) -> tf.Tensor:
        ids = tf.convert_to_tensor(ids)
        if not ids.dtype.is_integer:
            raise TypeError(
                f"`ids` must be an integer tensor of item ids; received ids with dtype "
                f"{ids.dtype.name}.")
        return tf.gather(self.log_probabilities, ids)

    def get_config(self):
        config = super().get_config()
        config.update(probabilities=tf.exp(self.log_probabilities).numpy().tolist())
        return config


class _CallableFrequency(FrequencyEstimator):
    """Wraps a callable that maps ids to per-draw probabilities."""

    def __init__(self, fn: Callable[[tf.Tensor], tf.Tensor], **kwargs):
        super().__init__(**kwargs)
        self._fn = fn

    def log_q(self, ids: tf.Tensor) -> tf.Tensor:
        probabilities = v.check_probabilities("probabilities(ids)", self._fn(ids))
        return tf.math.log(probabilities)

    def get_config(self):
        raise NotImplementedError(
            "A sampler built with a callable `probabilities` cannot be serialized; pass a "
            "tensor of probabilities or a FrequencyEstimator instead.")


FrequencyLike = Union[None, FrequencyEstimator, Callable[[tf.Tensor], tf.Tensor], Any]


def as_frequency(probabilities: FrequencyLike) -> Optional[FrequencyEstimator]:
    """Turns what a user passes as `probabilities` into a FrequencyEstimator.

    Args:
      probabilities: None; a FrequencyEstimator (used as is); a callable mapping
        ids to per-draw probabilities; or a [num_items] array of probabilities.

    Returns:
      A FrequencyEstimator, or None when `probabilities` is None.
    """
    if probabilities is None or isinstance(probabilities, FrequencyEstimator):
        return probabilities
    if isinstance(probabilities, dict):  # A serialized estimator (from get_config).
        return tf.keras.layers.deserialize(probabilities)
    if callable(probabilities) and not isinstance(probabilities, (tf.Tensor, np.ndarray)):
        return _CallableFrequency(probabilities)
    return StaticFrequency(probabilities=probabilities)
