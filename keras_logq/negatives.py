"""Negative samplers for Keras 3: in-batch (plain, deduplicated, the paper's pool), uniform,
mixed; each returns `Negatives` with the per-draw-equivalent log Q of docs/design.md.

The pool logic and every log Q (Horvitz-Thompson, the exact mixture) are
`logq_core.formulas`, which `tfrs_logq.negatives` runs on TensorFlow. Pools
keep static shapes (padding, duplicates and dropped entries are masked slots,
never removed), so every backend compiles the sampler once. Draws come from a
`keras.random.SeedGenerator` held by the layer, whose state is saved with it.
Integer ids only (Keras 3 has string tensors on TensorFlow only): the uniform draws come
from ids [first_id, first_id + num_items) or from a sparse integer `vocabulary`
(`from_lookup` draws a `StringLookup`'s indices, for string ids mapped before the model).
Under `keras.distribution` on JAX the pool is the global batch (see `InBatchSampler`).
The maths is `logq_core`'s, shared with tfrs_logq's samplers: both libraries draw the
same negatives with the same log Q.
"""

from typing import Any, Callable, Dict, Optional, Sequence

import keras
import numpy as np
from keras import ops

from keras_logq import _ops as k
from keras_logq import frequency as frequency_lib
from logq_core import checks
from logq_core import formulas
from logq_core import samplers
from logq_core.samplers import IN_BATCH_LOG_Q
from logq_core.samplers import Negatives


class NegativeSampler(keras.layers.Layer):
    """Base class: the probability source and the seed generator.

    Inputs are checked before anything is broadcast (dtype, rank, and sizes that must
    agree, each error naming the argument and the shapes received). Ids are integers; with
    `probabilities` given as an array (a `StaticFrequency`), an id outside
    [0, num_items) reads a NaN log Q, so the loss is NaN, on every backend (the id rule of
    `logq_core.checks.table_rows`); a masked-out slot (`candidate_mask` False) is never
    read into the loss, so padding may hold any id. Hashed estimators take any id.

    Args:
      probabilities: a [num_items] array of probabilities, a
        `keras_logq.frequency` estimator, or None (then only correction "none").
      seed: seed of the draws (None: Keras's global seed).
      **kwargs: standard Keras layer arguments.
    """

    def __init__(self, probabilities=None, seed: Optional[int] = None, **kwargs):
        super().__init__(**kwargs)
        self.frequency = frequency_lib.as_frequency(probabilities)
        self.seed = checks.check_seed("seed", seed)
        self.seed_generator = keras.random.SeedGenerator(seed)
        # The class the user called, for error messages (a MixedSampler's halves name it).
        self._caller = type(self).__name__
        self.built = True

    def _log_q(self, ids):
        return None if self.frequency is None else self.frequency.log_q(ids)

    def get_config(self):
        config = super().get_config()
        config.update(
            probabilities=(
                None
                if self.frequency is None
                else keras.saving.serialize_keras_object(self.frequency)
            ),
            seed=self.seed,
        )
        return config


