"""Per-example retrieval losses: sampled softmax with logQ corrections, full softmax, BCE, gBCE.

Every function returns one loss per example, shape [batch], in float32 whatever
the dtype of its inputs. Reduction (sum, mean, sample weights) happens in one
place: the task (`tfrs_logq.tasks.LogQRetrieval`) or the caller.

Notation (see docs/design.md): one query row u, positive item p with logit s_p,
negatives d_1..d_n with logits s_i and validity mask m_i, log Q(d) the log of
the per-draw proposal probability of d.
"""

import functools
from typing import Optional

import tensorflow as tf

from logq_core import checks
from logq_core import formulas
from tfrs_logq import _ops
from tfrs_logq import _validation as v
from tfrs_logq import negatives as negatives_lib

CORRECTIONS = formulas.CORRECTIONS


_prepare_sampled = functools.partial(checks.logits_inputs, v.TENSORS)


def sampled_softmax_loss(
    positive_logits: tf.Tensor,
    negative_logits: tf.Tensor,
    *,
    correction: str,
    negative_log_q: Optional[tf.Tensor] = None,
    positive_log_q: Optional[tf.Tensor] = None,
    negative_mask: Optional[tf.Tensor] = None,
    log_q_excludes_positive: bool = False,
    log_q_scale: float = 1.0,
    known_positives: Optional[tf.Tensor] = None,
) -> tf.Tensor:
    r"""Sampled-softmax loss per example, with no, the standard or the improved logQ correction.

    With m_i the validity mask and log Q the per-draw proposal probability:

    .. math::
        \text{none:}\quad \ell = -s_p + \log\big(e^{s_p} + \sum_i m_i e^{s_i}\big)

        \text{standard:}\quad c = s - \log Q,\quad
        \ell = -c_p + \log\big(e^{c_p} + \sum_i m_i e^{c_i}\big)

        \text{standard\_negatives:}\quad c_i = s_i - \log Q(d_i),\quad
        \ell = -s_p + \log\big(e^{s_p} + \sum_i m_i e^{c_i}\big)

        \text{improved:}\quad c'_i = s_i - \log Q'(d_i),\;
        \mathrm{LSE} = \log \sum_i m_i e^{c'_i},\; n = \sum_i m_i,\;
        \hat P = \sigma(s_p - \mathrm{LSE} + \log n),\;
        \ell = \mathrm{sg}(1 - \hat P)\,(\mathrm{LSE} - s_p)

    where log Q'(d) = log Q(d) - log(1 - Q(p)) (Q with the positive excluded
    and renormalised) unless `log_q_excludes_positive` says the caller already
    passes Q'.

    - "standard" is Yi et al. (RecSys 2019): every logit, the positive's too,
      is corrected. It equals `tfrs.tasks.Retrieval` with
      `candidate_sampling_probability=Q` (without its clipping of Q at 1e-6).
    - "standard_negatives" is the form of Yang et al. (WWW 2020, mixed
      negative sampling) and the baseline the improved correction's paper
      released (`NonameUntitled/logq`, train_in_batch_logq_old.py and
      train_mns_log_old.py: the raw positive score concatenated with
      `negative_scores - log(count / total)`): only the negatives are
      corrected, the positive enters raw.
    - "improved" is Khrylchenko et al. (RecSys 2025): the positive is not in
      the denominator, and the weight w = 1 - P_hat is a constant for the
      gradient (`tf.stop_gradient`).

    With the same negatives, all three corrections push a row in the same
    direction, d loss / d s = w_row * (softmax over the corrected valid
    negatives - onehot(p)) (Q' only shifts a row's negatives by a constant, so
    the softmax is the same), and differ only in the row weight w_row:

    - improved: w = 1 - P_hat, logit(w) = LSE_Q + log(1 - Q(p)) - log n - s_p,
      with LSE_Q the log-sum-exp of the valid negatives corrected by Q;
    - standard: 1 - p_s (p_s = e^{-loss}, the positive's share of its
      corrected softmax), logit(1 - p_s) = logit(w) + log(n Q(p) / (1 - Q(p)));
    - standard_negatives: 1 - p_s with the raw positive,
      logit(1 - p_s) = logit(w) + log(n / (1 - Q(p))).

    So "standard" down-weights rows whose positive is rare (n Q(p) < 1) once
    it scores well, and "standard_negatives" weights every row above
    "improved" by log(n / (1 - Q(p))) >= log n in logit: its rows stay near
    full weight until the positive outscores the sum of n corrected negatives.
    A row with no valid negative has loss 0 and zero gradient for every
    correction. The loss is not invariant to the scale of Q (P_hat depends on
    it): pass the per-draw probability, as the samplers in
    `tfrs_logq.negatives` do.

    Args:
      positive_logits: [batch] tensor of positive logits s_p (already divided
        by any temperature).
      negative_logits: [batch, num_negatives] tensor of negative logits s_i.
      correction: "none", "standard", "standard_negatives" or "improved".
      negative_log_q: [num_negatives] or [batch, num_negatives] tensor of
        log Q(d_i). Needed by every correction but "none".
      positive_log_q: [batch] tensor of log Q(p). Needed by "standard", and by
        "improved" unless `log_q_excludes_positive`; ignored by "none" and
        "standard_negatives".
      negative_mask: Optional [batch, num_negatives] bool tensor, True for a
        valid negative (False for accidental hits, padding, dropped slots).
      log_q_excludes_positive: For "improved": `negative_log_q` already is
        log Q' (the proposal with the positive excluded), so it is used as is.
      log_q_scale: lambda >= 0, the weight of the correction (Merlin's
        `reg_factor`): every log Q (log Q') in the formulas above becomes
        lambda log Q. 1 (default) is the correction and 0 shifts nothing; only
        1 makes Z_hat, and "improved"'s P_hat, unbiased.
      known_positives: Optional [batch, num_negatives] bool tensor, True where
        negative i is another known positive of the row (a later target of the
        same user, an item of its history). Such a negative leaves every sum
        above (k_i = 1 - known_positives_i multiplies m_i) but is still a draw:
        log Q, log Q' and "improved"'s n = sum_i m_i are unchanged, which keeps
        Z_hat an unbiased estimate of the partition function without the known
        positives, sum_{d not in S_u} e^{s_d}, for every sampler. Passing the
        same columns through `negative_mask` instead recounts n and biases
        Z_hat up by (1 - Q(p)) / (1 - Q(S_u)). The maths, per correction and
        sampler: `logq_core.formulas.mask_known_positives`.

    Returns:
      [batch] float32 tensor of per-example losses.

    Raises:
      ValueError: unknown `correction`, mismatched shapes or ranks, a missing
        log Q the correction needs, or log-probabilities of values outside
        (0, 1] (an InvalidArgumentError inside a tf.function).
      TypeError: non-float logits or log Q, or a non-bool mask.
    """
    v.check_choice("correction", correction, CORRECTIONS)
    loss, _ = sampled_softmax_terms(
        positive_logits,
        negative_logits,
        correction,
        negative_log_q,
        positive_log_q,
        negative_mask,
        log_q_excludes_positive,
        log_q_scale=log_q_scale,
        known_positives=known_positives,
    )
    return loss


