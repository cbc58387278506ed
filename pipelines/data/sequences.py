"""Item sequences as fixed-length arrays (numpy only: the Keras job reads them without
TensorFlow; `builders` streams them through tf.data)."""

from typing import Dict, Sequence

import numpy as np


def left_pad(sequences: Sequence[np.ndarray], length: int) -> np.ndarray:
    """[len(sequences), length] int32: the last `length` items of each, left-padded with 0."""
    out = np.zeros([len(sequences), length], np.int32)
    for row, sequence in enumerate(sequences):
        tail = np.asarray(sequence)[-length:]
        if len(tail):
            out[row, length - len(tail) :] = tail
    return out


def sequence_windows(sequences: Sequence[np.ndarray], max_length: int) -> Dict[str, np.ndarray]:
    """SASRec training windows: each user's last max_length + 1 items, shifted by one.

    Every non-padding position is a training example: inputs[t] predicts
    targets[t] (the next item). Users with fewer than 2 items are skipped.
    """
    windows = [np.asarray(s)[-(max_length + 1) :] for s in sequences if len(s) >= 2]
    return {
        "inputs": left_pad([w[:-1] for w in windows], max_length),
        "targets": left_pad([w[1:] for w in windows], max_length),
    }
