r"""Reruns the paper's Table 1 (SASRec on MovieLens-1M) through `pipelines.train`, and the
same losses on the synthetic catalog whose true P(d | u) is known.

Every (row, seed) is one `python -m pipelines.train` process with its own
output directory under --output_dir; a directory that already holds
metrics.json is skipped, and an interrupted run continues from its backup, so
the runner resumes where it stopped. After each run it rewrites the report:
a markdown table (mean ± std over seeds; on ML-1M next to the paper's numbers,
with the difference), the paper's orderings tested against the seed-to-seed
spread, a JSON of every run, and a PNG.

Usage:
  python -m pipelines.benchmarks.reproduce --dataset=ml-1m --split=loo --profile=cpu --seeds=3
  python -m pipelines.benchmarks.reproduce --profile=official_cpu --seeds=5 \
      --rows=mixed-standard,mixed-improved,mixed-standard_tfrs,full_softmax
  python -m pipelines.benchmarks.reproduce --dataset=ml-1m --split=temporal --seeds=5 \
      --rows=in_batch-none,in_batch-standard,in_batch-improved
  python -m pipelines.benchmarks.reproduce --dataset=synthetic --frequencies=static,count_min,hashed
  python -m pipelines.benchmarks.reproduce ... --parallel=2    # two runs at once, one core each
  python -m pipelines.benchmarks.reproduce ... --report_only   # tables from the runs so far
  python -m pipelines.benchmarks.reproduce ... --seeds=5 --include_recorded  # adds seeds 3-4 to
      # the committed report's seeds 0-2 without their run directories (e.g. in a fresh clone)
"""

import concurrent.futures
import functools
import json
import math
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from absl import app
from absl import flags

from pipelines import configs
from pipelines import per_query
from pipelines.run_files import RunFiles
from pipelines import significance

FLAGS = flags.FLAGS
PROFILES = ("cpu", "paper", "official", "official_cpu")
# The profiles of the paper's released protocol (pipelines/configs.py, docs/protocol.md): each
# row runs as the released script its `script` names does.
OFFICIAL_PROFILES = ("official", "official_cpu")
FREQUENCY_LABELS = {"static": "exact counts", "count_min": "count-min sketch",
                    "hashed": "hashed inter-arrival"}


class Row(NamedTuple):
    """One loss of Table 1: its config overrides and the paper's (NDCG@20, Recall@20).

    Under the official profiles a row runs as the released script `script` does:
    `released` overrides are applied on top of `overrides` and `released_label`
    says what the row then is. `official_only` rows (no paper number) compare
    like with like under the released protocol.
    """
    name: str
    label: str
    overrides: Dict[str, object]
    paper_loo: Optional[Tuple[float, float]]
    paper_temporal: Optional[Tuple[float, float]]
    script: str = ""
    released: Optional[Dict[str, object]] = None
    released_label: str = ""
    official_only: bool = False


def as_released(row: Row) -> Row:
    """The row as the official profiles run it (its released script's options and label)."""
    return row._replace(label=row.released_label or f"{row.label} [{row.script}]",
                        overrides=dict(row.overrides, **(row.released or {})))


def _softmax(negatives: str, correction: str) -> Dict[str, object]:
    return {"loss": "sampled_softmax", "negatives": negatives, "correction": correction}


# Khrylchenko et al. 2025, Table 1 (mean of 5 runs); the temporal half has no BCE / uniform rows.
ROWS = (
    Row("bce", "BCE (1 uniform negative)", {"loss": "bce", "num_negatives": 1},
        (.1564, .3468), None, script="train_sasrec.py"),
    Row("gbce", "gBCE (t = 0.75)", {"loss": "gbce"}, (.1964, .3949), (.1210, .2632),
        script="gSASRec-pytorch train_gsasrec.py"),
    Row("uniform", "sampled softmax, uniform", _softmax("uniform", "none"),
        (.1921, .3889), None, script="train_uniform.py"),
    Row("in_batch-none", "in-batch, no logQ", _softmax("in_batch", "none"),
        (.1868, .3838), (.1117, .2481), script="train_in_batch.py"),
    Row("in_batch-standard", "in-batch, standard logQ", _softmax("in_batch", "standard"),
        (.1942, .3889), (.1270, .2762), script="train_in_batch_logq_old.py",
        released={"correction": "standard_negatives"},
        released_label="in-batch, standard logQ on negatives only [train_in_batch_logq_old.py]"),
    Row("in_batch-improved", "in-batch, improved logQ", _softmax("in_batch", "improved"),
        (.1969, .3947), (.1269, .2766), script="train_in_batch_logq_new.py",
        released={"negatives": "mixed"},
        released_label="\"in-batch\", improved logQ: mixed negatives "
                       "[train_in_batch_logq_new.py]"),
    Row("mixed-none", "mixed, no logQ", _softmax("mixed", "none"), (.1882, .3853), (.1130, .2514),
        script="train_mns.py"),
    Row("mixed-standard", "mixed, standard logQ", _softmax("mixed", "standard"),
        (.1952, .3893), (.1292, .2800), script="train_mns_log_old.py",
        released={"correction": "standard_negatives"},
        released_label="mixed, standard logQ on negatives only [train_mns_log_old.py]"),
    Row("mixed-improved", "mixed, improved logQ", _softmax("mixed", "improved"),
        (.1972, .3937), (.1281, .2792), script="train_mns_log_new.py"),
    Row("full_softmax", "full softmax", {"loss": "full_softmax"}, (.1937, .3911), (.1205, .2640),
        script="train_full_softmax.py"),
    # Like with like under the released protocol; no released script, no paper number.
    Row("in_batch-improved_pool", "in-batch (released pool), improved logQ",
        _softmax("in_batch", "improved"), None, None, official_only=True,
        released_label="in-batch (released pool), improved logQ [no released script]"),
    Row("in_batch-standard_tfrs", "in-batch, standard logQ (TFRS)",
        _softmax("in_batch", "standard"), None, None, official_only=True,
        released_label="in-batch, standard logQ as TFRS (positive corrected too)"),
    Row("mixed-standard_tfrs", "mixed, standard logQ (TFRS)", _softmax("mixed", "standard"),
        None, None, official_only=True,
        released_label="mixed, standard logQ as TFRS (positive corrected too)"),
)
ROWS_BY_NAME = {row.name: row for row in ROWS}
SYNTHETIC_ROWS = ("in_batch-none", "in_batch-standard", "in_batch-improved",
                  "mixed-none", "mixed-standard", "mixed-improved")
