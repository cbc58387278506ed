"""keras_logq's UniformSampler and MixedSampler over a vocabulary (issue 50, item 2).

A sparse integer vocabulary (ids with gaps, in the tower's own id space) on every backend,
and `from_lookup` for a `StringLookup` / `IntegerLookup`, whose item indices (or integer
tokens) are drawn and never its out-of-vocabulary or mask index. Log Q is -log V exactly;
its unbiasedness on the known Zipf catalog with sparse ids is in test_negatives.py
(`SAMPLER_CASES`: uniform_sparse_vocabulary, mixed_exact_sparse_vocabulary_per_row).
"""

import keras
import numpy as np
import pytest

import keras_logq
from keras_logq import negatives
from tests_keras3.backend import numpy

CATALOG = [7, 1003, 42, 99999]


def _lookup_layers():
    """Keras 3's lookup layers run on TensorFlow (tf.data), whatever the backend."""
    pytest.importorskip(
        "tensorflow",
        reason="Keras 3's StringLookup and IntegerLookup need TensorFlow (they are tf.data layers)",
    )
    return keras.layers.StringLookup, keras.layers.IntegerLookup


def test_sparse_integer_vocabulary_draws_its_ids_only_uniformly():
    table = np.random.default_rng(0).normal(size=(100000, 3)).astype(np.float32)
    sampler = negatives.UniformSampler(num_negatives=2000, vocabulary=CATALOG, seed=4)
    positives = np.array([7, 42], np.int32)
    out = sampler(positives, embedding_fn=lambda ids: keras.ops.take(table, ids, axis=0))
    ids = numpy(out.ids)
    assert ids.dtype == np.int32 and ids.shape == (2000,)
    assert set(ids.tolist()) == set(CATALOG)  # Every id, nothing else.
    counts = np.array([np.sum(ids == i) for i in CATALOG])
    assert ((counts - 500.0) ** 2 / 500.0).sum() < 16.27, counts  # chi2(3), p = 0.001
    np.testing.assert_allclose(numpy(out.embeddings), table[ids])
    np.testing.assert_allclose(numpy(out.log_q), np.full(2000, -np.log(4.0)), rtol=1e-6)
    np.testing.assert_allclose(numpy(out.positive_log_q), np.full(2, -np.log(4.0)), rtol=1e-6)
    np.testing.assert_array_equal(numpy(out.mask), ids[None, :] != positives[:, None])


def test_make_sampler_takes_a_vocabulary_instead_of_num_items():
    for kind in ("uniform", "mixed"):
        sampler = keras_logq.make_sampler(kind, num_negatives=8, vocabulary=CATALOG, seed=1)
        uniform = sampler.uniform if kind == "mixed" else sampler
        assert (uniform.vocabulary, uniform.num_items) == (CATALOG, 4)
    out = keras_logq.make_sampler("uniform", num_negatives=50, vocabulary=CATALOG, seed=1)(
        np.array([7], np.int32), embedding_fn=lambda ids: keras.ops.zeros(ids.shape + (2,))
    )
    assert set(numpy(out.ids).tolist()) <= set(CATALOG)


def test_per_row_draws_of_the_positives_dtype():
    sampler = negatives.UniformSampler(num_negatives=400, vocabulary=CATALOG, per_row=True, seed=1)
    positives = keras.ops.convert_to_tensor(np.array([7, 42, 42], np.int64))  # int32 on JAX
    out = sampler(positives)
    ids = numpy(out.ids)
    assert ids.dtype == numpy(positives).dtype and ids.shape == (3, 400)
    for row in ids:
        assert set(row.tolist()) == set(CATALOG)
    assert not np.array_equal(ids[1], ids[2])
    np.testing.assert_allclose(numpy(out.log_q), np.full((3, 400), -np.log(4.0)), rtol=1e-6)


