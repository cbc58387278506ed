"""Issue 48's campaign, the paper's industrial claim on the web-scale synthetic log: its rows,
its five experiments, their runs (each a `paper.plan.Run`, so that `paper.plan.command`,
`paper.records` and `paper.scheduler` train and read them as they do the ML-1M campaign's)
and the small JSON record each finished run leaves in the results directory.

Every run is `python -m pipelines.train --preset=industrial` (two-tower, days in time order,
log Q from a count-min sketch learnt online, mixed negatives, tested on the next day over the
top training items plus the day's positives, Recall@10/100/1000 with popularity and the
oracle) with one row's and one setting's flags on top; `--smoke` plans the same on
`industrial_smoke` (seconds a run).

Experiments (3 seeds each, but `lr`):

- `main`: the five rows at 1M items.
- `inbatch`: `--negatives=in_batch` (what most TFRS users run): none, standard, improved.
- `catalog`: standard and improved at 0.1x, 1x and 5x the preset's catalog (100k, 1M, 5M
  items). Users grow with the catalog as in the 100k learning-rate sweep (docs/speed.md: as
  many users as items, the test index a fifth of them, 5,000 test queries at 100k), up to
  `max_user_scale` times the preset's users (1M): 5M users would be 100M events, about five
  times the 1M run's 10.3 GB peak, beyond this machine's 23 GB. So the 5M-item log keeps the
  1M-item log's 1M users and 20M events (its items are seen 4 times each on average, not 20).
- `skew`: standard and improved at Zipf exponents 0.8, 1.0 and 1.2 (`--synthetic_zipf`), at
  the preset's 1M items: the catalog the claim is about (the issue leaves the size open), and
  its 1.0 cell is `main`'s runs.
- `lr`: standard and improved over a 3 x 3 grid of learning rates (the tables' Adagrad at 1/3,
  1 and 10/3 of the preset's, the rest's Adam at 1/4, 1 and 5/2 of it: 1, 3, 10 and 0.005,
  0.02, 0.05 at full size) on the catalog experiment's 100k-item log, one seed a point
  (`EXPERIMENT_SEEDS`), and at the preset's 1M items the tables' rate at 1/3 and 10/3 of the
  preset's (LR_FULL_SCALE_FACTORS). The preset's rates were swept on the 100k log with
  `improved` alone, and its best point sat at the sweep's edge; this asks whether improved's
  place against standard depends on them. The grid's centre is the catalog's 100k cell.

A run whose flags equal those of a run planned before it (catalog's 1M cell and skew's 1.0
cell are `main`'s standard and improved) is that run: same directory, same record, trained
once.

Runs: OUTPUT_DIR/EXPERIMENT/ROW[-SETTING]/seedN (git-ignored; `pipelines.train` resumes an
interrupted one). Records: RESULTS_DIR/EXPERIMENT/ROW[-SETTING]/seedN.json, one per finished
run, small enough for git (`record`).
"""

import json
import os
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from benchmarks.rows import Row
from paper.plan import Run
from paper.records import finished
from paper.records import load
from pipelines import compare
from pipelines import configs

PRESET, SMOKE_PRESET = "industrial", "industrial_smoke"
EXPERIMENTS = ("main", "inbatch", "catalog", "skew", "lr")
# Seeds 0 .. SEEDS - 1 of every row (the 3); the report's advice waits for them all.
SEEDS = 3
# Experiments read at fewer seeds: at most this many (a grid of 9 points).
EXPERIMENT_SEEDS = {"lr": 1}
# The sampled reference draws this many times the preset's negatives, uniformly: 8192 at full
# size (1024 rows x 8192 logits a step), 512 on industrial_smoke.
REFERENCE_FACTOR = 8
# The catalog experiment's sizes, as multiples of the preset's catalog: 100k, 1M and 5M items.
CATALOG_SCALES = (0.1, 1.0, 5.0)
# Of those, the scales the issue makes conditional ("5M if the step allows"): planned and
# trained like the others, but the report's advice does not wait for their seeds; it reads
# them at the seeds recorded and names the ones missing.
CONDITIONAL_CATALOG_SCALES = (5.0,)
# Users grow with the catalog up to this multiple of the preset's (see the module docstring).
MAX_USER_SCALE = 1.0
ZIPF_EXPONENTS = (0.8, 1.0, 1.2)
# The lr experiment's grid, as multiples of the preset's learning rates (tables', rest's), on
# the catalog experiment's cell at this scale.
TABLE_LEARNING_RATE_FACTORS = (1 / 3, 1.0, 10 / 3)
LEARNING_RATE_FACTORS = (0.25, 1.0, 2.5)
LR_CATALOG_SCALE = 0.1
# ... and these points (same multiples) at the preset's own catalog, one seed each: the
# tables' rate a step either side of the preset's, at 1M items.
LR_FULL_SCALE_FACTORS = ((1 / 3, 1.0), (10 / 3, 1.0))
# Test queries where the catalog is scaled: a twentieth of the users (5,000 at 100k, as the
# sweep), at least this many and at most the preset's.
MIN_TEST_QUERIES = 100
FREQUENCY = "count_min"  # The presets' log Q (every row but the reference reads it).


