"""`tfrs-logq compare`: its rows and their refusals, its plan, its records, and its report's
numbers against numpy and scipy."""

import json
import os
import tempfile

import numpy as np
import scipy.stats
import tensorflow as tf

from pipelines import compare
from pipelines.run_files import RunFiles


def _rows(*texts):
    return compare.make_rows(list(texts), [])


def _record(row, seed, recall10, recall100, seconds=10.0, status="finished"):
    if status != "finished":
        return {"row": row, "seed": seed, "status": status, "error": "exited with 1"}
    return {
        "row": row,
        "seed": seed,
        "status": "finished",
        "test": {"recall@10": recall10, "recall@100": recall100, "ndcg@10": recall10 / 2},
        "by_popularity": {
            "head_recall@10": 2 * recall10,
            "torso_recall@10": recall10,
            "tail_recall@10": 0.0,
        },
        "baselines": {"popularity": {"recall@10": 0.05, "recall@100": 0.2}},
        "train_seconds": seconds,
        "git_revision": "abc123",
    }


class RowsTest(tf.test.TestCase):
    def test_corrections_and_rows(self):
        rows = compare.make_rows([], ["standard", "improved"])
        self.assertEqual([r.name for r in rows], ["standard", "improved"])
        self.assertEqual(rows[1].arguments(), ["--correction=improved"])
        rows = _rows(
            "a: --negatives=mixed --per_row_negatives", "b: --negatives=in_batch --per_row"
        )
        # An old name reads as its field's (configs.RENAMED), a bare bool as true.
        self.assertEqual(rows[0].flags, (("negatives", "mixed"), ("per_row", "true")))
        rows = _rows("a: --nol2_normalize", "b: --l2_normalize")
        self.assertEqual(rows[0].flags, (("l2_normalize", "false"),))
        self.assertEqual(rows[1].flags, (("l2_normalize", "true"),))

    def test_bad_rows_are_refused_by_name(self):
        cases = [
            (
                (["a: --correction=none"], []),
                "at least two rows \\(--corrections and --row\\); received 1",
            ),
            ((["a --correction=none", "b: --correction=standard"], []), "received --row='a --c"),
            ((["a: correction=none", "b: --correction=x"], []), "'correction=none' is not a flag"),
            ((["a:", "b: --correction=x"], []), "sets no flag"),
            (([], ["standard", "standard"]), "distinct names; received standard twice"),
            ((["a: --seed=1", "b: --seed=2"], []), "Row a sets --seed, which compare sets"),
            (
                (["a: --correction=none --correction=standard", "b: --correction=x"], []),
                "Row a sets --correction more than once",
            ),
            (
                (["a: --correction=none", "b: --correction=improved --dim=8"], []),
                "Rows a and b name different flags \\(--dim in one only\\)",
            ),
            (
                (["a: --correction=none", "b: --correction=none"], []),
                "Rows a and b set the same flags",
            ),
            (
                (["a: --memory_budget_mb=100", "b: --memory_budget_mb=200"], []),
                "Row a sets --memory_budget_mb, which says how a run is carried out",
            ),
            (
                (["a: --strategy=default --dim=8", "b: --strategy=mirrored --dim=8"], []),
                "Row a sets --strategy, which says how",
            ),
        ]
        for (texts, corrections), message in cases:
            with self.subTest(message):
                with self.assertRaisesRegex(ValueError, message):
                    compare.make_rows(texts, corrections)

    def test_common_flags(self):
        self.assertEqual(
            compare.check_common(["--preset=industrial_smoke", "--dim=8"]),
            [("preset", "industrial_smoke"), ("dim", "8")],
        )
        for flags, message in (
            (["--output_dir=x"], "set --output_dir, which compare sets"),
            (["--seed=3"], "set --seed"),
            (["--strategy=parameter_server"], "received --strategy=parameter_server"),
            (["industrial"], "'industrial' is not a flag"),
        ):
            with self.subTest(message):
                with self.assertRaisesRegex(ValueError, message):
                    compare.check_common(flags)

    def test_configs_checked_as_train_reads_them(self):
        common = ["--preset=industrial_smoke"]
        built = compare.row_configs(
            _rows("a: --correction=none", "b: --correction=improved"), common, vary_data=True
        )
        self.assertEqual(built["b"].loss.correction, "improved")
        with self.assertRaisesRegex(ValueError, r"Row b \(--correction=bogus\): .*correction"):
            compare.row_configs(
                _rows("a: --correction=none", "b: --correction=bogus"), common, False
            )
        # A row that changes the preset changes every field the presets differ in.
        with self.assertRaisesRegex(ValueError, "differ in .* too, which no row names"):
            compare.row_configs(
                _rows("a: --preset=industrial_smoke", "b: --preset=synthetic"), [], False
            )
        # Values that read the same: one configuration.
        with self.assertRaisesRegex(
            ValueError, r"Rows a \(--dim=32\) and b \(--dim=032\) train the same configuration"
        ):
            compare.row_configs(_rows("a: --dim=32", "b: --dim=032"), common, False)
        with self.assertRaisesRegex(ValueError, "--vary_data .* received --dataset=synthetic"):
            compare.row_configs(
                _rows("a: --correction=none", "b: --correction=improved"),
                ["--preset=synthetic"],
                vary_data=True,
            )

    def test_plan(self):
        rows = _rows("a: --correction=none", "b: --correction=improved")
        runs = compare.plan(
            rows, ["--preset=x"], 2, "/o", "/r", vary_data=True, memory_budget_mb=9000
        )
        self.assertEqual(
            [(r.row.name, r.seed) for r in runs], [("a", 0), ("b", 0), ("a", 1), ("b", 1)]
        )
        self.assertEqual(runs[3].directory, "/o/b/seed1")
        self.assertEqual(runs[3].record, "/r/b/seed1.json")
        self.assertEqual(
            runs[3].command[1:],
            [
                "-m",
                "pipelines.train",
                "--preset=x",
                "--correction=improved",
                "--seed=1",
                "--synthetic_log_seed=1",
                "--memory_budget_mb=9000",
                "--output_dir=/o/b/seed1",
            ],
        )
        plain = compare.plan(rows, [], 1, "/o", "/r")
        self.assertNotIn("--synthetic_log_seed=0", plain[0].command)


