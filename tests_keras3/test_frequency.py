"""keras_logq.frequency: the sketch against tfrs_logq's numpy reference; state saved and fed."""

import os
import tempfile

import keras
import numpy as np
import pytest
from keras import ops

import keras_logq
from tests import reference
from tests_keras3.backend import numpy


def _buckets_of(estimator):
    """Numpy multiply-shift: the top log2(width) bits of a * x + b mod 2^32, per row."""
    family = estimator._hash  # pylint: disable=protected-access
    a, b = family.a.astype(np.int64) % 2**32, family.b.astype(np.int64) % 2**32
    bits = int(np.log2(family.width))

    def buckets(item):
        mixed = (a * int(item) + b) % 2**32
        return ((mixed >> (32 - bits)) + np.arange(family.depth) * family.width).tolist()

    return buckets


def test_static_frequency():
    freq = keras_logq.StaticFrequency.from_counts([2, 1, 1], pseudo_count=0.0)
    np.testing.assert_allclose(
        numpy(freq.log_q(np.array([[0, 2]], np.int32))), np.log([[0.5, 0.25]]), rtol=1e-6
    )
    np.testing.assert_allclose(
        numpy(freq.log_inclusion_probability(np.array([1], np.int32), 3)),
        np.log([1 - 0.75**3]),
        rtol=1e-6,
    )
    with pytest.raises(
        ValueError,
        match=r"`counts` must be a non-empty 1-D array of positive "
        r"counts",
    ):
        keras_logq.StaticFrequency.from_counts([1, 0])
    with pytest.raises(
        ValueError,
        match=r"`probabilities` must be a non-empty 1-D array of "
        r"values in \(0, 1\]",
    ):
        keras_logq.StaticFrequency([0.5, 1.5])
    with pytest.raises(
        ValueError,
        match=r"`num_draws` must be a positive integer; received "
        r"num_draws=0",
    ):
        freq.log_inclusion_probability(np.array([1], np.int32), 0)


def test_static_frequency_reads_nan_for_ids_outside_the_table():
    # The probe of issue 46: on JAX, log_q([3, -1]) gave [nan, log 0.25] (-1 wrapped to the
    # last item); XLA and GPUs clamp. Every backend, eager and compiled, now reads NaN.
    freq = keras_logq.StaticFrequency([0.5, 0.25, 0.25])
    ids = np.array([3, -1, 1, 2**31 - 1], np.int32)
    backend = keras.backend.backend()
    runs = [freq.log_q]
    if backend == "jax":
        import jax  # pylint: disable=import-outside-toplevel

        runs.append(jax.jit(freq.log_q))
    elif backend == "tensorflow":
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        runs += [tf.function(freq.log_q), tf.function(freq.log_q, jit_compile=True)]
    for run in runs:
        got = numpy(run(ops.convert_to_tensor(ids)))
        assert np.isnan(got[[0, 1, 3]]).all(), (run, got)
        np.testing.assert_allclose(got[2], np.log(0.25), rtol=1e-6)
    if backend != "jax":  # JAX has no int64 without jax_enable_x64.
        wide = numpy(freq.log_q(np.array([2**32 + 1, 2], np.int64)))
        assert np.isnan(wide[0]) and np.isclose(wide[1], np.log(0.25))
    else:  # It would cut 2^32 + 1 to 1: refused by name, never id 1's log Q.
        with pytest.raises(ValueError, match=r"`ids` holds the id 4294967297, outside int32"):
            freq.log_q(np.array([2**32 + 1, 2], np.int64))
    np.testing.assert_allclose(numpy(freq.log_q(np.array([2], np.int64))), [np.log(0.25)])
    # The loss is then NaN, never trained on a clamped row.
    loss = keras_logq.sampled_softmax_loss(
        np.zeros([1], np.float32),
        np.zeros([1, 2], np.float32),
        correction="standard",
        negative_log_q=freq.log_q(np.array([1, 3], np.int32))[None, :],
        positive_log_q=freq.log_q(np.array([0], np.int32)),
    )
    assert np.isnan(numpy(loss)).all()


