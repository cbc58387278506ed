r"""The training entry point: data -> model -> fit (early stopping) -> test evaluation -> export.

Usage:
  python -m pipelines.train --preset=synthetic --output_dir=runs/synthetic
  python -m pipelines.train --preset=cpu --dataset=ml-1m --negatives=in_batch \
      --correction=improved --output_dir=runs/ml1m-inbatch-improved

Writes to OUTPUT: config.json, TensorBoard logs (logs/), the best weights
(checkpoints/), a BackupAndRestore backup while running (backup/),
metrics.json (test Recall/NDCG at 1, 10, 20, 100 by exact search and ScaNN,
the config, the git revision), and SavedModels for serving (export/brute_force/<version>,
export/scann/<version>).
A run killed at any point and started again with the same flags continues
from its last backup (every --backup_every steps), estimator state included;
early stopping, the best checkpoint and the run's epoch and time totals carry
over too (OUTPUT/progress.json), and it ends with the uninterrupted run's
weights and metrics. A run killed after training, in the test evaluation or
the export, evaluates its best checkpoint without training again. One process
at a time trains in a directory (OUTPUT/run.lock).
"""

import contextlib
import gc
import json
import os
import shutil
import sys
import time
from typing import Dict, Optional

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

from pipelines import callbacks as callbacks_lib
from pipelines import configs
from pipelines import console
from pipelines import distribute
from pipelines import errors
from pipelines import experiment
from pipelines import memory
from pipelines import per_query
from pipelines import provenance
from pipelines import report
from pipelines import run_files
from pipelines import train_flags as train_flags_lib
from pipelines.data import day_store
from pipelines.data import logs
from pipelines.data import splits as splits_lib
from pipelines.run_files import OutputDirError  # noqa: F401  (re-exported: train.OutputDirError)
from pipelines.run_files import RunFiles
from pipelines.run_files import RunInUse  # noqa: F401
from pipelines.run_files import RunLock
from pipelines.run_files import write_json
from pipelines.train_flags import config_from_flags  # noqa: F401  (re-exported)
from pipelines.train_flags import define_flags  # noqa: F401  (re-exported)

FLAGS = flags.FLAGS


# ---------------------------------------------------------------------------- run


def peak_rss_mb() -> int:
    """This process's peak resident memory so far, in MiB (`memory.peak_rss_mib`)."""
    return round(memory.peak_rss_mib())


class PhaseTimer:
    """Wall seconds per named phase: `with timer("name"):`, or `start` / `stop`.

    With `say` (a print function), a line as each phase starts and one with its time as it
    ends, so that no phase runs silently.
    """

    def __init__(self, say=None):
        self.seconds: Dict[str, float] = {}
        # Each phase's own peak resident memory (MB): Linux's VmHWM, reset as the phase
        # starts (`memory.reset_high_water`); where the kernel refuses the reset, the
        # process's peak when the phase ended.
        self.peak_rss_mb: Dict[str, int] = {}
        # Each phase's resident memory as it started (what its own peak grew from).
        self.start_rss_mb: Dict[str, int] = {}
        self._process_peak = 0.0
        self._open = None
        self._say = say

    def process_peak_mb(self) -> int:
        """The process's peak resident memory (MB) over every phase and before them."""
        return round(max(self._process_peak, memory.peak_rss_mib()))

    def start(self, name: str) -> None:
        self.stop()
        self._process_peak = max(self._process_peak, memory.peak_rss_mib())
        memory.release()  # What the last phase freed goes back: each phase starts from its own.
        memory.reset_high_water()
        self.start_rss_mb.setdefault(name, round(memory.high_water_mib() or memory.peak_rss_mib()))
        self._open = (name, time.time())
        if self._say:
            self._say(f"[{name}] {PHASES.get(name, name)} ...")

    def stop(self, failed: bool = False) -> None:
        if self._open is not None:
            name, since = self._open
            seconds = time.time() - since
            self.seconds[name] = round(self.seconds.get(name, 0.0) + seconds, 1)
            own = memory.peak_rss_mib()
            self._process_peak = max(self._process_peak, own)
            self.peak_rss_mb[name] = max(self.peak_rss_mb.get(name, 0), round(own))
            self._open = None
            if self._say:
                self._say(
                    f"[{name}] {'failed after' if failed else 'done in'} {seconds:.1f} s "
                    f"(peak memory {self.peak_rss_mb[name]:,} MB)."
                )

    @contextlib.contextmanager
    def __call__(self, name: str):
        self.start(name)
        try:
            yield
        except BaseException:
            self.stop(failed=True)
            raise
        self.stop()


