"""keras_logq.ranking: the device top-k on the Keras backend equals the numpy exact search
(`logq_core.ranking.exact_top_k`), ties to the lower id, history excluded, NO_ITEM where no
candidate is left; inputs already on the device are read in place."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_logq import ranking as keras_ranking
from logq_core import ranking
from tests import reference

TIES_EXACT = keras.backend.backend() in ("jax", "tensorflow")


@pytest.mark.parametrize("case", reference.top_k_cases(), ids=lambda case: case[0])
@pytest.mark.parametrize("on_device", [False, True])
def test_equals_the_numpy_exact_search(case, on_device):
    _, queries, ids, embeddings, k, exclude, chunk, block = case
    expected = ranking.exact_top_k(
        queries, ranking.array_chunks(ids, embeddings, chunk), k, exclude
    )
    if on_device:
        queries, embeddings = ops.convert_to_tensor(queries), ops.convert_to_tensor(embeddings)
    found = keras_ranking.exact_top_k(
        queries, ids, embeddings, k, exclude, block, chunk_items=chunk
    )
    if TIES_EXACT:
        np.testing.assert_array_equal(found, expected)
    else:  # PyTorch's topk: equal scores in any order; the same score in every slot.
        np.testing.assert_array_equal(_scores(case, found), _scores(case, expected))
    assert found.dtype == np.int64


def _scores(case, ranked):
    """The score of each ranked id (NaN where NO_ITEM), for the ties' any-order check."""
    _, queries, ids, embeddings, *_ = case
    by_id = dict(zip(ids.tolist(), embeddings))
    with np.errstate(invalid="ignore"):
        return np.array(
            [
                [queries[row] @ by_id[i] if i != ranking.NO_ITEM else np.nan for i in line]
                for row, line in enumerate(ranked.tolist())
            ]
        )


def test_bad_ids_are_named():
    with pytest.raises(ValueError, match=r"`ids` must be a 1-D integer array; received dtype"):
        keras_ranking.exact_top_k(np.ones((1, 2)), np.array([0.5]), np.ones((1, 2)), 1)
    with pytest.raises(ValueError, match=r"`embeddings` must be \[len\(ids\), dim\] = \[2, dim\]"):
        keras_ranking.exact_top_k(np.ones((1, 2)), np.array([1, 2]), np.ones((3, 2)), 1)
    with pytest.raises(ValueError, match="`ids` must be unique; received 1 repeats"):
        keras_ranking.exact_top_k(np.ones((1, 2)), np.array([1, 1]), np.ones((2, 2)), 1)
