"""The report of issue 48's campaign (`paper.industrial`): docs/industrial_claim.md and its
calibration plots, from the runs' records alone (RESULTS_DIR/EXPERIMENT/ROW/seedN.json), so
that a fresh clone rebuilds it without a run directory.

Per experiment: Recall@10/100/1000 and NDCG@10 (mean ± std over seeds) with popularity and
the oracle beside them, the KL from the true next-item law to the model's softmax, paired
differences by seed (SE, paired t, p: `pipelines.significance.paired_t`), Recall by popularity
thirds, and the calibration of the model's P(p|u) on the KL queries' targets against the true
one, with where each softmax puts its mass; the lr experiment as one grid table. Then the
advice, written only once every run of the plan is recorded (SEEDS seeds a row, the lr grid
`industrial_plan.EXPERIMENT_SEEDS`).
"""

import json
import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from paper import industrial_plan as plan_lib
from paper.comparisons import _small
from paper.comparisons import summarise
from paper.industrial_plan import IndustrialRun
from pipelines import configs
from pipelines import provenance as provenance_lib
from pipelines import significance

METRICS = ("recall@10", "recall@100", "recall@1000", "ndcg@10")
# Paired differences: (experiment, setting, row) b minus a, per seed; "*" is each setting of
# the experiment.
PAIRS = {
    "main": (
        ("improved", "standard"),
        ("improved", "standard_negatives"),
        ("standard", "standard_negatives"),
        ("standard", "none"),
        ("standard_negatives", "none"),
        ("improved", "none"),
        ("improved", "sampled_reference"),
        ("standard", "sampled_reference"),
    ),
    "inbatch": (("standard", "none"), ("improved", "none"), ("improved", "standard")),
    "catalog": (("improved", "standard"),),
    "skew": (("improved", "standard"),),
    "lr": (("improved", "standard"),),
}
# Mixed (main) against in-batch negatives, row by row, paired by seed.
NEGATIVES_ROWS = ("none", "standard", "improved")
# Calibration: bins of the true log10 P(p|u) this wide; a bin with fewer targets is not drawn.
BIN_WIDTH = 0.5
MIN_BIN = 5
BANDS = ("head", "torso", "tail")
TITLES = {
    "main": "Main: every row at the preset's catalog, mixed negatives",
    "inbatch": "In-batch negatives",
    "catalog": "Catalog size: standard against improved",
    "skew": "Popularity skew: standard against improved",
    "lr": "Learning rate: standard against improved on the 100k-item log",
}

Records = Dict[Tuple[str, str, str, int], Dict]  # (experiment, setting, row, seed): record
CellRow = Tuple[str, str, str]  # (experiment, setting, row)
# The runs whose records named a commit the repository lacks (LOST_REVISIONS): their records
# are deleted (git's history keeps them), and this folder of the results directory keeps
# ARCHIVE_INDEX, which names each run by its record's path and its training seconds, no
# numbers. The report names the settings they leave without evidence and the command that
# re-runs each (`lost_evidence`).
ARCHIVE_DIR = "unreproducible"
ARCHIVE_INDEX = "index.json"


def collect(runs: Sequence[IndustrialRun], results_dir: str) -> Records:
    """The records of `runs` that exist under `results_dir`, by (experiment, setting, row,
    seed): a shared run's record under each experiment that plans it."""
    found = {}
    for run in runs:
        value = plan_lib.load_record(run, results_dir)
        if value is not None:
            found[(run.experiment, run.setting, run.row, run.seed)] = value
    return found


def run_key(run: IndustrialRun) -> Tuple[str, str, str, int]:
    """The run's key in `Records`."""
    return (run.experiment, run.setting, run.row, run.seed)


def archived(runs: Sequence[IndustrialRun], results_dir: str) -> Records:
    """The runs of `runs` that RESULTS_DIR/ARCHIVE_DIR/ARCHIVE_INDEX lists (`collect`'s keys),
    each as {"git_revision": the lost commit (LOST_REVISIONS's, "+dirty" where so),
    "train_seconds"}: what they were, not evidence."""
    path = os.path.join(results_dir, ARCHIVE_DIR, ARCHIVE_INDEX)
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        index = json.load(f)
    commit = next(
        (full for full in LOST_REVISIONS if full.startswith(index["lost_commit"])),
        index["lost_commit"],
    )
    revision = commit + ("+dirty" if index.get("dirty") else "")
    return {
        run_key(run): {
            "git_revision": revision,
            "train_seconds": index["runs"][run.record].get("train_seconds"),
        }
        for run in runs
        if run.record in index["runs"]
    }


def _pm(values: Sequence[float], places: int = 4) -> str:
    if not values:
        return "–"
    mean, std, _ = summarise(values)
    return f"{mean:.{places}f}" if math.isnan(std) else f"{mean:.{places}f} ± {std:.{places}f}"


def _by_seed(records: Records, experiment: str, setting: str, row: str) -> Dict[int, Dict]:
    return {
        seed: value
        for (e, s, r, seed), value in records.items()
        if (e, s, r) == (experiment, setting, row)
    }


def metric(value: Dict, name: str) -> Optional[float]:
    """A record's number: a test metric (METRICS) or "kl_to_truth"."""
    if name == "kl_to_truth":
        return value.get("kl_to_truth")
    return value.get("test", {}).get(name)


def paired(a: Dict[int, Dict], b: Dict[int, Dict], name: str) -> Optional[Dict]:
    """b - a of `name`, seed by seed over the seeds both have
    (`pipelines.significance.paired_by_seed`: with 2 seeds or more, the paired t-test's
    "se", "t", "p", unless the difference is the same at every seed)."""
    return significance.paired_by_seed(
        {seed: metric(record, name) for seed, record in a.items()},
        {seed: metric(record, name) for seed, record in b.items()},
    )


def _spread(result: Dict) -> str:
    """The SE and p of a paired difference, as the report prints them."""
    if result.get("same"):
        return "the same at every seed"
    if "p" not in result:
        return "1 seed"
    holm = f", Holm {_small(result['p_holm'], 3)}" if "p_holm" in result else ""
    return (
        f"SE {_small(result['se'], 4)}, p {_small(result['p'], 3)}{holm}; "
        f"> {_small(result['excluded'], 4)} excluded"
    )


def _difference_cell(result: Optional[Dict]) -> str:
    return "–" if result is None else f"{result['mean']:+.4f} ({_spread(result)})"


def _paired_table(records: Records, pairs: Sequence[Tuple[CellRow, CellRow, str]]) -> List[str]:
    """One line per pair (b, a, name) with common seeds: b - a of every metric and the KL."""
    lines, rows = [], []
    for b, a, name in pairs:
        results = {
            m: paired(_by_seed(records, *a), _by_seed(records, *b), m)
            for m in METRICS + ("kl_to_truth",)
        }
        seeds = next((r["seeds"] for r in results.values() if r), None)
        if seeds is not None:
            rows.append((name, seeds, results))
    for m in METRICS + ("kl_to_truth",):  # Holm over the table's pairs, metric by metric.
        tested = [r[m] for _, _, r in rows if r[m] and "p" in r[m]]
        if len(tested) > 1:
            significance.holm_adjust(tested)
    for name, seeds, results in rows:
        lines.append(
            f"| {name} | {', '.join(map(str, seeds))} | "
            + " | ".join(_difference_cell(results[m]) for m in METRICS + ("kl_to_truth",))
            + " |"
        )
    if not lines:
        return []
    return [
        "",
        "Paired by seed: d = the first row minus the second at each seed both ran (the "
        "same log, test queries and initialisation), its mean, the standard error "
        "std(d)/sqrt(n) and the paired t-test's two-sided p (n - 1 df: with 3 seeds a "
        "difference needs 4.3 SE for p < 0.05); Holm: p adjusted over this table's pairs, "
        'metric by metric (a family-wise error rate of 5% where Holm < 0.05); "> X '
        'excluded": a mean difference larger than X in either direction is rejected by '
        "two one-sided t-tests at 5% (TOST: |d| + t(0.95, n - 1) SE), the size of effect "
        "the seeds rule out. KL: lower is closer to the truth.",
        "",
        "| pair | seeds | Recall@10 | Recall@100 | Recall@1000 | NDCG@10 | KL |",
        "|---|---|---|---|---|---|---|",
    ] + lines


