r"""Each phase's memory and time at growing catalogs: predicted against measured.

Trains `pipelines.train` runs (or reads finished ones) and prints, per run, each phase's
wall seconds, its own peak resident memory (`phase_peak_rss_mb`: Linux's VmHWM reset as the
phase starts) and the memory model's prediction (`pipelines.memory.predict_mib`), and each
phase's peak over the training phase's (the goal: at most 1.25). Writes the table's numbers
as JSON (no checkpoint, no calibration lists).

Usage:
  python -m benchmarks.scale --run_dirs=runs/items1m,runs/items5m --output=scale.json
  python -m benchmarks.scale --train='--preset=industrial_smoke' --output_root=/tmp/scale
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
from typing import Dict, List

from absl import app
from absl import flags

FLAGS = flags.FLAGS

PHASES = ("data", "split", "build", "train", "evaluate", "baselines", "export")
# A record keeps these of a run's metrics.json.
KEPT = (
    "num_items",
    "num_users",
    "index_items",
    "num_test_queries",
    "test_exact",
    "test_scann",
    "ann_overlap@1000",
    "search_seconds_exact",
    "search_seconds_scann",
    "kl_to_truth",
    "baselines",
    "steps",
    "train_seconds",
    "phase_seconds",
    "phase_peak_rss_mb",
    "predicted_peak_rss_mb",
    "peak_rss_mb",
    "git_revision",
    "code_diff_sha256",
)


def record(run_dir: str) -> Dict:
    """The kept numbers of the finished run in `run_dir`, its config's data and index."""
    with open(os.path.join(run_dir, "metrics.json")) as f:
        metrics = json.load(f)
    kept = {key: metrics[key] for key in KEPT if key in metrics}
    kept["config"] = metrics.get("config", {})  # The whole config: the run re-runs from it.
    for name in ("popularity", "oracle"):
        if name in kept.get("baselines", {}):
            kept["baselines"][name] = {
                k: v for k, v in kept["baselines"][name].items() if k != "by_popularity"
            }
    kept["run_dir"] = os.path.basename(os.path.normpath(run_dir))
    return kept


def table(records: List[Dict]) -> str:
    """Markdown: per run and phase, seconds, measured and predicted peak, and the ratio of
    the phase's peak to training's."""
    lines = [
        "| run | items (law) | vocabulary | phase | seconds | peak MB | predicted MB | / train |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        peaks, seconds = r.get("phase_peak_rss_mb", {}), r.get("phase_seconds", {})
        predicted = r.get("predicted_peak_rss_mb", {})
        train = peaks.get("train")
        for phase in PHASES:
            if phase not in peaks:
                continue
            model = {"baselines": "evaluate"}.get(
                phase, phase if phase in ("build", "train", "evaluate", "export") else None
            )
            data = r["config"].get("data", r["config"])  # Nested; earlier records flat.
            law = data.get("synthetic_items")
            lines.append(
                f"| {r['run_dir']} | {f'{law:,}' if law else '-'} | "
                f"{r.get('num_items', 0):,} | {phase} | {seconds.get(phase, 0):,.0f} | "
                f"{peaks[phase]:,} | "
                + (f"{predicted[model]:,}" if model and model in predicted else "-")
                + " | "
                + (f"{peaks[phase] / train:.2f}" if train else "-")
                + " |"
            )
    return "\n".join(lines)


flags.DEFINE_list("run_dirs", [], "Finished runs to read (their metrics.json).")
flags.DEFINE_multi_string(
    "train",
    [],
    "Train a run with these pipelines.train flags first (quoted; repeatable), into "
    "--output_root/<n>.",
)
flags.DEFINE_string("output_root", "/tmp/tfrs_logq_scale", "Where --train runs go.")
flags.DEFINE_string("output", "", "Write the records here (JSON).")


def main(argv):
    del argv
    run_dirs = list(FLAGS.run_dirs)
    for number, arguments in enumerate(FLAGS.train):
        out = os.path.join(FLAGS.output_root, str(number))
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.train",
                *shlex.split(arguments),
                f"--output_dir={out}",
            ],
            check=True,
        )
        run_dirs.append(out)
    if not run_dirs:
        raise app.UsageError("Give --run_dirs or --train.")
    records = [record(run_dir) for run_dir in run_dirs]
    print(table(records))
    if FLAGS.output:
        with open(FLAGS.output, "w") as f:
            json.dump(records, f, indent=1)
        print(f"Wrote {FLAGS.output}")
        for run_dir, kept in zip(run_dirs, records):
            if "code_diff_sha256" in kept:  # A dirty tree's run: its diff beside the record.
                diff = f"{os.path.splitext(FLAGS.output)[0]}.{kept['run_dir']}.diff"
                shutil.copyfile(os.path.join(run_dir, "code.diff"), diff)
                print(f"Wrote {diff} (the run's uncommitted changes)")


if __name__ == "__main__":
    app.run(main)
