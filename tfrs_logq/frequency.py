"""Item-frequency sources that feed sampling probabilities to the samplers and the task.

Every source answers two questions about a tensor of item ids:

- `log_q(ids)`: log of the per-draw probability q(d) (sum over the catalog ~ 1);
- `log_inclusion_probability(ids, num_draws)`: log of 1 - (1 - q(d))^n, the
  probability that d appears at least once among n independent draws;

and takes `update(ids)` once per training step (a no-op for static sources).
Samplers ask for the quantity that matches them: per-draw q for in-batch
negatives without deduplication and for the in-batch half of mixed sampling,
the inclusion probability for deduplicated pools. Each source measures one of
the two directly (`measures`) and derives the other.

Sources:

- `StaticFrequency`: exact counts, Q(d) = #d / N (the academic setup).
- `CountMinSketchEstimator`: exponentially decayed per-draw counts in a
  count-min sketch (the industrial setup); measures per-draw q.
- `HashedFrequencyEstimator`: Yi et al. (2019), algorithms 2-3: an EMA of the
  number of steps between sightings; measures the per-step inclusion
  probability, which saturates at 1 for head items.

Streaming estimators keep their state in non-trainable variables, so
`tf.train.Checkpoint` and `Model.save_weights` carry it (step counter
included). Their `update` runs inside tf.function and XLA (integer ids;
string ids are hashed with a fingerprint, which XLA cannot compile), and under
tf.distribute: the ids of all replicas are gathered and one identical update
is applied to every copy of the state.
"""

from typing import Any, Callable, Dict, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from logq_core import formulas
from tfrs_logq import _ops
from tfrs_logq import _validation as v

# Measured quantities (`FrequencyEstimator.measures`).
PER_DRAW = "per_draw"
INCLUSION = "inclusion"

# Modulus of the Carter-Wegman hash family: products of a coefficient below it
# and a 32-bit half of a key fit in int64.
_PRIME = 2**31 - 1


def id_keys(ids: Any, name: str = "ids") -> tf.Tensor:
    """Maps integer or string ids to int64 keys (strings by a 64-bit fingerprint)."""
    ids = v.ids_tensor(name, ids, rank=None)
    if ids.dtype == tf.string:
        return tf.strings.to_hash_bucket_fast(ids, 2**63 - 1)
    return tf.cast(ids, tf.int64)


class HashFamily:
    """`depth` independent Carter-Wegman hashes of int64 keys into [0, width).

    h_i(x) = ((a_i * lo(x) + c_i * hi(x) + b_i) mod P) mod width, with P = 2^31 - 1
    and lo, hi the two 32-bit halves of x: integer arithmetic only, so it runs
    under XLA and gives the same buckets on every device and process.

    Args:
      depth: number of hash functions.
      width: number of buckets of each.
      seed: seed of the coefficients.
    """

    def __init__(self, depth: int, width: int, seed: int):
        rng = np.random.RandomState(seed)
        self.depth, self.width = depth, width
        self._a = rng.randint(1, _PRIME, size=[depth, 1]).astype(np.int64)
        self._c = rng.randint(1, _PRIME, size=[depth, 1]).astype(np.int64)
        self._b = rng.randint(0, _PRIME, size=[depth, 1]).astype(np.int64)

    def __call__(self, keys: tf.Tensor) -> tf.Tensor:
        """[depth, n] flat indices row * width + bucket for [n] int64 keys."""
        low = tf.math.floormod(keys, 2**32)[tf.newaxis, :]
        high = tf.math.floormod(tf.math.floordiv(keys, 2**32), _PRIME)[tf.newaxis, :]
        h = (
            tf.math.floormod(self._a * low, _PRIME)
            + tf.math.floormod(self._c * high, _PRIME)
            + self._b
        )
        buckets = tf.math.floormod(tf.math.floormod(h, _PRIME), self.width)
        return buckets + np.arange(self.depth, dtype=np.int64)[:, np.newaxis] * self.width


