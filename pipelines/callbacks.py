"""Keras callbacks of a training run: where the input starts, progress over restarts, validation.

Their order in `fit`'s list matters (callbacks run in list order):
`StopOnNonFiniteLoss` first; `EpochEndBackup`, then `InputStart`; `ValidationMetrics`
before the callbacks that read its value (ModelCheckpoint, EarlyStopping);
`TrainingProgress` after them; `EpochEndBackup.after_epoch_end()` last.
"""

import json
import os
import shutil
import time
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np
import tensorflow as tf

from pipelines import configs
from pipelines import experiment
from pipelines.data import builders
from pipelines.data import splits as splits_lib
from pipelines.run_files import RunFiles
from pipelines.run_files import write_json

VALIDATION_METRIC = "val_ndcg@10"
# The diagnostic test curve's epoch logs (`ValidationMetrics`), and the most test queries it
# scores: a fixed sample (`splits.subsample`, the same in every run), so that the curve stays
# cheap on splits with many queries (temporal `successive`: about 100k, 24 s an evaluation
# at `official_cpu`); leave-one-out (6,040) keeps every query.
TEST_CURVE_METRICS = ("test_recall@20", "test_ndcg@20")
TEST_CURVE_QUERIES = 8192


class InputStart(tf.keras.callbacks.Callback):
    """The step the training input starts from: the optimizer's step counter when
    training begins (0, or the step BackupAndRestore restored), for `resumable`.

    tf.data reads the skip count on the first batch's request, inside the first
    step; the optimizer's counter is incremented in that step by an op that does
    not wait for the batch, so skipping by the counter itself would start a fresh
    run at batch 0 or batch 1 by chance (and a resumed one a batch late by chance):
    same-seed runs would train on different batches. This copy is set before the
    first step and not touched again. Place it after BackupAndRestore (callbacks
    run in list order).
    """

    def __init__(self):
        super().__init__()
        with tf.device("/cpu:0"):  # Read by the tf.data function, on the host.
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="input_start")

    def on_train_begin(self, logs=None):
        self.step.assign(int(self.model.optimizer.iterations.numpy()))


class TrainingProgress(tf.keras.callbacks.Callback):
    """Carries early stopping, the best checkpoint and the run's totals across restarts.

    BackupAndRestore brings back the weights, the optimizer and the epoch, but EarlyStopping
    and ModelCheckpoint(save_best_only) start afresh: a resumed run would overwrite the best
    checkpoint with its first epoch and wait `patience` epochs more. After each epoch this
    writes OUTPUT/progress.json (the chief only): the validation value of every epoch so
    far, the best one and its epoch, and the seconds spent, summed over the processes up to
    each one's last backup (`record_seconds`) or finished epoch. When training starts from a
    backup taken after k whole epochs, it keeps the first k values (an epoch the file counts
    but the backup does not is trained, validated and recorded again) and gives
    EarlyStopping and ModelCheckpoint the state they had after epoch k: the best of those
    values, its epoch, and the epochs waited since. Place it after them and after
    BackupAndRestore (callbacks run in list order); `EpochEndBackup` makes sure that a
    backup taken at an epoch's end comes after this file's record of it.
    `finish` marks the training done, so that a rerun goes straight to evaluation.
    """

    def __init__(
        self,
        path: str,
        early_stopping: tf.keras.callbacks.EarlyStopping,
        checkpoint: tf.keras.callbacks.ModelCheckpoint,
        started: float,
        write: bool = True,
    ):
        super().__init__()
        self.path, self.write, self.started = path, write, started
        self.early_stopping, self.checkpoint = early_stopping, checkpoint
        self.step = 0  # The step training (re)started from.
        self.state: Dict[str, Any] = {
            "epochs": 0,
            "values": [],
            "best": None,
            "best_epoch": None,
            "seconds": 0.0,
        }
        self.prior_seconds = 0.0

    def on_train_begin(self, logs=None):
        self.step = int(self.model.optimizer.iterations.numpy())
        state = self._read()
        if self.step and self.write:  # Says so, whatever progress.json holds.
            print(self.resumed_line(), flush=True)
        if self.step == 0 or state is None:
            return  # A fresh start (a progress file without a backup is stale).
        steps_per_epoch = (self.params or {}).get("steps")
        values = state.get("values", [None] * state["epochs"])  # Files of older versions.
        if steps_per_epoch:
            values = values[: self.step // steps_per_epoch]
        self.state = {**state, **_best_of(values, self.checkpoint.monitor_op)}
        self.prior_seconds = self.state["seconds"]
        self.checkpoint.best = self.early_stopping.best = (
            self.checkpoint.best if self.state["best"] is None else self.state["best"]
        )
        if self.state["best"] is not None:
            self.early_stopping.best_epoch = self.state["best_epoch"]
            # As EarlyStopping counts: epochs finished since the best one.
            self.early_stopping.wait = self.state["epochs"] - 1 - self.state["best_epoch"]

    def resumed_line(self) -> str:
        """What a run resumed from its backup prints as training starts."""
        steps_per_epoch = (self.params or {}).get("steps")
        where = (
            f" (epoch {self.step // steps_per_epoch + 1}, at its step "
            f"{self.step % steps_per_epoch + 1} of {steps_per_epoch:,})"
            if steps_per_epoch
            else ""
        )
        return (
            f"[train] resumed from step {self.step:,}{where}: the last backup of a run "
            "stopped before it finished; the steps before it are not trained again."
        )

    def seconds(self) -> float:
        """Seconds of training so far, this process's and the earlier ones'."""
        return self.prior_seconds + time.time() - self.started

    def record_seconds(self) -> None:
        """Writes the seconds trained so far (at a backup: `EpochEndBackup.after_backup`), so
        that a run resumed from that backup adds to them, inside an epoch too."""
        self.state["seconds"] = round(self.seconds(), 1)
        self._write()

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.checkpoint.monitor)
        values = self.state["values"][:epoch] + [None if value is None else float(value)]
        self.state.update(
            _best_of(values, self.checkpoint.monitor_op), seconds=round(self.seconds(), 1)
        )
        self._write()

    def finish(self, **record) -> None:
        """Marks training finished, with `record` (steps, ...) for a rerun to report.

        A run killed after this (in the test evaluation or the export) and started
        again evaluates its best checkpoint without training again.
        """
        self.state.update(finished=True, seconds=round(self.seconds(), 1), **record)
        self._write()

    def finished_run(self) -> Optional[Dict]:
        """What `finish` recorded, when an earlier process finished training; else None."""
        state = self._read()
        if state is None or not state.get("finished"):
            return None
        self.state, self.step = state, state["steps"]
        return state

    def _read(self) -> Optional[Dict]:
        if not os.path.exists(self.path):
            return None
        with open(self.path) as f:
            return json.load(f)

    def _write(self) -> None:
        if self.write:
            write_json(self.path, self.state, indent=None)  # A kill never leaves half a file.


