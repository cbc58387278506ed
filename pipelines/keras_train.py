r"""`tfrs-logq train --framework=keras`: the run on Keras 3, without TensorFlow.

Usage:
  tfrs-logq train --framework=keras --preset=industrial --output_dir=runs/keras
  python -m pipelines.keras_train --preset=industrial --output_dir=runs/keras

The same flags, presets and seeds as the TensorFlow job (`pipelines.train`), and the same
run directory: config.json, the day store (OUTPUT/day_store, built here from the event log or
the synthetic log, drawn first if missing), backups while it trains (OUTPUT/keras_backup: the
same command run again after a kill resumes from the last one), and metrics.json with the
next-day test's Recall and NDCG at 10, 100 and 1000. The job is `pipelines.keras_job`'s: the
pipelines' two-tower on Keras 3 (KERAS_BACKEND, JAX by default; `SparseEmbedding` tables on
JAX), mixed negatives, a count-min sketch and the correction, one pass in time order, then
exact search on the backend's device over the index of the most trained items plus the
day's positives.

It trains what the TensorFlow job trains for an event log read by day (`--split=next_day
--model=two_tower --order=time`, one epoch, mixed negatives with a count-min sketch, Adagrad
on the tables), and SASRec on a sequential dataset (`--model=sasrec`,
`pipelines.keras_sequential`: the TensorFlow job's layout, validated each epoch, early
stopping, the best epoch tested); a config asking for more (another loss or sampler, ScaNN,
a tf.distribute strategy, ...) is refused before anything is built, each such setting named. Run as
`tfrs-logq train --framework=keras` or `python -m pipelines.keras_train`, it imports neither
TensorFlow nor tfrs_logq (a test blocks them); `python -m pipelines.train` given a Keras config
(`--config_file`) hands over to it after importing TensorFlow. `tfrs-logq compare` trains Keras
rows with it. The run keeps its trained towers (OUTPUT/keras_model), its vocabularies and each
test query's metrics (OUTPUT/per_query_test.npz): `tfrs-logq evaluate` and `export` read it
without TensorFlow (`pipelines.keras_evaluate`, `pipelines.keras_export`), and with
TensorFlow as the TensorFlow job's model (`--framework=tf`).
"""

import json
import os
import sys
import time
from typing import Any, Dict, List, Tuple

from absl import app
from absl import flags
from absl import logging

from pipelines import configs
from pipelines import console
from pipelines import errors
from pipelines import keras_job
from pipelines import keras_sequential
from pipelines import memory
from pipelines import per_query
from pipelines import provenance
from pipelines import run_files
from pipelines import train_flags as train_flags_lib
from pipelines.data import day_store
from pipelines.data import logs
from pipelines.data import splits as splits_lib
from pipelines.run_files import RunFiles
from pipelines.run_files import RunLock
from pipelines.run_files import write_json

FLAGS = flags.FLAGS


def refusals(config: configs.Config, strategy: str = "default") -> List[str]:
    """Each setting of `config` (and the tf.distribute `strategy`) the Keras job does not
    train, as "--flag=value (why)"; empty when it trains the config."""
    out = []
    policy = config.training.dtype_policy
    if policy != "float32" and config.model.model != "sasrec":
        out.append(f"--dtype_policy={policy} (the Keras job's two-tower trains in float32)")
    if strategy != "default":
        out.append(
            f"--strategy={strategy} (tf.distribute is TensorFlow's; the Keras job runs on this "
            "machine's devices)"
        )
    if config.training.index != "exact":
        out.append(
            f"--index={config.training.index} (ScaNN is TensorFlow's; the Keras job searches "
            "exactly, on the device)"
        )
    if config.model.model == "sasrec":
        return out + keras_sequential.refusals(config)
    if not logs.out_of_core(config):
        flat = config.flat()
        wanted = dict(split="next_day", model="two_tower", order="time")
        out += [
            f"--{name}={flat[name]!r} (the Keras job: {value!r})"
            for name, value in wanted.items()
            if flat[name] != value
        ]
        if config.data.dataset not in configs.EVENT_LOGS:
            out.append(
                f"--dataset={config.data.dataset} (the Keras two-tower job reads an event log "
                f"by day: {', '.join(configs.EVENT_LOGS)})"
            )
    flat = config.flat()
    out += [
        f"--{name}={flat[name]!r} (the Keras job: {wanted!r})"
        for name, wanted in keras_job.JOB.items()
        if flat[name] != wanted
    ]
    return out


