r"""Step time of a two-tower training step: tfrs.tasks.Retrieval against LogQRetrieval.

One compiled training step (forward, backward, Adam or `--optimizer=adagrad` update) of a two-tower
model (100k users, 100k items, dim 64, in-batch negatives, accidental hits
removed) is timed for every cell of the grid

  batch size x id kind (int, string) x where Q comes from x correction,

each against the matching TFRS step: `tfrs.tasks.Retrieval` without a
correction for "none"; with `candidate_sampling_probability` read from the same
source (the column's given Q; a `StaticFrequency` lookup; a streaming
estimator updated, then read, in the step) for the corrections. The variants
of one (batch size, id kind) run interleaved in one process, round after
round; the ratios of median step times are printed (target: <= 1.05x).
Timings from one run only: compare within a run.

`--memory` runs one process per variant at the largest batch size (where TFRS's
step alone needs 17 GB, so the variants cannot share one process) and reports
its peak resident memory and median step time. TFRS's tutorial flows are timed
by `benchmarks.tutorial_flow`.

Usage:
  python -m benchmarks.loss_overhead --batch_sizes=8192 --rounds=3 --steps_per_round=5
  python -m benchmarks.loss_overhead          # the grid up to batch 8192
  python -m benchmarks.loss_overhead --memory --batch_sizes=16384
"""

from typing import Callable, Dict, List, Optional, Tuple

import tfrs_logq  # noqa: F401  First: sets up tf.keras (Keras 2) and ScaNN before TensorFlow.

# isort: split
import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs
from absl import app
from absl import flags

from benchmarks import processes
from benchmarks.steps import time_interleaved
from benchmarks.steps import zipf_batches
from tfrs_logq import frequency
from tfrs_logq import losses
from tfrs_logq.tasks import LogQRetrieval

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_items", 100_000, "Item (and user) vocabulary size.", lower_bound=2)
flags.DEFINE_list(
    "batch_sizes",
    ["256", "1024", "4096", "8192"],
    "Examples per step. At 16384 TFRS's step alone peaks at 17 GB: a process "
    "holding every variant was OOM-killed at 24 GB (use --memory there).",
)
flags.DEFINE_list("ids", ["int", "string"], "Id kinds: int, string.")
flags.DEFINE_list(
    "sources",
    ["column", "static", "count_min", "hashed"],
    "Where Q comes from: the column's given probability, a StaticFrequency, or a "
    "streaming estimator (count_min, hashed).",
)
flags.DEFINE_list("corrections", list(losses.CORRECTIONS), "Corrections to time.")
flags.DEFINE_integer("dim", 64, "Embedding dimension.", lower_bound=1)
flags.DEFINE_integer(
    "rounds", 3, "Interleaved rounds; the median over rounds is reported.", lower_bound=1
)
flags.DEFINE_integer("steps_per_round", 5, "Steps timed per variant and round.", lower_bound=1)
flags.DEFINE_integer("seed", 0, "Seed of the data and the weights.")
flags.DEFINE_enum(
    "optimizer",
    "adam",
    ["adam", "adagrad"],
    "The grid's optimizer: Adam(1e-3), whose dense update of every table row "
    "dominates a large catalog's step, or Adagrad(0.1), which leaves the loss's "
    "own cost to compare.",
)
flags.DEFINE_bool(
    "memory",
    False,
    "Peak memory and step time per variant at the largest batch size, one process each.",
)
flags.DEFINE_string(
    "memory_variant",
    "",
    "Internal: run this variant alone and print its peak memory and median step time.",
)

TFRS_NONE = "tfrs Retrieval"


class Towers(tf.keras.Model):
    """User id -> embedding -> dense; item id -> embedding -> dense (string ids: a lookup first)."""

    def __init__(self, num_ids: int, dim: int, seed: int, vocabulary: Optional[List[str]] = None):
        super().__init__()
        init = tf.keras.initializers.RandomNormal(stddev=0.05, seed=seed)

        def tower():
            layers = []
            if vocabulary is not None:
                layers.append(tf.keras.layers.StringLookup(vocabulary=vocabulary, mask_token=None))
                size = len(vocabulary) + 1
            else:
                size = num_ids
            layers.append(tf.keras.layers.Embedding(size, dim, embeddings_initializer=init))
            layers.append(tf.keras.layers.Dense(dim))
            return tf.keras.Sequential(layers)

        self.user_tower, self.item_tower = tower(), tower()