def sampled_softmax_terms(
    positive_logits,
    negative_logits,
    correction,
    negative_log_q=None,
    positive_log_q=None,
    negative_mask=None,
    log_q_excludes_positive=False,
    check_log_q=True,
    log_q_scale=1.0,
    num_valid=None,
    known_positives=None,
):
    """`sampled_softmax_loss` and, for "improved", its [batch] weight w = 1 - P_hat (else None).

    Arguments as in `sampled_softmax_loss` (here positional), `correction` already
    checked (by the layer that holds it). The task uses it to log the mean weight
    without computing the loss twice. `check_log_q=False` skips the check of the log Q
    values (shapes and dtypes are still checked): for log Q a sampler has already
    checked at its source (`Negatives.log_q_checked`), where the check of a
    [batch, n] log Q would cost several passes over it. `num_valid`: "improved"'s n per
    row when it is not the count of `negative_mask` (see `logq_core.formulas.improved`).
    """
    return formulas.checked_sampled_softmax_terms(
        _ops.TF,
        v.TENSORS,
        v.check_log_probabilities if check_log_q else _unchecked,
        positive_logits,
        negative_logits,
        correction,
        negative_log_q,
        positive_log_q,
        negative_mask,
        log_q_excludes_positive,
        log_q_scale,
        num_valid,
        known_positives,
    )


def _unchecked(name, log_q):
    del name
    return log_q