def keras_config(config: configs.Config, index_given: bool) -> Tuple[configs.Config, str]:
    """(`config` as the Keras job trains it, a note or ""): framework "keras", and a
    preset's ScaNN index (industrial's "both") exact search, unless `index_given` (then a
    ScaNN index is refused, `refusals`)."""
    config = config.replace(framework="keras")
    if index_given or config.training.index == "exact":
        return config, ""
    note = (
        f"--framework=keras searches exactly: the preset's --index={config.training.index} is "
        "--index=exact here."
    )
    return config.replace(index="exact"), note


def refusal_message(refused: List[str]) -> str:
    """The error of a config with `refusals`."""
    return (
        "--framework=keras does not train " + "; ".join(refused) + ". Give those flags their "
        "Keras values, or --framework=tf."
    )


def settings_for(config: configs.Config) -> Dict[str, Any]:
    """The Keras job's settings of `config` (`keras_job.config_settings`, the rest at the
    job's defaults; backups every `backup_every` steps)."""
    return {
        **keras_job.defaults(),
        **keras_job.config_settings(config),
        "backup_every": config.training.backup_every,
        "steps_per_execution": config.training.steps_per_execution,
        "devices": 0,  # Every local device (keras.distribution.DataParallel on JAX).
    }


def run(
    config: configs.Config,
    output_dir: str,
    verbose: bool = True,
) -> Dict[str, Any]:
    """Trains and tests `config` on Keras 3 into `output_dir`; writes and returns
    metrics.json's content.

    Raises:
      ValueError: the config asks for what the Keras job does not train (`refusals`).
      pipelines.run_files.OutputDirError: `output_dir` holds a run of another config.
    """
    refused = refusals(config)
    if refused:
        raise ValueError(refusal_message(refused))
    started = time.time()
    run_files.prepare_output_dir(output_dir)
    files = RunFiles(output_dir)
    with RunLock(output_dir):
        run_files.check_output_dir(config, output_dir)
        if os.path.exists(files.metrics):  # Finished: its results stand, nothing retrained.
            with open(files.metrics) as f:
                metrics = json.load(f)
            if verbose:
                print(f"{output_dir} has finished: its results are in {files.metrics}.")
            return metrics
        run_files.write_config(config, output_dir)
        phases: Dict[str, float] = {}
        mark = time.time()
        in_history: Dict[str, float] = {}
        if config.model.model == "sasrec":  # A sequential dataset, read in memory.
            phases["data"] = 0.0  # Read within the job (its seconds are in "train").
            results = keras_sequential.run(
                config,
                output_dir,
                files.keras_backup,
                files.keras_model,
                verbose=verbose,
            )
            in_history = results["test_targets_in_history"]
        else:
            # The store, built with the log's vocabularies, which are saved beside it: the
            # evaluation and the export read them instead of the log.
            logs.save_vocabularies(config, output_dir)
            store_dir = logs.ensure_day_store(config, output_dir)[0]
            phases["data"] = round(time.time() - mark, 1)
            in_history = splits_lib.report_targets_in_history(
                day_store.read_eval(store_dir, "test"), verbose
            )
            results = keras_job.run(
                store_dir,
                settings_for(config),
                verbose=verbose,
                backup_dir=files.keras_backup,
                ks=configs.ks(config.training),
                towers_dir=files.keras_model,
                per_query=True,
            )
        phases["train"], phases["evaluate"] = results["train_seconds"], results["test_seconds"]
        metrics = {
            "config": config.as_dict(),
            "framework": "keras",
            "backend": results["backend"],
            "devices": results["devices"],
            "test": results["test"],
            "test_exact": results["test"],
            "steps": results["steps"],
            "epochs_run": results.get("epochs_run", 1),
            **{key: results[key] for key in ("best_epoch", "validation") if key in results},
            "first_loss": results["first_loss"],
            "last_loss": results["last_loss"],
            "resumed_from_step": results["resumed_from_step"],
            "train_seconds": results["train_seconds"],
            "num_test_queries": results["num_test_queries"],
            **({"test_targets_in_history": in_history} if in_history else {}),
            "num_items": results["num_items"],
            "index_items": results["index_items"],
            "phase_seconds": phases,
            "wall_seconds": round(time.time() - started, 1),
            "peak_rss_mb": round(memory.peak_rss_mib()),
            # The commit, and from a dirty tree the diff's hash (the diff: OUTPUT/code.diff).
            **provenance.code_state(files.code_diff),
        }
        # Each test query's values, for compare's spread over queries and evaluate --against.
        per_query.save(
            {
                **results["per_query"],
                "description": f"{config.data.dataset}, split {config.data.split}",
            },
            files.per_query,
        )
        write_json(files.metrics, metrics)  # Whole or not at all.
        keras_job.remove_backups(files.keras_backup)  # The results are written.
        if os.path.isdir(files.keras_backup) and not os.listdir(files.keras_backup):
            os.rmdir(files.keras_backup)
    return metrics