@keras.saving.register_keras_serializable(package="keras_logq")
class InBatchSampler(NegativeSampler):
    """In-batch negatives: the batch's positives serve as every row's negatives.

    Any batch size, eager or compiled (`jax.jit`, `tf.function` with or without XLA), in
    `fit`, `evaluate` and `predict`: a batch whose size TensorFlow traces as None (a
    `tf.data` pipeline's partial last batch, a `PyDataset`) is drawn from as any other.

    The pool is the batch the step sees. Under `keras.distribution` on JAX
    (`DataParallel`, or `ModelParallel` with a `LayoutMap` sharding the tables) Keras traces
    the train step once on the global batch and XLA's SPMD partitioner splits the rows over
    the devices, so the pool is the global batch and the gradients of each negative reach
    the device that holds its row: the loss, gradients, weights and draws equal a
    single-device run of the same global batch (`tests_keras3/test_distribution.py`). The
    draws are the same whatever the sharding (JAX's random bits do not depend on it).

    Args:
      deduplicate: keep each distinct id once; log Q is then the
        Horvitz-Thompson per-draw equivalent of the inclusion probability
        1 - (1 - q)^(B-1), which already excludes the positive.
      max_pool_size: keep at most this many pool entries, uniformly at random.
        With `deduplicate` this is the paper's released pool. It is also the pool's
        static size when the batch's is known only as the step runs (see `call`):
        a short batch's missing slots are masked, so a compiled step keeps one shape.
      log_q: with `deduplicate`, "horvitz_thompson" (unbiased) or "unigram"
        (the paper's released code; biased).
      probabilities, seed, kwargs: see `NegativeSampler`.
    """

    def __init__(
        self,
        deduplicate: bool = False,
        max_pool_size: Optional[int] = None,
        log_q: str = "horvitz_thompson",
        probabilities=None,
        seed: Optional[int] = None,
        **kwargs,
    ):
        super().__init__(probabilities=probabilities, seed=seed, **kwargs)
        self.deduplicate = checks.check_bool("deduplicate", deduplicate)
        self.max_pool_size = checks.check_positive_int(
            "max_pool_size", max_pool_size, allow_none=True
        )
        self.log_q_mode = checks.check_choice("log_q", log_q, IN_BATCH_LOG_Q)

    def call(
        self,
        positive_ids,
        candidate_ids,
        candidate_embeddings=None,
        candidate_mask=None,
        embedding_fn=None,
    ) -> Negatives:
        """Draws the negatives.

        The pool may have a size known only when the step runs (TensorFlow traces a
        `tf.data` batch, a `PyDataset` or a numpy input with a partial last batch as
        [None]): with `max_pool_size` it then has exactly `max_pool_size` slots, a
        short batch's missing ones masked, so its shape stays static; without, it has
        one slot per candidate. Padding slots and masked candidates are never drawn
        and never counted in log Q.

        Args:
          positive_ids: [batch] integer ids of each row's positive.
          candidate_ids: [pool] ids of the batch's positives (two-tower: the
            positive ids themselves; sequences: every target of the batch, given
            flat or as [batch, length], which is flattened).
          candidate_embeddings: optional [pool, dim] (or [batch, length, dim]) their
            embeddings.
          candidate_mask: optional bool of `candidate_ids`' shape, False for padding.
          embedding_fn: unused.
        """
        del embedding_fn
        positive_ids = k.ids_tensor("positive_ids", positive_ids)
        ids, slots, candidate_embeddings = self._candidates(
            candidate_ids, candidate_mask, candidate_embeddings
        )
        size = ids.shape[0]
        keys = subset_size = None
        if self.max_pool_size is not None:
            if size is None:
                # A short batch: pad to `max_pool_size` masked slots, so that the kept
                # pool below has that static size whatever the batch.
                ids, slots, candidate_embeddings = _pad_pool(
                    ids, slots, candidate_embeddings, self.max_pool_size
                )
            subset_size = self.max_pool_size if size is None else min(self.max_pool_size, size)
            keys = keras.random.uniform(ops.shape(ids)[:1], seed=self.seed_generator)
        if size is None:
            size = ops.shape(ids)[0]
        keep, ids, mask, num_draws, kept, pool_size = formulas.pool_of_slots(
            k.OPS,
            positive_ids,
            ids,
            slots,
            deduplicate=self.deduplicate,
            sentinel=np.iinfo(keras.backend.standardize_dtype(ids.dtype)).max,
            size=size,
            keys=keys,
            subset_size=subset_size,
        )
        embeddings = candidate_embeddings
        if keep is not None and embeddings is not None:
            embeddings = ops.take(embeddings, keep, axis=0)
        log_q, positive_log_q, excludes = formulas.in_batch_log_q(
            k.OPS,
            self.frequency,
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
            else formulas.expected_in_batch_draws(k.OPS, num_draws, kept, pool_size)
        )
        return Negatives(
            ids, embeddings, mask, log_q, positive_log_q, excludes, expected_draws=expected_draws
        )

    def _candidates(self, candidate_ids, candidate_mask, candidate_embeddings):
        """([pool] ids, [pool] bool slots, [pool, dim] embeddings or None): the candidates
        checked (before anything is broadcast) and flattened."""
        ids = k.ids_tensor("candidate_ids", candidate_ids, rank=None)
        shape = k.TENSORS.shape(ids)
        if shape is None or len(shape) == 0:
            raise ValueError(
                f"{self._caller} needs `candidate_ids` of rank 1 ([pool]) or more ([batch, "
                "length], flattened), of known rank; received candidate_ids with shape "
                f"{'unknown' if shape is None else '()'}."
            )
        if candidate_mask is not None:
            candidate_mask = k.bool_tensor("candidate_mask", candidate_mask, rank=len(shape))
            k.check_same_shape("candidate_mask", candidate_mask, "candidate_ids", ids)
        if candidate_embeddings is not None:
            candidate_embeddings = k.float_tensor(
                "candidate_embeddings", candidate_embeddings, rank=len(shape) + 1, cast=False
            )
            for axis in range(len(shape)):
                k.check_compatible_dim(
                    "candidate_embeddings", candidate_embeddings, axis, "candidate_ids", ids, axis
                )
        if len(shape) > 1:
            ids = ops.reshape(ids, (-1,))
            if candidate_mask is not None:
                candidate_mask = ops.reshape(candidate_mask, (-1,))
            if candidate_embeddings is not None:
                candidate_embeddings = ops.reshape(
                    candidate_embeddings, (-1, candidate_embeddings.shape[-1])
                )
        slots = ops.ones(ops.shape(ids)[:1], "bool") if candidate_mask is None else candidate_mask
        return ids, slots, candidate_embeddings

    def get_config(self):
        config = super().get_config()
        config.update(
            deduplicate=self.deduplicate, max_pool_size=self.max_pool_size, log_q=self.log_q_mode
        )
        return config