class FrequencyEstimator(tf.keras.layers.Layer):
    """Base class of item-frequency sources (Keras layers; state in non-trainable variables).

    Subclasses implement `log_q` (or `log_inclusion_probability`, deriving the
    other) and, for streaming estimators, `update`.

    Attributes:
      measures: "per_draw" when `log_q` is measured and the inclusion
        probability derived from it, "inclusion" for the reverse.
      streaming: whether `update` changes the state (the task then calls it
        once per training step, before reading log Q).
    """

    measures = PER_DRAW
    streaming = False

    def update(self, ids: tf.Tensor, mask: Optional[tf.Tensor] = None) -> None:
        """Feeds one training step's item ids. Static sources ignore it."""
        del ids, mask

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
        return formulas.log_inclusion_probability(_ops.TF, self.log_q(ids), _num_draws(num_draws))

    def call(self, ids: tf.Tensor) -> tf.Tensor:
        """Same as `log_q`."""
        return self.log_q(ids)

    @property
    def state_bytes(self) -> int:
        """Bytes held by the estimator's variables."""
        return int(sum(w.shape.num_elements() * w.dtype.size for w in self.weights))


def _num_draws(num_draws) -> tf.Tensor:
    """Checks n >= 1 (eagerly, or as a graph assertion) and returns it as float32."""
    if isinstance(num_draws, (bool, float)) or (
        isinstance(num_draws, (int, np.integer)) and num_draws < 1
    ):
        raise ValueError(
            f"`num_draws` must be a positive integer; received num_draws={num_draws!r}."
        )
    num_draws = tf.cast(num_draws, tf.float32)
    return v._check_values(  # pylint: disable=protected-access
        "num_draws", num_draws, num_draws >= 1.0, "`num_draws` must be a positive integer"
    )


class StreamingFrequencyEstimator(FrequencyEstimator):
    """Base class of estimators learnt from the stream of training ids.

    Subclasses implement `_apply_update(keys, mask)` on [n] int64 keys and a
    [n] float32 mask (1 for a real id, 0 for padding), writing their variables.
    `update` handles dtypes and tf.distribute: in a replica context with
    several replicas the keys are all-gathered, and the one update is applied
    to every copy of the state in a cross-replica `merge_call`, exactly as an
    optimizer applies gradients.

    Args:
      seed: seed of the hash functions (the same seed gives the same buckets
        in every process, so checkpoints restore into a new process).
      **kwargs: standard Keras layer arguments.
    """

    streaming = True

    def __init__(self, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"`seed` must be a non-negative integer; received seed={seed!r}.")
        self.seed = int(seed)

    def _state(self, name: str, shape: Sequence[int], dtype) -> tf.Variable:
        """A non-trainable state variable, identical on every replica."""
        return self.add_weight(
            name=name,
            shape=shape,
            dtype=dtype,
            initializer="zeros",
            trainable=False,
            synchronization=tf.VariableSynchronization.ON_WRITE,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )

    def update(self, ids: tf.Tensor, mask: Optional[tf.Tensor] = None) -> None:
        """Feeds one training step's ids (all of them, duplicates included).

        Args:
          ids: item ids of any shape (integer or string).
          mask: optional bool tensor of the shape of `ids`, False for entries
            that are not items (padding); they leave the state unchanged.

        The variables are written in place (inside tf.function the writes run
        in program order before any later read), so nothing is returned.
        """
        keys = tf.reshape(id_keys(ids), [-1])
        if mask is None:
            weights = tf.ones_like(keys, tf.float32)
        else:
            mask = v.bool_tensor("mask", mask)
            weights = tf.reshape(tf.cast(mask, tf.float32), [-1])
        if not tf.distribute.has_strategy():
            self._apply_update(keys, weights)
            return
        context = tf.distribute.get_replica_context()
        if context is None:  # Cross-replica context: update every copy.
            self._update_every_copy(tf.distribute.get_strategy(), keys, weights)
            return
        if context.num_replicas_in_sync > 1:
            keys = context.all_gather(keys, axis=0)
            weights = context.all_gather(weights, axis=0)
        context.merge_call(self._update_every_copy, args=(keys, weights))

    def _update_every_copy(self, strategy, keys, weights):
        anchor = self.weights[0]
        return strategy.extended.update(
            anchor, lambda _, k, w: self._apply_update(k, w), args=(keys, weights), group=True
        )

    def _apply_update(self, keys: tf.Tensor, weights: tf.Tensor):
        raise NotImplementedError

    def get_config(self):
        config = super().get_config()
        config.update(seed=self.seed)
        return config


