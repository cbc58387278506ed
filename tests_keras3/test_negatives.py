"""keras_logq.negatives: log Q unbiased on the known catalog tfrs_logq's tests use; state."""

import os
import tempfile

import keras
import numpy as np
import pytest
from keras import ops

import keras_logq
from keras_logq import negatives
from keras_logq._ops import OPS
from logq_core import formulas
from tests import reference
from tests_keras3.backend import numpy

NUM_ITEMS, ZIPF_Q = reference.NUM_ITEMS, reference.ZIPF_Q


def _padded(sampler):
    """Calls `sampler` with 5 padding slots appended to the pool and a candidate mask."""

    def call(positive_ids, candidate_ids):
        ids = np.concatenate([candidate_ids, np.zeros([5], candidate_ids.dtype)])
        mask = np.concatenate([np.ones(len(candidate_ids), bool), np.zeros([5], bool)])
        return sampler(positive_ids, ids, candidate_mask=mask)

    return call


SAMPLER_CASES = dict(
    in_batch=lambda: negatives.InBatchSampler(probabilities=ZIPF_Q, seed=1),
    in_batch_capped=lambda: negatives.InBatchSampler(max_pool_size=5, probabilities=ZIPF_Q, seed=2),
    in_batch_dedup=lambda: negatives.InBatchSampler(deduplicate=True, probabilities=ZIPF_Q, seed=3),
    in_batch_dedup_capped_slots=lambda: _padded(
        negatives.InBatchSampler(deduplicate=True, max_pool_size=4, probabilities=ZIPF_Q, seed=4)
    ),
    uniform=lambda: negatives.UniformSampler(NUM_ITEMS, 8, seed=5),
    mixed_exact=lambda: negatives.MixedSampler(NUM_ITEMS, 4, 4, probabilities=ZIPF_Q, seed=6),
    mixed_exact_per_row=lambda: negatives.MixedSampler(
        NUM_ITEMS, 4, 4, per_row=True, probabilities=ZIPF_Q, seed=7
    ),
)

# The known catalog with sparse integer ids: item i of the Zipf catalog has id SPARSE[i]
# (distinct, in [0, 1000), gaps between them). The samplers' vocabulary lists them in
# another order, so a draw's position in it is not its item; the probabilities are a table
# indexed by id, whose gaps (never drawn, never read) hold a tiny probability.
SPARSE = np.random.default_rng(2).choice(1000, NUM_ITEMS, replace=False)
SPARSE_VOCABULARY = SPARSE[np.random.default_rng(3).permutation(NUM_ITEMS)].tolist()
SPARSE_Q = np.full(1000, 1e-9)
SPARSE_Q[SPARSE] = ZIPF_Q


class _Sparse:
    """Calls `sampler` with the catalog's sparse ids and reads its negatives back as the
    catalog's items (for `_z_hats`, which scores items)."""

    def __init__(self, sampler):
        self.sampler = sampler
        self.items = np.full(1000, -1)
        self.items[SPARSE] = np.arange(NUM_ITEMS)

    def __call__(self, positive_ids, candidate_ids):
        out = self.sampler(
            SPARSE[positive_ids].astype(np.int32), SPARSE[candidate_ids].astype(np.int32)
        )
        return out._replace(ids=self.items[numpy(out.ids)])


SAMPLER_CASES.update(
    uniform_sparse_vocabulary=lambda: _Sparse(
        negatives.UniformSampler(num_negatives=8, vocabulary=SPARSE_VOCABULARY, seed=8)
    ),
    mixed_exact_sparse_vocabulary_per_row=lambda: _Sparse(
        negatives.MixedSampler(
            num_uniform=4,
            num_in_batch=4,
            vocabulary=SPARSE_VOCABULARY,
            per_row=True,
            probabilities=SPARSE_Q,
            seed=9,
        )
    ),
)


