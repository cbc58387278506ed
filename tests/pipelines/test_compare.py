"""`tfrs-logq compare`: its rows and their refusals, its plan, its records, and its report's
numbers against numpy and scipy."""

import json
import os
import tempfile
from unittest import mock

import numpy as np
import scipy.stats
import tensorflow as tf
from absl import flags as absl_flags

from pipelines import compare
from pipelines import configs
from pipelines import significance
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

    def test_keras_rows_may_vary_the_keras_jobs_settings(self):
        """Issue 77: float32 against bfloat16 (and steps a call) are rows of one compare."""
        built = compare.row_configs(
            _rows("f32: --dtype_policy=float32", "bf16: --dtype_policy=mixed_bfloat16"),
            ["--preset=synthetic", "--framework=keras", "--steps_per_execution=5"],
            False,
        )
        self.assertEqual(built["bf16"].training.dtype_policy, "mixed_bfloat16")
        self.assertEqual(built["f32"].training.steps_per_execution, 5)
        differ = {
            name
            for name, value in built["bf16"].flat().items()
            if built["f32"].flat()[name] != value
        }
        self.assertEqual(differ, {"dtype_policy"})
        with self.assertRaisesRegex(ValueError, "dtype_policy"):
            compare.row_configs(_rows("a: --dtype_policy=float16", "b: --dim=8"), [], False)

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
            r"Holm 0\.031; 90% CI to ±0\.0364; TOST p 0\.010\) \|",
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
            "c and a are level at every metric tested (one row compared, Holm p ≥ 0.05); at "
            "recall@10 (+0.0033, Holm p 0.667) on these test queries the seeds exclude a "
            "difference beyond ±0.0228 (the far end of the 90% interval, TOST at 5%); not "
            "placed within ±0.0100 (TOST p 0.211).",
            text,
        )
        self.assertIn(
            "No row beats a at any metric: keep a, the cheapest of the rows level with it "
            "(training seconds: a 11, c 11)",
            text,
        )
        # b leads a at recall@10 by 0.0267 (p 0.015) and at no metric trails it.
        rows = _rows("a: --correction=none", "b: --correction=standard")
        self.assertRegex(
            compare.advice(compare.summarize(rows, 3, records, "a"), "recall@10"),
            r"^b leads a at recall@10 \(\+0\.0267, Holm p 0\.015\) and ndcg@10 \(\+0\.0133, "
            r"Holm p 0\.015\) and trails it at none of the 3 metrics tested \(one row "
            r"compared\)\. Use b on this log\.$",
        )
        # ... unless it trails at another metric: a trade-off, not a winner.
        for seed, lag in enumerate((0.020, 0.021, 0.019)):
            records[("b", seed)]["test"]["recall@100"] = (
                records[("a", seed)]["test"]["recall@100"] - lag
            )
        text = compare.advice(compare.summarize(rows, 3, records, "a"), "recall@10")
        self.assertIn(
            "b leads a at recall@10 (+0.0267, Holm p 0.015) and ndcg@10 (+0.0133, Holm p "
            "0.015) but trails it at recall@100 (-0.0200, Holm p ",
            text,
        )
        self.assertNotIn("Use b", text)
        self.assertNotIn("keep a", text)
        # Worse: a against b.
        text = compare.advice(compare.summarize(rows[::-1], 3, records, "b"), "recall@10")
        self.assertIn("a leads b at recall@100 (+0.0200, Holm p ", text)
        self.assertIn("but trails it at recall@10 (-0.0267, Holm p 0.015)", text)

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
        self.assertIn(
            "c is not tested against a at recall@10, recall@100 and ndcg@10 (fewer than two "
            "seeds paired).",
            text,
        )
        self.assertIn("(one row compared)", text)  # Holm's family: the rows tested.
        for seed in range(3):  # b: no difference at any seed: level, p 1.
            records[("b", seed)]["test"] = dict(records[("a", seed)]["test"])
        summary = compare.summarize(rows[:2], 3, records, "a")
        self.assertTrue(summary["differences"]["b"]["recall@10"]["same"])
        self.assertEqual(summary["differences"]["b"]["recall@10"]["p_holm"], 1.0)
        self.assertNotIn("Use b", compare.advice(summary, "recall@10"))
        report = compare.format_report(summary, "recall@10", "c", [], ["x"], False)
        self.assertIn(
            "+0.0000 (the same at every seed: SE 0, Holm 1.000; 90% CI to ±0.0000)", report
        )

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


