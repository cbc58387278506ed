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

`device_top_k` is the same search run where the framework's arrays live (a GPU, or the CPU
cores without a copy per block): the scores, the exclusions, the top k and the merge are one
compiled step of the framework's ops (`Device`), the running top k stays on the device, and
only the final [num_queries, k] answer comes back to the host. It returns what `exact_top_k`
returns (tested against it, ties included).
"""

import contextlib
import types
from typing import (
    Any,
    Callable,
    ContextManager,
    Dict,
    Iterable,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
)

import numpy as np

# A slot of a ranked list that no candidate fills: never an id (ids are >= 0), so a miss.
NO_ITEM = -1

# The most positions a search indexes in int32: a block's scores (its flat index, row x chunk
# + column) and the index's ids.
MAX_FLAT_INDEX = 2**31 - 1

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
        chunk_ids = _checked_chunk(chunk_ids, rows, last, queries.shape[1])
        if not len(chunk_ids):
            continue
        last = int(chunk_ids[-1])
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


def _checked_chunk(chunk_ids, rows, last: Optional[int], dim: int) -> np.ndarray:
    """A chunk's ids as int64, checked: increasing, above `last` (the previous chunk's last
    id), one [len(ids), dim] row each. Else exclusions (found by a sorted search) and the
    merge's tie order would be wrong, silently.

    Raises:
      ValueError: either is not so, naming what was received.
    """
    chunk_ids = np.asarray(chunk_ids, np.int64)
    if not len(chunk_ids):
        return chunk_ids
    if (last is not None and chunk_ids[0] <= last) or (np.diff(chunk_ids) <= 0).any():
        raise ValueError(
            "`chunks` must hold increasing ids, each chunk's above the one before; "
            f"received a chunk of ids {chunk_ids[:4].tolist()}"
            f"{'...' if len(chunk_ids) > 4 else ''} after the id {last}."
        )
    shape = tuple(rows.shape) if hasattr(rows, "shape") else np.shape(rows)
    if len(shape) != 2 or shape[0] != len(chunk_ids) or shape[1] != dim:
        raise ValueError(
            f"Each chunk's embeddings must be [len(ids), dim] with the queries' dim {dim}; "
            f"received shape {list(shape)} for {len(chunk_ids)} ids."
        )
    return chunk_ids


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


class Device(NamedTuple):
    """What `device_top_k` runs on: a framework's array ops and how it compiles and moves
    arrays.

    Attributes:
      ops: `keras.ops`' names (`einsum`, `isnan`, `isfinite`, `all`, `where`,
        `scatter_update`, `take`, `full_like`, `reshape`, `top_k`, `take_along_axis`,
        `concatenate`, `cast`, `shape`; `keras_logq`'s
        `OPS`, or `tfrs_logq._ops.TF` for TensorFlow). `top_k` must rank equal values in
        increasing position (TensorFlow's and JAX's do; PyTorch's does not promise it).
      compile: turns a function of tensors into a compiled one (`tf.function`, `jax.jit`).
      to_device: a numpy array as the framework's tensor.
      to_numpy: a tensor as a numpy array.
      exact: a context the search runs in, where the framework multiplies float32 in
        float32: GPUs since Ampere run float32 matmuls in TF32 (a 10-bit mantissa) by
        default in TensorFlow and JAX, which would reorder close scores.

    JAX's `top_k` ranks -0.0 below +0.0 where numpy and TensorFlow take them as equal: a
    score of exactly -0.0 (a product of zeros) may rank apart there.
    """

    ops: Any
    compile: Callable[[Callable], Callable]
    to_device: Callable[[np.ndarray], Any]
    to_numpy: Callable[[Any], np.ndarray]
    exact: Callable[[], ContextManager] = contextlib.nullcontext


@contextlib.contextmanager
def tensorflow_float32_matmuls(tf):
    """`Device.exact` for TensorFlow (the module `tf`, imported by the caller): its matmuls
    in float32 while the body runs (TF32 off on Ampere and later GPUs, where it is on by
    default), then as they were."""
    was = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        yield
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(was)


def _block_step(device: Device, k: int, with_exclusions: bool, nan_scores: bool):
    """The compiled step of `device_top_k`: one block of queries against one chunk, merged
    into the block's running top k (values, index positions). With `nan_scores` (an
    embedding is not finite), NaN scores become -inf, below every candidate."""
    ops = device.ops

    def step(queries, chunk, offset, best_values, best_positions, pairs, weights):
        scores = ops.einsum("qd,cd->qc", queries, chunk)
        if nan_scores:  # Ranked below -inf by the reference (TensorFlow's top_k: first).
            scores = ops.where(ops.isnan(scores), float("-inf"), scores)
        if with_exclusions:  # The excluded pairs set to -inf in place; weight 0 keeps a score.
            shape = ops.shape(scores)
            flat = ops.reshape(scores, [-1])
            at = pairs[:, 0] * shape[1] + pairs[:, 1]
            kept = ops.take(flat, at)
            values = ops.where(weights > 0, ops.full_like(kept, float("-inf")), kept)
            scores = ops.reshape(ops.scatter_update(flat, at[:, None], values), shape)
        values, positions = ops.top_k(scores, min(k, int(chunk.shape[0])))
        positions = ops.cast(positions, "int32") + offset
        # The running top k first: among equal scores, the earlier chunks' (lower) ids win.
        values = ops.concatenate([best_values, values], axis=1)
        positions = ops.concatenate([best_positions, positions], axis=1)
        values, order = ops.top_k(values, k)
        return values, ops.take_along_axis(positions, ops.cast(order, "int32"), axis=1)

    return device.compile(step)


def _block_exclusions(rows, positions, size: int, num_blocks: int, width: int):
    """The excluded (row in its block, position in the chunk) pairs of each block of `size`
    queries, [num_blocks, width, 2] int32, and their weights [num_blocks, width] float32: 1
    (set to -inf by `_block_step`), and for the padding of a block without a pair, 0 at
    (0, 0) (its score kept); a block's other padding repeats its first pair."""
    order = np.argsort(rows, kind="stable")
    rows, positions = rows[order], positions[order]
    blocks = rows // size
    firsts = np.searchsorted(blocks, blocks)
    pairs = np.zeros([num_blocks, width, 2], np.int32)
    weights = np.zeros([num_blocks, width], np.float32)
    starts = np.unique(firsts)
    pairs[blocks[starts], :, 0] = (rows - blocks * size)[starts, None]
    pairs[blocks[starts], :, 1] = positions[starts, None]
    weights[blocks[starts]] = 1.0
    slots = np.arange(len(rows)) - firsts
    pairs[blocks, slots, 0] = rows - blocks * size
    pairs[blocks, slots, 1] = positions
    return pairs, weights