def test_hash_matches_numpy_reference():
    sketch = keras_logq.CountMinSketchEstimator(width=2**10, depth=3, seed=5)
    ids = np.array([0, 1, 7, 123456, 2**31 - 1, 99999999], np.int64)
    got = numpy(sketch._hash(ops.convert_to_tensor(ids.astype(np.int32))))  # pylint: disable=protected-access
    want = np.array([_buckets_of(sketch)(i) for i in ids]).T
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("decay", [1.0, 0.9, 0.5])
def test_count_min_matches_reference(decay):
    rng = np.random.default_rng(1)
    sketch = keras_logq.CountMinSketchEstimator(width=64, depth=2, decay=decay, seed=3)
    # 60 steps: with decay 0.5 the stored counts are rescaled after 43 of them.
    stream = [
        rng.choice(200, size=16, p=reference.ZIPF_Q[:50].repeat(4) / 4).tolist() for _ in range(60)
    ]
    for ids in stream:
        sketch.update(np.array(ids, np.int32))
    want = reference.count_min(stream, _buckets_of(sketch), decay=decay)
    items = np.arange(200, dtype=np.int32)
    np.testing.assert_allclose(
        numpy(sketch.log_q(items)), np.log([want(i) for i in items]), rtol=1e-4, atol=1e-5
    )
    assert int(numpy(sketch.step)) == 60


@pytest.mark.parametrize("decay", [1.0, 0.5])
def test_conservative_count_min_matches_reference_and_is_tighter(decay):
    rng = np.random.default_rng(3)
    # 60 steps of 50 ids from 200, many repeated within a step, in 2 x 32 counters: heavy
    # collisions, where the conservative update matters. decay 0.5 crosses a rescale.
    stream = [rng.integers(0, 200, size=50).tolist() for _ in range(60)]
    plain = keras_logq.CountMinSketchEstimator(width=32, depth=2, decay=decay, seed=3)
    sketch = keras_logq.CountMinSketchEstimator(
        width=32, depth=2, decay=decay, conservative=True, seed=3
    )
    for ids in stream:
        plain.update(np.array(ids, np.int32))
        sketch.update(np.array(ids, np.int32))
    items = np.arange(200, dtype=np.int32)
    want = reference.count_min(stream, _buckets_of(sketch), decay=decay, conservative=True)
    np.testing.assert_allclose(
        numpy(sketch.log_q(items)), np.log([want(i) for i in items]), rtol=1e-4, atol=1e-5
    )
    q_plain, q_conservative = np.exp(numpy(plain.log_q(items))), np.exp(numpy(sketch.log_q(items)))
    assert np.all(q_conservative <= q_plain * (1 + 1e-5))
    if decay == 1.0:
        true = np.bincount(np.ravel(stream), minlength=200) / np.size(stream)
        assert np.all(q_conservative[true > 0] >= true[true > 0] * (1 - 1e-5))
        assert np.abs(q_conservative - true).sum() < 0.7 * np.abs(q_plain - true).sum()


def test_conservative_update_ignores_masked_ids_and_empty_steps():
    sketch = keras_logq.CountMinSketchEstimator(width=8, depth=2, decay=1.0, conservative=True)
    sketch.update(np.array([3, 3, 5], np.int32), mask=np.array([True, False, True]))
    sketch.update(np.zeros([0], np.int32))
    want = reference.count_min([[3, 5]], _buckets_of(sketch), decay=1.0, conservative=True)
    np.testing.assert_allclose(
        numpy(sketch.log_q(np.array([3, 5], np.int32))), np.log([want(3), want(5)]), rtol=1e-5
    )


