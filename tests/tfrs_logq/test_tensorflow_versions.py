"""What a TFRS user gets on each supported TensorFlow (2.20 and 2.21): the README's quickstart
trains, ScaNN's own index searches, the brute-force SavedModel serves, and the ScaNN SavedModel
is exported where ScaNN's TensorFlow ops load (2.20) and refused by name where they do not
(2.21). `make check-tf TF=2.21` runs this file in an environment with TensorFlow 2.21."""

import os
import tempfile
from unittest import mock

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs

import tfrs_logq
from tfrs_logq import _scann
from tfrs_logq import export
from tfrs_logq import retrieval
from tfrs_logq.models import RetrievalObjective
from tfrs_logq.models import SASRec

NUM_USERS, NUM_ITEMS = 40, 60


def _sasrec():
    """A small built SASRec (seeded): what the exports here write."""
    tf.keras.utils.set_random_seed(0)
    model = SASRec(
        NUM_ITEMS,
        RetrievalObjective(NUM_ITEMS, loss="full_softmax"),
        max_length=8,
        dim=16,
        dropout=0.0,
    )
    model(tf.zeros([1, 8], tf.int32))
    return model


class TwoTower(tfrs.Model):
    """The README's TFRS quickstart, as written there."""

    def __init__(self, item_probabilities):
        super().__init__()
        self.user_model = tf.keras.layers.Embedding(NUM_USERS, 64)
        self.item_model = tf.keras.layers.Embedding(NUM_ITEMS, 64)
        self.task = tfrs_logq.LogQRetrieval(
            correction="improved",
            sampler=tfrs_logq.MixedSampler(
                NUM_ITEMS, num_uniform=16, num_in_batch=16, probabilities=item_probabilities
            ),
        )

    def compute_loss(self, features, training=False):
        return self.task(
            self.user_model(features["user_id"]),
            self.item_model(features["item_id"]),
            candidate_ids=features["item_id"],
            candidate_embedding_fn=self.item_model,
        )


class TensorFlowVersionTest(tf.test.TestCase):
    def test_a_runs_export_without_scann_ops_writes_exact_search_and_says_why(self):
        """What a training run's export (both indexes) does on TensorFlow 2.21."""
        from pipelines import configs  # pylint: disable=import-outside-toplevel
        from pipelines import report  # pylint: disable=import-outside-toplevel

        def fake_export(model, path, *, index, **kwargs):
            if index == "scann":
                raise export.ScannOpsUnavailable("index='scann' needs ScaNN's TensorFlow ops")
            return os.path.join(path, "1")

        out = tempfile.mkdtemp()
        with (
            mock.patch.object(export, "export", fake_export),
            mock.patch("builtins.print") as printed,
        ):
            paths = report.export_run(None, configs.PRESETS["smoke"], out, "both")
            self.assertEqual(paths, [os.path.join(out, "export", "brute_force", "1")])
            printed.assert_called_once_with(
                "Not exported through ScaNN: index='scann' needs ScaNN's TensorFlow ops"
            )
            with self.assertRaises(export.ScannOpsUnavailable):  # Asked for by name: an error.
                report.export_run(None, configs.PRESETS["smoke"], out, "scann")

    def test_without_scann_ops_the_scann_export_is_refused_by_name(self):
        """TensorFlow 2.21's case, made here: ScaNN's ops failed to load at import."""
        model = _sasrec()
        path = os.path.join(tempfile.mkdtemp(), "scann")
        error = "NotFoundError: .../_scann_ops.so: undefined symbol: _ZN4absl12lts_2025012716"
        with mock.patch.object(_scann, "TF_OPS_ERROR", error):
            self.assertFalse(export.scann_export_available())
            with self.assertRaisesRegex(
                export.ScannOpsUnavailable,
                r"index='scann' needs ScaNN's TensorFlow ops, which scann 1\.4\.2 builds for "
                r"TensorFlow 2\.20 only; this is TensorFlow .* \(NotFoundError: "
                r"\.\.\./_scann_ops\.so: undefined symbol.*\)\. Use exact search "
                r"\(index='brute_force', --index=exact\)",
            ):
                export.export(model, path, k=5, index="scann", max_length=8, scann_min_items=0)
            self.assertFalse(os.path.exists(path))
            # A catalog below scann_min_items is searched exactly: no ops needed.
            self.assertTrue(
                os.path.isdir(export.export(model, path, k=5, index="scann", max_length=8))
            )

    def test_a_supported_tensorflow(self):
        self.assertRegex(tf.__version__, r"^2\.2[01]\.")
        self.assertTrue(tf.keras.Model.__module__.startswith("tf_keras"))

    def test_quickstart_trains(self):
        rng = np.random.default_rng(0)
        counts = rng.integers(1, 50, NUM_ITEMS).astype(np.float64)
        features = {
            "user_id": rng.integers(0, NUM_USERS, 512),
            "item_id": rng.choice(NUM_ITEMS, 512, p=counts / counts.sum()),
        }
        model = TwoTower(counts / counts.sum())
        model.compile(optimizer=tf.keras.optimizers.Adagrad(0.1))
        history = model.fit(
            tf.data.Dataset.from_tensor_slices(features).batch(64), epochs=2, verbose=0
        )
        losses = history.history["loss"]
        self.assertTrue(np.isfinite(losses).all())
        self.assertLess(losses[-1], losses[0])

    def test_scann_own_index_searches(self):
        rng = np.random.default_rng(1)
        items = rng.normal(size=(2001, 16)).astype(np.float32)
        queries = rng.normal(size=(8, 16)).astype(np.float32)
        found = retrieval.scann_top_k(queries, items, 10, min_items=0)
        exact = retrieval.exact_top_k(queries, items, 10)
        self.assertEqual(found.shape, (8, 10))
        self.assertGreater(retrieval.overlap_at_k(found, exact, 10), 0.6)

    def test_exports(self):
        model = _sasrec()
        base = tempfile.mkdtemp()
        path = export.export(model, os.path.join(base, "brute_force"), k=5, max_length=8)
        served = tf.saved_model.load(path).signatures["serving_default"](
            history=tf.constant([[1, 2, 3]], tf.int64)
        )
        self.assertEqual(served["ids"].shape, (1, 5))
        scann = os.path.join(base, "scann")
        if tf.__version__.startswith("2.20."):
            self.assertTrue(export.scann_export_available())
            self.assertTrue(
                os.path.isdir(
                    export.export(model, scann, k=5, index="scann", max_length=8, scann_min_items=0)
                )
            )
        else:  # ScaNN 1.4.2's TensorFlow ops are built for 2.20.
            self.assertFalse(export.scann_export_available())
            with self.assertRaisesRegex(
                ImportError,
                r"index='scann' needs ScaNN's TensorFlow ops, which scann "
                r"1\.4\.2 builds for TensorFlow 2\.20 only; this is TensorFlow 2\.21",
            ):
                export.export(model, scann, k=5, index="scann", max_length=8, scann_min_items=0)
            self.assertFalse(os.path.exists(scann))
