r"""Step time and peak memory against catalog size: TFRS `Retrieval` against `LogQRetrieval`
with mixed negatives and the count-min sketch, Adagrad on the tables.

A two-tower step (user and item towers: an embedding table of `num_items` rows each, as many
users as items, then a dense layer; dim 64) is timed at every catalog size and batch size
for these variants, all with the same towers and optimizer (`pipelines.experiment
.make_optimizer` with table_optimizer="adagrad": TFRS's CompositeOptimizer, Adagrad(0.1) on
the tables, a sparse update of the rows the step touched, Adam(1e-3) on the dense layers):

- "tfrs Retrieval": `tfrs.tasks.Retrieval(remove_accidental_hits=True)`, in-batch negatives,
  `candidate_ids` the items, `candidate_sampling_probability` read from a
  `CountMinSketchEstimator` updated with the batch in the step (the same estimator ours uses);
- "ours CORRECTION": `LogQRetrieval(correction=...)` with `negatives.make_sampler("mixed")`:
  `--num_negatives` (default: the batch size, as many columns as TFRS's) split into half
  uniform draws over the catalog (embedded by the item tower) and half a random subset of
  the batch's positives, log Q from a `CountMinSketchEstimator` (updated in the step) mixed
  with the uniform stratum.

Every (batch size, catalog, variant) step runs interleaved with all the others in one
process, round after round, on towers shared by the variants of a catalog size (the
tables of 5M items and their slots would not fit once per variant). Printed per cell: the
median ms per step, its ratio to TFRS's step in the same cell and to the same variant's
step at the smallest catalog, and the peak resident memory of a process that builds and
runs that variant alone (`--memory`; `processes.run_alone`, one process at a time): over
the whole process (import, build, steps) and over the steps after the first. Timings from
one run only: compare within a run.

Usage:
  python -m benchmarks.catalog_scaling --rounds=3 --steps_per_round=3
  python -m benchmarks.catalog_scaling --catalogs=10000,1000000 --batch_sizes=1024 \
      --memory=false
"""

from typing import Dict, List, Tuple

import tfrs_logq  # noqa: F401  First: sets up tf.keras (Keras 2) and ScaNN before TensorFlow.

# isort: split
import tensorflow as tf
import tensorflow_recommenders as tfrs
from absl import app
from absl import flags

from benchmarks import processes
from benchmarks import steps
from pipelines import configs
from pipelines import experiment
from pipelines import memory as memory_lib
from tfrs_logq import frequency
from tfrs_logq import losses
from tfrs_logq import negatives
from tfrs_logq.tasks import LogQRetrieval

FLAGS = flags.FLAGS
TFRS = "tfrs Retrieval"
MODULE = "benchmarks.catalog_scaling"


def define_flags() -> None:
    flags.DEFINE_list(
        "catalogs",
        ["10000", "100000", "1000000", "5000000"],
        "Catalog sizes (items; as many users).",
    )
    flags.DEFINE_list("batch_sizes", ["1024", "8192"], "Batch sizes.")
    flags.DEFINE_list("corrections", list(losses.CORRECTIONS), "Corrections of ours.")
    flags.DEFINE_integer("dim", 64, "Embedding dimension.", lower_bound=1)
    flags.DEFINE_integer(
        "num_negatives",
        0,
        "Ours: negatives per step, half uniform and half in-batch (0: the batch size).",
        lower_bound=0,
    )
    flags.DEFINE_integer(
        "rounds", 3, "Interleaved rounds; the median over rounds is reported.", lower_bound=1
    )
    flags.DEFINE_integer("steps_per_round", 3, "Steps per round and cell.", lower_bound=1)
    flags.DEFINE_bool(
        "memory",
        True,
        "Peak RSS of one process per (batch, catalog, variant), "
        "run one after another before the interleaved timing.",
    )
    flags.DEFINE_integer(
        "memory_steps", 3, "Steps timed in each memory process after the first.", lower_bound=1
    )
    flags.DEFINE_integer("seed", 0, "Seed of the data, the weights and the draws.")
    flags.DEFINE_string(
        "memory_variant",
        "",
        "Internal: build and run this variant alone at "
        "the first catalog and batch size, and print what `processes.report` "
        "prints.",
    )


