"""The losses and the log Q of docs/design.md, written once for TensorFlow and Keras 3.

Every function takes `ops` first: an array namespace with `keras.ops`'s names
(`keras.ops`, or `tfrs_logq._ops.TF` for TensorFlow). Inputs are float32
tensors already validated by the caller (`tfrs_logq` and `keras_logq` check
dtypes, ranks and values in their own framework); argument errors that need
no tensor (a missing log Q) are raised here, so both libraries word them alike.

Notation: one query row u, positive item p with logit s_p, negatives d_1..d_n
with logits s_i and validity mask m_i, log Q(d) the log of the per-draw
proposal probability of d.

Names `ops` must provide: cast, concatenate, exp, expm1, log, log1p, logical_and,
logical_not, logsumexp, maximum, min, minimum, not_equal, num_columns (float32 number of
columns of a 2-D tensor; `keras_logq` builds it on `keras.ops.shape`), ones,
argsort (stable), broadcast_to, scatter, shape, sigmoid, softplus, stack, stop_gradient,
sum, take, top_k, where, zeros_like.
"""

import math
from typing import Tuple

from logq_core import checks

# Stands in for a masked logit. Finite, so that masked slots carry neither inf
# nor NaN into the forward pass or the gradient; far below any real logit.
MASKED_LOGIT = -1e30

CORRECTIONS = ("none", "standard", "standard_negatives", "improved")

# Q(p) is kept below 1 when it is excluded (1 - Q(p)), so that a degenerate
# one-item proposal gives a large finite shift, never inf.
_LOG_Q_CEILING = -1e-7


def log1mexp(ops, x):
    """log(1 - exp(x)) for x < 0, accurate near 0 and for very negative x (Maechler 2012)."""
    return ops.where(x > -0.6931472, ops.log(-ops.expm1(x)), ops.log1p(-ops.exp(x)))


def masked(ops, logits, mask):
    """Replaces masked-out logits (mask False) by MASKED_LOGIT; `mask=None` keeps all."""
    if mask is None:
        return logits
    return ops.where(mask, logits, MASKED_LOGIT)


def exclude_positive(ops, log_q, positive_log_q):
    """[batch, n] log Q'(d) = log Q(d) - log(1 - Q(p)): the proposal without the positive.

    Args:
      log_q: [n] or [batch, n] log Q of the negatives.
      positive_log_q: [batch] log Q of each row's positive.
    """
    return log_q - log1mexp(ops, ops.minimum(positive_log_q, _LOG_Q_CEILING))[:, None]


# ---------------------------------------------------------------------------- losses


def needs_positive_log_q(correction: str, log_q_excludes_positive: bool) -> bool:
    """Whether `correction` reads the positive's log Q: "standard" corrects the positive's
    logit; "improved" turns Q into Q' with it unless the negatives' log Q already is Q'."""
    return correction == "standard" or (correction == "improved" and not log_q_excludes_positive)


def missing_log_q(correction: str, where: str, received: str) -> ValueError:
    """The one error for a correction that has no log Q to read: `where` names what to
    pass, `received` what came instead."""
    return ValueError(
        f"correction={correction!r} needs sampling probabilities: pass {where}; "
        f"received {received}."
    )


def check_log_q_given(
    correction: str, negative_log_q, positive_log_q, log_q_excludes_positive: bool
) -> None:
    """Raises ValueError when `correction` (one of CORRECTIONS, checked by the caller) needs
    a log Q the caller left out."""
    if correction == "none":
        return
    if negative_log_q is None:
        raise missing_log_q(correction, "`negative_log_q`", "negative_log_q=None")
    if needs_positive_log_q(correction, log_q_excludes_positive) and positive_log_q is None:
        hint = (
            ""
            if correction == "standard"
            else " (or pass log_q_excludes_positive=True with Q' in negative_log_q)"
        )
        raise ValueError(
            f"correction={correction!r} needs `positive_log_q`{hint}; received positive_log_q=None."
        )


def check_log_q_scale(log_q_scale) -> float:
    """`log_q_scale` (lambda) as a float: finite and >= 0."""
    if (
        isinstance(log_q_scale, bool)
        or not isinstance(log_q_scale, (int, float))
        or not (math.isfinite(log_q_scale) and log_q_scale >= 0)
    ):
        raise ValueError(
            f"`log_q_scale` must be a finite number >= 0; received log_q_scale={log_q_scale!r}."
        )
    return float(log_q_scale)


def scaled(log_q, log_q_scale: float):
    """lambda * log Q (log Q itself, untouched, at lambda = 1)."""
    return log_q if log_q_scale == 1.0 else log_q * log_q_scale


