"""Exact top-k search over a catalog read a chunk at a time, written once for every framework.

`exact_top_k` is the one search every evaluation of the project runs (tfrs_logq's and the
pipelines' exact search, the Keras 3 job's): each query's k highest-scoring candidates by dot
product, its excluded ids (the user's history) never returned, ties to the lower id. A query
with fewer than k candidates left gets `NO_ITEM` in the slots it cannot fill, never an
excluded or padding id, so that a ranked list counts a miss there
(`logq_core.metrics.recall_ndcg`), whoever ranked it (a model or a baseline).

The framework does the two heavy operations, given as functions of numpy arrays: the block
of scores (`matmul`) and the block's top k (`top_k`); `numpy_top_k` is the numpy one and the
reference the others are tested against.
"""

from typing import Callable, Iterable, Optional, Sequence, Tuple

import numpy as np

# A slot of a ranked list that no candidate fills: never an id (ids are >= 0), so a miss.
NO_ITEM = -1

# A block scores at most this many (query, item) pairs at once: its float32 score matrix and
# its copies stay near 64 MB each, whatever the catalog.
SCORES_PER_BLOCK = 2**24


def numpy_top_k(values: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """(values, positions) of each row's k largest entries, in decreasing order, ties to the
    lower position (as `tf.math.top_k`); NaN ranks below -inf.

    Args:
      values: [rows, n] scores.
      k: how many per row (at most n).
    """
    values = np.asarray(values)
    rows, n = values.shape
    k = min(k, n)
    if k == n or k == 0:
        positions = np.argsort(-_nan_low(values), axis=1, kind="stable")[:, :k]
        return np.take_along_axis(values, positions, 1), positions
    # The k-th largest of each row; every entry above it, then the lowest positions equal to it.
    kth = -np.partition(-values, k - 1, axis=1)[:, k - 1]
    greater = values > kth[:, None]
    equal = values == kth[:, None]
    ranks = np.cumsum(equal, axis=1, dtype=np.int32)  # int32: half the memory of int64.
    take = greater | (equal & (ranks <= (k - greater.sum(axis=1))[:, None]))
    if np.isnan(kth).any() or int(take.sum()) != rows * k:  # NaN among the k: sort them all.
        return numpy_top_k_sorted(values, k)
    positions = np.nonzero(take)[1].reshape(rows, k)  # Increasing positions in each row.
    order = np.argsort(-np.take_along_axis(values, positions, 1), axis=1, kind="stable")
    positions = np.take_along_axis(positions, order, 1)
    return np.take_along_axis(values, positions, 1), positions


def numpy_top_k_sorted(values: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """`numpy_top_k` by a full stable sort of each row: the plain reference."""
    positions = np.argsort(-_nan_low(values), axis=1, kind="stable")[:, :k]
    return np.take_along_axis(values, positions, 1), positions


def _nan_low(values: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(values), -np.inf, values) if np.isnan(values).any() else values


def numpy_matmul(queries: np.ndarray, items: np.ndarray) -> np.ndarray:
    """[queries, items] float32 dot products."""
    with np.errstate(invalid="ignore"):  # 0 x inf: NaN, which the search ranks last.
        return np.asarray(queries, np.float32) @ np.asarray(items, np.float32).T


def exclusions(exclude: Optional[Sequence[np.ndarray]], num_queries: int):
    """(rows, ids) of every excluded (query, id) pair, sorted by id.

    Raises:
      ValueError: `exclude` does not hold one list per query.
    """
    if exclude is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if len(exclude) != num_queries:
        raise ValueError(
            f"`exclude` must hold one list of ids per query ({num_queries}); received "
            f"{len(exclude)}."
        )
    lists = [np.asarray(ids, np.int64).ravel() for ids in exclude]
    rows = np.repeat(np.arange(num_queries, dtype=np.int64), [len(ids) for ids in lists])
    ids = np.concatenate(lists) if lists else np.zeros(0, np.int64)
    order = np.argsort(ids, kind="stable")
    return rows[order], ids[order]


def in_chunk(excluded, chunk_ids: np.ndarray):
    """The (rows, positions in the sorted `chunk_ids`) of the `exclusions` pairs whose id is
    in the chunk."""
    rows, ids = excluded
    if not len(chunk_ids):
        return rows[:0], rows[:0]
    lo = np.searchsorted(ids, chunk_ids[0])
    hi = np.searchsorted(ids, chunk_ids[-1], side="right")
    rows, ids = rows[lo:hi], ids[lo:hi]
    positions = np.minimum(np.searchsorted(chunk_ids, ids), len(chunk_ids) - 1)
    kept = chunk_ids[positions] == ids
    return rows[kept], positions[kept]


def scored_blocks(
    queries: np.ndarray,
    chunks: Iterable[Tuple[np.ndarray, np.ndarray]],
    exclude: Optional[Sequence[np.ndarray]] = None,
    block: Optional[int] = None,
    matmul: Callable[[np.ndarray, np.ndarray], np.ndarray] = numpy_matmul,
    scores_per_block: int = SCORES_PER_BLOCK,
):
    """For each chunk and each block of queries: (chunk ids, how many ids the chunks before
    it held, first query row, [block, chunk] float32 scores with the block's excluded ids at
    -inf). `chunks` yields (sorted ids, [len(ids), dim] embeddings)."""
    excluded = exclusions(exclude, len(queries))
    finite_queries = bool(np.isfinite(queries).all())
    before, last = 0, None
    for chunk_ids, rows in chunks:
        chunk_ids = np.asarray(chunk_ids, np.int64)
        if not len(chunk_ids):
            continue
        # Increasing ids, chunk after chunk: else exclusions (found by a sorted search) and
        # the merge's tie order would be wrong, silently.
        if (last is not None and chunk_ids[0] <= last) or (np.diff(chunk_ids) <= 0).any():
            raise ValueError(
                "`chunks` must hold increasing ids, each chunk's above the one before; "
                f"received a chunk of ids {chunk_ids[:4].tolist()}"
                f"{'...' if len(chunk_ids) > 4 else ''} after the id {last}."
            )
        last = int(chunk_ids[-1])
        if np.ndim(rows) != 2 or len(rows) != len(chunk_ids) or rows.shape[1] != queries.shape[1]:
            raise ValueError(
                f"Each chunk's embeddings must be [len(ids), dim] with the queries' dim "
                f"{queries.shape[1]}; received shape {list(np.shape(rows))} for {len(chunk_ids)} "
                "ids."
            )
        size = block or max(1, scores_per_block // len(chunk_ids))
        excluded_rows, excluded_positions = in_chunk(excluded, chunk_ids)
        # A NaN score (from a NaN or infinite embedding) ranks below -inf in every framework
        # (tf.math.top_k would rank it first): looked for only where an embedding is not finite.
        finite = finite_queries and bool(np.isfinite(np.asarray(rows)).all())
        for start in range(0, len(queries), size):
            scores = np.asarray(matmul(queries[start : start + size], rows), np.float32)
            if not finite:
                scores[np.isnan(scores)] = -np.inf
            here = (excluded_rows >= start) & (excluded_rows < start + size)
            scores[excluded_rows[here] - start, excluded_positions[here]] = -np.inf
            yield chunk_ids, before, start, scores
        before += len(chunk_ids)


def exact_top_k(
    queries: np.ndarray,
    chunks: Iterable[Tuple[np.ndarray, np.ndarray]],
    k: int,
    exclude: Optional[Sequence[np.ndarray]] = None,
    block: Optional[int] = None,
    matmul: Callable[[np.ndarray, np.ndarray], np.ndarray] = numpy_matmul,
    top_k: Callable[[np.ndarray, int], Tuple[np.ndarray, np.ndarray]] = numpy_top_k,
    scores_per_block: int = SCORES_PER_BLOCK,
) -> np.ndarray:
    """[num_queries, k] ids of each query's k highest-scoring candidates, exactly, in
    decreasing score, ties to the lower id; `NO_ITEM` in the slots that no candidate fills
    (fewer than k left once the `exclude` ids are removed), never an excluded id.

    Each chunk's top k is merged into the running one: memory holds one chunk, a block of
    scores (SCORES_PER_BLOCK pairs) and the [num_queries, k] answer, whatever the catalog.

    Args:
      queries: [num_queries, dim] float32.
      chunks: (ids, [len(ids), dim] embeddings) pairs, the ids of each increasing and every
        chunk's above the one before (so that the lower id wins a tie).
      k: the list's length.
      exclude: per query, ids never returned (the user's history).
      block: queries scored at once (default: as many as `scores_per_block` allows).
      matmul: [block, dim] x [chunk, dim] -> [block, chunk] scores, as numpy.
      top_k: (values, k) -> (values, positions) of each row's k largest, ties to the lower
        position (`numpy_top_k`; `tf.math.top_k`), as numpy.
      scores_per_block: the most (query, item) pairs a block scores.
    """
    queries = np.ascontiguousarray(np.asarray(queries, np.float32))
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"`k` must be a non-negative integer; received k={k!r}.")
    if queries.ndim != 2:
        raise ValueError(
            f"`queries` must be [num_queries, dim]; received shape {list(queries.shape)}."
        )
    best_scores = np.full([len(queries), k], -np.inf, np.float32)
    best_ids = np.full([len(queries), k], NO_ITEM, np.int64)
    if len(queries) == 0 or k <= 0:
        return best_ids
    blocks = scored_blocks(queries, chunks, exclude, block, matmul, scores_per_block)
    for chunk_ids, before, start, scores in blocks:
        stop = start + len(scores)
        values, positions = top_k(scores, min(k, len(chunk_ids)))
        found = chunk_ids[positions]
        if before:  # Merge: the earlier chunks' ids (lower) first among equal scores.
            values = np.concatenate([best_scores[start:stop], values], axis=1)
            found = np.concatenate([best_ids[start:stop], found], axis=1)
            values, positions = top_k(values, k)
            found = np.take_along_axis(found, positions, axis=1)
        best_scores[start:stop, : values.shape[1]] = values
        best_ids[start:stop, : found.shape[1]] = found
    best_ids[~(best_scores > -np.inf)] = NO_ITEM  # Excluded (or NaN) scores: no candidate.
    return best_ids


def array_chunks(
    ids: np.ndarray, embeddings: np.ndarray, size: int = 2**18
) -> Iterable[Tuple[np.ndarray, np.ndarray]]:
    """(ids, embeddings) of an in-memory candidate set, `size` rows at a time, in increasing
    id order (what `exact_top_k` reads).

    Args:
      ids: [n] the candidates' ids.
      embeddings: [n, dim] their embeddings, row i of ids[i].
    """
    ids = np.asarray(ids, np.int64)
    order = np.argsort(ids, kind="stable")
    ids, embeddings = ids[order], np.asarray(embeddings)[order]
    for start in range(0, len(ids), size):
        yield ids[start : start + size], embeddings[start : start + size]


__all__ = [
    "NO_ITEM",
    "SCORES_PER_BLOCK",
    "array_chunks",
    "exact_top_k",
    "exclusions",
    "in_chunk",
    "numpy_matmul",
    "numpy_top_k",
    "numpy_top_k_sorted",
    "scored_blocks",
]
