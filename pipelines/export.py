r"""Exports a trained run as SavedModels for serving (brute force and/or ScaNN).

Usage:
  python -m pipelines.export OUTPUT_DIR [--index=exact|scann|both] [--k=100]

Loads OUTPUT_DIR/config.json and its best checkpoint and writes
OUTPUT_DIR/export/<index>/<version>/ (see tfrs_logq.export; the next version after those
already there): exact search to export/brute_force/ (--index=brute_force, its old name,
is still accepted), the ScaNN index to export/scann/.
`saved_model_cli show --all --dir OUTPUT_DIR/export/brute_force/1` lists the signatures.
"""

from typing import Any, Dict

import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

from pipelines import configs
from pipelines import console
from pipelines import errors
from pipelines import experiment
from pipelines import report
from pipelines import run_files
from pipelines.run_files import RunNotFound

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    define: Dict[str, Any] = dict(flag_values=flag_values)
    errors.define_debug_flag(flag_values)
    flags.DEFINE_enum(
        "framework",
        None,
        list(configs.FRAMEWORKS),
        "tf: TensorFlow exports the run, a Keras job's run too (its towers in the TensorFlow "
        "job's model); keras: the Keras job's own (`tfrs-logq` runs it for a Keras run). "
        "Default: the run's framework.",
        **define,
    )
    flags.DEFINE_enum(
        "index",
        "both",
        [*configs.INDEXES, *configs.INDEX_ALIASES],
        "What the SavedModels search: exact (export/brute_force/), a ScaNN index "
        "(export/scann/), or both, one SavedModel each; brute_force is an old "
        "name of exact.",
        **define,
    )
    flags.DEFINE_integer(
        "k", 100, "Item ids (and scores) each request returns, at most.", lower_bound=1, **define
    )


def main(argv):
    if len(argv) != 2:
        raise app.UsageError("Usage: python -m pipelines.export OUTPUT_DIR [--index=...] [--k=...]")
    tf.get_logger().setLevel("ERROR")
    logging.set_verbosity(logging.WARNING)
    searches = configs.indexes(FLAGS.index)
    with errors.reported():  # A missing run, bad data, no ScaNN ops: named, no traceback.
        if FLAGS.framework == "keras":
            raise app.UsageError(run_files.keras_framework_refusal(argv[1], "export"))
        removed = run_files.removed_weights(argv[1])  # A run whose weights compare deleted.
        if removed:
            raise RunNotFound(removed)
        config, model, split, data = experiment.load_run(argv[1])
        # tfrs_logq.export names exact search brute_force.
        index = (
            "both" if len(searches) > 1 else {"exact": "brute_force"}.get(searches[0], searches[0])
        )
        paths = report.export_run(model, config, argv[1], index, FLAGS.k, data=data, split=split)
    for path in paths:
        print(f"Wrote {path}")


if __name__ == "__main__":
    define_flags()
    console.run(main)  # app.run, with one-line usage errors and --verbose.