def _z_hats(sampler, positive, batch_size, trials, seed, log_q="q_prime"):
    """Z_hat of row 0 (positive fixed, the others drawn from q) over `trials` batches."""
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(trials):
        batch = np.concatenate([[positive], rng.choice(NUM_ITEMS, batch_size - 1, p=ZIPF_Q)])
        neg = sampler(batch.astype(np.int32), batch.astype(np.int32))
        mask = numpy(neg.mask)[0]
        row_log_q = np.broadcast_to(
            numpy(neg.log_q), mask.shape if numpy(neg.log_q).ndim == 1 else numpy(neg.log_q).shape
        )
        row_log_q = row_log_q if row_log_q.ndim == 1 else row_log_q[0]
        if log_q == "q_prime" and not neg.log_q_excludes_positive:
            row_log_q = row_log_q - np.log1p(-np.exp(numpy(neg.positive_log_q)[0]))
        ids = numpy(neg.ids)
        z, count = reference.z_hat(ids if ids.ndim == 1 else ids[0], mask, row_log_q)
        if count > 0:
            values.append(z)
    return np.array(values)


@pytest.mark.parametrize("case", sorted(SAMPLER_CASES))
@pytest.mark.parametrize("positive", [0, 45])
def test_z_hat_is_unbiased(case, positive):
    z = _z_hats(SAMPLER_CASES[case](), positive, batch_size=9, trials=600, seed=positive + 7)
    truth = reference.partition_without(positive)
    standard_error = z.std() / np.sqrt(len(z))
    assert standard_error / truth < 0.1
    assert abs(z.mean() - truth) < 4.0 * standard_error, (
        f"{case}, p={positive}: mean {z.mean():.3f} vs truth {truth:.3f} (se {standard_error:.3f})"
    )


def test_unigram_log_q_of_a_deduplicated_pool_is_biased():
    sampler = negatives.InBatchSampler(
        deduplicate=True, max_pool_size=4, log_q="unigram", probabilities=ZIPF_Q, seed=8
    )
    z = _z_hats(sampler, 0, batch_size=64, trials=400, seed=11)
    truth = reference.partition_without(0)
    # tfrs_logq's test measures E[Z_hat] / Z = 1.53 on this catalog (1.47 here, 400 trials).
    assert z.mean() - truth > 5.0 * z.std() / np.sqrt(len(z))
    assert z.mean() / truth > 1.3


def test_deduplicated_pool_masks_duplicates_and_hits():
    sampler = negatives.InBatchSampler(deduplicate=True, probabilities=ZIPF_Q)
    ids = np.array([4, 2, 4, 9], np.int32)
    neg = sampler(ids, ids)
    np.testing.assert_array_equal(numpy(neg.ids), ids)
    # One slot per distinct id; a row's own id masked.
    mask = numpy(neg.mask)
    assert mask.sum(axis=1).tolist() == [2, 2, 2, 2]
    assert not mask[0, 0] and not mask[0, 2] and not mask[1, 1]
    assert neg.log_q_excludes_positive
    # Horvitz-Thompson: log pi(d) - log n, pi = 1 - (1 - q)^(B-1).
    pi = 1.0 - (1.0 - ZIPF_Q[ids]) ** 3
    want = np.where(mask, np.log(pi)[None, :] - np.log(2.0), 0.0)
    np.testing.assert_allclose(np.where(mask, numpy(neg.log_q), 0.0), want, rtol=1e-5)


def test_uniform_and_exact_mixture_log_q():
    uniform = negatives.UniformSampler(NUM_ITEMS, 6, first_id=1, per_row=True, seed=3)
    neg = uniform(np.array([1, 2, 3], np.int32))
    ids = numpy(neg.ids)
    assert ids.shape == (3, 6) and ids.min() >= 1 and ids.max() <= NUM_ITEMS
    np.testing.assert_allclose(numpy(neg.log_q), np.full((3, 6), -np.log(NUM_ITEMS)), rtol=1e-6)
    mixed = negatives.MixedSampler(NUM_ITEMS, 3, 4, probabilities=ZIPF_Q, seed=4)
    batch = np.array([0, 5, 9, 5], np.int32)
    neg = mixed(batch, batch)
    mask, log_q = numpy(neg.mask), numpy(neg.log_q)
    # Expected draws of d over a row's slots: 3 uniform ones, and the 4 kept in-batch
    # slots hold 4 * 3/4 = 3 other rows' positives; per draw over the row's valid ones.
    draws = 3 / NUM_ITEMS + 3 * ZIPF_Q[numpy(neg.ids)]
    for row in range(4):
        np.testing.assert_allclose(log_q[row], np.log(draws / mask[row].sum()), rtol=1e-5)


