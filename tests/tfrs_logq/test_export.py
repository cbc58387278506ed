"""Tests of tfrs_logq.export: SavedModels that a bare TensorFlow process serves with the same
top-k."""

import contextlib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from absl.testing import parameterized
from tensorflow.core.protobuf import saved_model_pb2

from tfrs_logq import export
from tfrs_logq import retrieval
from tfrs_logq.models import RetrievalObjective
from tfrs_logq.models import SASRec
from tfrs_logq.models import TwoTower

NUM_ITEMS, LENGTH = 200, 8

# Runs in a fresh interpreter: TensorFlow only (plus scann for its ops), no tfrs_logq.
_LOAD = r"""
import json, sys
import tensorflow as tf
if sys.argv[2] == "scann":
    import scann  # noqa: F401  Registers ScaNN's TensorFlow ops.
model = tf.saved_model.load(sys.argv[1])
request = {k: tf.constant(v, tf.int64) for k, v in json.loads(sys.argv[3]).items()}
out = model.signatures["serving_default"](**request)
embedded = model.signatures["item_embeddings"](item_ids=tf.constant([1, -3, 10**12], tf.int64))
loaded = sorted(m for m in sys.modules if m.startswith(("tfrs_logq", "tensorflow_recommenders")))
print(json.dumps({"ids": out["ids"].numpy().tolist(), "scores": out["scores"].numpy().tolist(),
                  "embedding_shape": list(embedded["embeddings"].shape), "loaded": loaded}))
"""


def _require_scann_ops(test, index="scann"):
    """Skips `test` where the export it checks needs ScaNN's TensorFlow ops and they do not
    load (scann 1.4.2's are built for TensorFlow 2.20; `make check-tf TF=2.21`)."""
    if index == "scann" and not export.scann_export_available():
        test.skipTest(f"ScaNN's TensorFlow ops do not load on TensorFlow {tf.__version__}")


def _sasrec(num_items=NUM_ITEMS):
    tf.keras.utils.set_random_seed(0)
    model = SASRec(
        num_items,
        RetrievalObjective(num_items, loss="full_softmax"),
        max_length=LENGTH,
        dim=16,
        dropout=0.0,
    )
    model(tf.zeros([1, LENGTH], tf.int32))
    return model


def _two_tower():
    tf.keras.utils.set_random_seed(0)
    model = TwoTower(50, NUM_ITEMS, RetrievalObjective(NUM_ITEMS, loss="full_softmax"), dim=16)
    model({"user": tf.zeros([1], tf.int32), "history": tf.zeros([1, LENGTH], tf.int32)})
    return model


