"""Retrieval evaluation over the whole catalog: exact top-k with filtering, Recall@k and NDCG@k.

gSASRec's protocol: every item is a candidate except padding and the items the
user already interacted with (the query's history), which are filtered out.
A query may have several positives; Recall@k is the fraction of them
retrieved in the top k, NDCG@k the DCG of the hits over the ideal DCG.
"""

from typing import Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

DEFAULT_KS = (1, 10, 20, 100)


def exact_top_k(query_embeddings: np.ndarray, item_embeddings: np.ndarray, k: int,
                exclude: Optional[Sequence[np.ndarray]] = None, first_id: int = 1,
                batch_size: int = 1024) -> np.ndarray:
    """[num_queries, k] ids of the highest-scoring items by dot product, exactly.

    Args:
      query_embeddings: [num_queries, dim].
      item_embeddings: [num_ids, dim], row i the embedding of id i.
      k: how many to return (at most the number of candidates).
      exclude: per query, ids never to return (the user's history).
      first_id: ids below it (padding) are never returned.
      batch_size: queries scored at once.
    """
    queries = np.asarray(query_embeddings, np.float32)
    table = tf.constant(np.asarray(item_embeddings, np.float32))
    num_ids = int(table.shape[0])
    k = min(k, num_ids - first_id)
    results = []
    for start in range(0, len(queries), batch_size):
        scores = tf.matmul(queries[start:start + batch_size], table, transpose_b=True).numpy()
        scores[:, :first_id] = -np.inf
        if exclude is not None:
            for row, ids in enumerate(exclude[start:start + batch_size]):
                scores[row, np.asarray(ids, np.int64)] = -np.inf
        results.append(tf.math.top_k(scores, k=k).indices.numpy())
    return np.concatenate(results) if results else np.zeros([0, k], np.int64)


def recall_ndcg(retrieved: np.ndarray, targets: Sequence[np.ndarray],
                ks: Sequence[int] = DEFAULT_KS) -> Dict[str, float]:
    """Mean Recall@k and NDCG@k over queries.

    Args:
      retrieved: [num_queries, >= max(ks)] ranked ids.
      targets: per query, its positive ids (at least one).
    """
    retrieved = np.asarray(retrieved)
    if len(retrieved) != len(targets):
        raise ValueError(f"`retrieved` has {len(retrieved)} queries but `targets` "
                         f"{len(targets)}.")
    if retrieved.shape[1] < max(ks):
        raise ValueError(f"`retrieved` holds {retrieved.shape[1]} ids per query; ks={list(ks)} "
                         f"needs {max(ks)}.")
    discounts = 1.0 / np.log2(np.arange(2, max(ks) + 2))
    sums = {f"{name}@{k}": 0.0 for k in ks for name in ("recall", "ndcg")}
    for ranked, positives in zip(retrieved, targets):
        positives = np.unique(np.asarray(positives))
        if positives.size == 0:
            raise ValueError("Every query needs at least one target.")
        hits = np.isin(ranked[:max(ks)], positives)
        for k in ks:
            sums[f"recall@{k}"] += hits[:k].sum() / positives.size
            ideal = discounts[:min(k, positives.size)].sum()
            sums[f"ndcg@{k}"] += (hits[:k] * discounts[:k]).sum() / ideal
    count = max(len(targets), 1)
    return {name: value / count for name, value in sums.items()}
