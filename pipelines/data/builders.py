"""tf.data builders: SASRec sequence windows and two-tower examples, per replica, prefetched.

Everything is built from in-memory arrays (or the day store's pre-batched records) as
tensors of rows, and every step works on whole tensors: a block of rows permuted at once,
batches sliced with `rebatch`, histories gathered per batch (no per-example element, no
Python generator in the training path). Training streams are shuffled with a seed, block by
block (`_finish`), repeated, batched with `drop_remainder=True` and prefetched;
`input_context` (from `distribute_datasets_from_function`) shards them and sets the
per-replica batch size.
"""

from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from pipelines.data.sequences import left_pad  # noqa: F401  (re-exported)
from pipelines.data.sequences import sequence_windows


def _shard_rows(
    dataset: tf.data.Dataset, input_context: tf.distribute.InputContext
) -> tf.data.Dataset:
    """The rows whose index in the stream is `input_pipeline_id` modulo the number of input
    pipelines (what `Dataset.shard` keeps of an unbatched stream), element by element."""
    count = input_context.num_input_pipelines
    mine = input_context.input_pipeline_id

    def keep(start, rows):
        n = tf.shape(tf.nest.flatten(rows)[0], out_type=tf.int64)[0]
        chosen = (start + tf.range(n, dtype=tf.int64)) % count == mine
        return start + n, tf.nest.map_structure(lambda t: tf.boolean_mask(t, chosen), rows)

    return dataset.scan(tf.constant(0, tf.int64), keep)


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
    """Shard, shuffle and repeat (training), batch, apply `batch_transform`, prefetch: every
    step on whole tensors of rows, none per example.

    `dataset`: elements that are dicts of [n, ...] tensors, the `size` examples as rows in
    stream order (one element holding them all, or chunks read from disk).

    Training shuffles a block at a time: the stream is cut into blocks of `shuffle_window`
    rows (the whole set without one), each block's rows are permuted (a stateless
    permutation seeded by `seed`, the pass and the block: each pass reshuffled, the same
    stream on every start, so a resumed run can skip to its step), and the rows are batched
    across blocks. A row moves only within its block: a time-ordered stream keeps its order
    but for local swaps. With `partial_batches`, each pass is batched on its own, the last
    batch of a pass holding the remainder, as a PyTorch DataLoader with `shuffle=True` does;
    otherwise the passes run on into each other in full batches. `input_context` keeps the
    input pipeline's rows (`_shard_rows`) and sets the per-replica batch size.
    """
    if input_context is not None:
        count, mine = input_context.num_input_pipelines, input_context.input_pipeline_id
        if training and not len(range(mine, size, count)):  # Its passes would yield nothing.
            raise ValueError(
                f"{size} training examples leave input pipeline {mine} of {count} none; "
                "train on more data or fewer workers."
            )
        dataset = _shard_rows(dataset, input_context)
        batch_size = input_context.get_per_replica_batch_size(batch_size)
    if not training:
        dataset = dataset.rebatch(batch_size)
    else:
        window = min(size, shuffle_window) if shuffle_window else size
        base = int(np.random.SeedSequence(seed).generate_state(1)[0] >> 1)  # A random one for None.

        def permuted(pass_number, block_number, block):
            rows = tf.shape(tf.nest.flatten(block)[0])[0]
            order = tf.random.experimental.stateless_shuffle(
                tf.range(rows),
                seed=tf.stack(
                    [tf.constant(base, tf.int64), pass_number * (1 << 31) + block_number]
                ),
                alg="philox",  # Fixed: "auto_select" may change with TensorFlow's version.
            )
            return tf.nest.map_structure(lambda t: tf.gather(t, order), block)

        def one_pass(pass_number):
            blocks = dataset.rebatch(window).enumerate()
            shuffled = blocks.map(
                lambda number, block: permuted(pass_number, number, block),
                num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True,
            )
            return shuffled.rebatch(batch_size) if partial_batches else shuffled

        dataset = tf.data.Dataset.range(1 << 62).flat_map(one_pass)
        if not partial_batches:
            dataset = dataset.rebatch(batch_size, drop_remainder=True)
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
    dataset = tf.data.Dataset.from_tensors(windows)
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
        tf.data.Dataset.from_tensors(examples),
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

    The store's TFRecord chunks (pre-batched rows) are read day after day and go through the
    same shard, block shuffle, repeat and batching as `two_tower_dataset` with `times`, on
    whole chunks and blocks: the same batches, in the same order, with memory bounded by the
    shuffle window and the read-ahead, not by the log.

    A damaged store is refused, never trained a day short (tf.data's reader checks each
    record's CRCs, not a file's count): each day's file is checked against the manifest
    before the dataset is made (`DayStore.verified_files`), and its parsed examples are
    counted as it is read, against the manifest's count of the day (`DayStore.day_counts`).

    Raises:
      DataError: a day's file missing or too short for its examples, or a manifest whose
        counts disagree (here, before a record is read).
      tf.errors.InvalidArgumentError: while iterating, naming a day's file that holds fewer
        or more examples than the manifest counts (one cut at a record boundary, say).
    """
    from pipelines.data import day_store  # pylint: disable=import-outside-toplevel

    if store.num_examples == 0:
        raise ValueError("No user has 2 or more items to train on.")
    paths, counts = store.verified_files(), store.day_counts()
    dataset = _counted_chunks(
        paths,
        counts,
        store.days,
        lambda record: day_store.parse_chunk(record, store.history_length, store.weighted),
        2 + store.history_length + int(store.weighted),
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


def _text(*parts) -> tf.Tensor:
    """A scalar string of `parts` (strings, string tensors and integer tensors), joined."""
    return tf.strings.join(
        [
            part if isinstance(part, str) or part.dtype == tf.string else tf.strings.as_string(part)
            for part in parts
        ]
    )


def _counted_chunks(
    paths: List[str],
    counts: np.ndarray,
    days: np.ndarray,
    parse: Callable[[tf.Tensor], Dict[str, tf.Tensor]],
    columns: int,
) -> tf.data.Dataset:
    """The parsed chunks of the day files `paths`, in order, each file's examples counted as
    they are read: a file that ends with other than its day's count of `counts` (the day
    `days` names) stops the stream with an InvalidArgumentError naming it, the count read and
    the count expected. Each file is followed by an end marker (an empty chunk of `columns`
    int32 columns) which the count checks and then drops."""
    end = tf.io.serialize_tensor(tf.zeros([0, columns], tf.int32))
    files = tf.data.Dataset.from_tensor_slices(
        (
            tf.constant(paths, tf.string),
            tf.constant(np.asarray(counts, np.int64)),
            tf.constant(np.asarray(days, np.int64)),
        )
    )

    def day_records(path, count, day):
        records = tf.data.TFRecordDataset(path).map(lambda record: (record, False))
        marked = records.concatenate(tf.data.Dataset.from_tensors((end, True)))
        return marked.map(lambda record, last: (record, last, path, count, day))

    def check(rows, element):
        features, last, path, count, day = element
        rows += tf.shape(features["item"], out_type=tf.int64)[0]
        over = rows <= count
        whole = tf.logical_or(tf.logical_not(last), tf.equal(rows, count))
        # The messages are formatted only when a check fails (tf.cond): formatting them for
        # every chunk tripled the stream's time.
        too_many = tf.debugging.Assert(
            over,
            [
                tf.cond(
                    over,
                    lambda: tf.constant(""),
                    lambda: _text(
                        path,
                        ": the training examples of day ",
                        day,
                        " reach ",
                        rows,
                        ", past the ",
                        count,
                        " the manifest counts: the store is damaged; build it again.",
                    ),
                )
            ],
        )
        too_few = tf.debugging.Assert(
            whole,
            [
                tf.cond(
                    whole,
                    lambda: tf.constant(""),
                    lambda: _text(
                        path,
                        ": ",
                        rows,
                        " training examples, where the manifest counts ",
                        count,
                        " on day ",
                        day,
                        ": the file is cut short; build the store again.",
                    ),
                )
            ],
        )
        with tf.control_dependencies([too_many, too_few]):
            rows = tf.where(last, tf.constant(0, tf.int64), rows)
        return rows, (features, last)

    return (
        files.flat_map(day_records)
        .map(
            lambda record, last, path, count, day: (parse(record), last, path, count, day),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
        .scan(tf.constant(0, tf.int64), check)
        .filter(lambda features, last: tf.logical_not(last))
        .map(lambda features, last: features)
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