def sampled_softmax_terms(
    ops,
    positive,
    negatives,
    correction: str,
    negative_log_q=None,
    positive_log_q=None,
    mask=None,
    log_q_excludes_positive=False,
    log_q_scale: float = 1.0,
    num_valid=None,
    known_positives=None,
):
    """The sampled-softmax loss per row and, for "improved", its weight w = 1 - P_hat::

        none:               -s_p + log(e^{s_p} + sum_i m_i e^{s_i})
        standard:           c = s - log Q (positive too); -c_p + log(e^{c_p} + sum_i m_i e^{c_i})
        standard_negatives: c_i = s_i - log Q(d_i); -s_p + log(e^{s_p} + sum_i m_i e^{c_i})
        improved:           c'_i = s_i - log Q'(d_i); LSE = log sum_i m_i e^{c'_i};
                            n = sum_i m_i; w = sg(sigmoid(LSE - log n - s_p)); w (LSE - s_p)

    Args:
      ops: the array namespace.
      positive: [batch] s_p.
      negatives: [batch, n] s_i.
      correction: one of CORRECTIONS.
      negative_log_q: [n] or [batch, n] log Q(d_i) (log Q' with
        `log_q_excludes_positive`).
      positive_log_q: [batch] log Q(p).
      mask: optional [batch, n] bool, True for a valid negative.
      log_q_excludes_positive: `negative_log_q` already is log Q'.
      log_q_scale: lambda, the weight of the correction (Merlin's `reg_factor`): every
        log Q (log Q' for "improved") above is multiplied by it. 1 is the correction, 0 no
        shift at all; in between the logits are shifted by lambda log Q. Only 1 makes
        Z_hat (and so "improved"'s P_hat) an unbiased estimate.
      num_valid: optional [batch] n of "improved" (see `improved`).
      known_positives: optional [batch, n] bool, True where d_i is another known positive
        of the row: removed from every sum, still a draw in n and log Q
        (`mask_known_positives`).

    Returns:
      ([batch] loss, [batch] weight for "improved", else None).
    """
    check_log_q_given(correction, negative_log_q, positive_log_q, log_q_excludes_positive)
    if known_positives is not None:
        mask, num_valid = mask_known_positives(ops, negatives, mask, known_positives, num_valid)
    if correction == "none":
        return softmax_with_positive(ops, positive, negatives, mask), None
    if correction == "standard_negatives":
        return softmax_with_positive(
            ops, positive, negatives - scaled(negative_log_q, log_q_scale), mask
        ), None
    if correction == "standard":
        return softmax_with_positive(
            ops,
            positive - scaled(positive_log_q, log_q_scale),
            negatives - scaled(negative_log_q, log_q_scale),
            mask,
        ), None
    # Only an unknown correction gets here besides "improved": it must not pass for it.
    checks.check_choice("correction", correction, CORRECTIONS)
    if not log_q_excludes_positive:
        negative_log_q = exclude_positive(ops, negative_log_q, positive_log_q)
    return improved(ops, positive, negatives - scaled(negative_log_q, log_q_scale), mask, num_valid)


def checked_sampled_softmax_terms(
    ops,
    tensors,
    log_q_values,
    positive,
    negatives,
    correction: str,
    negative_log_q=None,
    positive_log_q=None,
    mask=None,
    log_q_excludes_positive=False,
    log_q_scale: float = 1.0,
    num_valid=None,
    known_positives=None,
):
    """`sampled_softmax_terms` on unchecked inputs, as both frameworks' losses take them.

    The arguments after `log_q_values` are `sampled_softmax_terms`'s (`correction` already
    checked, `log_q_scale` checked here).

    Args:
      ops: the array namespace.
      tensors: the framework's `logq_core.checks.Tensors` (dtypes, ranks, sizes).
      log_q_values: (name, log Q) -> log Q, the framework's check that it holds logs of
        probabilities (a graph assertion in TensorFlow, NaN in Keras 3).
    """
    check_log_q_given(correction, negative_log_q, positive_log_q, log_q_excludes_positive)
    positive, negatives, mask = checks.logits_inputs(tensors, positive, negatives, mask)
    if known_positives is not None:
        known_positives = checks.mask_like_logits(
            tensors, "known_positives", known_positives, negatives
        )
    if correction != "none":
        negative_log_q = log_q_values(
            "negative_log_q",
            checks.log_q_tensor(
                tensors, "negative_log_q", negative_log_q, negatives, of_positives=False
            ),
        )
    if needs_positive_log_q(correction, log_q_excludes_positive):
        positive_log_q = log_q_values(
            "positive_log_q",
            checks.log_q_tensor(
                tensors, "positive_log_q", positive_log_q, positive, of_positives=True
            ),
        )
    return sampled_softmax_terms(
        ops,
        positive,
        negatives,
        correction,
        negative_log_q,
        positive_log_q,
        mask,
        log_q_excludes_positive,
        check_log_q_scale(log_q_scale),
        num_valid,
        known_positives,
    )


def softmax_with_positive(ops, positive, negatives, mask):
    """-c_p + log(e^{c_p} + sum_i m_i e^{c_i}) = softplus(LSE_i(c_i) - c_p), per row.

    The second form never copies the [batch, n] negatives next to the positive
    (at batch 16384 with in-batch negatives that copy is 1 GiB). A row without
    a valid negative has LSE = MASKED_LOGIT: loss and gradient 0.
    """
    lse = ops.logsumexp(masked(ops, negatives, mask), axis=1)
    return ops.softplus(lse - positive)