def test_samplers_serialize_with_non_default_arguments():
    # 11 items: the mixed sampler's uniform ids [1, 11) must have a probability each.
    frequency = keras_logq.StaticFrequency.from_counts([3, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1])
    for sampler in (
        negatives.InBatchSampler(
            deduplicate=True,
            max_pool_size=7,
            log_q="unigram",
            probabilities=frequency,
            seed=3,
            name="ib",
        ),
        negatives.UniformSampler(10, 4, first_id=1, per_row=True, seed=9),
        negatives.MixedSampler(
            10,
            3,
            5,
            mixture="paper",
            first_id=1,
            deduplicate=True,
            per_row=True,
            probabilities=frequency,
            seed=2,
        ),
    ):
        restored = keras.saving.deserialize_keras_object(
            keras.saving.serialize_keras_object(sampler)
        )
        assert type(restored) is type(sampler)
        assert restored.get_config() == sampler.get_config()


class _Drawer(keras.Model):
    def __init__(self):
        super().__init__()
        self.sampler = negatives.UniformSampler(1000, 5, seed=17)

    def call(self, ids):
        return self.sampler(ids).ids


def test_draws_resume_from_saved_state():
    batch = np.arange(4, dtype=np.int32)
    first = _Drawer()
    first(batch)
    path = os.path.join(tempfile.mkdtemp(), "sampler.weights.h5")
    first.save_weights(path)
    want = numpy(first(batch))
    second = _Drawer()
    second(batch)  # A draw that the restored state must undo.
    second.load_weights(path)
    np.testing.assert_array_equal(numpy(second(batch)), want)
    assert not np.array_equal(numpy(second(batch)), want)  # The draws move on.


def test_errors():
    with pytest.raises(
        ValueError,
        match=r"`max_pool_size` must be a positive integer; received "
        r"max_pool_size=0",
    ):
        negatives.InBatchSampler(max_pool_size=0)
    with pytest.raises(ValueError, match=r"needs mixture='paper'"):
        negatives.MixedSampler(10, 2, 2, deduplicate=True)
    with pytest.raises(
        TypeError,
        match=r"`positive_ids` must be an integer tensor of item ids; "
        r"received positive_ids with dtype float32",
    ):
        negatives.InBatchSampler()(np.zeros([2], np.float32), np.zeros([2], np.int32))
    with pytest.raises(ValueError, match=r"`seed` must be an integer or None; received seed=1.5"):
        negatives.UniformSampler(10, 2, seed=1.5)


def test_negatives_loss_matches_reference():
    rng = np.random.default_rng(3)
    item_embeddings = rng.normal(size=(NUM_ITEMS, 4)).astype(np.float32)
    batch = np.array([0, 3, 3, 7, 11, 20], np.int32)
    query = rng.normal(size=(6, 4)).astype(np.float32)
    sampler = negatives.MixedSampler(NUM_ITEMS, 5, 4, per_row=True, probabilities=ZIPF_Q, seed=5)
    neg = sampler(
        batch,
        batch,
        item_embeddings[batch],
        embedding_fn=lambda ids: ops.take(item_embeddings, ids, axis=0),
    )
    got = keras_logq.negatives_loss(
        query, item_embeddings[batch], neg, correction="improved", temperature=0.5
    )
    ids = numpy(neg.ids)
    neg_logits = np.einsum("bd,bnd->bn", query, item_embeddings[ids]) / 0.5
    pos_logits = np.sum(query * item_embeddings[batch], axis=1) / 0.5
    want, _ = reference.sampled_softmax(
        pos_logits, neg_logits, "improved", numpy(neg.log_q), None, numpy(neg.mask), excludes=True
    )
    np.testing.assert_allclose(numpy(got), want, rtol=1e-4, atol=1e-5)


