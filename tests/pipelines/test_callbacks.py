"""Tests of the training callbacks: where the input starts, and progress over restarts."""

import contextlib
import io
import json
import os
import tempfile
import time

import numpy as np
import tensorflow as tf

from pipelines import callbacks as callbacks_lib
from pipelines import experiment


class ResumableInputTest(tf.test.TestCase):
    """The training input from the step training (re)starts at."""

    def test_resumable_input_skips_whole_steps(self):
        stream = tf.data.Dataset.range(100)
        self.assertEqual(
            list(
                experiment.resumable(stream, tf.Variable(3), batches_per_step=2)
                .take(2)
                .as_numpy_iterator()
            ),
            [6, 7],
        )

    def test_fit_reads_the_input_from_the_step_training_starts_at(self):
        # The skip count is read inside the first step, which also increments the
        # optimizer's counter: read from the counter itself, a fresh fit started at
        # batch 1 in 19 of 20 tries (and same-seed ML-1M runs at batch 0 or 1 by chance).

        class Recorder(tf.keras.Model):
            """Records each step's batch (a number) at its step's index."""

            def __init__(self):
                super().__init__()
                self.dense = tf.keras.layers.Dense(1)
                self.seen = tf.Variable(tf.fill([12], tf.constant(-1, tf.int64)))

            def call(self, x):
                return self.dense(tf.cast(x, tf.float32))

            def train_step(self, x):
                self.seen.scatter_nd_update([[self.optimizer.iterations]], x[:, 0])
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(self(x))
                self.optimizer.apply_gradients(
                    zip(tape.gradient(loss, self.trainable_variables), self.trainable_variables)
                )
                return {}

        stream = tf.data.Dataset.range(100).map(lambda v: tf.reshape(v, [1, 1])).repeat()
        for restored in (0, 0, 0, 0, 0, 7):  # 7: as BackupAndRestore leaves the counter.
            model = Recorder()
            model.compile(optimizer="sgd")
            model(tf.zeros([1, 1], tf.int64))
            model.optimizer.iterations.assign(restored)
            start = callbacks_lib.InputStart()
            model.fit(
                experiment.resumable(stream.prefetch(2), start.step),
                epochs=2,
                steps_per_epoch=2,
                callbacks=[start],
                verbose=0,
            )
            self.assertEqual(
                model.seen.numpy()[restored : restored + 4].tolist(),
                list(range(restored, restored + 4)),
            )


