"""Tests of tfrs_logq.frequency: the static source, the streaming estimators, and their plumbing."""

import os
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from tests import conftest
from tests import reference
from tfrs_logq import frequency
from tfrs_logq import negatives
from tfrs_logq.tasks import LogQRetrieval


class StaticFrequencyTest(tf.test.TestCase):
    def test_log_q_and_inclusion_probability_match_numpy(self):
        q = np.array([0.5, 0.3, 0.15, 0.05])
        freq = frequency.StaticFrequency(probabilities=q)
        ids = tf.constant([2, 0, 3], tf.int64)
        self.assertAllClose(freq.log_q(ids), np.log(q[[2, 0, 3]]))
        self.assertAllClose(freq(ids), np.log(q[[2, 0, 3]]))
        for n in (1, 7, 1000):
            self.assertAllClose(
                freq.log_inclusion_probability(ids, n),
                np.log(1 - (1 - q[[2, 0, 3]]) ** n),
                rtol=1e-5,
            )
        # Exact: 1 - (1 - 1/2)^3 = 7/8.
        self.assertAllClose(freq.log_inclusion_probability(tf.constant([0]), 3), [np.log(7 / 8)])

    def test_inclusion_probability_is_accurate_for_tiny_q(self):
        freq = frequency.StaticFrequency(probabilities=[1e-9, 1.0 - 1e-9])
        # 1 - (1 - 1e-9)^10 = 1e-8 to first order; naive float32 arithmetic gives 0.
        self.assertAllClose(
            freq.log_inclusion_probability(tf.constant([0]), 10), [np.log(1e-8)], rtol=1e-4
        )

    def test_from_counts(self):
        freq = frequency.StaticFrequency.from_counts([6, 3, 1])
        self.assertAllClose(tf.exp(freq.log_q(tf.constant([0, 1, 2]))), [0.6, 0.3, 0.1])

    def test_config_round_trip_and_checkpoint(self):
        freq = frequency.StaticFrequency(probabilities=[0.7, 0.2, 0.1], name="static")
        restored = tf.keras.layers.deserialize(tf.keras.layers.serialize(freq))
        self.assertIsInstance(restored, frequency.StaticFrequency)
        self.assertEqual(restored.get_config(), freq.get_config())
        self.assertEqual(restored.num_items, 3)
        self.assertEqual(freq.trainable_weights, [])
        self.assertLen(freq.non_trainable_weights, 1)

    def test_as_frequency(self):
        self.assertIsNone(frequency.as_frequency(None))
        freq = frequency.StaticFrequency(probabilities=[0.5, 0.5])
        self.assertIs(frequency.as_frequency(freq), freq)
        self.assertIsInstance(
            frequency.as_frequency(np.array([0.5, 0.5])), frequency.StaticFrequency
        )
        from_fn = frequency.as_frequency(lambda ids: tf.fill(tf.shape(ids), 0.25))
        self.assertAllClose(from_fn.log_q(tf.constant([1, 2])), np.log([0.25, 0.25]))

    def test_errors(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`counts` must be a non-empty 1-D array of "
            r"positive counts \(add a smoothing pseudo-count for unseen "
            r"items\); received counts=array\(\[2., 0.\]\)",
        ):
            frequency.StaticFrequency.from_counts([2, 0])
        freq = frequency.StaticFrequency(probabilities=[0.5, 0.5])
        with self.assertRaisesRegex(
            TypeError,
            r"`ids` must be an integer tensor of item ids; "
            r"received ids with dtype float32",
        ):
            freq.log_q(tf.constant([0.0]))
        with self.assertRaisesRegex(
            ValueError,
            r"`num_draws` must be a positive integer; "
            r"received num_draws=0",
        ):
            freq.log_inclusion_probability(tf.constant([0]), 0)
        with self.assertRaisesRegex(
            ValueError,
            r"`probabilities` must have rank 1; received "
            r"probabilities with shape \(1, 2\)",
        ):
            frequency.StaticFrequency(probabilities=[[0.5, 0.5]])
        with self.assertRaisesRegex(
            NotImplementedError,
            r"A sampler built with a callable "
            r"`probabilities` cannot be serialized",
        ):
            frequency.as_frequency(lambda ids: ids).get_config()

    def test_out_of_range_ids_are_an_error_or_nan_on_every_path(self):
        # The probe of issue 46: before, XLA clamped 15 to item 9 and -1 to item 0.
        freq = frequency.StaticFrequency(probabilities=np.linspace(0.01, 0.19, 10))
        bad = tf.constant([15, -1], tf.int64)
        message = r"`ids` must hold ids in \[0, 10\), one per entry of `probabilities`"
        with self.assertRaisesRegex(
            ValueError,
            message + r"; received ids with invalid "
            r"values \[15 -1\]",
        ):
            freq.log_q(bad)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message):
            tf.function(freq.log_q)(bad)
        compiled = tf.function(freq.log_q, jit_compile=True)
        self.assertTrue(np.all(np.isnan(compiled(bad).numpy())))
        # Valid ids beside them read their own rows; an int64 id is not wrapped to int32.
        got = compiled(tf.constant([[3, 2**32 + 1], [9, 0]], tf.int64)).numpy()
        self.assertAllClose(
            got[[0, 1, 1], [0, 0, 1]], np.log(np.linspace(0.01, 0.19, 10)[[3, 9, 0]])
        )
        self.assertTrue(np.isnan(got[0, 1]))
        self.assertTrue(
            np.isnan(
                tf.function(lambda ids: freq.log_inclusion_probability(ids, 4), jit_compile=True)(
                    bad
                )
            ).all()
        )
        # LogQRetrieval does not train on them either: an error, or a NaN loss under XLA.
        task = LogQRetrieval(frequency=freq)
        query, candidates = tf.random.normal([4, 3], seed=1), tf.random.normal([4, 3], seed=2)

        def loss(ids):
            return task(query, candidates, candidate_ids=ids, compute_metrics=False)

        ids = tf.constant([1, 2, 15, -1], tf.int64)
        with self.assertRaisesRegex(ValueError, message):
            loss(ids)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message):
            tf.function(loss)(ids)
        self.assertTrue(np.isnan(tf.function(loss, jit_compile=True)(ids).numpy()))
        self.assertTrue(
            np.isfinite(
                tf.function(loss, jit_compile=True)(tf.constant([1, 2, 9, 0], tf.int64)).numpy()
            )
        )

    def test_from_counts_with_pseudo_count_and_vocabulary(self):
        freq = frequency.StaticFrequency.from_counts(
            [3, 0, 1], pseudo_count=1.0, vocabulary=["a", "b", "c"]
        )
        self.assertAllClose(
            tf.exp(freq.log_q(tf.constant(["a", "b", "c", "zzz"]))), [4 / 7, 1 / 7, 2 / 7, 1 / 7]
        )  # Unknown ids: the smallest q.
        restored = tf.keras.layers.deserialize(tf.keras.layers.serialize(freq))
        self.assertEqual(restored.vocabulary, ["a", "b", "c"])
        self.assertAllClose(restored.log_q(tf.constant(["c"])), [np.log(2 / 7)])

    def test_from_dataset_of_integer_ids(self):
        scalars = tf.data.Dataset.from_tensor_slices(tf.constant([0, 2, 2, 1, 2], tf.int64))
        freq = frequency.StaticFrequency.from_dataset(scalars)
        self.assertAllClose(tf.exp(freq.log_q(tf.constant([0, 1, 2]))), [0.2, 0.2, 0.6])
        batches = tf.data.Dataset.from_tensor_slices(tf.constant([[0, 2], [2, 2]], tf.int32))
        freq = frequency.StaticFrequency.from_dataset(batches, num_items=4, pseudo_count=1.0)
        self.assertEqual(freq.num_items, 4)
        self.assertAllClose(
            tf.exp(freq.log_q(tf.constant([0, 1, 2, 3]))), [2 / 8, 1 / 8, 4 / 8, 1 / 8]
        )

    def test_from_dataset_of_string_ids(self):
        dataset = tf.data.Dataset.from_tensor_slices(tf.constant([["x", "y"], ["y", "y"]]))
        freq = frequency.StaticFrequency.from_dataset(dataset)
        self.assertEqual(sorted(freq.vocabulary), ["x", "y"])
        self.assertAllClose(tf.exp(freq.log_q(tf.constant(["y", "x"]))), [0.75, 0.25])

    def test_from_dataset_errors(self):
        floats = tf.data.Dataset.from_tensor_slices(tf.constant([0.5]))
        with self.assertRaisesRegex(
            TypeError,
            r"`dataset` must be a tf.data.Dataset of integer "
            r"or string id tensors; received dataset with element_spec="
            r"TensorSpec\(shape=\(\), dtype=tf.float32",
        ):
            frequency.StaticFrequency.from_dataset(floats)
        ids = tf.data.Dataset.from_tensor_slices(tf.constant([0, 5]))
        with self.assertRaisesRegex(ValueError, r"`dataset` yielded ids outside \[0, 3\): \[5\]"):
            frequency.StaticFrequency.from_dataset(ids, num_items=3, pseudo_count=1.0)
        with self.assertRaisesRegex(ValueError, r"`counts` must be a non-empty 1-D array"):
            frequency.StaticFrequency.from_dataset(ids)  # Ids 1-4 never seen, no pseudo-count.
        with self.assertRaisesRegex(
            ValueError,
            r"`pseudo_count` must be a non-negative number; "
            r"received pseudo_count=-1",
        ):
            frequency.StaticFrequency.from_counts([1], pseudo_count=-1)
        with self.assertRaisesRegex(
            ValueError,
            r"`vocabulary` must hold 2 distinct ids, one per "
            r"probability; received 2 ids \(1 distinct\)",
        ):
            frequency.StaticFrequency([0.5, 0.5], vocabulary=["a", "a"])
        freq = frequency.StaticFrequency([0.5, 0.5], vocabulary=["a", "b"])
        with self.assertRaisesRegex(
            TypeError,
            r"`ids` must be a string tensor \(this "
            r"StaticFrequency has a vocabulary\); received ids with dtype "
            r"int32",
        ):
            freq.log_q(tf.constant([0]))


