"""Tests of tfrs_logq.negatives: masks, log Q formulas, and unbiasedness on a known catalog."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from tests import reference
from tfrs_logq import _ops
from tfrs_logq import frequency
from tfrs_logq import negatives

NUM_ITEMS, ZIPF_Q, SCORES = reference.NUM_ITEMS, reference.ZIPF_Q, reference.SCORES


def _z_hat_draws(sampler, positive, batch_size, trials, seed, to_q_prime=True):
    """Z_hat = (1/n) sum_i m_i exp(s_i - log Q'_i) for a row with a fixed positive, per trial.

    The batch is the fixed positive plus batch_size - 1 draws from the Zipf q:
    what in-batch sampling sees. Q' is what the improved loss uses;
    `to_q_prime=False` skips the conversion Q -> Q' (to show that it matters).
    """
    log_q_table = tf.constant(np.log(ZIPF_Q)[np.newaxis, :], tf.float32)
    scores = tf.constant(SCORES)
    tf.random.set_seed(seed)

    @tf.function
    def one_trial():
        others = tf.random.categorical(log_q_table, batch_size - 1)[0]
        batch = tf.concat([tf.constant([positive], tf.int64), others], axis=0)
        neg = sampler(batch, batch)
        log_q = tf.broadcast_to(neg.log_q, tf.shape(neg.mask))[0]
        if to_q_prime and not neg.log_q_excludes_positive:
            log_q = log_q - _ops.log1mexp(neg.positive_log_q[0])
        valid = neg.mask[0]
        ids = neg.ids if neg.ids.shape.rank == 1 else neg.ids[0]  # Per-row draws: row 0's.
        terms = tf.where(valid, tf.exp(tf.gather(scores, ids) - log_q), 0.0)
        count = tf.reduce_sum(tf.cast(valid, tf.float32))
        return tf.reduce_sum(terms) / tf.maximum(count, 1.0), count

    values = [one_trial() for _ in range(trials)]
    z = np.array([z for z, n in values if n > 0], np.float64)
    return z


_truth = reference.partition_without


class _Padded:
    """Calls `sampler` with 5 padding slots appended to the pool and a candidate mask (the
    static-shape path of sequence batches)."""

    def __init__(self, sampler):
        self.sampler = sampler

    def __call__(self, positive_ids, candidate_ids):
        ids = tf.concat([candidate_ids, tf.zeros([5], candidate_ids.dtype)], axis=0)
        mask = tf.concat([tf.ones_like(candidate_ids, tf.bool), tf.zeros([5], tf.bool)], axis=0)
        return self.sampler(positive_ids, ids, candidate_mask=mask)


SAMPLER_CASES = dict(
    in_batch=lambda: negatives.InBatchSampler(probabilities=ZIPF_Q),
    in_batch_capped=lambda: negatives.InBatchSampler(max_pool_size=5, probabilities=ZIPF_Q),
    in_batch_dedup=lambda: negatives.InBatchSampler(deduplicate=True, probabilities=ZIPF_Q),
    in_batch_dedup_capped=lambda: negatives.InBatchSampler(
        deduplicate=True, max_pool_size=4, probabilities=ZIPF_Q
    ),
    uniform=lambda: negatives.UniformSampler(NUM_ITEMS, 8),
    mixed_exact=lambda: negatives.MixedSampler(NUM_ITEMS, 4, 4, probabilities=ZIPF_Q),
    mixed_exact_per_row=lambda: negatives.MixedSampler(
        NUM_ITEMS, 4, 4, per_row=True, probabilities=ZIPF_Q
    ),
    in_batch_capped_slots=lambda: _Padded(
        negatives.InBatchSampler(max_pool_size=5, probabilities=ZIPF_Q)
    ),
    in_batch_dedup_capped_slots=lambda: _Padded(
        negatives.InBatchSampler(deduplicate=True, max_pool_size=4, probabilities=ZIPF_Q)
    ),
    mixed_exact_slots=lambda: _Padded(
        negatives.MixedSampler(NUM_ITEMS, 4, 4, probabilities=ZIPF_Q)
    ),
)


# The known catalog with string ids: item i of the Zipf catalog is "movie i". The samplers'
# vocabulary lists them in another order, so a draw's position in it is not its item.
CATALOG = np.array([f"movie {i}" for i in range(NUM_ITEMS)])
SHUFFLED = CATALOG[np.random.default_rng(1).permutation(NUM_ITEMS)]


class _Strings:
    """Calls `sampler` with the catalog's string ids and reads its negatives back as the
    catalog's integer items (for `_z_hat_draws`, which scores items)."""

    def __init__(self, sampler):
        self.sampler = sampler
        self.strings = tf.constant(CATALOG)
        self.items = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(self.strings, tf.range(NUM_ITEMS, dtype=tf.int64)),
            default_value=-1,
        )

    def __call__(self, positive_ids, candidate_ids):
        out = self.sampler(
            tf.gather(self.strings, positive_ids), tf.gather(self.strings, candidate_ids)
        )
        return out._replace(ids=self.items.lookup(out.ids))


SAMPLER_CASES.update(
    uniform_string_lookup=lambda: _Strings(
        negatives.UniformSampler.from_lookup(tf.keras.layers.StringLookup(vocabulary=SHUFFLED), 8)
    ),
    mixed_exact_string_vocabulary=lambda: _Strings(
        negatives.MixedSampler(
            num_uniform=4,
            num_in_batch=4,
            vocabulary=SHUFFLED,
            probabilities=frequency.StaticFrequency(ZIPF_Q, vocabulary=CATALOG),
        )
    ),
)


