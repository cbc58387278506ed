"""tf.data builders: SASRec sequence windows and two-tower examples, per replica, prefetched.

Everything is built from in-memory arrays with `from_tensor_slices` and
in-graph maps (no Python generator in the training path). Training streams are
shuffled with a seed, repeated, batched with `drop_remainder=True` and
prefetched; `input_context` (from `distribute_datasets_from_function`) shards
them and sets the per-replica batch size.
"""

from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf


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


def _finish(
    dataset: tf.data.Dataset,
    size: int,
    batch_size: int,
    seed: Optional[int],
    training: bool,
    input_context: Optional[tf.distribute.InputContext],
    batch_transform: Optional[Callable] = None,
    partial_batches: bool = False,
    shuffle_window: Optional[int] = None,
) -> tf.data.Dataset:
    """Shard, shuffle and repeat (training), batch, apply `batch_transform`, prefetch.

    With `partial_batches`, training batches each pass (reshuffled) on its own, the
    last batch of a pass holding the remainder, as a PyTorch DataLoader with
    `shuffle=True` does; otherwise the passes run on into each other in full batches.
    `shuffle_window`: shuffle with a buffer of this many examples (the order of `dataset`
    kept but for local swaps: a time-ordered stream) rather than the whole set.
    """
    buffer = min(size, shuffle_window) if shuffle_window else size
    if input_context is not None:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        batch_size = input_context.get_per_replica_batch_size(batch_size)
    if training and partial_batches:
        dataset = (
            dataset.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
            .batch(batch_size)
            .repeat()
        )
    else:
        if training:
            dataset = dataset.shuffle(buffer, seed=seed, reshuffle_each_iteration=True).repeat()
        dataset = dataset.batch(batch_size, drop_remainder=training)
    if batch_transform is not None:  # Vectorised over the batch: one call per batch.
        dataset = dataset.map(
            batch_transform, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )
    return dataset.prefetch(tf.data.AUTOTUNE)


def sasrec_dataset(
    sequences: Sequence[np.ndarray],
    max_length: int,
    batch_size: int,
    seed: Optional[int] = None,
    training: bool = True,
    input_context: Optional[tf.distribute.InputContext] = None,
    partial_batches: bool = False,
) -> tf.data.Dataset:
    """Batches of {"inputs": [B, max_length], "targets": [B, max_length]} int32 windows.

    Args:
      sequences: per-user item sequences (time order).
      max_length: window length L.
      batch_size: global batch size (divided per replica with `input_context`).
      seed: shuffle seed (each epoch is reshuffled, deterministically).
      training: shuffle, repeat forever and drop the last partial batch.
      input_context: from `tf.distribute`; shards by input pipeline.
      partial_batches: training keeps each pass's last partial batch (see `_finish`).
    """
    windows = sequence_windows(sequences, max_length)
    size = len(windows["inputs"])
    if size == 0:
        raise ValueError("No user has 2 or more items to train on.")
    dataset = tf.data.Dataset.from_tensor_slices(windows)
    return _finish(
        dataset, size, batch_size, seed, training, input_context, partial_batches=partial_batches
    )


def two_tower_examples(
    sequences: Sequence[np.ndarray],
    times: Optional[Sequence[np.ndarray]] = None,
    weights: Optional[Sequence[np.ndarray]] = None,
) -> Dict[str, np.ndarray]:
    """One example per interaction after a user's first: (user, position in the flat array).

    The history is gathered in-graph from the flat array (see `two_tower_dataset`). With
    `times` (per user, the time of each item), the examples are in time order (ties: by
    user) and "time" holds each one's time. With `weights` (per user, each event's weight),
    "flat_weight" holds them aligned with "flat".
    """
    lengths = np.array([len(s) for s in sequences])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    users = np.repeat(np.arange(len(sequences)), lengths)
    positions = np.arange(lengths.sum())
    keep = positions > starts[users]  # Skip each user's first item (no history).
    examples = {
        "flat": np.concatenate(
            [np.asarray(s, np.int32) for s in sequences] or [np.zeros(0, np.int32)]
        ),
        "user": users[keep].astype(np.int32),
        "position": positions[keep].astype(np.int64),
        "start": starts[users][keep].astype(np.int64),
    }
    if weights is not None:
        examples["flat_weight"] = np.concatenate(
            [np.asarray(w, np.float32) for w in weights] or [np.zeros(0, np.float32)]
        )
    if times is not None:
        time = np.concatenate([np.asarray(t, np.int64) for t in times] or [np.zeros(0, np.int64)])[
            keep
        ]
        order = np.argsort(time, kind="stable")
        examples = {
            key: (value if key.startswith("flat") else value[order])
            for key, value in examples.items()
        }
        examples["time"] = time[order]
    return examples


