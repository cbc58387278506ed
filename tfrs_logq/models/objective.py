"""The training objective of the retrieval models: every loss of the paper's Table 1 in one
layer."""

import inspect
from typing import Callable, Optional

import tensorflow as tf

from logq_core import checks
from logq_core import options
from logq_core import samplers
from tfrs_logq import _ops
from tfrs_logq import _validation as v
from tfrs_logq import losses as losses_lib
from tfrs_logq import negatives as negatives_lib
from tfrs_logq.tasks import LogQRetrieval

# The choices, defined in logq_core.options (logq_core.samplers for the samplers).
LOSSES = options.LOSSES
NEGATIVES = samplers.KINDS
BINARY_REDUCTIONS = options.BINARY_REDUCTIONS
GBCE_ALPHAS = options.GBCE_ALPHAS
# bce / gbce score against the whole catalog (then gather) when it holds at most this many
# items per negative drawn for each example.
DENSE_SCORING_RATIO = 16


def scores_whole_table(num_items: int, num_negatives: int) -> bool:
    """Whether negatives drawn per example (bce / gbce, and per-row uniform or mixed
    sampled softmax) are scored against the whole table, their columns gathered, rather
    than by gathering their embeddings: see DENSE_SCORING_RATIO."""
    return num_items <= DENSE_SCORING_RATIO * num_negatives


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class RetrievalObjective(tf.keras.layers.Layer):
    """Loss of query embeddings against item ids, over a catalog with ids [1, num_items].

    - "sampled_softmax": `LogQRetrieval` with the negatives of `sampler` (any
      `tfrs_logq.negatives` sampler; `make_sampler` builds one from settings)
      and correction none / standard / standard_negatives / improved.
    - "full_softmax": softmax over the whole catalog (no sampler).
    - "bce": binary cross-entropy against the negatives of `sampler`, a
      `UniformSampler(per_row=True)`: each example draws its own (SASRec draws 1).
    - "gbce": gSASRec's generalised BCE with calibration `gbce_t`, negatives as
      for "bce".

    The loss is the mean over the examples (SASRec's convention). Under
    tf.distribute each replica returns its examples' loss sum divided by the
    global number of examples (tf.distribute's convention: the replicas'
    gradients are summed), so the gradient does not depend on the replica count.

    Example:

    >>> sampler = negatives.make_sampler("mixed", num_negatives=256, num_items=3416,
    ...                                  first_id=1, probabilities=item_probabilities)
    >>> objective = RetrievalObjective(3416, correction="improved", sampler=sampler)

    Args:
      num_items: catalog size; ids are in [1, num_items] (0 is padding).
      loss: one of LOSSES.
      correction: sampled softmax only: the `LogQRetrieval` correction (checked there).
      sampler: the negatives: for "sampled_softmax" any sampler over ids
        [1, num_items] (its `probabilities` give log Q); for "bce" / "gbce" a
        `UniformSampler(per_row=True)`; None for "full_softmax".
      gbce_t: gSASRec's t in [0, 1].
      temperature: divides the logits of the sampled softmax.
      binary_reduction: "sum" (default) or "mean" of a bce / gbce row's 1 + n
        terms (gSASRec's and the released train_sasrec.py's
        `binary_cross_entropy_with_logits(...).mean(-1)`).
      binary_accidental_hits: bce / gbce mask uniform negatives equal to the
        positive (default); False keeps them, as gSASRec's code does.
      gbce_alpha: "paper" (default) or "released" (see GBCE_ALPHAS).
      log_q_scale: sampled softmax only: lambda, the weight of the correction
        (`LogQRetrieval`'s `log_q_scale`; 1 the correction, 0 no shift).
      l2_normalize: cosine scores: the query and item embeddings are L2-normalised
        before every score, here and in the models' `query_embeddings` /
        `item_embeddings` (evaluation and serving rank by the same cosine). Pair
        it with a `temperature` (scores then lie in [-1, 1]).
      num_hard_negatives: sampled softmax only: `LogQRetrieval`'s (None or 0: every
        negative).
      mask_known_positives: sampled softmax only: the models pass each row's query
        (`call`'s `query_ids`: SASRec's sequence, the two-tower's user) and the
        two-tower its history (`known_positive_ids`), so that a negative that is
        another known positive of the row (a target of the same user in the batch,
        an item of its history) is masked rather than pushed down, with log Q and
        "improved"'s n kept (`logq_core.formulas.mask_known_positives`). False
        (default): only the row's own positive (accidental hits) is masked.
    """

    def __init__(
        self,
        num_items: int,
        loss: str = "sampled_softmax",
        correction: str = "improved",
        sampler: Optional[negatives_lib.NegativeSampler] = None,
        gbce_t: float = 0.75,
        temperature: Optional[float] = None,
        binary_reduction: str = "sum",
        binary_accidental_hits: bool = True,
        gbce_alpha: str = "paper",
        log_q_scale: float = 1.0,
        l2_normalize: bool = False,
        num_hard_negatives: Optional[int] = None,
        mask_known_positives: bool = False,
        **kwargs,
    ):
        moved = sorted(set(kwargs) & set(_SAMPLER_SETTINGS + ("negatives", "in_batch_log_q")))
        if moved:
            raise TypeError(
                "RetrievalObjective takes a built `sampler`; the sampler's settings "
                f"({', '.join(moved)}) go to negatives.make_sampler, or pass everything to "
                f"make_objective(num_items, ...). Received {', '.join(moved)}."
            )
        super().__init__(**kwargs)
        self.num_items = v.check_positive_int("num_items", num_items)
        self.loss = v.check_choice("loss", loss, LOSSES)
        if loss != "sampled_softmax":  # LogQRetrieval checks it on the sampled path.
            v.check_choice("correction", correction, losses_lib.CORRECTIONS)
        self.correction = correction
        if not 0.0 <= gbce_t <= 1.0:
            raise ValueError(f"`gbce_t` must be in [0, 1]; received gbce_t={gbce_t!r}.")
        self.gbce_t = float(gbce_t)
        self.temperature = temperature
        self.binary_reduction = v.check_choice(
            "binary_reduction", binary_reduction, BINARY_REDUCTIONS
        )
        self.binary_accidental_hits = v.check_bool("binary_accidental_hits", binary_accidental_hits)
        self.gbce_alpha = v.check_choice("gbce_alpha", gbce_alpha, GBCE_ALPHAS)
        self.l2_normalize = v.check_bool("l2_normalize", l2_normalize)
        self.mask_known_positives = v.check_bool("mask_known_positives", mask_known_positives)
        if mask_known_positives and loss != "sampled_softmax":
            raise ValueError(
                "`mask_known_positives` masks the negatives of the sampled softmax "
                "(loss='sampled_softmax'); received mask_known_positives=True "
                f"with loss={loss!r}."
            )
        _check_sampler(loss, sampler)
        # Attribute names as the checkpoints of earlier runs have them.
        self.task = None
        self.uniform: Optional[negatives_lib.UniformSampler] = None
        if loss == "sampled_softmax":
            self.task = LogQRetrieval(
                correction=correction,
                sampler=sampler,
                temperature=temperature,
                diagnostics=True,
                log_q_scale=log_q_scale,
                num_hard_negatives=num_hard_negatives or None,
            )
        elif loss in ("bce", "gbce"):
            assert isinstance(sampler, negatives_lib.UniformSampler)  # `_check_sampler` checked.
            self.uniform = sampler

    @property
    def log_q_scale(self) -> float:
        return self.task.log_q_scale if self.task is not None else 1.0

    @property
    def num_hard_negatives(self) -> Optional[int]:
        return self.task.num_hard_negatives if self.task is not None else None

    def embed(self, embeddings: tf.Tensor) -> tf.Tensor:
        """`embeddings` as every score reads them: L2-normalised along the last axis with
        `l2_normalize`, else unchanged. The models' query and item embeddings go through it."""
        return tf.math.l2_normalize(embeddings, axis=-1) if self.l2_normalize else embeddings

    @property
    def sampler(self) -> Optional[negatives_lib.NegativeSampler]:
        """The sampler of the negatives (None for full softmax)."""
        return self.task.sampler if self.task is not None else self.uniform

    def call(
        self,
        query_embeddings: tf.Tensor,
        positive_ids: tf.Tensor,
        item_embedding_fn: Callable[[tf.Tensor], tf.Tensor],
        all_item_embeddings: Optional[Callable[[], tf.Tensor]] = None,
        training: Optional[bool] = None,
        example_mask: Optional[tf.Tensor] = None,
        example_weight: Optional[tf.Tensor] = None,
        query_ids: Optional[tf.Tensor] = None,
        known_positive_ids: Optional[tf.Tensor] = None,
    ) -> tf.Tensor:
        """Mean loss over the examples.

        Args:
          query_embeddings: [n, dim], one row per training example.
          positive_ids: [n] the positives' ids.
          item_embedding_fn: maps ids to [.., dim] item embeddings.
          all_item_embeddings: returns [num_items + 1, dim] (full softmax).
          training: forwarded to the task (streaming estimators update then).
          example_mask: optional [n] bool, False for padding rows (their
            `positive_ids` are ignored): they are no example, no in-batch
            negative and no estimator update, and the shapes stay static (XLA
            compiles once). Without it every row is an example.
          example_weight: optional [n] float >= 0, each example's weight in the loss
            (a reward): the loss is the weighted sum over the examples divided by their
            number. A zero-weight example is still an in-batch negative and still
            counted by a streaming estimator (it was drawn).
          query_ids: sampled softmax only: optional [n] integer query of each row (the
            user, SASRec's sequence): a negative whose id is the positive of a row of the
            same query is masked (`LogQRetrieval.call`'s `query_ids`). Padding rows
            (`example_mask` False) are nobody's positives. The models pass it with
            `mask_known_positives`.
          known_positive_ids: sampled softmax only: optional [n, k] ids of each row's other
            known positives (the two-tower's history; pad with 0, which is never drawn).
        """
        if self.task is None and (query_ids is not None or known_positive_ids is not None):
            given = "query_ids" if query_ids is not None else "known_positive_ids"
            raise ValueError(
                f"`{given}` masks known positives among the negatives of the "
                f"sampled softmax; received {given} with loss={self.loss!r}."
            )
        positive_ids = tf.cast(positive_ids, tf.int64)
        if self.l2_normalize:
            query_embeddings = self.embed(query_embeddings)
            unit_item_embedding_fn = item_embedding_fn
            item_embedding_fn = lambda ids: self.embed(unit_item_embedding_fn(ids))  # noqa: E731
            if all_item_embeddings is not None:
                all_items = all_item_embeddings
                all_item_embeddings = lambda: self.embed(all_items())  # noqa: E731
        if example_mask is None:
            weight = None
            count = tf.cast(tf.shape(positive_ids)[0], tf.float32)
        else:
            example_mask = tf.cast(example_mask, tf.bool)
            weight = tf.cast(example_mask, tf.float32)
            count = tf.reduce_sum(weight)
            positive_ids = tf.where(example_mask, positive_ids, tf.ones_like(positive_ids))
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            count = context.all_reduce(tf.distribute.ReduceOp.SUM, count)
        count = tf.maximum(count, 1.0)  # The global number of examples.
        pool_mask = example_mask
        if example_weight is not None:
            example_weight = tf.cast(example_weight, tf.float32)
            weight = example_weight if weight is None else weight * example_weight
            if pool_mask is None:  # Every row stays in the pool, whatever its weight.
                pool_mask = tf.ones_like(positive_ids, tf.bool)

        def total(per_example):
            return tf.reduce_sum(per_example if weight is None else per_example * weight)

        if self.task is not None:
            table = None
            sampler = self.task.sampler
            assert sampler is not None  # `_check_sampler` checked the sampled softmax's sampler.
            if (
                all_item_embeddings is not None
                and sampler.per_row
                # A per-row sampler (uniform, mixed) draws a fixed number of negatives.
                and scores_whole_table(self.num_items, sampler.num_negatives)  # type: ignore[arg-type]
            ):
                # Per-row draws on a small catalog: their scores are columns of one matmul.
                table = all_item_embeddings()
            loss = self.task(
                query_embeddings,
                item_embedding_fn(positive_ids),
                sample_weight=weight,
                candidate_ids=positive_ids,
                candidate_embedding_fn=item_embedding_fn,
                compute_metrics=False,
                training=training,
                candidate_table=table,
                candidate_mask=pool_mask,
                query_ids=query_ids,
                known_positive_ids=known_positive_ids,
            )
            return loss / count
        query_embeddings = tf.cast(query_embeddings, tf.float32)
        if self.loss == "full_softmax":
            # The full softmax's callers always pass the table (documented above).
            table = tf.cast(all_item_embeddings(), tf.float32)[1:]  # type: ignore[misc]
            logits = _ops.scores(query_embeddings, table)
            return total(losses_lib.full_softmax_loss(logits, positive_ids - 1)) / count
        assert self.uniform is not None  # bce and gbce: `__init__` set it.
        positive_logits = _ops.row_scores(
            query_embeddings, tf.cast(item_embedding_fn(positive_ids), tf.float32)
        )
        if all_item_embeddings is not None and scores_whole_table(
            self.num_items, self.uniform.num_negatives
        ):
            # A small catalog: one matmul against the whole table, then each row's columns.
            # Cheaper than gathering n x num_negatives embeddings (and their scattered gradient).
            negatives = self.uniform(positive_ids)
            table = tf.cast(all_item_embeddings(), tf.float32)
            negative_logits = tf.gather(
                _ops.scores(query_embeddings, table), negatives.ids, batch_dims=1
            )
        else:
            negatives = self.uniform(positive_ids, embedding_fn=item_embedding_fn)
            negative_logits = _ops.scores(
                query_embeddings, tf.cast(negatives.embeddings, tf.float32)
            )
        mask = negatives.mask if self.binary_accidental_hits else None
        if self.loss == "bce":
            per_example = losses_lib.bce_loss(positive_logits, negative_logits, negative_mask=mask)
        else:
            per_example = losses_lib.gbce_loss(
                positive_logits,
                negative_logits,
                t=self.gbce_t,
                negative_mask=mask,
                num_items=self.num_items - (self.gbce_alpha == "released"),
            )
        if self.binary_reduction == "mean":
            per_example = per_example / (1.0 + self.uniform.num_negatives)
        return total(per_example) / count

    def get_config(self):
        config = super().get_config()
        config.update(
            num_items=self.num_items,
            loss=self.loss,
            correction=self.correction,
            sampler=(None if self.sampler is None else tf.keras.layers.serialize(self.sampler)),
            gbce_t=self.gbce_t,
            temperature=self.temperature,
            binary_reduction=self.binary_reduction,
            binary_accidental_hits=self.binary_accidental_hits,
            gbce_alpha=self.gbce_alpha,
            log_q_scale=self.log_q_scale,
            l2_normalize=self.l2_normalize,
            num_hard_negatives=self.num_hard_negatives,
            mask_known_positives=self.mask_known_positives,
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if "negatives" in config:  # Saved before the objective took a built sampler.
            config["log_q"] = config.pop("in_batch_log_q", "horvitz_thompson")
            return make_objective(**config)
        if config.get("sampler") is not None:
            config["sampler"] = tf.keras.layers.deserialize(config["sampler"])
        return cls(**config)


def _check_sampler(loss: str, sampler) -> None:
    """Raises when `sampler` cannot give `loss` its negatives."""
    if loss == "full_softmax":
        if sampler is not None:
            raise ValueError(
                "loss='full_softmax' scores the whole catalog and takes no "
                f"sampler; received sampler={_describe(sampler)}."
            )
        return
    if not isinstance(sampler, negatives_lib.NegativeSampler):
        raise TypeError(
            f"loss={loss!r} draws its negatives from `sampler`, a "
            "tfrs_logq.negatives sampler (see negatives.make_sampler); received "
            f"sampler={_describe(sampler)}."
        )
    if loss in ("bce", "gbce") and not (
        isinstance(sampler, negatives_lib.UniformSampler) and sampler.per_row
    ):
        raise ValueError(
            f"loss={loss!r} scores each example against its own uniform "
            "negatives: pass UniformSampler(..., per_row=True) (make_sampler("
            f"'uniform', per_row=True, ...)); received sampler={_describe(sampler)}."
        )


def _describe(sampler) -> str:
    """A sampler by its class and settings (a layer's repr gives only an address)."""
    if not isinstance(sampler, negatives_lib.NegativeSampler):
        return repr(sampler)
    settings = {
        key: value
        for key, value in sampler.get_config().items()
        if key not in ("name", "trainable", "dtype", "probabilities")
    }
    return f"{type(sampler).__name__}({', '.join(f'{k}={v!r}' for k, v in settings.items())})"


_SAMPLER_SETTINGS = tuple(inspect.signature(samplers.sampler_arguments).parameters)[1:]


def make_objective(
    num_items: int, *, loss: str = "sampled_softmax", negatives: str = "in_batch", **settings
) -> RetrievalObjective:
    """A `RetrievalObjective` and its sampler from flat settings (a config's loss group).

    The sampler comes from `negatives.make_sampler(negatives, ...)` over ids
    [1, num_items]; bce and gbce draw `num_negatives` uniform negatives per
    example whatever `negatives` says (as SASRec and gSASRec do per position);
    full softmax has none.

    Args:
      num_items: catalog size; ids are in [1, num_items].
      loss: one of LOSSES.
      negatives: the sampler of the sampled softmax (`logq_core.samplers.KINDS`).
      **settings: the sampler's settings (`logq_core.samplers.sampler_arguments`:
        num_negatives, probabilities, seed, deduplicate, log_q, per_row,
        global_batch, mixture) and the objective's other arguments.
    """
    sampler_settings = {name: settings.pop(name) for name in _SAMPLER_SETTINGS if name in settings}
    sampler_settings.setdefault("num_negatives", 256)
    checks.check_choice("negatives", negatives, samplers.KINDS)
    sampler_settings.update(num_items=num_items, first_id=1)
    sampler = None
    if loss in ("bce", "gbce"):
        sampler = negatives_lib.make_sampler(
            "uniform", **dict(sampler_settings, per_row=True, probabilities=None)
        )
    elif loss == "sampled_softmax":
        sampler = negatives_lib.make_sampler(negatives, **sampler_settings)
    return RetrievalObjective(num_items, loss=loss, sampler=sampler, **settings)
