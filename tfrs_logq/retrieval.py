"""Retrieval evaluation over the whole catalog: exact or ScaNN top-k with filtering, Recall@k,
NDCG@k, and Recall@k by popularity band.

gSASRec's protocol: every item is a candidate except padding and the items the
user already interacted with (the query's history), which are filtered out.
A query may have several positives; Recall@k is the fraction of them
retrieved in the top k, NDCG@k the DCG of the hits over the ideal DCG.

The catalog is read a chunk at a time (`ItemTable`): exact search streams chunks of item
embeddings through the scorer and merges each chunk's top k, the softmax normalisers
(`log_normalizers`) are summed the same way, and a ScaNN index holds the searched items'
embeddings once. Beside the model's own tables, a search holds one chunk, one block of
scores and the running top k: memory that does not grow with the catalog.
"""

import inspect
import math
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from logq_core import checks
from logq_core import options
from logq_core import ranking
from logq_core.metrics import DEFAULT_KS  # noqa: F401  (re-exported: the evaluations' ks)
from logq_core.metrics import per_query_recall_ndcg  # noqa: F401  (re-exported)
from logq_core.metrics import recall_ndcg  # noqa: F401  (re-exported)
from logq_core.ranking import NO_ITEM  # noqa: F401  (re-exported: a slot no candidate fills)
from tfrs_logq import _ops

# Exact search scores at most this many (query, item) pairs at once: a block's score matrix
# (float32) and its copies stay near 64 MB each, whatever the catalog (logq_core.ranking's
# bound; patched here by the tests to force small blocks).
SCORES_PER_BATCH = ranking.SCORES_PER_BLOCK

# ScaNN searches this many queries at once (`scann_top_k`).
SCANN_QUERY_BATCH = 1024

# An `ItemTable` chunk holds at most this many bytes of float32 embeddings (dim 64: 262,144
# items a chunk).
CHUNK_BYTES = 2**26


