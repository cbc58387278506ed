"""Significance tests for the differences the reports print, in the standard library only.

Student's t p-values by exact finite sums; a t-test of a difference and its standard error;
Welch's unpaired t (the paper campaign's rows, their seeds unpaired); a paired t over
per-query differences (`pipelines.evaluate --against`); Holm's adjustment over a family of
comparisons; what a difference's confidence interval excludes (TOST); and the paired-by-seed
differences the comparison reports (`tfrs-logq compare`, the industrial report) print.
"""

import math
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np


def student_t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with `df` (a positive integer) degrees of freedom.

    Exact finite sums (Abramowitz & Stegun 26.7.3-4) with theta = atan(|t| / sqrt(df)):
    A(t | df) = 2 theta / pi + 2 / pi sin cos (1 + 2/3 cos^2 + ...) for odd df, and
    sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...) for even df; p = 1 - A.
    """
    if df < 1 or int(df) != df:
        raise ValueError(f"`df` must be a positive integer; received df={df!r}.")
    theta = math.atan(abs(t) / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:  # Odd: terms 1, 2/3 c^2, (2*4)/(3*5) c^4, ... up to c^(df - 3).
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= 2 * k / (2 * k + 1) * cos2
            total += term
        area = 2 / math.pi * (theta + sin * math.cos(theta) * total)
    else:  # Even: terms 1, 1/2 c^2, (1*3)/(2*4) c^4, ... up to c^(df - 2).
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= (2 * k - 1) / (2 * k) * cos2
            total += term
        area = sin * total
    return min(max(1.0 - area, 0.0), 1.0)


def t_test(difference: float, error: float, df: int) -> Tuple[float, float]:
    """(t, two-sided p) of `difference` with standard error `error` and `df` degrees of
    freedom. A zero error gives t = +-inf and p = 0, or t = 0 and p = 1 for no difference."""
    if error > 0:
        t = difference / error
        return t, student_t_two_sided_p(t, df)
    return (math.copysign(math.inf, difference), 0.0) if difference else (0.0, 1.0)


def welch_t(gap: float, std_a: float, n_a: int, std_b: float, n_b: int) -> Tuple[float, int, float]:
    """Welch's unpaired t for a difference of means `gap`: (t, df, two-sided p).

    df is the Welch-Satterthwaite value rounded down, at least 1 (n_a + n_b - 2 when
    both spreads are 0, where it is undefined).
    """
    var_a, var_b = std_a**2 / n_a, std_b**2 / n_b
    if var_a + var_b > 0:
        df = (var_a + var_b) ** 2 / (var_a**2 / (n_a - 1) + var_b**2 / (n_b - 1))
        df = max(1, int(math.floor(df + 1e-9)))
    else:
        df = n_a + n_b - 2
    t, p = t_test(gap, math.sqrt(var_a + var_b), df)
    return t, df, p


def paired_t(differences: Union[Sequence[float], np.ndarray]) -> Dict[str, float]:
    """Paired t-test of per-unit differences d: {"n", "difference": mean of d, "se":
    std(d) / sqrt(n) (std with n - 1), "t", "p": two-sided, n - 1 degrees of freedom}."""
    d = np.asarray(differences, np.float64)
    if d.ndim != 1 or d.size < 2:
        raise ValueError(
            f"A paired standard error needs at least 2 pairs; received "
            f"{d.size if d.ndim == 1 else d.shape}."
        )
    difference = float(d.mean())
    error = float(d.std(ddof=1) / math.sqrt(d.size))
    t, p = t_test(difference, error, d.size - 1)
    return {"n": int(d.size), "difference": difference, "se": error, "t": t, "p": p}


def paired(values_a: Sequence[float], values_b: Sequence[float]) -> Dict[str, float]:
    """Paired comparison of b against a over the same units (queries, or seeds):
    `paired_t` of d = b - a, with "mean_a" and "mean_b"."""
    a, b = np.asarray(values_a, np.float64), np.asarray(values_b, np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(
            f"Paired values need the same units: received shapes {a.shape} and {b.shape}."
        )
    return dict(paired_t(b - a), mean_a=float(a.mean()), mean_b=float(b.mean()))


def t_upper_p(t: float, df: int) -> float:
    """P(T >= t) for Student's t with `df` degrees of freedom (one-sided)."""
    half = student_t_two_sided_p(t, df) / 2
    return half if t >= 0 else 1.0 - half


def t_quantile(probability: float, df: int) -> float:
    """The t with P(T <= t) = `probability` (in (0, 1)) for `df` degrees of freedom, by
    bisection on `t_upper_p` (to 1e-10)."""
    if not 0.0 < probability < 1.0:
        raise ValueError(f"`probability` must be in (0, 1); received probability={probability!r}.")
    low, high = -1.0, 1.0
    while 1.0 - t_upper_p(low, df) > probability:
        low *= 2
    while 1.0 - t_upper_p(high, df) < probability:
        high *= 2
    while high - low > 1e-10:
        middle = (low + high) / 2
        if 1.0 - t_upper_p(middle, df) < probability:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def holm(p_values: Sequence[float]) -> List[float]:
    """Holm-Bonferroni adjusted p-values, in the order given: the i-th smallest of m is
    multiplied by m - i (i from 0), then made non-decreasing in that order and capped at 1.
    Rejecting where the adjusted p < alpha keeps the family-wise error rate at alpha over
    the m comparisons."""
    p = [float(value) for value in p_values]
    if any(not 0.0 <= value <= 1.0 for value in p):
        raise ValueError(f"p-values must lie in [0, 1]; received {p_values!r}.")
    order = sorted(range(len(p)), key=p.__getitem__)
    adjusted, running = [0.0] * len(p), 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[index]))
        adjusted[index] = running
    return adjusted