def _summary(values, baseline, margin=None, seconds=None, queries=None):
    """A summary of records whose test metrics are `values[row][metric]` (one per seed)."""
    names = list(values)
    seeds = len(next(iter(next(iter(values.values())).values())))
    records = {}
    for row, metrics in values.items():
        for seed in range(seeds):
            record = _record(row, seed, 0.0, 0.0, seconds=(seconds or {}).get(row, 10.0))
            record["test"] = {m: v[seed] for m, v in metrics.items()}
            if queries:
                record["num_test_queries"] = queries
            records[(row, seed)] = record
    rows = [compare.Row(n, (("correction", n),)) for n in names]
    return compare.summarize(rows, seeds, records, baseline, margin)


def _named_differences(summary, text):
    """Asserts that the advice names every Holm-significant difference with its sign, says
    "keep" only where no row leads anywhere, and "cheaper" only of rows level everywhere."""
    base = summary["baseline"]
    leads_somewhere = False
    for name, results in summary["differences"].items():
        for metric, result in results.items():
            if result.get("p_holm", 1.0) < compare.ALPHA:
                leads_somewhere |= result["mean"] > 0
                named = f"{metric} ({result['mean']:+.4f}, Holm p "
                assert named in text, (name, metric, text)
                sentence = next(s for s in text.split(". ") if s.startswith(f"{name} "))
                assert named in sentence, (name, metric, sentence)
                verb = "leads" if result["mean"] > 0 else "trails"
                assert f"{verb} {base} at" in sentence or f"{verb} it at" in sentence, sentence
    if leads_somewhere:
        assert f"keep {base}" not in text, text
    if "cheaper " in text:
        cheaper = text.split("cheaper ", 1)[1].split(",")[0]
        assert all(
            r.get("p_holm", 1.0) >= compare.ALPHA for r in summary["differences"][cheaper].values()
        ), text