def rows(preset: str = PRESET) -> Dict[str, Row]:
    """The study's rows, by name, as flags of `pipelines.train` on top of `preset`.

    `sampled_reference` is sampled softmax that is unbiased by construction where the full
    softmax is out of reach: REFERENCE_FACTOR times the preset's negatives, drawn uniformly
    from the whole catalog, with the improved correction. Its log Q is exact, not an
    estimate: a uniform draw has Q(d) = 1/N (`UniformSampler`, whatever --frequency says), so
    Q'(d) = 1/(N - 1) and Z_hat = (1/n) sum_i e^{s_i - log Q'(d_i)} = ((N - 1)/n) sum_i
    e^{s_i} is an unbiased importance-sampling estimate of sum_{d != p} e^{s_d}. The improved
    loss's row weight 1 - P_hat(p|u) is then a consistent estimate of the full softmax's
    1 - P(p|u), and its negatives' softmax of P(d|u) over d != p: the full softmax's
    gradient, up to the O(1/n) bias of a ratio of estimates. The other corrections are not
    this: with Q constant, `standard` shifts every logit by the same log N and equals `none`,
    whose weight 1 - p_s compares the positive with n draws, i.e. with n/N of Z (too small a
    weight wherever the model already ranks p well); `standard_negatives` compares it with
    n Z (too large)."""
    negatives = REFERENCE_FACTOR * configs.PRESETS[preset].loss.num_negatives
    return {
        row.name: row
        for row in (
            Row("none", "none", {"correction": "none"}),
            Row("standard", "standard (TFRS)", {"correction": "standard"}),
            Row(
                "standard_negatives",
                "standard on negatives (paper)",
                {"correction": "standard_negatives"},
            ),
            Row("improved", "improved", {"correction": "improved"}),
            Row(
                "sampled_reference",
                f"uniform reference ({negatives})",
                {"negatives": "uniform", "num_negatives": negatives, "correction": "improved"},
            ),
        )
    }


class Cell(NamedTuple):
    """One setting of an experiment: its name ("" for the preset's own), its description,
    its flags, and whether the advice waits for its seeds (CONDITIONAL_CATALOG_SCALES)."""

    setting: str
    label: str
    overrides: Dict[str, object]
    required: bool = True


class IndustrialRun(NamedTuple):
    experiment: str
    row: str  # A key of `rows()`.
    setting: str  # The cell's setting ("" for the preset's own).
    seed: int
    run: Run  # What pipelines.train runs (paper.plan's Run).
    record: str  # Its record, relative to the results directory.
    owner: str  # The experiment that owns the run (another when it is shared).
    required: bool = True  # Whether the report's advice waits for it (its cell's).

    @property
    def key(self) -> str:
        """The row and setting: the run's folder under its experiment."""
        return row_key(self.row, self.setting)


def row_key(row: str, setting: str) -> str:
    return f"{row}-{setting}" if setting else row


def experiment_rows(experiment: str) -> Tuple[str, ...]:
    return {
        "main": ("none", "standard", "standard_negatives", "improved", "sampled_reference"),
        "inbatch": ("none", "standard", "improved"),
        "catalog": ("standard", "improved"),
        "skew": ("standard", "improved"),
        "lr": ("standard", "improved"),
    }[experiment]


def experiment_seeds(experiment: str, seeds: int = SEEDS) -> int:
    """How many of `seeds` the experiment trains (EXPERIMENT_SEEDS caps some)."""
    return min(seeds, EXPERIMENT_SEEDS.get(experiment, seeds))