def column_softmax_terms(
    scores: tf.Tensor,
    correction: str,
    log_q: Optional[tf.Tensor],
    mask: Optional[tf.Tensor],
    hits=None,
    log_q_scale: float = 1.0,
    num_valid: Optional[tf.Tensor] = None,
):
    """`sampled_softmax_terms` when the negatives are the candidate columns, computed as
    `tfrs.tasks.Retrieval` computes its loss: one softmax cross-entropy kernel (loss and
    gradient) over the corrected [batch, candidates] logits, whose column i is row i's
    positive, for every correction.

    - "none" and "standard" without masks are TFRS's ops on small batches (up to
      FUSED_MIN_LOGITS logits) and the fused kernel below on large ones: the same values;
    - otherwise the column shift, the label column's shift and the masks are one XLA
      fusion with the kernel (`_fused_columns_terms`): "standard_negatives" puts the
      raw positive in the label column; "improved" puts it K nats below the raw positive
      and is read off the cross-entropy (`logq_core.formulas.improved_from_full_softmax`);
      the accidental hits (`hits`, id codes) and `mask` mask the other columns, never the
      diagonal.

    Args:
      scores: [batch, candidates] s (num_candidates >= batch).
      correction: one of CORRECTIONS.
      log_q: [candidates] log Q of each column, None for "none".
      mask: optional [batch, candidates] bool, True for a valid negative (the diagonal is
        False).
      hits: optional `negatives.AccidentalHits` to mask.
      log_q_scale: lambda, as in `sampled_softmax_loss`.
      num_valid: "improved"'s n, [batch] (see `logq_core.formulas.improved`).

    Returns:
      ([batch] float32 losses, [batch] w for "improved" else None), equal to
      `sampled_softmax_terms` on the same negatives.
    """
    # "none" reads no log Q, whichever the task was given.
    log_q = None if correction == "none" else v.check_log_probabilities("log_q", log_q)
    codes = None if hits is None else hits.codes
    if correction == "improved":
        if num_valid is None:
            raise ValueError(
                'correction="improved" needs `num_valid`, each row\'s valid negatives; '
                "received num_valid=None."
            )
        return _fused_columns_terms(scores, log_q, codes, mask, num_valid, correction, log_q_scale)
    fused = lambda: _fused_columns_terms(  # noqa: E731
        scores, log_q, codes, mask, None, correction, log_q_scale
    )
    if correction in ("none", "standard") and codes is None and mask is None:
        # TFRS's ops (one-hot labels, the dense kernel) on small batches, where they are the
        # fastest; the same values through the fused sparse-label kernel on large ones.
        def tfrs_ops():
            labels = tf.eye(tf.shape(scores)[0], tf.shape(scores)[1])
            logits = scores if log_q is None else scores - formulas.scaled(log_q, log_q_scale)
            return tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits)

        size = scores.shape.num_elements()
        if size is not None:
            loss = fused() if size > FUSED_MIN_LOGITS else tfrs_ops()
        else:
            loss = tf.cond(tf.size(scores, out_type=tf.int64) > FUSED_MIN_LOGITS, fused, tfrs_ops)
    else:
        loss = fused()
    return loss, None


# Above this many logits ([batch, candidates]) "none" and "standard" run the fused kernel
# rather than TFRS's ops: on 2 cores the dense kernel is the faster at batch 1024 (2.9 against
# 3.3-3.9 ms a loss and gradient), the fused one from batch 2048 on (13.4 against 16.9 ms;
# 185-215 against 332-343 ms at batch 8192).
FUSED_MIN_LOGITS = 2**21


