"""Tests of tfrs_logq.retrieval: exact top-k with filtering, and Recall@k / NDCG@k by hand."""

from unittest import mock

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from logq_core import ranking
from tests import reference
from tfrs_logq import _ops
from tfrs_logq import negatives
from tfrs_logq import retrieval


class ExactTopKTest(tf.test.TestCase):
    def test_equals_numpy_argsort_with_filtering(self):
        rng = np.random.default_rng(0)
        queries, items = rng.normal(size=(7, 5)), rng.normal(size=(30, 5))
        exclude = [rng.choice(np.arange(1, 30), size=3, replace=False) for _ in range(7)]
        top = retrieval.exact_top_k(queries, items, 10, exclude=exclude, batch_size=3)
        scores = queries @ items.T
        scores[:, 0] = -np.inf  # Padding.
        for row in range(7):
            scores[row, exclude[row]] = -np.inf
        self.assertAllEqual(top, np.argsort(-scores, axis=1)[:, :10])
        self.assertFalse(np.isin(0, top))

    def test_top_k_pads_a_catalog_smaller_than_k_with_no_item(self):
        rng = np.random.default_rng(0)
        queries, items = rng.normal(size=(2, 4)), rng.normal(size=(6, 4))  # 5 items.
        top = retrieval.top_k(queries, items, 8, exclude=[np.array([2]), np.array([], int)])
        self.assertEqual(top.shape, (2, 8))
        self.assertAllEqual(top[0, 4:], np.full(4, retrieval.NO_ITEM))  # Never an id.
        self.assertAllEqual(top[1, 5:], np.full(3, retrieval.NO_ITEM))
        self.assertAllEqual(np.sort(top[1, :5]), [1, 2, 3, 4, 5])
        self.assertNotIn(2, top[0])
        self.assertEqual(
            retrieval.recall_ndcg(top, [np.array([3]), np.array([4])], ks=(8,))["recall@8"], 1.0
        )

    def test_a_short_list_never_holds_an_excluded_id(self):
        # The probe's case: 5 items, history {3, 4, 5}; exact search returned [2, 1, 3, 4, 5]
        # and so scored a hit on a history target, which popularity (padded) could not.
        items = np.array([[0.0], [2.0], [3.0], [1.0], [1.0], [1.0]], np.float32)
        history = [np.array([3, 4, 5])]
        for index in ("exact", "scann"):
            top = retrieval.top_k(np.ones([1, 1]), items, 5, exclude=history, index=index)
            self.assertAllEqual(top, [[2, 1, -1, -1, -1]])
            self.assertEqual(retrieval.recall_ndcg(top, [np.array([3])], ks=(5,))["recall@5"], 0)
        popularity = retrieval.global_top_k(np.array([0, 5, 9, 1, 1, 1.0]), 5, exclude=history)
        self.assertAllEqual(popularity, [[2, 1, -1, -1, -1]])
        self.assertEqual(retrieval.overlap_at_k(top, popularity, 5), 1.0)

    def test_k_is_capped_by_the_catalog(self):
        top = retrieval.exact_top_k(np.ones([2, 1]), np.arange(4.0)[:, None], 10)
        self.assertAllEqual(top, [[3, 2, 1], [3, 2, 1]])


class DeviceTopKTest(tf.test.TestCase, parameterized.TestCase):
    """The search `exact_top_k` runs, TensorFlow's `logq_core.ranking.device_top_k`, against
    the numpy exact search on the cases every framework's is tested on."""

    @parameterized.named_parameters((case[0], case) for case in reference.top_k_cases())
    def test_equals_the_numpy_exact_search(self, case):
        _, queries, ids, embeddings, k, exclude, chunk, block = case
        expected = ranking.exact_top_k(
            queries, ranking.array_chunks(ids, embeddings, chunk), k, exclude
        )
        for tensors in (False, True):
            chunks = ranking.array_chunks(ids, embeddings, chunk)
            if tensors:  # Chunks already on the device are read in place.
                chunks = ((part, tf.constant(rows)) for part, rows in chunks)
            found = ranking.device_top_k(_ops.DEVICE, queries, chunks, k, exclude, block)
            self.assertAllEqual(found, expected)


