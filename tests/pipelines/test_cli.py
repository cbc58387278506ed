"""`tfrs-logq`, the one command behind the jobs, and `--config_file`."""

import json
import os
import re
import subprocess
import sys

import pytest
from absl import flags

from pipelines import cli
from pipelines import configs
from pipelines import console
from pipelines import export
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


# ---------------------------------------------------------------- what a person meets


def _values(module=train):
    values = flags.FlagValues()
    module.define_flags(values)
    return values


def _flag_error(argv, values):
    with pytest.raises(flags.Error) as raised:
        values(["prog", *argv])
    return console.flag_error_line(raised.value, values)


def test_a_flag_that_does_not_parse_is_one_line_naming_it_and_its_value(monkeypatch):
    monkeypatch.setattr(console, "PROG", "tfrs-logq train")
    values = _values()
    assert _flag_error(["--strategy=mirord"], values) == (
        "--strategy must be one of default, mirrored, multi_worker, parameter_server, tpu; "
        "received --strategy='mirord'. Did you mean --strategy=mirrored?"
    )
    assert _flag_error(["--strategy=zzz"], values) == (
        "--strategy must be one of default, mirrored, multi_worker, parameter_server, tpu; "
        "received --strategy='zzz'."
    )
    assert _flag_error(["--batch_size=abc"], values) == (
        "--batch_size must be an integer; received --batch_size=abc."
    )
    assert _flag_error(["--corection=improved"], values) == (
        "unknown flag --corection=improved. Did you mean --correction? "
        "`tfrs-logq train --help` lists the flags."
    )
    assert _flag_error(["--nojit_compil"], values) == (
        "unknown flag --nojit_compil. Did you mean --nojit_compile? "
        "`tfrs-logq train --help` lists the flags."
    )
    assert _flag_error(["--k=0"], _values(export)) == (
        "--k must be a positive integer; received --k=0."
    )


def test_compare_given_training_flags_before_the_double_dash_says_where_they_go(monkeypatch):
    monkeypatch.setattr(console, "PROG", "tfrs-logq compare")
    values = flags.FlagValues()
    flags.DEFINE_string("output_dir", None, "", flag_values=values)
    assert _flag_error(["--preset=synthetic"], values) == (
        "--preset=synthetic is a flag of `train`, not of compare: give the flags every run "
        "trains with after `--` (tfrs-logq compare --output_dir=... --corrections=... -- "
        "--preset=synthetic)."
    )
    # A flag of neither is unknown.
    assert _flag_error(["--presett=x"], values).startswith("unknown flag --presett=x.")


def test_a_refused_choice_suggests_the_closest():
    message = (
        "--correction must be one of none, standard, standard_negatives, improved; "
        "received --correction='improvd'."
    )
    assert console.usage_line(message) == message + " Did you mean --correction=improved?"
    far = message.replace("improvd", "zzz")
    assert console.usage_line(far) == far
    assert console.usage_line("--output_dir is required.") == "--output_dir is required."


def test_verbose_is_read_before_the_flags_are_parsed():
    assert console.verbose_in(["--preset=smoke", "--verbose"])
    assert console.verbose_in(["--verbose=true"])
    assert not console.verbose_in(["--verbose", "--noverbose"])
    assert not console.verbose_in(["--rows=x", "--", "--verbose"])  # A training flag of compare.
    assert not console.verbose_in([])


def test_a_bad_flag_value_is_one_line_not_the_help():
    """Each job: one line on stderr (no --help first), exit status 1."""
    for args, line in [
        (
            ["train", "--correction=improvd"],  # Named before the missing --output_dir.
            "error: --correction must be one of none, standard, standard_negatives, improved; "
            "received --correction='improvd'. Did you mean --correction=improved?",
        ),
        (
            ["evaluate", "unused", "--index=scan"],
            "error: --index must be one of exact, scann, both, brute_force; received "
            "--index='scan'. Did you mean --index=scann?",
        ),
        (
            [
                "compare",
                "--output_dir=unused",
                "--corrections=standard,improved",
                "--preset=synthetic",
            ],
            "error: --preset=synthetic is a flag of `train`, not of compare: give the flags "
            "every run trains with after `--` (tfrs-logq compare --output_dir=... "
            "--corrections=... -- --preset=synthetic).",
        ),
    ]:
        result = _command(*args)
        assert result.returncode == 1, result.stderr[-3000:]
        assert result.stderr == line + "\n", result.stderr[-3000:]
        assert result.stdout == ""


def test_native_log_lines_show_only_with_verbose():
    quiet = _command("train", "--help")
    for noise in ("cuInit", "oneDNN", "cpu_feature_guard", "cuda", "Logging before flag parsing"):
        assert noise not in quiet.stderr, quiet.stderr[-3000:]
    assert "--[no]verbose: Show the native log lines" in quiet.stdout
    loud = _command("train", "--verbose", "--help")
    assert loud.returncode == 1, loud.stderr[-3000:]
    # TensorFlow's own INFO lines as it starts (oneDNN or CUDA, by the machine).
    assert re.search(r"\] .*(oneDNN|CUDA|cuda|GPU|CPU)", loud.stderr), loud.stderr[-3000:]


SCANN_BUILD = """
import sys
import numpy as np
import pipelines.train  # The job's imports: ScaNN's libraries loaded.
from pipelines import console
from scann import scann_ops_pybind

def build():  # Zero vectors and repeated ones: empty partitions, each logged by ScaNN.
    items = np.repeat(np.eye(4, 16, dtype=np.float32), 4000, axis=0)
    items[:4000] = 0
    scann_ops_pybind.builder(items, 10, "dot_product").tree(
        num_leaves=200, num_leaves_to_search=20, training_sample_size=len(items)
    ).score_ah(2, anisotropic_quantization_threshold=0.2).reorder(100).build()
    sys.stderr.write("built\\n")

def main(argv):
    build()

if sys.argv[1] == "direct":
    build()
    sys.stderr.write("quiet\\n")
    console.quiet_native_logs(2)
    build()
else:
    console.run(main)
"""


def test_scanns_index_build_lines_are_quiet_unless_verbose():
    """ScaNN logs through Abseil's C++ logging, which no environment variable quiets:
    `console.quiet_native_logs` sets its level, as `console.run` does unless --verbose."""

    def child(*args):
        return subprocess.run(
            [sys.executable, "-c", SCANN_BUILD, *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    result = child("direct")
    assert result.returncode == 0, result.stderr[-3000:]
    noisy, quiet = result.stderr.split("quiet\n")
    assert "Could not normalize centroid" in noisy, noisy[-3000:]
    assert quiet == "built\n", quiet[-3000:]
    result = child("job")
    assert (result.returncode, result.stderr) == (0, "built\n"), result.stderr[-3000:]
    result = child("job", "--verbose")
    assert "Could not normalize centroid" in result.stderr, result.stderr[-3000:]
