"""Negative samplers: in-batch (with or without deduplication), uniform, and mixed.

Each sampler returns `Negatives`: the negative ids, their embeddings, the
validity mask (accidental hits removed) and the per-draw-equivalent log Q of
docs/design.md, chosen so that

    Z_hat = (1/n) sum_i m_i exp(s_i - log Q'(d_i)),   n = sum_i m_i,

is an unbiased (or consistent) estimate of sum_{d != p} exp(s_d), where Q' is
the proposal with the positive p excluded. This matters because the improved
correction is not invariant to the scale of Q.

- In-batch, no deduplication: every other row's positive is a draw from the
  unigram q, so Q = q.
- In-batch, deduplicated: a unique id d != p is in the pool with probability
  pi(d) = 1 - (1 - q(d))^(B-1) (the B-1 other rows are the draws), so the
  Horvitz-Thompson per-draw equivalent is pi(d) / n, already excluding p.
  Subsampling the pool to k' of its k ids multiplies pi by k'/k. The paper's
  released code (`NonameUntitled/logq`, train_in_batch*.py and train_mns*.py:
  `torch.unique` of the batch's targets, `randperm(...)[:k]`) draws from
  exactly this pool but corrects with the unigram q (`log_q="unigram"`):
  biased, since a head item is in the pool at most once while q counts its
  every occurrence; kept as an option to reproduce it.
- Uniform over |D| items: Q = 1/|D|.
- Mixed, n_u uniform + n_b in-batch: Q_mix = (n_u/n)/|D| + (n_b/n) q, more
  exactly the expected draws D(d) = n_u/|D| + n_b ((B-1)/B) q(d) over a row's
  slots, as log Q' = log D - log(valid negatives) (`mixture="exact"`), or the
  paper's code's simplification Q = q for every negative (`mixture="paper"`).
"""

import random
import types
from typing import Callable, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf

from logq_core import formulas
from logq_core import samplers
from logq_core.samplers import IN_BATCH_LOG_Q
from logq_core.samplers import MIXTURES  # noqa: F401  pylint: disable=unused-import
from logq_core.samplers import Negatives
from tfrs_logq import _ops
from tfrs_logq import _validation as v
from tfrs_logq import frequency as frequency_lib

EmbeddingFn = Callable[[tf.Tensor], tf.Tensor]


def accidental_hit_mask(positive_ids: tf.Tensor, negative_ids: tf.Tensor) -> tf.Tensor:
    """[batch, num_negatives] bool mask, False where a negative equals the row's positive.

    Args:
      positive_ids: [batch] (or [batch, 1]) ids of each row's positive.
      negative_ids: [num_negatives] shared or [batch, num_negatives] per-row ids.
    """
    positive_ids = v.id_vector("positive_ids", positive_ids)
    negative_ids = tf.convert_to_tensor(negative_ids)
    if positive_ids.dtype == tf.string:
        # Compare integer codes, not strings: one tf.unique over the ids instead of
        # [batch, num_negatives] string comparisons (about 1 s at batch 8192 on 2 cores).
        _, codes = tf.unique(tf.concat([positive_ids, tf.reshape(negative_ids, [-1])], 0))
        positive_ids, negative_ids = (
            codes[: tf.size(positive_ids)],
            tf.reshape(codes[tf.size(positive_ids) :], tf.shape(negative_ids)),
        )
    return formulas.accidental_hit_mask(_ops.TF, positive_ids, negative_ids)


class AccidentalHits(NamedTuple):
    """Which candidate columns carry a row's positive id, as codes rather than a mask.

    Attributes:
      codes: [num_candidates] int32, equal for equal ids: column j is an accidental hit of
        row i (i != j) where codes[i] == codes[j] (`hit_columns`).
      per_row: [num_queries] int32, the number of such columns of each row (its own
        column, the diagonal, left out).
    """

    codes: tf.Tensor
    per_row: tf.Tensor


def hit_columns(codes: tf.Tensor, num_rows) -> tf.Tensor:
    """[num_rows, num_candidates] bool, True where column j carries row i's id (the diagonal
    included), from `AccidentalHits.codes`."""
    return tf.equal(codes[:num_rows, tf.newaxis], codes[tf.newaxis, :])


def accidental_hits(candidate_ids: tf.Tensor, num_queries) -> AccidentalHits:
    """The accidental hits of in-batch columns: row i's positive is column i, and the other
    columns with its id are its hits.

    O(num_candidates log num_candidates), no [batch, num_candidates] mask: the task's fused
    loss compares the codes where it reads the logits (`tfrs_logq.losses.column_softmax_terms`).
    Integer ids are coded by a sort and a binary search (an id's code is its first position
    among the sorted ids), which XLA compiles, so that a step compiled whole
    (`jit_compile=True`) keeps its accidental hits; string ids, which XLA does not take, by
    one `tf.unique_with_counts`.

    Args:
      candidate_ids: [num_candidates] integer or string ids (checked by the caller).
      num_queries: the rows, num_queries <= num_candidates.
    """
    if candidate_ids.dtype == tf.string:
        _, codes, counts = tf.unique_with_counts(candidate_ids, out_idx=tf.int32)
        return AccidentalHits(codes, tf.gather(counts, codes[:num_queries]) - 1)
    ordered = tf.sort(candidate_ids)
    codes = tf.searchsorted(ordered, candidate_ids, side="left", out_type=tf.int32)
    ends = tf.searchsorted(ordered, candidate_ids[:num_queries], side="right", out_type=tf.int32)
    return AccidentalHits(codes, ends - codes[:num_queries] - 1)


