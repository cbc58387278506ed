r"""Can the CPU cores of one GPU machine feed its training step? tf.data throughput of every
builder per CPU core, against the examples a GPU's step consumes.

Each builder of `pipelines.data.builders` streams synthetic training data of the sizes users
run, and this times iterating it alone, in this process pinned to `--cores` CPU cores with
TensorFlow's and tf.data's threads limited to them (examples per second per core):

- `sasrec`: SASRec windows (`sasrec_dataset`) at the paper's configuration (sequence 200,
  batch 128);
- `two_tower`: the in-memory two-tower stream in time order (`two_tower_dataset` with
  `times`, a 100k-example shuffle window, history 20, batch 8192);
- `day_store`: the next-day job's stream (`day_store_dataset`) over pre-batched TFRecord
  chunks written as the day store writes them (history 20, batch 8192);
- `day_store_numpy`: the same chunks read without TensorFlow (`DayStore.chunks()`), as the
  Keras 3 next-day job on JAX reads them (in time order, unshuffled).

Beside each, the same examples through a per-example tf.data pipeline (`from_tensor_slices`,
`shuffle`, `batch`: the builders before they were batch-first), in the same run. The
consumption figures are a GPU step's examples per second, measured on an H200 (JAX, Keras
3): SASRec 67,000 windows/s at the paper's configuration, the two-tower 4.3M examples/s at
batch 8192 (1.9 ms a step). The table says how many cores feed that step, and the ratio of
`--gpu_cores` cores' throughput to it (target: at least 400k two-tower examples/s per core,
so that 16 cores feed 6M/s).

Usage:
  python -m benchmarks.input_pipeline [--cores=1] [--output=docs/results/input_pipeline_cpu.json]
"""

import os
import platform
import tempfile
import time

from benchmarks import records
from pipelines import provenance

FLAGS = None  # absl's, set in the __main__ block.


def define_flags() -> None:
    from absl import flags  # pylint: disable=import-outside-toplevel

    flags.DEFINE_integer("cores", 1, "CPU cores the builders run on (pinned).", lower_bound=1)
    flags.DEFINE_integer("users", 200_000, "Synthetic users (sequences).", lower_bound=100)
    flags.DEFINE_integer("items", 1_000_000, "Synthetic catalog size.", lower_bound=100)
    flags.DEFINE_float("seconds", 8.0, "Seconds timed per figure.", lower_bound=0.5)
    flags.DEFINE_float(
        "sasrec_consumed", 67_000, "SASRec windows a GPU step consumes per second (H200)."
    )
    flags.DEFINE_float(
        "two_tower_consumed", 8192 / 1.9e-3, "Two-tower examples a GPU step consumes per second."
    )
    flags.DEFINE_integer("gpu_cores", 16, "CPU cores of one GPU machine (H100/H200: 16).")
    flags.DEFINE_bool("per_example", True, "Also time the per-example pipelines (before).")
    flags.DEFINE_string("output", "", "Write the figures as JSON here.")


def _pin(cores: int) -> None:
    """Pins every thread of this process (those TensorFlow's import started included; the
    ones started later inherit it) to the first `cores` of its CPUs."""
    available = sorted(os.sched_getaffinity(0))
    if cores > len(available):
        raise ValueError(f"--cores={cores}, but this process may run on {len(available)} cores.")
    for thread in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(thread), set(available[:cores]))


def rate(dataset, seconds: float) -> float:
    """Examples per second of iterating `dataset` for about `seconds` (after a warm-up)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    iterator = iter(dataset)
    for _ in range(3):
        next(iterator)
    started, examples = time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        examples += int(tf.nest.flatten(next(iterator))[0].shape[0])
    return examples / (time.perf_counter() - started)


def synthetic(users: int, items: int, seed: int = 0):
    """(sequences, times): per user, 2 to 60 items of a Zipf-like catalog, in time order."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 61, users)
    total = int(lengths.sum())
    flat = np.minimum(rng.zipf(1.2, total), items).astype(np.int32)
    stamps = rng.integers(0, 14 * 86_400, total)
    bounds = np.cumsum(lengths)[:-1]
    sequences = np.split(flat, bounds)
    times = [np.sort(t) for t in np.split(stamps, bounds)]
    return sequences, times