def _log_events(config: configs.Config) -> int:
    """The events of a synthetic web log, from its config (0 for other data: an event log's
    size is known once it is read, and --max_vocabulary_mb checks it while it is counted)."""
    if config.data.dataset != "web_synthetic":
        return 0
    return int(config.data.synthetic_users * config.data.synthetic_events_per_user)


def _check_budget(config: configs.Config, phase: str, need: int, what: str) -> None:
    """Raises `errors.MemoryBudgetError` when `need` (MiB, `phase`'s predicted peak, `what`
    it is predicted for) exceeds --memory_budget_mb (0: `memory.available_mib`)."""
    budget = config.training.memory_budget_mb or memory.available_mib()
    if need > budget:
        raise errors.MemoryBudgetError(
            f"This run is predicted to need {need:,} MB in its {phase} phase ({what}), more "
            f"than the {budget:,.0f} MB it may use "
            + (
                f"(--memory_budget_mb={config.training.memory_budget_mb})"
                if config.training.memory_budget_mb
                else "(this machine's memory)"
            )
            + ". Lower --dim, the catalog (--min_item_count) or --test_queries, or raise "
            "--memory_budget_mb."
        )


def check_data_memory(config: configs.Config, output_dir: Optional[str] = None) -> Optional[int]:
    """The data phase's predicted peak (MiB) of a synthetic web log, from its config alone
    (the law's items and the log's events; its day store read back where `output_dir`'s, or
    the cache's, is built already), checked against --memory_budget_mb before the run
    writes anything; None for other data (an event log's size is known once read).

    Raises:
      MemoryBudgetError: the data phase's predicted peak exceeds the budget (named).
    """
    events = _log_events(config)
    if not events:
        return None
    law, users = config.data.synthetic_items, config.data.synthetic_users
    built = logs.out_of_core(config) and day_store.is_built(
        logs.day_store_dir(config, output_dir),
        **logs.store_settings(config),
        source_defaults=configs.stored_data_defaults(),
    )
    # The vocabularies hold at most the law's items and every user.
    need = memory.predict_mib(
        config,
        users,
        min(law, events),
        law_items=law,
        num_events=events,
        store_built=bool(built),
    )["data"]
    _check_budget(
        config,
        "data",
        need,
        f"reading back the day store of its log of {events:,} events"
        if built
        else f"drawing a {law:,}-item law and a log of {events:,} events for {users:,} users",
    )
    return need


def predicted_memory(
    config: configs.Config, data, split: splits_lib.Split, parameter_server: bool = False
) -> Dict[str, int]:
    """`memory.predict_mib` for this run's vocabularies, test index and law (a
    `parameter_server` chief: its tables on the servers), checked against
    --memory_budget_mb (0: `memory.available_mib`) before any table is built.

    Raises:
      MemoryBudgetError: a phase's predicted peak exceeds the budget (named, with the need).
    """
    law = config.data.synthetic_items if config.data.dataset == "web_synthetic" else 0
    index = experiment.test_index(config, split)
    predicted = memory.predict_mib(
        config,
        data.num_users,
        data.num_items,
        index_items=data.num_items if index is None else len(index),
        law_items=law,
        sketch_items=experiment.sketch_items(config, split),
        tables_on_servers=parameter_server,
        num_events=_log_events(config),
    )
    # The data phase has run: the phases to come.
    phase, need = max(
        ((name, value) for name, value in predicted.items() if name not in ("tables", "data")),
        key=lambda item: item[1],
    )
    _check_budget(
        config,
        phase,
        need,
        f"{predicted['tables']:,} MB of tables: {data.num_items:,} items, "
        f"{data.num_users:,} users, --dim={config.model.dim}",
    )
    return predicted


# What each phase of `run` does, for its progress line.
PHASES = {
    "data": "loading the data",
    "split": "splitting it",
    "build": "building the model",
    "train": "training",
    "evaluate": "evaluating on the test split",
    "baselines": "scoring the popularity (and oracle) baselines",
    "export": "exporting SavedModels",
}


