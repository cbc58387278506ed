r"""The next-day job on Keras 3 (JAX by default): an event log's day store, trained in time
order with a count-min sketch and mixed negatives, tested on the next day's users over the
industrial index. No TensorFlow is imported, to build the store or to train.

The job is the library's (`pipelines.keras_job`); `tfrs-logq train --framework=keras` runs it
on a run directory with the pipelines' flags. This example runs it on a day store by path.

The data is the day store `pipelines.train` builds for an event log or the web-scale
synthetic log (`pipelines.data.day_store`: the training examples in time order, each with
its user's previous items, and the next day's test queries), read with numpy
(`DayStore.chunks`). Give `--store` a built store (a run's OUTPUT/day_store while it trains),
or `--build_store` `pipelines.train`'s flags: the store they describe is built here (the
synthetic log drawn first if missing, under $TFRS_LOGQ_CACHE where every run finds it) into
$TFRS_LOGQ_CACHE/day_store (`pipelines.data.logs.day_store_dir` without a run), or found there
built. The job's settings then default to that config's (its dimension, batch, negatives,
correction, learning rates, shuffle window, item tables, index size and seed; the flags given
override them); a config that trains what this job does not (another loss, more than one
epoch, ...) is refused. So

  python -m examples.keras_next_day --build_store='--preset=industrial' \
      --output=/tmp/next_day.json

is `python -m pipelines.train --preset=industrial` on Keras 3, trained and tested on the same
examples and queries.

The model is the pipelines' two-tower (`tfrs_logq.models.TwoTower`): a user table and the
mean embedding of the history's items (a history table of their own unless
`--share_item_table`), concatenated and projected (the query); the item table, projected (the
candidates); mixed negatives
(`keras_logq.MixedSampler`: `--num_uniform` uniform draws a step, shared by its rows, and the
in-batch pool, at most `--num_in_batch` of the batch's positives) with log Q from a
`keras_logq.CountMinSketchEstimator` fed each step's positives, and the `--correction`
(improved by default). The tables are `keras_logq.SparseEmbedding`s with
Adagrad on JAX (a step touches the batch's rows only), `keras.layers.Embedding` elsewhere.
One pass of `model.fit` over the days in time order, each block of `--shuffle_window`
examples permuted (`--max_steps` stops early; `--steps_per_execution` steps a call of the
compiled step), its loss printed as the mean of each LOSS_WINDOW steps. Every
`--backup_every` steps and at the pass's end the training state is backed up (under
$TFRS_LOGQ_CACHE/keras_next_day unless `--backup_dir`): the same command run again after a
kill resumes from the last backup, and the backups are removed once the results are written.
The test:
Recall@10/100/1000 and NDCG of each test query's next-day items over the `--index_size` most
trained items plus the day's positives (the pipelines' `test_index`), its history excluded,
by exact search.
"""

import os
import sys
import time

from absl import app
from absl import flags

from pipelines import keras_job
from pipelines import memory
from pipelines import provenance
from pipelines.data import day_store
from pipelines.data.interactions import DataError
from pipelines.keras_job import KS
from pipelines.keras_job import SETTINGS
from pipelines.keras_job import NonFiniteLoss
from pipelines.keras_job import backup_dir_for
from pipelines.keras_job import build_store
from pipelines.keras_job import config_settings
from pipelines.keras_job import remove_backups
from pipelines.keras_job import run
from pipelines.run_files import write_json

FLAGS = flags.FLAGS

if __name__ == "__main__":
    flags.DEFINE_string("store", "", "A built day store directory.")
    flags.DEFINE_string(
        "build_store", "", "pipelines.train's flags (quoted): build the store they describe."
    )
    # With --build_store, each setting not given takes the value of the config the store's
    # flags describe (`keras_job.config_settings`): the TensorFlow pipeline's job.
    keras_job.define_job_flags()
    flags.DEFINE_string(
        "backup_dir",
        "",
        "Where the backups go (default: a directory named by the store and the settings under "
        "$TFRS_LOGQ_CACHE/keras_next_day, removed when the job has written its results).",
    )
    flags.DEFINE_string("output", "", "Also write the results as JSON here.")


def main(argv):
    del argv
    started = time.time()
    os.environ.setdefault("KERAS_BACKEND", "jax")
    if bool(FLAGS.store) == bool(FLAGS.build_store):
        raise app.UsageError("Give one of --store and --build_store.")
    settings = {name: FLAGS[name].value for name in SETTINGS}
    if FLAGS.build_store:
        store_dir, config = build_store(FLAGS.build_store)
        given = {name: value for name, value in settings.items() if FLAGS[name].present}
        settings = {**settings, **config_settings(config), **given}
    else:
        store_dir = FLAGS.store
    if not os.path.exists(os.path.join(store_dir, day_store.MANIFEST)):
        raise app.UsageError(f"--store={store_dir} holds no built day store.")
    import keras  # pylint: disable=import-outside-toplevel

    backup_dir = ""
    if settings["backup_every"]:
        backup_dir = FLAGS.backup_dir or backup_dir_for(
            store_dir, settings, keras.backend.backend()
        )
    try:
        results = run(store_dir, settings, backup_dir=backup_dir)
    except (NonFiniteLoss, DataError) as error:  # Named: one line, no traceback.
        sys.exit(f"error: {error}")
    results.update(
        store=store_dir,
        build_store=FLAGS.build_store,
        wall_seconds=round(time.time() - started, 1),
        peak_rss_mb=round(memory.peak_rss_mib()),
        tensorflow_imported="tensorflow" in sys.modules,
        git_revision=provenance.revision(),
    )
    test = results["test"]
    print(
        f"\nKeras 3 two-tower ({results['backend']}) on {store_dir}: {results['steps']} steps "
        f"in {results['train_seconds']} s, loss (a window's mean) {results['first_loss']:.3f} -> "
        f"{results['last_loss']:.3f}; next-day test over {results['num_test_queries']} queries "
        f"and an index of {results['index_items']:,} items ({results['wall_seconds']} s from "
        f"its start, peak memory {results['peak_rss_mb']:,} MiB):\n"
    )
    print("| metric | @10 | @100 | @1000 |\n|---|---|---|---|")
    for name in ("recall", "ndcg"):
        print(f"| {name} | " + " | ".join(f"{test[f'{name}@{k}']:.4f}" for k in KS) + " |")
    if FLAGS.output:
        write_json(FLAGS.output, results)
    # The job is done: its backups go (a --backup_dir given keeps whatever else it holds).
    remove_backups(backup_dir)
    if backup_dir and not FLAGS.backup_dir and not os.listdir(backup_dir):
        os.rmdir(backup_dir)


if __name__ == "__main__":
    app.run(main)
