r"""Re-evaluates a Keras run (`tfrs-logq train --framework=keras`) on Keras 3, without
TensorFlow.

Usage:
  tfrs-logq evaluate OUTPUT_DIR [--split=test|validation]
  tfrs-logq evaluate OUTPUT_DIR --against=OTHER [--output_json=PATH]
  tfrs-logq evaluate OUTPUT_DIR --per_query_out=PATH.npz

A SASRec run is evaluated from its best epoch's weights (OUTPUT_DIR/keras_model/best.npz),
its queries ranked over the whole catalog as its training tested them. A two-tower run: the
Keras job's evaluation of its saved towers (OUTPUT_DIR/keras_model): exact search on the
backend's device (`keras_logq.ranking.exact_top_k`), the test split over the run's test index
(the `--index_size` most trained items plus the day's positives), the validation split over
the whole catalog; each query's history excluded. It prints the table and, for the test
split, updates OUTPUT_DIR/metrics.json. --per_query_out and --against are
`pipelines.evaluate`'s: each query's metrics to a .npz, or a paired comparison query by query
with another Keras run or such a file. `tfrs-logq evaluate OUTPUT_DIR --framework=tf` evaluates
the same towers with TensorFlow (`pipelines.evaluate`: ScaNN, --geometry, TensorFlow runs
for --against).
"""

import json
import os
import sys
from typing import Any, Dict

import numpy as np
from absl import app
from absl import flags
from absl import logging

from pipelines import configs
from pipelines import console
from pipelines import errors
from pipelines import keras_job
from pipelines import keras_sequential
from pipelines import keras_train
from pipelines import per_query
from pipelines.run_files import RunFiles
from pipelines.run_files import write_json

FLAGS = flags.FLAGS


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    define: Dict[str, Any] = dict(flag_values=flag_values)
    errors.define_debug_flag(flag_values)
    flags.DEFINE_enum("split", "test", ["test", "validation"], "Which evaluation set.", **define)
    flags.DEFINE_enum(
        "index",
        "exact",
        [*configs.INDEXES, *configs.INDEX_ALIASES],
        "exact (the Keras job's search); a ScaNN index is TensorFlow's: --framework=tf.",
        **define,
    )
    flags.DEFINE_enum(
        "framework",
        "keras",
        list(configs.FRAMEWORKS),
        "keras: this module; tf: TensorFlow evaluates the run (`tfrs-logq evaluate "
        "--framework=tf` runs pipelines.evaluate).",
        **define,
    )
    flags.DEFINE_string(
        "against",
        None,
        "Another Keras run on the same data and split, or a --per_query_out file: compare "
        "OUTPUT_DIR with it query by query (paired) instead.",
        **define,
    )
    flags.DEFINE_string(
        "output_json", None, "With --against: also write the comparison to this file.", **define
    )
    flags.DEFINE_string(
        "per_query_out",
        None,
        "Write each query's metrics to this .npz, which --against then reads in place of the run.",
        **define,
    )


def per_query_values(source: str, split: str = "test") -> Dict:
    """`per_query`'s record of `source` on `split` by exact search: a Keras run directory
    (evaluated from its towers) or a --per_query_out file."""
    if source.endswith(per_query.SUFFIX):
        return per_query.load_as(source, split, "exact")
    if keras_train.read_config(source).model.model == "sasrec":
        return _sequential_values(source, split)
    config, towers, split_data, _ = keras_train.load_run(source)
    eval_set = split_data.test if split == "test" else split_data.validation
    if eval_set is None or not len(eval_set.users):
        raise ValueError(f"{source}: its {split} split holds no queries.")
    counts = split_data.train_counts()
    index = (
        keras_job.test_index(counts, eval_set, config.training.index_size)
        if split == "test"
        else np.arange(1, len(counts))
    )
    means, values = keras_job.evaluate(
        towers,
        eval_set,
        index,
        towers.history_length,
        ks=configs.ks(config.training),
        per_query=True,
    )
    return _record(config, eval_set, split, means, values, len(index))