def test_mixed_log_q_uses_the_vocabulary_size():
    q = np.array([0.1, 0.2, 0.3, 0.4])
    vocabulary = [11, 3, 25, 17]  # Items 0..3 of q have these ids.
    table = np.full(26, 1e-9)
    table[vocabulary] = q
    sampler = negatives.MixedSampler(
        num_uniform=3, num_in_batch=8, vocabulary=vocabulary, probabilities=table, seed=0
    )
    batch = np.array([17, 3, 17, 25], np.int32)
    out = sampler(batch, batch)
    items = np.array([vocabulary.index(i) for i in numpy(out.ids)])
    mask = numpy(out.mask)
    assert items.shape == (7,) and set(numpy(out.ids)[:3]) <= set(vocabulary)
    draws = 3 / 4 + 3 * q  # As test_uniform_and_exact_mixture_log_q with dense ids.
    for row in range(4):
        np.testing.assert_allclose(
            np.exp(numpy(out.log_q)[row]), draws[items] / mask[row].sum(), rtol=1e-5
        )
    np.testing.assert_allclose(
        np.exp(numpy(out.positive_log_q)), draws[[3, 1, 3, 2]] / 6, rtol=1e-5
    )


def test_string_lookup_indices_never_the_out_of_vocabulary_index():
    string_lookup, _ = _lookup_layers()
    titles = [f"movie {i}" for i in range(10)]
    lookup = string_lookup(vocabulary=titles)  # Index 0: [UNK]; items 1..10.
    sampler = negatives.UniformSampler.from_lookup(lookup, 1000, seed=4)
    assert (sampler.num_items, sampler.first_id, sampler.vocabulary) == (10, 1, None)
    indices = np.asarray(lookup(np.array(titles)))
    out = sampler(indices[:2].astype(np.int32))
    ids = numpy(out.ids)
    assert set(ids.tolist()) == set(indices.tolist()) == set(range(1, 11))  # Never 0.
    np.testing.assert_allclose(numpy(out.log_q), np.full(1000, -np.log(10.0)), rtol=1e-6)
    # A mask token and two out-of-vocabulary indices: the items are 3..12.
    lookup = string_lookup(vocabulary=titles, mask_token="", num_oov_indices=2)
    mixed = negatives.MixedSampler.from_lookup(
        lookup, 200, 4, probabilities=np.full(13, 0.1), seed=2
    )
    assert (mixed.uniform.num_items, mixed.uniform.first_id) == (10, 3)
    np.testing.assert_array_equal(np.asarray(lookup(np.array(titles))), np.arange(3, 13))
    batch = np.array([3, 5, 12], np.int32)
    drawn = numpy(mixed(batch, batch).ids)[:200]
    assert drawn.min() >= 3 and drawn.max() <= 12 and len(set(drawn.tolist())) == 10


def test_integer_lookup_tokens_or_indices():
    _, integer_lookup = _lookup_layers()
    lookup = integer_lookup(vocabulary=CATALOG)
    tokens = negatives.UniformSampler.from_lookup(lookup, 500, draw="tokens", seed=3)
    assert tokens.vocabulary == CATALOG and tokens.num_items == 4
    assert set(numpy(tokens(np.array([7], np.int32)).ids).tolist()) == set(CATALOG)
    indices = negatives.UniformSampler.from_lookup(lookup, 500, seed=3)
    assert (indices.num_items, indices.first_id) == (4, 1)
    assert set(numpy(indices(np.array([1], np.int32)).ids).tolist()) == {1, 2, 3, 4}


def test_serialization_round_trip_with_non_default_arguments():
    frequency = keras_logq.StaticFrequency(np.full(30, 1 / 30))
    for sampler in (
        negatives.UniformSampler(
            num_negatives=5, vocabulary=[3, 11, 29], per_row=True, seed=2, name="vocab"
        ),
        negatives.MixedSampler(
            num_uniform=2,
            num_in_batch=3,
            vocabulary=[3, 11, 29],
            mixture="paper",
            deduplicate=True,
            per_row=True,
            probabilities=frequency,
            seed=9,
        ),
    ):
        restored = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(sampler)
        )
        assert type(restored) is type(sampler)
        assert restored.get_config() == sampler.get_config()
        assert restored.vocabulary == [3, 11, 29]
        ids = np.array([3, 29], np.int32)
        np.testing.assert_array_equal(numpy(restored(ids, ids).ids), numpy(sampler(ids, ids).ids))
    assert restored.uniform.num_items == 3 and restored.get_config()["vocabulary"] == [3, 11, 29]