class Float32MatmulsTest(tf.test.TestCase):
    def test_tf32_is_off_while_the_search_runs_and_as_it_was_after(self):
        for before in (True, False):
            tf.config.experimental.enable_tensor_float_32_execution(before)
            with _ops.DEVICE.exact():
                self.assertFalse(tf.config.experimental.tensor_float_32_execution_enabled())
            self.assertEqual(tf.config.experimental.tensor_float_32_execution_enabled(), before)


def _numpy_top_k(queries, items, k, exclude=None, first_id=1, candidates=None):
    """The reference: the whole score matrix, ranked by a stable argsort (ties: lower id)."""
    scores = queries.astype(np.float32) @ items.astype(np.float32).T
    allowed = np.zeros(len(items), bool)
    allowed[first_id:] = True
    if candidates is not None:
        allowed[:] = False
        allowed[candidates] = True
    out = []
    for row, values in enumerate(scores):
        ok = allowed.copy()
        if exclude is not None:
            ok[np.asarray(exclude[row], np.int64)] = False
        ids = np.flatnonzero(ok)
        out.append(ids[np.argsort(-values[ids], kind="stable")[:k]])
    return out


class ChunkedSearchTest(tf.test.TestCase):
    """Exact search, the normalisers and the shared ranking read the catalog in chunks; with
    chunks of 7 ids and blocks of 5 queries they equal the whole-matrix reference."""

    def setUp(self):
        super().setUp()
        rng = np.random.default_rng(3)
        # Small integers: exact scores with many ties, which the chunks must break as the
        # reference does (the lower id first).
        self.items = rng.integers(-3, 4, size=[53, 4]).astype(np.float32)
        self.items[self.items.sum(axis=1) == 0, 0] = 5  # No zero row (the geometry's).
        self.queries = rng.integers(-3, 4, size=[23, 4]).astype(np.float32)
        self.exclude = [
            rng.choice(np.arange(1, 53), rng.integers(0, 9), replace=False) for _ in range(23)
        ]
        small = mock.patch.multiple(retrieval, CHUNK_BYTES=7 * 16, SCORES_PER_BATCH=35)
        small.start()
        self.addCleanup(small.stop)

    def test_exact_top_k_equals_the_whole_matrix(self):
        for k in (1, 6, 30):
            for candidates in (None, np.array([3, 4, 9, 10, 11, 17, 30, 31, 40, 41, 44, 52, 1, 2])):
                found = retrieval.exact_top_k(
                    self.queries, self.items, k, exclude=self.exclude, candidates=candidates
                )
                expected = _numpy_top_k(
                    self.queries,
                    self.items,
                    k,
                    self.exclude,
                    candidates=None if candidates is None else np.unique(candidates),
                )
                for row, ids in enumerate(expected):  # Rows short of k: NO_ITEM after.
                    self.assertAllEqual(found[row, : len(ids)], ids)
                    self.assertTrue(np.all(found[row, len(ids) :] == retrieval.NO_ITEM))

    def test_a_variable_and_a_model_are_read_in_place(self):
        expected = retrieval.exact_top_k(self.queries, self.items, 10, exclude=self.exclude)
        variable = tf.Variable(self.items)
        self.assertAllEqual(
            retrieval.exact_top_k(self.queries, variable, 10, exclude=self.exclude), expected
        )

        class Model:
            num_items = 52

            def item_embeddings(self, ids=None):
                return tf.gather(variable, tf.range(53) if ids is None else ids)

        table = retrieval.ItemTable.of(Model())
        self.assertEqual(table.shape, (53, 4))
        self.assertAllEqual(
            retrieval.exact_top_k(self.queries, table, 10, exclude=self.exclude), expected
        )

    def test_log_normalizers_and_group_mass(self):
        groups = np.arange(53) % 3
        lse, mass = retrieval.log_normalizers(
            self.queries, self.items, exclude=self.exclude, groups=groups, num_groups=3
        )
        scores = self.queries.astype(np.float64) @ self.items.T.astype(np.float64)
        for row in range(len(self.queries)):
            ok = np.ones(53, bool)
            ok[0] = False
            ok[self.exclude[row]] = False
            values = scores[row, ok]
            expected = np.log(np.exp(values - values.max()).sum()) + values.max()
            self.assertAllClose(lse[row], expected, rtol=1e-6)
            p = np.exp(values - expected)
            self.assertAllClose(
                mass[row], np.bincount(groups[ok], weights=p, minlength=3), rtol=1e-6
            )

    def test_global_top_k_is_the_dot_product_ranking_of_one_score(self):
        counts = np.round(np.random.default_rng(1).exponential(size=53)).astype(np.float32)
        for candidates in (None, np.arange(5, 40)):
            expected = _numpy_top_k(
                np.ones([23, 1]), counts[:, None], 10, self.exclude, candidates=candidates
            )
            found = retrieval.global_top_k(counts, 10, exclude=self.exclude, candidates=candidates)
            for row, ids in enumerate(expected):
                self.assertAllEqual(found[row, : len(ids)], ids)
                self.assertTrue(np.all(found[row, len(ids) :] == retrieval.NO_ITEM))

    def test_geometry_equals_the_whole_table(self):
        expected_direction = np.linalg.norm(
            (self.items[1:] / np.linalg.norm(self.items[1:], axis=1)[:, None]).mean(axis=0)
        )
        geometry = retrieval.embedding_geometry(self.queries, self.items)
        self.assertAllClose(geometry["mean_direction_norm"], expected_direction, rtol=1e-6)
        self.assertAllClose(
            geometry["score_std"], (self.queries @ self.items[1:].T).std(axis=1).mean(), rtol=1e-5
        )

    def test_bad_candidates_and_exclusions_are_named(self):
        with self.assertRaisesRegex(ValueError, "`candidates` must be ids in \\[1, 52\\]"):
            retrieval.exact_top_k(self.queries, self.items, 3, candidates=np.array([0, 5]))
        with self.assertRaisesRegex(ValueError, "one list of ids per query \\(23\\); received 2"):
            retrieval.exact_top_k(self.queries, self.items, 3, exclude=[[1], [2]])
        with self.assertRaisesRegex(
            ValueError, "must be \\[num_ids, dim\\]; received shape \\[53\\]"
        ):
            retrieval.ItemTable.of(np.zeros(53))