def hard_negatives(ops, negatives, mask, log_q, k: int, log_q_scale: float = 1.0, num_valid=None):
    """Each row's k valid negatives with the largest corrected logits (hard-negative mining,
    for any correction).

    The ranking is s - lambda log Q (raw s when `log_q` is None, as for "none"); Q and Q' differ
    by a shift per row, so every correction keeps the same columns. The loss of the kept
    columns is then each correction's own; "improved" is given `num_valid`, the row's valid
    negatives before mining, so that Z_hat_k = (1/n) sum_{top k} e^{c'_i} is the full
    estimate without its n - k smallest terms (see `improved`).

    Args:
      negatives: [batch, n] s_i.
      mask: [batch, n] bool valid negatives (mined first when fewer than k are valid: the
        others stay masked).
      log_q: None, [n] or [batch, n] log Q (or Q').
      k: columns kept, at most n.
      num_valid: optional [batch] n of "improved" when it is not the count of `mask` (the
        count before `mask_known_positives`); returned as it is.

    Returns:
      ([batch, k] s, [batch, k] mask, [batch, k] log Q or None, [batch] num_valid).
    """
    ranking = negatives if log_q is None else negatives - scaled(log_q, log_q_scale)
    ranking = ops.where(mask, ranking, float("-inf"))
    if num_valid is None:
        num_valid = ops.sum(ops.cast(mask, "float32"), axis=1)
    _, columns = ops.top_k(ranking, k)

    def take(x):
        return ops.take_along_axis(x, columns, axis=1)

    kept = take(negatives)
    if log_q is not None:
        # A NaN log Q (an invalid value, NaN after the framework's check) of any valid
        # negative reaches the loss whichever columns are kept: top_k orders NaN first on
        # one backend and last on another, so it could otherwise be mined away unseen.
        kept = kept + ops.sum(ops.where(mask, log_q * 0.0, 0.0), axis=1)[:, None]
        log_q = take(
            ops.broadcast_to(log_q, ops.shape(ranking)) if len(log_q.shape) == 1 else log_q
        )
    return kept, take(mask), log_q, num_valid


def improved(ops, positive, corrected_negatives, mask, num_valid=None) -> Tuple:
    """The improved loss w * (LSE - s_p) and w, from raw s_p and corrected c'_i.

    A row with no valid negative has loss 0, weight 0 and zero gradient.

    `num_valid`: n, the number of valid draws Z_hat averages over, when it is not the count
    of `mask`. With hard negatives it is the row's valid negatives before mining: over the
    k kept ones, Z_hat_k = (1/n) sum_{top k} e^{c'_i} is the full estimate without its n - k
    smallest terms (a lower bound, tight when the kept terms hold most of the mass), and
    log Z_hat_k = LSE_k - log n.
    """
    lse = ops.logsumexp(masked(ops, corrected_negatives, mask), axis=1)
    if num_valid is not None:
        num_valid = ops.cast(num_valid, "float32")
    elif mask is None:
        num_valid = ops.zeros_like(positive) + ops.num_columns(corrected_negatives)
    else:
        num_valid = ops.sum(ops.cast(mask, "float32"), axis=1)
    # 1 - sigmoid(s_p - (LSE - log n)) = sigmoid(LSE - log n - s_p).
    log_z_hat = lse - ops.log(ops.maximum(num_valid, 1.0))
    return _weighted_gap(ops, lse - positive, log_z_hat - positive, num_valid)


def _weighted_gap(ops, gap, weight_logit, num_valid) -> Tuple:
    """(w * gap, w) with w = sg(sigmoid(weight_logit)), both 0 for rows with num_valid 0:
    such rows computed finite garbage, and `where` passes them neither value nor gradient."""
    has_negative = num_valid > 0.0
    weight = ops.stop_gradient(ops.sigmoid(weight_logit))
    loss = weight * gap
    zeros = ops.zeros_like(loss)
    return ops.where(has_negative, loss, zeros), ops.where(has_negative, weight, zeros)


def log_expm1(ops, x):
    """log(e^x - 1) for x > 0, accurate for small and large x, with a finite gradient in
    both regimes (each branch of the `where` sees only inputs it is finite at)."""
    small = x < 0.6931472
    below = ops.where(small, x, 0.6931472)
    above = ops.where(small, 0.6931472, x)
    return ops.where(small, ops.log(ops.expm1(below)), above + ops.log1p(-ops.exp(-above)))


# "improved" read off one softmax cross-entropy (`improved_from_full_softmax`): the label
# column holds the positive K nats below s_p, so that a positive far above its negatives
# never leaves the kernel's sum 1 + (tiny), whose rounding would cost the gap its precision.
IMPROVED_DIAGONAL_OFFSET = 10.0
# The smallest full-softmax loss read: below it the label column holds all of float32's
# mass, and the gap to the negatives is taken as log(1e-30) - K (w is then below 5e-35).
_FULL_LOSS_FLOOR = 1e-30


def improved_diagonal_shift(ops, positive_log_q, log_q_scale: float = 1.0):
    """[batch] what to add to the label column c_p = s_p - lambda log Q(p) of the standard
    logits so that it holds s_p - K - lambda log(1 - Q(p)) (`improved_from_full_softmax`)."""
    log_1m_q = log1mexp(ops, ops.minimum(positive_log_q, _LOG_Q_CEILING))  # As `exclude_positive`.
    return scaled(positive_log_q - log_1m_q, log_q_scale) - IMPROVED_DIAGONAL_OFFSET


