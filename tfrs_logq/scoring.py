"""What one step of `LogQRetrieval` scores: the positives' and negatives' logits, which
negatives are valid, and their log Q, whichever path made them (the candidate columns as in
TFRS, or a sampler's draws), then known positives masked and hard negatives mined.

The layer (`tfrs_logq.tasks`) turns a `Scored` into the loss and the metrics.
"""

from typing import NamedTuple, Optional

import numpy as np
import tensorflow as tf

from logq_core import formulas
from tfrs_logq import _ops
from tfrs_logq import _validation as v
from tfrs_logq import negatives as negatives_lib

# The value tfrs.tasks.Retrieval gives to removed logits, for custom losses
# and batch metrics, which see a logits matrix.
MIN_FLOAT = np.finfo(np.float32).min / 100.0


class Scored(NamedTuple):
    """One step's logits and what the loss needs of them, whichever path made them.

    Attributes:
      positive_logits: [batch] s_p (temperature applied).
      negative_logits: [batch, n] s_i.
      mask: [batch, n] bool, True for a valid negative; None with `diagonal_positive`:
        every column but the diagonal and `hits` (`with_dense_mask` makes it a tensor).
      log_q: [n] or [batch, n] log Q of the negatives, or None.
      positive_log_q: [batch] log Q of the positives, or None.
      log_q_excludes_positive: `log_q` already is log Q'.
      diagonal_positive: `negative_logits` are the candidate columns, row i's positive in
        column i (masked out of `mask`), and `log_q` is per column: the loss of every
        correction then runs as one softmax cross-entropy over them
        (`losses.column_softmax_terms`).
      log_q_checked: the sampler already checked the values `log_q` was derived from
        (`Negatives.log_q_checked`): the loss does not check them again.
      num_valid: [batch] "improved"'s n when it is not the count of `mask` (hard
        negatives: the valid negatives before mining; known positives: before their
        mask), or None.
      negative_ids: [n] or [batch, n] ids of a sampler's negatives, or None (the
        candidate columns, whose ids are `candidate_ids`).
      hits: with `diagonal_positive` and no `mask`, the accidental hits to mask, as id
        codes (`negatives.accidental_hits`), or None.
    """

    positive_logits: tf.Tensor
    negative_logits: tf.Tensor
    mask: Optional[tf.Tensor]
    log_q: Optional[tf.Tensor]
    positive_log_q: Optional[tf.Tensor]
    log_q_excludes_positive: bool = False
    diagonal_positive: bool = False
    log_q_checked: bool = False
    num_valid: Optional[tf.Tensor] = None
    negative_ids: Optional[tf.Tensor] = None
    hits: Optional[negatives_lib.AccidentalHits] = None


def _tempered(logits: tf.Tensor, temperature: Optional[float]) -> tf.Tensor:
    return logits if temperature is None else logits / temperature


def candidate_columns(
    query_embeddings,
    candidate_embeddings,
    candidate_sampling_probability,
    candidate_ids,
    score_mask,
    *,
    temperature: Optional[float],
    frequency,
    correction: Optional[str],
    remove_accidental_hits: bool,
) -> Scored:
    """TFRS semantics: every candidate column is a negative except the row's own positive.

    Log Q comes from the task's `frequency` source by id, else from
    `candidate_sampling_probability`; `correction` ("improved") and
    `remove_accidental_hits` mask the columns holding a row's positive id."""
    scores = _tempered(_ops.scores(query_embeddings, candidate_embeddings), temperature)
    num_queries = tf.shape(scores)[0]
    # Each row's own positive, not the diagonal of `scores`: the gradient of a diagonal is
    # a dense [batch, candidates] matrix (MatrixDiag: 117 ms a step at batch 8192).
    positive_logits = _tempered(
        _ops.row_scores(query_embeddings, candidate_embeddings[:num_queries]), temperature
    )
    mask = hits = None
    if remove_accidental_hits and candidate_ids is None:
        raise ValueError(
            "remove_accidental_hits=True needs `candidate_ids`; received candidate_ids=None."
        )
    if candidate_ids is not None:
        candidate_ids = v.ids_tensor("candidate_ids", candidate_ids)
        if remove_accidental_hits or correction == "improved":
            hits = negatives_lib.accidental_hits(candidate_ids, num_queries)
    if score_mask is not None:  # A mask tensor anyway: the hits join it.
        mask = tf.logical_and(
            _off_diagonal(scores), v.bool_tensor("score_mask", score_mask, rank=2)
        )
        if hits is not None:
            mask = tf.logical_and(
                mask, tf.logical_not(negatives_lib.hit_columns(hits.codes, num_queries))
            )
            hits = None
    log_q = positive_log_q = None
    if frequency is not None and candidate_sampling_probability is not None:
        raise ValueError(
            "The task has a `frequency` source; received candidate_sampling_probability "
            "as well. Pass one of them."
        )
    if frequency is not None:
        if candidate_ids is None:
            raise ValueError(
                "The task's `frequency` reads log Q by id and needs `candidate_ids`; "
                "received candidate_ids=None."
            )
        log_q = frequency.log_q(candidate_ids)
        positive_log_q = log_q[:num_queries]
    elif candidate_sampling_probability is not None:
        probabilities = v.check_probabilities(
            "candidate_sampling_probability", candidate_sampling_probability
        )
        v.check_rank("candidate_sampling_probability", probabilities, 1)
        v.check_compatible_dim(
            "candidate_sampling_probability",
            probabilities,
            0,
            "candidate_embeddings",
            candidate_embeddings,
            0,
        )
        log_q = tf.math.log(probabilities)
        positive_log_q = log_q[:num_queries]
    return Scored(
        positive_logits, scores, mask, log_q, positive_log_q, diagonal_positive=True, hits=hits
    )


