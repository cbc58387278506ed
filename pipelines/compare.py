r"""`tfrs-logq compare`: which correction (or negatives, or any flag) is better on my log?

Trains every row x seed as its own `pipelines.train` run, with the flags given after `--`
common to all and each row's own on top, then writes a report of what the runs measured
(test metrics at the best epoch, as each run's metrics.json has them):

  tfrs-logq compare --output_dir=runs/compare/mylog --corrections=standard,improved \
      --seeds=3 -- --preset=industrial --dataset=events --data_path='logs/*.parquet' \
      --user_column=user_id --item_column=item_id --time_column=timestamp
  tfrs-logq compare --output_dir=runs/compare/negatives --seeds=3 \
      --row='in_batch: --negatives=in_batch' --row='mixed: --negatives=mixed' \
      -- --preset=industrial_smoke

Rows: `--corrections=A,B` is one row per correction (`--correction=A`); `--row='NAME:
--flag=value ...'` is any row. Every row names the same flags (their values differ), and
the rows' configs may differ in those flags alone: a pair that differs in more would be
confounded, and is refused. The first row (or `--baseline`) is what the others are compared
with.

Seeds: seed N trains every row with `--seed=N` (weights, shuffles, negatives), so the rows
are paired by seed. With `--vary_data` on the web-scale synthetic log, seed N also draws a
fresh log (`--synthetic_log_seed=N`: a new law, events and test day), and the spread over
seeds is that of training and data together.

Layout (OUTPUT: --output_dir; RESULTS: --results_dir, by default OUTPUT):

  OUTPUT/ROW/seedN/         the run (`pipelines.train`'s directory; its weights are deleted
                            once its record is written, unless --keep_weights)
  RESULTS/compare.json      the comparison's rows and common flags (a rerun must match)
  RESULTS/ROW/seedN.json    the run's record: its config, command, code revision and
                            metrics (a few kB; a run from a tree with uncommitted changes
                            also stores the diff, ROW/seedN.diff, and names its SHA-256)
  RESULTS/report.md         means, paired differences, popularity thirds and advice
  RESULTS/report.json       the same numbers

Resumes: a rerun of the same command trains only the runs without a record, and a killed
run resumes from its backup. A run that fails is recorded as failed (its log's last lines),
the others go on; the report names it and gives its row no mean until a rerun trains it.

Statistics (`pipelines.significance`): per metric, each row's mean and SD over seeds; each
row minus the baseline, paired by seed: its mean, SE, Student's t p, Holm's adjustment over
the comparisons (one per row but the baseline, metric by metric), and the far end of its 90%
interval (TOST at 5%: a difference beyond it either way is rejected); with `--margin=M`,
TOST's p against +-M as well. A difference the same at every seed has SE 0: tested (p 0, or
1 where it is 0). One seed gives no p-values, and says so. The advice reads every metric:
a row that trails the baseline at any (Holm p < 0.05) is named, and equivalence is claimed
only where the test queries' SE (a bootstrap of each run's per-query values) allows it.
"""

import contextlib
import ctypes
import functools
import glob
import hashlib
import json
import math
import os
import pty
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import tty
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
)

import numpy as np
from absl import app
from absl import flags

from pipelines import cli
from pipelines import configs
from pipelines import console
from pipelines import keras_train
from pipelines import per_query as per_query_lib
from pipelines import schedule
from pipelines import significance
from pipelines.data import logs
from pipelines.run_files import WEIGHTS_REMOVED
from pipelines.run_files import RunFiles
from pipelines.run_files import removed_weights  # noqa: F401  (re-exported)
from pipelines.run_files import write_json

FLAGS = flags.FLAGS
SEEDS = 3
ALPHA = 0.05

# The fields of a run's metrics.json that its record keeps (its config is kept whole).
RECORD_FIELDS = (
    "test",
    "test_exact",
    "test_scann",
    "ann_overlap@1000",
    "baselines",
    "by_popularity",
    "kl_to_truth",
    "calibration",
    "train_seconds",
    "wall_seconds",
    "steps",
    "epochs_run",
    "num_items",
    "num_users",
    "num_test_queries",
    "index_items",
    "peak_rss_mb",
    # Each phase's measured and predicted peak: what the memory model is checked against.
    "phase_peak_rss_mb",
    "predicted_peak_rss_mb",
    "phase_seconds",
    "git_revision",
    "code_diff_sha256",
    "event_log",
)
# Set by compare for each run: never a row's or the common flags'.
RESERVED = ("output_dir", "seed")
# Flags of how a run is carried out (its memory, its processes), the same for every row.
NOT_A_ROW = ("memory_budget_mb", "strategy")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=-]*$")
_FLAG = re.compile(r"^--([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$", re.DOTALL)
# How many of a failed run's log lines its record keeps.
LOG_LINES = 8
# Fewer test queries than this and the advice says that only large differences can show.
SMALL_TEST = 1000
# Bootstrap resamples of the test queries.
REPLICATES = 1000


class Row(NamedTuple):
    name: str
    flags: Tuple[Tuple[str, str], ...]  # (flag, value) in the order given.

    def arguments(self) -> List[str]:
        return [f"--{name}={value}" for name, value in self.flags]

    def describe(self) -> str:
        return " ".join(self.arguments())


class Run(NamedTuple):
    row: Row
    seed: int
    directory: str  # The run's --output_dir.
    record: str  # Its record's path.
    command: List[str]


# ---------------------------------------------------------------------------- the plan


def _flag_pairs(tokens: Sequence[str], where: str) -> List[Tuple[str, str]]:
    """`--name=value` tokens (`--name` / `--noname` for a bool) as (name, value), the
    renamed fields' old names read as their new ones."""

    pairs = []
    for token in tokens:
        match = _FLAG.match(token)
        if not match:
            raise ValueError(f"{where}: {token!r} is not a flag; give --name=value.")
        name, value = match.group(1), match.group(2)
        if value is None:
            negated = name.startswith("no") and (
                name[2:] in configs.FIELDS or name[2:] in configs.RENAMED
            )
            name, value = (name[2:], "false") if negated else (name, "true")
        pairs.append((configs.RENAMED.get(name, name), value))
    return pairs


def parse_row(text: str) -> Row:
    """A `--row`: 'NAME: --flag=value ...'."""
    name, colon, rest = text.partition(":")
    name = name.strip()
    if not colon or not _NAME.match(name):
        raise ValueError(
            f"--row must read 'NAME: --flag=value ...' with a NAME of letters, digits, "
            f"'_', '.', '-' or '='; received --row={text!r}."
        )
    try:
        tokens = shlex.split(rest)
    except ValueError as error:
        raise ValueError(f"--row={text!r}: {error}.") from None
    pairs = _flag_pairs(tokens, f"--row={text!r}")
    if not pairs:
        raise ValueError(f"--row={text!r} sets no flag: a row is the flags it changes.")
    return Row(name, tuple(pairs))


def make_rows(row_texts: Sequence[str], corrections: Sequence[str]) -> List[Row]:
    """The rows of --corrections (one per correction) then of --row, checked: at least two,
    distinct names, the same flags named in each, none set twice or reserved."""
    bad = [c for c in corrections if not _NAME.match(c)]
    if bad:
        raise ValueError(f"--corrections takes correction names; received {bad[0]!r}.")
    rows = [Row(c, (("correction", c),)) for c in corrections] + [parse_row(t) for t in row_texts]
    if len(rows) < 2:
        raise ValueError(
            f"compare needs at least two rows (--corrections and --row); received {len(rows)}."
        )
    names = [row.name for row in rows]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"Rows need distinct names; received {', '.join(repeated)} twice.")
    for row in rows:
        flags_named = [name for name, _ in row.flags]
        twice = sorted({name for name in flags_named if flags_named.count(name) > 1})
        if twice:
            raise ValueError(f"Row {row.name} sets --{', --'.join(twice)} more than once.")
        reserved = [name for name in flags_named if name in RESERVED]
        if reserved:
            raise ValueError(
                f"Row {row.name} sets --{reserved[0]}, which compare sets for each run "
                "(--seeds, --output_dir)."
            )
        how = [name for name in flags_named if name in NOT_A_ROW]
        if how:
            raise ValueError(
                f"Row {row.name} sets --{how[0]}, which says how a run is carried out, not "
                "what it trains: set it once after -- (for every row)."
            )
    first = rows[0]
    for row in rows[1:]:
        a, b = {n for n, _ in first.flags}, {n for n, _ in row.flags}
        if a != b:
            only = sorted(a ^ b)
            raise ValueError(
                f"Rows {first.name} and {row.name} name different flags (--{', --'.join(only)} "
                "in one only): the other would take the preset's value unnamed, and the "
                "comparison would differ in more than the flags named. Give every row its "
                "value of those flags, or set them once after --."
            )
    seen: Dict[Tuple[Tuple[str, str], ...], str] = {}
    for row in rows:
        key = tuple(sorted(row.flags))
        if key in seen:
            raise ValueError(f"Rows {seen[key]} and {row.name} set the same flags: one run.")
        seen[key] = row.name
    return rows


