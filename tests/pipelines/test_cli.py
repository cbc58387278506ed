"""`tfrs-logq`, the one command behind the jobs, and `--config_file`."""

import json
import os
import subprocess
import sys

import pytest
from absl import flags

from pipelines import cli
from pipelines import configs
from pipelines import train

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_help_lists_every_job_and_preset(capsys):
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    for name in [*cli.JOBS, *configs.PRESETS]:
        assert f"\n  {name} " in text, name
    assert "The main job: SASRec on the embedded synthetic catalog" in text


def test_every_preset_has_a_summary():
    assert list(configs.PRESET_SUMMARIES) == list(configs.PRESETS)


def test_no_job_prints_the_usage_and_fails(capsys):
    assert cli.main([]) == 2
    assert capsys.readouterr().out.startswith("usage: tfrs-logq JOB")


def test_unknown_job_is_named(capsys):
    assert cli.main(["trian", "--preset=smoke"]) == 2
    assert capsys.readouterr().err == (
        "tfrs-logq: unknown job 'trian'; the jobs are train, evaluate, export, compare, cluster "
        "(`tfrs-logq --help` lists them).\n"
    )


def test_each_job_is_its_module():
    for name, job in cli.JOBS.items():
        assert job.module == f"pipelines.{name}"


def _command(*args):
    """`python -m pipelines ARGS...` (what `tfrs-logq ARGS...` runs) in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "pipelines", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_python_dash_m_pipelines_is_the_command():
    result = _command("--help")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "jobs:" in result.stdout and "industrial_smoke" in result.stdout


def test_a_job_gets_its_flags_and_exit_status():
    """`tfrs-logq train` parses train's flags: a bad preset is refused by name, exit 1."""
    result = _command("train", "--preset=nope", "--output_dir=unused")
    assert result.returncode == 1, result.stderr[-3000:]
    assert "--preset must be one of paper, official" in result.stderr
    assert "received --preset='nope'" in result.stderr


def test_a_jobs_help_lists_its_flags():
    # absl prints the docstring, then the flags, and exits 1, as `python -m pipelines.train`.
    result = _command("train", "--help")
    assert result.returncode == 1, result.stderr[-3000:]
    text = result.stdout
    assert "The training entry point" in text
    for flag in ("--preset", "--config_file", "--output_dir", "--correction"):
        assert f"  {flag}:" in text, flag


def test_cluster_job_takes_argparse_flags():
    result = _command("cluster", "--workers=0", "--", "true")
    assert result.returncode == 2
    assert "tfrs-logq cluster: error: --workers must be an integer >= 1" in result.stderr


def test_console_script_is_installed():
    """`pip install` puts `tfrs-logq` beside the interpreter (setup.cfg's entry point)."""
    script = os.path.join(os.path.dirname(sys.executable), "tfrs-logq")
    if not os.path.exists(script):
        pytest.skip(f"no console script beside {sys.executable} (not installed with pip)")
    result = subprocess.run(
        [script, "trian"], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 2
    assert "unknown job 'trian'" in result.stderr


def _config(tmp_path, *argv, contents=None):
    path = tmp_path / "config.json"
    if contents is not None:
        path.write_text(contents if isinstance(contents, str) else json.dumps(contents))
    flag_values = flags.FlagValues()
    train.define_flags(flag_values)
    flag_values(["train", f"--config_file={path}", *argv])
    return train.config_from_flags(flag_values)


def test_config_file_over_the_preset_and_flags_over_it(tmp_path):
    config = _config(
        tmp_path,
        "--preset=smoke",
        "--dim=24",
        contents={"dim": 32, "correction": "standard", "num_negatives": 48},
    )
    smoke = configs.PRESETS["smoke"]
    assert (config.model.dim, config.loss.correction, config.loss.num_negatives) == (
        24,
        "standard",
        48,
    )
    assert config.training.epochs == smoke.training.epochs


def test_config_file_takes_a_runs_config_json(tmp_path):
    """A run's config.json (nested by group) re-runs its config, whatever the preset."""
    stored = configs.PRESETS["industrial_smoke"].replace(seed=7).as_dict()
    config = _config(tmp_path, "--preset=smoke", contents=stored)
    assert config == configs.validate(configs.PRESETS["industrial_smoke"].replace(seed=7))


def test_config_file_takes_old_field_names(tmp_path):
    config = _config(tmp_path, "--preset=official_cpu", contents={"per_row_negatives": False})
    assert config.loss.per_row is False


@pytest.mark.parametrize(
    "contents, message",
    [
        (None, r"--config_file=.*config.json cannot be read \(No such file or directory\)"),
        ("{dim: 3", r"--config_file=.*config.json is not JSON \(Expecting property name"),
        (
            "[1, 2]",
            r"--config_file=.*config.json must hold a JSON object of config fields; "
            r"received a list",
        ),
        (
            '{"dimm": 3, "dim": 8}',
            r"--config_file=.*config.json has fields that Config lacks: "
            r"dimm; its fields are",
        ),
    ],
)
def test_bad_config_file_is_named(tmp_path, contents, message):
    with pytest.raises(ValueError, match=message):
        _config(tmp_path, "--preset=smoke", contents=contents)


def test_bad_value_in_config_file_is_refused_by_validation(tmp_path):
    with pytest.raises(ValueError, match=r"dim"):
        _config(tmp_path, "--preset=smoke", contents={"dim": 0})
