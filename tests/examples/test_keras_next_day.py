"""examples.keras_next_day (Keras 3, JAX) on a day store built here: it trains in time order
and tests the next day in a process whose packages lack the TensorFlow family."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_next_day_on_jax_without_tensorflow(tmp_path, monkeypatch):
    from pipelines import configs  # pylint: disable=import-outside-toplevel
    from pipelines import experiment  # pylint: disable=import-outside-toplevel
    from tests.examples.test_keras_sasrec import _env  # pylint: disable=import-outside-toplevel
    from tests.keras_logq.test_backends import _site_packages_without_tensorflow  # pylint: disable=import-outside-toplevel

    monkeypatch.setenv("TFRS_LOGQ_CACHE", str(tmp_path / "cache"))
    config = configs.PRESETS["industrial_smoke"]
    experiment.day_store_data(config)  # What `--build_store='--preset=industrial_smoke'` does.
    store = experiment.day_store_dir(config, None)
    site = tmp_path / "site"
    site.mkdir()
    env = _env(PYTHONPATH=os.pathsep.join([_site_packages_without_tensorflow(str(site)), ROOT]))
    output = tmp_path / "results.json"
    result = subprocess.run(
        [
            sys.executable,
            "-S",
            "-m",
            "examples.keras_next_day",
            f"--store={store}",
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
