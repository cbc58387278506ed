"""What every framework's negative samplers share: their names, their options, their record.

`tfrs_logq.negatives` and `keras_logq.negatives` build their samplers from
`sampler_arguments` (so one configuration means the same draws in both) and
return `Negatives`. The log Q each sampler attaches is explained in
docs/design.md ("log Q per sampler").
"""

from typing import Any, Dict, NamedTuple, Optional, Tuple

import numpy as np

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


# A lookup layer's default special tokens (Keras StringLookup's mask and out-of-vocabulary
# tokens): never items, so never in a catalog that uniform draws pick from.
SPECIAL_TOKENS = ("", "[UNK]")


def uniform_catalog(
    num_items: Any, first_id: Any = 0, vocabulary: Any = None
) -> Tuple[int, Optional[list]]:
    """(num_items, vocabulary) of the catalog that uniform negatives are drawn from.

    Either the integer ids [first_id, first_id + num_items) (`vocabulary` None), or the ids
    listed in `vocabulary`: distinct strings, or distinct integers (a sparse integer
    catalog), in the item tower's own id space, with no out-of-vocabulary or mask token.
    Its size is then `num_items` (given too, it must agree), and a uniform draw has
    Q = 1 / num_items exactly (`logq_core.formulas.log_uniform_q`): the catalog is what
    can be drawn, nothing else.

    Returns:
      num_items, and `vocabulary` as a list of str (bytes decoded) or of int, or None.
    """
    if isinstance(first_id, bool) or not isinstance(first_id, int) or first_id < 0:
        raise ValueError(
            f"`first_id` must be a non-negative integer; received first_id={first_id!r}."
        )
    if vocabulary is None:
        return checks.check_positive_int("num_items", num_items), None
    if first_id != 0:
        raise ValueError(
            "`first_id` numbers an integer catalog [first_id, first_id + "
            "num_items); with a `vocabulary` the draws are its ids. Received "
            f"first_id={first_id!r} and a vocabulary."
        )
    if isinstance(vocabulary, (str, bytes)):
        raise TypeError(
            "`vocabulary` must be a sequence of ids; received the single "
            f"{type(vocabulary).__name__} vocabulary={vocabulary!r}."
        )
    values = np.asarray(vocabulary, dtype=object)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(
            "`vocabulary` must be a non-empty list of ids; received vocabulary "
            f"with shape {values.shape}."
        )
    items = [
        x.decode()
        if isinstance(x, bytes)
        else str(x)
        if isinstance(x, np.str_)
        else int(x)
        if isinstance(x, np.integer)
        else x
        for x in values.tolist()
    ]
    kinds = {
        str
        if isinstance(x, str)
        else int
        if (isinstance(x, int) and not isinstance(x, bool))
        else type(x)
        for x in items
    }
    if kinds not in ({str}, {int}):
        raise TypeError(
            "`vocabulary` must hold string ids or integer ids, one kind; received "
            f"vocabulary with values of types {sorted(k.__name__ for k in kinds)}."
        )
    if len(set(items)) != len(items):
        seen, repeated = set(), []
        for x in items:
            if x in seen and x not in repeated:
                repeated.append(x)
            seen.add(x)
        raise ValueError(
            f"`vocabulary` must hold distinct ids; received {len(items)} ids, "
            f"{len(set(items))} distinct (repeated: {repeated[:3]!r})."
        )
    special = [x for x in items if x in SPECIAL_TOKENS]
    if special:
        raise ValueError(
            f"`vocabulary` must hold item ids only; received the lookup token(s) {special!r}, "
            "which uniform draws would pick as items. Use "
            "lookup.get_vocabulary(include_special_tokens=False), or `from_lookup(lookup)`."
        )
    if num_items is not None and checks.check_positive_int("num_items", num_items) != len(items):
        raise ValueError(
            f"`num_items` must be the vocabulary's size or None; received "
            f"num_items={num_items!r} and a vocabulary of {len(items)} ids."
        )
    return len(items), items


def check_vocabulary_ids(caller: str, vocabulary: list, dtype: str) -> None:
    """Raises TypeError unless positive ids of `dtype` (a dtype name: "string", "int32",
    ...) can hold the ids drawn from `vocabulary` (`uniform_catalog`'s list): ids of its
    kind (strings for strings, integers for integers) and, for integers, a dtype whose
    range holds every id of the vocabulary. `caller` names the sampler in the message."""
    strings = isinstance(vocabulary[0], str)
    try:
        integer = dtype != "string" and np.issubdtype(np.dtype(dtype), np.integer)
    except TypeError:  # A dtype numpy does not know (bfloat16, ...): not integer ids.
        integer = False
    if strings != (dtype == "string") or not (strings or integer):
        raise TypeError(
            f"{caller} draws {'string' if strings else 'integer'} ids from its "
            f"vocabulary; received positive_ids with dtype {dtype}."
        )
    if not strings:
        low, high = min(vocabulary), max(vocabulary)
        if not np.iinfo(dtype).min <= low <= high <= np.iinfo(dtype).max:
            raise TypeError(
                f"The vocabulary's ids [{low}, {high}] do not fit positive_ids' "
                f"dtype; received positive_ids with dtype {dtype}."
            )