class RecordsTest(tf.test.TestCase):
    def test_a_record_keeps_the_config_metrics_code_and_diff(self):
        out, results = tempfile.mkdtemp(), tempfile.mkdtemp()
        rows = _rows("a: --correction=none", "b: --correction=improved")
        run = compare.plan(rows, [], 1, out, results)[1]
        files = RunFiles(run.directory)
        os.makedirs(run.directory)
        with open(files.config, "w") as f:
            json.dump({"loss": {"correction": "improved"}}, f)
        with open(files.metrics, "w") as f:
            json.dump(
                {
                    "test": {"recall@10": 0.25},
                    "git_revision": "abc+dirty",
                    "code_diff_sha256": "ff",
                    "train_seconds": 3.0,
                    "history": [1] * 9,
                },
                f,
            )
        with open(files.code_diff, "w") as f:
            f.write("diff --git a b\n")
        self.assertFalse(
            compare.finished(compare.plan(rows, [], 1, tempfile.mkdtemp(), results)[1])
        )
        self.assertTrue(compare.finished(run))  # metrics.json, not recorded yet.
        record = compare.write_record(run)
        with open(run.record) as f:
            self.assertEqual(json.load(f), record)
        self.assertEqual(record["status"], "finished")
        self.assertEqual(record["config"], {"loss": {"correction": "improved"}})
        self.assertEqual(record["flags"], {"correction": "improved"})
        self.assertEqual(record["test"], {"recall@10": 0.25})
        self.assertNotIn("history", record)
        self.assertIn("--correction=improved --seed=0 --output_dir=", record["command"])
        with open(os.path.join(results, "b", "seed0.diff")) as f:
            self.assertEqual(f.read(), "diff --git a b\n")
        # A failure: the log's last lines; not finished, so a rerun trains it again.
        with open(files.train_log, "w") as f:
            f.write("".join(f"line {i}\n" for i in range(20)))
        failed = compare.write_failure(run, "exited with 1")
        self.assertEqual(failed["log_tail"], [f"line {i}" for i in range(12, 20)])
        self.assertFalse(compare.finished(run))


