"""`tfrs-logq train --framework=keras` (pipelines.keras_train): the run on Keras 3 writes the
TensorFlow job's run directory without importing TensorFlow, and refuses what it does not
train before anything is built."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from absl import flags as absl_flags

from pipelines import configs
from pipelines import keras_train
from pipelines import run_files
from pipelines import train_flags

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


def _cli(*args, cache, devices=1):
    env = dict(os.environ, KERAS_BACKEND="jax", TFRS_LOGQ_CACHE=str(cache))
    env.pop("TF_USE_LEGACY_KERAS", None)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"  # JAX's CPUs.
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
    out, cache = tmp_path / "run", tmp_path / "cache"
    args = ["train", "--framework=keras", "--preset=industrial_smoke", f"--output_dir={out}"]
    result = _cli(*args, "--backup_every=40", cache=cache)
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
    # No backup left; the towers, each query's metrics and the vocabularies kept.
    assert sorted(set(os.listdir(out)) - {"code.diff"}) == [
        "config.json",
        "day_store",
        "keras_model",
        "metrics.json",
        "per_query_test.npz",
        "vocabulary",
    ]
    assert "| recall |" in result.stdout and f"Wrote {out}/metrics.json" in result.stdout
    per_query = np.load(out / "per_query_test.npz")
    assert np.mean(per_query["value:recall@10"]) == pytest.approx(metrics["test"]["recall@10"])

    # Evaluated again from its towers, without TensorFlow: the same metrics and queries.
    again = _cli("evaluate", str(out), f"--per_query_out={tmp_path}/q.npz", cache=cache)
    assert again.returncode == 0, again.stderr[-3000:]
    paired = _cli("evaluate", str(out), f"--against={tmp_path}/q.npz", cache=cache)
    assert paired.returncode == 0, paired.stderr[-3000:]
    assert "| recall@10 |" in paired.stdout and "| +0.0000 | 0.0000 |" in paired.stdout

    # Exported without TensorFlow (no SavedModel, said), served in a fresh process.
    exported = _cli("export", str(out), "--k=20", cache=cache)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert f"Wrote {out}/export/keras/1" in exported.stdout
    assert "TensorFlow is not installed: no SavedModel" in exported.stderr
    keras_answer = _serve(BLOCKED_SERVE, out / "export" / "keras" / "1")
    assert keras_answer["unknown_user"] == [False, True]
    assert keras_answer["unknown_history_ids"] == [0, 1]

    # With TensorFlow, the same towers as the TensorFlow job's SavedModel: the same answer.
    saved = subprocess.run(
        [sys.executable, "-m", "pipelines.export", str(out), "--index=exact", "--k=20"],
        cwd=ROOT,
        env=dict(os.environ, TFRS_LOGQ_CACHE=str(cache)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert saved.returncode == 0, saved.stderr[-3000:]
    tf_answer = _serve_saved_model(out / "export" / "brute_force" / "1", keras_answer)
    assert tf_answer["ids"] == keras_answer["ids"]
    np.testing.assert_allclose(tf_answer["scores"], keras_answer["scores"], rtol=1e-5, atol=1e-6)
    assert tf_answer["unknown_history_ids"] == keras_answer["unknown_history_ids"]

    # On two devices (keras.distribution.DataParallel, the batch split, the sparse tables'
    # rows updated once each): what one device trains, to float32's rounding.
    out2 = tmp_path / "two_devices"
    args[-1] = f"--output_dir={out2}"
    two = _cli(*args, cache=cache, devices=2)
    assert two.returncode == 0, two.stderr[-3000:]
    with open(out2 / "metrics.json") as f:
        parallel = json.load(f)
    assert (metrics["devices"], parallel["devices"]) == (1, 2)
    for name in ("first_loss", "last_loss"):
        assert parallel[name] == pytest.approx(metrics[name], rel=1e-5)
    for name, value in metrics["test"].items():
        assert parallel["test"][name] == pytest.approx(value, abs=2e-3), name


# A Keras export's answer to two requests (a known user with three items, an unknown user
# with an unknown item), in a process that cannot import TensorFlow.
BLOCKED_SERVE = (
    BLOCKED_CLI.split("from pipelines import cli")[0]
    + """