def variant_names(corrections: List[str]) -> List[str]:
    return [TFRS] + [f"ours {correction}" for correction in corrections]


def build_towers(num_items: int, dim: int, first_batch, seed: int):
    """(the two towers with num_items rows each, built; their Adagrad / Adam optimizer)."""
    model = steps.TwoTower(num_items, num_items, dim, seed=seed)
    model.user_tower(first_batch[0])
    model.item_tower(first_batch[1])
    training = configs.TrainingConfig(
        learning_rate=1e-3, table_optimizer="adagrad", table_learning_rate=0.1
    )
    return model, experiment.make_optimizer(training, model)


def make_variant(
    name: str, model, optimizer, num_items: int, batch_size: int, num_negatives: int, seed: int
):
    """The compiled training step of variant `name` on `model`."""
    estimator = frequency.CountMinSketchEstimator(seed=1)
    if name == TFRS:

        def arguments(items):
            estimator.update(items)
            return {"candidate_sampling_probability": tf.exp(estimator.log_q(items))}

        task = tfrs.tasks.Retrieval(remove_accidental_hits=True)
    else:
        sampler = negatives.make_sampler(
            "mixed",
            num_negatives=num_negatives or batch_size,
            num_items=num_items,
            probabilities=estimator,
            seed=seed,
        )
        task = LogQRetrieval(correction=name[len("ours ") :], sampler=sampler)

        def arguments(items):
            del items  # LogQRetrieval updates the sampler's estimator with them itself.
            return {"candidate_embedding_fn": model.item_tower}

    return steps.make_train_step(
        model, task, use_probability=False, optimizer=optimizer, task_arguments=arguments
    )


def tables_mib(num_items: int, dim: int) -> float:
    """The two float32 tables and their Adagrad accumulators, MiB."""
    return 2 * 2 * num_items * dim * 4 / 2**20


def run_memory_variant() -> None:
    num_items, batch_size = int(FLAGS.catalogs[0]), int(FLAGS.batch_sizes[0])
    batches, _ = steps.zipf_batches(num_items, batch_size, 4, FLAGS.seed)
    model, optimizer = build_towers(num_items, FLAGS.dim, batches[0], FLAGS.seed)
    step = make_variant(
        FLAGS.memory_variant,
        model,
        optimizer,
        num_items,
        batch_size,
        FLAGS.num_negatives,
        FLAGS.seed,
    )
    processes.report(processes.time_alone(step, batches, FLAGS.memory_steps))


Cell = Tuple[int, int, str]  # (batch size, items, variant)


def measure_memory(catalogs, batch_sizes, names) -> Dict[Cell, processes.Alone]:
    out = {}
    for batch_size in batch_sizes:
        for num_items in catalogs:
            for name in names:
                out[(batch_size, num_items, name)] = processes.run_alone(
                    MODULE,
                    [
                        f"--memory_variant={name}",
                        f"--catalogs={num_items}",
                        f"--batch_sizes={batch_size}",
                        f"--dim={FLAGS.dim}",
                        f"--num_negatives={FLAGS.num_negatives}",
                        f"--memory_steps={FLAGS.memory_steps}",
                        f"--seed={FLAGS.seed}",
                    ],
                )
                print(
                    f"memory: batch {batch_size}, {num_items:,} items, {name}: "
                    f"{out[(batch_size, num_items, name)]}",
                    flush=True,
                )
    return out


