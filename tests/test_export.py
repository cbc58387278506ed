"""Tests of tfrs_logq.export: SavedModels that a bare TensorFlow process serves with the same top-k."""

import contextlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from tfrs_logq import export
from tfrs_logq import retrieval
from tfrs_logq.models import RetrievalObjective, SASRec, TwoTower

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


def _sasrec(num_items=NUM_ITEMS):
    tf.keras.utils.set_random_seed(0)
    model = SASRec(num_items, RetrievalObjective(num_items, loss="full_softmax"),
                   max_length=LENGTH, dim=16, dropout=0.0)
    model(tf.zeros([1, LENGTH], tf.int32))
    return model


def _two_tower():
    tf.keras.utils.set_random_seed(0)
    model = TwoTower(50, NUM_ITEMS, RetrievalObjective(NUM_ITEMS, loss="full_softmax"), dim=16)
    model({"user": tf.zeros([1], tf.int32), "history": tf.zeros([1, LENGTH], tf.int32)})
    return model


def _serve_in_subprocess(path, index, request):
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    result = subprocess.run([sys.executable, "-c", _LOAD, path, index, json.dumps(request)],
                            capture_output=True, text=True, timeout=600, check=False, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


class ExportTest(tf.test.TestCase, parameterized.TestCase):

    def test_scann_min_items_0_indexes_a_small_catalog(self):
        # The demo's setting: the 200 items get a real ScaNN index (its ops in the graph).
        model = _sasrec()
        with self.assertLogs(level="WARNING") as logs:
            path = export.export(model, os.path.join(tempfile.mkdtemp(), "scann"), k=10,
                                 index="scann", max_length=LENGTH, scann_min_items=0)
        self.assertFalse([line for line in logs.output if "searches exactly" in line])
        graph = tf.saved_model.load(path).signatures["serving_default"].graph.as_graph_def()
        ops = {node.op for function in graph.library.function for node in function.node_def}
        self.assertContainsSubset({"Scann>ScannSearchBatched", "Scann>TensorsToScann"}, ops)

    @parameterized.parameters("brute_force", "scann")
    def test_sasrec_reloads_alone_with_the_same_top_k(self, index):
        # 200 items are fewer than retrieval.SCANN_MIN_ITEMS: the "scann" export searches
        # exactly, says so, and needs no ScaNN ops to load.
        model = _sasrec()
        base = os.path.join(tempfile.mkdtemp(), index)
        with self.assertLogs(level="WARNING") if index == "scann" else contextlib.nullcontext(
        ) as logs:
            path = export.export(model, base, k=10, index=index, max_length=LENGTH)
        if index == "scann":
            self.assertIn("fewer than scann_min_items=10000, so this export searches exactly",
                          logs.output[0])
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
        want = retrieval.exact_top_k(queries, model.item_embeddings().numpy(), 10,
                                     exclude=[np.array([5, 7, 9]), np.array(histories[1])])
        self.assertAllEqual(served["ids"], want)
        self.assertEmpty(np.intersect1d(served["ids"][1], histories[1]))

    def test_scann_excludes_the_whole_history(self):
        import scann  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import
        num_items = 12_000  # Above retrieval.SCANN_MIN_ITEMS: a real ScaNN index.
        model = _sasrec(num_items)
        path = export.export(model, os.path.join(tempfile.mkdtemp(), "scann"), k=20,
                             index="scann", max_length=LENGTH)
        serve = tf.saved_model.load(path).signatures["serving_default"]
        table = model.item_embeddings().numpy()
        rng = np.random.default_rng(0)
        short = rng.choice(np.arange(1, num_items + 1), size=(4, 30), replace=False)
        ids = serve(history=tf.constant(short, tf.int64))["ids"].numpy()
        exact = retrieval.exact_top_k(model.query_embeddings(short[:, -LENGTH:]).numpy(), table,
                                      20, exclude=list(short))
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

    def test_brute_force_excludes_a_history_longer_than_the_catalog_half(self):
        model = _sasrec()
        path = export.export(model, os.path.join(tempfile.mkdtemp(), "bf"), k=20,
                             max_length=LENGTH)
        serve = tf.saved_model.load(path).signatures["serving_default"]
        seen = np.arange(1, 151)
        ids = serve(history=tf.constant([seen], tf.int64))["ids"].numpy()
        queries = model.query_embeddings(seen[None, -LENGTH:].astype(np.int32)).numpy()
        self.assertAllEqual(ids, retrieval.exact_top_k(queries, model.item_embeddings().numpy(),
                                                       20, exclude=[seen]))

    @parameterized.parameters("brute_force", "scann")
    def test_static_output_shapes_and_the_empty_batch(self, index):
        path = export.export(_sasrec(12_000 if index == "scann" else NUM_ITEMS),
                             os.path.join(tempfile.mkdtemp(), index), k=7, index=index,
                             max_length=LENGTH)
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
            history=tf.constant([[3]], tf.int64))
        self.assertEqual(out["ids"].shape, (1, NUM_ITEMS))

    def test_versions_and_interrupted_exports(self):
        base = os.path.join(tempfile.mkdtemp(), "bf")
        model = _sasrec()
        self.assertEqual(export.export(model, base, k=5), os.path.join(base, "1"))
        self.assertEqual(export.export(model, base, k=5), os.path.join(base, "2"))
        self.assertEqual(export.export(model, base, k=5, version=7), os.path.join(base, "7"))
        with self.assertRaisesRegex(ValueError, r"bf/7 exists: pass another `version`"):
            export.export(model, base, k=5, version=7)
        with self.assertRaisesRegex(ValueError, r"`version` must be a positive integer; "
                                    r"received version=0"):
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

    def test_two_tower_and_out_of_vocabulary_ids(self):
        model = _two_tower()
        path = export.export(model, os.path.join(tempfile.mkdtemp(), "bf"), k=5,
                             max_length=LENGTH)
        # User 10**9 and item ids -1 and 10**9 are unknown: never a crash.
        served = _serve_in_subprocess(path, "brute_force", {
            "user": [3, 10**9], "history": [[4, 9, 0, 0], [-1, 10**9, 4, 9]]})
        self.assertEqual(np.array(served["ids"]).shape, (2, 5))
        self.assertTrue(np.all((np.array(served["ids"]) >= 1)
                               & (np.array(served["ids"]) <= NUM_ITEMS)))
        padded = np.zeros([2, LENGTH], np.int32)
        padded[:, -2:] = [4, 9]  # Unknown and padding entries dropped, order kept.
        queries = model.query_embeddings({"user": np.array([3, 0], np.int32),
                                          "history": padded}).numpy()
        want = retrieval.exact_top_k(queries, model.item_embeddings().numpy(), 5,
                                     exclude=[np.array([4, 9])] * 2)
        self.assertAllEqual(served["ids"], want)

    def test_raw_ids_in_and_out(self):
        # Raw ids as a GroupLens file has them: sparse movie ids, as strings.
        vocabulary = [str(1000 + 7 * i) for i in range(1, NUM_ITEMS + 1)]
        model = _sasrec()
        path = export.export(model, os.path.join(tempfile.mkdtemp(), "bf"), k=5,
                             item_vocabulary=vocabulary)
        loaded = tf.saved_model.load(path)
        dense = np.array([[0, 4, 9, 17], [0, 3, 8, 1]], np.int64)
        raw = np.where(dense > 0, np.array([""] + vocabulary, object)[dense], "")
        raw[1, 0] = "unknown-id"  # Out of vocabulary: dropped, as padding is.
        want = loaded.signatures["serving_default"](history=tf.constant(dense))
        got = loaded.signatures["serving_raw"](history=tf.constant(raw.astype(str)))
        raw_of = np.array([""] + vocabulary)
        self.assertAllEqual(got["ids"].numpy().astype(str), raw_of[want["ids"].numpy()])
        self.assertAllClose(got["scores"], want["scores"])
        two_tower = _two_tower()
        users = [f"u{i}" for i in range(1, 51)]
        tt_path = export.export(two_tower, os.path.join(tempfile.mkdtemp(), "tt"), k=5,
                                item_vocabulary=vocabulary, user_vocabulary=users)
        tt = tf.saved_model.load(tt_path).signatures
        want = tt["serving_default"](user=tf.constant([3, 0], tf.int64),
                                     history=tf.constant(dense))
        got = tt["serving_raw"](user=tf.constant(["u3", "nobody"]),
                                history=tf.constant(raw.astype(str)))
        self.assertAllEqual(got["ids"].numpy().astype(str), raw_of[want["ids"].numpy()])
        with self.assertRaisesRegex(ValueError, r"needs `user_vocabulary` with "
                                    r"`item_vocabulary`.*received user_vocabulary=None"):
            export.export(two_tower, os.path.join(tempfile.mkdtemp(), "x"),
                          item_vocabulary=vocabulary)
        with self.assertRaisesRegex(ValueError, r"`item_vocabulary` must hold 200 distinct raw "
                                    r"ids, one per dense id 1..200; received 200 ids "
                                    r"\(199 distinct\)"):
            export.export(model, os.path.join(tempfile.mkdtemp(), "x"),
                          item_vocabulary=vocabulary[:-1] + vocabulary[:1])

    def test_malformed_requests_and_signatures(self):
        path = export.export(_sasrec(), os.path.join(tempfile.mkdtemp(), "bf"), k=5)
        loaded = tf.saved_model.load(path)
        serve = loaded.signatures["serving_default"]
        with self.assertRaisesRegex((TypeError, ValueError, tf.errors.InvalidArgumentError),
                                    r"int64|dtype|float"):
            serve(history=tf.constant([[1.5, 2.0]]))
        # A wrong rank fails too (TensorFlow's own message from the signature or the graph).
        with self.assertRaises((TypeError, ValueError, tf.errors.InvalidArgumentError)):
            serve(history=tf.constant([1, 2], tf.int64))
        empty = serve(history=tf.zeros([1, 0], tf.int64))
        self.assertEqual(empty["ids"].shape, (1, 5))
        self.assertEqual(serve(history=tf.zeros([0, 0], tf.int64))["ids"].shape, (0, 5))
        two_tower = tf.saved_model.load(export.export(
            _two_tower(), os.path.join(tempfile.mkdtemp(), "tt"), k=5))
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    r"`user` and `history` must have the same batch size"):
            two_tower.signatures["serving_default"](user=tf.constant([1, 2], tf.int64),
                                                    history=tf.constant([[3]], tf.int64))
        cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
        shown = subprocess.run([cli, "show", "--all", "--dir", path], capture_output=True,
                               text=True, timeout=300, check=False)
        self.assertIn("signature_def['serving_default']", shown.stdout)
        self.assertIn("signature_def['item_embeddings']", shown.stdout)
        with self.assertRaisesRegex(ValueError, r"`index` must be one of brute_force, scann; "
                                    r"received index='faiss'"):
            export.export(_sasrec(), path, index="faiss")
        with self.assertRaisesRegex(ValueError, r"`raw_ids` must be one of strings, default; "
                                    r"received raw_ids='int64'"):
            export.export(_sasrec(), path, raw_ids="int64")
        with self.assertRaisesRegex(ValueError, r"`integer_ids` names kinds of ids, \"user\" "
                                    r"and \"item\"; received integer_ids=\('items',\)"):
            export.export(_sasrec(), path, integer_ids=("items",))

    def test_exports_refuse_what_cannot_be_served(self):
        # Before, max_length=-3 or LENGTH + 1 exported, then every request failed.
        model = _sasrec()
        base = os.path.join(tempfile.mkdtemp(), "bf")
        for bad in (-3, 0, 2.5, True):
            with self.assertRaisesRegex(ValueError, r"`max_length` must be a positive integer; "
                                        rf"received max_length={bad!r}"):
                export.export(model, base, k=5, max_length=bad)
        with self.assertRaisesRegex(ValueError, r"`max_length` must be at most the model's "
                                    r"max_length=8 \(the positions it learned\); received "
                                    r"max_length=9"):
            export.export(model, base, k=5, max_length=LENGTH + 1)
        with self.assertRaisesRegex(ValueError, r"raw_ids='default' serves the raw ids of "
                                    r"`item_vocabulary`.*received item_vocabulary=None"):
            export.export(model, base, raw_ids="default")
        with self.assertRaisesRegex(ValueError, r"`integer_ids` says which raw ids are served "
                                    r"as int64 and needs `item_vocabulary`"):
            export.export(model, base, integer_ids=("item",))
        words = [f"m{i}" for i in range(1, NUM_ITEMS + 1)]
        with self.assertRaisesRegex(ValueError, r"`item_vocabulary` must hold non-negative "
                                    r"int64 ids as decimal strings.*received item_vocabulary "
                                    r"with 'm1', 'm2', 'm3'"):
            export.export(model, base, item_vocabulary=words, integer_ids=("item",))
        with self.assertRaisesRegex(ValueError, r"`scann_min_items` must be a non-negative "
                                    r"integer; received scann_min_items=-1"):
            export.export(model, base, scann_min_items=-1)
        a_file = os.path.join(tempfile.mkdtemp(), "file")
        open(a_file, "w").close()  # pylint: disable=consider-using-with
        with self.assertRaisesRegex(ValueError, r"`path` must be a directory .*which is a file"):
            export.export(model, a_file)
        model.output_embedding.embeddings[3].assign(tf.fill([16], np.nan))
        with self.assertRaisesRegex(ValueError, r"`model` has non-finite item embeddings \(NaN "
                                    r"or inf\) in rows \[3\] of 201"):
            export.export(model, base)
        self.assertFalse(os.path.exists(base))  # Nothing written.
        # A two-tower model pools any history length.
        self.assertTrue(os.path.isdir(export.export(_two_tower(), base, k=5, max_length=500)))
        # ScaNN cannot index a catalog this small (scann_min_items=0 asks it to): named, and
        # nothing written.
        tiny = os.path.join(tempfile.mkdtemp(), "scann")
        with self.assertRaisesRegex(ValueError, r"index='scann' cannot index this catalog of 6 "
                                    r"items.*index='brute_force'"):
            export.export(_sasrec(6), tiny, index="scann", scann_min_items=0)
        self.assertFalse(os.path.exists(tiny))

    def test_fewer_unseen_items_than_k_are_counted(self):
        # A catalog of 40: a history of 38 leaves 2 unseen items for k=4. Before, the other
        # two slots held seen items scored -inf, and nothing said so.
        model = _sasrec(40)
        vocabulary = [str(100 + i) for i in range(1, 41)]
        for index in ("brute_force", "scann"):
            path = export.export(model, os.path.join(tempfile.mkdtemp(), index), k=4,
                                 index=index, scann_min_items=0, item_vocabulary=vocabulary,
                                 integer_ids=("item",))
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
            raw = signatures["serving_raw"](history=tf.constant([[int(v) for v in vocabulary]],
                                                                tf.int64))
            self.assertAllEqual(raw["num_found"], [0])
            self.assertAllEqual(raw["ids"], [[-1] * 4])
            self.assertEqual(signatures["serving_default"].structured_outputs["num_found"].dtype,
                             tf.int32)

    def test_malformed_ranks_name_the_input(self):
        serve = tf.saved_model.load(export.export(
            _sasrec(), os.path.join(tempfile.mkdtemp(), "bf"), k=5)).signatures
        for history in ([1, 2], [[[1, 2]]]):
            with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                        r"`history` must be \[batch, length\] item ids"):
                serve["serving_default"](history=tf.constant(history, tf.int64))
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    r"`item_ids` must be \[batch\] item ids"):
            serve["item_embeddings"](item_ids=tf.constant([[1]], tf.int64))
        two_tower = tf.saved_model.load(export.export(
            _two_tower(), os.path.join(tempfile.mkdtemp(), "tt"), k=5)).signatures
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError,
                                    r"`user` must be \[batch\] user ids"):
            two_tower["serving_default"](user=tf.constant([[1]], tf.int64),
                                         history=tf.constant([[3]], tf.int64))


if __name__ == "__main__":
    tf.test.main()