class QuerySpreadTest(tf.test.TestCase):
    def test_bootstrap_against_the_analytic_se(self):
        rng = np.random.default_rng(3)
        n = 3000
        pairs = [(rng.random(n), rng.random(n) + 0.01 * s) for s in range(3)]
        # The same queries every seed: the SE of the per-query mean over seeds, over n.
        mean_d = np.mean([b - a for a, b in pairs], axis=0)
        self.assertAllClose(
            compare.bootstrap_se(pairs, same_queries=True, replicates=2000),
            mean_d.std() / np.sqrt(n),
            rtol=0.08,
        )
        # Each seed its own queries: the seeds' SEs combined, over the number of seeds.
        each = [np.var(b - a) / n for a, b in pairs]
        self.assertAllClose(
            compare.bootstrap_se(pairs, same_queries=False, replicates=2000),
            np.sqrt(np.sum(each)) / 3,
            rtol=0.08,
        )
        # Deterministic.
        self.assertEqual(
            compare.bootstrap_se(pairs, True, 50), compare.bootstrap_se(pairs, True, 50)
        )

    def test_added_to_the_differences_and_reported(self):
        rng = np.random.default_rng(0)
        users = np.arange(1, 401)
        records, per_query = {}, {}
        for row, shift in (("a", 0.0), ("b", 0.02)):
            for seed in range(3):
                values = {"recall@10": np.clip(rng.random(400) * 0.3 + shift, 0, 1)}
                per_query[(row, seed)] = {"users": users, "targets_digest": "t", "values": values}
                mean = float(values["recall@10"].mean())
                records[(row, seed)] = _record(row, seed, mean, 0.3)
        rows = _rows("a: --correction=none", "b: --correction=improved")
        summary = compare.summarize(rows, 3, records, "a")
        compare.add_query_spread(summary, per_query, replicates=500)
        result = summary["differences"]["b"]["recall@10"]
        self.assertGreater(result["se_queries"], 0.0)
        self.assertAllClose(
            result["share_queries"],
            result["se_queries"] ** 2 / (result["se_queries"] ** 2 + result["se"] ** 2),
        )
        self.assertNotIn("se_queries", summary["differences"]["b"]["recall@100"])
        text = compare.format_report(summary, "recall@10", "c", [], ["abc"], False)
        self.assertIn("## Training or test queries?", text)
        self.assertRegex(text, r"\| b − a \| recall@10 \| 0\.\d{4} \| 0\.\d{4} \| \d+% \|")
        self.assertRegex(
            compare.advice(summary, "recall@10"),
            r"Of the uncertainty of b − a at recall@10, \d+% is ",
        )
        # A fresh log per seed (--vary_data): each seed's pair on its own queries. The SE over
        # queries is reported, without a share (the seeds' SE holds the queries' draw).
        fresh = {
            (row, seed): dict(record, users=users + 1000 * seed)
            for (row, seed), record in per_query.items()
        }
        summary = compare.summarize(rows, 3, records, "a")
        compare.add_query_spread(summary, fresh, replicates=200)
        self.assertNotIn("share_queries", summary["differences"]["b"]["recall@10"])
        text = compare.format_report(summary, "recall@10", "c", [], ["abc"], True)
        self.assertRegex(text, r"\| b − a \| recall@10 \| 0\.\d{4} \| 0\.\d{4} \| – \|")
        self.assertIn("each seed tested its own queries", text)
        # Other queries within a seed: no pairing by query, no bootstrap.
        per_query[("b", 1)] = dict(per_query[("b", 1)], users=users + 1)
        summary = compare.summarize(rows, 3, records, "a")
        compare.add_query_spread(summary, per_query, replicates=50)
        self.assertNotIn("se_queries", summary["differences"]["b"]["recall@10"])