def check_common(common: Sequence[str], rows: Sequence[Row] = ()) -> List[Tuple[str, str]]:
    """The common flags (those after `--`), checked: flags only, none reserved, none that a
    row sets (the row's value would silently win: each run's command puts it last)."""
    pairs = _flag_pairs(common, "the flags after --")
    by_rows: Dict[str, Row] = {}
    for row in rows:
        for name, _ in row.flags:
            by_rows.setdefault(name, row)
    for name, value in pairs:
        if name in by_rows:
            row = by_rows[name]
            raise ValueError(
                f"The flags after -- set --{name}={value}, which the rows set (row {row.name}: "
                f"--{name}={dict(row.flags)[name]}): each row trains its own value, so leave "
                f"--{name} out after --."
            )
        if name in RESERVED:
            raise ValueError(
                f"The flags after -- set --{name}, which compare sets for each run "
                "(--output_dir: compare's own; seeds: --seeds)."
            )
        if name == "strategy" and value not in ("default", "mirrored"):
            raise ValueError(
                f"compare trains each run in one process; received --strategy={value}. "
                "A cluster's runs: `tfrs-logq cluster` one run at a time."
            )
    return pairs


def row_configs(rows: Sequence[Row], common: Sequence[str], vary_data: bool) -> Dict[str, Any]:
    """Each row's `configs.Config` at seed 0, as `pipelines.train` reads its flags (an error
    names the row), checked: the rows' configs differ in the flags the rows name alone."""
    # pylint: disable=import-outside-toplevel
    from pipelines import train  # TensorFlow.

    built = {}
    for row in rows:
        values = flags.FlagValues()
        train.define_flags(values)
        arguments = [*common, *row.arguments(), "--seed=0", "--output_dir=unused"]
        try:
            values(["compare", *arguments])
            built[row.name] = train.config_from_flags(values)
        except (flags.Error, ValueError) as error:
            raise ValueError(f"Row {row.name} ({row.describe()}): {error}") from None
        if built[row.name].training.framework == "keras" or values["framework"].value == "keras":
            # As the Keras job's run will hold it (its search exact: `keras_config`).
            built[row.name], _ = keras_train.keras_config(
                built[row.name], index_given=values["index"].value is not None
            )
    first = rows[0]
    named = {name for name, _ in first.flags}
    base = built[first.name].flat()
    for row in rows[1:]:
        other = built[row.name].flat()
        differ = sorted(k for k in base if base[k] != other.get(k))
        unnamed = [k for k in differ if k not in named]
        if "index" in unnamed and all(
            configs.indexes(flat["index"])[0] == "exact" for flat in (base, other)
        ):  # A Keras row's exact search against "both": both report exact search first.
            unnamed.remove("index")
        if unnamed:
            raise ValueError(
                f"Rows {first.name} and {row.name} differ in --{', --'.join(unnamed)} too, "
                f"which no row names (through --{', --'.join(sorted(named))}): the "
                "comparison would be confounded. Set them once after --."
            )
    flats = {name: config.flat() for name, config in built.items()}
    for i, a in enumerate(rows):
        for b in rows[i + 1 :]:
            if flats[a.name] == flats[b.name]:
                raise ValueError(
                    f"Rows {a.name} ({a.describe()}) and {b.name} ({b.describe()}) train the "
                    "same configuration: one run twice, nothing to compare."
                )
    if vary_data:
        datasets = {c.data.dataset for c in built.values()}
        if datasets != {"web_synthetic"}:
            raise ValueError(
                "--vary_data draws a fresh synthetic log per seed: it needs "
                f"--dataset=web_synthetic; received --dataset={', '.join(sorted(datasets))}."
            )
    return built


def plan(
    rows: Sequence[Row],
    common: Sequence[str],
    seeds: int,
    output_dir: str,
    results_dir: str,
    vary_data: bool = False,
    memory_budget_mb: int = 0,
) -> List[Run]:
    """The runs, seed by seed (an interrupted comparison has every row at the same number of
    seeds), each a `pipelines.train` command."""
    runs = []
    for seed in range(seeds):
        for row in rows:
            directory = os.path.join(output_dir, row.name, f"seed{seed}")
            arguments = [*common, *row.arguments()]
            # The Keras job's own module: its children import no TensorFlow.
            module = (
                "pipelines.keras_train"
                if cli.framework_in(arguments) == "keras"
                else ("pipelines.train")
            )
            command = [sys.executable, "-m", module, *arguments]
            command.append(f"--seed={seed}")
            if vary_data:
                command.append(f"--synthetic_log_seed={seed}")
            if memory_budget_mb:
                command.append(f"--memory_budget_mb={memory_budget_mb}")
            command.append(f"--output_dir={directory}")
            record = os.path.join(results_dir, row.name, f"seed{seed}.json")
            runs.append(Run(row, seed, directory, record, command))
    return runs


# ---------------------------------------------------------------------------- records


def per_query_path(run: Run) -> str:
    """RESULTS/ROW/seedN.npz: the run's per-query test metrics, beside its record."""
    return run.record[: -len(".json")] + per_query_lib.SUFFIX


class DamagedRecord(ValueError):
    """A record (or compare.json) that is not readable JSON: named, never a traceback."""


def read_json(path: str, what: str) -> Any:
    """The JSON at `path`; a file that is not JSON raises `DamagedRecord` naming it."""
    try:
        with open(path) as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DamagedRecord(
            f"{path} is damaged: {what} that is not readable JSON ({error}). Delete it (the "
            "same command then trains that run again) or restore it from version control."
        ) from None


def load_record(run: Run) -> Optional[Dict]:
    if not os.path.exists(run.record):
        return None
    return read_json(run.record, "a run's record")


# A file hashed whole up to this size; past it, its first and last HASH_BYTES (with its size
# and mtime): a change in a big file's middle shows only as its mtime.
WHOLE_HASH_BYTES = 8 << 20
HASH_BYTES = 1 << 20


