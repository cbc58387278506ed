"""Tests of pipelines.significance against SciPy and t tables."""

import numpy as np
import tensorflow as tf
from scipy import stats

from pipelines import significance


class SignificanceTest(tf.test.TestCase):
    def test_student_t_p_values(self):
        # The 97.5% quantiles of t (tables) give p = 0.05; df 1 and 2 have closed forms.
        for t, df in (
            (12.706, 1),
            (4.303, 2),
            (3.182, 3),
            (2.776, 4),
            (2.571, 5),
            (2.228, 10),
            (2.042, 30),
        ):
            self.assertAlmostEqual(significance.student_t_two_sided_p(t, df), 0.05, places=4)
            self.assertAlmostEqual(significance.student_t_two_sided_p(-t, df), 0.05, places=4)
        self.assertAlmostEqual(significance.student_t_two_sided_p(1.0, 1), 0.5)
        self.assertAlmostEqual(significance.student_t_two_sided_p(2.0, 2), 1 - 2 / np.sqrt(6))
        self.assertEqual(significance.student_t_two_sided_p(0.0, 7), 1.0)
        with self.assertRaisesRegex(ValueError, "received df=0"):
            significance.student_t_two_sided_p(1.0, 0)

    def test_welch_t_against_scipy(self):
        for gap, std_a, n_a, std_b, n_b in (
            (0.1, 0.01, 3, 0.01, 3),
            (0.01, 0.01, 3, 0.03, 3),
            (-0.0007, 0.0014, 5, 0.0036, 5),
            (0.002, 0.004, 2, 0.001, 7),
        ):
            t, df, p = significance.welch_t(gap, std_a, n_a, std_b, n_b)
            expected = stats.ttest_ind_from_stats(gap, std_b, n_b, 0.0, std_a, n_a, equal_var=False)
            self.assertAlmostEqual(t, expected.statistic, places=10)
            # df rounded down: p is at least SciPy's (fractional df), never below.
            self.assertEqual(
                df,
                max(
                    1,
                    int(
                        np.floor(
                            (std_a**2 / n_a + std_b**2 / n_b) ** 2
                            / (
                                (std_a**2 / n_a) ** 2 / (n_a - 1)
                                + (std_b**2 / n_b) ** 2 / (n_b - 1)
                            )
                        )
                    ),
                ),
            )
            self.assertGreaterEqual(p, expected.pvalue - 1e-12)
            self.assertAlmostEqual(p, 2 * stats.t.sf(abs(t), df), places=12)
        self.assertEqual(significance.welch_t(0.0, 0.0, 3, 0.0, 3), (0.0, 4, 1.0))
        self.assertEqual(significance.welch_t(0.01, 0.0, 3, 0.0, 3)[2], 0.0)

    def test_paired_against_scipy(self):
        rng = np.random.default_rng(0)
        a = rng.uniform(size=500)
        b = a + rng.normal(0.01, 0.05, size=500)
        got = significance.paired(a, b)
        expected = stats.ttest_rel(b, a)
        self.assertEqual(got["n"], 500)
        self.assertAlmostEqual(got["mean_a"], a.mean(), places=12)
        self.assertAlmostEqual(got["mean_b"], b.mean(), places=12)
        self.assertAlmostEqual(got["difference"], (b - a).mean(), places=12)
        self.assertAlmostEqual(got["se"], (b - a).std(ddof=1) / np.sqrt(500), places=12)
        self.assertAlmostEqual(got["t"], expected.statistic, places=8)
        self.assertAlmostEqual(got["p"], expected.pvalue, places=8)
        # Many pairs (a test set's 6,040 users): the exact sums still agree with SciPy.
        a = rng.uniform(size=6040)
        b = a + rng.normal(0.001, 0.05, size=6040)
        self.assertAlmostEqual(
            significance.paired(a, b)["p"], stats.ttest_rel(b, a).pvalue, places=8
        )
        self.assertEqual(significance.paired([0.1, 0.2], [0.1, 0.2])["p"], 1.0)

    def test_paired_bad_input(self):
        with self.assertRaisesRegex(
            ValueError,
            r"same units: received shapes \(3,\) and "
            r"\(2,\)",
        ):
            significance.paired([1, 2, 3], [1, 2])
        with self.assertRaisesRegex(ValueError, "at least 2 pairs; received 1"):
            significance.paired([1.0], [2.0])


if __name__ == "__main__":
    tf.test.main()


