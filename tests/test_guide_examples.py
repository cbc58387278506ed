"""The own-log commands that README.md and the guides quote, executed at smoke size (issue 62).

`tests/test_docs.py` checks every quoted command's flags; this runs the ones a user with an own
event log runs, as quoted, in a fresh directory that holds a small log where the command
expects one (`logs/day-*.parquet`, `logs/*.parquet`, GroupLens's `ml-1m/ratings.dat`), each
group of commands in order (a train, then the evaluation of its run; the MovieLens converter,
then the comparison on what it wrote). The only changes, at smoke size, are `SMOKE`'s: the
`industrial` preset becomes `industrial_smoke` (the same protocol, the sizes of a test) and a
comparison's three seeds two. A command with any other difference would not be the guide's, so
the test fails if the docs stop quoting one of these commands (`GROUPS`).

Each group checks what its guide promises: a run's metrics and its `[data]` line, the
re-evaluation through a ScaNN index with the saved vocabularies, a served request with raw
string ids through `serving_default` (`unknown_user`), and a comparison's report.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_docs import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
SMOKE = {"--preset=industrial": "--preset=industrial_smoke", "--seeds=3": "--seeds=2"}
DAY = 86_400
START = 1_767_225_600  # 2026-01-01T00:00:00Z.

# The quoted commands run, by the place that quotes them (file:line), group by group.
GROUPS: Dict[str, List[str]] = {
    "event_logs": ["docs/guide/event_logs.md:18", "docs/guide/event_logs.md:21"],
    "readme": ["README.md:99"],
    "readme_compare": ["README.md:102"],
    "movielens": ["README.md:108", "docs/guide/compare.md:138"],
}


def _quoted(place: str) -> Tuple[str, ...]:
    """The argv of the command quoted at `place`, `python` as this interpreter, at smoke size."""
    found = [c for c in COMMANDS if place in c.where]  # "file:line", compared whole.
    assert found, f"no command is quoted at {place} any more: update GROUPS"
    argv = [SMOKE.get(word, word) for word in found[0].argv]
    return (sys.executable, *argv[1:])


def _write_log(directory: Path, days: int = 8, users: int = 300, items: int = 400) -> None:
    """logs/day-NNN.parquet: a day a file of (user_id, item_id, timestamp, reward) events,
    string ids, ISO-8601 times with `Z`, a Zipf-like popularity, users coming back daily."""
    rng = np.random.default_rng(0)
    popularity = 1.0 / np.arange(1, items + 1) ** 0.9
    popularity /= popularity.sum()
    (directory / "logs").mkdir()
    for day in range(days):
        n = users * 3
        user = rng.integers(0, users, n)
        item = rng.choice(items, n, p=popularity)
        seconds = START + day * DAY + np.sort(rng.integers(0, DAY, n))
        table = pa.table(
            {
                "user_id": [f"u_{u:04d}" for u in user],
                "item_id": [f"m_{i:04d}" for i in item],
                "timestamp": np.datetime_as_string(
                    seconds.astype("datetime64[s]"), unit="s", timezone="UTC"
                ),
                "reward": rng.choice([0.0, 1.0, 3.0], n),
            }
        )
        pq.write_table(table, directory / "logs" / f"day-{day:03d}.parquet")


def _write_ratings(directory: Path, weeks: int = 33, users: int = 400, items: int = 300) -> None:
    """ml-1m/ratings.dat in GroupLens's format over `weeks` weeks of 2000 (the guide's
    --test_day=30 is the 31st week)."""
    rng = np.random.default_rng(1)
    first = 956_703_600  # 2000-04-25, about MovieLens-1M's first rating.
    popularity = 1.0 / np.arange(1, items + 1)
    popularity /= popularity.sum()
    lines = []
    for week in range(weeks):
        for user in rng.choice(users, 60, replace=False):
            for item in rng.choice(items, 4, p=popularity, replace=False):
                when = first + week * 7 * DAY + int(rng.integers(0, 7 * DAY))
                lines.append(f"{user + 1}::{item + 1}::{rng.integers(1, 6)}::{when}")
    (directory / "ml-1m").mkdir()
    (directory / "ml-1m" / "ratings.dat").write_text("\n".join(lines) + "\n")


def _run(argv, cwd: Path, timeout: int = 900) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    process = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    output = process.stdout + process.stderr
    assert process.returncode == 0, (
        f"{' '.join(argv)} exited {process.returncode}:\n{output[-4000:]}"
    )
    return output


def _metrics(run: Path) -> Dict:
    with open(run / "metrics.json") as f:
        return json.load(f)


def test_every_group_names_quoted_commands():
    for places in GROUPS.values():
        for place in places:
            _quoted(place)


@pytest.mark.integration
def test_the_event_log_guide_trains_evaluates_and_serves_raw_ids(tmp_path):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    _write_log(tmp_path)
    train, evaluate = (_quoted(place) for place in GROUPS["event_logs"])
    output = _run(train, tmp_path)
    assert "[data] read 7,200 events; kept" in output, output[-3000:]
    run = tmp_path / "runs" / "mylog"
    metrics = _metrics(run)
    assert metrics["event_log"]["events_read"] == 7200
    assert metrics["test"]["recall@1000"] > 0
    output = _run(evaluate, tmp_path)
    # Through a ScaNN index over the saved vocabularies, the baselines beside the model.
    assert "two_tower on events (next_day), test split, scann search" in output, output[-3000:]
    assert "| popularity (baseline) | recall |" in output, output[-3000:]
    # The export serves raw string ids (`serving_default`), and says which users it knows.
    exports = sorted((run / "export" / "brute_force").iterdir())
    served = tf.saved_model.load(str(exports[-1])).signatures["serving_default"]
    answer = served(
        user=tf.constant(["u_0001", "nobody"]),
        history=tf.constant([["m_0000", "m_0001"], ["m_0002", ""]]),
    )
    assert answer["ids"].dtype == tf.string
    assert answer["unknown_user"].numpy().tolist() == [False, True]
    # serving.md's table: an event log's export takes its raw ids at serving_default and
    # serving_filtered, the dense ids at serving_dense(_filtered), and has no serving_raw.
    exported = tf.saved_model.load(str(exports[-1])).signatures
    assert sorted(exported) == _documented_signatures("an event log"), sorted(exported)


def _documented_signatures(kind: str) -> List[str]:
    """The signatures docs/guide/serving.md's table lists for the row starting with `kind`
    (and `item_embeddings`, which every export has)."""
    for line in (ROOT / "docs" / "guide" / "serving.md").read_text().splitlines():
        if line.startswith(f"| {kind} "):
            cells = line.strip("|").split("|")[1:]
            names = [name.strip(" `") for cell in cells for name in cell.split(",")]
            return sorted([*names, "item_embeddings"])
    raise AssertionError(f"serving.md's table has no row for {kind!r}")


def test_serving_guide_names_each_exports_signatures():
    assert _documented_signatures("an event log") == [
        "item_embeddings",
        "serving_default",
        "serving_dense",
        "serving_dense_filtered",
        "serving_filtered",
    ]
    assert _documented_signatures("a dataset") == [
        "item_embeddings",
        "serving_default",
        "serving_filtered",
        "serving_raw",
        "serving_raw_filtered",
    ]


@pytest.mark.integration
def test_the_readme_trains_an_own_log(tmp_path):
    _write_log(tmp_path)
    output = _run(_quoted(GROUPS["readme"][0]), tmp_path)
    assert "[data] read 7,200 events" in output, output[-3000:]
    assert _metrics(tmp_path / "runs" / "mylog")["test"]["recall@100"] > 0


@pytest.mark.integration
@pytest.mark.slow
def test_the_readme_compares_corrections_on_an_own_log(tmp_path):
    _write_log(tmp_path)
    _run(_quoted(GROUPS["readme_compare"][0]), tmp_path, timeout=1800)
    report = (tmp_path / "runs" / "compare" / "mylog" / "report.md").read_text()
    assert "improved" in report and "standard" in report


@pytest.mark.integration
@pytest.mark.slow
def test_the_movielens_log_is_written_and_compared(tmp_path):
    _write_ratings(tmp_path)
    convert, compare = (_quoted(place) for place in GROUPS["movielens"])
    _run(convert, tmp_path)
    assert list((tmp_path / "logs" / "ml1m").glob("*.parquet"))
    _run(compare, tmp_path, timeout=1800)
    results = tmp_path / "docs" / "results" / "compare" / "ml1m"
    assert (results / "report.md").exists(), sorted(results.rglob("*"))
