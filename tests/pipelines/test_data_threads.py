"""The data phases on every core: the log read, counted and encoded a few batches at a time on
threads (`events.ordered_map`, TFRS_LOGQ_DATA_THREADS), and the synthetic log's days drawn
on threads, give what one thread gives, byte for byte; a bad batch's error comes in its
turn."""

import hashlib
import os

import numpy as np
import pytest

from pipelines import configs
from pipelines.data import events
from pipelines.data import logs
from pipelines.data import web_synthetic

DAY = 86400


def test_ordered_map_keeps_the_order_and_raises_in_turn():
    def square(x):
        if x == 7:
            raise ValueError("seven")
        return x * x

    assert list(events.ordered_map(square, ((x,) for x in range(7)), 3)) == [
        x * x for x in range(7)
    ]
    found = []
    with pytest.raises(ValueError, match="seven"):
        for value in events.ordered_map(square, ((x,) for x in range(20)), 3):
            found.append(value)
    assert found == [x * x for x in range(7)]  # Every result before the bad one, in order.


def test_workers_reads_the_environment(monkeypatch):
    monkeypatch.setenv("TFRS_LOGQ_DATA_THREADS", "3")
    assert events.workers() == 3
    monkeypatch.setenv("TFRS_LOGQ_DATA_THREADS", "0")
    with pytest.raises(ValueError, match="TFRS_LOGQ_DATA_THREADS must be a positive integer"):
        events.workers()
    monkeypatch.delenv("TFRS_LOGQ_DATA_THREADS")
    assert events.workers() >= 1


def _store_digest(directory):
    digest = hashlib.sha256()
    for root, _, names in sorted(os.walk(directory)):
        for name in sorted(names):
            if name != "manifest.json":
                with open(os.path.join(root, name), "rb") as f:
                    digest.update(name.encode() + f.read())
    return digest.hexdigest()


def test_a_store_built_on_threads_is_the_one_thread_store(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    rows = [
        (f"u{user}", f"i{rng.integers(300)}", day * DAY + int(rng.integers(DAY)))
        for day in range(6)
        for user in range(200)
        for _ in range(4)
    ]
    for day in range(6):  # A file a day: batches enough for the threads to interleave.
        (tmp_path / f"day-{day}.csv").write_text(
            "user_id,item_id,timestamp\n"
            + "".join(f"{u},{i},{t}\n" for u, i, t in rows if t // DAY == day)
        )
    config = configs.PRESETS["industrial_smoke"].replace(
        dataset="events",
        data_path=str(tmp_path / "day-*.csv"),
        test_day=5,
        time_unit="s",
        history_length=4,
    )
    digests = []
    for threads in ("1", "3"):
        monkeypatch.setenv("TFRS_LOGQ_DATA_THREADS", threads)
        run = tmp_path / f"run{threads}"
        logs.day_store_data.cache_clear()
        directory = logs.ensure_day_store(config, str(run))[0]
        digests.append(_store_digest(directory))
    assert digests[0] == digests[1]


def test_the_synthetic_log_drawn_on_threads_is_the_one_thread_log(monkeypatch):
    catalog = web_synthetic.make_catalog(3000, 500, 6, cluster_size=200, seed=1)
    logs_drawn = []
    for threads in ("1", "4"):
        monkeypatch.setenv("TFRS_LOGQ_DATA_THREADS", threads)
        logs_drawn.append(web_synthetic.draw_events(catalog, 12.0, seed=1))
    for key in ("user", "item", "time"):
        np.testing.assert_array_equal(logs_drawn[0][key], logs_drawn[1][key])