def test_first_of_each_id_keeps_one_slot_per_id():
    ids = np.array([5, 1, 5, 5, 2, 1, 9], np.int32)
    valid = np.array([True, True, True, False, True, True, False])
    first = numpy(
        formulas.first_of_each_id(
            OPS, ops.convert_to_tensor(ids), ops.convert_to_tensor(valid), 2**31 - 1, 7
        )
    )
    kept = ids[first]
    assert sorted(kept.tolist()) == [1, 2, 5] and not first[~valid].any()


class SampledTwoTower(keras.Model):
    """A two-tower model whose loss draws mixed negatives (uniform + deduplicated in-batch)."""

    def __init__(self, sampler_kind="mixed", **kwargs):
        super().__init__(**kwargs)
        self.sampler_kind = sampler_kind
        self.users = keras.layers.Embedding(NUM_ITEMS, 8)
        self.items = keras.layers.Embedding(NUM_ITEMS, 8)
        if sampler_kind == "mixed":
            self.sampler = negatives.MixedSampler(NUM_ITEMS, 6, 8, probabilities=ZIPF_Q, seed=3)
        else:
            self.sampler = negatives.InBatchSampler(
                deduplicate=True, max_pool_size=8, probabilities=ZIPF_Q, seed=3
            )

    def call(self, inputs):
        return self.users(inputs["user"]), self.items(inputs["item"])

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del y, sample_weight, training
        query, positives = y_pred
        neg = self.sampler(
            x["item"], x["item"], positives, embedding_fn=lambda ids: self.items(ids)
        )
        return ops.mean(keras_logq.negatives_loss(query, positives, neg, correction="improved"))


@pytest.mark.parametrize("sampler_kind", ["mixed", "in_batch_dedup"])
def test_samplers_train_compiled(sampler_kind):
    rng = np.random.default_rng(1)
    data = dict(
        user=rng.integers(0, NUM_ITEMS, 512).astype(np.int32),
        item=rng.choice(NUM_ITEMS, 512, p=ZIPF_Q).astype(np.int32),
    )
    model = SampledTwoTower(sampler_kind)
    # Compiled: jax.jit and XLA on TensorFlow; torch.compile (60 s here) is left to "auto".
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        jit_compile=keras.backend.backend() != "torch" or "auto",
    )
    state_before = numpy(
        model.sampler.seed_generator.state
        if sampler_kind != "mixed"
        else model.sampler.uniform.seed_generator.state
    )
    losses = model.fit(data, batch_size=64, epochs=3, verbose=0, shuffle=False).history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    state_after = numpy(
        model.sampler.seed_generator.state
        if sampler_kind != "mixed"
        else model.sampler.uniform.seed_generator.state
    )
    assert not np.array_equal(state_before, state_after)  # The draws moved on, compiled.


def test_make_sampler_builds_what_tfrs_logq_builds_and_round_trips():
    settings = dict(
        num_negatives=255,
        num_items=40,
        first_id=1,
        seed=3,
        deduplicate=True,
        log_q="unigram",
        per_row=True,
        mixture="paper",
    )
    mixed = negatives.make_sampler("mixed", **settings)
    assert (
        mixed.uniform.num_negatives,
        mixed.in_batch.max_pool_size,
        mixed.mixture,
        mixed.uniform.per_row,
        mixed.in_batch.deduplicate,
    ) == (128, 127, "paper", True, True)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(mixed))
    assert restored.get_config() == mixed.get_config()
    in_batch = negatives.make_sampler("in_batch", **settings)
    assert (in_batch.max_pool_size, in_batch.log_q_mode) == (255, "unigram")
    if keras.backend.backend() == "jax":
        # The step sees the global batch, under keras.distribution too (test_distribution).
        global_pool = negatives.make_sampler("in_batch", num_negatives=8, global_batch=True)
        assert global_pool.max_pool_size == 8
    else:
        with pytest.raises(
            ValueError,
            match=r"global_batch=True needs the JAX backend: .* "
            r"a replica's own rows on the "
            rf"{keras.backend.backend()} backend; received "
            r"global_batch=True",
        ):
            negatives.make_sampler("in_batch", num_negatives=8, global_batch=True)
    with pytest.raises(
        ValueError,
        match=r"negatives='uniform' draws a fixed number of "
        r"negatives and needs `num_negatives`; received "
        r"num_negatives=None",
    ):
        negatives.make_sampler("uniform", num_items=5)


