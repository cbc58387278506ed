"""The report of one experiment: NAME.md (the tables, the paper's orderings, the paired
comparisons, every run), NAME.json (the summary and every run's numbers) and NAME.png."""

import json
import math
import os
from typing import Dict, List, Optional, Sequence

from paper import comparisons
from paper import plots
from paper.curves import PLATEAU_FROM
from paper.curves import PLATEAU_MIN_EPOCHS
from paper.plan import OFFICIAL_PROFILES
from paper.plan import SYNTHETIC_PRESET
from paper.plan import Run
from paper.plan import config_value
from paper.plan import experiment_name
from paper.plan import paper_numbers
from paper.records import Recorded
from paper.records import finished
from paper.records import load
from pipelines import configs

FREQUENCY_LABELS = {
    "static": "exact counts",
    "count_min": "count-min sketch",
    "hashed": "hashed inter-arrival",
}
MODEL_NAMES = {"sasrec": "SASRec", "two_tower": "Two-tower model"}
# Where each finished run's per-query test metrics lie in a results directory:
# PER_QUERY_DIR/REPORT/ROW/seedN.npz (`campaign.sh per_query`, `pipelines.evaluate`).
PER_QUERY_DIR = "per_query"


def _pm(mean: float, std: float) -> str:
    return f"{mean:.4f}" if math.isnan(std) else f"{mean:.4f} ± {std:.4f}"


def markdown(
    summary: Dict[str, Dict],
    dataset: str,
    split: str,
    profile: str,
    command_line: str,
    preset: str = "",
    temporal_targets: str = "first",
    per_query_dir: Optional[str] = None,
) -> str:
    """The report's text: the table of rows (next to the paper's numbers on ML-1M), the runs
    taken from an earlier report, the paired comparisons, the paper's orderings and, on
    ML-1M, every run."""
    lines = _title(dataset, split, profile, command_line, preset, temporal_targets)
    done = {k: v for k, v in summary.items() if v["n"]}
    if dataset == "ml-1m":
        lines += _ml1m_table(summary, split) + _popularity(done)
    else:
        lines += _synthetic_table(done)
    lines += _recorded(done)
    lines += _paired(done, profile in OFFICIAL_PROFILES and dataset != "synthetic", per_query_dir)
    verdicts = comparisons.ordering_verdicts(
        {k: v for k, v in done.items() if v["frequency"] == "static"},
        paper_split=split if dataset == "ml-1m" else None,
    )
    if verdicts:
        lines += (
            (
                [
                    "",
                    "## The paper's orderings (NDCG@20)",
                    "",
                    "Each pair ordered as the paper's numbers for this split order it, unpaired.",
                ]
                if dataset == "ml-1m"
                else ["", "## The paper's orderings, here (NDCG@20)"]
            )
            + [""]
            + verdicts
        )
    if dataset == "ml-1m" and done:
        lines += _every_run(done)
    return "\n".join(lines) + "\n"


def _title(
    dataset: str, split: str, profile: str, command_line: str, preset: str, temporal_targets: str
) -> List[str]:
    """The report's heading, its command and how to read its tables."""
    if dataset == "ml-1m":
        title = (
            "SASRec on MovieLens-1M, "
            + (
                "leave-one-out"
                if split == "loo"
                else f"global temporal split (last 10% test, targets: {temporal_targets})"
            )
            + f", `{profile}` profile"
        )
    else:
        preset = preset or SYNTHETIC_PRESET
        model = config_value(configs.PRESETS[preset].as_dict(), "model")
        title = (
            f"{MODEL_NAMES[model]} on the synthetic catalog (known P(d|u)), {split} split, "
            f"`{preset}` preset"
        )
    return [
        f"# {title}",
        "",
        f"Command: `{command_line}`",
        "",
        "Mean ± sample std over seeds (n). Test split, exact search over the whole catalog, "
        "the user's history filtered. "
        + (
            "Epochs, steps (optimizer steps) and train s/run: means of the whole runs', "
            "over every restart (runs made before `progress.json` existed count their last "
            "process only; – where no run recorded its steps)."
            if dataset == "ml-1m"
            else "Train s/run: the mean of the whole runs', over every restart (runs made before "
            "`progress.json` existed count their last process only)."
        ),
        "",
    ]