def improved_from_full_softmax(ops, full_loss, num_valid) -> Tuple:
    """The improved loss and w of in-batch columns, read off one softmax cross-entropy.

    The negatives hold the standard logits c_i = s_i - lambda log Q(d_i); Q' = Q / (1 - Q(p))
    only shifts a row's negatives by lambda log(1 - Q(p)), so with the label column set to
    d = s_p - K - lambda log(1 - Q(p)) (`improved_diagonal_shift`, K =
    IMPROVED_DIAGONAL_OFFSET), the cross-entropy L = -d + log(e^d + sum_i m_i e^{c_i})
    gives sum_i m_i e^{c'_i} = e^{s_p - K} (e^L - 1), and

        LSE - s_p = log(e^L - 1) - K,

    with LSE = log sum_i m_i e^{c'_i} as in `improved`. The gradient of L (softmax over the
    label column and the negatives, minus onehot(label)) times d log(e^L - 1) / dL =
    e^L / (e^L - 1) is the softmax over the negatives alone minus onehot(p), `improved`'s
    term by term. So one fused kernel over the [batch, candidates] columns gives "improved"
    at the cost of "standard". L itself carries float32's absolute error (about 6e-8), which
    makes the gap's error about 6e-8 / e^{LSE - s_p + K}: large only where the positive is
    more than K nats above its negatives' LSE, where w is below e^{-K} / n, so that the
    loss's error stays below 6e-8 e^{-K} / n.

    Args:
      full_loss: [batch] L, the cross-entropy of the label column.
      num_valid: [batch] n, the row's valid negatives (float or int).

    Returns:
      ([batch] loss w (LSE - s_p), [batch] w), 0 for rows without a valid negative.
    """
    num_valid = ops.cast(num_valid, "float32")
    gap = log_expm1(ops, ops.maximum(full_loss, _FULL_LOSS_FLOOR)) - IMPROVED_DIAGONAL_OFFSET
    return _weighted_gap(ops, gap, gap - ops.log(ops.maximum(num_valid, 1.0)), num_valid)


def full_softmax(ops, logits, positive, mask=None):
    """-s_y + log sum_d m_d e^{s_d}: [batch] from [batch, items] logits and [batch] s_y."""
    return ops.logsumexp(masked(ops, logits, mask), axis=1) - positive


def binary_cross_entropy(ops, positive, negatives, mask, positive_weight):
    """positive_weight * softplus(-s_p) + sum_i m_i softplus(s_i), per row (BCE; gBCE)."""
    negative_terms = ops.softplus(negatives)
    if mask is not None:
        negative_terms = ops.where(mask, negative_terms, ops.zeros_like(negative_terms))
    return positive_weight * ops.softplus(-positive) + ops.sum(negative_terms, axis=1)


def gbce_beta(num_negatives: int, num_items: int, t: float) -> float:
    """gBCE's exponent beta = alpha * (t * (1 - 1/alpha) + 1/alpha), alpha = n / (|D| - 1)."""
    num_negatives = checks.check_positive_int("num_negatives", num_negatives)
    num_items = checks.check_positive_int("num_items", num_items)
    if num_items <= num_negatives:
        raise ValueError(
            "`num_items` must exceed the number of negatives per positive "
            f"({num_negatives}); received num_items={num_items}."
        )
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t <= 1.0:
        raise ValueError(f"`t` must be a number in [0, 1]; received t={t!r}.")
    alpha = num_negatives / (num_items - 1)
    return alpha * (t * (1.0 - 1.0 / alpha) + 1.0 / alpha)


# ---------------------------------------------------------------------------- log Q


def log_uniform_q(num_items: int) -> float:
    """log Q of a uniform draw over `num_items` items."""
    return -math.log(num_items)


def log_inclusion_probability(ops, log_q, num_draws):
    """log(1 - (1 - q)^n): d among n independent draws at least once; (1 - q)^n = e^{n log1p(-q)}.

    Args:
      log_q: per-draw log q(d), any shape.
      num_draws: float32 scalar n >= 1 (or per-draw-equivalent draws n / b).
    """
    log_not_drawn_once = log1mexp(ops, ops.minimum(log_q, _LOG_Q_CEILING))
    return log1mexp(ops, ops.minimum(num_draws * log_not_drawn_once, -1e-30))


def horvitz_thompson_log_scale(ops, mask, kept, pool_size):
    """[batch] log((k'/k) / n_row): turns inclusion probabilities into per-draw log Q.

    The deduplicated pool's entries enter with Q_i = pi(d_i) (k'/k) / n_row, so that
    (1/n) sum_i m_i e^{s_i} / Q_i = sum_{d in pool, d != p} e^{s_d} / pi'(d), an
    unbiased estimate of sum_{d != p} e^{s_d} (Horvitz-Thompson).

    Args:
      mask: [batch, n] bool, valid negatives of each row.
      kept: int scalar k', pool entries kept after subsampling.
      pool_size: int scalar k, entries of the deduplicated pool.
    """
    log_subsample = ops.log(ops.cast(ops.maximum(kept, 1), "float32")) - ops.log(
        ops.cast(ops.maximum(pool_size, 1), "float32")
    )
    num_valid = ops.sum(ops.cast(mask, "float32"), axis=1)
    return log_subsample - ops.log(ops.maximum(num_valid, 1.0))


