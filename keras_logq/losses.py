"""Per-example retrieval losses for Keras 3: sampled softmax with logQ corrections, full
softmax, BCE, gBCE, and the `SampledSoftmax` layer for keras-rs scores.

The formulas are `logq_core.formulas`, the ones `tfrs_logq.losses` runs on
TensorFlow; this module checks the inputs and runs them on `keras.ops`. Every
function returns one loss per example, shape [batch], in float32.
"""

import functools
from typing import Optional

import keras
from keras import ops

from keras_logq import _ops as k
from logq_core import checks
from logq_core import formulas

CORRECTIONS = formulas.CORRECTIONS


_prepare_sampled = functools.partial(checks.logits_inputs, k.TENSORS)


def sampled_softmax_terms(positive_logits, negative_logits, correction, negative_log_q=None,
                          positive_log_q=None, negative_mask=None,
                          log_q_excludes_positive=False):
    """(`sampled_softmax_loss`, the improved weight w or None), arguments as there,
    `correction` already checked."""
    return formulas.checked_sampled_softmax_terms(
        k.OPS, k.TENSORS, lambda name, log_q: k.nan_unless_log_probabilities(log_q),
        positive_logits, negative_logits, correction, negative_log_q, positive_log_q,
        negative_mask, log_q_excludes_positive)


def sampled_softmax_loss(positive_logits, negative_logits, *, correction: str,
                         negative_log_q=None, positive_log_q=None, negative_mask=None,
                         log_q_excludes_positive: bool = False):
    r"""Sampled-softmax loss per example with no, the standard or the improved logQ correction.

    The maths of `tfrs_logq.losses.sampled_softmax_loss` (docs/design.md), on any
    Keras 3 backend:

    .. math::
        \text{improved:}\quad c'_i = s_i - \log Q'(d_i),\;
        \mathrm{LSE} = \log \sum_i m_i e^{c'_i},\;
        \ell = \mathrm{sg}\big(\sigma(\mathrm{LSE} - \log n - s_p)\big)\,(\mathrm{LSE} - s_p)

    Args:
      positive_logits: [batch] positive logits s_p.
      negative_logits: [batch, num_negatives] negative logits s_i.
      correction: "none", "standard" (Yi et al. 2019; positive corrected too, as
        `keras_rs.layers.SamplingProbabilityCorrection` applied to every
        column), "standard_negatives" (only the negatives corrected; the
        improved correction paper's released baseline) or "improved"
        (Khrylchenko et al. 2025).
      negative_log_q: [num_negatives] or [batch, num_negatives] per-draw log Q(d_i).
      positive_log_q: [batch] log Q(p); needed by "standard", and by "improved"
        unless `log_q_excludes_positive`.
      negative_mask: optional [batch, num_negatives] bool, True for a valid negative.
      log_q_excludes_positive: `negative_log_q` already is log Q' (the
        proposal without the positive), as the samplers' Horvitz-Thompson and
        exact-mixture log Q are.

    Returns:
      [batch] float32 losses. Log-probabilities outside (0, 1] give NaN.

    Raises:
      ValueError: unknown `correction`, a missing log Q, mismatched shapes.
      TypeError: non-float logits or log Q, non-bool mask.
    """
    checks.check_choice("correction", correction, CORRECTIONS)
    loss, _ = sampled_softmax_terms(positive_logits, negative_logits, correction,
                                    negative_log_q, positive_log_q, negative_mask,
                                    log_q_excludes_positive)
    return loss


def improved_weight(positive_logits, negative_logits, *, negative_log_q, positive_log_q=None,
                    negative_mask=None, log_q_excludes_positive: bool = False):
    """The improved correction's [batch] weight w = 1 - P_hat (0 for rows with no valid
    negative), for logging; arguments as in `sampled_softmax_loss`."""
    _, weight = sampled_softmax_terms(positive_logits, negative_logits, "improved",
                                      negative_log_q, positive_log_q, negative_mask,
                                      log_q_excludes_positive)
    return weight