def missing_towers(output_dir: str) -> str:
    """Why a Keras run has no towers to evaluate or export."""
    files = RunFiles(output_dir)
    where = f"{files.keras_model}/{keras_job.TOWERS_FILE}"
    if os.path.exists(files.metrics):  # Finished, by code that did not keep them.
        return (
            f"{output_dir} holds no trained towers ({where}): it was trained before the Keras "
            "job kept them; train it again to evaluate or export it."
        )
    return f"{output_dir} holds no trained towers ({where}): its training has not finished."


def refuse_sequential(config: configs.Config, output_dir: str) -> None:
    """Raises for a Keras SASRec run: TensorFlow's evaluation and SavedModels read the
    two-tower's.

    Raises:
      pipelines.run_files.RunNotFound: `config` is SASRec's.
    """
    if config.model.model == "sasrec":
        raise run_files.RunNotFound(
            f"{output_dir} is a Keras SASRec run: `tfrs-logq evaluate` and `tfrs-logq "
            "export` read it on Keras (--framework=keras); TensorFlow's evaluation and "
            "SavedModels read the Keras job's two-tower runs only, so far. Its best epoch's "
            f"weights are in {output_dir}/keras_model/best.npz."
        )


def read_config(output_dir: str) -> configs.Config:
    """The config of the Keras run in `output_dir`.

    Raises:
      pipelines.run_files.RunNotFound: no run there, or a TensorFlow run.
    """
    files = RunFiles(output_dir)
    if not os.path.exists(files.config):
        raise run_files.RunNotFound(
            f"{output_dir} holds no training run (no config.json): give the --output_dir of "
            "a `tfrs-logq train` run."
        )
    with open(files.config) as f:
        stored = json.load(f)
    config = configs.validate(configs.Config.from_dict(stored))
    if "dtype_policy" not in configs.Config.stored_fields(stored) and os.path.exists(files.metrics):
        # A run from before the policy was a config field: its metrics.json says which.
        with open(files.metrics) as f:
            policy = (json.load(f).get("keras_options") or {}).get("dtype_policy")
        if policy:
            config = config.replace(dtype_policy=policy)
    if config.training.framework != "keras":
        raise run_files.RunNotFound(
            f"{output_dir} was trained by the TensorFlow job (--framework="
            f"{config.training.framework}): evaluate and export it with --framework=tf."
        )
    return config


def load_sequential(output_dir: str):
    """(config, model with the best epoch's weights, split, interactions) of the Keras SASRec
    run in `output_dir` (`keras_sequential.trained`).

    Raises:
      pipelines.run_files.RunNotFound: no Keras run there, or its weights are not saved (not
        finished, or removed by compare).
    """
    config = read_config(output_dir)
    removed = run_files.removed_weights(output_dir)
    if removed:
        raise run_files.RunNotFound(removed)
    files = RunFiles(output_dir)
    if not os.path.exists(files.metrics):
        raise run_files.RunNotFound(
            f"{output_dir} has not finished training (no metrics.json): `tfrs-logq train` "
            "with its flags resumes it."
        )
    if not os.path.exists(os.path.join(files.keras_model, keras_sequential.BEST)):
        raise run_files.RunNotFound(
            f"{output_dir} has finished, but its best epoch's weights ({files.keras_model}/"
            f"{keras_sequential.BEST}) are missing."
        )
    model, split, data = keras_sequential.trained(config, output_dir, files.keras_model)
    return config, model, split, data


