"""The campaign's plan: the paper's numbers for each row, the experiments, their runs and
the `pipelines.train` command each run is.

Every (row, seed) is one `python -m pipelines.train` process with its own output directory,
OUTPUT_DIR/EXPERIMENT/ROW/seedN (`Run.directory`). The rows themselves (their losses as
`pipelines.train` flags) are `benchmarks.rows`.
"""

import os
import sys
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from benchmarks.rows import OFFICIAL_PROFILES
from benchmarks.rows import ROWS
from benchmarks.rows import ROWS_BY_NAME
from benchmarks.rows import Row
from benchmarks.rows import as_released
from pipelines import configs

PROFILES = ("cpu", "paper", "official", "official_cpu")
SYNTHETIC_PRESET = "synthetic_two_tower"

# Khrylchenko et al. 2025, Table 1 (mean of 5 runs): each row's (NDCG@20, Recall@20) on
# leave-one-out and on the temporal split; the temporal half has no BCE / uniform rows, and the
# official-only rows are not in the paper.
PAPER = {
    "bce": ((0.1564, 0.3468), None),
    "gbce": ((0.1964, 0.3949), (0.1210, 0.2632)),
    "uniform": ((0.1921, 0.3889), None),
    "in_batch-none": ((0.1868, 0.3838), (0.1117, 0.2481)),
    "in_batch-standard": ((0.1942, 0.3889), (0.1270, 0.2762)),
    "in_batch-improved": ((0.1969, 0.3947), (0.1269, 0.2766)),
    "mixed-none": ((0.1882, 0.3853), (0.1130, 0.2514)),
    "mixed-standard": ((0.1952, 0.3893), (0.1292, 0.2800)),
    "mixed-improved": ((0.1972, 0.3937), (0.1281, 0.2792)),
    "full_softmax": ((0.1937, 0.3911), (0.1205, 0.2640)),
}
SYNTHETIC_ROWS = (
    "in_batch-none",
    "in_batch-standard",
    "in_batch-improved",
    "mixed-none",
    "mixed-standard",
    "mixed-improved",
)

# The three fields of pipelines.configs.Config renamed when it grew groups (old name: new name).
_RENAMED = {
    "per_row_negatives": "per_row",
    "global_negatives": "global_batch",
    "in_batch_log_q": "log_q",
}
_GROUPS = ("data", "model", "loss", "training")


def config_value(config: Mapping[str, Any], name: str) -> Any:
    """The field `name` of a run's config as a dict (its config.json, or `Config.as_dict()`):
    flat, one key per field, or grouped, {"data": {...}, "model": {...}, "loss": {...},
    "training": {...}}. Either name of a renamed field finds it in either form. The campaign
    reads configs through this alone."""
    names = {name, _RENAMED.get(name, name)} | {old for old, new in _RENAMED.items() if new == name}
    grouped = [config[group] for group in _GROUPS if isinstance(config.get(group), Mapping)]
    for fields in grouped or [config]:
        for key in names & set(fields):
            return fields[key]
    raise KeyError(
        f"config has no field {name!r}; its fields: "
        f"{', '.join(sorted(k for fields in grouped or [config] for k in fields))}."
    )


def paper_numbers(row: str, split: str) -> Optional[Tuple[float, float]]:
    """The paper's (NDCG@20, Recall@20) for the row named `row` on `split`, or None."""
    loo, temporal = PAPER.get(row, (None, None))
    return loo if split == "loo" else temporal


class Run(NamedTuple):
    row: Row
    frequency: str
    seed: int
    preset: str
    overrides: Dict[str, object]  # Flags of pipelines.train on top of the preset.
    directory: str


def row_key(name: str, frequency: str) -> str:
    """A row's key in the report and its runs' folder: the row, plus the frequency source
    when it is not exact counts (e.g. in_batch-improved-count_min)."""
    return name if frequency == "static" else f"{name}-{frequency}"


