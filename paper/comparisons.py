"""The report's numbers: each row's runs summarised over seeds, the paper's orderings tested
(unpaired), and pairs of rows compared by seed and by test user (paired)."""

import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from paper import curves
from paper.plan import Run
from paper.plan import paper_numbers
from paper.plan import row_key
from paper.records import Recorded
from paper.records import finished
from paper.records import load
from pipelines import per_query
from pipelines import significance

# The orderings the paper reports: (worse-or-equal, better) pairs.
ORDERINGS = (
    ("in_batch-none", "in_batch-standard"),
    ("in_batch-standard", "in_batch-improved"),
    ("mixed-none", "mixed-standard"),
    ("mixed-standard", "mixed-improved"),
)
# Paper numbers this close are one unit of the 4 digits Table 1 prints apart: no ordering.
PAPER_TIE = 1.5e-4


def summarise(values: Sequence[float]) -> Tuple[float, float, int]:
    """(mean, sample std (NaN for one value), n)."""
    values = np.asarray(values, np.float64)
    return (
        float(values.mean()),
        float(values.std(ddof=1)) if len(values) > 1 else float("nan"),
        len(values),
    )


def best_epoch_fit(runs: Sequence[Dict]) -> Optional[Tuple[int, float, float]]:
    """(n, correlation, least-squares slope per 100 epochs) of test NDCG@20 on the best epoch,
    over the `per_run` records that have one; None below 3 runs or with no spread to fit.

    Descriptive, not causal: how closely the test score follows where early stopping landed."""
    epochs, scores = (
        np.asarray(
            [(r["best_epoch"], r["ndcg@20"]) for r in runs if r.get("best_epoch") is not None],
            np.float64,
        )
        .reshape(-1, 2)
        .T
    )
    if len(epochs) < 3 or not (epochs.std() > 0 and scores.std() > 0):
        return None
    return (
        len(epochs),
        float(np.corrcoef(epochs, scores)[0, 1]),
        float(100 * np.polyfit(epochs, scores, 1)[0]),
    )


def aggregate(runs: Sequence[Run], recorded: Optional[Recorded] = None) -> Dict[str, Dict]:
    """Per row (and frequency source): the finished (or `recorded`) runs' metrics, summarised."""
    groups: Dict[str, Dict] = {}
    for run in runs:
        key = row_key(run.row.name, run.frequency)
        group = groups.setdefault(key, {"row": run.row, "frequency": run.frequency, "runs": []})
        if finished(run, recorded):
            group["runs"].append(dict(load(run, recorded), seed=run.seed))
    summary = {}
    for key, group in groups.items():
        found = group["runs"]
        entry = {
            "row": group["row"],
            "frequency": group["frequency"],
            "n": len(found),
            "planned_seeds": sum(1 for r in runs if r.directory.split(os.sep)[-2] == key),
        }
        if found:
            for metric in ("ndcg@20", "recall@20", "ndcg@10", "recall@10"):
                entry[metric] = summarise([m["test"][metric] for m in found])
            entry["epochs"] = summarise([m["epochs_run"] for m in found])
            entry["train_seconds"] = summarise([m["train_seconds"] for m in found])
            steps = [m["steps"] for m in found if m.get("steps") is not None]
            if steps:
                entry["steps"] = summarise(steps)
            entry["seeds"] = [m["seed"] for m in found]
            entry["by_seed"] = {m["seed"]: m["test"]["ndcg@20"] for m in found}
            entry["by_seed_curve"] = {
                m["seed"]: curves.curve_dict(m["validation_curve"])
                for m in found
                if m.get("validation_curve")
            }
            entry["by_seed_test_curve"] = {
                m["seed"]: curves.curve_dict(m["test_curve"]) for m in found if m.get("test_curve")
            }
            best = [m["best_epoch"] for m in found if m.get("best_epoch") is not None]
            if best:
                entry["best_epoch"] = summarise(best)
            entry["recorded_seeds"] = [m["seed"] for m in found if m.get("recorded")]
            entry["per_run"] = [
                {
                    "seed": m["seed"],
                    "ndcg@20": m["test"]["ndcg@20"],
                    "recall@20": m["test"]["recall@20"],
                    "plateau": m.get("validation_plateau"),
                    "best_epoch": m.get("best_epoch"),
                    "epochs": m["epochs_run"],
                    "steps": m.get("steps"),
                    "train_seconds": m["train_seconds"],
                }
                for m in found
            ]
            if "kl_to_truth" in found[0]:
                entry["kl_to_truth"] = summarise([m["kl_to_truth"] for m in found])
                entry["oracle_recall@10"] = summarise(
                    [m["baselines"]["oracle"]["recall@10"] for m in found]
                )
            banded = [m["by_popularity"] for m in found if m.get("by_popularity")]
            if banded:
                entry["banded_runs"] = len(banded)
                for band in ("head", "torso", "tail"):
                    entry[f"{band}_recall@10"] = summarise(
                        [bands[f"{band}_recall@10"] for bands in banded]
                    )
            entry["popularity_ndcg@20"] = summarise(
                [m["baselines"]["popularity"]["ndcg@20"] for m in found]
            )
        summary[key] = entry
    return summary