def mixture_log_q(
    ops, log_q_ids, positive_log_q, mask, num_items: int, uniform_draws, in_batch_draws
):
    """The mixed sampler's exact per-draw-equivalent log Q', and the positive's log Q.

    Every slot of either half is a draw over the whole catalog: a uniform slot from 1/|D|;
    an in-batch slot (a pool entry kept at random) is one of the B - 1 other rows'
    positives, each a draw from q, or the row's own positive. Over a row's slots the
    expected number of draws of an item d != p is then::

        D(d) = E_u / |D| + E_b q(d),

    E_u the uniform slots and E_b = kept (B - 1) / B the expected q-draws among the kept
    in-batch slots, and::

        Z_hat = sum_i m_i e^{s_i} / D(d_i)

    has E[Z_hat] = sum_{d != p} e^{s_d} exactly (multiple importance sampling with the
    balance heuristic): a draw of p is an accidental hit whose term is masked, so no
    stratum is conditioned on the positive. As the per-draw equivalent over the row's n
    valid draws that the losses read, log Q'_i = log D(d_i) - log n.

    D is per column: the [batch, n] work is one subtraction of each row's log n. (Weighting
    the strata by each row's realised valid counts, with the positive excluded stratum by
    stratum, is also exact given the counts, but needs a log and a multiply-add on
    [batch, n]: 1.3-1.5x TFRS's two-tower step at batch 1024 on 2 cores.)

    Args:
      log_q_ids: [n] or [batch, n] unigram log q of the negatives (uniform ones first).
      positive_log_q: [batch] unigram log q of the positives.
      mask: [batch, n] valid negatives.
      num_items: catalog size |D| of the uniform stratum.
      uniform_draws: E_u, the uniform slots (`Negatives.expected_draws`).
      in_batch_draws: E_b, scalar (`Negatives.expected_draws` of the in-batch half).

    Returns:
      ([batch, n] log Q', already without the positive; [batch] log Q_mix(p) = log D(p) -
       log(E_u + E_b), the positive's per-draw log Q on the same, not excluded, scale, for
       "standard").
    """
    uniform_draws = ops.cast(uniform_draws, "float32")
    in_batch_draws = ops.cast(in_batch_draws, "float32")

    def log_draws(log_q):
        return ops.log(uniform_draws / num_items + in_batch_draws * ops.exp(log_q))

    log_d = log_draws(log_q_ids)
    if len(log_d.shape) == 1:
        log_d = log_d[None, :]
    num_valid = ops.sum(ops.cast(mask, "float32"), axis=1)
    log_q = log_d - ops.log(ops.maximum(num_valid, 1.0))[:, None]
    positive = log_draws(positive_log_q) - ops.log(uniform_draws + in_batch_draws)
    return log_q, positive


def expected_in_batch_draws(ops, num_draws, kept, pool_size):
    """E_b = kept (B - 1) / B: the expected q-draws among `kept` slots of a pool (without
    deduplication) of B = `pool_size` entries, `num_draws` = B - 1 of them other rows'
    positives (`pool_of_slots` returns all three)."""
    return (
        ops.cast(kept, "float32")
        * ops.cast(num_draws, "float32")
        / ops.maximum(ops.cast(pool_size, "float32"), 1.0)
    )


# ---------------------------------------------------------------- other known positives


def mask_known_positives(ops, negatives, mask, known_positives, num_valid=None):
    r"""(mask without the known positives, n): the one rule for masking other positives.

    Row u's known positives S_u hold its positive p and its other positives P_u (the
    other targets of the same user in the batch, items of its history). The loss then
    estimates the full softmax with P_u removed,
    Z_u = sum_{d not in S_u} e^{s_d}: with k_i = 1[d_i not in S_u] and m_i the sampler's
    validity (padding, d_i = p), every sum below runs over m_i k_i, while log Q, log Q',
    log Q(p) and "improved"'s n = sum_i m_i stay those of the sampler's draws:

    .. math::
        \text{none:}\quad \ell = -s_p + \log\big(e^{s_p} + \sum_i m_i k_i e^{s_i}\big)

        \text{standard:}\quad \ell = -c_p + \log\big(e^{c_p}
            + \sum_i m_i k_i e^{s_i - \log Q(d_i)}\big)

        \text{standard\_negatives:}\quad \ell = -s_p + \log\big(e^{s_p}
            + \sum_i m_i k_i e^{s_i - \log Q(d_i)}\big)

        \text{improved:}\quad \hat Z = \frac{1}{n} \sum_i m_i k_i e^{s_i - \log Q'(d_i)},
            \quad n = \sum_i m_i

    This is exact for every sampler, as removing terms from an unbiased sum over the
    catalog is:

    - per-draw proposals (uniform, in-batch without deduplication, the candidate columns
      with their sampling probability): given n, each valid draw follows Q' (Q without p),
      so E[k e^{s} / Q'(d)] = sum_{d != p} Q'(d) k(d) e^{s_d} / Q'(d) = Z_u, and
      E[Z_hat | n] = Z_u; for "standard", E[sum_i m_i k_i e^{s_i} / Q(d_i)] = N Z_u over N
      draws, the same scale as without the mask;
    - expected-draws forms (the exact mixture, log Q' = log D - log n, and the
      deduplicated pool's Horvitz-Thompson log Q'): Z_hat = sum_i m_i k_i e^{s_i} / D(d_i)
      with E[#draws of d] = D(d), so E[Z_hat] = Z_u; the sampler's n cancels only because
      the loss divides by the same n.

    Recounting n after the mask (AND-ing `known_positives` into the validity mask) is
    biased: for a per-draw proposal E[Z_hat] = Z_u (1 - Q(p)) / (1 - Q(S_u)) > Z_u (the
    valid draws then follow Q'' = Q / (1 - Q(S_u)), which only a log Q'' = log Q -
    log(1 - Q(S_u)) would undo, needing Q of every known positive); for the
    expected-draws forms E[Z_hat] = Z_u n / n'. With hard negatives, masked columns are
    never mined and n is still the count before both.

    The samplers count the batch's other B - 1 entries as draws from q; entries that come
    from rows of the same user are not independent of it, and with the mask they leave the
    sum but stay in n: a relative bias of Z_hat of -(c_u - 1) / n for c_u rows of the user
    in a row's pool of n (-0.8% for 200 positions of a user among 25,600), where without
    the mask their (high) scores biased Z_hat upwards.

    Args:
      negatives: [batch, n] logits (for the count when `mask` is None).
      mask: None or [batch, n] bool, the sampler's valid negatives.
      known_positives: [batch, n] bool, True where the negative is a known positive.
      num_valid: optional [batch] n already counted (hard negatives), else the count of
        `mask` (every column without one).

    Returns:
      ([batch, n] bool mask & ~known_positives, [batch] float32 n).
    """
    if num_valid is None:
        num_valid = (
            ops.sum(ops.zeros_like(negatives), axis=1) + ops.num_columns(negatives)
            if mask is None
            else ops.sum(ops.cast(mask, "float32"), axis=1)
        )
    keep = ops.logical_not(known_positives)
    return (keep if mask is None else ops.logical_and(mask, keep)), num_valid


