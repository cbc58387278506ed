"""Per-example retrieval losses for Keras 3: sampled softmax with logQ corrections, full
softmax, BCE, gBCE, and the `SampledSoftmax` layer for keras-rs scores.

The formulas are `logq_core.formulas`, the ones `tfrs_logq.losses` runs on
TensorFlow; this module checks the inputs and runs them on `keras.ops`. Every
function returns one loss per example, shape [batch], in float32.

Sequences: every loss also takes per-position inputs (a SASRec-style model scores each
of its [batch, length] positions): the per-example shapes below gain a length axis after
the batch one ([batch] becomes [batch, length], [batch, n] becomes [batch, length, n]), the
loss is [batch, length], and `position_mask` ([batch, length] bool, False for padding; the
`mask` of `SampledSoftmax`, which Keras's mask propagation also fills) makes a padding
position's loss 0 with no gradient, whatever its inputs hold. `masked_mean` then averages
over the real positions only. The result equals the loss of the real positions flattened
into rows.
"""

import functools
from typing import Optional

import keras
from keras import ops

from keras_logq import _ops as k
from logq_core import checks
from logq_core import formulas
from logq_core.samplers import Negatives

CORRECTIONS = formulas.CORRECTIONS
# SampledSoftmax's `reduction`: per-example losses, or their mean (over real examples) or sum.
REDUCTIONS = ("none", "mean", "sum")


_prepare_sampled = functools.partial(checks.logits_inputs, k.TENSORS)


def _per_column(name, tensor, of_name, of):
    """`tensor` checked to hold one value per column of the [B, N] `of` ([N], [1, N] or
    [B, N]; `logq_core.checks.per_column_tensor`), a static [1, N] reshaped to [N]."""
    if k.per_column_tensor(name, tensor, of_name, of):
        return ops.reshape(tensor, (-1,))
    return tensor


# ---------------------------------------------------------------- per-position inputs


def _rank(tensor) -> Optional[int]:
    shape = k.TENSORS.shape(tensor)
    return None if shape is None else len(shape)


def _flat_positions(name, tensor, positions_name, positions):
    """[batch, length, ...] `tensor`, checked against the [batch, length] `positions`,
    as [batch * length, ...]."""
    for axis in (0, 1):
        k.check_compatible_dim(name, tensor, axis, positions_name, positions, axis)
    return ops.reshape(tensor, (-1, *ops.shape(tensor)[2:]))


def _position_mask(name, mask, positions_name, positions):
    """The bool mask of one entry per position of `positions` ([batch] or [batch, length]),
    or None."""
    if mask is None:
        return None
    mask = k.bool_tensor(name, mask, rank=_rank(positions))
    k.check_same_shape(name, mask, positions_name, positions)
    return mask


def masked_mean(losses, mask=None):
    """The mean of `losses` over the real positions (or rows): sum of m_i l_i / sum of m_i.

    Args:
      losses: [batch] or [batch, length] per-example losses, as the losses here return.
      mask: optional bool of the same shape, False for padding (None: every entry).

    Returns:
      A float32 scalar; 0 when no entry is real.
    """
    losses = k.float_tensor("losses", losses)
    if mask is None:
        return ops.mean(losses)
    mask = k.bool_tensor("mask", mask)
    k.check_same_shape("mask", mask, "losses", losses)
    total = ops.sum(ops.where(mask, losses, 0.0))
    return total / ops.maximum(ops.sum(ops.cast(mask, "float32")), 1.0)