def _say(line: str) -> None:
    print(line, flush=True)


# Fewer test queries than this, and a run says its metrics' standard error is large.
FEW_TEST_QUERIES = 1_000


def few_test_queries_warning(config: configs.Config, queries: int) -> Optional[str]:
    """One line when the test set holds fewer than `FEW_TEST_QUERIES` queries: how many, that
    the metrics' standard error is large, and how to test on more; else None."""
    if queries >= FEW_TEST_QUERIES:
        return None
    data = config.data
    sampled = config.training.test_queries
    if sampled and queries >= sampled:  # The sample is what holds it small.
        more = f"raise --test_queries (now {config.training.test_queries}; 0: all)"
    elif data.split == "next_day":
        more = (
            f"test on a longer window (--day_seconds=604800 makes a day a week; now "
            f"{data.day_seconds}) or a busier --test_day (now {data.test_day}), or use "
            "--split=temporal"
        )
    elif data.split == "temporal":
        more = f"raise --test_fraction (now {data.test_fraction}) or use --split=loo"
    else:
        more = "use a log with more users (leave-one-out tests one query per user)"
    return (
        f"warning: the test set holds {queries:,} queries (fewer than {FEW_TEST_QUERIES:,}), "
        f"so its metrics' standard error is large; {more}."
    )


def _clear_exports(files: RunFiles) -> None:
    """Removes a version 1 an earlier process of this run exported: the run's own export is
    version 1 of each index, so one there is an earlier attempt at this very export (same
    run, same weights). Versions that `pipelines.export` added (2, 3, ...) stay; a killed
    export's `.1-partial-*` directory is removed by `export` itself."""
    for kind in report.export_lib.INDEXES:
        shutil.rmtree(os.path.join(files.export(kind), "1"), ignore_errors=True)


def run(
    config: configs.Config,
    output_dir: str,
    verbose: Optional[int] = None,
    strategy: Optional[tf.distribute.Strategy] = None,
) -> Dict:
    """Trains, evaluates on the test split, writes OUTPUT/metrics.json and returns it.

    Under `strategy` (default: the current one) the model is built in its scope
    and the input distributed per replica; `config.training.batch_size` is the global
    batch. With several workers, only the chief writes the run's files and
    evaluates; every worker restores the backup (BackupAndRestore), and each
    non-chief returns (and writes to OUTPUT/workers/worker-N/) a short report
    with a digest of its estimator state. Under a ParameterServerStrategy this process
    is the chief (the coordinator): the workers run the steps asynchronously, each on a
    batch of `batch_size` of its own (in-batch negatives from that batch), the backup is
    taken at each epoch's end, and metrics.json says where the tables' shards and the
    estimator's state live ("placement").

    The chief holds OUTPUT/run.lock while it runs: a second run into the same
    directory raises `RunInUse`. A NaN or infinite training loss raises
    `callbacks.NonFiniteLoss`, and nothing is exported.
    """
    if config.training.framework != "tf":
        raise ValueError(
            f"pipelines.train.run trains TensorFlow's job; this config's framework is "
            f"{config.training.framework!r}: run it with pipelines.keras_train.run."
        )
    strategy = strategy or tf.distribute.get_strategy()
    chief = distribute.is_chief(strategy)
    if not chief:
        return _run(config, output_dir, verbose, strategy, chief)
    check_data_memory(config, output_dir)  # Before anything is written.
    run_files.prepare_output_dir(output_dir)
    with RunLock(output_dir):
        run_files.check_output_dir(config, output_dir)
        return _run(config, output_dir, verbose, strategy, chief)


def _has_backup(output_dir: str) -> bool:
    """Whether `output_dir` holds a whole backup to resume from (`callbacks.has_backup`)."""
    return callbacks_lib.has_backup(RunFiles(output_dir).backup)


def _finished(output_dir: str) -> bool:
    """Whether the run in `output_dir` finished training (progress.json says so) and has its
    best checkpoint."""
    files = RunFiles(output_dir)
    if not (files.has_best() and os.path.exists(files.progress)):
        return False
    with open(files.progress) as f:
        return bool(json.load(f).get("finished"))