class UnbiasednessTest(tf.test.TestCase, parameterized.TestCase):
    """Each sampler's log Q makes Z_hat unbiased for sum_{d != p} e^{s_d} (docs/design.md)."""

    @parameterized.product(case=sorted(SAMPLER_CASES), positive=[0, 2, 45])
    def test_z_hat_is_unbiased(self, case, positive):
        z = _z_hat_draws(
            SAMPLER_CASES[case](), positive, batch_size=9, trials=3000, seed=positive + 7
        )
        truth = _truth(positive)
        standard_error = z.std() / np.sqrt(len(z))
        # The test has power: the Monte Carlo error is a few percent of the truth.
        self.assertLess(standard_error / truth, 0.05)
        self.assertLess(
            abs(z.mean() - truth),
            4.0 * standard_error,
            f"{case}, p={positive}: mean {z.mean():.3f} vs truth {truth:.3f} "
            f"(se {standard_error:.3f})",
        )

    def test_paper_mixture_is_biased(self):
        # The paper's simplification corrects uniform draws with q: tail items
        # drawn uniformly get weights 1/q instead of about 2|D|, far too large.
        z = _z_hat_draws(
            negatives.MixedSampler(NUM_ITEMS, 4, 4, mixture="paper", probabilities=ZIPF_Q),
            positive=0,
            batch_size=9,
            trials=1500,
            seed=3,
        )
        truth = _truth(0)
        self.assertGreater(z.mean() - truth, 10.0 * z.std() / np.sqrt(len(z)))

    @parameterized.parameters(0, 45)
    def test_unigram_log_q_of_a_deduplicated_pool_is_biased(self, positive):
        # The paper's released in-batch pool (distinct targets, k of them drawn) corrected
        # with the unigram q, as its code does: a head item is in the pool at most once but
        # weighted as one draw of q, the pool's size is not n draws. The same pool with the
        # Horvitz-Thompson log Q is unbiased (test_z_hat_is_unbiased, in_batch_dedup_capped).
        # Measured at batch 64 on this 50-item Zipf catalog: E[Z_hat] / Z = 1.53 (p = 0) and
        # 1.82 (p = 45) with the unigram q, 1.015 and 0.991 (se 0.02) with Horvitz-Thompson.
        sampler = negatives.InBatchSampler(
            deduplicate=True, max_pool_size=4, log_q="unigram", probabilities=ZIPF_Q
        )
        z = _z_hat_draws(sampler, positive, batch_size=64, trials=1500, seed=positive + 11)
        truth = _truth(positive)
        standard_error = z.std() / np.sqrt(len(z))
        self.assertGreater(
            abs(z.mean() - truth),
            10.0 * standard_error,
            f"mean {z.mean():.3f} vs truth {truth:.3f} (se {standard_error:.3f})",
        )

    def test_q_instead_of_q_prime_is_biased_for_a_head_positive(self):
        # Without the Q' conversion, valid in-batch draws of a row whose positive
        # has q(p) = 0.22 are weighted 1/q instead of 1/q': Z_hat is 1/(1 - q(p))
        # = 1.29 times too large.
        sampler = negatives.InBatchSampler(probabilities=ZIPF_Q)
        z = _z_hat_draws(sampler, positive=0, batch_size=9, trials=3000, seed=4, to_q_prime=False)
        truth = _truth(0)
        self.assertGreater(z.mean() - truth, 10.0 * z.std() / np.sqrt(len(z)))
        self.assertAllClose(z.mean() / truth, 1 / (1 - ZIPF_Q[0]), rtol=0.04)


class _TwoQuantities(frequency.FrequencyEstimator):
    """A source whose per-draw and inclusion readings are told apart by value."""

    def log_q(self, ids):
        return tf.fill(tf.shape(ids), np.log(0.01).astype(np.float32))

    def log_inclusion_probability(self, ids, num_draws):
        return tf.fill(tf.shape(ids), np.log(0.5).astype(np.float32))


class MatchingQuantityTest(tf.test.TestCase):
    """Samplers read per-draw q without deduplication, the inclusion probability with it."""

    def test_each_sampler_reads_its_quantity(self):
        ids = tf.constant([3, 1, 3, 2], tf.int64)
        plain = negatives.InBatchSampler(probabilities=_TwoQuantities())(ids, ids)
        self.assertAllClose(plain.log_q, np.full(4, np.log(0.01)))
        dedup = negatives.InBatchSampler(deduplicate=True, probabilities=_TwoQuantities())(ids, ids)
        num_valid = dedup.mask.numpy().sum(axis=1)
        self.assertAllClose(
            dedup.log_q, np.log(0.5) - np.log(num_valid)[:, None] + np.zeros([1, 3])
        )
        mixed = negatives.MixedSampler(10, 2, 4, mixture="paper", probabilities=_TwoQuantities())(
            ids, ids
        )
        self.assertAllClose(mixed.log_q, np.full(6, np.log(0.01)))


class AccidentalHitMaskTest(tf.test.TestCase):
    def test_string_ids_compare_as_the_strings_do(self):
        rng = np.random.default_rng(0)
        vocabulary = np.array([f"title {i}" for i in range(30)])
        positives = vocabulary[rng.integers(0, 30, 40)]
        for shape in ((25,), (40, 6)):  # Shared and per-row negatives.
            negatives_ = vocabulary[rng.integers(0, 30, shape)]
            got = negatives.accidental_hit_mask(tf.constant(positives), tf.constant(negatives_))
            want = positives[:, None] != (negatives_ if len(shape) == 2 else negatives_[None])
            self.assertAllEqual(got, want)
            self.assertFalse(want.all())  # There are hits to find.