def _off_diagonal(scores: tf.Tensor) -> tf.Tensor:
    """[batch, candidates] bool, False on the diagonal (each row's positive)."""
    return tf.logical_not(tf.cast(tf.eye(tf.shape(scores)[0], tf.shape(scores)[1]), tf.bool))


def with_dense_mask(scored: Scored) -> Scored:
    """`scored` with its mask as a [batch, n] tensor (the diagonal and the hits False), for
    what reads a mask rather than the in-batch loss's fused comparison of id codes."""
    if scored.mask is not None:  # `hits` come only without a mask (`candidate_columns`).
        return scored
    mask = _off_diagonal(scored.negative_logits)
    if scored.hits is not None:
        hits = negatives_lib.hit_columns(scored.hits.codes, tf.shape(mask)[0])
        mask = tf.logical_and(mask, tf.logical_not(hits))
    return scored._replace(mask=mask, hits=None)


def valid_counts(scored: Scored) -> tf.Tensor:
    """[batch] float32 number of valid negatives of each row (after any known positives)."""
    if scored.mask is not None:
        return tf.reduce_sum(tf.cast(scored.mask, tf.float32), axis=1)
    columns = tf.shape(scored.negative_logits)[1] - 1  # All but the diagonal.
    if scored.hits is None:
        return tf.cast(tf.fill(tf.shape(scored.positive_logits), columns), tf.float32)
    return tf.cast(columns - scored.hits.per_row, tf.float32)


def sampled_columns(
    query_embeddings,
    candidate_embeddings,
    candidate_sampling_probability,
    candidate_ids,
    score_mask,
    candidate_embedding_fn,
    candidate_table=None,
    candidate_mask=None,
    *,
    sampler,
    temperature: Optional[float],
) -> Scored:
    """Negatives from `sampler`; the positives are the first num_queries candidates."""
    for name, value in (
        ("candidate_sampling_probability", candidate_sampling_probability),
        ("score_mask", score_mask),
    ):
        if value is not None:
            raise ValueError(
                f"`{name}` cannot be combined with a sampler (its negatives are not the "
                f"candidate columns); give the sampler `probabilities`. Received {name} "
                "that is not None."
            )
    if candidate_ids is None:
        raise ValueError(
            "A sampler needs `candidate_ids` (for accidental hits and log Q); received "
            "candidate_ids=None."
        )
    num_queries = tf.shape(query_embeddings)[0]
    positive_embeddings = candidate_embeddings[:num_queries]
    positive_ids = candidate_ids[:num_queries]
    positive_logits = _tempered(_ops.row_scores(query_embeddings, positive_embeddings), temperature)
    if candidate_table is not None:
        # Ids only from the sampler; their scores are columns of one matmul.
        negatives = sampler(positive_ids, candidate_ids, candidate_mask=candidate_mask)
        if not negatives.ids.dtype.is_integer:
            raise TypeError(
                "`candidate_table` is read by integer id (row i = id i); received a "
                f"candidate_table and {type(sampler).__name__} ids with dtype "
                f"{negatives.ids.dtype.name}. Use `candidate_embedding_fn` instead."
            )
        table = v.float_tensor("candidate_table", candidate_table, rank=2)
        v.check_compatible_dim(
            "candidate_table", table, 1, "query_embeddings", query_embeddings, -1
        )
        full = _ops.scores(query_embeddings, table)
        # An id without a row (an in-batch id or a uniform draw past the table) is
        # invalid, as in `StaticFrequency`: never a clamped row under XLA.
        ids, valid = v.table_rows(
            "negatives.ids",
            negatives.ids,
            tf.shape(table, out_type=tf.int64)[0]
            if table.shape[0] is None
            else int(table.shape[0]),
            "one per row of `candidate_table`",
        )
        ids = tf.cast(ids, tf.int32)  # In range, so int32 holds them.
        columns = v.nan_unless(
            valid,
            tf.gather(full, ids, axis=1)
            if negatives.ids.shape.rank == 1
            else tf.gather(full, ids, batch_dims=1),
        )
        return Scored(
            positive_logits,
            _tempered(columns, temperature),
            negatives.mask,
            negatives.log_q,
            negatives.positive_log_q,
            negatives.log_q_excludes_positive,
            log_q_checked=negatives.log_q_checked,
            negative_ids=negatives.ids,
        )
    negatives = sampler(
        positive_ids,
        candidate_ids,
        candidate_embeddings,
        candidate_mask=candidate_mask,
        embedding_fn=candidate_embedding_fn,
    )
    if negatives.embeddings is None:
        raise ValueError(
            f"{type(sampler).__name__} drew ids outside the batch and needs "
            "`candidate_embedding_fn` (the item tower) to embed them; received "
            "candidate_embedding_fn=None."
        )
    negative_embeddings = negatives.embeddings
    if isinstance(negative_embeddings, tuple):  # (per-row part, shared part).
        negative_embeddings = tuple(
            v.float_tensor("negative embeddings", part) for part in negative_embeddings
        )
    else:
        negative_embeddings = v.float_tensor("negative embeddings", negative_embeddings)
    negative_logits = _tempered(_ops.scores(query_embeddings, negative_embeddings), temperature)
    return Scored(
        positive_logits,
        negative_logits,
        negatives.mask,
        negatives.log_q,
        negatives.positive_log_q,
        negatives.log_q_excludes_positive,
        log_q_checked=negatives.log_q_checked,
        negative_ids=negatives.ids,
    )