def _pairs(experiment: str, cells: Sequence[plan_lib.Cell], labels: Dict[str, str]):
    result = []
    for cell in cells:
        suffix = f", {cell.label}" if experiment in ("catalog", "skew") else ""
        for b, a in PAIRS[experiment]:
            result.append(
                (
                    (experiment, cell.setting, b),
                    (experiment, cell.setting, a),
                    f"{labels[b]} − {labels[a]}{suffix}",
                )
            )
    if experiment == "inbatch":
        result += [
            (("main", "", row), ("inbatch", "", row), f"{labels[row]}: mixed − in-batch")
            for row in NEGATIVES_ROWS
        ]
    return result


def _baseline(runs: Dict[int, Dict], name: str, value: str) -> List[float]:
    """The baseline `name`'s `value` in each of `runs` that has it."""
    return [
        r["baselines"][name][value]
        for r in runs.values()
        if value in r.get("baselines", {}).get(name, {})
    ]


def _table(
    records: Records,
    experiment: str,
    cells: Sequence[plan_lib.Cell],
    labels: Dict[str, str],
    seeds: int,
    moved: Optional[Records] = None,
) -> List[str]:
    """The rows' metrics (mean ± std over seeds), with each cell's popularity and oracle; a
    row with no record but moved ones (`archived`) reads "no evidence", not "not run"."""
    lines = [
        "| setting | row | n | Recall@10 | Recall@100 | Recall@1000 | NDCG@10 | "
        "KL to truth (nats) | train s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in cells:
        pooled: Dict[int, Dict] = {}
        for row in plan_lib.experiment_rows(experiment):
            runs = _by_seed(records, experiment, cell.setting, row)
            pooled.update(runs)
            if not runs:
                state = (
                    "no evidence (records moved)"
                    if _by_seed(moved or {}, experiment, cell.setting, row)
                    else "not run"
                )
                lines.append(f"| {cell.label} | {labels[row]} | 0/{seeds} | {state} | | | | | |")
                continue
            values = list(runs.values())
            lines.append(
                f"| {cell.label} | {labels[row]} | {len(values)} | "
                + " | ".join(
                    _pm([metric(v, m) for v in values if metric(v, m) is not None]) for m in METRICS
                )
                + f" | {_pm([v['kl_to_truth'] for v in values if 'kl_to_truth' in v], 3)} | "
                + f"{_pm([v['train_seconds'] for v in values if 'train_seconds' in v], 0)} |"
            )
        # The baselines depend on the log and the test queries, not on the loss: one per seed.
        # The same at every seed (the log and its queries do not depend on it): the value.
        for name in ("popularity", "oracle"):
            values = [_baseline(pooled, name, m) for m in METRICS]
            cells_text = [
                f"{v[0]:.4f}" if v and max(v) - min(v) < 1e-12 else _pm(v) for v in values
            ]
            if any(text != "–" for text in cells_text):
                lines.append(
                    f"| {cell.label} | *{name}* | {len(pooled)} | "
                    + " | ".join(cells_text)
                    + " | | |"
                )
    return lines


def _bands(
    records: Records, experiment: str, cells: Sequence[plan_lib.Cell], labels: Dict[str, str]
) -> List[str]:
    """Recall@k of the test targets in each third of the catalog by training count."""
    keys = sorted(
        {key for value in records.values() for key in value.get("by_popularity", {})},
        key=lambda k: (int(k.split("@")[1]), BANDS.index(k.split("_")[0])),
    )
    if not keys:
        return []
    lines = []
    for cell in cells:
        pooled: Dict[int, Dict] = {}
        for row in plan_lib.experiment_rows(experiment):
            runs = _by_seed(records, experiment, cell.setting, row)
            pooled.update(runs)
            bands = [r["by_popularity"] for r in runs.values() if r.get("by_popularity")]
            if bands:
                lines.append(
                    f"| {cell.label} | {labels[row]} | "
                    + " | ".join(f"{np.mean([b[k] for b in bands if k in b]):.4f}" for k in keys)
                    + " |"
                )
        for name in ("popularity", "oracle"):
            bands = [
                r["baselines"][name]["by_popularity"]
                for r in pooled.values()
                if r.get("baselines", {}).get(name, {}).get("by_popularity")
            ]
            if bands:
                lines.append(
                    f"| {cell.label} | *{name}* | "
                    + " | ".join(f"{np.mean([b[k] for b in bands if k in b]):.4f}" for k in keys)
                    + " |"
                )
    if not lines:
        return []
    shares = _band_shares(records, experiment, cells)
    return (
        [
            "",
            "Recall by popularity: the test targets in each third of the catalog by "
            "training count (head, torso, tail), mean over seeds. The runs record it at k = "
            f"{', '.join(sorted({k.split('@')[1] for k in keys}, key=int))}.",
            "",
            "| setting | ranker | " + " | ".join(k.replace("_recall", " R") for k in keys) + " |",
            "|---|---|" + "---|" * len(keys),
        ]
        + lines
        + (
            [
                "",
                "Where the test targets fall, on the KL's fixed sample of 256 test queries "
                "(the same targets at every seed: the log and its queries do not depend on the "
                "training seed): " + "; ".join(shares) + ". These are thirds of the catalog by "
                "item, not of the traffic: under a Zipf law the head third holds nearly every "
                "event, so a ranker's overall recall is almost all its head recall. Read the "
                "torso and tail columns against the oracle's row: where it reaches those items "
                "(at k = 1000) and a model does not, the model misses them.",
            ]
            if shares
            else []
        )
    )


def band_shares(bands: Sequence[int]) -> Optional[np.ndarray]:
    """The share of targets in each popularity third (head, torso, tail) among `bands`
    (0/1/2 per target); None when there is none."""
    bands = np.asarray(bands, np.int64)
    if not len(bands):
        return None
    return np.bincount(bands, minlength=3)[:3] / len(bands)


def _band_shares(records: Records, experiment: str, cells: Sequence[plan_lib.Cell]) -> List[str]:
    """Per cell, "label: head x%, torso y%, tail z% (n targets)", from the calibration's
    bands. The log and its test queries do not depend on the training seed, so every record
    of a cell has the same targets: the distinct lists are pooled (one, in practice)."""
    result = []
    for cell in cells:
        distinct = {
            tuple(value["calibration"]["band"])
            for row in plan_lib.experiment_rows(experiment)
            for value in _by_seed(records, experiment, cell.setting, row).values()
            if value.get("calibration", {}).get("band")
        }
        pooled = [band for bands in sorted(distinct) for band in bands]
        shares = band_shares(pooled)
        if shares is not None:
            result.append(
                f"{cell.label}: head {100 * shares[0]:.1f}%, torso "
                f"{100 * shares[1]:.1f}%, tail {100 * shares[2]:.1f}% of "
                f"{len(pooled)} targets"
            )
    return result


def _rate(records: Records, row: str, cell: plan_lib.Cell, name: str) -> Optional[float]:
    """The mean over seeds of `name` for `row` at the lr experiment's `cell`; None if unrun."""
    values = [metric(v, name) for v in _by_seed(records, "lr", cell.setting, row).values()]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def best_rates(
    records: Records, row: str, cells: Sequence[plan_lib.Cell], name: str = "recall@100"
) -> Optional[Tuple[plan_lib.Cell, float]]:
    """The lr experiment's cell where `row` has the highest mean `name`, and that value."""
    scored = [(cell, _rate(records, row, cell, name)) for cell in cells]
    scored = [(cell, value) for cell, value in scored if value is not None]
    return max(scored, key=lambda item: item[1]) if scored else None


def _lr_table(
    records: Records,
    cells: Sequence[plan_lib.Cell],
    labels: Dict[str, str],
    preset: str,
    moved: Optional[Records] = None,
) -> List[str]:
    """The lr experiment: per grid point, standard's and improved's Recall@10/100 and KL with
    improved − standard; then each row's best point and the two compared there."""
    training = configs.PRESETS[preset].training
    names = (
        ("recall@10", "Recall@10", 4),
        ("recall@100", "Recall@100", 4),
        ("kl_to_truth", "KL", 3),
    )
    config = configs.PRESETS[preset]
    header = [
        "| items | Adagrad (tables) | Adam (rest) | n | "
        + " | ".join(f"{title} standard | {title} improved | {title} d" for _, title, _ in names)
        + " |",
        "|---|---|---|---|" + "---|" * (3 * len(names)),
    ]
    lines = []
    for cell in cells:
        counts = [
            len(_by_seed(records, "lr", cell.setting, row)) for row in ("standard", "improved")
        ]
        if not any(counts):
            continue
        parts = []
        for name, _, places in names:
            a, b = (_rate(records, row, cell, name) for row in ("standard", "improved"))
            parts += [
                "–" if a is None else f"{a:.{places}f}",
                "–" if b is None else f"{b:.{places}f}",
                "–" if a is None or b is None else f"{b - a:+.{places}f}",
            ]
        tables = cell.overrides.get("table_learning_rate", training.table_learning_rate)
        rest = cell.overrides.get("learning_rate", training.learning_rate)
        items = cell.overrides.get("synthetic_items", config.data.synthetic_items)
        lines.append(
            f"| {items:,} | {tables:g} | {rest:g} | {counts[0]}/{counts[1]} | "
            + " | ".join(parts)
            + " |"
        )
    if not lines:
        if any(key[0] == "lr" for key in moved or {}):
            return [
                "No evidence: every point's record named a lost commit and was moved (see "
                "Settings without evidence; `python -m paper.industrial --experiments=lr`)."
            ]
        return ["Not run yet (`python -m paper.industrial --experiments=lr`)."]
    text = [
        "d = improved − standard; n = standard's/improved's runs. Each point is one run "
        "(seed 0), with no standard error: read the grid's shape, not one point's d. The "
        "centre (the preset's rates) is the catalog experiment's 100k cell at seed 0."
    ]
    spread = centre_spread(records, preset)
    if spread is not None:
        text.append(
            f"There, over {spread['seeds']} seeds, the seed-to-seed std is "
            f"{spread['recall@10']:.4f} at Recall@10 and {spread['recall@100']:.4f} at "
            "Recall@100 (the larger of the two rows')."
        )
    grid = lr_grid(cells)
    best = {row: best_rates(records, row, grid) for row in ("standard", "improved")}
    if all(best.values()):
        (cell_s, value_s), (cell_i, value_i) = best["standard"], best["improved"]
        ahead = []
        for name, title in (("recall@10", "Recall@10"), ("recall@100", "Recall@100")):
            pairs = [
                (_rate(records, "standard", cell, name), _rate(records, "improved", cell, name))
                for cell in grid
            ]
            pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
            ahead.append(f"{sum(b > a for a, b in pairs)} of {len(pairs)} points by {title}")
        text.append(
            f"Each row at its own best point by Recall@100: {labels['standard']} "
            f"{value_s:.4f} ({cell_s.label}), {labels['improved']} {value_i:.4f} "
            f"({cell_i.label}), improved − standard {value_i - value_s:+.4f} (unpaired, "
            f"each the best of up to {len(grid)} single runs). Improved is ahead at "
            f"{' and '.join(ahead)}."
        )
    text += full_scale_check(records, cells)
    return header + lines + ["", " ".join(text)]


def lr_grid(cells: Sequence[plan_lib.Cell]) -> List[plan_lib.Cell]:
    """The lr experiment's grid: its cells on the scaled catalog (the others are at the
    preset's own)."""
    return [cell for cell in cells if "synthetic_items" in cell.overrides]


def full_scale_check(records: Records, cells: Sequence[plan_lib.Cell]) -> List[str]:
    """The lr experiment's points at the preset's catalog: improved − standard at seed 0
    there, against the same seed at the preset's rates (main's runs)."""
    text = []
    for cell in cells:
        if "synthetic_items" in cell.overrides:
            continue
        here = paired(
            *(_by_seed(records, "lr", cell.setting, row) for row in ("standard", "improved")),
            "recall@10",
        )
        if here is None:
            continue
        seeds = here["seeds"]
        preset_rates = paired(
            *(
                {
                    seed: value
                    for seed, value in _by_seed(records, "main", "", row).items()
                    if seed in seeds
                }
                for row in ("standard", "improved")
            ),
            "recall@10",
        )
        values = {
            row: metric(_by_seed(records, "lr", cell.setting, row)[seeds[0]], "recall@10")
            for row in ("standard", "improved")
        }
        text.append(
            f"At {cell.label} (seed {', '.join(map(str, seeds))}): Recall@10 standard "
            f"{values['standard']:.4f}, improved {values['improved']:.4f}, improved − "
            f"standard {here['mean']:+.4f}"
            + (
                f"; at the preset's rates, the same seed: {preset_rates['mean']:+.4f}"
                if preset_rates
                else ""
            )
            + "."
        )
    return text


def centre_spread(records: Records, preset: str) -> Optional[Dict[str, float]]:
    """The seed-to-seed std at the lr grid's centre (the catalog experiment's cell at
    LR_CATALOG_SCALE): per metric, the larger of standard's and improved's; None with fewer
    than 2 seeds of either."""
    setting = next(
        cell.setting
        for cell in plan_lib.cells("catalog", preset)
        if cell.overrides.get("synthetic_items")
        == plan_lib.cells("lr", preset)[0].overrides["synthetic_items"]
    )
    runs = {row: _by_seed(records, "catalog", setting, row) for row in ("standard", "improved")}
    seeds = min(len(r) for r in runs.values())
    if seeds < 2:
        return None
    result = {"seeds": seeds}
    for name in ("recall@10", "recall@100"):
        result[name] = max(
            float(np.std([metric(v, name) for v in r.values()], ddof=1)) for r in runs.values()
        )
    return result


def implied_log10_p(
    model_log10_p: np.ndarray, correction: str, draws: np.ndarray, negatives: float
) -> Optional[np.ndarray]:
    """log10 of a correction's implied P(p|u), the p_s of its row weight 1 - p_s
    (docs/design.md, the gradient view), from the model's softmax P = P(p|u), the target's
    expected draws D(p) among the row's negatives and their number n
    (`pipelines.report.expected_draws`): the corrected negatives sum to about n Z, so
    standard's p_s = P / (P + D(p) (1 - P)), standard_negatives' P / (P + n (1 - P)), and
    improved's P_hat = P. None for none (its p_s depends on which items are drawn)."""
    p = np.power(10.0, model_log10_p)
    if correction == "improved":
        return model_log10_p
    if correction == "standard":
        return model_log10_p - np.log10(p + draws * (1 - p))
    if correction == "standard_negatives":
        return model_log10_p - np.log10(p + negatives * (1 - p))
    return None


# A target the truth does not reach is recorded at log P = -1e4 - log(total), "the floor".
FLOOR_LOG_P = -1000.0


def misread_calibration(value: Dict) -> bool:
    """Whether a record's calibration read most targets at the truth's floor: the code
    before e85ac2a searched each user's support unsorted and missed nearly every target
    (the records trained at 564d147), so its true P(p|u) are not the truth's."""
    true = np.asarray(value.get("calibration", {}).get("true_log_p") or [], np.float64)
    return bool(len(true)) and float(np.mean(true < FLOOR_LOG_P)) > 0.5


def calibration_points(values: Sequence[Dict]) -> Optional[Dict[str, np.ndarray]]:
    """The calibration entries of `values` (records) pooled: {"model", "true" (log10
    P(p|u)), "band"}, and "implied" (`implied_log10_p` of each record's correction) where
    every record has the expected draws and a correction that implies one; None where none
    recorded a calibration. A `misread_calibration` is left out."""
    values = [
        v
        for v in values
        if v.get("calibration", {}).get("true_log_p") and not misread_calibration(v)
    ]
    if not values:
        return None
    parts = [v["calibration"] for v in values]
    result = {
        key: np.concatenate([np.asarray(p[name], np.float64) / math.log(10) for p in parts])
        for key, name in (("model", "model_log_p"), ("true", "true_log_p"))
    }
    if all("band" in p for p in parts):
        result["band"] = np.concatenate([np.asarray(p["band"], np.int64) for p in parts])
    implied = [
        None
        if "draws" not in v["calibration"]
        else implied_log10_p(
            np.asarray(v["calibration"]["model_log_p"], np.float64) / math.log(10),
            v.get("overrides", {}).get("correction", ""),
            np.asarray(v["calibration"]["draws"], np.float64),
            v["calibration"]["negatives"],
        )
        for v in values
    ]
    if all(part is not None for part in implied):
        result["implied"] = np.concatenate(implied)
    return result


def binned(
    points: Dict[str, np.ndarray],
    width: float = BIN_WIDTH,
    least: int = MIN_BIN,
    key: str = "model",
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean true log10 P, mean `key` log10 P (the model's, or "implied"), count) per bin of
    the true log10 P, bins `width` wide on the log scale, those with at least `least`
    targets."""
    bins = np.floor(points["true"] / width).astype(np.int64)
    xs, ys, ns = [], [], []
    for b in np.unique(bins):
        at = bins == b
        if at.sum() >= least:
            xs.append(points["true"][at].mean())
            ys.append(points[key][at].mean())
            ns.append(int(at.sum()))
    return np.asarray(xs), np.asarray(ys), np.asarray(ns)


def _gap_cells(gap: np.ndarray, points: Dict[str, np.ndarray]) -> str:
    """Mean log10 ratio overall and by popularity third, as table cells."""
    by_band = [
        (
            "–"
            if "band" not in points or not (points["band"] == b).any()
            else f"{gap[points['band'] == b].mean():+.3f}"
        )
        for b in range(3)
    ]
    return f"{gap.mean():+.3f} | " + " | ".join(by_band)


def _calibration(
    records: Records,
    experiment: str,
    cells: Sequence[plan_lib.Cell],
    labels: Dict[str, str],
    image: Optional[str],
) -> List[str]:
    softmax, weights = [], []
    for cell in cells:
        for row in plan_lib.experiment_rows(experiment):
            points = calibration_points(
                list(_by_seed(records, experiment, cell.setting, row).values())
            )
            if points is None:
                continue
            gap = points["model"] - points["true"]
            softmax.append(
                f"| {cell.label} | {labels[row]} | {len(gap)} | "
                f"{_gap_cells(gap, points)} | {(gap > 0).mean():.2f} |"
            )
            if "implied" in points:
                implied = points["implied"] - points["true"]
                weights.append(
                    f"| {cell.label} | {labels[row]} | {len(implied)} | "
                    f"{_gap_cells(implied, points)} | "
                    f"{np.mean(1 - np.power(10.0, points['implied'])):.4f} | "
                    f"{np.mean(1 - np.power(10.0, points['true'])):.4f} |"
                )
    if not softmax:
        return []
    lines = [
        "",
        "Calibration of each model's softmax: on the KL queries' targets, the mean "
        "of log10 P_model(p|u) − log10 P_true(p|u) (0: calibrated; negative: the model "
        "gives the target too little probability), overall and by the target's "
        "popularity third, and the share of targets given more than their true "
        "probability. points: targets × runs (the same targets at every seed, each "
        "run's model read on them).",
    ]
    misread = [
        value
        for cell in cells
        for row in plan_lib.experiment_rows(experiment)
        for value in _by_seed(records, experiment, cell.setting, row).values()
        if misread_calibration(value)
    ]
    count = len(misread)
    revisions = sorted({value.get("git_revision", "?")[:7] for value in misread})
    if count:
        lines += [
            "",
            f"{count} run{'s' * (count != 1)} (trained at {', '.join(revisions)}) read nearly "
            "every target at the truth's floor, outside the law: that code searched each "
            "user's support unsorted (fixed in e85ac2a). Their calibrations are left out "
            "here; their other metrics stand.",
        ]
    lines += [
        "",
        "| setting | row | points | mean log10 ratio | head | torso | tail | share above truth |",
        "|---|---|---|---|---|---|---|---|",
    ] + softmax
    if weights:
        lines += [
            "",
            "The row weights: with the same negatives every correction pushes a row "
            "the same way and differs only in its weight 1 − p_s (docs/design.md, the "
            "gradient view), p_s being the correction's implied P(p|u); the full "
            "softmax's weight is 1 − P_true(p|u). From the trained model's softmax P "
            "on the same targets, and D(p), the target's expected draws among a row's "
            "n negatives under the run's sampler (its training frequency standing for "
            "the sketch's estimate; `pipelines.report.expected_draws`): improved's p_s "
            "is P itself; standard's P / (P + D(p) (1 − P)), above P wherever the "
            "sampler draws p less than once a row; the paper's standard on negatives' "
            "P / (P + n (1 − P)), about P / n. none's depends on which items are "
            "drawn and is left out. The plot and the table: the implied P against the "
            "true, and the mean weights.",
        ]
        lines += ["", f"![row weights]({image})"] if image else []
        lines += [
            "",
            "| setting | row | points | implied vs true, mean log10 ratio | head | "
            "torso | tail | mean weight 1 − p_s | full softmax's 1 − P_true |",
            "|---|---|---|---|---|---|---|---|---|",
        ] + weights
    return lines + _mass(records, experiment, cells, labels)


def _mass(
    records: Records, experiment: str, cells: Sequence[plan_lib.Cell], labels: Dict[str, str]
) -> List[str]:
    """Where each softmax puts its probability: the mean mass on each popularity third over
    the KL queries, the model's against the truth's (runs that record it)."""
    lines = []
    for cell in cells:
        truth = set()  # The same at every seed (the log and the queries do not change).
        for row in plan_lib.experiment_rows(experiment):
            values = [
                v["calibration"]
                for v in _by_seed(records, experiment, cell.setting, row).values()
                if v.get("calibration", {}).get("model_mass")
            ]
            if not values:
                continue
            model = np.mean([v["model_mass"] for v in values], axis=0)
            truth |= {tuple(v["true_mass"]) for v in values}
            lines.append(
                f"| {cell.label} | {labels[row]} | {len(values)} | "
                + " | ".join(f"{m:.3f}" for m in model)
                + " |"
            )
        if truth:
            lines.append(
                f"| {cell.label} | *truth* | | "
                + " | ".join(f"{m:.3f}" for m in np.mean(sorted(truth), axis=0))
                + " |"
            )
    if not lines:
        return []
    return [
        "",
        "Where the softmax puts its probability: the mass on each third of the "
        "catalog (by training count), averaged over the KL queries, against the true "
        "law's on the same candidates; n: the runs that record it (mean over them).",
        "",
        "| setting | row | n | head | torso | tail |",
        "|---|---|---|---|---|---|",
    ] + lines


def plot_calibration(
    records: Records,
    experiment: str,
    cells: Sequence[plan_lib.Cell],
    labels: Dict[str, str],
    path: str,
) -> bool:
    """One panel per setting: each row's binned implied log10 P(p|u), the p_s of its row
    weight (`implied_log10_p`), against the true one; False (nothing written) where no run
    recorded one."""
    panels = []
    for cell in cells:
        lines = []
        for row in plan_lib.experiment_rows(experiment):
            points = calibration_points(
                list(_by_seed(records, experiment, cell.setting, row).values())
            )
            if points is not None and "implied" in points:
                x, y, _ = binned(points, key="implied")
                if len(x):
                    lines.append((labels[row], x, y))
        if lines:
            panels.append((cell.label, lines))
    if not panels:
        return False
    import matplotlib  # pylint: disable=import-outside-toplevel

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

    figure, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.9), squeeze=False)
    for axis, (title, lines) in zip(axes[0], panels):
        low = min(min(x.min(), y.min()) for _, x, y in lines)
        high = max(max(x.max(), y.max()) for _, x, y in lines)
        axis.plot(
            [low, high], [low, high], color="0.6", linestyle="--", linewidth=1, label="calibrated"
        )
        for label, x, y in lines:
            axis.plot(x, y, marker="o", markersize=3, linewidth=1.2, label=label.split(" (")[0])
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("true log10 P(p|u)", fontsize=8)
        axis.set_ylabel("implied log10 P(p|u) (weight 1 - p_s)", fontsize=8)
        axis.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=6, loc="upper left", frameon=False)
    figure.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)
    return True


def missing(runs: Sequence[IndustrialRun], records: Records) -> Dict[str, List[str]]:
    """Per experiment, the (row, seeds) not recorded yet, as text."""
    result: Dict[str, List[str]] = {}
    gaps: Dict[Tuple[str, str], List[int]] = {}
    for run in sorted(runs, key=lambda r: r.seed):  # Stable: the plan's row order at seed 0.
        # A shared run is named with the experiment that trains it.
        key = (
            run.key
            if run.owner == run.experiment
            else f"{run.key} (= {os.path.dirname(run.record)})"
        )
        gaps.setdefault((run.experiment, key), [])
        if (run.experiment, run.setting, run.row, run.seed) not in records:
            gaps[(run.experiment, key)].append(run.seed)
    for (experiment, key), seeds in gaps.items():
        if seeds:
            result.setdefault(experiment, []).append(
                f"{key} seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"
            )
    return result


def _verdict_word(result: Optional[Dict], lower_better: bool = False) -> str:
    """How a paired difference reads at p < 0.05 (Holm's adjusted p where its family set
    one): "better", "worse", "level", "untested" (one seed) or "missing"."""
    if result is None:
        return "missing"
    if result.get("same"):  # The same difference at every seed: no spread to test it against.
        if result["mean"] == 0:
            return "level"
    elif "p" not in result:
        return "untested"
    elif result.get("p_holm", result["p"]) >= 0.05 or result["mean"] == 0:
        return "level"
    better = (result["mean"] < 0) if lower_better else (result["mean"] > 0)
    return "better" if better else "worse"


def _verdict(result: Optional[Dict], lower_better: bool = False) -> str:
    """`_verdict_word` with the difference and its spread."""
    word = _verdict_word(result, lower_better)
    if word == "missing":
        return "not measured"
    return f"{word} ({result['mean']:+.4f}, {_spread(result)})"


def _rates_advice(records: Records, labels: Dict[str, str], preset: str) -> str:
    """The advice's sentence on the learning rates (the lr experiment)."""
    cells = lr_grid(plan_lib.cells("lr", preset))
    best = {row: best_rates(records, row, cells) for row in ("standard", "improved")}
    if not all(best.values()):
        return "Learning rates: not measured."
    (cell_s, value_s), (cell_i, value_i) = best["standard"], best["improved"]
    spread = centre_spread(records, preset)
    return (
        f"Learning rates (the 100k-item log, one seed a point): each at its own best of "
        f"{len(cells)} points, {labels['standard']} {value_s:.4f} ({cell_s.label}) and "
        f"{labels['improved']} {value_i:.4f} ({cell_i.label}) Recall@100, improved − "
        f"standard {value_i - value_s:+.4f}, unpaired and without a test"
        + (
            f" (the seed-to-seed std at the preset's rates is {spread['recall@100']:.4f})"
            if spread
            else ""
        )
        + "."
        + "".join(" " + line for line in full_scale_check(records, plan_lib.cells("lr", preset)))
    )


# The advice reads these metrics (the paper's Table 2 leads with Recall@10).
ADVICE_METRICS = (("recall@10", "Recall@10"), ("recall@100", "Recall@100"))


# The settings the advice's tally of improved against standard reads (the lr grid is read
# apart: one seed a point).
TALLY_EXPERIMENTS = ("main", "inbatch", "catalog", "skew")


def tally(records: Records, preset: str, name: str) -> Dict[str, List[str]]:
    """improved − standard at `name` in every distinct setting of TALLY_EXPERIMENTS with 2
    seeds or more (a setting two experiments share, such as the catalog's 1x cell and
    `main`, counts once): the settings' labels by "better", "level" and "worse" (Holm's p
    over the tested settings < 0.05), and "untested" (one seed) or "missing"."""
    result: Dict[str, List[str]] = {
        "better": [],
        "level": [],
        "worse": [],
        "untested": [],
        "missing": [],
    }
    seen, compared = set(), []
    for experiment in TALLY_EXPERIMENTS:
        for cell in plan_lib.cells(experiment, preset):
            key = tuple(sorted(cell.overrides.items()))
            if key in seen:
                continue
            seen.add(key)
            compared.append(
                (
                    cell.label,
                    paired(
                        _by_seed(records, experiment, cell.setting, "standard"),
                        _by_seed(records, experiment, cell.setting, "improved"),
                        name,
                    ),
                )
            )
    significance.holm_adjust(r for _, r in compared)
    for label, r in compared:
        result[_verdict_word(r)].append(label)
    return result


def _in_short(records: Records, labels: Dict[str, str], preset: str, best: str) -> str:
    """The advice's first sentence: the correction and negatives to use, and how improved
    fared against standard over every setting measured."""
    mixed_vs_batch = paired(
        _by_seed(records, "inbatch", "", best), _by_seed(records, "main", "", best), "recall@10"
    )
    verdict = _verdict_word(mixed_vs_batch)
    change = abs(mixed_vs_batch["mean"]) if mixed_vs_batch else 0.0
    items = f"{configs.PRESETS[preset].data.synthetic_items:,} items"
    negatives = {
        "worse": f"in-batch negatives (at {items}, mixed ones lowered its "
        f"Recall@10 by {change:.4f})",
        "better": f"mixed negatives (at {items}, in-batch ones lowered its "
        f"Recall@10 by {change:.4f})",
    }.get(verdict, f"in-batch or mixed negatives (level at Recall@10 at {items})")
    counts = []
    for name, title in ADVICE_METRICS:
        t = tally(records, preset, name)
        tested = len(t["better"]) + len(t["level"]) + len(t["worse"])

        def where(verdict: str, t: Dict = t) -> str:
            return f"{len(t[verdict])}" + (f" ({'; '.join(t[verdict])})" if t[verdict] else "")

        counts.append(
            f"at {title} better in {where('better')}, level in {where('level')} "
            f"and worse in {where('worse')} of the {tested} settings tested"
        )
    return (
        f"In short: use {labels[best]} with {negatives}. Improved against standard "
        f"(TFRS), paired by seed over the settings below with 2 seeds or more (p Holm-"
        f"adjusted over the settings), was " + "; ".join(counts) + "."
    )


def advice(records: Records, labels: Dict[str, str], preset: str) -> List[str]:
    """The paragraph a user can act on, from complete records (every run of the plan)."""

    def pair(b, a, name, experiment="main", setting="", other=None):
        return paired(
            _by_seed(records, other or experiment, setting, a),
            _by_seed(records, experiment, setting, b),
            name,
        )

    def verdicts(b, a, **where) -> str:
        """b against a at each of ADVICE_METRICS."""
        return ", ".join(
            f"{title} {_verdict(pair(b, a, name, **where))}" for name, title in ADVICE_METRICS
        )

    corrections = ("none", "standard", "standard_negatives", "improved")
    leaders, top = [], None
    for name, title in ADVICE_METRICS:
        means = {
            row: float(
                np.mean([metric(v, name) for v in _by_seed(records, "main", "", row).values()])
            )
            for row in corrections
        }
        best = max(means, key=means.get)
        top = top or best  # By the first of ADVICE_METRICS (Recall@10, the paper's lead).
        level = [
            labels[row]
            for row in corrections
            if row != best and _verdict_word(pair(best, row, name)) not in ("better", "worse")
        ]
        leaders.append(
            f"by {title} {labels[best]} ({means[best]:.4f}"
            + (
                f"; within the seed-to-seed noise of {', '.join(level)}"
                if level
                else "; beyond the noise against every other correction"
            )
            + ")"
        )
    kl = {
        row: float(np.mean([v["kl_to_truth"] for v in _by_seed(records, "main", "", row).values()]))
        for row in corrections + ("sampled_reference",)
    }
    closest = min((row for row in corrections), key=kl.get)

    def sweep(experiment: str) -> str:
        return "; ".join(
            f"{cell.label}: "
            + verdicts("improved", "standard", experiment=experiment, setting=cell.setting)
            for cell in plan_lib.cells(experiment, preset)
        )

    # The paper's claim: improved ahead of its own standard at Recall@10/100/1000.
    claim = {
        name: _verdict_word(pair("improved", "standard_negatives", name))
        for name in ("recall@10", "recall@100", "recall@1000")
    }
    better = [name for name, verdict in claim.items() if verdict == "better"]
    reproduced = (
        "reproduced"
        if len(better) == len(claim)
        else "not reproduced"
        if not better
        else "partly reproduced"
    )
    reference = ", ".join(
        f"{title} {_verdict(pair('sampled_reference', top, name), lower_better=lower)}"
        for name, title, lower in (
            ("recall@10", "Recall@10", False),
            ("recall@100", "Recall@100", False),
            ("recall@1000", "Recall@1000", False),
            ("kl_to_truth", "KL", True),
        )
    )
    text = [
        _in_short(records, labels, preset, top),
        f"The paper's Table 2 claim (improved ahead of its standard at Recall@10/100/1000) is "
        f"{reproduced} here: improved against the paper's standard on the negatives is "
        + ", ".join(
            f"{name.replace('recall', 'Recall')} {verdict}" for name, verdict in claim.items()
        )
        + ".",
        f"More negatives: the {labels['sampled_reference']} row, "
        f"{plan_lib.REFERENCE_FACTOR} times the negatives drawn uniformly (each step scores "
        f"{plan_lib.REFERENCE_FACTOR} times the logits), against {labels[top]}: "
        f"{reference}.",
        "Which correction: at the preset's catalog with mixed negatives, the best is "
        + " and ".join(leaders)
        + ". Improved against standard (TFRS): "
        + verdicts("improved", "standard")
        + "; against the paper's standard on the "
        "negatives: " + verdicts("improved", "standard_negatives") + "; standard against "
        "none: " + verdicts("standard", "none") + f". Closest to the true law: "
        f"{labels[closest]} (KL {kl[closest]:.3f} nats; the sampled reference "
        f"{kl['sampled_reference']:.3f}).",
        "Which negatives: mixed against in-batch, paired by seed: "
        + "; ".join(
            f"{labels[row]} {verdicts(row, row, other='inbatch')}" for row in NEGATIVES_ROWS
        )
        + ". With in-batch negatives, improved against standard: "
        + verdicts("improved", "standard", experiment="inbatch")
        + ".",
        f"Catalog size, improved against standard: {sweep('catalog')}.",
        f"Popularity skew, improved against standard: {sweep('skew')}.",
        _rates_advice(records, labels, preset),
        f'How sure: {plan_lib.SEEDS} seeds a row, paired by seed; "level" means not resolved '
        "at p < 0.05 with 2 degrees of freedom (a difference must reach 4.3 SE), not shown "
        "equal.",
    ]
    if any(tally(records, preset, name)["untested"] for name, _ in ADVICE_METRICS):
        text[-1] += (
            ' "untested": one seed, no test (a conditional catalog size that ran at one seed).'
        )
    return ["", "## Advice", "", " ".join(text)]


def _short_trainings(records: Records) -> str:
    """A sentence naming the records whose training time is under half their row's median
    with as many steps (a run restarted before its record summed the time over restarts:
    the time before the restart is missing), or nothing."""
    short = []
    for key, value in sorted(records.items()):
        seconds, steps = value.get("train_seconds"), value.get("steps")
        others = [
            v["train_seconds"]
            for k, v in records.items()
            if k[:3] == key[:3] and k != key and v.get("steps") == steps and v.get("train_seconds")
        ]
        if seconds and others and seconds < 0.5 * float(np.median(others)):
            experiment, setting, row, seed = key
            short.append(
                f"{experiment}/{row}{'-' + setting if setting else ''} seed {seed} "
                f"({seconds:,.0f} s against {', '.join(f'{o:,.0f}' for o in sorted(others))})"
            )
    if not short:
        return ""
    return (
        " These records' training times are under half their row's with as many steps, most "
        "likely only the part after a restart (the time before it is not in the record): "
        + "; ".join(short)
        + "."
    )


# Revisions records name that are not in the repository, and why: the report says so, and
# paper/tests checks that no other record names a missing commit.
LOST_REVISIONS = {
    "fcad26fb2b876e8221a1d33f87c195f7008bb9dc": (
        "the campaign worktree's commit, never merged and since lost: its code cannot be restored"
    ),
}


# Runs trained again at a commit of the repository in place of a lost revision's, and how.
RERUNS = (
    "`main`'s runs that had run at `fcad26f` were trained again at `564d147` (none and "
    "standard on negatives seed 2 each pinned to one core beside another run, the sampled "
    "reference's seeds 1 and 2 beside other work, seed 2 resumed once): their metrics replace "
    "the lost revision's, but their training seconds are not comparable with the other runs'."
)


def provenance(records: Records) -> str:
    """Which code the records ran: each revision, how many records name it, and whether its
    commit is in the repository (a lost one with LOST_REVISIONS's reason)."""
    counts: Dict[str, List[str]] = {}
    seen = set()
    for (_experiment, setting, row, _seed), record in sorted(records.items()):
        if record.get("directory") in seen:
            continue  # A run two experiments share: one record.
        seen.add(record.get("directory"))
        revision = record.get("git_revision", "unknown")
        counts.setdefault(revision, []).append(
            f"{record.get('experiment', _experiment)}/{row}{'-' + setting if setting else ''}"
        )
    if not counts:
        return "No record yet names its code."
    parts = []
    for revision, names in sorted(counts.items(), key=lambda item: -len(item[1])):
        commit = revision.split("+", 1)[0]
        dirty = " with uncommitted changes" if revision.endswith("+dirty") else ""
        exists = provenance_lib.commit_exists(revision)
        where = (
            "in the repository"
            if exists
            else f"not in the repository ({LOST_REVISIONS[commit]})"
            if commit in LOST_REVISIONS
            else "not in the repository"
            if exists is False
            else "unchecked (no git checkout)"
        )
        main = sum(name.startswith("main/") for name in names)
        parts.append(
            f"{len(names)} at `{commit[:7]}`{dirty}, {where}"
            + (f" ({main} of them `main`'s)" if main else "")
        )
    return (
        'Each record names the code it ran (`git_revision`; "+dirty": the campaign '
        "worktree's `paper/` and `pipelines/report.py`, reporting rather than training, were "
        "newer than its commit). Records by revision: " + "; ".join(parts) + ". " + RERUNS
    )


def lost_evidence(
    runs: Sequence[IndustrialRun], records: Records, moved: Records, smoke: bool = False
) -> List[str]:
    """The report's section on the settings whose records were moved to ARCHIVE_DIR and not
    recorded again: per (experiment, setting), its rows, seeds and moved records, their
    training seconds, and the `paper.industrial` command that trains them again (it resumes:
    a recorded run is skipped). A run two experiments share is listed under the one that
    trains it. Nothing where no record was moved."""
    preset = plan_lib.SMOKE_PRESET if smoke else plan_lib.PRESET
    labels = {name: row.label for name, row in plan_lib.rows(preset).items()}
    groups: Dict[Tuple[str, str], List[IndustrialRun]] = {}
    for run in plan_lib.unique(runs):  # The owner's run first: plan order.
        key = (run.experiment, run.setting, run.row, run.seed)
        if key in moved and key not in records:
            groups.setdefault((run.owner, run.setting), []).append(run)
    if not groups:
        return []
    revisions: Dict[str, int] = {}
    for group in groups.values():
        for run in group:
            revision = moved[(run.experiment, run.setting, run.row, run.seed)].get(
                "git_revision", "unknown"
            )
            revisions[revision] = revisions.get(revision, 0) + 1
    named = []
    for revision, count in sorted(revisions.items(), key=lambda item: -item[1]):
        commit = revision.split("+", 1)[0]
        dirty = " with uncommitted changes" if revision.endswith("+dirty") else ""
        reason = LOST_REVISIONS.get(commit, "not in the repository")
        named.append(f"{count} at `{commit[:7]}`{dirty}, {reason}")
    total = sum(revisions.values())
    lines = [
        "",
        "## Settings without evidence",
        "",
        f"{total} {'record' if total == 1 else 'records'} named a commit that is not in the "
        "repository ("
        + "; ".join(named)
        + "). Nobody can re-run the code they ran, so they were deleted (git's history "
        "keeps them); "
        f"[results/industrial_claim/{ARCHIVE_DIR}/](results/industrial_claim/{ARCHIVE_DIR}/) "
        "lists which runs they were and their training seconds, no numbers. "
        "The settings below have no evidence until they are trained again at a commit of the "
        "repository: this report reads nothing from them, and its advice waits for them. "
        "Each command resumes (a recorded run is skipped), writes the new records and "
        "rewrites this report; settings of one experiment can share one `--settings` list. "
        "`moved train s`: the moved records' training seconds, summed, on 2 shared cores: a "
        "guide to the time, not a measurement. A run two experiments share is listed under "
        "the one that trains it (the lr grid's centre is the catalog's 0.1x cell).",
        "",
        "| experiment | setting | rows | seeds | records moved | moved train s | command |",
        "|---|---|---|---|---|---|---|",
    ]
    for (experiment, setting), group in groups.items():
        cell_labels = {cell.setting: cell.label for cell in plan_lib.cells(experiment, preset)}
        rows = [
            row for row in plan_lib.experiment_rows(experiment) if any(r.row == row for r in group)
        ]
        seeds = sorted({run.seed for run in group})
        seconds = sum(
            moved[(run.experiment, run.setting, run.row, run.seed)].get("train_seconds") or 0
            for run in group
        )
        command = ["python -m paper.industrial"] + (["--smoke"] if smoke else [])
        command.append(f"--experiments={experiment}")
        if setting:
            command.append(f"--settings={setting}")
        if rows != list(plan_lib.experiment_rows(experiment)):
            command.append(f"--rows={','.join(rows)}")
        if max(seeds) + 1 > plan_lib.experiment_seeds(experiment):
            command.append(f"--seeds={max(seeds) + 1}")
        lines.append(
            f"| {experiment} | {cell_labels.get(setting, setting or '–')} | "
            f"{', '.join(labels[row] for row in rows)} | {', '.join(map(str, seeds))} | "
            f"{len(group)} | {seconds:,.0f} | `{' '.join(command)}` |"
        )
    return lines


def markdown(
    runs: Sequence[IndustrialRun],
    records: Records,
    command_line: str,
    images: Dict[str, str],
    smoke: bool = False,
    moved: Optional[Records] = None,
) -> str:
    """The report's text; `images` maps an experiment to its calibration plot's link,
    `moved` holds the records moved to ARCHIVE_DIR (`archived`), read only to name what they
    leave without evidence."""
    moved = moved or {}
    preset = plan_lib.SMOKE_PRESET if smoke else plan_lib.PRESET
    known = plan_lib.rows(preset)
    labels = {name: row.label for name, row in known.items()}
    config = configs.PRESETS[preset]
    done = len(
        {run.record for run in runs if (run.experiment, run.setting, run.row, run.seed) in records}
    )
    total = len({run.record for run in runs})
    lines = [
        "# The paper's industrial claim at web scale, with a ground truth",
        "",
        "Which logQ correction should a team with millions of items use? The paper's Table 2 "
        "(a music service, a 2M-item index) has both corrections far ahead of none and improved "
        "ahead of standard at Recall@10/100/1000. Here the same question is asked of the "
        "web-scale synthetic log, whose true next-item law P(d|u) is known "
        "(`pipelines/data/web_synthetic.py`), so the model's softmax can be compared with the "
        "truth, not only ranked.",
        "",
        f"Every run is `python -m pipelines.train --preset={preset}` with its row's and "
        f"setting's flags: {config.data.synthetic_items:,} items and "
        f"{config.data.synthetic_users:,} users over {config.data.synthetic_days} days, string "
        "ids; the two-tower model trained once over the days in time order (shuffled within "
        f"windows of {config.training.shuffle_window:,}), {config.loss.num_negatives} mixed "
        "negatives (half uniform, half in-batch) with log Q from a count-min sketch learnt "
        "online; tested on the next day over an index of the "
        f"{config.training.index_size:,} most trained items plus the day's positives, on "
        f"{config.training.test_queries:,} of its users (exact search; oracle: the true law, "
        "popularity: training counts, on the same queries and index). Mean ± sample std over "
        "seeds (n). `train s` is the training's wall-clock time as its record gives it; most "
        "runs shared the machine's 2 cores with other work, so read it as rough."
        + _short_trainings(records),
        "",
        "Rows (each `--correction`; `pipelines.train`'s flags on top of the preset):",
        "",
        f"- {labels['none']}: sampled softmax, no correction.",
        f"- {labels['standard']}: log Q subtracted from every logit, the positive's too, as "
        "`tfrs.tasks.Retrieval(candidate_sampling_probability=...)` does (`standard`).",
        f"- {labels['standard_negatives']}: the negatives corrected, the positive raw: the "
        "paper's released baseline (`standard_negatives`).",
        f"- {labels['improved']}: Khrylchenko et al. 2025 (`improved`).",
        f"- {labels['sampled_reference']}: "
        f"{known['sampled_reference'].overrides['num_negatives']} negatives drawn uniformly "
        "from the whole catalog, improved: Q = 1/N exactly (no sketch), so its estimate of the "
        "softmax's denominator is unbiased and its row weight a consistent estimate of its "
        "own full softmax's 1 − P(p|u); with uniform Q, standard would equal none "
        "(`paper/industrial_plan.py`, `rows`). Its estimates are unbiased, not its model: it "
        "is still a sampled softmax, over "
        f"{known['sampled_reference'].overrides['num_negatives']:,} of "
        f"{config.data.synthetic_items:,} items a step, and bounds nothing.",
        "",
        "Experiments: `main` (every row), `inbatch` (`--negatives=in_batch`), `catalog` "
        "(0.1x, 1x and 5x the catalog; the users, and with them the events and training "
        "steps, grow with the items up to the preset's number, for memory: the 0.1x cell also "
        "has a tenth of the events and steps, so it differs in more than its catalog, and the "
        "5x cell has the 1x cell's users and events, each item seen a fifth as often) and "
        "`skew` "
        "(`--synthetic_zipf`, the popularity's Zipf exponent, at the preset's catalog). The "
        "catalog's 1x cell and the skew's 1.0 cell are `main`'s runs, trained once. `lr`: "
        "standard and improved over a 3 x 3 grid of learning rates around the preset's, on the "
        "catalog's 0.1x log, one seed a point: the preset's rates were swept there with "
        "improved alone (docs/speed.md), and its best rates lay on that sweep's edge.",
        "",
        provenance(records),
        "",
        f"Command: `{command_line}` (resumes; `--report_only` rewrites this from the records).",
        "",
        f"Runs recorded: {done} of {total} (a run shared by two experiments counts once)."
        + (
            " Records: one JSON per run under "
            "[results/industrial_claim/](results/industrial_claim/)."
            if done and not smoke
            else ""
        ),
    ]
    lines += lost_evidence(runs, records, moved, smoke)
    for experiment in plan_lib.EXPERIMENTS:
        planned = [run for run in runs if run.experiment == experiment]
        if not planned:
            continue
        cells = plan_lib.cells(experiment, preset)
        seeds = len({run.seed for run in planned})
        lines += ["", f"## {TITLES[experiment]}", ""]
        if experiment == "lr":
            lines += _lr_table(records, cells, labels, preset, moved)
            continue
        lines += _table(records, experiment, cells, labels, seeds, moved)
        lines += _paired_table(records, _pairs(experiment, cells, labels))
        lines += _bands(records, experiment, cells, labels)
        lines += _calibration(records, experiment, cells, labels, images.get(experiment))
    full_plan = plan_lib.plan(seeds=plan_lib.SEEDS, smoke=smoke)
    gaps = missing([run for run in full_plan if run.required], records)
    if gaps:
        lines += [
            "",
            "## Advice",
            "",
            f"Not written yet: the advice waits for "
            f"{plan_lib.SEEDS} seeds of every row of every experiment (the lr grid: "
            f"{plan_lib.experiment_seeds('lr')} a point; the conditional catalog "
            "sizes: what is recorded). Missing:",
        ]
        lines += [f"- {experiment}: {'; '.join(items)}." for experiment, items in gaps.items()]
    else:
        lines += advice(records, labels, preset)
    later = missing([run for run in full_plan if not run.required], records)
    if later:
        lines += [
            "",
            (
                "Not recorded (conditional catalog sizes, read above at the seeds recorded; "
                "moved records: Settings without evidence): "
                if any(run.required is False and run_key(run) in moved for run in full_plan)
                else "Not run yet (conditional catalog sizes, read above at the seeds recorded): "
            )
            + "; ".join(f"{experiment}: {'; '.join(items)}" for experiment, items in later.items())
            + ".",
        ]
    return "\n".join(lines) + "\n"


def write_report(
    runs: Sequence[IndustrialRun],
    results_dir: str,
    report_path: str,
    command_line: str,
    smoke: bool = False,
) -> List[str]:
    """Writes the report (`report_path`) and its calibration plots
    (RESULTS_DIR/calibration_EXPERIMENT.png) from the records of `runs`; returns the paths
    written."""
    records = collect(runs, results_dir)
    moved = archived(runs, results_dir)
    preset = plan_lib.SMOKE_PRESET if smoke else plan_lib.PRESET
    labels = {name: row.label for name, row in plan_lib.rows(preset).items()}
    written, images = [], {}
    for experiment in plan_lib.EXPERIMENTS:
        if experiment == "lr" or not any(run.experiment == experiment for run in runs):
            continue  # The lr grid's calibration is not plotted: 9 panels of one seed.
        path = os.path.join(results_dir, f"calibration_{experiment}.png")
        if plot_calibration(records, experiment, plan_lib.cells(experiment, preset), labels, path):
            written.append(path)
            images[experiment] = os.path.relpath(path, os.path.dirname(report_path) or ".")
    os.makedirs(os.path.dirname(report_path) or ".", exist_ok=True)
    with open(report_path, "w") as f:
        f.write(markdown(runs, records, command_line, images, smoke, moved))
    return [report_path] + written