class RecallNdcgTest(tf.test.TestCase):
    def test_hand_computed(self):
        retrieved = np.array([[5, 3, 9, 1], [2, 4, 6, 8], [7, 1, 2, 3]])
        targets = [np.array([3]), np.array([8, 2]), np.array([11])]
        got = retrieval.recall_ndcg(retrieved, targets, ks=(1, 2, 4))
        # Query 1: hit at rank 2. Query 2: hits at ranks 1 and 4 of 2 positives. Query 3: none.
        self.assertAllClose(got["recall@1"], (0 + 0.5 + 0) / 3)
        self.assertAllClose(got["recall@2"], (1 + 0.5 + 0) / 3)
        self.assertAllClose(got["recall@4"], (1 + 1 + 0) / 3)
        ideal_2 = 1 + 1 / np.log2(3)
        self.assertAllClose(got["ndcg@1"], (0 + 1 + 0) / 3)
        self.assertAllClose(got["ndcg@2"], (1 / np.log2(3) + 1 / ideal_2 + 0) / 3)
        self.assertAllClose(got["ndcg@4"], (1 / np.log2(3) + (1 + 1 / np.log2(5)) / ideal_2) / 3)

    def test_per_query_values_average_to_the_means(self):
        retrieved = np.array([[5, 3, 9, 1], [2, 4, 6, 8], [7, 1, 2, 3]])
        targets = [np.array([3]), np.array([8, 2]), np.array([11])]
        per_query = retrieval.per_query_recall_ndcg(retrieved, targets, ks=(2, 4))
        ideal_2 = 1 + 1 / np.log2(3)
        self.assertAllClose(per_query["recall@2"], [1, 0.5, 0])
        self.assertAllClose(
            per_query["ndcg@4"], [1 / np.log2(3), (1 + 1 / np.log2(5)) / ideal_2, 0]
        )
        means = retrieval.recall_ndcg(retrieved, targets, ks=(2, 4))
        self.assertEqual(sorted(means), sorted(per_query))
        for name, values in per_query.items():
            self.assertEqual(values.shape, (3,))
            self.assertAlmostEqual(means[name], values.mean(), places=12)
        self.assertEqual(
            retrieval.recall_ndcg(np.zeros([0, 4], int), [], ks=(4,)),
            {"recall@4": 0.0, "ndcg@4": 0.0},
        )

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, r"`retrieved` has 1 queries but `targets` 2"):
            retrieval.recall_ndcg(np.zeros([1, 100]), [np.array([1]), np.array([2])])
        with self.assertRaisesRegex(
            ValueError,
            r"`retrieved` holds 5 ids per query; "
            r"ks=\[1, 10\] needs 10",
        ):
            retrieval.recall_ndcg(np.zeros([1, 5]), [np.array([1])], ks=(1, 10))
        with self.assertRaisesRegex(ValueError, r"Every query needs at least one target"):
            retrieval.recall_ndcg(np.zeros([1, 5]), [np.array([])], ks=(1,))