def _ml1m_table(summary: Dict[str, Dict], split: str) -> List[str]:
    """Every row planned, next to the paper's numbers on `split` (the rows not run yet too)."""
    lines = [
        "| loss | n | NDCG@20 | paper | Δ | Recall@20 | paper | Δ | epochs | "
        "best epoch | steps | train s/run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in summary.values():
        paper = paper_numbers(entry["row"].name, split)
        if not entry["n"]:
            papers = (f"{paper[0]:.4f}", f"{paper[1]:.4f}") if paper else ("–", "–")
            lines.append(
                f"| {entry['row'].label} | 0/{entry['planned_seeds']} | not run "
                f"| {papers[0]} | | | {papers[1]} | | | | | |"
            )
            continue
        ndcg, recall = entry["ndcg@20"], entry["recall@20"]
        paper_cells = (
            (
                f"{paper[0]:.4f}",
                f"{ndcg[0] - paper[0]:+.4f}",
                f"{paper[1]:.4f}",
                f"{recall[0] - paper[1]:+.4f}",
            )
            if paper
            else ("–", "", "–", "")
        )
        lines.append(
            f"| {entry['row'].label} | {entry['n']} | {_pm(*ndcg[:2])} | "
            f"{paper_cells[0]} | {paper_cells[1]} | {_pm(*recall[:2])} | "
            f"{paper_cells[2]} | {paper_cells[3]} | {entry['epochs'][0]:.0f} | "
            + (f"{entry['best_epoch'][0]:.0f}" if "best_epoch" in entry else "–")
            + " | "
            + (f"{entry['steps'][0]:.0f}" if "steps" in entry else "–")
            + f" | {entry['train_seconds'][0]:.0f} |"
        )
    return lines


def _popularity(done: Dict[str, Dict]) -> List[str]:
    """The popularity ranker's score, and Recall@10 by popularity band where runs recorded it."""
    if not done:
        return []
    first = next(iter(done.values()))
    lines = ["", f"Popularity ranker, same protocol: NDCG@20 {first['popularity_ndcg@20'][0]:.4f}."]
    banded = [entry for entry in done.values() if "banded_runs" in entry]
    if banded:
        lines += [
            "",
            "By popularity: Recall@10 of the test targets in each third of "
            "the catalog by training count (mean ± std over the runs that "
            "recorded it, n).",
            "",
            "| loss | n | head R@10 | torso R@10 | tail R@10 |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {entry['row'].label} | {entry['banded_runs']} | "
            + " | ".join(_pm(*entry[f"{band}_recall@10"][:2]) for band in ("head", "torso", "tail"))
            + " |"
            for entry in banded
        ]
    return lines


def _synthetic_table(done: Dict[str, Dict]) -> List[str]:
    """The synthetic catalog's table: distance to the true law, recall against the oracle."""
    lines = [
        "| loss | log Q from | n | KL to truth (nats) | Recall@10 | oracle Recall@10 | "
        "head R@10 | torso R@10 | tail R@10 | NDCG@10 | train s/run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for entry in done.values():
        source = (
            FREQUENCY_LABELS[entry["frequency"]]
            if entry["row"].overrides.get("correction", "none") != "none"
            else "–"
        )
        lines.append(
            f"| {entry['row'].label} | {source} | {entry['n']} | "
            f"{_pm(*entry['kl_to_truth'][:2])} | {_pm(*entry['recall@10'][:2])} | "
            f"{entry['oracle_recall@10'][0]:.4f} | {entry['head_recall@10'][0]:.4f} | "
            f"{entry['torso_recall@10'][0]:.4f} | {entry['tail_recall@10'][0]:.4f} | "
            f"{_pm(*entry['ndcg@10'][:2])} | {entry['train_seconds'][0]:.0f} |"
        )
    lines += [
        "",
        "KL: mean over test users of KL(true next-item law || softmax of the "
        "model's scores), both over the items not in the user's history. Head / torso "
        "/ tail: Recall@10 of test targets in each third of the catalog by training "
        "count.",
    ]
    return lines


def _recorded(done: Dict[str, Dict]) -> List[str]:
    """Which runs came from the record of an earlier report (`--include_recorded`)."""
    recorded = [
        f"{entry['row'].label}"
        + ("" if entry["frequency"] == "static" else f" [{FREQUENCY_LABELS[entry['frequency']]}]")
        + f" seed{'s' if len(entry['recorded_seeds']) > 1 else ''} "
        + ", ".join(str(seed) for seed in entry["recorded_seeds"])
        for entry in done.values()
        if entry.get("recorded_seeds")
    ]
    if not recorded:
        return []
    return [
        "",
        "Taken from the JSON of the report this one replaced (`--include_recorded`; "
        "their run directories were not on disk): " + "; ".join(recorded) + ".",
    ]


def _paired(done: Dict[str, Dict], official: bool, per_query_dir: Optional[str]) -> List[str]:
    """Pairs of rows compared seed by seed (test score, validation plateau, test curve) and,
    where their per-query metrics are saved, test user by test user."""
    lines = []
    paired = comparisons.paired_differences(done, official=official)
    if paired:
        lines += [
            "",
            "## Paired by seed (NDCG@20)",
            "",
            "d = row - baseline for each seed both ran (the same data order and "
            "initialisation), then its mean and standard error over seeds. Best epoch: "
            "mean 0-based epoch of the best validation NDCG@10; early stopping waited "
            "`patience` epochs after it.",
            "",
        ] + paired
    by_user = (
        comparisons.paired_by_user(done, per_query_dir, official=official) if per_query_dir else []
    )
    if by_user:
        lines += [
            "",
            "Paired by test user: the same pair and seed, d per test user (each "
            "finished run's per-query metrics, `docs/results/per_query/`), its mean and "
            "standard error over users. This SE is the test set's noise alone, a floor "
            "under the seed-to-seed SE above: a d beyond it is real for this seed's two "
            "models, not yet for the two losses.",
            "",
        ] + by_user
    plateau = comparisons.paired_differences(
        done,
        by="by_seed_curve",
        official=official,
        metric=f"validation NDCG@10 (mean over the pair's epochs {PLATEAU_FROM} to the shorter "
        "run's last)",
    )
    if plateau:
        lines += [
            "",
            f"Validation plateau: validation NDCG@10 (TensorBoard logs) of the two runs "
            f"of a seed, each averaged over the same epochs, from {PLATEAU_FROM} to the "
            "shorter run's last, paired the same way. The best epoch is the highest of "
            "hundreds of noisy evaluations; the plateau is the level the curve settles at. "
            "The curves still rise slowly after epoch "
            f"{PLATEAU_FROM}, so each pair is compared over the epochs both ran.",
            "",
        ]
        lines += plateau
    tested = comparisons.paired_differences(
        done,
        by="by_seed_test_curve",
        official=official,
        metric=f"test NDCG@20 (mean over the pair's logged epochs {PLATEAU_FROM} to the "
        "shorter run's last)",
    )
    if tested:
        lines += [
            "",
            "Test curve (a diagnostic; nothing in training reads it): test NDCG@20 "
            "of the current weights, logged every `test_curve_every` epochs, averaged "
            f"over the logged epochs both runs of a seed trained, from {PLATEAU_FROM} to "
            "the shorter run's last, paired the same way. It compares the losses on the "
            "test split over many epochs, where the line above compares them at one "
            "epoch each, the one the validation curve picked.",
            "",
        ] + tested
    return lines


def _every_run(done: Dict[str, Dict]) -> List[str]:
    """One line per run, then the test score regressed on the best epoch."""
    lines = [
        "",
        "## Every run",
        "",
        "Plateau: the run's validation NDCG@10 averaged over its epochs >= "
        f"{PLATEAU_FROM} (– where it has fewer than {PLATEAU_MIN_EPOCHS}; the paired "
        "plateau above compares each pair over its common epochs). Best epoch: "
        "0-based, of the epochs the run trained; steps: optimizer steps in all.",
        "",
        "| loss | seed | NDCG@20 | Recall@20 | plateau | best epoch / epochs | steps | train s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for entry in done.values():
        for run in entry["per_run"]:
            plateau = "–" if run["plateau"] is None else f"{run['plateau']:.4f}"
            best = "–" if run["best_epoch"] is None else str(run["best_epoch"])
            steps = "–" if run["steps"] is None else str(run["steps"])
            lines.append(
                f"| {entry['row'].label} | {run['seed']} | {run['ndcg@20']:.4f} | "
                f"{run['recall@20']:.4f} | {plateau} | {best} / {run['epochs']} | "
                f"{steps} | {run['train_seconds']:.0f} |"
            )
    fits = [
        (label, comparisons.best_epoch_fit(runs))
        for label, runs in [("all runs", [r for entry in done.values() for r in entry["per_run"]])]
        + [(entry["row"].label, entry["per_run"]) for entry in done.values()]
    ]
    fits = [(label, fit) for label, fit in fits if fit is not None]
    if fits:
        lines += [
            "",
            "## Test score against the best epoch",
            "",
            "Test NDCG@20 regressed on the best epoch (0-based), run by run: the "
            "correlation and the least-squares slope. Descriptive, not causal: how "
            "closely the test score follows where early stopping landed.",
            "",
        ]
        lines += [
            f"- {label}: r = {r:+.2f} over {n} runs, slope {slope:+.4f} NDCG@20 per 100 epochs."
            for label, (n, r, slope) in fits
        ]
    return lines


def write_report(
    runs: Sequence[Run],
    dataset: str,
    split: str,
    profile: str,
    results_dir: str,
    command_line: str,
    temporal_targets: str = "first",
    recorded: Optional[Recorded] = None,
) -> str:
    """Writes NAME.md (returned), NAME.json (the summary and every run's numbers) and NAME.png
    to `results_dir`, from the finished runs among `runs` (and those `recorded` holds)."""
    summary = comparisons.aggregate(runs, recorded)
    os.makedirs(results_dir, exist_ok=True)
    preset = runs[0].preset if runs else ""
    name = experiment_name(dataset, split, profile, preset, temporal_targets)
    text = markdown(
        summary,
        dataset,
        split,
        profile,
        command_line,
        preset,
        temporal_targets,
        per_query_dir=os.path.join(results_dir, PER_QUERY_DIR, name),
    )
    with open(os.path.join(results_dir, name + ".md"), "w") as f:
        f.write(text)
    serialisable = {
        key: dict(
            {k: v for k, v in entry.items() if k not in ("row", "per_run", "by_seed_curve")},
            label=entry["row"].label,
            overrides=entry["row"].overrides,
        )
        for key, entry in summary.items()
    }
    per_run = []
    for r in runs:
        if finished(r, recorded):
            metrics = load(r, recorded)
            per_run.append(
                dict(
                    directory=metrics.get("directory", r.directory),
                    seed=r.seed,
                    row=r.row.name,
                    frequency=r.frequency,
                    **{
                        k: v
                        for k, v in metrics.items()
                        if k
                        in (
                            "test",
                            "kl_to_truth",
                            "baselines",
                            "by_popularity",
                            "epochs_run",
                            "best_epoch",
                            "steps",
                            "validation_plateau",
                            "validation_curve",
                            "test_curve",
                            "train_seconds",
                            "wall_seconds",
                            "git_revision",
                        )
                    },
                )
            )
    with open(os.path.join(results_dir, name + ".json"), "w") as f:
        json.dump({"summary": serialisable, "runs": per_run}, f, indent=1)
    plots.plot(summary, dataset, split, os.path.join(results_dir, name + ".png"))
    return text