class AdviceReadsEveryMetricTest(tf.test.TestCase):
    """The probe's findings (issue 75, part 5), each on synthetic per-seed numbers."""

    BASE = {"recall@10": [0.10, 0.12, 0.11], "recall@100": [0.30, 0.31, 0.29]}

    def test_keep_none_is_not_said_while_a_correction_leads_elsewhere(self):
        values = {
            "none": self.BASE,
            # Level at recall@10 (the primary), ahead at recall@100 at every seed but unevenly.
            "standard": {"recall@10": [0.11, 0.11, 0.12], "recall@100": [0.32, 0.335, 0.31]},
        }
        summary = _summary(values, "none")
        text = compare.advice(summary, "recall@10")
        self.assertNotIn("keep none", text)
        self.assertIn("standard leads none at recall@100 (+0.0217, Holm p 0.006)", text)
        self.assertIn("Use standard on this log.", text)
        _named_differences(summary, text)

    def test_the_cheaper_row_is_never_one_that_trails_somewhere(self):
        values = {
            "a": self.BASE,
            "b": {"recall@10": [0.11, 0.11, 0.12], "recall@100": [0.28, 0.285, 0.27]},
        }
        summary = _summary(values, "a", seconds={"a": 20.0, "b": 5.0})
        text = compare.advice(summary, "recall@10")
        self.assertIn("b trails a at recall@100 (-0.0217, Holm p 0.006)", text)
        self.assertNotIn("cheaper", text)
        self.assertIn("No row beats a at any metric: keep a.", text)
        # Level everywhere and cheaper: named as such.
        values["b"]["recall@100"] = [0.31, 0.29, 0.30]
        summary = _summary(values, "a", seconds={"a": 20.0, "b": 5.0})
        text = compare.advice(summary, "recall@10")
        self.assertIn(
            "keep a, or the cheaper b, level with it at every metric (training seconds: a 20, "
            "b 5).",
            text,
        )
        _named_differences(summary, text)

    def test_a_constant_difference_at_every_seed_is_a_difference(self):
        values = {
            "a": self.BASE,
            "b": {
                "recall@10": [v + 0.01 for v in self.BASE["recall@10"]],
                "recall@100": self.BASE["recall@100"],
            },
        }
        summary = _summary(values, "a")
        result = summary["differences"]["b"]["recall@10"]
        self.assertTrue(result["same"])
        self.assertEqual((result["p"], result["p_holm"], result["se"]), (0.0, 0.0, 0.0))
        self.assertAllClose(result["excluded"], 0.01)
        text = compare.advice(summary, "recall@10")
        self.assertNotIn("trains what is missing", text)
        self.assertNotIn("not tested", text)
        self.assertIn("b leads a at recall@10 (+0.0100, Holm p 0.000)", text)
        self.assertIn("Use b on this log.", text)
        report = compare.format_report(summary, "recall@10", "c", [], ["x"], False)
        self.assertIn(
            "+0.0100 (the same at every seed: SE 0, Holm 0.000; 90% CI to ±0.0100)", report
        )

    def test_equivalence_only_where_the_test_queries_allow_it(self):
        rng = np.random.default_rng(5)
        users = np.arange(1, 106)  # The ML-1M weekly log's 105 test queries.
        per_query, records = {}, {}
        base_values = rng.random(105) * 0.2
        for row, shift in (("a", 0.0), ("b", 0.0004)):
            for seed in range(3):
                # The seeds agree closely; the queries differ a lot from one another.
                values = np.clip(
                    base_values + shift + 0.0002 * seed + rng.normal(0, 0.05, 105), 0, 1
                )
                per_query[(row, seed)] = {
                    "users": users,
                    "targets_digest": "t",
                    "values": {"recall@10": values},
                }
                record = _record(row, seed, float(values.mean()), 0.3)
                record["test"] = {"recall@10": float(values.mean())}
                record["num_test_queries"] = 105
                records[(row, seed)] = record
        # Paired by seed, the rows differ by about the same amount at every seed.
        for seed in range(3):
            records[("b", seed)]["test"]["recall@10"] = (
                records[("a", seed)]["test"]["recall@10"] + (0.001, -0.0005, 0.0012)[seed]
            )
        rows = _rows("a: --correction=none", "b: --correction=improved")
        summary = compare.summarize(rows, 3, records, "a", margin=0.01)
        result = summary["differences"]["b"]["recall@10"]
        self.assertLess(result["tost_p"], 0.05)  # The seeds alone: within ±0.01.
        # Without per-query values: not claimed, and the small test named.
        text = compare.advice(summary, "recall@10")
        self.assertIn(
            "the seeds alone would place it within ±0.0100 (TOST p 0.002), but the runs kept "
            "no per-query values to tell whether the test is large enough (105 queries is "
            "likely too small): no equivalence is claimed",
            text,
        )
        self.assertNotIn("equivalent", text)
        # With them: the queries' SE (about 0.007) is too large for ±0.01.
        compare.add_query_spread(summary, per_query, replicates=300)
        self.assertGreater(result["se_queries"], 5 * result["se"])
        self.assertGreater(result["tost_p_queries"], 0.05)
        text = compare.advice(summary, "recall@10")
        self.assertIn("but the test is too small to: with its queries' SE, TOST p ", text)
        self.assertNotIn("are equivalent", text)
        # A margin the queries' SE allows: claimed.
        summary = compare.summarize(rows, 3, records, "a", margin=0.05)
        compare.add_query_spread(summary, per_query, replicates=300)
        self.assertIn(
            "so b and a are equivalent within ±0.0500 (TOST p ",
            compare.advice(summary, "recall@10"),
        )
        self.assertAllClose(
            summary["differences"]["b"]["recall@10"]["excluded_queries"],
            significance.with_extra_se(result["mean"], result["se"], result["se_queries"], 2)[
                "excluded"
            ],
        )

    def test_the_bound_is_called_what_it_is(self):
        summary = _summary(
            {"a": self.BASE, "b": {"recall@10": [0.11, 0.12, 0.10], "recall@100": [0.3] * 3}}, "a"
        )
        text = compare.format_report(summary, "recall@10", "c", [], ["x"], False)
        self.assertIn(
            "X is the far end of the difference's 90% confidence interval over these seeds, on "
            "these test queries (TOST at 5%: two one-sided tests each reject a difference "
            "beyond ±X)",
            text,
        )
        self.assertIn("90% CI to ±", text)
        self.assertNotIn("95% bound", text)
        self.assertNotIn("excluded", text)

    def test_baselines_are_averaged_per_seed(self):
        rows = _rows("a: --correction=none", "b: --correction=standard")
        records = {}
        for row in ("a", "b"):
            for seed, popularity in ((0, 0.1), (1, 0.3)):
                record = _record(row, seed, 0.1, 0.3)
                record["baselines"] = {"popularity": {"recall@10": popularity}}
                records[(row, seed)] = record
        records[("b", 1)] = _record("b", 1, 0, 0, status="failed")
        summary = compare.summarize(rows, 2, records, "a")
        # Seed 0 (two records) and seed 1 (one) weigh alike: 0.2, not (0.1 + 0.1 + 0.3) / 3.
        self.assertAllClose(summary["baselines"]["popularity"]["recall@10"], 0.2)

    def test_the_committed_ml1m_and_table2_records_under_every_baseline(self):
        root = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "results", "compare")
        significant = 0
        for name in ("ml1m", "table2_5m"):
            directory = os.path.join(root, name)
            with open(os.path.join(directory, "compare.json")) as f:
                stored = json.load(f)
            rows = [
                compare.Row(row, tuple(compare._flag_pairs(arguments, "test")))
                for row, arguments in stored["rows"].items()
            ]
            runs = compare.plan(rows, stored["common"], 5, "/unused", directory)
            records = {
                (run.row.name, run.seed): compare.load_record(run)
                for run in runs
                if os.path.exists(run.record)
            }
            seeds = 1 + max(seed for _, seed in records)
            for row in rows:
                for margin in (None, 0.01):
                    summary = compare.summarize(rows, seeds, records, row.name, margin)
                    text = compare.advice(summary, "recall@10")
                    _named_differences(summary, text)
                    significant += sum(
                        r.get("p_holm", 1.0) < compare.ALPHA
                        for results in summary["differences"].values()
                        for r in results.values()
                    )
                    if name == "ml1m":  # 105 queries, no per-query values: none claimed.
                        self.assertNotIn("are equivalent", text)
                        self.assertIn(f"No row beats {row.name} at any metric", text)
        self.assertGreater(significant, 20)  # Table 2's rows differ at most metrics.