def lookup_vocabulary(lookup: Any) -> list:
    """The item ids of a Keras `StringLookup` or `IntegerLookup` (Keras 2 or 3; the item
    tower's first layer), without its out-of-vocabulary and mask tokens: the catalog a
    vocabulary sampler draws from (the samplers' `from_lookup`)."""
    if not hasattr(lookup, "get_vocabulary"):
        raise TypeError(
            "`lookup` must be a Keras StringLookup or IntegerLookup layer (with "
            f"`get_vocabulary`); received lookup={lookup!r}."
        )
    vocabulary = lookup.get_vocabulary(include_special_tokens=False)
    if not len(vocabulary):  # pylint: disable=g-explicit-length-test
        raise ValueError(
            f"`lookup` has an empty vocabulary (adapt it, or give it one); "
            f"received lookup={lookup!r}."
        )
    return list(vocabulary)


# What a sampler built from a lookup draws: the lookup's output indices of its items (the
# ids a tower receives when the lookup runs before it, in the input pipeline), or the
# items themselves (a tower that starts with the lookup).
LOOKUP_DRAWS = ("indices", "tokens")


def lookup_catalog(lookup: Any, draw: str) -> Dict[str, Any]:
    """The catalog arguments (`num_items`, `first_id`, `vocabulary`) of a uniform sampler
    over the items of `lookup` (a Keras `StringLookup` or `IntegerLookup`), the
    out-of-vocabulary and mask tokens never drawn.

    Args:
      lookup: the lookup layer, adapted or given its vocabulary.
      draw: "indices": the indices the lookup gives its items, which are contiguous and
        follow its special tokens (a mask token, then the out-of-vocabulary indices), so
        the catalog is [first_id, first_id + num_items), every item once; "tokens": the
        items themselves, as a `vocabulary`.
    """
    checks.check_choice("draw", draw, LOOKUP_DRAWS)
    items = lookup_vocabulary(lookup)
    if draw == "tokens":
        return dict(num_items=None, first_id=0, vocabulary=items)
    invert, mode = getattr(lookup, "invert", False), getattr(lookup, "output_mode", "int")
    if invert or mode != "int":
        raise ValueError(
            "draw='indices' needs a lookup that maps items to integer indices (invert=False, "
            f"output_mode='int'); received a lookup with invert={invert!r}, "
            f"output_mode={mode!r}."
        )
    return dict(
        num_items=len(items), first_id=int(lookup.vocabulary_size()) - len(items), vocabulary=None
    )


def check_mixed(mixture: str, deduplicate: bool) -> None:
    """Raises unless the mixed sampler can correct this pool: a deduplicated in-batch half
    has an exact mixture only with its inclusion probabilities at the uniform draws too,
    which is not implemented, so it needs the released code's mixture="paper"."""
    checks.check_choice("mixture", mixture, MIXTURES)
    if checks.check_bool("deduplicate", deduplicate) and mixture == "exact":
        raise ValueError(
            "MixedSampler(deduplicate=True) needs mixture='paper' (the exact mixture of a "
            "deduplicated pool is not implemented); received mixture='exact'."
        )


def sampler_arguments(
    negatives: str,
    *,
    num_negatives: Optional[int] = None,
    num_items: Optional[int] = None,
    first_id: int = 0,
    probabilities: Any = None,
    seed: Optional[int] = None,
    deduplicate: bool = False,
    log_q: str = "horvitz_thompson",
    per_row: bool = False,
    global_batch: bool = False,
    mixture: str = "exact",
    vocabulary: Any = None,
) -> Tuple[str, Dict[str, Any]]:
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
      vocabulary: instead of `num_items`, the ids the uniform draws pick from, in the
        item tower's own id space (see `uniform_catalog`).
      probabilities: the frequency source of log Q (in-batch and mixed).
      seed: the draws' seed.
      deduplicate, log_q, global_batch: the in-batch pool's (see InBatchSampler).
      per_row, mixture: the uniform draws' and the mixture's (see MixedSampler).
    """
    checks.check_choice("negatives", negatives, KINDS)
    num_negatives = checks.check_positive_int("num_negatives", num_negatives, allow_none=True)
    for name, value in (
        ("deduplicate", deduplicate),
        ("per_row", per_row),
        ("global_batch", global_batch),
    ):
        checks.check_bool(name, value)
    checks.check_choice("log_q", log_q, IN_BATCH_LOG_Q)
    checks.check_seed("seed", seed)
    check_mixed(mixture, deduplicate if negatives == "mixed" else False)
    if negatives == "in_batch":
        return negatives, dict(
            deduplicate=deduplicate,
            max_pool_size=num_negatives,
            global_batch=global_batch,
            probabilities=probabilities,
            seed=seed,
            log_q=log_q,
        )
    if num_items is None and vocabulary is None:
        raise ValueError(
            f"negatives={negatives!r} draws uniformly from the catalog and "
            "needs `num_items` or a `vocabulary`; received neither."
        )
    catalog = dict(num_items=num_items, first_id=first_id)
    if vocabulary is not None:  # Checked, with num_items and first_id, by the sampler.
        catalog = dict(catalog, vocabulary=vocabulary)
    if num_negatives is None:
        raise ValueError(
            f"negatives={negatives!r} draws a fixed number of negatives and "
            "needs `num_negatives`; received num_negatives=None."
        )
    if negatives == "uniform":
        return negatives, dict(catalog, num_negatives=num_negatives, seed=seed, per_row=per_row)
    if num_negatives < 2:
        raise ValueError(
            "negatives='mixed' needs num_negatives >= 2 (half uniform, half "
            f"in-batch); received num_negatives={num_negatives}."
        )
    return negatives, dict(
        catalog,
        num_uniform=num_negatives - num_negatives // 2,
        num_in_batch=num_negatives // 2,
        mixture=mixture,
        global_batch=global_batch,
        probabilities=probabilities,
        seed=seed,
        deduplicate=deduplicate,
        per_row=per_row,
    )