class InBatchSamplerTest(tf.test.TestCase):
    def test_pool_mask_and_log_q(self):
        ids = tf.constant([3, 1, 3, 2], tf.int64)
        emb = tf.reshape(tf.range(8, dtype=tf.float32), [4, 2])
        q = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
        out = negatives.InBatchSampler(probabilities=q)(ids, ids, emb)
        self.assertAllEqual(out.ids, [3, 1, 3, 2])
        self.assertAllEqual(out.embeddings, emb)
        self.assertAllEqual(
            out.mask,
            [
                [False, True, False, True],
                [True, False, True, True],
                [False, True, False, True],
                [True, True, True, False],
            ],
        )
        self.assertAllClose(out.log_q, np.log(q[[3, 1, 3, 2]]))
        self.assertAllClose(out.positive_log_q, np.log(q[[3, 1, 3, 2]]))
        self.assertFalse(out.log_q_excludes_positive)

    def test_deduplicated_horvitz_thompson_log_q(self):
        ids = tf.constant([3, 1, 3, 2, 1], tf.int64)
        emb = tf.reshape(tf.range(10, dtype=tf.float32), [5, 2])
        q = np.array([0.1, 0.2, 0.3, 0.4], np.float64)
        out = negatives.InBatchSampler(deduplicate=True, probabilities=q)(ids, ids, emb)
        self.assertAllEqual(out.ids, [3, 1, 2])
        self.assertAllEqual(out.embeddings, [[0, 1], [2, 3], [6, 7]])  # First occurrences.
        self.assertTrue(out.log_q_excludes_positive)
        mask = out.mask.numpy()
        self.assertAllEqual(mask[0], [False, True, True])
        pi = 1 - (1 - q[[3, 1, 2]]) ** 4  # Four other rows are the draws.
        num_valid = mask.sum(axis=1)
        want = np.log(pi)[None, :] - np.log(num_valid)[:, None]
        self.assertAllClose(out.log_q, want, rtol=1e-5)
        self.assertAllClose(
            out.positive_log_q,
            np.log(1 - (1 - q[[3, 1, 3, 2, 1]]) ** 4) - np.log(num_valid),
            rtol=1e-5,
        )

    def test_unigram_log_q_of_a_deduplicated_pool(self):
        ids = tf.constant([3, 1, 3, 2, 1], tf.int64)
        q = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
        out = negatives.InBatchSampler(deduplicate=True, log_q="unigram", probabilities=q)(ids, ids)
        self.assertAllEqual(out.ids, [3, 1, 2])
        self.assertAllClose(out.log_q, np.log(q[[3, 1, 2]]))
        self.assertAllClose(out.positive_log_q, np.log(q[[3, 1, 3, 2, 1]]))
        self.assertFalse(out.log_q_excludes_positive)  # The improved loss converts to Q'.

    def test_released_pool_draws_k_distinct_targets_uniformly(self):
        # The paper's released pool: k = 3 of the batch's 9 distinct targets, without
        # replacement, each equally likely whatever its multiplicity (item 1 is 12 of the
        # batch's 20 targets). A chi-square test of the inclusion counts against k/9 passes;
        # the same test rejects the pool without deduplication (positions drawn uniformly:
        # item 1 is in it far more often), so it can fail.
        targets = tf.constant([1] * 12 + list(range(2, 10)), tf.int64)
        distinct = np.arange(1, 10)

        def chi_square(sampler, trials=3000):
            tf.random.set_seed(5)
            draw = tf.function(lambda: sampler(targets, targets).ids)
            counts = np.zeros(10)
            for _ in range(trials):
                ids = draw().numpy()
                if sampler.deduplicate:
                    self.assertLen(ids, 3)
                    self.assertLen(set(ids.tolist()), 3)
                    self.assertTrue(set(ids.tolist()) <= set(distinct.tolist()))
                np.add.at(counts, ids, 1)
            expected = trials * 3 / 9
            return float(np.sum((counts[distinct] - expected) ** 2 / expected))

        # 27.88: the 0.999 quantile of chi-square with 8 degrees of freedom.
        self.assertLess(
            chi_square(negatives.InBatchSampler(deduplicate=True, max_pool_size=3)), 27.88
        )
        self.assertGreater(chi_square(negatives.InBatchSampler(max_pool_size=3)), 27.88)

    def test_slots_equal_the_packed_pool(self):
        # With a candidate mask the pool keeps its padding and duplicates as masked slots;
        # without a cap it is the packed pool, slot for slot where valid.
        ids = tf.constant([3, 0, 1, 3, 2, 0, 1], tf.int64)
        valid = tf.constant([True, False, True, True, True, False, True])
        emb = tf.reshape(tf.range(14, dtype=tf.float32), [7, 2])
        q = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
        positives = tf.constant([3, 1, 3, 2, 1], tf.int64)
        packed = negatives.InBatchSampler(deduplicate=True, probabilities=q)(
            positives, tf.constant([3, 1, 3, 2, 1], tf.int64), tf.gather(emb, [0, 2, 3, 4, 6])
        )
        slots = negatives.InBatchSampler(deduplicate=True, probabilities=q)(
            positives, ids, emb, candidate_mask=valid
        )
        self.assertEqual(slots.ids.shape, (7,))
        # Slots 0, 2 and 4 hold the first 3, 1 and 2; the others are padding or copies.
        self.assertAllEqual(tf.gather(slots.ids, [0, 2, 4]), packed.ids)
        self.assertAllEqual(tf.gather(slots.embeddings, [0, 2, 4]), packed.embeddings)
        self.assertAllEqual(tf.gather(slots.mask, [0, 2, 4], axis=1), packed.mask)
        self.assertFalse(slots.mask.numpy()[:, [1, 3, 5, 6]].any())
        self.assertAllClose(tf.gather(slots.log_q, [0, 2, 4], axis=1), packed.log_q)
        self.assertAllClose(slots.positive_log_q, packed.positive_log_q)
        # Under XLA too: the shapes are static.
        capped = negatives.InBatchSampler(
            deduplicate=True, max_pool_size=2, probabilities=q, seed=1
        )
        fn = tf.function(
            lambda: capped(positives, ids, emb, candidate_mask=valid).log_q, jit_compile=True
        )
        self.assertEqual(fn().shape, (5, 2))

    def test_cap_and_candidate_mask(self):
        ids = tf.range(20, dtype=tf.int64)
        sampler = negatives.InBatchSampler(max_pool_size=6, seed=1)
        out = sampler(ids[:4], ids, candidate_mask=ids % 2 == 0)
        self.assertEqual(out.ids.shape[0], 6)
        self.assertEqual(len(set(out.ids.numpy())), 6)
        self.assertTrue(np.all(out.ids.numpy() % 2 == 0))
        self.assertIsNone(out.embeddings)
        self.assertIsNone(out.log_q)

    def test_string_ids(self):
        ids = tf.constant(["a", "b", "a"])
        out = negatives.InBatchSampler(deduplicate=True)(ids, ids)
        self.assertAllEqual(out.ids, [b"a", b"b"])
        self.assertAllEqual(out.mask, [[False, True], [True, False], [False, True]])

    def test_callable_probabilities_equal_table(self):
        q = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
        ids = tf.constant([3, 1, 0], tf.int64)
        from_table = negatives.InBatchSampler(deduplicate=True, probabilities=q)(ids, ids)
        from_fn = negatives.InBatchSampler(
            deduplicate=True, probabilities=lambda i: tf.gather(q, i)
        )(ids, ids)
        self.assertAllClose(from_table.log_q, from_fn.log_q)

    def test_serialization_round_trip(self):
        sampler = negatives.InBatchSampler(
            deduplicate=True,
            max_pool_size=7,
            probabilities=[0.25, 0.75],
            seed=3,
            name="ib",
            log_q="unigram",
        )
        restored = tf.keras.layers.deserialize(tf.keras.layers.serialize(sampler))
        self.assertIsInstance(restored, negatives.InBatchSampler)
        self.assertEqual(restored.get_config(), sampler.get_config())
        ids = tf.constant([0, 1], tf.int64)
        self.assertAllClose(restored(ids, ids).log_q, sampler(ids, ids).log_q)

    def test_errors(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`max_pool_size` must be a positive integer; "
            r"received max_pool_size=0",
        ):
            negatives.InBatchSampler(max_pool_size=0)
        with self.assertRaisesRegex(
            TypeError,
            r"`deduplicate` must be a bool; received "
            r"deduplicate=1",
        ):
            negatives.InBatchSampler(deduplicate=1)
        with self.assertRaisesRegex(
            ValueError,
            r"`log_q` must be one of 'horvitz_thompson', "
            r"'unigram'; received log_q='raw'",
        ):
            negatives.InBatchSampler(log_q="raw")
        with self.assertRaisesRegex(
            ValueError,
            r"`probabilities` must hold probabilities in "
            r"\(0, 1\]; received probabilities with invalid values "
            r"\[0. 2.\]",
        ):
            negatives.InBatchSampler(probabilities=[0.0, 0.5, 2.0])
        with self.assertRaisesRegex(
            TypeError,
            r"`candidate_ids` must be an integer or string "
            r"tensor of item ids; received candidate_ids with dtype "
            r"float32",
        ):
            negatives.InBatchSampler()(tf.constant([1]), tf.constant([1.0]))
        with self.assertRaisesRegex(
            ValueError,
            r"`seed` must be an integer or None; received "
            r"seed=1.5",
        ):
            negatives.InBatchSampler(seed=1.5)
        with self.assertRaisesRegex(
            ValueError,
            r"`probabilities\(ids\)` must hold "
            r"probabilities in \(0, 1\]",
        ):
            negatives.InBatchSampler(probabilities=lambda i: tf.zeros(tf.shape(i)))(
                tf.constant([1]), tf.constant([1])
            )


