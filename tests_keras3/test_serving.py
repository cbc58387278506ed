"""keras_logq.serving: a saved two-tower answers raw-id requests as a numpy reference does
(history excluded, ties to the lower id, unknown ids counted, empty slots), after a round
trip through its files; bad input is refused by name before anything is written."""

import os

import keras
import numpy as np
import pytest
from keras import ops

from keras_logq import serving

DIM, LENGTH, ITEMS, USERS = 4, 3, 12, 5
SIZES = dict(num_users=USERS, num_items=ITEMS)


def _query_model():
    """A query model of stock layers: the user's row plus the history's mean."""
    user = keras.Input((), dtype="int32", name="user")
    history = keras.Input((LENGTH,), dtype="int32", name="history")
    users = keras.layers.Embedding(USERS + 1, DIM, name="users_table")
    items = keras.layers.Embedding(ITEMS + 1, DIM, name="items_table")
    rows = items(history)
    real = ops.cast(ops.greater(history, 0), rows.dtype)[..., None]
    mean = ops.sum(rows * real, axis=1) / ops.maximum(ops.sum(real, axis=1), 1.0)
    return keras.Model({"user": user, "history": history}, users(user) + mean)


def _saved(tmp_path, integer=False, k=5, vocabularies=True):
    model = _query_model()
    rng = np.random.default_rng(0)
    ids = np.array([2, 3, 5, 7, 8, 11])  # The served items: part of the catalog.
    # Integer-valued embeddings: exact scores, and ties between items 3 and 7.
    embeddings = rng.integers(-3, 4, size=(len(ids), DIM)).astype(np.float32)
    embeddings[3] = embeddings[1]
    raw_users = [100 + u if integer else f"u{u}" for u in range(1, USERS + 1)]
    raw_items = [1000 + i if integer else f"i{i}" for i in range(1, ITEMS + 1)]
    path = serving.save(
        str(tmp_path / "model"),
        model,
        ids,
        embeddings,
        history_length=LENGTH,
        k=k,
        user_vocabulary=raw_users if vocabularies else None,
        item_vocabulary=raw_items if vocabularies else None,
        integer_ids=("user", "item") if integer else (),
        **({} if vocabularies else dict(num_users=USERS, num_items=ITEMS)),
    )
    return path, model, ids, embeddings


def _reference(model, ids, embeddings, user, history, k):
    """(ids, scores) of one request in dense ids, by numpy."""
    recent = [item for item in history if item > 0][-LENGTH:]
    padded = np.zeros((1, LENGTH), np.int32)
    padded[0, LENGTH - len(recent) :] = recent
    query = ops.convert_to_numpy(model({"user": np.array([user], np.int32), "history": padded}))
    scores = embeddings @ query[0]
    allowed = ~np.isin(ids, history)
    order = sorted(np.flatnonzero(allowed), key=lambda i: (-scores[i], ids[i]))[:k]
    return ids[order], scores[order]


@pytest.mark.parametrize("integer", [False, True])
def test_answers_raw_ids_as_the_numpy_reference(tmp_path, integer):
    path, model, ids, embeddings = _saved(tmp_path, integer)
    assert sorted(os.listdir(path)) == [
        "candidates.npz",
        "query.keras",
        "serving.json",
        "vocabularies.npz",
    ]
    retriever = serving.load(path)  # Read back from the files, not the objects.
    raw_user = (lambda u: 100 + u) if integer else (lambda u: f"u{u}")
    raw_item = (lambda i: 1000 + i) if integer else (lambda i: f"i{i}")
    unknown_item = 999999 if integer else "nope"
    padding = -1 if integer else ""
    users = [raw_user(1), raw_user(4), 424242 if integer else "stranger"]
    histories = [
        [raw_item(3), raw_item(9)],
        [raw_item(2), unknown_item, padding, raw_item(5), raw_item(12), raw_item(1)],
        [],
    ]
    answer = retriever(users, histories)
    assert answer["unknown_history_ids"].tolist() == [0, 1, 0]
    if not integer:  # An unknown id that starts with a known one is unknown, not cut to it.
        longer = retriever([raw_user(1) + "_not"], [[raw_item(3) + "_not"]])
        assert longer["unknown_user"].tolist() == [True]
        assert longer["unknown_history_ids"].tolist() == [1]
    assert answer["unknown_user"].tolist() == [False, False, True]
    dense = [[3, 9], [2, 5, 12, 1], []]
    for row, (user, history) in enumerate(zip([1, 4, 0], dense)):
        want_ids, want_scores = _reference(model, ids, embeddings, user, history, 5)
        got = answer["ids"][row][: answer["num_found"][row]]
        assert list(got) == [raw_item(int(i)) for i in want_ids], row
        np.testing.assert_allclose(
            answer["scores"][row][: len(want_ids)], want_scores, rtol=1e-6, atol=1e-6
        )
    # The second request's history covers 2 of the 6 served items: 4 found, then empty slots.
    assert answer["num_found"].tolist() == [5, 4, 5]
    assert answer["ids"][1][4] == padding
    assert answer["scores"][1][4] == -np.inf


