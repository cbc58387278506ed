r"""Exports a trained run as SavedModels for serving (brute force and/or ScaNN).

Usage:
  python -m pipelines.export OUTPUT_DIR [--index=both|brute_force|scann] [--k=100]

Loads OUTPUT_DIR/config.json and its best checkpoint and writes
OUTPUT_DIR/export/<index>/<version>/ (see tfrs_logq.export; the next version after those
already there). `saved_model_cli show --all --dir OUTPUT_DIR/export/brute_force/1` lists the
signatures.
"""

import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

from pipelines import experiment
from pipelines import report

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_enum("index", "both", ["both", "brute_force", "scann"], "Which index to export.")
    flags.DEFINE_integer("k", 100, "Items returned per request.", lower_bound=1)


def main(argv):
    if len(argv) != 2:
        raise app.UsageError("Usage: python -m pipelines.export OUTPUT_DIR [--index=...] [--k=...]")
    tf.get_logger().setLevel("ERROR")
    logging.set_verbosity(logging.WARNING)
    config, model, _, data = experiment.load_run(argv[1])
    for path in report.export_run(model, config, argv[1], FLAGS.index, FLAGS.k, data=data):
        print(f"Wrote {path}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