def make_source(kind: str, q: np.ndarray, vocabulary: Optional[List[str]]):
    """A fresh probability source of `kind` ("static", "count_min", "hashed")."""
    if kind == "static":
        return frequency.StaticFrequency(q.astype(np.float32), vocabulary=vocabulary)
    if kind == "count_min":
        return frequency.CountMinSketchEstimator(seed=1)
    return frequency.HashedFrequencyEstimator(seed=1)


def make_step(
    towers: tf.keras.Model, task, optimizer, probability_fn: Optional[Callable]
) -> Callable:
    """A compiled step: the task's loss on in-batch negatives, gradients, update.

    `probability_fn(items, given)` returns the Q passed to the task as
    `candidate_sampling_probability` (None: none).
    """

    @tf.function
    def step(users, items, given):
        probability = None if probability_fn is None else probability_fn(items, given)
        with tf.GradientTape() as tape:
            loss = task(
                towers.user_tower(users),
                towers.item_tower(items),
                candidate_sampling_probability=probability,
                candidate_ids=items,
                compute_metrics=False,
            )
        variables = towers.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return step


def variants(
    q: np.ndarray, vocabulary: Optional[List[str]], sources, corrections
) -> Dict[str, Tuple[Callable, Optional[str]]]:
    """name -> (factory of (task, probability_fn), the TFRS variant it is compared with)."""
    out: Dict[str, Tuple[Callable, Optional[str]]] = {
        TFRS_NONE: (lambda: (tfrs.tasks.Retrieval(remove_accidental_hits=True), None), None)
    }
    for source in sources:

        def tfrs_factory(source=source):
            if source == "column":
                return tfrs.tasks.Retrieval(remove_accidental_hits=True), lambda _, g: g
            estimator = make_source(source, q, vocabulary)

            def probability(items, _):
                if estimator.streaming:
                    estimator.update(items)
                return tf.exp(estimator.log_q(items))

            return tfrs.tasks.Retrieval(remove_accidental_hits=True), probability

        out[f"tfrs Retrieval, Q: {source}"] = (tfrs_factory, None)
    for correction in corrections:
        for source in sources if correction != "none" else [None]:

            def ours_factory(source=source, correction=correction):
                if source is None:
                    return LogQRetrieval(correction="none", remove_accidental_hits=True), None
                if source == "column":
                    return (
                        LogQRetrieval(correction=correction, remove_accidental_hits=True),
                        lambda _, g: g,
                    )
                return (
                    LogQRetrieval(
                        correction=correction,
                        remove_accidental_hits=True,
                        frequency=make_source(source, q, vocabulary),
                    ),
                    None,
                )

            name = f"LogQRetrieval {correction}" + ("" if source is None else f", Q: {source}")
            out[name] = (
                ours_factory,
                TFRS_NONE if source is None else f"tfrs Retrieval, Q: {source}",
            )
    return out


def build(factory, num_ids, vocabulary):
    """The compiled step of one variant, on fresh towers."""
    towers = Towers(num_ids, FLAGS.dim, FLAGS.seed, vocabulary)
    task, probability_fn = factory()
    optimizer = (
        tf.keras.optimizers.Adam(1e-3)
        if FLAGS.optimizer == "adam"
        else tf.keras.optimizers.Adagrad(0.1)
    )
    return make_step(towers, task, optimizer, probability_fn)


def cell_batches(batch_size: int, ids: str):
    """8 Zipf batches of (users, items, Q of the items), the item probabilities, and the
    string vocabulary (None for int ids)."""
    batches, q = zipf_batches(FLAGS.num_items, batch_size, 8, FLAGS.seed)
    vocabulary = None
    if ids == "string":
        vocabulary = [f"item-{i}" for i in range(FLAGS.num_items)]
        table = tf.constant(vocabulary)
        batches = [
            (tf.gather(table, users), tf.gather(table, items), p) for users, items, p in batches
        ]
    return batches, q, vocabulary


