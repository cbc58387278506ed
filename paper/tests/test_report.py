"""The report's numbers: the tables, the paper's orderings and the paired comparisons."""

import json
import os
import tempfile

import numpy as np
import tensorflow as tf
from scipy import stats

from paper import comparisons
from paper import plan
from paper import records
from paper import report
from paper.tests.fake_runs import fake_run


class ReportTest(tf.test.TestCase):
    def test_table_differences_and_verdicts(self):
        out, results = tempfile.mkdtemp(), tempfile.mkdtemp()
        runs = plan.plan(
            "ml-1m",
            "loo",
            "cpu",
            3,
            ["in_batch-none", "in_batch-standard", "in_batch-improved", "full_softmax"],
            ["static"],
            out,
        )
        scores = {
            "in_batch-none": [0.10, 0.11, 0.12],
            "in_batch-standard": [0.20, 0.21, 0.22],
            "in_batch-improved": [0.19, 0.22, 0.25],
        }
        for run in runs:
            if run.row.name in scores:  # full_softmax is planned but not run.
                fake_run(run, scores[run.row.name][run.seed])
        self.assertTrue(records.finished(runs[0]))
        self.assertFalse(records.finished(runs[3]))
        text = report.write_report(runs, "ml-1m", "loo", "cpu", results, "CMD")
        # Mean ± sample std, the paper's value and the difference.
        self.assertIn(
            "| in-batch, no logQ | 3 | 0.1100 ± 0.0100 | 0.1868 | -0.0768 | "
            "0.3000 ± 0.0000 | 0.3838 | -0.0838 | 40 | – | 1000 | 101 |",
            text,
        )
        self.assertIn("| full softmax | 0/3 | not run | 0.1937 |", text)
        # none < standard: gap 0.1, SE = sqrt(2 * 0.01^2 / 3), t = 12.25; Welch df = 4.
        self.assertIn(
            "in-batch, no logQ < in-batch, standard logQ: ndcg@20 0.1100 (n=3) vs "
            "0.2100 (n=3), gap +0.1000; the paper's ordering holds, beyond the "
            "seed-to-seed spread (Welch t = 12.25 with 4 df, two-sided p = 2.6e-04).",
            text,
        )
        # Paired, the same d at every seed: no t (its SE is rounding's).
        self.assertIn(
            "- in-batch, standard logQ vs in-batch, no logQ: d = +0.1000 NDCG@20 over 3 "
            "paired seeds (0, 1, 2): +0.1000, +0.1000, +0.1000; the same d at every "
            "seed, SE 0.",
            text,
        )
        self.assertEqual(
            [comparisons._small(x, 4) for x in (0.0006, 1.8e-5, 0.0, -0.02)],
            ["0.0006", "1.8e-05", "0.0000", "-0.0200"],
        )
        self.assertEqual(f"{2 * stats.t.sf(12.25, 4):.1e}", "2.6e-04")  # scipy's p, as above.
        # standard <= improved: gap 0.01, SE = sqrt(0.01^2/3 + 0.03^2/3), t = 0.548; Welch
        # df = 2.44, rounded down to 2, where p = 1 - t / sqrt(2 + t^2) = 0.639.
        self.assertIn(
            "gap +0.0100; the paper's ordering holds, within the seed-to-seed spread "
            "(Welch t = 0.55 with 2 df, two-sided p = 0.639).",
            text,
        )
        with open(os.path.join(results, "ml1m_loo_cpu.json")) as f:
            saved = json.load(f)
        self.assertLen(saved["runs"], 9)
        self.assertAllClose(
            saved["summary"]["in_batch-improved"]["ndcg@20"][:2],
            [0.22, np.std([0.19, 0.22, 0.25], ddof=1)],
        )
        self.assertTrue(os.path.exists(os.path.join(results, "ml1m_loo_cpu.png")))

    def test_ordering_that_fails_is_reported_as_such(self):
        runs = plan.plan(
            "ml-1m",
            "loo",
            "cpu",
            1,
            ["mixed-standard", "mixed-improved"],
            ["static"],
            tempfile.mkdtemp(),
        )
        fake_run(runs[0], 0.2)
        fake_run(runs[1], 0.15)
        text = report.markdown(comparisons.aggregate(runs), "ml-1m", "loo", "cpu", "CMD")
        self.assertIn(
            "mixed, standard logQ > mixed, improved logQ: ndcg@20 0.2000 (n=1) vs "
            "0.1500 (n=1), gap -0.0500; the paper's ordering does not hold, spread "
            "unknown (one seed).",
            text,
        )

    def test_correction_ordering_for_mixed_negatives(self):
        # Table 1 has mixed, no logQ below mixed, standard (.1882 vs .1952), as for in-batch.
        runs = plan.plan(
            "ml-1m",
            "loo",
            "official_cpu",
            2,
            ["mixed-none", "mixed-standard"],
            ["static"],
            tempfile.mkdtemp(),
        )
        for run, score in zip(runs, (0.164, 0.175, 0.166, 0.177)):  # Seed-major.
            fake_run(run, score)
        text = report.markdown(comparisons.aggregate(runs), "ml-1m", "loo", "official_cpu", "CMD")
        # none .164 / .166, standard .175 / .177 (sd .001414 each): gap .011, SE .001414,
        # t = 7.78; Welch df = 2, p = 1 - t / sqrt(2 + t^2) = 0.016.
        self.assertIn(
            "- mixed, no logQ [train_mns.py] < mixed, standard logQ on negatives only "
            "[train_mns_log_old.py]: ndcg@20 0.1650 (n=2) vs 0.1760 (n=2), gap +0.0110; "
            "the paper's ordering holds, beyond the seed-to-seed spread (Welch t = 7.78 "
            "with 2 df, two-sided p = 0.016). The paper: 0.1882 vs 0.1952.",
            text,
        )

    def test_orderings_follow_the_papers_numbers_for_the_split(self):
        # Leave-one-out, the paper has improved above standard (.1972 vs .1952); temporal,
        # standard above improved (.1292 vs .1281), so the same two runs read differently.
        for split, expected in (
            (
                "loo",
                "mixed, standard logQ > mixed, improved logQ: ndcg@20 0.2000 (n=1) vs "
                "0.1500 (n=1), gap -0.0500; the paper's ordering does not hold, spread "
                "unknown (one seed). The paper: 0.1952 vs 0.1972.",
            ),
            (
                "temporal",
                "mixed, improved logQ <= mixed, standard logQ: ndcg@20 0.1500 "
                "(n=1) vs 0.2000 (n=1), gap +0.0500; the paper's ordering holds, "
                "spread unknown (one seed). The paper: 0.1281 vs 0.1292.",
            ),
        ):
            runs = plan.plan(
                "ml-1m",
                split,
                "cpu",
                1,
                ["mixed-standard", "mixed-improved"],
                ["static"],
                tempfile.mkdtemp(),
            )
            fake_run(runs[0], 0.2)
            fake_run(runs[1], 0.15)
            text = report.markdown(comparisons.aggregate(runs), "ml-1m", split, "cpu", "CMD")
            self.assertIn(expected, text)
            self.assertEqual(text.count("the paper's ordering"), 1)
        # The temporal in-batch pair is .1270 vs .1269 in the paper: level, no ordering.
        runs = plan.plan(
            "ml-1m",
            "temporal",
            "cpu",
            2,
            ["in_batch-standard", "in_batch-improved"],
            ["static"],
            tempfile.mkdtemp(),
        )
        for run, score in zip(runs, (0.20, 0.15, 0.22, 0.16)):
            fake_run(run, score)
        text = report.markdown(comparisons.aggregate(runs), "ml-1m", "temporal", "cpu", "CMD")
        # Seed-major plan: standard .20 / .22 (sd .0141), improved .15 / .16 (sd .0071). Gap
        # +0.055, SE = sqrt(.0141^2 / 2 + .0071^2 / 2) = .0112, t = 4.92; Welch df = 1.47 -> 1,
        # where p = 1 - 2 atan(t) / pi = 0.128.
        self.assertIn(
            "- in-batch, improved logQ vs in-batch, standard logQ: ndcg@20 0.1550 "
            "(n=2) vs 0.2100 (n=2), gap +0.0550; the paper has them level (one unit "
            "of its last digit apart), ours differ within the seed-to-seed spread "
            "(Welch t = 4.92 with 1 df, two-sided p = 0.128). The paper: 0.1269 vs "
            "0.1270.",
            text,
        )
        # No paper numbers (the synthetic catalog): Table 1's leave-one-out orderings.
        summary = comparisons.aggregate(runs)
        self.assertEqual(
            comparisons.ordering_verdicts(summary),
            [
                "- in-batch, standard logQ > in-batch, improved logQ: ndcg@20 0.2100 (n=2) "
                "vs 0.1550 "
                "(n=2), gap -0.0550; the paper's ordering does not hold, within the seed-to-seed "
                "spread (Welch t = -4.92 with 1 df, two-sided p = 0.128)."
            ],
        )

    def test_paired_differences_by_seed(self):
        runs = plan.plan(
            "ml-1m",
            "loo",
            "official_cpu",
            3,
            ["mixed-standard", "mixed-improved", "mixed-standard_tfrs", "full_softmax"],
            ["static"],
            tempfile.mkdtemp(),
        )
        scores = {
            "mixed-standard": [0.170, 0.180, 0.175],
            "mixed-improved": [0.172, 0.183, 0.176],  # d = +0.002, +0.003, +0.001.
            "mixed-standard_tfrs": [0.160],  # Seed 0 only.
            "full_softmax": [0.168, 0.179, 0.173],
        }  # Standard - full: 2, 1, 2 (x 1e-3).
        for run in runs:
            if run.seed < len(scores[run.row.name]):
                fake_run(run, scores[run.row.name][run.seed], best_epoch=100 + run.seed)
        text = report.markdown(comparisons.aggregate(runs), "ml-1m", "loo", "official_cpu", "CMD")
        # Mean d 0.002, SE = std(d) / sqrt(3) = 0.001 / 1.732 = 0.000577, t = 3.46 with 2 df:
        # beyond 2 SE, but p = 1 - t / sqrt(2 + t^2) = 0.074 (2 df), not below 0.05.
        self.assertIn(
            "- improved vs the paper's standard (negatives only): d = +0.0020 NDCG@20 "
            "over 3 paired seeds (0, 1, 2): +0.0020, +0.0030, +0.0010; SE 0.0006, "
            "paired t = 3.46 with 2 df, "
            "two-sided p = 0.074; mixed, improved logQ [train_mns_log_new.py] is not "
            "different from equal at p < 0.05.",
            text,
        )
        self.assertIn(
            "- TFRS's standard vs the paper's standard: d = -0.0100 NDCG@20 over 1 "
            "paired seed (0); one pair: SE unknown.",
            text,
        )
        # SE = 0.000577 / sqrt(3) = 0.000333, t = 5.00 with 2 df: p = 1 - 5 / sqrt(27) = 0.038.
        self.assertIn(
            "- the paper's standard vs full softmax: d = +0.0017 NDCG@20 over 3 paired "
            "seeds (0, 1, 2): +0.0020, +0.0010, +0.0020; SE 0.0003, paired t = 5.00 "
            "with 2 df, two-sided p = "
            "0.038; mixed, standard logQ on negatives only [train_mns_log_old.py] is "
            "higher at p < 0.05.",
            text,
        )
        self.assertIn("- improved vs full softmax: d = +0.0037 NDCG@20 over 3 paired seeds", text)
        # Epochs, mean best epoch, steps, train s.
        self.assertRegex(
            text,
            r"\| mixed, improved logQ \[train_mns_log_new.py\] \| 3 \| .* "
            r"\| 40 \| 101 \| 1000 \| 101 \|",
        )
        # Every run on its own line: seed, scores, best epoch / epochs, steps, train s.
        self.assertIn(
            "| mixed, improved logQ [train_mns_log_new.py] | 2 | 0.1760 | 0.3000 | – "
            "| 102 / 40 | 1000 | 102 |",
            text,
        )

    def test_recall_by_popularity_band(self):
        runs = plan.plan(
            "ml-1m",
            "loo",
            "official_cpu",
            3,
            ["in_batch-none", "in_batch-standard"],
            ["static"],
            tempfile.mkdtemp(),
        )
        bands = {
            "in_batch-none": [(0.26, 0.17, 0.09), (0.28, 0.16, 0.08), None],
            "in_batch-standard": [(0.31, 0.12, 0.03), (0.31, 0.13, 0.03), (0.31, 0.11, 0.03)],
        }
        for run in runs:
            fake_run(run, 0.17, bands=bands[run.row.name][run.seed])
        text = report.markdown(comparisons.aggregate(runs), "ml-1m", "loo", "official_cpu", "CMD")
        # Seed 2 of no correction recorded no bands: n = 2; std of .26, .28 is .01414.
        self.assertIn(
            "| in-batch, no logQ [train_in_batch.py] | 2 | 0.2700 ± 0.0141 | "
            "0.1650 ± 0.0071 | 0.0850 ± 0.0071 |",
            text,
        )
        self.assertIn(
            "| in-batch, standard logQ on negatives only [train_in_batch_logq_old.py] | "
            "3 | 0.3100 ± 0.0000 | 0.1200 ± 0.0100 | 0.0300 ± 0.0000 |",
            text,
        )
        self.assertIn("each third of the catalog by training count", text)

    def test_tier_two_pairs_within_the_in_batch_rows(self):
        runs = plan.plan(
            "ml-1m",
            "loo",
            "official_cpu",
            2,
            [
                "in_batch-none",
                "in_batch-standard",
                "in_batch-improved_pool",
                "in_batch-standard_tfrs",
            ],
            ["static"],
            tempfile.mkdtemp(),
        )
        scores = {
            "in_batch-none": [0.150, 0.152],
            "in_batch-standard": [0.170, 0.174],
            "in_batch-improved_pool": [0.171, 0.176],
            "in_batch-standard_tfrs": [0.173, 0.174],
        }
        for run in runs:
            fake_run(run, scores[run.row.name][run.seed])
        text = report.markdown(comparisons.aggregate(runs), "ml-1m", "loo", "official_cpu", "CMD")
        # d = +.020, +.022: SE = .001, t = 21 with 1 df, p = 1 - 2 atan(21) / pi = 0.030.
        self.assertIn(
            "- the paper's standard vs no correction, in-batch: d = +0.0210 NDCG@20 over "
            "2 paired seeds (0, 1): +0.0200, +0.0220; SE 0.0010, paired t = 21.00 with "
            "1 df, two-sided "
            "p = 0.030;",
            text,
        )
        # d = -.002, +.002: mean 0, t = 0, p = 1.
        self.assertIn(
            "- improved (released pool) vs TFRS's standard, in-batch: d = +0.0000 "
            "NDCG@20 over 2 paired seeds (0, 1): -0.0020, +0.0020; SE 0.0020, paired "
            "t = 0.00 with 1 df, "
            "two-sided p = 1.000;",
            text,
        )
        self.assertIn(
            "- improved (released pool) vs the paper's standard, in-batch: d = +0.0015", text
        )
        self.assertIn("- TFRS's standard vs the paper's standard, in-batch: d = +0.0015", text)

    def test_rows_not_run_show_their_planned_seeds_with_or_without_a_paper_number(self):
        runs = plan.plan(
            "ml-1m",
            "temporal",
            "official_cpu",
            2,
            ["mixed-standard", "mixed-standard_tfrs"],
            ["static"],
            tempfile.mkdtemp(),
        )
        text = report.markdown(
            comparisons.aggregate(runs), "ml-1m", "temporal", "official_cpu", "CMD"
        )
        self.assertIn(
            "| mixed, standard logQ on negatives only [train_mns_log_old.py] | 0/2 | "
            "not run | 0.1292 | | | 0.2800 | | | | | |\n",
            text,
        )
        self.assertIn(
            "| mixed, standard logQ as TFRS (positive corrected too) | 0/2 | not run | "
            "– | | | – | | | | | |\n",
            text,
        )

    def test_test_score_against_the_best_epoch(self):
        runs = plan.plan(
            "ml-1m",
            "loo",
            "official_cpu",
            3,
            ["mixed-standard", "mixed-improved"],
            ["static"],
            tempfile.mkdtemp(),
        )
        best = {"mixed-standard": [100, 200, 400], "mixed-improved": [50, 60, 70]}
        scores = {"mixed-standard": [0.170, 0.178, 0.185], "mixed-improved": [0.17, 0.17, 0.17]}
        for run in runs:
            fake_run(run, scores[run.row.name][run.seed], best_epoch=best[run.row.name][run.seed])
        text = report.markdown(comparisons.aggregate(runs), "ml-1m", "loo", "official_cpu", "CMD")
        # numpy: corrcoef 0.97399, polyfit slope 4.7857e-5 per epoch.
        self.assertIn(
            "- mixed, standard logQ on negatives only [train_mns_log_old.py]: r = +0.97 "
            "over 3 runs, slope +0.0048 NDCG@20 per 100 epochs.",
            text,
        )
        # Over all six: corrcoef 0.98366, slope 4.5975e-5 per epoch.
        self.assertIn(
            "- all runs: r = +0.98 over 6 runs, slope +0.0046 NDCG@20 per 100 epochs.", text
        )
        # No spread in the scores: no fit, no line.
        self.assertNotIn("- mixed, improved logQ [train_mns_log_new.py]: r =", text)
        self.assertIsNone(
            comparisons.best_epoch_fit(
                [{"best_epoch": 1, "ndcg@20": 0.1}, {"best_epoch": 2, "ndcg@20": 0.2}]
            )
        )

    def test_pairs_outside_the_official_profiles_are_named_by_their_rows(self):
        # Under `cpu` the standard row is TFRS's form, not "the paper's standard".
        runs = plan.plan(
            "ml-1m",
            "loo",
            "cpu",
            2,
            ["mixed-standard", "mixed-improved"],
            ["static"],
            tempfile.mkdtemp(),
        )
        for run in runs:
            fake_run(
                run,
                {"mixed-standard": [0.170, 0.180], "mixed-improved": [0.172, 0.184]}[run.row.name][
                    run.seed
                ],
            )
        text = report.markdown(comparisons.aggregate(runs), "ml-1m", "loo", "cpu", "CMD")
        self.assertIn(
            "- mixed, improved logQ vs mixed, standard logQ: d = +0.0030 NDCG@20 over "
            "2 paired seeds (0, 1)",
            text,
        )
        self.assertNotIn("the paper's standard", text)

    def test_a_beyond_p_005_difference_is_called(self):
        runs = plan.plan(
            "ml-1m",
            "loo",
            "official_cpu",
            4,
            ["mixed-standard", "mixed-improved"],
            ["static"],
            tempfile.mkdtemp(),
        )
        scores = {
            "mixed-standard": [0.170, 0.180, 0.175, 0.172],
            "mixed-improved": [0.175, 0.186, 0.179, 0.177],
        }  # d = 5, 6, 4, 5 (x 1e-3).
        for run in runs:
            fake_run(run, scores[run.row.name][run.seed])
        text = report.markdown(comparisons.aggregate(runs), "ml-1m", "loo", "official_cpu", "CMD")
        # SE = 0.000816 / 2 = 0.000408, t = 12.25 with 3 df.
        self.assertRegex(
            text,
            r"d = \+0.0050 NDCG@20 over 4 paired seeds \(0, 1, 2, 3\): "
            r"\+0.0050, \+0.0060, \+0.0040, \+0.0050; SE "
            r"0.0004, paired t = 12.25 with 3 df, two-sided p = 0.001; .* is "
            r"higher at p < 0.05.",
        )

    def test_one_seed_pair_is_paired_by_test_user_from_the_saved_per_query_metrics(self):
        from pipelines import per_query  # pylint: disable=import-outside-toplevel

        runs = plan.plan(
            "ml-1m",
            "loo",
            "official",
            1,
            ["mixed-standard", "mixed-improved"],
            ["static"],
            tempfile.mkdtemp(),
        )
        results = tempfile.mkdtemp()
        name = plan.experiment_name("ml-1m", "loo", "official")
        rng = np.random.default_rng(0)
        base = rng.uniform(0.0, 0.4, size=1000)
        values = {"mixed-standard": base, "mixed-improved": base + rng.normal(0.01, 0.05, 1000)}
        for run in runs:
            fake_run(run, float(values[run.row.name].mean()))
        # Improved's file first only: no pair yet, no section.
        record = {
            "users": np.arange(1000),
            "targets_digest": "t",
            "split": "test",
            "index": "exact",
            "description": "ml-1m, split loo",
        }
        directory = os.path.join(results, report.PER_QUERY_DIR, name)
        per_query.save(
            dict(record, values={"ndcg@20": values["mixed-improved"]}),
            os.path.join(directory, "mixed-improved", "seed0.npz"),
        )
        text = report.write_report(runs, "ml-1m", "loo", "official", results, "CMD")
        self.assertIn("one pair: SE unknown", text)
        self.assertNotIn("Paired by test user", text)
        per_query.save(
            dict(record, values={"ndcg@20": values["mixed-standard"]}),
            os.path.join(directory, "mixed-standard", "seed0.npz"),
        )
        text = report.write_report(runs, "ml-1m", "loo", "official", results, "CMD")
        d = values["mixed-improved"].astype(np.float32).astype(float) - values[
            "mixed-standard"
        ].astype(np.float32).astype(float)
        expected = stats.ttest_rel(values["mixed-improved"], values["mixed-standard"])
        self.assertIn(
            f"- improved vs the paper's standard (negatives only), seed 0: d = "
            f"{d.mean():+.4f} NDCG@20 over 1000 test users (",
            text,
        )
        self.assertIn(
            f"; SE {d.std(ddof=1) / np.sqrt(1000):.4f}, paired t = "
            f"{expected.statistic:.2f}, two-sided p = ",
            text,
        )
        self.assertIn("is higher at p < 0.05 on these users.", text)
        # Files of other queries are refused, not paired.
        per_query.save(
            dict(record, targets_digest="other", values={"ndcg@20": base}),
            os.path.join(directory, "mixed-standard", "seed0.npz"),
        )
        with self.assertRaisesRegex(ValueError, "evaluates other test queries than"):
            report.write_report(runs, "ml-1m", "loo", "official", results, "CMD")

    def test_synthetic_table(self):
        runs = plan.plan(
            "synthetic",
            "loo",
            "cpu",
            2,
            ["in_batch-improved"],
            ["static", "count_min"],
            tempfile.mkdtemp(),
        )
        for run, kl in zip(runs, (1.0, 1.5, 2.0, 2.5)):
            fake_run(run, 0.2, kl=kl)
        text = report.markdown(comparisons.aggregate(runs), "synthetic", "loo", "cpu", "CMD")
        self.assertIn(
            "# Two-tower model on the synthetic catalog (known P(d|u)), loo split, "
            "`synthetic_two_tower` preset",
            text,
        )
        self.assertIn(
            "| in-batch, improved logQ | exact counts | 2 | 1.5000 ± 0.7071 | "
            "0.1500 ± 0.0000 | 0.5000 | 0.3000 | 0.2000 | 0.1000 |",
            text,
        )
        self.assertIn("| in-batch, improved logQ | count-min sketch | 2 | 2.0000 ± 0.7071 |", text)


if __name__ == "__main__":
    tf.test.main()