def test_count_min_before_any_update_is_uniform_and_mask_is_ignored():
    sketch = keras_logq.CountMinSketchEstimator(width=32, depth=2)
    np.testing.assert_allclose(
        numpy(sketch.log_q(np.array([3, 4], np.int32))), np.full(2, -np.log(32)), rtol=1e-6
    )
    sketch.update(np.array([3, 4], np.int32), mask=np.array([False, False]))
    np.testing.assert_allclose(
        numpy(sketch.log_q(np.array([3], np.int32))), [-np.log(32)], rtol=1e-6
    )


def test_count_min_errors_and_config():
    with pytest.raises(
        ValueError,
        match=r"`width` must be a power of two \(2, 4, ..., 2\*\*30\); "
        r"received width=1000",
    ):
        keras_logq.CountMinSketchEstimator(width=1000)
    with pytest.raises(
        ValueError,
        match=r"`decay` must be a number in \(0, 1\]; received "
        r"decay=0",
    ):
        keras_logq.CountMinSketchEstimator(decay=0)
    with pytest.raises(TypeError, match=r"`conservative` must be"):
        keras_logq.CountMinSketchEstimator(conservative="yes")
    with pytest.raises(TypeError, match=r"`ids` must be an integer tensor of item ids"):
        keras_logq.CountMinSketchEstimator(width=8).update(np.zeros([2], np.float32))
    sketch = keras_logq.CountMinSketchEstimator(
        width=2**12, depth=3, decay=0.99, conservative=True, min_count=2.0, seed=7, name="cms"
    )
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(sketch))
    assert restored.get_config() == sketch.get_config()
    ids = np.arange(50, dtype=np.int32)
    np.testing.assert_array_equal(numpy(restored._hash(ids)), numpy(sketch._hash(ids)))  # pylint: disable=protected-access


@pytest.mark.parametrize("initialization", ["first_gap", "zero"])
def test_hashed_matches_reference(initialization):
    rng = np.random.default_rng(0)
    estimator = keras_logq.HashedFrequencyEstimator(
        num_buckets=16, num_hashes=2, alpha=0.3, initialization=initialization, seed=3
    )
    # 30 steps of 6 ids from 40 in 2 x 16 buckets: repeats and collisions within steps.
    stream = [rng.integers(0, 40, size=6).tolist() for _ in range(30)]
    for ids in stream:
        estimator.update(np.array(ids, np.int32))
    want = reference.hashed_frequency(
        stream, _buckets_of(estimator), alpha=0.3, first_gap=initialization == "first_gap"
    )
    items = np.arange(45, dtype=np.int32)
    np.testing.assert_allclose(
        numpy(estimator.log_step_inclusion_probability(items)),
        -np.log([want(i)[0] for i in items]),
        rtol=1e-5,
    )
    np.testing.assert_allclose(
        numpy(estimator.log_q(items)), np.log([want(i)[1] for i in items]), rtol=1e-5
    )
    pi = np.array([1 / want(i)[0] for i in items])
    np.testing.assert_allclose(
        numpy(estimator.log_inclusion_probability(items, 12)),
        np.log(1 - (1 - pi) ** (12 / 6)),
        rtol=1e-4,
    )


