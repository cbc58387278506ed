"""Step time of a two-tower training step: tfrs.tasks.Retrieval against LogQRetrieval.

One compiled training step (forward, backward, Adam update) of a two-tower
model (100k users, 100k items, dim 64, batch 1024, in-batch negatives) is timed
for each task variant. All variants run interleaved in one process, round after
round, and the ratios of median step times to tfrs.tasks.Retrieval are printed
(targets: standard <= 1.05x, improved <= 1.10x). Timings from one run only.

Usage:
  python -m pipelines.benchmarks.loss_overhead
"""

import tensorflow as tf
import tensorflow_recommenders as tfrs
from absl import app
from absl import flags

from pipelines.benchmarks.steps import TwoTower, make_train_step, time_interleaved, zipf_batches
from tfrs_logq.tasks import LogQRetrieval

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_items", 100_000, "Item (and user) vocabulary size.", lower_bound=2)
flags.DEFINE_integer("batch_size", 1024, "Examples per step.", lower_bound=2)
flags.DEFINE_integer("dim", 64, "Embedding dimension.", lower_bound=1)
flags.DEFINE_integer("rounds", 7, "Interleaved rounds; the median over rounds is reported.",
                     lower_bound=1)
flags.DEFINE_integer("steps_per_round", 20, "Steps timed per variant and round.", lower_bound=1)
flags.DEFINE_integer("seed", 0, "Seed of the data and the weights.")


VARIANTS = {
    # name: (task factory, pass probabilities)
    "tfrs Retrieval (no correction)": (lambda: tfrs.tasks.Retrieval(
        remove_accidental_hits=True), False),
    "tfrs Retrieval (logQ)": (lambda: tfrs.tasks.Retrieval(remove_accidental_hits=True), True),
    "LogQRetrieval none": (lambda: LogQRetrieval(correction="none",
                                                 remove_accidental_hits=True), False),
    "LogQRetrieval standard": (lambda: LogQRetrieval(correction="standard",
                                                     remove_accidental_hits=True), True),
    "LogQRetrieval improved": (lambda: LogQRetrieval(correction="improved",
                                                     remove_accidental_hits=True), True),
}


def main(argv):
    del argv
    tf.get_logger().setLevel("ERROR")  # One tf.function per variant is expected, not retracing.
    tf.keras.utils.set_random_seed(FLAGS.seed)
    batches, _ = zipf_batches(FLAGS.num_items, FLAGS.batch_size, 16, FLAGS.seed)
    steps = {}
    for name, (make_task, use_probability) in VARIANTS.items():
        model = TwoTower(FLAGS.num_items, FLAGS.num_items, FLAGS.dim, FLAGS.seed)
        steps[name] = make_train_step(model, make_task(), use_probability)
    print(f"Two-tower step: {FLAGS.num_items} items, batch {FLAGS.batch_size}, dim {FLAGS.dim}, "
          f"in-batch negatives, accidental hits removed; {FLAGS.rounds} interleaved rounds of "
          f"{FLAGS.steps_per_round} steps.")
    medians = time_interleaved(steps, batches, FLAGS.rounds, FLAGS.steps_per_round)
    plain = medians["tfrs Retrieval (no correction)"]
    corrected = medians["tfrs Retrieval (logQ)"]
    print(f"\n| variant | ms/step | vs tfrs (no correction) | vs tfrs (logQ) |\n|---|---|---|---|")
    for name, seconds in medians.items():
        print(f"| {name} | {seconds * 1e3:.1f} | {seconds / plain:.3f}x | "
              f"{seconds / corrected:.3f}x |")
    print(f"\nLogQRetrieval none / tfrs (no correction):   "
          f"{medians['LogQRetrieval none'] / plain:.3f}x")
    print(f"LogQRetrieval standard / tfrs (logQ):        "
          f"{medians['LogQRetrieval standard'] / corrected:.3f}x  (target <= 1.05x)")
    print(f"LogQRetrieval improved / tfrs (logQ):        "
          f"{medians['LogQRetrieval improved'] / corrected:.3f}x  (target <= 1.10x)")


if __name__ == "__main__":
    app.run(main)