class ItemTable:
    """A catalog's item embeddings read a chunk of ids at a time: row i is id i's embedding.

    The searches and metrics of this module take one (or anything `ItemTable.of` accepts),
    so that they hold a chunk of the catalog at a time, never a second copy of it: exact
    search, the softmax normalisers, `embedding_geometry` and the ScaNN index's build (which
    copies only the ids it indexes).

    Args:
      rows: maps an int64 array of ids to their [len(ids), dim] embeddings (an array or
        a tensor).
      num_ids: the number of ids, padding included (ids 0 .. num_ids - 1).
      dim: the embeddings' width.
    """

    def __init__(self, rows: Callable[[np.ndarray], Any], num_ids: int, dim: int):
        self._rows = rows
        self.num_ids = checks.check_non_negative_int("num_ids", num_ids)
        self.dim = checks.check_non_negative_int("dim", dim)

    @classmethod
    def of(cls, items) -> "ItemTable":
        """`items` as an ItemTable: an ItemTable (returned as is); a model with
        `item_embeddings(ids)` and `num_items` (tfrs_logq's SASRec and TwoTower: ids
        0 .. num_items, each chunk through the model's item tower); a `tf.Variable` or tensor,
        or an array, of shape [num_ids, dim] (read in place, by `tf.gather` or indexing). A
        model whose `item_embeddings()` takes no ids is read whole, once.

        Raises:
          ValueError: `items` is not two-dimensional.
        """
        if isinstance(items, ItemTable):
            return items
        embeddings = getattr(items, "item_embeddings", None)
        if callable(embeddings):
            if "ids" in inspect.signature(embeddings).parameters and hasattr(items, "num_items"):
                num_ids = int(items.num_items) + 1
                dim = int(embeddings(np.zeros([1], np.int64)).shape[-1])
                return cls(lambda ids: embeddings(tf.constant(ids)), num_ids, dim)
            items = embeddings()
        if not (isinstance(items, tf.Variable) or tf.is_tensor(items)):
            items = np.asarray(items)
        shape = tuple(items.shape)
        if len(shape) != 2:
            raise ValueError(
                f"Item embeddings must be [num_ids, dim]; received shape {list(shape)}."
            )
        if isinstance(items, np.ndarray):
            array = items
            return cls(lambda ids: array[ids], shape[0], shape[1])
        tensor = items
        return cls(lambda ids: tf.gather(tensor, ids), int(shape[0]), int(shape[1]))

    def __len__(self) -> int:
        return self.num_ids

    @property
    def shape(self) -> Tuple[int, int]:
        """(num_ids, dim), as an array's."""
        return (self.num_ids, self.dim)

    def rows(self, ids) -> np.ndarray:
        """[len(ids), dim] float32: the embeddings of `ids`."""
        value = self._rows(np.asarray(ids, np.int64))
        value = value.numpy() if tf.is_tensor(value) else value
        return np.asarray(value, np.float32)

    def chunk_size(self) -> int:
        """Ids read at once: CHUNK_BYTES of float32 rows."""
        return max(1, CHUNK_BYTES // (4 * max(self.dim, 1)))

    def chunks(
        self, ids: Optional[np.ndarray] = None, first_id: int = 1, size: Optional[int] = None
    ) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """(ids, [len(ids), dim] float32 embeddings), `size` ids at a time (default
        `chunk_size`), in increasing id order: the sorted `ids`, or every id from
        `first_id` on."""
        for part in self.chunk_ids(ids, first_id, size):
            yield part, self.rows(part)

    def chunk_ids(
        self, ids: Optional[np.ndarray] = None, first_id: int = 1, size: Optional[int] = None
    ) -> Iterator[np.ndarray]:
        """The ids of each of `chunks`, without reading their rows."""
        size = size or self.chunk_size()
        if ids is None:
            for start in range(first_id, self.num_ids, size):
                yield np.arange(start, min(start + size, self.num_ids), dtype=np.int64)
        else:
            for start in range(0, len(ids), size):
                yield ids[start : start + size]

    def gather(self, ids: np.ndarray) -> np.ndarray:
        """[len(ids), dim] float32 embeddings of `ids`, filled a chunk at a time (the only
        copy: what a ScaNN index or an export holds)."""
        out = np.empty([len(ids), self.dim], np.float32)
        size = self.chunk_size()
        for start in range(0, len(ids), size):
            out[start : start + size] = self.rows(ids[start : start + size])
        return out


def searched_ids(
    num_ids: int, first_id: int = 1, candidates: Optional[np.ndarray] = None
) -> Optional[np.ndarray]:
    """The sorted ids a search covers: `candidates` checked (unique, sorted), or None for
    every id from `first_id` on.

    Raises:
      ValueError: a candidate outside [first_id, num_ids - 1], or no candidate.
    """
    if candidates is None:
        return None
    candidates = np.unique(np.asarray(candidates, np.int64))
    if candidates.size == 0 or candidates[0] < first_id or candidates[-1] >= num_ids:
        raise ValueError(
            f"`candidates` must be ids in [{first_id}, {num_ids - 1}]; received "
            f"{candidates.size} ids from {candidates[:1]} to {candidates[-1:]}."
        )
    return candidates


def _tf_matmul(queries: np.ndarray, items) -> np.ndarray:
    return tf.matmul(queries, items, transpose_b=True).numpy()


def _tf_chunks(table: "ItemTable", ids, first_id):
    """The table's chunks, each made a tensor once for all its blocks of queries."""
    for chunk_ids, rows in table.chunks(ids, first_id):
        yield chunk_ids, tf.constant(rows)


def _device_chunks(table: "ItemTable", ids, first_id):
    """The table's chunks as tensors, read in place where the table is a tensor (a model's
    or a variable's rows stay on their device)."""
    for chunk_ids in table.chunk_ids(ids, first_id):
        rows = table._rows(chunk_ids)  # pylint: disable=protected-access
        yield chunk_ids, rows if tf.is_tensor(rows) else tf.constant(rows, tf.float32)


def _scored_blocks(queries: np.ndarray, table: ItemTable, ids, first_id, exclude, block=None):
    """`logq_core.ranking.scored_blocks` of the table's chunks, scored by TensorFlow."""
    return ranking.scored_blocks(
        queries,
        _tf_chunks(table, ids, first_id),
        exclude,
        block,
        _tf_matmul,
        scores_per_block=SCORES_PER_BATCH,
    )


def exact_top_k(
    query_embeddings: np.ndarray,
    item_embeddings,
    k: int,
    exclude: Optional[Sequence[np.ndarray]] = None,
    first_id: int = 1,
    batch_size: Optional[int] = None,
    candidates: Optional[np.ndarray] = None,
) -> np.ndarray:
    """[num_queries, k] ids of the highest-scoring items by dot product, exactly (ties: the
    lower id first): `logq_core.ranking.device_top_k` in TensorFlow's ops, on TensorFlow's
    device (a GPU when there is one), equal to the numpy `logq_core.ranking.exact_top_k`.

    The catalog is read a chunk at a time (`ItemTable`) and each chunk's top k merged into
    the running one on the device, with no copy to the host until the answer: memory holds
    one chunk, a block of scores (SCORES_PER_BATCH) and the [num_queries, k] answer,
    whatever the catalog. A query with fewer than k candidates left
    once its `exclude` ids are removed gets `NO_ITEM` (-1) in the slots it cannot fill:
    never an excluded id, and a miss in `recall_ndcg`.

    Args:
      query_embeddings: [num_queries, dim].
      item_embeddings: [num_ids, dim], row i the embedding of id i: an array, a tensor or
        variable, a model, or an `ItemTable` (`ItemTable.of`).
      k: how many to return (at most the number of candidates).
      exclude: per query, ids never to return (the user's history).
      first_id: ids below it (padding) are never returned.
      batch_size: queries scored at once (default: as many as SCORES_PER_BATCH allows).
      candidates: the ids searched (an index over part of the catalog; `searched_ids`);
        None: every id from `first_id` on.
    """
    checks.check_non_negative_int("k", k)
    checks.check_non_negative_int("first_id", first_id)
    queries = np.ascontiguousarray(np.asarray(query_embeddings, np.float32))
    table = ItemTable.of(item_embeddings)
    if queries.ndim != 2 or queries.shape[1] != table.dim:
        raise ValueError(
            f"`query_embeddings` must be [num_queries, {table.dim}] (the items' dim); "
            f"received shape {list(queries.shape)}."
        )
    ids = searched_ids(table.num_ids, first_id, candidates)
    k = min(k, table.num_ids - first_id if ids is None else len(ids))
    if len(queries) == 0 or k <= 0:
        return np.zeros([len(queries), max(k, 0)], np.int64)
    ranking.exclusions(exclude, len(queries))  # Checked before any chunk is read.
    return ranking.device_top_k(
        _ops.DEVICE,
        queries,
        _device_chunks(table, ids, first_id),
        k,
        exclude,
        batch_size,
        scores_per_block=SCORES_PER_BATCH,
    )


def log_normalizers(
    query_embeddings: np.ndarray,
    item_embeddings,
    exclude: Optional[Sequence[np.ndarray]] = None,
    first_id: int = 1,
    groups: Optional[np.ndarray] = None,
    num_groups: int = 0,
) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Each query's log sum of exp(score) over its candidates (every id from `first_id` on,
    less its `exclude` ids), float64, summed a chunk of the catalog at a time; with
    `groups` ([num_ids] ints in [0, num_groups)), also [num_queries, num_groups] the
    softmax's mass on each group's items.

    What a softmax over the whole catalog needs without holding a [num_queries, num_ids]
    matrix: log P(d | q) = score(q, d) - log_normalizers(q).
    """
    queries = np.ascontiguousarray(np.asarray(query_embeddings, np.float32))
    table = ItemTable.of(item_embeddings)
    peak = np.full(len(queries), -np.inf)
    total = np.zeros(len(queries))
    mass = None if groups is None else np.zeros([len(queries), num_groups])
    # Blocks of a quarter of exact search's pairs: their float64 copies stay near 32 MB.
    block = max(1, SCORES_PER_BATCH // 4 // max(min(table.chunk_size(), table.num_ids), 1))
    for chunk_ids, _, start, scores in _scored_blocks(
        queries, table, None, first_id, exclude, block
    ):
        scores = scores.astype(np.float64)
        stop = start + len(scores)
        new_peak = np.maximum(peak[start:stop], scores.max(axis=1))
        safe = np.where(np.isfinite(new_peak), new_peak, 0.0)
        scale = np.exp(np.where(np.isfinite(peak[start:stop]), peak[start:stop] - safe, -np.inf))
        weights = np.exp(scores - safe[:, np.newaxis])
        total[start:stop] = total[start:stop] * scale + weights.sum(axis=1)
        if mass is not None:
            assert groups is not None
            one_hot = np.zeros([len(chunk_ids), num_groups])
            one_hot[np.arange(len(chunk_ids)), np.asarray(groups)[chunk_ids]] = 1.0
            mass[start:stop] = mass[start:stop] * scale[:, np.newaxis] + weights @ one_hot
        peak[start:stop] = new_peak
    safe = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):
        result = np.where(total > 0, np.log(np.maximum(total, 1e-300)) + safe, -np.inf)
    if mass is not None:
        mass = mass / np.where(total > 0, total, 1.0)[:, np.newaxis]
    return result, mass


def global_top_k(
    scores: np.ndarray,
    k: int,
    exclude: Optional[Sequence[np.ndarray]] = None,
    num_queries: Optional[int] = None,
    first_id: int = 1,
    candidates: Optional[np.ndarray] = None,
) -> np.ndarray:
    """[num_queries, k] ids by one ranking shared by every query (`scores`, [num_ids]: a
    popularity ranker), each row's `exclude` removed, ties by the lower id; the slots of a
    row short of k candidates hold `NO_ITEM` (a miss, as in the model's lists). The catalog
    is sorted once, not scored per query. `num_queries`: the rows (default: len(exclude))."""
    checks.check_non_negative_int("k", k)
    checks.check_non_negative_int("first_id", first_id)
    scores = np.asarray(scores)
    ids = searched_ids(len(scores), first_id, candidates)
    if ids is None:
        ids = np.arange(first_id, len(scores), dtype=np.int64)
    if num_queries is None:
        if exclude is None:
            raise ValueError("`global_top_k` needs `num_queries` or `exclude`; received neither.")
        num_queries = len(exclude)
    if exclude is not None and len(exclude) != num_queries:
        raise ValueError(
            f"`exclude` must hold one list of ids per query ({num_queries}); received "
            f"{len(exclude)}."
        )
    longest = max((len(e) for e in exclude), default=0) if exclude is not None else 0
    order = np.argsort(-scores[ids], kind="stable")[: k + longest]
    head = ids[order]
    out = np.full([num_queries, k], NO_ITEM, np.int64)
    for row in range(num_queries):
        kept = head if exclude is None else head[~np.isin(head, exclude[row])]
        kept = kept[: out.shape[1]]
        out[row, : len(kept)] = kept
    return out


INDEXES = ("exact", "scann")

# Below this many items a ScaNN request is answered by exact search (measured: see
# logq_core.options, where it is defined).
SCANN_MIN_ITEMS = options.SCANN_MIN_ITEMS


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


# Asymmetric hashing trains 16 centres a block of dimensions: a ScaNN index of fewer items
# (with scann_min_items=0) scores them by brute force inside the index instead.
AH_MIN_ITEMS = 16


def scann_top_k(
    query_embeddings: np.ndarray,
    item_embeddings,
    k: int,
    exclude: Optional[Sequence[np.ndarray]] = None,
    first_id: int = 1,
    min_items: int = SCANN_MIN_ITEMS,
    candidates: Optional[np.ndarray] = None,
    **overrides,
) -> np.ndarray:
    """Like `exact_top_k`, through a ScaNN index (tree + asymmetric hashing + exact reorder);
    below SCANN_MIN_ITEMS candidates, by exact search (`uses_scann`).

    The index is built from the searched ids' embeddings, gathered a chunk at a time into
    one array (`ItemTable.gather`), which is released once ScaNN holds its own copy.
    Excluded ids are dropped after the search, which asks for k plus the
    longest exclusion list so that k ids remain. A row the index returns too
    few ids for (the partitions searched can hold fewer than asked; ScaNN pads
    the answer with row 0 at a NaN distance, which is dropped) is answered by
    exact search.

    Args:
      min_items: fewer candidates than this are searched exactly.
      candidates: the ids indexed (`exact_top_k`); None: every id from `first_id` on.
      overrides: any of `scann_defaults`' keys.
    """
    table = ItemTable.of(item_embeddings)
    ids = searched_ids(table.num_ids, first_id, candidates)
    if ids is None:
        ids = np.arange(first_id, table.num_ids, dtype=np.int64)
    if not uses_scann(len(ids), min_items):
        return exact_top_k(
            query_embeddings, table, k, exclude=exclude, first_id=first_id, candidates=candidates
        )
    from scann import scann_ops_pybind  # pylint: disable=import-outside-toplevel

    queries = np.ascontiguousarray(np.asarray(query_embeddings, np.float32))
    longest = max((len(e) for e in exclude), default=0) if exclude is not None else 0
    wanted = min(k + longest, len(ids))
    settings = dict(scann_defaults(len(ids), wanted), **overrides)
    items = table.gather(ids)
    builder = scann_ops_pybind.builder(items, wanted, "dot_product")
    if settings["num_leaves"] > 1 and len(ids) >= 2 * settings["num_leaves"]:
        builder = builder.tree(
            num_leaves=settings["num_leaves"],
            num_leaves_to_search=settings["num_leaves_to_search"],
            training_sample_size=min(len(ids), 250_000),
        )
    if len(ids) >= AH_MIN_ITEMS:
        searcher = (
            builder.score_ah(2, anisotropic_quantization_threshold=0.2)
            .reorder(max(settings["reorder"], wanted))
            .build()
        )
    else:  # Too few to train the hashing's codebooks: the index scores every item exactly.
        searcher = builder.score_brute_force().build()
    del builder, items  # ScaNN holds its own copy.
    k = min(k, len(ids))
    out = np.zeros([len(queries), k], np.int64)
    short = []
    # A batch of queries at a time: ScaNN's buffers grow with the queries times the
    # candidates it re-scores (20,000 queries x 6,500 re-scored took 3 GB at once).
    for start in range(0, len(queries), SCANN_QUERY_BATCH):
        found, distances = searcher.search_batched(
            queries[start : start + SCANN_QUERY_BATCH], final_num_neighbors=wanted
        )
        for offset, positions in enumerate(found):
            row = start + offset
            # Slots the index could not fill come back as row 0 with a NaN distance.
            row_ids = ids[positions[~np.isnan(distances[offset])].astype(np.int64)]
            if exclude is not None and len(exclude[row]):
                row_ids = row_ids[~np.isin(row_ids, exclude[row])]
            if len(row_ids) < k:
                short.append(row)
                continue
            out[row] = row_ids[:k]
    del searcher
    if short:
        out[short] = exact_top_k(
            queries[short],
            table,
            k,
            exclude=None if exclude is None else [exclude[r] for r in short],
            first_id=first_id,
            candidates=candidates,
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
    """[num_queries, k] ids by `index` ("exact" or "scann"), excluded ids filtered. A row
    with fewer than k candidates left is filled with `NO_ITEM` (never an id: a miss).
    `item_embeddings`: anything `ItemTable.of` reads (an array, a variable, a model).
    `min_items`: with "scann", smaller catalogs are searched exactly (0: always the index).
    `candidates`: the ids searched (an index over part of the catalog); None: every id from
    `first_id` on."""
    if index not in INDEXES:
        raise ValueError(f"`index` must be one of {', '.join(INDEXES)}; received index={index!r}.")
    checks.check_non_negative_int("k", k)
    checks.check_non_negative_int("first_id", first_id)
    table = ItemTable.of(item_embeddings)
    searched_ids(table.num_ids, first_id, candidates)  # Checked before any work.
    if index == "exact":
        found = exact_top_k(
            query_embeddings,
            table,
            k,
            exclude=exclude,
            first_id=first_id,
            candidates=candidates,
        )
    else:
        found = scann_top_k(
            query_embeddings,
            table,
            k,
            exclude=exclude,
            first_id=first_id,
            min_items=min_items,
            candidates=candidates,
        )
    return np.pad(found, [[0, 0], [0, max(k - found.shape[1], 0)]], constant_values=NO_ITEM)


def overlap_at_k(approximate: np.ndarray, exact: np.ndarray, k: int) -> float:
    """Mean fraction of the exact top-k that the approximate top-k also returns (ANN recall);
    `NO_ITEM` slots are no ids."""
    shares = []
    for a, e in zip(approximate, exact):
        e = e[:k][e[:k] != NO_ITEM]
        shares.append(len(np.intersect1d(a[:k], e)) / max(len(e), 1) if len(e) else 1.0)
    return float(np.mean(shares))


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
    query_embeddings: np.ndarray, item_embeddings, first_id: int = 1
) -> Dict[str, float]:
    """How spread out a model's item vectors and scores are: a check for embedding collapse.

    - `mean_direction_norm`: the norm of the mean of the unit-normalised item
      vectors, in [0, 1]. Near 1, every item points one way (collapse); items
      spread evenly over the sphere give about 1 / sqrt(num_items).
    - `score_std`: the standard deviation of a query's scores over the
      catalog, averaged over the queries. Near 0, the model barely tells
      items apart.
    - `item_norm`: the mean norm of the item vectors.

    Read a chunk of the catalog at a time (`ItemTable`).

    Args:
      query_embeddings: [num_queries, dim].
      item_embeddings: [num_ids, dim] (anything `ItemTable.of` reads); ids below
        `first_id` (padding) are left out.
      first_id: the first id that is an item.
    """
    queries = np.asarray(query_embeddings, np.float64)
    table = ItemTable.of(item_embeddings)
    if queries.ndim != 2 or queries.shape[1] != table.dim:
        raise ValueError(
            f"`query_embeddings` {queries.shape} and `item_embeddings` "
            f"{table.shape} must be [num_queries, dim] and [num_ids, dim]."
        )
    if not 0 <= first_id < table.num_ids or len(queries) == 0:
        raise ValueError(
            f"Need at least one query and one item at or after `first_id` "
            f"{first_id}; got {len(queries)} queries and {table.num_ids} ids."
        )
    directions, norm_sum, zero = np.zeros(table.dim), 0.0, 0
    score_sum = np.zeros(len(queries))
    square_sum = np.zeros(len(queries))
    for _, rows in table.chunks(None, first_id):
        items = rows.astype(np.float64)
        norms = np.linalg.norm(items, axis=1)
        zero += int(np.sum(norms == 0))
        directions += (items / np.where(norms == 0, 1.0, norms)[:, None]).sum(axis=0)
        norm_sum += float(norms.sum())
        scores = queries @ items.T
        score_sum += scores.sum(axis=1)
        square_sum += (scores**2).sum(axis=1)
    if zero:
        raise ValueError(
            f"`item_embeddings` has {zero} zero rows at or "
            f"after `first_id` {first_id}; their direction is undefined."
        )
    count = table.num_ids - first_id
    mean = score_sum / count
    variance = np.maximum(square_sum / count - mean**2, 0.0)
    return {
        "mean_direction_norm": float(np.linalg.norm(directions / count)),
        "score_std": float(np.sqrt(variance).mean()),
        "item_norm": float(norm_sum / count),
    }