def two_tower_dataset(
    sequences: Sequence[np.ndarray],
    history_length: int,
    batch_size: int,
    seed: Optional[int] = None,
    training: bool = True,
    input_context: Optional[tf.distribute.InputContext] = None,
    partial_batches: bool = False,
    times: Optional[Sequence[np.ndarray]] = None,
    shuffle_window: Optional[int] = None,
    weights: Optional[Sequence[np.ndarray]] = None,
) -> tf.data.Dataset:
    """Batches of {"user": [B], "history": [B, history_length], "item": [B]} int32 examples
    (and "weight": [B] float32, each event's weight, with `weights`).

    The history of an interaction is the user's previous `history_length` items,
    left-padded. Arguments as in `sasrec_dataset`; `sequences[u]` is user u's items.
    With `times` (per user, its items' times) the stream runs in time order, shuffled only
    within windows of `shuffle_window` examples (each pass in time order again).
    """
    examples = two_tower_examples(sequences, times, weights)
    examples.pop("time", None)
    flat_weight = examples.pop("flat_weight", None)
    flat_weight = None if flat_weight is None else tf.constant(flat_weight)
    size = len(examples["user"])
    if size == 0:
        raise ValueError("No user has 2 or more items to train on.")
    flat = tf.constant(examples.pop("flat"))
    offsets = tf.range(-history_length, 0, dtype=tf.int64)[tf.newaxis, :]

    def gather(batch):
        # indices[b, j] = position - history_length + j; before the user's start is padding.
        indices = batch["position"][:, tf.newaxis] + offsets
        valid = indices >= batch["start"][:, tf.newaxis]
        history = tf.where(valid, tf.gather(flat, tf.maximum(indices, 0)), 0)
        features = {
            "user": batch["user"],
            "history": history,
            "item": tf.gather(flat, batch["position"]),
        }
        if flat_weight is not None:
            features["weight"] = tf.gather(flat_weight, batch["position"])
        return features

    # The small index records are shuffled and batched; histories are gathered per batch.
    return _finish(
        tf.data.Dataset.from_tensor_slices(examples),
        size,
        batch_size,
        seed,
        training,
        input_context,
        batch_transform=gather,
        partial_batches=partial_batches,
        shuffle_window=shuffle_window if times is not None else None,
    )


def day_store_dataset(
    store,
    batch_size: int,
    seed: Optional[int] = None,
    training: bool = True,
    input_context: Optional[tf.distribute.InputContext] = None,
    partial_batches: bool = False,
    shuffle_window: Optional[int] = None,
) -> tf.data.Dataset:
    """`two_tower_dataset`'s time-ordered batches, streamed from a `day_store.DayStore`.

    The store's TFRecord chunks are read day after day and split into examples, which go
    through the same shard, window shuffle, repeat and batching as `two_tower_dataset`
    with `times`: the same batches, in the same order, with memory bounded by the shuffle
    window and the read-ahead, not by the log.
    """
    from pipelines.data import day_store  # pylint: disable=import-outside-toplevel

    if store.num_examples == 0:
        raise ValueError("No user has 2 or more items to train on.")
    dataset = (
        tf.data.TFRecordDataset(store.example_files())
        .map(
            lambda record: day_store.parse_chunk(record, store.history_length, store.weighted),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        .unbatch()
    )
    return _finish(
        dataset,
        store.num_examples,
        batch_size,
        seed,
        training,
        input_context,
        partial_batches=partial_batches,
        shuffle_window=shuffle_window,
    )


def eval_queries(
    histories: List[np.ndarray], users: np.ndarray, length: int, batch_size: int = 1024
) -> tf.data.Dataset:
    """Evaluation inputs in order: {"user", "inputs" (= "history")} with the last `length` items."""
    padded = left_pad(histories, length)
    return tf.data.Dataset.from_tensor_slices(
        {"user": users.astype(np.int32), "inputs": padded, "history": padded}
    ).batch(batch_size)


def input_fn(builder: Callable[..., tf.data.Dataset], **kwargs):
    """An input function for `strategy.distribute_datasets_from_function`."""
    return lambda input_context: builder(input_context=input_context, **kwargs)