def _best_of(values, better) -> Dict:
    """epochs, values, best and best_epoch of the per-epoch validation `values` (None: not
    validated), the best as ModelCheckpoint and EarlyStopping keep it (the first of equals)."""
    best = best_epoch = None
    for epoch, value in enumerate(values):
        if value is not None and (best is None or better(value, best)):
            best, best_epoch = value, epoch
    return {"epochs": len(values), "values": list(values), "best": best, "best_epoch": best_epoch}


class EpochEndBackup(tf.keras.callbacks.BackupAndRestore):
    """BackupAndRestore (every `save_freq` steps) that a kill at any moment resumes exactly.

    - A backup due at an epoch's last step waits for the epoch's end callbacks
      (validation, the best checkpoint, early stopping, TensorBoard, progress.json):
      `after_epoch_end()`, placed last, saves it. Keras's own would be taken before
      them, and a run killed in between would resume with the next epoch, the
      finished one never validated. None is taken after the last epoch or one where
      early stopping stops: a run killed before it records its end resumes from the
      backup before and trains that stretch again, ending as it did.
    - The backup holds the model's metrics (the running means of the epoch's training
      logs); Keras resets them when it re-enters an epoch, so after a restore from
      the middle of an epoch they are put back, and the epoch's logged means cover
      all its steps.
    - `after_backup` callables run after each backup is written (`TrainingProgress.
      record_seconds`: the seconds trained up to a backup taken inside an epoch, which a
      run resumed from it adds to; the epoch-end record alone lost them for a run killed
      inside its only epoch).
    - A backup that cannot be read (its files cut off or garbled after it was whole) is
      an error that names the directory and what to do, instead of TensorFlow's or a
      silent restart from step 0. The parts of a first backup killed before it was whole
      (`has_backup` is False) are removed, and training starts at step 0.
    """

    def __init__(self, backup_dir: str, save_freq: Union[int, str]):
        super().__init__(backup_dir, save_freq=save_freq, delete_checkpoint=False)
        self._due_at_epoch_end = False
        self._metric_values = None
        self.after_backup: List[Callable[[], None]] = []

    def _backup(self, epoch, batch=0):
        super()._backup(epoch, batch=batch)
        for after in self.after_backup:
            after()

    def on_train_begin(self, logs=None):
        had_backup = has_backup(self.backup_dir)
        chief_dir = os.path.join(self.backup_dir, "chief")
        if not had_backup and os.path.isdir(chief_dir) and self._writes():
            # The parts of a first backup killed before it was whole (TensorFlow writes the
            # state file last): nothing to resume from, so training starts at step 0.
            shutil.rmtree(chief_dir, ignore_errors=True)
        try:
            super().on_train_begin(logs)
        except (
            tf.errors.OpError,
            ValueError,
            IndexError,
            TypeError,
            KeyError,
            OSError,
        ) as error:  # What TensorFlow raises on torn or garbled files.
            raise BackupError(self.backup_dir, error) from None
        step = int(self.model.optimizer.iterations.numpy())
        if had_backup and step == 0:
            raise BackupError(self.backup_dir, "it holds no readable training state")
        steps = (self.params or {}).get("steps")
        self._metric_values = None
        if step and steps and step % steps:  # Restored from inside an epoch.
            self._metric_values = [v.numpy() for v in self._metric_variables()]

    def _writes(self) -> bool:
        """Whether this process writes the backup (the chief; every process of one)."""
        strategy = self.model.distribute_strategy if self.model else None
        return strategy is None or strategy.extended.should_checkpoint

    def _metric_variables(self):
        return [v for metric in self.model.metrics for v in metric.variables]

    def on_epoch_begin(self, epoch, logs=None):
        super().on_epoch_begin(epoch, logs)
        if self._metric_values is not None:  # After Keras's reset of the metrics.
            for variable, value in zip(self._metric_variables(), self._metric_values):
                variable.assign(value)
            self._metric_values = None

    def on_train_batch_end(self, batch, logs=None):
        steps = (self.params or {}).get("steps")
        if not (
            self.save_freq
            and steps
            and batch == steps - 1
            and self._batches_count + 1 >= self.save_freq
        ):
            super().on_train_batch_end(batch, logs)
            return
        self._training_state.backup_if_preempted()
        self._batches_count = 0
        self._due_at_epoch_end = True

    def after_epoch_end(self) -> tf.keras.callbacks.Callback:
        """The callback to place last: it takes the backup due at the epoch's end."""
        return _AfterEpochEnd(self)


