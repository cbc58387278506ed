"""Each query's test metrics, saved beside a run's report so that two runs can be paired user
by user after their checkpoints are gone (numpy only: the reproduction's report reads them
without TensorFlow).

A file (.npz) holds the evaluation set's users, a digest of its targets, the split and
index it was evaluated on, and one [num_queries] float64 array per metric (float32 in files
written before 2026-12). `compare` pairs two such records query by query
(`significance.paired`); `pipelines.evaluate --per_query_out` writes them, and `--against` and
the paper campaign's report read them.
"""

import hashlib
import json
import os
from typing import Dict, Optional, Sequence

import numpy as np

from pipelines import significance

SUFFIX = ".npz"
_HEADER = ("targets_digest", "split", "index", "description")


def targets_digest(targets: Sequence[np.ndarray]) -> str:
    """sha256 of an evaluation set's targets: the same digest, the same positives per query."""
    digest = hashlib.sha256()
    for positives in targets:
        digest.update(np.asarray(positives, np.int64).tobytes() + b"|")
    return digest.hexdigest()


def save(record: Dict, path: str) -> None:
    """Writes `record` ({"users", "values": {metric: [num_queries]}} and `_HEADER`'s keys) to
    `path`, which must end with .npz."""
    if not path.endswith(SUFFIX):
        raise ValueError(f"--per_query_out must end with {SUFFIX}; received {path!r}.")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    np.savez_compressed(
        path,
        header=json.dumps({key: record[key] for key in _HEADER}),
        users=np.asarray(record["users"]),
        # (mypy: "value:NAME" keys, never savez_compressed's `allow_pickle`.)
        **{  # type: ignore[arg-type]
            # float64, as computed: a run compared with its own file differs by nothing.
            f"value:{name}": np.asarray(array, np.float64)
            for name, array in record["values"].items()
        },
    )


def load(path: str) -> Dict:
    """The record `save` wrote to `path`."""
    with np.load(path) as saved:
        record = json.loads(str(saved["header"]))
        record["users"] = saved["users"]
        record["values"] = {
            name[len("value:") :]: saved[name] for name in saved.files if name.startswith("value:")
        }
    return record


def load_as(path: str, split: str, index: str) -> Dict:
    """The record `save` wrote to `path`, which must hold `split` by `index` search.

    Raises:
      ValueError: it holds another split or search.
    """
    record = load(path)
    if (record["split"], record["index"]) != (split, index):
        raise ValueError(
            f"{path} holds the {record['split']} split by {record['index']} search; asked for "
            f"the {split} split by {index} search."
        )
    return record


def compare(a: Dict, b: Dict, name_a: str = "a", name_b: str = "b") -> Dict[str, Dict[str, float]]:
    """Per metric, `significance.paired` of b's per-query values against a's (d = b - a).
    Both records must hold the same queries with the same targets, on one split and index."""
    if (a["split"], a["index"]) != (b["split"], b["index"]):
        raise ValueError(
            f"{name_a} holds the {a['split']} split by {a['index']} search, "
            f"{name_b} the {b['split']} split by {b['index']} search."
        )
    if not (np.array_equal(a["users"], b["users"]) and a["targets_digest"] == b["targets_digest"]):
        raise ValueError(
            f"{name_a} evaluates other {a['split']} queries than {name_b} ({a['description']}, "
            f"{len(a['users'])} queries vs {b['description']}, {len(b['users'])}); a paired "
            "comparison needs the same ones."
        )
    return {
        name: significance.paired(a["values"][name], b["values"][name])
        for name in a["values"]
        if name in b["values"]
    }


def check_against_report(record: Dict, output_dir: str, tolerance: float = 1e-6) -> None:
    """Raises if the means of `record` (test split) differ from the test metrics that
    OUTPUT_DIR/metrics.json reports for the same index: then this code evaluates the run
    otherwise than the code that trained it did, and its per-query values would not be the
    run's."""
    path = os.path.join(output_dir, "metrics.json")
    if record["split"] != "test" or not os.path.exists(path):
        return
    with open(path) as f:
        reported = json.load(f).get(f"test_{record['index']}", {})
    for name, values in record["values"].items():
        if name in reported and abs(float(np.mean(values)) - reported[name]) > tolerance:
            raise ValueError(
                f"{output_dir}: {name} evaluates to {float(np.mean(values)):.6f} here but "
                f"{reported[name]:.6f} in its metrics.json; the code evaluating it differs from "
                "the code that trained it, so its per-query values are not written."
            )


def format_comparison(comparison: Dict[str, Dict[str, float]], name_b: str, name_a: str) -> str:
    """Markdown table of `compare_runs`: both means, d, its SE over queries, t and p."""
    lines = [
        f"| metric | {name_b} | {name_a} | d | SE (queries) | t | p |",
        "|---|---|---|---|---|---|---|",
    ]
    for metric, row in comparison.items():
        lines.append(
            f"| {metric} | {row['mean_b']:.4f} | {row['mean_a']:.4f} | "
            f"{row['difference']:+.4f} | {row['se']:.4f} | {row['t']:.2f} | "
            f"{row['p']:.3g} |"
        )
    return "\n".join(lines)


def report_comparison(
    comparison: Dict[str, Dict[str, float]],
    b: str,
    a: str,
    split: str,
    index: str,
    output_json: Optional[str] = None,
) -> None:
    """Prints `compare`'s result of run `b` against `a` (`format_comparison`), and with
    `output_json` writes it there too."""
    n = next(iter(comparison.values()))["n"]
    print(
        f"{b} (b) against {a} (a), {split} split, {index} search, {n} queries; d = b - a, its "
        "standard error over queries (the evaluation set's noise, not the seeds'):\n"
    )
    print(format_comparison(comparison, "b", "a"))
    if output_json:
        record = dict(b=b, a=a, split=split, index=index, metrics=comparison)
        temporary = output_json + ".partial"
        with open(temporary, "w") as f:
            json.dump(record, f, indent=1)
        os.replace(temporary, output_json)  # Whole or not at all.
        print(f"\nWrote {output_json}")