def test_samplers_over_a_vocabulary_train_compiled():
    vocabulary = list(range(0, 40, 3))
    table_size = 40

    class TwoTower(keras.Model):
        def __init__(self):
            super().__init__()
            self.users = keras.layers.Embedding(table_size, 8)
            self.items = keras.layers.Embedding(table_size, 8)
            self.sampler = negatives.MixedSampler(
                num_uniform=6,
                num_in_batch=8,
                vocabulary=vocabulary,
                probabilities=np.full(40, 1 / 40),
                seed=3,
            )

        def call(self, inputs):
            return self.users(inputs["user"]), self.items(inputs["item"])

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            del y, sample_weight, training
            query, positives = y_pred
            neg = self.sampler(x["item"], x["item"], positives, embedding_fn=self.items)
            return keras.ops.mean(
                keras_logq.negatives_loss(query, positives, neg, correction="improved")
            )

    rng = np.random.default_rng(1)
    data = dict(
        user=rng.integers(0, table_size, 256).astype(np.int32),
        item=rng.choice(vocabulary, 256).astype(np.int32),
    )
    model = TwoTower()
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        jit_compile=keras.backend.backend() != "torch" or "auto",
    )
    losses = model.fit(data, batch_size=64, epochs=3, verbose=0, shuffle=False).history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses


def test_errors_name_the_argument_and_value():
    cases = [
        (
            dict(vocabulary=["a", "b"]),
            TypeError,
            r"keras_logq's samplers draw integer ids: Keras 3 has string tensors on the "
            r"TensorFlow backend only.*received a vocabulary of strings \(first \['a', 'b'\]\)",
        ),
        (
            dict(vocabulary=[4, 9, 4]),
            ValueError,
            r"`vocabulary` must hold distinct ids; received 3 ids, 2 distinct \(repeated: \[4\]\)",
        ),
        (dict(vocabulary=[4, 9], first_id=1), ValueError, r"Received first_id=1 and a vocabulary"),
        (
            dict(vocabulary=[4, 9], num_items=3),
            ValueError,
            r"`num_items` must be the vocabulary's size or None; received num_items=3 and a "
            r"vocabulary of 2 ids",
        ),
        (
            dict(vocabulary=[]),
            ValueError,
            r"`vocabulary` must be a non-empty list of ids; received vocabulary with shape \(0,\)",
        ),
        (
            dict(num_items=None),
            ValueError,
            r"`num_items` must be a positive integer; received num_items=None",
        ),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            negatives.UniformSampler(num_negatives=2, **kwargs)
    with pytest.raises(
        TypeError,
        match=r"The vocabulary's ids \[4, 3000000000\] do not fit "
        r"positive_ids' dtype; received positive_ids with dtype "
        r"int32",
    ):
        negatives.UniformSampler(num_negatives=2, vocabulary=[4, 3_000_000_000])(
            np.array([4], np.int32)
        )
    with pytest.raises(
        ValueError,
        match=r"`num_uniform` must be a positive integer; received "
        r"num_uniform=None",
    ):
        negatives.MixedSampler(num_in_batch=2, vocabulary=[1])
    with pytest.raises(
        ValueError,
        match=r"MixedSampler draws the uniform ids of its "
        r"vocabulary, but `probabilities` has 10 items .* "
        r"received a vocabulary with ids in \[3, 12\]",
    ):
        negatives.MixedSampler(
            num_uniform=2, num_in_batch=2, vocabulary=[3, 12], probabilities=np.full(10, 0.1)
        )
    with pytest.raises(
        TypeError,
        match=r"`lookup` must be a Keras StringLookup or "
        r"IntegerLookup layer .*received lookup=\['a'\]",
    ):
        negatives.UniformSampler.from_lookup(["a"], 2)


def test_lookup_errors():
    string_lookup, _ = _lookup_layers()
    lookup = string_lookup(vocabulary=["a", "b"])
    with pytest.raises(
        ValueError,
        match=r"`draw` must be one of .*'indices'.*'tokens'.*; "
        r"received draw='items'",
    ):
        negatives.UniformSampler.from_lookup(lookup, 2, draw="items")
    with pytest.raises(
        TypeError,
        match=r"received a vocabulary of strings \(first \['a', "
        r"'b'\]\)",
    ):
        negatives.UniformSampler.from_lookup(lookup, 2, draw="tokens")
    with pytest.raises(
        ValueError,
        match=r"draw='indices' needs a lookup that maps items to "
        r"integer indices .*received a lookup with "
        r"invert=True, output_mode='int'",
    ):
        negatives.MixedSampler.from_lookup(string_lookup(vocabulary=["a"], invert=True), 2, 2)
    with pytest.raises(ValueError, match=r"`lookup` has an empty vocabulary"):
        negatives.MixedSampler.from_lookup(string_lookup(), 2, 2)
