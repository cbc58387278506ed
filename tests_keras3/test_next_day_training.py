"""examples.keras_next_day's training pass: `model.fit` over the store's batches, a window of
steps at a time, trains what a loop of `train_on_batch` over the same batches trains, with or
without several steps per call; a pass killed and run again resumes from its last backup and
trains the same weights."""

import os

import keras
import numpy as np
import pytest

from pipelines import keras_job as keras_next_day

NUM_USERS, NUM_ITEMS, BATCH = 40, 60, 16


class _Store:
    """A store's stream of `num_examples` random examples, in chunks of 7 rows."""

    def __init__(self, num_examples, seed=0):
        rng = np.random.default_rng(seed)
        self.num_examples = num_examples
        self.rows = dict(
            user=rng.integers(1, NUM_USERS + 1, num_examples).astype(np.int32),
            item=rng.integers(1, NUM_ITEMS + 1, num_examples).astype(np.int32),
            history=rng.integers(0, NUM_ITEMS + 1, (num_examples, 3)).astype(np.int32),
        )

    def chunks(self):
        for start in range(0, self.num_examples, 7):
            yield {key: value[start : start + 7] for key, value in self.rows.items()}


def _settings(**overrides):
    return dict(
        dict(
            dim=8,
            batch_size=BATCH,
            num_uniform=5,
            num_in_batch=0,
            correction="improved",
            table_learning_rate=0.1,
            learning_rate=0.01,
            sketch_width=64,
            sketch_decay=0.99,
            shuffle_window=50,
            share_item_table=False,
            max_steps=0,
            steps_per_execution=1,
            seed=3,
        ),
        **overrides,
    )


def _weights(settings, fit, backup_dir=""):
    keras.utils.set_random_seed(0)
    store = _Store(BATCH * 25 + 5)  # 25 full batches; the last 5 rows are dropped.
    model = keras_next_day.make_model(NUM_USERS, NUM_ITEMS, settings)
    if fit:
        _, windows = keras_next_day.train(model, store, settings, False, backup_dir)
    else:
        windows = []
        for step, batch in enumerate(
            keras_next_day.batches(
                store, settings["batch_size"], settings["shuffle_window"], settings["seed"]
            )
        ):
            if step == (settings["max_steps"] or np.inf):
                break
            windows.append(float(model.train_on_batch(batch)))
    return [np.asarray(keras.ops.convert_to_numpy(w)) for w in model.weights], windows


@pytest.mark.parametrize(
    "steps_per_execution, max_steps, windows",
    [
        (1, 0, [10, 10, 5]),  # 25 batches, in windows of LOSS_WINDOW = 10 steps.
        (3, 0, [12, 12, 1]),  # Windows of whole calls; the last call trains the one left.
        (1, 14, [10, 4]),
        (3, 14, [12, 2]),
    ],
)
def test_fit_in_windows_trains_as_train_on_batch(
    monkeypatch, steps_per_execution, max_steps, windows
):
    if steps_per_execution > 1 and keras.backend.backend() == "torch":
        pytest.skip("Keras runs one step per call on torch (steps_per_execution must be 1).")
    monkeypatch.setattr(keras_next_day, "LOSS_WINDOW", 10)
    expected, losses = _weights(_settings(max_steps=max_steps), fit=False)
    got, trained = _weights(
        _settings(max_steps=max_steps, steps_per_execution=steps_per_execution), fit=True
    )
    assert [steps for steps, _ in trained] == windows
    ends = np.cumsum([steps for steps, _ in trained])
    np.testing.assert_allclose(  # Each window's mean of the steps' losses.
        [loss for _, loss in trained],
        [np.mean(losses[end - steps : end]) for end, (steps, _) in zip(ends, trained)],
        rtol=1e-4,
    )
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_store_without_a_full_batch_is_refused():
    with pytest.raises(ValueError, match=r"batch_size=16 is more than the store's 9"):
        keras_next_day.train(
            keras_next_day.make_model(NUM_USERS, NUM_ITEMS, _settings()), _Store(9), _settings()
        )


def test_a_killed_pass_resumes_from_its_last_backup(monkeypatch, tmp_path):
    monkeypatch.setattr(keras_next_day, "LOSS_WINDOW", 10)
    settings = _settings(backup_every=10)
    expected, expected_windows = _weights(settings, fit=True)
    _killed_at_17(monkeypatch, settings, str(tmp_path))
    assert os.listdir(tmp_path) == ["step-000000010"]  # The backup at 10; 20 never came.
    got, windows = _weights(settings, fit=True, backup_dir=str(tmp_path))
    assert [steps for steps, _ in windows] == [10, 10, 5]
    np.testing.assert_allclose(
        [loss for _, loss in windows], [loss for _, loss in expected_windows], rtol=1e-5
    )
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # The pass's end is backed up too: run again, nothing is trained and the weights are the
    # same.
    assert os.listdir(tmp_path) == ["step-000000025"]
    again, windows_again = _weights(settings, fit=True, backup_dir=str(tmp_path))
    assert windows_again == windows
    for a, b in zip(again, got):
        np.testing.assert_array_equal(a, b)


def test_a_backup_of_other_settings_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(keras_next_day, "LOSS_WINDOW", 10)
    _weights(_settings(backup_every=10, max_steps=10), fit=True, backup_dir=str(tmp_path))
    with pytest.raises(
        ValueError, match=r"other settings: correction='improved' \(this run: 'none'"
    ):
        _weights(_settings(backup_every=10, correction="none"), fit=True, backup_dir=str(tmp_path))
    # max_steps, steps_per_execution and backup_every do not change what a pass trains.
    _, windows = _weights(_settings(backup_every=20), fit=True, backup_dir=str(tmp_path))
    assert [steps for steps, _ in windows] == [10, 10, 5]


