"""Ranking metrics of retrieved ids against each query's positives, in numpy: the numbers
every evaluation reports (`tfrs_logq.retrieval`, the pipelines, the Keras 3 examples), with
no TensorFlow or Keras import."""

from typing import Dict, Sequence

import numpy as np

DEFAULT_KS = (1, 10, 20, 100)


def per_query_recall_ndcg(
    retrieved: np.ndarray, targets: Sequence[np.ndarray], ks: Sequence[int] = DEFAULT_KS
) -> Dict[str, np.ndarray]:
    """Recall@k and NDCG@k of each query: {"recall@k" / "ndcg@k": [num_queries] float64}.

    Their means are `recall_ndcg`; per query they give paired comparisons of two models on
    the same queries (`pipelines.evaluate --against`).

    Args:
      retrieved: [num_queries, >= max(ks)] ranked ids; `logq_core.ranking.NO_ITEM` (-1) in
        a slot no candidate filled, which never matches a target (a miss).
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