def _run(
    config: configs.Config,
    output_dir: str,
    verbose: Optional[int],
    strategy: tf.distribute.Strategy,
    chief: bool,
) -> Dict:
    """`run`, the directory checked and locked (the chief) or not (a worker)."""
    tf.keras.utils.set_random_seed(config.training.seed)
    started = time.time()
    if verbose is None:
        verbose = 1 if sys.stdout.isatty() else 2
    parameter_server = distribute.is_parameter_server(strategy)
    if parameter_server and verbose == 1:
        verbose = 2  # Keras has no progress bar for a coordinator's asynchronous steps.
    phases = PhaseTimer(say=_say if chief and verbose else None)
    with phases("data"):
        data = experiment.load_data(config, output_dir)
    with phases("split"):
        split = experiment.make_split(config, data, output_dir)
    warning = few_test_queries_warning(config, len(split.test.users))
    if chief and warning:
        print(warning, file=sys.stderr, flush=True)
    in_history = splits_lib.report_targets_in_history(split.test, chief)
    predicted = predicted_memory(config, data, split, parameter_server)
    if chief and verbose:
        _say(
            "[memory] predicted peaks: "
            + ", ".join(f"{name} {value:,} MB" for name, value in predicted.items())
            + "."
        )
    # A run that resumes from its backup, or finished training, takes every weight from a
    # checkpoint: its tables start as zeros (no random draws held beside them).
    restoring = _has_backup(output_dir) or _finished(output_dir)
    with phases("build"), strategy.scope():
        model = experiment.build_model(config, data, split, weights_from_checkpoint=restoring)
        model.compile(
            optimizer=experiment.make_optimizer(config.training, model, parameter_server),
            jit_compile=experiment.uses_xla(config, strategy),
        )
    pass_steps = experiment.pass_steps(config, split)
    steps_per_epoch = config.training.steps_per_epoch or pass_steps
    if chief:
        run_files.write_config(config, output_dir)
        experiment.save_vocabularies(config, output_dir)
    files = RunFiles(output_dir)
    checkpoint = tf.keras.callbacks.ModelCheckpoint(
        files.best,
        monitor=callbacks_lib.VALIDATION_METRIC,
        mode="max",
        save_best_only=True,
        save_weights_only=True,
    )
    early_stopping = tf.keras.callbacks.EarlyStopping(
        monitor=callbacks_lib.VALIDATION_METRIC, mode="max", patience=config.training.patience
    )
    # Every worker reads the chief's progress (early stopping must agree); the chief writes it.
    progress = callbacks_lib.TrainingProgress(
        files.progress, early_stopping, checkpoint, started, write=chief
    )
    input_start = callbacks_lib.InputStart()
    if parameter_server:
        # Epoch granularity: a coordinator's steps reach no per-step callback, so the backup
        # is taken at each epoch's end and a non-finite loss is caught on the epoch's mean.
        non_finite, backup = _EpochNonFiniteLoss(), _EpochBackup(files.backup)
    else:
        non_finite = callbacks_lib.StopOnNonFiniteLoss()
        backup = callbacks_lib.EpochEndBackup(files.backup, save_freq=config.training.backup_every)
        backup.after_backup.append(progress.record_seconds)
    callbacks = [
        non_finite,  # First: before a backup of a NaN step.
        callbacks_lib.ValidationMetrics(config, split.validation, split.test if chief else None),
        backup,
        input_start,  # After the backup, which restores the step.
        checkpoint,
        early_stopping,
        tf.keras.callbacks.TensorBoard(files.logs),
        progress,  # After the callbacks whose state it restores and records.
        backup.after_epoch_end(),  # Last: an epoch's end is recorded before its backup.
    ]
    source = model.objective.task.sampler.frequency if model.objective.task else None
    streaming = getattr(source, "streaming", False)
    if (
        chief
        and streaming
        and config.training.drift_every
        and config.training.order == "time"
        and not parameter_server
    ):  # A per-step callback, which a coordinator refuses.
        callbacks.append(callbacks_lib.drift_callback(config, split, source, files))
    trained = progress.finished_run() if files.has_best() else None
    if trained is None:
        phases.start("train")
        history = model.fit(
            experiment.training_input(config, split, input_start.step, strategy),
            epochs=config.training.epochs,
            steps_per_epoch=steps_per_epoch,
            callbacks=callbacks,
            verbose=verbose,
        )
        if parameter_server:  # Where the tables' shards and the estimator's state live.
            placement = distribute.placement(
                experiment.embedding_tables(model), source if streaming else None
            )
        progress.finish(
            **({"placement": placement} if parameter_server else {}),
            steps=int(model.optimizer.iterations.numpy()),  # Before the best weights load.
            # (mypy: `streaming` is False when `source` is None.)
            estimator_steps=int(source.step.numpy()) if streaming else None,  # type: ignore[union-attr]
            # The last epoch's training logs (loss and the task's diagnostics).
            last_epoch={k: float(v[-1]) for k, v in history.history.items() if v},
            estimator_state_digest=distribute.state_digest(source) if streaming else None,
        )
        trained = progress.state
        if chief:  # progress.json now says training is done: the backup has served.
            shutil.rmtree(files.backup, ignore_errors=True)
            if split.stream is not None:  # And so have the training examples on disk.
                day_store.remove_examples(split.stream.directory)
    else:
        print(
            f"{output_dir} finished training earlier ({_count(trained['epochs'], 'epoch')}); "
            "evaluating its best checkpoint.",
            flush=True,
        )
    train_seconds = trained["seconds"]
    steps, estimator_steps = trained["steps"], trained["estimator_steps"]
    replicas = {
        "strategy": type(strategy).__name__,
        "last_epoch": trained["last_epoch"],
        "num_replicas": strategy.num_replicas_in_sync,
        "estimator_state_digest": trained["estimator_state_digest"],
        **distribute.cluster_sizes(strategy),
    }
    if "placement" in trained:
        replicas["placement"] = trained["placement"]
    if not chief:
        worker = {"steps": steps, "estimator_steps": estimator_steps, **replicas}
        worker_dir = files.worker(strategy.cluster_resolver.task_id)
        os.makedirs(worker_dir, exist_ok=True)
        write_json(os.path.join(worker_dir, "report.json"), worker)
        return worker
    resumed_from_step = progress.step
    if files.has_best():
        # Evaluate and export the best weights in a fresh model: the trained model's optimizer
        # slots (Adagrad's accumulators are a copy of every table) are released first, and
        # saving or reading a distributed model's on-read state (its metrics) would need
        # every worker to take part. A parameter-server model is built again under its
        # strategy, its tables on the servers: the chief reads them a chunk of rows at a time,
        # and the servers write their shards into its export.
        for callback in callbacks:
            callback.model = None
        history = None
        del model, callbacks, checkpoint, early_stopping, progress, backup, non_finite, history
        gc.collect()
        with strategy.scope() if parameter_server else contextlib.nullcontext():
            model = experiment.build_model(config, data, split, weights_from_checkpoint=True)
        model.load_weights(files.best).expect_partial()
    phases.stop()
    with phases("evaluate"):
        metrics = dict(report.test_report(model, config, split, data))
        per_query.save(metrics.pop(report.PER_QUERY), files.per_query)
    with phases("baselines"):
        baselines = report.baselines(config, split, data)
    metrics.update(
        {
            "baselines": baselines,
            # Over the whole run, the epochs before a restart included.
            "best_validation_ndcg@10": np.nan if trained["best"] is None else trained["best"],
            "epochs_run": trained["epochs"],
            "best_epoch": trained.get(
                "best_epoch"
            ),  # 0-based; early stopping's patience ran after.
            "steps": steps,
            "resumed_from_step": resumed_from_step,
            "estimator_steps": estimator_steps,  # Updates a streaming estimator received.
            **replicas,
            "steps_per_epoch": steps_per_epoch,
            "train_seconds": round(train_seconds, 1),
            "num_users": data.num_users,
            "num_items": data.num_items,
            "duplicate_events": data.duplicates,  # Exact duplicates dropped while loading.
            "num_test_queries": len(split.test.users),
            "test_targets_in_history": in_history,
            "config": config.as_dict(),
            # The commit, and from a dirty tree the diff's hash (the diff: OUTPUT/code.diff).
            **provenance.code_state(files.code_diff),
        }
    )
    if config.data.dataset in configs.EVENT_LOGS:
        metrics["event_log"] = {
            key: value
            for key, value in logs.event_log_facts(config, output_dir).items()
            if key != "integer_ids"
        }
    with phases("export"):
        _clear_exports(files)
        metrics["exports"] = report.export_run(
            model, config, output_dir, data=data, version=1, split=split
        )
    # This process's wall time per phase (training's over restarts: train_seconds), and its
    # peak resident memory, at the end of each phase and overall.
    metrics["phase_seconds"] = phases.seconds
    metrics["phase_peak_rss_mb"] = phases.peak_rss_mb
    metrics["phase_start_rss_mb"] = phases.start_rss_mb
    metrics["peak_rss_mb"] = phases.process_peak_mb()
    metrics["predicted_peak_rss_mb"] = predicted
    write_json(files.metrics, metrics)
    return metrics


