"""logq_core.ranking: the one exact top-k, against a whole-matrix numpy reference (ties to the
lower id, excluded ids never returned, NO_ITEM where a query has fewer than k candidates)."""

import numpy as np
import pytest

from logq_core import metrics
from logq_core import ranking
from tests import reference


def _reference(queries, ids, embeddings, k, exclude=None):
    """Each query's candidates ranked by a stable argsort of the whole score row (ties: the
    lower id), its excluded ids removed, NO_ITEM after the last."""
    order = np.argsort(ids, kind="stable")
    ids, embeddings = ids[order], embeddings[order]
    with np.errstate(invalid="ignore"):  # 0 x inf.
        scores = queries.astype(np.float32) @ embeddings.astype(np.float32).T
    out = np.full([len(queries), k], ranking.NO_ITEM, np.int64)
    for row, values in enumerate(scores):
        allowed = ~np.isin(ids, [] if exclude is None else exclude[row])
        found = ids[allowed][np.argsort(-values[allowed], kind="stable")][:k]
        out[row, : len(found)] = found
    return out


@pytest.mark.parametrize("k", [1, 3, 7, 40])
def test_numpy_top_k_breaks_ties_to_the_lower_position(k):
    rng = np.random.default_rng(k)
    values = rng.integers(-2, 3, size=(50, 40)).astype(np.float32)  # Many ties.
    values[3, :] = -np.inf
    values[4, ::3] = np.nan
    found, positions = ranking.numpy_top_k(values, k)
    expected_values, expected = ranking.numpy_top_k_sorted(values, k)
    np.testing.assert_array_equal(positions, expected)
    np.testing.assert_array_equal(found, expected_values)
    # The reference itself: decreasing values, and equal values in increasing positions.
    row = values[0]
    np.testing.assert_array_equal(expected[0], sorted(range(40), key=lambda i: (-row[i], i))[:k])


@pytest.mark.parametrize("chunk", [1, 4, 7, 1000])
@pytest.mark.parametrize("k", [1, 5, 30])
def test_exact_top_k_equals_the_whole_matrix(chunk, k):
    rng = np.random.default_rng(chunk + k)
    ids = rng.permutation(np.arange(3, 80))[:25]  # Candidates, unsorted, not 0 .. n.
    embeddings = rng.integers(-2, 3, size=(25, 3)).astype(np.float32)
    queries = rng.integers(-2, 3, size=(9, 3)).astype(np.float32)
    exclude = [rng.choice(ids, rng.integers(0, 24), replace=False) for _ in range(9)]
    exclude[2] = ids  # Every candidate excluded: a row of NO_ITEM.
    found = ranking.exact_top_k(
        queries, ranking.array_chunks(ids, embeddings, chunk), k, exclude, block=2
    )
    np.testing.assert_array_equal(found, _reference(queries, ids, embeddings, k, exclude))
    assert (found[2] == ranking.NO_ITEM).all()
    for row in range(9):
        assert not np.isin(found[row], exclude[row]).any()


def test_no_item_is_a_miss_in_the_metrics():
    ranked = np.array([[2, 1, ranking.NO_ITEM, ranking.NO_ITEM]])
    values = metrics.recall_ndcg(ranked, [np.array([3])], ks=(1, 4))
    assert values == {"recall@1": 0.0, "ndcg@1": 0.0, "recall@4": 0.0, "ndcg@4": 0.0}
    hit = metrics.recall_ndcg(ranked, [np.array([1])], ks=(4,))
    assert hit["recall@4"] == 1.0 and hit["ndcg@4"] == pytest.approx(1 / np.log2(3))


def test_a_query_with_nan_scores_returns_no_item_not_ids():
    ids, embeddings = np.arange(1, 6), np.ones((5, 2), np.float32)
    found = ranking.exact_top_k(np.array([[np.nan, 0.0]]), ranking.array_chunks(ids, embeddings), 3)
    np.testing.assert_array_equal(found, [[-1, -1, -1]])


def test_exclusions_are_checked():
    with pytest.raises(ValueError, match=r"one list of ids per query \(2\); received 1"):
        ranking.exclusions([[1]], 2)


def test_chunks_out_of_order_or_repeated_are_refused_not_misread():
    embeddings = np.ones((3, 2), np.float32)
    queries = np.ones((1, 2), np.float32)
    for chunks, after in (
        ([(np.array([3, 4, 5]), embeddings), (np.array([1, 2, 6]), embeddings)], "5"),
        ([(np.array([2, 3, 3]), embeddings)], "None"),
    ):
        with pytest.raises(ValueError, match=f"increasing ids.*after the id {after}"):
            ranking.exact_top_k(queries, chunks, 2, [np.array([1, 2])])