INITIALIZATIONS = formulas.INTER_ARRIVAL_INITIALIZATIONS


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class HashedFrequencyEstimator(StreamingFrequencyEstimator):
    """Streaming frequency estimation by inter-arrival gaps (Yi et al. 2019, algorithms 2-3).

    For each of `num_hashes` hash functions h_i it keeps A_i (the last step a
    bucket was seen) and B_i (an EMA of the gaps between sightings). At step t,
    for every id y of the step: B_i[h_i(y)] <- (1 - alpha) B_i[h_i(y)] +
    alpha (t - A_i[h_i(y)]), then A_i[h_i(y)] <- t. The estimated gap of y is
    max_i B_i[h_i(y)] (collisions only shorten gaps, so the max is the least
    biased), and 1 / gap estimates y's probability to appear in a step.

    What it measures: the per-step inclusion probability pi(y) = 1 - (1 - q)^b
    for b draws per step, directly. `log_inclusion_probability(ids, n)` derives
    1 - (1 - pi)^(n / b), exact for n = b. `log_q` is the first-order per-draw
    reading pi / b (what Yi et al. feed to the correction, scaled to one draw).

    Warning: pi saturates at 1 for head items. An item seen in every step has
    gap 1 and reads q = 1 / b however popular it is: at batch 1024 on a
    Zipf(1) catalog of 100k items the top item appears ~85 times a step, so
    its per-draw q is underestimated ~85-fold. Use this estimator for
    deduplicated pools (which need pi), and `CountMinSketchEstimator` for
    per-draw q.

    Ids never seen (some bucket never written) read a gap of t + 1 steps.
    Before the first update every id reads pi = q = 1 / num_buckets: uniform,
    so a correction read before any data (an evaluation before training) is a
    constant shift of the logits, not the division by 1 - q = 0 that q = 1
    would give the improved and mixed corrections.

    Args:
      num_buckets: H, buckets per hash function.
      num_hashes: m, the number of hash functions.
      alpha: EMA learning rate in (0, 1].
      initialization: "first_gap" sets B to the full gap t - A at a bucket's
        first sighting (A = 0 before it), so B starts near the truth;
        "zero" starts B at 0 and applies the EMA as written in the paper,
        which overestimates q until about 1 / alpha sightings.
      seed: seed of the hash functions.
      **kwargs: standard Keras layer arguments.
    """

    measures = INCLUSION

    def __init__(
        self,
        num_buckets: int = 2**17,
        num_hashes: int = 2,
        alpha: float = 0.01,
        initialization: str = "first_gap",
        seed: int = 0,
        **kwargs,
    ):
        super().__init__(seed=seed, **kwargs)
        self.num_buckets = v.check_positive_int("num_buckets", num_buckets)
        self.num_hashes = v.check_positive_int("num_hashes", num_hashes)
        self.alpha = v.check_unit_interval("alpha", alpha)
        self.initialization = v.check_choice("initialization", initialization, INITIALIZATIONS)
        self._hash = HashFamily(self.num_hashes, self.num_buckets, self.seed)
        # One extra slot at the end takes the writes of masked ids; it is never read.
        size = self.num_hashes * self.num_buckets + 1
        self._sink = size - 1
        self.last_step = self._state("last_step", [size], tf.int64)
        self.gap = self._state("gap", [size], tf.float32)
        self.step = self._state("step", [], tf.int64)
        self.num_ids = self._state("num_ids", [], tf.int64)

    def _apply_update(self, keys, weights):
        step = self.step + 1
        indices = self._hash(keys)
        indices = tf.reshape(tf.where(weights[tf.newaxis, :] > 0, indices, self._sink), [-1])
        gap = formulas.inter_arrival_update(
            _ops.TF,
            tf.gather(self.last_step, indices),
            tf.gather(self.gap, indices),
            step,
            self.alpha,
            self.initialization,
        )
        # Duplicate ids and colliding ids of one step write identical values.
        return tf.group(
            self.gap.scatter_update(tf.IndexedSlices(gap, indices)),
            self.last_step.scatter_update(
                tf.IndexedSlices(tf.fill(tf.shape(indices), step), indices)
            ),
            self.step.assign(step),
            self.num_ids.assign_add(tf.reduce_sum(tf.cast(weights > 0, tf.int64))),
        )

    def _gap(self, ids: tf.Tensor) -> tf.Tensor:
        keys = id_keys(ids)
        indices = self._hash(tf.reshape(keys, [-1]))
        gaps = formulas.inter_arrival_gap(
            _ops.TF,
            tf.gather(self.last_step, indices),
            tf.gather(self.gap, indices),
            self.step,
            self.num_buckets,
        )
        return tf.reshape(gaps, tf.shape(keys))

    @property
    def draws_per_step(self) -> tf.Tensor:
        """b: the mean number of ids per update (at least 1)."""
        return tf.maximum(
            tf.cast(self.num_ids, tf.float32) / tf.maximum(tf.cast(self.step, tf.float32), 1.0), 1.0
        )

    def log_step_inclusion_probability(self, ids: tf.Tensor) -> tf.Tensor:
        """log pi(d) = -log(gap): the measured log probability of appearing in a step."""
        return -tf.math.log(self._gap(ids))

    def log_q(self, ids: tf.Tensor) -> tf.Tensor:
        """log(pi / b): the per-draw reading, saturated at 1 / b for head items."""
        return self.log_step_inclusion_probability(ids) - tf.math.log(self.draws_per_step)

    def log_inclusion_probability(self, ids: tf.Tensor, num_draws) -> tf.Tensor:
        """log(1 - (1 - pi)^(n / b)), from the measured per-step pi."""
        return formulas.log_inclusion_probability(
            _ops.TF,
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
        )
        return config