def _pad_pool(ids, slots, embeddings, min_size: int):
    """The pool with masked slots appended up to `min_size` slots (none when it has as
    many), for a pool whose size is known only when the step runs."""
    missing = ops.maximum(min_size - ops.shape(ids)[0], 0)
    ids = ops.concatenate([ids, ops.zeros((missing,), ids.dtype)], axis=0)
    slots = ops.concatenate([slots, ops.zeros((missing,), "bool")], axis=0)
    if embeddings is not None:
        embeddings = ops.concatenate(
            [embeddings, ops.zeros((missing, embeddings.shape[-1]), embeddings.dtype)], axis=0
        )
    return ids, slots, embeddings


def _integer_catalog(num_items, first_id, vocabulary):
    """`logq_core.samplers.uniform_catalog` for keras_logq, which draws integer ids only: a
    vocabulary of strings is refused, saying what strings need."""
    num_items, vocabulary = samplers.uniform_catalog(num_items, first_id, vocabulary)
    if vocabulary is not None and isinstance(vocabulary[0], str):
        raise TypeError(
            "keras_logq's samplers draw integer ids: Keras 3 has string tensors on the "
            "TensorFlow backend only, and JAX and PyTorch none. Map the strings to integers "
            "before the model (a StringLookup in the input pipeline) and draw its indices "
            "(`from_lookup(lookup, ...)`), or give the integer ids themselves as the "
            f"vocabulary; received a vocabulary of strings (first {vocabulary[:3]!r})."
        )
    return num_items, vocabulary


