"""Which runs have finished: on disk, or recorded in a report's JSON."""

import json
import os
import re
import tempfile

import numpy as np
import tensorflow as tf

from paper import plan
from paper import records
from paper import report
from paper.tests.fake_runs import fake_run


class RecordsTest(tf.test.TestCase):
    def test_a_sweep_over_some_rows_keeps_the_others_in_the_report(self):
        out = tempfile.mkdtemp()
        earlier = plan.plan("ml-1m", "loo", "cpu", 2, ["bce", "in_batch-none"], ["static"], out)
        for run in earlier:
            fake_run(run, 0.1)
        now = plan.plan(
            "ml-1m", "loo", "cpu", 1, ["in_batch-none", "full_softmax"], ["static"], out
        )
        reported = records.with_finished_runs(now, "ml-1m", "loo", "cpu", ["static"], out)
        self.assertEqual(
            [(r.row.name, r.seed) for r in reported],
            [
                ("bce", 0),
                ("bce", 1),
                ("in_batch-none", 0),
                ("in_batch-none", 1),
                ("full_softmax", 0),
            ],
        )

    def test_recorded_runs_stand_in_for_missing_directories(self):
        out, results = tempfile.mkdtemp(), tempfile.mkdtemp()
        rows = ["in_batch-none", "in_batch-standard"]
        earlier = plan.plan("ml-1m", "loo", "cpu", 2, rows, ["static"], out)
        for run, ndcg in zip(earlier, (0.10, 0.20, 0.12, 0.22)):
            fake_run(run, ndcg)
        report.write_report(earlier, "ml-1m", "loo", "cpu", results, "CMD")
        path = os.path.join(results, "ml1m_loo_cpu.json")
        # A fresh clone: the report is there, the run directories are not.
        for run in earlier:
            for name in os.listdir(run.directory):
                os.remove(os.path.join(run.directory, name))
        recorded = records.load_recorded(path)
        self.assertLen(recorded, 4)
        self.assertEqual(
            recorded[("in_batch-none", "static", 1)]["directory"], earlier[2].directory
        )
        self.assertEqual(records.load_recorded(os.path.join(results, "missing.json")), {})
        now = plan.plan("ml-1m", "loo", "cpu", 3, rows, ["static"], out)
        self.assertEqual(
            [records.finished(r, recorded) for r in now], [True, True, True, True, False, False]
        )
        self.assertFalse(records.finished(now[0]))
        fake_run(now[4], 0.14)  # Seed 2, run now.
        fake_run(now[0], 0.30)  # A run on disk wins over its record (seed 0 was 0.10).
        text = report.write_report(now, "ml-1m", "loo", "cpu", results, "CMD", recorded=recorded)
        # in-batch none: seeds 0 (disk, 0.30), 1 (record, 0.12), 2 (disk, 0.14).
        self.assertIn(
            f"| in-batch, no logQ | 3 | 0.1867 ± {np.std([0.30, 0.12, 0.14], ddof=1):.4f} "
            "| 0.1868 |",
            text,
        )
        self.assertIn("| in-batch, standard logQ | 2 | 0.2100 ± 0.0141 |", text)
        self.assertIn(
            "(`--include_recorded`; their run directories were not on disk): "
            "in-batch, no logQ seed 1; in-batch, standard logQ seeds 0, 1.",
            text,
        )
        with open(path) as f:
            saved = json.load(f)
        self.assertLen(saved["runs"], 5)
        self.assertEqual(
            saved["runs"][0]["baselines"],
            {"popularity": {"ndcg@20": 0.05}, "oracle": {"recall@10": 0.5}},
        )

    def test_records_without_baselines_take_them_from_the_summary(self):
        path = os.path.join(tempfile.mkdtemp(), "report.json")
        with open(path, "w") as f:
            json.dump(
                {
                    "summary": {"gbce": {"popularity_ndcg@20": [0.0278, 0.0, 2]}},
                    "runs": [
                        {
                            "row": "gbce",
                            "frequency": "static",
                            "seed": 0,
                            "test": {"ndcg@20": 0.1},
                            "epochs_run": 3,
                            "train_seconds": 1.0,
                        }
                    ],
                },
                f,
            )
        recorded = records.load_recorded(path)
        self.assertEqual(
            recorded[("gbce", "static", 0)]["baselines"], {"popularity": {"ndcg@20": 0.0278}}
        )

    def test_a_record_without_its_row_names_the_file(self):
        path = os.path.join(tempfile.mkdtemp(), "report.json")
        with open(path, "w") as f:
            json.dump(
                {
                    "runs": [
                        {"row": "gbce", "frequency": "static", "seed": 0},
                        {"frequency": "static", "test": {"ndcg@20": 0.1}},
                    ]
                },
                f,
            )
        with self.assertRaisesRegex(
            ValueError,
            re.escape(
                f'{path}: run 1 of its "runs" lacks row, seed; it was not written by this runner.'
            ),
        ):
            records.load_recorded(path)


if __name__ == "__main__":
    tf.test.main()
