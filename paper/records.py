"""Which of the campaign's runs have finished, and their numbers: from each run's directory
(metrics.json, TensorBoard logs), or, when that is gone (a fresh clone, a new machine), from
the record a report's JSON keeps of it (`--include_recorded`)."""

import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

from paper import curves
from paper.plan import ROWS
from paper.plan import Run
from paper.plan import plan
from paper.plan import row_key
from pipelines.run_files import RunFiles

# A report's per-run records, by (row, frequency source, seed).
Recorded = Dict[Tuple[str, str, int], Dict]


def _key(run: Run) -> Tuple[str, str, int]:
    return run.row.name, run.frequency, run.seed


def finished(run: Run, recorded: Optional[Recorded] = None) -> bool:
    """Whether the run's directory holds metrics.json, or `recorded` holds the run."""
    return os.path.exists(RunFiles(run.directory).metrics) or (
        recorded is not None and _key(run) in recorded
    )


def load_recorded(path: str) -> Recorded:
    """The runs a report's JSON (`report.write_report`) records, or {} when there is no such
    file.

    Records written before each run kept its baselines take them from their row's summary:
    the baselines are computed from the data split alone, not from the model."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        report = json.load(f)
    recorded = {}
    for number, record in enumerate(report.get("runs", [])):
        missing = [key for key in ("row", "frequency", "seed") if key not in record]
        if missing:
            raise ValueError(
                f'{path}: run {number} of its "runs" lacks '
                f"{', '.join(missing)}; it was not written by this runner."
            )
        record = dict(record)
        if "baselines" not in record:
            entry = report.get("summary", {}).get(row_key(record["row"], record["frequency"]), {})
            baselines = {}
            if "popularity_ndcg@20" in entry:
                baselines["popularity"] = {"ndcg@20": entry["popularity_ndcg@20"][0]}
            if "oracle_recall@10" in entry:
                baselines["oracle"] = {"recall@10": entry["oracle_recall@10"][0]}
            record["baselines"] = baselines
        recorded[(record["row"], record["frequency"], int(record["seed"]))] = record
    return recorded


def with_finished_runs(
    runs: Sequence[Run],
    dataset: str,
    split: str,
    profile: str,
    frequencies: Sequence[str],
    output_dir: str,
    data_path: str = "",
    preset: str = "",
    temporal_targets: str = "first",
    max_seeds: int = 20,
    recorded: Optional[Recorded] = None,
) -> List[Run]:
    """`runs`, plus every finished (or `recorded`) run of the same experiment they leave out
    (other rows, more seeds), in table order: a sweep over some rows never drops the others
    from the report."""
    names = {run.row.name for run in runs}
    default = plan(
        dataset, split, profile, 1, [], frequencies, output_dir, data_path, preset, temporal_targets
    )
    rows = [row.name for row in ROWS if row.name in names | {r.row.name for r in default}]
    planned = {run.directory for run in runs}
    extra = [
        run
        for run in plan(
            dataset,
            split,
            profile,
            max_seeds,
            rows,
            frequencies,
            output_dir,
            data_path,
            preset,
            temporal_targets,
        )
        if run.directory not in planned and finished(run, recorded)
    ]
    order = {name: i for i, name in enumerate(rows)}
    return sorted(
        list(runs) + extra,
        key=lambda r: (
            order[r.row.name],
            frequencies.index(r.frequency) if r.frequency in frequencies else 0,
            r.seed,
        ),
    )


def load(run: Run, recorded: Optional[Recorded] = None) -> Dict:
    """The run's metrics.json (and wall time, and its logged curves), or else its record in
    `recorded`."""
    files = RunFiles(run.directory)
    path = files.metrics
    if not os.path.exists(path) and recorded is not None and _key(run) in recorded:
        return dict(recorded[_key(run)], recorded=True)
    with open(path) as f:
        metrics = json.load(f)
    wall = files.wall_seconds
    if os.path.exists(wall):
        with open(wall) as f:
            metrics["wall_seconds"] = json.load(f)["seconds"]
    progress = files.progress
    if "best_epoch" not in metrics and os.path.exists(progress):
        with open(progress) as f:  # Runs made before metrics.json recorded it.
            metrics["best_epoch"] = json.load(f).get("best_epoch")
    curve = curves.validation_curve(run.directory)
    plateau = curves.validation_plateau(curve)
    if plateau is not None:
        metrics["validation_plateau"] = plateau
    if curve:
        metrics["validation_curve"] = curves.curve_list(curve)
    tested = curves.test_curve(run.directory)
    if tested:
        metrics["test_curve"] = curves.curve_list(tested)
    return metrics