def write_store(directory: str, sequences, times, history_length: int):
    """A `day_store.DayStore`-like object over TFRecord chunks of the two-tower examples of
    `sequences` in time order, written as the day store writes them."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    from pipelines.data import builders  # pylint: disable=import-outside-toplevel
    from pipelines.data import day_store  # pylint: disable=import-outside-toplevel

    examples = builders.two_tower_examples(sequences, times)
    flat, position, start = examples["flat"], examples["position"], examples["start"]
    indices = position[:, None] + np.arange(-history_length, 0)[None, :]
    history = np.where(indices >= start[:, None], flat[np.maximum(indices, 0)], 0)
    packed = np.concatenate(
        [examples["user"][:, None], flat[position][:, None], history], axis=1
    ).astype(np.int32)
    store = day_store.DayStore(
        directory,
        num_examples=len(packed),
        history_length=history_length,
        weighted=False,
        days=np.array([0]),
        day_ends=np.array([len(packed)]),
        item_counts=np.zeros(0, np.int64),
    )
    day_store.write_records(
        store.example_files()[0],
        (
            day_store.encode_int32_tensor(packed[first : first + day_store.CHUNK_ROWS])
            for first in range(0, len(packed), day_store.CHUNK_ROWS)
        ),
    )
    return store, packed


def numpy_rate(store, seconds: float) -> float:
    """Examples per second of `DayStore.chunks()`: the store read without TensorFlow, as a
    Keras 3 job on JAX reads it (`examples/keras_next_day.py`), pass after pass."""
    started, examples = time.perf_counter(), 0
    while time.perf_counter() - started < seconds:
        for chunk in store.chunks():
            examples += len(chunk["user"])
            if time.perf_counter() - started >= seconds:
                break
    return examples / (time.perf_counter() - started)


def per_example(rows, batch_size: int, window: int):
    """The same rows through tf.data one example at a time (the builders before)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return (
        tf.data.Dataset.from_tensor_slices(rows)
        .shuffle(window, seed=0)
        .repeat()
        .batch(batch_size, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


def measure() -> dict:
    import numpy as np  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from pipelines.data import builders  # pylint: disable=import-outside-toplevel

    tf.config.threading.set_inter_op_parallelism_threads(FLAGS.cores)
    tf.config.threading.set_intra_op_parallelism_threads(FLAGS.cores)
    options = tf.data.Options()
    options.threading.private_threadpool_size = FLAGS.cores

    def timed(dataset):
        return rate(dataset.with_options(options), FLAGS.seconds)

    sequences, times = synthetic(FLAGS.users, FLAGS.items)
    rows = {}
    with tempfile.TemporaryDirectory() as directory:
        store, packed = write_store(directory, sequences, times, 20)
        windows = builders.sequence_windows(sequences, 200)
        cases = [
            (
                "sasrec",
                FLAGS.sasrec_consumed,
                lambda: builders.sasrec_dataset(sequences, 200, 128, seed=0),
                lambda: per_example(windows, 128, len(windows["inputs"])),
            ),
            (
                "two_tower",
                FLAGS.two_tower_consumed,
                lambda: builders.two_tower_dataset(
                    sequences, 20, 8192, seed=0, times=times, shuffle_window=100_000
                ),
                lambda: per_example(
                    {"user": packed[:, 0], "item": packed[:, 1], "history": packed[:, 2:]},
                    8192,
                    100_000,
                ),
            ),
            (
                "day_store",
                FLAGS.two_tower_consumed,
                lambda: builders.day_store_dataset(store, 8192, seed=0, shuffle_window=100_000),
                None,
            ),
            ("day_store_numpy", FLAGS.two_tower_consumed, None, None),
        ]
        for name, consumed, build, before in cases:
            if build is None:
                produced = numpy_rate(store, FLAGS.seconds)
            else:
                produced = timed(build())
            row = {
                "examples_per_s": round(produced),
                "examples_per_s_per_core": round(produced / FLAGS.cores),
                "gpu_consumes_per_s": round(consumed),
                "cores_to_feed_the_gpu": round(consumed / (produced / FLAGS.cores), 2),
                "gpu_machine_ratio": round(FLAGS.gpu_cores * produced / FLAGS.cores / consumed, 2),
            }
            if before is not None and FLAGS.per_example:
                row["per_example_examples_per_s"] = round(timed(before()))
                row["speedup_over_per_example"] = round(
                    produced / row["per_example_examples_per_s"], 1
                )
            rows[name] = row
            print(_line(name, row), flush=True)
    return {
        "rows": rows,
        "examples": int(len(packed)),
        "windows": int(len(windows["inputs"])),
        "numpy": np.__version__,
        "tensorflow": tf.__version__,
    }


HEADER = (
    "| builder | examples/s per core | per-example pipeline (before) | GPU step consumes/s | "
    "cores to feed it | 16 cores / GPU step |\n|---|---|---|---|---|---|"
)


def _line(name: str, row: dict) -> str:
    before = row.get("per_example_examples_per_s")
    before = f"{before:,} ({row['speedup_over_per_example']}x)" if before else "-"
    return (
        f"| {name} | {row['examples_per_s_per_core']:,} | {before} | "
        f"{row['gpu_consumes_per_s']:,} | {row['cores_to_feed_the_gpu']} | "
        f"{row['gpu_machine_ratio']}x |"
    )


def main(argv) -> None:
    del argv
    _pin(FLAGS.cores)
    print(
        f"{FLAGS.users:,} synthetic users, {FLAGS.items:,} items; pinned to {FLAGS.cores} of "
        f"{os.cpu_count()} CPU cores ({platform.processor() or platform.machine()}); one run, "
        f"{FLAGS.seconds:g} s a figure.\n"
    )
    print(HEADER)
    result = measure()
    record = {
        "benchmark": "input_pipeline",
        "command": "python -m benchmarks.input_pipeline "
        + " ".join(f"--{name}={FLAGS[name].value}" for name in ("cores", "users", "items")),
        "git_revision": provenance.revision(),
        "cores": FLAGS.cores,
        "machine_cpus": os.cpu_count(),
        **result,
    }
    if FLAGS.output:
        records.write(FLAGS.output, record)


if __name__ == "__main__":
    from absl import app  # pylint: disable=import-outside-toplevel
    from absl import flags as absl_flags  # pylint: disable=import-outside-toplevel

    define_flags()
    FLAGS = absl_flags.FLAGS
    app.run(main)
