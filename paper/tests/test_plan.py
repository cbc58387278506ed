"""The campaign's plan: its rows, runs and commands, and the config reads it makes."""

import os
import tempfile

import tensorflow as tf

from paper import plan
from pipelines import configs


class PlanTest(tf.test.TestCase):
    def test_rows_of_each_split(self):
        out = tempfile.mkdtemp()
        loo = plan.plan("ml-1m", "loo", "cpu", 2, [], ["static"], out)
        self.assertLen(loo, 2 * 10)
        # Seed by seed: an interrupted sweep has every row at the same number of seeds.
        self.assertEqual([r.seed for r in loo], [0] * 10 + [1] * 10)
        self.assertEqual(
            loo[0].overrides,
            {
                "split": "loo",
                "dataset": "ml-1m",
                "index": "exact",
                "loss": "bce",
                "num_negatives": 1,
                "seed": 0,
            },
        )
        self.assertEqual(loo[0].directory, os.path.join(out, "ml1m_loo_cpu", "bce", "seed0"))
        temporal = plan.plan("ml-1m", "temporal", "paper", 1, [], ["static"], out)
        self.assertEqual(
            [r.row.name for r in temporal],
            [
                "gbce",
                "in_batch-none",
                "in_batch-standard",
                "in_batch-improved",
                "mixed-none",
                "mixed-standard",
                "mixed-improved",
                "full_softmax",
            ],
        )
        self.assertEqual(temporal[0].overrides["dataset"], "ml-1m-ratings")  # Timestamps.
        self.assertEqual(temporal[0].preset, "paper")
        self.assertNotIn("temporal_targets", temporal[0].overrides)
        successive = plan.plan(
            "ml-1m", "temporal", "cpu", 1, ["gbce"], ["static"], out, temporal_targets="successive"
        )[0]
        self.assertEqual(successive.overrides["temporal_targets"], "successive")
        self.assertEqual(
            successive.directory, os.path.join(out, "ml1m_temporal_successive_cpu", "gbce", "seed0")
        )

    def test_official_profiles_run_the_released_scripts(self):
        # The paper's "standard" rows correct the negatives only (logq_old), its "in-batch,
        # improved" script draws mixed negatives (logq_new); the official-only rows compare
        # like with like.
        out = tempfile.mkdtemp()
        runs = {
            r.row.name: r
            for r in plan.plan(
                "ml-1m",
                "loo",
                "official_cpu",
                1,
                [
                    "in_batch-standard",
                    "in_batch-improved",
                    "mixed-standard",
                    "mixed-improved",
                    "in_batch-improved_pool",
                    "in_batch-standard_tfrs",
                    "mixed-standard_tfrs",
                ],
                ["static"],
                out,
            )
        }
        want = {
            "in_batch-standard": ("in_batch", "standard_negatives"),
            "in_batch-improved": ("mixed", "improved"),
            "mixed-standard": ("mixed", "standard_negatives"),
            "mixed-improved": ("mixed", "improved"),
            "in_batch-improved_pool": ("in_batch", "improved"),
            "in_batch-standard_tfrs": ("in_batch", "standard"),
            "mixed-standard_tfrs": ("mixed", "standard"),
        }
        for name, (negatives, correction) in want.items():
            self.assertEqual(
                (runs[name].overrides["negatives"], runs[name].overrides["correction"]),
                (negatives, correction),
                name,
            )
            self.assertEqual(runs[name].preset, "official_cpu")
        self.assertIn("train_in_batch_logq_new.py", runs["in_batch-improved"].row.label)
        self.assertIn("mixed negatives", runs["in_batch-improved"].row.label)
        self.assertEqual(
            runs["in_batch-improved"].directory,
            os.path.join(out, "ml1m_loo_official_cpu", "in_batch-improved", "seed0"),
        )
        default = plan.plan("ml-1m", "loo", "official", 1, [], ["static"], out)
        self.assertLen(default, 10)  # The paper's rows; the like-for-like ones on request.
        with self.assertRaisesRegex(
            ValueError,
            r"Rows in_batch-improved_pool exist under the "
            r"official profiles \(official, official_cpu\) only; "
            r"received --profile=cpu",
        ):
            plan.plan("ml-1m", "loo", "cpu", 1, ["in_batch-improved_pool"], ["static"], out)

    def test_estimators_multiply_only_the_rows_that_use_log_q(self):
        runs = plan.plan("synthetic", "loo", "cpu", 1, [], ["static", "hashed"], tempfile.mkdtemp())
        self.assertEqual(
            [(r.row.name, r.frequency) for r in runs],
            [
                ("in_batch-none", "static"),
                ("in_batch-standard", "static"),
                ("in_batch-standard", "hashed"),
                ("in_batch-improved", "static"),
                ("in_batch-improved", "hashed"),
                ("mixed-none", "static"),
                ("mixed-standard", "static"),
                ("mixed-standard", "hashed"),
                ("mixed-improved", "static"),
                ("mixed-improved", "hashed"),
            ],
        )
        self.assertEqual(runs[2].overrides["frequency"], "hashed")
        self.assertTrue(
            runs[2].directory.endswith(os.path.join("in_batch-standard-hashed", "seed0"))
        )
        self.assertEqual(runs[0].preset, "synthetic_two_tower")
        self.assertNotIn("dataset", runs[0].overrides)
        self.assertIn(
            os.path.join("synthetic_loo_synthetic_two_tower", "in_batch-none"), runs[0].directory
        )

    def test_command_runs_pipelines_train(self):
        run = plan.plan("ml-1m", "loo", "cpu", 1, ["mixed-improved"], ["static"], "out")[0]
        self.assertEqual(
            plan.command(run)[1:],
            [
                "-m",
                "pipelines.train",
                "--preset=cpu",
                f"--output_dir={os.path.join('out', 'ml1m_loo_cpu', 'mixed-improved', 'seed0')}",
                "--correction=improved",
                "--dataset=ml-1m",
                "--frequency=static",
                "--index=exact",
                "--loss=sampled_softmax",
                "--negatives=mixed",
                "--seed=0",
                "--split=loo",
            ],
        )

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, r"--rows must be among .*received nope"):
            plan.plan("ml-1m", "loo", "cpu", 1, ["nope"], ["static"], "out")
        with self.assertRaisesRegex(ValueError, r"--frequencies must be among .*received 'x'"):
            plan.plan("ml-1m", "loo", "cpu", 1, [], ["x"], "out")
        with self.assertRaisesRegex(ValueError, r"--profile must be one of cpu, paper"):
            plan.plan("ml-1m", "loo", "gpu", 1, [], ["static"], "out")
        with self.assertRaisesRegex(ValueError, r"--preset=cpu is not a synthetic-data preset"):
            plan.plan("synthetic", "loo", "cpu", 1, [], ["static"], "out", preset="cpu")

    def test_config_value_reads_flat_and_grouped_configs(self):
        flat = {
            "dataset": "ml-1m",
            "model": "sasrec",
            "loss": "gbce",
            "patience": 200,
            "per_row_negatives": True,
            "in_batch_log_q": "unigram",
        }
        grouped = {
            "data": {"dataset": "ml-1m"},
            "model": {"model": "sasrec"},
            "loss": {"loss": "gbce", "per_row": True, "log_q": "unigram"},
            "training": {"patience": 200},
        }
        for config in (flat, grouped):
            for name, value in (
                ("dataset", "ml-1m"),
                ("model", "sasrec"),
                ("loss", "gbce"),
                ("patience", 200),
                ("per_row_negatives", True),
                ("per_row", True),
                ("in_batch_log_q", "unigram"),
                ("log_q", "unigram"),
            ):
                self.assertEqual(plan.config_value(config, name), value, (config, name))
        self.assertEqual(
            plan.config_value(configs.PRESETS["synthetic_two_tower"].as_dict(), "model"),
            "two_tower",
        )
        with self.assertRaisesRegex(
            KeyError,
            "config has no field 'global_batch'; its fields: dataset, in_batch_log_q, loss, model",
        ):
            plan.config_value(flat, "global_batch")


if __name__ == "__main__":
    tf.test.main()