def full_softmax_loss(logits, labels, mask=None):
    """Full softmax cross-entropy over the catalog, per example.

    Args:
      logits: [batch, num_items] logits.
      labels: [batch] integer index of each row's positive.
      mask: optional [num_items] or [batch, num_items] bool, False for non-candidates.

    Returns:
      [batch] float32 losses.
    """
    logits = k.float_tensor("logits", logits, rank=2)
    labels = k.ids_tensor("labels", labels, rank=1)
    k.check_compatible_dim("labels", labels, 0, "logits", logits, 0)
    if mask is not None:
        mask = k.bool_tensor("mask", mask)
        if len(mask.shape) == 1:
            mask = ops.broadcast_to(mask[None, :], ops.shape(logits))
    # A label without a column reads NaN (the rule of `logq_core.checks.table_rows`).
    valid, columns = k.table_rows(labels, ops.shape(logits)[1])
    positive = ops.squeeze(ops.take_along_axis(logits, columns[:, None], axis=1), axis=1)
    return formulas.full_softmax(k.OPS, logits, ops.where(valid, positive, float("nan")), mask)


def bce_loss(positive_logits, negative_logits, negative_mask=None):
    """Binary cross-entropy with sampled negatives (SASRec), per example ([batch] float32)."""
    positive_logits, negative_logits, negative_mask = _prepare_sampled(
        positive_logits, negative_logits, negative_mask)
    return formulas.binary_cross_entropy(k.OPS, positive_logits, negative_logits,
                                         negative_mask, 1.0)


def gbce_loss(positive_logits, negative_logits, *, num_items: int, t: float,
              negative_mask=None):
    """gBCE (gSASRec; Petrov & Macdonald 2023), per example; beta from `formulas.gbce_beta`.

    Args:
      positive_logits: [batch]; negative_logits: [batch, n] with a static n.
      num_items: catalog size |D|.
      t: calibration parameter in [0, 1].
      negative_mask: optional [batch, n] bool.
    """
    positive_logits, negative_logits, negative_mask = _prepare_sampled(
        positive_logits, negative_logits, negative_mask)
    if negative_logits.shape[1] is None:
        raise ValueError("gbce_loss needs a static number of negatives; received "
                         f"negative_logits with shape {tuple(negative_logits.shape)}.")
    beta = formulas.gbce_beta(int(negative_logits.shape[1]), num_items, t)
    return formulas.binary_cross_entropy(k.OPS, positive_logits, negative_logits,
                                         negative_mask, beta)


def negatives_loss(query_embeddings, positive_embeddings, negatives, *, correction: str,
                   temperature: float = 1.0):
    """The per-example loss of the negatives a `keras_logq.negatives` sampler drew.

    Args:
      query_embeddings: [batch, dim].
      positive_embeddings: [batch, dim], each row's positive.
      negatives: a `keras_logq.negatives.Negatives` (embeddings [n, dim] shared,
        [batch, n, dim] per row, or the mixed sampler's (per-row, shared) pair).
      correction: as in `sampled_softmax_loss`.
      temperature: logits are dot products divided by it.

    Returns:
      [batch] float32 losses.
    """
    if negatives.embeddings is None:
        raise ValueError("`negatives` carry no embeddings: give the sampler the candidates' "
                         "embeddings (or an `embedding_fn` for uniform draws).")
    query = ops.cast(query_embeddings, "float32")
    positive = ops.sum(query * ops.cast(positive_embeddings, "float32"), axis=1)
    parts = (negatives.embeddings if isinstance(negatives.embeddings, (tuple, list))
             else (negatives.embeddings,))
    scores = [ops.einsum("bd,bnd->bn", query, ops.cast(part, "float32")) if len(part.shape) == 3
              else ops.matmul(query, ops.transpose(ops.cast(part, "float32"))) for part in parts]
    negative_logits = scores[0] if len(scores) == 1 else ops.concatenate(scores, axis=1)
    return sampled_softmax_loss(
        positive / temperature, negative_logits / temperature, correction=correction,
        negative_log_q=negatives.log_q, positive_log_q=negatives.positive_log_q,
        negative_mask=negatives.mask,
        log_q_excludes_positive=negatives.log_q_excludes_positive)