def equivalence(
    differences: Union[Sequence[float], np.ndarray],
    margin: Optional[float] = None,
    alpha: float = 0.05,
) -> Dict[str, float]:
    """What paired differences d (per seed or per query) exclude, by two one-sided tests
    (TOST, Schuirmann 1987): `paired_t`'s numbers and "excluded", the smallest margin m for
    which both one-sided tests reject |mean difference| >= m at `alpha` (the farther bound
    of the 1 - 2 alpha confidence interval): a difference larger than it is excluded. With
    `margin`, "tost_p", the larger of the two one-sided p-values (< alpha: the difference
    lies within +-margin), and "equivalent"."""
    result = paired_t(differences)
    df = int(result["n"]) - 1
    spread = t_quantile(1.0 - alpha, df) * result["se"]
    result["excluded"] = abs(result["difference"]) + spread
    if margin is not None:
        if not margin > 0:
            raise ValueError(f"`margin` must be positive; received margin={margin!r}.")
        if result["se"] > 0:
            below = t_upper_p((result["difference"] + margin) / result["se"], df)
            above = 1.0 - t_upper_p((result["difference"] - margin) / result["se"], df)
            result["tost_p"] = max(below, above)
        else:
            result["tost_p"] = 0.0 if abs(result["difference"]) < margin else 1.0
        result["equivalent"] = float(result["tost_p"] < alpha)
    return result


def paired_by_seed(
    a: Mapping[int, Optional[float]],
    b: Mapping[int, Optional[float]],
    margin: Optional[float] = None,
    test_constant: bool = False,
) -> Optional[Dict[str, Any]]:
    """b - a seed by seed, over the seeds both have a value for (None: no value): None
    without one; else {"seeds", "d": per seed, "mean", "same"} and, with 2 seeds or more,
    `equivalence`'s "se", "t", "p", "excluded" (and with `margin`, "tost_p"). "same": the
    difference is the same at every seed up to rounding (two rows that train alike, or one
    that is ahead by a constant), whose SE is 0. By default it has no "p", and no place in a
    Holm family (`holm_adjust`); with `test_constant`, its SE is 0 and its t infinite: p = 0
    for a non-zero difference (every seed saw it), p = 1 for none, "excluded" |mean| (a
    difference of 0 at every seed excludes any other), and it takes its place in the family."""
    seeds = sorted(s for s in set(a) & set(b) if a[s] is not None and b[s] is not None)
    if not seeds:
        return None
    d = [float(b[s]) - float(a[s]) for s in seeds]  # type: ignore[arg-type]
    result: Dict[str, Any] = {"seeds": seeds, "d": d, "mean": float(np.mean(d)), "same": False}
    if len(d) > 1:
        test = equivalence(d, margin=margin)
        if test["se"] <= 1e-12 * max(abs(result["mean"]), 1e-4):
            result["same"] = True
            if test_constant:
                differs = abs(result["mean"]) > 1e-12
                result.update(
                    se=0.0,
                    t=math.copysign(math.inf, result["mean"]) if differs else 0.0,
                    p=0.0 if differs else 1.0,
                    excluded=abs(result["mean"]) if differs else 0.0,
                )
                if margin is not None:
                    result["tost_p"] = 0.0 if result["excluded"] < margin else 1.0
        else:
            result.update(se=test["se"], t=test["t"], p=test["p"], excluded=test["excluded"])
            if margin is not None:
                result["tost_p"] = test["tost_p"]
    return result


def with_extra_se(
    mean: float,
    se: float,
    extra_se: float,
    df: int,
    margin: Optional[float] = None,
    alpha: float = 0.05,
) -> Dict[str, float]:
    """TOST of a difference `mean` whose SE over seeds `se` leaves out another source of
    uncertainty with SE `extra_se` (the test queries': another draw of test users): with
    se_total = sqrt(se^2 + extra_se^2) on the seeds' `df` degrees of freedom (conservative:
    the extra SE, over thousands of queries, has many more), {"se_total", "excluded": the
    far end of the 1 - 2 alpha interval |mean| + t(1 - alpha, df) se_total} and with
    `margin`, "tost_p" against +-margin."""
    if df < 1:
        raise ValueError(f"`df` must be a positive integer; received df={df!r}.")
    total = math.sqrt(se**2 + extra_se**2)
    result = {"se_total": total, "excluded": abs(mean) + t_quantile(1.0 - alpha, df) * total}
    if margin is not None:
        if total > 0:
            below = t_upper_p((mean + margin) / total, df)
            above = 1.0 - t_upper_p((mean - margin) / total, df)
            result["tost_p"] = max(below, above)
        else:
            result["tost_p"] = 0.0 if abs(mean) < margin else 1.0
    return result


def holm_adjust(results: Iterable[Optional[Dict[str, Any]]]) -> None:
    """Sets "p_holm", Holm's adjusted p over the family, on each of `results` (one family of
    comparisons, `paired_by_seed`'s) that has a "p"."""
    tested = [r for r in results if r is not None and "p" in r]
    for result, adjusted in zip(tested, holm([r["p"] for r in tested])):
        result["p_holm"] = adjusted