def load_run(output_dir: str):
    """(config, `keras_job.Towers` of the trained weights, data split, `LogSummary`) of the
    Keras run in `output_dir`, without TensorFlow.

    Raises:
      pipelines.run_files.RunNotFound: no run there, a TensorFlow run, or one whose towers
        are not saved (not finished, or removed by compare).
    """
    config = read_config(output_dir)
    towers = keras_job.Towers(saved_towers(config, output_dir))
    data, split = logs.day_store_data(config, output_dir)
    return config, towers, split, data


def saved_towers(config: configs.Config, output_dir: str) -> Dict[str, Any]:
    """The trained towers' weights (`keras_job.read_towers`) of the Keras two-tower run of
    `config` in `output_dir`, for evaluation and export on either framework.

    Raises:
      pipelines.run_files.RunNotFound: a SASRec run, or one whose towers are not saved (not
        finished, or removed by compare).
    """
    refuse_sequential(config, output_dir)
    removed = run_files.removed_weights(output_dir)
    if removed:
        raise run_files.RunNotFound(removed)
    files = RunFiles(output_dir)
    if not files.has_keras_model():
        raise run_files.RunNotFound(missing_towers(output_dir))
    return keras_job.read_towers(files.keras_model)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    try:
        # This job's framework before the flags' warnings: its own settings are used here.
        config = train_flags_lib.config_from_flags(defaults={"framework": "keras"})
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir is required.")
    config, note = keras_config(config, index_given=FLAGS["index"].value is not None)
    if note:
        print(note, file=sys.stderr)
    if config.training.memory_budget_mb:
        print(
            f"--memory_budget_mb={config.training.memory_budget_mb}: the Keras job does not "
            "predict its memory, so it does not check the budget.",
            file=sys.stderr,
        )
    refused = refusals(config, FLAGS.strategy)
    if refused:  # Before anything is built or written.
        raise app.UsageError(refusal_message(refused))
    os.environ.setdefault("KERAS_BACKEND", "jax")
    if os.environ["KERAS_BACKEND"] != "jax":
        print(
            f"KERAS_BACKEND={os.environ['KERAS_BACKEND']}: only JAX has row-sparse table updates "
            "(keras_logq.SparseEmbedding); here the tables are dense keras.layers.Embedding, "
            "trained with the projections by Adagrad at --table_learning_rate (a step "
            "updates every row).",
            file=sys.stderr,
        )
    logging.set_verbosity(logging.WARNING)  # JAX's INFO lines (its platforms) are not news.
    with errors.reported():
        try:
            metrics = run(config, FLAGS.output_dir)
        except keras_job.NonFiniteLoss as error:
            sys.exit(f"error: {error}")
    test = metrics["test"]
    print(
        f"\n{config.model.model} on {config.data.dataset} ({config.data.split}), Keras 3 "
        f"({metrics['backend']}), "
        f"{config.loss.negatives} / {config.loss.correction}: {metrics['steps']} steps, "
        f"{metrics['train_seconds']:.0f} s; test over {metrics['num_test_queries']} users and "
        f"{metrics['index_items']:,} items, exact search on the device, history filtered:\n"
    )
    ks = configs.ks(config.training)
    print("| metric | " + " | ".join(f"@{k}" for k in ks) + " |\n|---|" + "---|" * len(ks))
    for name in ("recall", "ndcg"):
        print(f"| {name} | " + " | ".join(f"{test[f'{name}@{k}']:.4f}" for k in ks) + " |")
    print(f"\nWrote {RunFiles(FLAGS.output_dir).metrics}")


if __name__ == "__main__":
    train_flags_lib.define_flags()
    flags.adopt_module_key_flags(train_flags_lib)
    console.run(main)
