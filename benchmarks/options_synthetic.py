r"""Training options against the default on the synthetic catalog: the user guide's options table.

Usage:
  python -m benchmarks.options_synthetic --name=mask_known_positives \
      --seeds=0,1,2 -- --mask_known_positives
  python -m benchmarks.options_synthetic  # Only prints the table.

Each seed S of option NAME runs, one at a time,
  python -m pipelines.train --preset=synthetic --index=exact --epochs=8 --patience=100 \
      --seed=S [option flags]
(SASRec, mixed negatives, improved), and its test Recall@10 / NDCG@10, git revision and
training seconds are appended to docs/results/options_synthetic.json under NAME (a seed
already recorded there is not run again; no row is ever dropped), with its flags (`flags`)
and, given `--baseline`, the row it is paired with (`baselines`; else "default"). Then every
option's row is printed as the guide has it: mean +- std (ddof 1) over its seeds, and
NDCG@10 minus its baseline's paired by seed, with the standard error of that mean difference.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, Sequence

import numpy as np

RESULTS = os.path.join(os.path.dirname(__file__), "..", "docs", "results", "options_synthetic.json")
COMMAND = (
    "python -m pipelines.train --preset=synthetic --index=exact --epochs=8 "
    "--patience=100 --seed=S [option]"
)
BASE_FLAGS = ["--preset=synthetic", "--index=exact", "--epochs=8", "--patience=100"]


def run_seed(seed: int, option: Sequence[str], root: str) -> Dict:
    """Trains one run of `option` at `seed` in a directory under `root`; its record."""
    out = os.path.join(root, f"seed{seed}")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pipelines.train",
            *BASE_FLAGS,
            f"--seed={seed}",
            *option,
            f"--output_dir={out}",
        ],
        check=True,
    )
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    return {
        "seed": seed,
        "recall@10": metrics["test"]["recall@10"],
        "ndcg@10": metrics["test"]["ndcg@10"],
        "git_revision": metrics["git_revision"],
        "train_seconds": metrics["train_seconds"],
    }


def row(name: str, runs: Dict[str, List[Dict]], baseline: str = "default") -> str:
    """`name`'s table row: Recall@10 and NDCG@10 mean +- std over its seeds, and its NDCG@10
    minus `baseline`'s, paired by seed (mean and its standard error)."""
    records = runs[name]

    def mean_std(key):
        values = np.array([r[key] for r in records])
        return f"{values.mean():.4f} ± {values.std(ddof=1):.4f}"

    cells = [name, mean_std("recall@10"), mean_std("ndcg@10"), ""]
    if name != baseline and baseline in runs:
        default = {r["seed"]: r["ndcg@10"] for r in runs[baseline]}
        paired = np.array(
            [r["ndcg@10"] - default[r["seed"]] for r in records if r["seed"] in default]
        )
        if len(paired) > 1:
            cells[3] = f"{paired.mean():+.4f} (SE {paired.std(ddof=1) / np.sqrt(len(paired)):.4f})"
    return "| " + " | ".join(cells) + " |"


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--name", default="", help="The option's key in the JSON; empty: only print the table."
    )
    parser.add_argument("--seeds", default="0,1,2", help="Comma-separated seeds.")
    parser.add_argument("--baseline", default="default", help="The row NAME is paired with.")
    parser.add_argument("option", nargs="*", help="The option's flags of pipelines.train.")
    args = parser.parse_args(argv)
    with open(RESULTS) as f:
        results = json.load(f)
    if results["command"] != COMMAND:
        raise ValueError(f"{RESULTS} was made by {results['command']!r}, not {COMMAND!r}.")
    if args.name:
        records = results["runs"].setdefault(args.name, [])
        results.setdefault("flags", {})[args.name] = list(args.option)
        if args.baseline != "default":
            results.setdefault("baselines", {})[args.name] = args.baseline
        with tempfile.TemporaryDirectory() as root:
            for seed in (int(s) for s in args.seeds.split(",")):
                if any(r["seed"] == seed for r in records):
                    continue
                records.append(run_seed(seed, args.option, root))
                with open(RESULTS, "w") as f:  # After every run: a killed sweep keeps them.
                    json.dump(results, f, indent=1)
                    f.write("\n")
    for name in results["runs"]:
        print(row(name, results["runs"], results.get("baselines", {}).get(name, "default")))


if __name__ == "__main__":
    main(sys.argv[1:])
