"""`tfrs-logq compare` end to end at smoke size: two corrections x two seeds trained, recorded
and reported; a rerun trains nothing; a failed run is recorded, named and fails the command."""

import json
import os
import subprocess
import sys
import tempfile

import pytest

pytestmark = pytest.mark.integration


def _compare(output_dir, cache, *flags):
    return subprocess.run(
        [sys.executable, "-m", "pipelines.compare", f"--output_dir={output_dir}", *flags],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env=dict(os.environ, TFRS_LOGQ_CACHE=cache),
    )


def test_two_corrections_two_seeds_then_nothing_left():
    out, cache = tempfile.mkdtemp(), tempfile.mkdtemp()
    flags = ["--corrections=standard,improved", "--seeds=2", "--", "--preset=industrial_smoke"]
    first = _compare(out, cache, *flags)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "2 rows x 2 seeds, 4 runs; 0 already finished." in first.stdout
    for row in ("standard", "improved"):
        for seed in (0, 1):
            with open(os.path.join(out, row, f"seed{seed}.json")) as f:
                record = json.load(f)
            assert record["status"] == "finished"
            assert record["config"]["loss"]["correction"] == row
            assert record["config"]["training"]["seed"] == seed
            assert 0.0 <= record["test"]["recall@10"] <= 1.0
            assert record["git_revision"]
            run = os.path.join(out, row, f"seed{seed}")
            assert os.path.exists(os.path.join(run, "metrics.json"))
            assert not os.path.exists(os.path.join(run, "checkpoints"))  # Weights pruned.
    with open(os.path.join(out, "report.md")) as f:
        report = f.read()
    assert "| improved − standard | 0, 1 | " in report
    assert "Holm" in report and "90% CI to ±" in report
    assert "## recall by popularity third of the target" in report
    assert "| popularity (baseline) |" in report
    assert "## Training or test queries?" in report
    assert os.path.exists(os.path.join(out, "improved", "seed1.npz"))  # Per-query values.
    with open(os.path.join(out, "report.json")) as f:
        summary = json.load(f)
    assert summary["rows"]["improved"]["finished"] == [0, 1]
    assert len(summary["differences"]["improved"]["recall@10"]["d"]) == 2
    again = _compare(out, cache, *flags)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "4 runs; 4 already finished." in again.stdout
    assert "[1/" not in again.stdout  # Nothing trained.
    # Another comparison into the same directory is refused.
    other = _compare(out, cache, "--corrections=none,improved", "--", "--preset=synthetic")
    assert other.returncode != 0
    assert "holds a comparison with other common flags" in other.stderr


def test_a_failed_run_is_recorded_and_named():
    out, cache = tempfile.mkdtemp(), tempfile.mkdtemp()
    result = _compare(
        out,
        cache,
        "--row=roomy: --item_catalog=",
        "--row=tight: --item_catalog=/nonexistent/catalog.txt",
        "--seeds=1",
        "--",
        "--preset=industrial_smoke",
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "1 runs failed (tight seed 0)" in result.stderr
    with open(os.path.join(out, "tight", "seed0.json")) as f:
        record = json.load(f)
    assert record["status"] == "failed"
    assert any("/nonexistent/catalog.txt" in line for line in record["log_tail"])
    with open(os.path.join(out, "report.md")) as f:
        report = f.read()
    assert "| tight | `--item_catalog=/nonexistent/catalog.txt` | 0/1 (failed: 0) |" in report
    assert "Runs failed: tight (seeds 0 failed)" in report
    assert "With one seed a row there are no p-values" in report