def test_the_default_backup_directory_is_named_by_store_backend_and_settings(monkeypatch, tmp_path):
    monkeypatch.setenv("TFRS_LOGQ_CACHE", str(tmp_path))

    def name(store, settings, backend="jax"):
        return keras_next_day.backup_dir_for(store, settings, backend)

    assert name("/a/store", _settings()) == name("/a/store", _settings(max_steps=7))
    assert name("/a/store", _settings()).startswith(str(tmp_path / "keras_next_day"))
    assert name("/a/store", _settings()) != name("/b/store", _settings())
    assert name("/a/store", _settings()) != name("/a/store", _settings(dim=4))
    assert name("/a/store", _settings()) != name("/a/store", _settings(), "torch")


def _killed_at_17(monkeypatch, settings, backup_dir):
    """Runs a pass whose process dies after 17 steps' batches; its backups stay."""
    original = keras_next_day.batches

    def dying(*args):
        for step, batch in enumerate(original(*args)):
            if step == 17:
                raise RuntimeError("killed")
            yield batch

    monkeypatch.setattr(keras_next_day, "batches", dying)
    with pytest.raises(Exception, match="killed"):  # TensorFlow's tf.data wraps it.
        _weights(settings, fit=True, backup_dir=backup_dir)
    monkeypatch.setattr(keras_next_day, "batches", original)


def test_a_pass_resumed_with_more_steps_per_call_counts_its_windows_on(monkeypatch, tmp_path):
    if keras.backend.backend() == "torch":
        pytest.skip("Keras runs one step per call on torch (steps_per_execution must be 1).")
    monkeypatch.setattr(keras_next_day, "LOSS_WINDOW", 10)
    expected, _ = _weights(_settings(), fit=False)
    _killed_at_17(monkeypatch, _settings(backup_every=10), str(tmp_path))
    # Resumed at 10 with 3 steps a call: windows of 12 from there, a backup at the first
    # window's end 10 or more steps after the last.
    got, windows = _weights(
        _settings(backup_every=10, steps_per_execution=3), fit=True, backup_dir=str(tmp_path)
    )
    assert [steps for steps, _ in windows] == [10, 12, 3]
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_backup_past_max_steps_or_of_another_model_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(keras_next_day, "LOSS_WINDOW", 10)
    _killed_at_17(monkeypatch, _settings(backup_every=10), str(tmp_path))
    with pytest.raises(ValueError, match=r"max_steps=6: the backup .*step-000000010 holds 10"):
        _weights(_settings(backup_every=10, max_steps=6), fit=True, backup_dir=str(tmp_path))
    (backup,) = keras_next_day._backups(str(tmp_path))  # pylint: disable=protected-access
    other = keras_next_day.make_model(NUM_USERS, NUM_ITEMS, _settings(share_item_table=True))
    keras_next_day.build(other, next(keras_next_day.batches(_Store(16), 16, 0, 0)))
    with pytest.raises(ValueError, match=r"is not of this model: \['two_tower/history/"):
        keras_next_day.restore_backup(other, backup, _settings(backup_every=10))


def test_backups_are_told_from_other_files(tmp_path):
    for name in ("step-final", "step-000000099", "step-000000005.partial", "step-000000007"):
        (tmp_path / name).mkdir()
    (tmp_path / "step-000000007" / "state.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("mine")
    assert keras_next_day._backups(str(tmp_path)) == [str(tmp_path / "step-000000007")]  # pylint: disable=protected-access
    keras_next_day.remove_backups(str(tmp_path))
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "step-final"]


@pytest.mark.skipif(
    keras.backend.backend() != "jax",
    reason="on TensorFlow this divergence fails first inside Adagrad's gather (an error too)",
)
def test_a_non_finite_loss_stops_the_pass_with_a_named_error():
    settings = _settings(table_learning_rate=1e38, learning_rate=1e38)
    keras.utils.set_random_seed(0)
    model = keras_next_day.make_model(NUM_USERS, NUM_ITEMS, settings)
    with pytest.raises(
        keras_next_day.NonFiniteLoss, match=r"loss is (nan|inf) over steps 1-25 of 25"
    ):
        keras_next_day.train(model, _Store(BATCH * 25), settings, False)


class _Tied:
    """Every item scores the same for every query: the ranking is by id alone."""

    def candidates(self, ids):
        return np.ones((len(ids), 2), np.float32)

    def query(self, users, histories):
        del histories
        return np.ones((len(users), 2), np.float32)


def test_evaluation_is_the_products_search_ties_to_the_lower_id_no_excluded_id():
    class Test:  # Two queries; the second's history holds its target and two of the index.
        users = np.array([1, 2])
        histories = [np.array([9]), np.array([5, 7, 8])]
        targets = [np.array([7]), np.array([5])]

    index = np.array([8, 5, 7, 20])  # Not sorted: the search sorts it.
    metrics = keras_next_day.evaluate(_Tied(), Test, index, history_length=2)
    # Query 1 ranks [5, 7, 8, 20]: its target at rank 2. Query 2 ranks [20] and then nothing
    # (NO_ITEM, a miss): never its history's 5, so no hit.
    assert metrics["recall@10"] == 0.5
    assert metrics["ndcg@10"] == pytest.approx(0.5 / np.log2(3))