class ScannTest(tf.test.TestCase):
    def test_exhaustive_configuration_equals_exact_search(self):
        rng = np.random.default_rng(1)
        queries, items = rng.normal(size=(20, 8)), rng.normal(size=(501, 8))
        exclude = [rng.choice(np.arange(1, 501), size=5, replace=False) for _ in range(20)]
        exact = retrieval.exact_top_k(queries, items, 10, exclude=exclude)
        # No tree (one leaf) and every candidate re-scored exactly: ScaNN is exact.
        scann = retrieval.scann_top_k(
            queries, items, 10, exclude=exclude, num_leaves=1, reorder=500, min_items=0
        )
        self.assertAllEqual(scann, exact)

    def test_slots_the_index_could_not_fill_are_never_answered(self):
        # 3 of 34 leaves searched hold fewer than the 1,000 ids asked: ScaNN pads each row
        # with row 0 at a NaN distance. Those slots used to come back as item 1, hundreds of
        # times a row (88-202 distinct ids of 1,000; a recall@1000 of 15 in a smoke run).
        rng = np.random.default_rng(0)
        items = rng.normal(size=[1201, 16]).astype(np.float32)
        queries = rng.normal(size=[4, 16]).astype(np.float32)
        found = retrieval.scann_top_k(
            queries, items, 1000, min_items=0, num_leaves=34, num_leaves_to_search=3
        )
        self.assertAllEqual(found, retrieval.exact_top_k(queries, items, 1000))

    def test_queries_searched_in_batches_answer_as_one(self):
        rng = np.random.default_rng(5)
        queries, items = rng.normal(size=(11, 8)), rng.normal(size=(3001, 8))
        exclude = [rng.choice(np.arange(1, 3001), size=rng.integers(0, 30)) for _ in range(11)]
        candidates = np.arange(2, 3001, 2)
        # Every leaf searched and every candidate re-scored: exact, batch after batch.
        with mock.patch.object(retrieval, "SCANN_QUERY_BATCH", 4):
            batched = retrieval.scann_top_k(
                queries,
                items,
                20,
                exclude=exclude,
                min_items=0,
                candidates=candidates,
                num_leaves=10,
                num_leaves_to_search=10,
                reorder=1500,
            )
        exact = retrieval.exact_top_k(queries, items, 20, exclude=exclude, candidates=candidates)
        self.assertAllEqual(batched, exact)

    def test_rows_the_index_returns_too_few_for_are_completed_exactly(self):
        # One leaf of 20 searched: about 25 candidates come back, and row 0 excludes 450 of
        # the 500 items; before the fix this raised a broadcasting ValueError.
        rng = np.random.default_rng(3)
        queries, items = rng.normal(size=(3, 8)), rng.normal(size=(501, 8))
        exclude = [
            rng.choice(np.arange(1, 501), size=450, replace=False),
            np.array([1]),
            np.array([2]),
        ]
        scann = retrieval.scann_top_k(
            queries, items, 10, exclude=exclude, num_leaves=20, num_leaves_to_search=1, min_items=0
        )
        exact = retrieval.exact_top_k(queries, items, 10, exclude=exclude)
        self.assertAllEqual(scann[0], exact[0])
        self.assertFalse(np.isin(scann[0], exclude[0]).any())

    def test_default_index_on_clustered_embeddings(self):
        rng = np.random.default_rng(2)
        centers = rng.normal(size=(30, 16))
        items = np.vstack(
            [
                np.zeros([1, 16]),
                centers[rng.integers(0, 30, 12_000)] + 0.3 * rng.normal(size=(12_000, 16)),
            ]
        )
        queries = centers[rng.integers(0, 30, 100)] + 0.3 * rng.normal(size=(100, 16))
        exact = retrieval.top_k(queries, items, 100)
        approximate = retrieval.top_k(queries, items, 100, index="scann")
        self.assertGreater(retrieval.overlap_at_k(approximate, exact, 100), 0.95)
        self.assertFalse(np.isin(0, approximate))
        # Below SCANN_MIN_ITEMS (10,000) the "scann" index is exact search.
        small = items[:5001]
        self.assertAllEqual(
            retrieval.top_k(queries, small, 100, index="scann"),
            retrieval.top_k(queries, small, 100),
        )
        with self.assertRaisesRegex(
            ValueError,
            r"`index` must be one of exact, scann; "
            r"received index='faiss'",
        ):
            retrieval.top_k(queries, items, 10, index="faiss")

    def test_min_items_is_checked(self):
        self.assertTrue(retrieval.uses_scann(10, min_items=0))
        self.assertFalse(retrieval.uses_scann(9_999))
        for bad in (-1, 2.5, "10000", True):
            with self.assertRaisesRegex(
                ValueError,
                r"`min_items` must be a non-negative "
                rf"integer; received min_items={bad!r}",
            ):
                retrieval.scann_top_k(np.zeros([1, 2]), np.zeros([3, 2]), 1, min_items=bad)

    def test_defaults_scale_with_the_catalog(self):
        self.assertEqual(
            retrieval.scann_defaults(999_999, 100),
            {"num_leaves": 999, "num_leaves_to_search": 199, "reorder": 600},
        )
        self.assertEqual(
            retrieval.scann_defaults(1_000_000, 100),
            {"num_leaves": 1000, "num_leaves_to_search": 100, "reorder": 2000},
        )
        self.assertEqual(
            retrieval.scann_defaults(5_000_000, 100),
            {"num_leaves": 2236, "num_leaves_to_search": 223, "reorder": 2000},
        )
        self.assertEqual(
            retrieval.scann_defaults(400, 10),
            {"num_leaves": 20, "num_leaves_to_search": 16, "reorder": 100},
        )


