"""Curves from the runs' TensorBoard logs, their plateaus, and pairs compared over them."""

import glob
import os
import shutil
import tempfile

import tensorflow as tf

from paper import comparisons
from paper import curves
from paper import plan
from paper import report
from paper.tests.fake_runs import fake_run


def _finished_pair():
    """Seeds 0 and 1 of mixed standard and improved at `official_cpu`, finished (no logs yet)."""
    runs = plan.plan(
        "ml-1m",
        "loo",
        "official_cpu",
        2,
        ["mixed-standard", "mixed-improved"],
        ["static"],
        tempfile.mkdtemp(),
    )
    for run in runs:
        fake_run(run, 0.17)
    return runs


class CurvesTest(tf.test.TestCase):
    def test_plateaus_of_a_pair_are_compared_over_their_common_epochs(self):
        # The base run stops at epoch 149; the other runs on to 299, higher late: only
        # epochs 100-149 of both count.
        base = {epoch: 0.150 for epoch in range(150)}
        row = {epoch: 0.151 if epoch < 150 else 0.170 for epoch in range(300)}
        self.assertAlmostEqual(curves.window_difference(base, row), 0.001)
        self.assertAlmostEqual(curves.window_difference(row, base), -0.001)
        self.assertIsNone(curves.window_difference(base, {e: 0.2 for e in range(105)}))
        self.assertEqual(curves.curve_dict(curves.curve_list({0: 0.1, 2: 0.3})), {0: 0.1, 2: 0.3})

    def test_validation_plateau_from_the_logs_paired_by_seed(self):
        runs = _finished_pair()
        # Curves flat at `level` from epoch 100 on, +-0.004 alternating; logged in two
        # restarts (two event files), as a resumed run leaves them.
        levels = {
            ("mixed-standard", 0): 0.150,
            ("mixed-standard", 1): 0.155,
            ("mixed-improved", 0): 0.152,
            ("mixed-improved", 1): 0.160,
        }
        for run in runs:
            level = levels[(run.row.name, run.seed)]
            for start, stop in ((0, 90), (90, 140)):
                writer = tf.summary.create_file_writer(
                    os.path.join(run.directory, "logs", "validation"), filename_suffix=f".{start}"
                )
                with writer.as_default():
                    for epoch in range(start, stop):
                        value = (0.05 if epoch < 100 else level) + 0.004 * (-1) ** epoch
                        tf.summary.scalar("epoch_ndcg@10", value, step=epoch)
                writer.close()
        curve = curves.validation_curve(runs[0].directory)
        self.assertEqual(sorted(curve), list(range(140)))
        self.assertAllClose(curves.validation_plateau(curve), levels[("mixed-standard", 0)])
        self.assertIsNone(curves.validation_plateau({epoch: 0.1 for epoch in range(105)}))
        text = report.markdown(comparisons.aggregate(runs), "ml-1m", "loo", "official_cpu", "CMD")
        # d = +0.002 and +0.005: mean 0.0035, SE 0.0015, t = 2.33; with 1 df, p = 0.258.
        self.assertIn(
            "- improved vs the paper's standard (negatives only): d = +0.0035 "
            "validation NDCG@10 (mean over the pair's epochs 100 to the shorter run's "
            "last) over 2 paired seeds (0, 1): +0.0020, +0.0050; SE 0.0015, paired "
            "t = 2.33 with 1 df, two-sided p = 0.258; mixed, "
            "improved logQ [train_mns_log_new.py] is not different from equal at "
            "p < 0.05.",
            text,
        )

    def test_test_curve_from_the_train_logs_paired_by_seed(self):
        runs = _finished_pair()
        # Test NDCG@20 logged every 10 epochs (epochs 9, 19, ...) under train/; the improved
        # runs stop at epoch 249, the standard ones run to 399 and rise late: only the logged
        # epochs 109-249 count.
        levels = {
            ("mixed-standard", 0): 0.170,
            ("mixed-standard", 1): 0.175,
            ("mixed-improved", 0): 0.172,
            ("mixed-improved", 1): 0.176,
        }
        for run in runs:
            level = levels[(run.row.name, run.seed)]
            last = 250 if run.row.name == "mixed-improved" else 400
            writer = tf.summary.create_file_writer(os.path.join(run.directory, "logs", "train"))
            with writer.as_default():
                for epoch in range(9, last, 10):
                    tf.summary.scalar(
                        "epoch_test_ndcg@20", level if epoch < 250 else 0.2, step=epoch
                    )
                    tf.summary.scalar("epoch_loss", 1.0, step=epoch)
            writer.close()
        self.assertEqual(sorted(curves.test_curve(runs[0].directory)), list(range(9, 400, 10)))
        self.assertEqual(curves.validation_curve(runs[0].directory), {})  # No validation logs.
        # A kill in the middle of a write cuts the file's last record (epoch 399's loss):
        # the whole records before it still count.
        cut = os.path.join(runs[0].directory, "logs", "train", "events.out.tfevents.cut")
        events = glob.glob(os.path.join(runs[0].directory, "logs", "train", "events*"))
        shutil.copy(events[0], cut)
        with open(cut, "r+b") as f:
            f.truncate(os.path.getsize(cut) - 3)
        self.assertEqual(sorted(curves.test_curve(runs[0].directory)), list(range(9, 400, 10)))
        text = report.markdown(comparisons.aggregate(runs), "ml-1m", "loo", "official_cpu", "CMD")
        # d = +0.002 and +0.001: mean 0.0015, SE 0.0005, t = 3.00 with 1 df, p = 0.205.
        self.assertIn(
            "- improved vs the paper's standard (negatives only): d = +0.0015 test "
            "NDCG@20 (mean over the pair's logged epochs 100 to the shorter run's "
            "last) over 2 paired seeds (0, 1): +0.0020, +0.0010; SE 0.0005, paired "
            "t = 3.00 with 1 df, "
            "two-sided p = 0.205;",
            text,
        )


if __name__ == "__main__":
    tf.test.main()
