r"""Step time against catalog size: Adam on every variable, or Adagrad on the embedding tables.

A two-tower step (user and item embedding towers of `num_items` rows each, dim 64,
`LogQRetrieval(correction="improved")` with Q per column, in-batch negatives, accidental
hits masked) is timed at each catalog size with the two optimizers that
`--table_optimizer` selects (`pipelines.experiment.make_optimizer`):

- adam: Keras's Adam on every variable. Its update decays both moments of every row of
  every table at every step, so the step grows with the catalog.
- adagrad: TFRS's CompositeOptimizer, Adagrad on the tables (a sparse update: only the rows
  the batch touched) and Adam on the dense layers.

The variants of one catalog size run interleaved in one process, round after round; the
medians and each one's ratio to its own step at the smallest catalog are printed. Timings
from one run only: compare within a run.

Usage:
  python -m benchmarks.table_optimizer --catalogs=10000,1000000 --batch_size=1024
"""

from absl import app
from absl import flags

from benchmarks import steps
from pipelines import configs
from pipelines import experiment
from tfrs_logq import tasks

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_list("catalogs", ["10000", "1000000"], "Catalog sizes (items; as many users).")
    flags.DEFINE_integer("batch_size", 1024, "Batch size.")
    flags.DEFINE_integer("dim", 64, "Embedding dimension.")
    flags.DEFINE_integer("rounds", 3, "Interleaved rounds.")
    flags.DEFINE_integer("steps_per_round", 5, "Steps per round and variant.")


def time_catalog(num_items: int, batch_size: int, dim: int, rounds: int, steps_per_round: int):
    """{optimizer: median seconds per step} at one catalog size."""
    batches, _ = steps.zipf_batches(num_items, batch_size, 8, seed=0)
    variants = {}
    for kind in configs.TABLE_OPTIMIZERS:
        model = steps.TwoTower(num_items, num_items, dim, seed=0)
        model.user_tower(batches[0][0])
        model.item_tower(batches[0][1])
        training = configs.TrainingConfig(
            learning_rate=1e-3, table_optimizer=kind, table_learning_rate=0.1
        )
        variants[kind] = steps.make_train_step(
            model,
            tasks.LogQRetrieval(correction="improved"),
            use_probability=True,
            optimizer=experiment.make_optimizer(training, model),
        )
    return steps.time_interleaved(variants, batches, rounds, steps_per_round)


def main(argv) -> None:
    del argv
    catalogs = [int(c) for c in FLAGS.catalogs]
    medians = {
        n: time_catalog(n, FLAGS.batch_size, FLAGS.dim, FLAGS.rounds, FLAGS.steps_per_round)
        for n in catalogs
    }
    print(
        f"\nTwo-tower step, batch {FLAGS.batch_size}, dim {FLAGS.dim}, improved correction "
        f"(ms per step; x: against the same optimizer at {catalogs[0]:,} items):\n"
    )
    print("| items | " + " | ".join(configs.TABLE_OPTIMIZERS) + " |")
    print("|---|" + "---|" * len(configs.TABLE_OPTIMIZERS))
    for n in catalogs:
        cells = [
            f"{1e3 * medians[n][k]:.1f} ({medians[n][k] / medians[catalogs[0]][k]:.2f}x)"
            for k in configs.TABLE_OPTIMIZERS
        ]
        print(f"| {n:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    define_flags()
    app.run(main)