class PopularityBandTest(tf.test.TestCase):
    def test_bands_and_stratified_recall(self):
        counts = np.array([0, 5, 1, 9, 3, 3, 7])  # Id 0 is padding.
        bands = retrieval.popularity_bands(counts)
        # By count: 3 (9), 6 (7), 1 (5), 4 (3), 5 (3), 2 (1) -> thirds of six ids.
        self.assertAllEqual(bands, [-1, 1, 2, 0, 1, 2, 0])
        retrieved = np.array([[3, 1], [2, 6]])
        targets = [np.array([3, 4]), np.array([5])]
        got = retrieval.stratified_recall(retrieved, targets, bands, k=2)
        # Head target 3 found; torso target 4 missed; tail target 5 missed.
        self.assertEqual(got, {"head_recall@2": 1.0, "torso_recall@2": 0.0, "tail_recall@2": 0.0})
        self.assertTrue(
            np.isnan(
                retrieval.stratified_recall(retrieved[:1], [np.array([3])], bands, 2)[
                    "tail_recall@2"
                ]
            )
        )


class KlToTruthTest(tf.test.TestCase):
    def test_hand_computed(self):
        # Ids 0 (padding), 1, 2, 3; query 0 has id 3 in its history, so both laws are over
        # {1, 2}: truth (0.75, 0.25), model uniform.
        # KL = 0.75 log 1.5 + 0.25 log 0.5.
        true_logits = np.array([[9.0, np.log(3.0), 0.0, 50.0], [0.0, 1.0, 2.0, 3.0]])
        scores = np.array(
            [[-9.0, 4.0, 4.0, -50.0], [5.0, 2.0, 3.0, 4.0]]
        )  # Row 1: the truth shifted by one.
        kl = retrieval.kl_to_truth(true_logits, scores, exclude=[np.array([3]), np.array([])])
        self.assertAllClose(kl, (0.75 * np.log(1.5) + 0.25 * np.log(0.5) + 0.0) / 2)

    def test_matches_numpy_on_random_laws(self):
        rng = np.random.default_rng(0)
        true_logits, scores = rng.normal(size=[5, 30]), rng.normal(size=[5, 30]) * 3
        p = np.exp(true_logits[:, 1:]) / np.exp(true_logits[:, 1:]).sum(1, keepdims=True)
        m = np.exp(scores[:, 1:]) / np.exp(scores[:, 1:]).sum(1, keepdims=True)
        self.assertAllClose(
            retrieval.kl_to_truth(true_logits, scores), np.mean((p * np.log(p / m)).sum(1))
        )
        self.assertAllClose(retrieval.kl_to_truth(true_logits, true_logits + 7.0), 0.0, atol=1e-12)

    def test_shape_error(self):
        with self.assertRaisesRegex(ValueError, r"must be the same \[num_queries, num_ids\]"):
            retrieval.kl_to_truth(np.zeros([2, 3]), np.zeros([2, 4]))


