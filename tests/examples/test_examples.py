"""Every example runs from a clone as its docstring says (`python -m examples.NAME`), at smoke
size, each in its own process: the Keras 3 ones in a Python whose packages lack TensorFlow, as on
a JAX machine; the TFRS ones with TensorFlow. (`examples.filtered_serving` runs in
tests/tfrs_logq/test_export.py, `examples.keras_sasrec` on every row, no TensorFlow either, in
tests/examples/test_keras_sasrec.py.)"""

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.keras_logq.test_backends import _TENSORFLOW_FAMILY
from tests.keras_logq.test_backends import _site_packages_without_tensorflow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.integration


def _run(args, env=None, python=(sys.executable,)):
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
    result = subprocess.run(
        [*python, "-m", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stderr[-4000:]}"
    return result.stdout


def _without_tensorflow(tmp_path):
    """(the interpreter, environment) of a Keras 3 user on JAX with no TensorFlow installed."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    site = tmp_path / "site"
    site.mkdir()
    # keras-rs stays: it needs Keras 3 only.
    family = [name for name in _TENSORFLOW_FAMILY if not name.startswith("keras")]
    path = os.pathsep.join([_site_packages_without_tensorflow(str(site), family), ROOT])
    return (sys.executable, "-S"), {"KERAS_BACKEND": "jax", "PYTHONPATH": path}


def _table_rows(stdout, prefix):
    return [line for line in stdout.splitlines() if line.startswith(prefix)]


def test_keras_rs_two_tower_without_tensorflow(tmp_path):
    python, env = _without_tensorflow(tmp_path)
    stdout = _run(
        [
            "examples.keras_rs_two_tower",
            "--users=200",
            "--items=300",
            "--epochs=2",
            "--batch_size=64",
        ],
        env=env,
        python=python,
    )
    assert "backend jax" in stdout
    rows = _table_rows(stdout, "| k")
    assert len(rows) == 3, stdout[-3000:]
    for row in rows:
        recall, ndcg = (float(x) for x in row.split("|")[2:4])
        assert 0.0 <= ndcg <= recall <= 1.0


def test_tfrs_sequential_tutorial(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "ratings.dat"
    with open(path, "w", encoding="utf-8") as f:  # 30 users, 8-20 ratings each, 60 movies.
        for user in range(1, 31):
            for t, movie in enumerate(rng.choice(60, rng.integers(8, 21), replace=False)):
                f.write(f"{user}::{movie + 1}::4::{1000 + t}\n")
    stdout = _run(
        [
            "examples.tfrs_sequential_tutorial",
            f"--data_path={path}",
            "--epochs=1",
            "--batch_size=64",
            "--dim=8",
            "--num_uniform=8",
        ]
    )
    rows = [row for row in _table_rows(stdout, "| ") if "top-" not in row]
    assert len(rows) >= 2, stdout[-3000:]
    for row in rows:
        top = [float(x) for x in row.split("|")[3:-1]]
        assert all(0.0 <= a <= b <= 1.0 for a, b in zip(top, top[1:])), row


def test_filtered_serving_cost():
    stdout = _run(
        [
            "examples.filtered_serving_cost",
            "--catalog=500",
            "--batch_size=4",
            "--history=5",
            "--allowed=0,50",
            "--exclude=2",
            "--k=10",
            "--repeats=2",
        ]
    )
    rows = _table_rows(stdout, "| ")[1:]  # Below the header.
    assert [row.split("|")[1].strip() for row in rows] == ["brute_force", "scann"], stdout
