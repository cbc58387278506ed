"""Curves from a run's TensorBoard logs (validation NDCG@10, the test curve) and the plateau
they settle at, compared over the epochs two runs share."""

import glob
import os
from typing import Dict, List, Optional, Sequence

import numpy as np

from pipelines.run_files import RunFiles

# Validation NDCG@10 averaged over the epochs from this one on: the level a row's curve
# settles at. The best epoch is the highest of hundreds of noisy evaluations (on the
# official profiles, 512 validation users), so the plateau is the steadier comparison.
# The curves still rise slowly after it, so two runs are compared over the same epochs:
# from this one to the shorter run's last (`window_difference`).
PLATEAU_FROM = 100
# Fewest epochs a plateau (or a pair's common window) must hold to be reported.
PLATEAU_MIN_EPOCHS = 10


def logged_curve(run_directory: str, writer: str, tag: str) -> Dict[int, float]:
    """{epoch: value} of the scalar `tag` in the run's TensorBoard `writer` logs (every
    restart)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tensorflow.core.util import event_pb2  # pylint: disable=import-outside-toplevel

    curve = {}
    for path in sorted(glob.glob(os.path.join(RunFiles(run_directory).logs, writer, "events*"))):
        try:
            for record in tf.data.TFRecordDataset(path):
                event = event_pb2.Event.FromString(record.numpy())
                for value in event.summary.value:
                    if value.tag == tag:
                        curve[int(event.step)] = float(tf.make_ndarray(value.tensor))
        except tf.errors.DataLossError:
            pass  # A kill cut the file's last record; the run's restart logs on in a new file.
    return curve


def validation_curve(run_directory: str) -> Dict[int, float]:
    """{epoch: validation NDCG@10}, logged after every epoch."""
    return logged_curve(run_directory, "validation", "epoch_ndcg@10")


def test_curve(run_directory: str) -> Dict[int, float]:
    """{epoch: test NDCG@20} logged every `test_curve_every` epochs (a diagnostic that
    training never reads; empty for runs made without it)."""
    return logged_curve(run_directory, "train", "epoch_test_ndcg@20")


def validation_plateau(curve: Dict[int, float], start: int = PLATEAU_FROM) -> Optional[float]:
    """Mean of the curve over epochs >= `start`, or None when it has fewer than
    PLATEAU_MIN_EPOCHS of them."""
    late = [value for epoch, value in curve.items() if epoch >= start]
    return float(np.mean(late)) if len(late) >= PLATEAU_MIN_EPOCHS else None


def window_difference(
    base: Dict[int, float], row: Dict[int, float], start: int = PLATEAU_FROM
) -> Optional[float]:
    """mean(row) - mean(base) over the epochs both curves hold from `start` up to the
    shorter curve's last epoch (so a longer run's later, higher epochs do not count);
    None when that window holds fewer than PLATEAU_MIN_EPOCHS epochs."""
    end = min(max(base, default=-1), max(row, default=-1))
    epochs = [e for e in base if start <= e <= end and e in row]
    if len(epochs) < PLATEAU_MIN_EPOCHS:
        return None
    return float(np.mean([row[e] for e in epochs]) - np.mean([base[e] for e in epochs]))


def curve_list(curve: Dict[int, float]) -> List[Optional[float]]:
    """A curve as a JSON list indexed by epoch (None where an epoch has no value)."""
    return [curve.get(epoch) for epoch in range(max(curve) + 1)] if curve else []


def curve_dict(values: Sequence[Optional[float]]) -> Dict[int, float]:
    """The curve that `curve_list` wrote as `values`."""
    return {epoch: value for epoch, value in enumerate(values) if value is not None}