def _serve_in_subprocess(path, index, request):
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    result = subprocess.run(
        [sys.executable, "-c", _LOAD, path, index, json.dumps(request)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _restricted_top_k(queries, table, k, history, allowed, exclude):
    """Exact search restricted to each row's allowed set (a row of padding: the whole
    catalog), minus its history and exclusions: [batch, k] ids (0 in the slots left empty)
    and [batch] num_found."""
    catalog = np.arange(1, len(table))
    blocked, found = [], []
    for seen, kept, dropped in zip(history, allowed, exclude):
        kept = np.asarray(kept)
        usable = np.setdiff1d(
            np.intersect1d(catalog, kept) if np.any(kept != 0) else catalog,
            np.concatenate([seen, dropped]),
        )
        blocked.append(np.setdiff1d(catalog, usable))
        found.append(min(len(usable), k))
    ids = retrieval.exact_top_k(queries, table, k, exclude=blocked)
    return np.where(np.arange(k) < np.array(found)[:, None], ids, 0), found


class ExportTest(tf.test.TestCase, parameterized.TestCase):
    def test_scann_min_items_0_indexes_a_small_catalog(self):
        _require_scann_ops(self)
        # The demo's setting: the 200 items get a real ScaNN index (its ops in the graph).
        model = _sasrec()
        # Every record, with none required (assertLogs fails when an earlier test in the
        # process quieted the loggers, as the jobs' mains do).
        records: list = []
        handler = logging.Handler(level=logging.DEBUG)
        handler.emit = records.append  # type: ignore[method-assign]
        logging.getLogger().addHandler(handler)
        try:
            path = export.export(
                model,
                os.path.join(tempfile.mkdtemp(), "scann"),
                k=10,
                index="scann",
                max_length=LENGTH,
                scann_min_items=0,
            )
        finally:
            logging.getLogger().removeHandler(handler)
        self.assertFalse([r for r in records if "searches exactly" in r.getMessage()])
        graph = tf.saved_model.load(path).signatures["serving_default"].graph.as_graph_def()
        ops = {node.op for function in graph.library.function for node in function.node_def}
        self.assertContainsSubset({"Scann>ScannSearchBatched", "Scann>TensorsToScann"}, ops)

    @parameterized.parameters("brute_force", "scann")
    @pytest.mark.integration  # Served by a fresh interpreter.
    def test_sasrec_reloads_alone_with_the_same_top_k(self, index):
        # 200 items are fewer than retrieval.SCANN_MIN_ITEMS: the "scann" export searches
        # exactly, says so, and needs no ScaNN ops to load.
        model = _sasrec()
        base = os.path.join(tempfile.mkdtemp(), index)
        with (
            self.assertLogs(level="WARNING")
            if index == "scann"
            else contextlib.nullcontext() as logs
        ):
            path = export.export(model, base, k=10, index=index, max_length=LENGTH)
        if index == "scann":
            self.assertIn(
                "fewer than scann_min_items=10000, so this export searches exactly", logs.output[0]
            )
        self.assertEqual(path, os.path.join(base, "1"))  # TF Serving's version directory.
        self.assertEqual(os.listdir(base), ["1"])  # No temporary directory left behind.
        # Histories longer than max_length: the query reads the last LENGTH items, and the
        # answer excludes all of them (the 5 oldest of the 13-item history too).
        histories = [[0] * 10 + [5, 7, 9], list(range(1, 14))]
        served = _serve_in_subprocess(path, "brute_force", {"history": histories})
        self.assertEqual(served["loaded"], [])
        self.assertEqual(served["embedding_shape"], [3, 16])
        padded = np.zeros([2, LENGTH], np.int32)
        padded[0, -3:] = [5, 7, 9]
        padded[1] = histories[1][-LENGTH:]
        queries = model.query_embeddings(padded).numpy()
        want = retrieval.exact_top_k(
            queries,
            model.item_embeddings().numpy(),
            10,
            exclude=[np.array([5, 7, 9]), np.array(histories[1])],
        )
        self.assertAllEqual(served["ids"], want)
        self.assertEmpty(np.intersect1d(served["ids"][1], histories[1]))

    def test_scann_never_answers_the_slots_its_index_could_not_fill(self):
        _require_scann_ops(self)
        # k near the catalog's size: the partitions searched hold fewer ids than asked, and
        # ScaNN pads the answer with its first id at a NaN score. Those slots are dropped
        # (the row answered exactly when left short), never served as item 1 again and again.
        import scann  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import

        model = _sasrec(1200)
        path = export.export(
            model,
            os.path.join(tempfile.mkdtemp(), "scann"),
            k=1000,
            index="scann",
            max_length=LENGTH,
            scann_min_items=0,
        )
        serve = tf.saved_model.load(path).signatures["serving_default"]
        history = np.random.default_rng(0).choice(np.arange(1, 1201), size=(4, 5), replace=False)
        answer = serve(history=tf.constant(history, tf.int64))
        ids = answer["ids"].numpy()
        self.assertFalse(np.isnan(answer["scores"].numpy()).any())
        self.assertEqual([len(np.unique(row)) for row in ids], [1000] * 4)
        exact = retrieval.exact_top_k(
            model.query_embeddings(history).numpy(),
            model.item_embeddings().numpy(),
            1000,
            exclude=list(history),
        )
        self.assertGreater(retrieval.overlap_at_k(ids, exact, 1000), 0.95)

    def test_scann_excludes_the_whole_history_and_keeps_to_allowed_sets(self):
        _require_scann_ops(self)
        import scann  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import

        num_items = 12_000  # Above retrieval.SCANN_MIN_ITEMS: a real ScaNN index.
        model = _sasrec(num_items)
        path = export.export(
            model, os.path.join(tempfile.mkdtemp(), "scann"), k=20, index="scann", max_length=LENGTH
        )
        serve = tf.saved_model.load(path).signatures["serving_default"]
        table = model.item_embeddings().numpy()
        rng = np.random.default_rng(0)
        short = rng.choice(np.arange(1, num_items + 1), size=(4, 30), replace=False)
        ids = serve(history=tf.constant(short, tf.int64))["ids"].numpy()
        exact = retrieval.exact_top_k(
            model.query_embeddings(short[:, -LENGTH:]).numpy(), table, 20, exclude=list(short)
        )
        self.assertEqual(ids.shape, (4, 20))
        for row in range(4):
            self.assertEmpty(np.intersect1d(ids[row], short[row]))
        # Untrained (random) embeddings are ANN's hard case; trained ones reach >= 0.95.
        self.assertGreater(retrieval.overlap_at_k(ids, exact, 20), 0.75)
        # All but 20 items seen (far more than the index re-scores): the answer is exactly the
        # 20 unseen items, found by the search or by the exact fallback.
        unseen = np.sort(rng.choice(np.arange(1, num_items + 1), 20, replace=False))
        seen = np.setdiff1d(np.arange(1, num_items + 1), unseen)
        other = np.zeros_like(seen)
        other[-20:] = short[0, :20]
        ids = serve(history=tf.constant([seen, other], tf.int64))["ids"].numpy()
        self.assertAllEqual(np.sort(ids[0]), unseen)
        self.assertEmpty(np.intersect1d(ids[1], short[0, :20]))
        # Filtered, one batch: an allowed set of 50 items (the index's 120 re-scored candidates
        # hold few of them: that row alone is answered exactly), one of all but 500 items (the
        # index answers), and none; each row with its history and 5 exclusions on top.
        signatures = tf.saved_model.load(path).signatures
        catalog = np.arange(1, num_items + 1)
        large = np.setdiff1d(catalog, rng.choice(catalog, 500, replace=False))
        allowed = np.zeros([3, large.size], np.int64)
        allowed[0, :50] = rng.choice(catalog, 50, replace=False)
        allowed[1] = large
        history, exclude = short[:3], short[3, :15].reshape(3, 5)
        out = signatures["serving_filtered"](
            history=tf.constant(history, tf.int64),
            allowed=tf.constant(allowed),
            exclude=tf.constant(exclude, tf.int64),
        )
        want, found = _restricted_top_k(
            model.query_embeddings(history[:, -LENGTH:]).numpy(),
            table,
            20,
            history,
            allowed,
            exclude,
        )
        self.assertAllEqual(out["num_found"], found)
        self.assertAllEqual(out["ids"][0], want[0])
        self.assertContainsSubset(out["ids"][1].numpy(), large)
        for row in range(3):
            self.assertEmpty(
                np.intersect1d(out["ids"][row], np.union1d(history[row], exclude[row]))
            )
        self.assertGreater(retrieval.overlap_at_k(out["ids"][1:].numpy(), want[1:], 20), 0.75)

    @parameterized.parameters("brute_force", "scann")
    def test_filtered_requests_equal_exact_search_restricted_to_the_set(self, index):
        _require_scann_ops(self, index)
        # 90 items, every one re-scored exactly by the ScaNN index (its 100 candidates): both
        # indexes must give exactly the restricted exact search, the ScaNN one through the
        # index for rows with k usable ids among its candidates, and exactly for the others.
        num_items, k = 90, 10
        model = _sasrec(num_items)
        vocabulary = [f"item-{i}" for i in range(1, num_items + 1)]
        path = export.export(
            model,
            os.path.join(tempfile.mkdtemp(), index),
            k=k,
            index=index,
            scann_min_items=0,
            item_vocabulary=vocabulary,
        )
        if index == "scann":
            import scann  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
        signatures = tf.saved_model.load(path).signatures
        self.assertContainsSubset(
            {"serving_default", "serving_filtered", "serving_raw", "serving_raw_filtered"},
            signatures,
        )
        history = np.zeros([5, LENGTH], np.int64)
        history[0, -3:], history[2, -2:], history[3, -1], history[4, -1] = [3, 4, 5], [1, 2], 7, 9
        allowed = np.zeros([5, 14], np.int64)
        allowed[0] = [3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 19]  # 3 seen, 8 excluded.
        allowed[2, :6] = [1, 2, 30, 31, 32, -5]  # Unknown -5 allows nothing: 2 of k are left.
        allowed[3, :2] = [-5, 10**6]  # Unknown ids only: nothing allowed.
        allowed[4] = np.arange(20, 34)  # Padding 0 nowhere; row 1: no allowed set.
        exclude = np.array([[8, 0], [1, 2], [30, 0], [0, 0], [25, 10**6]], np.int64)
        request = {"history": history, "allowed": allowed, "exclude": exclude}
        out = signatures["serving_filtered"](**{n: tf.constant(v) for n, v in request.items()})
        want, found = _restricted_top_k(
            model.query_embeddings(history.astype(np.int32)).numpy(),
            model.item_embeddings().numpy(),
            k,
            history,
            allowed,
            exclude,
        )
        self.assertAllEqual(out["ids"], want)
        self.assertAllEqual(out["num_found"], [10, 10, 2, 0, 10])
        self.assertAllEqual(found, [10, 10, 2, 0, 10])
        self.assertEqual(np.isfinite(out["scores"]).sum(axis=1).tolist(), found)
        self.assertContainsSubset(out["ids"][0].numpy(), range(9, 20))
        # Row 1 (exclusions only) is the plain answer minus its exclusions.
        plain = signatures["serving_default"](history=tf.constant(history))
        self.assertAllEqual(out["ids"][4:], want[4:])
        self.assertNotAllEqual(plain["ids"][1], out["ids"][1])
        # No filter (padding, or no columns at all) is the plain answer.
        for width in (0, 3):
            none = signatures["serving_filtered"](
                history=tf.constant(history),
                allowed=tf.zeros([5, width], tf.int64),
                exclude=tf.zeros([5, width], tf.int64),
            )
            self.assertAllEqual(none["ids"], plain["ids"])
            self.assertAllEqual(none["num_found"], plain["num_found"])
        # The raw ids: "" padding, an unknown raw id allows nothing / excludes nothing.
        raw_of = np.array([""] + vocabulary, object)

        def raw(ids):
            return np.where(
                (ids >= 1) & (ids <= num_items),
                raw_of[np.clip(ids, 0, num_items)],
                np.where(ids == 0, "", "unknown"),
            ).astype(str)

        got = signatures["serving_raw_filtered"](
            **{n: tf.constant(raw(v)) for n, v in request.items()}
        )
        self.assertAllEqual(got["ids"].numpy().astype(str), raw_of[want].astype(str))
        self.assertAllEqual(got["num_found"], found)
        self.assertAllEqual(got["unknown_allowed_ids"], [0, 0, 1, 2, 0])
        self.assertAllEqual(got["unknown_exclude_ids"], [0, 0, 0, 0, 1])
        self.assertAllClose(got["scores"], out["scores"])
        empty = signatures["serving_filtered"](
            history=tf.zeros([0, 3], tf.int64),
            allowed=tf.zeros([0, 2], tf.int64),
            exclude=tf.zeros([0, 0], tf.int64),
        )
        self.assertEqual(empty["ids"].shape, (0, k))

    def test_filtered_two_tower_with_integer_raw_ids(self):
        # An event log's export: the raw int64 ids are serving_filtered (negative: padding),
        # the dense ones serving_dense_filtered.
        model = _two_tower()
        items = [str(5000 + i) for i in range(1, NUM_ITEMS + 1)]
        path = export.export(
            model,
            os.path.join(tempfile.mkdtemp(), "tt"),
            k=5,
            item_vocabulary=items,
            user_vocabulary=[str(i) for i in range(50)],
            raw_ids="default",
            integer_ids=("user", "item"),
        )
        signatures = tf.saved_model.load(path).signatures
        history = np.array([[4, 9, 0], [0, 0, 0]], np.int64)
        allowed = np.array([[4, 11, 12, 13, 0, 0, 0, 0], [20, 21, 22, 23, 24, 25, 26, 27]])
        exclude = np.array([[12], [21]], np.int64)
        dense = signatures["serving_dense_filtered"](
            user=tf.constant([3, 7], tf.int64),
            history=tf.constant(history),
            allowed=tf.constant(allowed, tf.int64),
            exclude=tf.constant(exclude),
        )
        padded = np.zeros([2, LENGTH], np.int32)
        padded[0, -2:] = [4, 9]
        queries = model.query_embeddings(
            {"user": np.array([3, 7], np.int32), "history": padded}
        ).numpy()
        want, found = _restricted_top_k(
            queries, model.item_embeddings().numpy(), 5, history, allowed, exclude
        )
        self.assertAllEqual(dense["ids"], want)
        self.assertAllEqual(dense["num_found"], [2, 5])

        def raw(ids):
            return np.where(ids > 0, ids + 5000, -1)

        got = signatures["serving_filtered"](
            user=tf.constant([2, 6], tf.int64),  # Dense users 3 and 7.
            history=tf.constant(raw(history)),
            allowed=tf.constant(raw(allowed)),
            exclude=tf.constant(raw(exclude)),
        )
        self.assertAllEqual(got["ids"], np.where(want > 0, want + 5000, -1))
        self.assertAllEqual(got["unknown_allowed_ids"], [0, 0])

    @pytest.mark.integration
    def test_filtered_serving_demo(self):
        _require_scann_ops(self)  # It exports both indexes.
        # The user guide's command: trains the smoke preset, sends a filtered request to both
        # exports, and prints the REST body it sent.
        result = subprocess.run(
            [sys.executable, "-m", "examples.filtered_serving", "--repeats=2"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        lines = result.stdout.splitlines()
        for index in ("brute_force", "scann"):
            self.assertRegex(
                result.stdout,
                rf"{index} \(.*, serving_raw_filtered\).* ids outside "
                r"the allowed set or excluded 0; equal to exact restricted "
                r"search: True",
            )
        body = json.loads(
            lines[lines.index(next(line for line in lines if line.startswith("REST"))) + 1]
        )
        path = re.search(r"tf.saved_model.load\('([^']+)'\)", result.stdout).group(1)
        served = tf.saved_model.load(path).signatures[body["signature_name"]](
            **{name: tf.constant(value) for name, value in body["inputs"].items()}
        )
        ids = served["ids"].numpy().astype(str)
        for row, allowed in enumerate(body["inputs"]["allowed"]):
            found = ids[row, : served["num_found"][row]]
            self.assertContainsSubset(found, allowed)
            self.assertEmpty(np.intersect1d(found, body["inputs"]["exclude"][row]))

    def test_brute_force_excludes_a_history_longer_than_the_catalog_half(self):
        model = _sasrec()
        path = export.export(model, os.path.join(tempfile.mkdtemp(), "bf"), k=20, max_length=LENGTH)
        serve = tf.saved_model.load(path).signatures["serving_default"]
        seen = np.arange(1, 151)
        ids = serve(history=tf.constant([seen], tf.int64))["ids"].numpy()
        queries = model.query_embeddings(seen[None, -LENGTH:].astype(np.int32)).numpy()
        self.assertAllEqual(
            ids, retrieval.exact_top_k(queries, model.item_embeddings().numpy(), 20, exclude=[seen])
        )

    @parameterized.parameters("brute_force", "scann")
    def test_static_output_shapes_and_the_empty_batch(self, index):
        _require_scann_ops(self, index)
        path = export.export(
            _sasrec(12_000 if index == "scann" else NUM_ITEMS),
            os.path.join(tempfile.mkdtemp(), index),
            k=7,
            index=index,
            max_length=LENGTH,
        )
        if index == "scann":
            import scann  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
        serve = tf.saved_model.load(path).signatures["serving_default"]
        for name in ("ids", "scores"):
            self.assertEqual(serve.structured_outputs[name].shape.as_list(), [None, 7])
        empty = serve(history=tf.zeros([0, 5], tf.int64))
        self.assertEqual(empty["ids"].shape, (0, 7))
        self.assertEqual(empty["scores"].shape, (0, 7))
        # k above the catalog's size returns the whole catalog.
        whole = export.export(_sasrec(), os.path.join(tempfile.mkdtemp(), "bf"), k=500)
        out = tf.saved_model.load(whole).signatures["serving_default"](
            history=tf.constant([[3]], tf.int64)
        )
        self.assertEqual(out["ids"].shape, (1, NUM_ITEMS))

    def test_versions_and_interrupted_exports(self):
        base = os.path.join(tempfile.mkdtemp(), "bf")
        model = _sasrec()
        self.assertEqual(export.export(model, base, k=5), os.path.join(base, "1"))
        self.assertEqual(export.export(model, base, k=5), os.path.join(base, "2"))
        self.assertEqual(export.export(model, base, k=5, version=7), os.path.join(base, "7"))
        with self.assertRaisesRegex(ValueError, r"bf/7 exists: pass another `version`"):
            export.export(model, base, k=5, version=7)
        with self.assertRaisesRegex(
            ValueError,
            r"`version` must be a positive integer; "
            r"received version=0",
        ):
            export.export(model, base, k=5, version=0)
        # A save that dies midway leaves only its hidden temporary directory, which is removed.
        original = tf.saved_model.save

        def dies(*args, **kwargs):
            original(*args, **kwargs)
            raise KeyboardInterrupt("killed during the export")

        tf.saved_model.save = dies
        try:
            with self.assertRaises(KeyboardInterrupt):
                export.export(model, base, k=5)
        finally:
            tf.saved_model.save = original
        self.assertEqual(sorted(os.listdir(base)), ["1", "2", "7"])
        # A SIGKILL skips that cleanup: the next export of the version removes what is left.
        os.makedirs(os.path.join(base, ".8-partial-abc123", "variables"))
        self.assertEqual(export.export(model, base, k=5), os.path.join(base, "8"))
        self.assertEqual(sorted(os.listdir(base)), ["1", "2", "7", "8"])

    @pytest.mark.integration  # Served by a fresh interpreter.
    def test_two_tower_and_out_of_vocabulary_ids(self):
        model = _two_tower()
        path = export.export(model, os.path.join(tempfile.mkdtemp(), "bf"), k=5, max_length=LENGTH)
        # User 10**9 and item ids -1 and 10**9 are unknown: never a crash.
        served = _serve_in_subprocess(
            path, "brute_force", {"user": [3, 10**9], "history": [[4, 9, 0, 0], [-1, 10**9, 4, 9]]}
        )
        self.assertEqual(np.array(served["ids"]).shape, (2, 5))
        self.assertTrue(
            np.all((np.array(served["ids"]) >= 1) & (np.array(served["ids"]) <= NUM_ITEMS))
        )
        padded = np.zeros([2, LENGTH], np.int32)
        padded[:, -2:] = [4, 9]  # Unknown and padding entries dropped, order kept.
        queries = model.query_embeddings(
            {"user": np.array([3, 0], np.int32), "history": padded}
        ).numpy()
        want = retrieval.exact_top_k(
            queries, model.item_embeddings().numpy(), 5, exclude=[np.array([4, 9])] * 2
        )
        self.assertAllEqual(served["ids"], want)

    @parameterized.parameters("brute_force", "scann")
    def test_candidates_serve_part_of_the_catalog_as_exact_search_over_it(self, index):
        # An index of 120 of the 200 items (scann_min_items=0: a real ScaNN index), exhaustive
        # enough on 120 items to equal exact search; the history still excludes any item.
        _require_scann_ops(self, index)
        model = _two_tower()
        candidates = np.arange(3, 200, 5).tolist() + np.arange(100, 180).tolist()
        path = export.export(
            model,
            os.path.join(tempfile.mkdtemp(), index),
            k=10,
            index=index,
            max_length=LENGTH,
            scann_min_items=0,
            candidates=candidates,
        )
        loaded = tf.saved_model.load(path)
        history = np.array([[0, 0, 8, 103], [1, 2, 104, 105]], np.int64)
        answer = loaded.signatures["serving_default"](
            user=tf.constant([3, 7], tf.int64), history=tf.constant(history)
        )
        queries = model.query_embeddings(
            {"user": np.array([3, 7], np.int32), "history": history.astype(np.int32)}
        ).numpy()
        want = retrieval.exact_top_k(
            queries,
            model,
            10,
            exclude=[np.array([8, 103]), np.array([1, 2, 104, 105])],
            candidates=np.array(candidates),
        )
        ids = answer["ids"].numpy()
        self.assertTrue(np.isin(ids, candidates).all())
        if index == "brute_force":
            self.assertAllEqual(ids, want)
        else:  # ScaNN's quantised scores may swap near ties: the same set, nearly.
            self.assertGreaterEqual(
                np.mean([len(np.intersect1d(a, b)) for a, b in zip(ids, want)]), 9
            )
        # Any item's embedding, served or not, is the model's.
        embedded = loaded.signatures["item_embeddings"](item_ids=tf.constant([1, 4, 103], tf.int64))
        self.assertAllClose(
            embedded["embeddings"], model.item_embeddings(tf.constant([1, 4, 103])), atol=1e-6
        )
        with self.assertRaisesRegex(ValueError, r"`candidates` must be ids in \[1, 200\]"):
            export.export(model, tempfile.mkdtemp(), k=10, candidates=[0, 5])

    def test_raw_ids_in_and_out(self):
        # Raw ids as a GroupLens file has them: sparse movie ids, as strings.
        vocabulary = [str(1000 + 7 * i) for i in range(1, NUM_ITEMS + 1)]
        model = _sasrec()
        path = export.export(
            model, os.path.join(tempfile.mkdtemp(), "bf"), k=5, item_vocabulary=vocabulary
        )
        loaded = tf.saved_model.load(path)
        dense = np.array([[0, 4, 9, 17], [0, 3, 8, 1]], np.int64)
        raw = np.where(dense > 0, np.array([""] + vocabulary, object)[dense], "")
        raw[1, 0] = "unknown-id"  # Out of vocabulary: dropped, as padding is.
        want = loaded.signatures["serving_default"](history=tf.constant(dense))
        got = loaded.signatures["serving_raw"](history=tf.constant(raw.astype(str)))
        raw_of = np.array([""] + vocabulary)
        self.assertAllEqual(got["ids"].numpy().astype(str), raw_of[want["ids"].numpy()])
        self.assertAllClose(got["scores"], want["scores"])
        # The vocabulary is an asset file (one id a line), not a constant of the graph.
        with open(os.path.join(path, "assets", "items.txt")) as f:
            self.assertEqual(f.read().splitlines(), vocabulary)
        saved = saved_model_pb2.SavedModel()
        with open(os.path.join(path, "saved_model.pb"), "rb") as f:
            saved.ParseFromString(f.read())
        graph = saved.meta_graphs[0].graph_def
        nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
        longest = max(len(n.attr["value"].tensor.string_val) for n in nodes if n.op == "Const")
        self.assertLess(longest, NUM_ITEMS)
        two_tower = _two_tower()
        users = [f"u{i}" for i in range(1, 51)]
        tt_path = export.export(
            two_tower,
            os.path.join(tempfile.mkdtemp(), "tt"),
            k=5,
            item_vocabulary=vocabulary,
            user_vocabulary=users,
        )
        tt = tf.saved_model.load(tt_path).signatures
        want = tt["serving_default"](user=tf.constant([3, 0], tf.int64), history=tf.constant(dense))
        got = tt["serving_raw"](
            user=tf.constant(["u3", "nobody"]), history=tf.constant(raw.astype(str))
        )
        self.assertAllEqual(got["ids"].numpy().astype(str), raw_of[want["ids"].numpy()])
        with self.assertRaisesRegex(
            ValueError,
            r"needs `user_vocabulary` with "
            r"`item_vocabulary`.*received user_vocabulary=None",
        ):
            export.export(
                two_tower, os.path.join(tempfile.mkdtemp(), "x"), item_vocabulary=vocabulary
            )
        with self.assertRaisesRegex(
            ValueError,
            r"`item_vocabulary` must hold 200 distinct raw "
            r"ids, one per dense id 1..200; received 200 ids "
            r"\(199 distinct\)",
        ):
            export.export(
                model,
                os.path.join(tempfile.mkdtemp(), "x"),
                item_vocabulary=vocabulary[:-1] + vocabulary[:1],
            )
        with self.assertRaisesRegex(
            ValueError,
            r"`item_vocabulary` holds the raw id 'a\\nb'; an exported raw id is a non-empty "
            "string without line breaks",
        ):
            export.export(
                model,
                os.path.join(tempfile.mkdtemp(), "x"),
                item_vocabulary=vocabulary[:-1] + ["a\nb"],
            )

    def test_malformed_requests_and_signatures(self):
        path = export.export(_sasrec(), os.path.join(tempfile.mkdtemp(), "bf"), k=5)
        loaded = tf.saved_model.load(path)
        serve = loaded.signatures["serving_default"]
        with self.assertRaisesRegex(
            (TypeError, ValueError, tf.errors.InvalidArgumentError), r"int64|dtype|float"
        ):
            serve(history=tf.constant([[1.5, 2.0]]))
        # A wrong rank fails too (TensorFlow's own message from the signature or the graph).
        with self.assertRaises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
            serve(history=tf.constant([1, 2], tf.int64))
        empty = serve(history=tf.zeros([1, 0], tf.int64))
        self.assertEqual(empty["ids"].shape, (1, 5))
        self.assertEqual(serve(history=tf.zeros([0, 0], tf.int64))["ids"].shape, (0, 5))
        two_tower = tf.saved_model.load(
            export.export(_two_tower(), os.path.join(tempfile.mkdtemp(), "tt"), k=5)
        )
        with self.assertRaisesRegex(
            tf.errors.InvalidArgumentError, r"`user` and `history` must have the same batch size"
        ):
            two_tower.signatures["serving_default"](
                user=tf.constant([1, 2], tf.int64), history=tf.constant([[3]], tf.int64)
            )
        cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
        shown = subprocess.run(
            [cli, "show", "--all", "--dir", path],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        self.assertIn("signature_def['serving_default']", shown.stdout)
        self.assertIn("signature_def['item_embeddings']", shown.stdout)
        with self.assertRaisesRegex(
            ValueError,
            r"`index` must be one of brute_force, scann; "
            r"received index='faiss'",
        ):
            export.export(_sasrec(), path, index="faiss")
        with self.assertRaisesRegex(
            ValueError,
            r"`raw_ids` must be one of strings, default; "
            r"received raw_ids='int64'",
        ):
            export.export(_sasrec(), path, raw_ids="int64")
        with self.assertRaisesRegex(
            ValueError,
            r"`integer_ids` names kinds of ids, \"user\" "
            r"and \"item\"; received integer_ids=\('items',\)",
        ):
            export.export(_sasrec(), path, integer_ids=("items",))

    def test_exports_refuse_what_cannot_be_served(self):
        # Before, max_length=-3 or LENGTH + 1 exported, then every request failed.
        model = _sasrec()
        base = os.path.join(tempfile.mkdtemp(), "bf")
        for bad in (-3, 0, 2.5, True):
            with self.assertRaisesRegex(
                ValueError,
                r"`max_length` must be a positive integer; "
                rf"received max_length={bad!r}",
            ):
                export.export(model, base, k=5, max_length=bad)
        with self.assertRaisesRegex(
            ValueError,
            r"`max_length` must be at most the model's "
            r"max_length=8 \(the positions it learned\); received "
            r"max_length=9",
        ):
            export.export(model, base, k=5, max_length=LENGTH + 1)
        with self.assertRaisesRegex(
            ValueError,
            r"raw_ids='default' serves the raw ids of "
            r"`item_vocabulary`.*received item_vocabulary=None",
        ):
            export.export(model, base, raw_ids="default")
        with self.assertRaisesRegex(
            ValueError,
            r"`integer_ids` says which raw ids are served "
            r"as int64 and needs `item_vocabulary`",
        ):
            export.export(model, base, integer_ids=("item",))
        words = [f"m{i}" for i in range(1, NUM_ITEMS + 1)]
        with self.assertRaisesRegex(
            ValueError,
            r"`item_vocabulary` must hold non-negative "
            r"int64 ids as decimal strings.*received item_vocabulary "
            r"with 'm1', 'm2', 'm3'",
        ):
            export.export(model, base, item_vocabulary=words, integer_ids=("item",))
        with self.assertRaisesRegex(
            ValueError,
            r"`scann_min_items` must be a non-negative "
            r"integer; received scann_min_items=-1",
        ):
            export.export(model, base, scann_min_items=-1)
        a_file = os.path.join(tempfile.mkdtemp(), "file")
        open(a_file, "w").close()  # pylint: disable=consider-using-with
        with self.assertRaisesRegex(ValueError, r"`path` must be a directory .*which is a file"):
            export.export(model, a_file)
        model.output_embedding.embeddings[3].assign(tf.fill([16], np.nan))
        with self.assertRaisesRegex(
            ValueError,
            r"`model` has non-finite item embeddings \(NaN "
            r"or inf\) in rows \[3\] of 201",
        ):
            export.export(model, base)
        self.assertFalse(os.path.exists(base))  # Nothing written.
        # A two-tower model pools any history length.
        self.assertTrue(os.path.isdir(export.export(_two_tower(), base, k=5, max_length=500)))
        # ScaNN cannot index a catalog this small (scann_min_items=0 asks it to): named, and
        # nothing written.
        tiny = os.path.join(tempfile.mkdtemp(), "scann")
        if export.scann_export_available():
            error, message = ValueError, r"index='scann' cannot index this catalog of 6 items"
        else:  # TensorFlow 2.21: ScaNN's ops do not load, and the export says so.
            error, message = ImportError, r"index='scann' needs ScaNN's TensorFlow ops"
        with self.assertRaisesRegex(error, message + r".*index='brute_force'"):
            export.export(_sasrec(6), tiny, index="scann", scann_min_items=0)
        self.assertFalse(os.path.exists(tiny))

    def test_fewer_unseen_items_than_k_are_counted(self):
        _require_scann_ops(self)  # It exports both indexes.
        # A catalog of 40: a history of 38 leaves 2 unseen items for k=4. Before, the other
        # two slots held seen items scored -inf, and nothing said so.
        model = _sasrec(40)
        vocabulary = [str(100 + i) for i in range(1, 41)]
        for index in ("brute_force", "scann"):
            path = export.export(
                model,
                os.path.join(tempfile.mkdtemp(), index),
                k=4,
                index=index,
                scann_min_items=0,
                item_vocabulary=vocabulary,
                integer_ids=("item",),
            )
            if index == "scann":
                import scann  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
            signatures = tf.saved_model.load(path).signatures
            history = [list(range(1, 39)), [0] * 37 + [5]]
            out = signatures["serving_default"](history=tf.constant(history, tf.int64))
            self.assertAllEqual(out["num_found"], [2, 4])
            self.assertCountEqual(out["ids"][0, :2].numpy(), [39, 40])
            self.assertAllEqual(out["ids"][0, 2:], [0, 0])
            self.assertAllEqual(out["scores"][0, 2:], [-np.inf, -np.inf])
            self.assertTrue(np.all(np.isfinite(out["scores"][0, :2])))
            self.assertTrue(np.all(np.isfinite(out["scores"][1])))
            self.assertEmpty(np.intersect1d(out["ids"][1], [0, 5]))
            raw = signatures["serving_raw"](
                history=tf.constant([[int(v) for v in vocabulary]], tf.int64)
            )
            self.assertAllEqual(raw["num_found"], [0])
            self.assertAllEqual(raw["ids"], [[-1] * 4])
            self.assertEqual(
                signatures["serving_default"].structured_outputs["num_found"].dtype, tf.int32
            )

    def test_malformed_ranks_name_the_input(self):
        serve = tf.saved_model.load(
            export.export(_sasrec(), os.path.join(tempfile.mkdtemp(), "bf"), k=5)
        ).signatures
        for history in ([1, 2], [[[1, 2]]]):
            with self.assertRaisesRegex(
                tf.errors.InvalidArgumentError, r"`history` must be \[batch, length\] item ids"
            ):
                serve["serving_default"](history=tf.constant(history, tf.int64))
        with self.assertRaisesRegex(
            tf.errors.InvalidArgumentError, r"`item_ids` must be \[batch\] item ids"
        ):
            serve["item_embeddings"](item_ids=tf.constant([[1]], tf.int64))
        two_tower = tf.saved_model.load(
            export.export(_two_tower(), os.path.join(tempfile.mkdtemp(), "tt"), k=5)
        ).signatures
        with self.assertRaisesRegex(
            tf.errors.InvalidArgumentError, r"`user` must be \[batch\] user ids"
        ):
            two_tower["serving_default"](
                user=tf.constant([[1]], tf.int64), history=tf.constant([[3]], tf.int64)
            )

    def test_malformed_filters_name_the_input(self):
        loaded = tf.saved_model.load(
            export.export(
                _sasrec(),
                os.path.join(tempfile.mkdtemp(), "bf"),
                k=5,
                item_vocabulary=[str(i) for i in range(1, NUM_ITEMS + 1)],
            )
        )
        history = tf.constant([[3]], tf.int64)
        good = tf.constant([[4]], tf.int64)
        for name in ("allowed", "exclude"):
            for signature, ids in (
                ("serving_filtered", [[[4]]]),
                ("serving_filtered", [4]),
                ("serving_raw_filtered", [["4"]] * 2),
                ("serving_raw_filtered", ["4"]),
            ):
                request = {"history": history, "allowed": good, "exclude": good}
                if signature == "serving_raw_filtered":
                    request = {key: tf.strings.as_string(value) for key, value in request.items()}
                request[name] = tf.constant(ids, request["history"].dtype)
                message = (
                    rf"`{name}` and `history` must have the same batch size"
                    if len(np.shape(ids)) == 2
                    else rf"`{name}` must be \[batch, n\] item ids"
                )
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message):
                    loaded.signatures[signature](**request)
            # A wrong dtype: the restored function names the input; a signature's own check
            # (run by TensorFlow before the graph) gives its position among the inputs, sorted
            # by name (allowed, exclude, history).
            request = {
                "history": history,
                "allowed": good,
                "exclude": good,
                name: tf.constant([[4.5]]),
            }
            with self.assertRaisesRegex(
                TypeError,
                rf"Can not cast TensorSpec\(shape=\(1, 1\), "
                rf"dtype=tf.float32.*name='{name}'\)",
            ):
                loaded.serve_filtered(**request)
            with self.assertRaisesRegex(
                tf.errors.InvalidArgumentError,
                rf"input #{['allowed', 'exclude'].index(name)}"
                r"\(zero-based\) was expected to be a int64 tensor but "
                r"is a float tensor",
            ):
                loaded.signatures["serving_filtered"](**request)


if __name__ == "__main__":
    tf.test.main()


class DocumentedSignaturesTest(tf.test.TestCase):
    """Every signature, input and output the serving guides name is one an export has (the
    guides once promised a `serving_raw` that event-log exports do not carry)."""

    GUIDES = ("docs/guide/serving.md", "docs/guide/event_logs.md")
    # Words in backticks that look like a signature's or an answer's name.
    NAME = re.compile(r"`((?:serving|unknown|item)_[a-z_]+|num_found|ids|scores|embeddings)`")

    def test_the_guides_name_only_what_exports_serve(self):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        named = set()
        for guide in self.GUIDES:
            with open(os.path.join(root, guide)) as f:
                named |= set(self.NAME.findall(f.read()))
        base = tempfile.mkdtemp()
        items = [f"i{i}" for i in range(1, NUM_ITEMS + 1)]
        users = [f"u{i}" for i in range(1, 51)]
        exports = [
            export.export(_two_tower(), os.path.join(base, "dense")),
            export.export(
                _two_tower(),
                os.path.join(base, "raw"),
                item_vocabulary=items,
                user_vocabulary=users,
            ),
            export.export(
                _two_tower(),
                os.path.join(base, "log"),
                item_vocabulary=items,
                user_vocabulary=users,
                raw_ids="default",
            ),
        ]
        served = set()
        for path in exports:
            for name, signature in tf.saved_model.load(path).signatures.items():
                served.add(name)
                served |= set(signature.structured_outputs)
                served |= set(signature.structured_input_signature[1])
        self.assertContainsSubset({"serving_raw", "serving_dense", "unknown_user"}, named)
        self.assertContainsSubset(named, served)
        log = tf.saved_model.load(exports[2]).signatures
        self.assertNotIn("serving_raw", log)  # An event log's raw ids are the default.
        self.assertEqual(
            log["serving_default"].structured_input_signature[1]["history"].dtype, tf.string
        )