def known_positive_ids_mask(
    ops, row_queries, negative_ids, known_queries, known_items, known_valid=None
):
    """[batch, n] bool, True where negative j of row r is a known positive of r's query.

    The known set S is a list of pairs (query, item): the batch's rows as (query id,
    positive id), and any other known positives (a user's history) with their row's
    query. Negative d of row r is a known positive when (row_queries[r], d) is in S: the
    row's own positive (an accidental hit) and every positive of the rows of the same
    query. Exact (ids compared as they are: nothing packed or hashed):

    1. S's m pairs sorted by (not valid, query, item), three stable argsorts of m;
    2. each row's query located in the sorted queries: its pairs are the range
       [start_r, end_r) of the table, whose items are sorted (two binary searches per row);
    3. each negative of row r binary-searched among the items of [start_r, end_r).

    The binary searches are branchless, a fixed number of steps (bit length of m, 31 when
    m is not known when traced) of a gather, a comparison and a `where` each, so memory is
    linear in batch n + m, eager and compiled alike: no [batch n, m] array, which XLA's
    lowering of a searchsorted (a comparison of every value with every table entry) would
    build (43 GB at 6,400 SASRec positions with 256 negatives). Time O(m log m +
    (batch + batch n) log m), with elementwise ops and gathers that XLA fuses; only
    `keras.ops` names, so JAX and PyTorch run it as TensorFlow does.

    Args:
      row_queries: [batch] integer query id of each row (a user, a sequence).
      negative_ids: [n] shared or [batch, n] per-row integer ids.
      known_queries: [m] integer query ids of S's pairs, of the dtype of `row_queries`.
      known_items: [m] integer item ids of S's pairs, of the dtype of `negative_ids`.
      known_valid: optional [m] bool, False for pairs that are not in S (padding rows).
    """
    size = ops.shape(known_items)[0]
    order = ops.argsort(known_items)
    order = ops.take(order, ops.argsort(ops.take(known_queries, order, axis=0)), axis=0)
    if known_valid is None:
        count = ops.cast(size, "int32")
    else:  # The valid pairs first: the table is their first `count` entries.
        order = ops.take(
            order, ops.argsort(ops.take(1 - ops.cast(known_valid, "int32"), order, axis=0)), axis=0
        )
        count = ops.sum(ops.cast(known_valid, "int32"))
    # One entry past the end, so that the tables can be read with m = 0.
    queries = ops.concatenate(
        [ops.take(known_queries, order, axis=0), ops.zeros_like(known_queries[:1])], axis=0
    )
    items = ops.concatenate(
        [ops.take(known_items, order, axis=0), ops.zeros_like(known_items[:1])], axis=0
    )
    last = ops.maximum(ops.cast(size, "int32") - 1, 0)
    static_size = known_items.shape[0]
    steps = [
        2**k for k in reversed(range(31 if static_size is None else int(static_size).bit_length()))
    ]

    def bound(table, values, start, end, below):
        """Position of each value's lower bound (`below`: entries < value) or upper bound
        (entries <= value) in table[start:end], sorted there; the steps sum to >= m."""
        position = start
        for step in steps:
            candidate = position + step
            entry = ops.take(table, ops.minimum(candidate - 1, last), axis=0)
            move = ops.logical_and(candidate <= end, entry < values if below else entry <= values)
            position = ops.where(move, candidate, position)
        return position

    if len(negative_ids.shape) == 1:
        shape = (ops.shape(row_queries)[0], ops.shape(negative_ids)[0])
        negative_ids = ops.broadcast_to(negative_ids[None, :], shape)
    else:
        shape = ops.shape(negative_ids)
    zero = ops.zeros_like(row_queries, dtype="int32")
    start = bound(queries, row_queries, zero, zero + count, below=True)
    end = bound(queries, row_queries, start, zero + count, below=False)
    end = ops.broadcast_to(end[:, None], shape)
    position = bound(items, negative_ids, ops.broadcast_to(start[:, None], shape), end, below=True)
    return ops.logical_and(
        position < end, ops.equal(ops.take(items, position, axis=0), negative_ids)
    )


# ---------------------------------------------------------------- static-shape pools


def accidental_hit_mask(ops, positive_ids, negative_ids):
    """[batch, n] bool, False where a negative equals the row's positive (integer ids).

    Args:
      positive_ids: [batch] ids.
      negative_ids: [n] shared or [batch, n] per-row ids.
    """
    if len(negative_ids.shape) == 1:
        negative_ids = negative_ids[None, :]
    return ops.not_equal(positive_ids[:, None], negative_ids)