class EmbeddingGeometryTest(tf.test.TestCase):
    def test_hand_computed(self):
        # Padding row 0 is left out; items 1 and 2 are e1 and 2 e2: mean direction (0.5, 0.5).
        items = np.array([[9.0, 9.0], [1.0, 0.0], [0.0, 2.0]])
        # Query scores (1, 0) and (0, 4): population stds 0.5 and 2.
        queries = np.array([[1.0, 0.0], [0.0, 2.0]])
        self.assertAllClose(
            retrieval.embedding_geometry(queries, items),
            {"mean_direction_norm": np.sqrt(0.5), "score_std": 1.25, "item_norm": 1.5},
        )
        # Collapsed (one direction) and balanced (opposite pairs) catalogs.
        one_way = retrieval.embedding_geometry(queries, np.array([[0, 0], [1, 1], [3, 3.0]]))
        self.assertAllClose(one_way["mean_direction_norm"], 1.0)
        balanced = np.array([[0, 0], [2, 0], [0, 1], [-1, 0], [0, -3.0]])
        self.assertAllClose(
            retrieval.embedding_geometry(queries, balanced)["mean_direction_norm"], 0.0
        )

    def test_matches_the_mean_pairwise_cosine(self):
        # |mean of unit vectors|^2 is the mean cosine over all ordered pairs (i = j included).
        rng = np.random.default_rng(0)
        items = rng.normal(size=[50, 8]) + 0.7
        queries = rng.normal(size=[20, 8])
        cosines = (items @ items.T) / np.outer(
            np.linalg.norm(items, axis=1), np.linalg.norm(items, axis=1)
        )
        got = retrieval.embedding_geometry(queries, items, first_id=0)
        self.assertAllClose(got["mean_direction_norm"] ** 2, cosines.mean())
        self.assertAllClose(got["score_std"], np.mean([np.std(items @ q) for q in queries]))

    def test_bad_input_names_the_argument(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`query_embeddings` \(2, 3\) and "
            r"`item_embeddings` \(4, 2\)",
        ):
            retrieval.embedding_geometry(np.zeros([2, 3]), np.ones([4, 2]))
        with self.assertRaisesRegex(ValueError, r"`first_id` 4; got 2 queries and 4 ids"):
            retrieval.embedding_geometry(np.zeros([2, 2]), np.ones([4, 2]), first_id=4)
        with self.assertRaisesRegex(ValueError, r"1 zero rows at or after `first_id` 1"):
            retrieval.embedding_geometry(np.zeros([2, 2]), np.array([[0, 0], [0, 0], [1, 1.0]]))