def device_top_k(
    device: Device,
    queries,
    chunks: Iterable[Tuple[np.ndarray, Any]],
    k: int,
    exclude: Optional[Sequence[np.ndarray]] = None,
    block: Optional[int] = None,
    scores_per_block: int = SCORES_PER_BLOCK,
    return_scores: bool = False,
):
    """`exact_top_k` run on the `device`'s arrays: the same [num_queries, k] ids (in
    decreasing score, ties to the lower id, `NO_ITEM` where no candidate is left, never an
    excluded id), with no host round trip per block; with `return_scores`, (ids, their
    [num_queries, k] float32 scores, -inf where `NO_ITEM`).

    Each block of queries is scored against each chunk, its excluded pairs set to -inf, and
    its top k merged into the block's running one by one compiled step (`Device.compile`);
    the queries are padded to whole blocks, so the step compiles once for the chunks' length
    and once for the last chunk's. The host only prepares each chunk's excluded pairs (a
    searchsorted of the history, as `exact_top_k` does), reads whether the chunk is finite
    (else NaN scores are set to -inf, as `exact_top_k` does), and reads the answer at the
    end.

    Memory on the device: the queries, one chunk, one block of scores (`scores_per_block`
    pairs, and at most 2**31 - 1), a chunk's exclusions (per block, padded to a power of two)
    and the [num_queries, k] running top k (float32 values and int32 positions: 8 bytes a
    slot); on the host, the [num_queries, k] int64 answer. No chunk may be longer than the
    first, which sizes the blocks.

    Args:
      device: the framework (`Device`).
      queries: [num_queries, dim] float32 (an array, or the framework's tensor).
      chunks: (ids, [len(ids), dim] embeddings) pairs as `exact_top_k` takes them, the
        embeddings an array or a tensor already on the device.
      k: the list's length.
      exclude: per query, ids never returned (the user's history).
      block: queries scored at once (default: as many as `scores_per_block` allows).
      scores_per_block: the most (query, item) pairs a block scores.
      return_scores: also return the scores.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 0:
        raise ValueError(f"`k` must be a non-negative integer; received k={k!r}.")
    k = int(k)
    shape = tuple(queries.shape)
    if len(shape) != 2:
        raise ValueError(f"`queries` must be [num_queries, dim]; received shape {list(shape)}.")
    num_queries, dim = shape
    excluded = exclusions(exclude, num_queries)
    if num_queries == 0 or k == 0:
        best_ids, best_scores = _empty_answer(num_queries, k)
    else:
        with device.exact():
            best_ids, best_scores = _device_top_k(
                device, queries, chunks, k, excluded, block, scores_per_block
            )
    return (best_ids, best_scores) if return_scores else best_ids


def _empty_answer(num_queries: int, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """([num_queries, k] `NO_ITEM` ids, -inf scores): an answer before any candidate."""
    return (
        np.full([num_queries, k], NO_ITEM, np.int64),
        np.full([num_queries, k], -np.inf, np.float32),
    )


def _device_top_k(device, queries, chunks, k, excluded, block, scores_per_block):
    """`device_top_k`, its arguments checked, in the device's exact context."""
    ops = device.ops
    num_queries, dim = tuple(queries.shape)
    queries = ops.cast(_to_device(device, queries), "float32")
    ids: List[np.ndarray] = []
    blocks: List[Tuple[Any, Any]] = []  # Each block's running (values, positions).
    query_blocks: List[Any] = []
    size = capacity = 0
    steps: Dict[Tuple[bool, bool], Callable] = {}  # By NaN handling and exclusions.
    finite_queries = True
    for chunk_ids, rows in chunks:
        chunk_ids = _checked_chunk(chunk_ids, rows, ids[-1][-1] if ids else None, dim)
        if not len(chunk_ids):
            continue
        if not blocks:  # The first chunk sets the blocks (the flat index of a block's
            capacity = len(chunk_ids)  # score, row x chunk + column, stays within int32).
            size = block or max(1, scores_per_block // capacity)
            size = max(1, min(size, num_queries, MAX_FLAT_INDEX // capacity))
            num_blocks = -(-num_queries // size)
            padding = np.zeros([num_blocks * size - num_queries, dim], np.float32)
            padded = ops.concatenate([queries, device.to_device(padding)], axis=0)
            query_blocks = [padded[b * size : (b + 1) * size] for b in range(num_blocks)]
            blocks = [
                (
                    device.to_device(np.full([size, k], -np.inf, np.float32)),
                    device.to_device(np.full([size, k], -1, np.int32)),
                )
                for _ in range(num_blocks)
            ]
            finite_queries = _finite(device, queries)
        elif len(chunk_ids) > capacity:
            raise ValueError(
                f"`chunks` must not grow: a chunk of {len(chunk_ids)} ids follows a first one "
                f"of {capacity}, which sized the blocks of scores."
            )
        offset = sum(len(part) for part in ids)
        if offset + len(chunk_ids) > MAX_FLAT_INDEX:
            raise ValueError(
                f"The search holds at most {MAX_FLAT_INDEX:,} ids; received {offset:,} and more."
            )
        rows = ops.cast(_to_device(device, rows), "float32")
        # This chunk's exclusions, padded to a power of two per block (a few compilations,
        # and memory near the pairs', whatever the longest history elsewhere).
        rows_in, positions_in = in_chunk(excluded, chunk_ids)
        most = int(np.bincount(rows_in // size, minlength=1).max())
        width = 1 << max(most - 1, 0).bit_length() if most else 0
        nan_scores = not (finite_queries and _finite(device, rows))
        # One step per variant; each compiles again for a new shape (the exclusions' width).
        variant = (nan_scores, width > 0)
        if variant not in steps:
            steps[variant] = _block_step(device, k, width > 0, nan_scores)
        step = steps[variant]
        pairs, weights = _block_exclusions(rows_in, positions_in, size, len(blocks), max(width, 1))
        pairs, weights = device.to_device(pairs), device.to_device(weights)
        start = device.to_device(np.asarray(offset, np.int32))
        for b, (values, positions) in enumerate(blocks):
            blocks[b] = step(query_blocks[b], rows, start, values, positions, pairs[b], weights[b])
        ids.append(chunk_ids)
    best_ids, best_scores = _empty_answer(num_queries, k)
    if not ids:
        return best_ids, best_scores
    all_ids = np.concatenate(ids)
    blocks.reverse()
    for b in range(len(query_blocks)):  # The answer, a block at a time, each freed as read.
        values, positions = blocks.pop()
        positions = device.to_numpy(ops.where(values > float("-inf"), positions, -1))
        rows = best_ids[b * size : (b + 1) * size]
        found = positions[: len(rows)] >= 0
        rows[found] = all_ids[positions[: len(rows)][found]]
        best_scores[b * size : (b + 1) * size][found] = device.to_numpy(values)[: len(rows)][found]
    return best_ids, best_scores


def _numpy_scatter_update(inputs, indices, updates):
    out = np.array(inputs)
    out[tuple(np.moveaxis(np.asarray(indices), -1, 0))] = updates
    return out


# `device_top_k` in numpy: the step's reference, run by the tests beside every framework's.
NUMPY = Device(
    ops=types.SimpleNamespace(
        all=np.all,
        cast=lambda x, dtype: np.asarray(x).astype(dtype),
        concatenate=np.concatenate,
        einsum=lambda spec, a, b: numpy_matmul(a, b),  # Only "qd,cd->qc" is asked.
        full_like=np.full_like,
        isfinite=np.isfinite,
        isnan=np.isnan,
        reshape=np.reshape,
        scatter_update=_numpy_scatter_update,
        shape=np.shape,
        take=np.take,
        take_along_axis=np.take_along_axis,
        top_k=numpy_top_k,
        where=np.where,
    ),
    compile=lambda step: step,
    to_device=np.asarray,
    to_numpy=np.asarray,
)


def _finite(device: Device, tensor) -> bool:
    """Whether every entry of `tensor` is finite (read back: once a chunk, not a block)."""
    return bool(device.to_numpy(device.ops.all(device.ops.isfinite(tensor))))


def _to_device(device: Device, value):
    """`value` as the device's tensor: arrays (and lists) moved, tensors as they are."""
    if isinstance(value, (np.ndarray, list, tuple)):
        return device.to_device(np.asarray(value, np.float32))
    return value


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
    "NUMPY",
    "SCORES_PER_BLOCK",
    "Device",
    "array_chunks",
    "device_top_k",
    "exact_top_k",
    "exclusions",
    "in_chunk",
    "numpy_matmul",
    "numpy_top_k",
    "numpy_top_k_sorted",
    "scored_blocks",
    "tensorflow_float32_matmuls",
]
