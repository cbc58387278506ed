r"""Re-evaluates a finished (or interrupted) training run from its checkpoint.

Usage:
  python -m pipelines.evaluate OUTPUT_DIR [--split=test|validation] [--index=exact|scann|both]
      [--geometry]
  python -m pipelines.evaluate OUTPUT_DIR --against=OTHER_DIR [--output_json=PATH]
  python -m pipelines.evaluate OUTPUT_DIR --per_query_out=PATH.npz

Rebuilds the data and the model from OUTPUT_DIR/config.json, loads the best
weights (OUTPUT_DIR/checkpoints/best), evaluates with exact search, a ScaNN index or
both (--index, as pipelines.train and pipelines.export name them) and prints the table;
with --split=test it also updates the "test_<index>" (and "test") entries of
OUTPUT_DIR/metrics.json. With --geometry it also prints how spread out the
item vectors and the split's query scores are
(`tfrs_logq.retrieval.embedding_geometry`), a check for embedding collapse.

With --against it compares two runs on the same queries instead: per query, the
difference d = OUTPUT_DIR's metric - OTHER_DIR's, its mean, its standard error over
queries and a paired t-test (`pipelines.significance.paired`). That standard error is
the evaluation set's sampling noise only; two training seeds differ by more. Either side
may be a .npz that --per_query_out wrote: each query's metrics, kept after the run's
checkpoint is gone.
"""

import json
import os
from typing import Any, Dict

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

from pipelines import configs
from pipelines import console
from pipelines import errors
from pipelines import experiment
from pipelines import per_query
from pipelines import report
from pipelines import run_files
from pipelines.run_files import RunFiles
from pipelines.run_files import write_json
from tfrs_logq import retrieval

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    define: Dict[str, Any] = dict(flag_values=flag_values)
    errors.define_debug_flag(flag_values)
    flags.DEFINE_enum(
        "framework",
        None,
        list(configs.FRAMEWORKS),
        "tf: TensorFlow evaluates the run, a Keras job's run too (its towers in the TensorFlow "
        "job's model); keras: the Keras job's own (`tfrs-logq` runs it for a Keras run). "
        "Default: the run's framework.",
        **define,
    )
    flags.DEFINE_enum("split", "test", ["test", "validation"], "Which evaluation set.", **define)
    flags.DEFINE_enum(
        "index",
        "exact",
        [*configs.INDEXES, *configs.INDEX_ALIASES],
        "The search: exact, a ScaNN index (exact under the run's "
        "--scann_min_items items), or both, one table each; brute_force is an "
        "old name of exact. --against and --per_query_out take one.",
        **define,
    )
    flags.DEFINE_bool(
        "geometry",
        False,
        "Also print the embedding geometry (collapse check) "
        "of the model's items and the split's queries.",
        **define,
    )
    flags.DEFINE_string(
        "against",
        None,
        "Another run on the same data and split: compare "
        "OUTPUT_DIR with it query by query (paired) instead.",
        **define,
    )
    flags.DEFINE_string(
        "output_json",
        None,
        "With --against: also write the comparison to this JSON file.",
        **define,
    )
    flags.DEFINE_string(
        "per_query_out",
        None,
        "Write each query's metrics to this .npz, "
        "which --against then reads in place of the run (no checkpoint).",
        **define,
    )


def evaluate_indexes(
    output_dir: str, split: str = "test", index: str = "exact", geometry: bool = False
):
    """(config, {search: metrics}, geometry or None) of the run in `output_dir` on `split`,
    from its best checkpoint, by each search of `index` (exact, scann or both); with
    `geometry`, `retrieval.embedding_geometry` of its items and the split's queries."""
    searches = configs.indexes(index)
    config, model, data_split, _ = experiment.load_run(output_dir)
    eval_set = data_split.test if split == "test" else data_split.validation
    queries = experiment.query_embeddings(model, config, eval_set)
    metrics = {
        search: experiment.evaluate_split(
            model, config, data_split, split, index=search, queries=queries
        )
        for search in searches
    }
    shape = (
        retrieval.embedding_geometry(queries, retrieval.ItemTable.of(model)) if geometry else None
    )
    return config, metrics, shape


def evaluate_run(
    output_dir: str, split: str = "test", index: str = "exact", geometry: bool = False
):
    """Metrics of the run in `output_dir` on `split` by one search (exact or scann), from its
    best checkpoint; with `geometry`, also `retrieval.embedding_geometry` of its items and
    the split's queries (under the key "geometry")."""
    if len(configs.indexes(index)) != 1:
        raise ValueError(
            f"`index` must be exact or scann; received index={index!r} (both: `evaluate_indexes`)."
        )
    config, metrics, shape = evaluate_indexes(output_dir, split, index, geometry)
    metrics = next(iter(metrics.values()))
    if shape is not None:
        metrics["geometry"] = shape
    return config, metrics