def ordering_verdicts(
    summary: Dict[str, Dict], metric: str = "ndcg@20", paper_split: Optional[str] = None
) -> List[str]:
    """One line per ordering of the paper: does it hold, and is the gap beyond the noise?

    The pairs are `ORDERINGS`, Table 1's leave-one-out orderings. With `paper_split`
    ("loo" or "temporal"), a pair is ordered as the paper's own numbers on that split
    order it, and the line quotes them: on the temporal split the paper has
    the standard rows above the improved ones (.1292 vs .1281 mixed, .1270 vs .1269
    in-batch), so that is the ordering tested there. Two paper numbers closer than
    `PAPER_TIE` (one unit of the 4 digits it prints) give no ordering: the line says the
    paper has them level and only whether ours differ.

    The rows are compared unpaired (their seeds may differ): Welch's t-test,
    t = gap / sqrt(s_a^2 / n_a + s_b^2 / n_b), with the Welch-Satterthwaite degrees
    of freedom rounded down (conservative, so that `student_t_two_sided_p` stays exact).
    The gap is 'beyond the seed-to-seed spread' when its two-sided p < 0.05.
    """
    lines = []
    for worse, better in ORDERINGS:
        a, b = summary.get(worse), summary.get(better)
        if not a or not b or not a["n"] or not b["n"]:
            continue
        papers = (
            (paper_numbers(worse, paper_split), paper_numbers(better, paper_split))
            if paper_split
            else (None, None)
        )
        papers = papers if all(papers) else None
        if papers and papers[0][0] > papers[1][0]:
            worse, better, a, b, papers = better, worse, b, a, papers[::-1]
        (mean_a, std_a, n_a), (mean_b, std_b, n_b) = a[metric], b[metric]
        gap = mean_b - mean_a
        if n_a > 1 and n_b > 1:
            t, df, p = significance.welch_t(gap, std_a, n_a, std_b, n_b)
            noise = (
                f"{'beyond' if p < 0.05 else 'within'} the seed-to-seed spread "
                f"(Welch t = {t:.2f} with {df} df, two-sided p = {_small(p, 3)})"
            )
        else:
            noise = "spread unknown (one seed)"
        if papers and papers[1][0] - papers[0][0] < PAPER_TIE:
            relation = "vs"
            verdict = "the paper has them level (one unit of its last digit apart), ours differ"
        else:
            relation = (
                ("<" if gap > 0 else ">=")
                if worse.endswith("none")
                else ("<=" if gap >= 0 else ">")
            )
            holds = gap > 0 if worse.endswith("none") else gap >= 0
            verdict = f"the paper's ordering {'holds' if holds else 'does not hold'},"
        lines.append(
            f"- {a['row'].label} {relation} {b['row'].label}: {metric} "
            f"{mean_a:.4f} (n={n_a}) vs {mean_b:.4f} (n={n_b}), gap {gap:+.4f}; "
            f"{verdict} {noise}."
            + (f" The paper: {papers[0][0]:.4f} vs {papers[1][0]:.4f}." if papers else "")
        )
    return lines


# Paired by seed (same seed: same data order and initialisation): (baseline, row, what it asks
# under the official profiles, where the standard rows correct the negatives only as released).
PAIRS = (
    ("mixed-standard", "mixed-improved", "improved vs the paper's standard (negatives only)"),
    ("mixed-standard", "mixed-standard_tfrs", "TFRS's standard vs the paper's standard"),
    ("mixed-standard_tfrs", "mixed-improved", "improved vs TFRS's standard"),
    ("full_softmax", "mixed-standard", "the paper's standard vs full softmax"),
    ("full_softmax", "mixed-improved", "improved vs full softmax"),
    ("in_batch-standard", "in_batch-improved", "improved vs the paper's standard, in-batch"),
    (
        "in_batch-standard",
        "in_batch-improved_pool",
        "improved (released pool) vs the paper's standard, in-batch",
    ),
    (
        "in_batch-standard",
        "in_batch-standard_tfrs",
        "TFRS's standard vs the paper's standard, in-batch",
    ),
    (
        "in_batch-standard_tfrs",
        "in_batch-improved_pool",
        "improved (released pool) vs TFRS's standard, in-batch",
    ),
    ("in_batch-none", "in_batch-standard", "the paper's standard vs no correction, in-batch"),
)