def fingerprint(path: str) -> Dict[str, Any]:
    """{"size", "mtime", "sha256", "hashed"} of a file: sha256 of the whole file up to
    WHOLE_HASH_BYTES ("whole"), else of its first and last HASH_BYTES ("first and last
    MiB"), so that a log of gigabytes is fingerprinted in milliseconds."""
    status = os.stat(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        if status.st_size <= WHOLE_HASH_BYTES:
            for block in iter(lambda: f.read(HASH_BYTES), b""):
                digest.update(block)
            hashed = "whole"
        else:
            digest.update(f.read(HASH_BYTES))
            f.seek(status.st_size - HASH_BYTES)
            digest.update(f.read(HASH_BYTES))
            hashed = "first and last MiB"
    return {
        "size": status.st_size,
        "mtime": round(status.st_mtime, 3),
        "sha256": digest.hexdigest(),
        "hashed": hashed,
    }


def data_files(config) -> List[str]:
    """The absolute paths of the files a config reads its data from: --data_path (a file, a
    directory's files, or a glob's) and --item_catalog; none for the synthetic logs, which
    the runs draw (web_synthetic writes its log at --data_path), nor for MovieLens read
    from $TFRS_LOGQ_DATA without --data_path."""
    paths: List[str] = []
    data = config.data
    if data.dataset in ("yambda", "ml-32m"):  # The files a public log reads, not its directory's.
        paths += logs.public_log_files(data)
    elif data.data_path and data.dataset not in ("synthetic", "web_synthetic", "ml-1m-tfds"):
        paths.append(data.data_path)
    if data.item_catalog and data.item_catalog != "log":
        paths.append(data.item_catalog)
    found: set = set()
    for path in paths:
        for match in sorted(glob.glob(os.path.expanduser(path))) or [path]:
            if os.path.isdir(match):
                for root, directories, names in os.walk(match):
                    directories[:] = sorted(d for d in directories if not d.startswith("."))
                    found.update(
                        os.path.abspath(os.path.join(root, n)) for n in names if n[:1] != "."
                    )
            elif os.path.isfile(match):
                found.add(os.path.abspath(match))
    return sorted(found)


def fingerprints(configs_by_row: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Every row's data files (`data_files`), each `fingerprint`ed once, by absolute path."""
    paths = sorted({p for config in configs_by_row.values() for p in data_files(config)})
    return {path: fingerprint(path) for path in paths}


def changed_files(stored: Mapping[str, Dict], current: Mapping[str, Dict]) -> List[str]:
    """What differs between two `fingerprints`: a file gone, added, of another size or hash,
    or (hashed in part) of another mtime, each named with why."""
    changes = [f"{path} (gone)" for path in sorted(set(stored) - set(current))]
    changes += [f"{path} (new)" for path in sorted(set(current) - set(stored))]
    for path in sorted(set(stored) & set(current)):
        was, now = stored[path], current[path]
        if was["size"] != now["size"]:
            changes.append(f"{path} ({was['size']:,} bytes then, {now['size']:,} now)")
        elif was["sha256"] != now["sha256"]:
            changes.append(f"{path} (other content: sha256 of the {now['hashed']} differs)")
        elif now["hashed"] != "whole" and was["mtime"] != now["mtime"]:
            changes.append(
                f"{path} (modified since: only its first and last MiB are hashed, and its "
                "mtime differs)"
            )
    return changes


def finished(run: Run) -> bool:
    """Whether the run has a record of a finished run, or a metrics.json to record."""
    record = load_record(run)
    if record is not None:
        return record.get("status") == "finished"
    return os.path.exists(RunFiles(run.directory).metrics)


def _common_record(run: Run) -> Dict[str, Any]:
    return {
        "row": run.row.name,
        "flags": dict(run.row.flags),
        "seed": run.seed,
        "command": shlex.join(run.command),
        "directory": run.directory,
        # Where the command ran: its relative paths (--data_path too) are relative to it.
        "working_directory": os.getcwd(),
    }


def write_record(run: Run, data_fingerprints: Optional[Mapping[str, Dict]] = None) -> Dict:
    """Writes the record of a finished run (RECORD_FIELDS of its metrics.json, its config
    whole, the working directory and `data_fingerprints` (`fingerprints`) of its data files;
    the code diff copied beside it when the run's tree had one); returns it."""
    files = RunFiles(run.directory)
    with open(files.metrics) as f:
        metrics = json.load(f)
    with open(files.config) as f:
        config = json.load(f)
    if os.path.exists(files.wall_seconds):
        with open(files.wall_seconds) as f:
            metrics["wall_seconds"] = json.load(f)["seconds"]
    record = dict(
        _common_record(run),
        status="finished",
        config=config,
        **{name: metrics[name] for name in RECORD_FIELDS if name in metrics},
    )
    if data_fingerprints is not None:
        record["data_files"] = dict(data_fingerprints)
    os.makedirs(os.path.dirname(run.record), exist_ok=True)
    if record.get("code_diff_sha256") and os.path.exists(files.code_diff):
        shutil.copyfile(files.code_diff, run.record[: -len(".json")] + ".diff")
    if os.path.exists(files.per_query):  # Each test query's metrics: the bootstrap's input.
        shutil.copyfile(files.per_query, per_query_path(run))
    write_json(run.record, record)
    return record


def write_failure(run: Run, error: str) -> Dict:
    """Writes the record of a failed run: its error and its log's last lines."""
    lines: List[str] = []
    log = RunFiles(run.directory).train_log
    if os.path.exists(log):
        with open(log, errors="replace") as f:
            lines = [line.rstrip("\n") for line in f][-LOG_LINES:]
    record = dict(_common_record(run), status="failed", error=error, log_tail=lines)
    os.makedirs(os.path.dirname(run.record), exist_ok=True)
    write_json(run.record, record)
    return record


# ---------------------------------------------------------------------------- statistics


def _metric_order(name: str) -> Tuple[int, int, str]:
    kind, _, k = name.partition("@")
    order = {"recall": 0, "ndcg": 1, "hit_rate": 2}.get(kind, 3)
    return order, int(k) if k.isdigit() else 0, name


def metric_names(records: Iterable[Dict]) -> List[str]:
    """The test metrics every finished record has, recall first, by K."""
    names: Optional[set] = None
    for record in records:
        if record.get("status") == "finished":
            keys = set(record.get("test", {}))
            names = keys if names is None else names & keys
    return sorted(names or (), key=_metric_order)


def _describe(values: Sequence[float]) -> Dict[str, float]:
    array = np.asarray(values, np.float64)
    return {
        "mean": float(array.mean()),
        "sd": float(array.std(ddof=1)) if array.size > 1 else 0.0,
        "n": int(array.size),
    }


def _mean_of_seeds(by_seed: Mapping[int, Sequence[float]]) -> float:
    """The mean over seeds of each seed's mean."""
    return float(np.mean([np.mean(values) for values in by_seed.values()]))


def summarize(
    rows: Sequence[Row],
    seeds: int,
    records: Mapping[Tuple[str, int], Dict],
    baseline: str,
    margin: Optional[float] = None,
) -> Dict[str, Any]:
    """The report's numbers from the records by (row, seed): per row its status and means;
    per row but the baseline its paired differences (Holm over the rows, metric by metric);
    the popularity thirds; the data-only baselines."""
    finished_records = [r for r in records.values() if r.get("status") == "finished"]
    metrics = metric_names(finished_records)
    summary: Dict[str, Any] = {
        "metrics": metrics,
        "seeds": seeds,
        "baseline": baseline,
        "margin": margin,
        "rows": {},
        "differences": {},
        "baselines": {},
    }
    queries = [r["num_test_queries"] for r in finished_records if "num_test_queries" in r]
    if queries:
        summary["test_queries"] = [int(min(queries)), int(max(queries))]
    for row in rows:
        done = {s: records[(row.name, s)] for s in range(seeds) if (row.name, s) in records}
        ok = {s: r for s, r in done.items() if r.get("status") == "finished"}
        entry: Dict[str, Any] = {
            "flags": dict(row.flags),
            "finished": sorted(ok),
            "failed": sorted(s for s, r in done.items() if r.get("status") == "failed"),
            "pending": sorted(set(range(seeds)) - set(done)),
        }
        complete = len(ok) == seeds
        entry["complete"] = complete
        if ok:
            entry["metrics"] = {
                m: _describe([ok[s]["test"][m] for s in sorted(ok)]) for m in metrics
            }
            thirds = {}
            for key in sorted({k for r in ok.values() for k in r.get("by_popularity", {})}):
                kept = [r["by_popularity"][key] for r in ok.values() if key in r["by_popularity"]]
                if len(kept) == len(ok):
                    thirds[key] = _describe(kept)["mean"]
            entry["by_popularity"] = thirds
            seconds = [r["train_seconds"] for r in ok.values() if "train_seconds" in r]
            if seconds:
                entry["train_seconds"] = float(np.mean(seconds))
        summary["rows"][row.name] = entry
    for kind in ("popularity", "oracle"):
        # Per seed first (each seed's rows score the same baseline on the same test, a fresh
        # log's with --vary_data), then over the seeds: a seed with more rows finished does
        # not weigh more.
        values: Dict[str, Dict[int, List[float]]] = {}
        bands: Dict[str, Dict[int, List[float]]] = {}
        for (_, seed), record in records.items():
            if record.get("status") != "finished":
                continue
            recorded = record.get("baselines", {}).get(kind) or {}
            for m, value in recorded.items():
                if m in metrics and isinstance(value, (int, float)):
                    values.setdefault(m, {}).setdefault(seed, []).append(value)
            for key, value in (recorded.get("by_popularity") or {}).items():
                bands.setdefault(key, {}).setdefault(seed, []).append(value)
        if values:
            summary["baselines"][kind] = {m: _mean_of_seeds(v) for m, v in values.items()}
        if bands:
            summary.setdefault("baselines_by_popularity", {})[kind] = {
                key: _mean_of_seeds(v) for key, v in bands.items()
            }
    others = [row.name for row in rows if row.name != baseline]
    for name in others:
        summary["differences"][name] = {}
        for m in metrics:
            by_seed = [
                {
                    s: records[(row, s)]["test"].get(m)
                    for s in range(seeds)
                    if records.get((row, s), {}).get("status") == "finished"
                }
                for row in (baseline, name)
            ]
            result = significance.paired_by_seed(
                by_seed[0], by_seed[1], margin=margin, test_constant=True
            )
            if result is not None:
                summary["differences"][name][m] = result
    for m in metrics:  # Holm over the rows compared with the baseline, metric by metric.
        significance.holm_adjust(summary["differences"][name].get(m) for name in others)
    return summary


def bootstrap_se(
    pairs: Sequence[Tuple[np.ndarray, np.ndarray]],
    same_queries: bool,
    replicates: int = REPLICATES,
    seed: int = 0,
) -> float:
    """The SE over test queries of a mean over seeds of b - a, by bootstrap: `pairs` holds
    each seed's per-query values (a, b) on that seed's queries. Each replicate resamples the
    queries with replacement, the same resample for every seed where they share their
    queries (`same_queries`), else each seed's own; returns the replicates' SD."""
    rng = np.random.default_rng(seed)
    d = [np.asarray(b, np.float64) - np.asarray(a, np.float64) for a, b in pairs]
    totals = np.zeros(replicates)
    batch = max(1, min(replicates, 2_000_000 // max(len(v) for v in d)))
    for start in range(0, replicates, batch):
        size = min(batch, replicates - start)
        if same_queries:
            picks = rng.integers(0, len(d[0]), size=(size, len(d[0])))
            for values in d:
                totals[start : start + size] += values[picks].mean(axis=1)
        else:
            for values in d:
                picks = rng.integers(0, len(values), size=(size, len(values)))
                totals[start : start + size] += values[picks].mean(axis=1)
    return float((totals / len(d)).std(ddof=1))


def add_query_spread(
    summary: Dict[str, Any], per_query: Mapping[Tuple[str, int], Dict], replicates: int = REPLICATES
) -> None:
    """Adds to each paired difference with per-query values for all its seeds "se_queries"
    (`bootstrap_se` over the test queries) and "share_queries", the queries' share of the
    variance se_queries^2 / (se_queries^2 + se^2), where se is the SE over seeds; and what
    the difference excludes over another draw of test users as well as of training:
    "excluded_queries", the far end of its 90% interval with both SEs
    (`significance.with_extra_se`), and with a margin "tost_p_queries". Where each seed
    tested its own queries (a fresh log each), the seeds' SE holds their draw already: those
    are the seeds' own."""
    base, margin = summary["baseline"], summary.get("margin")
    for name, results in summary["differences"].items():
        for metric, result in results.items():
            records: List[Any] = [
                (per_query.get((base, s)), per_query.get((name, s))) for s in result["seeds"]
            ]
            if not records or any(a is None or b is None for a, b in records):
                continue
            if any(
                not np.array_equal(a["users"], b["users"])
                or a["targets_digest"] != b["targets_digest"]
                or a.get("index") != b.get("index")  # A ScaNN row's against an exact one.
                or metric not in a["values"]
                or metric not in b["values"]
                for a, b in records
            ):
                continue  # Not the same queries (or search) within a seed: no pairing.
            first = records[0][0]
            same = all(
                np.array_equal(a["users"], first["users"])
                and a["targets_digest"] == first["targets_digest"]
                for a, _ in records
            )
            pairs = [(a["values"][metric], b["values"][metric]) for a, b in records]
            spread = bootstrap_se(pairs, same, replicates)
            result["se_queries"] = spread
            # With other queries at each seed (a fresh log), the seeds' spread holds the
            # queries' draw already: the SE stands alone, no share of the two.
            if same and "se" in result and spread + result["se"] > 0:
                result["share_queries"] = spread**2 / (spread**2 + result["se"] ** 2)
            if "se" not in result:
                continue  # One seed: nothing to combine.
            if same:
                both = significance.with_extra_se(
                    result["mean"], result["se"], spread, len(result["seeds"]) - 1, margin
                )
                result["excluded_queries"] = both["excluded"]
                if margin is not None:
                    result["tost_p_queries"] = both["tost_p"]
            else:
                result["excluded_queries"] = result["excluded"]
                if margin is not None:
                    result["tost_p_queries"] = result["tost_p"]


# ---------------------------------------------------------------------------- the report


def _number(value: float, places: int = 4) -> str:
    if value == 0 or abs(value) >= 0.5 * 10**-places:
        return f"{value:.{places}f}"
    return f"{value:.1e}"


def _verdict(result: Optional[Dict[str, Any]]) -> str:
    """better / worse / level at Holm's p < ALPHA; "untested" without a p."""
    if not result or "p_holm" not in result:
        return "untested"
    if result["p_holm"] >= ALPHA:
        return "level"
    return "better" if result["mean"] > 0 else "worse"


# What "excluded" is, wherever the report and the advice name it.
BOUND = "the far end of the 90% interval, TOST at 5%"


def _difference_cell(result: Optional[Dict[str, Any]]) -> str:
    if not result:
        return "–"
    head = f"{result['mean']:+.4f}"
    if "p" not in result:
        return f"{head} (1 seed: no p-value)"
    if result.get("same"):
        text = f"{head} (the same at every seed: SE 0, Holm {_number(result['p_holm'], 3)}"
    else:
        text = (
            f"{head} (SE {_number(result['se'])}, p {_number(result['p'], 3)}, Holm "
            f"{_number(result['p_holm'], 3)}"
        )
    text += f"; 90% CI to ±{_number(result['excluded'])}"
    if "tost_p" in result:
        text += f"; TOST p {_number(result['tost_p'], 3)}"
    return text + ")"


def _listed(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _at(results: Mapping[str, Dict[str, Any]], names: Sequence[str]) -> str:
    """'recall@10 (-0.0153, Holm p 0.001) and ...': each metric with its difference."""
    return _listed(
        [
            f"{m} ({results[m]['mean']:+.4f}, Holm p {_number(results[m]['p_holm'], 3)})"
            for m in names
        ]
    )


def verdicts(summary: Dict[str, Any]) -> Dict[str, Dict[str, str]]:
    """Per row but the baseline, per metric: better / worse / level / untested."""
    return {
        name: {m: _verdict(results.get(m)) for m in summary["metrics"]}
        for name, results in summary["differences"].items()
    }


def _equivalence(summary: Dict[str, Any], result: Dict[str, Any], base: str, name: str) -> str:
    """What a level difference excludes, over seeds and (where known) over test queries, and
    whether it lies within ±margin: claimed only where the test queries' SE allows it."""
    margin = summary.get("margin")
    queries = summary.get("test_queries") or [0, 0]
    small = 0 < queries[0] < SMALL_TEST
    text = (
        f"on these test queries the seeds exclude a difference beyond "
        f"±{_number(result['excluded'])} ({BOUND})"
    )
    if "excluded_queries" in result and "share_queries" in result:
        text += (
            f"; over another draw of test users as well (SE {_number(result['se_queries'])} "
            f"over queries beside {_number(result['se'])} over seeds), beyond "
            f"±{_number(result['excluded_queries'])}"
        )
    if margin is None:
        if "excluded_queries" not in result:
            text += (
                "; the runs kept no per-query values, so the test queries' own uncertainty is "
                "not in it" + (f", and {queries[0]:,} queries is a small test" if small else "")
            )
        return text
    shown = _number(margin)
    if "tost_p_queries" in result:
        if result["tost_p_queries"] < ALPHA:
            return text + (
                f"; so {name} and {base} are equivalent within ±{shown} (TOST p "
                f"{_number(result['tost_p_queries'], 3)}, the test queries' SE included)"
            )
        if result["tost_p"] < ALPHA:
            return text + (
                f"; the seeds alone would place it within ±{shown} (TOST p "
                f"{_number(result['tost_p'], 3)}), but the test is too small to: with its "
                f"queries' SE, TOST p {_number(result['tost_p_queries'], 3)}. No equivalence "
                "is claimed; a larger test would tell"
            )
        return text + (
            f"; not placed within ±{shown} (TOST p {_number(result['tost_p_queries'], 3)})"
        )
    if result["tost_p"] < ALPHA:
        return text + (
            f"; the seeds alone would place it within ±{shown} (TOST p "
            f"{_number(result['tost_p'], 3)}), but the runs kept no per-query values to tell "
            "whether the test is large enough"
            + (f" ({queries[0]:,} queries is likely too small)" if small else "")
            + ": no equivalence is claimed"
        )
    return text + f"; not placed within ±{shown} (TOST p {_number(result['tost_p'], 3)})"


def advice(summary: Dict[str, Any], primary: str) -> str:
    """A paragraph of advice from the summary's numbers alone, reading every metric: each
    row's Holm-significant differences from the baseline are named; "use X" only for a row
    that leads somewhere and trails nowhere; "keep the baseline" only where no row leads at
    any metric; "pick the cheaper" only among rows level with the baseline at every metric.
    `primary` (--metric) is read first: the level rows' bounds are given at it."""
    base, rows, seeds = summary["baseline"], summary["rows"], summary["seeds"]
    metrics = summary["metrics"]
    if not metrics:
        failed = sum(len(e["failed"]) for e in rows.values())
        return "No run has finished yet: nothing to advise." + (
            f" {failed} runs failed (the table of runs below names them)." if failed else ""
        )
    sentences = []
    broken = [
        f"{name} (seeds {', '.join(map(str, e['failed']))} failed)"
        for name, e in rows.items()
        if e["failed"]
    ]
    missing = [
        f"{name} (seeds {', '.join(map(str, e['pending']))})"
        for name, e in rows.items()
        if e["pending"]
    ]
    if broken:
        sentences.append(
            "Runs failed: " + "; ".join(broken) + ". Their rows have no mean until the same "
            "command trains them again; the differences below pair only the seeds that finished."
        )
    if missing:
        sentences.append("Runs not trained yet: " + "; ".join(missing) + ".")
    by_row = verdicts(summary)
    if all(v == "untested" for row in by_row.values() for v in row.values()):
        if seeds < 2:
            sentences.append(
                "With one seed a row there are no p-values: each difference below is one draw "
                "of training noise. Run --seeds=3 or more before choosing."
            )
        else:
            sentences.append(
                f"No row has two seeds paired with {base}: no p-values yet (the same command "
                "trains what is missing)."
            )
        return " ".join(sentences)
    order = [primary] + [m for m in metrics if m != primary]
    leaders, trades, level_everywhere = [], [], []
    k = sum("p_holm" in r.get(primary, {}) for r in summary["differences"].values())
    family = f"Holm over the {k} rows compared, metric by metric" if k > 1 else "one row compared"
    for name, results in summary["differences"].items():
        verdict = by_row[name]
        wins = [m for m in order if verdict[m] == "better"]
        losses = [m for m in order if verdict[m] == "worse"]
        untested = [m for m in order if verdict[m] == "untested"]
        if wins and losses:
            trades.append(name)
            sentences.append(
                f"{name} leads {base} at {_at(results, wins)} but trails it at "
                f"{_at(results, losses)}: a trade-off, to choose by the metric your product "
                "counts."
            )
        elif wins:
            leaders.append(name)
            sentences.append(
                f"{name} leads {base} at {_at(results, wins)} and trails it at none of the "
                f"{len(metrics) - len(untested)} metrics tested ({family})."
            )
        elif losses:
            sentences.append(f"{name} trails {base} at {_at(results, losses)}.")
        tested_level = [m for m in order if verdict[m] == "level"]
        if tested_level and not wins and not losses:
            result = results[tested_level[0]]
            sentences.append(
                f"{name} and {base} are level at "
                + ("every metric tested" if len(tested_level) > 1 else tested_level[0])
                + f" ({family}, Holm p ≥ {ALPHA}); at {tested_level[0]} "
                f"({result['mean']:+.4f}, Holm p {_number(result['p_holm'], 3)}) "
                + _equivalence(summary, result, base, name)
                + "."
            )
            if not untested:
                level_everywhere.append(name)
        if untested:
            sentences.append(
                f"{name} is not tested against {base} at {_listed(untested)} (fewer than two "
                "seeds paired)."
            )
    if len(leaders) == 1 and not trades:
        sentences.append(f"Use {leaders[0]} on this log.")
    elif leaders:
        others = [n for n in summary["differences"] if n not in leaders[:1]]
        sentences.append(
            f"Prefer {_listed(leaders)} to {base}: "
            + ("each leads" if len(leaders) > 1 else "it leads")
            + f" somewhere and trails nowhere; against {_listed(others)} "
            + ("they are" if len(leaders) > 1 else "it is")
            + f" not compared here (the same command with --baseline={leaders[0]} "
            "--report_only compares them)."
        )
    elif trades:
        sentences.append(
            f"No row is ahead of {base} at every metric without trailing it at another: "
            "which to keep depends on the metric your product counts."
        )
    else:
        text = f"No row beats {base} at any metric: keep {base}"
        cost = {n: rows[n].get("train_seconds") for n in [base, *level_everywhere]}
        priced = {n: c for n, c in cost.items() if c is not None}
        if level_everywhere and len(priced) > 1:
            cheapest = min(priced, key=priced.__getitem__)
            shown = ", ".join(f"{n} {c:.0f}" for n, c in priced.items())
            if cheapest != base:
                text += (
                    f", or the cheaper {cheapest}, level with it at every metric (training "
                    f"seconds: {shown})"
                )
            else:
                text += f", the cheapest of the rows level with it (training seconds: {shown})"
        sentences.append(text + ".")
    for name, results in summary["differences"].items():
        result = results.get(primary, {})
        if "share_queries" in result:
            share = result["share_queries"]
            sentences.append(
                f"Of the uncertainty of {name} − {base} at {primary}, "
                + (
                    f"{share:.0%} is the test queries (SE {_number(result['se_queries'])} over "
                    f"queries, {_number(result['se'])} over seeds): a larger test would tell more "
                    "than more seeds."
                    if share > 0.5
                    else f"{1 - share:.0%} is training (SE {_number(result['se'])} over seeds, "
                    f"{_number(result['se_queries'])} over queries): more seeds would tell more "
                    "than a larger test."
                )
            )
    popularity = summary["baselines"].get("popularity", {}).get(primary)
    means = [
        entry["metrics"][primary]["mean"]
        for entry in rows.values()
        if entry.get("complete") and primary in entry.get("metrics", {})
    ]
    if popularity is not None and means and max(means) < popularity:
        sentences.append(
            f"But every row is below the popularity baseline at {primary} ({max(means):.4f} at "
            f"best against {popularity:.4f}): on this log the model itself needs work (its "
            "training, size or features) before the choice of correction matters."
        )
    queries = summary.get("test_queries")
    if queries and queries[0] < SMALL_TEST:
        sentences.append(
            f"The test holds {queries[0]:,} queries: each metric is a mean over few users, and "
            "only large differences can show."
        )
    return " ".join(sentences)


def _third_keys(summary: Dict[str, Any], primary: str) -> List[str]:
    """The recorded "{third}_{metric}" keys of the primary metric's kind (recall), by cutoff."""
    keys = {k for e in summary["rows"].values() for k in e.get("by_popularity", {})}
    kind = primary.split("@")[0]
    cutoffs = sorted(
        {int(k.split("@")[1]) for k in keys if k.split("_", 1)[1].startswith(f"{kind}@")}
    )
    return [
        f"{third}_{kind}@{cutoff}"
        for cutoff in cutoffs
        for third in ("head", "torso", "tail")
        if f"{third}_{kind}@{cutoff}" in keys
    ]


def _queries(summary: Dict[str, Any]) -> str:
    queries = summary.get("test_queries")
    if not queries:
        return "–"
    low, high = queries
    return f"{low:,}" if low == high else f"{low:,} to {high:,}"


def format_report(
    summary: Dict[str, Any],
    primary: str,
    command_line: str,
    common: Sequence[str],
    revisions: Sequence[str],
    vary_data: bool,
) -> str:
    """The report as Markdown."""
    metrics, base = summary["metrics"], summary["baseline"]
    spread = (
        "training and the synthetic log (a fresh log per seed)" if vary_data else "training alone"
    )
    lines = [
        "# Which row on this log?",
        "",
        f"`{command_line}`",
        "",
        f"Common flags: `{' '.join(common) or '(the preset defaults)'}`. Seeds 0-"
        f"{summary['seeds'] - 1} (their spread is that of {spread}); every row is compared "
        f"with {base}, paired by seed. Test queries: {_queries(summary)}. Code: "
        f"{', '.join(revisions) or 'no run finished'}.",
        "",
        "## Advice",
        "",
        advice(summary, primary),
        "",
        "## Means over seeds",
        "",
        "| row | flags | seeds | " + " | ".join(metrics) + " | train s |",
        "|---|---|---|" + "---|" * len(metrics) + "---|",
    ]
    for name, entry in summary["rows"].items():
        flags_text = " ".join(f"--{k}={v}" for k, v in entry["flags"].items())
        seeds_text = f"{len(entry['finished'])}/{summary['seeds']}"
        if entry["failed"]:
            seeds_text += f" (failed: {', '.join(map(str, entry['failed']))})"
        if entry["complete"]:
            cells = [
                f"{entry['metrics'][m]['mean']:.4f} ± {entry['metrics'][m]['sd']:.4f}"
                for m in metrics
            ]
        else:
            cells = ["–"] * len(metrics)
        seconds = entry.get("train_seconds")
        lines.append(
            f"| {name} | `{flags_text}` | {seeds_text} | "
            + " | ".join(cells)
            + f" | {'–' if seconds is None or not entry['complete'] else f'{seconds:.0f}'} |"
        )
    for kind, values in summary["baselines"].items():
        cells = [f"{values[m]:.4f}" if m in values else "–" for m in metrics]
        lines.append(f"| {kind} (baseline) | | | " + " | ".join(cells) + " | |")
    lines += [
        "",
        "± is the SD over seeds; a row with a failed or untrained seed has no mean.",
        "",
        f"## Against {base}, paired by seed",
        "",
        "| row − " + base + " | seeds | " + " | ".join(metrics) + " |",
        "|---|---|" + "---|" * len(metrics),
    ]
    for name, results in summary["differences"].items():
        seeds: List[int] = next((r["seeds"] for r in results.values()), [])
        lines.append(
            f"| {name} − {base} | {', '.join(map(str, seeds)) or '–'} | "
            + " | ".join(_difference_cell(results.get(m)) for m in metrics)
            + " |"
        )
    lines += [
        "",
        "SE: the standard error of the mean difference over seeds; p: Student's t, two-sided; "
        "Holm: p adjusted over the rows compared, metric by metric (better or worse where "
        f'Holm < {ALPHA}); "90% CI to ±X": X is the far end of the difference\'s 90% '
        "confidence interval over these seeds, on these test queries (TOST at 5%: two "
        "one-sided tests each reject a difference beyond ±X); a difference the same at every "
        "seed has SE 0 (p 0 unless it is 0)"
        + (f"; TOST p: against ±{summary['margin']:g}" if summary["margin"] else "")
        + ".",
    ]
    spread_rows = [
        (name, m, results[m])
        for name, results in summary["differences"].items()
        for m in metrics
        if "se_queries" in results.get(m, {}) and "se" in results[m]
    ]
    if spread_rows:
        lines += [
            "",
            "## Training or test queries?",
            "",
            f"| row − {base} | metric | SE over seeds | SE over test queries | queries' share "
            "| 90% CI to ±, seeds and queries |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {name} − {base} | {m} | {_number(r['se'])} | {_number(r['se_queries'])} | "
            + (f"{r['share_queries']:.0%} |" if "share_queries" in r else "– |")
            + (f" {_number(r['excluded_queries'])} |" if "excluded_queries" in r else " – |")
            for name, m, r in spread_rows
        ]
        unshared = any("share_queries" not in r for _, _, r in spread_rows)
        lines += [
            "",
            f"SE over seeds: the spread of {spread}"
            + ("" if unshared else " on these test queries")
            + f", which the p-values above are conditional on; SE over test queries: "
            f"{REPLICATES:,} bootstrap resamples of the queries (each seed's pair on the same "
            "resample), the uncertainty of another draw of test users; the last column: "
            f"{BOUND}, with both SEs (on the seeds' degrees of freedom), what the difference "
            "excludes over another draw of training and of test users; the share: its part of "
            "the two variances' sum"
            + (
                " (–: each seed tested its own queries, a fresh log's, so the SE over seeds "
                "holds their draw already and the two are not parts of one sum)."
                if unshared
                else "."
            ),
        ]
    thirds = _third_keys(summary, primary)
    if thirds:
        kind = primary.split("@")[0]
        lines += [
            "",
            f"## {kind} by popularity third of the target",
            "",
            "| row | " + " | ".join(f"{k.split('_')[0]} @{k.split('@')[1]}" for k in thirds) + " |",
            "|---|" + "---|" * len(thirds),
        ]
        by_row = {name: entry.get("by_popularity", {}) for name, entry in summary["rows"].items()}
        for baseline in ("popularity", "oracle"):
            if baseline in summary.get("baselines_by_popularity", {}):
                by_row[f"{baseline} (baseline)"] = summary["baselines_by_popularity"][baseline]
        for name, values in by_row.items():
            lines.append(
                f"| {name} | "
                + " | ".join(f"{values[k]:.4f}" if k in values else "–" for k in thirds)
                + " |"
            )
        lines += [
            "",
            "Thirds of the catalog by training count (ties by id); a test target counts in its "
            "item's third.",
        ]
        trained = [v for name, v in by_row.items() if name in summary["rows"] and v]
        oracle = by_row.get("oracle (baseline)", {})
        for cutoff in sorted({int(k.split("@")[1]) for k in thirds}):
            rest = [k for k in thirds if k.endswith(f"@{cutoff}") and not k.startswith("head_")]
            if trained and rest and all(v.get(k) == 0 for v in trained for k in rest):
                reached = [k for k in rest if oracle.get(k)]
                lines[-1] += (
                    f" No trained row retrieves a torso or tail target in its top {cutoff}"
                    + (
                        "; the oracle does ("
                        + ", ".join(f"{k.split('_')[0]} {oracle[k]:.4f}" for k in reached)
                        + ")."
                        if reached
                        else (
                            ", nor does the oracle."
                            if oracle and all(k in oracle for k in rest)
                            else "."
                        )
                    )
                )
    return "\n".join(lines) + "\n"


def run_table(runs: Sequence[Run], records: Mapping[Tuple[str, int], Dict], primary: str) -> str:
    """One line a run: its status, primary metric, seconds and code."""
    lines = [
        "",
        "## Runs",
        "",
        f"| row | seed | status | {primary} | train s | code |",
        "|---|---|---|---|---|---|",
    ]
    for run in runs:
        record = records.get((run.row.name, run.seed))
        if record is None:
            lines.append(f"| {run.row.name} | {run.seed} | not trained | | | |")
        elif record["status"] == "failed":
            lines.append(f"| {run.row.name} | {run.seed} | failed: {record['error']} | | | |")
        else:
            value = record["test"].get(primary, math.nan)
            lines.append(
                f"| {run.row.name} | {run.seed} | finished | {value:.4f} | "
                f"{record.get('train_seconds', math.nan):.0f} | "
                f"{record.get('git_revision', 'unknown')} |"
            )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------- the runs

# How often a running child's progress is printed, and how long a stopped one has to exit
# after SIGINT before its process group is killed.
PROGRESS_SECONDS = 30.0
STOP_SECONDS = 5.0
# Keras's progress bar (verbose=1, which `pipelines.train` picks on a terminal): the step,
# the epoch's ETA and the loss.
_BAR = re.compile(r"(\d+)/(\d+) \[[=>.]*\]")
_ETA = re.compile(r" - ETA: (\S+)")
_LOSS = re.compile(r" - loss: ([-+0-9.einaf]+)")
_EPOCH = re.compile(r"^Epoch (\d+)/(\d+)")


def progress_text(line: str, epoch: str = "") -> str:
    """A child's last line as compare prints it: 'epoch 1/3, step 120/500, loss 5.4321, ETA
    1:02' from Keras's progress bar; any other line as it is."""
    match = _BAR.search(line)
    if not match:
        return line.strip()[:200]
    step, total = match.groups()
    eta, loss = (
        found.group(1) if found else None for found in (_ETA.search(line), _LOSS.search(line))
    )
    text = (f"epoch {epoch}, " if epoch else "") + f"step {step}/{total}"
    if loss:
        text += f", loss {loss}"
    return text + (f", ETA {eta}" if eta else "")


class _Child:
    """One run's process: in a session (and process group) of its own, so that compare alone
    decides when it stops, writing to a pseudo-terminal (so that `pipelines.train` shows
    Keras's progress bar) that a thread drains into the run's train.log, keeping the last
    line."""

    def __init__(self, number: int, total: int, run: Run, cpus: Optional[List[int]]):
        self.number, self.total, self.run, self.cpus = number, total, run, cpus
        self.last, self.epoch = "", ""
        self.started = self.shown = time.time()
        files = RunFiles(run.directory)
        os.makedirs(run.directory, exist_ok=True)
        self.log_path = files.train_log
        self.log = open(self.log_path, "a", encoding="utf-8")  # pylint: disable=consider-using-with
        line = shlex.join(run.command)
        self.log.write(line + (f"  # CPUs {list(cpus)}" if cpus else "") + "\n")
        self.log.flush()
        master, terminal = pty.openpty()
        tty.setraw(terminal)  # Bytes as written: no "\r\n" for "\n".
        try:
            self.process = subprocess.Popen(  # pylint: disable=consider-using-with
                run.command,
                stdin=subprocess.DEVNULL,
                stdout=terminal,
                stderr=terminal,
                env=schedule.environment(cpus),
                preexec_fn=functools.partial(_child_setup, cpus),
                start_new_session=True,
            )
        finally:
            os.close(terminal)
        self.master = master
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def label(self) -> str:
        return f"[{self.number}/{self.total}] {self.run.row.name} seed {self.run.seed}"

    def _line(self, raw: bytes, whole: bool) -> None:
        text = raw.rsplit(b"\r", 1)[-1].replace(b"\b", b"").decode("utf-8", "replace")
        if whole:
            self.log.write(text + "\n")
            self.log.flush()
            epoch = _EPOCH.match(text)
            if epoch:
                self.epoch = f"{epoch.group(1)}/{epoch.group(2)}"
        if text.strip():
            self.last = text

    def _drain(self) -> None:
        pending = b""
        while True:
            try:
                data = os.read(self.master, 1 << 16)
            except OSError:  # EIO: every holder of the terminal has closed it.
                data = b""
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                self._line(line, whole=True)
            pending = b"\r" + pending.rsplit(b"\r", 1)[-1] if b"\r" in pending else pending
            self._line(pending, whole=False)
        if pending.strip(b"\r\b "):
            self._line(pending, whole=True)

    def progress(self) -> str:
        return progress_text(self.last, self.epoch) if self.last else "no output yet"

    def signal(self, number: int) -> None:
        """Sends `number` to the run's process group: the training and any process it
        started."""
        try:
            os.killpg(self.process.pid, number)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> Optional[str]:
        """Once the process has ended: the log closed, its wall seconds written; None, or
        its error."""
        self.signal(signal.SIGKILL)  # Anything it left running in its group.
        self.reader.join(timeout=5)
        os.close(self.master)
        self.log.close()
        seconds = time.time() - self.started
        code = self.process.returncode
        line = shlex.join(self.run.command)
        if code:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
            return f"{line} {how}; see {self.log_path}."
        write_json(RunFiles(self.run.directory).wall_seconds, {"seconds": seconds})
        return None


def _elapsed(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


def _child_setup(cpus: Optional[Sequence[int]]) -> None:
    """In a run's process before it starts: pinned to `cpus` (if any), and sent SIGINT if
    compare dies without stopping it (Linux's PR_SET_PDEATHSIG; a run in its own session
    no longer hears the terminal's signals, and would die at its next write to the closed
    pseudo-terminal)."""
    if cpus is not None:
        os.sched_setaffinity(0, list(cpus))
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # Not Linux's libc: the signal handlers below only.
        pass


def _raise_interrupt(signum, frame) -> None:
    del frame
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


@contextlib.contextmanager
def _terminations_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP (a `kill`, a closed terminal) stop the runs as Ctrl-C does: their
    groups signalled, the resume command printed. Only in the main thread, where Python
    takes signals; the handlers before are restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGHUP)}
    for number in before:
        signal.signal(number, _raise_interrupt)
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def train_runs(
    pending: Sequence[Run],
    slots: Sequence[Optional[List[int]]],
    finish,
    progress_seconds: float = PROGRESS_SECONDS,
) -> None:
    """Trains `pending` in order, len(slots) at a time, each on its slot's CPUs, in this
    thread: each run's start line, then its progress (`progress_text`) every
    `progress_seconds`, then `finish(run, number, seconds, error)` (None, or why it failed)
    as it ends, before the next starts. On Ctrl-C (KeyboardInterrupt), SIGTERM or SIGHUP the
    running children get SIGINT, their process groups SIGKILL after STOP_SECONDS; says which
    were stopped and raises KeyboardInterrupt again."""
    with _terminations_interrupt():
        _train_runs(pending, slots, finish, progress_seconds)


def _train_runs(pending, slots, finish, progress_seconds) -> None:
    queue = list(enumerate(pending, 1))
    free = list(slots)
    running: List[_Child] = []
    try:
        while queue or running:
            while queue and free:
                number, run = queue.pop(0)
                cpus = free.pop(0)
                child = _Child(number, len(pending), run, cpus)
                running.append(child)
                print(
                    f"{child.label()}: {shlex.join(run.command)}"
                    + (f"  # CPUs {cpus}" if cpus else ""),
                    flush=True,
                )
            time.sleep(0.1)
            for child in list(running):
                if child.process.poll() is not None:
                    running.remove(child)
                    free.append(child.cpus)
                    error = child.close()
                    finish(child.run, child.number, time.time() - child.started, error)
                elif time.time() - child.shown >= progress_seconds:
                    child.shown = time.time()
                    print(
                        f"{child.label()}: {child.progress()} "
                        f"({_elapsed(child.shown - child.started)})",
                        flush=True,
                    )
    except KeyboardInterrupt:
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, signal.SIG_IGN)  # A second signal: the stop goes on.
        for child in running:
            child.signal(signal.SIGINT)
        deadline = time.time() + STOP_SECONDS
        while time.time() < deadline and any(c.process.poll() is None for c in running):
            time.sleep(0.05)
        for child in running:
            child.signal(signal.SIGKILL)
            child.process.wait()
            child.close()
        if running:
            print(
                "\ncompare: stopped "
                + ", ".join(f"{c.run.row.name} seed {c.run.seed}" for c in running)
                + " (its process group signalled); a stopped run resumes from its last backup.",
                file=sys.stderr,
                flush=True,
            )
        raise


@contextlib.contextmanager
def resumable(line: str) -> Iterator[None]:
    """Ctrl-C inside: no traceback, the command that resumes, exit status 130."""
    try:
        yield
    except KeyboardInterrupt:
        print(
            "\ncompare: interrupted. Finished runs keep their records; the same command "
            f"resumes the rest:\n  {line}",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(130)


# ---------------------------------------------------------------------------- the job


def define_flags() -> None:
    flags.DEFINE_string("output_dir", None, "Where the runs go: OUTPUT/ROW/seedN (required).")
    flags.DEFINE_string(
        "results_dir", "", "Where the records and the report go (default: --output_dir)."
    )
    flags.DEFINE_list(
        "corrections", [], "One row per correction (--correction=NAME), e.g. standard,improved."
    )
    flags.DEFINE_multi_string("row", [], "A row: 'NAME: --flag=value ...' (repeat for each row).")
    flags.DEFINE_integer("seeds", SEEDS, "Seeds 0 .. N-1 of every row.", lower_bound=1)
    flags.DEFINE_string(
        "baseline", "", "The row the others are compared with (default: the first row)."
    )
    flags.DEFINE_string(
        "metric",
        "",
        "The metric the advice reads first (default: the first recall@K).",
    )
    flags.DEFINE_float(
        "margin",
        None,
        "A difference the product would not care about: TOST's p of each paired "
        "difference against +-margin (default: none, the excluded bound only).",
    )
    flags.DEFINE_bool(
        "vary_data",
        False,
        "--dataset=web_synthetic: seed N draws a fresh log too (--synthetic_log_seed=N).",
    )
    flags.DEFINE_integer(
        "parallel",
        1,
        "Runs trained at once, each pinned to its share of the CPUs, each with "
        "--memory_budget_mb set to its share of the memory (unless the flags set it).",
        lower_bound=1,
    )
    flags.DEFINE_bool(
        "keep_weights",
        False,
        "Keep each finished run's checkpoints, backup and SavedModels; by default "
        "they are deleted once its record is written (gigabytes a run at a million items).",
    )
    flags.DEFINE_bool("report_only", False, "Write the report from the records; train nothing.")


def _check_stored(
    results_dir: str,
    rows: Sequence[Row],
    common: Sequence[str],
    vary_data: bool = False,
    data: Optional[Mapping[str, Dict]] = None,
    trained: bool = False,
) -> None:
    """RESULTS/compare.json: a rerun into the same directory compares the same thing (the
    same common flags and --vary_data; a row it had keeps its flags; rows and seeds may be
    added), on the same data: `data`, the data files' `fingerprints` (None: not checked,
    --report_only), must match those stored once a run has been `trained`."""
    path = os.path.join(results_dir, "compare.json")
    stored: Dict[str, Any] = {"common": list(common), "rows": {}, "vary_data": vary_data}
    if os.path.exists(path):
        stored = read_json(path, "the comparison's rows and common flags")
        if stored.get("vary_data", False) != vary_data:
            raise ValueError(
                f"{results_dir} holds a comparison with --vary_data="
                f"{str(stored.get('vary_data', False)).lower()}; received "
                f"--vary_data={str(vary_data).lower()}. Give another --output_dir."
            )
        if stored["common"] != list(common):
            raise ValueError(
                f"{results_dir} holds a comparison with other common flags "
                f"({shlex.join(stored['common'])}); received {shlex.join(common)}. Give "
                "another --output_dir (or --results_dir)."
            )
        for row in rows:
            if row.name in stored["rows"] and stored["rows"][row.name] != row.arguments():
                raise ValueError(
                    f"{results_dir} holds row {row.name} as "
                    f"{shlex.join(stored['rows'][row.name])}; received {row.describe()}. "
                    "Name the new row otherwise."
                )
        if data is not None and trained and "data_files" in stored:
            changes = changed_files(stored["data_files"], data)
            if changes:
                raise ValueError(
                    f"{results_dir} holds runs trained on other data: "
                    + "; ".join(changes[:3])
                    + (f"; and {len(changes) - 3} more" if len(changes) > 3 else "")
                    + ". A rerun would compare runs of two logs: give another --output_dir "
                    "(or restore the files)."
                )
    before = dict(stored)
    stored["rows"] = dict(stored["rows"], **{row.name: row.arguments() for row in rows})
    if data is not None:
        stored.setdefault("working_directory", os.getcwd())
        if not trained or "data_files" not in stored:
            stored["data_files"] = dict(data)
    if stored != before or not os.path.exists(path):
        os.makedirs(results_dir, exist_ok=True)
        write_json(path, stored)


def _check_run_config(run: Run, expected) -> None:
    """Raises where the run directory's config differs from the comparison's (a run left by
    other flags), naming the fields; its seed, log seed and memory budget aside."""

    with open(RunFiles(run.directory).config) as f:
        found = configs.Config.from_dict(json.load(f)).flat()
    wanted = expected.flat()
    differ = sorted(
        name
        for name in wanted
        if name not in ("seed", "synthetic_log_seed", "memory_budget_mb")
        and found.get(name) != wanted[name]
    )
    if differ:
        raise app.UsageError(
            f"{run.directory} holds a finished run of other flags ("
            + ", ".join(f"--{n}={found.get(n)!r}, expected {wanted[n]!r}" for n in differ[:3])
            + "): give another --output_dir, or delete it."
        )


def _memory_budget(parallel: int, common_pairs: Sequence[Tuple[str, str]]) -> int:
    """Each of `parallel` runs' share of the memory (MB), unless the flags set it."""
    if parallel == 1 or any(name == "memory_budget_mb" for name, _ in common_pairs):
        return 0
    from pipelines import memory  # pylint: disable=import-outside-toplevel

    return int(memory.available_mib() * 0.95 / parallel)


def command_line(argv: Sequence[str]) -> str:
    """The command that trains (and re-trains) this comparison, as the report shows it:
    `argv` without --report_only, which renders the same report and trains nothing."""
    shown = [a for a in argv if a not in ("--report_only", "--report_only=true")]
    return "tfrs-logq compare " + shlex.join(shown)


def main(argv: Sequence[str]) -> None:
    line = command_line(sys.argv[1:] if len(sys.argv) > 1 else [])
    with resumable(line):
        try:
            _main(argv, line)
        except DamagedRecord as error:
            raise app.UsageError(str(error)) from None


# Beside a run whose weights compare removed: what `tfrs-logq export` tells.
def prune(run: Run) -> None:
    """Deletes a recorded run's weights (`RunFiles.prune_weights`), leaving a note that
    compare did (`removed_weights`)."""
    RunFiles(run.directory).prune_weights()
    write_json(
        os.path.join(run.directory, WEIGHTS_REMOVED),
        {
            "removed_by": "tfrs-logq compare (without --keep_weights), once the run was recorded",
            "record": os.path.abspath(run.record),
            "command": shlex.join(run.command),
        },
    )


def _main(argv: Sequence[str], line: str) -> None:
    common = list(argv[1:])
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir is required.")
    output_dir = FLAGS.output_dir
    results_dir = FLAGS.results_dir or output_dir
    try:
        rows = make_rows(FLAGS.row, FLAGS.corrections)
        common_pairs = check_common(common, rows)
        names = [row.name for row in rows]
        baseline = FLAGS.baseline or names[0]
        if baseline not in names:
            raise ValueError(
                f"--baseline must name a row ({', '.join(names)}); received "
                f"--baseline={baseline!r}."
            )
        if FLAGS.margin is not None and not FLAGS.margin > 0:
            raise ValueError(f"--margin must be positive; received --margin={FLAGS.margin}.")
        for flag, path in (("--output_dir", output_dir), ("--results_dir", results_dir)):
            if os.path.exists(path) and not os.path.isdir(path):
                raise ValueError(f"{flag} must be a directory; received {flag}={path!r}, a file.")
        if FLAGS.vary_data and any(
            name == "synthetic_log_seed" for row in rows for name, _ in row.flags
        ) | any(name == "synthetic_log_seed" for name, _ in common_pairs):
            raise ValueError("--vary_data sets --synthetic_log_seed for each seed; set it nowhere.")
        configs_by_row = row_configs(rows, common, FLAGS.vary_data)
        if FLAGS.metric:
            ks = configs.ks(next(iter(configs_by_row.values())).training)
            known = [f"{kind}@{k}" for kind in ("recall", "ndcg") for k in ks]
            if FLAGS.metric not in known:
                raise ValueError(
                    f"--metric must be one of {', '.join(known)}; received "
                    f"--metric={FLAGS.metric!r}."
                )
        slots = schedule.cpu_slots(FLAGS.parallel)
        if FLAGS.report_only and not os.path.exists(os.path.join(results_dir, "compare.json")):
            raise ValueError(
                f"--report_only: {results_dir} holds no comparison (no compare.json) to report."
            )
        runs = plan(
            rows,
            common,
            FLAGS.seeds,
            output_dir,
            results_dir,
            FLAGS.vary_data,
            _memory_budget(FLAGS.parallel, common_pairs),
        )
        # The data files, fingerprinted (a report from the records reads no data).
        data = None if FLAGS.report_only else fingerprints(configs_by_row)
        trained = any(os.path.exists(run.record) for run in runs)
        _check_stored(results_dir, rows, common, FLAGS.vary_data, data, trained)
    except ValueError as error:  # DamagedRecord included.
        raise app.UsageError(str(error)) from None
    for run in runs:  # Finished before a kill, recorded now: if it is this comparison's run.
        if load_record(run) is None and os.path.exists(RunFiles(run.directory).metrics):
            _check_run_config(run, configs_by_row[run.row.name])
            write_record(run, data)
            if not FLAGS.keep_weights:
                prune(run)
    pending = [run for run in runs if not finished(run)]
    print(
        f"compare: {len(rows)} rows x {FLAGS.seeds} seeds, {len(runs)} runs; "
        f"{len(runs) - len(pending)} already finished.",
        flush=True,
    )

    def report() -> str:
        return write_report(
            runs,
            rows,
            baseline,
            FLAGS.margin,
            FLAGS.metric,
            line,
            common,
            FLAGS.vary_data,
            results_dir,
        )

    def finish(run: Run, number: int, seconds: float, error: Optional[str]) -> None:
        if error is None:
            record = write_record(run, data)
            if not FLAGS.keep_weights:
                prune(run)
            shown = ", ".join(f"{m} {record['test'][m]:.4f}" for m in metric_names([record])[:3])
            print(
                f"[{number}/{len(pending)}] {run.row.name} seed {run.seed}: {shown} "
                f"({seconds:.0f} s)",
                flush=True,
            )
        else:
            write_failure(run, error)
            print(
                f"[{number}/{len(pending)}] {run.row.name} seed {run.seed} failed: {error}",
                flush=True,
            )
        report()

    if not FLAGS.report_only and pending:
        train_runs(pending, slots[: len(pending)] or slots, finish)
    path = report()
    with open(path) as f:
        text = f.read()
    advice_text = text.split("## Advice\n\n", 1)[1].split("\n\n", 1)[0]
    print(f"\n{advice_text}\n\nWrote {path}.", flush=True)
    failed = [run for run in runs if (load_record(run) or {}).get("status") == "failed"]
    if failed:
        print(
            f"{len(failed)} runs failed ({', '.join(f'{r.row.name} seed {r.seed}' for r in failed)}"
            "); the same command trains them again.",
            file=sys.stderr,
        )
        sys.exit(1)


def write_plot(summary: Dict[str, Any], path: str) -> Optional[str]:
    """A forest plot of the report's paired differences (PNG, tens of kB): one panel per
    metric, one line per row but the baseline: its mean difference over seeds, the 90%
    interval (thick: its far end is TOST's bound at 5%) and the 95% interval (thin: it
    excludes 0 where p < 0.05), filled where Holm's p < ALPHA. Returns `path`, or None when
    no difference has two seeds."""
    # pylint: disable=import-outside-toplevel
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    metrics, base = summary["metrics"], summary["baseline"]
    names = list(summary["differences"])
    if not any("se" in r for results in summary["differences"].values() for r in results.values()):
        return None
    columns = min(3, len(metrics))
    lines = -(-len(metrics) // columns)
    figure, axes = pyplot.subplots(
        lines,
        columns,
        figsize=(3.2 * columns, 0.5 + 0.45 * len(names) * lines + 0.6 * lines),
        squeeze=False,
        sharey=True,
    )
    for index, axis in enumerate(axes.flat):
        if index >= len(metrics):
            axis.set_visible(False)
            continue
        metric = metrics[index]
        axis.axvline(0.0, color="0.6", linewidth=0.8)
        for position, name in enumerate(names):
            result = summary["differences"][name].get(metric)
            if not result:
                continue
            y = len(names) - 1 - position
            filled = result.get("p_holm", 1.0) < ALPHA
            if "se" in result:
                df = len(result["seeds"]) - 1
                for level, width in ((0.95, 1.0), (0.90, 3.0)):
                    half = significance.t_quantile(1 - (1 - level) / 2, df) * result["se"]
                    axis.plot(
                        [result["mean"] - half, result["mean"] + half],
                        [y, y],
                        color="C0",
                        linewidth=width,
                        solid_capstyle="butt",
                    )
            axis.plot(
                [result["mean"]],
                [y],
                "o",
                color="C0",
                markerfacecolor="C0" if filled else "white",
                markersize=5,
            )
        axis.set_title(metric, fontsize=9)
        axis.tick_params(labelsize=7)
        axis.set_yticks(range(len(names)))
        axis.set_yticklabels([f"{n} − {base}" for n in reversed(names)], fontsize=8)
        axis.set_ylim(-0.6, len(names) - 0.4)
    figure.suptitle(
        f"Paired difference from {base} over {summary['seeds']} seeds: mean, 90% (thick) and "
        f"95% (thin) intervals; filled: Holm p < {ALPHA}",
        fontsize=8,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path


def write_report(
    runs: Sequence[Run],
    rows: Sequence[Row],
    baseline: str,
    margin: Optional[float],
    metric: str,
    line: str,
    common: Sequence[str],
    vary_data: bool,
    results_dir: str,
) -> str:
    """Writes RESULTS/report.md and report.json from the runs' records; returns the first."""
    records = {}
    for run in runs:
        record = load_record(run)
        if record is not None:
            records[(run.row.name, run.seed)] = record
    seeds = max(run.seed for run in runs) + 1
    summary = summarize(rows, seeds, records, baseline, margin)
    per_query = {
        (run.row.name, run.seed): per_query_lib.load(per_query_path(run))
        for run in runs
        if (run.row.name, run.seed) in records and os.path.exists(per_query_path(run))
    }
    add_query_spread(summary, per_query)
    metrics = summary["metrics"]
    if metric and metrics and metric not in metrics:
        raise app.UsageError(
            f"--metric must be one of the runs' metrics ({', '.join(metrics)}); "
            f"received --metric={metric!r}."
        )
    primary = (
        metric
        or next((m for m in metrics if m.startswith("recall@")), "")
        or (metrics[0] if metrics else "")
    )
    revisions = sorted(
        {r.get("git_revision", "unknown") for r in records.values() if r["status"] == "finished"}
    )
    text = format_report(summary, primary, line, common, revisions, vary_data)
    plot = write_plot(summary, os.path.join(results_dir, "report.png"))
    if plot:
        heading = f"\n## Against {summary['baseline']}, paired by seed\n\n"
        text = text.replace(
            heading,
            heading + f"![Each row − {summary['baseline']}, per metric](report.png)\n\n",
            1,
        )
    text += run_table(runs, records, primary)
    path = os.path.join(results_dir, "report.md")
    temporary = path + ".partial"
    with open(temporary, "w") as f:
        f.write(text)
    os.replace(temporary, path)
    write_json(
        os.path.join(results_dir, "report.json"), dict(summary, primary=primary, command=line)
    )
    return path


if __name__ == "__main__":
    define_flags()
    console.run(main)