def without_known_positives(
    scored: Scored,
    candidate_ids,
    query_ids,
    known_positive_ids,
    known_positives,
    valid_rows,
    *,
    sampler,
) -> Scored:
    """`scored` with each row's known positives masked and "improved"'s n counted before
    (`logq_core.formulas.mask_known_positives`)."""
    scored = with_dense_mask(scored)
    known = known_positives
    if query_ids is not None or known_positive_ids is not None:
        num_queries = tf.shape(scored.positive_logits)[0]
        positive_ids = candidate_ids[:num_queries]
        negative_ids = candidate_ids if scored.negative_ids is None else scored.negative_ids
        # A pool drawn from every replica's rows: so is the known set.
        by_ids = negatives_lib.known_positive_mask(
            positive_ids,
            negative_ids,
            query_ids,
            known_positive_ids,
            valid_rows,
            global_batch=scored.negative_ids is not None and global_pool(sampler),
        )
        known = by_ids if known is None else tf.logical_or(known, by_ids)
    mask, num_valid = formulas.mask_known_positives(
        _ops.TF, scored.negative_logits, scored.mask, known, scored.num_valid
    )
    return scored._replace(mask=mask, num_valid=num_valid)


def hard_negatives(
    scored: Scored, correction: str, num_hard_negatives: int, log_q_scale: float
) -> Scored:
    """Keeps the num_hard_negatives valid negatives with the largest corrected logits
    (`logq_core.formulas.hard_negatives`); `num_valid` keeps the count before mining."""
    scored = with_dense_mask(scored)
    log_q = None if correction == "none" else scored.log_q
    negative_logits, mask, log_q, num_valid = formulas.hard_negatives(
        _ops.TF,
        scored.negative_logits,
        scored.mask,
        log_q,
        tf.minimum(num_hard_negatives, tf.shape(scored.negative_logits)[1]),
        log_q_scale,
        scored.num_valid,
    )
    return scored._replace(
        negative_logits=negative_logits,
        mask=mask,
        log_q=log_q,
        diagonal_positive=False,
        num_valid=num_valid,
    )


def logits_matrix(scored: Scored, correction: str, log_q_scale: float = 1.0):
    """[batch, 1 + N] labels and corrected logits, positive first, removed ones at MIN_FLOAT."""
    scored = with_dense_mask(scored)
    positive_logits, negative_logits = scored.positive_logits, scored.negative_logits
    if correction == "standard":
        positive_logits = positive_logits - formulas.scaled(scored.positive_log_q, log_q_scale)
    if correction in ("standard", "standard_negatives"):
        negative_logits = negative_logits - formulas.scaled(scored.log_q, log_q_scale)
    negative_logits = tf.where(scored.mask, negative_logits, MIN_FLOAT)
    logits = tf.concat([positive_logits[:, tf.newaxis], negative_logits], axis=1)
    labels = tf.one_hot(tf.zeros_like(positive_logits, tf.int32), tf.shape(logits)[1])
    return labels, logits


def global_pool(sampler) -> bool:
    """Whether `sampler`'s in-batch pool is the global batch under tf.distribute."""
    in_batch = getattr(sampler, "in_batch", sampler)
    return bool(getattr(in_batch, "global_batch", False))