class WebKlMassTest(tf.test.TestCase):
    """`pipelines.report.web_kl`: the KL, the targets' calibration and each softmax's mass on
    each popularity third, against a numpy reference on a 7-id catalog (id 0 padding)."""

    def test_mass_by_band_and_calibration(self):
        from pipelines import report  # pylint: disable=import-outside-toplevel
        from pipelines.data import splits  # pylint: disable=import-outside-toplevel

        rng = np.random.RandomState(0)
        true_logits = rng.normal(size=(3, 7))

        class Truth:
            @staticmethod
            def support(users):  # Mass on every item: the dense law, sparsely.
                for user in users:
                    yield np.arange(1, 7), true_logits[user, 1:]

        test = splits.EvalSet(
            np.array([0, 1, 2]),
            [np.array([1]), np.array([], np.int64), np.array([2, 3])],
            [np.array([4]), np.array([1, 6]), np.array([5])],
        )
        queries, items = rng.normal(size=(3, 4)), rng.normal(size=(7, 4))
        bands = np.array([-1, 0, 0, 1, 1, 2, 2])
        draws = (np.arange(7) / 10.0, 5.5)
        kl, calibration = report.web_kl(Truth(), test, queries, items, bands=bands, draws=draws)
        # Chunks of 2 items and blocks of 2 queries give the same numbers.
        with mock.patch.multiple(retrieval, CHUNK_BYTES=2 * 16, SCORES_PER_BATCH=4):
            small_kl, small = report.web_kl(Truth(), test, queries, items, bands=bands, draws=draws)
        self.assertAllClose(small_kl, kl, atol=1e-12)
        for name, value in calibration.items():
            self.assertAllClose(small[name], value, atol=1e-12)

        def log_softmax(logits, history):
            keep = np.ones(7, bool)
            keep[0] = False
            keep[history] = False
            logits = np.where(keep, logits, -np.inf)
            return logits - np.log(np.exp(logits[keep]).sum())

        model = [log_softmax(queries[u] @ items.T, test.histories[u]) for u in range(3)]
        truth = [log_softmax(true_logits[u], test.histories[u]) for u in range(3)]
        with np.errstate(invalid="ignore"):  # -inf - -inf off the candidates.
            expected_kl = np.mean(
                [
                    np.sum(np.where(np.isfinite(t), np.exp(t) * (t - m), 0.0))
                    for t, m in zip(truth, model)
                ]
            )
        self.assertAllClose(kl, expected_kl, atol=1e-6)
        self.assertAllClose(
            calibration["model_log_p"],
            [model[0][4], model[1][1], model[1][6], model[2][5]],
            atol=1e-4,
        )
        self.assertEqual(calibration["band"], [1, 0, 2, 2])
        # Each target's expected draws D(p), and the row's n.
        self.assertAllClose(calibration["draws"], [0.4, 0.1, 0.6, 0.5])
        self.assertEqual(calibration["negatives"], 5.5)
        for name, laws in (("model_mass", model), ("true_mass", truth)):
            expected = np.mean(
                [[np.exp(law[bands == b]).sum() for b in range(3)] for law in laws], axis=0
            )
            self.assertAllClose(calibration[name], expected, atol=1e-6)
            self.assertAllClose(sum(calibration[name]), 1.0, atol=1e-5)

    def test_expected_draws_are_the_samplers_own(self):
        """`report.expected_draws` against the library's samplers on a 5-item catalog: the
        mixed sampler's per-draw log Q' = log D(d) - log n_valid and its positive's
        log Q = log D(p) - log n (`logq_core.formulas.mixture_log_q`); in-batch, D = (B - 1) q;
        uniform, n / |D|."""
        from pipelines import configs  # pylint: disable=import-outside-toplevel
        from pipelines import report  # pylint: disable=import-outside-toplevel

        counts = np.array([0, 400, 300, 150, 100, 50])  # q = .4, .3, .15, .1, .05
        q = np.concatenate([[1e-9], counts[1:] / 1000]).astype(np.float32)
        config = configs.Config().replace(negatives="mixed", num_negatives=6, batch_size=8)
        draws, n = report.expected_draws(config, counts)
        # 3 uniform slots over 5 items and 3 in-batch slots, E_b = 3 * 7 / 8 = 2.625 q-draws.
        self.assertAllClose(
            draws, [0, 0.6 + 1.05, 0.6 + 0.7875, 0.6 + 0.39375, 0.6 + 0.2625, 0.6 + 0.13125]
        )
        self.assertAllClose(n, 5.625)
        sampler = negatives.make_sampler(
            "mixed", num_negatives=6, num_items=5, first_id=1, probabilities=q, seed=3
        )
        positives = tf.constant([1, 2, 3, 1, 4, 5, 1, 2], tf.int64)
        drawn = sampler(positives, positives)
        valid = drawn.mask.numpy().sum(axis=1, keepdims=True)
        ids = np.broadcast_to(drawn.ids.numpy(), drawn.mask.shape)
        self.assertAllClose(np.exp(drawn.log_q.numpy()) * valid, draws[ids], rtol=1e-5)
        self.assertAllClose(
            np.exp(drawn.positive_log_q.numpy()) * n, draws[positives.numpy()], rtol=1e-5
        )
        # In-batch: the pool capped at num_negatives = 6 of the batch's 8 entries keeps
        # E_b = 6 * 7 / 8 q-draws, as the sampler itself counts them; uncapped, B - 1 = 7.
        draws, n = report.expected_draws(config.replace(negatives="in_batch"), counts)
        self.assertAllClose(draws[1:], 5.25 * counts[1:] / 1000)
        self.assertEqual(n, 5.25)
        pooled = negatives.make_sampler("in_batch", num_negatives=6, probabilities=q, seed=3)
        self.assertAllClose(float(pooled(positives, positives).expected_draws), 5.25)
        draws, n = report.expected_draws(
            config.replace(negatives="in_batch", num_negatives=8), counts
        )
        self.assertAllClose(draws[1:], 7 * counts[1:] / 1000)
        self.assertEqual(n, 7.0)
        draws, n = report.expected_draws(config.replace(negatives="uniform"), counts)
        self.assertAllClose(draws[1:], np.full(5, 6 / 5))
        self.assertEqual(n, 6.0)
        for bad, message in (
            ({"deduplicate": True}, "--deduplicate=True --mixture=exact"),
            ({"mixture": "paper"}, "--deduplicate=False --mixture=paper"),
        ):
            with self.assertRaisesRegex(
                ValueError, f"needs --nodeduplicate and --mixture=exact; received {message}"
            ):
                report.expected_draws(config.replace(**bad), counts)