@pytest.mark.parametrize(
    "k, queries, message",
    [
        (2.5, np.ones((1, 2)), "`k` must be a non-negative integer; received k=2.5"),
        (-1, np.ones((1, 2)), "received k=-1"),
        (2, np.ones((1, 3)), r"the queries' dim 3; received shape \[3, 2\]"),
        (2, np.ones(2), r"`queries` must be \[num_queries, dim\]; received shape \[2\]"),
    ],
)
def test_bad_arguments_are_named(k, queries, message):
    chunks = ranking.array_chunks(np.arange(1, 4), np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match=message):
        ranking.exact_top_k(queries, chunks, k)


@pytest.mark.parametrize("case", reference.top_k_cases(), ids=lambda case: case[0])
def test_device_top_k_in_numpy_equals_exact_top_k(case):
    _, queries, ids, embeddings, k, exclude, chunk, block = case
    expected = ranking.exact_top_k(
        queries, ranking.array_chunks(ids, embeddings, chunk), k, exclude
    )
    found = ranking.device_top_k(
        ranking.NUMPY, queries, ranking.array_chunks(ids, embeddings, chunk), k, exclude, block
    )
    np.testing.assert_array_equal(found, expected)
    if exclude is not None and np.isfinite(queries).all() and np.isfinite(embeddings).all():
        np.testing.assert_array_equal(found, _reference(queries, ids, embeddings, k, exclude))


@pytest.mark.parametrize("case", reference.top_k_cases(), ids=lambda case: case[0])
def test_device_top_k_scores_are_the_ranked_ids_products(case):
    _, queries, ids, embeddings, k, exclude, chunk, block = case
    found, scores = ranking.device_top_k(
        ranking.NUMPY,
        queries,
        ranking.array_chunks(ids, embeddings, chunk),
        k,
        exclude,
        block,
        return_scores=True,
    )
    assert scores.dtype == np.float32 and scores.shape == found.shape
    np.testing.assert_array_equal(scores[found == ranking.NO_ITEM], -np.inf)
    rows, slots = np.nonzero(found != ranking.NO_ITEM)
    position = {int(item): row for row, item in enumerate(ids)}
    expected = [
        np.float32(
            queries[r].astype(np.float32) @ embeddings[position[found[r, s]]].astype(np.float32)
        )
        for r, s in zip(rows, slots)
    ]
    expected = np.asarray(expected, np.float32)
    expected[np.isnan(expected)] = -np.inf  # A NaN score ranks as -inf.
    np.testing.assert_allclose(scores[rows, slots], expected, rtol=1e-6)


def test_device_top_k_refuses_what_exact_top_k_refuses():
    embeddings, queries = np.ones((3, 2), np.float32), np.ones((1, 2), np.float32)
    chunks = [(np.array([3, 4, 5]), embeddings), (np.array([1, 2, 6]), embeddings)]
    with pytest.raises(ValueError, match="increasing ids.*after the id 5"):
        ranking.device_top_k(ranking.NUMPY, queries, chunks, 2)
    with pytest.raises(ValueError, match=r"the queries' dim 3; received shape \[3, 2\]"):
        ranking.device_top_k(ranking.NUMPY, np.ones((1, 3)), chunks[:1], 2)
    with pytest.raises(ValueError, match="received k=-1"):
        ranking.device_top_k(ranking.NUMPY, queries, chunks[:1], -1)
    with pytest.raises(ValueError, match=r"one list of ids per query \(1\); received 2"):
        ranking.device_top_k(ranking.NUMPY, queries, chunks[:1], 2, [[1], [2]])


def test_device_top_k_refuses_a_chunk_longer_than_the_first():
    queries = np.ones((2, 2), np.float32)
    chunks = [(np.array([1]), np.ones((1, 2))), (np.array([2, 3, 4]), np.ones((3, 2)))]
    with pytest.raises(ValueError, match="a chunk of 3 ids follows a first one of 1"):
        ranking.device_top_k(ranking.NUMPY, queries, chunks, 2)


def test_device_top_k_blocks_keep_the_flat_score_index_within_int32(monkeypatch):
    monkeypatch.setattr(ranking, "MAX_FLAT_INDEX", 9)  # As 2**31 - 1 is to a GPU's chunks.
    seen = []
    device = ranking.NUMPY._replace(compile=lambda step: _recording(step, seen))
    rng = np.random.default_rng(0)
    queries = rng.normal(size=(5, 2)).astype(np.float32)
    ids, embeddings = np.arange(1, 5), rng.normal(size=(4, 2)).astype(np.float32)
    found = ranking.device_top_k(device, queries, [(ids, embeddings)], 3, block=4)
    assert seen == [2, 2, 2]  # 9 // 4 ids: 2 queries a block, whatever `block` asks.
    expected = ranking.exact_top_k(queries, [(ids, embeddings)], 3)
    np.testing.assert_array_equal(found, expected)
    with pytest.raises(ValueError, match="at most 9 ids; received 0 and more"):
        ranking.device_top_k(device, queries, [(np.arange(1, 11), np.ones((10, 2)))], 3)


def _recording(step, seen):
    def recorded(queries, *rest):
        seen.append(len(queries))
        return step(queries, *rest)

    return recorded