# The stored counts are scaled by decay^-k (k: steps since the last rescale)
# so that an update touches only the step's buckets; once decay^-k exceeds
# e^30 the whole sketch is rescaled, every ~30 / -log(decay) steps.
_RESCALE_EXPONENT = 30.0


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class CountMinSketchEstimator(StreamingFrequencyEstimator):
    """Exponentially decayed per-draw counts in a count-min sketch (the industrial setup).

    Each step multiplies every count by `decay` and adds one per draw (each
    occurrence of an id, duplicates within a batch included) in `depth` rows
    of `width` counters. q(d) = min over rows of d's counters / the decayed
    total number of draws: collisions only add, so the min is the tightest
    bound. The decay is applied lazily (counts are stored in growing units and
    rescaled rarely), so an update costs O(batch * depth), not O(width * depth).

    What it measures: the per-draw q, directly; the inclusion probability is
    derived as 1 - (1 - q)^n. Ids seen less than `min_count` decayed times
    read q = min_count / total. Before the first update (or while every id fed
    was masked) every id reads q = 1 / width: uniform, so a correction read
    before any data is a constant shift of the logits.

    The effective window is about 1 / (1 - decay) steps: a larger decay gives
    less noisy estimates of rare items, a smaller one follows drift faster.

    Args:
      width: counters per row.
      depth: rows (hash functions).
      decay: per-step decay in (0, 1]; 1 keeps exact cumulative counts.
      conservative: conservative update (raise each of an id's counters only
        up to its current estimate plus the new draws), which reduces the
        overestimate from collisions; never underestimates.
      min_count: floor of a count, in draws (smoothing of unseen items).
      seed: seed of the hash functions.
      **kwargs: standard Keras layer arguments.
    """

    measures = PER_DRAW

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
        super().__init__(seed=seed, **kwargs)
        self.width = v.check_positive_int("width", width)
        self.depth = v.check_positive_int("depth", depth)
        self.decay = v.check_unit_interval("decay", decay)
        self.conservative = v.check_bool("conservative", conservative)
        self.min_count = v.check_positive_float("min_count", min_count)
        self._hash = HashFamily(self.depth, self.width, self.seed)
        self._log_growth = -float(np.log(self.decay))
        self.counts = self._state("counts", [self.depth * self.width], tf.float32)
        self.total = self._state("total", [], tf.float32)
        self.step = self._state("step", [], tf.int64)
        self.steps_since_rescale = self._state("steps_since_rescale", [], tf.int64)

    def _unit(self, steps_since_rescale: tf.Tensor) -> tf.Tensor:
        """Stored value of one draw made now: decay^-k."""
        return tf.exp(tf.cast(steps_since_rescale, tf.float32) * self._log_growth)

    def _apply_update(self, keys, weights):
        k = self.steps_since_rescale + 1
        if self._log_growth > 0.0:

            def rescale():
                factor = 1.0 / self._unit(k - 1)
                with tf.control_dependencies(
                    [
                        self.counts.assign(self.counts * factor),
                        self.total.assign(self.total * factor),
                    ]
                ):
                    return tf.ones_like(k)

            k = tf.cond(
                tf.cast(k, tf.float32) * self._log_growth > _RESCALE_EXPONENT, rescale, lambda: k
            )
        unit = self._unit(k)
        if self.conservative:
            indices, targets = formulas.conservative_targets(
                _ops.TF, self.counts, self._hash, keys, weights, unit
            )
            counts_update = self.counts.scatter_max(tf.IndexedSlices(targets, indices))
        else:
            indices = self._hash(keys)
            counts_update = self.counts.scatter_add(
                tf.IndexedSlices(
                    tf.reshape(tf.broadcast_to(weights * unit, tf.shape(indices)), [-1]),
                    tf.reshape(indices, [-1]),
                )
            )
        return tf.group(
            counts_update,
            self.total.assign_add(tf.reduce_sum(weights) * unit),
            self.step.assign_add(1),
            self.steps_since_rescale.assign(k),
        )

    @property
    def effective_draws(self) -> tf.Tensor:
        """The decayed total number of draws (the denominator of q)."""
        return self.total / self._unit(self.steps_since_rescale)

    def log_q(self, ids: tf.Tensor) -> tf.Tensor:
        """log(min_i count_i(d) / total), the measured per-draw log probability."""
        keys = id_keys(ids)
        log_q = formulas.count_min_log_q(
            _ops.TF,
            self.counts,
            self._hash(tf.reshape(keys, [-1])),
            self.total,
            self._unit(self.steps_since_rescale),
            self.min_count,
            self.width,
        )
        return tf.reshape(log_q, tf.shape(keys))

    def get_config(self):
        config = super().get_config()
        config.update(
            width=self.width,
            depth=self.depth,
            decay=self.decay,
            conservative=self.conservative,
            min_count=self.min_count,
        )
        return config


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class StaticFrequency(FrequencyEstimator):
    """Exact, fixed item probabilities: Q(d) = #d / N, the academic setup.

    Build it from probabilities, from counts, or by counting a dataset:

    >>> freq = StaticFrequency(probabilities=[0.5, 0.25, 0.25])
    >>> freq = StaticFrequency.from_counts([2, 1, 1])
    >>> freq = StaticFrequency.from_dataset(train.map(lambda x: x["item_id"]))

    It measures the per-draw q directly and derives the inclusion probability
    from it. Ids are integers in [0, num_items), or strings when a
    `vocabulary` is given (string ids outside it read the smallest probability).
    An integer id outside [0, num_items) is invalid, on every path: a ValueError
    eagerly, a failed graph assertion inside tf.function, and NaN (so a NaN loss)
    under XLA, which drops assertions and would otherwise clamp the id to the
    first or last item (the rule of `logq_core.checks.table_rows`).

    Args:
      probabilities: [num_items] item probabilities, each in (0, 1]. They are
        used as given (not renormalised), so a table over a sub-catalog works.
      vocabulary: optional [num_items] distinct string ids; probabilities[i]
        belongs to vocabulary[i].
      **kwargs: standard Keras layer arguments.
    """

    def __init__(self, probabilities: Any, vocabulary: Optional[Sequence[str]] = None, **kwargs):
        super().__init__(**kwargs)
        probabilities = v.check_probabilities("probabilities", probabilities)
        v.check_rank("probabilities", probabilities, 1)
        self.num_items = int(probabilities.shape[0])
        self.log_probabilities = self.add_weight(
            name="log_probabilities",
            shape=[self.num_items],
            dtype=tf.float32,
            initializer=tf.constant_initializer(tf.math.log(probabilities).numpy()),
            trainable=False,
        )
        self.vocabulary = None
        self._table = None
        if vocabulary is not None:
            vocabulary = [
                x.decode() if isinstance(x, bytes) else str(x)
                for x in np.asarray(vocabulary).ravel().tolist()
            ]
            if len(vocabulary) != self.num_items or len(set(vocabulary)) != len(vocabulary):
                raise ValueError(
                    f"`vocabulary` must hold {self.num_items} distinct ids, one per "
                    f"probability; received {len(vocabulary)} ids "
                    f"({len(set(vocabulary))} distinct)."
                )
            self.vocabulary = vocabulary
            self._table = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(vocabulary), tf.range(self.num_items, dtype=tf.int64)
                ),
                default_value=-1,
            )

    @classmethod
    def from_counts(cls, counts: Any, pseudo_count: float = 0.0, **kwargs) -> "StaticFrequency":
        """Q(d) = (counts[d] + pseudo_count) / sum(counts + pseudo_count).

        Args:
          counts: [num_items] non-negative counts. A zero count (with no
            pseudo-count) would give Q = 0, which no sampled negative can have,
            so it is rejected.
          pseudo_count: added to every count (smoothing for unseen items).
          **kwargs: passed to the constructor (e.g. `vocabulary`, `name`).
        """
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
                "`counts` must be a non-empty 1-D array of positive counts (add a "
                f"smoothing pseudo-count for unseen items); received counts={counts[:6]!r}"
                f"{' ...' if counts.size > 6 else ''} with shape {counts.shape}."
            )
        return cls(probabilities=(smoothed / smoothed.sum()).astype(np.float32), **kwargs)

    @classmethod
    def from_dataset(
        cls,
        dataset: tf.data.Dataset,
        num_items: Optional[int] = None,
        pseudo_count: float = 0.0,
        **kwargs,
    ) -> "StaticFrequency":
        """Counts the ids of a dataset: Q(d) = #d / N over every id it yields.

        Args:
          dataset: a `tf.data.Dataset` whose elements are integer or string id
            tensors of any shape (scalars are batched for speed).
          num_items: for integer ids, the catalog size (default: largest id + 1);
            ids never seen then need a `pseudo_count`.
          pseudo_count: see `from_counts`.
          **kwargs: passed to the constructor.

        Returns:
          A StaticFrequency; with string ids its `vocabulary` lists the ids in
          order of first appearance.
        """
        spec = getattr(dataset, "element_spec", None)
        if not isinstance(spec, tf.TensorSpec) or not (
            spec.dtype.is_integer or spec.dtype == tf.string
        ):
            raise TypeError(
                "`dataset` must be a tf.data.Dataset of integer or string id tensors; "
                f"received dataset with element_spec={spec!r}. Map it to the id column "
                "first, e.g. dataset.map(lambda x: x['item_id'])."
            )
        num_items = v.check_positive_int("num_items", num_items, allow_none=True)
        if spec.shape.rank == 0:
            dataset = dataset.batch(65536)
        if spec.dtype == tf.string:
            string_counts: Dict[Any, int] = {}
            for batch in dataset.as_numpy_iterator():
                values, batch_counts = np.unique(np.asarray(batch).ravel(), return_counts=True)
                for value, count in zip(values.tolist(), batch_counts.tolist()):
                    string_counts[value] = string_counts.get(value, 0) + count
            if not string_counts:
                raise ValueError("`dataset` yielded no ids.")
            return cls.from_counts(
                list(string_counts.values()),
                pseudo_count=pseudo_count,
                vocabulary=list(string_counts),
                **kwargs,
            )
        counts: np.ndarray = np.zeros([num_items or 0], np.int64)
        for batch in dataset.as_numpy_iterator():
            ids = np.asarray(batch).ravel()
            if ids.size == 0:
                continue
            if ids.min() < 0 or (num_items is not None and ids.max() >= num_items):
                bad = ids[(ids < 0) | (ids >= (num_items or np.inf))][:6]
                raise ValueError(f"`dataset` yielded ids outside [0, {num_items or 'inf'}): {bad}.")
            batch_counts = np.bincount(ids, minlength=counts.size)
            batch_counts[: counts.size] += counts
            counts = batch_counts
        if counts.size == 0:
            raise ValueError("`dataset` yielded no ids.")
        return cls.from_counts(counts, pseudo_count=pseudo_count, **kwargs)

    def _indices(self, ids: tf.Tensor) -> tf.Tensor:
        ids = tf.convert_to_tensor(ids)
        if self._table is not None:
            if ids.dtype != tf.string:
                raise TypeError(
                    "`ids` must be a string tensor (this StaticFrequency has a vocabulary); "
                    f"received ids with dtype {ids.dtype.name}."
                )
            return self._table.lookup(ids)
        if not ids.dtype.is_integer:
            raise TypeError(
                f"`ids` must be an integer tensor of item ids; received ids with dtype "
                f"{ids.dtype.name}."
            )
        return ids

    def log_q(self, ids: tf.Tensor) -> tf.Tensor:
        """log q of each id. An integer id outside [0, num_items) is invalid: ValueError
        eagerly, a graph assertion in a tf.function, NaN under XLA (never a clamped row;
        `logq_core.checks.table_rows`). A string outside the vocabulary reads the smallest
        probability."""
        indices = self._indices(ids)
        if self._table is None:
            rows, valid = v.table_rows(
                "ids", indices, self.num_items, "one per entry of `probabilities`"
            )
            return v.nan_unless(valid, tf.gather(self.log_probabilities, rows))
        log_q = tf.gather(self.log_probabilities, tf.maximum(indices, 0))
        return tf.where(indices >= 0, log_q, tf.reduce_min(self.log_probabilities))

    def get_config(self):
        config = super().get_config()
        config.update(probabilities=tf.exp(self.log_probabilities).numpy().tolist())
        if self.vocabulary is not None:
            config.update(vocabulary=self.vocabulary)
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
            "tensor of probabilities or a FrequencyEstimator instead."
        )


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