def _record(config, eval_set, split: str, means, values, index_items: int) -> Dict:
    """`per_query_values`'s record of `eval_set`'s `means` and each query's `values`."""
    return {
        "users": np.asarray(eval_set.users),
        "targets_digest": per_query.targets_digest(eval_set.targets),
        "split": split,
        "index": "exact",
        "description": f"{config.data.dataset}, split {config.data.split}",
        "values": values,
        "means": means,
        "index_items": index_items,
        "config": config,
    }


def _sequential_values(source: str, split: str) -> Dict:
    """`per_query_values` of a Keras SASRec run: its best epoch's model, the split's queries
    ranked over the whole catalog (`keras_sequential.evaluate`), as its training tested."""
    config, model, split_data, _ = keras_train.load_sequential(source)
    eval_set = split_data.test if split == "test" else split_data.validation
    means, values = keras_sequential.evaluate(model, config, split_data, eval_set)
    return _record(config, eval_set, split, means, values, split_data.num_items)


def main(argv):
    if len(argv) != 2:
        raise app.UsageError("Usage: tfrs-logq evaluate OUTPUT_DIR [--split=...] (a Keras run)")
    output_dir = argv[1]
    if FLAGS.framework == "tf":
        raise app.UsageError(
            f"--framework=tf: TensorFlow evaluates {output_dir} as `tfrs-logq evaluate "
            f"{output_dir} --framework=tf` (python -m pipelines.evaluate)."
        )
    if configs.indexes(FLAGS.index) != ("exact",):
        raise app.UsageError(
            f"--index={FLAGS.index}: the Keras job searches exactly; a ScaNN index is "
            "TensorFlow's (--framework=tf)."
        )
    modes = [f"--{name}" for name in ("per_query_out", "against") if FLAGS[name].value]
    if len(modes) > 1:
        raise app.UsageError(f"{' and '.join(modes)} are separate jobs; give one of them.")
    if FLAGS.output_json and not FLAGS.against:
        raise app.UsageError(
            f"--output_json={FLAGS.output_json} writes --against's comparison; give --against too."
        )
    logging.set_verbosity(logging.WARNING)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    try:
        with errors.reported():
            _evaluate(output_dir)
    except ValueError as error:  # Runs that do not pair, a report that does not match.
        if FLAGS.debug:
            raise
        sys.exit(f"error: {error}")


def _evaluate(output_dir: str) -> None:
    """`main`'s job, its flags checked."""
    if FLAGS.against:
        a, b = (per_query_values(source, FLAGS.split) for source in (FLAGS.against, output_dir))
        comparison = per_query.compare(a, b, f"--against={FLAGS.against}", output_dir)
        per_query.report_comparison(
            comparison, output_dir, FLAGS.against, FLAGS.split, "exact", FLAGS.output_json
        )
        return
    record = per_query_values(output_dir, FLAGS.split)
    means, config = record.pop("means"), record.pop("config")
    index_items = record.pop("index_items")
    if FLAGS.per_query_out:
        per_query.check_against_report(record, output_dir)
        per_query.save(record, FLAGS.per_query_out)
        print(
            f"Wrote {FLAGS.per_query_out}: {len(record['users'])} {FLAGS.split} queries, "
            "exact search"
        )
        return
    ks = configs.ks(config.training)
    print(
        f"{config.model.model} on {config.data.dataset} ({config.data.split}), Keras 3, "
        f"{FLAGS.split} "
        f"split over {index_items:,} items, exact search on the device, history filtered:\n"
    )
    print("| metric | " + " | ".join(f"@{k}" for k in ks) + " |\n|---|" + "---|" * len(ks))
    for name in ("recall", "ndcg"):
        print(f"| {name} | " + " | ".join(f"{means[f'{name}@{k}']:.4f}" for k in ks) + " |")
    path = RunFiles(output_dir).metrics
    if FLAGS.split == "test" and os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        saved["test"] = saved["test_exact"] = means
        write_json(path, saved)  # A kill leaves the run's metrics whole.
        print(f"\nUpdated {path}")


if __name__ == "__main__":
    define_flags()
    console.run(main)