def run_grid() -> None:
    ratios: Dict[Tuple[str, str], Dict[int, float]] = {}
    for ids in FLAGS.ids:
        for batch_size in [int(b) for b in FLAGS.batch_sizes]:
            batches, q, vocabulary = cell_batches(batch_size, ids)
            table = variants(q, vocabulary, FLAGS.sources, FLAGS.corrections)
            steps = {
                name: build(factory, FLAGS.num_items, vocabulary)
                for name, (factory, _) in table.items()
            }
            medians = time_interleaved(steps, batches, FLAGS.rounds, FLAGS.steps_per_round)
            print(
                f"\n{ids} ids, batch {batch_size}:\n\n"
                "| variant | ms/step | vs TFRS |\n|---|---|---|"
            )
            for name, (_, reference) in table.items():
                ratio = "" if reference is None else f"{medians[name] / medians[reference]:.3f}x"
                print(f"| {name} | {medians[name] * 1e3:.1f} | {ratio} |")
                if reference is not None:
                    ratios.setdefault((ids, name), {})[batch_size] = (
                        medians[name] / medians[reference]
                    )
    sizes = [int(b) for b in FLAGS.batch_sizes]
    print("\nLogQRetrieval / the matching TFRS step (target <= 1.05x):\n")
    print("| ids | variant | " + " | ".join(f"batch {b}" for b in sizes) + " |")
    print("|---|---|" + "---|" * len(sizes))
    for (ids, name), by_size in ratios.items():
        print(
            f"| {ids} | {name} | "
            + " | ".join(f"{by_size[b]:.3f}x" if b in by_size else "" for b in sizes)
            + " |"
        )
    worst = max(r for by_size in ratios.values() for r in by_size.values())
    print(f"\nWorst ratio: {worst:.3f}x")


def run_memory() -> None:
    batch_size = max(int(b) for b in FLAGS.batch_sizes)
    # Each variant with Q per column, and the TFRS variant it is compared with (the column
    # source reads no frequencies, so no data is needed to list them).
    names = {
        name: reference
        for name, (_, reference) in variants(
            None, None, ["column"], list(losses.CORRECTIONS)
        ).items()
    }
    steps = FLAGS.rounds * FLAGS.steps_per_round
    print(
        f"One process per variant, batch {batch_size}, int ids ({FLAGS.num_items} items, "
        f"dim {FLAGS.dim}): peak resident memory, and the median of {steps} steps after the "
        "first (processes run one after another, so the times are less comparable than "
        "the interleaved grid's).\n"
    )
    print("| variant | peak RSS (MiB) | ms/step | vs TFRS |\n|---|---|---|---|")
    times = {}
    for name, reference in names.items():
        alone = processes.run_alone(
            "benchmarks.loss_overhead",
            [
                f"--memory_variant={name}",
                f"--batch_sizes={batch_size}",
                "--ids=int",
                f"--num_items={FLAGS.num_items}",
                f"--dim={FLAGS.dim}",
                f"--rounds={FLAGS.rounds}",
                f"--steps_per_round={FLAGS.steps_per_round}",
            ],
        )
        times[name] = alone.seconds
        ratio = "" if reference is None else f"{times[name] / times[reference]:.3f}x"
        print(f"| {name} | {alone.peak_mib:.0f} | {times[name] * 1e3:.1f} | {ratio} |", flush=True)


def run_memory_variant() -> None:
    """Prints this variant's peak RSS and median step time at the batch size (`processes`)."""
    batch_size = int(FLAGS.batch_sizes[0])
    batches, q, vocabulary = cell_batches(batch_size, "int")
    factory, _ = variants(q, vocabulary, ["column"], list(losses.CORRECTIONS))[FLAGS.memory_variant]
    step = build(factory, FLAGS.num_items, vocabulary)
    processes.report(processes.time_alone(step, batches, FLAGS.rounds * FLAGS.steps_per_round))


def main(argv):
    del argv
    tf.get_logger().setLevel("ERROR")  # One tf.function per variant is expected, not retracing.
    tf.keras.utils.set_random_seed(FLAGS.seed)
    if FLAGS.memory_variant:
        run_memory_variant()
    elif FLAGS.memory:
        run_memory()
    else:
        run_grid()


if __name__ == "__main__":
    app.run(main)
