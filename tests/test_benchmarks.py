"""The benchmarks run end to end on small settings and report real numbers."""

import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf

from pipelines.benchmarks import gradient_bias


class GradientBiasTest(tf.test.TestCase):

    def test_improved_removes_the_tail_bias_of_standard(self):
        rows = gradient_bias.run_study(num_items=500, exponent=1.0, num_negatives=[16],
                                       trials=1500, tail_quantile=0.9, samplers=["in_batch"],
                                       seed=0)
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
        result = subprocess.run(
            [sys.executable, "-m", "pipelines.benchmarks.gradient_bias", f"--output_dir={out}",
             "--num_items=100", "--num_negatives=4", "--trials=50", "--samplers=uniform,mixed"],
            capture_output=True, text=True, timeout=600, check=False)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        self.assertIn("| mixed | 4 |", result.stdout)
        for name in ("gradient_bias.png", "gradient_bias.json", "gradient_bias.md"):
            self.assertTrue(os.path.getsize(os.path.join(out, name)) > 0, name)

    def test_bad_flag_is_reported(self):
        result = subprocess.run(
            [sys.executable, "-m", "pipelines.benchmarks.gradient_bias", "--samplers=random"],
            capture_output=True, text=True, timeout=600, check=False)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--samplers must name in_batch, uniform or mixed; received 'random'",
                      result.stderr)
        for value, message in (("4,x", "--num_negatives must be integers; received ['4', 'x']"),
                               ("1", "--num_negatives must be >= 2; received ['1']")):
            result = subprocess.run(
                [sys.executable, "-m", "pipelines.benchmarks.gradient_bias",
                 f"--num_negatives={value}"],
                capture_output=True, text=True, timeout=600, check=False)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn(message, result.stderr)


@pytest.mark.slow
class LossOverheadTest(tf.test.TestCase):

    def test_command_line_prints_the_ratios(self):
        result = subprocess.run(
            [sys.executable, "-m", "pipelines.benchmarks.loss_overhead", "--num_items=20000",
             "--batch_size=256", "--rounds=2", "--steps_per_round=3"],
            capture_output=True, text=True, timeout=900, check=False)
        self.assertEqual(result.returncode, 0, result.stderr[-2000:])
        for variant in ("tfrs Retrieval (logQ)", "LogQRetrieval standard",
                        "LogQRetrieval improved"):
            self.assertRegex(result.stdout,
                             r"\| " + re.escape(variant) + r" \| [0-9.]+ \| [0-9.]+x \| [0-9.]+x \|")
        self.assertRegex(result.stdout, r"LogQRetrieval improved / tfrs \(logQ\): +[0-9.]+x")


if __name__ == "__main__":
    tf.test.main()