import json
import numpy as np
import keras_logq
retriever = keras_logq.serving.load(sys.argv[1])
vocabularies = np.load(sys.argv[1] + "/vocabularies.npz")
users = [str(vocabularies["user"][0]), "nobody"]
items = [str(item) for item in vocabularies["item"][:3]]
histories = [items, [items[0], "no such item"]]
answer = retriever(users, histories)
print(json.dumps(dict(users=users, histories=histories, ids=answer["ids"].tolist(),
    scores=answer["scores"].tolist(), unknown_user=answer["unknown_user"].tolist(),
    unknown_history_ids=answer["unknown_history_ids"].tolist())))
"""
)


# A Keras SASRec run's export served (raw integer ids) against its evaluation's ranking of
# the first 64 test queries (their histories reach past --max_length), TensorFlow blocked.
BLOCKED_SEQUENTIAL_SERVE = (
    BLOCKED_CLI.split("from pipelines import cli")[0]
    + """
import json
import numpy as np
import keras_logq
from pipelines import keras_sequential, keras_train
config, model, split, data = keras_train.load_sequential(sys.argv[1])
test = split.test
rows = slice(0, 64)
queries = test._replace(users=test.users[rows], histories=test.histories[rows])
expected = keras_sequential.ranked(model, queries, split.num_items, config.model.max_length, 100)
retriever = keras_logq.serving.load(sys.argv[1] + "/export/keras/1")
answer = retriever(
    data.user_ids[queries.users].astype(np.int64),
    [data.item_ids[h].astype(np.int64) for h in queries.histories],
)
want = data.item_ids[np.asarray(expected)].astype(np.int64)
print(json.dumps(dict(rows=len(want), same=int((answer["ids"] == want).all(axis=1).sum()),
    unknown=int(answer["unknown_history_ids"].sum()))))
"""
)


def _serve(script: str, path) -> dict:
    """The JSON line `script` (a TensorFlow-blocked serving check) prints for `path`."""
    served = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        cwd=ROOT,
        env=dict(os.environ, KERAS_BACKEND="jax"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert served.returncode == 0, served.stderr[-3000:]
    return json.loads(served.stdout.splitlines()[-1])


def _serve_saved_model(path, request):
    """The SavedModel's serving_default answer to `request`'s users and histories."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    length = max(map(len, request["histories"]))
    histories = [[""] * (length - len(h)) + h for h in request["histories"]]
    answer = tf.saved_model.load(str(path)).signatures["serving_default"](
        user=tf.constant(request["users"]), history=tf.constant(histories)
    )
    return dict(
        ids=answer["ids"].numpy().astype(str).tolist(),
        scores=answer["scores"].numpy().tolist(),
        unknown_history_ids=answer["unknown_history_ids"].numpy().tolist(),
    )


def test_tensorflow_only_settings_are_refused_by_name(tmp_path):
    config = configs.PRESETS["industrial_smoke"].replace(index="scann", num_hard_negatives=4)
    refused = keras_train.refusals(config, "parameter_server")
    assert refused[0].startswith("--strategy=parameter_server (tf.distribute is TensorFlow's")
    assert refused[1].startswith("--index=scann (ScaNN is TensorFlow's")
    assert "--num_hard_negatives=4 (the Keras job: 0)" in refused
    smoke = configs.PRESETS["industrial_smoke"].replace(
        index="exact", dtype_policy="mixed_bfloat16"
    )
    assert keras_train.refusals(smoke) == [
        "--dtype_policy=mixed_bfloat16 (the Keras job's two-tower trains in float32)"
    ]
    # SASRec trains (pipelines.keras_sequential); what it does not is named.
    assert keras_train.refusals(configs.PRESETS["synthetic"].replace(index="exact")) == []
    sequential = keras_train.refusals(
        configs.PRESETS["synthetic"].replace(index="exact", architecture="gsasrec", loss="gbce")
    )
    assert "--architecture='gsasrec' (the Keras job: 'sasrec')" in sequential
    assert "--loss='gbce' (the Keras job: 'sampled_softmax')" in sequential
    tfds = keras_train.refusals(configs.PRESETS["cpu"].replace(dataset="ml-1m-tfds"))
    assert any(line.startswith("--dataset=ml-1m-tfds (the Keras SASRec job reads") for line in tfds)
    two_tower = keras_train.refusals(configs.PRESETS["synthetic_two_tower"].replace(index="exact"))
    assert "--split='loo' (the Keras job: 'next_day')" in two_tower
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


