"""Tests of tfrs_logq.candidates: id-keyed FactorizedTopK with string ids and an estimator."""

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs
from absl.testing import parameterized

import tfrs_logq

TITLES = [f"movie {i}" for i in range(20)]


def _towers(dim=4):
    tf.keras.utils.set_random_seed(0)
    users = tf.keras.Sequential(
        [
            tf.keras.layers.StringLookup(vocabulary=[f"u{i}" for i in range(6)]),
            tf.keras.layers.Embedding(7, dim),
        ]
    )
    movies = tf.keras.Sequential(
        [
            tf.keras.layers.StringLookup(vocabulary=TITLES),
            tf.keras.layers.Embedding(len(TITLES) + 1, dim),
        ]
    )
    return users, movies


class _Tutorial(tfrs.Model):
    """The TFRS tutorials' model: string ids, [batch, 1] labels, `compute_metrics=not training`."""

    def __init__(self, users, movies, task):
        super().__init__()
        self.users, self.movies, self.task = users, movies, task

    def compute_loss(self, features, training=False):
        labels = features["movie"]  # [batch, 1]
        return self.task(
            self.users(features["user"]),
            self.movies(labels[:, 0]),
            candidate_ids=labels,
            candidate_embedding_fn=self.movies,
            compute_metrics=not training,
            training=training,
        )


def _events(seed, size):
    rng = np.random.default_rng(seed)
    users = rng.integers(0, 6, size)
    movies = (users * 3 + rng.integers(0, 4, size)) % len(TITLES)  # Each user's own taste.
    return dict(
        user=np.array([f"u{u}" for u in users]), movie=np.array([[TITLES[m]] for m in movies])
    )


class CandidatesTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters("frequency", "mixed_from_lookup")
    def test_estimator_string_ids_and_factorized_top_k_in_compiled_fit(self, negatives):
        users, movies = _towers()
        catalog = tf.data.Dataset.from_tensor_slices(TITLES)
        candidates = tfrs_logq.candidates(catalog, movies, batch_size=8)
        first_ids, first_embeddings = next(iter(candidates))
        self.assertEqual(first_ids.numpy().astype(str).tolist(), TITLES[:8])
        self.assertAllClose(first_embeddings, movies(tf.constant(TITLES[:8])))
        metric = tfrs.metrics.FactorizedTopK(candidates=candidates, ks=(1, 5))
        estimator = tfrs_logq.CountMinSketchEstimator(width=256, depth=2)
        task = tfrs_logq.LogQRetrieval(
            metrics=metric,
            correction="improved",
            **(
                dict(frequency=estimator)
                if negatives == "frequency"
                else dict(
                    sampler=tfrs_logq.MixedSampler.from_lookup(
                        movies.layers[0], 8, 8, seed=0, probabilities=estimator
                    )
                )
            ),
        )
        model = _Tutorial(users, movies, task)
        model.compile(optimizer=tf.keras.optimizers.Adagrad(0.5))
        train = tf.data.Dataset.from_tensor_slices(_events(0, 96)).batch(16)
        test = _events(1, 24)
        history = model.fit(train, epochs=2, verbose=0)
        self.assertTrue(np.all(np.isfinite(history.history["loss"])))
        got = model.evaluate(
            tf.data.Dataset.from_tensor_slices(test).batch(8), verbose=0, return_dict=True
        )
        # By hand: each test row's true title among the top k of all 20 titles' scores.
        scores = users(test["user"]).numpy() @ movies(tf.constant(TITLES)).numpy().T
        ranks = np.argsort(-scores, axis=1)
        truth = np.array([TITLES.index(m) for m in test["movie"][:, 0]])
        for k in (1, 5):
            want = np.mean([truth[i] in ranks[i, :k] for i in range(len(truth))])
            self.assertAllClose(got[f"factorized_top_k/top_{k}_categorical_accuracy"], want)
        self.assertGreater(got["factorized_top_k/top_5_categorical_accuracy"], 0.25)  # Chance.

        # A BruteForce index from the same candidates gives the same numbers.
        metric.reset_states()
        brute = tfrs.layers.factorized_top_k.BruteForce(k=5).index_from_dataset(candidates)
        task.factorized_metrics = [tfrs.metrics.FactorizedTopK(candidates=brute, ks=(1, 5))]
        again = model.evaluate(
            tf.data.Dataset.from_tensor_slices(test).batch(8), verbose=0, return_dict=True
        )
        for k in (1, 5):
            self.assertAllClose(
                again[f"factorized_top_k/top_{k}_categorical_accuracy"],
                got[f"factorized_top_k/top_{k}_categorical_accuracy"],
            )

    def test_the_tutorials_embeddings_only_candidates_fail_with_ids(self):
        # What issue 50 met: with ids (which the estimator needs) the metric is id-based, and
        # the tutorial's embeddings-only index returns integer positions.
        users, movies = _towers()
        metric = tfrs.metrics.FactorizedTopK(
            candidates=tf.data.Dataset.from_tensor_slices(TITLES).batch(8).map(movies), ks=(1,)
        )
        task = tfrs_logq.LogQRetrieval(
            metrics=metric, frequency=tfrs_logq.CountMinSketchEstimator()
        )
        test = _events(1, 8)
        with self.assertRaises((TypeError, tf.errors.InvalidArgumentError)):
            task(
                users(test["user"]),
                movies(test["movie"][:, 0]),
                candidate_ids=test["movie"],
                training=False,
            )

    def test_ids_as_an_array_integer_ids_and_errors(self):
        table = tf.random.normal([10, 3], seed=0)
        tower = lambda ids: tf.gather(table, ids)  # noqa: E731
        batches = list(tfrs_logq.candidates(np.arange(10), tower, batch_size=4))
        self.assertEqual([len(ids) for ids, _ in batches], [4, 4, 2])
        self.assertAllEqual(np.concatenate([ids for ids, _ in batches]), np.arange(10))
        self.assertAllClose(np.concatenate([e for _, e in batches]), table)
        column = tf.data.Dataset.from_tensor_slices(np.arange(10)[:, None])  # [1] each.
        self.assertAllEqual(next(iter(tfrs_logq.candidates(column, tower, 10)))[0], np.arange(10))
        with self.assertRaisesRegex(
            ValueError,
            r"`batch_size` must be a positive integer; "
            r"received batch_size=0",
        ):
            tfrs_logq.candidates(np.arange(3), tower, batch_size=0)
        with self.assertRaisesRegex(
            TypeError,
            r"`item_tower` must be callable.*received "
            r"item_tower=3",
        ):
            tfrs_logq.candidates(np.arange(3), 3)
        with self.assertRaisesRegex(
            ValueError,
            r"`items` must be a dataset of single ids "
            r"\(each of shape \[\] or \[1\]\); received items with "
            r"elements of shape \(2,\)",
        ):
            tfrs_logq.candidates(tf.data.Dataset.from_tensor_slices(np.ones([3, 2], int)), tower)
        with self.assertRaisesRegex(
            TypeError,
            r"`items` must be a dataset of single ids; "
            r"received items with element_spec \{'id'",
        ):
            tfrs_logq.candidates(tf.data.Dataset.from_tensor_slices({"id": np.arange(3)}), tower)
        with self.assertRaisesRegex(
            TypeError,
            r"`items` must hold integer or string ids; "
            r"received items with dtype float32",
        ):
            tfrs_logq.candidates(tf.data.Dataset.from_tensor_slices(np.ones(3, np.float32)), tower)
        with self.assertRaisesRegex(
            TypeError,
            r"`items` must be an integer or string tensor "
            r"of item ids; received items with dtype float64",
        ):
            tfrs_logq.candidates(np.ones(3), tower)


if __name__ == "__main__":
    tf.test.main()
