"""Item-frequency sources for Keras 3: `StaticFrequency`, `CountMinSketchEstimator` and
`HashedFrequencyEstimator`.

They answer what `tfrs_logq.frequency`'s sources answer, for integer ids:
`log_q(ids)` (per-draw log q) and `log_inclusion_probability(ids, n)`
(log(1 - (1 - q)^n), the formula of `logq_core.formulas`), and take
`update(ids)` once per training step. State lives in non-trainable variables,
so `model.save` / `keras.saving.load_model` and checkpoints carry it.

Differences from tfrs_logq, and why:

- Integer ids only: JAX has no string tensors (map strings with
  `keras.layers.StringLookup`).
- The sketch hashes with 32-bit multiply-shift (h(x) = top log2(width) bits of
  a * x + b mod 2^32; Dietzfelbinger et al. 1997), so `width` is a power of
  two. tfrs_logq's Carter-Wegman hash needs int64 products, which JAX gives
  only with `jax_enable_x64`. The buckets therefore differ between the two
  libraries (the estimates agree in law; a sketch does not move across them).
- The sketch's counts are decayed and updated densely each step (keras.ops has
  no in-place scatter-add): O(width * depth) per step instead of O(batch); the
  conservative update takes its per-counter maximum with `ops.segment_max`.
- `HashedFrequencyEstimator` (Yi et al.'s inter-arrival gaps) hashes the same way
  and writes its buckets densely too (`ops.scatter_update`).

The estimate is `logq_core.formulas.count_min_log_q`, shared with tfrs_logq's sketch.
"""

from typing import Any, Optional

import keras
import numpy as np
from keras import ops

from keras_logq import _ops as k
from logq_core import checks
from logq_core import formulas


def _num_draws(num_draws):
    """n as float32: a Python or numpy number checked to be positive (an int a positive
    integer), a tensor checked to be a scalar (one n for every id, never broadcast)."""
    if isinstance(num_draws, (bool, np.bool_)):
        checks.check_positive_float("num_draws", bool(num_draws))  # Raises for a bool.
    if isinstance(num_draws, (int, np.integer)):
        checks.check_positive_int("num_draws", num_draws)
    elif isinstance(num_draws, (float, np.floating)):
        checks.check_positive_float("num_draws", num_draws)
    else:
        num_draws = ops.convert_to_tensor(num_draws)
        k.check_rank("num_draws", num_draws, 0)
    return ops.cast(num_draws, "float32")


class FrequencyEstimator(keras.layers.Layer):
    """Base class: `log_q`, the derived inclusion probability, and `update` (no-op)."""

    streaming = False

    def update(self, ids, mask=None) -> None:
        """Feeds one training step's ids. Static sources ignore it."""
        del ids, mask

    def log_q(self, ids):
        """log q(d), the per-draw log probability, with the shape of `ids`."""
        raise NotImplementedError

    def log_inclusion_probability(self, ids, num_draws):
        """log(1 - (1 - q(d))^num_draws) for `num_draws` >= 1 independent draws."""
        return formulas.log_inclusion_probability(k.OPS, self.log_q(ids), _num_draws(num_draws))

    def call(self, ids):
        """Same as `log_q`."""
        return self.log_q(ids)