def _small(value: float, places: int) -> str:
    """`value` to `places` decimals, or to 2 significant digits where those would print 0."""
    return (
        f"{value:.{places}f}" if value == 0 or abs(value) >= 0.5 * 10**-places else f"{value:.1e}"
    )


def _verdict(difference: float, p: float) -> str:
    """How a paired difference reads at the 5% level."""
    if p >= 0.05:
        return "not different from equal at p < 0.05"
    return "higher at p < 0.05" if difference > 0 else "lower at p < 0.05"


def paired_differences(
    summary: Dict[str, Dict],
    pairs=PAIRS,
    by: str = "by_seed",
    metric: str = "NDCG@20",
    official: bool = True,
) -> List[str]:
    """One line per pair of rows with common seeds: the mean of the per-seed differences
    d = row - baseline of `by` (test NDCG@20; or "by_seed_curve" / "by_seed_test_curve":
    validation NDCG@10 / test NDCG@20 averaged over the pair's common window,
    `curves.window_difference`), each seed's d, its standard error
    std(d) / sqrt(n), and a paired t-test: t = mean / SE with n - 1 degrees of freedom,
    its two-sided p, and whether d differs from 0 at p < 0.05. (With n = 4, 2 SE is
    p = 0.14: the t threshold is 3.18 SE.) Outside the `official` profiles the standard
    rows are TFRS's form, so each pair is named by its rows' labels instead of `pairs`'
    question."""
    lines = []
    for base, row, question in pairs:
        a, b = summary.get(row_key(base, "static")), summary.get(row_key(row, "static"))
        if not a or not b or not a["n"] or not b["n"]:
            continue
        differences = {}
        for seed in sorted(set(a.get(by, {})) & set(b.get(by, {}))):
            value = (
                curves.window_difference(a[by][seed], b[by][seed])
                if by.endswith("_curve")
                else b[by][seed] - a[by][seed]
            )
            if value is not None:
                differences[seed] = value
        if not differences:
            continue
        seeds, d = list(differences), list(differences.values())
        mean = sum(d) / len(d)
        if len(d) > 1:
            test = significance.paired_t(d)
            error, t, p = test["se"], test["t"], test["p"]
            spread = ", ".join(f"{x:+.4f}" for x in d)
            if error <= 1e-12 * max(abs(mean), 1e-4):  # Rounding's spread: no t to speak of.
                spread += "; the same d at every seed, SE 0"
            else:
                verdict = _verdict(mean, p)
                spread += (
                    f"; SE {_small(error, 4)}, paired t = {t:.2f} with {len(d) - 1} "
                    f"df, two-sided p = {_small(p, 3)}; {b['row'].label} is {verdict}"
                )
        else:
            spread = "one pair: SE unknown"
        if not official:
            question = f"{b['row'].label} vs {a['row'].label}"
        lines.append(
            f"- {question}: d = {mean:+.4f} {metric} over {len(d)} paired seed"
            f"{'s' if len(d) > 1 else ''} ({', '.join(map(str, seeds))})"
            f"{': ' if len(d) > 1 else '; '}{spread}."
        )
    return lines


def paired_by_user(
    summary: Dict[str, Dict],
    per_query_dir: str,
    pairs=PAIRS,
    official: bool = True,
    metric: str = "ndcg@20",
) -> List[str]:
    """One line per pair of rows and seed whose per-query test metrics are both in
    `per_query_dir` (ROW/seedN.npz, `campaign.sh per_query`): d = row - baseline averaged over
    the test users, its standard error over users and a paired t-test
    (`per_query.compare`). That SE is the test set's sampling noise only; it says nothing of
    how another seed would land."""
    lines = []
    for base, row, question in pairs:
        a, b = summary.get(row_key(base, "static")), summary.get(row_key(row, "static"))
        if not a or not b or not a["n"] or not b["n"]:
            continue
        for seed in sorted(set(a.get("by_seed", {})) & set(b.get("by_seed", {}))):
            paths = [
                os.path.join(
                    per_query_dir, row_key(name, "static"), f"seed{seed}" + per_query.SUFFIX
                )
                for name in (base, row)
            ]
            if not all(os.path.exists(path) for path in paths):
                continue
            result = per_query.compare(*(per_query.load(path) for path in paths), *paths)[metric]
            verdict = _verdict(result["difference"], result["p"])
            name = question if official else f"{b['row'].label} vs {a['row'].label}"
            lines.append(
                f"- {name}, seed {seed}: d = {result['difference']:+.4f} "
                f"{metric.replace('ndcg', 'NDCG')} over {result['n']} test users "
                f"({result['mean_b']:.4f} against {result['mean_a']:.4f}); SE "
                f"{_small(result['se'], 4)}, paired t = {result['t']:.2f}, two-sided "
                f"p = {_small(result['p'], 3)}; {b['row'].label} is {verdict} on these "
                "users."
            )
    return lines