def _buckets_of(estimator):
    """Maps an int id to the estimator's flat bucket indices (its own hash family)."""
    return lambda item: estimator._hash(tf.constant([item], tf.int64))[:, 0].numpy().tolist()


def _feed(estimator, stream, **kwargs):
    for ids in stream:
        estimator.update(tf.constant(ids, tf.int64), **kwargs)


def _estimators():
    return [
        (
            "hashed",
            lambda: frequency.HashedFrequencyEstimator(
                num_buckets=64, num_hashes=3, alpha=0.25, seed=3
            ),
        ),
        (
            "count_min",
            lambda: frequency.CountMinSketchEstimator(width=64, depth=3, decay=0.5, seed=3),
        ),
        (
            "count_min_conservative",
            lambda: frequency.CountMinSketchEstimator(
                width=16, depth=2, decay=0.9, conservative=True, seed=3
            ),
        ),
    ]


class HashFamilyTest(tf.test.TestCase):
    def test_buckets_are_in_range_deterministic_and_spread(self):
        family = frequency.HashFamily(depth=3, width=1000, seed=7)
        keys = tf.range(-50_000, 50_000, dtype=tf.int64) * 7919 + 2**40
        indices = family(keys).numpy()
        self.assertEqual(indices.shape, (3, 100_000))
        for row in range(3):
            buckets = indices[row] - row * 1000
            self.assertBetween(buckets.min(), 0, 999)
            self.assertBetween(buckets.max(), 0, 999)
            counts = np.bincount(buckets, minlength=1000)
            # 100 keys per bucket on average; a uniform hash stays within ~5 sigma.
            self.assertLess(np.abs(counts - 100).max(), 50)
        self.assertAllEqual(frequency.HashFamily(3, 1000, seed=7)(keys), indices)
        self.assertNotAllEqual(frequency.HashFamily(3, 1000, seed=8)(keys), indices)

    def test_string_ids_are_fingerprinted(self):
        keys = frequency.id_keys(tf.constant(["item-1", "item-2", "item-1"]))
        self.assertEqual(keys.dtype, tf.int64)
        self.assertEqual(keys[0], keys[2])
        self.assertNotEqual(keys[0], keys[1])
        with self.assertRaisesRegex(
            TypeError,
            r"`ids` must be an integer or string tensor of "
            r"item ids; received ids with dtype float32",
        ):
            frequency.id_keys(tf.constant([1.0]))


