r"""The product's jobs on Keras 3, timed phase by phase: `tfrs-logq train --framework=keras`,
`tfrs-logq export` of that run, and `tfrs-logq compare` with every row on Keras 3.

  python -m benchmarks.jobs --output=/tmp/gpu/jobs.json
  python -m benchmarks.jobs --train_flags=--preset=industrial_smoke --compare_flags='...'

Each job runs as users run it (`python -m pipelines JOB ...`, in a process of its own, into
--work_dir), one after the other. The record holds each job's command, wall seconds and exit
status; the train run's phases (data, train, evaluate: its metrics.json's `phase_seconds`), its
test metrics and `end_to_end_over_train` (the goal: within 2 on a GPU); the compare's summary
(report.json: its rows' means over seeds, and the run directories' results beside the
record in jobs_compare/) and seconds per run. By default the train job is the 1M-item
industrial preset and the compare Table 2's size (5M items, a 2M-item index, three
corrections, five seeds, each seed its own log). `benchmarks/gpu.sh`'s phase `jobs` runs it.
A job that fails is recorded with its status and the output's tail, and the next runs.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

from benchmarks import records
from pipelines import provenance

FLAGS = flags.FLAGS
TABLE_2 = (
    "--corrections=standard,standard_negatives,improved --seeds=5 --vary_data -- "
    "--preset=industrial --synthetic_items=5000000 --index_size=2000000 --index=exact"
)
flags.DEFINE_string("train_flags", "--preset=industrial", "The train job's flags (a string).")
flags.DEFINE_string(
    "compare_flags",
    TABLE_2,
    "The compare job's flags: its own, `--`, then the rows' training flags (--framework=keras "
    "is added to those). Empty: no compare.",
)
flags.DEFINE_string("work_dir", "", "Where the runs go (default: a temporary directory, removed).")
flags.DEFINE_string("output", "", "Write the record here (JSON).")


def _job(name: str, args) -> dict:
    """Runs `python -m pipelines NAME ARGS`, its output passed through; its record."""
    command = [sys.executable, "-m", "pipelines", name, *args]
    print(f"[jobs] {shlex.join(command)}", flush=True)
    started = time.perf_counter()
    tail = []
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            print(line, end="", flush=True)
            tail = (tail + [line])[-40:]
    seconds = time.perf_counter() - started
    record = dict(command=shlex.join(command[2:]), seconds=round(seconds, 1))
    record["status"] = process.returncode
    if process.returncode:
        record["output_tail"] = "".join(tail)[-4000:]
    print(f"[jobs] {name}: {seconds:.1f} s, status {process.returncode}", flush=True)
    return record


def _compare_args(flags_text: str, output_dir: str, results_dir: str):
    """compare's arguments: its own flags, the directories, then `--` and the rows' flags
    with --framework=keras."""
    words = shlex.split(flags_text)
    own, rows = (
        (words[: words.index("--")], words[words.index("--") + 1 :])
        if "--" in words
        else (
            words,
            [],
        )
    )
    return [
        *own,
        f"--output_dir={output_dir}",
        f"--results_dir={results_dir}",
        "--",
        "--framework=keras",
        *rows,
    ]


def main(argv):
    del argv
    work = FLAGS.work_dir or tempfile.mkdtemp(prefix="jobs-")
    record = dict(
        benchmark="jobs",
        revision=provenance.revision(),
        keras_backend=os.environ.get("KERAS_BACKEND", "jax"),
        jobs={},
    )
    train_dir = os.path.join(work, "train")
    train = _job(
        "train",
        ["--framework=keras", *shlex.split(FLAGS.train_flags), f"--output_dir={train_dir}"],
    )
    metrics_path = os.path.join(train_dir, "metrics.json")
    if not train["status"] and os.path.exists(metrics_path):
        with open(metrics_path) as f:
            metrics = json.load(f)
        train.update(
            phase_seconds=metrics["phase_seconds"],
            devices=metrics.get("devices"),
            steps=metrics["steps"],
            index_items=metrics["index_items"],
            test=metrics["test"],
            end_to_end_over_train=round(train["seconds"] / max(metrics["train_seconds"], 1e-9), 2),
        )
    record["jobs"]["train"] = train
    if not train["status"]:
        record["jobs"]["export"] = _job("export", [train_dir])
    if FLAGS.compare_flags:
        results_dir = (
            os.path.join(os.path.dirname(os.path.abspath(FLAGS.output)), "jobs_compare")
            if FLAGS.output
            else os.path.join(work, "compare_results")
        )
        compare = _job(
            "compare",
            _compare_args(FLAGS.compare_flags, os.path.join(work, "compare"), results_dir),
        )
        report = os.path.join(results_dir, "report.json")
        if os.path.exists(report):
            with open(report) as f:
                compare["report"] = json.load(f)
        record["jobs"]["compare"] = compare
    record["complete"] = all(not job["status"] for job in record["jobs"].values())
    if FLAGS.output:
        records.write(FLAGS.output, record)
    if not FLAGS.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if record["complete"] else 1


if __name__ == "__main__":
    app.run(main)