@keras.saving.register_keras_serializable(package="keras_logq")
class UniformSampler(NegativeSampler):
    """Negatives drawn uniformly, with replacement, from the catalog: the integer ids
    [first_id, first_id + num_items), or the integer ids of a `vocabulary`.

    Q = 1 / num_items (the vocabulary's size with one) exactly. Shared by the rows by
    default; `per_row` draws `num_negatives` for every row.

    A `vocabulary` is a sparse integer catalog: the distinct ids that are items (raw
    catalog ids with gaps, an `IntegerLookup`'s tokens), in the item tower's own id space,
    so the ids drawn go to the tower (`embedding_fn`) as they are and no id outside the
    vocabulary is ever drawn. Keras 3 has string tensors on the TensorFlow backend only, so
    keras_logq draws integer ids on every backend: string ids go through a `StringLookup`
    in the input pipeline (`tf.data`), the tower takes its indices, and
    `UniformSampler.from_lookup(lookup, num_negatives)` draws the indices of its items,
    never its out-of-vocabulary (or mask) index, with Q = 1 / (its number of items):

    >>> lookup = keras.layers.StringLookup(vocabulary=movie_titles)  # index 0: [UNK]
    >>> dataset = dataset.map(lambda x: {**x, "movie": lookup(x["movie_title"])})
    >>> sampler = UniformSampler.from_lookup(lookup, num_negatives=128)  # ids 1..V

    Args:
      num_items: catalog size |D| (None with a `vocabulary`: its size).
      num_negatives: draws per call (per row with `per_row`).
      first_id: smallest id (1 when id 0 is padding); 0 with a `vocabulary`.
      per_row: draw separately for every row.
      seed, kwargs: see `NegativeSampler`.
      vocabulary: optional list of distinct integer ids, the catalog, without the lookup's
        out-of-vocabulary or mask token (`logq_core.samplers.uniform_catalog`); the
        positives' dtype must hold them.
    """

    def __init__(
        self,
        num_items: Optional[int] = None,
        num_negatives: Optional[int] = None,
        first_id: int = 0,
        per_row: bool = False,
        seed: Optional[int] = None,
        vocabulary: Optional[Sequence[int]] = None,
        **kwargs,
    ):
        kwargs.pop("probabilities", None)
        super().__init__(probabilities=None, seed=seed, **kwargs)
        self.num_items, self.vocabulary = _integer_catalog(num_items, first_id, vocabulary)
        self.num_negatives = checks.check_positive_int("num_negatives", num_negatives)
        # The vocabulary as an array of each dtype drawn, checked once: a call in eager mode
        # (PyTorch, run_eagerly) would otherwise walk the list, about 90 ms at 1M ids.
        self._vocabularies: Dict[Any, Any] = {}
        self.first_id = first_id
        self.per_row = checks.check_bool("per_row", per_row)

    @classmethod
    def from_lookup(
        cls, lookup, num_negatives: int, draw: str = "indices", **kwargs
    ) -> "UniformSampler":
        """A sampler over the items of `lookup` (a Keras `StringLookup` or `IntegerLookup`),
        its out-of-vocabulary and mask tokens never drawn
        (`logq_core.samplers.lookup_catalog`).

        Args:
          lookup: the lookup layer, adapted or given its vocabulary.
          num_negatives: draws per call.
          draw: "indices" (the ids the lookup gives its items, for a tower that takes the
            lookup's output: the way string ids reach a model on every backend) or
            "tokens" (an `IntegerLookup`'s integer items themselves, for a tower that
            starts with the lookup; a `StringLookup`'s strings are refused).
          **kwargs: as the constructor's (`per_row`, `seed`, ...).
        """
        return cls(num_negatives=num_negatives, **samplers.lookup_catalog(lookup, draw), **kwargs)

    def _vocabulary_ids(self, dtype: str):
        """The vocabulary as ids of `dtype`, after `check_vocabulary_ids`: the checked numpy
        array is kept per dtype and, on PyTorch, the tensor made from it per device, so that
        an eager step neither checks, converts nor copies the catalog. A tensor on torch's
        "meta" device (Keras's symbolic build, which holds no data) is never kept."""
        array = self._vocabularies.get(dtype)
        if array is None:
            samplers.check_vocabulary_ids(self._caller, self.vocabulary, dtype)
            array = self._vocabularies[dtype] = np.asarray(self.vocabulary, dtype)
        if keras.backend.backend() != "torch":  # Graph backends embed it once per trace.
            return ops.convert_to_tensor(array)
        from keras.src.backend.torch import core  # pylint: disable=import-outside-toplevel

        device = str(core.get_device())
        tensor = self._vocabularies.get((dtype, device))
        if tensor is None:
            tensor = ops.convert_to_tensor(array)
            if tensor.device.type != "meta":
                self._vocabularies[(dtype, device)] = tensor
        return tensor

    def call(
        self,
        positive_ids,
        candidate_ids=None,
        candidate_embeddings=None,
        candidate_mask=None,
        embedding_fn: Optional[Callable] = None,
    ) -> Negatives:
        """Draws the negatives; `embedding_fn` maps ids to embeddings (the item tower).
        The candidates are not read (uniform draws need none). With a `vocabulary` the ids
        drawn are of the positives' dtype, which must hold every id of the vocabulary."""
        del candidate_ids, candidate_embeddings, candidate_mask
        positive_ids = k.ids_tensor("positive_ids", positive_ids)
        if embedding_fn is not None and not callable(embedding_fn):
            raise TypeError(
                "`embedding_fn` must be a callable mapping ids to embeddings (the "
                f"item tower); received embedding_fn={embedding_fn!r}."
            )
        shape = (
            (ops.shape(positive_ids)[0], self.num_negatives)
            if self.per_row
            else (self.num_negatives,)
        )
        dtype = keras.backend.standardize_dtype(positive_ids.dtype)
        if self.vocabulary is None:
            ids = keras.random.randint(
                shape,
                self.first_id,
                self.first_id + self.num_items,
                dtype=dtype,
                seed=self.seed_generator,
            )
        else:
            positions = keras.random.randint(
                shape, 0, self.num_items, dtype="int32", seed=self.seed_generator
            )
            ids = ops.take(self._vocabulary_ids(dtype), positions, axis=0)
        embeddings = None
        if embedding_fn is not None:
            embeddings = k.float_tensor(
                "embedding_fn(ids)", embedding_fn(ids), rank=len(shape) + 1, cast=False
            )
            for axis in range(len(shape)):
                k.check_compatible_dim("embedding_fn(ids)", embeddings, axis, "ids", ids, axis)
        mask = formulas.accidental_hit_mask(k.OPS, positive_ids, ids)
        log_q = formulas.log_uniform_q(self.num_items)
        return Negatives(
            ids,
            embeddings,
            mask,
            ops.full(shape, log_q),
            ops.full((ops.shape(positive_ids)[0],), log_q),
            expected_draws=float(self.num_negatives),
        )

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


