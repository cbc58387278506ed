"""The Table 1 runner: its plan, its skipping of finished runs, and its report's numbers."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from pipelines.benchmarks import reproduce


def _fake_run(run, ndcg, recall=0.3, kl=None, best_epoch=None, bands=(0.3, 0.2, 0.1)):
    """Writes the metrics.json a finished pipelines.train run would leave."""
    os.makedirs(run.directory, exist_ok=True)
    metrics = {"test": {"ndcg@20": ndcg, "recall@20": recall, "ndcg@10": ndcg / 2,
                        "recall@10": recall / 2},
               "epochs_run": 40, "train_seconds": 100.0 + run.seed, "steps": 1000,
               "baselines": {"popularity": {"ndcg@20": 0.05}, "oracle": {"recall@10": 0.5}},
               "by_popularity": ({"head_recall@10": bands[0], "torso_recall@10": bands[1],
                                  "tail_recall@10": bands[2]} if bands else {}),
               "git_revision": "abc"}
    if kl is not None:
        metrics["kl_to_truth"] = kl
    if best_epoch is not None:
        metrics["best_epoch"] = best_epoch
    with open(os.path.join(run.directory, "metrics.json"), "w") as f:
        json.dump(metrics, f)


class PlanTest(tf.test.TestCase):

    def test_rows_of_each_split(self):
        out = tempfile.mkdtemp()
        loo = reproduce.plan("ml-1m", "loo", "cpu", 2, [], ["static"], out)
        self.assertLen(loo, 2 * 10)
        # Seed by seed: an interrupted sweep has every row at the same number of seeds.
        self.assertEqual([r.seed for r in loo], [0] * 10 + [1] * 10)
        self.assertEqual(loo[0].overrides, {"split": "loo", "dataset": "ml-1m", "index": "exact",
                                            "loss": "bce", "num_negatives": 1, "seed": 0})
        self.assertEqual(loo[0].directory, os.path.join(out, "ml1m_loo_cpu", "bce", "seed0"))
        temporal = reproduce.plan("ml-1m", "temporal", "paper", 1, [], ["static"], out)
        self.assertEqual([r.row.name for r in temporal],
                         ["gbce", "in_batch-none", "in_batch-standard", "in_batch-improved",
                          "mixed-none", "mixed-standard", "mixed-improved", "full_softmax"])
        self.assertEqual(temporal[0].overrides["dataset"], "ml-1m-ratings")  # Timestamps.
        self.assertEqual(temporal[0].preset, "paper")
        self.assertNotIn("temporal_targets", temporal[0].overrides)
        successive = reproduce.plan("ml-1m", "temporal", "cpu", 1, ["gbce"], ["static"], out,
                                    temporal_targets="successive")[0]
        self.assertEqual(successive.overrides["temporal_targets"], "successive")
        self.assertEqual(successive.directory,
                         os.path.join(out, "ml1m_temporal_successive_cpu", "gbce", "seed0"))

    def test_official_profiles_run_the_released_scripts(self):
        # The paper's "standard" rows correct the negatives only (logq_old), its "in-batch,
        # improved" script draws mixed negatives (logq_new); the official-only rows compare
        # like with like.
        out = tempfile.mkdtemp()
        runs = {r.row.name: r for r in reproduce.plan(
            "ml-1m", "loo", "official_cpu", 1,
            ["in_batch-standard", "in_batch-improved", "mixed-standard", "mixed-improved",
             "in_batch-improved_pool", "in_batch-standard_tfrs", "mixed-standard_tfrs"],
            ["static"], out)}
        want = {"in_batch-standard": ("in_batch", "standard_negatives"),
                "in_batch-improved": ("mixed", "improved"),
                "mixed-standard": ("mixed", "standard_negatives"),
                "mixed-improved": ("mixed", "improved"),
                "in_batch-improved_pool": ("in_batch", "improved"),
                "in_batch-standard_tfrs": ("in_batch", "standard"),
                "mixed-standard_tfrs": ("mixed", "standard")}
        for name, (negatives, correction) in want.items():
            self.assertEqual((runs[name].overrides["negatives"],
                              runs[name].overrides["correction"]), (negatives, correction), name)
            self.assertEqual(runs[name].preset, "official_cpu")
        self.assertIn("train_in_batch_logq_new.py", runs["in_batch-improved"].row.label)
        self.assertIn("mixed negatives", runs["in_batch-improved"].row.label)
        self.assertEqual(runs["in_batch-improved"].directory,
                         os.path.join(out, "ml1m_loo_official_cpu", "in_batch-improved", "seed0"))
        default = reproduce.plan("ml-1m", "loo", "official", 1, [], ["static"], out)
        self.assertLen(default, 10)  # The paper's rows; the like-for-like ones on request.
        with self.assertRaisesRegex(ValueError, r"Rows in_batch-improved_pool exist under the "
                                    r"official profiles \(official, official_cpu\) only; "
                                    r"received --profile=cpu"):
            reproduce.plan("ml-1m", "loo", "cpu", 1, ["in_batch-improved_pool"], ["static"], out)

    def test_estimators_multiply_only_the_rows_that_use_log_q(self):
        runs = reproduce.plan("synthetic", "loo", "cpu", 1, [], ["static", "hashed"],
                              tempfile.mkdtemp())
        self.assertEqual([(r.row.name, r.frequency) for r in runs], [
            ("in_batch-none", "static"), ("in_batch-standard", "static"),
            ("in_batch-standard", "hashed"), ("in_batch-improved", "static"),
            ("in_batch-improved", "hashed"), ("mixed-none", "static"),
            ("mixed-standard", "static"), ("mixed-standard", "hashed"),
            ("mixed-improved", "static"), ("mixed-improved", "hashed")])
        self.assertEqual(runs[2].overrides["frequency"], "hashed")
        self.assertTrue(runs[2].directory.endswith(os.path.join("in_batch-standard-hashed",
                                                                "seed0")))
        self.assertEqual(runs[0].preset, "synthetic_two_tower")
        self.assertNotIn("dataset", runs[0].overrides)
        self.assertIn(os.path.join("synthetic_loo_synthetic_two_tower", "in_batch-none"),
                      runs[0].directory)

    def test_command_runs_pipelines_train(self):
        run = reproduce.plan("ml-1m", "loo", "cpu", 1, ["mixed-improved"], ["static"], "out")[0]
        self.assertEqual(reproduce.command(run)[1:], [
            "-m", "pipelines.train", "--preset=cpu",
            f"--output_dir={os.path.join('out', 'ml1m_loo_cpu', 'mixed-improved', 'seed0')}",
            "--correction=improved", "--dataset=ml-1m", "--frequency=static", "--index=exact",
            "--loss=sampled_softmax", "--negatives=mixed", "--seed=0", "--split=loo"])

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, r"--rows must be among .*received nope"):
            reproduce.plan("ml-1m", "loo", "cpu", 1, ["nope"], ["static"], "out")
        with self.assertRaisesRegex(ValueError, r"--frequencies must be among .*received 'x'"):
            reproduce.plan("ml-1m", "loo", "cpu", 1, [], ["x"], "out")
        with self.assertRaisesRegex(ValueError, r"--profile must be one of cpu, paper"):
            reproduce.plan("ml-1m", "loo", "gpu", 1, [], ["static"], "out")
        with self.assertRaisesRegex(ValueError, r"--preset=cpu is not a synthetic-data preset"):
            reproduce.plan("synthetic", "loo", "cpu", 1, [], ["static"], "out", preset="cpu")


class ReportTest(tf.test.TestCase):

    def test_table_differences_and_verdicts(self):
        out, results = tempfile.mkdtemp(), tempfile.mkdtemp()
        runs = reproduce.plan("ml-1m", "loo", "cpu", 3, ["in_batch-none", "in_batch-standard",
                                                          "in_batch-improved", "full_softmax"],
                              ["static"], out)
        scores = {"in_batch-none": [0.10, 0.11, 0.12], "in_batch-standard": [0.20, 0.21, 0.22],
                  "in_batch-improved": [0.19, 0.22, 0.25]}
        for run in runs:
            if run.row.name in scores:  # full_softmax is planned but not run.
                _fake_run(run, scores[run.row.name][run.seed])
        self.assertTrue(reproduce.finished(runs[0]))
        self.assertFalse(reproduce.finished(runs[3]))
        text = reproduce.write_report(runs, "ml-1m", "loo", "cpu", results, "CMD")
        # Mean ± sample std, the paper's value and the difference.
        self.assertIn("| in-batch, no logQ | 3 | 0.1100 ± 0.0100 | 0.1868 | -0.0768 | "
                      "0.3000 ± 0.0000 | 0.3838 | -0.0838 | 40 | – | 1000 | 101 |", text)
        self.assertIn("| full softmax | 0/3 | not run | 0.1937 |", text)
        # none < standard: gap 0.1, SE = sqrt(2 * 0.01^2 / 3), t = 12.25; Welch df = 4.
        self.assertIn("in-batch, no logQ < in-batch, standard logQ: ndcg@20 0.1100 (n=3) vs "
                      "0.2100 (n=3), gap +0.1000; the paper's ordering holds, beyond the "
                      "seed-to-seed spread (Welch t = 12.25 with 4 df, two-sided p = 2.6e-04).",
                      text)
        # Paired, the same d at every seed: no t (its SE is rounding's).
        self.assertIn("- in-batch, standard logQ vs in-batch, no logQ: d = +0.1000 NDCG@20 over 3 "
                      "paired seeds (0, 1, 2): +0.1000, +0.1000, +0.1000; the same d at every "
                      "seed, SE 0.", text)
        self.assertEqual([reproduce._small(x, 4) for x in (0.0006, 1.8e-5, 0.0, -0.02)],
                         ["0.0006", "1.8e-05", "0.0000", "-0.0200"])
        self.assertEqual(f"{2 * stats.t.sf(12.25, 4):.1e}", "2.6e-04")  # scipy's p, as above.
        # standard <= improved: gap 0.01, SE = sqrt(0.01^2/3 + 0.03^2/3), t = 0.548; Welch
        # df = 2.44, rounded down to 2, where p = 1 - t / sqrt(2 + t^2) = 0.639.
        self.assertIn("gap +0.0100; the paper's ordering holds, within the seed-to-seed spread "
                      "(Welch t = 0.55 with 2 df, two-sided p = 0.639).", text)
        with open(os.path.join(results, "ml1m_loo_cpu.json")) as f:
            saved = json.load(f)
        self.assertLen(saved["runs"], 9)
        self.assertAllClose(saved["summary"]["in_batch-improved"]["ndcg@20"][:2],
                            [0.22, np.std([0.19, 0.22, 0.25], ddof=1)])
        self.assertTrue(os.path.exists(os.path.join(results, "ml1m_loo_cpu.png")))

    def test_a_sweep_over_some_rows_keeps_the_others_in_the_report(self):
        out = tempfile.mkdtemp()
        earlier = reproduce.plan("ml-1m", "loo", "cpu", 2, ["bce", "in_batch-none"],
                                 ["static"], out)
        for run in earlier:
            _fake_run(run, 0.1)
        now = reproduce.plan("ml-1m", "loo", "cpu", 1, ["in_batch-none", "full_softmax"],
                             ["static"], out)
        reported = reproduce.with_finished_runs(now, "ml-1m", "loo", "cpu", ["static"], out)
        self.assertEqual([(r.row.name, r.seed) for r in reported],
                         [("bce", 0), ("bce", 1), ("in_batch-none", 0), ("in_batch-none", 1),
                          ("full_softmax", 0)])

    def test_recorded_runs_stand_in_for_missing_directories(self):
        out, results = tempfile.mkdtemp(), tempfile.mkdtemp()
        rows = ["in_batch-none", "in_batch-standard"]
        earlier = reproduce.plan("ml-1m", "loo", "cpu", 2, rows, ["static"], out)
        for run, ndcg in zip(earlier, (0.10, 0.20, 0.12, 0.22)):
            _fake_run(run, ndcg)
        reproduce.write_report(earlier, "ml-1m", "loo", "cpu", results, "CMD")
        path = os.path.join(results, "ml1m_loo_cpu.json")
        # A fresh clone: the report is there, the run directories are not.
        for run in earlier:
            for name in os.listdir(run.directory):
                os.remove(os.path.join(run.directory, name))
        recorded = reproduce.load_recorded(path)
        self.assertLen(recorded, 4)
        self.assertEqual(recorded[("in_batch-none", "static", 1)]["directory"],
                         earlier[2].directory)
        self.assertEqual(reproduce.load_recorded(os.path.join(results, "missing.json")), {})
        now = reproduce.plan("ml-1m", "loo", "cpu", 3, rows, ["static"], out)
        self.assertEqual([reproduce.finished(r, recorded) for r in now],
                         [True, True, True, True, False, False])
        self.assertFalse(reproduce.finished(now[0]))
        _fake_run(now[4], 0.14)  # Seed 2, run now.
        _fake_run(now[0], 0.30)  # A run on disk wins over its record (seed 0 was 0.10).
        text = reproduce.write_report(now, "ml-1m", "loo", "cpu", results, "CMD",
                                      recorded=recorded)
        # in-batch none: seeds 0 (disk, 0.30), 1 (record, 0.12), 2 (disk, 0.14).
        self.assertIn(f"| in-batch, no logQ | 3 | 0.1867 ± {np.std([.30, .12, .14], ddof=1):.4f} "
                      "| 0.1868 |", text)
        self.assertIn("| in-batch, standard logQ | 2 | 0.2100 ± 0.0141 |", text)
        self.assertIn("(`--include_recorded`; their run directories were not on disk): "
                      "in-batch, no logQ seed 1; in-batch, standard logQ seeds 0, 1.", text)
        with open(path) as f:
            saved = json.load(f)
        self.assertLen(saved["runs"], 5)
        self.assertEqual(saved["runs"][0]["baselines"], {"popularity": {"ndcg@20": 0.05},
                                                         "oracle": {"recall@10": 0.5}})

    def test_records_without_baselines_take_them_from_the_summary(self):
        path = os.path.join(tempfile.mkdtemp(), "report.json")
        with open(path, "w") as f:
            json.dump({"summary": {"gbce": {"popularity_ndcg@20": [0.0278, 0.0, 2]}},
                       "runs": [{"row": "gbce", "frequency": "static", "seed": 0,
                                 "test": {"ndcg@20": 0.1}, "epochs_run": 3,
                                 "train_seconds": 1.0}]}, f)
        recorded = reproduce.load_recorded(path)
        self.assertEqual(recorded[("gbce", "static", 0)]["baselines"],
                         {"popularity": {"ndcg@20": 0.0278}})

    def test_a_record_without_its_row_names_the_file(self):
        path = os.path.join(tempfile.mkdtemp(), "report.json")
        with open(path, "w") as f:
            json.dump({"runs": [{"row": "gbce", "frequency": "static", "seed": 0},
                                {"frequency": "static", "test": {"ndcg@20": 0.1}}]}, f)
        with self.assertRaisesRegex(ValueError, re.escape(
                f"{path}: run 1 of its \"runs\" lacks row, seed; it was not written by "
                "this runner.")):
            reproduce.load_recorded(path)

    def test_ordering_that_fails_is_reported_as_such(self):
        runs = reproduce.plan("ml-1m", "loo", "cpu", 1, ["mixed-standard", "mixed-improved"],
                              ["static"], tempfile.mkdtemp())
        _fake_run(runs[0], 0.2)
        _fake_run(runs[1], 0.15)
        text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", "loo", "cpu", "CMD")
        self.assertIn("mixed, standard logQ > mixed, improved logQ: ndcg@20 0.2000 (n=1) vs "
                      "0.1500 (n=1), gap -0.0500; the paper's ordering does not hold, spread "
                      "unknown (one seed).", text)

    def test_correction_ordering_for_mixed_negatives(self):
        # Table 1 has mixed, no logQ below mixed, standard (.1882 vs .1952), as for in-batch.
        runs = reproduce.plan("ml-1m", "loo", "official_cpu", 2, ["mixed-none", "mixed-standard"],
                              ["static"], tempfile.mkdtemp())
        for run, score in zip(runs, (0.164, 0.175, 0.166, 0.177)):  # Seed-major.
            _fake_run(run, score)
        text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", "loo", "official_cpu",
                                  "CMD")
        # none .164 / .166, standard .175 / .177 (sd .001414 each): gap .011, SE .001414,
        # t = 7.78; Welch df = 2, p = 1 - t / sqrt(2 + t^2) = 0.016.
        self.assertIn("- mixed, no logQ [train_mns.py] < mixed, standard logQ on negatives only "
                      "[train_mns_log_old.py]: ndcg@20 0.1650 (n=2) vs 0.1760 (n=2), gap +0.0110; "
                      "the paper's ordering holds, beyond the seed-to-seed spread (Welch t = 7.78 "
                      "with 2 df, two-sided p = 0.016). The paper: 0.1882 vs 0.1952.", text)

    def test_orderings_follow_the_papers_numbers_for_the_split(self):
        # Leave-one-out, the paper has improved above standard (.1972 vs .1952); temporal,
        # standard above improved (.1292 vs .1281), so the same two runs read differently.
        for split, expected in (
                ("loo", "mixed, standard logQ > mixed, improved logQ: ndcg@20 0.2000 (n=1) vs "
                        "0.1500 (n=1), gap -0.0500; the paper's ordering does not hold, spread "
                        "unknown (one seed). The paper: 0.1952 vs 0.1972."),
                ("temporal", "mixed, improved logQ <= mixed, standard logQ: ndcg@20 0.1500 "
                             "(n=1) vs 0.2000 (n=1), gap +0.0500; the paper's ordering holds, "
                             "spread unknown (one seed). The paper: 0.1281 vs 0.1292.")):
            runs = reproduce.plan("ml-1m", split, "cpu", 1, ["mixed-standard", "mixed-improved"],
                                  ["static"], tempfile.mkdtemp())
            _fake_run(runs[0], 0.2)
            _fake_run(runs[1], 0.15)
            text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", split, "cpu", "CMD")
            self.assertIn(expected, text)
            self.assertEqual(text.count("the paper's ordering"), 1)
        # The temporal in-batch pair is .1270 vs .1269 in the paper: level, no ordering.
        runs = reproduce.plan("ml-1m", "temporal", "cpu", 2,
                              ["in_batch-standard", "in_batch-improved"], ["static"],
                              tempfile.mkdtemp())
        for run, score in zip(runs, (0.20, 0.15, 0.22, 0.16)):
            _fake_run(run, score)
        text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", "temporal", "cpu", "CMD")
        # Seed-major plan: standard .20 / .22 (sd .0141), improved .15 / .16 (sd .0071). Gap
        # +0.055, SE = sqrt(.0141^2 / 2 + .0071^2 / 2) = .0112, t = 4.92; Welch df = 1.47 -> 1,
        # where p = 1 - 2 atan(t) / pi = 0.128.
        self.assertIn("- in-batch, improved logQ vs in-batch, standard logQ: ndcg@20 0.1550 "
                      "(n=2) vs 0.2100 (n=2), gap +0.0550; the paper has them level (one unit "
                      "of its last digit apart), ours differ within the seed-to-seed spread "
                      "(Welch t = 4.92 with 1 df, two-sided p = 0.128). The paper: 0.1269 vs "
                      "0.1270.", text)
        # No paper numbers (the synthetic catalog): Table 1's leave-one-out orderings.
        summary = reproduce.aggregate(runs)
        self.assertEqual(reproduce.ordering_verdicts(summary), [
            "- in-batch, standard logQ > in-batch, improved logQ: ndcg@20 0.2100 (n=2) vs 0.1550 "
            "(n=2), gap -0.0550; the paper's ordering does not hold, within the seed-to-seed "
            "spread (Welch t = -4.92 with 1 df, two-sided p = 0.128)."])

    def test_paired_differences_by_seed(self):
        runs = reproduce.plan("ml-1m", "loo", "official_cpu", 3,
                              ["mixed-standard", "mixed-improved", "mixed-standard_tfrs",
                               "full_softmax"], ["static"], tempfile.mkdtemp())
        scores = {"mixed-standard": [0.170, 0.180, 0.175],
                  "mixed-improved": [0.172, 0.183, 0.176],  # d = +0.002, +0.003, +0.001.
                  "mixed-standard_tfrs": [0.160],  # Seed 0 only.
                  "full_softmax": [0.168, 0.179, 0.173]}  # Standard - full: 2, 1, 2 (x 1e-3).
        for run in runs:
            if run.seed < len(scores[run.row.name]):
                _fake_run(run, scores[run.row.name][run.seed], best_epoch=100 + run.seed)
        text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", "loo", "official_cpu",
                                  "CMD")
        # Mean d 0.002, SE = std(d) / sqrt(3) = 0.001 / 1.732 = 0.000577, t = 3.46 with 2 df:
        # beyond 2 SE, but p = 1 - t / sqrt(2 + t^2) = 0.074 (2 df), not below 0.05.
        self.assertIn("- improved vs the paper's standard (negatives only): d = +0.0020 NDCG@20 "
                      "over 3 paired seeds (0, 1, 2): +0.0020, +0.0030, +0.0010; SE 0.0006, "
                      "paired t = 3.46 with 2 df, "
                      "two-sided p = 0.074; mixed, improved logQ [train_mns_log_new.py] is not "
                      "different from equal at p < 0.05.", text)
        self.assertIn("- TFRS's standard vs the paper's standard: d = -0.0100 NDCG@20 over 1 "
                      "paired seed (0); one pair: SE unknown.", text)
        # SE = 0.000577 / sqrt(3) = 0.000333, t = 5.00 with 2 df: p = 1 - 5 / sqrt(27) = 0.038.
        self.assertIn("- the paper's standard vs full softmax: d = +0.0017 NDCG@20 over 3 paired "
                      "seeds (0, 1, 2): +0.0020, +0.0010, +0.0020; SE 0.0003, paired t = 5.00 "
                      "with 2 df, two-sided p = "
                      "0.038; mixed, standard logQ on negatives only [train_mns_log_old.py] is "
                      "higher at p < 0.05.", text)
        self.assertIn("- improved vs full softmax: d = +0.0037 NDCG@20 over 3 paired seeds", text)
        # Epochs, mean best epoch, steps, train s.
        self.assertRegex(text, r"\| mixed, improved logQ \[train_mns_log_new.py\] \| 3 \| .* "
                         r"\| 40 \| 101 \| 1000 \| 101 \|")
        # Every run on its own line: seed, scores, best epoch / epochs, steps, train s.
        self.assertIn("| mixed, improved logQ [train_mns_log_new.py] | 2 | 0.1760 | 0.3000 | – "
                      "| 102 / 40 | 1000 | 102 |", text)

    def test_recall_by_popularity_band(self):
        runs = reproduce.plan("ml-1m", "loo", "official_cpu", 3,
                              ["in_batch-none", "in_batch-standard"], ["static"],
                              tempfile.mkdtemp())
        bands = {"in_batch-none": [(0.26, 0.17, 0.09), (0.28, 0.16, 0.08), None],
                 "in_batch-standard": [(0.31, 0.12, 0.03), (0.31, 0.13, 0.03), (0.31, 0.11, 0.03)]}
        for run in runs:
            _fake_run(run, 0.17, bands=bands[run.row.name][run.seed])
        text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", "loo", "official_cpu",
                                  "CMD")
        # Seed 2 of no correction recorded no bands: n = 2; std of .26, .28 is .01414.
        self.assertIn("| in-batch, no logQ [train_in_batch.py] | 2 | 0.2700 ± 0.0141 | "
                      "0.1650 ± 0.0071 | 0.0850 ± 0.0071 |", text)
        self.assertIn("| in-batch, standard logQ on negatives only [train_in_batch_logq_old.py] | "
                      "3 | 0.3100 ± 0.0000 | 0.1200 ± 0.0100 | 0.0300 ± 0.0000 |", text)
        self.assertIn("each third of the catalog by training count", text)

    def test_tier_two_pairs_within_the_in_batch_rows(self):
        runs = reproduce.plan("ml-1m", "loo", "official_cpu", 2,
                              ["in_batch-none", "in_batch-standard", "in_batch-improved_pool",
                               "in_batch-standard_tfrs"], ["static"], tempfile.mkdtemp())
        scores = {"in_batch-none": [0.150, 0.152], "in_batch-standard": [0.170, 0.174],
                  "in_batch-improved_pool": [0.171, 0.176],
                  "in_batch-standard_tfrs": [0.173, 0.174]}
        for run in runs:
            _fake_run(run, scores[run.row.name][run.seed])
        text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", "loo", "official_cpu",
                                  "CMD")
        # d = +.020, +.022: SE = .001, t = 21 with 1 df, p = 1 - 2 atan(21) / pi = 0.030.
        self.assertIn("- the paper's standard vs no correction, in-batch: d = +0.0210 NDCG@20 over "
                      "2 paired seeds (0, 1): +0.0200, +0.0220; SE 0.0010, paired t = 21.00 with "
                      "1 df, two-sided "
                      "p = 0.030;", text)
        # d = -.002, +.002: mean 0, t = 0, p = 1.
        self.assertIn("- improved (released pool) vs TFRS's standard, in-batch: d = +0.0000 "
                      "NDCG@20 over 2 paired seeds (0, 1): -0.0020, +0.0020; SE 0.0020, paired "
                      "t = 0.00 with 1 df, "
                      "two-sided p = 1.000;", text)
        self.assertIn("- improved (released pool) vs the paper's standard, in-batch: d = +0.0015",
                      text)
        self.assertIn("- TFRS's standard vs the paper's standard, in-batch: d = +0.0015", text)

    def test_rows_not_run_show_their_planned_seeds_with_or_without_a_paper_number(self):
        runs = reproduce.plan("ml-1m", "temporal", "official_cpu", 2,
                              ["mixed-standard", "mixed-standard_tfrs"], ["static"],
                              tempfile.mkdtemp())
        text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", "temporal", "official_cpu",
                                  "CMD")
        self.assertIn("| mixed, standard logQ on negatives only [train_mns_log_old.py] | 0/2 | "
                      "not run | 0.1292 | | | 0.2800 | | | | | |\n", text)
        self.assertIn("| mixed, standard logQ as TFRS (positive corrected too) | 0/2 | not run | "
                      "– | | | – | | | | | |\n", text)

    def test_test_score_against_the_best_epoch(self):
        runs = reproduce.plan("ml-1m", "loo", "official_cpu", 3,
                              ["mixed-standard", "mixed-improved"], ["static"], tempfile.mkdtemp())
        best = {"mixed-standard": [100, 200, 400], "mixed-improved": [50, 60, 70]}
        scores = {"mixed-standard": [0.170, 0.178, 0.185], "mixed-improved": [0.17, 0.17, 0.17]}
        for run in runs:
            _fake_run(run, scores[run.row.name][run.seed], best_epoch=best[run.row.name][run.seed])
        text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", "loo", "official_cpu",
                                  "CMD")
        # numpy: corrcoef 0.97399, polyfit slope 4.7857e-5 per epoch.
        self.assertIn("- mixed, standard logQ on negatives only [train_mns_log_old.py]: r = +0.97 "
                      "over 3 runs, slope +0.0048 NDCG@20 per 100 epochs.", text)
        # Over all six: corrcoef 0.98366, slope 4.5975e-5 per epoch.
        self.assertIn("- all runs: r = +0.98 over 6 runs, slope +0.0046 NDCG@20 per 100 epochs.",
                      text)
        # No spread in the scores: no fit, no line.
        self.assertNotIn("- mixed, improved logQ [train_mns_log_new.py]: r =", text)
        self.assertIsNone(reproduce.best_epoch_fit([{"best_epoch": 1, "ndcg@20": 0.1},
                                                    {"best_epoch": 2, "ndcg@20": 0.2}]))

    def test_pairs_outside_the_official_profiles_are_named_by_their_rows(self):
        # Under `cpu` the standard row is TFRS's form, not "the paper's standard".
        runs = reproduce.plan("ml-1m", "loo", "cpu", 2, ["mixed-standard", "mixed-improved"],
                              ["static"], tempfile.mkdtemp())
        for run in runs:
            _fake_run(run, {"mixed-standard": [0.170, 0.180],
                            "mixed-improved": [0.172, 0.184]}[run.row.name][run.seed])
        text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", "loo", "cpu", "CMD")
        self.assertIn("- mixed, improved logQ vs mixed, standard logQ: d = +0.0030 NDCG@20 over "
                      "2 paired seeds (0, 1)", text)
        self.assertNotIn("the paper's standard", text)

    def test_plateaus_of_a_pair_are_compared_over_their_common_epochs(self):
        # The base run stops at epoch 149; the other runs on to 299, higher late: only
        # epochs 100-149 of both count.
        base = {epoch: 0.150 for epoch in range(150)}
        row = {epoch: 0.151 if epoch < 150 else 0.170 for epoch in range(300)}
        self.assertAlmostEqual(reproduce.window_difference(base, row), 0.001)
        self.assertAlmostEqual(reproduce.window_difference(row, base), -0.001)
        self.assertIsNone(reproduce.window_difference(base, {e: 0.2 for e in range(105)}))
        self.assertEqual(reproduce._curve_dict(reproduce._curve_list({0: 0.1, 2: 0.3})),
                         {0: 0.1, 2: 0.3})

    def test_a_beyond_p_005_difference_is_called(self):
        runs = reproduce.plan("ml-1m", "loo", "official_cpu", 4, ["mixed-standard", "mixed-improved"],
                              ["static"], tempfile.mkdtemp())
        scores = {"mixed-standard": [0.170, 0.180, 0.175, 0.172],
                  "mixed-improved": [0.175, 0.186, 0.179, 0.177]}  # d = 5, 6, 4, 5 (x 1e-3).
        for run in runs:
            _fake_run(run, scores[run.row.name][run.seed])
        text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", "loo", "official_cpu", "CMD")
        # SE = 0.000816 / 2 = 0.000408, t = 12.25 with 3 df.
        self.assertRegex(text, r"d = \+0.0050 NDCG@20 over 4 paired seeds \(0, 1, 2, 3\): "
                               r"\+0.0050, \+0.0060, \+0.0040, \+0.0050; SE "
                               r"0.0004, paired t = 12.25 with 3 df, two-sided p = 0.001; .* is "
                               r"higher at p < 0.05.")

    def test_one_seed_pair_is_paired_by_test_user_from_the_saved_per_query_metrics(self):
        from pipelines import per_query  # pylint: disable=import-outside-toplevel
        runs = reproduce.plan("ml-1m", "loo", "official", 1, ["mixed-standard", "mixed-improved"],
                              ["static"], tempfile.mkdtemp())
        results = tempfile.mkdtemp()
        name = reproduce.experiment_name("ml-1m", "loo", "official")
        rng = np.random.default_rng(0)
        base = rng.uniform(0.0, 0.4, size=1000)
        values = {"mixed-standard": base, "mixed-improved": base + rng.normal(0.01, 0.05, 1000)}
        for run in runs:
            _fake_run(run, float(values[run.row.name].mean()))
        # Improved's file first only: no pair yet, no section.
        record = {"users": np.arange(1000), "targets_digest": "t", "split": "test",
                  "index": "exact", "description": "ml-1m, split loo"}
        directory = os.path.join(results, reproduce.PER_QUERY_DIR, name)
        per_query.save(dict(record, values={"ndcg@20": values["mixed-improved"]}),
                       os.path.join(directory, "mixed-improved", "seed0.npz"))
        text = reproduce.write_report(runs, "ml-1m", "loo", "official", results, "CMD")
        self.assertIn("one pair: SE unknown", text)
        self.assertNotIn("Paired by test user", text)
        per_query.save(dict(record, values={"ndcg@20": values["mixed-standard"]}),
                       os.path.join(directory, "mixed-standard", "seed0.npz"))
        text = reproduce.write_report(runs, "ml-1m", "loo", "official", results, "CMD")
        d = (values["mixed-improved"].astype(np.float32).astype(float)
             - values["mixed-standard"].astype(np.float32).astype(float))
        expected = stats.ttest_rel(values["mixed-improved"], values["mixed-standard"])
        self.assertIn(f"- improved vs the paper's standard (negatives only), seed 0: d = "
                      f"{d.mean():+.4f} NDCG@20 over 1000 test users (", text)
        self.assertIn(f"; SE {d.std(ddof=1) / np.sqrt(1000):.4f}, paired t = "
                      f"{expected.statistic:.2f}, two-sided p = ", text)
        self.assertIn("is higher at p < 0.05 on these users.", text)
        # Files of other queries are refused, not paired.
        per_query.save(dict(record, targets_digest="other", values={"ndcg@20": base}),
                       os.path.join(directory, "mixed-standard", "seed0.npz"))
        with self.assertRaisesRegex(ValueError, "evaluates other test queries than"):
            reproduce.write_report(runs, "ml-1m", "loo", "official", results, "CMD")

    def test_validation_plateau_from_the_logs_paired_by_seed(self):
        runs = reproduce.plan("ml-1m", "loo", "official_cpu", 2,
                              ["mixed-standard", "mixed-improved"], ["static"],
                              tempfile.mkdtemp())
        # Curves flat at `level` from epoch 100 on, +-0.004 alternating; logged in two
        # restarts (two event files), as a resumed run leaves them.
        levels = {("mixed-standard", 0): 0.150, ("mixed-standard", 1): 0.155,
                  ("mixed-improved", 0): 0.152, ("mixed-improved", 1): 0.160}
        for run in runs:
            _fake_run(run, 0.17)
            level = levels[(run.row.name, run.seed)]
            for start, stop in ((0, 90), (90, 140)):
                writer = tf.summary.create_file_writer(
                    os.path.join(run.directory, "logs", "validation"),
                    filename_suffix=f".{start}")
                with writer.as_default():
                    for epoch in range(start, stop):
                        value = (0.05 if epoch < 100 else level) + 0.004 * (-1) ** epoch
                        tf.summary.scalar("epoch_ndcg@10", value, step=epoch)
                writer.close()
        curve = reproduce.validation_curve(runs[0].directory)
        self.assertEqual(sorted(curve), list(range(140)))
        self.assertAllClose(reproduce.validation_plateau(curve), levels[("mixed-standard", 0)])
        self.assertIsNone(reproduce.validation_plateau({epoch: 0.1 for epoch in range(105)}))
        text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", "loo", "official_cpu",
                                  "CMD")
        # d = +0.002 and +0.005: mean 0.0035, SE 0.0015, t = 2.33; with 1 df, p = 0.258.
        self.assertIn("- improved vs the paper's standard (negatives only): d = +0.0035 "
                      "validation NDCG@10 (mean over the pair's epochs 100 to the shorter run's "
                      "last) over 2 paired seeds (0, 1): +0.0020, +0.0050; SE 0.0015, paired "
                      "t = 2.33 with 1 df, two-sided p = 0.258; mixed, "
                      "improved logQ [train_mns_log_new.py] is not different from equal at "
                      "p < 0.05.", text)

    def test_test_curve_from_the_train_logs_paired_by_seed(self):
        runs = reproduce.plan("ml-1m", "loo", "official_cpu", 2,
                              ["mixed-standard", "mixed-improved"], ["static"],
                              tempfile.mkdtemp())
        # Test NDCG@20 logged every 10 epochs (epochs 9, 19, ...) under train/; the improved
        # runs stop at epoch 249, the standard ones run to 399 and rise late: only the logged
        # epochs 109-249 count.
        levels = {("mixed-standard", 0): 0.170, ("mixed-standard", 1): 0.175,
                  ("mixed-improved", 0): 0.172, ("mixed-improved", 1): 0.176}
        for run in runs:
            _fake_run(run, 0.17)
            level = levels[(run.row.name, run.seed)]
            last = 250 if run.row.name == "mixed-improved" else 400
            writer = tf.summary.create_file_writer(os.path.join(run.directory, "logs", "train"))
            with writer.as_default():
                for epoch in range(9, last, 10):
                    tf.summary.scalar("epoch_test_ndcg@20", level if epoch < 250 else 0.2,
                                      step=epoch)
                    tf.summary.scalar("epoch_loss", 1.0, step=epoch)
            writer.close()
        self.assertEqual(sorted(reproduce.test_curve(runs[0].directory)), list(range(9, 400, 10)))
        self.assertEqual(reproduce.validation_curve(runs[0].directory), {})  # No validation logs.
        # A kill in the middle of a write cuts the file's last record (epoch 399's loss):
        # the whole records before it still count.
        cut = os.path.join(runs[0].directory, "logs", "train", "events.out.tfevents.cut")
        events = glob.glob(os.path.join(runs[0].directory, "logs", "train", "events*"))
        shutil.copy(events[0], cut)
        with open(cut, "r+b") as f:
            f.truncate(os.path.getsize(cut) - 3)
        self.assertEqual(sorted(reproduce.test_curve(runs[0].directory)), list(range(9, 400, 10)))
        text = reproduce.markdown(reproduce.aggregate(runs), "ml-1m", "loo", "official_cpu",
                                  "CMD")
        # d = +0.002 and +0.001: mean 0.0015, SE 0.0005, t = 3.00 with 1 df, p = 0.205.
        self.assertIn("- improved vs the paper's standard (negatives only): d = +0.0015 test "
                      "NDCG@20 (mean over the pair's logged epochs 100 to the shorter run's "
                      "last) over 2 paired seeds (0, 1): +0.0020, +0.0010; SE 0.0005, paired "
                      "t = 3.00 with 1 df, "
                      "two-sided p = 0.205;", text)

    def test_synthetic_table(self):
        runs = reproduce.plan("synthetic", "loo", "cpu", 2, ["in_batch-improved"],
                              ["static", "count_min"], tempfile.mkdtemp())
        for run, kl in zip(runs, (1.0, 1.5, 2.0, 2.5)):
            _fake_run(run, 0.2, kl=kl)
        text = reproduce.markdown(reproduce.aggregate(runs), "synthetic", "loo", "cpu", "CMD")
        self.assertIn("# Two-tower model on the synthetic catalog (known P(d|u)), loo split, "
                      "`synthetic_two_tower` preset", text)
        self.assertIn("| in-batch, improved logQ | exact counts | 2 | 1.5000 ± 0.7071 | "
                      "0.1500 ± 0.0000 | 0.5000 | 0.3000 | 0.2000 | 0.1000 |", text)
        self.assertIn("| in-batch, improved logQ | count-min sketch | 2 | 2.0000 ± 0.7071 |",
                      text)


class ParallelTest(tf.test.TestCase):

    def test_cpu_slots_split_the_cpus_evenly(self):
        self.assertEqual(reproduce.cpu_slots(1, [0, 1]), [None])
        self.assertEqual(reproduce.cpu_slots(2, [0, 1]), [[0], [1]])
        self.assertEqual(reproduce.cpu_slots(2, [0, 1, 2, 3, 4]), [[0, 1, 2], [3, 4]])
        with self.assertRaisesRegex(ValueError, "--parallel=3 is more than the 2 CPUs"):
            reproduce.cpu_slots(3, [0, 1])

    def _runs(self, n):
        out = tempfile.mkdtemp()
        return reproduce.plan("synthetic", "loo", "cpu", n, ["in_batch-none"], ["static"],
                              out, "", "smoke")

    def test_runs_share_the_slots_and_never_a_cpu(self):
        runs = self._runs(5)
        lock, active, seen = threading.Lock(), set(), []

        def fake_execute(run, cpus=None):
            with lock:
                self.assertNotIn(tuple(cpus), active)  # No two running runs share CPUs.
                active.add(tuple(cpus))
                seen.append(len(active))
            time.sleep(0.05)
            with lock:
                active.remove(tuple(cpus))
            return 1.0

        with mock.patch.object(reproduce, "execute", fake_execute):
            done = list(reproduce.run_all(runs, [[0], [1]]))
        self.assertCountEqual([number for number, _, _ in done], [1, 2, 3, 4, 5])
        self.assertEqual(max(seen), 2)

    def test_a_failed_run_stops_the_ones_not_started(self):
        runs = self._runs(4)
        started = []

        def fake_execute(run, cpus=None):
            started.append(run.seed)
            if run.seed == 0:
                raise RuntimeError("run 0 failed")
            time.sleep(0.2)
            return 1.0

        with mock.patch.object(reproduce, "execute", fake_execute):
            with self.assertRaisesRegex(RuntimeError, "run 0 failed"):
                list(reproduce.run_all(runs, [None]))
        self.assertEqual(started, [0])


@pytest.mark.slow
class RunnerTest(tf.test.TestCase):

    def test_runs_then_skips_finished_runs(self):
        out, results = tempfile.mkdtemp(), tempfile.mkdtemp()
        args = [sys.executable, "-m", "pipelines.benchmarks.reproduce", "--dataset=synthetic",
                "--preset=smoke", "--seeds=1",
                "--rows=in_batch-none,in_batch-standard,in_batch-improved",
                f"--output_dir={out}", f"--results_dir={results}"]
        # Two at a time, one CPU each where there are two (one at a time on one CPU).
        parallel = min(2, len(os.sched_getaffinity(0)))
        first = subprocess.run(args + [f"--parallel={parallel}"], capture_output=True, text=True,
                               timeout=900, check=False)
        self.assertEqual(first.returncode, 0, first.stderr[-2000:])
        self.assertIn("3 runs planned, 0 already finished.", first.stdout)
        self.assertRegex(first.stdout, r"\| in-batch, improved logQ \| exact counts \| 1 \| "
                         r"[0-9.]+ \| [0-9.]+ \|")
        self.assertIn("the paper's ordering", first.stdout)
        again = subprocess.run(args, capture_output=True, text=True, timeout=900, check=False)
        self.assertIn("3 runs planned, 3 already finished.", again.stdout)
        self.assertNotIn("[1/", again.stdout)
        # Without the run directories, --include_recorded takes the runs from the report.
        for root, _, files in os.walk(out):
            if "metrics.json" in files:
                os.remove(os.path.join(root, "metrics.json"))
        fresh = subprocess.run(args + ["--include_recorded"], capture_output=True, text=True,
                               timeout=900, check=False)
        self.assertEqual(fresh.returncode, 0, fresh.stderr[-2000:])
        self.assertIn("3 runs planned, 3 already finished (3 of them recorded in ", fresh.stdout)
        self.assertNotIn("[1/", fresh.stdout)
        self.assertIn("in-batch, improved logQ seed 0.", fresh.stdout)


class CampaignScriptTest(tf.test.TestCase):
    """pipelines/benchmarks/campaign.sh, issue 25's queue: it parses, and every step and report
    it hands to reproduce names a known profile and known rows."""

    SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "pipelines", "benchmarks", "campaign.sh")

    def test_parses_and_refuses_an_unknown_command(self):
        subprocess.run(["bash", "-n", self.SCRIPT], check=True)
        unknown = subprocess.run(["bash", self.SCRIPT, "start"], capture_output=True, text=True,
                                 check=False)
        self.assertEqual(unknown.returncode, 2)
        self.assertIn("usage:", unknown.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            core = subprocess.run(["bash", self.SCRIPT, "queue", "2"], capture_output=True,
                                  text=True, check=False,
                                  env=dict(os.environ, CAMPAIGN_DIR=tmp, LOG_DIR=tmp))
        self.assertEqual(core.returncode, 2)
        self.assertIn("queue takes 0, 1 or nothing (both cores); received 2", core.stderr)

    def test_steps_and_reports_name_known_profiles_and_rows(self):
        with open(self.SCRIPT) as f:
            text = f.read()
        tiers = dict(re.findall(r"^(TIER\d)=(\S+)$", text, re.M))
        text = re.sub(r"\$(TIER\d)", lambda m: tiers[m.group(1)], text)
        steps = re.findall(r'^  "(--profile=\w+ [^"|]*)\|([^"|]+)\|([^"|]+)"$', text, re.M)
        reports = re.findall(r'^  "(ml1m_\w+)\|(--profile=\w+ [^"]*)"$', text, re.M)
        self.assertLen(steps, 6)
        self.assertLen(reports, 4)
        names = set()
        for flags_part, *rows in steps + [(f, r) for _, f in reports
                                           for r in re.findall(r"--rows=(\S+)", f)]:
            self.assertIn(re.search(r"--profile=(\w+)", flags_part).group(1),
                          reproduce.PROFILES)
            names.update(",".join(rows).split(","))
        names.discard("-")  # A core with no rows in a step.
        self.assertContainsSubset(names, set(reproduce.ROWS_BY_NAME))
        # Within one experiment a row stays on one core: on both, the two drivers could train
        # one seed's directory at once.
        def experiment(flags_part):
            return re.sub(r"--seeds=\d+", "", flags_part)
        for step in steps:
            for other in steps:
                if experiment(step[0]) == experiment(other[0]):
                    self.assertEmpty(set(step[1].split(",")) & set(other[2].split(",")) - {"-"},
                                     (step, other))
        self.assertContainsSubset({"mixed-standard", "mixed-improved", "mixed-standard_tfrs",
                                   "full_softmax", "in_batch-none", "in_batch-standard",
                                   "in_batch-improved_pool", "in_batch-standard_tfrs",
                                   "mixed-none", "uniform", "bce", "gbce"}, names)
        # The per-query files go where the reports look for them.
        self.assertIn(f"PER_QUERY_DIR=docs/results/{reproduce.PER_QUERY_DIR} ", text)
        # Each report's file is the one its flags make reproduce write.
        for name, flags_part in reports:
            profile = re.search(r"--profile=(\w+)", flags_part).group(1)
            split = re.search(r"--split=(\w+)", flags_part).group(1)
            targets = re.search(r"--temporal_targets=(\w+)", flags_part)
            self.assertEqual(name, reproduce.experiment_name(
                "ml-1m", split, profile, temporal_targets=targets.group(1) if targets
                else "first"))

    def test_drive_skips_a_core_with_no_rows_in_a_step(self):
        # `--rows=` empty would make reproduce train every row of the split.
        script = (f'set -euo pipefail; eval "$(sed -n "/^STEPS=(/,/^)/p" {self.SCRIPT})"; '
                  f'eval "$(sed -n "/^drive() {{/,/^}}/p" {self.SCRIPT})"; '
                  'run() { echo "$*"; }; drive 1 a 2')
        calls = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                               check=True).stdout.splitlines()
        self.assertLen(calls, 5)  # Six steps, one of them "-" on core 1.
        for call in calls:
            self.assertRegex(call, r"--rows=[a-z]")

    def test_status_lists_runs_in_progress_with_the_fewest_epochs_left(self):
        with tempfile.TemporaryDirectory() as tmp:
            runs = os.path.join(tmp, "runs", "reproduce", "ml1m_loo_official")
            for row, progress in [("mixed-improved", {"epochs": 91, "best": 0.1794,
                                                      "best_epoch": 85, "seconds": 1.0}),
                                  ("mixed-standard", {"epochs": 1, "best": None,
                                                      "best_epoch": None, "seconds": 1.0}),
                                  ("full_softmax", {"epochs": 300, "best": 0.2,
                                                    "best_epoch": 99, "finished": True})]:
                run = os.path.join(runs, row, "seed0")
                os.makedirs(run)
                for name, content in [("progress.json", progress),
                                      ("config.json", {"patience": 200})]:
                    with open(os.path.join(run, name), "w") as f:
                        json.dump(content, f)
            with open(os.path.join(runs, "mixed-improved", "seed0", "train.log"), "w") as f:
                f.write("48/48 - 100s - loss: 1 - 100s/epoch\n48/48 - 200s - 200s/epoch\n")
            status = subprocess.run(["bash", self.SCRIPT, "status"], capture_output=True,
                                    text=True, check=True,
                                    env=dict(os.environ, CAMPAIGN_DIR=tmp, LOG_DIR=tmp))
        # Best after epoch 86 (1-based), then 200 epochs of patience: 286, 195 after the 91st.
        self.assertEqual(status.stdout.splitlines(), [
            "ml1m_loo_official/mixed-improved/seed0: 91 epochs, best validation 0.1794 after 86;"
            " stops after 286 at the earliest (195 more); 150 s an epoch over the last 2,"
            " so at least 8.1 h",
            "ml1m_loo_official/mixed-standard/seed0: 1 epochs, no validation value yet"])

    def test_status_pairs_runs_of_one_seed_over_the_epochs_both_logged(self):
        from pipelines.benchmarks import campaign_status  # pylint: disable=import-outside-toplevel
        with tempfile.TemporaryDirectory() as runs:
            # Improved has logged validation epochs 0-29 and the test curve at 9, 19, 29;
            # standard (finished) validation 0-19 and the test curve at 9, 19.
            for row, epochs, level, test_level in [("mixed-improved", 30, 0.150, 0.190),
                                                   ("mixed-standard", 20, 0.148, 0.1915)]:
                run = os.path.join(runs, "ml1m_loo_official", row, "seed0")
                progress = {"epochs": epochs, "best": level, "best_epoch": epochs - 1,
                            "finished": row == "mixed-standard"}
                for name, content in [("progress.json", progress),
                                      ("config.json", {"patience": 200})]:
                    os.makedirs(run, exist_ok=True)
                    with open(os.path.join(run, name), "w") as f:
                        json.dump(content, f)
                for writer_name, tag, logged, value in [
                        ("validation", "epoch_ndcg@10", range(epochs), level),
                        ("train", "epoch_test_ndcg@20", range(9, epochs, 10), test_level)]:
                    writer = tf.summary.create_file_writer(os.path.join(run, "logs",
                                                                        writer_name))
                    with writer.as_default():
                        for epoch in logged:
                            # The epochs only one run logged would move the mean by 0.01.
                            tf.summary.scalar(tag, value + 0.01 * (epoch >= 20), step=epoch)
                    writer.close()
            # Another report's improved run, with no standard one to pair and no progress yet.
            os.makedirs(os.path.join(runs, "ml1m_loo_official_cpu", "mixed-improved", "seed1"))
            lines = campaign_status.status(runs)
        self.assertEqual(lines, [
            "ml1m_loo_official/mixed-improved/seed0: 30 epochs, best validation 0.1500 after 30;"
            " stops after 230 at the earliest (200 more)",
            "ml1m_loo_official seed0, improved vs the paper's standard (negatives only) "
            "(mixed-improved - mixed-standard): validation NDCG@10 +0.0020 over 20 epochs "
            "(1 to 20); test curve NDCG@20 -0.0015 over 2 epochs (10 to 20)"])
        with tempfile.TemporaryDirectory() as empty:
            self.assertEqual(campaign_status.status(empty),
                             [f"no run in progress under {empty}"])

    def test_per_query_commits_each_finished_runs_metrics_once(self):
        from pipelines import configs, evaluate, train  # pylint: disable=import-outside-toplevel
        root = os.path.dirname(os.path.dirname(os.path.dirname(self.SCRIPT)))
        with tempfile.TemporaryDirectory() as tmp:
            main, campaign = os.path.join(tmp, "main"), os.path.join(tmp, "campaign")
            runs = os.path.join(campaign, "runs", "reproduce", "synthetic_loo_smoke")
            finished = os.path.join(runs, "mixed-improved", "seed0")
            metrics = train.run(configs.PRESETS["smoke"].replace(
                epochs=1, steps_per_epoch=5, index="exact"), finished, verbose=0)
            os.makedirs(os.path.join(runs, "mixed-standard", "seed0"))  # In progress: skipped.
            os.makedirs(main)
            os.symlink(os.path.join(root, ".venv"), os.path.join(main, ".venv"))
            git = ["git", "-C", main, "-c", "user.name=t", "-c", "user.email=t@t"]
            subprocess.run(git + ["init", "-q"], check=True)
            subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "start"], check=True)
            env = dict(os.environ, MAIN_DIR=main, CAMPAIGN_DIR=campaign, LOG_DIR=tmp,
                       PYTHONPATH=root, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
                       GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
            for _ in range(2):  # The second call finds the file and does nothing.
                result = subprocess.run(["bash", self.SCRIPT, "per_query"], capture_output=True,
                                        text=True, check=True, env=env)
            self.assertEqual(result.stdout, "")
            log = subprocess.run(git + ["log", "--format=%s", "--name-only"], check=True,
                                 capture_output=True, text=True).stdout.split("\n")
            saved = "docs/results/per_query/synthetic_loo_smoke/mixed-improved/seed0.npz"
            self.assertEqual(log[:3], ["results: per-query test metrics of 1 finished campaign "
                                       "runs (issue 25)", "", saved])
            values = evaluate.per_query_values(os.path.join(main, saved))
            self.assertEqual(len(values["users"]), 300)
            for name, value in metrics["test"].items():
                self.assertAlmostEqual(float(values["values"][name].mean()), value, places=5)

if __name__ == "__main__":
    tf.test.main()
