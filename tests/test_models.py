"""Tests of tfrs_logq.models: SASRec's causality, and a short training per loss family."""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from pipelines.data import builders
from pipelines.data import splits
from pipelines.data import synthetic
from tfrs_logq import frequency
from tfrs_logq.models import RetrievalObjective, SASRec, TwoTower

NUM_ITEMS = 200


def _data():
    data, _ = synthetic.make_synthetic(num_users=300, num_items=NUM_ITEMS, min_length=10,
                                       max_length=30, temperature=0.1, seed=0)
    split = splits.leave_one_out(data)
    counts = split.train_counts() + 1.0
    probabilities = counts / counts[1:].sum()
    probabilities[0] = 1.0
    return data, split, probabilities.astype(np.float32)


class SASRecTest(tf.test.TestCase):

    def test_is_causal_and_ignores_padding(self):
        model = SASRec(NUM_ITEMS, RetrievalObjective(NUM_ITEMS, loss="full_softmax"),
                       max_length=6, dim=8, dropout=0.0)
        a = tf.constant([[0, 0, 3, 4, 5, 6]])
        b = tf.constant([[0, 0, 3, 4, 9, 1]])  # Differs from position 4 on.
        out_a, out_b = model(a).numpy(), model(b).numpy()
        self.assertAllClose(out_a[:, :4], out_b[:, :4], atol=1e-6)
        self.assertNotAllClose(out_a[:, 4:], out_b[:, 4:])
        self.assertAllEqual(out_a[:, :2], np.zeros([1, 2, 8]))  # Padding positions are zeroed.
        self.assertEqual(model.query_embeddings(a).shape, (1, 8))
        self.assertEqual(model.item_embeddings().shape, (NUM_ITEMS + 1, 8))

    def test_bad_arguments(self):
        objective = RetrievalObjective(NUM_ITEMS, loss="full_softmax")
        with self.assertRaisesRegex(ValueError, r"`dim` must be a multiple of `num_heads`; "
                                    r"received dim=10, num_heads=4"):
            SASRec(NUM_ITEMS, objective, dim=10, num_heads=4)
        with self.assertRaisesRegex(ValueError, r"`loss` must be one of 'sampled_softmax', "
                                    r"'full_softmax', 'bce', 'gbce'; received loss='hinge'"):
            RetrievalObjective(NUM_ITEMS, loss="hinge")
        with self.assertRaisesRegex(ValueError, r"correction='improved' with in_batch negatives "
                                    r"needs `probabilities`"):
            RetrievalObjective(NUM_ITEMS, negatives="in_batch", correction="improved")


class TrainingTest(tf.test.TestCase, parameterized.TestCase):
    """About 80 steps of every loss family make the model better at its objective.

    Sampled-softmax losses are noisy from epoch to epoch (fresh negatives, and
    the improved weight), so for them the logged mean P_hat of the positive,
    which only rises as the model learns, is the measure; for the others, the
    loss itself.
    """

    def _assert_learned(self, history, sampled):
        if sampled:
            p_hat = history["mean_p_hat"]
            self.assertGreater(p_hat[-1], 1.1 * p_hat[0], msg=str(history))
        else:
            self.assertLess(history["loss"][-1], history["loss"][0], msg=str(history))

    @parameterized.named_parameters(
        ("bce", dict(loss="bce", num_negatives=8)),
        ("gbce", dict(loss="gbce")),
        ("full_softmax", dict(loss="full_softmax")),
        ("uniform", dict(negatives="uniform", correction="none")),
        ("in_batch_none", dict(negatives="in_batch", correction="none")),
        ("in_batch_standard", dict(negatives="in_batch", correction="standard")),
        ("in_batch_improved", dict(negatives="in_batch", correction="improved")),
        ("mixed_improved", dict(negatives="mixed", correction="improved")),
        ("mixed_estimator", dict(negatives="mixed", correction="improved",
                                 probabilities="count_min")),
    )
    def test_sasrec_loss_goes_down(self, kwargs):
        tf.keras.utils.set_random_seed(0)
        data, split, probabilities = _data()
        kwargs = dict(kwargs)
        if kwargs.get("probabilities") == "count_min":
            kwargs["probabilities"] = frequency.CountMinSketchEstimator(width=1024, depth=2)
        kwargs.setdefault("probabilities", probabilities)
        kwargs.setdefault("num_negatives", 32)
        model = SASRec(data.num_items, RetrievalObjective(data.num_items, seed=1, **kwargs),
                       max_length=20, dim=16, num_blocks=1, dropout=0.0)
        model.compile(optimizer=tf.keras.optimizers.Adam(0.003 if kwargs.get("loss") == "gbce"
                                                         else 0.01))
        dataset = builders.sasrec_dataset(split.train, 20, 32, seed=0)
        history = model.fit(dataset, steps_per_epoch=20, epochs=4, verbose=0).history
        self._assert_learned(history, sampled="loss" not in kwargs)
        if kwargs.get("correction") == "improved":
            self.assertAllClose(history["mean_w"], 1.0 - np.array(history["mean_p_hat"]))

    def test_two_tower_loss_goes_down(self):
        tf.keras.utils.set_random_seed(0)
        data, split, probabilities = _data()
        model = TwoTower(data.num_users, data.num_items,
                         RetrievalObjective(data.num_items, negatives="mixed", num_negatives=32,
                                            probabilities=probabilities, seed=1), dim=16)
        model.compile(optimizer=tf.keras.optimizers.Adam(0.01))
        dataset = builders.two_tower_dataset(split.train, 10, 64, seed=0)
        history = model.fit(dataset, steps_per_epoch=25, epochs=2, verbose=0).history
        self._assert_learned(history, sampled=True)
        self.assertEqual(model.item_embeddings().shape, (NUM_ITEMS + 1, 16))


if __name__ == "__main__":
    tf.test.main()
