"""The benchmarks run end to end on small settings and report real numbers."""

import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import ann
from benchmarks import estimator_accuracy
from benchmarks import gradient_bias
from tfrs_logq import frequency

pytestmark = pytest.mark.integration


def run_benchmark(name: str, *flags: str, timeout: int) -> subprocess.CompletedProcess:
    """Runs `python -m benchmarks.NAME FLAGS...`, capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", *flags],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


class GradientBiasTest(tf.test.TestCase):
    def test_improved_removes_the_tail_bias_of_standard(self):
        rows = gradient_bias.run_study(
            num_items=500,
            exponent=1.0,
            num_negatives=[16],
            trials=1500,
            tail_quantile=0.9,
            samplers=["in_batch"],
            seed=0,
        )
        error = {(r["correction"], r["positive"]): r["relative_error"] for r in rows}
        noise = max(r["noise_floor"] for r in rows)
        # Standard logQ over-weights a tail positive; improved is within noise of the truth.
        self.assertGreater(error[("standard", "tail")], 3 * error[("improved", "tail")])
        self.assertLess(error[("improved", "tail")], 3 * noise)
        self.assertLess(error[("improved", "head")], 3 * noise)

    def test_full_softmax_gradient(self):
        grad = gradient_bias.full_softmax_gradient(np.zeros(4, np.float32), 1)
        self.assertAllClose(grad, [0.25, -0.75, 0.25, 0.25])

    def test_command_line_writes_table_and_plot(self):
        out = tempfile.mkdtemp()
        result = run_benchmark(
            "gradient_bias",
            f"--output_dir={out}",
            "--num_items=100",
            "--num_negatives=4",
            "--trials=50",
            "--samplers=uniform,mixed",
            timeout=600,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertIn("| mixed | 4 |", result.stdout)
        for name in ("gradient_bias.png", "gradient_bias.json", "gradient_bias.md"):
            self.assertTrue(os.path.getsize(os.path.join(out, name)) > 0, name)

    def test_bad_flag_is_reported(self):
        result = run_benchmark("gradient_bias", "--samplers=random", timeout=600)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn(
            "--samplers must name in_batch, uniform or mixed; received 'random'", result.stderr
        )
        for value, message in (
            ("4,x", "--num_negatives must be integers; received ['4', 'x']"),
            ("1", "--num_negatives must be >= 2; received ['1']"),
        ):
            result = run_benchmark("gradient_bias", f"--num_negatives={value}", timeout=600)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn(message, result.stderr)


class EstimatorAccuracyTest(tf.test.TestCase):
    def test_count_min_tracks_q_and_the_drift_and_hashed_saturates(self):
        def stream():
            return estimator_accuracy.Stream(
                num_items=2000, exponent=1.0, batch_size=256, drift_step=200, seed=0
            )

        count_min = estimator_accuracy.run_stream(
            lambda: frequency.CountMinSketchEstimator(width=8192, depth=4, decay=0.95),
            stream(),
            steps=400,
            eval_every=10,
            tail_band=(500, 1000),
        )
        before = count_min["before_drift"]
        # decay 0.95 averages ~39 steps' draws: the rank-50 item (0.63 draws a step) has
        # ~25 effective draws, a relative error of ~0.2, so a median of ~0.13 over the top-100.
        self.assertLess(before["top100"], 0.2)
        self.assertLess(before["top1000"], 0.45)
        self.assertBetween(before["tv"], 0.0, 0.2)
        # The window is ~20 steps: back under 1.5x its pre-drift error within a few windows.
        self.assertIsNotNone(count_min["recovery_steps"])
        self.assertLess(count_min["recovery_steps"], 60)
        self.assertEqual(count_min["state_bytes"], 8192 * 4 * 4 + 20)

        hashed = estimator_accuracy.run_stream(
            lambda: frequency.HashedFrequencyEstimator(num_buckets=8192, num_hashes=2),
            stream(),
            steps=400,
            eval_every=10,
            tail_band=(500, 1000),
        )
        top = hashed["before_drift"]["head"][0]
        # The top item (q = 0.12, ~31 draws a step) is seen every step: per-draw 1/256.
        self.assertAllClose(top["q_hat"], 1 / 256, rtol=1e-3)
        self.assertGreater(np.log(top["q"] / top["q_hat"]), 3.0)
        self.assertAllClose(top["pi_hat"], 1.0, atol=1e-6)

    def test_command_line_writes_table_and_plot(self):
        out = tempfile.mkdtemp()
        result = run_benchmark(
            "estimator_accuracy",
            f"--output_dir={out}",
            "--catalogs=3000",
            "--exponents=1.0",
            "--batch_size=64",
            "--steps=120",
            "--drift_step=60",
            "--eval_every=20",
            "--tail_band=500,1000",
            "--memory_mb=0.05",
            "--timing_items=2000",
            "--timing_rounds=1",
            "--timing_steps=2",
            timeout=600,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertRegex(
            result.stdout,
            r"\| Zipf 1 / 3,000 items \| hashed m=2 alpha=0.01 \| "
            r"0.05 \| [0-9.]+ \|",
        )
        self.assertRegex(
            result.stdout,
            r"\| count-min d=4 decay=0.999 \| [0-9,]+ \| [0-9.]+ \| "
            r"[0-9.]+% \| [0-9.]+x \|",
        )
        self.assertRegex(
            result.stdout,
            r"Largest update \+ lookup cost: [0-9.]+% of the training "
            r"step",
        )
        for name in ("estimator_accuracy.png", "estimator_accuracy.json", "estimator_accuracy.md"):
            self.assertTrue(os.path.getsize(os.path.join(out, name)) > 0, name)

    def test_bad_flags_are_reported(self):
        for flag, message in (
            (
                "--estimators=lossy",
                "--estimators: unknown estimator 'lossy'; choose from hashed m=2 alpha=0.01",
            ),
            (
                "--drift_step=5000",
                "--drift_step must be below --steps=4000; received --drift_step=5000",
            ),
            ("--catalogs=1", "--exponents must be positive, --catalogs at least 2"),
        ):
            result = run_benchmark("estimator_accuracy", flag, timeout=600)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn(message, result.stderr)


@pytest.mark.slow
class TrainStepTest(tf.test.TestCase):
    def test_command_line_times_rows_with_and_without_xla(self):
        result = run_benchmark(
            "train_step",
            "--presets=smoke",
            "--dataset=synthetic",
            "--rows=in_batch-improved,full_softmax",
            "--rounds=1",
            "--steps_per_round=1",
            timeout=900,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        for row in ("in_batch-improved", "full_softmax"):
            self.assertRegex(
                result.stdout,
                r"\| " + row + r" \| [0-9.]+ \| [0-9.]+ \| [0-9,]+ "
                r"\| [0-9.]+x \|",
            )


@pytest.mark.slow
class LossOverheadTest(tf.test.TestCase):
    def test_command_line_prints_the_ratios(self):
        result = run_benchmark(
            "loss_overhead",
            "--num_items=20000",
            "--batch_sizes=256",
            "--ids=int,string",
            "--sources=column,count_min",
            "--rounds=1",
            "--steps_per_round=2",
            timeout=900,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        for variant in (
            "LogQRetrieval standard, Q: column",
            "LogQRetrieval standard_negatives, Q: count_min",
            "LogQRetrieval improved, Q: count_min",
        ):
            self.assertRegex(
                result.stdout, r"\| " + re.escape(variant) + r" \| [0-9.]+ \| [0-9.]+x \|"
            )
            for ids in ("int", "string"):
                self.assertRegex(
                    result.stdout, r"\| " + ids + r" \| " + re.escape(variant) + r" \| [0-9.]+x \|"
                )
        self.assertRegex(result.stdout, r"Worst ratio: [0-9.]+x")

    def test_memory_mode(self):
        result = run_benchmark(
            "loss_overhead",
            "--memory",
            "--batch_sizes=512",
            "--num_items=5000",
            "--rounds=1",
            "--steps_per_round=2",
            timeout=900,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertRegex(result.stdout, r"\| tfrs Retrieval, Q: column \| [0-9]+ \| [0-9.]+ \|  \|")
        self.assertRegex(
            result.stdout,
            r"\| LogQRetrieval improved, Q: column \| [0-9]+ "
            r"\| [0-9.]+ \| [0-9.]+x \|",
        )


class TutorialFlowTest(tf.test.TestCase):
    def test_command_line_prints_each_flow_and_writes_the_record(self):
        with tempfile.TemporaryDirectory() as directory:
            output = os.path.join(directory, "record.json")
            result = run_benchmark(
                "tutorial_flow",
                "--batch_sizes=64",
                "--variants=none,standard_q,improved_sketch",
                "--rounds=1",
                "--steps_per_round=1",
                f"--output={output}",
                timeout=900,
            )
            self.assertEqual(result.returncode, 0, result.stderr[-2000:])
            with open(output) as f:
                record = json.load(f)
        for flow in ("basic", "multitask"):
            self.assertIn(f"{flow} flow, batch 64", result.stdout)
        self.assertRegex(result.stdout, r"\| tfrs_q \| [0-9.]+ \| [0-9.]+x \| 1.000x \|")
        self.assertRegex(result.stdout, r"\| standard_q \| [0-9.]+ \| [0-9.]+x \| [0-9.]+x \|")
        self.assertRegex(result.stdout, r"\| improved_sketch \| [0-9.]+ \| [0-9.]+x \|  \|")
        self.assertEqual([c["flow"] for c in record["cells"]], ["basic", "multitask"])
        self.assertEqual(
            set(record["cells"][0]["ratio_to_tfrs"]),
            {"tfrs", "tfrs_q", "none", "standard_q", "improved_sketch"},
        )
        self.assertEqual(record["cells"][0]["ratio_to_tfrs"]["tfrs"], 1.0)

    def test_bad_flags_are_reported(self):
        for flag, text in (
            ("--flows=basic,tutorial", "--flows must be among"),
            ("--variants=none,improved", "--variants must be among"),
            ("--batch_sizes=abc", "--batch_sizes must be integers"),
        ):
            result = run_benchmark("tutorial_flow", flag, timeout=300)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn(text, result.stderr + result.stdout, flag)


class DeviceTopKTest(tf.test.TestCase):
    def test_command_line_times_every_search_and_they_agree(self):
        with tempfile.TemporaryDirectory() as directory:
            output = os.path.join(directory, "record.json")
            result = run_benchmark(
                "device_top_k",
                "--index_sizes=3000,700",
                "--queries=300",
                "--k=50",
                "--history=20",
                f"--output={output}",
                timeout=600,
            )
            self.assertEqual(result.returncode, 0, result.stderr[-2000:])
            with open(output) as f:
                record = json.load(f)
        self.assertEqual([row["index_size"] for row in record["rows"]], [3000, 700])
        for row in record["rows"]:
            self.assertEqual(
                set(row["variants"]), {"host_numpy", "host_tf", "device_tf", "device_jax"}
            )
            for variant in ("host_tf", "device_tf"):  # TensorFlow's scores: the same ids.
                self.assertEqual(row["variants"][variant]["rows_differing"], 0)
            self.assertGreater(row["variants"]["device_jax"]["seconds"], 0)
        self.assertRegex(result.stdout, r"\| 3,000 \| 300 \| [0-9.]+ \| [0-9.]+ \|")
        self.assertIn("device_tf is ", result.stdout)

    def test_the_gpu_script_phase_writes_its_record(self):
        out = tempfile.mkdtemp()
        result = subprocess.run(
            ["bash", "benchmarks/gpu.sh"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={
                **os.environ,
                "PYTHON": sys.executable,
                "OUT": out,
                "PHASES": "top_k",
                "TOP_K_FLAGS": "--index_sizes=2000 --queries=100 --k=20",
            },
        )
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
        with open(os.path.join(out, "device_top_k.json")) as f:
            record = json.load(f)
        (row,) = record["rows"]
        self.assertEqual((row["index_size"], row["queries"]), (2000, 100))
        self.assertEqual(set(row["variants"]), {"host_numpy", "device_jax"})
        # XLA's and numpy's float32 dot products may round apart: a near tie can swap.
        self.assertLessEqual(row["variants"]["device_jax"]["rows_differing"], 2)

    def test_bad_flags_are_reported(self):
        for flags_given, text in (
            (["--variants=device_gpu"], "--variants must name some of"),
            (["--index_sizes=100,200", "--queries=1,2,3"], "one query count per index size"),
            (["--index_sizes=abc"], "must be integers"),
        ):
            result = run_benchmark("device_top_k", *flags_given, timeout=300)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn(text, result.stderr + result.stdout, flags_given)


class DenseScoringTest(tf.test.TestCase):
    def test_command_line_times_both_paths(self):
        result = run_benchmark(
            "dense_scoring",
            "--catalogs=500",
            "--negatives=1,64,600",
            "--examples=128",
            "--rounds=1",
            "--steps_per_round=1",
            timeout=300,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        # k = 600 is not below the catalog's 500 items: skipped.
        self.assertRegex(
            result.stdout,
            r"\| 500 \| 1 \| 500 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x "
            r"\| gather \| (gather|whole table) \|",
        )
        self.assertRegex(
            result.stdout,
            r"\| 500 \| 64 \| 8 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+x "
            r"\| whole table \| (gather|whole table) \|",
        )
        self.assertNotIn("| 600 |", result.stdout)
        self.assertRegex(result.stdout, r"picks the slower path in [0-2] of 2 settings")

    def test_bad_negatives_name_the_flag(self):
        result = run_benchmark("dense_scoring", "--negatives=0", timeout=300)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--negatives must be positive integers; received [0]", result.stderr)


@pytest.mark.slow
class InputPipelineTest(tf.test.TestCase):
    def test_command_line_prints_the_ratios(self):
        output = os.path.join(tempfile.mkdtemp(), "input.json")
        result = run_benchmark(
            "input_pipeline", "--users=2000", "--seconds=0.5", f"--output={output}", timeout=900
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        for builder in ("sasrec", "two_tower"):
            self.assertRegex(
                result.stdout,
                rf"\| {builder} \| [0-9,]+ \| [0-9,]+ \([0-9.]+x\) \| [0-9,]+ \| [0-9.]+ \| "
                r"[0-9.]+x \|",
            )
        self.assertRegex(result.stdout, r"\| day_store \| [0-9,]+ \| - \|")
        with open(output) as f:
            record = json.load(f)
        self.assertEqual(
            sorted(record["rows"]), ["day_store", "day_store_numpy", "sasrec", "two_tower"]
        )
        self.assertEqual(record["cores"], 1)


@pytest.mark.slow
class MainJobTest(tf.test.TestCase):
    """The README's main job (`make demo`) end to end, under 10 minutes on 2 cores."""

    def test_synthetic_preset(self):
        out = tempfile.mkdtemp()
        result = subprocess.run(
            [sys.executable, "-m", "pipelines.train", "--preset=synthetic", f"--output_dir={out}"],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertIn("| oracle (baseline) | ndcg |", result.stdout)
        self.assertTrue(os.path.exists(os.path.join(out, "metrics.json")))


@pytest.mark.slow
class AnnTest(tf.test.TestCase):
    def test_command_line_prints_the_comparison(self):
        result = run_benchmark(
            "ann",
            "--catalogs=20000",
            "--users=200",
            "--train_steps=5",
            "--queries=200",
            timeout=900,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertRegex(
            result.stdout,
            r"\| 20,000 \| trained \| default \| 141 \(28\) / 600 \| "
            r"[0-9.]+ / [0-9.]+ \| [0-9,]+ / [0-9,]+ \| [0-9.]+x \| [0-9.]+ \|",
        )


class AnnClusteredTest(tf.test.TestCase):
    def test_clustered_embeddings(self):
        queries, items = ann.clustered_embeddings(1000, 10, 8, clusters=20, spread=1.0, seed=0)
        self.assertEqual((queries.shape, items.shape), ((10, 8), (1001, 8)))
        self.assertEqual((queries.dtype, items.dtype), (np.float32, np.float32))
        self.assertAllEqual(items[0], np.zeros(8))
        # Norms from 1 (the least popular item) to 1 + 0.05 ln(1000) (the most popular).
        norms = np.linalg.norm(items[1:], axis=1)
        self.assertAllClose([norms.min(), norms.max()], [1.0, 1.0 + 0.05 * np.log(1000)], atol=1e-3)
        again, _ = ann.clustered_embeddings(1000, 10, 8, clusters=20, spread=1.0, seed=0)
        self.assertAllEqual(queries, again)

    def test_command_line_times_each_search_setting(self):
        result = run_benchmark(
            "ann",
            "--embeddings=clustered",
            "--catalogs=3000",
            "--queries=50",
            "--dim=8",
            "--search=default,4:100",
            timeout=300,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        for setting in (r"default \| 54 \(16\) / 600", r"4:100 \| 54 \(4\) / 100"):
            self.assertRegex(
                result.stdout,
                r"\| 3,000 \| clustered \| "
                + setting
                + r" \| [0-9.]+ / [0-9.]+ \| [0-9,]+ / [0-9,]+ \| [0-9.]+x \| "
                r"[0-9.]+ \|",
            )
        result = run_benchmark("ann", "--search=4", timeout=300)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn(
            "--search entries must be 'default' or LEAVES:REORDER; received '4'", result.stderr
        )


@pytest.mark.slow
class ScalingTest(tf.test.TestCase):
    def test_command_line_prints_the_table(self):
        result = run_benchmark(
            "scaling",
            "--num_items=5000",
            "--batch_size=256",
            "--rounds=1",
            "--steps_per_round=2",
            timeout=900,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertRegex(
            result.stdout,
            r"\| 1 replica \(default strategy\) \| [0-9.]+ \| "
            r"[0-9.]+ \| [0-9,]+ \| 1.00x \| – \| – \|",
        )
        for setup in (
            r"2 replicas, 1 process \(MirroredStrategy\)",
            r"2 local workers \(MultiWorkerMirroredStrategy\)",
        ):
            self.assertRegex(
                result.stdout,
                setup + r" \| [0-9.]+ \| [0-9.]+ \| [0-9,]+ \| "
                r"[0-9.]+x \| [0-9.]+ ms \([0-9.]+%\) \| "
                r"[+-][0-9.]+ ms \([+-][0-9.]+%\) \|",
            )


@pytest.mark.slow
class ServingTest(tf.test.TestCase):
    def test_command_line_prints_the_table(self):
        result = run_benchmark(
            "serving",
            "--catalogs=500",
            "--histories=10,40",
            "--batch_size=4",
            "--max_length=8",
            "--dim=8",
            "--repeats=2",
            timeout=900,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        for history in (10, 40):
            self.assertRegex(
                result.stdout,
                rf"\| 500 \| {history} \| [0-9,]+ \| [0-9,]+ \| "
                r"[0-9]+ \|",
            )


class TableOptimizerBenchmarkTest(tf.test.TestCase):
    def test_prints_both_optimizers_per_catalog(self):
        result = run_benchmark(
            "table_optimizer",
            "--catalogs=1000,4000",
            "--batch_size=64",
            "--dim=8",
            "--rounds=1",
            "--steps_per_round=2",
            timeout=600,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        rows = re.findall(
            r"\| ([\d,]+) \| ([\d.]+) \(([\d.]+)x\) \| ([\d.]+) \(([\d.]+)x\) \|", result.stdout
        )
        self.assertEqual([row[0] for row in rows], ["1,000", "4,000"], result.stdout)
        self.assertEqual((rows[0][2], rows[0][4]), ("1.00", "1.00"))
        self.assertTrue(all(float(row[1]) > 0 and float(row[3]) > 0 for row in rows))


class CatalogScalingTest(tf.test.TestCase):
    def test_prints_every_cell_against_tfrs_and_the_smallest_catalog(self):
        result = run_benchmark(
            "catalog_scaling",
            "--catalogs=500,2000",
            "--batch_sizes=32",
            "--corrections=none,improved",
            "--dim=8",
            "--rounds=1",
            "--steps_per_round=1",
            "--memory=false",
            timeout=600,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        self.assertIn("| 500 | tfrs Retrieval |", result.stdout)
        self.assertRegex(
            result.stdout, r"\| 500 \| ours none \| [0-9.]+ \| [0-9.]+x \| 1.000x \|  \| 0 \|"
        )
        for variant in ("tfrs Retrieval", "ours none", "ours improved"):
            self.assertRegex(
                result.stdout,
                r"\| 2,000 \| " + variant + r" \| [0-9.]+ \| [0-9.]+x \| [0-9.]+x \|  \| 0 \|",
            )
        self.assertRegex(
            result.stdout,
            r"Ours / TFRS: worst [0-9.]+x \(ours (none|improved), "
            r"[0-9,]+ items, batch 32\); above 1.05x in [0-4] of 4",
        )
        self.assertRegex(
            result.stdout,
            r"2,000 items / 500 items, same variant and batch: "
            r"worst [0-9.]+x",
        )

    @pytest.mark.slow
    def test_memory_runs_one_process_per_variant(self):
        result = run_benchmark(
            "catalog_scaling",
            "--catalogs=1000",
            "--batch_sizes=32",
            "--corrections=standard",
            "--dim=8",
            "--rounds=1",
            "--steps_per_round=1",
            "--memory_steps=1",
            timeout=600,
        )
        self.assertEqual(result.returncode, 0, result.stderr[-3000:])
        for variant in ("tfrs Retrieval", "ours standard"):
            self.assertRegex(
                result.stdout,
                r"\| 1,000 \| " + variant + r" \| [0-9.]+ \| "
                r"[0-9.]+x \| 1.000x \| [0-9]+ \([0-9]+\) \| 0 \|",
            )


if __name__ == "__main__":
    tf.test.main()


class ScaleTest(tf.test.TestCase):
    def test_records_and_table_of_a_run(self):
        from benchmarks import scale  # pylint: disable=import-outside-toplevel

        run = tempfile.mkdtemp()
        metrics = {
            "num_items": 1000,
            "num_users": 50,
            "phase_seconds": {"train": 10.0, "evaluate": 2.0},
            "phase_peak_rss_mb": {"train": 2000, "evaluate": 2400},
            "predicted_peak_rss_mb": {"tables": 10, "train": 1900, "evaluate": 2100},
            "calibration": {"model_log_p": [0.1] * 5},
            "baselines": {"popularity": {"recall@10": 0.1, "by_popularity": {}}},
            "config": {"data": {"synthetic_items": 5000}, "training": {"index_size": 100}},
        }
        with open(os.path.join(run, "metrics.json"), "w") as f:
            import json  # pylint: disable=import-outside-toplevel

            json.dump(metrics, f)
        kept = scale.record(run)
        self.assertNotIn("calibration", kept)
        self.assertEqual(kept["baselines"]["popularity"], {"recall@10": 0.1})
        self.assertEqual(kept["config"]["data"]["synthetic_items"], 5000)
        lines = scale.table([kept]).splitlines()
        self.assertIn("| evaluate | 2 | 2,400 | 2,100 | 1.20 |", lines[-1])


class DataThreadsTest(tf.test.TestCase):
    def test_one_thread_and_every_core_build_the_same_store_and_log(self):
        out = os.path.join(tempfile.mkdtemp(), "data_threads.json")
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.data_threads",
                "--preset=industrial_smoke",
                "--draw_items=20000",
                "--threads=2",
                f"--output={out}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={**os.environ, "TFRS_LOGQ_CACHE": tempfile.mkdtemp()},
        )
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
        with open(out) as f:
            record = json.load(f)
        self.assertEqual(sorted(record["phases"]), ["draw", "store"])
        for phase in record["phases"].values():
            self.assertTrue(phase["same_bytes"])
            self.assertEqual(sorted(phase["seconds"]), ["1", "2"])


class GpuJobPhasesTest(tf.test.TestCase):
    """gpu.sh's phases jobs and catalog, proved on this CPU at small sizes."""

    def _phase(self, phase, **env):
        out = tempfile.mkdtemp()
        result = subprocess.run(
            ["bash", "benchmarks/gpu.sh"],
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
            env={**os.environ, "PYTHON": sys.executable, "OUT": out, "PHASES": phase, **env},
        )
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
        return out

    def test_the_jobs_phase_trains_exports_and_compares_on_keras(self):
        out = self._phase(
            "jobs",
            JOBS_TRAIN_FLAGS="--preset=industrial_smoke",
            JOBS_COMPARE_FLAGS="--corrections=standard,improved --seeds=1 -- "
            "--preset=industrial_smoke",
            TFRS_LOGQ_CACHE=tempfile.mkdtemp(),
        )
        with open(os.path.join(out, "jobs.json")) as f:
            record = json.load(f)
        self.assertTrue(record["complete"])
        self.assertEqual(sorted(record["jobs"]), ["compare", "export", "train"])
        train = record["jobs"]["train"]
        self.assertEqual(train["steps"], 14179 // 128)
        self.assertEqual(sorted(train["phase_seconds"]), ["data", "evaluate", "train"])
        self.assertGreater(train["end_to_end_over_train"], 1)
        self.assertIn("--framework=keras", record["jobs"]["compare"]["command"])
        self.assertEqual(
            sorted(record["jobs"]["compare"]["report"]["rows"]), ["improved", "standard"]
        )

    def test_the_catalog_phase_times_the_sparse_step_at_two_catalogs(self):
        out = self._phase(
            "catalog",
            CATALOG_FLAGS="--catalogs=1000,20000 --batch_sizes=64 --num_users=500 --rounds=1 "
            "--steps_per_round=4",
        )
        with open(os.path.join(out, "catalog.json")) as f:
            record = json.load(f)
        self.assertEqual(record["settings"]["num_users"], 500)
        self.assertEqual(sorted(record["two_tower_ms"]), ["1000", "20000"])
        self.assertIn("sparse_adagrad_largest_over_smallest_catalog", record["goals"])


@pytest.mark.slow
class KerasGpuTest(tf.test.TestCase):
    """`bash benchmarks/gpu.sh --smoke`: the GPU machine's command, proved on this CPU (Keras 3
    installed here, so no wheel is installed)."""

    def test_the_gpu_command_writes_its_record_at_smoke_size(self):
        out = tempfile.mkdtemp()
        result = subprocess.run(
            ["bash", "benchmarks/gpu.sh", "--smoke", "--variants=keras_rs,improved,sparse_adam"],
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
            env={**os.environ, "PYTHON": sys.executable, "OUT": out},
        )
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
        with open(os.path.join(out, "keras_gpu.json")) as f:
            record = json.load(f)
        self.assertEqual(record["device"]["backend"], "jax")
        self.assertTrue(record["complete"])
        self.assertEqual(sorted(record["two_tower_ms"]), ["1000", "5000"])
        self.assertEqual(
            sorted(record["two_tower_ms"]["5000"]["128"]), ["improved", "keras_rs", "sparse_adam"]
        )
        self.assertEqual(sorted(record["sasrec_ms"]), ["float32", "mixed_bfloat16"])
        self.assertIn("sparse_adam_largest_over_smallest_catalog", record["goals"])
        self.assertIn("improved_over_keras_rs_5000_items_batch_128", record["goals"])
        self.assertTrue(os.path.exists(os.path.join(out, "keras_gpu.log")))

    def test_the_next_day_phase_builds_trains_and_tests(self):
        out, cache = tempfile.mkdtemp(), tempfile.mkdtemp()
        result = subprocess.run(
            ["bash", "benchmarks/gpu.sh"],
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
            env={
                **os.environ,
                "PYTHON": sys.executable,
                "OUT": out,
                "PHASES": "next_day",
                "NEXT_DAY_FLAGS": "--preset=industrial_smoke",
                "TFRS_LOGQ_CACHE": cache,
            },
        )
        self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])
        with open(os.path.join(out, "keras_next_day.json")) as f:
            record = json.load(f)
        self.assertEqual(record["build_store"], "--preset=industrial_smoke")
        self.assertEqual(record["settings"]["batch_size"], 128)  # The preset's, not the flag's.
        self.assertEqual(record["steps"], 14179 // 128)
        self.assertEqual(sorted(os.listdir(out)), ["keras_next_day.json", "keras_next_day.log"])
        self.assertTrue(record["store"].startswith(cache))