# The orderings the paper reports: (worse-or-equal, better) pairs.
ORDERINGS = (("in_batch-none", "in_batch-standard"), ("in_batch-standard", "in_batch-improved"),
             ("mixed-none", "mixed-standard"), ("mixed-standard", "mixed-improved"))
# Paper numbers this close are one unit of the 4 digits Table 1 prints apart: no ordering.
PAPER_TIE = 1.5e-4


def paper_field(split: str) -> str:
    """The `Row` field with the paper's (NDCG@20, Recall@20) on `split`."""
    return "paper_loo" if split == "loo" else "paper_temporal"


def define_flags() -> None:
    flags.DEFINE_enum("dataset", "ml-1m", ["ml-1m", "synthetic"],
                      "ml-1m: the paper's Table 1 (the temporal split reads the GroupLens "
                      "ratings with timestamps); synthetic: the catalog with a known truth "
                      f"(preset {SYNTHETIC_PRESET} unless --preset says otherwise).")
    flags.DEFINE_enum("split", "loo", list(configs.SPLITS), "Leave-one-out or global temporal.")
    flags.DEFINE_enum("temporal_targets", "first", list(configs.TEMPORAL_TARGETS),
                      "Temporal split: which items of the test window are targets (see "
                      "pipelines.data.splits.temporal); other than 'first', the experiment "
                      "is named after it.")
    flags.DEFINE_enum("profile", "cpu", list(PROFILES),
                      "Preset of pipelines/configs.py (ml-1m); synthetic uses its own preset.")
    flags.DEFINE_integer("seeds", 3, "Seeds 0 .. N-1 of every row.", lower_bound=1)
    flags.DEFINE_list("rows", [], f"Rows to run (default: all of the split). Known: "
                      f"{', '.join(ROWS_BY_NAME)}.")
    flags.DEFINE_list("frequencies", ["static"], "Where log Q comes from: "
                      f"{', '.join(configs.FREQUENCIES)} (rows without log Q run once).")
    flags.DEFINE_string("data_path", "", "Overrides the ML-1M file (default ../shared/data).")
    flags.DEFINE_string("output_dir", "runs/reproduce", "Where the runs go.")
    flags.DEFINE_string("results_dir", "docs/results", "Where the table, JSON and PNG go.")
    flags.DEFINE_bool("report_only", False, "Write the report from finished runs; train nothing.")
    flags.DEFINE_bool("include_recorded", False,
                      "Count the runs that RESULTS_DIR/NAME.json (the report's JSON) records as "
                      "finished when their directory is gone, e.g. to add seeds in a fresh "
                      "clone, instead of training them again; the report keeps their numbers.")
    flags.DEFINE_string("preset", "", "Overrides the preset the profile picks (e.g. smoke, for "
                        "a quick check of the runner).")
    flags.DEFINE_integer("parallel", 1, "Runs trained at once. Above 1, the machine's CPUs are "
                         "split evenly between them: each run is pinned to its own CPUs and "
                         "uses that many TensorFlow threads. On 2 cores, two 1-thread runs "
                         "train about 1.15x as many epochs per hour as one 2-thread run.",
                         lower_bound=1)


# --------------------------------------------------------------------------- plan


class Run(NamedTuple):
    row: Row
    frequency: str
    seed: int
    preset: str
    overrides: Dict[str, object]   # Flags of pipelines.train on top of the preset.
    directory: str


# A report's per-run records, by (row, frequency source, seed).
Recorded = Dict[Tuple[str, str, int], Dict]


SYNTHETIC_PRESET = "synthetic_two_tower"
MODEL_NAMES = {"sasrec": "SASRec", "two_tower": "Two-tower model"}


def row_key(name: str, frequency: str) -> str:
    """A row's key in the report and its runs' folder: the row, plus the frequency source
    when it is not exact counts (e.g. in_batch-improved-count_min)."""
    return name if frequency == "static" else f"{name}-{frequency}"


def experiment_name(dataset: str, split: str, profile: str, preset: str = "",
                    temporal_targets: str = "first") -> str:
    """ml1m_SPLIT_PROFILE (ml1m_temporal_TARGETS_PROFILE), or synthetic_SPLIT_PRESET."""
    if dataset == "ml-1m":
        if split == "temporal" and temporal_targets != "first":
            return f"ml1m_{split}_{temporal_targets}_{profile}"
        return f"ml1m_{split}_{profile}"
    return f"synthetic_{split}_{preset or SYNTHETIC_PRESET}"


