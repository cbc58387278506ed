"""examples.keras_sasrec (Keras 3, JAX) on a tiny SASRec-format file.

The example runs in a child process (Keras 3 picks its backend per process, and this
one runs Keras 2 for TFRS). The slow test runs it as a GPU machine without TensorFlow
would: `python -m examples.keras_sasrec` in a Python whose packages lack the TensorFlow family.
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from examples import keras_sasrec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tiny_file(directory):
    """60 users with 5-24 distinct items each out of 40, in SASRec's `user item` format."""
    rng = np.random.default_rng(0)
    path = os.path.join(str(directory), "tiny_sasrec.txt")
    with open(path, "w", encoding="utf-8") as f:
        for user in range(1, 61):
            for item in rng.choice(np.arange(1, 41), rng.integers(5, 25), replace=False):
                f.write(f"{user} {item}\n")
    return path


TINY_FLAGS = [
    "--epochs=2",
    "--max_len=8",
    "--dim=8",
    "--pool=16",
    "--num_uniform=8",
    "--batch_size=128",
    "--seeds=0",
]


def _env(**extra):
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2", **extra)
    env.pop("TF_USE_LEGACY_KERAS", None)  # The child runs Keras 3 only.
    return env


def _check_output(stdout, rows):
    lines = [line for line in stdout.splitlines() if line.startswith("| ")][1:]
    assert [line.split("|")[1].strip() for line in lines] == [
        keras_sasrec.NAMES[r] for r in rows
    ], stdout[-3000:]
    for line in lines:
        recall, ndcg = (float(cell) for cell in line.split("|")[2:4])
        assert 0.0 < ndcg <= recall <= 1.0, line


def test_training_windows_and_left_padding():
    inputs, targets = keras_sasrec.training_windows(
        [np.array([5, 6, 7, 8, 9, 10]), np.array([3]), np.array([1, 2])], max_len=3
    )
    np.testing.assert_array_equal(inputs, [[7, 8, 9], [0, 5, 6], [0, 0, 1]])
    np.testing.assert_array_equal(targets, [[8, 9, 10], [0, 6, 7], [0, 0, 2]])
    np.testing.assert_array_equal(keras_sasrec.left_padded([[1, 2, 3, 4], []], 2), [[3, 4], [0, 0]])


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
@pytest.mark.parametrize("dtype_policy", ["float32", "mixed_bfloat16"])
def test_example_runs_on_a_tiny_file(tmp_path, dtype_policy):
    """One row, as a JAX user without TensorFlow runs it (`-S`: site-packages without the
    TensorFlow family, through PYTHONPATH), in float32 and in bfloat16."""
    from tests.keras_logq.test_backends import _site_packages_without_tensorflow  # pylint: disable=import-outside-toplevel

    site = tmp_path / "site"
    site.mkdir()
    env = _env(PYTHONPATH=os.pathsep.join([_site_packages_without_tensorflow(str(site)), ROOT]))
    rows = ["mixed_improved"]
    output = tmp_path / "results.json"
    result = subprocess.run(
        [
            sys.executable,
            "-S",
            "-m",
            "examples.keras_sasrec",
            f"--data_path={_tiny_file(tmp_path)}",
            f"--rows={','.join(rows)}",
            *TINY_FLAGS,
            f"--output={output}",
            f"--dtype_policy={dtype_policy}",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "backend jax" in result.stdout and "115 training windows of 8" in result.stdout
    _check_output(result.stdout, rows)
    saved = json.loads(output.read_text())
    assert saved["num_test_users"] == 60 and saved["num_items"] == 40
    assert set(saved["rows"]) == set(rows) and saved["settings"]["epochs"] == 2
    assert saved["settings"]["dtype_policy"] == dtype_policy
    assert f"dtype policy {dtype_policy}" in result.stdout


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_example_runs_without_tensorflow(tmp_path):
    """As on a GPU machine with JAX and no TensorFlow, as documented, every row."""
    from tests.keras_logq.test_backends import _site_packages_without_tensorflow  # pylint: disable=import-outside-toplevel

    site = tmp_path / "site"
    site.mkdir()
    env = _env(PYTHONPATH=os.pathsep.join([_site_packages_without_tensorflow(str(site)), ROOT]))
    result = subprocess.run(
        [
            sys.executable,
            "-S",
            "-m",
            "examples.keras_sasrec",
            f"--data_path={_tiny_file(tmp_path)}",
            *TINY_FLAGS,
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    _check_output(result.stdout, keras_sasrec.ROWS)
