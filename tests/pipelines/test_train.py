"""Tests of the training and evaluation entry points (smoke preset: seconds per run)."""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from absl.testing import parameterized

from pipelines import callbacks as callbacks_lib
from pipelines import cluster as cluster_lib
from pipelines import configs
from pipelines import experiment
from pipelines import per_query
from pipelines import run_files
from pipelines import train
from pipelines.data import events as events_lib
from pipelines.data import logs
from pipelines.data.interactions import DataError
from tests import conftest
from tfrs_logq import retrieval

SMOKE = configs.PRESETS["smoke"]


def _left_padded(histories):
    """[users, longest] int64 serving requests: each whole history, left-padded with 0."""
    longest = max(len(history) for history in histories)
    requests = np.zeros([len(histories), longest], np.int64)
    for row, history in enumerate(histories):
        requests[row, longest - len(history) :] = history
    return requests


def _cli(module, *args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _finish_as_uninterrupted(test, args, resumed, uninterrupted):
    """Runs `pipelines.train` with `args` in `resumed` (a run to continue) and in
    `uninterrupted` (a fresh one), checks that both test metrics and best validation
    values are equal, and returns both metrics.json contents."""
    for output_dir in (resumed, uninterrupted):
        result = _cli("pipelines.train", *args, f"--output_dir={output_dir}")
        test.assertEqual(result.returncode, 0, result.stderr[-2000:])
    metrics, reference = (
        json.load(open(os.path.join(d, "metrics.json"))) for d in (resumed, uninterrupted)
    )
    test.assertEqual(metrics["test"], reference["test"])
    test.assertEqual(metrics["best_validation_ndcg@10"], reference["best_validation_ndcg@10"])
    return metrics, reference


@pytest.mark.integration
class TrainRunTest(tf.test.TestCase):
    def test_run_writes_metrics_and_evaluate_reproduces_them(self):
        out = tempfile.mkdtemp()
        metrics = train.run(SMOKE, out, verbose=0)
        with open(os.path.join(out, "metrics.json")) as f:
            saved = json.load(f)
        self.assertEqual(saved["test"], metrics["test"])
        self.assertEqual(
            sorted(saved["test"]),
            sorted(f"{m}@{k}" for m in ("recall", "ndcg") for k in (1, 10, 20, 100)),
        )
        self.assertEqual(saved["config"], SMOKE.as_dict())
        self.assertRegex(saved["git_revision"], r"^([0-9a-f]{40}(\+dirty)?|unknown)$")
        self.assertEqual(saved["steps"], 50)
        self.assertIn(saved["best_epoch"], (0, 1))  # Of the smoke preset's 2 epochs.
        self.assertNotIn("per_query", saved)
        queries = per_query.load(os.path.join(out, "per_query_test.npz"))
        self.assertEqual((queries["split"], queries["index"]), ("test", "exact"))
        self.assertLen(queries["users"], saved["num_test_queries"])
        for name, value in saved["test"].items():  # Its means are the reported metrics.
            self.assertAllClose(np.mean(queries["values"][name]), value, atol=1e-6)
        self.assertIn("oracle", saved["baselines"])
        bands = saved["baselines"]["popularity"]["by_popularity"]
        self.assertEqual(sorted(bands), sorted(saved["by_popularity"]))
        # The popularity ranker's top 10 (history aside) lie in the head third of 400 items.
        self.assertEqual((bands["torso_recall@10"], bands["tail_recall@10"]), (0.0, 0.0))
        self.assertGreater(bands["head_recall@10"], 0.0)
        self.assertIn("by_popularity", saved["baselines"]["oracle"])
        self.assertTrue(os.path.exists(os.path.join(out, "checkpoints", "best.index")))
        # Both indexes were run: ScaNN on a 400-item catalog returns nearly the exact top-100.
        self.assertEqual(saved["test"], saved["test_exact"])
        self.assertGreater(saved["ann_overlap@100"], 0.9)
        self.assertEqual(
            sorted(saved["by_popularity"]),
            sorted(f"{band}_recall@{k}" for band in ("head", "torso", "tail") for k in (10, 100)),
        )
        for index in ("brute_force", "scann"):
            self.assertTrue(
                os.path.exists(os.path.join(out, "export", index, "1", "saved_model.pb"))
            )
        self.assertEqual(
            saved["exports"],
            [os.path.join(out, "export", index, "1") for index in ("brute_force", "scann")],
        )
        # Served = evaluated: the exported brute-force model, given each test user's whole
        # history, returns exactly the offline evaluation's top 100 (history filtered).
        config, model, data_split, data = experiment.load_run(out)
        test_set = data_split.test
        signatures = tf.saved_model.load(saved["exports"][0]).signatures
        served = signatures["serving_default"]
        requests = _left_padded(test_set.histories)
        self.assertGreater(requests.shape[1], config.model.max_length)  # Histories the query cuts.
        offline = retrieval.exact_top_k(
            experiment.query_embeddings(model, config, test_set),
            model.item_embeddings().numpy(),
            100,
            exclude=test_set.histories,
        )
        self.assertAllEqual(served(history=tf.constant(requests))["ids"].numpy(), offline)
        # The same answer in the source's raw ids (padding is "", not a raw id).
        raw = signatures["serving_raw"](history=tf.constant(data.item_ids[requests]))
        self.assertAllEqual(raw["ids"].numpy().astype(str), data.item_ids[offline])
        self.assertNotEmpty(os.listdir(os.path.join(out, "logs", "train")))

        result = _cli("pipelines.evaluate", out, "--geometry")
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertIn(
            f"| model | ndcg | {metrics['test']['ndcg@1']:.4f} | "
            f"{metrics['test']['ndcg@10']:.4f} |",
            result.stdout,
        )
        geometry = re.search(
            r"Embedding geometry \(test queries\): mean item direction norm "
            r"([0-9.]+), score std per query ([0-9.]+), mean item norm "
            r"([0-9.]+)",
            result.stdout,
        )
        self.assertIsNotNone(geometry, result.stdout)
        self.assertBetween(float(geometry.group(1)), 0.0, 1.0)
        self.assertGreater(float(geometry.group(2)), 0.0)
        with open(os.path.join(out, "metrics.json")) as f:
            self.assertNotIn("geometry", json.load(f)["test"])
        result = _cli("pipelines.evaluate", out, "--index=scann")
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertIn(
            f"| model | recall | {metrics['test_scann']['recall@1']:.4f} |", result.stdout
        )
        # The baselines the run scored, as training printed them.
        popularity = metrics["baselines"]["popularity"]["recall@1"]
        self.assertIn(f"| popularity (baseline) | recall | {popularity:.4f} |", result.stdout)
        result = _cli("pipelines.export", out, "--index=brute_force", "--k=7")
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertIn("Wrote " + os.path.join(out, "export", "brute_force", "2"), result.stdout)

    def test_output_dir_holds_one_config(self):
        out = tempfile.mkdtemp()
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(SMOKE.replace(dim=8).as_dict(), f)
        os.makedirs(os.path.join(out, "backup"))  # That run had trained.
        with self.assertRaisesRegex(
            ValueError,
            r"holds a run with another config \(differs in "
            r"dim\); use another --output_dir",
        ):
            train.run(SMOKE, out, verbose=0)

    def test_a_run_that_failed_on_its_data_does_not_claim_the_directory(self):
        out = tempfile.mkdtemp()
        bad = os.path.join(out, "bad.txt")
        with open(bad, "w") as f:
            f.write("1 1\n1 2\n1 3\n")  # One user: no validation query (the draw misses it).
        config = SMOKE.replace(dataset="ml-1m", data_path=bad)
        with self.assertRaisesRegex(
            DataError,
            r"bad.txt: the loo split leaves no validation "
            r"queries \(1 users, 3 interactions\)",
        ):
            train.run(config, os.path.join(out, "run"), verbose=0)
        self.assertFalse(os.path.exists(os.path.join(out, "run", "config.json")))
        # The corrected command in the same directory is accepted (no "another config").
        good = os.path.join(out, "good.txt")
        with open(good, "w") as f:
            f.writelines(f"{u} {i}\n" for u in range(1, 41) for i in range(1, 8))
        metrics = train.run(
            config.replace(data_path=good, epochs=1, steps_per_epoch=2),
            os.path.join(out, "run"),
            verbose=0,
        )
        self.assertEqual(metrics["num_items"], 7)

    def test_two_tower_temporal(self):
        config = SMOKE.replace(
            model="two_tower",
            split="temporal",
            history_length=8,
            negatives="in_batch",
            correction="standard",
            epochs=1,
        )
        out = tempfile.mkdtemp()
        metrics = train.run(config, out, verbose=0)
        self.assertBetween(metrics["test"]["recall@100"], 0.0, 1.0)
        # The export reads --history_length (8) items, as the evaluation does: same top 100.
        _, model, data_split, _ = experiment.load_run(out)
        test_set = data_split.test
        requests = _left_padded(test_set.histories)
        self.assertGreater(requests.shape[1], 8)
        served = tf.saved_model.load(metrics["exports"][0]).signatures["serving_default"](
            user=tf.constant(test_set.users, tf.int64), history=tf.constant(requests)
        )
        offline = retrieval.exact_top_k(
            experiment.query_embeddings(model, config, test_set),
            model.item_embeddings().numpy(),
            100,
            exclude=test_set.histories,
        )
        self.assertAllEqual(served["ids"].numpy(), offline)

    def test_same_seed_runs_train_alike(self):
        config = SMOKE.replace(epochs=1, steps_per_epoch=10, index="exact")
        first, second = (train.run(config, tempfile.mkdtemp(), verbose=0) for _ in range(2))
        self.assertEqual(first["last_epoch"], second["last_epoch"])
        self.assertEqual(first["test"], second["test"])

    def test_two_runs_compared_query_by_query(self):
        from pipelines import evaluate  # pylint: disable=import-outside-toplevel
        from pipelines import per_query  # pylint: disable=import-outside-toplevel

        config = SMOKE.replace(epochs=1, steps_per_epoch=10, index="exact")
        base, other = tempfile.mkdtemp(), tempfile.mkdtemp()
        a = train.run(config.replace(correction="none"), base, verbose=0)["test"]
        b = train.run(config, other, verbose=0)["test"]
        comparison = evaluate.compare_runs(other, base)
        self.assertEqual(sorted(comparison), sorted(a))
        for metric, row in comparison.items():
            self.assertEqual(row["n"], 300)  # The synthetic catalog's 300 test users.
            self.assertAlmostEqual(row["mean_a"], a[metric], places=12)
            self.assertAlmostEqual(row["mean_b"], b[metric], places=12)
            self.assertAlmostEqual(row["difference"], b[metric] - a[metric], places=12)
        self.assertGreater(comparison["ndcg@100"]["se"], 0.0)
        self.assertEqual(evaluate.compare_runs(base, base)["ndcg@10"]["p"], 1.0)
        path = os.path.join(other, "paired.json")
        result = _cli("pipelines.evaluate", other, f"--against={base}", f"--output_json={path}")
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        row = comparison["ndcg@20"]
        self.assertIn(
            f"| ndcg@20 | {row['mean_b']:.4f} | {row['mean_a']:.4f} | "
            f"{row['difference']:+.4f} | {row['se']:.4f} | {row['t']:.2f} |",
            result.stdout,
        )
        with open(path) as f:
            saved = json.load(f)
        self.assertEqual((saved["b"], saved["a"], saved["split"]), (other, base, "test"))
        self.assertAlmostEqual(saved["metrics"]["ndcg@20"]["se"], row["se"], places=12)
        # A saved per-query file stands in for the run (its checkpoint may be gone).
        saved_a = os.path.join(base, "per_query.npz")
        result = _cli("pipelines.evaluate", base, f"--per_query_out={saved_a}")
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertIn(f"Wrote {saved_a}: 300 test queries, exact search", result.stdout)
        from_file = evaluate.compare_runs(other, saved_a)
        for metric, row in comparison.items():
            for key, value in row.items():
                self.assertAlmostEqual(from_file[metric][key], value, places=5)
        # Per-query values that do not average to the run's reported metrics are refused.
        with open(os.path.join(base, "metrics.json")) as f:
            report = json.load(f)
        self.assertIn("test_exact", report)
        report["test_exact"]["ndcg@20"] += 0.01
        with open(os.path.join(base, "metrics.json"), "w") as f:
            json.dump(report, f)
        result = _cli("pipelines.evaluate", base, "--per_query_out=" + os.path.join(base, "x.npz"))
        self.assertNotEqual(result.returncode, 0)
        self.assertIn(
            f"ndcg@20 evaluates to {a['ndcg@20']:.6f} here but "
            f"{a['ndcg@20'] + 0.01:.6f} in its metrics.json",
            result.stderr,
        )
        self.assertFalse(os.path.exists(os.path.join(base, "x.npz")))
        with self.assertRaisesRegex(
            ValueError,
            r"per_query.npz holds the test split by exact "
            r"search; asked for the validation split by exact search",
        ):
            evaluate.compare_runs(other, saved_a, split="validation")
        with self.assertRaisesRegex(
            ValueError,
            r"--per_query_out must end with \.npz; "
            r"received 'x\.json'",
        ):
            per_query.save(evaluate.per_query_values(saved_a), "x.json")
        smaller = tempfile.mkdtemp()
        train.run(config.replace(synthetic_users=200, steps_per_epoch=2), smaller, verbose=0)
        with self.assertRaisesRegex(
            ValueError,
            r"--against=.* evaluates other test queries "
            r"than .* \(synthetic, split loo, 200 queries vs "
            r"synthetic, split loo, 300\); a paired comparison needs "
            r"the same ones",
        ):
            evaluate.compare_runs(other, smaller)

    def test_the_test_curve_is_logged_and_changes_no_training(self):
        from paper import curves  # pylint: disable=import-outside-toplevel

        config = SMOKE.replace(epochs=3, steps_per_epoch=10, patience=3, index="exact")
        plain = train.run(config, tempfile.mkdtemp(), verbose=0)
        out = tempfile.mkdtemp()
        logged = train.run(config.replace(test_curve_every=1), out, verbose=0)
        # Training saw the same batches, draws and weights: the same losses and test scores.
        self.assertEqual(
            plain["last_epoch"],
            {k: v for k, v in logged["last_epoch"].items() if not k.startswith("test_")},
        )
        self.assertEqual(plain["test"], logged["test"])
        curve = curves.test_curve(out)
        self.assertEqual(sorted(curve), [0, 1, 2])
        # At the best epoch the curve scored the weights that the final test scores.
        self.assertAllClose(curve[logged["best_epoch"]], logged["test"]["ndcg@20"])
        with self.assertRaisesRegex(
            ValueError,
            r"--test_curve_every must be >= 0 \(0: never\); "
            r"received --test_curve_every=-1",
        ):
            configs.validate(SMOKE.replace(test_curve_every=-1))


@pytest.mark.integration
class ReleasedProtocolTest(tf.test.TestCase):
    def test_official_presets(self):
        # The released protocol (docs/protocol.md), and its CPU scale.
        for name, length, dim in (("official", 200, 128), ("official_cpu", 50, 64)):
            config = configs.validate(configs.PRESETS[name])
            self.assertEqual((config.model.max_length, config.model.dim), (length, dim))
            self.assertEqual(
                (config.model.architecture, config.model.tie_embeddings, config.data.loo_train_gap),
                ("gsasrec", False, 1),
            )
            self.assertEqual(
                (
                    config.loss.deduplicate,
                    config.loss.log_q,
                    config.loss.per_row,
                    config.loss.mixture,
                ),
                (True, "unigram", True, "paper"),
            )
            training = config.training
            self.assertEqual(
                (
                    training.epochs,
                    training.patience,
                    training.steps_per_epoch,
                    training.partial_batches,
                    config.data.validation_queries,
                ),
                (10000, 200, 0, True, 512),
            )
            # Our diagnostic; no training change.
            self.assertEqual(config.training.test_curve_every, 10)

    def test_official_smoke_run(self):
        # A synthetic stand-in for ML-1M under the released protocol: gSASRec, mixed
        # negatives per row with the deduplicated pool, the paper's standard correction.
        config = configs.PRESETS["official_cpu"].replace(
            dataset="synthetic",
            synthetic_users=300,
            synthetic_items=400,
            max_length=20,
            dim=16,
            batch_size=32,
            num_negatives=32,
            negatives="mixed",
            correction="standard_negatives",
            epochs=2,
            patience=2,
        )
        metrics = train.run(config, tempfile.mkdtemp(), verbose=0)
        # 300 users in batches of 32: passes of 10 steps, the last of 12 rows.
        self.assertEqual((metrics["steps_per_epoch"], metrics["steps"]), (10, 20))
        self.assertBetween(metrics["test"]["ndcg@10"], 0.0, 1.0)


@pytest.mark.integration
class MirroredRunTest(tf.test.TestCase):
    def test_two_replicas_with_global_negatives_and_an_estimator(self):
        # The global batch of 32 is split 16 + 16 over the two logical CPUs; the run
        # takes the same number of steps, and the estimator sees every global batch once.
        config = SMOKE.replace(frequency="count_min", epochs=1, steps_per_epoch=10, index="exact")
        metrics = train.run(
            config, tempfile.mkdtemp(), verbose=0, strategy=conftest.mirrored_strategy()
        )
        self.assertEqual(metrics["num_replicas"], 2)
        self.assertEqual(metrics["strategy"], "MirroredStrategy")
        self.assertEqual(metrics["steps"], 10)
        self.assertEqual(metrics["estimator_steps"], 10)
        self.assertRegex(metrics["estimator_state_digest"], r"^[0-9a-f]{64}$")
        self.assertBetween(metrics["test"]["recall@100"], 0.0, 1.0)


class TableOptimizerTest(tf.test.TestCase):
    """--table_optimizer=adagrad: Adagrad on the embedding tables (sparse rows), Adam on the
    rest, through TFRS's CompositeOptimizer."""

    def _model_and_batch(self, table_optimizer):
        # In-batch negatives: the rows a step touches are the batch's items.
        config = SMOKE.replace(
            model="two_tower",
            negatives="in_batch",
            table_optimizer=table_optimizer,
            table_learning_rate=0.1,
        )
        data = experiment.load_data(config)
        split = experiment.make_split(config, data)
        tf.keras.utils.set_random_seed(0)
        model = experiment.build_model(config, data, split)
        stream, _ = experiment.training_stream(config, split)
        return config, model, next(iter(stream))

    def _step(self, model, optimizer, batch):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(batch, training=True)
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))

    def test_only_the_rows_a_step_touches_move_and_the_state_restores(self):
        config, model, batch = self._model_and_batch("adagrad")
        optimizer = experiment.make_optimizer(config.training, model)
        tables = experiment.embedding_tables(model)
        self.assertEqual(
            sorted(t.name.split("/")[-2] for t in tables), ["history", "items", "users"]
        )
        items = next(t for t in tables if "items" in t.name)
        before = items.numpy()
        self._step(model, optimizer, batch)
        moved = np.flatnonzero(np.any(items.numpy() != before, axis=1))
        self.assertAllEqual(moved, np.unique(batch["item"]))  # The batch's items only.
        self.assertLess(len(moved), len(before) // 2)
        # Every other variable (the dense query tower) moved under Adam.
        dense = [v for v in model.trainable_variables if all(v is not t for t in tables)]
        self.assertNotEmpty(dense)
        # A checkpoint restores both optimizers' slots: the next steps agree.
        path = tf.train.Checkpoint(model=model, optimizer=optimizer).save(
            os.path.join(tempfile.mkdtemp(), "ckpt")
        )
        _, other, _ = self._model_and_batch("adagrad")
        other_optimizer = experiment.make_optimizer(config.training, other)
        self._step(other, other_optimizer, batch)  # Create the slots, then overwrite them.
        tf.train.Checkpoint(model=other, optimizer=other_optimizer).restore(path)
        for m, o in ((model, optimizer), (other, other_optimizer)):
            self._step(m, o, batch)
        for a, b in zip(model.trainable_variables, other.trainable_variables):
            self.assertAllClose(a, b, rtol=1e-6, atol=1e-7)

    def test_adam_is_the_default_and_the_paper_presets_keep_it(self):
        for name in ("paper", "official", "official_cpu", "cpu"):
            self.assertEqual(configs.PRESETS[name].training.table_optimizer, "adam")
        config, model, _ = self._model_and_batch("adam")
        self.assertIsInstance(
            experiment.make_optimizer(config.training, model), tf.keras.optimizers.Adam
        )
        with self.assertRaisesRegex(
            ValueError,
            r"--table_optimizer must be one of adam, "
            r"adagrad; received --table_optimizer='sgd'",
        ):
            configs.validate(SMOKE.replace(table_optimizer="sgd"))


class ConfigFileTest(tf.test.TestCase):
    def test_nested_round_trip_and_older_flat_files(self):
        self.assertEqual(configs.Config.from_dict(json.loads(json.dumps(SMOKE.as_dict()))), SMOKE)
        self.assertEqual(sorted(SMOKE.as_dict()), ["data", "loss", "model", "training"])
        self.assertEqual(SMOKE.as_dict()["loss"]["num_negatives"], 32)
        # An earlier run's flat config.json, with the three fields since renamed and
        # without a field added since (it takes its default).
        older = SMOKE.replace(per_row=True, global_batch=False, log_q="unigram").flat()
        for old, new in configs.RENAMED.items():
            older[old] = older.pop(new)
        del older["test_curve_every"]
        read = configs.Config.from_dict(older)
        self.assertEqual(
            (
                read.loss.per_row,
                read.loss.global_batch,
                read.loss.log_q,
                read.training.test_curve_every,
                read.model.dim,
            ),
            (True, False, "unigram", 0, 16),
        )
        with self.assertRaisesRegex(ValueError, r"Config has no field 'dimension'"):
            configs.Config.from_dict({"dimension": 3})

    def test_a_run_made_before_new_fields_resumes_with_them(self):
        # An earlier run's flat config.json, without scann_min_items (added since) and with
        # the old names, holds the same run as today's preset, whose scann_min_items (0)
        # differs from the default: it resumes. A field it does hold must still match.
        out = tempfile.mkdtemp()
        preset = configs.PRESETS["synthetic"]
        older = preset.flat()
        for old, new in configs.RENAMED.items():
            older[old] = older.pop(new)
        del older["scann_min_items"]
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(older, f)
        os.makedirs(os.path.join(out, "checkpoints"))  # It has trained.
        run_files.check_output_dir(preset, out)
        stored = configs.Config.stored_fields(older)
        self.assertTrue("per_row" in stored and "scann_min_items" not in stored)
        self.assertEqual(len(stored), len(configs.FIELDS) - 1)
        with self.assertRaisesRegex(
            ValueError,
            r"holds a run with another config \(differs "
            r"in dim, per_row\)",
        ):
            run_files.check_output_dir(preset.replace(dim=8, per_row=True), out)

    def test_a_run_saved_before_the_time_and_id_settings_reads_its_log_as_then(self):
        # Its numbers were read as seconds and its ids kept their spaces: a config.json and
        # a vocabulary.json without the settings stay as they were read.
        older = configs.PRESETS["industrial_smoke"].as_dict()
        for name in configs.LEGACY_DATA:
            del older["data"][name]
        config = configs.Config.from_dict(older)
        self.assertEqual((config.data.time_unit, config.data.keep_id_whitespace), ("s", True))
        self.assertEqual(configs.Config.from_dict({}).data.time_unit, "s")
        self.assertEqual(configs.DataConfig().time_unit, "auto")  # A new run's.
        directory = tempfile.mkdtemp()
        with open(os.path.join(directory, "vocabulary.json"), "w") as f:
            json.dump({"data": older["data"]}, f)
        for name in events_lib.VOCABULARY_FILES.values():
            open(os.path.join(directory, name), "w").close()
        saved_for = logs.saved_for
        self.assertTrue(saved_for(directory, config.data))
        self.assertFalse(saved_for(directory, configs.PRESETS["industrial_smoke"].data))

    def test_flags_and_their_old_names(self):
        flag_values = flags.FlagValues()
        train.define_flags(flag_values)
        flag_values(
            [
                "train",
                "--preset=official_cpu",
                "--per_row_negatives=false",
                "--log_q=horvitz_thompson",
                "--dim=32",
            ]
        )
        config = train.config_from_flags(flag_values)
        self.assertEqual(
            (config.loss.per_row, config.loss.log_q, config.model.dim, config.loss.deduplicate),
            (False, "horvitz_thompson", 32, True),
        )


def _wait_for_backup(test, output_dir, processes, timeout=300):
    """Waits until a run's BackupAndRestore backup is complete, the processes still running.

    Every worker restores from OUTPUT/backup/chief. An `.index` file is not enough: a save
    writes temporary shards (`ckpt-N_temp/part-*.index`, and the other workers' copies
    under backup/workertemp_*) before the checkpoint; killed then, a run restarts from step
    0 (a CI run failed so). The chief's checkpoint state file names a backup last.
    """
    backup = os.path.join(output_dir, "backup", "chief")
    deadline = time.time() + timeout
    while time.time() < deadline and all(p.poll() is None for p in processes):
        if tf.train.latest_checkpoint(backup) is not None:
            break
        time.sleep(0.2)
    test.assertTrue(all(p.poll() is None for p in processes), "a run ended before the kill")
    test.assertIsNotNone(tf.train.latest_checkpoint(backup), f"no backup in {timeout} s")


@pytest.mark.slow
class MultiWorkerTest(tf.test.TestCase):
    """`pipelines.train --strategy=multi_worker` as two local worker processes (TF_CONFIG)."""

    def test_two_workers_share_negatives_and_estimator_state_and_resume(self):
        # Two workers (one replica each) train a two-tower model; both are killed once a
        # backup is on disk, and started again: they resume from it and finish the 200 steps.
        out = tempfile.mkdtemp()
        cluster = cluster_lib.local_cluster(2)
        args = [
            sys.executable,
            "-m",
            "pipelines.train",
            "--preset=smoke",
            "--model=two_tower",
            "--history_length=8",
            "--num_negatives=1000",
            "--strategy=multi_worker",
            "--frequency=count_min",
            "--epochs=2",
            "--steps_per_epoch=100",
            "--backup_every=5",
            "--patience=5",
            "--index=exact",
            f"--output_dir={out}",
        ]

        workers = cluster_lib.start_workers(args, cluster)
        _wait_for_backup(self, out, workers)
        for w in workers:
            w.send_signal(signal.SIGKILL)
            w.wait()
        workers = cluster_lib.start_workers(args, cluster)
        outputs = cluster_lib.wait_workers(workers, timeout=600)
        for w, output in zip(workers, outputs):
            self.assertEqual(w.returncode, 0, output[-3000:])
        with open(os.path.join(out, "metrics.json")) as f:
            chief = json.load(f)
        with open(os.path.join(out, "workers", "worker-1", "report.json")) as f:
            other = json.load(f)
        self.assertEqual(chief["strategy"], "CollectiveAllReduceStrategy")  # = MWMS.
        self.assertEqual(chief["num_replicas"], 2)
        self.assertGreater(chief["resumed_from_step"], 0)
        self.assertEqual(chief["steps"], 200)
        self.assertEqual(other["steps"], 200)
        self.assertEqual(chief["estimator_steps"], 200)  # One update per step, none repeated.
        # One identical update per step from the gathered ids: the same state on both.
        self.assertEqual(chief["estimator_state_digest"], other["estimator_state_digest"])
        # Negatives from the global batch of 32 (each worker holds 16 rows): about 31 valid
        # negatives per example, accidental hits aside; per-worker pools would give <= 15.
        self.assertGreater(chief["last_epoch"]["valid_negatives"], 20)
        # The chief alone wrote the checkpoint, which loads for evaluation.
        self.assertTrue(os.path.exists(os.path.join(out, "checkpoints", "best.index")))
        self.assertEqual(sorted(d for d in os.listdir(out) if "temp" in d), [])
        self.assertIn("Worker done: 200 steps on 2 replicas", outputs[1])
        result = _cli("pipelines.evaluate", out)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])


