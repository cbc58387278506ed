"""Step time of a two-tower training step: tfrs.tasks.Retrieval against LogQRetrieval.

One compiled training step (forward, backward, Adam update) of a two-tower
model (100k users, 100k items, dim 64, batch 1024, in-batch negatives) is timed
for each task variant. All variants run interleaved in one process, round after
round, and the ratios of median step times to tfrs.tasks.Retrieval are printed
(targets: standard <= 1.05x, improved <= 1.10x). Timings from one run only.

Usage:
  python -m pipelines.benchmarks.loss_overhead
"""

import time
from typing import Callable, Dict

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs
from absl import app
from absl import flags

from pipelines.benchmarks import catalog
from tfrs_logq.tasks import LogQRetrieval

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_items", 100_000, "Item (and user) vocabulary size.", lower_bound=2)
flags.DEFINE_integer("batch_size", 1024, "Examples per step.", lower_bound=2)
flags.DEFINE_integer("dim", 64, "Embedding dimension.", lower_bound=1)
flags.DEFINE_integer("rounds", 7, "Interleaved rounds; the median over rounds is reported.",
                     lower_bound=1)
flags.DEFINE_integer("steps_per_round", 20, "Steps timed per variant and round.", lower_bound=1)
flags.DEFINE_integer("seed", 0, "Seed of the data and the weights.")


class TwoTower(tf.keras.Model):
    """User id -> embedding -> dense; item id -> embedding -> dense."""

    def __init__(self, num_users: int, num_items: int, dim: int, seed: int):
        super().__init__()
        init = tf.keras.initializers.RandomNormal(stddev=0.05, seed=seed)
        self.user_tower = tf.keras.Sequential([
            tf.keras.layers.Embedding(num_users, dim, embeddings_initializer=init),
            tf.keras.layers.Dense(dim)])
        self.item_tower = tf.keras.Sequential([
            tf.keras.layers.Embedding(num_items, dim, embeddings_initializer=init),
            tf.keras.layers.Dense(dim)])


def zipf_batches(num_items: int, batch_size: int, count: int, seed: int, exponent=1.0):
    """`count` batches of (user ids, item ids, item probabilities), items ~ Zipf(exponent)."""
    rng = np.random.default_rng(seed)
    q = catalog.zipf_probabilities(num_items, exponent)
    batches = []
    for _ in range(count):
        items = rng.choice(num_items, size=batch_size, p=q).astype(np.int64)
        users = rng.integers(0, num_items, size=batch_size).astype(np.int64)
        batches.append(tuple(tf.constant(x) for x in (users, items, q[items].astype(np.float32))))
    return batches, q


def make_train_step(model: TwoTower, task: tf.keras.layers.Layer,
                    use_probability: bool, extra: Callable = None) -> Callable:
    """A compiled step: loss of `task` on in-batch negatives, gradients, Adam update.

    Args:
      model: the two towers.
      task: a retrieval task called as TFRS's (query, candidates, ...).
      use_probability: pass the items' sampling probabilities to the task.
      extra: optional callable(items) run inside the step (e.g. an estimator
        update), for benchmarks that measure what it adds.
    """
    optimizer = tf.keras.optimizers.Adam(1e-3)

    @tf.function
    def step(users, items, probability):
        if extra is not None:
            extra(items)
        with tf.GradientTape() as tape:
            loss = task(model.user_tower(users), model.item_tower(items),
                        candidate_sampling_probability=probability if use_probability else None,
                        candidate_ids=items, compute_metrics=False)
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return step


def time_interleaved(steps: Dict[str, Callable], batches, rounds: int,
                     steps_per_round: int) -> Dict[str, float]:
    """Median seconds per step of each variant, the variants interleaved round by round."""
    for fn in steps.values():  # Compile and warm up.
        for batch in batches[:3]:
            fn(*batch).numpy()
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, fn in steps.items():
            started = time.perf_counter()
            for i in range(steps_per_round):
                loss = fn(*batches[i % len(batches)])
            loss.numpy()
            times[name].append((time.perf_counter() - started) / steps_per_round)
    return {name: float(np.median(t)) for name, t in times.items()}


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