@keras.saving.register_keras_serializable(package="keras_logq")
class SampledSoftmax(keras.layers.Layer):
    """Per-example sampled-softmax loss with a logQ correction, on keras-rs scores.

    Give it the [batch, num_candidates] scores a `keras_rs.layers.Retrieval`
    computes (`retrieval.compute_score(queries, candidates)`) with one-hot
    labels of each row's positive column, or the query and candidate
    embeddings (in-batch: candidate i is row i's positive, labels the identity).
    Every other column is a negative, except accidental hits (a column whose
    id is the row's positive id) when `candidate_ids` are given. The positive's
    log Q is read from its column of `candidate_log_q`.

    Example (in-batch two-tower, keras-rs):

    >>> loss_layer = keras_logq.SampledSoftmax(correction="improved")
    >>> scores = retrieval.compute_score(query_embeddings, candidate_embeddings)
    >>> losses = loss_layer(scores, ops.eye(batch_size),
    ...                     candidate_log_q=frequency.log_q(candidate_ids),
    ...                     candidate_ids=candidate_ids)

    Args:
      correction: "none", "standard", "standard_negatives" or "improved".
      temperature: scores are divided by it.
      log_q_excludes_positive: `candidate_log_q` already is log Q' (see
        `sampled_softmax_loss`).
      **kwargs: standard Keras layer arguments.
    """

    def __init__(self, correction: str = "improved", temperature: float = 1.0,
                 log_q_excludes_positive: bool = False, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.correction = checks.check_choice("correction", correction, CORRECTIONS)
        self.temperature = checks.check_positive_float("temperature", temperature)
        self.log_q_excludes_positive = checks.check_bool("log_q_excludes_positive",
                                                         log_q_excludes_positive)
        self.built = True

    def call(self, scores=None, labels=None, candidate_log_q=None, candidate_ids=None,
             negative_mask=None, query_embeddings=None, candidate_embeddings=None):
        """Returns the [batch] per-example losses.

        Args:
          scores: [batch, num_candidates] scores (or give the embeddings).
          labels: [batch, num_candidates] one-hot labels of the positive
            columns; default: the identity (in-batch, square scores).
          candidate_log_q: [num_candidates] or [batch, num_candidates] per-draw
            log Q of every column; needed by every correction but "none".
          candidate_ids: optional [num_candidates] integer ids, to remove
            accidental hits.
          negative_mask: optional [batch, num_candidates] bool, False for
            columns that are no negative of that row (padding).
          query_embeddings: [batch, dim], instead of `scores`.
          candidate_embeddings: [num_candidates, dim], instead of `scores`.
        """
        if scores is None:
            if query_embeddings is None or candidate_embeddings is None:
                raise ValueError("SampledSoftmax needs `scores`, or `query_embeddings` and "
                                 "`candidate_embeddings`; received neither.")
            scores = ops.matmul(ops.cast(query_embeddings, "float32"),
                                ops.transpose(ops.cast(candidate_embeddings, "float32")))
        scores = k.float_tensor("scores", scores, rank=2) / self.temperature
        if labels is None:
            if scores.shape[0] is not None and scores.shape[0] != scores.shape[1]:
                raise ValueError(
                    "Without `labels` the scores must be square (in-batch: column i is row "
                    f"i's positive); received scores with shape {tuple(scores.shape)}.")
            labels = ops.eye(ops.shape(scores)[0])
        labels = ops.cast(labels, "float32")
        k.check_rank("labels", labels, 2)
        is_positive = labels > 0.0
        mask = ops.logical_not(is_positive)
        if candidate_ids is not None:
            candidate_ids = k.ids_tensor("candidate_ids", candidate_ids)
            positive_ids = ops.take(candidate_ids, ops.argmax(labels, axis=1), axis=0)
            mask = ops.logical_and(mask, formulas.accidental_hit_mask(k.OPS, positive_ids,
                                                                      candidate_ids))
        if negative_mask is not None:
            negative_mask = k.bool_tensor("negative_mask", negative_mask)
            mask = ops.logical_and(mask, negative_mask)
        positive = ops.sum(ops.where(is_positive, scores, 0.0), axis=1)
        positive_log_q = None
        if candidate_log_q is not None:
            candidate_log_q = k.float_tensor("candidate_log_q", candidate_log_q)
            full_log_q = ops.broadcast_to(candidate_log_q, ops.shape(scores))
            positive_log_q = ops.sum(ops.where(is_positive, full_log_q, 0.0), axis=1)
        loss, _ = sampled_softmax_terms(positive, scores, self.correction, candidate_log_q,
                                        positive_log_q, mask, self.log_q_excludes_positive)
        return loss

    def compute_output_shape(self, scores_shape=None, *args, **kwargs):
        del args, kwargs
        return (None if scores_shape is None else scores_shape[0],)

    def get_config(self):
        config = super().get_config()
        config.update(correction=self.correction, temperature=self.temperature,
                      log_q_excludes_positive=self.log_q_excludes_positive)
        return config
