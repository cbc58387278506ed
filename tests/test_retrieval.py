"""Tests of tfrs_logq.retrieval: exact top-k with filtering, and Recall@k / NDCG@k by hand."""

import numpy as np
import tensorflow as tf

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

    def test_k_is_capped_by_the_catalog(self):
        top = retrieval.exact_top_k(np.ones([2, 1]), np.arange(4.0)[:, None], 10)
        self.assertAllEqual(top, [[3, 2, 1], [3, 2, 1]])


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

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, r"`retrieved` has 1 queries but `targets` 2"):
            retrieval.recall_ndcg(np.zeros([1, 100]), [np.array([1]), np.array([2])])
        with self.assertRaisesRegex(ValueError, r"`retrieved` holds 5 ids per query; "
                                    r"ks=\[1, 10\] needs 10"):
            retrieval.recall_ndcg(np.zeros([1, 5]), [np.array([1])], ks=(1, 10))
        with self.assertRaisesRegex(ValueError, r"Every query needs at least one target"):
            retrieval.recall_ndcg(np.zeros([1, 5]), [np.array([])], ks=(1,))


if __name__ == "__main__":
    tf.test.main()
