r"""Keras 3 step time against catalog size: dense tables, or `keras_logq.SparseEmbedding`.

A two-tower step (user and item tables of `num_items` rows each, in-batch negatives with
the improved correction, `keras_logq.SampledSoftmax`, log Q of the Zipf law the items are
drawn from) trained through `model.train_on_batch` (Keras's jitted step) with each table
kind and optimizer:

- dense: `keras.layers.Embedding` and Keras's optimizer (`adagrad`, `adam`). On JAX a
  table's gradient is a dense array of the table's shape and the optimizer reads and
  writes every row and slot: the step grows with the catalog.
- sparse: `keras_logq.SparseEmbedding(optimizer=...)` in a `keras_logq.SparseUpdates`
  model: the rows of the batch only.

Predicted: a dense step moves about (2 + 2 x slots) x rows x dim x 4 bytes of table
state per table (the gradient written, the table and each slot read and written), so it
grows linearly with the catalog once that traffic passes the batch's own work; a sparse
step moves ids x dim x 4 bytes x the same factor, flat in the catalog. The variants of one
catalog run interleaved, round after round, in one process; the medians, each variant's
ratio to its own step at the smallest catalog, and sparse / dense are printed and written
(--output, JSON). Timings from one run only: compare within it.

Usage (JAX by default):
  python -m benchmarks.sparse_tables --catalogs=10000,1000000 --batch_size=1024 \
      --output=docs/results/sparse_tables_cpu.json
"""

import os
import platform
import time
from typing import Optional

os.environ.setdefault("KERAS_BACKEND", "jax")

import numpy as np  # noqa: E402  pylint: disable=wrong-import-position
from absl import app  # noqa: E402  pylint: disable=wrong-import-position
from absl import flags  # noqa: E402  pylint: disable=wrong-import-position

from benchmarks import records  # noqa: E402  pylint: disable=wrong-import-position
from pipelines import provenance  # noqa: E402  pylint: disable=wrong-import-position

FLAGS = flags.FLAGS
VARIANTS = ("dense_adagrad", "sparse_adagrad", "dense_adam", "sparse_adam")


def define_flags() -> None:
    flags.DEFINE_list("catalogs", ["10000", "1000000"], "Catalog sizes (items; as many users).")
    flags.DEFINE_integer("batch_size", 1024, "Batch size (in-batch negatives: batch - 1).")
    flags.DEFINE_integer("dim", 64, "Embedding dimension.")
    flags.DEFINE_integer("rounds", 3, "Interleaved rounds.")
    flags.DEFINE_integer("steps_per_round", 5, "Steps per round and variant.")
    flags.DEFINE_list("variants", list(VARIANTS), f"From {VARIANTS}.")
    flags.DEFINE_string("output", "", "Write the results here (JSON).")


def zipf_law(num_items: int) -> np.ndarray:
    """P(item i) proportional to 1 / (i + 1)."""
    weights = 1.0 / np.arange(1, num_items + 1)
    return weights / weights.sum()


def make_model(
    variant: str, num_items: int, dim: int, log_q: np.ndarray, num_users: Optional[int] = None
):
    """A compiled two-tower keras.Model of `variant` (VARIANTS); its user table has
    `num_users` rows (default: as many as the items)."""
    import keras  # pylint: disable=import-outside-toplevel
    from keras import ops  # pylint: disable=import-outside-toplevel

    import keras_logq  # pylint: disable=import-outside-toplevel

    kind, optimizer = variant.split("_")
    sparse = kind == "sparse"
    table_log_q = ops.convert_to_tensor(log_q.astype("float32"))

    def table(name, rows):
        init = keras.initializers.RandomUniform(-0.05, 0.05, seed=0)
        if sparse:
            return keras_logq.SparseEmbedding(
                rows,
                dim,
                optimizer=optimizer,
                learning_rate=0.05,
                embeddings_initializer=init,
                name=name,
            )
        return keras.layers.Embedding(rows, dim, embeddings_initializer=init, name=name)

    bases = (keras_logq.SparseUpdates, keras.Model) if sparse else (keras.Model,)

    class TwoTower(*bases):
        def __init__(self):
            super().__init__()
            self.users = table("users", num_users or num_items)
            self.items = table("items", num_items)
            self.loss_layer = keras_logq.SampledSoftmax(correction="improved")

        def call(self, x):
            return self.users(x["user"]), self.items(x["item"])

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            query, candidates = y_pred
            scores = ops.matmul(query, ops.transpose(candidates))
            labels = ops.eye(ops.shape(scores)[0])
            log_q = ops.take(table_log_q, x["item"], axis=0)
            return ops.mean(
                self.loss_layer(scores, labels, candidate_log_q=log_q, candidate_ids=x["item"])
            )

    model = TwoTower()
    dense_optimizer = {
        "adagrad": keras.optimizers.Adagrad(0.05),
        "adam": keras.optimizers.Adam(0.05),
    }[optimizer]
    # A sparse model has no other variable to train; its optimizer is Keras's formality.
    model.compile(optimizer=keras.optimizers.SGD(0.05) if sparse else dense_optimizer)
    return model


