r"""Exports a Keras run (`tfrs-logq train --framework=keras`) for serving.

Usage:
  tfrs-logq export OUTPUT_DIR [--index=exact|scann|both] [--k=100]
  python -m pipelines.keras_export OUTPUT_DIR [--index=...] [--k=...]

Reads OUTPUT_DIR's config, its trained towers (OUTPUT_DIR/keras_model) and vocabularies,
and writes OUTPUT_DIR/export/keras/<version>/ (`keras_logq.serving.save`): the query model
as a `.keras` file, the served items' ids and embeddings, and the raw ids. A fresh process
serves it with Keras 3 alone, raw ids in and out (`keras_logq.serving.load`). The served
items are the run's `--index_size` most trained items (the whole catalog with 0), as the
TensorFlow job's exports serve.

A SASRec run exports its query (the history's last --max_length items) and every item of
the catalog, with the dataset's raw ids; no SavedModel follows (TensorFlow's export reads the
Keras two-tower's runs only, so far).

Where TensorFlow is installed, the TensorFlow job's SavedModels follow (`pipelines.export`,
in a process of their own: this one imports no TensorFlow): the same towers in
`tfrs_logq.models.TwoTower`, with the TensorFlow job's signatures, to export/brute_force/
and (--index=scann or both) export/scann/.
"""

import importlib.util
import os
import subprocess
import sys
from typing import Any, Dict, List

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
from pipelines.data import logs
from pipelines.run_files import RunFiles

FLAGS = flags.FLAGS
# Candidates embedded at once.
CHUNK = 2**16


def define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    define: Dict[str, Any] = dict(flag_values=flag_values)
    errors.define_debug_flag(flag_values)
    flags.DEFINE_enum(
        "index",
        "both",
        [*configs.INDEXES, *configs.INDEX_ALIASES],
        "The TensorFlow SavedModels written after the Keras export, where TensorFlow is "
        "installed: exact search (export/brute_force/), a ScaNN index (export/scann/), or "
        "both. The Keras export searches exactly.",
        **define,
    )
    flags.DEFINE_integer(
        "k", 100, "Item ids (and scores) each request returns, at most.", lower_bound=1, **define
    )
    flags.DEFINE_bool(
        "saved_models",
        True,
        "Where TensorFlow is installed, also write the TensorFlow job's SavedModels of the "
        "run's towers (--index's).",
        **define,
    )
    flags.DEFINE_enum(
        "framework",
        "keras",
        list(configs.FRAMEWORKS),
        "keras: the Keras export, then the SavedModels where TensorFlow is installed; tf: the "
        "SavedModels only (pipelines.export).",
        **define,
    )


def integer_kinds(data) -> List[str]:
    """The kinds ("user", "item") whose raw ids in `data` (an `Interactions`) are all
    integers as int64 prints them (served as int64), as an event log's are typed."""
    kinds = []
    for kind, ids in (("user", data.user_ids[1:]), ("item", data.item_ids[1:])):
        text = np.asarray(ids).astype(str)
        if len(text) and all(
            t.isdigit() and (t == "0" or not t.startswith("0")) and int(t) < 2**63 for t in text
        ):
            kinds.append(kind)
    return kinds


def export_sequential(output_dir: str, k: int = 100) -> str:
    """Writes the Keras SASRec run in `output_dir` to OUTPUT/export/keras/<next version>:
    its query (`keras_sequential.query_model`: the history's last --max_length items) and
    every item of the catalog, with the dataset's raw ids; the version directory."""
    from keras import ops  # pylint: disable=import-outside-toplevel

    import keras_logq  # pylint: disable=import-outside-toplevel  (Keras: its backend set)

    config, model, split, data = keras_train.load_sequential(output_dir)
    served = np.arange(1, split.num_items + 1)
    return keras_logq.serving.save(
        RunFiles(output_dir).export("keras"),
        keras_sequential.query_model(model, config),
        served,
        ops.convert_to_numpy(model.items.embeddings)[1:].astype(np.float32),
        history_length=config.model.max_length,
        k=min(k, len(served)),
        user_vocabulary=data.user_ids[1:],
        item_vocabulary=data.item_ids[1:],
        integer_ids=integer_kinds(data),
    )