class _EpochNonFiniteLoss(callbacks_lib.StopOnNonFiniteLoss):
    """`StopOnNonFiniteLoss` at each epoch's end, on the epoch's mean loss: a coordinator's
    per-step logs are remote values that Keras does not fetch for per-step callbacks."""

    on_train_batch_end = tf.keras.callbacks.Callback.on_train_batch_end

    def on_epoch_end(self, epoch, logs=None):
        callbacks_lib.StopOnNonFiniteLoss.on_train_batch_end(self, self.params["steps"] - 1, logs)


class _EpochBackup(callbacks_lib.EpochEndBackup):
    """`EpochEndBackup` at epoch ends only: it restores when training begins, and its
    `after_epoch_end()` callback (placed last) takes the backup once the epoch's end is
    recorded. A coordinator's step count inside an epoch names no state (the workers'
    steps are asynchronous), so no backup is taken there."""

    on_train_batch_end = tf.keras.callbacks.Callback.on_train_batch_end

    def __init__(self, backup_dir: str):
        super().__init__(backup_dir, save_freq="epoch")

    def on_epoch_end(self, epoch, logs=None):
        self._due_at_epoch_end = True  # Taken by after_epoch_end()'s callback.


def _count(number: int, noun: str) -> str:
    """'1 epoch', '2 epochs'."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    try:  # The flags' values first: a misspelt value is named before a missing flag.
        config = config_from_flags()
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir is required.")
    if config.training.framework == "keras":  # From --config_file (the CLI routes the flag).
        from pipelines import keras_train  # pylint: disable=import-outside-toplevel

        keras_train.main(argv)
        return
    tf.get_logger().setLevel("ERROR")
    logging.set_verbosity(logging.WARNING)  # TF's checkpoint saver logs at INFO every backup.
    if FLAGS.strategy == "parameter_server" and distribute.parameter_server_task():
        distribute.serve_parameter_server_task()  # A worker or a parameter server.
        return
    try:
        strategy = distribute.make_strategy(
            FLAGS.strategy, FLAGS.partitioner, FLAGS.min_shard_bytes
        )
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    with errors.reported():  # Named errors: the message says it all, no traceback.
        metrics = run(config, FLAGS.output_dir, strategy=strategy)
    if "config" not in metrics:  # A non-chief worker: the chief evaluates and writes.
        print(
            f"\nWorker done: {metrics['steps']} steps on {metrics['num_replicas']} replicas "
            f"({metrics['strategy']}); estimator state {metrics['estimator_state_digest']}."
        )
        return
    index = "exact search" if config.training.index != "scann" else "ScaNN"
    loss = config.loss
    print(
        f"\n{config.model.model} on {config.data.dataset} ({config.data.split}), "
        f"{loss.loss} / {loss.negatives} / {loss.correction}: "
        f"{_count(metrics['epochs_run'], 'epoch')}, "
        f"{_count(metrics['steps'], 'step')}, "
        f"{metrics['train_seconds']:.0f} s; test over {metrics['num_test_queries']} users, "
        f"{index}, history filtered:\n"
    )
    print(report.format_metrics(metrics))
    print(report.describe_indexes(metrics))
    print(f"\nWrote {RunFiles(FLAGS.output_dir).metrics}")


if __name__ == "__main__":
    define_flags()
    flags.adopt_module_key_flags(train_flags_lib)  # --help lists the flags defined there.
    console.run(main)  # app.run, with one-line usage errors and --verbose.
