"""Keras callbacks of a training run: where the input starts, progress over restarts, validation.

Their order in `fit`'s list matters (callbacks run in list order):
BackupAndRestore, then `InputStart`; `ValidationMetrics` before the callbacks
that read its value (ModelCheckpoint, EarlyStopping); `TrainingProgress.before_checkpoint()`
just before ModelCheckpoint; `TrainingProgress` last.
"""

import hashlib
import json
import os
import time
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from pipelines import configs
from pipelines import experiment
from pipelines.data import splits as splits_lib

VALIDATION_METRIC = "val_ndcg@10"
# The diagnostic test curve's epoch logs (`ValidationMetrics`), and the most test queries it
# scores: a fixed sample (`splits.subsample`, the same in every run), so that the curve stays
# cheap on splits with many queries (temporal `successive`: about 100k, 24 s an evaluation
# at `official_cpu`); leave-one-out (6,040) keeps every query.
TEST_CURVE_METRICS = ("test_recall@20", "test_ndcg@20")
TEST_CURVE_QUERIES = 8192


def checkpoint_digest(prefix: str) -> Optional[str]:
    """sha256 of the checkpoint's index (it holds the data's checksums), or None."""
    if not os.path.exists(prefix + ".index"):
        return None
    with open(prefix + ".index", "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


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

    BackupAndRestore brings back the weights, the optimizer and the epoch, but
    EarlyStopping and ModelCheckpoint(save_best_only) start afresh: a resumed run
    would overwrite the best checkpoint with its first epoch and wait `patience`
    epochs more. After each epoch this writes OUTPUT/progress.json (the chief
    only): epochs done, the best validation value and its epoch, and the seconds
    spent, summed over the processes up to each one's last finished epoch. The
    best value is EarlyStopping's own. When training starts from a backup, it
    gives those back to the two callbacks. Place it after them and after
    BackupAndRestore (callbacks run in list order), and `before_checkpoint()`
    just before ModelCheckpoint.
    `finish` marks the training done, so that a rerun goes straight to evaluation.

    The best checkpoint and this file are written one after the other at an epoch's
    end. A kill between the two, with a backup from that very epoch's end (when the
    epoch's steps are a multiple of the backup interval), would resume with a best
    checkpoint newer than the best value recorded: the next epoch that beats the old
    value would replace better weights. So before ModelCheckpoint saves an
    improvement, `before_checkpoint()` records it here as pending, with the digest
    of the best checkpoint it replaces; a restart that finds the checkpoint changed
    takes the pending epoch as the best, and one that finds it unchanged drops it.
    """

    def __init__(self, path: str, early_stopping: tf.keras.callbacks.EarlyStopping,
                 checkpoint: tf.keras.callbacks.ModelCheckpoint, started: float,
                 write: bool = True):
        super().__init__()
        self.path, self.write, self.started = path, write, started
        self.early_stopping, self.checkpoint = early_stopping, checkpoint
        self.step = 0                     # The step training (re)started from.
        self.state = {"epochs": 0, "best": None, "best_epoch": None, "seconds": 0.0}
        self.prior_seconds = 0.0

    def on_train_begin(self, logs=None):
        self.step = int(self.model.optimizer.iterations.numpy())
        state = self._read()
        if self.step == 0 or state is None:
            return  # A fresh start (a progress file without a backup is stale).
        steps_per_epoch = (self.params or {}).get("steps")
        pending = state.pop("pending", None)
        if (pending and steps_per_epoch and self.step >= (pending["epoch"] + 1) * steps_per_epoch
                and self._best_digest() != pending["replaced"]):
            # Killed after the best checkpoint of an epoch the backup holds, before this file.
            state.update(best=pending["value"], best_epoch=pending["epoch"],
                         epochs=max(state["epochs"], pending["epoch"] + 1))
        # Backups come every `backup_every` steps, this file at epoch ends: a backup from
        # the middle of an epoch that the file already counts means that epoch runs again.
        if steps_per_epoch:
            state["epochs"] = min(state["epochs"], self.step // steps_per_epoch)
        self.state = state
        self.prior_seconds = self.state["seconds"]
        if self.state["best"] is not None:
            self.checkpoint.best = self.state["best"]
            self.early_stopping.best = self.state["best"]
            self.early_stopping.best_epoch = self.state["best_epoch"]
            # As EarlyStopping counts: epochs finished since the best one (none when the
            # best is an epoch that runs again).
            self.early_stopping.wait = max(self.state["epochs"] - 1 - self.state["best_epoch"], 0)

    def before_checkpoint(self) -> tf.keras.callbacks.Callback:
        """The callback to place just before ModelCheckpoint (see the class docstring)."""
        return _PendingBest(self)

    def _best_digest(self) -> Optional[str]:
        return checkpoint_digest(self.checkpoint.filepath)

    def seconds(self) -> float:
        """Seconds of training so far, this process's and the earlier ones'."""
        return self.prior_seconds + time.time() - self.started

    def on_epoch_end(self, epoch, logs=None):
        if np.isfinite(self.early_stopping.best):  # It has seen a validation value.
            self.state.update(best=float(self.early_stopping.best),
                              best_epoch=self.early_stopping.best_epoch)
        self.state.update(epochs=epoch + 1, seconds=round(self.seconds(), 1))
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
            temporary = self.path + ".tmp"
            with open(temporary, "w") as f:
                json.dump(self.state, f)
            os.replace(temporary, self.path)  # Atomic: a kill never leaves half a file.


class _PendingBest(tf.keras.callbacks.Callback):
    """Records an epoch's improvement in `progress`'s file before ModelCheckpoint saves it."""

    def __init__(self, progress: TrainingProgress):
        super().__init__()
        self.progress = progress

    def on_epoch_end(self, epoch, logs=None):
        checkpoint = self.progress.checkpoint
        value = (logs or {}).get(checkpoint.monitor)
        if value is not None and checkpoint.monitor_op(value, checkpoint.best):
            self.progress.state["pending"] = {"epoch": epoch, "value": float(value),
                                              "replaced": self.progress._best_digest()}
            self.progress._write()  # pylint: disable=protected-access
            del self.progress.state["pending"]


class ValidationMetrics(tf.keras.callbacks.Callback):
    """Adds validation Recall@10 and NDCG@10 to the epoch logs (for early stopping and TensorBoard).

    With `test_set` and `config.training.test_curve_every` = N > 0 it also adds, after every
    N-th epoch, Recall@20 / NDCG@20 of the current weights on at most
    TEST_CURVE_QUERIES of the test queries (`TEST_CURVE_METRICS`; TensorBoard writes
    them under train/ as epoch_test_*): a diagnostic that nothing in training reads.
    """

    def __init__(self, config: configs.Config, eval_set: splits_lib.EvalSet,
                 test_set: Optional[splits_lib.EvalSet] = None):
        super().__init__()
        self.config, self.eval_set = config, eval_set
        self.test_set = (None if test_set is None or not config.training.test_curve_every
                         else splits_lib.subsample(test_set, TEST_CURVE_QUERIES))

    def on_epoch_end(self, epoch, logs=None):
        metrics = experiment.evaluate(self.model, self.config, self.eval_set, ks=(10,))
        if logs is None:
            return
        logs["val_recall@10"] = metrics["recall@10"]
        logs[VALIDATION_METRIC] = metrics["ndcg@10"]
        if self.test_set is not None and (epoch + 1) % self.config.training.test_curve_every == 0:
            test = experiment.evaluate(self.model, self.config, self.test_set, ks=(20,))
            logs.update({name: test[name[len("test_"):]] for name in TEST_CURVE_METRICS})


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

    def __init__(self, estimator, example_days: np.ndarray, example_items: np.ndarray,
                 num_items: int, batch_size: int, every: int, path: str, log_dir: str):
        super().__init__()
        self.estimator, self.every, self.path = estimator, every, path
        self.example_days, self.example_items = example_days, example_items
        self.num_items, self.batch_size = num_items, batch_size
        self.writer = tf.summary.create_file_writer(os.path.join(log_dir, "train"))
        self.rows = []

    def on_train_begin(self, logs=None):
        # After BackupAndRestore (earlier in the list): readings past the restored step are
        # of the killed run's lost steps, and are taken again.
        if os.path.exists(self.path):
            restored = int(self.model.optimizer.iterations.numpy())
            with open(self.path) as f:
                self.rows = [row for row in json.load(f)["readings"] if row["step"] <= restored]

    def reading(self, step: int) -> Dict:
        """The errors at `step` (see the class docstring)."""
        position = (step * self.batch_size - 1) % len(self.example_days)
        day = int(self.example_days[position])
        on_day = self.example_items[self.example_days == day]
        truth = np.bincount(on_day, minlength=self.num_items + 1)[1:] / len(on_day)
        ids = tf.range(1, self.num_items + 1, dtype=tf.int64)
        estimate = np.exp(self.estimator.log_q(ids).numpy().astype(np.float64))
        top = np.argsort(-truth, kind="stable")[:1000]
        top = top[truth[top] > 0]
        return {"step": step, "day": day,
                "total_variation": float(0.5 * np.abs(estimate - truth).sum()),
                "median_abs_log_error@1000": float(np.median(np.abs(
                    np.log(estimate[top]) - np.log(truth[top]))))}

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if step % self.every or any(row["step"] == step for row in self.rows[-1:]):
            return
        row = self.reading(step)
        self.rows.append(row)
        with self.writer.as_default(step=step):
            for name in ("total_variation", "median_abs_log_error@1000"):
                tf.summary.scalar(f"drift_{name}", row[name])
        temporary = self.path + ".partial"
        with open(temporary, "w") as f:
            json.dump({"every": self.every, "readings": self.rows}, f, indent=1)
        os.replace(temporary, self.path)