def per_query_values(source: str, split: str = "test", index: str = "exact") -> Dict:
    """`per_query`'s record of `source` on `split` by `index`: a run directory (evaluated from
    its best checkpoint), or a file that `--per_query_out` wrote, which holds the values
    without the checkpoint."""
    if source.endswith(per_query.SUFFIX):
        return per_query.load_as(source, split, index)
    config, model, data_split, _ = experiment.load_run(source)
    eval_set = data_split.test if split == "test" else data_split.validation
    return {
        "users": np.asarray(eval_set.users),
        "targets_digest": per_query.targets_digest(eval_set.targets),
        "split": split,
        "index": index,
        "description": f"{config.data.dataset}, split {config.data.split}",
        "values": experiment.evaluate_split(
            model, config, data_split, split, index=index, per_query=True
        ),
    }


def compare_runs(
    output_dir: str, against: str, split: str = "test", index: str = "exact"
) -> Dict[str, Dict[str, float]]:
    """Paired comparison, query by query, of `output_dir` (b) with `against` (a) on `split`:
    per metric, `significance.paired` of their per-query values (d = b - a). Each is a run
    directory or a `--per_query_out` file; both must hold the same queries and targets."""
    a, b = (per_query_values(source, split, index) for source in (against, output_dir))
    return per_query.compare(a, b, f"--against={against}", output_dir)


def main(argv):
    with errors.reported():  # A missing run, bad data: named, no traceback.
        _main(argv)


def _main(argv):
    if len(argv) != 2:
        raise app.UsageError("Usage: python -m pipelines.evaluate OUTPUT_DIR [--split=...]")
    tf.get_logger().setLevel("ERROR")
    logging.set_verbosity(logging.WARNING)
    output_dir = argv[1]
    if FLAGS.framework == "keras":
        raise app.UsageError(run_files.keras_framework_refusal(output_dir, "evaluate"))
    modes = [f"--{name}" for name in ("per_query_out", "against", "geometry") if FLAGS[name].value]
    if len(modes) > 1:
        raise app.UsageError(f"{' and '.join(modes)} are separate jobs; give one of them.")
    if FLAGS.output_json and not FLAGS.against:
        raise app.UsageError(
            f"--output_json={FLAGS.output_json} writes --against's comparison; give --against too."
        )
    searches = configs.indexes(FLAGS.index)
    index = searches[0]
    if len(searches) > 1 and (FLAGS.against or FLAGS.per_query_out):
        mode = "--against" if FLAGS.against else "--per_query_out"
        raise app.UsageError(
            f"{mode} takes one search; received --index={FLAGS.index}. "
            "Give --index=exact or --index=scann."
        )
    if FLAGS.per_query_out:
        values = per_query_values(output_dir, FLAGS.split, index)
        per_query.check_against_report(values, output_dir)
        per_query.save(values, FLAGS.per_query_out)
        print(
            f"Wrote {FLAGS.per_query_out}: {len(values['users'])} {FLAGS.split} queries, "
            f"{index} search"
        )
        return
    if FLAGS.against:
        comparison = compare_runs(output_dir, FLAGS.against, FLAGS.split, index)
        per_query.report_comparison(
            comparison, output_dir, FLAGS.against, FLAGS.split, index, FLAGS.output_json
        )
        return
    config, by_search, geometry = evaluate_indexes(
        output_dir, FLAGS.split, FLAGS.index, FLAGS.geometry
    )
    path = RunFiles(output_dir).metrics
    saved = None
    if FLAGS.split == "test" and os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
    # The baselines the run scored on the same test queries (they search no index).
    baselines = (saved or {}).get("baselines") or {}
    for number, (search, metrics) in enumerate(by_search.items()):
        if number:
            print()
        print(
            f"{config.model.model} on {config.data.dataset} ({config.data.split}), "
            f"{FLAGS.split} split, {search} search, history filtered:\n"
        )
        print(report.format_metrics({"test": metrics, "baselines": baselines}))
    if geometry is not None:
        print(
            f"\nEmbedding geometry ({FLAGS.split} queries): "
            f"mean item direction norm {geometry['mean_direction_norm']:.3f}, "
            f"score std per query {geometry['score_std']:.3f}, "
            f"mean item norm {geometry['item_norm']:.3f}"
        )
    if saved is not None:
        for search, metrics in by_search.items():
            saved[f"test_{search}"] = metrics
        # "test" is the run's first search (exact, unless it searched by ScaNN only).
        run_index = "config" in saved and configs.Config.from_dict(saved["config"]).training.index
        if run_index:
            first = configs.indexes(run_index)[0]
            if first in by_search:
                saved["test"] = by_search[first]
        write_json(path, saved)  # A kill leaves the run's metrics whole.
        print(f"\nUpdated {path}")


if __name__ == "__main__":
    define_flags()
    console.run(main)  # app.run, with one-line usage errors and --verbose.