class _AfterEpochEnd(tf.keras.callbacks.Callback):
    def __init__(self, backup: EpochEndBackup):
        super().__init__()
        self.backup = backup

    def on_epoch_end(self, epoch, logs=None):
        if not self.backup._due_at_epoch_end:  # pylint: disable=protected-access
            return
        self.backup._due_at_epoch_end = False  # pylint: disable=protected-access
        if not self.model.stop_training and epoch < self.params["epochs"] - 1:
            self.backup._backup(
                epoch=epoch,  # pylint: disable=protected-access
                batch=self.params["steps"] - 1,
            )


def has_backup(backup_dir: str) -> bool:
    """Whether `backup_dir` holds a backup to resume from: its checkpoint state file, which
    TensorFlow writes once a backup is whole. A first backup killed while being written
    leaves only parts (a `_temp` directory, an index), which are no backup."""
    return os.path.exists(os.path.join(backup_dir, "chief", "checkpoint"))


class BackupError(RuntimeError):
    """The run's backup cannot be read."""

    def __init__(self, directory: str, cause):
        super().__init__(
            f"The training backup in {directory} cannot be read ({str(cause).strip()}); it was "
            "probably cut off by a kill while being written. Delete that directory to train "
            "this run again from step 0 (same flags, same result)."
        )


class NonFiniteLoss(RuntimeError):
    """Training produced a NaN or infinite loss."""


class StopOnNonFiniteLoss(tf.keras.callbacks.Callback):
    """Raises `NonFiniteLoss` at the first step whose loss is NaN or infinite, before any
    backup or checkpoint of it: the run exits non-zero and exports nothing. Place it first."""

    _epoch = 0

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None:
            return
        loss = float(loss)
        if not np.isfinite(loss):
            step = int(self.model.optimizer.iterations.numpy())
            raise NonFiniteLoss(
                f"The training loss is {loss} at step {step} (epoch {self._epoch}, batch "
                f"{batch}): training stopped, nothing exported. Lower --learning_rate (or "
                "--table_learning_rate), or check the data and flags for extreme values."
            )

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch


class ValidationMetrics(tf.keras.callbacks.Callback):
    """Adds validation Recall@10 and NDCG@10 to the epoch logs (for early stopping and TensorBoard).

    With `test_set` and `config.training.test_curve_every` = N > 0 it also adds, after every
    N-th epoch, Recall@20 / NDCG@20 of the current weights on at most
    TEST_CURVE_QUERIES of the test queries (`TEST_CURVE_METRICS`; TensorBoard writes
    them under train/ as epoch_test_*): a diagnostic that nothing in training reads.
    """

    def __init__(
        self,
        config: configs.Config,
        eval_set: splits_lib.EvalSet,
        test_set: Optional[splits_lib.EvalSet] = None,
    ):
        super().__init__()
        self.config, self.eval_set = config, eval_set
        self.test_set = (
            None
            if test_set is None or not config.training.test_curve_every
            else splits_lib.subsample(test_set, TEST_CURVE_QUERIES)
        )

    def on_epoch_end(self, epoch, logs=None):
        metrics = experiment.evaluate(self.model, self.config, self.eval_set, ks=(10,))
        if logs is None:
            return
        logs["val_recall@10"] = metrics["recall@10"]
        logs[VALIDATION_METRIC] = metrics["ndcg@10"]
        if self.test_set is not None and (epoch + 1) % self.config.training.test_curve_every == 0:
            test = experiment.evaluate(self.model, self.config, self.test_set, ks=(20,))
            logs.update({name: test[name[len("test_") :]] for name in TEST_CURVE_METRICS})


