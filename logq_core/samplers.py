"""What every framework's negative samplers share: their names, their options, their record.

`tfrs_logq.negatives` and `keras_logq.negatives` build their samplers from
`sampler_arguments` (so one configuration means the same draws in both) and
return `Negatives`. The log Q each sampler attaches is explained in
docs/design.md ("log Q per sampler").
"""

from typing import Any, Dict, NamedTuple, Optional, Tuple

from logq_core import checks

# The samplers by name: `make_sampler`'s first argument and the pipelines' --negatives.
KINDS = ("in_batch", "uniform", "mixed")

# How a deduplicated in-batch pool is corrected: the unbiased per-draw equivalent of the
# inclusion probability, or the unigram q as the paper's released code does (biased).
IN_BATCH_LOG_Q = ("horvitz_thompson", "unigram")

# Mixed negatives' log Q: the exact mixture proposal, or the unigram q for every negative
# (the paper's released code).
MIXTURES = ("exact", "paper")


class Negatives(NamedTuple):
    """What a sampler returns.

    Attributes:
      ids: [num_negatives] negative ids, shared by every row of the batch, or
        [batch, num_negatives] ids drawn for each row (`per_row=True`).
      embeddings: [num_negatives, dim] (or [batch, num_negatives, dim]) their
        embeddings, or None when the sampler was given no embeddings (ids-only
        use). `MixedSampler(per_row=True)` gives a pair (per-row part, shared
        part) whose scores are concatenated in that order.
      mask: [batch, num_negatives] bool, True for a valid negative of that row.
      log_q: [num_negatives] or [batch, num_negatives] per-draw-equivalent
        log Q, or None when the sampler has no probabilities.
      positive_log_q: [batch] log Q of each row's positive on the same scale,
        or None.
      log_q_excludes_positive: True when `log_q` already is log Q' (the
        positive excluded), so the improved loss must not convert it again.
      expected_draws: scalar, the expected number of a row's slots that are draws
        from the sampler's law over the whole catalog (uniform: every slot; an
        in-batch pool without deduplication: the kept slots that are other rows'
        positives, kept (B - 1) / B), or None. The mixed sampler weights its
        strata by it.
      log_q_checked: True when the sampler checked the log Q it read from its
        frequency source (finite and <= 0) and derived `log_q` and
        `positive_log_q` from it by formulas that keep them finite, so the loss
        need not check the [batch, n] values again.
    """
    ids: Any
    embeddings: Any
    mask: Any
    log_q: Any
    positive_log_q: Any
    log_q_excludes_positive: bool = False
    log_q_checked: bool = False
    expected_draws: Any = None


def check_mixed(mixture: str, deduplicate: bool) -> None:
    """Raises unless the mixed sampler can correct this pool: a deduplicated in-batch half
    has an exact mixture only with its inclusion probabilities at the uniform draws too,
    which is not implemented, so it needs the released code's mixture="paper"."""
    checks.check_choice("mixture", mixture, MIXTURES)
    if checks.check_bool("deduplicate", deduplicate) and mixture == "exact":
        raise ValueError(
            "MixedSampler(deduplicate=True) needs mixture='paper' (the exact mixture of a "
            "deduplicated pool is not implemented); received mixture='exact'.")


def sampler_arguments(negatives: str, *, num_negatives: Optional[int] = None,
                      num_items: Optional[int] = None,
                      first_id: int = 0, probabilities: Any = None, seed: Optional[int] = None,
                      deduplicate: bool = False, log_q: str = "horvitz_thompson",
                      per_row: bool = False, global_batch: bool = False,
                      mixture: str = "exact") -> Tuple[str, Dict[str, Any]]:
    """(kind, constructor arguments) of the sampler that one set of settings describes.

    One set of settings serves every kind: a kind ignores the settings it has
    no use for (`per_row` means nothing to in-batch negatives, `log_q` nothing
    to uniform ones), so that a preset can switch `negatives` alone. Every
    setting's value is checked whatever the kind.

    Args:
      negatives: one of KINDS.
      num_negatives: negatives per step: the in-batch pool's cap (None: the
        whole batch), the uniform draws (per row with `per_row`), or, mixed,
        n - n // 2 uniform and n // 2 in-batch.
      num_items, first_id: the catalog [first_id, first_id + num_items) of the
        uniform draws (uniform and mixed).
      probabilities: the frequency source of log Q (in-batch and mixed).
      seed: the draws' seed.
      deduplicate, log_q, global_batch: the in-batch pool's (see InBatchSampler).
      per_row, mixture: the uniform draws' and the mixture's (see MixedSampler).
    """
    checks.check_choice("negatives", negatives, KINDS)
    num_negatives = checks.check_positive_int("num_negatives", num_negatives, allow_none=True)
    for name, value in (("deduplicate", deduplicate), ("per_row", per_row),
                        ("global_batch", global_batch)):
        checks.check_bool(name, value)
    checks.check_choice("log_q", log_q, IN_BATCH_LOG_Q)
    checks.check_seed("seed", seed)
    check_mixed(mixture, deduplicate if negatives == "mixed" else False)
    if negatives == "in_batch":
        return negatives, dict(deduplicate=deduplicate, max_pool_size=num_negatives,
                               global_batch=global_batch, probabilities=probabilities,
                               seed=seed, log_q=log_q)
    if num_items is None:
        raise ValueError(f"negatives={negatives!r} draws uniformly from the catalog and "
                         "needs `num_items`; received num_items=None.")
    if num_negatives is None:
        raise ValueError(f"negatives={negatives!r} draws a fixed number of negatives and "
                         "needs `num_negatives`; received num_negatives=None.")
    if negatives == "uniform":
        return negatives, dict(num_items=num_items, num_negatives=num_negatives,
                               first_id=first_id, seed=seed, per_row=per_row)
    if num_negatives < 2:
        raise ValueError("negatives='mixed' needs num_negatives >= 2 (half uniform, half "
                         f"in-batch); received num_negatives={num_negatives}.")
    return negatives, dict(num_items=num_items, num_uniform=num_negatives - num_negatives // 2,
                           num_in_batch=num_negatives // 2, mixture=mixture,
                           first_id=first_id, global_batch=global_batch,
                           probabilities=probabilities, seed=seed, deduplicate=deduplicate,
                           per_row=per_row)