if __name__ == "__main__":
    tf.test.main()


class NonFiniteScoresTest(tf.test.TestCase):
    """A NaN score (a NaN or infinite embedding) ranks below -inf, by TensorFlow's search as by
    numpy's (tf.math.top_k alone ranks NaN first, which then left NO_ITEM before real ids)."""

    def test_tensorflow_and_numpy_rank_nan_last_alike(self):
        from logq_core import ranking  # pylint: disable=import-outside-toplevel

        items = np.array([[0.0], [1.0], [np.nan], [2.0], [0.5], [np.inf]], np.float32)
        queries = np.array([[1.0], [0.0], [-1.0]], np.float32)  # 0 x inf: NaN too.
        found = retrieval.exact_top_k(queries, items, 4)
        reference = ranking.exact_top_k(
            queries, ranking.array_chunks(np.arange(1, 6), items[1:]), 4
        )
        self.assertAllEqual(found, reference)
        self.assertAllEqual(found[0], [5, 3, 1, 4])
        self.assertAllEqual(found[1], [1, 3, 4, -1])  # 0 x nan and 0 x inf: no candidate.


class ArgumentsAndSmallIndexesTest(tf.test.TestCase):
    def test_bad_arguments_are_named(self):
        items, queries = np.ones((6, 4), np.float32), np.ones((2, 4), np.float32)
        for call, message in (
            (lambda: retrieval.top_k(queries, items, -1), "received k=-1"),
            (lambda: retrieval.exact_top_k(queries, items, 2.5), "received k=2.5"),
            (lambda: retrieval.top_k(queries, items, 3, first_id=-1), "received first_id=-1"),
            (
                lambda: retrieval.top_k(queries[:, :3], items, 3),
                r"\[num_queries, 4\] \(the items' dim\); received shape \[2, 3\]",
            ),
            (
                lambda: retrieval.global_top_k(np.ones(6), 3, [[1]], num_queries=2),
                r"one list of ids per query \(2\); received 1",
            ),
        ):
            with self.assertRaisesRegex(ValueError, message):
                call()

    def test_a_scann_index_of_fewer_items_than_hashing_needs_answers_exactly(self):
        # scann_min_items=0 on a 10-item catalog: asymmetric hashing cannot train its 16
        # centres (ScaNN raised); the index scores by brute force and answers as exact search.
        rng = np.random.default_rng(0)
        items, queries = rng.normal(size=(11, 4)), rng.normal(size=(3, 4))
        exclude = [np.array([3]), np.array([], np.int64), np.array([1, 2])]
        self.assertAllEqual(
            retrieval.top_k(queries, items, 5, exclude, index="scann", min_items=0),
            retrieval.top_k(queries, items, 5, exclude, index="exact"),
        )