class ReportTest(tf.test.TestCase):
    def _records(self, failed=()):
        values = {
            "a": [(0.10, 0.30), (0.12, 0.31), (0.11, 0.29)],
            "b": [(0.13, 0.30), (0.14, 0.32), (0.14, 0.30)],
            "c": [(0.11, 0.30), (0.11, 0.30), (0.12, 0.31)],
        }
        return {
            (row, seed): _record(
                row,
                seed,
                *v,
                seconds=10 + seed,
                status="failed" if (row, seed) in failed else "finished",
            )
            for row, vs in values.items()
            for seed, v in enumerate(vs)
        }, values

    def test_numbers_against_numpy_and_scipy(self):
        records, values = self._records()
        rows = _rows("a: --correction=none", "b: --correction=standard", "c: --correction=improved")
        summary = compare.summarize(rows, 3, records, "a", margin=0.05)
        self.assertEqual(summary["metrics"], ["recall@10", "recall@100", "ndcg@10"])
        a10 = [v[0] for v in values["a"]]
        self.assertAllClose(summary["rows"]["a"]["metrics"]["recall@10"]["mean"], np.mean(a10))
        self.assertAllClose(summary["rows"]["a"]["metrics"]["recall@10"]["sd"], np.std(a10, ddof=1))
        p_raw = {}
        for name in ("b", "c"):
            other = [v[0] for v in values[name]]
            result = summary["differences"][name]["recall@10"]
            test = scipy.stats.ttest_rel(other, a10)
            self.assertAllClose(result["mean"], np.mean(np.subtract(other, a10)))
            self.assertAllClose(result["p"], test.pvalue, atol=1e-9)
            d = np.subtract(other, a10)
            se = d.std(ddof=1) / np.sqrt(3)
            self.assertAllClose(result["se"], se)
            self.assertAllClose(
                result["excluded"], abs(d.mean()) + scipy.stats.t.ppf(0.95, 2) * se, atol=1e-7
            )
            self.assertIn("tost_p", result)
            p_raw[name] = test.pvalue
        # Holm over the two comparisons: the smaller p times 2, the larger kept at least that.
        low, high = sorted(p_raw, key=p_raw.get)
        self.assertAllClose(summary["differences"][low]["recall@10"]["p_holm"], 2 * p_raw[low])
        self.assertAllClose(
            summary["differences"][high]["recall@10"]["p_holm"], max(2 * p_raw[low], p_raw[high])
        )
        self.assertAllClose(
            summary["rows"]["b"]["by_popularity"]["head_recall@10"],
            2 * np.mean([v[0] for v in values["b"]]),
        )
        self.assertEqual(summary["baselines"]["popularity"], {"recall@10": 0.05, "recall@100": 0.2})
        text = compare.format_report(
            summary,
            "recall@10",
            "tfrs-logq compare ...",
            ["--preset=x"],
            ["abc123"],
            vary_data=False,
        )
        self.assertIn("| a | `--correction=none` | 3/3 | 0.1100 ± 0.0100 |", text)
        self.assertRegex(
            text,
            r"\| b − a \| 0, 1, 2 \| \+0\.0267 \(SE 0\.0033, p 0\.015, "
            r"Holm 0\.031; > 0\.0364 excluded; TOST p 0\.010\) \|",
        )
        self.assertIn("| b | 0.2733 | 0.1367 | 0.0000 |", text)
        self.assertIn("| popularity (baseline) | | | 0.0500 | 0.2000 | – | |", text)
        self.assertIn("their spread is that of training alone", text)

    def test_thirds_show_the_oracle_and_say_when_no_row_reaches_the_torso(self):
        records, _ = self._records()
        for record in records.values():
            record["by_popularity"].update({"torso_recall@10": 0.0, "tail_recall@10": 0.0})
            record["baselines"]["oracle"] = {
                "recall@10": 0.3,
                "by_popularity": {"head_recall@10": 0.4, "torso_recall@10": 0.1},
            }
        rows = _rows("a: --correction=none", "b: --correction=standard")
        summary = compare.summarize(rows, 3, records, "a")
        self.assertEqual(
            summary["baselines_by_popularity"]["oracle"],
            {"head_recall@10": 0.4, "torso_recall@10": 0.1},
        )
        text = compare.format_report(
            summary, "recall@10", "tfrs-logq compare ...", [], ["abc123"], vary_data=False
        )
        self.assertIn("| oracle (baseline) | 0.4000 | 0.1000 | – |", text)
        self.assertNotIn("_by_popularity", text)
        self.assertIn("| row | head @10 | torso @10 | tail @10 |", text)
        self.assertIn(
            "a test target counts in its item's third. No trained row retrieves a torso or tail "
            "target in its top 10; the oracle does (torso 0.1000).",
            text,
        )
        # A row that does reach the torso: no such sentence.
        records[("b", 0)]["by_popularity"]["torso_recall@10"] = 0.01
        summary = compare.summarize(rows, 3, records, "a")
        text = compare.format_report(
            summary, "recall@10", "tfrs-logq compare ...", [], ["abc123"], vary_data=False
        )
        self.assertNotIn("No trained row", text)

    def test_advice_from_the_numbers(self):
        records, _ = self._records()
        rows = _rows("a: --correction=none", "c: --correction=improved")
        summary = compare.summarize(rows, 3, records, "a", margin=0.01)
        text = compare.advice(summary, "recall@10")
        self.assertIn(
            "c and a are level at recall@10 (+0.0033, p 0.667, one comparison); these seeds "
            "exclude a difference above 0.0228, and do not place it within ±0.0100 (TOST p ",
            text,
        )
        self.assertIn(
            "No row beats a at recall@10: keep a, or where rows are level pick the "
            "cheaper (training seconds: a 11, c 11)",
            text,
        )
        # b leads a at recall@10 by 0.0267 (p 0.015) and at no metric trails it.
        rows = _rows("a: --correction=none", "b: --correction=standard")
        self.assertRegex(
            compare.advice(compare.summarize(rows, 3, records, "a"), "recall@10"),
            r"^Use b: on this log it leads a at recall@10 by \+0\.0267 \(p 0\.015, one "
            r"comparison, 3 seeds\) and is worse at no other metric\.$",
        )
        # ... unless it trails at another metric: a trade-off, not a winner.
        for seed, lag in enumerate((0.020, 0.021, 0.019)):
            records[("b", seed)]["test"]["recall@100"] = (
                records[("a", seed)]["test"]["recall@100"] - lag
            )
        text = compare.advice(compare.summarize(rows, 3, records, "a"), "recall@10")
        self.assertIn("b leads a at recall@10 (+0.0267) but trails it at recall@100", text)
        self.assertNotIn("Use b", text)
        # Worse: a against b.
        text = compare.advice(compare.summarize(rows[::-1], 3, records, "b"), "recall@10")
        self.assertIn(
            "a trails b at recall@10 by -0.0267 (p 0.015), though it leads at recall@100.", text
        )

    def test_advice_names_a_model_below_popularity_and_a_small_test(self):
        records, _ = self._records()
        rows = _rows("a: --correction=none", "c: --correction=improved")
        for record in records.values():
            record["baselines"]["popularity"]["recall@10"] = 0.2
            record["num_test_queries"] = 105
        summary = compare.summarize(rows, 3, records, "a")
        self.assertEqual(summary["test_queries"], [105, 105])
        text = compare.advice(summary, "recall@10")
        self.assertIn(
            "But every row is below the popularity baseline at recall@10 (0.1133 at best "
            "against 0.2000)",
            text,
        )
        self.assertIn("The test holds 105 queries", text)
        report = compare.format_report(summary, "recall@10", "c", [], ["abc"], False)
        self.assertIn("Test queries: 105. Code: abc.", report)

    def test_three_rows_one_untested_and_a_difference_without_spread(self):
        records, _ = self._records()
        rows = _rows("a: --correction=none", "b: --correction=standard", "c: --correction=improved")
        for seed in (1, 2):  # c has one seed paired with a: untested, not a crash.
            records[("c", seed)] = _record("c", seed, 0, 0, status="failed")
        summary = compare.summarize(rows, 3, records, "a")
        text = compare.advice(summary, "recall@10")
        self.assertIn("Not tested at recall@10", text)
        self.assertIn("one comparison", text)  # Holm's family: the rows tested.
        for seed in range(3):  # b: the same lead at every seed, no spread.
            records[("b", seed)]["test"]["recall@10"] = records[("a", seed)]["test"]["recall@10"]
        summary = compare.summarize(rows[:2], 3, records, "a")
        self.assertTrue(summary["differences"]["b"]["recall@10"]["same"])
        self.assertNotIn("Use b", compare.advice(summary, "recall@10"))
        report = compare.format_report(summary, "recall@10", "c", [], ["x"], False)
        self.assertIn("+0.0000 (the same at every seed)", report)

    def test_one_seed_reports_no_p_values(self):
        records, _ = self._records()
        rows = _rows("a: --correction=none", "b: --correction=standard")
        one = {key: r for key, r in records.items() if key[1] == 0}
        summary = compare.summarize(rows, 1, one, "a")
        self.assertNotIn("p", summary["differences"]["b"]["recall@10"])
        text = compare.format_report(summary, "recall@10", "c", [], ["abc"], False)
        self.assertIn("+0.0300 (1 seed: no p-value)", text)
        self.assertIn("With one seed a row there are no p-values", text)

    def test_a_failed_run_is_named_and_leaves_its_row_without_a_mean(self):
        records, _ = self._records(failed={("b", 1)})
        rows = _rows("a: --correction=none", "b: --correction=standard")
        summary = compare.summarize(rows, 3, records, "a")
        self.assertEqual(summary["rows"]["b"]["failed"], [1])
        self.assertFalse(summary["rows"]["b"]["complete"])
        self.assertEqual(summary["differences"]["b"]["recall@10"]["seeds"], [0, 2])
        text = compare.format_report(summary, "recall@10", "c", [], ["abc"], False)
        self.assertIn("| b | `--correction=standard` | 2/3 (failed: 1) | – | – | – | – |", text)
        self.assertIn("Runs failed: b (seeds 1 failed)", text)
        runs = compare.plan(rows, [], 3, "/o", "/r")
        table = compare.run_table(runs, records, "recall@10")
        self.assertIn("| b | 1 | failed: exited with 1 | | | |", table)
        self.assertIn("| a | 2 | finished | 0.1100 | 12 | abc123 |", table)


if __name__ == "__main__":
    tf.test.main()