def known_positive_mask(
    positive_ids: tf.Tensor,
    negative_ids: tf.Tensor,
    query_ids: Optional[tf.Tensor] = None,
    known_positive_ids: Optional[tf.Tensor] = None,
    valid_rows: Optional[tf.Tensor] = None,
    global_batch: bool = False,
) -> tf.Tensor:
    """[batch, num_negatives] bool, True where a negative is a known positive of its row.

    A row's known positives are its own positive, the positives of every row with the
    same query id (the other targets of a SASRec user's sequence, the other items of a
    two-tower user in the batch), and the row's `known_positive_ids` (shared by the rows
    of its query). The loss removes them from its sums but still counts them as draws
    (`logq_core.formulas.mask_known_positives`). Exact, by sorting and binary search
    (`logq_core.formulas.known_positive_ids_mask`): no [batch, batch] comparison.

    Args:
      positive_ids: [batch] (or [batch, 1]) integer or string ids of the rows' positives.
      negative_ids: [num_negatives] shared or [batch, num_negatives] per-row ids, of the
        kind of `positive_ids`.
      query_ids: optional [batch] (or [batch, 1]) integer or string query id of each row
        (the user, the sequence); None: every row is its own query.
      known_positive_ids: optional [batch, k] ids of each row's other known positives
        (a history). Pad with an id that is never a valid negative (the padding id).
      valid_rows: optional [batch] bool, False for padding rows: their positive and
        `known_positive_ids` are nobody's known positives.
      global_batch: under tf.distribute, the rows of every replica make the known set
        (for negatives drawn from the global batch); integer ids only (collectives carry
        no strings: string ids use the replica's own rows). No effect without replicas.
    """
    positive_ids = v.id_vector("positive_ids", positive_ids)
    negative_ids = tf.convert_to_tensor(negative_ids)
    if query_ids is not None:
        query_ids = v.id_vector("query_ids", query_ids)
    num_rows = tf.shape(positive_ids, out_type=tf.int64)[0]
    gather = (
        cross_replica_concat
        if global_batch
        and positive_ids.dtype != tf.string
        and (query_ids is None or tf.convert_to_tensor(query_ids).dtype != tf.string)
        else tf.identity
    )
    if query_ids is None:  # Each row its own query, numbered across replicas.
        query_ids = tf.range(num_rows)
        if gather is not tf.identity:
            context = tf.distribute.get_replica_context()
            counts = gather(tf.reshape(num_rows, [1]))
            query_ids += tf.reduce_sum(counts[: context.replica_id_in_sync_group])
    query_ids = tf.convert_to_tensor(query_ids)
    if query_ids.dtype == tf.string:
        _, query_ids = tf.unique(query_ids)
    query_ids = tf.cast(query_ids, tf.int64)
    if valid_rows is None:
        valid_rows = tf.ones_like(query_ids, tf.bool)
    known_queries, known_items, known_valid = (
        gather(query_ids),
        gather(positive_ids),
        gather(valid_rows),
    )
    if known_positive_ids is not None:
        per_row = tf.shape(known_positive_ids)[1]
        history = tf.convert_to_tensor(known_positive_ids)
        history = gather(
            history if history.dtype == tf.string else tf.cast(history, positive_ids.dtype)
        )
        known_queries, known_valid = (
            tf.concat([known_queries, tf.repeat(known_queries, per_row)], 0),
            tf.concat([known_valid, tf.repeat(known_valid, per_row)], 0),
        )
        known_items = tf.concat([known_items, tf.reshape(history, [-1])], 0)
    if known_items.dtype == tf.string:
        # Integer codes of every id involved: one tf.unique, as `accidental_hit_mask`.
        _, codes = tf.unique(tf.concat([known_items, tf.reshape(negative_ids, [-1])], 0))
        size = tf.size(known_items)
        known_items = codes[:size]
        negative_ids = tf.reshape(codes[size:], tf.shape(negative_ids))
    known_items, negative_ids = tf.cast(known_items, tf.int64), tf.cast(negative_ids, tf.int64)
    return formulas.known_positive_ids_mask(
        _ops.TF, query_ids, negative_ids, known_queries, known_items, known_valid
    )


