"""Each query's test metrics, saved beside a run's report so that two runs can be paired user
by user after their checkpoints are gone (numpy only: the reproduction's report reads them
without TensorFlow).

A file (.npz) holds the evaluation set's users, a digest of its targets, the split and
index it was evaluated on, and one [num_queries] float32 array per metric. `compare` pairs two
such records query by query (`significance.paired`); `pipelines.evaluate --per_query_out`
writes them, and `--against` and the paper campaign's report read them.
"""

import hashlib
import json
import os
from typing import Dict, Sequence

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
            f"value:{name}": np.asarray(array, np.float32)
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
