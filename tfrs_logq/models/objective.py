"""The training objective of the retrieval models: every loss of the paper's Table 1 in one layer."""

from typing import Callable, Optional

import tensorflow as tf

from tfrs_logq import _ops
from tfrs_logq import _validation as v
from tfrs_logq import frequency as frequency_lib
from tfrs_logq import losses as losses_lib
from tfrs_logq import negatives as negatives_lib
from tfrs_logq.tasks import LogQRetrieval

LOSSES = ("sampled_softmax", "full_softmax", "bce", "gbce")
NEGATIVES = ("in_batch", "uniform", "mixed")
# How bce / gbce reduce a row's 1 + n terms: their sum, or their mean (gSASRec's code).
BINARY_REDUCTIONS = ("sum", "mean")
# gBCE's alpha = n / (|D| - 1) (the gSASRec paper), or n / (|D| - 2) as gSASRec's code
# computes it (gbce.py: alpha = negatives / (pool_size - 1), train_gsasrec.py passes
# pool_size = num_items - 1).
GBCE_ALPHAS = ("paper", "released")
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

    - "sampled_softmax": `LogQRetrieval` with in-batch, uniform or mixed
      negatives (`num_negatives` of them; half uniform, half in-batch when
      mixed) and correction none / standard / standard_negatives / improved.
    - "full_softmax": softmax over the whole catalog.
    - "bce": binary cross-entropy against `num_negatives` uniform negatives
      drawn for each example (SASRec uses 1).
    - "gbce": gSASRec's generalised BCE with calibration `gbce_t`, negatives
      drawn per example as for "bce".

    The loss is the mean over the examples (SASRec's convention). Under
    tf.distribute each replica returns its examples' loss sum divided by the
    global number of examples (tf.distribute's convention: the replicas'
    gradients are summed), so the gradient does not depend on the replica count.

    Args:
      num_items: catalog size; ids are in [1, num_items] (0 is padding).
      loss: one of LOSSES.
      negatives: one of NEGATIVES (sampled softmax only).
      correction: one of `tfrs_logq.losses.CORRECTIONS` (sampled softmax only).
      num_negatives: sampled softmax: negatives per step, shared by the batch's
        examples; bce / gbce: negatives per example.
      probabilities: per-draw item probabilities for log Q: a [num_items + 1]
        array (index 0 unused), or a `tfrs_logq.frequency` estimator.
      gbce_t: gSASRec's t in [0, 1].
      mixture: "exact" or "paper", for mixed negatives.
      global_batch: in-batch negatives (and the in-batch half of mixed ones)
        come from the global batch under tf.distribute; see
        `tfrs_logq.negatives.InBatchSampler`.
      temperature: divides the logits of the sampled softmax.
      seed: seed of the samplers.
      deduplicate: the in-batch pool (in-batch negatives, and the in-batch half
        of mixed ones) keeps each distinct target once, k = `num_negatives`
        (half, when mixed) of them drawn uniformly: the paper's released pool.
      in_batch_log_q: with `deduplicate` and in-batch negatives,
        "horvitz_thompson" (unbiased, default) or "unigram" (the released
        code's q; see `tfrs_logq.negatives.InBatchSampler`).
      per_row: uniform negatives of the sampled softmax (and the uniform half
        of mixed ones) are drawn for every example, as the released code's data
        loader draws them per position; otherwise once per step.
      binary_reduction: "sum" (default) or "mean" of a bce / gbce row's 1 + n
        terms (gSASRec's and the released train_sasrec.py's
        `binary_cross_entropy_with_logits(...).mean(-1)`).
      binary_accidental_hits: bce / gbce mask uniform negatives equal to the
        positive (default); False keeps them, as gSASRec's code does.
      gbce_alpha: "paper" (default) or "released" (see GBCE_ALPHAS).
    """

    def __init__(self, num_items: int, loss: str = "sampled_softmax",
                 negatives: str = "in_batch", correction: str = "improved",
                 num_negatives: int = 256, probabilities: frequency_lib.FrequencyLike = None,
                 gbce_t: float = 0.75, mixture: str = "exact", global_batch: bool = False,
                 temperature: Optional[float] = None, seed: Optional[int] = None,
                 deduplicate: bool = False, in_batch_log_q: str = "horvitz_thompson",
                 per_row: bool = False, binary_reduction: str = "sum",
                 binary_accidental_hits: bool = True, gbce_alpha: str = "paper", **kwargs):
        super().__init__(**kwargs)
        self.num_items = v.check_positive_int("num_items", num_items)
        self.loss = v.check_choice("loss", loss, LOSSES)
        self.negatives = v.check_choice("negatives", negatives, NEGATIVES)
        self.correction = v.check_choice("correction", correction, losses_lib.CORRECTIONS)
        self.num_negatives = v.check_positive_int("num_negatives", num_negatives)
        if not 0.0 <= gbce_t <= 1.0:
            raise ValueError(f"`gbce_t` must be in [0, 1]; received gbce_t={gbce_t!r}.")
        self.gbce_t = float(gbce_t)
        self.mixture = mixture
        self.global_batch = v.check_bool("global_batch", global_batch)
        self.temperature = temperature
        self.seed = seed
        self.deduplicate = v.check_bool("deduplicate", deduplicate)
        self.in_batch_log_q = v.check_choice("in_batch_log_q", in_batch_log_q,
                                             negatives_lib.IN_BATCH_LOG_Q)
        self.per_row = v.check_bool("per_row", per_row)
        self.binary_reduction = v.check_choice("binary_reduction", binary_reduction,
                                               BINARY_REDUCTIONS)
        self.binary_accidental_hits = v.check_bool("binary_accidental_hits",
                                                   binary_accidental_hits)
        self.gbce_alpha = v.check_choice("gbce_alpha", gbce_alpha, GBCE_ALPHAS)
        self.task = None
        self.uniform = None
        if loss == "sampled_softmax":
            if negatives == "in_batch":
                sampler = negatives_lib.InBatchSampler(
                    deduplicate=deduplicate, max_pool_size=num_negatives,
                    global_batch=global_batch, probabilities=probabilities, seed=seed,
                    log_q=in_batch_log_q)
            elif negatives == "uniform":
                sampler = negatives_lib.UniformSampler(num_items, num_negatives, first_id=1,
                                                       seed=seed, per_row=per_row)
            else:
                sampler = negatives_lib.MixedSampler(
                    num_items, num_negatives - num_negatives // 2, num_negatives // 2,
                    mixture=mixture, first_id=1, global_batch=global_batch,
                    probabilities=probabilities, seed=seed, deduplicate=deduplicate,
                    per_row=per_row)
            if negatives != "uniform" and correction != "none" and probabilities is None:
                raise ValueError(
                    f"correction={correction!r} with {negatives} negatives needs "
                    "`probabilities` (item frequencies or an estimator); received None.")
            self.task = LogQRetrieval(correction=correction, sampler=sampler,
                                      temperature=temperature, diagnostics=True)
        elif loss in ("bce", "gbce"):
            # Each example draws its own negatives, as SASRec and gSASRec do per position.
            self.uniform = negatives_lib.UniformSampler(num_items, num_negatives, first_id=1,
                                                        per_row=True, seed=seed)

    def call(self, query_embeddings: tf.Tensor, positive_ids: tf.Tensor,
             item_embedding_fn: Callable[[tf.Tensor], tf.Tensor],
             all_item_embeddings: Optional[Callable[[], tf.Tensor]] = None,
             training: Optional[bool] = None,
             example_mask: Optional[tf.Tensor] = None) -> tf.Tensor:
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
        """
        positive_ids = tf.cast(positive_ids, tf.int64)
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

        def total(per_example):
            return tf.reduce_sum(per_example if weight is None else per_example * weight)

        if self.task is not None:
            table = None
            if (all_item_embeddings is not None and self.per_row
                    and self.negatives in ("uniform", "mixed")
                    and scores_whole_table(self.num_items, self.num_negatives)):
                # Per-row draws on a small catalog: their scores are columns of one matmul.
                table = all_item_embeddings()
            loss = self.task(query_embeddings, item_embedding_fn(positive_ids),
                             sample_weight=weight, candidate_ids=positive_ids,
                             candidate_embedding_fn=item_embedding_fn, compute_metrics=False,
                             training=training, candidate_table=table,
                             candidate_mask=example_mask)
            return loss / count
        query_embeddings = tf.cast(query_embeddings, tf.float32)
        if self.loss == "full_softmax":
            table = tf.cast(all_item_embeddings(), tf.float32)[1:]
            logits = _ops.scores(query_embeddings, table)
            return total(losses_lib.full_softmax_loss(logits, positive_ids - 1)) / count
        positive_logits = _ops.row_scores(query_embeddings,
                                          tf.cast(item_embedding_fn(positive_ids), tf.float32))
        if (all_item_embeddings is not None
                and scores_whole_table(self.num_items, self.num_negatives)):
            # A small catalog: one matmul against the whole table, then each row's columns.
            # Cheaper than gathering n x num_negatives embeddings (and their scattered gradient).
            negatives = self.uniform(positive_ids)
            table = tf.cast(all_item_embeddings(), tf.float32)
            negative_logits = tf.gather(_ops.scores(query_embeddings, table), negatives.ids,
                                        batch_dims=1)
        else:
            negatives = self.uniform(positive_ids, embedding_fn=item_embedding_fn)
            negative_logits = _ops.scores(query_embeddings,
                                          tf.cast(negatives.embeddings, tf.float32))
        mask = negatives.mask if self.binary_accidental_hits else None
        if self.loss == "bce":
            per_example = losses_lib.bce_loss(positive_logits, negative_logits,
                                               negative_mask=mask)
        else:
            per_example = losses_lib.gbce_loss(
                positive_logits, negative_logits, t=self.gbce_t, negative_mask=mask,
                num_items=self.num_items - (self.gbce_alpha == "released"))
        if self.binary_reduction == "mean":
            per_example = per_example / (1.0 + self.num_negatives)
        return total(per_example) / count

    def get_config(self):
        config = super().get_config()
        config.update(num_items=self.num_items, loss=self.loss, negatives=self.negatives,
                      correction=self.correction, num_negatives=self.num_negatives,
                      gbce_t=self.gbce_t, mixture=self.mixture, global_batch=self.global_batch,
                      temperature=self.temperature,
                      seed=self.seed, deduplicate=self.deduplicate,
                      in_batch_log_q=self.in_batch_log_q, per_row=self.per_row,
                      binary_reduction=self.binary_reduction,
                      binary_accidental_hits=self.binary_accidental_hits,
                      gbce_alpha=self.gbce_alpha)
        return config