def cross_replica_concat(tensor: tf.Tensor) -> tf.Tensor:
    """Every replica's `tensor` concatenated along axis 0, in replica order.

    The identity outside tf.distribute or with one replica. Inside a replica
    context it is `ReplicaContext.all_gather`, whose gradient sums the
    upstream gradients over replicas and hands each replica its own slice, so
    gradients flow back to the replica that produced each row. Replicas may
    hold different numbers of rows.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tensor
    if tensor.dtype == tf.bool:  # Collectives carry numbers only.
        return tf.cast(context.all_gather(tf.cast(tensor, tf.int32), axis=0), tf.bool)
    gathered = context.all_gather(tensor, axis=0)
    # all_gather's gradient fails on the IndexedSlices a later tf.gather yields (TF 2.20).
    return _densify_gradient(gathered) if gathered.dtype.is_floating else gathered


@tf.custom_gradient
def _densify_gradient(tensor: tf.Tensor):
    """The identity, whose gradient is converted to a dense tensor."""
    return tf.identity(tensor), tf.convert_to_tensor


def _subset_size(k: int, size: tf.Tensor, static_size: Optional[int] = None):
    """min(k, size): a Python int when the size is static (as XLA needs), else a tensor."""
    return (
        min(k, static_size) if static_size is not None else tf.minimum(tf.cast(k, tf.int32), size)
    )


def _random_subset(
    size: tf.Tensor,
    k: int,
    rng: tf.random.Generator,
    static_size: Optional[int] = None,
    valid: Optional[tf.Tensor] = None,
) -> tf.Tensor:
    """min(k, size) distinct positions of range(size), uniformly at random (a static
    number of them when `static_size` is known, as XLA needs). With `valid` ([size]
    bool), valid positions come first, uniformly among them; invalid ones fill the
    rest when fewer than k are valid."""
    return formulas.random_subset(
        _ops.TF, rng.uniform([size]), _subset_size(k, size, static_size), valid
    )


class NegativeSampler(tf.keras.layers.Layer):
    """Base class: holds the probability source and the random generator.

    The draws come from a `tf.random.Generator` whose state is a (non-trainable) variable
    of the layer: `model.save_weights`, `tf.train.Checkpoint` and Keras `BackupAndRestore`
    save and restore it, so a resumed run draws what the uninterrupted run would have.
    Create the sampler inside `strategy.scope()` under `tf.distribute` (each replica then
    draws its own stream).

    Args:
      probabilities: where per-draw item probabilities come from: a [num_items]
        tensor of probabilities, a callable mapping ids to probabilities, or a
        `tfrs_logq.frequency.FrequencyEstimator`. None means no log Q (only
        correction "none" can then be used).
      seed: the generator's seed (default: drawn from Python's `random`, which
        `tf.keras.utils.set_random_seed` seeds).
      **kwargs: standard Keras layer arguments.
    """

    def __init__(
        self,
        probabilities: frequency_lib.FrequencyLike = None,
        seed: Optional[int] = None,
        **kwargs,
    ):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.frequency = frequency_lib.as_frequency(probabilities)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ValueError(f"`seed` must be an integer or None; received seed={seed!r}.")
        self.seed = seed
        self._first_seed = seed if seed is not None else random.randint(0, 2**31 - 1)
        with tf.init_scope():
            self.rng = tf.random.Generator.from_seed(self._first_seed)

    # Whether each row draws its own negatives, and how many negatives a call gives a row
    # at most (None: as many as the batch holds): set by the samplers that know them.
    per_row = False
    num_negatives: Optional[int] = None

    @property
    def has_log_q(self) -> bool:
        """Whether the negatives carry a log Q (any correction but "none" needs one)."""
        return self.frequency is not None

    def reset(self) -> None:
        """Restarts the draws: the next calls draw what the first calls did."""
        self.rng.reset_from_seed(self._first_seed)

    def get_config(self):
        config = super().get_config()
        config.update(
            probabilities=(
                None if self.frequency is None else tf.keras.layers.serialize(self.frequency)
            ),
            seed=self.seed,
        )
        return config

    def _log_q(self, ids: tf.Tensor) -> Optional[tf.Tensor]:
        """The frequency source's log q of `ids`, checked to be log-probabilities.

        Every log Q a sampler returns is derived from these values (and those of
        `_log_inclusion_probability`) by formulas that keep them finite, so this check of
        the looked-up ids is the only one: the loss does not check the [batch, n] log Q
        again (`Negatives.log_q_checked`).
        """
        if self.frequency is None:
            return None
        return v.check_log_probabilities("probabilities.log_q(ids)", self.frequency.log_q(ids))

    def _log_inclusion_probability(self, ids: tf.Tensor, num_draws) -> tf.Tensor:
        """The frequency source's log inclusion probability of `ids`, checked as `_log_q`."""
        # Only `_checked_frequency` hands this out, and only when there is a frequency source.
        assert self.frequency is not None
        return v.check_log_probabilities(
            "probabilities.log_inclusion_probability(ids)",
            self.frequency.log_inclusion_probability(ids, num_draws),
        )

    def _checked_frequency(self):
        """The frequency source as `logq_core.formulas` reads it, its values checked."""
        if self.frequency is None:
            return None
        return types.SimpleNamespace(
            log_q=self._log_q, log_inclusion_probability=self._log_inclusion_probability
        )


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class InBatchSampler(NegativeSampler):
    """In-batch negatives: the batch's positives serve as every row's negatives.

    Example:

    >>> sampler = InBatchSampler(probabilities=item_probabilities)
    >>> negatives = sampler(positive_ids, candidate_ids, candidate_embeddings)

    Args:
      deduplicate: keep each distinct id once. Log Q is then the
        Horvitz-Thompson per-draw equivalent built from the inclusion
        probability 1 - (1 - q)^(B-1), and it already excludes the positive.
      max_pool_size: keep at most this many pool entries, chosen uniformly at
        random without replacement each call (after deduplication); log Q
        accounts for it. With `deduplicate` this is the paper's released pool:
        k distinct targets of the batch, drawn uniformly, shared by the rows.
      log_q: with `deduplicate`, "horvitz_thompson" (default: the unbiased
        per-draw equivalent above) or "unigram": the per-draw q of each id, as
        the paper's released code corrects its deduplicated pool (biased:
        `UnbiasednessTest.test_unigram_log_q_of_a_deduplicated_pool_is_biased`
        measures it). Without deduplication both are q, which is then exact.
      global_batch: under tf.distribute, draw from the global batch: the
        candidates (ids, embeddings, mask) of every replica are all-gathered
        (`cross_replica_concat`), gradients flow back to the replica that
        produced them, and accidental hits and log Q (B - 1 draws, B the global
        pool) refer to the global pool. A step on N replicas then computes the
        same per-example losses as one replica on the same global batch. No
        effect without replicas.
      probabilities, seed, kwargs: see `NegativeSampler`.
    """

    def __init__(
        self,
        deduplicate: bool = False,
        max_pool_size: Optional[int] = None,
        global_batch: bool = False,
        probabilities: frequency_lib.FrequencyLike = None,
        seed: Optional[int] = None,
        log_q: str = "horvitz_thompson",
        **kwargs,
    ):
        super().__init__(probabilities=probabilities, seed=seed, **kwargs)
        self.deduplicate = v.check_bool("deduplicate", deduplicate)
        self.log_q_mode = v.check_choice("log_q", log_q, IN_BATCH_LOG_Q)
        self.global_batch = v.check_bool("global_batch", global_batch)
        self.max_pool_size = v.check_positive_int("max_pool_size", max_pool_size, allow_none=True)

    @property
    def num_negatives(self) -> Optional[int]:  # type: ignore[override]  # shadows a class default
        return self.max_pool_size

    def call(
        self,
        positive_ids: tf.Tensor,
        candidate_ids: tf.Tensor,
        candidate_embeddings: Optional[tf.Tensor] = None,
        candidate_mask: Optional[tf.Tensor] = None,
        embedding_fn: Optional[EmbeddingFn] = None,
    ) -> Negatives:
        """Draws the negatives.

        Args:
          positive_ids: [batch] (or [batch, 1]) ids of each row's positive.
          candidate_ids: [pool] (or [pool, 1]) ids of the batch's positives (the
            pool; for a two-tower batch it is `positive_ids` itself; for a sequence
            batch, every valid target of the batch).
          candidate_embeddings: [pool, dim] their embeddings, or None.
          candidate_mask: optional [pool] bool, False for padding entries. With
            it (integer ids, or without deduplication) the pool keeps static
            shapes: padding and duplicates become masked slots, `ids` has
            min(max_pool_size, pool) entries (all of the pool without a cap),
            and XLA compiles the sampler once.
          embedding_fn: unused (in-batch negatives carry their embeddings).

        Returns:
          `Negatives`.
        """
        del embedding_fn
        positive_ids = v.id_vector("positive_ids", positive_ids)
        ids = v.id_vector("candidate_ids", candidate_ids)
        embeddings = candidate_embeddings
        if candidate_mask is not None:
            candidate_mask = v.bool_tensor("candidate_mask", candidate_mask, rank=1)
        if self.global_batch:
            ids = cross_replica_concat(ids)
            if embeddings is not None:
                embeddings = cross_replica_concat(embeddings)
            if candidate_mask is not None:
                candidate_mask = cross_replica_concat(candidate_mask)
        if candidate_mask is not None and (ids.dtype.is_integer or not self.deduplicate):
            return self._pool_of_slots(positive_ids, ids, embeddings, candidate_mask)
        if candidate_mask is not None:  # String ids, deduplicated: tf.unique needs them packed.
            ids = tf.boolean_mask(ids, candidate_mask)
            if embeddings is not None:
                embeddings = tf.boolean_mask(embeddings, candidate_mask)
        # The pool's draws for a row are the other entries of the batch.
        num_draws = tf.shape(ids)[0] - 1

        if self.deduplicate:
            ids, unique_index = tf.unique(ids)
            if embeddings is not None:
                first = tf.math.unsorted_segment_min(
                    tf.range(tf.shape(unique_index)[0]), unique_index, tf.shape(ids)[0]
                )
                embeddings = tf.gather(embeddings, first)

        pool_size = tf.shape(ids)[0]
        if self.max_pool_size is not None:
            keep = _random_subset(
                pool_size, self.max_pool_size, self.rng, None if self.deduplicate else ids.shape[0]
            )
            ids = tf.gather(ids, keep)
            if embeddings is not None:
                embeddings = tf.gather(embeddings, keep)
        return self._finish(
            positive_ids,
            ids,
            embeddings,
            accidental_hit_mask(positive_ids, ids),
            num_draws,
            tf.shape(ids)[0],
            pool_size,
        )

    def _pool_of_slots(self, positive_ids, ids, embeddings, slots):
        """The pool with static shapes: padding and duplicates stay in place as masked slots.

        The same law as packing the valid entries first: k slots drawn uniformly
        among the valid ones (the first of each distinct id with `deduplicate`).
        """
        keys = subset_size = None
        if self.max_pool_size is not None:
            subset_size = _subset_size(self.max_pool_size, tf.shape(ids)[0], ids.shape[0])
            keys = self.rng.uniform(tf.shape(ids)[:1])
        keep, kept_ids, mask, num_draws, kept, pool_size = formulas.pool_of_slots(
            _ops.TF,
            positive_ids,
            ids,
            slots,
            deduplicate=self.deduplicate,
            sentinel=tf.constant(ids.dtype.max, ids.dtype),
            size=tf.shape(ids)[0],
            keys=keys,
            subset_size=subset_size,
            hit_mask=accidental_hit_mask,
        )
        if keep is not None and embeddings is not None:
            embeddings = tf.gather(embeddings, keep)
        return self._finish(positive_ids, kept_ids, embeddings, mask, num_draws, kept, pool_size)

    def _finish(self, positive_ids, ids, embeddings, mask, num_draws, kept, pool_size):
        """`Negatives` with the log Q of the pool: `kept` of its `pool_size` entries drawn, the
        pool made of `num_draws` + 1 batch entries."""
        log_q, positive_log_q, excludes = formulas.in_batch_log_q(
            _ops.TF,
            self._checked_frequency(),
            positive_ids,
            ids,
            mask,
            num_draws,
            kept,
            pool_size,
            horvitz_thompson=self.deduplicate and self.log_q_mode == "horvitz_thompson",
        )
        expected_draws = (
            None
            if self.deduplicate
            else formulas.expected_in_batch_draws(_ops.TF, num_draws, kept, pool_size)
        )
        return Negatives(
            ids,
            embeddings,
            mask,
            log_q,
            positive_log_q,
            excludes,
            log_q_checked=True,
            expected_draws=expected_draws,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            deduplicate=self.deduplicate,
            max_pool_size=self.max_pool_size,
            global_batch=self.global_batch,
            log_q=self.log_q_mode,
        )
        return config