def export_keras(output_dir: str, k: int = 100) -> str:
    """Writes the Keras run in `output_dir` to OUTPUT/export/keras/<next version>; the
    version directory."""
    if keras_train.read_config(output_dir).model.model == "sasrec":
        return export_sequential(output_dir, k)
    config, towers, split, data = keras_train.load_run(output_dir)
    served = keras_job.served_index(split.train_counts(), config.training.index_size)
    embeddings = np.concatenate(
        [
            np.asarray(towers.candidates(served[start : start + CHUNK].astype(np.int32)))
            for start in range(0, len(served), CHUNK)
        ]
    )
    import keras_logq  # pylint: disable=import-outside-toplevel  (Keras: its backend set)

    integer_ids = logs.event_log_facts(config, output_dir).get("integer_ids", [])
    return keras_logq.serving.save(
        RunFiles(output_dir).export("keras"),
        towers.query_model,
        served,
        embeddings,
        history_length=towers.history_length,
        k=min(k, len(served)),
        user_vocabulary=data.user_ids[1:],
        item_vocabulary=data.item_ids[1:],
        integer_ids=integer_ids,
    )


def tensorflow_installed() -> bool:
    """Whether TensorFlow can be imported here (not imported to find out)."""
    try:
        return importlib.util.find_spec("tensorflow") is not None
    except ImportError:  # A finder that refuses it.
        return False


def export_saved_models(output_dir: str, index: str, k: int) -> None:
    """Runs `pipelines.export` on the run in a process of its own (TensorFlow there, not
    here), its output passed through (the versions it wrote, or why ScaNN's was not).

    Raises:
      RuntimeError: it failed (its output says why).
    """
    command = [sys.executable, "-m", "pipelines.export", output_dir, f"--index={index}", f"--k={k}"]
    sys.stdout.flush()
    done = subprocess.run(command, check=False)
    if done.returncode:
        raise RuntimeError(
            f"the SavedModel export failed ({' '.join(command[1:])}: exit {done.returncode})"
        )


def main(argv):
    if len(argv) != 2:
        raise app.UsageError(
            "Usage: tfrs-logq export OUTPUT_DIR [--index=...] [--k=...] (a Keras run)"
        )
    saved_models = FLAGS.saved_models and tensorflow_installed()
    if FLAGS.framework == "tf" and not saved_models:
        raise app.UsageError(
            "--framework=tf writes the TensorFlow job's SavedModels, "
            + (
                "which --nosaved_models turns off."
                if tensorflow_installed()
                else "and TensorFlow is not installed here."
            )
        )
    logging.set_verbosity(logging.WARNING)
    os.environ.setdefault("KERAS_BACKEND", "jax")
    with errors.reported():
        try:
            sequential = keras_train.read_config(argv[1]).model.model == "sasrec"
            if sequential and FLAGS.framework == "tf":
                raise ValueError(
                    f"{argv[1]} is a Keras SASRec run: TensorFlow's SavedModels read the Keras "
                    "job's two-tower runs only, so far (--framework=keras exports it)."
                )
            if FLAGS.framework == "keras":
                print(f"Wrote {export_keras(argv[1], FLAGS.k)}", flush=True)
            if sequential and saved_models:
                print(
                    "No SavedModel: TensorFlow's export reads the Keras job's two-tower runs "
                    "only, so far (the Keras export serves with Keras 3 alone).",
                    file=sys.stderr,
                )
            elif saved_models:
                export_saved_models(argv[1], FLAGS.index, FLAGS.k)
        except (ValueError, RuntimeError) as error:
            if FLAGS.debug:
                raise
            sys.exit(f"error: {error}")
    if FLAGS.saved_models and not tensorflow_installed():
        print(
            "TensorFlow is not installed: no SavedModel (the Keras export serves with "
            "Keras 3 alone: keras_logq.serving.load).",
            file=sys.stderr,
        )


if __name__ == "__main__":
    define_flags()
    console.run(main)