# ------------------------------------------------------------- batches of any size


def _short_batch(sampler, capacity):
    """Calls `sampler` on a batch shorter than the pool's static bound, as a step sees it:
    on TensorFlow through a tf.function traced with [None] ids (a partial last batch of
    `tf.data`); elsewhere (shapes are always static) padded to `capacity` masked slots."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        spec = tf.TensorSpec([None], tf.int32)
        traced = tf.function(lambda p, c: sampler(p, c), input_signature=[spec, spec])
        return traced
    return lambda positive_ids, candidate_ids: _padded_to(sampler, capacity)(
        positive_ids, candidate_ids
    )


def _padded_to(sampler, capacity):
    def call(positive_ids, candidate_ids):
        missing = capacity - len(candidate_ids)
        ids = np.concatenate([candidate_ids, np.zeros([missing], candidate_ids.dtype)])
        mask = np.arange(capacity) < len(candidate_ids)
        return sampler(positive_ids, ids, candidate_mask=mask)

    return call


SHORT_BATCH_CASES = dict(
    in_batch_capped=lambda: negatives.InBatchSampler(
        max_pool_size=9, probabilities=ZIPF_Q, seed=12
    ),
    in_batch_dedup_capped=lambda: negatives.InBatchSampler(
        deduplicate=True, max_pool_size=9, probabilities=ZIPF_Q, seed=13
    ),
    mixed_exact=lambda: negatives.MixedSampler(NUM_ITEMS, 4, 9, probabilities=ZIPF_Q, seed=14),
)


@pytest.mark.parametrize("case", sorted(SHORT_BATCH_CASES))
def test_z_hat_of_a_short_batch_is_unbiased(case):
    """A batch of 5 rows where the pool's static bound is 9: the 4 missing slots are masked
    and log Q counts the 5 real ones only."""
    call = _short_batch(SHORT_BATCH_CASES[case](), capacity=9)
    z = _z_hats(call, 0, batch_size=5, trials=600, seed=21)
    truth = reference.partition_without(0)
    standard_error = z.std() / np.sqrt(len(z))
    assert standard_error / truth < 0.1
    assert abs(z.mean() - truth) < 4.0 * standard_error, (
        f"{case}: mean {z.mean():.3f} vs truth {truth:.3f} (se {standard_error:.3f})"
    )


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="only TensorFlow traces a batch of unknown size"
)
def test_a_pool_of_unknown_size_keeps_its_static_bound():
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    spec = tf.TensorSpec([None], tf.int32)
    capped = negatives.MixedSampler(NUM_ITEMS, 3, 6, probabilities=ZIPF_Q, seed=1)
    uncapped = negatives.InBatchSampler(deduplicate=True, probabilities=ZIPF_Q, seed=1)
    shapes = {}
    for name, sampler in (("mixed", capped), ("in_batch", uncapped)):
        traced = tf.function(lambda p, c, s=sampler: s(p, c).ids, input_signature=[spec, spec])
        shapes[name] = tuple(traced.get_concrete_function().structured_outputs.shape)
    # Mixed: 3 uniform slots + the in-batch half's bound of 6; uncapped: one per candidate.
    assert shapes == {"mixed": (9,), "in_batch": (None,)}
    batch = np.array([4, 2, 4], np.int32)  # 3 rows, 2 distinct ids.
    neg = tf.function(lambda p, c: capped(p, c), input_signature=[spec, spec])(batch, batch)
    mask = numpy(neg.mask)
    assert mask.shape == (3, 9)
    # The in-batch half holds the 3 real slots (row 0's own id and the other 4 masked) and
    # 3 padding slots, never valid.
    assert mask[:, 3:].sum(axis=1).tolist() == [1, 2, 1]
    dedup = tf.function(lambda p, c: uncapped(p, c), input_signature=[spec, spec])(batch, batch)
    assert numpy(dedup.mask).sum(axis=1).tolist() == [1, 1, 1]


class Batches(keras.utils.PyDataset):
    """Rows in batches of 64, the last one short."""

    def __init__(self, data, batch_size=64):
        super().__init__()
        self.data, self.batch_size = data, batch_size

    def __len__(self):
        return -(-len(self.data["item"]) // self.batch_size)

    def __getitem__(self, index):
        rows = slice(index * self.batch_size, (index + 1) * self.batch_size)
        return {key: value[rows] for key, value in self.data.items()}


class SamplingPredictor(SampledTwoTower):
    """Draws negatives in `call`, so that `predict` runs the sampler too."""

    def call(self, inputs):
        query, positives = super().call(inputs)
        neg = self.sampler(
            inputs["item"], inputs["item"], positives, embedding_fn=lambda ids: self.items(ids)
        )
        return keras_logq.negatives_loss(query, positives, neg, correction="improved")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del x, y, sample_weight, training
        return ops.mean(y_pred)


def _inputs(kind, data):
    if kind == "numpy":
        return data, dict(batch_size=64)
    if kind == "pydataset":
        return Batches(data), {}
    tf = pytest.importorskip("tensorflow")
    return tf.data.Dataset.from_tensor_slices(data).batch(64), {}


@pytest.mark.parametrize(
    "inputs,sampler_kind,jit",
    [
        ("tf_data", "mixed", True),
        ("tf_data", "in_batch_dedup", False),
        ("pydataset", "in_batch_dedup", True),
        ("pydataset", "mixed", False),
        ("numpy", "mixed", True),
        ("numpy", "in_batch_dedup", True),
    ],
)
def test_samplers_fit_evaluate_predict_with_a_partial_last_batch(inputs, sampler_kind, jit):
    """500 rows at batch 64 (TensorFlow traces the batch as [None]) compiled, 200 eager (JAX
    runs those op by op): the last batch holds 52 or 8 rows."""
    rows = 500 if jit else 200
    rng = np.random.default_rng(2)
    data = dict(
        user=rng.integers(0, NUM_ITEMS, rows).astype(np.int32),
        item=rng.choice(NUM_ITEMS, rows, p=ZIPF_Q).astype(np.int32),
    )
    model = SamplingPredictor(sampler_kind)
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        jit_compile=jit if keras.backend.backend() != "torch" else False,
    )
    x, kwargs = _inputs(inputs, data)
    history = model.fit(x, epochs=2, verbose=0, shuffle=False, **kwargs).history["loss"]
    assert np.all(np.isfinite(history)), history
    if jit:  # 200 rows are too few for two epochs to beat the draws' noise.
        assert history[-1] < history[0], history
    assert np.isfinite(model.evaluate(x, verbose=0, **kwargs))
    predicted = model.predict(x, verbose=0, **kwargs)
    assert predicted.shape == (rows,) and np.all(np.isfinite(predicted))


def test_mixed_sampler_errors_name_its_own_arguments():
    with pytest.raises(
        ValueError,
        match=r"`num_in_batch` must be a positive integer; "
        r"received num_in_batch=0",
    ):
        negatives.MixedSampler(10, 2, 0)
    with pytest.raises(
        ValueError,
        match=r"`num_uniform` must be a positive integer; "
        r"received num_uniform=-1",
    ):
        negatives.MixedSampler(10, -1, 2)
    for sampler in (negatives.MixedSampler(10, 2, 2), negatives.InBatchSampler()):
        name = type(sampler).__name__
        with pytest.raises(
            ValueError,
            match=rf"{name} needs `candidate_ids` of rank 1 .*"
            r"received candidate_ids with shape \(\)",
        ) as error:
            sampler(np.array([1, 2], np.int32), np.int32(3))
        # Keras's own context names the layer called too, never another.
        other = "InBatchSampler" if name == "MixedSampler" else "MixedSampler"
        assert other not in str(error.value) and "UniformSampler" not in str(error.value)
        with pytest.raises(TypeError, match=r"`positive_ids` must be an integer tensor") as error:
            sampler(np.zeros([2], np.float32), np.zeros([2], np.int32))
        assert other not in str(error.value) and "UniformSampler" not in str(error.value)


def test_sequence_candidates_are_flattened():
    """[batch, length] targets with a padding mask: the pool is every real target."""
    targets = np.array([[0, 3, 5], [0, 0, 7]], np.int32)
    mask = targets > 0
    sampler = negatives.InBatchSampler(probabilities=ZIPF_Q)
    neg = sampler(targets.reshape(-1), targets, candidate_mask=mask)
    np.testing.assert_array_equal(numpy(neg.ids), targets.reshape(-1))
    got = numpy(neg.mask)
    assert got.shape == (6, 6)
    # Row of target 3 (position 1): negatives 5 and 7 only.
    assert got[1].tolist() == [False, False, True, False, False, True]
    # Padding rows read any slots (the loss masks those positions); the pool's padding
    # slots are invalid for every row.
    assert not got[:, ~mask.reshape(-1)].any()
    # Without deduplication, log Q is each real candidate's unigram q.
    np.testing.assert_allclose(
        numpy(neg.log_q)[mask.reshape(-1)], np.log(ZIPF_Q[[3, 5, 7]]), rtol=1e-6
    )


def test_a_vocabulary_is_checked_and_converted_once_per_dtype(monkeypatch):
    # An eager step (PyTorch, run_eagerly) walked the vocabulary's list at every call: about
    # 90 ms a call at 1M ids on a CPU, where the draws themselves take 1.
    checked = []
    check = negatives.samplers.check_vocabulary_ids
    monkeypatch.setattr(
        negatives.samplers,
        "check_vocabulary_ids",
        lambda caller, vocabulary, dtype: checked.append(dtype) or check(caller, vocabulary, dtype),
    )
    sampler = negatives.UniformSampler(num_negatives=64, vocabulary=SPARSE_VOCABULARY, seed=8)
    drawn, dtypes = [], []
    for dtype in ("int32", "int32", "int64", "int32"):
        positives = ops.convert_to_tensor(np.asarray(SPARSE_VOCABULARY[:4], dtype))
        dtypes.append(keras.backend.standardize_dtype(positives.dtype))  # JAX: int32 both.
        ids = numpy(sampler(positives, positives).ids)
        assert ids.dtype == np.dtype(dtypes[-1])
        drawn.append(ids)
    assert checked == list(dict.fromkeys(dtypes))
    assert set(np.concatenate(drawn).tolist()) <= set(SPARSE_VOCABULARY)
    # Keras's symbolic build of a model in fit runs the call first (on torch, on the "meta"
    # device, whose tensors hold no data); the eager steps after it draw the vocabulary's ids.

    class Tower(keras.Model):
        def __init__(self):
            super().__init__()
            self.table = keras.layers.Embedding(1000, 4)
            self.sampler = negatives.UniformSampler(
                num_negatives=8, vocabulary=SPARSE_VOCABULARY, seed=9
            )

        def call(self, ids):
            drawn = self.sampler(ids, ids).ids
            return ops.sum(self.table(ids), -1, keepdims=True) + ops.sum(self.table(drawn))

    tower = Tower()
    tower.compile(optimizer="sgd", loss="mse", run_eagerly=True)
    ids = np.asarray(SPARSE_VOCABULARY[:4], "int32")
    tower.fit(ids, np.zeros((4, 1), "float32"), batch_size=4, verbose=0)
    drawn = numpy(tower.sampler(ops.convert_to_tensor(ids), None).ids)
    assert set(drawn.tolist()) <= set(SPARSE_VOCABULARY)
    # A vocabulary that positive ids' dtype cannot hold is still refused at the first call.
    wide = negatives.UniformSampler(num_negatives=4, vocabulary=[1, 2**20], seed=1)
    with pytest.raises(TypeError, match=r"ids \[1, 1048576\] do not fit"):
        wide(ops.convert_to_tensor(np.asarray([1], "int16")), None)