class _BadSource(frequency.FrequencyEstimator):
    """A source that reads log q = +0.5 (q = 1.65) for id 2, and inclusion log pi = NaN."""

    def log_q(self, ids):
        return tf.where(tf.equal(ids, 2), 0.5, np.log(0.1).astype(np.float32))

    def log_inclusion_probability(self, ids, num_draws):
        return tf.fill(tf.shape(ids), float("nan"))


class CheckedAtTheSourceTest(tf.test.TestCase, parameterized.TestCase):
    """A sampler checks the log Q it reads from its source, once per step; the loss then
    skips its own check of the [batch, n] log Q (`Negatives.log_q_checked`)."""

    SAMPLERS = dict(
        in_batch=(
            lambda: negatives.InBatchSampler(probabilities=_BadSource()),
            r"`probabilities.log_q\(ids\)` must hold log-probabilities.*invalid values "
            r"\[0.5 0.5",
        ),
        dedup=(
            lambda: negatives.InBatchSampler(deduplicate=True, probabilities=_BadSource()),
            r"`probabilities.log_inclusion_probability\(ids\)` must hold log-probabilities",
        ),
        mixed=(
            lambda: negatives.MixedSampler(10, 3, 4, probabilities=_BadSource(), seed=0),
            r"`probabilities.log_q\(ids\)` must hold log-probabilities.*invalid values "
            r"\[0.5 0.5",
        ),
    )

    @parameterized.parameters("in_batch", "dedup", "mixed")
    def test_bad_source_is_named_eagerly_and_in_a_graph(self, name):
        from tfrs_logq import LogQRetrieval  # pylint: disable=import-outside-toplevel

        make, pattern = self.SAMPLERS[name]
        table = tf.random.normal([10, 3], seed=0)
        ids = tf.constant([2, 1, 3, 2], tf.int64)

        task = LogQRetrieval(correction="improved", sampler=make())

        def loss():
            return task(
                tf.random.normal([4, 3], seed=1),
                tf.gather(table, ids),
                candidate_ids=ids,
                candidate_embedding_fn=lambda i: tf.gather(table, i),
            )

        with self.assertRaisesRegex(ValueError, pattern):
            loss()
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, pattern.split(".*")[0]):
            tf.function(loss)()

    def test_library_samplers_mark_their_log_q_checked(self):
        ids = tf.constant([3, 1, 3, 2], tf.int64)
        for sampler in (
            negatives.InBatchSampler(probabilities=ZIPF_Q),
            negatives.InBatchSampler(deduplicate=True, probabilities=ZIPF_Q),
            negatives.UniformSampler(NUM_ITEMS, 4),
            negatives.MixedSampler(NUM_ITEMS, 2, 4, probabilities=ZIPF_Q),
            negatives.MixedSampler(NUM_ITEMS, 2, 4, mixture="paper", probabilities=ZIPF_Q),
        ):
            self.assertTrue(sampler(ids, ids).log_q_checked, type(sampler).__name__)