@tf.function(jit_compile=True)
def _fused_columns_terms(scores, log_q, codes, mask, num_valid, correction, log_q_scale):
    """`column_softmax_terms` as one XLA cluster: per row i, the softmax cross-entropy of
    column i over z, where z = scores - lambda log Q (each column), the label column shifted
    for "standard_negatives" and "improved", and MASKED_LOGIT off the diagonal where
    codes[i] == codes[j] or mask is False (`codes`, `mask` and `log_q` may be None); for
    "improved", (loss, w) read off it, else the loss.

    The shifts and masks are computed where the kernel reads the logits, not written as
    [batch, candidates] tensors of their own (at batch 8192 each such pass costs 8-25 ms on 2
    cores), and the per-row work is in the same cluster, not a dozen small ops.
    """
    num_queries, num_columns = tf.shape(scores)[0], tf.shape(scores)[1]
    rows = tf.range(num_queries)
    diagonal = tf.equal(rows[:, tf.newaxis], tf.range(num_columns)[tf.newaxis, :])
    logits = scores
    if log_q is not None:
        logits = scores - formulas.scaled(log_q, log_q_scale)[tf.newaxis, :]
        positive_log_q = log_q[:num_queries]
    if correction == "standard_negatives":  # The positive enters raw.
        diagonal_shift = formulas.scaled(positive_log_q, log_q_scale)
    elif correction == "improved":
        diagonal_shift = formulas.improved_diagonal_shift(_ops.TF, positive_log_q, log_q_scale)
    else:
        diagonal_shift = None
    if diagonal_shift is not None:
        logits = logits + tf.where(diagonal, diagonal_shift[:, tf.newaxis], 0.0)
    removed = None
    if codes is not None:
        removed = negatives_lib.hit_columns(codes, num_queries)
    if mask is not None:
        removed = tf.logical_not(mask) if removed is None else removed | tf.logical_not(mask)
    if removed is not None:
        logits = tf.where(removed & tf.logical_not(diagonal), _ops.MASKED_LOGIT, logits)
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=rows, logits=logits)
    if correction != "improved":
        return loss
    return formulas.improved_from_full_softmax(_ops.TF, loss, num_valid)


def improved_weight(
    positive_logits: tf.Tensor,
    negative_logits: tf.Tensor,
    *,
    negative_log_q: tf.Tensor,
    positive_log_q: Optional[tf.Tensor] = None,
    negative_mask: Optional[tf.Tensor] = None,
    log_q_excludes_positive: bool = False,
    log_q_scale: float = 1.0,
    known_positives: Optional[tf.Tensor] = None,
) -> tf.Tensor:
    """The improved correction's per-example weight w = 1 - P_hat, shape [batch].

    It is what `sampled_softmax_loss(..., correction="improved")` multiplies the
    loss by, exposed for logging (mean w, mean P_hat = 1 - w). The arguments are
    those of `sampled_softmax_loss`. Rows with no valid negative get w = 0.
    """
    _, weight = sampled_softmax_terms(
        positive_logits,
        negative_logits,
        "improved",
        negative_log_q,
        positive_log_q,
        negative_mask,
        log_q_excludes_positive,
        log_q_scale=log_q_scale,
        known_positives=known_positives,
    )
    return weight


def full_softmax_loss(
    logits: tf.Tensor, labels: tf.Tensor, mask: Optional[tf.Tensor] = None
) -> tf.Tensor:
    r"""Full softmax cross-entropy over the whole catalog, per example.

    .. math:: \ell = -s_{y} + \log \sum_{d} m_d e^{s_d}

    Args:
      logits: [batch, num_items] tensor of logits over the catalog.
      labels: [batch] integer tensor, the index of the positive item.
      mask: Optional [num_items] or [batch, num_items] bool tensor, False for
        items that are not candidates (padding ids). The positive must be valid.

    Returns:
      [batch] float32 tensor of per-example losses.
    """
    logits = v.float_tensor("logits", logits, rank=2)
    labels = tf.convert_to_tensor(labels)
    if not labels.dtype.is_integer:
        raise TypeError(
            f"`labels` must be an integer tensor of item indices; received labels with "
            f"dtype {labels.dtype.name}."
        )
    v.check_rank("labels", labels, 1)
    v.check_compatible_dim("labels", labels, 0, "logits", logits, 0)
    if mask is not None:
        mask = v.bool_tensor("mask", mask)
        if mask.shape.rank == 1:
            mask = tf.broadcast_to(mask[tf.newaxis, :], tf.shape(logits))
    # A label without a column is invalid (the rule of `logq_core.checks.table_rows`).
    num_columns = (
        logits.shape[1] if logits.shape[1] is not None else tf.shape(logits, out_type=tf.int64)[1]
    )
    columns, valid = v.table_rows("labels", labels, num_columns, "one per column of `logits`")
    positive = v.nan_unless(valid, tf.gather(logits, columns, axis=1, batch_dims=1))
    return formulas.full_softmax(_ops.TF, logits, positive, mask)


def _binary_cross_entropy(
    positive_logits, negative_logits, negative_mask, positive_weight
) -> tf.Tensor:
    """positive_weight * softplus(-s_p) + sum_i m_i softplus(s_i), per row."""
    positive_logits, negative_logits, negative_mask = _prepare_sampled(
        positive_logits, negative_logits, negative_mask
    )
    return formulas.binary_cross_entropy(
        _ops.TF, positive_logits, negative_logits, negative_mask, positive_weight
    )


