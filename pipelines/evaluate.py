r"""Re-evaluates a finished (or interrupted) training run from its checkpoint.

Usage:
  python -m pipelines.evaluate OUTPUT_DIR [--split=test|validation] [--geometry]

Rebuilds the data and the model from OUTPUT_DIR/config.json, loads the best
weights (OUTPUT_DIR/checkpoints/best), evaluates with exact search and prints
the table; with --split=test it also updates the "test" entry of
OUTPUT_DIR/metrics.json. With --geometry it also prints how spread out the
item vectors and the split's query scores are
(`tfrs_logq.retrieval.embedding_geometry`), a check for embedding collapse.
"""

import json
import os

import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

from pipelines import experiment
from pipelines import report
from pipelines.run_files import RunFiles
from tfrs_logq import retrieval

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_enum("split", "test", ["test", "validation"], "Which evaluation set.")
    flags.DEFINE_enum("index", "exact", ["exact", "scann"], "Exact search or a ScaNN index.")
    flags.DEFINE_bool("geometry", False, "Also print the embedding geometry (collapse check) "
                      "of the model's items and the split's queries.")


def evaluate_run(output_dir: str, split: str = "test", index: str = "exact",
                 geometry: bool = False):
    """Metrics of the run in `output_dir` on `split`, from its best checkpoint; with
    `geometry`, also `retrieval.embedding_geometry` of its items and the split's queries
    (under the key "geometry")."""
    config, model, data_split, _ = experiment.load_run(output_dir)
    eval_set = data_split.test if split == "test" else data_split.validation
    queries = experiment.query_embeddings(model, config, eval_set)
    metrics = experiment.evaluate(model, config, eval_set, index=index, queries=queries)
    if geometry:
        metrics["geometry"] = retrieval.embedding_geometry(queries,
                                                           model.item_embeddings().numpy())
    return config, metrics


def main(argv):
    if len(argv) != 2:
        raise app.UsageError("Usage: python -m pipelines.evaluate OUTPUT_DIR [--split=...]")
    tf.get_logger().setLevel("ERROR")
    logging.set_verbosity(logging.WARNING)
    output_dir = argv[1]
    config, metrics = evaluate_run(output_dir, FLAGS.split, FLAGS.index, FLAGS.geometry)
    geometry = metrics.pop("geometry", None)
    print(f"{config.model} on {config.dataset} ({config.split}), {FLAGS.split} split, "
          f"{FLAGS.index} search, history filtered:\n")
    print(report.format_metrics({"test": metrics}))
    if geometry is not None:
        print(f"\nEmbedding geometry ({FLAGS.split} queries): "
              f"mean item direction norm {geometry['mean_direction_norm']:.3f}, "
              f"score std per query {geometry['score_std']:.3f}, "
              f"mean item norm {geometry['item_norm']:.3f}")
    path = RunFiles(output_dir).metrics
    if FLAGS.split == "test" and os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        saved[f"test_{FLAGS.index}"] = metrics
        if saved.get("config", {}).get("index") in (FLAGS.index, "both") and (
                FLAGS.index == "exact" or saved["config"]["index"] == "scann"):
            saved["test"] = metrics
        with open(path, "w") as f:
            json.dump(saved, f, indent=1)
        print(f"\nUpdated {path}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