class TrainingProgressTest(tf.test.TestCase):
    """Early stopping and the best checkpoint carry over a restart (BackupAndRestore alone
    restores the weights and the epoch, not those callbacks' state)."""

    def _callbacks(self, directory, iterations):
        model = tf.keras.Sequential([tf.keras.Input([2]), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.Adam())
        model.optimizer.iterations.assign(iterations)
        early = tf.keras.callbacks.EarlyStopping(
            monitor=callbacks_lib.VALIDATION_METRIC, mode="max", patience=3
        )
        checkpoint = tf.keras.callbacks.ModelCheckpoint(
            os.path.join(directory, "best"),
            monitor=callbacks_lib.VALIDATION_METRIC,
            mode="max",
            save_best_only=True,
            save_weights_only=True,
        )
        progress = callbacks_lib.TrainingProgress(
            os.path.join(directory, "progress.json"), early, checkpoint, started=time.time() - 10.0
        )
        for callback in (early, checkpoint, progress):
            callback.set_model(model)
            callback.set_params({"epochs": 20, "steps": 10})
        return early, checkpoint, progress

    def _run_epochs(self, directory, values):
        """A fresh start that runs one epoch (of 10 steps) per validation value; it prints
        nothing as it starts."""
        early, checkpoint, progress = self._callbacks(directory, iterations=0)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            for callback in (early, progress):
                callback.on_train_begin()
        self.assertEqual(printed.getvalue(), "")
        for epoch, value in enumerate(values):
            for callback in (early, checkpoint, progress):
                callback.on_epoch_end(epoch, {callbacks_lib.VALIDATION_METRIC: value})
        return early

    def test_restart_restores_early_stopping_and_the_best_value(self):
        directory = tempfile.mkdtemp()
        early = self._run_epochs(directory, [0.1, 0.3, 0.2, 0.25])
        state = json.load(open(os.path.join(directory, "progress.json")))
        self.assertEqual((state["epochs"], state["best"], state["best_epoch"]), (4, 0.3, 1))
        self.assertBetween(state["seconds"], 10.0, 60.0)
        self.assertEqual(early.wait, 2)

        # The process dies; a new one starts from a backup taken after step 40, and says so.
        early, checkpoint, progress = self._callbacks(directory, iterations=40)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            for callback in (early, progress):  # EarlyStopping first: it resets, then we restore.
                callback.on_train_begin()
        self.assertEqual(
            printed.getvalue(),
            "[train] resumed from step 40 (epoch 5, at its step 1 of 10): the last backup of a "
            "run stopped before it finished; the steps before it are not trained again.\n",
        )
        self.assertEqual((early.best, early.wait, checkpoint.best), (0.3, 2, 0.3))
        self.assertEqual(progress.step, 40)
        self.assertBetween(progress.seconds(), state["seconds"] + 10.0, state["seconds"] + 60)
        # One more epoch without improvement: patience 3 is used up, as without the restart.
        logs = {callbacks_lib.VALIDATION_METRIC: 0.29}
        for callback in (early, checkpoint, progress):
            callback.on_epoch_end(4, logs)
        self.assertTrue(early.model.stop_training)

    def test_backup_from_inside_a_counted_epoch_runs_that_epoch_again(self):
        directory = tempfile.mkdtemp()
        self._run_epochs(directory, [0.1, 0.3, 0.2, 0.25])  # progress.json: 4 epochs.
        # The last backup came at step 35, halfway through epoch 3 (0-based): epochs 0-2
        # count, and epoch 3 runs again; EarlyStopping must not count it twice.
        early, checkpoint, progress = self._callbacks(directory, iterations=35)
        for callback in (early, progress):
            callback.on_train_begin()
        self.assertEqual((progress.state["epochs"], early.best, early.wait), (3, 0.3, 1))
        for epoch in (3, 4):  # Epochs 2, 3 and 4 without improvement use up patience 3.
            self.assertFalse(early.model.stop_training)
            for callback in (early, checkpoint, progress):
                callback.on_epoch_end(epoch, {callbacks_lib.VALIDATION_METRIC: 0.29})
        self.assertTrue(early.model.stop_training)
        self.assertEqual(json.load(open(os.path.join(directory, "progress.json")))["epochs"], 5)

    def test_backup_from_inside_the_best_epoch_replays_it(self):
        directory = tempfile.mkdtemp()
        self._run_epochs(directory, [0.1, 0.3, 0.2])  # The best, epoch 1, ended at step 20.
        early, checkpoint, progress = self._callbacks(directory, iterations=15)
        for callback in (early, progress):
            callback.on_train_begin()
        # As after epoch 0 of the uninterrupted run: epoch 1 runs again and improves again.
        self.assertEqual(
            (progress.state["epochs"], early.best, early.best_epoch, early.wait, checkpoint.best),
            (1, 0.1, 0, 0, 0.1),
        )
        self.assertEqual(progress.state["values"], [0.1])

    def test_kill_between_the_best_checkpoint_and_the_progress_file(self):
        # Epoch 2 (0.4) beats epoch 1 (0.3); its checkpoint is saved and the process dies
        # before progress.json records it. Its epoch-end backup comes after that record
        # (EpochEndBackup), so the last backup is from inside epoch 2 (step 25): epoch 2
        # runs again, beats 0.3 again and saves the same weights again.
        directory = tempfile.mkdtemp()
        early, checkpoint, progress = self._callbacks(directory, iterations=0)
        for callback in (early, progress):
            callback.on_train_begin()
        for epoch, value in enumerate([0.1, 0.3, 0.4]):
            logs = {callbacks_lib.VALIDATION_METRIC: value}
            for callback in (early, checkpoint) + (() if epoch == 2 else (progress,)):
                callback.on_epoch_end(epoch, logs)
        early, checkpoint, progress = self._callbacks(directory, iterations=25)
        for callback in (early, progress):
            callback.on_train_begin()
        self.assertEqual(
            (progress.state["epochs"], early.best, early.best_epoch, early.wait, checkpoint.best),
            (2, 0.3, 1, 0, 0.3),
        )
        logs = {callbacks_lib.VALIDATION_METRIC: 0.4}
        for callback in (early, checkpoint, progress):
            callback.on_epoch_end(2, logs)
        state = json.load(open(os.path.join(directory, "progress.json")))
        self.assertEqual(
            (state["epochs"], state["best"], state["best_epoch"], state["values"]),
            (3, 0.4, 2, [0.1, 0.3, 0.4]),
        )

    def test_seconds_recorded_at_a_backup_inside_the_only_epoch_carry_over(self):
        # A run of one long epoch killed after a step backup: the seconds trained up to that
        # backup count, where the epoch-end record alone lost them (a resumed run reported
        # only its own attempt's).
        directory = tempfile.mkdtemp()
        _, _, progress = self._callbacks(directory, iterations=0)
        progress.on_train_begin()
        progress.record_seconds()  # At the backup of step 5 (EpochEndBackup.after_backup).
        state = json.load(open(os.path.join(directory, "progress.json")))
        self.assertEqual((state["epochs"], state["values"]), (0, []))
        self.assertBetween(state["seconds"], 10.0, 60.0)
        _, _, progress = self._callbacks(directory, iterations=5)  # Resumed at step 5.
        progress.on_train_begin()
        self.assertEqual(progress.prior_seconds, state["seconds"])
        self.assertBetween(progress.seconds(), state["seconds"] + 10.0, state["seconds"] + 60)

    def test_fresh_start_ignores_a_stale_file(self):
        directory = tempfile.mkdtemp()
        with open(os.path.join(directory, "progress.json"), "w") as f:
            json.dump({"epochs": 9, "best": 0.5, "best_epoch": 2, "seconds": 99.0}, f)
        early, checkpoint, progress = self._callbacks(directory, iterations=0)
        for callback in (early, progress):
            callback.on_train_begin()
        self.assertEqual((early.best, early.wait, progress.prior_seconds), (-np.inf, 0, 0.0))
        self.assertEqual(checkpoint.best, -np.inf)


class _Killed(Exception):
    """Stands for a SIGKILL inside fit (nothing after it runs)."""


class _Counter(tf.keras.Model):
    """One weight; each step adds the step's batch value to it and to a running mean."""

    def __init__(self):
        super().__init__()
        self.total = tf.Variable(0.0)
        self.mean = tf.keras.metrics.Mean("mean_batch")

    @property
    def metrics(self):
        return [self.mean]

    def train_step(self, x):
        self.total.assign_add(tf.reduce_sum(tf.cast(x, tf.float32)))
        self.mean.update_state(tf.cast(x, tf.float32))
        self.optimizer.iterations.assign_add(1)
        return {"mean_batch": self.mean.result()}


class _Kill(tf.keras.callbacks.Callback):
    """Raises _Killed at the end of `epoch` (before the callbacks after it) or after `step`."""

    def __init__(self, epoch=None, step=None):
        super().__init__()
        self.epoch, self.step = epoch, step

    def on_train_batch_end(self, batch, logs=None):
        if self.step is not None and int(self.model.optimizer.iterations.numpy()) == self.step:
            raise _Killed()

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.epoch:
            raise _Killed()


class _EpochLogs(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.logs = {}

    def on_epoch_end(self, epoch, logs=None):
        self.logs[epoch] = dict(logs)


class EpochEndBackupTest(tf.test.TestCase):
    """Backups every 5 steps of 10-step epochs; a kill anywhere resumes to the same end."""

    def _fit(self, directory, kill=None, epochs=3):
        model = _Counter()
        model.compile(optimizer="sgd")
        backup = callbacks_lib.EpochEndBackup(os.path.join(directory, "backup"), save_freq=5)
        self.after_backup = []
        backup.after_backup.append(
            lambda: self.after_backup.append(int(model.optimizer.iterations.numpy()))
        )
        start = callbacks_lib.InputStart()
        logs = _EpochLogs()
        stream = experiment.resumable(
            tf.data.Dataset.range(1000).map(lambda v: tf.reshape(v, [1])), start.step
        )
        listed = [backup, start, kill or _Kill(), logs, backup.after_epoch_end()]
        try:
            model.fit(stream, epochs=epochs, steps_per_epoch=10, callbacks=listed, verbose=0)
        except _Killed:
            return None, logs.logs
        return float(model.total.numpy()), logs.logs

    def test_a_kill_at_an_epoch_end_before_its_record_runs_that_epoch_again(self):
        straight, straight_logs = self._fit(tempfile.mkdtemp())
        directory = tempfile.mkdtemp()
        # Killed in epoch 0's end callbacks, after step 10 (a backup is due there): Keras's
        # own backup would already hold step 10, and the restart would begin with epoch 1.
        self.assertIsNone(self._fit(directory, _Kill(epoch=0))[0])
        total, logs = self._fit(directory)
        self.assertEqual(sorted(logs), [0, 1, 2])  # Epoch 0's end runs in the restart.
        self.assertEqual(total, straight)
        self.assertEqual(logs, straight_logs)

    def test_the_running_means_of_an_interrupted_epoch_travel_with_the_backup(self):
        straight, straight_logs = self._fit(tempfile.mkdtemp())
        directory = tempfile.mkdtemp()
        self.assertIsNone(self._fit(directory, _Kill(step=17))[0])  # Last backup: step 15.
        total, logs = self._fit(directory)
        self.assertEqual(sorted(logs), [1, 2])
        self.assertEqual(total, straight)
        # Epoch 1's mean over all its steps (10..19), not over the resumed ones (15..19).
        self.assertEqual(logs[1], straight_logs[1])
        self.assertEqual(logs[1]["mean_batch"], 14.5)

    def test_no_backup_after_the_last_epoch(self):
        directory = tempfile.mkdtemp()
        self._fit(directory)
        self.assertEqual(self.after_backup, [5, 10, 15, 20, 25])  # Each backup, then its hook.
        saved = tf.train.load_checkpoint(
            tf.train.latest_checkpoint(os.path.join(directory, "backup", "chief"))
        )
        names = {
            name: saved.get_tensor(name)
            for name in saved.get_variable_to_shape_map()
            if "ckpt_saved" in name
        }
        self.assertEqual(sorted(int(v) for v in names.values()), [2, 4])  # Epoch 2, batch 4.

    def test_a_first_backup_killed_before_it_was_whole_starts_again_at_step_0(self):
        # A kill while the first backup is written (a parameter-server chief's takes
        # seconds, after progress.json) leaves its parts but no state file: no backup, not
        # an unreadable one (before: "BackupError ... holds no readable training state").
        straight, straight_logs = self._fit(tempfile.mkdtemp())
        directory = tempfile.mkdtemp()
        self.assertIsNone(self._fit(directory, _Kill(step=7))[0])  # A whole backup at 5.
        chief = os.path.join(directory, "backup", "chief")
        os.remove(os.path.join(chief, "checkpoint"))  # As if killed before TF wrote it,
        os.makedirs(os.path.join(chief, "ckpt-2_temp"))  # with a shard half written.
        with open(os.path.join(chief, "ckpt-2_temp", "part-00000-of-00001.data"), "wb") as f:
            f.write(b"cut off")
        self.assertFalse(callbacks_lib.has_backup(os.path.join(directory, "backup")))
        total, logs = self._fit(directory)
        self.assertEqual(sorted(logs), [0, 1, 2])  # From step 0.
        self.assertEqual((total, logs), (straight, straight_logs))
        self.assertFalse(os.path.exists(os.path.join(chief, "ckpt-2_temp")))  # Removed.

    def test_an_unreadable_backup_is_a_named_error(self):
        directory = tempfile.mkdtemp()
        self.assertIsNone(self._fit(directory, _Kill(step=12))[0])
        backup = os.path.join(directory, "backup")
        state = os.path.join(backup, "chief", "checkpoint")
        data = tf.train.latest_checkpoint(os.path.dirname(state)) + ".data-00000-of-00001"
        with open(data, "rb") as f:
            content = f.read()
        with open(data, "wb") as f:  # Cut off while being written.
            f.write(content[: len(content) // 2])
        with self.assertRaisesRegex(
            callbacks_lib.BackupError,
            f"The training backup in {backup} cannot be read.*Delete "
            "that directory to train this run again from step 0",
        ):
            self._fit(directory)
        with open(state, "w") as f:  # Before: a silent restart from step 0.
            f.write("garbage, not a checkpoint state")
        with self.assertRaisesRegex(callbacks_lib.BackupError, "holds no readable training"):
            self._fit(directory)


class NonFiniteLossTest(tf.test.TestCase):
    def test_a_nan_loss_stops_fit_with_a_named_error(self):
        model = tf.keras.Sequential([tf.keras.Input([1]), tf.keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        x = np.array([[1.0], [np.nan], [1.0]], np.float32)
        with self.assertRaisesRegex(
            callbacks_lib.NonFiniteLoss, r"The training loss is nan at step 2 \(epoch 0, batch 1\)"
        ):
            model.fit(
                x,
                x,
                batch_size=1,
                epochs=1,
                verbose=0,
                shuffle=False,
                callbacks=[callbacks_lib.StopOnNonFiniteLoss()],
            )


class TestCurveTest(tf.test.TestCase):
    def test_the_test_curve_scores_a_fixed_sample_of_at_most_the_cap(self):
        from pipelines import configs  # pylint: disable=import-outside-toplevel
        from pipelines.data import splits  # pylint: disable=import-outside-toplevel

        count = callbacks_lib.TEST_CURVE_QUERIES + 100
        test = splits.EvalSet(
            np.arange(count), [[i] for i in range(count)], [[i + 1] for i in range(count)]
        )
        config = configs.PRESETS["smoke"].replace(test_curve_every=10)
        first = callbacks_lib.ValidationMetrics(config, test, test).test_set
        second = callbacks_lib.ValidationMetrics(config, test, test).test_set
        self.assertLen(first.users, callbacks_lib.TEST_CURVE_QUERIES)
        self.assertAllEqual(first.users, second.users)  # The same queries in every run.
        self.assertAllEqual(first.users, np.sort(first.users))
        self.assertIsNone(
            callbacks_lib.ValidationMetrics(config.replace(test_curve_every=0), test, test).test_set
        )


if __name__ == "__main__":
    tf.test.main()