def test_an_unfinished_keras_run_is_named_and_each_job_finds_its_module(tmp_path):
    from pipelines import cli  # pylint: disable=import-outside-toplevel
    from pipelines import experiment  # pylint: disable=import-outside-toplevel  (TensorFlow)

    out = str(tmp_path / "run")
    run_files.prepare_output_dir(out)
    run_files.write_config(configs.PRESETS["industrial_smoke"].replace(framework="keras"), out)
    for load in (experiment.load_run, keras_train.load_run):
        with pytest.raises(run_files.RunNotFound, match="holds no trained towers .*not finished"):
            load(out)
    assert cli.module_of("export", [out]) == "pipelines.keras_export"
    assert cli.module_of("evaluate", ["--split=test", out]) == "pipelines.keras_evaluate"
    assert cli.module_of("evaluate", [out, "--framework=tf"]) == "pipelines.evaluate"
    assert cli.module_of("train", ["--framework=keras"]) == "pipelines.keras_train"
    # A flag's value in the next argument is not the run: the run's framework decides.
    assert cli.module_of("evaluate", ["--against", out, str(tmp_path)]) == "pipelines.evaluate"
    tf_run = str(tmp_path / "tf")
    run_files.prepare_output_dir(tf_run)
    run_files.write_config(configs.PRESETS["industrial_smoke"], tf_run)
    assert cli.module_of("evaluate", [tf_run, "--framework=keras"]) == "pipelines.evaluate"
    assert "trained by the TensorFlow job" in run_files.keras_framework_refusal(tf_run, "evaluate")
    assert "python -m pipelines.keras_export" in run_files.keras_framework_refusal(out, "export")
    with pytest.raises(run_files.RunNotFound, match="trained by the TensorFlow job"):
        keras_train.load_run(tf_run)


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


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed")
def test_sasrec_trains_on_keras_early_stops_and_resumes_after_a_kill(tmp_path):
    """The README's main job's model (--preset=synthetic: SASRec, mixed negatives, improved)
    on Keras 3 without TensorFlow: validation each epoch, the best epoch tested; killed after
    its first epoch and run again, it trains what an uninterrupted run trains."""
    cache = tmp_path / "cache"
    flags = [
        "--preset=synthetic",
        "--epochs=3",
        "--steps_per_epoch=15",
        "--patience=5",
        "--steps_per_execution=5",  # Three calls of the compiled step an epoch.
    ]
    whole = tmp_path / "whole"
    result = _cli("train", "--framework=keras", *flags, f"--output_dir={whole}", cache=cache)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with open(whole / "metrics.json") as f:
        metrics = json.load(f)
    assert (metrics["epochs_run"], metrics["steps"]) == (3, 45)
    assert metrics["config"]["training"]["steps_per_execution"] == 5
    assert metrics["config"]["training"]["dtype_policy"] == "float32"
    assert [row["epoch"] for row in metrics["validation"]] == [1, 2, 3]
    best = max(metrics["validation"], key=lambda row: row["ndcg@10"])
    assert metrics["best_epoch"] == best["epoch"] - 1  # 0-based, as TensorFlow's job says.
    assert metrics["num_test_queries"] == 3000 and metrics["index_items"] == 3000
    assert set(metrics["test_targets_in_history"]) == {"in_history", "targets", "recall_ceiling"}
    assert 0 < metrics["test"]["recall@100"] <= 1
    assert "sasrec on synthetic (loo), Keras 3 (jax)" in result.stdout
    assert sorted(os.listdir(whole / "keras_model")) == ["best.npz", "weights.json"]
    assert not os.path.exists(whole / "keras_backup")  # Removed with the results written.
    # Evaluated again from its best epoch's weights, TensorFlow blocked: the same test.
    again = _cli("evaluate", str(whole), cache=cache)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    with open(whole / "metrics.json") as f:
        evaluated = json.load(f)
    for name, value in metrics["test"].items():
        assert evaluated["test"][name] == pytest.approx(value, abs=1e-6), name
    paired = _cli("evaluate", str(whole), f"--against={whole / 'per_query_test.npz'}", cache=cache)
    assert paired.returncode == 0 and "+0.0000" in paired.stdout, paired.stderr[-3000:]
    validation = _cli("evaluate", str(whole), "--split=validation", cache=cache)
    assert validation.returncode == 0 and "validation split" in validation.stdout
    # Exported without TensorFlow and served in a fresh process: the evaluation's ranking.
    exported = _cli("export", str(whole), cache=cache)
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert f"Wrote {whole}/export/keras/1" in exported.stdout
    assert "TensorFlow is not installed: no SavedModel" in exported.stderr  # It is blocked.
    assert _serve(BLOCKED_SEQUENTIAL_SERVE, whole) == {"rows": 64, "same": 64, "unknown": 0}

    killed = tmp_path / "killed"
    env = dict(os.environ, KERAS_BACKEND="jax", TFRS_LOGQ_CACHE=str(cache))
    env.pop("TF_USE_LEGACY_KERAS", None)
    args = [sys.executable, "-c", BLOCKED_CLI, "train", "--framework=keras", *flags]
    with subprocess.Popen(
        [*args, f"--output_dir={killed}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("epoch 1 of 3"):
                process.kill()
                break
    # As a run killed under the code before these fields were config fields: its config.json
    # and its backup's state lack them, and it resumes.
    added = ("steps_per_execution", "dtype_policy", "attention_dropout")
    for path in [killed / "config.json", *killed.glob("keras_backup/*/state.json")]:
        with open(path) as f:
            stored = json.load(f)
        holder = stored if path.name == "config.json" else stored["settings"]["config"]
        for group in holder.values():
            for name in added:
                group.pop(name, None)
        with open(path, "w") as f:
            json.dump(stored, f)
    again = _cli("train", "--framework=keras", *flags, f"--output_dir={killed}", cache=cache)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "resumed from" in again.stdout and "1 of 3 epochs trained" in again.stdout
    with open(killed / "metrics.json") as f:
        resumed = json.load(f)
    assert (metrics["resumed_from_step"], resumed["resumed_from_step"]) == (0, 15)
    for got, want in zip(resumed["validation"], metrics["validation"], strict=True):
        assert got == pytest.approx(want, rel=1e-5)
    for name, value in metrics["test"].items():
        assert resumed["test"][name] == pytest.approx(value, abs=1e-6), name


@pytest.mark.parametrize("rate", [1.0, -0.5, 2.0])
def test_a_bad_attention_dropout_is_refused_by_name(rate):
    with pytest.raises(ValueError, match=rf"--attention_dropout.*{rate}"):
        configs.validate(configs.PRESETS["synthetic"].replace(attention_dropout=rate))
    configs.validate(configs.PRESETS["synthetic"].replace(attention_dropout=0.0))


def test_a_resumed_run_may_change_its_steps_a_call_and_old_files_lack_new_fields():
    """configs.changed_fields, which check_output_dir and the Keras SASRec job's backups use:
    fields added since the stored config count at this run's values; --steps_per_execution
    (how a run runs) may change; anything else is named."""
    config = configs.PRESETS["synthetic"].replace(framework="keras", steps_per_execution=5)
    stored = config.replace(steps_per_execution=1).as_dict()
    for group in stored.values():
        for name in ("dtype_policy", "attention_dropout"):
            group.pop(name, None)
    assert configs.changed_fields(stored, config) == []
    assert configs.changed_fields(stored, config.replace(dim=32)) == ["dim"]
    assert configs.changed_fields(stored, config.replace(framework="tf")) == ["framework"]


def test_an_older_bfloat16_run_is_read_in_its_policy(tmp_path):
    """A run from before --dtype_policy was a config field: metrics.json's keras_options."""
    stored = configs.PRESETS["synthetic"].replace(framework="keras").as_dict()
    stored["training"].pop("dtype_policy")
    (tmp_path / "config.json").write_text(json.dumps(stored))
    (tmp_path / "metrics.json").write_text(
        json.dumps({"keras_options": {"steps_per_execution": 1, "dtype_policy": "mixed_bfloat16"}})
    )
    assert keras_train.read_config(str(tmp_path)).training.dtype_policy == "mixed_bfloat16"


def test_the_keras_jobs_own_settings_are_not_said_unused(capsys):
    values = absl_flags.FlagValues()
    train_flags.define_flags(values)
    values(["keras_train", "--preset=synthetic", "--steps_per_execution=5"])
    config = train_flags.config_from_flags(values, defaults={"framework": "keras"})
    assert config.training.framework == "keras"
    assert "--steps_per_execution applies" not in capsys.readouterr().err