class EstimatorDrift(tf.keras.callbacks.Callback):
    """The streaming estimator's error against the Q of the day being trained, as it goes.

    Every `every` steps of a time-ordered stream: the day of the example the step ended on,
    that day's Q (the share of each item among the day's training events: what the stream
    draws from that day), the estimator's reading of every item, and

    - `total_variation`: 0.5 * sum_d |q_hat(d) - q(d)| over the catalog;
    - `median_abs_log_error@1000`: the median |log q_hat - log q| over the day's 1,000 most
      frequent items.

    They go to TensorBoard (train/, drift_*) and to `path` (JSON, one row per reading, kept
    over restarts): the lag of the estimate behind a drifting popularity.
    """

    def __init__(
        self,
        estimator,
        days: np.ndarray,
        day_ends: np.ndarray,
        day_items: Callable[[int], np.ndarray],
        num_items: int,
        batch_size: int,
        every: int,
        path: str,
        log_dir: str,
    ):
        """`days`: the stream's days in order; `day_ends[i]`: the examples before the end
        of `days[i]`; `day_items(day)`: the items of that day's examples."""
        super().__init__()
        self.estimator, self.every, self.path = estimator, every, path
        self.days, self.day_ends, self.day_items = days, day_ends, day_items
        self.num_items, self.batch_size = num_items, batch_size
        self.writer = tf.summary.create_file_writer(os.path.join(log_dir, "train"))
        self.rows: List[Dict] = []

    def on_train_begin(self, logs=None):
        # After BackupAndRestore (earlier in the list): readings past the restored step are
        # of the killed run's lost steps, and are taken again.
        if os.path.exists(self.path):
            restored = int(self.model.optimizer.iterations.numpy())
            with open(self.path) as f:
                self.rows = [row for row in json.load(f)["readings"] if row["step"] <= restored]

    def reading(self, step: int) -> Dict:
        """The errors at `step` (see the class docstring)."""
        position = (step * self.batch_size - 1) % int(self.day_ends[-1])
        day = int(self.days[np.searchsorted(self.day_ends, position, side="right")])
        on_day = self.day_items(day)
        truth = np.bincount(on_day, minlength=self.num_items + 1)[1:] / len(on_day)
        ids = tf.range(1, self.num_items + 1, dtype=tf.int64)
        estimate = np.exp(self.estimator.log_q(ids).numpy().astype(np.float64))
        top = np.argsort(-truth, kind="stable")[:1000]
        top = top[truth[top] > 0]
        return {
            "step": step,
            "day": day,
            "total_variation": float(0.5 * np.abs(estimate - truth).sum()),
            "median_abs_log_error@1000": float(
                np.median(np.abs(np.log(estimate[top]) - np.log(truth[top])))
            ),
        }

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every or any(row["step"] == step for row in self.rows[-1:]):
            return
        row = self.reading(step)
        self.rows.append(row)
        with self.writer.as_default(step=step):
            for name in ("total_variation", "median_abs_log_error@1000"):
                tf.summary.scalar(f"drift_{name}", row[name])
        write_json(self.path, {"every": self.every, "readings": self.rows})


def drift_callback(config: configs.Config, split: splits_lib.Split, estimator, files: RunFiles):
    """`EstimatorDrift` over the time-ordered training stream of `split`."""
    if split.stream is not None:
        days, day_ends, day_items = split.stream.days, split.stream.day_ends, split.stream.day_items
    else:
        assert split.train is not None  # A split without `stream` holds its training sequences.
        examples = builders.two_tower_examples(split.train, split.train_times)
        example_days = splits_lib.days(examples["time"], config.data.day_seconds)
        items = examples["flat"][examples["position"]]
        days, counts = np.unique(example_days, return_counts=True)  # Time order: days run.
        day_ends = np.cumsum(counts)
        day_items = lambda day: items[example_days == day]  # pylint: disable=unnecessary-lambda-assignment
    return EstimatorDrift(
        estimator,
        days,
        day_ends,
        day_items,
        split.num_items,
        config.training.batch_size,
        config.training.drift_every,
        files.drift,
        files.logs,
    )