@keras.saving.register_keras_serializable(package="keras_logq")
class MixedSampler(NegativeSampler):
    """Mixed negative sampling (Yang et al. 2020): uniform draws plus in-batch negatives.

    With a `vocabulary` (sparse integer ids, see `UniformSampler`) the uniform half draws
    its ids, and |D| is its size; `MixedSampler.from_lookup(lookup, num_uniform,
    num_in_batch, probabilities=...)` draws the indices of a lookup's items (string ids
    mapped before the model), never its out-of-vocabulary index. The probabilities read the
    ids the sampler draws (a `StaticFrequency` indexed by them, a sketch).

    Args:
      num_items: catalog size of the uniform half (None with a `vocabulary`).
      num_uniform: n_u uniform draws (per row with `per_row`).
      num_in_batch: n_b, the most in-batch negatives kept.
      mixture: "exact" (the mixture proposal, exactly unbiased:
        `logq_core.formulas.mixture_log_q`) or "paper" (unigram q for every
        negative, as the paper's released code).
      first_id: smallest id of the uniform draws.
      deduplicate: the in-batch half keeps each id once (only with "paper").
      per_row: the uniform half is drawn per row; `embeddings` is then the
        pair (uniform [batch, n_u, dim], in-batch [n_b, dim]).
      probabilities, seed, kwargs: see `NegativeSampler`.
      vocabulary: optional catalog of the uniform half, distinct integer ids, as in
        `UniformSampler`.
    """

    def __init__(
        self,
        num_items: Optional[int] = None,
        num_uniform: Optional[int] = None,
        num_in_batch: Optional[int] = None,
        mixture: str = "exact",
        first_id: int = 0,
        deduplicate: bool = False,
        per_row: bool = False,
        probabilities=None,
        seed: Optional[int] = None,
        vocabulary: Optional[Sequence[int]] = None,
        **kwargs,
    ):
        super().__init__(probabilities=probabilities, seed=seed, **kwargs)
        samplers.check_mixed(mixture, deduplicate)
        # Checked under the names given here, not those of the halves built from them.
        checks.check_positive_int("num_uniform", num_uniform)
        checks.check_positive_int("num_in_batch", num_in_batch)
        self.mixture = mixture
        self.uniform = UniformSampler(
            num_items,
            num_uniform,
            first_id=first_id,
            per_row=per_row,
            seed=seed,
            vocabulary=vocabulary,
            name="uniform",
        )
        # No probabilities: this sampler reads the in-batch half's ids, not its log Q, and
        # looks the log Q of every negative and positive up itself, once per step.
        self.in_batch = InBatchSampler(
            deduplicate=deduplicate,
            max_pool_size=num_in_batch,
            log_q="unigram",
            seed=None if seed is None else seed + 1,
            name="in_batch",
        )
        self.uniform._caller = self.in_batch._caller = self._caller
        table = getattr(self.frequency, "num_items", None)  # A StaticFrequency's table.
        if table is not None and vocabulary is None:
            # Without a vocabulary the uniform half checked num_items, a positive int.
            assert num_items is not None
            if first_id + num_items > table:
                raise ValueError(
                    f"MixedSampler draws uniform ids in [first_id, first_id + num_items) = "
                    f"[{first_id}, {first_id + num_items}), but `probabilities` has {table} "
                    f"items (ids [0, {table})): the ids beyond would read a NaN log Q; "
                    f"received num_items={num_items}, first_id={first_id}."
                )
        if table is not None and vocabulary is not None:
            # Given a vocabulary, the uniform half keeps it as a list.
            assert self.vocabulary is not None
            if not (0 <= min(self.vocabulary) and max(self.vocabulary) < table):
                raise ValueError(
                    f"MixedSampler draws the uniform ids of its vocabulary, but "
                    f"`probabilities` has {table} items (ids [0, {table})): the ids outside "
                    f"would read a NaN log Q; received a vocabulary with ids in "
                    f"[{min(self.vocabulary)}, {max(self.vocabulary)}]."
                )

    @classmethod
    def from_lookup(
        cls, lookup, num_uniform: int, num_in_batch: int, draw: str = "indices", **kwargs
    ) -> "MixedSampler":
        """A sampler whose uniform half draws the items of `lookup` (a Keras `StringLookup`
        or `IntegerLookup`), its out-of-vocabulary and mask tokens never drawn; `draw` as
        in `UniformSampler.from_lookup`; `**kwargs` as the constructor's (`probabilities`,
        ...)."""
        return cls(
            num_uniform=num_uniform,
            num_in_batch=num_in_batch,
            **samplers.lookup_catalog(lookup, draw),
            **kwargs,
        )

    @property
    def vocabulary(self) -> Optional[list]:
        """The uniform half's vocabulary, or None (the ids [first_id, first_id +
        num_items))."""
        return self.uniform.vocabulary

    def call(
        self,
        positive_ids,
        candidate_ids,
        candidate_embeddings=None,
        candidate_mask=None,
        embedding_fn=None,
    ) -> Negatives:
        """Uniform negatives first, then in-batch ones; arguments as the two samplers'."""
        # The halves' `call`, not `__call__`: an error then reads "Exception encountered
        # when calling MixedSampler.call()", the layer the user called.
        uniform = self.uniform.call(positive_ids, embedding_fn=embedding_fn)
        in_batch = self.in_batch.call(
            positive_ids, candidate_ids, candidate_embeddings, candidate_mask=candidate_mask
        )
        per_row = self.uniform.per_row
        in_batch_ids = in_batch.ids
        if per_row:
            in_batch_ids = ops.broadcast_to(
                in_batch_ids[None, :], (ops.shape(uniform.ids)[0], in_batch_ids.shape[0])
            )
        ids = ops.concatenate([uniform.ids, in_batch_ids], axis=-1)
        embeddings = None
        if uniform.embeddings is not None and in_batch.embeddings is not None:
            embeddings = (
                (uniform.embeddings, in_batch.embeddings)
                if per_row
                else ops.concatenate([uniform.embeddings, in_batch.embeddings], axis=0)
            )
        mask = ops.concatenate([uniform.mask, in_batch.mask], axis=1)
        if self.frequency is None:
            return Negatives(ids, embeddings, mask, None, None)
        log_q_ids, positive_log_q = formulas.log_q_of_both(k.OPS, self._log_q, ids, positive_ids)
        if self.mixture == "paper":
            return Negatives(ids, embeddings, mask, log_q_ids, positive_log_q)
        log_q_mix, positive_log_q = formulas.mixture_log_q(
            k.OPS,
            log_q_ids,
            positive_log_q,
            mask,
            self.uniform.num_items,
            uniform.expected_draws,
            in_batch.expected_draws,
        )
        return Negatives(ids, embeddings, mask, log_q_mix, positive_log_q, True)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_items=self.uniform.num_items,
            num_uniform=self.uniform.num_negatives,
            num_in_batch=self.in_batch.max_pool_size,
            mixture=self.mixture,
            first_id=self.uniform.first_id,
            deduplicate=self.in_batch.deduplicate,
            per_row=self.uniform.per_row,
            vocabulary=self.uniform.vocabulary,
        )
        return config