def plan(dataset: str, split: str, profile: str, seeds: int, rows: Sequence[str],
         frequencies: Sequence[str], output_dir: str, data_path: str = "",
         preset: str = "", temporal_targets: str = "first") -> List[Run]:
    """The runs to make, in the order they are made (seed by seed, so that an interrupted
    sweep has every row at the same number of seeds)."""
    if profile not in PROFILES:
        raise ValueError(f"--profile must be one of {', '.join(PROFILES)}; received {profile!r}.")
    for frequency in frequencies:
        if frequency not in configs.FREQUENCIES:
            raise ValueError(f"--frequencies must be among {', '.join(configs.FREQUENCIES)}; "
                             f"received {frequency!r}.")
    if not rows:
        if dataset == "synthetic":
            rows = SYNTHETIC_ROWS
        else:
            rows = [r.name for r in ROWS if (r.paper_loo if split == "loo" else r.paper_temporal)]
    unknown = [name for name in rows if name not in ROWS_BY_NAME]
    if unknown:
        raise ValueError(f"--rows must be among {', '.join(ROWS_BY_NAME)}; received "
                         f"{', '.join(unknown)}.")
    official = profile in OFFICIAL_PROFILES and dataset != "synthetic"
    only_official = [name for name in rows if ROWS_BY_NAME[name].official_only]
    if only_official and not official:
        raise ValueError(f"Rows {', '.join(only_official)} exist under the official profiles "
                         f"({', '.join(OFFICIAL_PROFILES)}) only; received --profile={profile}.")
    base: Dict[str, object] = {"split": split}
    if dataset != "synthetic":
        # The temporal split needs timestamps: the GroupLens ratings, not SASRec's file.
        base["dataset"] = "ml-1m" if split == "loo" else "ml-1m-ratings"
        base["index"] = "exact"  # The paper's protocol; ScaNN is evaluated in its own issue.
        if data_path:
            base["data_path"] = data_path
    if split == "temporal" and temporal_targets != "first":
        base["temporal_targets"] = temporal_targets
    if preset:
        if preset not in configs.PRESETS:
            raise ValueError(f"--preset must be one of {', '.join(configs.PRESETS)}; received "
                             f"{preset!r}.")
        if dataset == "synthetic" and configs.PRESETS[preset].dataset != "synthetic":
            raise ValueError(f"--preset={preset} is not a synthetic-data preset.")
    preset = preset or (SYNTHETIC_PRESET if dataset == "synthetic" else profile)
    root = os.path.join(output_dir, experiment_name(dataset, split, profile, preset,
                                                    temporal_targets))
    runs = []
    for seed in range(seeds):
        for name in rows:
            row = ROWS_BY_NAME[name]
            if official:
                row = as_released(row)
            uses_log_q = row.overrides.get("correction", "none") != "none"
            for frequency in (frequencies if uses_log_q else frequencies[:1]):
                overrides = dict(base, **row.overrides, seed=seed)
                if uses_log_q:
                    overrides["frequency"] = frequency
                source = frequency if uses_log_q else "static"
                runs.append(Run(row, source, seed, preset, overrides,
                                os.path.join(root, row_key(name, source), f"seed{seed}")))
    return runs


def with_finished_runs(runs: Sequence[Run], dataset: str, split: str, profile: str,
                       frequencies: Sequence[str], output_dir: str, data_path: str = "",
                       preset: str = "", temporal_targets: str = "first",
                       max_seeds: int = 20, recorded: Optional[Recorded] = None) -> List[Run]:
    """`runs`, plus every finished (or `recorded`) run of the same experiment they leave out
    (other rows, more seeds), in table order: a sweep over some rows never drops the others
    from the report."""
    names = {run.row.name for run in runs}
    default = plan(dataset, split, profile, 1, [], frequencies, output_dir, data_path, preset,
                   temporal_targets)
    rows = [row.name for row in ROWS if row.name in names | {r.row.name for r in default}]
    planned = {run.directory for run in runs}
    extra = [run for run in plan(dataset, split, profile, max_seeds, rows, frequencies,
                                 output_dir, data_path, preset, temporal_targets)
             if run.directory not in planned and finished(run, recorded)]
    order = {name: i for i, name in enumerate(rows)}
    return sorted(list(runs) + extra, key=lambda r: (order[r.row.name],
                                                      frequencies.index(r.frequency)
                                                      if r.frequency in frequencies else 0,
                                                      r.seed))


def command(run: Run) -> List[str]:
    return ([sys.executable, "-m", "pipelines.train", f"--preset={run.preset}",
             f"--output_dir={run.directory}"]
            + [f"--{key}={value}" for key, value in sorted(run.overrides.items())])


def label(run: Run) -> str:
    """How the driver's progress lines name a run."""
    return f"{run.row.name} [{run.frequency}] seed {run.seed}"


def _key(run: Run) -> Tuple[str, str, int]:
    return run.row.name, run.frequency, run.seed


def finished(run: Run, recorded: Optional[Recorded] = None) -> bool:
    """Whether the run's directory holds metrics.json, or `recorded` holds the run."""
    return (os.path.exists(RunFiles(run.directory).metrics)
            or (recorded is not None and _key(run) in recorded))