class HashedFrequencyEstimatorTest(tf.test.TestCase, parameterized.TestCase):
    def test_hand_computed_stream(self):
        # One hash, no collisions among ids 1-4 (checked), alpha = 1/2.
        est = frequency.HashedFrequencyEstimator(num_buckets=16, num_hashes=1, alpha=0.5)
        self.assertLen(set(sum((_buckets_of(est)(i) for i in range(1, 5)), [])), 4)
        _feed(est, [[1, 2, 2], [1], [3, 1]])
        # Id 1: first seen at step 1 (gap 1), then gaps 1, 1 -> B = 1.
        # Id 2: seen at step 1 only -> B = 1. Id 3: first seen at step 3 -> B = 3.
        # Id 4: never seen -> gap t + 1 = 4. Draws per step b = 6 / 3 = 2.
        self.assertEqual(int(est.step.numpy()), 3)
        self.assertAllClose(est.draws_per_step, 2.0)
        ids = tf.constant([1, 2, 3, 4])
        self.assertAllClose(tf.exp(est.log_step_inclusion_probability(ids)), [1, 1, 1 / 3, 1 / 4])
        self.assertAllClose(tf.exp(est.log_q(ids)), [1 / 2, 1 / 2, 1 / 6, 1 / 8])
        # n = b: the measured pi itself; n = 4: 1 - (1 - pi)^2.
        self.assertAllClose(
            tf.exp(est.log_inclusion_probability(ids, 2)), [1, 1, 1 / 3, 1 / 4], atol=1e-6
        )
        self.assertAllClose(
            tf.exp(est.log_inclusion_probability(ids[2:], 4)), [1 - (2 / 3) ** 2, 1 - (3 / 4) ** 2]
        )

    def test_zero_initialization_follows_the_paper(self):
        est = frequency.HashedFrequencyEstimator(
            num_buckets=16, num_hashes=1, alpha=0.5, initialization="zero"
        )
        _feed(est, [[1], [2], [2], [1]])
        # Id 1: steps 1 and 4: B = 0.5 * 1 = 0.5, then 0.5 * 0.5 + 0.5 * 3 = 1.75.
        # Id 2: steps 2 and 3: B = 0.5 * 2 = 1, then 0.5 * 1 + 0.5 * 1 = 1.
        self.assertAllClose(
            tf.exp(-est.log_step_inclusion_probability(tf.constant([1, 2]))), [1.75, 1.0]
        )

    def test_matches_the_reference_with_collisions(self):
        est = frequency.HashedFrequencyEstimator(num_buckets=8, num_hashes=2, alpha=0.3, seed=1)
        rng = np.random.default_rng(0)
        stream = [rng.integers(0, 40, size=6).tolist() for _ in range(30)]
        _feed(est, stream)
        ref = reference.hashed_frequency(stream, _buckets_of(est), alpha=0.3)
        ids = list(range(45))
        self.assertAllClose(
            tf.exp(-est.log_step_inclusion_probability(tf.constant(ids))),
            [ref(i)[0] for i in ids],
            rtol=1e-5,
        )
        self.assertAllClose(
            tf.exp(est.log_q(tf.constant(ids))), [ref(i)[1] for i in ids], rtol=1e-5
        )

    def test_masked_ids_leave_the_state_unchanged(self):
        masked = frequency.HashedFrequencyEstimator(num_buckets=4, num_hashes=2)
        plain = frequency.HashedFrequencyEstimator(num_buckets=4, num_hashes=2)
        for ids, mask in (([1, 0, 2], [True, False, True]), ([0, 3], [False, True])):
            masked.update(tf.constant(ids), mask=tf.constant(mask))
            plain.update(tf.constant([i for i, m in zip(ids, mask) if m]))
        for a, b in zip(masked.weights, plain.weights):
            if a.name.startswith("last_step") or a.name.startswith("gap"):
                a, b = a[:-1], b[:-1]  # The sink slot of masked writes is never read.
            self.assertAllEqual(a, b)

    def test_converges_to_the_inclusion_probability_on_a_zipf_stream(self):
        num_items, batch = 2000, 64
        q = np.arange(1, num_items + 1, dtype=np.float64) ** -1.0
        q /= q.sum()
        rng = np.random.default_rng(1)
        est = frequency.HashedFrequencyEstimator(num_buckets=8192, num_hashes=2, alpha=0.02)
        step = tf.function(est.update)
        for _ in range(1500):
            step(tf.constant(rng.choice(num_items, size=batch, p=q)))
        ids = np.arange(num_items)
        pi = 1 - (1 - q) ** batch
        log_pi = est.log_inclusion_probability(tf.constant(ids), batch).numpy()
        # Items seen every few steps (pi in [0.05, 0.9]) are measured within 0.15 nats.
        band = (pi > 0.05) & (pi < 0.9)
        self.assertGreater(band.sum(), 50)
        self.assertLess(np.median(np.abs(log_pi[band] - np.log(pi[band]))), 0.15)
        # The per-draw reading saturates at 1 / b: the top item (q = 0.12, ~8 per
        # step) reads q = 1/64, about 8 times (2 nats) too small.
        self.assertAllClose(np.exp(est.log_q(tf.constant([0])).numpy()), [1 / batch], rtol=1e-3)
        self.assertGreater(np.log(q[0] * batch), 2.0)

    def test_config_round_trip(self):
        est = frequency.HashedFrequencyEstimator(
            num_buckets=100, num_hashes=3, alpha=0.2, initialization="zero", seed=5, name="h"
        )
        restored = tf.keras.layers.deserialize(tf.keras.layers.serialize(est))
        self.assertIsInstance(restored, frequency.HashedFrequencyEstimator)
        self.assertEqual(restored.get_config(), est.get_config())
        self.assertEqual(
            (
                restored.num_buckets,
                restored.num_hashes,
                restored.alpha,
                restored.initialization,
                restored.seed,
            ),
            (100, 3, 0.2, "zero", 5),
        )
        # State: A (int64) and B (float32) per bucket plus a sink, and two counters.
        self.assertEqual(est.state_bytes, 301 * 12 + 16)

    @parameterized.named_parameters(
        (
            "buckets",
            dict(num_buckets=0),
            ValueError,
            r"`num_buckets` must be a positive integer; received num_buckets=0",
        ),
        (
            "hashes",
            dict(num_hashes=-1),
            ValueError,
            r"`num_hashes` must be a positive integer; received num_hashes=-1",
        ),
        (
            "alpha_zero",
            dict(alpha=0.0),
            ValueError,
            r"`alpha` must be a number in \(0, 1\]; received alpha=0.0",
        ),
        (
            "alpha_big",
            dict(alpha=1.5),
            ValueError,
            r"`alpha` must be a number in \(0, 1\]; received alpha=1.5",
        ),
        (
            "init",
            dict(initialization="mean"),
            ValueError,
            r"`initialization` must be one of 'first_gap', 'zero'; received initialization='mean'",
        ),
        (
            "seed",
            dict(seed=-2),
            ValueError,
            r"`seed` must be a non-negative integer; received seed=-2",
        ),
    )
    def test_bad_arguments(self, kwargs, error, message):
        with self.assertRaisesRegex(error, message):
            frequency.HashedFrequencyEstimator(**kwargs)