class UniformSamplerTest(tf.test.TestCase):
    def test_draws_ids_in_range_and_log_q(self):
        sampler = negatives.UniformSampler(num_items=10, num_negatives=500, first_id=1, seed=2)
        table = tf.random.normal([11, 3])
        out = sampler(tf.constant([1, 5], tf.int64), embedding_fn=lambda i: tf.gather(table, i))
        ids = out.ids.numpy()
        self.assertTrue(np.all((ids >= 1) & (ids <= 10)))
        self.assertEqual(set(ids), set(range(1, 11)))
        self.assertAllClose(out.embeddings, tf.gather(table, ids))
        self.assertAllClose(out.log_q, np.full(500, -np.log(10.0)))
        self.assertAllClose(out.positive_log_q, np.full(2, -np.log(10.0)))
        self.assertAllEqual(out.mask[0], ids != 1)

    def test_per_row_draws_are_each_rows_own(self):
        sampler = negatives.UniformSampler(
            num_items=10, num_negatives=2000, first_id=1, per_row=True, seed=2
        )
        table = tf.random.normal([11, 3])
        positives = tf.constant([1, 5, 5], tf.int64)
        out = sampler(positives, embedding_fn=lambda i: tf.gather(table, i))
        ids = out.ids.numpy()
        self.assertEqual(ids.shape, (3, 2000))
        self.assertFalse(np.array_equal(ids[1], ids[2]))  # Same positive, own draws.
        for row in ids:  # Each row is uniform on [1, 10]: 200 expected per id.
            counts = np.bincount(row, minlength=11)[1:]
            self.assertLess(((counts - 200.0) ** 2 / 200.0).sum(), 27.9)  # chi2(9), p = 0.001
        self.assertEqual(out.embeddings.shape, (3, 2000, 3))
        self.assertAllClose(out.embeddings, tf.gather(table, ids))
        self.assertAllEqual(out.mask, ids != positives.numpy()[:, None])
        self.assertAllClose(out.log_q, np.full((3, 2000), -np.log(10.0)))
        self.assertAllClose(out.positive_log_q, np.full(3, -np.log(10.0)))

    def test_serialization_round_trip(self):
        sampler = negatives.UniformSampler(
            num_items=1000, num_negatives=64, first_id=1, per_row=True, seed=5
        )
        restored = tf.keras.layers.deserialize(tf.keras.layers.serialize(sampler))
        self.assertEqual(restored.get_config(), sampler.get_config())
        self.assertEqual(
            (restored.num_items, restored.num_negatives, restored.first_id, restored.per_row),
            (1000, 64, 1, True),
        )

    def test_errors(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`num_items` must be a positive integer; "
            r"received num_items=0",
        ):
            negatives.UniformSampler(0, 3)
        with self.assertRaisesRegex(
            ValueError,
            r"`num_negatives` must be a positive integer; "
            r"received num_negatives=-1",
        ):
            negatives.UniformSampler(10, -1)
        with self.assertRaisesRegex(
            ValueError,
            r"`first_id` must be a non-negative integer; "
            r"received first_id=-2",
        ):
            negatives.UniformSampler(10, 3, first_id=-2)
        with self.assertRaisesRegex(
            TypeError,
            r"`per_row` must be a bool; received "
            r"per_row='yes'",
        ):
            negatives.UniformSampler(10, 3, per_row="yes")
        with self.assertRaisesRegex(
            TypeError,
            r"UniformSampler draws integer ids; received "
            r"positive_ids with dtype string",
        ):
            negatives.UniformSampler(10, 3)(tf.constant(["a"]))