class _Positions:
    """Per-position inputs of the sampled losses as rows, and the losses back.

    [batch, length] positive logits (with [batch, length, n] negatives and the like) are
    flattened to [batch * length] rows; the position mask (if any) then removes each
    padding row: its logits and log Q are replaced by harmless values (so that neither
    its loss nor its gradient can be NaN) and its negatives are masked, and `restore`
    sets its loss to 0.
    """

    def __init__(
        self,
        positive_logits,
        negative_logits,
        position_mask,
        negative_mask=None,
        negative_log_q=None,
        positive_log_q=None,
    ):
        self.positive = k.float_tensor("positive_logits", positive_logits)
        self.sequence = _rank(self.positive) == 2
        self._shape = ops.shape(self.positive)
        self.mask = _position_mask("position_mask", position_mask, "positive_logits", self.positive)
        self.negative = negative_logits
        self.negative_mask, self.negative_log_q = negative_mask, negative_log_q
        self.positive_log_q = positive_log_q
        if self.sequence:
            self._flatten()
        if self.mask is not None:
            self._remove_padding(ops.reshape(self.mask, (-1,)))

    def _flatten(self):
        positions = self.positive
        negative = k.float_tensor("negative_logits", self.negative, rank=3)
        self.negative = _flat_positions("negative_logits", negative, "positive_logits", positions)
        if self.negative_mask is not None:
            self.negative_mask = _flat_positions(
                "negative_mask",
                k.bool_tensor("negative_mask", self.negative_mask, rank=3),
                "positive_logits",
                positions,
            )
        if self.negative_log_q is not None:
            log_q = k.float_tensor("negative_log_q", self.negative_log_q)
            if _rank(log_q) == 3:  # [batch, length, n]; [n] and [1, n] are shared.
                log_q = _flat_positions("negative_log_q", log_q, "positive_logits", positions)
            self.negative_log_q = log_q
        if self.positive_log_q is not None:
            log_q = k.float_tensor("positive_log_q", self.positive_log_q, rank=2)
            k.check_same_shape("positive_log_q", log_q, "positive_logits", positions)
            self.positive_log_q = ops.reshape(log_q, (-1,))
        self.positive = ops.reshape(positions, (-1,))

    def _remove_padding(self, real):
        self.positive = ops.where(real, self.positive, 0.0)
        negative = k.float_tensor("negative_logits", self.negative, rank=2)
        k.check_compatible_dim("position_mask", real, 0, "negative_logits", negative, 0)
        self.negative = ops.where(real[:, None], negative, 0.0)
        keep = ops.broadcast_to(real[:, None], ops.shape(self.negative))
        self.negative_mask = (
            keep
            if self.negative_mask is None
            else ops.logical_and(k.bool_tensor("negative_mask", self.negative_mask, rank=2), keep)
        )
        if self.negative_log_q is not None:
            log_q = k.float_tensor("negative_log_q", self.negative_log_q)
            if _rank(log_q) == 2 and log_q.shape[0] != 1:
                log_q = ops.where(real[:, None], log_q, -1.0)
            self.negative_log_q = log_q
        if self.positive_log_q is not None:
            self.positive_log_q = ops.where(
                real, k.float_tensor("positive_log_q", self.positive_log_q), -1.0
            )

    def restore(self, rows):
        """[rows] values as the caller's [batch] or [batch, length], 0 at padding."""
        if self.sequence:
            rows = ops.reshape(rows, self._shape)
        return rows if self.mask is None else ops.where(self.mask, rows, 0.0)


def sampled_softmax_terms(
    positive_logits,
    negative_logits,
    correction,
    negative_log_q=None,
    positive_log_q=None,
    negative_mask=None,
    log_q_excludes_positive=False,
    log_q_scale=1.0,
    num_hard_negatives=None,
):
    """(`sampled_softmax_loss`, the improved weight w or None), arguments as there,
    `correction` already checked."""
    corrected = correction != "none" and negative_log_q is not None
    if corrected or num_hard_negatives is not None:
        positive_logits, negative_logits, negative_mask = _prepare_sampled(
            positive_logits, negative_logits, negative_mask
        )
    if corrected:
        # [1, n] is accepted here (keras-rs users pass it) and handed on as [n].
        negative_log_q = _per_column(
            "negative_log_q",
            k.float_tensor("negative_log_q", negative_log_q),
            "negative_logits",
            negative_logits,
        )
    num_valid = None
    if num_hard_negatives is not None:
        num_hard_negatives = checks.check_positive_int("num_hard_negatives", num_hard_negatives)
        if negative_mask is None:
            negative_mask = ops.ones(ops.shape(negative_logits), "bool")
        # Checked before the ranking: an invalid log Q must not be mined away unseen.
        log_q = k.nan_unless_log_probabilities(negative_log_q) if corrected else None
        negative_logits, negative_mask, log_q, num_valid = formulas.hard_negatives(
            k.OPS,
            negative_logits,
            negative_mask,
            log_q,
            min(num_hard_negatives, negative_logits.shape[1] or num_hard_negatives),
            formulas.check_log_q_scale(log_q_scale),
        )
        negative_log_q = negative_log_q if log_q is None else log_q
    return formulas.checked_sampled_softmax_terms(
        k.OPS,
        k.TENSORS,
        lambda name, log_q: k.nan_unless_log_probabilities(log_q),
        positive_logits,
        negative_logits,
        correction,
        negative_log_q,
        positive_log_q,
        negative_mask,
        log_q_excludes_positive,
        log_q_scale,
        num_valid,
    )