class CountMinSketchEstimatorTest(tf.test.TestCase, parameterized.TestCase):
    def test_hand_computed_stream(self):
        est = frequency.CountMinSketchEstimator(width=64, depth=2, decay=0.5)
        self.assertLen(set(sum((_buckets_of(est)(i) for i in range(1, 5)), [])), 8)
        _feed(est, [[1, 2, 2], [1], [3, 1]])
        # Counts after decay 1/2 per step: id 1: 1 -> 1.5 -> 1.75; id 2: 2 -> 1 -> 0.5;
        # id 3: 1; total 3 -> 2.5 -> 3.25. Id 4 reads min_count = 0.5.
        ids = tf.constant([1, 2, 3, 4])
        self.assertAllClose(tf.exp(est.log_q(ids)), np.array([1.75, 0.5, 1, 0.5]) / 3.25)
        self.assertAllClose(est.effective_draws, 3.25)
        q = np.array([1.75, 0.5, 1, 0.5]) / 3.25
        self.assertAllClose(tf.exp(est.log_inclusion_probability(ids, 3)), 1 - (1 - q) ** 3)

    @parameterized.parameters(False, True)
    def test_matches_the_reference_through_rescales(self, conservative):
        # decay 0.5 rescales the stored counts every 43 steps; 100 steps cross two.
        est = frequency.CountMinSketchEstimator(
            width=8, depth=3, decay=0.5, conservative=conservative, seed=2
        )
        rng = np.random.default_rng(0)
        stream = [rng.integers(0, 30, size=10).tolist() for _ in range(100)]
        _feed(est, stream)
        self.assertLess(int(est.steps_since_rescale.numpy()), 43)
        ref = reference.count_min(stream, _buckets_of(est), decay=0.5, conservative=conservative)
        ids = list(range(35))
        self.assertAllClose(tf.exp(est.log_q(tf.constant(ids))), [ref(i) for i in ids], rtol=1e-4)

    def test_conservative_update_never_underestimates_and_is_tighter(self):
        rng = np.random.default_rng(3)
        stream = [rng.integers(0, 200, size=50).tolist() for _ in range(20)]
        plain = frequency.CountMinSketchEstimator(width=32, depth=2, decay=1.0)
        conservative = frequency.CountMinSketchEstimator(
            width=32, depth=2, decay=1.0, conservative=True
        )
        _feed(plain, stream)
        _feed(conservative, stream)
        true = np.bincount(np.ravel(stream), minlength=200) / np.size(stream)
        ids = tf.range(200)
        q_plain = np.exp(plain.log_q(ids).numpy())
        q_conservative = np.exp(conservative.log_q(ids).numpy())
        seen = true > 0
        self.assertTrue(np.all(q_conservative[seen] >= true[seen] * (1 - 1e-5)))
        self.assertTrue(np.all(q_conservative <= q_plain * (1 + 1e-5)))
        self.assertLess(np.abs(q_conservative - true).sum(), 0.7 * np.abs(q_plain - true).sum())

    def test_converges_to_q_on_a_zipf_stream(self):
        num_items, batch = 1000, 256
        q = np.arange(1, num_items + 1, dtype=np.float64) ** -1.0
        q /= q.sum()
        rng = np.random.default_rng(2)
        est = frequency.CountMinSketchEstimator(width=4096, depth=4, decay=1.0)
        step = tf.function(est.update)
        for _ in range(400):
            step(tf.constant(rng.choice(num_items, size=batch, p=q)))
        errors = np.abs(est.log_q(tf.range(num_items)).numpy() - np.log(q))
        # The top 100 items have >= 140 expected draws each.
        self.assertLess(np.median(errors[:100]), 0.05)
        self.assertLess(errors[:10].max(), 0.05)
        self.assertAllClose(np.exp(est.log_q(tf.range(num_items)).numpy()).sum(), 1.0, atol=0.05)

    def test_config_round_trip(self):
        est = frequency.CountMinSketchEstimator(
            width=10, depth=3, decay=0.9, conservative=True, min_count=2.0, seed=4, name="cms"
        )
        restored = tf.keras.layers.deserialize(tf.keras.layers.serialize(est))
        self.assertIsInstance(restored, frequency.CountMinSketchEstimator)
        self.assertEqual(restored.get_config(), est.get_config())
        self.assertEqual(
            (
                restored.width,
                restored.depth,
                restored.decay,
                restored.conservative,
                restored.min_count,
                restored.seed,
            ),
            (10, 3, 0.9, True, 2.0, 4),
        )
        self.assertEqual(est.state_bytes, 30 * 4 + 4 + 8 + 8)

    @parameterized.named_parameters(
        (
            "width",
            dict(width=0),
            ValueError,
            r"`width` must be a positive integer; received width=0",
        ),
        (
            "depth",
            dict(depth=1.5),
            ValueError,
            r"`depth` must be a positive integer; received depth=1.5",
        ),
        (
            "decay",
            dict(decay=0.0),
            ValueError,
            r"`decay` must be a number in \(0, 1\]; received decay=0.0",
        ),
        (
            "conservative",
            dict(conservative="yes"),
            TypeError,
            r"`conservative` must be a bool; received conservative='yes'",
        ),
        (
            "min_count",
            dict(min_count=0),
            ValueError,
            r"`min_count` must be a positive number; received min_count=0",
        ),
    )
    def test_bad_arguments(self, kwargs, error, message):
        with self.assertRaisesRegex(error, message):
            frequency.CountMinSketchEstimator(**kwargs)