# Kept under its name here: `logq_core.samplers.lookup_vocabulary`, shared with keras_logq.
lookup_vocabulary = samplers.lookup_vocabulary


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class UniformSampler(NegativeSampler):
    """Negatives drawn uniformly, with replacement, from the catalog: the integer ids
    [first_id, first_id + num_items), or the ids of a `vocabulary`.

    By default the draws are shared by every row of the batch (TFRS's sampled
    softmax: one [batch, num_negatives] logits matmul). With `per_row=True`
    each row draws its own `num_negatives` (SASRec's BCE and gSASRec's gBCE
    draw per position); that costs batch x num_negatives embedding lookups.
    Q = 1 / num_items either way.

    With a `vocabulary` (string ids, or sparse integer ids) the draws are its ids, in the
    item tower's own id space: with string ids, `candidate_embedding_fn` is the string-keyed
    item tower as it is, and the out-of-vocabulary row of its lookup is never drawn.
    Q = 1 / len(vocabulary) exactly. `UniformSampler.from_lookup(lookup, num_negatives)`
    takes the vocabulary of the tower's `StringLookup`:

    >>> item_tower = tf.keras.Sequential([tf.keras.layers.StringLookup(vocabulary=movies),
    ...                                   tf.keras.layers.Embedding(len(movies) + 1, 32)])
    >>> sampler = UniformSampler.from_lookup(item_tower.layers[0], num_negatives=128)
    >>> task = LogQRetrieval(sampler=sampler, correction="improved")
    >>> task(query, item_tower(ids), candidate_ids=ids, candidate_embedding_fn=item_tower)

    Args:
      num_items: catalog size |D| (None with a `vocabulary`: its size).
      num_negatives: number of draws per call (per row when `per_row`).
      first_id: smallest id of an integer catalog (e.g. 1 when id 0 is padding); 0 with a
        `vocabulary`.
      seed, kwargs: see `NegativeSampler`. Uniform sampling needs no
        `probabilities`.
      per_row: draw separately for every row of the batch.
      vocabulary: optional list of distinct string (or integer) ids, the catalog, without
        out-of-vocabulary or mask tokens (`logq_core.samplers.uniform_catalog`). The
        positives must be ids of the same kind.
    """

    def __init__(
        self,
        num_items: Optional[int] = None,
        num_negatives: Optional[int] = None,
        first_id: int = 0,
        seed: Optional[int] = None,
        per_row: bool = False,
        vocabulary: Optional[Sequence] = None,
        **kwargs,
    ):
        kwargs.pop("probabilities", None)  # Present in configs; uniform needs none.
        super().__init__(probabilities=None, seed=seed, **kwargs)
        self.num_items, self.vocabulary = samplers.uniform_catalog(num_items, first_id, vocabulary)
        self.num_negatives: int = v.check_positive_int("num_negatives", num_negatives)
        self.first_id = first_id
        self.per_row = v.check_bool("per_row", per_row)
        self._vocabulary_ids = None
        if self.vocabulary is not None:
            with tf.init_scope():
                self._vocabulary_ids = tf.constant(
                    self.vocabulary, tf.string if isinstance(self.vocabulary[0], str) else tf.int64
                )

    @classmethod
    def from_lookup(cls, lookup, num_negatives: int, **kwargs) -> "UniformSampler":
        """A sampler over the vocabulary of `lookup` (the item tower's `StringLookup` or
        `IntegerLookup`), its out-of-vocabulary and mask tokens left out
        (`lookup_vocabulary`); `**kwargs` as the constructor's."""
        return cls(num_negatives=num_negatives, vocabulary=lookup_vocabulary(lookup), **kwargs)

    @property
    def has_log_q(self) -> bool:
        return True  # 1 / num_items, with or without probabilities.

    @property
    def log_uniform_q(self) -> float:
        return formulas.log_uniform_q(self.num_items)

    def call(
        self,
        positive_ids: tf.Tensor,
        candidate_ids: Optional[tf.Tensor] = None,
        candidate_embeddings: Optional[tf.Tensor] = None,
        candidate_mask: Optional[tf.Tensor] = None,
        embedding_fn: Optional[EmbeddingFn] = None,
    ) -> Negatives:
        """Draws the negatives.

        Args:
          positive_ids: [batch] (or [batch, 1]) integer ids of each row's positive; with a
            `vocabulary`, ids of its kind (strings for a string vocabulary).
          candidate_ids, candidate_embeddings, candidate_mask: unused.
          embedding_fn: callable mapping ids of any shape to embeddings with a
            trailing `dim` axis, such as the item tower. Without it
            `embeddings` is None.

        Returns:
          `Negatives`; with `per_row`, ids [batch, num_negatives] and embeddings
          [batch, num_negatives, dim].
        """
        del candidate_ids, candidate_embeddings, candidate_mask
        positive_ids = v.id_vector("positive_ids", positive_ids)
        shape = (
            [tf.shape(positive_ids)[0], self.num_negatives]
            if self.per_row
            else [self.num_negatives]
        )
        if self.vocabulary is not None:
            ids = self._draw_from_vocabulary(positive_ids, shape)
        else:
            if not positive_ids.dtype.is_integer:
                raise TypeError(
                    "UniformSampler draws integer ids; received positive_ids with dtype "
                    f"{positive_ids.dtype.name}. Map string ids to integers first, or draw "
                    "from their vocabulary (`vocabulary=`, `UniformSampler.from_lookup`)."
                )
            # int32 draws whenever the ids fit: 819,200 draws took 2.3-3.3 ms as int32
            # against 5.5-5.7 ms as int64 without XLA, 4.6-5.4 against 6.4-6.9 ms with it
            # (README, Speed).
            draw_dtype = (
                tf.int32
                if self.first_id + self.num_items <= np.iinfo(np.int32).max
                else positive_ids.dtype
            )
            ids = tf.cast(
                self.rng.uniform(
                    shape,
                    minval=self.first_id,
                    maxval=self.first_id + self.num_items,
                    dtype=draw_dtype,
                ),
                positive_ids.dtype,
            )
        embeddings = None if embedding_fn is None else embedding_fn(ids)
        mask = accidental_hit_mask(positive_ids, ids)
        log_q = tf.fill(tf.shape(ids), self.log_uniform_q)
        positive_log_q = tf.fill(tf.shape(positive_ids), self.log_uniform_q)
        return Negatives(
            ids,
            embeddings,
            mask,
            log_q,
            positive_log_q,
            False,
            log_q_checked=True,
            expected_draws=float(self.num_negatives),
        )

    def _draw_from_vocabulary(self, positive_ids: tf.Tensor, shape) -> tf.Tensor:
        """Ids of the vocabulary at uniform positions, of the positives' dtype."""
        assert self.vocabulary is not None  # `call` draws from the vocabulary only when set.
        samplers.check_vocabulary_ids("UniformSampler", self.vocabulary, positive_ids.dtype.name)
        positions = self.rng.uniform(shape, minval=0, maxval=self.num_items, dtype=tf.int32)
        return tf.cast(tf.gather(self._vocabulary_ids, positions), positive_ids.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_items=self.num_items,
            num_negatives=self.num_negatives,
            first_id=self.first_id,
            per_row=self.per_row,
            vocabulary=self.vocabulary,
        )
        return config


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class MixedSampler(NegativeSampler):
    """Mixed negative sampling (Yang et al. 2020): uniform draws plus in-batch negatives.

    The paper's setting is 128 uniform + 128 in-batch. By default the in-batch
    half is not deduplicated (each column is a draw from q); it is subsampled
    to `num_in_batch` entries when the pool is larger, and the uniform draws
    are shared by the batch's rows.

    The paper's released mixed scripts (`NonameUntitled/logq`,
    train_mns*.py and train_in_batch_logq_new.py) draw the uniform half per
    position (`per_row=True`: the data loader's `randint(1, pad, [B, L, k])`),
    the in-batch half from the deduplicated targets of the batch
    (`deduplicate=True`), and correct every negative, the uniform ones too,
    with the unigram q (`mixture="paper"`).

    With a `vocabulary` (string or sparse integer ids, see `UniformSampler`), the uniform
    half draws its ids, in the item tower's own id space, and |D| is its size; the
    probabilities must then read ids of that kind (a `CountMinSketchEstimator`, a
    `StaticFrequency` with the vocabulary). `MixedSampler.from_lookup(lookup, num_uniform,
    num_in_batch, probabilities=...)` takes the vocabulary of the tower's `StringLookup`.

    Args:
      num_items: catalog size |D| of the uniform half (None with a `vocabulary`).
      num_uniform: n_u, uniform draws per call (per row with `per_row`).
      num_in_batch: n_b, the most in-batch negatives kept.
      mixture: "exact" uses the mixture proposal for every negative: its
        expected draws over a row's slots, D(d) = n_u/|D| + E_b q(d) with E_b =
        n_b (B - 1)/B the in-batch slots that are other rows' positives, which
        makes the partition-function estimate sum_i m_i e^{s_i} / D(d_i) exactly
        unbiased (log Q is then log D - log n over the row's n valid negatives,
        already without the positive: `logq_core.formulas.mixture_log_q`);
        "paper" uses the unigram q for every negative, as the paper's released
        code does (biased for the uniform half; kept to reproduce it).
      first_id: smallest id of the catalog, as in `UniformSampler`.
      global_batch: the in-batch half draws from the global batch (see
        `InBatchSampler`); the uniform half is drawn on each replica.
      probabilities, seed, kwargs: see `NegativeSampler`. Both mixtures need
        probabilities for any correction.
      deduplicate: the in-batch half keeps each distinct id once (see
        `InBatchSampler`). Only with `mixture="paper"`: the exact mixture
        would need the deduplicated pool's inclusion probability at the
        uniform draws too, which is not implemented.
      per_row: every row draws its own `num_uniform` uniform negatives (see
        `UniformSampler`). `ids`, `mask` and `log_q` are then
        [batch, num_uniform + num_in_batch], and `embeddings` the pair
        (uniform [batch, num_uniform, dim], in-batch [num_in_batch, dim]),
        whose scores `LogQRetrieval` concatenates (the in-batch half is not
        copied per row).
      vocabulary: optional catalog of the uniform half, as in `UniformSampler`.
    """

    def __init__(
        self,
        num_items: Optional[int] = None,
        num_uniform: Optional[int] = None,
        num_in_batch: Optional[int] = None,
        mixture: str = "exact",
        first_id: int = 0,
        global_batch: bool = False,
        probabilities: frequency_lib.FrequencyLike = None,
        seed: Optional[int] = None,
        deduplicate: bool = False,
        per_row: bool = False,
        vocabulary: Optional[Sequence] = None,
        **kwargs,
    ):
        super().__init__(probabilities=probabilities, seed=seed, **kwargs)
        samplers.check_mixed(mixture, deduplicate)
        self.mixture = mixture
        v.check_positive_int("num_uniform", num_uniform)
        v.check_positive_int("num_in_batch", num_in_batch)
        self.uniform = UniformSampler(
            num_items,
            num_uniform,
            first_id=first_id,
            seed=seed,
            per_row=per_row,
            vocabulary=vocabulary,
            name="uniform",
        )
        # No probabilities: this sampler reads the in-batch half's ids, not its log Q, and
        # looks the log Q of every negative and positive up itself, once per step.
        self.in_batch = InBatchSampler(
            deduplicate=deduplicate,
            max_pool_size=num_in_batch,
            global_batch=global_batch,
            log_q="unigram",
            seed=None if seed is None else seed + 1,
            name="in_batch",
        )

    @classmethod
    def from_lookup(cls, lookup, num_uniform: int, num_in_batch: int, **kwargs) -> "MixedSampler":
        """A sampler whose uniform half draws from the vocabulary of `lookup` (the item
        tower's `StringLookup` or `IntegerLookup`), its out-of-vocabulary and mask tokens left
        out (`lookup_vocabulary`); `**kwargs` as the constructor's (`probabilities`, ...)."""
        return cls(
            num_uniform=num_uniform,
            num_in_batch=num_in_batch,
            vocabulary=lookup_vocabulary(lookup),
            **kwargs,
        )

    @property
    def vocabulary(self) -> Optional[list]:
        """The uniform half's vocabulary, or None (integer ids)."""
        return self.uniform.vocabulary

    @property
    def per_row(self) -> bool:  # type: ignore[override]  # shadows a class default
        return self.uniform.per_row

    def reset(self) -> None:
        """Restarts the draws of both halves: the next calls draw what the first calls did."""
        super().reset()
        self.uniform.reset()
        self.in_batch.reset()

    @property
    def num_negatives(self) -> int:  # type: ignore[override]  # shadows a class default
        # `__init__` checked num_in_batch, the in-batch half's max_pool_size, a positive int.
        assert self.in_batch.max_pool_size is not None
        return self.uniform.num_negatives + self.in_batch.max_pool_size

    def call(
        self,
        positive_ids: tf.Tensor,
        candidate_ids: tf.Tensor,
        candidate_embeddings: Optional[tf.Tensor] = None,
        candidate_mask: Optional[tf.Tensor] = None,
        embedding_fn: Optional[EmbeddingFn] = None,
    ) -> Negatives:
        """Draws the negatives: the uniform ones first, then the in-batch ones.

        Arguments as in `InBatchSampler.call` and `UniformSampler.call` ([batch, 1] ids
        taken as [batch]).
        """
        positive_ids = v.id_vector("positive_ids", positive_ids)
        uniform = self.uniform(positive_ids, embedding_fn=embedding_fn)
        in_batch = self.in_batch(
            positive_ids, candidate_ids, candidate_embeddings, candidate_mask=candidate_mask
        )
        per_row = self.uniform.per_row
        in_batch_ids = in_batch.ids
        if per_row:
            in_batch_ids = tf.broadcast_to(
                in_batch_ids[tf.newaxis, :], [tf.shape(uniform.ids)[0], tf.shape(in_batch.ids)[0]]
            )
        ids = tf.concat([uniform.ids, in_batch_ids], axis=-1)
        embeddings = None
        if uniform.embeddings is not None and in_batch.embeddings is not None:
            in_batch_embeddings = tf.cast(in_batch.embeddings, uniform.embeddings.dtype)
            embeddings = (
                (uniform.embeddings, in_batch_embeddings)
                if per_row
                else tf.concat([uniform.embeddings, in_batch_embeddings], axis=0)
            )
        mask = tf.concat([uniform.mask, in_batch.mask], axis=1)
        if self.frequency is None:
            return Negatives(ids, embeddings, mask, None, None, False)

        log_q_ids, positive_log_q = formulas.log_q_of_both(_ops.TF, self._log_q, ids, positive_ids)
        if self.mixture == "paper":
            return Negatives(
                ids, embeddings, mask, log_q_ids, positive_log_q, False, log_q_checked=True
            )

        log_q_mix, positive_log_q = formulas.mixture_log_q(
            _ops.TF,
            log_q_ids,
            positive_log_q,
            mask,
            self.uniform.num_items,
            uniform.expected_draws,
            in_batch.expected_draws,
        )
        return Negatives(ids, embeddings, mask, log_q_mix, positive_log_q, True, log_q_checked=True)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_items=self.uniform.num_items,
            num_uniform=self.uniform.num_negatives,
            num_in_batch=self.in_batch.max_pool_size,
            mixture=self.mixture,
            first_id=self.uniform.first_id,
            global_batch=self.in_batch.global_batch,
            deduplicate=self.in_batch.deduplicate,
            per_row=self.uniform.per_row,
            vocabulary=self.uniform.vocabulary,
        )
        return config


SAMPLERS = {"in_batch": InBatchSampler, "uniform": UniformSampler, "mixed": MixedSampler}


def make_sampler(negatives: str, **settings) -> NegativeSampler:
    """The sampler `negatives` ("in_batch", "uniform" or "mixed") that `settings` describe.

    The one factory of the library and the pipelines: one set of settings
    serves every kind, each kind taking what it uses
    (`logq_core.samplers.sampler_arguments` documents them).

    Example:

    >>> sampler = make_sampler("mixed", num_negatives=256, num_items=10_000, first_id=1,
    ...                        probabilities=frequency)   # 128 uniform + 128 in-batch
    """
    kind, arguments = samplers.sampler_arguments(negatives, **settings)
    return SAMPLERS[kind](**arguments)