class VocabularySamplerTest(tf.test.TestCase):
    """Samplers over a string (or sparse integer) vocabulary: ids in the tower's own space."""

    def test_string_lookup_draws_its_items_never_the_oov_row(self):
        lookup = tf.keras.layers.StringLookup(vocabulary=SHUFFLED[:10])
        tower = tf.keras.Sequential([lookup, tf.keras.layers.Embedding(11, 3)])
        sampler = negatives.UniformSampler.from_lookup(lookup, 1000, seed=4)
        self.assertEqual((sampler.num_items, sampler.vocabulary), (10, list(SHUFFLED[:10])))
        positives = tf.constant([SHUFFLED[0], SHUFFLED[3]])
        out = sampler(positives, embedding_fn=tower)  # The tower as it is.
        ids = out.ids.numpy().astype(str)
        self.assertEqual(out.ids.dtype, tf.string)
        self.assertEqual(set(ids), set(SHUFFLED[:10]))  # Every item, nothing else.
        self.assertNotIn(0, lookup(out.ids).numpy())  # Never the out-of-vocabulary row.
        counts = np.array([np.sum(ids == item) for item in SHUFFLED[:10]])
        self.assertLess(((counts - 100.0) ** 2 / 100.0).sum(), 27.9)  # chi2(9), p = 0.001
        self.assertAllClose(out.embeddings, tower(out.ids))
        self.assertAllClose(out.log_q, np.full(1000, -np.log(10.0)))
        self.assertAllClose(out.positive_log_q, np.full(2, -np.log(10.0)))
        self.assertAllEqual(out.mask, ids[None, :] != positives.numpy().astype(str)[:, None])

    def test_sparse_integer_vocabulary_and_per_row(self):
        catalog = [7, 1003, 42, 99999]
        sampler = negatives.UniformSampler.from_lookup(
            tf.keras.layers.IntegerLookup(vocabulary=catalog), 400, per_row=True, seed=1
        )
        out = sampler(tf.constant([7, 42, 42], tf.int32))
        self.assertEqual(out.ids.dtype, tf.int32)
        self.assertEqual(out.ids.shape, (3, 400))
        for row in out.ids.numpy():
            self.assertEqual(set(row.tolist()), set(catalog))
        self.assertFalse(np.array_equal(out.ids[1], out.ids[2]))
        self.assertAllClose(out.log_q, np.full((3, 400), -np.log(4.0)))

    def test_mixed_uniform_half_draws_strings_and_log_q_uses_the_vocabulary_size(self):
        q = np.array([0.1, 0.2, 0.3, 0.4])
        vocabulary = ["a", "b", "c", "d"]
        sampler = negatives.MixedSampler(
            num_uniform=3,
            num_in_batch=8,
            vocabulary=vocabulary,
            probabilities=frequency.StaticFrequency(q, vocabulary=vocabulary),
            seed=0,
        )
        batch = tf.constant(["d", "b", "d", "c"])
        out = sampler(batch, batch)
        items = np.array([vocabulary.index(x) for x in out.ids.numpy().astype(str)])
        mask = out.mask.numpy()
        self.assertEqual(items.shape, (7,))
        draws = 3 / 4 + 3 * q  # As test_exact_mixture_log_q with integer ids.
        for row in range(4):
            self.assertAllClose(
                np.exp(out.log_q[row].numpy()), draws[items] / mask[row].sum(), rtol=1e-5
            )
        self.assertAllClose(np.exp(out.positive_log_q), draws[[3, 1, 3, 2]] / 6, rtol=1e-5)

    def test_serialization_round_trip(self):
        for sampler in (
            negatives.UniformSampler(
                num_negatives=5, vocabulary=["x", "y", "z"], per_row=True, seed=2
            ),
            negatives.UniformSampler(num_negatives=5, vocabulary=[3, 11]),
            negatives.MixedSampler(
                num_uniform=2,
                num_in_batch=3,
                vocabulary=["x", "y", "z"],
                probabilities=np.full(3, 1 / 3),
                seed=9,
            ),
        ):
            restored = tf.keras.layers.deserialize(tf.keras.layers.serialize(sampler))
            self.assertIsInstance(restored, type(sampler))
            self.assertEqual(restored.get_config(), sampler.get_config())
            self.assertEqual(restored.vocabulary, sampler.vocabulary)
        self.assertEqual(restored.uniform.num_items, 3)
        # Same seed, same vocabulary: the same draws.
        a = negatives.UniformSampler(num_negatives=6, vocabulary=["x", "y", "z"], seed=3)
        b = tf.keras.layers.deserialize(tf.keras.layers.serialize(a))
        self.assertAllEqual(a(tf.constant(["x"])).ids, b(tf.constant(["x"])).ids)

    def test_errors(self):
        cases = [
            (
                dict(vocabulary=["a", "b", "a"]),
                ValueError,
                r"`vocabulary` must hold distinct ids; received 3 ids, 2 distinct "
                r"\(repeated: \['a'\]\)",
            ),
            (
                dict(vocabulary=["[UNK]", "a"]),
                ValueError,
                r"`vocabulary` must hold item ids only; received the lookup token\(s\) "
                r"\['\[UNK\]'\]",
            ),
            (
                dict(vocabulary=["a", 3]),
                TypeError,
                r"`vocabulary` must hold string ids or integer ids, one kind; received "
                r"vocabulary with values of types \['int', 'str'\]",
            ),
            (
                dict(vocabulary=[]),
                ValueError,
                r"`vocabulary` must be a non-empty list of "
                r"ids; received vocabulary with shape \(0,\)",
            ),
            (dict(vocabulary="abc"), TypeError, r"received the single str vocabulary='abc'"),
            (
                dict(vocabulary=["a", "b"], first_id=1),
                ValueError,
                r"Received first_id=1 and a vocabulary",
            ),
            (
                dict(vocabulary=["a", "b"], num_items=3),
                ValueError,
                r"`num_items` must be the vocabulary's size or None; received num_items=3 and "
                r"a vocabulary of 2 ids",
            ),
            (
                dict(num_items=None),
                ValueError,
                r"`num_items` must be a positive integer; received num_items=None",
            ),
        ]
        for kwargs, error, message in cases:
            with self.assertRaisesRegex(error, message):
                negatives.UniformSampler(num_negatives=2, **kwargs)
        with self.assertRaisesRegex(
            ValueError,
            r"`num_uniform` must be a positive integer; "
            r"received num_uniform=None",
        ):
            negatives.MixedSampler(num_in_batch=2, vocabulary=["a"])
        with self.assertRaisesRegex(
            TypeError,
            r"UniformSampler draws string ids from its "
            r"vocabulary; received positive_ids with dtype int64",
        ):
            negatives.UniformSampler(num_negatives=2, vocabulary=["a", "b"])(
                tf.constant([1], tf.int64)
            )
        with self.assertRaisesRegex(
            TypeError,
            r"UniformSampler draws integer ids from its "
            r"vocabulary; received positive_ids with dtype string",
        ):
            negatives.UniformSampler(num_negatives=2, vocabulary=[4, 5])(tf.constant(["a"]))
        with self.assertRaisesRegex(
            TypeError,
            r"The vocabulary's ids \[4, 3000000000\] do "
            r"not fit positive_ids' dtype; received positive_ids with "
            r"dtype int32",
        ):
            negatives.UniformSampler(num_negatives=2, vocabulary=[4, 3_000_000_000])(
                tf.constant([4], tf.int32)
            )
        with self.assertRaisesRegex(
            TypeError,
            r"`lookup` must be a Keras StringLookup or "
            r"IntegerLookup layer .*received lookup=\['a'\]",
        ):
            negatives.UniformSampler.from_lookup(["a"], 2)
        with self.assertRaisesRegex(ValueError, r"`lookup` has an empty vocabulary"):
            negatives.MixedSampler.from_lookup(tf.keras.layers.StringLookup(), 2, 2)