def measure_time(catalogs, batch_sizes, names) -> Dict[Cell, float]:
    variants, batches = {}, {}
    for num_items in catalogs:
        data = {b: steps.zipf_batches(num_items, b, 8, FLAGS.seed)[0] for b in batch_sizes}
        model, optimizer = build_towers(num_items, FLAGS.dim, data[batch_sizes[0]][0], FLAGS.seed)
        for batch_size in batch_sizes:
            for name in names:
                cell = (batch_size, num_items, name)
                variants[cell] = make_variant(
                    name, model, optimizer, num_items, batch_size, FLAGS.num_negatives, FLAGS.seed
                )
                batches[cell] = data[batch_size]
    return steps.time_interleaved(variants, batches, FLAGS.rounds, FLAGS.steps_per_round)


def main(argv) -> None:
    del argv
    tf.get_logger().setLevel("ERROR")  # One tf.function per cell is expected, not retracing.
    tf.keras.utils.set_random_seed(FLAGS.seed)
    if FLAGS.memory_variant:
        run_memory_variant()
        return
    catalogs = [int(c) for c in FLAGS.catalogs]
    batch_sizes = [int(b) for b in FLAGS.batch_sizes]
    names = variant_names(FLAGS.corrections)
    memory = measure_memory(catalogs, batch_sizes, names) if FLAGS.memory else {}
    medians = measure_time(catalogs, batch_sizes, names)
    smallest = catalogs[0]
    print(
        f"\nTwo-tower step, dim {FLAGS.dim}, as many users as items, Adagrad on the tables "
        f"(Adam on the dense layers); ours: mixed negatives ("
        f"{FLAGS.num_negatives or 'the batch size'}: half uniform, half in-batch), "
        f"count-min sketch; TFRS: in-batch, Q from a count-min sketch. Median of "
        f"{FLAGS.rounds} interleaved rounds of {FLAGS.steps_per_round} steps per cell; peak "
        "RSS of one process per variant: whole process / over its steps after the first; "
        "tables + slots: the two tables and their Adagrad accumulators."
    )
    for batch_size in batch_sizes:
        print(f"\nBatch {batch_size}:\n")
        print(
            f"| items | variant | ms/step | vs TFRS | vs {smallest:,} items | "
            "peak RSS MiB (steps) | tables + slots MiB |"
        )
        print("|---|---|---|---|---|---|---|")
        for num_items in catalogs:
            for name in names:
                seconds = medians[(batch_size, num_items, name)]
                alone = memory.get((batch_size, num_items, name))
                rss = "" if alone is None else f"{alone.peak_mib:.0f} ({alone.steps_peak_mib:.0f})"
                print(
                    f"| {num_items:,} | {name} | {1e3 * seconds:.1f} | "
                    f"{seconds / medians[(batch_size, num_items, TFRS)]:.3f}x | "
                    f"{seconds / medians[(batch_size, smallest, name)]:.3f}x | {rss} | "
                    f"{tables_mib(num_items, FLAGS.dim):.0f} |"
                )
    ours = {
        cell: s / medians[(cell[0], cell[1], TFRS)]
        for cell, s in medians.items()
        if cell[2] != TFRS
    }
    worst = max(ours, key=ours.get)
    over = sum(r > 1.05 for r in ours.values())
    print(
        f"\nOurs / TFRS: worst {ours[worst]:.3f}x ({worst[2]}, {worst[1]:,} items, batch "
        f"{worst[0]}); above 1.05x in {over} of {len(ours)} cells."
    )
    largest = catalogs[-1]
    growth = {
        (b, name): medians[(b, largest, name)] / medians[(b, smallest, name)]
        for b in batch_sizes
        for name in names
    }
    worst = max(growth, key=growth.get)
    print(
        f"{largest:,} items / {smallest:,} items, same variant and batch: worst "
        f"{growth[worst]:.3f}x ({worst[1]}, batch {worst[0]}); above 1.2x in "
        f"{sum(g > 1.2 for g in growth.values())} of {len(growth)}."
    )
    print(f"Peak RSS of this process: {memory_lib.peak_rss_mib():.0f} MiB.")


if __name__ == "__main__":
    define_flags()
    app.run(main)
