r"""What filtered serving costs: ms per request of `serving_filtered` against `serving_default`.

Exports an untrained SASRec over --catalog items (weights do not change the cost) with both
indexes and serves, in this process, batches whose every user carries a history of --history
items: plain, and filtered with each allowed-set size in --allowed (0: no allowed set) and
--exclude extra ids per user. Prints the median ms per request of each. A filtered request adds
two [batch, catalog] masks to the history's; on the ScaNN export, rows whose allowed set is too
small for the index's re-scored candidates to hold k of its items are searched exactly.

Usage:
  python -m examples.filtered_serving_cost --catalog=100000 --batch_size=64
"""

import os
import tempfile

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

from examples.filtered_serving import median_ms
from tfrs_logq import export
from tfrs_logq.models import RetrievalObjective
from tfrs_logq.models import SASRec

FLAGS = flags.FLAGS

if __name__ == "__main__":
    flags.DEFINE_integer("catalog", 100_000, "Items.", lower_bound=200)
    flags.DEFINE_integer("batch_size", 64, "Users per request.", lower_bound=1)
    flags.DEFINE_integer("history", 50, "History length per user.", lower_bound=0)
    flags.DEFINE_list("allowed", ["0", "1000", "90000"], "Allowed-set sizes (0: none).")
    flags.DEFINE_integer("exclude", 20, "Extra excluded ids per user.", lower_bound=0)
    flags.DEFINE_integer("k", 100, "Ids per answer.", lower_bound=1)
    flags.DEFINE_integer("repeats", 10, "Requests timed (the first is warm-up).", lower_bound=2)


def main(argv):
    del argv
    tf.get_logger().setLevel("ERROR")
    logging.set_verbosity(logging.ERROR)
    import scann  # noqa: F401 pylint: disable=import-outside-toplevel,unused-import

    model = SASRec(
        FLAGS.catalog, RetrievalObjective(FLAGS.catalog, loss="full_softmax"), max_length=50, dim=64
    )
    model(tf.zeros([1, 50], tf.int32))
    rng = np.random.default_rng(0)
    catalog, batch = np.arange(1, FLAGS.catalog + 1), FLAGS.batch_size
    plain = {"history": tf.constant(rng.integers(1, FLAGS.catalog + 1, [batch, FLAGS.history]))}
    exclude = tf.constant(rng.integers(1, FLAGS.catalog + 1, [batch, FLAGS.exclude]))
    print(
        f"SASRec over {FLAGS.catalog:,} items, dim 64, batch {batch}, history "
        f"{FLAGS.history}, {FLAGS.exclude} extra exclusions, k {FLAGS.k}; median ms per "
        "request\n"
    )
    print(
        "| index | plain | "
        + " | ".join(
            f"filtered, allowed {int(n):,}" if int(n) else "filtered, exclusions only"
            for n in FLAGS.allowed
        )
        + " |"
    )
    print("|---" * (2 + len(FLAGS.allowed)) + "|")
    with tempfile.TemporaryDirectory() as directory:
        for index in export.INDEXES:
            path = export.export(
                model, os.path.join(directory, index), k=FLAGS.k, index=index, scann_min_items=0
            )
            signatures = tf.saved_model.load(path).signatures
            times = [median_ms(signatures["serving_default"], plain, FLAGS.repeats)]
            for size in map(int, FLAGS.allowed):
                allowed = (
                    np.stack([rng.choice(catalog, size, replace=False) for _ in range(batch)])
                    if size
                    else np.zeros([batch, 1])
                )
                times.append(
                    median_ms(
                        signatures["serving_filtered"],
                        {**plain, "allowed": tf.constant(allowed, tf.int64), "exclude": exclude},
                        FLAGS.repeats,
                    )
                )
            print(f"| {index} | " + " | ".join(f"{t:.0f}" for t in times) + " |", flush=True)


if __name__ == "__main__":
    app.run(main)