def load_recorded(path: str) -> Recorded:
    """The runs a report's JSON (`write_report`) records, or {} when there is no such file.

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
            raise ValueError(f"{path}: run {number} of its \"runs\" lacks "
                             f"{', '.join(missing)}; it was not written by this runner.")
        record = dict(record)
        if "baselines" not in record:
            entry = report.get("summary", {}).get(row_key(record["row"], record["frequency"]),
                                                  {})
            baselines = {}
            if "popularity_ndcg@20" in entry:
                baselines["popularity"] = {"ndcg@20": entry["popularity_ndcg@20"][0]}
            if "oracle_recall@10" in entry:
                baselines["oracle"] = {"recall@10": entry["oracle_recall@10"][0]}
            record["baselines"] = baselines
        recorded[(record["row"], record["frequency"], int(record["seed"]))] = record
    return recorded


def cpu_slots(parallel: int, cpus: Optional[Sequence[int]] = None) -> List[Optional[List[int]]]:
    """The CPUs of each of `parallel` concurrent runs: this process's CPUs split evenly
    (the remainder to the first slots); [None] (no pinning) for one run at a time."""
    if parallel == 1:
        return [None]
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else list(cpus)
    if parallel > len(cpus):
        raise ValueError(f"--parallel={parallel} is more than the {len(cpus)} CPUs this "
                         "process may use; each run needs at least one.")
    size, extra = divmod(len(cpus), parallel)
    slots, start = [], 0
    for slot in range(parallel):
        end = start + size + (1 if slot < extra else 0)
        slots.append(cpus[start:end])
        start = end
    return slots


def execute(run: Run, cpus: Optional[Sequence[int]] = None) -> float:
    """Runs `run` as a pipelines.train process (its output in OUTPUT/train.log); wall seconds.
    With `cpus`, the process is pinned to them and TensorFlow uses that many threads."""
    os.makedirs(run.directory, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    pin = None
    if cpus is not None:
        env.update(TF_NUM_INTRAOP_THREADS=str(len(cpus)), TF_NUM_INTEROP_THREADS=str(len(cpus)))
        pin = functools.partial(os.sched_setaffinity, 0, list(cpus))
    started, files = time.time(), RunFiles(run.directory)
    with open(files.train_log, "a") as log:
        log.write(" ".join(command(run)) + (f"  # CPUs {list(cpus)}" if cpus else "") + "\n")
        log.flush()
        process = subprocess.run(command(run), stdout=log, stderr=subprocess.STDOUT,
                                 env=env, preexec_fn=pin, check=False)
    seconds = time.time() - started
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command(run))} exited with {process.returncode}; see "
                           f"{files.train_log}.")
    with open(files.wall_seconds, "w") as f:
        json.dump({"seconds": seconds}, f)  # This session's share of the run (it may resume).
    return seconds


def run_all(pending: Sequence[Run], slots: Sequence[Optional[List[int]]]):
    """Trains `pending` in order, len(slots) at a time, each on its slot's CPUs; yields
    (number, run, wall seconds) as each finishes (in the driver's thread, so the report is
    written by one writer). A failed run stops the others from starting; running ones finish."""
    free, failed = queue.Queue(), threading.Event()
    for slot in slots:
        free.put(slot)

    def train(number: int, run: Run):
        cpus = free.get()
        try:
            if failed.is_set():
                return None  # An earlier run failed: do not start this one.
            print(f"[{number}/{len(pending)}] {label(run)}: {' '.join(command(run))}"
                  + (f"  # CPUs {cpus}" if cpus else ""), flush=True)
            return number, run, execute(run, cpus)
        except BaseException:
            failed.set()
            raise
        finally:
            free.put(cpus)

    with concurrent.futures.ThreadPoolExecutor(len(slots)) as pool:
        futures = [pool.submit(train, number, run) for number, run in enumerate(pending, 1)]
        try:
            for future in concurrent.futures.as_completed(futures):
                result = future.result()
                if result is not None:  # None: not started after a failure.
                    yield result
        finally:
            for future in futures:
                future.cancel()  # Runs not started yet; the running ones finish.


# ------------------------------------------------------------------------- report


# Validation NDCG@10 averaged over the epochs from this one on: the level a row's curve
# settles at. The best epoch is the highest of hundreds of noisy evaluations (on the
# official profiles, 512 validation users), so the plateau is the steadier comparison.
# The curves still rise slowly after it, so two runs are compared over the same epochs:
# from this one to the shorter run's last (`window_difference`).
PLATEAU_FROM = 100
# Fewest epochs a plateau (or a pair's common window) must hold to be reported.
PLATEAU_MIN_EPOCHS = 10


def logged_curve(run_directory: str, writer: str, tag: str) -> Dict[int, float]:
    """{epoch: value} of the scalar `tag` in the run's TensorBoard `writer` logs (every
    restart)."""
    import glob  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tensorflow.core.util import event_pb2  # pylint: disable=import-outside-toplevel
    curve = {}
    for path in sorted(glob.glob(os.path.join(RunFiles(run_directory).logs, writer, "events*"))):
        try:
            for record in tf.data.TFRecordDataset(path):
                event = event_pb2.Event.FromString(record.numpy())
                for value in event.summary.value:
                    if value.tag == tag:
                        curve[int(event.step)] = float(tf.make_ndarray(value.tensor))
        except tf.errors.DataLossError:
            pass  # A kill cut the file's last record; the run's restart logs on in a new file.
    return curve


def validation_curve(run_directory: str) -> Dict[int, float]:
    """{epoch: validation NDCG@10}, logged after every epoch."""
    return logged_curve(run_directory, "validation", "epoch_ndcg@10")


def test_curve(run_directory: str) -> Dict[int, float]:
    """{epoch: test NDCG@20} logged every `test_curve_every` epochs (a diagnostic that
    training never reads; empty for runs made without it)."""
    return logged_curve(run_directory, "train", "epoch_test_ndcg@20")


def validation_plateau(curve: Dict[int, float], start: int = PLATEAU_FROM) -> Optional[float]:
    """Mean of the curve over epochs >= `start`, or None when it has fewer than
    PLATEAU_MIN_EPOCHS of them."""
    late = [value for epoch, value in curve.items() if epoch >= start]
    return float(np.mean(late)) if len(late) >= PLATEAU_MIN_EPOCHS else None


def window_difference(base: Dict[int, float], row: Dict[int, float],
                      start: int = PLATEAU_FROM) -> Optional[float]:
    """mean(row) - mean(base) over the epochs both curves hold from `start` up to the
    shorter curve's last epoch (so a longer run's later, higher epochs do not count);
    None when that window holds fewer than PLATEAU_MIN_EPOCHS epochs."""
    end = min(max(base, default=-1), max(row, default=-1))
    epochs = [e for e in base if start <= e <= end and e in row]
    if len(epochs) < PLATEAU_MIN_EPOCHS:
        return None
    return float(np.mean([row[e] for e in epochs]) - np.mean([base[e] for e in epochs]))


def _curve_list(curve: Dict[int, float]) -> List[Optional[float]]:
    """A curve as a JSON list indexed by epoch (None where an epoch has no value)."""
    return [curve.get(epoch) for epoch in range(max(curve) + 1)] if curve else []


def _curve_dict(values: Sequence[Optional[float]]) -> Dict[int, float]:
    return {epoch: value for epoch, value in enumerate(values) if value is not None}


def load(run: Run, recorded: Optional[Recorded] = None) -> Dict:
    """The run's metrics.json (and wall time), or else its record in `recorded`."""
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
    curve = validation_curve(run.directory)
    plateau = validation_plateau(curve)
    if plateau is not None:
        metrics["validation_plateau"] = plateau
    if curve:
        metrics["validation_curve"] = _curve_list(curve)
    tested = test_curve(run.directory)
    if tested:
        metrics["test_curve"] = _curve_list(tested)
    return metrics


def summarise(values: Sequence[float]) -> Tuple[float, float, int]:
    """(mean, sample std (NaN for one value), n)."""
    values = np.asarray(values, np.float64)
    return (float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else float("nan"),
            len(values))


def _pm(mean: float, std: float) -> str:
    return f"{mean:.4f}" if math.isnan(std) else f"{mean:.4f} ± {std:.4f}"


