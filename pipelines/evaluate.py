r"""Re-evaluates a finished (or interrupted) training run from its checkpoint.

Usage:
  python -m pipelines.evaluate OUTPUT_DIR [--split=test|validation] [--geometry]
  python -m pipelines.evaluate OUTPUT_DIR --against=OTHER_DIR [--output_json=PATH]

Rebuilds the data and the model from OUTPUT_DIR/config.json, loads the best
weights (OUTPUT_DIR/checkpoints/best), evaluates with exact search and prints
the table; with --split=test it also updates the "test" entry of
OUTPUT_DIR/metrics.json. With --geometry it also prints how spread out the
item vectors and the split's query scores are
(`tfrs_logq.retrieval.embedding_geometry`), a check for embedding collapse.

With --against it compares two runs on the same queries instead: per query, the
difference d = OUTPUT_DIR's metric - OTHER_DIR's, its mean, its standard error over
queries and a paired t-test (`pipelines.significance.paired`). That standard error is
the evaluation set's sampling noise only; two training seeds differ by more.
"""

import json
import os
from typing import Dict

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

from pipelines import experiment
from pipelines import report
from pipelines import significance
from pipelines.run_files import RunFiles
from tfrs_logq import retrieval

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_enum("split", "test", ["test", "validation"], "Which evaluation set.")
    flags.DEFINE_enum("index", "exact", ["exact", "scann"], "Exact search or a ScaNN index.")
    flags.DEFINE_bool("geometry", False, "Also print the embedding geometry (collapse check) "
                      "of the model's items and the split's queries.")
    flags.DEFINE_string("against", None, "Another run on the same data and split: compare "
                        "OUTPUT_DIR with it query by query (paired) instead.")
    flags.DEFINE_string("output_json", None, "With --against: also write the comparison "
                        "to this JSON file.")


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


def compare_runs(output_dir: str, against: str, split: str = "test", index: str = "exact"
                 ) -> Dict[str, Dict[str, float]]:
    """Paired comparison, query by query, of the run in `output_dir` (b) with the run in
    `against` (a) on `split`: per metric, `significance.paired` of their per-query values
    (d = b - a). Both runs must evaluate the same queries with the same targets."""
    sets, values = [], []
    for directory in (against, output_dir):
        config, model, data_split, _ = experiment.load_run(directory)
        eval_set = data_split.test if split == "test" else data_split.validation
        sets.append((directory, config, eval_set))
        values.append(experiment.evaluate(model, config, eval_set, index=index,
                                          per_query=True))
    (dir_a, config_a, set_a), (dir_b, config_b, set_b) = sets
    same = (np.array_equal(set_a.users, set_b.users) and len(set_a.targets) == len(set_b.targets)
            and all(np.array_equal(x, y) for x, y in zip(set_a.targets, set_b.targets)))
    if not same:
        raise ValueError(
            f"--against={dir_a} evaluates other {split} queries than {dir_b} ({config_a.dataset}, "
            f"split {config_a.split}, {len(set_a.users)} queries vs {config_b.dataset}, split "
            f"{config_b.split}, {len(set_b.users)}); a paired comparison needs the same ones.")
    return {name: significance.paired(values[0][name], values[1][name]) for name in values[0]}


def format_comparison(comparison: Dict[str, Dict[str, float]], name_b: str, name_a: str) -> str:
    """Markdown table of `compare_runs`: both means, d, its SE over queries, t and p."""
    lines = [f"| metric | {name_b} | {name_a} | d | SE (queries) | t | p |",
             "|---|---|---|---|---|---|---|"]
    for metric, row in comparison.items():
        lines.append(f"| {metric} | {row['mean_b']:.4f} | {row['mean_a']:.4f} | "
                     f"{row['difference']:+.4f} | {row['se']:.4f} | {row['t']:.2f} | "
                     f"{row['p']:.3g} |")
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2:
        raise app.UsageError("Usage: python -m pipelines.evaluate OUTPUT_DIR [--split=...]")
    tf.get_logger().setLevel("ERROR")
    logging.set_verbosity(logging.WARNING)
    output_dir = argv[1]
    if FLAGS.against:
        comparison = compare_runs(output_dir, FLAGS.against, FLAGS.split, FLAGS.index)
        n = next(iter(comparison.values()))["n"]
        print(f"{output_dir} (b) against {FLAGS.against} (a), {FLAGS.split} split, "
              f"{FLAGS.index} search, {n} queries; d = b - a, its standard error over queries "
              "(the evaluation set's noise, not the seeds'):\n")
        print(format_comparison(comparison, "b", "a"))
        if FLAGS.output_json:
            with open(FLAGS.output_json, "w") as f:
                json.dump({"b": output_dir, "a": FLAGS.against, "split": FLAGS.split,
                           "index": FLAGS.index, "metrics": comparison}, f, indent=1)
            print(f"\nWrote {FLAGS.output_json}")
        return
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
