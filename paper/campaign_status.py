r"""The state of the reproduction's runs in progress (`campaign.sh status`).

Usage:
  python -m paper.campaign_status RUNS_DIR

RUNS_DIR holds REPORT/ROW/seedN run directories (`paper.reproduce`'s layout). For each run in
progress: its epochs, its best validation NDCG@10 and after which epoch, the epoch after which
patience stops it at the earliest, and the hours that takes at its last 10 epochs' pace. Then,
for each of `comparisons.PAIRS` whose two runs of one report and seed have both logged and one of
them is still in progress, the pair so far: validation NDCG@10 and test NDCG@20 (the test
curve, a diagnostic) averaged over the epochs both runs have logged, row - baseline. Same seed,
same batches, so those are the paired differences the finished report will give over its common
window (`curves.window_difference`, which starts at epoch 100 and needs 10 epochs).
"""

import glob
import json
import os
import re
import sys
from typing import Dict, List, Optional

import numpy as np

from paper import comparisons
from paper import curves
from paper.plan import config_value
from pipelines.run_files import RunFiles

LAST_EPOCHS = 10  # The pace is the mean epoch time over the last this many epochs.


def _in_progress(run: str) -> bool:
    files = RunFiles(run)
    if os.path.exists(files.metrics) or not os.path.exists(files.progress):
        return False
    with open(files.progress) as f:
        return not json.load(f).get("finished")


def run_line(run: str, name: str) -> str:
    """One line on the run in progress in `run`, called `name`."""
    files = RunFiles(run)
    with open(files.progress) as f:
        state = json.load(f)
    with open(files.config) as f:
        patience = config_value(json.load(f), "patience")
    epochs = state["epochs"]
    if state.get("best_epoch") is None:
        return f"{name}: {epochs} epochs, no validation value yet"
    # EarlyStopping stops once `patience` epochs have followed the best (0-based) epoch.
    last = state["best_epoch"] + patience + 1
    line = (
        f"{name}: {epochs} epochs, best validation {state['best']:.4f} after "
        f"{state['best_epoch'] + 1}; stops after {last} at the earliest ({last - epochs} more)"
    )
    times = []
    if os.path.exists(files.train_log):
        with open(files.train_log) as f:
            times = re.findall(r" - (\d+)s/epoch", f.read())
    if times:
        recent = [int(t) for t in times[-LAST_EPOCHS:]]
        per_epoch = sum(recent) / len(recent)
        line += (
            f"; {per_epoch:.0f} s an epoch over the last {len(recent)}, "
            f"so at least {(last - epochs) * per_epoch / 3600:.1f} h"
        )
    return line


def common_difference(base: Dict[int, float], row: Dict[int, float]) -> Optional[str]:
    """'+d over n epochs (a to b)': mean of row - base over the epochs both hold (1-based in
    the text, as Keras counts them), or None when they share none."""
    epochs = sorted(set(base) & set(row))
    if not epochs:
        return None
    d = float(np.mean([row[e] - base[e] for e in epochs]))
    return f"{d:+.4f} over {len(epochs)} epochs ({epochs[0] + 1} to {epochs[-1] + 1})"


def pair_lines(runs_dir: str) -> List[str]:
    """One line per `comparisons.PAIRS` pair of one report and seed under `runs_dir` with a
    run in progress and curves logged by both."""
    lines = []
    for report in sorted(os.listdir(runs_dir)):
        for base, row, question in comparisons.PAIRS:
            for run_b in sorted(glob.glob(os.path.join(runs_dir, report, row, "seed*"))):
                seed = os.path.basename(run_b)
                run_a = os.path.join(runs_dir, report, base, seed)
                if not os.path.isdir(run_a) or not (_in_progress(run_a) or _in_progress(run_b)):
                    continue
                parts = []
                for what, curve in (
                    ("validation NDCG@10", curves.validation_curve),
                    ("test curve NDCG@20", curves.test_curve),
                ):
                    text = common_difference(curve(run_a), curve(run_b))
                    if text:
                        parts.append(f"{what} {text}")
                if parts:
                    lines.append(
                        f"{report} {seed}, {question} ({row} - {base}): " + "; ".join(parts)
                    )
    return lines


def status(runs_dir: str) -> List[str]:
    """`run_line` of every run in progress under `runs_dir`, then `pair_lines`."""
    lines = [
        run_line(os.path.dirname(path), os.path.relpath(os.path.dirname(path), runs_dir))
        for path in sorted(glob.glob(os.path.join(runs_dir, "*", "*", "seed*", "progress.json")))
        if _in_progress(os.path.dirname(path))
    ]
    if not lines:
        return [f"no run in progress under {runs_dir}"]
    return lines + pair_lines(runs_dir)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("Usage: python -m paper.campaign_status RUNS_DIR")
    print("\n".join(status(sys.argv[1])))
