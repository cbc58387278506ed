"""`python -m paper.reproduce` end to end: it trains, skips finished runs, and takes recorded
ones from the report."""

import os
import subprocess
import sys
import tempfile

import pytest
import tensorflow as tf


@pytest.mark.slow
class ReproduceTest(tf.test.TestCase):
    def test_runs_then_skips_finished_runs(self):
        out, results = tempfile.mkdtemp(), tempfile.mkdtemp()
        args = [
            sys.executable,
            "-m",
            "paper.reproduce",
            "--dataset=synthetic",
            "--preset=smoke",
            "--seeds=1",
            "--rows=in_batch-none,in_batch-standard,in_batch-improved",
            f"--output_dir={out}",
            f"--results_dir={results}",
        ]
        # Two at a time, one CPU each where there are two (one at a time on one CPU).
        parallel = min(2, len(os.sched_getaffinity(0)))
        first = subprocess.run(
            args + [f"--parallel={parallel}"],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        self.assertEqual(first.returncode, 0, first.stderr[-2000:])
        self.assertIn("3 runs planned, 0 already finished.", first.stdout)
        self.assertRegex(
            first.stdout,
            r"\| in-batch, improved logQ \| exact counts \| 1 \| "
            r"[0-9.]+ \| [0-9.]+ \|",
        )
        self.assertIn("the paper's ordering", first.stdout)
        again = subprocess.run(args, capture_output=True, text=True, timeout=900, check=False)
        self.assertIn("3 runs planned, 3 already finished.", again.stdout)
        self.assertNotIn("[1/", again.stdout)
        # Without the run directories, --include_recorded takes the runs from the report.
        for root, _, files in os.walk(out):
            if "metrics.json" in files:
                os.remove(os.path.join(root, "metrics.json"))
        fresh = subprocess.run(
            args + ["--include_recorded"], capture_output=True, text=True, timeout=900, check=False
        )
        self.assertEqual(fresh.returncode, 0, fresh.stderr[-2000:])
        self.assertIn("3 runs planned, 3 already finished (3 of them recorded in ", fresh.stdout)
        self.assertNotIn("[1/", fresh.stdout)
        self.assertIn("in-batch, improved logQ seed 0.", fresh.stdout)


if __name__ == "__main__":
    tf.test.main()