def pool_of_slots(
    ops,
    positive_ids,
    ids,
    slots,
    *,
    deduplicate: bool,
    sentinel,
    size,
    keys=None,
    subset_size=None,
    hit_mask=None,
):
    """The in-batch pool with static shapes: padding and duplicates stay as masked slots.

    Args:
      positive_ids: [batch] integer ids of the rows' positives.
      ids: [size] the pool's integer ids (the batch's positives or targets).
      slots: [size] bool, False for padding.
      deduplicate: keep only the first slot of each distinct id.
      sentinel, size: see `first_of_each_id`.
      keys: [size] uniform random keys, to keep `subset_size` of the valid slots
        (uniformly, without replacement); None keeps every slot.
      subset_size: how many slots to keep (at most `size`).
      hit_mask: callable (positive_ids, ids) -> [batch, n] bool accidental-hit
        mask; default `accidental_hit_mask` (a framework may pass one that also
        handles string ids).

    Returns:
      (keep: the kept positions or None, ids: the kept ids, mask: [batch, kept]
       valid negatives of each row, num_draws: draws behind the pool (valid
       slots - 1), kept: valid slots kept, pool_size: valid slots before the
       subsampling).
    """
    num_draws = ops.sum(ops.cast(slots, "int32")) - 1
    if deduplicate:
        slots = first_of_each_id(ops, ids, slots, sentinel, size)
    pool_size = ops.sum(ops.cast(slots, "int32"))
    keep = None
    if keys is not None:
        keep = random_subset(ops, keys, subset_size, valid=slots)
        ids, slots = ops.take(ids, keep, axis=0), ops.take(slots, keep, axis=0)
    hits = (
        hit_mask(positive_ids, ids)
        if hit_mask is not None
        else accidental_hit_mask(ops, positive_ids, ids)
    )
    mask = ops.logical_and(hits, slots[None, :])
    return keep, ids, mask, num_draws, ops.sum(ops.cast(slots, "int32")), pool_size


def in_batch_log_q(
    ops, frequency, positive_ids, ids, mask, num_draws, kept, pool_size, horvitz_thompson: bool
):
    """(log Q of the pool's ids, log Q of the positives, whether it is already log Q').

    The unigram q of the frequency source for a pool without deduplication
    (every entry is a draw) or when the caller asks for it (the paper's
    released pool); else the Horvitz-Thompson per-draw equivalent.

    Args:
      frequency: the frequency source (`log_q` and `log_inclusion_probability`),
        or None, which gives (None, None, False).
      positive_ids, ids, mask, num_draws, kept, pool_size: as `pool_of_slots` returns.
      horvitz_thompson: use the Horvitz-Thompson log Q (a deduplicated pool).
    """
    if frequency is None:
        return None, None, False
    if not horvitz_thompson:
        log_q, positive_log_q = log_q_of_both(ops, frequency.log_q, ids, positive_ids)
        return log_q, positive_log_q, False
    log_q, positive_log_q = horvitz_thompson_log_q(
        ops,
        frequency.log_inclusion_probability,
        positive_ids,
        ids,
        mask,
        num_draws,
        kept,
        pool_size,
    )
    return log_q, positive_log_q, True


def log_q_of_both(ops, lookup, ids, positive_ids):
    """(lookup(ids), lookup(positive_ids)) from one call of `lookup` on both, concatenated.

    A streaming estimator's lookup (hash, gather, min, log) is then built and run once per
    step instead of twice: at batch 1024 on 2 cores the step is mostly op overhead, and
    each lookup is tens of ops.

    Args:
      lookup: callable mapping a [m] id tensor to [m] values (a frequency source's `log_q`).
      ids: the negatives' ids, of any shape.
      positive_ids: [batch] ids, cast to the dtype of `ids`.
    """
    flat = ops.reshape(ids, (-1,))
    values = lookup(ops.concatenate([flat, ops.cast(positive_ids, flat.dtype)], axis=0))
    size = ops.shape(flat)[0]
    return ops.reshape(values[:size], ops.shape(ids)), values[size:]


def horvitz_thompson_log_q(
    ops, log_inclusion_probability, positive_ids, ids, mask, num_draws, kept, pool_size
):
    """The deduplicated pool's per-draw-equivalent log Q', already without the positive.

    A distinct id d != p is in the pool with probability pi(d) = 1 - (1 - q(d))^(B-1)
    (the B-1 other entries are the draws); keeping k' of the pool's k ids multiplies
    pi by k'/k; each row's n valid entries then enter with Q_i = pi(d_i) (k'/k) / n
    (`horvitz_thompson_log_scale`).

    Args:
      log_inclusion_probability: callable (ids, num_draws) -> log pi(ids), the
        frequency source's.
      positive_ids, ids, mask, num_draws, kept, pool_size: as `pool_of_slots` returns.

    Returns:
      ([batch, n] log Q', [batch] the positives' log Q on the same scale).
    """
    log_scale = horvitz_thompson_log_scale(ops, mask, kept, pool_size)
    num_draws = ops.maximum(num_draws, 1)
    log_pi, positive_log_pi = log_q_of_both(
        ops, lambda both: log_inclusion_probability(both, num_draws), ids, positive_ids
    )
    return log_pi[None, :] + log_scale[:, None], positive_log_pi + log_scale


def random_subset(ops, keys, k: int, valid=None):
    """k positions of range(len(keys)) chosen by the largest random `keys` (uniform in
    [0, 1)): k distinct positions, uniformly at random. With `valid` ([size] bool),
    valid positions come first, uniformly among them; invalid ones fill the rest."""
    if valid is not None:
        keys = ops.where(valid, keys, -1.0)
    _, indices = ops.top_k(keys, k=k)
    return indices