class ColumnIdsTest(tf.test.TestCase):
    """[batch, 1] ids (TFRS's tutorials' labels) give exactly the [batch] results."""

    def test_every_sampler_and_mask_takes_a_column(self):
        ids = tf.constant([3, 1, 3, 2, 7], tf.int64)
        table = tf.random.normal([8, 3], seed=0)
        embed = lambda i: tf.gather(table, i)  # noqa: E731
        q = np.full(8, 1 / 8, np.float32)
        makers = [
            lambda: negatives.InBatchSampler(probabilities=q, max_pool_size=4, seed=1),
            lambda: negatives.InBatchSampler(deduplicate=True, probabilities=q, seed=1),
            lambda: negatives.UniformSampler(8, 6, seed=1),
            lambda: negatives.MixedSampler(8, 3, 3, per_row=True, probabilities=q, seed=1),
        ]
        for make in makers:
            flat = make()(ids, ids, embed(ids), embedding_fn=embed)
            column = make()(ids[:, None], ids[:, None], embed(ids), embedding_fn=embed)
            for got, want in zip(column, flat):
                if isinstance(want, tf.Tensor):
                    self.assertAllEqual(got, want)
            self.assertEqual(column.positive_log_q.shape, (5,))
        self.assertAllEqual(
            negatives.accidental_hit_mask(ids[:, None], ids),
            negatives.accidental_hit_mask(ids, ids),
        )
        self.assertAllEqual(
            negatives.known_positive_mask(ids[:, None], ids, query_ids=ids[:, None] % 2),
            negatives.known_positive_mask(ids, ids, query_ids=ids % 2),
        )

    def test_other_shapes_are_refused_with_the_name_and_shape(self):
        pairs = tf.constant([[3, 1], [2, 2]], tf.int64)
        flat = tf.constant([3, 2], tf.int64)
        with self.assertRaisesRegex(
            ValueError,
            r"`positive_ids` must have shape \[N\] or "
            r"\[N, 1\] \(one id per row\); received positive_ids "
            r"with shape \(2, 2\)",
        ):
            negatives.UniformSampler(8, 2)(pairs)
        with self.assertRaisesRegex(ValueError, r"received candidate_ids with shape \(2, 2\)"):
            negatives.InBatchSampler()(flat, pairs)
        with self.assertRaisesRegex(ValueError, r"received positive_ids with shape \(2, 1, 1\)"):
            negatives.MixedSampler(8, 2, 2)(flat[:, None, None], flat)
        with self.assertRaisesRegex(ValueError, r"received query_ids with shape \(2, 2\)"):
            negatives.known_positive_mask(flat, flat, query_ids=pairs)