def time_catalog(num_items, batch_size, dim, rounds, steps_per_round, variants):
    """{variant: median seconds per step} at one catalog size, the variants interleaved."""
    rng = np.random.default_rng(0)
    law = zipf_law(num_items)
    batches = [
        {
            "user": rng.integers(0, num_items, batch_size).astype("int32"),
            "item": rng.choice(num_items, size=batch_size, p=law).astype("int32"),
        }
        for _ in range(4)
    ]
    models = {v: make_model(v, num_items, dim, np.log(law)) for v in variants}
    for model in models.values():  # Compile and warm up.
        for batch in batches[:2]:
            model.train_on_batch(batch)
    times = {v: [] for v in variants}
    for r in range(rounds):
        for v, model in models.items():
            start = time.perf_counter()
            for s in range(steps_per_round):
                model.train_on_batch(batches[(r + s) % len(batches)])
            times[v].append((time.perf_counter() - start) / steps_per_round)
    return {v: float(np.median(t)) for v, t in times.items()}


def main(argv) -> None:
    del argv
    import jax  # pylint: disable=import-outside-toplevel
    import keras  # pylint: disable=import-outside-toplevel

    catalogs = [int(c) for c in FLAGS.catalogs]
    bad = [v for v in FLAGS.variants if v not in VARIANTS]
    if bad:
        raise app.UsageError(f"--variants must be from {VARIANTS}; received {bad[0]!r}.")
    results = {}
    for num_items in catalogs:
        results[num_items] = time_catalog(
            num_items,
            FLAGS.batch_size,
            FLAGS.dim,
            FLAGS.rounds,
            FLAGS.steps_per_round,
            FLAGS.variants,
        )
        print(
            f"{num_items:>11,} items: "
            + ", ".join(f"{v} {1000 * s:.2f} ms" for v, s in results[num_items].items()),
            flush=True,
        )
    smallest = catalogs[0]
    print(
        f"\nms per step (batch {FLAGS.batch_size}, dim {FLAGS.dim}); x: / own step at "
        f"{smallest:,} items"
    )
    print("| items | " + " | ".join(FLAGS.variants) + " | sparse / dense (adagrad, adam) |")
    print("|---|" + "---|" * (len(FLAGS.variants) + 1))
    for num_items in catalogs:
        row = results[num_items]
        cells = [
            f"{1000 * row[v]:.2f} ({row[v] / results[smallest][v]:.2f}x)" for v in FLAGS.variants
        ]
        ratios = [
            f"{row['sparse_' + o] / row['dense_' + o]:.2f}"
            for o in ("adagrad", "adam")
            if f"sparse_{o}" in row and f"dense_{o}" in row
        ]
        print(f"| {num_items:,} | " + " | ".join(cells) + f" | {', '.join(ratios)} |")
    if FLAGS.output:
        record = {
            "benchmark": "sparse_tables",
            "git_revision": provenance.revision(),
            "backend": keras.backend.backend(),
            "device": str(jax.devices()[0]),
            "machine": platform.processor() or platform.machine(),
            "keras": keras.__version__,
            "jax": jax.__version__,
            "batch_size": FLAGS.batch_size,
            "dim": FLAGS.dim,
            "rounds": FLAGS.rounds,
            "steps_per_round": FLAGS.steps_per_round,
            "seconds_per_step": {str(n): row for n, row in results.items()},
        }
        records.write(FLAGS.output, record)


if __name__ == "__main__":
    define_flags()
    app.run(main)