def first_of_each_id(ops, ids, valid, sentinel, size):
    """[n] bool: True at the first valid position of each distinct integer id.

    A stable sort instead of a `unique`, so that the shape stays [n] (XLA, JAX).

    Args:
      ids: [n] integer ids.
      valid: [n] bool.
      sentinel: an integer above every valid id (the dtype's largest value).
      size: n, as the framework's `scatter` takes a shape (a Python int or a
        scalar tensor).
    """
    keyed = ops.where(valid, ids, sentinel)
    order = ops.argsort(keyed)
    ordered = ops.take(keyed, order, axis=0)
    starts = ops.concatenate(
        [ops.ones([1], "int32"), ops.cast(ops.not_equal(ordered[1:], ordered[:-1]), "int32")],
        axis=0,
    )
    first = ops.scatter(order[:, None], starts, [size])
    return ops.logical_and(ops.cast(first, "bool"), valid)


# --------------------------------------------------------------- count-min sketch


def over_rows(combine, rows):
    """`combine` (ops.minimum, ops.maximum) folded over the static first axis of [depth, n]
    `rows`: the sketches' reduction over their hash rows, which also holds for an empty
    step (n = 0), where Keras's reductions refuse an empty tensor."""
    result = rows[0]
    for row in range(1, rows.shape[0]):
        result = combine(result, rows[row])
    return result


def count_min_width(num_items: int) -> int:
    """The count-min sketch's width for a catalog of `num_items`: at least 2^18, else the
    power of two at or above twice the catalog (collisions then inflate an item's count by
    at most about half an average item's, per row)."""
    return max(2**18, 1 << math.ceil(math.log2(max(2 * num_items, 1))))


def count_min_log_q(ops, counts, indices, total, unit, min_count: float, width: int):
    """log(max(min_i count_i(d), floor) / total), the sketch's per-draw log q.

    Counts are stored in units of `unit` = decay^-k (lazy decay); an id seen
    fewer than `min_count` decayed times reads the floor; before any update
    (total 0) every id reads 1 / width, uniform.

    Args:
      counts: [depth * width] the sketch's counters (stored units).
      indices: [depth, n] flat counter indices of n ids (one row per hash).
      total: scalar stored total of draws.
      unit: scalar stored value of one draw made now.

    Returns:
      [n] log q.
    """
    count = over_rows(ops.minimum, ops.take(counts, indices, axis=0))
    floor = min_count * unit
    total = ops.where(total > 0, ops.maximum(total, floor), floor * width)
    return ops.log(ops.maximum(count, floor)) - ops.log(total)


def conservative_targets(ops, counts, indices_of, keys, weights, unit):
    """The conservative update's targets: every counter of an id rises to at least
    min(its counters) + c * unit, where c is the id's total weight in this step.

    Each distinct id is processed once, from the counters as they were before the
    step (`tests/reference.py` `count_min`). The caller raises each counter to the
    largest of its targets (a scatter-max: `Variable.scatter_max` in TensorFlow,
    `segment_max` in Keras 3).

    Args:
      counts: [depth * width] the sketch's counters (stored units, already decayed).
      indices_of: maps [n] keys to their [depth, n] flat counter indices.
      keys: [n] integer ids (any order, duplicates allowed).
      weights: [n] float weights (0 for masked ids).
      unit: scalar stored value of one draw made now.

    Returns:
      ([depth * n] flat counter indices, [depth * n] targets).
    """
    order = ops.argsort(keys)
    keys, weights = ops.take(keys, order, axis=0), ops.take(weights, order, axis=0)
    num = ops.shape(keys)[0]
    starts = ops.logical_or(ops.equal(ops.arange(num), 0), ops.not_equal(keys, ops.roll(keys, 1)))
    segments = ops.cumsum(ops.cast(starts, "int32")) - 1
    id_weight = ops.take(ops.segment_sum(weights, segments, num_segments=num), segments, axis=0)
    indices = indices_of(keys)
    estimate = over_rows(ops.minimum, ops.take(counts, indices, axis=0)) + id_weight * unit
    return (
        ops.reshape(indices, (-1,)),
        ops.reshape(ops.broadcast_to(estimate, ops.shape(indices)), (-1,)),
    )


# --------------------------------------------------------------- inter-arrival gaps (Yi et al.)

# "first_gap": a bucket's first sighting sets its gap to the full t - A (A = 0 before it);
# "zero": the EMA from 0 as written in the paper.
INTER_ARRIVAL_INITIALIZATIONS = ("first_gap", "zero")


def inter_arrival_update(ops, last_step, gap, step, alpha: float, initialization: str):
    """The new gaps of the buckets sighted at `step` (Yi et al. 2019, algorithm 2):
    B <- (1 - alpha) B + alpha (t - A); with "first_gap", B <- t - A where A = 0.

    Args:
      last_step: [...] integer A of the sighted buckets (0: never sighted).
      gap: [...] float B of the same buckets.
      step: scalar integer t, this step (1 for the first).
    """
    gap_now = ops.cast(step - last_step, "float32")
    updated = (1.0 - alpha) * gap + alpha * gap_now
    if initialization == "first_gap":
        updated = ops.where(ops.equal(last_step, 0), gap_now, updated)
    return updated


def inter_arrival_gap(ops, last_step, gap, step, num_buckets: int):
    """[n] estimated gaps: the max over hash rows of the [depth, n] buckets' gaps
    (collisions only shorten gaps), at least 1. Ids with an unsighted bucket read
    t + 1; before any update (t = 0) every id reads num_buckets, uniform.
    """
    unseen = ops.where(step > 0, ops.cast(step, "float32") + 1.0, float(num_buckets))
    return over_rows(ops.maximum, ops.where(last_step > 0, ops.maximum(gap, 1.0), unseen))
