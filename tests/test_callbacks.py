"""Tests of the training callbacks: where the input starts, and progress over restarts."""

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
        self.assertEqual(list(experiment.resumable(stream, tf.Variable(3), batches_per_step=2)
                              .take(2).as_numpy_iterator()), [6, 7])

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
                self.optimizer.apply_gradients(zip(tape.gradient(loss, self.trainable_variables),
                                                   self.trainable_variables))
                return {}

        stream = tf.data.Dataset.range(100).map(lambda v: tf.reshape(v, [1, 1])).repeat()
        for restored in (0, 0, 0, 0, 0, 7):  # 7: as BackupAndRestore leaves the counter.
            model = Recorder()
            model.compile(optimizer="sgd")
            model(tf.zeros([1, 1], tf.int64))
            model.optimizer.iterations.assign(restored)
            start = callbacks_lib.InputStart()
            model.fit(experiment.resumable(stream.prefetch(2), start.step), epochs=2,
                      steps_per_epoch=2, callbacks=[start], verbose=0)
            self.assertEqual(model.seen.numpy()[restored:restored + 4].tolist(),
                             list(range(restored, restored + 4)))


class TrainingProgressTest(tf.test.TestCase):
    """Early stopping and the best checkpoint carry over a restart (BackupAndRestore alone
    restores the weights and the epoch, not those callbacks' state)."""

    def _callbacks(self, directory, iterations):
        model = tf.keras.Sequential([tf.keras.Input([2]), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.Adam())
        model.optimizer.iterations.assign(iterations)
        early = tf.keras.callbacks.EarlyStopping(
            monitor=callbacks_lib.VALIDATION_METRIC, mode="max", patience=3)
        checkpoint = tf.keras.callbacks.ModelCheckpoint(
            os.path.join(directory, "best"), monitor=callbacks_lib.VALIDATION_METRIC, mode="max",
            save_best_only=True, save_weights_only=True)
        progress = callbacks_lib.TrainingProgress(
            os.path.join(directory, "progress.json"), early, checkpoint,
            started=time.time() - 10.0)
        for callback in (early, checkpoint, progress):
            callback.set_model(model)
            callback.set_params({"epochs": 20, "steps": 10})
        return early, checkpoint, progress

    def _run_epochs(self, directory, values):
        """A fresh start that runs one epoch (of 10 steps) per validation value."""
        early, checkpoint, progress = self._callbacks(directory, iterations=0)
        for callback in (early, progress):
            callback.on_train_begin()
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

        # The process dies; a new one starts from a backup taken after step 40.
        early, checkpoint, progress = self._callbacks(directory, iterations=40)
        for callback in (early, progress):  # EarlyStopping first: it resets, then we restore.
            callback.on_train_begin()
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

    def test_backup_from_the_best_epoch_waits_from_zero(self):
        directory = tempfile.mkdtemp()
        self._run_epochs(directory, [0.1, 0.3, 0.2])  # The best, epoch 1, ended at step 20.
        early, _, progress = self._callbacks(directory, iterations=15)
        for callback in (early, progress):
            callback.on_train_begin()
        self.assertEqual((progress.state["epochs"], early.best_epoch, early.wait), (1, 1, 0))

    def _kill_at_epoch_end(self, directory, values, checkpoint_saved):
        """Epochs of `values`; the last one improves, and the process dies after its
        pending record, with or without ModelCheckpoint's save, before progress.json."""
        early, checkpoint, progress = self._callbacks(directory, iterations=0)
        pending = progress.before_checkpoint()
        pending.set_model(early.model)
        for callback in (early, progress):
            callback.on_train_begin()
        last = len(values) - 1
        for epoch, value in enumerate(values):
            early.model.layers[0].kernel.assign_add(tf.ones([2, 1]))  # The epoch's training.
            logs = {callbacks_lib.VALIDATION_METRIC: value}
            pending.on_epoch_end(epoch, logs)
            if epoch == last:
                if checkpoint_saved:
                    checkpoint.on_epoch_end(epoch, logs)
                return
            for callback in (early, checkpoint, progress):
                callback.on_epoch_end(epoch, logs)

    def test_kill_between_the_best_checkpoint_and_the_progress_file(self):
        # Epoch 2 (0.4) beats epoch 1 (0.3); its checkpoint is saved, the process dies
        # before progress.json records it, and the backup comes from the end of epoch 2
        # (step 30). The restart takes epoch 2 as the best: a later 0.35 must not replace
        # its weights.
        directory = tempfile.mkdtemp()
        self._kill_at_epoch_end(directory, [0.1, 0.3, 0.4], checkpoint_saved=True)
        state = json.load(open(os.path.join(directory, "progress.json")))
        self.assertEqual((state["epochs"], state["best"], state["pending"]["epoch"]),
                         (2, 0.3, 2))
        early, checkpoint, progress = self._callbacks(directory, iterations=30)
        for callback in (early, progress):
            callback.on_train_begin()
        self.assertEqual((progress.state["epochs"], early.best, early.best_epoch, early.wait,
                          checkpoint.best), (3, 0.4, 2, 0, 0.4))
        self.assertNotIn("pending", progress.state)
        logs = {callbacks_lib.VALIDATION_METRIC: 0.35}
        progress.before_checkpoint().on_epoch_end(3, logs)
        for callback in (early, checkpoint, progress):
            callback.on_epoch_end(3, logs)
        state = json.load(open(os.path.join(directory, "progress.json")))
        self.assertEqual((state["epochs"], state["best"], state["best_epoch"]), (4, 0.4, 2))
        self.assertNotIn("pending", state)

    def test_kill_before_the_best_checkpoint_drops_the_pending_epoch(self):
        # The same death, but before ModelCheckpoint saved: the checkpoint on disk is still
        # epoch 1's, so epoch 1 stays the best (epoch 2's weights are gone with it).
        directory = tempfile.mkdtemp()
        self._kill_at_epoch_end(directory, [0.1, 0.3, 0.4], checkpoint_saved=False)
        early, checkpoint, progress = self._callbacks(directory, iterations=30)
        for callback in (early, progress):
            callback.on_train_begin()
        self.assertEqual((progress.state["epochs"], early.best, early.best_epoch, early.wait,
                          checkpoint.best), (2, 0.3, 1, 0, 0.3))
        # From a backup inside epoch 2, that epoch runs again (and may improve again).
        early, checkpoint, progress = self._callbacks(directory, iterations=25)
        for callback in (early, progress):
            callback.on_train_begin()
        self.assertEqual((progress.state["epochs"], early.best, early.best_epoch),
                         (2, 0.3, 1))

    def test_fresh_start_ignores_a_stale_file(self):
        directory = tempfile.mkdtemp()
        with open(os.path.join(directory, "progress.json"), "w") as f:
            json.dump({"epochs": 9, "best": 0.5, "best_epoch": 2, "seconds": 99.0}, f)
        early, checkpoint, progress = self._callbacks(directory, iterations=0)
        for callback in (early, progress):
            callback.on_train_begin()
        self.assertEqual((early.best, early.wait, progress.prior_seconds), (-np.inf, 0, 0.0))
        self.assertEqual(checkpoint.best, -np.inf)



class TestCurveTest(tf.test.TestCase):

    def test_the_test_curve_scores_a_fixed_sample_of_at_most_the_cap(self):
        from pipelines import configs  # pylint: disable=import-outside-toplevel
        from pipelines.data import splits  # pylint: disable=import-outside-toplevel
        count = callbacks_lib.TEST_CURVE_QUERIES + 100
        test = splits.EvalSet(np.arange(count), [[i] for i in range(count)],
                              [[i + 1] for i in range(count)])
        config = configs.PRESETS["smoke"].replace(test_curve_every=10)
        first = callbacks_lib.ValidationMetrics(config, test, test).test_set
        second = callbacks_lib.ValidationMetrics(config, test, test).test_set
        self.assertLen(first.users, callbacks_lib.TEST_CURVE_QUERIES)
        self.assertAllEqual(first.users, second.users)  # The same queries in every run.
        self.assertAllEqual(first.users, np.sort(first.users))
        self.assertIsNone(callbacks_lib.ValidationMetrics(
            config.replace(test_curve_every=0), test, test).test_set)


if __name__ == "__main__":
    tf.test.main()