def sampled_softmax_loss(
    positive_logits,
    negative_logits,
    *,
    correction: str,
    negative_log_q=None,
    positive_log_q=None,
    negative_mask=None,
    log_q_excludes_positive: bool = False,
    log_q_scale: float = 1.0,
    num_hard_negatives: Optional[int] = None,
    position_mask=None,
):
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
      negative_log_q: [num_negatives], [1, num_negatives] or [batch, num_negatives]
        per-draw log Q(d_i) ([batch, 1] is refused: one value per negative).
      positive_log_q: [batch] log Q(p); needed by "standard", and by "improved"
        unless `log_q_excludes_positive`.
      negative_mask: optional [batch, num_negatives] bool, True for a valid negative.
      log_q_excludes_positive: `negative_log_q` already is log Q' (the
        proposal without the positive), as the samplers' Horvitz-Thompson and
        exact-mixture log Q are.
      log_q_scale: lambda >= 0, the weight of the correction (Merlin's `reg_factor`):
        every log Q subtracted becomes lambda log Q; 1 the correction, 0 no shift.
      num_hard_negatives: keep only each row's k valid negatives with the largest
        corrected logits, for any correction; "improved" keeps n, the valid negatives
        before mining (`logq_core.formulas.hard_negatives`, as `tfrs_logq`'s).
      position_mask: optional [batch] bool, False for a padding row (loss 0, no
        gradient).

    Per position (a sequence model): positive_logits [batch, length], negative_logits
    [batch, length, n], negative_log_q [n], [1, n] or [batch, length, n], positive_log_q
    [batch, length], negative_mask [batch, length, n], position_mask [batch, length];
    the losses are then [batch, length] (the module docstring; `masked_mean` averages
    them over the real positions).

    Returns:
      [batch] (or [batch, length]) float32 losses. Log-probabilities outside (0, 1] give
      NaN.

    Raises:
      ValueError: unknown `correction`, a missing log Q, mismatched shapes (named,
        with the shapes received, before anything is broadcast).
      TypeError: non-float logits or log Q, non-bool mask.
    """
    checks.check_choice("correction", correction, CORRECTIONS)
    rows = _Positions(
        positive_logits,
        negative_logits,
        position_mask,
        negative_mask,
        negative_log_q,
        positive_log_q,
    )
    loss, _ = sampled_softmax_terms(
        rows.positive,
        rows.negative,
        correction,
        rows.negative_log_q,
        rows.positive_log_q,
        rows.negative_mask,
        log_q_excludes_positive,
        log_q_scale,
        num_hard_negatives,
    )
    return rows.restore(loss)


def improved_weight(
    positive_logits,
    negative_logits,
    *,
    negative_log_q,
    positive_log_q=None,
    negative_mask=None,
    log_q_excludes_positive: bool = False,
    position_mask=None,
):
    """The improved correction's [batch] (or [batch, length]) weight w = 1 - P_hat (0 for
    rows with no valid negative and padding positions), for logging; arguments as in
    `sampled_softmax_loss`."""
    rows = _Positions(
        positive_logits,
        negative_logits,
        position_mask,
        negative_mask,
        negative_log_q,
        positive_log_q,
    )
    _, weight = sampled_softmax_terms(
        rows.positive,
        rows.negative,
        "improved",
        rows.negative_log_q,
        rows.positive_log_q,
        rows.negative_mask,
        log_q_excludes_positive,
    )
    return rows.restore(weight)


def full_softmax_loss(logits, labels, mask=None, position_mask=None):
    """Full softmax cross-entropy over the catalog, per example.

    Args:
      logits: [batch, num_items] (or [batch, length, num_items]) logits.
      labels: [batch] (or [batch, length]) integer index of each positive.
      mask: optional [num_items], [1, num_items] or [batch, num_items] (or [batch, length,
        num_items]) bool, False for non-candidates.
      position_mask: optional bool of `labels`' shape, False for padding.

    Returns:
      [batch] (or [batch, length]) float32 losses, 0 at padding; NaN for a real label
      outside [0, num_items) (the id rule of `logq_core.checks.table_rows`, on every
      backend).
    """
    logits = k.float_tensor("logits", logits)
    shape = None
    if _rank(logits) == 3:
        labels = k.ids_tensor("labels", labels, rank=2)
        shape = ops.shape(labels)
        if mask is not None and _rank(mask) == 3:
            mask = _flat_positions("mask", k.bool_tensor("mask", mask), "logits", logits)
        logits = _flat_positions("logits", logits, "labels", labels)
        position_mask = _position_mask("position_mask", position_mask, "labels", labels)
        labels = ops.reshape(labels, (-1,))
    logits = k.float_tensor("logits", logits, rank=2)
    labels = k.ids_tensor("labels", labels, rank=1)
    k.check_compatible_dim("labels", labels, 0, "logits", logits, 0)
    if shape is None:
        position_mask = _position_mask("position_mask", position_mask, "labels", labels)
    real = None if position_mask is None else ops.reshape(position_mask, (-1,))
    if real is not None:  # Padding rows read column 0 of zero logits: finite, no gradient.
        labels = ops.where(real, labels, ops.zeros_like(labels))
        logits = ops.where(real[:, None], logits, 0.0)
    if mask is not None:
        mask = _per_column("mask", k.bool_tensor("mask", mask), "logits", logits)
        if len(mask.shape) == 1:
            mask = ops.broadcast_to(mask[None, :], ops.shape(logits))
        if real is not None:
            mask = ops.logical_or(mask, ops.logical_not(real)[:, None])
    # A label without a column reads NaN (the rule of `logq_core.checks.table_rows`).
    valid, columns = k.table_rows(labels, ops.shape(logits)[1])
    positive = ops.squeeze(ops.take_along_axis(logits, columns[:, None], axis=1), axis=1)
    loss = formulas.full_softmax(k.OPS, logits, ops.where(valid, positive, float("nan")), mask)
    if shape is not None:
        loss = ops.reshape(loss, shape)
    return loss if position_mask is None else ops.where(position_mask, loss, 0.0)


def bce_loss(positive_logits, negative_logits, negative_mask=None, position_mask=None):
    """Binary cross-entropy with sampled negatives (SASRec), per example.

    Args:
      positive_logits: [batch] (or [batch, length]).
      negative_logits: [batch, n] (or [batch, length, n]).
      negative_mask: optional bool of `negative_logits`' shape.
      position_mask: optional bool of `positive_logits`' shape, False for padding.

    Returns:
      [batch] (or [batch, length]) float32 losses, 0 at padding.
    """
    return _binary_cross_entropy(
        positive_logits, negative_logits, negative_mask, position_mask, lambda negative: 1.0
    )


def _binary_cross_entropy(positive_logits, negative_logits, negative_mask, position_mask, beta_of):
    """BCE of the (per-position) inputs; `beta_of` maps the [rows, n] negatives to beta."""
    rows = _Positions(positive_logits, negative_logits, position_mask, negative_mask)
    positive, negative, negative_mask = _prepare_sampled(
        rows.positive, rows.negative, rows.negative_mask
    )
    return rows.restore(
        formulas.binary_cross_entropy(k.OPS, positive, negative, negative_mask, beta_of(negative))
    )


def gbce_loss(
    positive_logits,
    negative_logits,
    *,
    num_items: int,
    t: float,
    negative_mask=None,
    position_mask=None,
):
    """gBCE (gSASRec; Petrov & Macdonald 2023), per example; beta from `formulas.gbce_beta`.

    Args:
      positive_logits: [batch] (or [batch, length]).
      negative_logits: [batch, n] (or [batch, length, n]) with a static n.
      num_items: catalog size |D|.
      t: calibration parameter in [0, 1].
      negative_mask: optional bool of `negative_logits`' shape.
      position_mask: optional bool of `positive_logits`' shape, False for padding.

    Returns:
      [batch] (or [batch, length]) float32 losses, 0 at padding.
    """

    def beta_of(negative):
        if negative.shape[1] is None:
            raise ValueError(
                "gbce_loss needs a static number of negatives; received "
                f"negative_logits with shape {tuple(negative.shape)}."
            )
        return formulas.gbce_beta(int(negative.shape[1]), num_items, t)

    return _binary_cross_entropy(
        positive_logits, negative_logits, negative_mask, position_mask, beta_of
    )


def negatives_loss(
    query_embeddings,
    positive_embeddings,
    negatives,
    *,
    correction: str,
    temperature: float = 1.0,
    log_q_scale: float = 1.0,
    num_hard_negatives: Optional[int] = None,
    position_mask=None,
):
    """The per-example loss of the negatives a `keras_logq.negatives` sampler drew.

    Args:
      query_embeddings: [batch, dim], or [batch, length, dim] per position (the sampler
        then drew for the batch * length positions flattened: its `positive_ids` were the
        [batch * length] targets).
      positive_embeddings: the query's shape, each row's (position's) positive.
      negatives: a `keras_logq.negatives.Negatives` (embeddings [n, dim] shared,
        [rows, n, dim] per row, or the mixed sampler's (per-row, shared) pair; mask and
        log Q of [rows] = [batch] or [batch * length] rows).
      correction: as in `sampled_softmax_loss`.
      temperature: logits are dot products divided by it.
      log_q_scale, num_hard_negatives: as in `sampled_softmax_loss`.
      position_mask: optional [batch] (or [batch, length]) bool, False for padding.

    Returns:
      [batch] (or [batch, length]) float32 losses, 0 at padding.
    """
    checks.check_choice("correction", correction, CORRECTIONS)
    temperature = checks.check_positive_float("temperature", temperature)
    if not isinstance(negatives, Negatives):
        raise TypeError(
            "`negatives` must be the `Negatives` a keras_logq sampler returns; "
            f"received negatives of type {type(negatives).__name__}."
        )
    if negatives.embeddings is None:
        raise ValueError(
            "`negatives` carry no embeddings: give the sampler the candidates' "
            "embeddings (or an `embedding_fn` for uniform draws)."
        )
    query = k.float_tensor("query_embeddings", query_embeddings)
    positive = k.float_tensor("positive_embeddings", positive_embeddings)
    k.check_same_shape("positive_embeddings", positive, "query_embeddings", query)
    shape = None
    if _rank(query) == 3:
        shape = ops.shape(query)[:2]
        position_mask = _position_mask(
            "position_mask", position_mask, "query_embeddings", query[:, :, 0]
        )
        if position_mask is not None:
            position_mask = ops.reshape(position_mask, (-1,))
        query = ops.reshape(query, (-1, query.shape[-1]))
        positive = ops.reshape(positive, (-1, positive.shape[-1]))
    query = k.float_tensor("query_embeddings", query, rank=2)
    parts = (
        negatives.embeddings
        if isinstance(negatives.embeddings, (tuple, list))
        else (negatives.embeddings,)
    )
    parts = [k.float_tensor("negatives.embeddings", part) for part in parts]
    for part in parts:
        if len(part.shape) not in (2, 3):
            raise ValueError(
                "`negatives.embeddings` must be [n, dim] or [batch, n, dim]; "
                f"received a part with shape {tuple(part.shape)}."
            )
        k.check_compatible_dim("negatives.embeddings", part, -1, "query_embeddings", query, 1)
        if len(part.shape) == 3:
            k.check_compatible_dim("negatives.embeddings", part, 0, "query_embeddings", query, 0)
    positive = ops.sum(query * positive, axis=1)
    scores = [
        ops.einsum("bd,bnd->bn", query, part)
        if len(part.shape) == 3
        else ops.matmul(query, ops.transpose(part))
        for part in parts
    ]
    negative_logits = scores[0] if len(scores) == 1 else ops.concatenate(scores, axis=1)
    loss = sampled_softmax_loss(
        positive / temperature,
        negative_logits / temperature,
        correction=correction,
        negative_log_q=negatives.log_q,
        positive_log_q=negatives.positive_log_q,
        negative_mask=negatives.mask,
        log_q_excludes_positive=negatives.log_q_excludes_positive,
        log_q_scale=log_q_scale,
        num_hard_negatives=num_hard_negatives,
        position_mask=position_mask,
    )
    return loss if shape is None else ops.reshape(loss, shape)


def _positives(labels, scores):
    """[batch, N] bool, True at each row's positive: `labels` > 0 (or True), checked to be
    one label per score; the identity when `labels` is None (square scores)."""
    if labels is None:
        if scores.shape[0] is not None and scores.shape[0] != scores.shape[1]:
            raise ValueError(
                "Without `labels` the scores must be square (in-batch: column i is row "
                f"i's positive); received scores with shape {tuple(scores.shape)}."
            )
        return ops.cast(ops.eye(ops.shape(scores)[0]), "bool")
    labels = ops.convert_to_tensor(labels)
    dtype = keras.backend.standardize_dtype(labels.dtype)
    if not dtype.startswith(("float", "bfloat", "int", "uint", "bool")):
        raise TypeError(
            "`labels` must be a float, integer or bool tensor of one-hot labels; "
            f"received labels with dtype {dtype}."
        )
    k.check_rank("labels", labels, 2)
    k.check_same_shape("labels", labels, "scores", scores)
    return labels if dtype == "bool" else ops.greater(labels, ops.zeros_like(labels))


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

    Inputs are checked before anything is broadcast: a wrong dtype is a TypeError and a
    static shape that does not fit the scores a ValueError (at trace time), each naming
    the argument and the shapes received. Per-candidate arguments (`candidate_log_q`,
    `candidate_ids`, `negative_mask`) take [N] or [1, N] (shared by the rows; keras-rs's
    `SamplingProbabilityCorrection` is given [1, N]) or [B, N] (per row); [B, 1] is
    refused (it would give every candidate of a row one value).

    Sequences (SASRec): scores [B, L, N] score each of the L positions of a row (or give
    `query_embeddings` [B, L, dim]), with labels [B, L, N] and per-candidate arguments
    [N], [1, N] or [B, L, N]; the losses are then [B, L]. The position mask `mask`
    ([B, L] bool, False for padding; filled by Keras's mask propagation when a masking
    layer attached one to the scores or query embeddings) gives padding loss 0 and no
    gradient, and `reduction="mean"` divides by the real positions only: the result
    equals the flattened [B * L, N] rows of the real positions.

    >>> layer = keras_logq.SampledSoftmax(correction="improved", reduction="mean")
    >>> loss = layer(scores, labels, candidate_log_q=log_q, mask=targets > 0)

    Labels: a label > 0 (True for bool labels) marks a row's positive, and a row has
    one. Keras 3 has no portable assertion, so, like log-probabilities outside (0, 1],
    other rows are marked in the loss, on every backend: a row with no positive is no
    example (loss 0, no gradient: a padding row), a row with two or more positives has
    a NaN loss (this loss has one positive per row; mask a row's other positives with
    `negative_mask` instead).

    Args:
      correction: "none", "standard", "standard_negatives" or "improved".
      temperature: scores are divided by it.
      log_q_excludes_positive: `candidate_log_q` already is log Q' (see
        `sampled_softmax_loss`).
      log_q_scale, num_hard_negatives: see `sampled_softmax_loss`.
      reduction: "none" (the per-example losses), "mean" (their mean over the examples:
        rows or positions with a positive that the position mask keeps) or "sum".
      **kwargs: standard Keras layer arguments.
    """

    def __init__(
        self,
        correction: str = "improved",
        temperature: float = 1.0,
        log_q_excludes_positive: bool = False,
        log_q_scale: float = 1.0,
        num_hard_negatives: Optional[int] = None,
        reduction: str = "none",
        **kwargs,
    ):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.correction = checks.check_choice("correction", correction, CORRECTIONS)
        self.temperature = checks.check_positive_float("temperature", temperature)
        self.log_q_excludes_positive = checks.check_bool(
            "log_q_excludes_positive", log_q_excludes_positive
        )
        self.log_q_scale = formulas.check_log_q_scale(log_q_scale)
        self.num_hard_negatives = checks.check_positive_int(
            "num_hard_negatives", num_hard_negatives, allow_none=True
        )
        self.reduction = checks.check_choice("reduction", reduction, REDUCTIONS)
        self.supports_masking = True  # The position mask (see `call`).
        self.built = True

    def __call__(self, *args, **kwargs):
        # Keras converts host arrays to the backend's tensors before `call`: string ids
        # would fail there as floats, and int64 ids on JAX be cut to 32 bits.
        ids = kwargs.get("candidate_ids", args[3] if len(args) > 3 else None)
        if ids is not None:
            k.check_host_ids("candidate_ids", ids)
        return super().__call__(*args, **kwargs)

    def call(
        self,
        scores=None,
        labels=None,
        candidate_log_q=None,
        candidate_ids=None,
        negative_mask=None,
        query_embeddings=None,
        candidate_embeddings=None,
        mask=None,
        scores_mask=None,
        query_embeddings_mask=None,
    ):
        """Returns the per-example losses: [batch], or [batch, length] per position (a
        scalar with `reduction` "mean" or "sum").

        Args:
          scores: [batch, num_candidates] float scores (or give the embeddings); per
            position (a sequence model), [batch, length, num_candidates].
          labels: one-hot labels of the positive columns (float, integer or bool), of
            the scores' shape; default (rank-2 scores only): the identity (in-batch,
            square scores). A row without a positive has loss 0, a row with several a
            NaN loss (see the class docstring).
          candidate_log_q: [num_candidates], [1, num_candidates] or
            [batch, num_candidates] (per position, [batch, length, num_candidates])
            per-draw log Q of every column; needed by every correction but "none".
          candidate_ids: optional integer ids, shapes as `candidate_log_q`, to remove
            accidental hits. Only compared for equality: any integer is an id.
          negative_mask: optional bool, shapes as `candidate_log_q`, False for columns
            that are no negative of that row (padding, the row's other positives).
          query_embeddings: [batch, dim] (or [batch, length, dim]), instead of `scores`.
          candidate_embeddings: [num_candidates, dim], instead of `scores`.
          mask: optional [batch] (or [batch, length]) bool position mask, False for
            padding: loss 0, no gradient, and not counted by `reduction="mean"`.
          scores_mask, query_embeddings_mask: the same mask as Keras's mask propagation
            passes it (the mask a masking layer attached to `scores` or to
            `query_embeddings`); `mask` wins when given.
        """
        mask = next((m for m in (mask, scores_mask, query_embeddings_mask) if m is not None), None)
        scores = self._scores(scores, query_embeddings, candidate_embeddings)
        shape = None
        if _rank(scores) == 3:
            if labels is None:
                raise ValueError(
                    "SampledSoftmax needs `labels` with per-position scores [batch, length, "
                    f"num_candidates]; received scores with shape {tuple(scores.shape)} and "
                    "labels=None."
                )
            shape = ops.shape(scores)[:2]
            mask = _position_mask("mask", mask, "scores[:, :, 0]", scores[:, :, 0])
            labels = ops.convert_to_tensor(labels)
            k.check_same_shape("labels", labels, "scores", scores)
            labels = _flat_positions("labels", labels, "scores", scores)

            def rows(name, value):
                return (
                    _flat_positions(name, value, "scores", scores)
                    if value is not None and _rank(value) == 3
                    else value
                )

            candidate_log_q = rows(
                "candidate_log_q",
                None
                if candidate_log_q is None
                else k.float_tensor("candidate_log_q", candidate_log_q),
            )
            candidate_ids = rows(
                "candidate_ids",
                None
                if candidate_ids is None
                else k.ids_tensor("candidate_ids", candidate_ids, rank=None),
            )
            negative_mask = rows(
                "negative_mask",
                None if negative_mask is None else k.bool_tensor("negative_mask", negative_mask),
            )
            scores = ops.reshape(scores, (-1, ops.shape(scores)[2]))
        else:
            scores = k.float_tensor("scores", scores, rank=2)
            mask = _position_mask("mask", mask, "scores[:, 0]", scores[:, 0])
        real = None if mask is None else ops.reshape(mask, (-1,))
        loss, examples = self._rows(
            scores, labels, candidate_log_q, candidate_ids, negative_mask, real
        )
        if shape is not None:
            loss, examples = ops.reshape(loss, shape), ops.reshape(examples, shape)
        if self.reduction == "none":
            return loss
        if self.reduction == "sum":
            return ops.sum(loss)
        return masked_mean(loss, examples)

    def _rows(self, scores, labels, candidate_log_q, candidate_ids, negative_mask, real):
        """([rows] losses, [rows] bool: the row is an example) of [rows, N] scores; `real`
        [rows] bool or None, False for padding rows (no example)."""
        is_positive = _positives(labels, scores)
        if real is not None:  # A padding row has no positive: no example, loss 0.
            is_positive = ops.logical_and(is_positive, real[:, None])
        if self.correction != "none" and candidate_log_q is None:
            raise formulas.missing_log_q(
                self.correction, "`candidate_log_q`", "candidate_log_q=None"
            )
        if candidate_log_q is not None:
            candidate_log_q = _per_column(
                "candidate_log_q",
                k.float_tensor("candidate_log_q", candidate_log_q),
                "scores",
                scores,
            )
        if candidate_ids is not None:
            candidate_ids = _per_column(
                "candidate_ids",
                k.ids_tensor("candidate_ids", candidate_ids, rank=None),
                "scores",
                scores,
            )
        if negative_mask is not None:
            negative_mask = _per_column(
                "negative_mask", k.bool_tensor("negative_mask", negative_mask), "scores", scores
            )
        # Shapes are checked; from here on [N] and [B, N] broadcast against the scores.
        num_positives = ops.sum(ops.cast(is_positive, "int32"), axis=1)
        one_positive = ops.equal(num_positives, 1)
        if real is not None:  # Padding rows compute on zeros: finite, with no gradient.
            scores = ops.where(one_positive[:, None], scores, 0.0)
        # Rows without exactly one positive have no negative: their loss is computed as 0
        # with no gradient, then set below.
        mask = ops.logical_and(ops.logical_not(is_positive), one_positive[:, None])
        if candidate_ids is not None:
            positive_ids = ops.sum(
                ops.where(is_positive, candidate_ids, ops.zeros_like(candidate_ids)), axis=1
            )
            mask = ops.logical_and(
                mask, formulas.accidental_hit_mask(k.OPS, positive_ids, candidate_ids)
            )
        if negative_mask is not None:
            mask = ops.logical_and(mask, negative_mask)
        positive = ops.sum(ops.where(is_positive, scores, 0.0), axis=1)
        positive_log_q = None
        if candidate_log_q is not None:
            positive_log_q = ops.sum(ops.where(is_positive, candidate_log_q, 0.0), axis=1)
            # Any valid log Q for the rows set below, so that they compute finite values.
            positive_log_q = ops.where(one_positive, positive_log_q, -1.0)
            if real is not None and _rank(candidate_log_q) == 2:
                candidate_log_q = ops.where(one_positive[:, None], candidate_log_q, -1.0)
        loss, _ = sampled_softmax_terms(
            positive,
            scores,
            self.correction,
            candidate_log_q,
            positive_log_q,
            mask,
            self.log_q_excludes_positive,
            self.log_q_scale,
            self.num_hard_negatives,
        )
        loss = ops.where(ops.equal(num_positives, 0), 0.0, loss)
        return ops.where(num_positives > 1, float("nan"), loss), num_positives > 0

    def _scores(self, scores, query_embeddings, candidate_embeddings):
        """[batch, num_candidates] (or [batch, length, num_candidates]) float32 scores /
        temperature, given or from embeddings."""
        if scores is None:
            if query_embeddings is None or candidate_embeddings is None:
                raise ValueError(
                    "SampledSoftmax needs `scores`, or `query_embeddings` and "
                    "`candidate_embeddings`; received neither."
                )
            query = k.float_tensor("query_embeddings", query_embeddings)
            if _rank(query) not in (2, 3):
                raise ValueError(
                    "`query_embeddings` must be [batch, dim] or [batch, length, "
                    f"dim]; received query_embeddings with shape "
                    f"{tuple(query.shape)}."
                )
            candidates = k.float_tensor("candidate_embeddings", candidate_embeddings, rank=2)
            k.check_compatible_dim(
                "query_embeddings", query, _rank(query) - 1, "candidate_embeddings", candidates, 1
            )
            scores = ops.matmul(query, ops.transpose(candidates))
        elif query_embeddings is not None or candidate_embeddings is not None:
            given = [
                name
                for name, value in (
                    ("query_embeddings", query_embeddings),
                    ("candidate_embeddings", candidate_embeddings),
                )
                if value is not None
            ]
            raise ValueError(
                "SampledSoftmax takes `scores` or the embeddings, not both; "
                f"received scores and {' and '.join(given)}."
            )
        scores = k.float_tensor("scores", scores)
        if _rank(scores) not in (2, 3):
            raise ValueError(
                "`scores` must be [batch, num_candidates] or [batch, length, "
                f"num_candidates]; received scores with shape "
                f"{tuple(scores.shape)}."
            )
        return scores / self.temperature

    def compute_mask(self, inputs, previous_mask):
        """Per-example losses keep the position mask they came with; a reduced loss has
        none."""
        del inputs
        return previous_mask if self.reduction == "none" else None

    def compute_output_shape(self, scores_shape=None, *args, **kwargs):
        del args, kwargs
        if self.reduction != "none":
            return ()
        if scores_shape is None:
            return (None,)
        return tuple(scores_shape[:-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            correction=self.correction,
            temperature=self.temperature,
            log_q_excludes_positive=self.log_q_excludes_positive,
            log_q_scale=self.log_q_scale,
            num_hard_negatives=self.num_hard_negatives,
            reduction=self.reduction,
        )
        return config