SAMPLERS = {"in_batch": InBatchSampler, "uniform": UniformSampler, "mixed": MixedSampler}


def make_sampler(negatives: str, **settings) -> NegativeSampler:
    """The sampler `negatives` ("in_batch", "uniform" or "mixed") that `settings` describe,
    as `tfrs_logq.negatives.make_sampler` builds it (`logq_core.samplers.sampler_arguments`
    documents them).

    keras_logq's samplers draw from the batch that the compiled step sees. On JAX that is
    the global batch, under `keras.distribution` too (`DataParallel`, `ModelParallel`:
    Keras traces the step on the global batch and XLA shards it, see `InBatchSampler`), so
    `global_batch=True` is what they do there and is accepted. On TensorFlow and PyTorch a
    replica's step sees its own rows, so `global_batch=True` is refused."""
    kind, arguments = samplers.sampler_arguments(negatives, **settings)
    if arguments.pop("global_batch", False) and keras.backend.backend() != "jax":
        raise ValueError(
            "global_batch=True needs the JAX backend: keras_logq's samplers draw from the "
            "batch the step sees, which is the global batch under keras.distribution on JAX, "
            f"a replica's own rows on the {keras.backend.backend()} backend; received "
            "global_batch=True."
        )
    return SAMPLERS[kind](**arguments)