def best_epoch_fit(runs: Sequence[Dict]) -> Optional[Tuple[int, float, float]]:
    """(n, correlation, least-squares slope per 100 epochs) of test NDCG@20 on the best epoch,
    over the `per_run` records that have one; None below 3 runs or with no spread to fit.

    Descriptive, not causal: how closely the test score follows where early stopping landed."""
    epochs, scores = np.asarray([(r["best_epoch"], r["ndcg@20"]) for r in runs
                                 if r.get("best_epoch") is not None],
                                np.float64).reshape(-1, 2).T
    if len(epochs) < 3 or not (epochs.std() > 0 and scores.std() > 0):
        return None
    return (len(epochs), float(np.corrcoef(epochs, scores)[0, 1]),
            float(100 * np.polyfit(epochs, scores, 1)[0]))


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
        entry = {"row": group["row"], "frequency": group["frequency"], "n": len(found),
                 "planned_seeds": sum(1 for r in runs if r.directory.split(os.sep)[-2] == key)}
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
            entry["by_seed_curve"] = {m["seed"]: _curve_dict(m["validation_curve"])
                                      for m in found if m.get("validation_curve")}
            entry["by_seed_test_curve"] = {m["seed"]: _curve_dict(m["test_curve"])
                                           for m in found if m.get("test_curve")}
            best = [m["best_epoch"] for m in found if m.get("best_epoch") is not None]
            if best:
                entry["best_epoch"] = summarise(best)
            entry["recorded_seeds"] = [m["seed"] for m in found if m.get("recorded")]
            entry["per_run"] = [{"seed": m["seed"], "ndcg@20": m["test"]["ndcg@20"],
                                 "recall@20": m["test"]["recall@20"],
                                 "plateau": m.get("validation_plateau"),
                                 "best_epoch": m.get("best_epoch"), "epochs": m["epochs_run"],
                                 "steps": m.get("steps"), "train_seconds": m["train_seconds"]}
                                for m in found]
            if "kl_to_truth" in found[0]:
                entry["kl_to_truth"] = summarise([m["kl_to_truth"] for m in found])
                entry["oracle_recall@10"] = summarise(
                    [m["baselines"]["oracle"]["recall@10"] for m in found])
            banded = [m["by_popularity"] for m in found if m.get("by_popularity")]
            if banded:
                entry["banded_runs"] = len(banded)
                for band in ("head", "torso", "tail"):
                    entry[f"{band}_recall@10"] = summarise(
                        [bands[f"{band}_recall@10"] for bands in banded])
            entry["popularity_ndcg@20"] = summarise(
                [m["baselines"]["popularity"]["ndcg@20"] for m in found])
        summary[key] = entry
    return summary


def ordering_verdicts(summary: Dict[str, Dict], metric: str = "ndcg@20",
                      paper_column: Optional[str] = None) -> List[str]:
    """One line per ordering of the paper: does it hold, and is the gap beyond the noise?

    The pairs are `ORDERINGS`, Table 1's leave-one-out orderings. With `paper_column`
    ("paper_loo" or "paper_temporal"), a pair is ordered as the paper's own numbers on
    that split order it, and the line quotes them: on the temporal split the paper has
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
        papers = ((getattr(a["row"], paper_column), getattr(b["row"], paper_column))
                  if paper_column else (None, None))
        papers = papers if all(papers) else None
        if papers and papers[0][0] > papers[1][0]:
            worse, better, a, b, papers = better, worse, b, a, papers[::-1]
        (mean_a, std_a, n_a), (mean_b, std_b, n_b) = a[metric], b[metric]
        gap = mean_b - mean_a
        if n_a > 1 and n_b > 1:
            t, df, p = significance.welch_t(gap, std_a, n_a, std_b, n_b)
            noise = (f"{'beyond' if p < 0.05 else 'within'} the seed-to-seed spread "
                     f"(Welch t = {t:.2f} with {df} df, two-sided p = {_small(p, 3)})")
        else:
            noise = "spread unknown (one seed)"
        if papers and papers[1][0] - papers[0][0] < PAPER_TIE:
            relation = "vs"
            verdict = "the paper has them level (one unit of its last digit apart), ours differ"
        else:
            relation = ("<" if gap > 0 else ">=") if worse.endswith("none") else (
                "<=" if gap >= 0 else ">")
            holds = gap > 0 if worse.endswith("none") else gap >= 0
            verdict = f"the paper's ordering {'holds' if holds else 'does not hold'},"
        lines.append(f"- {a['row'].label} {relation} {b['row'].label}: {metric} "
                     f"{mean_a:.4f} (n={n_a}) vs {mean_b:.4f} (n={n_b}), gap {gap:+.4f}; "
                     f"{verdict} {noise}."
                     + (f" The paper: {papers[0][0]:.4f} vs {papers[1][0]:.4f}." if papers
                        else ""))
    return lines


# Where each finished run's per-query test metrics lie in a results directory:
# PER_QUERY_DIR/REPORT/ROW/seedN.npz (`campaign.sh per_query`, `pipelines.evaluate`).
PER_QUERY_DIR = "per_query"

# Paired by seed (same seed: same data order and initialisation): (baseline, row, what it asks
# under the official profiles, where the standard rows correct the negatives only as released).
PAIRS = (("mixed-standard", "mixed-improved", "improved vs the paper's standard (negatives only)"),
         ("mixed-standard", "mixed-standard_tfrs", "TFRS's standard vs the paper's standard"),
         ("mixed-standard_tfrs", "mixed-improved", "improved vs TFRS's standard"),
         ("full_softmax", "mixed-standard", "the paper's standard vs full softmax"),
         ("full_softmax", "mixed-improved", "improved vs full softmax"),
         ("in_batch-standard", "in_batch-improved", "improved vs the paper's standard, in-batch"),
         ("in_batch-standard", "in_batch-improved_pool",
          "improved (released pool) vs the paper's standard, in-batch"),
         ("in_batch-standard", "in_batch-standard_tfrs",
          "TFRS's standard vs the paper's standard, in-batch"),
         ("in_batch-standard_tfrs", "in_batch-improved_pool",
          "improved (released pool) vs TFRS's standard, in-batch"),
         ("in_batch-none", "in_batch-standard", "the paper's standard vs no correction, in-batch"))


def _small(value: float, places: int) -> str:
    """`value` to `places` decimals, or to 2 significant digits where those would print 0."""
    return f"{value:.{places}f}" if value == 0 or abs(value) >= 0.5 * 10 ** -places \
        else f"{value:.1e}"


def _verdict(difference: float, p: float) -> str:
    """How a paired difference reads at the 5% level."""
    if p >= 0.05:
        return "not different from equal at p < 0.05"
    return "higher at p < 0.05" if difference > 0 else "lower at p < 0.05"


def paired_differences(summary: Dict[str, Dict], pairs=PAIRS, by: str = "by_seed",
                       metric: str = "NDCG@20", official: bool = True) -> List[str]:
    """One line per pair of rows with common seeds: the mean of the per-seed differences
    d = row - baseline of `by` (test NDCG@20; or "by_seed_curve" / "by_seed_test_curve":
    validation NDCG@10 / test NDCG@20 averaged over the pair's common window,
    `window_difference`), each seed's d, its standard error
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
            value = (window_difference(a[by][seed], b[by][seed]) if by.endswith("_curve")
                     else b[by][seed] - a[by][seed])
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
                spread += (f"; SE {_small(error, 4)}, paired t = {t:.2f} with {len(d) - 1} "
                           f"df, two-sided p = {_small(p, 3)}; {b['row'].label} is {verdict}")
        else:
            spread = "one pair: SE unknown"
        if not official:
            question = f"{b['row'].label} vs {a['row'].label}"
        lines.append(f"- {question}: d = {mean:+.4f} {metric} over {len(d)} paired seed"
                     f"{'s' if len(d) > 1 else ''} ({', '.join(map(str, seeds))})"
                     f"{': ' if len(d) > 1 else '; '}{spread}.")
    return lines