def experiment_name(
    dataset: str, split: str, profile: str, preset: str = "", temporal_targets: str = "first"
) -> str:
    """ml1m_SPLIT_PROFILE (ml1m_temporal_TARGETS_PROFILE), or synthetic_SPLIT_PRESET."""
    if dataset == "ml-1m":
        if split == "temporal" and temporal_targets != "first":
            return f"ml1m_{split}_{temporal_targets}_{profile}"
        return f"ml1m_{split}_{profile}"
    return f"synthetic_{split}_{preset or SYNTHETIC_PRESET}"


def plan(
    dataset: str,
    split: str,
    profile: str,
    seeds: int,
    rows: Sequence[str],
    frequencies: Sequence[str],
    output_dir: str,
    data_path: str = "",
    preset: str = "",
    temporal_targets: str = "first",
) -> List[Run]:
    """The runs to make, in the order they are made (seed by seed, so that an interrupted
    sweep has every row at the same number of seeds)."""
    if profile not in PROFILES:
        raise ValueError(f"--profile must be one of {', '.join(PROFILES)}; received {profile!r}.")
    for frequency in frequencies:
        if frequency not in configs.FREQUENCIES:
            raise ValueError(
                f"--frequencies must be among {', '.join(configs.FREQUENCIES)}; "
                f"received {frequency!r}."
            )
    if not rows:
        if dataset == "synthetic":
            rows = SYNTHETIC_ROWS
        else:
            rows = [r.name for r in ROWS if paper_numbers(r.name, split)]
    unknown = [name for name in rows if name not in ROWS_BY_NAME]
    if unknown:
        raise ValueError(
            f"--rows must be among {', '.join(ROWS_BY_NAME)}; received {', '.join(unknown)}."
        )
    official = profile in OFFICIAL_PROFILES and dataset != "synthetic"
    only_official = [name for name in rows if ROWS_BY_NAME[name].official_only]
    if only_official and not official:
        raise ValueError(
            f"Rows {', '.join(only_official)} exist under the official profiles "
            f"({', '.join(OFFICIAL_PROFILES)}) only; received --profile={profile}."
        )
    base: Dict[str, object] = {"split": split}
    if dataset != "synthetic":
        # The temporal split needs timestamps: the GroupLens ratings, not SASRec's file.
        base["dataset"] = "ml-1m" if split == "loo" else "ml-1m-ratings"
        base["index"] = "exact"  # The paper's protocol; ScaNN is evaluated on its own.
        if data_path:
            base["data_path"] = data_path
    if split == "temporal" and temporal_targets != "first":
        base["temporal_targets"] = temporal_targets
    if preset:
        if preset not in configs.PRESETS:
            raise ValueError(
                f"--preset must be one of {', '.join(configs.PRESETS)}; received {preset!r}."
            )
        if (
            dataset == "synthetic"
            and config_value(configs.PRESETS[preset].as_dict(), "dataset") != "synthetic"
        ):
            raise ValueError(f"--preset={preset} is not a synthetic-data preset.")
    preset = preset or (SYNTHETIC_PRESET if dataset == "synthetic" else profile)
    root = os.path.join(
        output_dir, experiment_name(dataset, split, profile, preset, temporal_targets)
    )
    runs = []
    for seed in range(seeds):
        for name in rows:
            row = ROWS_BY_NAME[name]
            if official:
                row = as_released(row)
            uses_log_q = row.overrides.get("correction", "none") != "none"
            for frequency in frequencies if uses_log_q else frequencies[:1]:
                overrides = dict(base, **row.overrides, seed=seed)
                if uses_log_q:
                    overrides["frequency"] = frequency
                source = frequency if uses_log_q else "static"
                runs.append(
                    Run(
                        row,
                        source,
                        seed,
                        preset,
                        overrides,
                        os.path.join(root, row_key(name, source), f"seed{seed}"),
                    )
                )
    return runs


def command(run: Run) -> List[str]:
    return [
        sys.executable,
        "-m",
        "pipelines.train",
        f"--preset={run.preset}",
        f"--output_dir={run.directory}",
    ] + [f"--{key}={value}" for key, value in sorted(run.overrides.items())]


def label(run: Run) -> str:
    """How the driver's progress lines name a run."""
    return f"{run.row.name} [{run.frequency}] seed {run.seed}"