class StreamingEstimatorTest(tf.test.TestCase, parameterized.TestCase):
    """What every streaming estimator guarantees: graph/XLA, strings, checkpoints, distribution."""

    def _stream(self, steps=12, batch=8, seed=0):
        rng = np.random.default_rng(seed)
        return rng.integers(0, 50, size=(steps, batch))

    def _assert_same_state(self, a, b, rtol=0.0):
        self.assertEqual(len(a.weights), len(b.weights))
        for x, y in zip(a.weights, b.weights):
            if rtol and x.dtype.is_floating:
                self.assertAllClose(x, y, rtol=rtol, atol=0.0, msg=x.name)
            else:
                self.assertAllEqual(x, y, msg=x.name)

    @parameterized.named_parameters(*_estimators())
    def test_reads_uniform_before_the_first_update(self, make):
        estimator = make()
        buckets = getattr(estimator, "num_buckets", getattr(estimator, "width", None))
        ids = tf.constant([1, 7, 49], tf.int64)
        self.assertAllClose(estimator.log_q(ids), np.full(3, -np.log(buckets)))
        estimator.update(ids, mask=tf.constant([False, False, False]))  # Nothing real fed.
        if isinstance(estimator, frequency.CountMinSketchEstimator):
            self.assertAllClose(estimator.log_q(ids), np.full(3, -np.log(buckets)))
        # So a loss read before training (an evaluation) is the uniform-Q loss, not NaN or a
        # division by 1 - q = 0.
        table = tf.random.normal([51, 4], seed=1)
        query = tf.random.normal([4, 4], seed=2)
        positives = tf.constant([1, 2, 3, 2], tf.int64)
        embed = lambda i: tf.gather(table, i)  # noqa: E731
        uniform = lambda i: tf.fill(tf.shape(i), 1.0 / buckets)  # noqa: E731
        losses = []
        for probabilities in (make(), uniform):
            tf.random.set_seed(0)
            task = LogQRetrieval(
                correction="improved",
                sampler=negatives.MixedSampler(
                    50, 4, 4, probabilities=probabilities, first_id=1, seed=5
                ),
            )
            losses.append(
                task(
                    query,
                    embed(positives),
                    candidate_ids=positives,
                    candidate_embedding_fn=embed,
                    training=False,
                )
            )
        self.assertTrue(np.isfinite(losses[0].numpy()))
        self.assertAllClose(losses[0], losses[1])

    @parameterized.named_parameters(*_estimators())
    def test_tf_function_and_xla_match_eager(self, make):
        stream = self._stream()
        eager, compiled = make(), make()
        _feed(eager, stream)

        @tf.function(jit_compile=True)
        def step(ids):
            compiled.update(ids)
            return compiled.log_q(ids), compiled.log_inclusion_probability(ids, 5)

        for ids in stream:
            step(tf.constant(ids, tf.int64))
        # XLA may fuse float arithmetic differently: equal to the last bit or two.
        self._assert_same_state(eager, compiled, rtol=1e-6)
        ids = tf.range(60)
        self.assertAllClose(eager.log_q(ids), compiled.log_q(ids))

    @parameterized.named_parameters(*_estimators())
    def test_string_ids_hash_like_their_fingerprints(self, make):
        strings = np.array([f"item-{i}" for i in range(50)])
        stream = self._stream()
        by_string, by_key = make(), make()
        for ids in stream:
            by_string.update(tf.constant(strings[ids]))
            by_key.update(frequency.id_keys(tf.constant(strings[ids])))
        self._assert_same_state(by_string, by_key)
        self.assertAllClose(
            by_string.log_q(tf.constant(strings[:5])),
            by_key.log_q(frequency.id_keys(tf.constant(strings[:5]))),
        )
        self.assertAllClose(
            tf.function(by_string.log_q)(tf.constant(strings[:5])),
            by_string.log_q(tf.constant(strings[:5])),
        )

    @parameterized.named_parameters(*_estimators())
    def test_checkpoint_in_the_middle_of_a_stream(self, make):
        stream = self._stream(steps=20)
        uninterrupted = make()
        _feed(uninterrupted, stream)

        first = make()
        _feed(first, stream[:9])
        directory = tempfile.mkdtemp()
        path = tf.train.Checkpoint(estimator=first).write(os.path.join(directory, "ckpt"))
        resumed = make()
        tf.train.Checkpoint(estimator=resumed).read(path).assert_consumed()
        self.assertEqual(int(resumed.step.numpy()), 9)
        _feed(resumed, stream[9:])
        self._assert_same_state(uninterrupted, resumed)

    @parameterized.named_parameters(*_estimators())
    def test_model_save_weights_carries_the_state(self, make):
        class Model(tf.keras.Model):
            def __init__(self):
                super().__init__()
                self.estimator = make()

        stream = self._stream()
        model = Model()
        _feed(model.estimator, stream)
        self.assertNotEmpty(model.non_trainable_variables)
        path = os.path.join(tempfile.mkdtemp(), "weights")
        model.save_weights(path)
        restored = Model()
        restored.load_weights(path).assert_consumed()
        self._assert_same_state(model.estimator, restored.estimator)

    @parameterized.named_parameters(*_estimators())
    def test_mirrored_strategy_equals_a_single_device_run(self, make):
        # Each global batch of 8 ids is split 4 + 4 over two logical CPUs; the
        # replicas' ids are gathered and one identical update applied.
        devices = [d.name for d in tf.config.list_logical_devices("CPU")[:2]]
        if len(devices) < 2:
            self.skipTest("needs two logical CPU devices (set up in tests/conftest.py)")
        stream = self._stream()
        single = make()
        _feed(single, stream)

        strategy = conftest.mirrored_strategy()
        with strategy.scope():
            distributed = make()
        dataset = tf.data.Dataset.from_tensor_slices(tf.constant(stream.ravel(), tf.int64))
        dataset = strategy.experimental_distribute_dataset(dataset.batch(8))

        @tf.function
        def step(ids):
            distributed.update(ids)
            return distributed.log_q(ids)

        for ids in dataset:
            strategy.run(step, args=(ids,))
        for ref, variable in zip(single.weights, distributed.weights):
            copies = strategy.experimental_local_results(variable)
            self.assertLen(copies, 2)
            for copy in copies:
                self.assertAllClose(copy, ref, msg=variable.name)

        # In a cross-replica context, update() applies the same update to every copy.
        with strategy.scope():
            distributed.update(tf.constant([1, 2, 3], tf.int64))
        single.update(tf.constant([1, 2, 3], tf.int64))
        for ref, variable in zip(single.weights, distributed.weights):
            for copy in strategy.experimental_local_results(variable):
                self.assertAllClose(copy, ref, msg=variable.name)

    @parameterized.named_parameters(*_estimators())
    def test_bad_ids_and_num_draws(self, make):
        est = make()
        with self.assertRaisesRegex(
            TypeError,
            r"`ids` must be an integer or string tensor of "
            r"item ids; received ids with dtype float32",
        ):
            est.update(tf.constant([1.0]))
        with self.assertRaisesRegex(
            TypeError,
            r"`ids` must be an integer or string tensor of "
            r"item ids; received ids with dtype float64",
        ):
            est.log_q(tf.constant([1.0], tf.float64))
        with self.assertRaisesRegex(TypeError, r"`mask` must be a bool tensor"):
            est.update(tf.constant([1]), mask=tf.constant([1]))
        for bad in (0, -3):
            with self.assertRaisesRegex(
                ValueError,
                r"`num_draws` must be a positive integer; "
                rf"received num_draws={bad}",
            ):
                est.log_inclusion_probability(tf.constant([1]), bad)
        with self.assertRaisesRegex(
            ValueError,
            r"`num_draws` must be a positive integer; "
            r"received num_draws with invalid values \[0.\]",
        ):
            est.log_inclusion_probability(tf.constant([1]), tf.constant(0))

        @tf.function
        def graph(n):
            return est.log_inclusion_probability(tf.constant([1]), n)

        with self.assertRaisesRegex(
            tf.errors.InvalidArgumentError, r"`num_draws` must be a positive integer"
        ):
            graph(tf.constant(0))


if __name__ == "__main__":
    tf.test.main()
