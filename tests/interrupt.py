"""`python -m pipelines.train`, killed by SIGKILL (nothing after it runs) at a named point:
the fault injection of the resume tests (`tests/pipelines/test_train.py::ResumeAnywhereTest`).

Usage: python -m tests.interrupt POINT N [pipelines.train flags]

POINT, at its N-th occurrence (1-based):
  backup           just after a backup is written (mid-epoch or at an epoch's end)
  epoch_end        at the start of an epoch's end callbacks, before validation
  best_checkpoint  just after ModelCheckpoint saved an improvement, before progress.json
  progress         just after progress.json recorded an epoch, before its epoch-end backup
  evaluation       at the start of the test evaluation, training finished
  export           after the first SavedModel is written, before the second
  day_store        while an event log's out-of-core store is built (after a buffer of
                   events is written to the day buckets)
"""

import os
import signal
import sys

import tfrs_logq  # noqa: F401  First: sets up tf.keras (Keras 2) and ScaNN before TensorFlow.

# isort: split
import tensorflow as tf
from absl import app

from pipelines import callbacks as callbacks_lib
from pipelines import report
from pipelines import train
from pipelines.data import day_store


def _kill():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _after(owner, name, count, before=False):
    """Kills the process at the `count`-th call of owner.name (after it, or before it)."""
    original = getattr(owner, name)
    calls = [0]

    def wrapped(*args, **kwargs):
        calls[0] += 1
        if before and calls[0] == count:
            _kill()
        result = original(*args, **kwargs)
        if not before and calls[0] == count:
            _kill()
        return result

    setattr(owner, name, wrapped)


def main():
    point, count = sys.argv[1], int(sys.argv[2])
    if point == "backup":
        _after(callbacks_lib.EpochEndBackup, "_backup", count)
    elif point == "epoch_end":
        _after(callbacks_lib.ValidationMetrics, "on_epoch_end", count, before=True)
    elif point == "best_checkpoint":
        _after(tf.keras.callbacks.ModelCheckpoint, "_save_model", count)
    elif point == "progress":
        _after(callbacks_lib.TrainingProgress, "on_epoch_end", count)
    elif point == "evaluation":
        _after(report, "test_report", count, before=True)
    elif point == "export":
        _after(report.export_lib, "export", count)
    elif point == "day_store":
        _after(day_store._Buckets, "flush", count)  # pylint: disable=protected-access
    else:
        raise ValueError(f"unknown point {point!r}")
    sys.argv = [sys.argv[0]] + sys.argv[3:]
    train.define_flags()
    app.run(train.main)


if __name__ == "__main__":
    main()
