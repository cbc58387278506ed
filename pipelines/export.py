r"""Exports a trained run as SavedModels for serving (brute force and/or ScaNN).

Usage:
  python -m pipelines.export OUTPUT_DIR [--index=both|brute_force|scann] [--k=100]

Loads OUTPUT_DIR/config.json and its best checkpoint and writes
OUTPUT_DIR/export/<index>/ (see tfrs_logq.export). `saved_model_cli show --all
--dir OUTPUT_DIR/export/brute_force` lists the signatures.
"""

import os

import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

from tfrs_logq import export as export_lib

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_enum("index", "both", ["both", "brute_force", "scann"], "Which index to export.")
    flags.DEFINE_integer("k", 100, "Items returned per request.", lower_bound=1)


def export_run(model, output_dir: str, index: str = "both", k: int = 100):
    """Exports `model` to OUTPUT_DIR/export/<index> for each index; returns the paths."""
    kinds = export_lib.INDEXES if index == "both" else (index,)
    return [export_lib.export(model, os.path.join(output_dir, "export", kind), k=k, index=kind)
            for kind in kinds]


def main(argv):
    if len(argv) != 2:
        raise app.UsageError("Usage: python -m pipelines.export OUTPUT_DIR [--index=...] [--k=...]")
    tf.get_logger().setLevel("ERROR")
    logging.set_verbosity(logging.WARNING)
    from pipelines import evaluate  # pylint: disable=import-outside-toplevel
    model = evaluate.load_run(argv[1])[1]
    for path in export_run(model, argv[1], FLAGS.index, FLAGS.k):
        print(f"Wrote {path}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