def test_dense_ids_without_vocabularies_and_a_smaller_k(tmp_path):
    path, model, ids, embeddings = _saved(tmp_path, vocabularies=False, k=6)
    retriever = serving.load(path)
    assert not os.path.exists(os.path.join(path, "vocabularies.npz"))
    answer = retriever([2], [[0, 3, 7]], k=2)  # 0: padding.
    want_ids, _ = _reference(model, ids, embeddings, 2, [3, 7], 2)
    assert answer["ids"].tolist() == [want_ids.tolist()]
    assert answer["ids"].shape == (1, 2)
    # Ids past the tables are unknown (the padding row), never a row of NaN.
    past = retriever([2, USERS + 1], [[3, ITEMS + 1], [99999]], k=2)
    assert past["unknown_history_ids"].tolist() == [1, 1]
    assert past["unknown_user"].tolist() == [False, True]
    assert past["num_found"].tolist() == [2, 2]
    assert past["ids"][0].tolist() == retriever([2], [[3]], k=2)["ids"][0].tolist()


def test_the_next_version_and_bad_input(tmp_path):
    path, model, ids, embeddings = _saved(tmp_path)
    assert os.path.basename(path) == "1"
    base = os.path.dirname(path)
    args = dict(history_length=LENGTH, user_vocabulary=["a"], item_vocabulary=["b"] * ITEMS)
    with pytest.raises(ValueError, match="`item_vocabulary` must hold each raw id once"):
        serving.save(base, model, ids, embeddings, **args)
    with pytest.raises(ValueError, match=r"dense item ids from 1; received .*, smallest 0"):
        serving.save(base, model, np.array([0, 2]), embeddings[:2], history_length=LENGTH, **SIZES)
    with pytest.raises(ValueError, match="received k=0"):
        serving.save(base, model, ids, embeddings, history_length=LENGTH, k=0, **SIZES)
    with pytest.raises(ValueError, match=r"\[len\(candidate_ids\), dim\] = \[6, dim\]"):
        serving.save(base, model, ids, embeddings[:2], history_length=LENGTH, **SIZES)
    bad = embeddings.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN or infinite"):
        serving.save(base, model, ids, bad, history_length=LENGTH, **SIZES)
    with pytest.raises(ValueError, match="`num_users` and `num_items` are needed"):
        serving.save(base, model, ids, embeddings, history_length=LENGTH)
    with pytest.raises(ValueError, match="go together"):
        serving.save(base, model, ids, embeddings, history_length=LENGTH, user_vocabulary=["a"])
    with pytest.raises(ValueError, match="not a decimal integer"):
        serving.save(
            base,
            model,
            ids,
            embeddings,
            history_length=LENGTH,
            user_vocabulary=["x"],
            item_vocabulary=[str(i) for i in range(ITEMS)],
            integer_ids=("user",),
        )
    assert sorted(os.listdir(base)) == ["1"]  # Nothing written by the refused calls.
    second = serving.save(base, model, ids, embeddings, history_length=LENGTH, **SIZES)
    assert os.path.basename(second) == "2"
    with pytest.raises(FileNotFoundError, match="give path/<version>"):
        serving.load(base)
    retriever = serving.load(path)
    with pytest.raises(ValueError, match="`users` must be \\[B\\] ids and `histories` B"):
        retriever(["u1", "u2"], [[]])
    with pytest.raises(ValueError, match="received k=-1"):
        retriever(["u1"], [[]], k=-1)