def paired_by_user(summary: Dict[str, Dict], per_query_dir: str, pairs=PAIRS,
                   official: bool = True, metric: str = "ndcg@20") -> List[str]:
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
            paths = [os.path.join(per_query_dir, row_key(name, "static"), f"seed{seed}"
                                  + per_query.SUFFIX) for name in (base, row)]
            if not all(os.path.exists(path) for path in paths):
                continue
            result = per_query.compare(*(per_query.load(path) for path in paths),
                                       *paths)[metric]
            verdict = _verdict(result["difference"], result["p"])
            name = question if official else f"{b['row'].label} vs {a['row'].label}"
            lines.append(f"- {name}, seed {seed}: d = {result['difference']:+.4f} "
                         f"{metric.replace('ndcg', 'NDCG')} over {result['n']} test users "
                         f"({result['mean_b']:.4f} against {result['mean_a']:.4f}); SE "
                         f"{_small(result['se'], 4)}, paired t = {result['t']:.2f}, two-sided "
                         f"p = {_small(result['p'], 3)}; {b['row'].label} is {verdict} on these "
                         "users.")
    return lines


def markdown(summary: Dict[str, Dict], dataset: str, split: str, profile: str,
             command_line: str, preset: str = "", temporal_targets: str = "first",
             per_query_dir: Optional[str] = None) -> str:
    if dataset == "ml-1m":
        title = ("SASRec on MovieLens-1M, " + ("leave-one-out" if split == "loo" else
                                               "global temporal split (last 10% test, "
                                               f"targets: {temporal_targets})")
                 + f", `{profile}` profile")
    else:
        preset = preset or SYNTHETIC_PRESET
        title = (f"{MODEL_NAMES[configs.PRESETS[preset].model]} on the synthetic catalog "
                 f"(known P(d|u)), {split} split, `{preset}` preset")
    lines = [f"# {title}", "", f"Command: `{command_line}`", "",
             "Mean ± sample std over seeds (n). Test split, exact search over the whole catalog, "
             "the user's history filtered. "
             + ("Epochs, steps (optimizer steps) and train s/run: means of the whole runs', "
                "over every restart (runs made before `progress.json` existed count their last "
                "process only; – where no run recorded its steps)." if dataset == "ml-1m" else
                "Train s/run: the mean of the whole runs', over every restart (runs made before "
                "`progress.json` existed count their last process only)."),
             ""]
    done = {k: v for k, v in summary.items() if v["n"]}
    if dataset == "ml-1m":
        column = paper_field(split)
        lines += ["| loss | n | NDCG@20 | paper | Δ | Recall@20 | paper | Δ | epochs | "
                  "best epoch | steps | train s/run |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for key, entry in summary.items():
            paper = getattr(entry["row"], column)
            if not entry["n"]:
                papers = (f"{paper[0]:.4f}", f"{paper[1]:.4f}") if paper else ("–", "–")
                lines.append(f"| {entry['row'].label} | 0/{entry['planned_seeds']} | not run "
                             f"| {papers[0]} | | | {papers[1]} | | | | | |")
                continue
            ndcg, recall = entry["ndcg@20"], entry["recall@20"]
            paper_cells = ((f"{paper[0]:.4f}", f"{ndcg[0] - paper[0]:+.4f}",
                            f"{paper[1]:.4f}", f"{recall[0] - paper[1]:+.4f}") if paper
                           else ("–", "", "–", ""))
            lines.append(f"| {entry['row'].label} | {entry['n']} | {_pm(*ndcg[:2])} | "
                         f"{paper_cells[0]} | {paper_cells[1]} | {_pm(*recall[:2])} | "
                         f"{paper_cells[2]} | {paper_cells[3]} | {entry['epochs'][0]:.0f} | "
                         + (f"{entry['best_epoch'][0]:.0f}" if "best_epoch" in entry else "–")
                         + " | " + (f"{entry['steps'][0]:.0f}" if "steps" in entry else "–")
                         + f" | {entry['train_seconds'][0]:.0f} |")
        if done:
            first = next(iter(done.values()))
            lines += ["", f"Popularity ranker, same protocol: NDCG@20 "
                      f"{first['popularity_ndcg@20'][0]:.4f}."]
            banded = [entry for entry in done.values() if "banded_runs" in entry]
            if banded:
                lines += ["", "By popularity: Recall@10 of the test targets in each third of "
                          "the catalog by training count (mean ± std over the runs that "
                          "recorded it, n).", "",
                          "| loss | n | head R@10 | torso R@10 | tail R@10 |",
                          "|---|---|---|---|---|"]
                lines += [f"| {entry['row'].label} | {entry['banded_runs']} | "
                          + " | ".join(_pm(*entry[f"{band}_recall@10"][:2])
                                       for band in ("head", "torso", "tail")) + " |"
                          for entry in banded]
    else:
        lines += ["| loss | log Q from | n | KL to truth (nats) | Recall@10 | oracle Recall@10 | "
                  "head R@10 | torso R@10 | tail R@10 | NDCG@10 | train s/run |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for key, entry in done.items():
            source = (FREQUENCY_LABELS[entry["frequency"]]
                      if entry["row"].overrides.get("correction", "none") != "none" else "–")
            lines.append(
                f"| {entry['row'].label} | {source} | {entry['n']} | "
                f"{_pm(*entry['kl_to_truth'][:2])} | {_pm(*entry['recall@10'][:2])} | "
                f"{entry['oracle_recall@10'][0]:.4f} | {entry['head_recall@10'][0]:.4f} | "
                f"{entry['torso_recall@10'][0]:.4f} | {entry['tail_recall@10'][0]:.4f} | "
                f"{_pm(*entry['ndcg@10'][:2])} | {entry['train_seconds'][0]:.0f} |")
        lines += ["", "KL: mean over test users of KL(true next-item law || softmax of the "
                  "model's scores), both over the items not in the user's history. Head / torso "
                  "/ tail: Recall@10 of test targets in each third of the catalog by training "
                  "count."]
    recorded = [f"{entry['row'].label}" + ("" if entry["frequency"] == "static" else
                                          f" [{FREQUENCY_LABELS[entry['frequency']]}]")
                + f" seed{'s' if len(entry['recorded_seeds']) > 1 else ''} "
                + ", ".join(str(seed) for seed in entry["recorded_seeds"])
                for entry in done.values() if entry.get("recorded_seeds")]
    if recorded:
        lines += ["", "Taken from the JSON of the report this one replaced (`--include_recorded`; "
                  "their run directories were not on disk): " + "; ".join(recorded) + "."]
    official = profile in OFFICIAL_PROFILES and dataset != "synthetic"
    paired = paired_differences(done, official=official)
    if paired:
        lines += ["", "## Paired by seed (NDCG@20)", "",
                  "d = row - baseline for each seed both ran (the same data order and "
                  "initialisation), then its mean and standard error over seeds. Best epoch: "
                  "mean 0-based epoch of the best validation NDCG@10; early stopping waited "
                  "`patience` epochs after it.", ""] + paired
    by_user = paired_by_user(done, per_query_dir, official=official) if per_query_dir else []
    if by_user:
        lines += ["", "Paired by test user: the same pair and seed, d per test user (each "
                  "finished run's per-query metrics, `docs/results/per_query/`), its mean and "
                  "standard error over users. This SE is the test set's noise alone, a floor "
                  "under the seed-to-seed SE above: a d beyond it is real for this seed's two "
                  "models, not yet for the two losses.", ""] + by_user
    plateau = paired_differences(
        done, by="by_seed_curve", official=official,
        metric=f"validation NDCG@10 (mean over the pair's epochs {PLATEAU_FROM} to the shorter "
               "run's last)")
    if plateau:
        lines += ["", f"Validation plateau: validation NDCG@10 (TensorBoard logs) of the two runs "
                  f"of a seed, each averaged over the same epochs, from {PLATEAU_FROM} to the "
                  "shorter run's last, paired the same way. The best epoch is the highest of "
                  "hundreds of noisy evaluations; the plateau is the level the curve settles at. "
                  "The curves still rise slowly after epoch "
                  f"{PLATEAU_FROM}, so each pair is compared over the epochs both ran.", ""]
        lines += plateau
    tested = paired_differences(
        done, by="by_seed_test_curve", official=official,
        metric=f"test NDCG@20 (mean over the pair's logged epochs {PLATEAU_FROM} to the "
               "shorter run's last)")
    if tested:
        lines += ["", "Test curve (a diagnostic; nothing in training reads it): test NDCG@20 "
                  "of the current weights, logged every `test_curve_every` epochs, averaged "
                  f"over the logged epochs both runs of a seed trained, from {PLATEAU_FROM} to "
                  "the shorter run's last, paired the same way. It compares the losses on the "
                  "test split over many epochs, where the line above compares them at one "
                  "epoch each, the one the validation curve picked.", ""] + tested
    verdicts = ordering_verdicts(
        {k: v for k, v in done.items() if v["frequency"] == "static"},
        paper_column=paper_field(split) if dataset == "ml-1m" else None)
    if verdicts:
        lines += (["", "## The paper's orderings (NDCG@20)", "",
                   "Each pair ordered as the paper's numbers for this split order it, "
                   "unpaired."] if dataset == "ml-1m" else
                  ["", "## The paper's orderings, here (NDCG@20)"]) + [""] + verdicts
    if dataset == "ml-1m" and done:
        lines += ["", "## Every run", "",
                  "Plateau: the run's validation NDCG@10 averaged over its epochs >= "
                  f"{PLATEAU_FROM} (– where it has fewer than {PLATEAU_MIN_EPOCHS}; the paired "
                  "plateau above compares each pair over its common epochs). Best epoch: "
                  "0-based, of the epochs the run trained; steps: optimizer steps in all.", "",
                  "| loss | seed | NDCG@20 | Recall@20 | plateau | best epoch / epochs | steps "
                  "| train s |", "|---|---|---|---|---|---|---|---|"]
        for entry in done.values():
            for run in entry["per_run"]:
                plateau = "–" if run["plateau"] is None else f"{run['plateau']:.4f}"
                best = "–" if run["best_epoch"] is None else str(run["best_epoch"])
                steps = "–" if run["steps"] is None else str(run["steps"])
                lines.append(f"| {entry['row'].label} | {run['seed']} | {run['ndcg@20']:.4f} | "
                             f"{run['recall@20']:.4f} | {plateau} | {best} / {run['epochs']} | "
                             f"{steps} | {run['train_seconds']:.0f} |")
        fits = [(label, best_epoch_fit(runs)) for label, runs in
                 [("all runs", [r for entry in done.values() for r in entry["per_run"]])]
                 + [(entry["row"].label, entry["per_run"]) for entry in done.values()]]
        fits = [(label, fit) for label, fit in fits if fit is not None]
        if fits:
            lines += ["", "## Test score against the best epoch", "",
                      "Test NDCG@20 regressed on the best epoch (0-based), run by run: the "
                      "correlation and the least-squares slope. Descriptive, not causal: how closely "
                      "the test score follows where early stopping landed.", ""]
            lines += [f"- {label}: r = {r:+.2f} over {n} runs, slope {slope:+.4f} NDCG@20 per "
                      "100 epochs." for label, (n, r, slope) in fits]
    return "\n".join(lines) + "\n"


def plot(summary: Dict[str, Dict], dataset: str, split: str, path: str) -> None:
    import matplotlib  # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
    done = [(k, v) for k, v in summary.items() if v["n"]]
    if not done:
        return
    metric = "ndcg@20" if dataset == "ml-1m" else "kl_to_truth"
    figure, axis = plt.subplots(figsize=(8, 0.45 * len(done) + 1.5))
    labels = [v["row"].label + ("" if v["frequency"] == "static" else f" [{v['frequency']}]")
              for _, v in done]
    means = [v[metric][0] for _, v in done]
    errors = [0.0 if math.isnan(v[metric][1]) else v[metric][1] for _, v in done]
    positions = np.arange(len(done))
    axis.barh(positions, means, xerr=errors, color="#4c72b0", alpha=0.8, label="ours (± std)")
    if dataset == "ml-1m":
        paper = [getattr(v["row"], paper_field(split)) for _, v in done]
        axis.scatter([p[0] if p else np.nan for p in paper], positions, color="#c44e52",
                     marker="D", zorder=3, label="paper")
        axis.set_xlabel("test NDCG@20")
    else:
        axis.set_xlabel("KL(truth || model), nats (lower is better)")
    axis.set_yticks(positions)
    axis.set_yticklabels(labels)
    axis.invert_yaxis()
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(done) < 5 else -0.12),
                ncol=2, frameon=False)
    axis.set_title(os.path.basename(path).rsplit(".", 1)[0])
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_report(runs: Sequence[Run], dataset: str, split: str, profile: str,
                 results_dir: str, command_line: str, temporal_targets: str = "first",
                 recorded: Optional[Recorded] = None) -> str:
    """Writes NAME.md (returned), NAME.json (the summary and every run's numbers) and NAME.png
    to `results_dir`, from the finished runs among `runs` (and those `recorded` holds)."""
    summary = aggregate(runs, recorded)
    os.makedirs(results_dir, exist_ok=True)
    preset = runs[0].preset if runs else ""
    name = experiment_name(dataset, split, profile, preset, temporal_targets)
    text = markdown(summary, dataset, split, profile, command_line, preset, temporal_targets,
                    per_query_dir=os.path.join(results_dir, PER_QUERY_DIR, name))
    with open(os.path.join(results_dir, name + ".md"), "w") as f:
        f.write(text)
    serialisable = {key: dict({k: v for k, v in entry.items()
                               if k not in ("row", "per_run", "by_seed_curve")},
                              label=entry["row"].label, overrides=entry["row"].overrides)
                    for key, entry in summary.items()}
    per_run = []
    for r in runs:
        if finished(r, recorded):
            metrics = load(r, recorded)
            per_run.append(dict(directory=metrics.get("directory", r.directory), seed=r.seed,
                                row=r.row.name, frequency=r.frequency,
                                **{k: v for k, v in metrics.items()
                                   if k in ("test", "kl_to_truth", "baselines", "by_popularity",
                                            "epochs_run", "best_epoch", "steps",
                                            "validation_plateau", "validation_curve",
                                            "test_curve",
                                            "train_seconds", "wall_seconds",
                                            "git_revision")}))
    with open(os.path.join(results_dir, name + ".json"), "w") as f:
        json.dump({"summary": serialisable, "runs": per_run}, f, indent=1)
    plot(summary, dataset, split, os.path.join(results_dir, name + ".png"))
    return text


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    try:
        runs = plan(FLAGS.dataset, FLAGS.split, FLAGS.profile, FLAGS.seeds, FLAGS.rows,
                    FLAGS.frequencies, FLAGS.output_dir, FLAGS.data_path, FLAGS.preset,
                    FLAGS.temporal_targets)
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    command_line = "python -m pipelines.benchmarks.reproduce " + " ".join(
        f"--{name}={','.join(value) if isinstance(value, list) else value}"
        for name, value in (("dataset", FLAGS.dataset), ("split", FLAGS.split),
                            ("profile", FLAGS.profile), ("seeds", FLAGS.seeds),
                            ("rows", FLAGS.rows), ("frequencies", FLAGS.frequencies),
                            ("preset", FLAGS.preset),
                            ("temporal_targets", "" if FLAGS.temporal_targets == "first"
                             else FLAGS.temporal_targets))
        if value not in ([], None, "")) + (" --include_recorded" if FLAGS.include_recorded else "")
    name = experiment_name(FLAGS.dataset, FLAGS.split, FLAGS.profile,
                           runs[0].preset if runs else "", FLAGS.temporal_targets)
    recorded = (load_recorded(os.path.join(FLAGS.results_dir, name + ".json"))
                if FLAGS.include_recorded else None)
    pending = [run for run in runs if not finished(run, recorded)]
    reported = with_finished_runs(runs, FLAGS.dataset, FLAGS.split, FLAGS.profile,
                                  FLAGS.frequencies, FLAGS.output_dir, FLAGS.data_path,
                                  FLAGS.preset, FLAGS.temporal_targets, recorded=recorded)
    from_record = sum(1 for run in runs if finished(run, recorded) and not finished(run))
    print(f"{len(runs)} runs planned, {len(runs) - len(pending)} already finished"
          + (f" ({from_record} of them recorded in {FLAGS.results_dir}/{name}.json)."
             if from_record else "."), flush=True)
    if not FLAGS.report_only:
        try:
            slots = cpu_slots(min(FLAGS.parallel, max(len(pending), 1)))
        except ValueError as error:
            raise app.UsageError(str(error)) from None
        for number, run, seconds in run_all(pending, slots):
            test = load(run)["test"]
            print(f"[{number}/{len(pending)}] {label(run)}: NDCG@20 {test['ndcg@20']:.4f} Recall@20 "
                  f"{test['recall@20']:.4f} ({seconds:.0f} s)", flush=True)
            write_report(reported, FLAGS.dataset, FLAGS.split, FLAGS.profile,
                         FLAGS.results_dir, command_line, FLAGS.temporal_targets, recorded)
    print(write_report(reported, FLAGS.dataset, FLAGS.split, FLAGS.profile, FLAGS.results_dir,
                       command_line, FLAGS.temporal_targets, recorded))


if __name__ == "__main__":
    define_flags()
    app.run(main)