@pytest.mark.integration
class CommandLineTest(tf.test.TestCase):
    def test_main_job_prints_a_table(self):
        out = tempfile.mkdtemp()
        result = _cli(
            "pipelines.train",
            "--preset=smoke",
            f"--output_dir={out}",
            "--correction=standard",
            "--epochs=1",
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertRegex(result.stdout, r"\| model \| recall \| [0-9.]+ \| [0-9.]+ \|")
        self.assertIn("| oracle (baseline) | ndcg |", result.stdout)
        self.assertEqual(
            json.load(open(os.path.join(out, "config.json")))["loss"]["correction"], "standard"
        )

    def test_bad_flags_list_the_valid_values(self):
        for args, message in (
            (
                ["--negatives=random"],
                "--negatives must be one of in_batch, uniform, mixed; "
                "received --negatives='random'",
            ),
            (
                ["--preset=huge"],
                f"--preset must be one of {', '.join(configs.PRESETS)}; received --preset='huge'",
            ),
            (
                ["--deduplicate", "--negatives=mixed", "--mixture=exact"],
                "MixedSampler(deduplicate=True) needs mixture='paper'",
            ),
            (
                ["--negatives=mixed", "--num_negatives=1"],
                "negatives='mixed' needs num_negatives >= 2",
            ),
            (
                ["--architecture=bert4rec"],
                "--architecture must be one of sasrec, gsasrec; received --architecture='bert4rec'",
            ),
            (["--pseudo_count=-1"], "--pseudo_count must be >= 0; received --pseudo_count=-1.0"),
            (
                ["--loo_train_gap=-2"],
                "--loo_train_gap must be >= 0 (0: none); received --loo_train_gap=-2",
            ),
            (["--adam_epsilon=0"], "--adam_epsilon must be positive; received --adam_epsilon=0.0"),
            (
                ["--dropout=1.5"],
                "--dropout must be in [0.0, 1.0) (a rate of 1 drops everything); "
                "received --dropout=1.5",
            ),
            (
                ["--per_row_negatives=maybe"],  # The flag's old name: absl names the new one.
                "--per_row must be true or false (or --per_row / --noper_row); "
                "received --per_row=maybe.",
            ),
            (["--batch_size=0"], "--batch_size must be a positive integer"),
            ([], "--output_dir is required"),
        ):
            if args:
                args = args + ["--output_dir=/tmp/unused"] if args[0] != "" else args
            result = _cli("pipelines.train", *args)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn(message, result.stderr)
        for args, message in (
            (
                ["--against=/tmp/b", "--geometry"],
                "--against and --geometry are separate jobs; give one of them.",
            ),
            (
                ["--output_json=c.json"],
                "--output_json=c.json writes --against's comparison; give --against too.",
            ),
        ):
            result = _cli("pipelines.evaluate", "/tmp/a", *args)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn(message, result.stderr)

    def test_resume_after_sigkill(self):
        # Killed mid-run, started again with the same flags: it continues from the last
        # backup (every 5 steps), so the run ends after exactly 3 x 200 steps and the
        # streaming estimator received exactly one update per step. The random state
        # (dropout, negative draws) is in the backup too: the resumed run ends with the
        # uninterrupted run's weights and metrics, to the bit.
        out, uninterrupted = tempfile.mkdtemp(), tempfile.mkdtemp()
        args = [
            "--preset=smoke",
            "--epochs=3",
            "--steps_per_epoch=200",
            "--frequency=count_min",
            "--patience=5",
        ]
        process = subprocess.Popen(
            [sys.executable, "-m", "pipelines.train", *args, f"--output_dir={out}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_for_backup(self, out, [process])
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.assertFalse(os.path.exists(os.path.join(out, "metrics.json")))
        metrics, reference = _finish_as_uninterrupted(self, args, out, uninterrupted)
        # The interrupted epoch's running means (the task's mean_w, valid_negatives, ...)
        # travel with the backup: its logged means cover all its steps.
        self.assertEqual(metrics["last_epoch"], reference["last_epoch"])
        resumed = tf.train.load_checkpoint(os.path.join(out, "checkpoints", "best"))
        straight = tf.train.load_checkpoint(os.path.join(uninterrupted, "checkpoints", "best"))
        names = [
            name
            for name, _ in tf.train.list_variables(os.path.join(out, "checkpoints", "best"))
            if "VARIABLE_VALUE" in name
        ]
        self.assertTrue(any("random_generators" in name for name in names))
        # Weights, optimizer, estimator, random generators and running means: to the bit.
        for name in sorted(names):
            np.testing.assert_array_equal(
                resumed.get_tensor(name), straight.get_tensor(name), err_msg=name
            )
        self.assertBetween(metrics["resumed_from_step"], 5, 595)
        self.assertEqual(metrics["resumed_from_step"] % 5, 0)
        self.assertEqual(metrics["steps"], 600)
        self.assertEqual(metrics["estimator_steps"], 600)
        # Totals over both processes, not the second one's alone.
        self.assertEqual(metrics["epochs_run"], 3)
        progress = json.load(open(os.path.join(out, "progress.json")))
        self.assertEqual(progress["epochs"], 3)
        self.assertEqual(metrics["best_validation_ndcg@10"], progress["best"])
        self.assertGreaterEqual(metrics["train_seconds"], progress["seconds"])

    def test_a_second_run_into_a_running_directory_is_refused(self):
        # Two commands into one directory (seed 0 and seed 1): the second is refused while
        # the first holds OUTPUT/run.lock, and nothing of it lands there.
        out = tempfile.mkdtemp()
        first = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pipelines.train",
                "--preset=smoke",
                "--epochs=50",
                f"--output_dir={out}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 120
        while not os.path.exists(os.path.join(out, "run.lock")) and time.time() < deadline:
            time.sleep(0.1)
        second = _cli("pipelines.train", "--preset=smoke", "--seed=1", f"--output_dir={out}")
        first.kill()
        first.wait()
        self.assertEqual(second.returncode, 1)
        self.assertRegex(
            second.stderr,
            rf"error: {out} is in use by another run \(.*\"pid\": "
            rf"{first.pid}.*\); wait for it to end, or give this one another "
            "--output_dir.",
        )
        self.assertNotIn(
            '"seed": 1',
            open(os.path.join(out, "config.json")).read()
            if os.path.exists(os.path.join(out, "config.json"))
            else "",
        )
        # The lock died with the killed process: the same command now runs.
        self.assertEqual(
            _cli(
                "pipelines.train",
                "--preset=smoke",
                "--epochs=1",
                "--steps_per_epoch=5",
                "--index=exact",
                f"--output_dir={out}",
            ).returncode,
            0,
        )
        self.assertFalse(os.path.exists(os.path.join(out, "run.lock")))

    def test_a_non_finite_loss_stops_the_run_and_exports_nothing(self):
        out = tempfile.mkdtemp()
        config = SMOKE.replace(
            learning_rate=1e30, table_learning_rate=1e30, epochs=3, steps_per_epoch=20
        )
        with self.assertRaisesRegex(
            callbacks_lib.NonFiniteLoss,
            r"The training loss is "
            r"(nan|inf|-inf) at step \d+ .*nothing exported",
        ):
            train.run(config, out, verbose=0)
        self.assertFalse(os.path.exists(os.path.join(out, "export")))
        self.assertFalse(os.path.exists(os.path.join(out, "metrics.json")))

    def test_a_bad_data_file_is_one_line_without_a_traceback(self):
        directory = tempfile.mkdtemp()
        path = os.path.join(directory, "log.csv")
        with open(path, "w") as f:
            # Three days of 2026 (the first time 1767225600 + 5 s): a null item, in row 2.
            f.write("user_id,item_id,timestamp\n")
            f.write("u1,i1,1767225605\nu2,,1767312006\nu3,i2,1767398407\n")
        result = _cli(
            "pipelines.train",
            "--preset=industrial_smoke",
            "--dataset=events",
            f"--data_path={path}",
            f"--output_dir={directory}/run",
        )
        self.assertEqual(result.returncode, 1)
        self.assertIn("error: ", result.stderr)
        self.assertIn("column 'item_id' is empty (null) in data row 2", result.stderr)
        self.assertNotIn("Traceback", result.stderr)

    def test_cosine_scaled_and_mined_options_train_evaluate_and_serve(self):
        out = tempfile.mkdtemp()
        config = SMOKE.replace(
            l2_normalize=True,
            temperature=0.1,
            log_q_scale=0.5,
            num_hard_negatives=8,
            negatives="mixed",
            epochs=2,
            steps_per_epoch=10,
            index="exact",
        )
        metrics = train.run(config, out, verbose=0)
        self.assertGreater(metrics["test"]["recall@100"], 0.0)
        _, model, split, _ = experiment.load_run(out)
        task = model.objective.task
        self.assertEqual(
            (
                task.temperature,
                task.log_q_scale,
                task.num_hard_negatives,
                model.objective.l2_normalize,
            ),
            (0.1, 0.5, 8, True),
        )
        # The export ranks by the same cosine the evaluation did.
        served = tf.saved_model.load(metrics["exports"][0]).signatures["item_embeddings"](
            item_ids=tf.range(1, metrics["num_items"] + 1, dtype=tf.int64)
        )["embeddings"]
        self.assertAllClose(
            np.linalg.norm(served.numpy(), axis=1), np.ones(metrics["num_items"]), rtol=1e-5
        )

    def test_output_dir_that_is_a_file_is_named(self):
        path = tempfile.mkstemp()[1]
        with self.assertRaisesRegex(train.OutputDirError, f"--output_dir={path} is a file"):
            train.run(SMOKE, path, verbose=0)
        with self.assertRaisesRegex(
            train.OutputDirError, f"--output_dir={path}/run cannot be written"
        ):
            train.run(SMOKE, os.path.join(path, "run"), verbose=0)

    def test_rerun_after_training_evaluates_without_training_again(self):
        # Killed in the test evaluation or the export (no metrics.json yet): a rerun loads
        # the best checkpoint and reports the same run.
        out = tempfile.mkdtemp()
        args = [
            "--preset=smoke",
            f"--output_dir={out}",
            "--epochs=2",
            "--steps_per_epoch=10",
            "--frequency=hashed",
            "--index=exact",
        ]
        self.assertEqual(_cli("pipelines.train", *args).returncode, 0)
        first = json.load(open(os.path.join(out, "metrics.json")))
        best = os.path.join(out, "checkpoints", "best.index")
        written = os.path.getmtime(best)
        os.remove(os.path.join(out, "metrics.json"))
        result = _cli("pipelines.train", *args)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertIn("finished training earlier (2 epochs)", result.stdout)
        second = json.load(open(os.path.join(out, "metrics.json")))
        self.assertEqual(os.path.getmtime(best), written)  # No epoch ran.
        for key in (
            "test",
            "steps",
            "estimator_steps",
            "epochs_run",
            "train_seconds",
            "best_validation_ndcg@10",
            "last_epoch",
            "estimator_state_digest",
        ):
            self.assertEqual(second[key], first[key], key)


# A run whose every kill point below is reached: 3 epochs of 20 steps, a backup every 10
# (two of them at an epoch's end), an improvement at every epoch.
RESUME_ARGS = [
    "--preset=smoke",
    "--epochs=3",
    "--steps_per_epoch=20",
    "--backup_every=10",
    "--patience=100",
    "--frequency=count_min",
]
# What a resumed run must report as the uninterrupted one did (times and paths aside).
RESUME_EQUAL = (
    "test",
    "test_exact",
    "test_scann",
    "baselines",
    "best_validation_ndcg@10",
    "epochs_run",
    "best_epoch",
    "steps",
    "estimator_steps",
    "last_epoch",
    "estimator_state_digest",
    "exports",
)


class _ResumeCase(tf.test.TestCase):
    """Killed (SIGKILL) at a point of a run's life (`tests/interrupt.py`) and started again
    with the same flags, a run ends with the uninterrupted run's metrics, logged means and
    weights, to the bit."""

    reference = None
    args = RESUME_ARGS

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.reference = tempfile.mkdtemp()
        result = _cli("pipelines.train", *cls.args, f"--output_dir={cls.reference}")
        assert result.returncode == 0, result.stderr[-2000:]

    def _check(self, point, count):
        out = tempfile.mkdtemp()
        killed = _cli("tests.interrupt", point, str(count), *self.args, f"--output_dir={out}")
        self.assertEqual(killed.returncode, -signal.SIGKILL, killed.stderr[-2000:])
        self.assertFalse(os.path.exists(os.path.join(out, "metrics.json")))
        resumed = _cli("pipelines.train", *self.args, f"--output_dir={out}")
        self.assertEqual(resumed.returncode, 0, resumed.stderr[-2000:])
        metrics, reference = (
            json.load(open(os.path.join(d, "metrics.json"))) for d in (out, self.reference)
        )
        for key in RESUME_EQUAL:
            expected = reference.get(key)
            if key == "exports":
                expected = [path.replace(self.reference, out) for path in expected]
            self.assertEqual(metrics.get(key), expected, f"{point} {count}: {key}")
        for name in ("progress.json",):
            got, want = (json.load(open(os.path.join(d, name))) for d in (out, self.reference))
            self.assertEqual(got["values"], want["values"])
        resumed_best, straight_best = (
            tf.train.load_checkpoint(os.path.join(d, "checkpoints", "best"))
            for d in (out, self.reference)
        )
        for name in straight_best.get_variable_to_shape_map():
            np.testing.assert_array_equal(
                resumed_best.get_tensor(name), straight_best.get_tensor(name), err_msg=name
            )
        for kind in ("brute_force", "scann"):  # One export of each, no leftover.
            self.assertEqual(os.listdir(os.path.join(out, "export", kind)), ["1"])
        self.assertFalse(os.path.exists(os.path.join(out, "backup")))
        return metrics


@pytest.mark.integration
class ResumeAnywhereTest(_ResumeCase):
    def test_kill_just_after_the_backup_at_an_epochs_end(self):
        # The issue's probe: epoch 0's validation and best checkpoint used to be lost.
        self._check("backup", 2)

    def test_kill_between_the_best_checkpoint_and_the_progress_file(self):
        self._check("best_checkpoint", 2)


@pytest.mark.integration
class ResumeOutOfCoreTest(_ResumeCase):
    """The same for an event log read out of core (`day_store`): killed while its store is
    built, or in training streamed from it."""

    args = ["--preset=industrial_smoke", "--backup_every=40", "--index=both"]

    @classmethod
    def setUpClass(cls):
        # The synthetic log, drawn once for the class (the subprocesses inherit the variable).
        os.environ[logs.CACHE_ENV] = tempfile.mkdtemp()
        super().setUpClass()

    def test_kill_while_the_store_is_built(self):
        self._check("day_store", 1)

    def test_kill_after_a_backup_mid_epoch(self):
        out = self._check("backup", 1)
        self.assertEqual(out["resumed_from_step"], 40)


@pytest.mark.slow
class ResumeAtEveryPointTest(_ResumeCase, parameterized.TestCase):
    @parameterized.parameters(
        ("backup", 3), ("epoch_end", 1), ("progress", 2), ("evaluation", 1), ("export", 1)
    )
    def test_kill_at(self, point, count):
        self._check(point, count)


if __name__ == "__main__":
    tf.test.main()