def bce_loss(
    positive_logits: tf.Tensor,
    negative_logits: tf.Tensor,
    negative_mask: Optional[tf.Tensor] = None,
) -> tf.Tensor:
    r"""Binary cross-entropy with sampled negatives (SASRec), per example.

    .. math:: \ell = -\log\sigma(s_p) - \sum_i m_i \log(1 - \sigma(s_i))

    Args:
      positive_logits: [batch] tensor of positive logits.
      negative_logits: [batch, num_negatives] tensor of negative logits.
      negative_mask: Optional [batch, num_negatives] bool tensor of valid negatives.

    Returns:
      [batch] float32 tensor of per-example losses (a sum over the row's
      1 + n terms; gSASRec's code averages them instead, a constant factor).
    """
    return _binary_cross_entropy(positive_logits, negative_logits, negative_mask, 1.0)


gbce_beta = formulas.gbce_beta


def gbce_loss(
    positive_logits: tf.Tensor,
    negative_logits: tf.Tensor,
    *,
    num_items: int,
    t: float,
    negative_mask: Optional[tf.Tensor] = None,
) -> tf.Tensor:
    r"""Generalised BCE (gSASRec; Petrov & Macdonald, RecSys 2023), per example.

    .. math:: \ell = -\beta\log\sigma(s_p) - \sum_i m_i \log(1 - \sigma(s_i)),\quad
              \beta = \alpha\big(t(1 - 1/\alpha) + 1/\alpha\big),\ \alpha = n / (|D| - 1)

    This is gSASRec's transformed positive logit log(1 / (sigmoid(s_p)^-beta - 1))
    fed to BCE, in closed form. t = 0 gives BCE; t = 1 gives beta = alpha.

    Args:
      positive_logits: [batch] tensor of positive logits.
      negative_logits: [batch, num_negatives] tensor of negative logits; n is
        its static second dimension.
      num_items: catalog size |D|.
      t: calibration parameter in [0, 1].
      negative_mask: Optional [batch, num_negatives] bool tensor of valid negatives.

    Returns:
      [batch] float32 tensor of per-example losses.
    """
    num_negatives = tf.convert_to_tensor(negative_logits).shape[-1]
    if num_negatives is None:
        raise ValueError(
            "gbce_loss needs a static number of negatives; received negative_logits "
            f"with shape {tf.convert_to_tensor(negative_logits).shape}."
        )
    beta = gbce_beta(num_negatives, num_items, t)
    return _binary_cross_entropy(positive_logits, negative_logits, negative_mask, beta)


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class SampledSoftmaxLoss(tf.keras.layers.Layer):
    """Keras layer computing `sampled_softmax_loss` per example.

    Example:

    >>> layer = SampledSoftmaxLoss(correction="improved")
    >>> loss = layer(positive_logits, negative_logits,
    ...              negative_log_q=log_q_neg, positive_log_q=log_q_pos)

    Args:
      correction: "none", "standard", "standard_negatives" or "improved".
      log_q_excludes_positive, log_q_scale: see `sampled_softmax_loss`.
      **kwargs: standard Keras layer arguments.
    """

    def __init__(
        self,
        correction: str,
        log_q_excludes_positive: bool = False,
        log_q_scale: float = 1.0,
        **kwargs,
    ):
        # Losses are always computed in float32, also under a mixed-precision policy.
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.correction = v.check_choice("correction", correction, CORRECTIONS)
        self.log_q_excludes_positive = v.check_bool(
            "log_q_excludes_positive", log_q_excludes_positive
        )
        self.log_q_scale = formulas.check_log_q_scale(log_q_scale)

    def call(
        self,
        positive_logits,
        negative_logits,
        negative_log_q=None,
        positive_log_q=None,
        negative_mask=None,
        known_positives=None,
    ):
        """Returns the [batch] per-example loss; arguments as in `sampled_softmax_loss`."""
        loss, _ = sampled_softmax_terms(
            positive_logits,
            negative_logits,
            self.correction,
            negative_log_q,
            positive_log_q,
            negative_mask,
            self.log_q_excludes_positive,
            log_q_scale=self.log_q_scale,
            known_positives=known_positives,
        )
        return loss

    def get_config(self):
        config = super().get_config()
        config.update(
            correction=self.correction,
            log_q_excludes_positive=self.log_q_excludes_positive,
            log_q_scale=self.log_q_scale,
        )
        return config