class MixedSamplerTest(tf.test.TestCase):
    def test_exact_mixture_log_q(self):
        q = np.array([0.1, 0.2, 0.3, 0.4])
        sampler = negatives.MixedSampler(
            num_items=4, num_uniform=3, num_in_batch=8, probabilities=q, seed=0
        )
        batch = tf.constant([3, 1, 3, 2], tf.int64)
        out = sampler(batch, batch)
        ids, mask = out.ids.numpy(), out.mask.numpy()
        self.assertEqual(ids.shape, (7,))
        self.assertTrue(out.log_q_excludes_positive)
        # Expected draws of d over a row's slots: 3 uniform over 4 items, and the 4 kept
        # in-batch slots hold 4 * 3/4 = 3 other rows' positives, each a draw from q.
        draws = 3 / 4 + 3 * q
        for row in range(4):
            want = draws[ids] / mask[row].sum()  # Per draw, over the row's valid negatives.
            self.assertAllClose(np.exp(out.log_q[row].numpy()), want, rtol=1e-5)
        # The positive's Q on the unexcluded scale: its expected draws over 3 + 3 draws.
        self.assertAllClose(np.exp(out.positive_log_q), draws[[3, 1, 3, 2]] / 6, rtol=1e-5)

    def test_paper_mixture_uses_unigram_q(self):
        q = np.array([0.1, 0.2, 0.3, 0.4])
        sampler = negatives.MixedSampler(4, 3, 8, mixture="paper", probabilities=q)
        batch = tf.constant([3, 1], tf.int64)
        out = sampler(batch, batch)
        self.assertAllClose(out.log_q, np.log(q[out.ids.numpy()]))
        self.assertFalse(out.log_q_excludes_positive)

    def test_embeddings_are_concatenated(self):
        table = tf.random.normal([6, 2])
        embed = lambda i: tf.gather(table, i)  # noqa: E731
        batch = tf.constant([1, 2, 3], tf.int64)
        out = negatives.MixedSampler(6, 2, 2, probabilities=np.full(6, 1 / 6))(
            batch, batch, embed(batch), embedding_fn=embed
        )
        self.assertAllClose(out.embeddings, embed(out.ids))
        self.assertEqual(out.mask.shape, (3, 4))

    def test_released_mixture_per_row_and_deduplicated(self):
        # As the paper's released mixed scripts: uniform draws per row, the in-batch half
        # from the batch's distinct targets, every negative corrected with the unigram q.
        q = np.array([1.0, 0.1, 0.2, 0.3, 0.4], np.float32)  # Row 0: padding.
        table = tf.random.normal([5, 2])
        embed = lambda i: tf.gather(table, i)  # noqa: E731
        batch = tf.constant([3, 1, 3, 2, 1], tf.int64)
        sampler = negatives.MixedSampler(
            4,
            6,
            2,
            mixture="paper",
            first_id=1,
            per_row=True,
            deduplicate=True,
            probabilities=q,
            seed=2,
        )
        out = sampler(batch, batch, embed(batch), embedding_fn=embed)
        ids = out.ids.numpy()
        self.assertEqual(ids.shape, (5, 8))
        self.assertFalse(np.all(ids[:, :6] == ids[0, :6]))  # Each row draws its own.
        self.assertTrue(np.all(ids[:, 6:] == ids[0, 6:]))  # The pool is shared.
        self.assertLen(set(ids[0, 6:].tolist()), 2)  # Distinct targets.
        self.assertAllEqual(out.mask, ids != batch.numpy()[:, None])
        self.assertAllClose(out.log_q, np.log(q[ids]))
        uniform_part, pool_part = out.embeddings
        self.assertAllClose(uniform_part, embed(ids[:, :6]))
        self.assertAllClose(pool_part, embed(ids[0, 6:]))
        query = tf.random.normal([5, 2])
        self.assertAllClose(
            _ops.scores(query, out.embeddings),
            np.einsum("bd,bnd->bn", query.numpy(), embed(ids).numpy()),
            atol=1e-5,
        )

    def test_exact_mixture_per_row_log_q(self):
        q = np.array([0.1, 0.2, 0.3, 0.4])
        sampler = negatives.MixedSampler(4, 3, 8, per_row=True, probabilities=q, seed=0)
        batch = tf.constant([3, 1, 3, 2], tf.int64)
        out = sampler(batch, batch)
        ids, mask = out.ids.numpy(), out.mask.numpy()
        draws = 3 / 4 + 3 * q  # As in test_exact_mixture_log_q, each row with its own ids.
        for row in range(4):
            self.assertAllClose(
                np.exp(out.log_q[row].numpy()), draws[ids[row]] / mask[row].sum(), rtol=1e-5
            )

    def test_serialization_round_trip(self):
        sampler = negatives.MixedSampler(
            num_items=5,
            num_uniform=2,
            num_in_batch=3,
            mixture="paper",
            first_id=1,
            probabilities=np.full(6, 1 / 6),
            seed=9,
            deduplicate=True,
            per_row=True,
        )
        restored = tf.keras.layers.deserialize(tf.keras.layers.serialize(sampler))
        self.assertIsInstance(restored, negatives.MixedSampler)
        self.assertEqual(restored.get_config(), sampler.get_config())

    def test_make_sampler_and_errors(self):
        settings = dict(
            num_negatives=255,
            num_items=40,
            first_id=1,
            probabilities=np.full(41, 1 / 41, np.float32),
            seed=3,
            deduplicate=True,
            log_q="unigram",
            per_row=True,
            mixture="paper",
        )
        in_batch = negatives.make_sampler("in_batch", **settings)
        self.assertEqual(
            (
                in_batch.max_pool_size,
                in_batch.deduplicate,
                in_batch.log_q_mode,
                in_batch.per_row,
                in_batch.seed,
            ),
            (255, True, "unigram", False, 3),
        )
        uniform = negatives.make_sampler("uniform", **settings)
        self.assertEqual(
            (
                uniform.num_items,
                uniform.num_negatives,
                uniform.first_id,
                uniform.per_row,
                uniform.frequency,
            ),
            (40, 255, 1, True, None),
        )
        mixed = negatives.make_sampler("mixed", **settings)
        self.assertEqual(
            (
                mixed.uniform.num_negatives,
                mixed.in_batch.max_pool_size,
                mixed.num_negatives,
                mixed.mixture,
                mixed.per_row,
                mixed.in_batch.deduplicate,
            ),
            (128, 127, 255, "paper", True, True),
        )
        self.assertTrue(mixed.has_log_q and uniform.has_log_q)
        self.assertFalse(negatives.make_sampler("in_batch", num_negatives=4).has_log_q)
        with self.assertRaisesRegex(
            ValueError,
            r"`negatives` must be one of 'in_batch', "
            r"'uniform', 'mixed'; received negatives='random'",
        ):
            negatives.make_sampler("random", num_negatives=4)
        with self.assertRaisesRegex(
            ValueError,
            r"negatives='uniform' draws uniformly from the "
            r"catalog and needs `num_items` or a `vocabulary`; received "
            r"neither",
        ):
            negatives.make_sampler("uniform", num_negatives=4)
        # A vocabulary instead of num_items: the constructors' own rules and log Q -log V.
        words = ["b", "a", "zz"]
        for kind in ("uniform", "mixed"):
            sampler = negatives.make_sampler(kind, num_negatives=4, vocabulary=words, seed=1)
            uniform = sampler.uniform if kind == "mixed" else sampler
            self.assertEqual((uniform.vocabulary, uniform.num_items), (words, 3))
        with self.assertRaisesRegex(
            ValueError,
            r"`num_items` must be the vocabulary's size or "
            r"None; received num_items=5 and a vocabulary of 3 ids",
        ):
            negatives.make_sampler("uniform", num_negatives=4, num_items=5, vocabulary=words)
        with self.assertRaisesRegex(
            ValueError,
            r"negatives='mixed' needs num_negatives >= 2.*"
            r"received num_negatives=1",
        ):
            negatives.make_sampler("mixed", num_negatives=1, num_items=5)
        with self.assertRaisesRegex(
            ValueError,
            r"`mixture` must be one of 'exact', 'paper'; "
            r"received mixture='yang'",
        ):
            negatives.MixedSampler(5, 2, 2, mixture="yang")
        with self.assertRaisesRegex(
            ValueError,
            r"MixedSampler\(deduplicate=True\) needs "
            r"mixture='paper'.*received mixture='exact'",
        ):
            negatives.MixedSampler(5, 2, 2, deduplicate=True)


if __name__ == "__main__":
    tf.test.main()


class NoValidNegativeTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters("improved", "standard", "standard_negatives", "none")
    def test_exact_mixture_row_without_a_valid_negative_has_loss_zero(self, correction):
        # A one-item catalog: every uniform and in-batch draw is the row's own positive.
        from tfrs_logq import LogQRetrieval  # pylint: disable=import-outside-toplevel

        table = tf.Variable(tf.random.normal([1, 4], seed=0))
        query = tf.Variable(tf.random.normal([3, 4], seed=1))
        task = LogQRetrieval(
            correction=correction,
            sampler=negatives.MixedSampler(1, 2, 2, probabilities=np.array([1.0], np.float32)),
        )
        ids = tf.constant([0, 0, 0])
        with tf.GradientTape() as tape:
            loss = task(
                query,
                tf.gather(table, ids),
                candidate_ids=ids,
                candidate_embedding_fn=lambda i: tf.gather(table, i),
            )
        self.assertEqual(float(loss), 0.0)
        for gradient in tape.gradient(loss, [query, table]):
            self.assertAllEqual(tf.convert_to_tensor(gradient), tf.zeros_like(gradient))