class RecordsAndRerunsTest(tf.test.TestCase):
    def test_a_damaged_record_is_named(self):
        results = tempfile.mkdtemp()
        rows = _rows("a: --correction=none", "b: --correction=improved")
        run = compare.plan(rows, [], 1, tempfile.mkdtemp(), results)[0]
        os.makedirs(os.path.dirname(run.record))
        with open(run.record, "w") as f:
            f.write('{"status": "fini')
        with self.assertRaisesRegex(
            compare.DamagedRecord,
            f"{run.record} is damaged: a run's record that is not readable JSON "
            r"\(Unterminated string.*\)\. Delete it \(the same command then trains that run "
            "again\\)",
        ):
            compare.load_record(run)
        with open(os.path.join(results, "compare.json"), "w") as f:
            f.write("[")
        with self.assertRaisesRegex(compare.DamagedRecord, "compare.json is damaged"):
            compare._check_stored(results, rows, [])

    def test_training_flags_that_a_row_sets_are_refused_after_the_dashes(self):
        rows = compare.make_rows([], ["standard", "improved"])
        with self.assertRaisesRegex(
            ValueError,
            "The flags after -- set --correction=none, which the rows set \\(row standard: "
            "--correction=standard\\)",
        ):
            compare.check_common(["--preset=smoke", "--correction=none"], rows)
        rows = _rows("a: --dim=8", "b: --dim=16")
        with self.assertRaisesRegex(ValueError, "set --dim=32, which the rows set \\(row a"):
            compare.check_common(["--dim=32"], rows)
        self.assertEqual(compare.check_common(["--seeds_x=1"], rows), [("seeds_x", "1")])

    def test_data_files_are_fingerprinted_and_a_changed_one_refused(self):
        directory = tempfile.mkdtemp()
        small, big = os.path.join(directory, "a.csv"), os.path.join(directory, "b.csv")
        with open(small, "w") as f:
            f.write("user_id,item_id\n1,2\n")
        with open(big, "wb") as f:
            f.write(os.urandom(3 << 10))
        config = configs.PRESETS["industrial_smoke"].replace(
            dataset="events", data_path=os.path.join(directory, "*.csv")
        )
        self.assertEqual(compare.data_files(config), [small, big])
        with (
            mock.patch.object(compare, "WHOLE_HASH_BYTES", 1 << 10),
            mock.patch.object(compare, "HASH_BYTES", 256),
        ):
            prints = compare.fingerprints({"a": config})
            self.assertEqual(prints[small]["hashed"], "whole")
            self.assertEqual(prints[big]["hashed"], "first and last MiB")
            self.assertEqual(prints[small]["size"], 20)
            results = tempfile.mkdtemp()
            rows = _rows("a: --correction=none", "b: --correction=improved")
            compare._check_stored(results, rows, [], data=prints)
            with open(os.path.join(results, "compare.json")) as f:
                stored = json.load(f)
            self.assertEqual(stored["data_files"], prints)
            self.assertEqual(stored["working_directory"], os.getcwd())
            # A record keeps them, and where the command ran.
            run = compare.plan(rows, [], 1, tempfile.mkdtemp(), results)[0]
            os.makedirs(run.directory)
            for path in (RunFiles(run.directory).metrics, RunFiles(run.directory).config):
                with open(path, "w") as f:
                    json.dump({"test": {"recall@10": 0.1}}, f)
            record = compare.write_record(run, prints)
            self.assertEqual(record["data_files"], prints)
            self.assertEqual(record["working_directory"], os.getcwd())
            # The small file's content changes (same size); the big one's mtime alone.
            with open(small, "w") as f:
                f.write("user_id,item_id\n1,3\n")
            os.utime(big, (1, 1))
            changed = compare.fingerprints({"a": config})
            compare._check_stored(results, rows, [], data=changed)  # Nothing trained yet.
            compare._check_stored(results, rows, [], data=prints)
            with self.assertRaisesRegex(
                ValueError,
                f"{results} holds runs trained on other data: {small} \\(other content: sha256 "
                f"of the whole differs\\); {big} \\(modified since: only its first and last MiB "
                "are hashed, and its mtime differs\\)\\. A rerun would compare runs of two logs",
            ):
                compare._check_stored(results, rows, [], data=changed, trained=True)
            os.remove(big)
            with self.assertRaisesRegex(ValueError, f"{big} \\(gone\\)"):
                compare._check_stored(
                    results, rows, [], data=compare.fingerprints({"a": config}), trained=True
                )

    def test_export_names_keep_weights_where_compare_removed_them(self):
        rows = _rows("a: --correction=none", "b: --correction=improved")
        run = compare.plan(rows, [], 1, tempfile.mkdtemp(), tempfile.mkdtemp())[0]
        files = RunFiles(run.directory)
        os.makedirs(os.path.dirname(files.best))
        with open(files.best + ".index", "w") as f:
            f.write("x")
        with open(files.metrics, "w") as f:
            json.dump({}, f)
        self.assertIsNone(compare.removed_weights(run.directory))
        compare.prune(run)
        message = compare.removed_weights(run.directory)
        self.assertIn(
            f"{run.directory} holds no weights to export: tfrs-logq compare removed them once "
            f"it had recorded the run ({os.path.abspath(run.record)}), as it does without "
            "--keep_weights.",
            message,
        )
        from pipelines import export  # pylint: disable=import-outside-toplevel

        values = absl_flags.FlagValues()
        export.define_flags(values)
        values(["export"])
        with mock.patch.object(export, "FLAGS", values):
            with self.assertRaises(SystemExit) as raised:
                export.main(["export", run.directory])
        self.assertEqual(str(raised.exception.code), f"error: {message}")

    def test_the_report_draws_a_forest_plot(self):
        records, _ = ReportTest()._records()
        rows = _rows("a: --correction=none", "b: --correction=standard", "c: --correction=improved")
        results = tempfile.mkdtemp()
        runs = compare.plan(rows, [], 3, tempfile.mkdtemp(), results)
        for run in runs:
            os.makedirs(os.path.dirname(run.record), exist_ok=True)
            with open(run.record, "w") as f:
                json.dump(records[(run.row.name, run.seed)], f)
        path = compare.write_report(runs, rows, "a", None, "", "c", [], False, results)
        png = os.path.join(results, "report.png")
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertLess(os.path.getsize(png), 200_000)
        with open(path) as f:
            self.assertIn("![Each row − a, per metric](report.png)", f.read())


if __name__ == "__main__":
    tf.test.main()
