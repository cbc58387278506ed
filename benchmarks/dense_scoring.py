"""BCE / gBCE negatives: gather their embeddings, or score the whole table and gather.

`RetrievalObjective` scores each example's sampled negatives (loss="bce" / "gbce")
one of two ways:
- gather: look up the n x k negatives' embeddings and take n x k dot products;
- whole table: one [n, dim] x [dim, |D|] matmul, then gather each row's k columns.
The second does |D| / k times the multiply-adds but no n x k x dim gather (nor its
scattered gradient); `objective.scores_whole_table` picks it when
|D| <= DENSE_SCORING_RATIO * k. This times one training step (loss, gradients for
the queries and the item table, an Adam update) both ways for each catalog size and
k, interleaved in one process, and prints the ratio and the switch's choice. Timings
from one run only.
With --rounds=3 --steps_per_round=3 on 2 CPU cores it took about 12 minutes (the whole-table
steps on 100,000 items, about 10 s each, dominate) and the switch picked the faster path in all
12 settings (ratio 16; the crossover lay between 13 and 53 items per negative on 3,416 items).

Usage:
  python -m benchmarks.dense_scoring
  python -m benchmarks.dense_scoring --catalogs=3416,100000 --negatives=16,256
"""

import contextlib
import math

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags

from benchmarks.steps import time_interleaved
from tfrs_logq.models import objective as objective_lib

FLAGS = flags.FLAGS
flags.DEFINE_list(
    "catalogs", ["3416", "20000", "100000"], "Catalog sizes |D| (3416: MovieLens-1M)."
)
flags.DEFINE_list("negatives", ["1", "16", "64", "256"], "Negatives per example, k.")
flags.DEFINE_integer(
    "examples",
    6400,
    "Examples (scored positions) per step; 6400 is the cpu profile's 128 sequences x 50.",
    lower_bound=1,
)
flags.DEFINE_integer("dim", 64, "Embedding dimension.", lower_bound=1)
flags.DEFINE_integer(
    "rounds", 5, "Interleaved rounds; the median over rounds is reported.", lower_bound=1
)
flags.DEFINE_integer("steps_per_round", 5, "Steps timed per variant and round.", lower_bound=1)
flags.DEFINE_integer("seed", 0, "Seed of the data, the weights and the samplers.")


@contextlib.contextmanager
def _scoring_ratio(ratio: float):
    """Sets objective.DENSE_SCORING_RATIO while a step is traced."""
    saved = objective_lib.DENSE_SCORING_RATIO
    objective_lib.DENSE_SCORING_RATIO = ratio
    try:
        yield
    finally:
        objective_lib.DENSE_SCORING_RATIO = saved


def make_step(num_items: int, num_negatives: int, dim: int, seed: int):
    """A compiled bce step over a [num_items + 1, dim] table (the path is fixed when traced)."""
    rng = np.random.default_rng(seed)
    table = tf.Variable(rng.normal(0.0, 0.05, [num_items + 1, dim]).astype(np.float32))
    objective = objective_lib.make_objective(
        num_items, loss="bce", num_negatives=num_negatives, seed=seed
    )
    optimizer = tf.keras.optimizers.Adam(1e-3)

    @tf.function
    def step(queries, positive_ids):
        with tf.GradientTape() as tape:
            tape.watch(queries)
            loss = objective(
                queries,
                positive_ids,
                item_embedding_fn=lambda ids: tf.gather(table, ids),
                all_item_embeddings=lambda: table,
            )
        query_gradient, table_gradient = tape.gradient(loss, [queries, table])
        optimizer.apply_gradients([(table_gradient, table)])
        # The queries' gradient is part of a real step's backward pass: keep it.
        return loss + 0.0 * tf.reduce_sum(query_gradient)

    return step


def main(argv):
    del argv
    tf.get_logger().setLevel("ERROR")
    catalogs = [int(c) for c in FLAGS.catalogs]
    negatives = [int(k) for k in FLAGS.negatives]
    for name, values in (("catalogs", catalogs), ("negatives", negatives)):
        if not values or min(values) < 1:
            raise app.UsageError(f"--{name} must be positive integers; received {values}.")
    rng = np.random.default_rng(FLAGS.seed)
    print(
        f"bce step: {FLAGS.examples} examples, dim {FLAGS.dim}, {FLAGS.rounds} interleaved "
        f"rounds of {FLAGS.steps_per_round} steps; DENSE_SCORING_RATIO = "
        f"{objective_lib.DENSE_SCORING_RATIO}."
    )
    rows = []
    for num_items in catalogs:
        batches = [
            (
                tf.constant(rng.normal(size=[FLAGS.examples, FLAGS.dim]).astype(np.float32)),
                tf.constant(rng.integers(1, num_items + 1, FLAGS.examples)),
            )
            for _ in range(4)
        ]
        for k in negatives:
            if k >= num_items:
                continue
            steps = {}
            for path, ratio in (("gather", 0.0), ("whole table", math.inf)):
                with _scoring_ratio(ratio):
                    steps[path] = make_step(num_items, k, FLAGS.dim, FLAGS.seed)
                    steps[path](*batches[0])  # Traced here, under this ratio.
            medians = time_interleaved(steps, batches, FLAGS.rounds, FLAGS.steps_per_round)
            rows.append(
                (
                    num_items,
                    k,
                    medians["gather"],
                    medians["whole table"],
                    objective_lib.scores_whole_table(num_items, k),
                )
            )

    print(
        "\n| items | k | items / k | gather ms | whole table ms | whole / gather | "
        "switch picks | faster |\n|---|---|---|---|---|---|---|---|"
    )
    path = {True: "whole table", False: "gather"}
    for num_items, k, gather, whole, picks_whole in rows:
        print(
            f"| {num_items} | {k} | {num_items / k:.0f} | {gather * 1e3:.1f} | "
            f"{whole * 1e3:.1f} | {whole / gather:.2f}x | {path[picks_whole]} | "
            f"{path[whole < gather]} |"
        )
    wrong = [(n, k) for n, k, gather, whole, picks_whole in rows if picks_whole != (whole < gather)]
    print(
        f"\nThe switch picks the slower path in {len(wrong)} of {len(rows)} settings"
        + (f": {', '.join(f'|D|={n} k={k}' for n, k in wrong)}." if wrong else ".")
    )


if __name__ == "__main__":
    app.run(main)