def _scaled(config: configs.Config, scale: float, max_user_scale: float) -> Dict[str, object]:
    """The flags of the catalog experiment's cell at `scale` times the preset's items (users
    up to `max_user_scale` times the preset's, the index and the test queries with them)."""
    items, users = config.data.synthetic_items, config.data.synthetic_users
    scaled_users = int(round(users * min(scale, max_user_scale)))
    return {
        "synthetic_items": int(round(items * scale)),
        "synthetic_users": scaled_users,
        "index_size": int(round(config.training.index_size * scale)),
        "test_queries": min(
            config.training.test_queries, max(scaled_users // 20, MIN_TEST_QUERIES)
        ),
    }


def cells(
    experiment: str, preset: str = PRESET, max_user_scale: float = MAX_USER_SCALE
) -> List[Cell]:
    """The settings of `experiment` on `preset`."""
    config = configs.PRESETS[preset]
    items, users = config.data.synthetic_items, config.data.synthetic_users
    if experiment == "main":
        return [Cell("", f"{items:,} items, mixed negatives", {})]
    if experiment == "inbatch":
        return [Cell("", f"{items:,} items, in-batch negatives", {"negatives": "in_batch"})]
    if experiment == "catalog":
        result = []
        for scale in CATALOG_SCALES:
            size = int(round(items * scale))
            if scale == 1.0:
                result.append(Cell(f"items{size}", f"{size:,} items, {users:,} users", {}))
                continue
            overrides = _scaled(config, scale, max_user_scale)
            result.append(
                Cell(
                    f"items{size}",
                    f"{size:,} items, {overrides['synthetic_users']:,} users",
                    overrides,
                    required=scale not in CONDITIONAL_CATALOG_SCALES,
                )
            )
        return result
    if experiment == "skew":
        return [
            Cell(
                f"zipf{exponent:g}",
                f"Zipf exponent {exponent:g}",
                {} if exponent == 1.0 else {"synthetic_zipf": exponent},
            )
            for exponent in ZIPF_EXPONENTS
        ]
    if experiment == "lr":
        # A rate equal to the preset's is left out of the flags, so that the grid's centre is
        # the catalog's cell (the same flags: the same run).
        training = config.training
        points = [
            (LR_CATALOG_SCALE, table_factor, factor)
            for table_factor in TABLE_LEARNING_RATE_FACTORS
            for factor in LEARNING_RATE_FACTORS
        ]
        points += [(1.0, table_factor, factor) for table_factor, factor in LR_FULL_SCALE_FACTORS]
        result = []
        for scale, table_factor, factor in points:
            overrides = {} if scale == 1.0 else _scaled(config, scale, max_user_scale)
            table_rate = round(training.table_learning_rate * table_factor, 6)
            rate = round(training.learning_rate * factor, 6)
            if table_factor != 1.0:
                overrides["table_learning_rate"] = table_rate
            if factor != 1.0:
                overrides["learning_rate"] = rate
            name = f"adagrad{table_rate:g}-adam{rate:g}"
            label = f"Adagrad {table_rate:g}, Adam {rate:g}"
            if scale == 1.0:  # The grid's own cells keep their short names.
                name, label = f"items{items}-{name}", f"{items:,} items, {label}"
            result.append(Cell(name, label, overrides))
        return result
    raise ValueError(
        f"--experiments must be among {', '.join(EXPERIMENTS)}; received {experiment!r}."
    )


def plan(
    experiments: Sequence[str] = EXPERIMENTS,
    seeds: int = SEEDS,
    smoke: bool = False,
    output_dir: str = "runs/industrial",
    only_rows: Sequence[str] = (),
    max_user_scale: float = MAX_USER_SCALE,
    only_settings: Sequence[str] = (),
) -> List[IndustrialRun]:
    """The runs of `experiments` (seeds 0 .. seeds - 1; `only_rows` keeps those rows and
    `only_settings` those settings, the cells' names: "items100000", "zipf0.8"), in the
    order they are made: experiment by experiment, seed by seed within one, so that an
    interrupted experiment has every row at the same number of seeds. Ownership of a shared
    run is decided over every experiment in EXPERIMENTS' order, whichever are asked for."""
    unknown = [name for name in experiments if name not in EXPERIMENTS]
    if unknown:
        raise ValueError(
            f"--experiments must be among {', '.join(EXPERIMENTS)}; received {', '.join(unknown)}."
        )
    known = rows(SMOKE_PRESET if smoke else PRESET)
    bad = [name for name in only_rows if name not in known]
    if bad:
        raise ValueError(f"--rows must be among {', '.join(known)}; received {', '.join(bad)}.")
    if not max_user_scale > 0:
        raise ValueError(f"--max_user_scale must be positive; received {max_user_scale}.")
    preset = SMOKE_PRESET if smoke else PRESET
    settings = sorted(
        {
            cell.setting
            for experiment in experiments
            for cell in cells(experiment, preset, max_user_scale)
            if cell.setting
        }
    )
    bad = [name for name in only_settings if name not in settings]
    if bad:
        raise ValueError(
            f"--settings must be among the experiments' settings "
            f"({', '.join(settings) or 'none: they have one each'}); received "
            f"{', '.join(bad)}."
        )
    owners: Dict[Tuple, Tuple[str, str]] = {}  # Canonical flags: (experiment, folder).
    result = []
    for experiment in EXPERIMENTS:
        for seed in range(experiment_seeds(experiment, seeds)):
            for cell in cells(experiment, preset, max_user_scale):
                for name in experiment_rows(experiment):
                    overrides = dict(cell.overrides, **known[name].overrides, seed=seed)
                    folder = row_key(name, cell.setting)
                    owner, folder = owners.setdefault(
                        tuple(sorted(overrides.items())), (experiment, folder)
                    )
                    if (
                        experiment not in experiments
                        or only_rows
                        and name not in only_rows
                        or only_settings
                        and cell.setting not in only_settings
                    ):
                        continue
                    row = known[name]._replace(
                        name=folder, overrides=dict(cell.overrides, **known[name].overrides)
                    )
                    directory = os.path.join(output_dir, owner, folder, f"seed{seed}")
                    result.append(
                        IndustrialRun(
                            experiment,
                            name,
                            cell.setting,
                            seed,
                            Run(row, FREQUENCY, seed, preset, overrides, directory),
                            os.path.join(owner, folder, f"seed{seed}.json"),
                            owner,
                            cell.required,
                        )
                    )
    return result


def unique(runs: Sequence[IndustrialRun]) -> List[IndustrialRun]:
    """`runs` less those whose directory an earlier one has (a shared run is trained once)."""
    seen, result = set(), []
    for run in runs:
        if run.run.directory not in seen:
            seen.add(run.run.directory)
            result.append(run)
    return result


# ---------------------------------------------------------------------------- records

# The fields of a run's metrics.json kept in its record: `pipelines.compare`'s (the rest is
# config, already in the record's flags, or large).
RECORD_FIELDS = compare.RECORD_FIELDS


def record(run: IndustrialRun) -> Dict:
    """The record of a finished run: who it is (experiment, row, setting, seed, the flags it
    ran with) and what it measured (RECORD_FIELDS of its metrics.json)."""
    metrics = load(run.run)
    kept = {name: metrics[name] for name in RECORD_FIELDS if name in metrics}
    return dict(
        {
            "experiment": run.owner,
            "row": run.row,
            "setting": run.setting,
            "seed": run.seed,
            "preset": run.run.preset,
            "overrides": run.run.overrides,
            "directory": run.run.directory,
        },
        **kept,
    )


def dumps(value: Dict) -> str:
    """JSON with one key a line and every list of numbers on one line (the calibration's
    hundreds of values stay a few lines)."""
    text = json.dumps(value, indent=1, sort_keys=True)
    return re.sub(r"\[[-0-9.eE+,\s]*\]", lambda m: re.sub(r"\s+", "", m.group(0)), text) + "\n"


def write_record(run: IndustrialRun, results_dir: str) -> str:
    """Writes the run's record under `results_dir`; returns its path."""
    path = os.path.join(results_dir, run.record)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".partial", "w") as f:
        f.write(dumps(record(run)))
    os.replace(path + ".partial", path)
    return path


def load_record(run: IndustrialRun, results_dir: str) -> Optional[Dict]:
    """The run's record under `results_dir`, or None where there is none yet."""
    path = os.path.join(results_dir, run.record)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def trained(run: IndustrialRun) -> bool:
    """Whether the run's directory holds its metrics.json (`paper.records.finished`)."""
    return finished(run.run)