def test_hashed_masks_before_updates_and_config():
    masked = keras_logq.HashedFrequencyEstimator(num_buckets=4, num_hashes=2)
    plain = keras_logq.HashedFrequencyEstimator(num_buckets=4, num_hashes=2)
    # Before any update every id reads the uniform 1 / num_buckets.
    np.testing.assert_allclose(
        numpy(masked.log_step_inclusion_probability(np.array([0, 9], np.int32))),
        np.full(2, -np.log(4)),
        rtol=1e-6,
    )
    for ids, mask in (([1, 0, 2], [True, False, True]), ([0, 3], [False, True])):
        masked.update(np.array(ids, np.int32), mask=np.array(mask))
        plain.update(np.array([i for i, m in zip(ids, mask) if m], np.int32))
    np.testing.assert_array_equal(numpy(masked.last_step)[:-1], numpy(plain.last_step)[:-1])
    np.testing.assert_array_equal(numpy(masked.gap)[:-1], numpy(plain.gap)[:-1])
    assert int(numpy(masked.num_ids)) == int(numpy(plain.num_ids)) == 3
    with pytest.raises(
        ValueError,
        match=r"`initialization` must be one of 'first_gap', 'zero'; "
        r"received initialization='ones'",
    ):
        keras_logq.HashedFrequencyEstimator(initialization="ones")
    with pytest.raises(ValueError, match=r"`num_buckets` must be a power of two"):
        keras_logq.HashedFrequencyEstimator(num_buckets=100)
    estimator = keras_logq.HashedFrequencyEstimator(
        num_buckets=64, num_hashes=3, alpha=0.2, initialization="zero", seed=5, name="yi"
    )
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(estimator))
    assert restored.get_config() == estimator.get_config()


class SketchTwoTower(keras.Model):
    """In-batch two-tower retrieval whose loss reads log Q from an estimator it feeds."""

    ESTIMATORS = {
        "count_min": lambda: keras_logq.CountMinSketchEstimator(width=64, depth=2, decay=0.9),
        "conservative": lambda: keras_logq.CountMinSketchEstimator(
            width=64, depth=2, decay=0.9, conservative=True
        ),
        "hashed": lambda: keras_logq.HashedFrequencyEstimator(num_buckets=64, alpha=0.1),
    }

    def __init__(self, num_items=40, dim=8, estimator="count_min", **kwargs):
        super().__init__(**kwargs)
        self.num_items, self.dim, self.estimator = num_items, dim, estimator
        self.users = keras.layers.Embedding(num_items, dim)
        self.items = keras.layers.Embedding(num_items, dim)
        self.frequency = self.ESTIMATORS[estimator]()
        self.loss_layer = keras_logq.SampledSoftmax(correction="improved")

    def call(self, inputs, training=False):
        user_ids, item_ids = inputs["user"], inputs["item"]
        if training:
            self.frequency.update(item_ids)
        return self.users(user_ids), self.items(item_ids)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del y, sample_weight, training
        query, candidates = y_pred
        losses = self.loss_layer(
            query_embeddings=query,
            candidate_embeddings=candidates,
            candidate_log_q=self.frequency.log_q(x["item"]),
            candidate_ids=x["item"],
        )
        return ops.mean(losses)

    def get_config(self):
        return dict(
            super().get_config(), num_items=self.num_items, dim=self.dim, estimator=self.estimator
        )


keras.saving.register_keras_serializable(package="tests_keras3")(SketchTwoTower)


@pytest.mark.parametrize("estimator", list(SketchTwoTower.ESTIMATORS))
def test_fit_feeds_the_estimator_and_save_load_keeps_its_state(estimator):
    rng = np.random.default_rng(0)
    data = dict(
        user=rng.integers(0, 40, 256).astype(np.int32),
        item=rng.choice(40, 256, p=reference.ZIPF_Q[:40] / reference.ZIPF_Q[:40].sum()).astype(
            np.int32
        ),
    )
    model = SketchTwoTower(estimator=estimator)
    model.compile(optimizer=keras.optimizers.Adam(0.05))
    history = model.fit(data, batch_size=32, epochs=3, verbose=0, shuffle=False)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert int(numpy(model.frequency.step)) == 24
    if estimator == "hashed":
        assert int(numpy(model.frequency.num_ids)) == 3 * 256
    else:
        assert float(numpy(model.frequency.total)) > 0
    path = os.path.join(tempfile.mkdtemp(), "two_tower.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    ids = np.arange(40, dtype=np.int32)
    np.testing.assert_allclose(
        numpy(restored.frequency.log_q(ids)), numpy(model.frequency.log_q(ids)), rtol=1e-6
    )
    assert int(numpy(restored.frequency.step)) == 24
