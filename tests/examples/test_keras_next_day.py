"""examples.keras_next_day (Keras 3, JAX) on a day store built here: it trains in time order
and tests the next day in a process whose packages lack the TensorFlow family."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_next_day_on_jax_without_tensorflow(tmp_path, monkeypatch):
    """--build_store builds the store in the process that lacks TensorFlow, the same files as
    the store this process (which has imported TensorFlow) builds from those flags, built
    first and moved aside. (The writer's bytes against tf.io.TFRecordWriter's:
    tests/pipelines/test_events.py.)"""
    import tfrs_logq  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    from pipelines import configs  # pylint: disable=import-outside-toplevel
    from pipelines.data import logs  # pylint: disable=import-outside-toplevel
    from tests.examples.test_keras_sasrec import _env  # pylint: disable=import-outside-toplevel
    from tests.keras_logq.test_backends import _site_packages_without_tensorflow  # pylint: disable=import-outside-toplevel

    monkeypatch.setenv("TFRS_LOGQ_CACHE", str(tmp_path / "cache"))
    config = configs.PRESETS["industrial_smoke"]
    logs.day_store_data(config)  # In this process, which has imported TensorFlow.
    store = logs.day_store_dir(config, None)
    os.rename(store, str(tmp_path / "built_beside_tensorflow"))
    site = tmp_path / "site"
    site.mkdir()
    env = _env(
        PYTHONPATH=os.pathsep.join([_site_packages_without_tensorflow(str(site)), ROOT]),
        TFRS_LOGQ_CACHE=str(tmp_path / "cache"),
    )
    output = tmp_path / "results.json"
    result = subprocess.run(
        [
            sys.executable,
            "-S",
            "-m",
            "examples.keras_next_day",
            "--build_store=--preset=industrial_smoke",
            "--batch_size=128",
            "--num_uniform=32",
            "--dim=16",
            "--index_size=1000",
            "--table_learning_rate=0.1",
            "--max_steps=60",
            f"--output={output}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    results = json.loads(output.read_text())
    assert results["backend"] == "jax" and results["steps"] == 60
    assert results["num_test_queries"] == 500 and results["index_items"] > 1000
    test = results["test"]
    for name in ("recall", "ndcg"):
        values = [test[f"{name}@{k}"] for k in (10, 100, 1000)]
        assert 0.0 < values[0] <= values[1] <= values[2] <= 1.0, test
    assert test["ndcg@10"] <= test["recall@10"]
    assert "| recall |" in result.stdout
    assert results["store"] == store and results["tensorflow_imported"] is False
    # Its pass ended with a backup (tests_keras3/test_next_day_training.py resumes one),
    # removed once the results were written.
    assert os.listdir(tmp_path / "cache" / "keras_next_day") == []
    for name in os.listdir(store):  # The same store (the manifest's timings aside).
        if name != "manifest.json":
            with open(os.path.join(store, name), "rb") as f:
                with open(os.path.join(tmp_path, "built_beside_tensorflow", name), "rb") as g:
                    assert f.read() == g.read(), name


class _Store:
    """A store's stream: `chunks` of 7 rows, numbered 0..n-1 in time order."""

    def __init__(self, n):
        self.n = n

    def chunks(self):
        for start in range(0, self.n, 7):
            rows = np.arange(start, min(start + 7, self.n), dtype=np.int32)
            yield {"user": rows, "item": rows + 1000, "history": np.stack([rows, rows], 1)}


def test_batches_in_time_order_or_shuffled_within_blocks():
    from pipelines import keras_job as keras_next_day  # pylint: disable=import-outside-toplevel

    plain = list(keras_next_day.batches(_Store(50), 8))
    assert len(plain) == 6  # 48 of 50 rows: the last partial batch is dropped.
    np.testing.assert_array_equal(np.concatenate([b["user"] for b in plain]), np.arange(48))
    shuffled = list(keras_next_day.batches(_Store(50), 8, shuffle_window=20, seed=3))
    users = np.concatenate([b["user"] for b in shuffled])
    assert len(users) == 48 and not np.array_equal(users, np.arange(48))
    # A row moves only within its block of 20 rows, its columns with it (the last block,
    # rows 40-49, is cut at row 48 by the last full batch).
    for block in range(2):
        np.testing.assert_array_equal(
            np.sort(users[20 * block : 20 * block + 20]), np.arange(20 * block, 20 * block + 20)
        )
    assert set(users[40:]) <= set(range(40, 50))
    for batch in shuffled:
        np.testing.assert_array_equal(batch["item"], batch["user"] + 1000)
        np.testing.assert_array_equal(batch["history"][:, 1], batch["user"])
    again = np.concatenate(
        [b["user"] for b in keras_next_day.batches(_Store(50), 8, shuffle_window=20, seed=3)]
    )
    np.testing.assert_array_equal(again, users)  # The same stream on every start.


def test_settings_of_the_pipelines_config():
    from absl import app  # pylint: disable=import-outside-toplevel

    from pipelines import configs  # pylint: disable=import-outside-toplevel
    from pipelines import keras_job as keras_next_day  # pylint: disable=import-outside-toplevel

    config = configs.PRESETS["industrial"]
    assert keras_next_day.config_settings(config) == dict(
        dim=64,
        batch_size=1024,
        num_uniform=512,
        num_in_batch=512,
        correction="improved",
        table_learning_rate=3.0,
        learning_rate=0.02,
        index_size=200_000,
        shuffle_window=100_000,
        share_item_table=False,
        seed=0,
        adam_epsilon=1e-7,
    )
    odd = config.replace(
        num_negatives=1025,
        correction="standard_negatives",
        table_learning_rate=0.0,
        share_item_table=True,
    )
    settings = keras_next_day.config_settings(odd)
    assert (settings["num_uniform"], settings["num_in_batch"]) == (513, 512)
    assert settings["correction"] == "standard_negatives" and settings["share_item_table"]
    assert settings["table_learning_rate"] == 0.02  # 0: the tables take --learning_rate.
    with pytest.raises(
        app.UsageError,
        match=r"trains what this job does not: --negatives='in_batch' \(this job: 'mixed'\)\.",
    ):
        keras_next_day.config_settings(config.replace(negatives="in_batch"))
    with pytest.raises(
        app.UsageError,
        match=r"--loss='bce' \(this job: 'sampled_softmax'\), --epochs=3 \(this job: 1\)",
    ):
        keras_next_day.config_settings(config.replace(epochs=3, loss="bce"))


def test_build_store_names_bad_flags():
    from absl import app  # pylint: disable=import-outside-toplevel

    from pipelines import keras_job as keras_next_day  # pylint: disable=import-outside-toplevel

    with pytest.raises(
        app.UsageError, match=r"--build_store='--preset=nope'.*received --preset='nope'"
    ):
        keras_next_day.build_store("--preset=nope")
    with pytest.raises(
        app.UsageError, match=r"--build_store='--preset=smoke' does not read an event log"
    ):
        keras_next_day.build_store("--preset=smoke")
    with pytest.raises(app.UsageError, match=r"--build_store='--dimm=3'"):
        keras_next_day.build_store("--dimm=3")