@keras.saving.register_keras_serializable(package="keras_logq")
class StaticFrequency(FrequencyEstimator):
    """Exact, fixed item probabilities Q(d) = #d / N for integer ids in [0, num_items).

    An id outside [0, num_items) reads NaN, so the loss is NaN, on every backend (JAX
    would wrap -1 to the last item, XLA clamp 15 to it), as `tfrs_logq.StaticFrequency`
    does under XLA; eagerly tfrs_logq raises instead (no portable assertion here).

    >>> freq = StaticFrequency(probabilities=[0.5, 0.25, 0.25])
    >>> freq = StaticFrequency.from_counts([2, 1, 1])

    Args:
      probabilities: [num_items] probabilities, each in (0, 1], used as given.
      **kwargs: standard Keras layer arguments.
    """

    def __init__(self, probabilities: Any, **kwargs):
        super().__init__(**kwargs)
        try:
            values = np.asarray(probabilities, dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise ValueError(
                "`probabilities` must be a non-empty 1-D array of values in (0, 1] "
                f"(or a keras_logq estimator); received {probabilities!r}."
            ) from error
        if (
            values.ndim != 1
            or values.size == 0
            or not np.all(np.isfinite(values))
            or np.any(values <= 0)
            or np.any(values > 1)
        ):
            raise ValueError(
                "`probabilities` must be a non-empty 1-D array of values in (0, 1]; received "
                f"probabilities={values.ravel()[:6]!r}{' ...' if values.size > 6 else ''} with "
                f"shape {values.shape}."
            )
        self.num_items = int(values.size)
        self._initial = np.log(values).astype(np.float32)
        self.log_probabilities = self.add_weight(
            name="log_probabilities",
            shape=(self.num_items,),
            trainable=False,
            initializer=keras.initializers.Constant(self._initial),
            dtype="float32",
        )
        self.built = True

    @classmethod
    def from_counts(cls, counts: Any, pseudo_count: float = 0.0, **kwargs) -> "StaticFrequency":
        """Q(d) = (counts[d] + pseudo_count) / sum(counts + pseudo_count)."""
        if (
            isinstance(pseudo_count, bool)
            or not isinstance(pseudo_count, (int, float))
            or not np.isfinite(pseudo_count)
            or pseudo_count < 0
        ):
            raise ValueError(
                "`pseudo_count` must be a non-negative number; received "
                f"pseudo_count={pseudo_count!r}."
            )
        counts = np.asarray(counts, dtype=np.float64)
        smoothed = counts + pseudo_count
        if (
            counts.ndim != 1
            or counts.size == 0
            or np.any(smoothed <= 0)
            or not np.all(np.isfinite(counts))
            or np.any(counts < 0)
        ):
            raise ValueError(
                "`counts` must be a non-empty 1-D array of positive counts (add a smoothing "
                f"pseudo-count for unseen items); received counts={counts[:6]!r}"
                f"{' ...' if counts.size > 6 else ''} with shape {counts.shape}."
            )
        return cls(probabilities=smoothed / smoothed.sum(), **kwargs)

    def log_q(self, ids):
        """log q of each id; NaN for an id outside [0, num_items) on every backend (never a
        clamped or wrapped row; the rule of `logq_core.checks.table_rows`)."""
        valid, rows = k.table_rows(k.ids_tensor("ids", ids, rank=None), self.num_items)
        return ops.where(valid, ops.take(self.log_probabilities, rows, axis=0), float("nan"))

    def get_config(self):
        config = super().get_config()
        # In float64, so that log(exp(.)) gives back the stored float32 log-probabilities.
        config.update(
            probabilities=np.exp(
                keras.ops.convert_to_numpy(self.log_probabilities).astype(np.float64)
            ).tolist()
        )
        return config


# The stored counts are scaled by decay^-k (k: steps since the last rescale); once
# decay^-k exceeds e^30 the whole sketch is rescaled (as tfrs_logq's sketch does).
_RESCALE_EXPONENT = 30.0


def _as_int32(value: int) -> int:
    """A uint32 value as the int32 with the same bits."""
    return value - 2**32 if value >= 2**31 else value


class MultiplyShiftHash:
    """`depth` hash functions of integer ids into `width` (a power of two) buckets each.

    h_i(x) = the top log2(width) bits of a_i * x + b_i mod 2^32 (Dietzfelbinger et
    al. 1997), with odd a_i and any b_i drawn from `seed`: int32 arithmetic, so
    every backend computes the same buckets. Returns [depth, n] flat indices,
    row i offset by i * width.
    """

    def __init__(self, depth: int, width: int, seed: int):
        self.depth, self.width = depth, width
        rng = np.random.RandomState(seed)
        # Odd multipliers a and offsets b below 2^32, stored as int32 bit patterns.
        self.a = np.array(
            [_as_int32(int(x) | 1) for x in rng.randint(0, 2**32, depth, dtype=np.uint64)], np.int32
        )
        self.b = np.array(
            [_as_int32(int(x)) for x in rng.randint(0, 2**32, depth, dtype=np.uint64)], np.int32
        )
        self._shift = 32 - int(np.log2(width))
        self._offsets = (np.arange(depth, dtype=np.int32) * width)[:, None]

    def __call__(self, ids):
        keys = ops.cast(ids, "int32")[None, :]
        mixed = keys * ops.convert_to_tensor(self.a[:, None]) + ops.convert_to_tensor(
            self.b[:, None]
        )  # mod 2^32 by int32 wrap-around.
        buckets = ops.bitwise_and(ops.right_shift(mixed, self._shift), self.width - 1)
        return buckets + ops.convert_to_tensor(self._offsets)


@keras.saving.register_keras_serializable(package="keras_logq")
class CountMinSketchEstimator(FrequencyEstimator):
    """Exponentially decayed per-draw counts in a count-min sketch (the industrial setup).

    Each step multiplies every count by `decay` and adds one per draw
    (duplicates in a batch included) in `depth` rows of `width` counters;
    q(d) = min over rows / the decayed total (`logq_core.formulas.count_min_log_q`).
    Ids seen less than `min_count` decayed times read min_count / total;
    before any update every id reads 1 / width.

    Call `update(ids)` once per training step, inside the model's `call` or
    `compute_loss` (Keras 3 keeps the variables' new values in both, on every
    backend), before reading `log_q`.

    Args:
      width: counters per row, a power of two.
      depth: rows (hash functions).
      decay: per-step decay in (0, 1]; 1 keeps exact cumulative counts.
      conservative: conservative update (raise each of an id's counters only
        up to its current estimate plus the step's draws of it), which reduces
        the overestimate from collisions; never underestimates.
      min_count: floor of a count, in draws.
      seed: seed of the hash functions.
      **kwargs: standard Keras layer arguments.
    """

    streaming = True

    def __init__(
        self,
        width: int = 2**18,
        depth: int = 4,
        decay: float = 0.999,
        conservative: bool = False,
        min_count: float = 0.5,
        seed: int = 0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.width = checks.check_power_of_two("width", width)
        self.depth = checks.check_positive_int("depth", depth)
        self.decay = checks.check_unit_interval("decay", decay)
        self.conservative = checks.check_bool("conservative", conservative)
        self.min_count = checks.check_positive_float("min_count", min_count)
        self.seed = checks.check_non_negative_int("seed", seed)
        self._hash = MultiplyShiftHash(self.depth, self.width, self.seed)
        self._log_growth = -float(np.log(self.decay))
        state = dict(trainable=False, initializer="zeros")
        self.counts = self.add_weight(
            name="counts", shape=(self.depth * self.width,), dtype="float32", **state
        )
        self.total = self.add_weight(name="total", shape=(), dtype="float32", **state)
        self.step = self.add_weight(name="step", shape=(), dtype="int32", **state)
        self.steps_since_rescale = self.add_weight(
            name="steps_since_rescale", shape=(), dtype="int32", **state
        )
        self.built = True

    def _unit(self, steps):
        return ops.exp(ops.cast(steps, "float32") * self._log_growth)

    def update(self, ids, mask=None) -> None:
        """Feeds one training step's ids (any shape); `mask` False entries are ignored."""
        ids = k.ids_tensor("ids", ids, rank=None)
        if mask is not None:
            mask = k.bool_tensor("mask", mask)
            k.check_same_shape("mask", mask, "ids", ids)
        ids = ops.reshape(ids, (-1,))
        weights = (
            ops.ones_like(ids, "float32")
            if mask is None
            else ops.reshape(ops.cast(mask, "float32"), (-1,))
        )
        steps = self.steps_since_rescale + 1
        counts, total = self.counts.value, self.total.value
        if self._log_growth > 0.0:
            rescale = ops.cast(steps, "float32") * self._log_growth > _RESCALE_EXPONENT
            factor = ops.where(rescale, 1.0 / self._unit(steps - 1), 1.0)
            counts, total = counts * factor, total * factor
            steps = ops.where(rescale, 1, steps)
        unit = self._unit(steps)
        size = self.depth * self.width
        if self.conservative and ids.shape[0] == 0:
            self.counts.assign(counts)  # An empty step only decays (torch's segment ops fail).
        elif self.conservative:
            indices, targets = formulas.conservative_targets(
                k.OPS, counts, self._hash, ids, weights, unit
            )
            self.counts.assign(
                ops.maximum(counts, ops.segment_max(targets, indices, num_segments=size))
            )
        else:
            indices = ops.reshape(self._hash(ids), (-1, 1))
            values = ops.reshape(
                ops.broadcast_to(weights * unit, (self.depth, ops.shape(ids)[0])), (-1,)
            )
            self.counts.assign(counts + ops.scatter(indices, values, (size,)))
        self.total.assign(total + ops.sum(weights) * unit)
        self.step.assign(self.step + 1)
        self.steps_since_rescale.assign(ops.cast(steps, "int32"))

    @property
    def effective_draws(self):
        """The decayed total number of draws (the denominator of q)."""
        return self.total / self._unit(self.steps_since_rescale)

    def log_q(self, ids):
        ids = k.ids_tensor("ids", ids, rank=None)
        log_q = formulas.count_min_log_q(
            k.OPS,
            self.counts,
            self._hash(ops.reshape(ids, (-1,))),
            self.total,
            self._unit(self.steps_since_rescale),
            self.min_count,
            self.width,
        )
        return ops.reshape(log_q, ops.shape(ids))

    def get_config(self):
        config = super().get_config()
        config.update(
            width=self.width,
            depth=self.depth,
            decay=self.decay,
            conservative=self.conservative,
            min_count=self.min_count,
            seed=self.seed,
        )
        return config


@keras.saving.register_keras_serializable(package="keras_logq")
class HashedFrequencyEstimator(FrequencyEstimator):
    """Streaming frequency estimation by inter-arrival gaps (Yi et al. 2019, algorithms 2-3).

    For each of `num_hashes` hash functions it keeps A (the last step a bucket
    was seen) and B (an EMA of the gaps between sightings); an id's gap is the
    max over its buckets of B, and 1 / gap its probability to appear in a step
    (`logq_core.formulas.inter_arrival_update` / `inter_arrival_gap`, as
    tfrs_logq's estimator of the same name).

    What it measures: the per-step inclusion probability pi(d) = 1 - (1 - q)^b
    for b draws per step. `log_inclusion_probability(ids, n)` derives
    1 - (1 - pi)^(n / b), exact for n = b; `log_q` is the first-order per-draw
    reading pi / b, which saturates at 1 / b for items seen in every step: use
    it for deduplicated pools, and `CountMinSketchEstimator` for per-draw q.

    Call `update(ids)` once per training step, as for the sketch.

    Args:
      num_buckets: buckets per hash function, a power of two.
      num_hashes: the number of hash functions.
      alpha: EMA learning rate in (0, 1].
      initialization: "first_gap" (B starts at a bucket's first full gap) or
        "zero" (the EMA from 0, as the paper writes it).
      seed: seed of the hash functions.
      **kwargs: standard Keras layer arguments.
    """

    streaming = True

    def __init__(
        self,
        num_buckets: int = 2**17,
        num_hashes: int = 2,
        alpha: float = 0.01,
        initialization: str = "first_gap",
        seed: int = 0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_buckets = checks.check_power_of_two("num_buckets", num_buckets)
        self.num_hashes = checks.check_positive_int("num_hashes", num_hashes)
        self.alpha = checks.check_unit_interval("alpha", alpha)
        self.initialization = checks.check_choice(
            "initialization", initialization, formulas.INTER_ARRIVAL_INITIALIZATIONS
        )
        self.seed = checks.check_non_negative_int("seed", seed)
        self._hash = MultiplyShiftHash(self.num_hashes, self.num_buckets, self.seed)
        # One extra slot at the end takes the writes of masked ids; it is never read.
        size = self.num_hashes * self.num_buckets + 1
        self._sink = size - 1
        state = dict(trainable=False, initializer="zeros")
        self.last_step = self.add_weight(name="last_step", shape=(size,), dtype="int32", **state)
        self.gap = self.add_weight(name="gap", shape=(size,), dtype="float32", **state)
        self.step = self.add_weight(name="step", shape=(), dtype="int32", **state)
        self.num_ids = self.add_weight(name="num_ids", shape=(), dtype="int32", **state)
        self.built = True

    def update(self, ids, mask=None) -> None:
        """Feeds one training step's ids (any shape); `mask` False entries are ignored."""
        ids = k.ids_tensor("ids", ids, rank=None)
        if mask is not None:
            mask = k.bool_tensor("mask", mask)
            k.check_same_shape("mask", mask, "ids", ids)
        ids = ops.reshape(ids, (-1,))
        valid = ops.ones_like(ids, "bool") if mask is None else ops.reshape(mask, (-1,))
        step = self.step + 1
        indices = ops.reshape(ops.where(valid[None, :], self._hash(ids), self._sink), (-1,))
        last_step, gap = self.last_step.value, self.gap.value
        updated = formulas.inter_arrival_update(
            k.OPS,
            ops.take(last_step, indices),
            ops.take(gap, indices),
            step,
            self.alpha,
            self.initialization,
        )
        # Duplicate and colliding ids of one step write identical values.
        self.gap.assign(ops.scatter_update(gap, indices[:, None], updated))
        self.last_step.assign(
            ops.scatter_update(
                last_step, indices[:, None], ops.cast(ops.ones_like(indices) * step, "int32")
            )
        )
        self.step.assign(step)
        self.num_ids.assign(self.num_ids + ops.sum(ops.cast(valid, "int32")))

    @property
    def draws_per_step(self):
        """b: the mean number of ids per update (at least 1)."""
        return ops.maximum(
            ops.cast(self.num_ids, "float32") / ops.maximum(ops.cast(self.step, "float32"), 1.0),
            1.0,
        )

    def log_step_inclusion_probability(self, ids):
        """log pi(d) = -log(gap): the measured log probability of appearing in a step."""
        ids = k.ids_tensor("ids", ids, rank=None)
        indices = self._hash(ops.reshape(ids, (-1,)))
        gaps = formulas.inter_arrival_gap(
            k.OPS,
            ops.take(self.last_step, indices),
            ops.take(self.gap, indices),
            self.step,
            self.num_buckets,
        )
        return ops.reshape(-ops.log(gaps), ops.shape(ids))

    def log_q(self, ids):
        """log(pi / b): the per-draw reading, saturated at 1 / b for head items."""
        return self.log_step_inclusion_probability(ids) - ops.log(self.draws_per_step)

    def log_inclusion_probability(self, ids, num_draws):
        """log(1 - (1 - pi)^(n / b)), from the measured per-step pi."""
        return formulas.log_inclusion_probability(
            k.OPS,
            self.log_step_inclusion_probability(ids),
            _num_draws(num_draws) / self.draws_per_step,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            num_buckets=self.num_buckets,
            num_hashes=self.num_hashes,
            alpha=self.alpha,
            initialization=self.initialization,
            seed=self.seed,
        )
        return config


def as_frequency(probabilities) -> Optional[FrequencyEstimator]:
    """None, a FrequencyEstimator (as is), a serialized one, or [num_items] probabilities."""
    if probabilities is None or isinstance(probabilities, FrequencyEstimator):
        return probabilities
    if isinstance(probabilities, dict):
        return keras.saving.deserialize_keras_object(probabilities)
    return StaticFrequency(probabilities=probabilities)
