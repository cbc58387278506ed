"""Retrieval evaluation over the whole catalog: exact or ScaNN top-k with filtering, Recall@k,
NDCG@k, and Recall@k by popularity band.

gSASRec's protocol: every item is a candidate except padding and the items the
user already interacted with (the query's history), which are filtered out.
A query may have several positives; Recall@k is the fraction of them
retrieved in the top k, NDCG@k the DCG of the hits over the ideal DCG.
"""

import math
from typing import Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

from logq_core import checks

DEFAULT_KS = (1, 10, 20, 100)


# Exact search scores at most this many (query, item) pairs at once: a batch's score matrix
# and its copies stay near 0.5 GB each, whatever the catalog (1,024 queries against 890k items
# would take 3.6 GB per copy).
SCORES_PER_BATCH = 2**27


def exact_top_k(
    query_embeddings: np.ndarray,
    item_embeddings: np.ndarray,
    k: int,
    exclude: Optional[Sequence[np.ndarray]] = None,
    first_id: int = 1,
    batch_size: Optional[int] = None,
) -> np.ndarray:
    """[num_queries, k] ids of the highest-scoring items by dot product, exactly.

    Args:
      query_embeddings: [num_queries, dim].
      item_embeddings: [num_ids, dim], row i the embedding of id i.
      k: how many to return (at most the number of candidates).
      exclude: per query, ids never to return (the user's history).
      first_id: ids below it (padding) are never returned.
      batch_size: queries scored at once (default: up to 1,024, at most SCORES_PER_BATCH
        scores).
    """
    queries = np.asarray(query_embeddings, np.float32)
    table = tf.constant(np.asarray(item_embeddings, np.float32))
    num_ids = int(table.shape[0])
    batch_size = batch_size or max(1, min(1024, SCORES_PER_BATCH // max(num_ids, 1)))
    k = min(k, num_ids - first_id)
    results = []
    for start in range(0, len(queries), batch_size):
        scores = tf.matmul(queries[start : start + batch_size], table, transpose_b=True).numpy()
        scores[:, :first_id] = -np.inf
        if exclude is not None:
            for row, ids in enumerate(exclude[start : start + batch_size]):
                scores[row, np.asarray(ids, np.int64)] = -np.inf
        results.append(tf.math.top_k(scores, k=k).indices.numpy())
    return np.concatenate(results) if results else np.zeros([0, k], np.int64)


def per_query_recall_ndcg(
    retrieved: np.ndarray, targets: Sequence[np.ndarray], ks: Sequence[int] = DEFAULT_KS
) -> Dict[str, np.ndarray]:
    """Recall@k and NDCG@k of each query: {"recall@k" / "ndcg@k": [num_queries] float64}.

    Their means are `recall_ndcg`; per query they give paired comparisons of two models on
    the same queries (`pipelines.evaluate --against`).

    Args:
      retrieved: [num_queries, >= max(ks)] ranked ids.
      targets: per query, its positive ids (at least one).
    """
    retrieved = np.asarray(retrieved)
    if len(retrieved) != len(targets):
        raise ValueError(f"`retrieved` has {len(retrieved)} queries but `targets` {len(targets)}.")
    if retrieved.shape[1] < max(ks):
        raise ValueError(
            f"`retrieved` holds {retrieved.shape[1]} ids per query; ks={list(ks)} needs {max(ks)}."
        )
    discounts = 1.0 / np.log2(np.arange(2, max(ks) + 2))
    values = {f"{name}@{k}": np.zeros(len(targets)) for k in ks for name in ("recall", "ndcg")}
    for query, (ranked, positives) in enumerate(zip(retrieved, targets)):
        positives = np.unique(np.asarray(positives))
        if positives.size == 0:
            raise ValueError("Every query needs at least one target.")
        hits = np.isin(ranked[: max(ks)], positives)
        for k in ks:
            values[f"recall@{k}"][query] = hits[:k].sum() / positives.size
            ideal = discounts[: min(k, positives.size)].sum()
            values[f"ndcg@{k}"][query] = (hits[:k] * discounts[:k]).sum() / ideal
    return values


def recall_ndcg(
    retrieved: np.ndarray, targets: Sequence[np.ndarray], ks: Sequence[int] = DEFAULT_KS
) -> Dict[str, float]:
    """Mean Recall@k and NDCG@k over queries (0 for no queries).

    Args:
      retrieved: [num_queries, >= max(ks)] ranked ids.
      targets: per query, its positive ids (at least one).
    """
    return {
        name: float(values.mean()) if values.size else 0.0
        for name, values in per_query_recall_ndcg(retrieved, targets, ks).items()
    }


INDEXES = ("exact", "scann")

# Below this many items a ScaNN request is answered by exact search. Measured on 2 CPU cores
# (2,048 queries, dim 64, clustered embeddings, `scann_defaults`): at 3,000 items ScaNN was
# 2.8x faster than exact search but returned 88% of the exact top-100; from 10,000 items on it
# returned >= 99.7% at 4.6x (10k), 8.9x (30k), 17x (100k) and 37x (300k). Exact search over
# fewer items costs milliseconds, so the index is not worth its recall there.
SCANN_MIN_ITEMS = 10_000


def uses_scann(num_items: int, min_items: int = SCANN_MIN_ITEMS) -> bool:
    """Whether a ScaNN request over `num_items` candidates builds an index (else exact search).

    Raises:
      ValueError: `min_items` is not a non-negative integer (0: always ScaNN).
    """
    return num_items >= checks.check_non_negative_int("min_items", min_items)


# From this many items on, ScaNN searches a tenth of its leaves and re-scores 20k candidates
# exactly: `benchmarks.ann` (k = 100, 2 cores, 2026-11-26) measured the smaller
# catalogs' settings (a fifth of the leaves, 6k re-scored) returning 0.833 / 0.881 of the exact
# top-100 at 5M items (trained / clustered embeddings, 14.6x / 12.4x BruteForce's speed), and
# these 0.968 / 0.965 at 22.7x / 14.4x; at 1M items 0.997 / 0.971 against 0.958 / 0.931.
LARGE_CATALOG = 1_000_000


def scann_defaults(num_items: int, k: int) -> Dict[str, int]:
    """ScaNN settings that scale with the catalog: about sqrt(N) leaves; below LARGE_CATALOG
    items a fifth of them searched (at least 16) and 6k candidates re-scored exactly (at
    least 100), from it on a tenth of them and 20k re-scored (see LARGE_CATALOG)."""
    num_leaves = int(min(max(math.isqrt(max(num_items, 1)), 1), 4000))
    large = num_items >= LARGE_CATALOG
    return {
        "num_leaves": num_leaves,
        "num_leaves_to_search": min(num_leaves, max(16, num_leaves // (10 if large else 5))),
        "reorder": max((20 if large else 6) * k, 100),
    }


def scann_top_k(
    query_embeddings: np.ndarray,
    item_embeddings: np.ndarray,
    k: int,
    exclude: Optional[Sequence[np.ndarray]] = None,
    first_id: int = 1,
    min_items: int = SCANN_MIN_ITEMS,
    **overrides,
) -> np.ndarray:
    """Like `exact_top_k`, through a ScaNN index (tree + asymmetric hashing + exact reorder);
    below SCANN_MIN_ITEMS candidates, by exact search (`uses_scann`).

    Excluded ids are dropped after the search, which asks for k plus the
    longest exclusion list so that k ids remain. A row the index returns too
    few ids for (the partitions searched can hold fewer than asked; ScaNN pads
    the answer with row 0 at a NaN distance, which is dropped) is answered by
    exact search.

    Args:
      min_items: fewer candidates than this are searched exactly.
      overrides: any of `scann_defaults`' keys.
    """
    if not uses_scann(len(item_embeddings) - first_id, min_items):
        return exact_top_k(query_embeddings, item_embeddings, k, exclude=exclude, first_id=first_id)
    from scann import scann_ops_pybind  # pylint: disable=import-outside-toplevel

    items = np.ascontiguousarray(np.asarray(item_embeddings, np.float32)[first_id:])
    queries = np.ascontiguousarray(np.asarray(query_embeddings, np.float32))
    longest = max((len(ids) for ids in exclude), default=0) if exclude is not None else 0
    wanted = min(k + longest, len(items))
    settings = dict(scann_defaults(len(items), wanted), **overrides)
    builder = scann_ops_pybind.builder(items, wanted, "dot_product")
    if settings["num_leaves"] > 1 and len(items) >= 2 * settings["num_leaves"]:
        builder = builder.tree(
            num_leaves=settings["num_leaves"],
            num_leaves_to_search=settings["num_leaves_to_search"],
            training_sample_size=min(len(items), 250_000),
        )
    searcher = (
        builder.score_ah(2, anisotropic_quantization_threshold=0.2)
        .reorder(max(settings["reorder"], wanted))
        .build()
    )
    found, distances = searcher.search_batched(queries, final_num_neighbors=wanted)
    found = found.astype(np.int64) + first_id
    k = min(k, len(items))
    out = np.zeros([len(queries), k], np.int64)
    short = []
    for row, ids in enumerate(found):
        # Slots the index could not fill come back as row 0 with a NaN distance.
        ids = ids[~np.isnan(distances[row])]
        if exclude is not None and len(exclude[row]):
            ids = ids[~np.isin(ids, exclude[row])]
        if len(ids) < k:
            short.append(row)
            continue
        out[row] = ids[:k]
    if short:
        out[short] = exact_top_k(
            queries[short],
            item_embeddings,
            k,
            exclude=None if exclude is None else [exclude[r] for r in short],
            first_id=first_id,
        )
    return out


def top_k(
    query_embeddings,
    item_embeddings,
    k: int,
    exclude=None,
    index: str = "exact",
    first_id: int = 1,
    min_items: int = SCANN_MIN_ITEMS,
    candidates: Optional[np.ndarray] = None,
) -> np.ndarray:
    """[num_queries, k] ids by `index` ("exact" or "scann"), excluded ids filtered. A catalog
    of fewer than k items is returned whole, the row padded with id 0 (never a target).
    `min_items`: with "scann", smaller catalogs are searched exactly (0: always the index).
    `candidates`: the ids searched (an index over part of the catalog); None: every id from
    `first_id` on."""
    if index not in INDEXES:
        raise ValueError(f"`index` must be one of {', '.join(INDEXES)}; received index={index!r}.")
    if candidates is not None:
        candidates = np.unique(np.asarray(candidates, np.int64))
        if (
            candidates.size == 0
            or candidates[0] < first_id
            or candidates[-1] >= len(item_embeddings)
        ):
            raise ValueError(
                f"`candidates` must be ids in [{first_id}, "
                f"{len(item_embeddings) - 1}]; received {candidates.size} ids "
                f"from {candidates[:1]} to {candidates[-1:]}."
            )
        # Search the candidates' rows (row 0: padding); map rows back to ids.
        position = np.zeros(len(item_embeddings), np.int64)
        position[candidates] = np.arange(1, len(candidates) + 1)
        table = np.concatenate(
            [np.zeros_like(item_embeddings[:1]), np.asarray(item_embeddings)[candidates]]
        )
        kept = (
            None
            if exclude is None
            else [
                position[np.asarray(ids, np.int64)][position[np.asarray(ids, np.int64)] > 0]
                for ids in exclude
            ]
        )
        found = top_k(
            query_embeddings, table, k, exclude=kept, index=index, first_id=1, min_items=min_items
        )
        return np.where(found > 0, np.concatenate([[0], candidates])[found], 0)
    if index == "exact":
        found = exact_top_k(
            query_embeddings, item_embeddings, k, exclude=exclude, first_id=first_id
        )
    else:
        found = scann_top_k(
            query_embeddings,
            item_embeddings,
            k,
            exclude=exclude,
            first_id=first_id,
            min_items=min_items,
        )
    return np.pad(found, [[0, 0], [0, max(k - found.shape[1], 0)]])


def overlap_at_k(approximate: np.ndarray, exact: np.ndarray, k: int) -> float:
    """Mean fraction of the exact top-k that the approximate top-k also returns (ANN recall)."""
    return float(
        np.mean(
            [
                len(np.intersect1d(a[:k], e[:k])) / max(len(e[:k]), 1)
                for a, e in zip(approximate, exact)
            ]
        )
    )


def popularity_bands(counts: np.ndarray, first_id: int = 1) -> np.ndarray:
    """[num_ids] band of each id by training frequency: 0 head, 1 torso, 2 tail.

    Items are sorted by count (ties by id) and cut into thirds of the catalog.
    Ids below `first_id` get band -1.
    """
    counts = np.asarray(counts)
    order = np.lexsort((np.arange(len(counts) - first_id), -counts[first_id:]))
    bands = np.full(len(counts), -1, np.int64)
    bands[first_id + order] = np.minimum(3 * np.arange(len(order)) // max(len(order), 1), 2)
    return bands


def stratified_recall(
    retrieved: np.ndarray, targets: Sequence[np.ndarray], bands: np.ndarray, k: int
) -> Dict[str, float]:
    """Recall@k of the targets in each popularity band (head / torso / tail).

    Each target counts once in its own band: the share of the band's targets
    retrieved in their query's top k. A band with no target gets NaN.
    """
    hits, totals = np.zeros(3), np.zeros(3)
    for ranked, positives in zip(retrieved, targets):
        for target in np.unique(np.asarray(positives)):
            band = bands[target]
            totals[band] += 1
            hits[band] += target in ranked[:k]
    return {
        f"{name}_recall@{k}": float(hits[b] / totals[b]) if totals[b] else float("nan")
        for b, name in enumerate(("head", "torso", "tail"))
    }


def candidate_log_softmax(
    logits: np.ndarray, exclude: Optional[Sequence[np.ndarray]] = None, first_id: int = 1
) -> np.ndarray:
    """[num_queries, num_ids] float64 log softmax of each row over its candidates: every id
    from `first_id` on, less the row's `exclude` ids (its history); -inf elsewhere."""
    logits = np.array(logits, np.float64)
    candidate = np.ones(logits.shape, bool)
    candidate[:, :first_id] = False
    if exclude is not None:
        for row, ids in enumerate(exclude):
            candidate[row, np.asarray(ids, np.int64)] = False
    logits = np.where(candidate, logits, -np.inf)
    peak = logits.max(axis=1, keepdims=True)
    return logits - peak - np.log(np.exp(logits - peak).sum(axis=1, keepdims=True))


def kl_to_truth(
    true_logits: np.ndarray,
    model_scores: np.ndarray,
    exclude: Optional[Sequence[np.ndarray]] = None,
    first_id: int = 1,
) -> float:
    """Mean KL(P_true || P_model) in nats between per-query softmax laws over the candidates.

    Both laws are softmaxes over the same candidates: every id from `first_id`
    on, less the query's `exclude` ids (its history). Where the truth is known
    (the synthetic catalog), this is how far a model's scores are from the
    true next-item law, popularity included: a model whose logits are off by
    log Q(d) pays for it here even when its top-k ranking is good.

    Args:
      true_logits: [num_queries, num_ids] true logits (any per-row offset).
      model_scores: [num_queries, num_ids] the model's logits.
      exclude: per query, ids that are not candidates.
      first_id: ids below it (padding) are not candidates.
    """
    if np.shape(true_logits) != np.shape(model_scores) or np.ndim(true_logits) != 2:
        raise ValueError(
            f"`true_logits` {np.shape(true_logits)} and `model_scores` "
            f"{np.shape(model_scores)} must be the same [num_queries, num_ids] "
            "shape."
        )
    log_p = candidate_log_softmax(true_logits, exclude, first_id)
    log_m = candidate_log_softmax(model_scores, exclude, first_id)
    candidate = np.isfinite(log_p) | np.isfinite(log_m)
    # Non-candidates hold -inf in both; zero them before the product (0 * -inf is nan).
    log_p, log_m = np.where(candidate, log_p, 0.0), np.where(candidate, log_m, 0.0)
    terms = np.where(candidate, np.exp(log_p) * (log_p - log_m), 0.0)
    return float(terms.sum(axis=1).mean())


def embedding_geometry(
    query_embeddings: np.ndarray, item_embeddings: np.ndarray, first_id: int = 1
) -> Dict[str, float]:
    """How spread out a model's item vectors and scores are: a check for embedding collapse.

    - `mean_direction_norm`: the norm of the mean of the unit-normalised item
      vectors, in [0, 1]. Near 1, every item points one way (collapse); items
      spread evenly over the sphere give about 1 / sqrt(num_items).
    - `score_std`: the standard deviation of a query's scores over the
      catalog, averaged over the queries. Near 0, the model barely tells
      items apart.
    - `item_norm`: the mean norm of the item vectors.

    Args:
      query_embeddings: [num_queries, dim].
      item_embeddings: [num_ids, dim]; ids below `first_id` (padding) are left out.
      first_id: the first id that is an item.
    """
    queries = np.asarray(query_embeddings, np.float64)
    items = np.asarray(item_embeddings, np.float64)
    if queries.ndim != 2 or items.ndim != 2 or queries.shape[1] != items.shape[1]:
        raise ValueError(
            f"`query_embeddings` {queries.shape} and `item_embeddings` "
            f"{items.shape} must be [num_queries, dim] and [num_ids, dim]."
        )
    if not 0 <= first_id < items.shape[0] or len(queries) == 0:
        raise ValueError(
            f"Need at least one query and one item at or after `first_id` "
            f"{first_id}; got {len(queries)} queries and {items.shape[0]} ids."
        )
    items = items[first_id:]
    norms = np.linalg.norm(items, axis=1)
    if np.any(norms == 0):
        raise ValueError(
            f"`item_embeddings` has {int(np.sum(norms == 0))} zero rows at or "
            f"after `first_id` {first_id}; their direction is undefined."
        )
    return {
        "mean_direction_norm": float(np.linalg.norm((items / norms[:, None]).mean(axis=0))),
        "score_std": float((queries @ items.T).std(axis=1).mean()),
        "item_norm": float(norms.mean()),
    }
