"""`tfrs-logq train --framework=keras` (pipelines.keras_train): the run on Keras 3 writes the
TensorFlow job's run directory without importing TensorFlow, and refuses what it does not
train before anything is built."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from pipelines import configs
from pipelines import keras_train
from pipelines import run_files

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The CLI with TensorFlow, tf-keras, TFRS and tfrs_logq unimportable: the Keras job must not
# need them.
BLOCKED_CLI = """
import sys
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("tensorflow", "tf_keras", "tensorflow_recommenders",
                                  "tfrs_logq"):
            raise ImportError(f"{name} is blocked: the Keras job must not import it")
sys.meta_path.insert(0, Blocker())
from pipelines import cli
sys.exit(cli.main(sys.argv[1:]))
"""


def _cli(*args, cache):
    env = dict(os.environ, KERAS_BACKEND="jax", TFRS_LOGQ_CACHE=str(cache))
    env.pop("TF_USE_LEGACY_KERAS", None)
    return subprocess.run(
        [sys.executable, "-c", BLOCKED_CLI, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_trains_and_tests_the_preset_into_a_run_directory_without_tensorflow(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--framework=keras", "--preset=industrial_smoke", f"--output_dir={out}"]
    result = _cli(*args, "--backup_every=40", cache=tmp_path / "cache")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "the preset's --index=both is --index=exact here" in result.stderr
    with open(out / "metrics.json") as f:
        metrics = json.load(f)
    with open(out / "config.json") as f:
        config = configs.Config.from_dict(json.load(f))
    assert (config.training.framework, config.training.index) == ("keras", "exact")
    assert config.training.backup_every == 40
    assert (metrics["framework"], metrics["backend"]) == ("keras", "jax")
    assert metrics["steps"] == 14179 // 128  # The store's examples, in batches of 128.
    assert metrics["num_test_queries"] == 500
    for k in (10, 100, 1000):  # Better than chance over the index, and a fraction.
        assert 0 < metrics["test"][f"recall@{k}"] <= 1
    assert metrics["test"]["recall@10"] > 10 / metrics["index_items"]
    assert metrics["test_exact"] == metrics["test"]
    assert sorted(os.listdir(out)) == ["config.json", "day_store", "metrics.json"]  # No backup.
    assert "| recall |" in result.stdout and f"Wrote {out}/metrics.json" in result.stdout


def test_tensorflow_only_settings_are_refused_by_name(tmp_path):
    config = configs.PRESETS["industrial_smoke"].replace(index="scann", num_hard_negatives=4)
    refused = keras_train.refusals(config, "parameter_server")
    assert refused[0].startswith("--strategy=parameter_server (tf.distribute is TensorFlow's")
    assert refused[1].startswith("--index=scann (ScaNN is TensorFlow's")
    assert "--num_hard_negatives=4 (the Keras job: 0)" in refused
    sequential = keras_train.refusals(configs.PRESETS["synthetic"])
    assert "--model='sasrec' (the Keras job: 'two_tower')" in sequential
    assert any(
        line.startswith("--dataset=synthetic (the Keras job reads an event log")
        for line in sequential
    )
    assert keras_train.refusals(configs.PRESETS["industrial_smoke"].replace(index="exact")) == []


def test_the_command_refuses_before_anything_is_written(tmp_path):
    out = tmp_path / "run"
    result = _cli(
        "train",
        "--framework=keras",
        "--preset=industrial_smoke",
        "--index=scann",
        f"--output_dir={out}",
        cache=tmp_path / "cache",
    )
    assert result.returncode != 0
    assert "--framework=keras does not train --index=scann (ScaNN is TensorFlow's" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    assert not out.exists()


def test_a_run_of_the_other_framework_is_not_resumed(tmp_path):
    out = str(tmp_path / "run")
    tf_config = configs.PRESETS["industrial_smoke"].replace(index="exact")
    run_files.prepare_output_dir(out)
    run_files.write_config(tf_config, out)
    with open(run_files.RunFiles(out).progress, "w") as f:
        json.dump({"epochs_done": 1}, f)  # It has trained.
    with pytest.raises(run_files.OutputDirError, match=r"another config \(differs in framework\)"):
        run_files.check_output_dir(tf_config.replace(framework="keras"), out)


def test_evaluate_and_export_name_a_keras_run_instead_of_failing_on_it(tmp_path):
    from pipelines import experiment  # pylint: disable=import-outside-toplevel  (TensorFlow)

    out = str(tmp_path / "run")
    run_files.prepare_output_dir(out)
    run_files.write_config(configs.PRESETS["industrial_smoke"].replace(framework="keras"), out)
    with pytest.raises(run_files.RunNotFound, match="trained by the Keras job"):
        experiment.load_run(out)


def test_a_run_directory_from_before_the_framework_field_is_tensorflows(tmp_path):
    out = str(tmp_path / "run")
    run_files.prepare_output_dir(out)
    stored = configs.PRESETS["industrial_smoke"].as_dict()
    del stored["training"]["framework"]  # A config.json written before the field.
    with open(run_files.RunFiles(out).config, "w") as f:
        json.dump(stored, f)
    with open(run_files.RunFiles(out).progress, "w") as f:
        json.dump({"epochs_done": 1}, f)
    keras = configs.PRESETS["industrial_smoke"].replace(framework="keras")
    with pytest.raises(run_files.OutputDirError, match=r"differs in framework"):
        run_files.check_output_dir(keras, out)
    run_files.check_output_dir(configs.PRESETS["industrial_smoke"], out)  # TensorFlow's: same.


def test_the_keras_config_of_a_preset_and_what_it_honours():
    preset = configs.PRESETS["industrial_smoke"]
    config, note = keras_train.keras_config(preset, index_given=False)
    assert (config.training.framework, config.training.index) == ("keras", "exact")
    assert note == (
        "--framework=keras searches exactly: the preset's --index=both is --index=exact here."
    )
    given, note = keras_train.keras_config(preset.replace(index="scann"), index_given=True)
    assert (given.training.index, note) == ("scann", "")  # Then refused by name:
    assert keras_train.refusals(given)[0].startswith("--index=scann (ScaNN is TensorFlow's")
    settings = keras_train.settings_for(config.replace(adam_epsilon=1e-8, backup_every=7))
    assert (settings["adam_epsilon"], settings["backup_every"]) == (1e-8, 7)
    assert "--partial_batches=True (the Keras job: False)" in keras_train.refusals(
        config.replace(partial_batches=True)
    )


def test_tensorflows_run_refuses_a_keras_config(tmp_path):
    from pipelines import train  # pylint: disable=import-outside-toplevel  (TensorFlow)

    keras = configs.PRESETS["industrial_smoke"].replace(framework="keras")
    with pytest.raises(ValueError, match="run it with pipelines.keras_train.run"):
        train.run(keras, str(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_compare_holds_a_keras_row_as_its_run_will(tmp_path):
    from pipelines import compare  # pylint: disable=import-outside-toplevel

    rows = [
        compare.Row("tf", (("framework", "tf"),)),
        compare.Row("keras", (("framework", "keras"),)),
    ]
    built = compare.row_configs(rows, ["--preset=industrial_smoke"], vary_data=False)
    assert (built["tf"].training.framework, built["tf"].training.index) == ("tf", "both")
    assert (built["keras"].training.framework, built["keras"].training.index) == ("keras", "exact")