class FamilyAndEquivalenceTest(tf.test.TestCase):
    def test_t_quantile_against_scipy(self):
        for df in (1, 2, 4, 19, 200):
            for probability in (0.025, 0.5, 0.9, 0.95, 0.999):
                self.assertAllClose(
                    significance.t_quantile(probability, df),
                    stats.t.ppf(probability, df),
                    atol=1e-7,
                    msg=(probability, df),
                )
        with self.assertRaisesRegex(ValueError, r"received probability=1\.0"):
            significance.t_quantile(1.0, 3)

    def test_holm_by_hand(self):
        # m = 4: 0.01 x 4, 0.02 x 3, 0.03 x 2 = 0.06 (kept at least 0.06), 0.5 x 1.
        self.assertAllClose(significance.holm([0.03, 0.5, 0.01, 0.02]), [0.06, 0.5, 0.04, 0.06])
        # Six comparisons, one at 0.021: 0.126 adjusted (the audit's 0.12).
        self.assertAllClose(significance.holm([0.021, 0.3, 0.4, 0.5, 0.6, 0.7])[0], 0.126)
        self.assertEqual(significance.holm([0.9, 0.8]), [1.0, 1.0])  # 0.8 x 2, capped.
        with self.assertRaisesRegex(ValueError, "p-values must lie in"):
            significance.holm([0.1, 1.5])

    def test_tost_against_scipy_one_sided_tests(self):
        rng = np.random.default_rng(0)
        d = rng.normal(0.002, 0.01, size=5)
        result = significance.equivalence(d, margin=0.02)
        n, mean, se = d.size, d.mean(), d.std(ddof=1) / np.sqrt(d.size)
        lower = stats.t.sf((mean + 0.02) / se, n - 1)  # H0: difference <= -margin.
        upper = stats.t.cdf((mean - 0.02) / se, n - 1)  # H0: difference >= +margin.
        self.assertAllClose(result["tost_p"], max(lower, upper), atol=1e-9)
        self.assertEqual(result["equivalent"], float(max(lower, upper) < 0.05))
        # "excluded": the margin at which the TOST's p is exactly alpha.
        at_bound = significance.equivalence(d, margin=result["excluded"])
        self.assertAllClose(at_bound["tost_p"], 0.05, atol=1e-7)
        self.assertAllClose(
            result["excluded"], abs(mean) + stats.t.ppf(0.95, n - 1) * se, atol=1e-9
        )
        with self.assertRaisesRegex(ValueError, "received margin=0"):
            significance.equivalence(d, margin=0)

    def test_paired_by_seed_against_scipy(self):
        a = {0: 0.10, 1: 0.12, 2: 0.11, 3: 0.13}
        b = {0: 0.11, 1: 0.125, 2: 0.13, 4: 0.5}  # Seed 3 and 4: only one side.
        result = significance.paired_by_seed(a, b, margin=0.05)
        self.assertEqual(result["seeds"], [0, 1, 2])
        self.assertAllClose(result["d"], [0.01, 0.005, 0.02])
        scipy = stats.ttest_rel([0.11, 0.125, 0.13], [0.10, 0.12, 0.11])
        self.assertAllClose([result["t"], result["p"]], [scipy.statistic, scipy.pvalue])
        self.assertFalse(result["same"])
        self.assertIn("tost_p", result)
        # A seed without a value is not paired; one seed gives no test; none gives None.
        self.assertNotIn("p", significance.paired_by_seed({0: 0.1, 1: None}, {0: 0.2, 1: 0.3}))
        self.assertIsNone(significance.paired_by_seed({0: 0.1}, {1: 0.2}))
        # The same difference at every seed: no t, and outside Holm's family.
        same = significance.paired_by_seed({0: 0.1, 1: 0.2}, {0: 0.1, 1: 0.2})
        self.assertTrue(same["same"])
        self.assertNotIn("p", same)
        family = [result, same, None, dict(result)]
        significance.holm_adjust(family)
        self.assertAllClose(family[0]["p_holm"], min(1.0, 2 * result["p"]))
        self.assertNotIn("p_holm", same)
        # With test_constant (compare's): a lead at every seed is a difference, none is level.
        ahead = significance.paired_by_seed(
            {0: 0.1, 1: 0.2, 2: 0.3}, {0: 0.11, 1: 0.21, 2: 0.31}, margin=0.05, test_constant=True
        )
        self.assertTrue(ahead["same"])
        self.assertEqual((ahead["se"], ahead["p"], ahead["t"]), (0.0, 0.0, np.inf))
        self.assertAllClose([ahead["excluded"], ahead["tost_p"]], [0.01, 0.0])
        level = significance.paired_by_seed(
            {0: 0.1, 1: 0.2}, {0: 0.1, 1: 0.2}, margin=0.05, test_constant=True
        )
        self.assertEqual((level["p"], level["excluded"], level["tost_p"]), (1.0, 0.0, 0.0))
        family = [result, ahead, level]
        significance.holm_adjust(family)
        self.assertEqual([r["p_holm"] for r in family[1:]], [0.0, 1.0])

    def test_with_extra_se_against_scipy(self):
        mean, se, extra, df = 0.004, 0.001, 0.003, 4
        result = significance.with_extra_se(mean, se, extra, df, margin=0.01)
        total = np.hypot(se, extra)
        self.assertAllClose(result["se_total"], total)
        self.assertAllClose(result["excluded"], abs(mean) + stats.t.ppf(0.95, df) * total)
        tost = max(stats.t.sf((mean + 0.01) / total, df), stats.t.cdf((mean - 0.01) / total, df))
        self.assertAllClose(result["tost_p"], tost)
        # No extra uncertainty: equivalence's own bound.
        d = [0.003, 0.005, 0.002, 0.006, 0.004]
        plain = significance.equivalence(d, margin=0.01)
        self.assertAllClose(
            significance.with_extra_se(plain["difference"], plain["se"], 0.0, 4, 0.01)["excluded"],
            plain["excluded"],
        )
        with self.assertRaisesRegex(ValueError, "received df=0"):
            significance.with_extra_se(0.0, 1.0, 1.0, 0)
