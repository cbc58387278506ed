r"""TFRS's sequential-retrieval tutorial, with LogQRetrieval swapped in (issue 50).

The tutorial (tensorflow.org/recommenders/examples/sequential_retrieval): MovieLens-1M, each
example the last 10 movies a user watched (string ids, "0" padding) and the next one as a
[batch, 1] label, a GRU query tower, a `StringLookup` + `Embedding` item tower, in-batch
negatives and `FactorizedTopK`, trained as published (Adagrad 0.1, batches of 12,800 from a
10,000-example shuffle buffer, 3 epochs). Four tasks on the same towers, data and seeds:

- `tutorial`: `tfrs.tasks.Retrieval()` as published (no correction, score-based top-k);
- `tfrs_logq_hits`: TFRS with its own logQ (`candidate_sampling_probability`: each movie's
  training frequency) and `remove_accidental_hits=True`, the like-for-like baseline;
- `improved_in_batch`: `LogQRetrieval(correction="improved")` with a count-min sketch on the
  string ids and the batch's own negatives, the like-for-like of `tfrs_logq_hits`;
- `improved`: the same with mixed negatives: the whole batch plus `--num_uniform` draws from
  the tower's vocabulary (`MixedSampler.from_lookup`), the labels passed as they are
  ([batch, 1]).

Each user's last event is the test example, the earlier ones train (the tutorial splits its
examples at random). The script prints factorized top-10/50/100 on the test examples.

Usage (MovieLens-1M ratings from --data_path, else under $TFRS_LOGQ_DATA; the data is never
bundled):
  python -m examples.tfrs_sequential_tutorial --max_users=200 --epochs=1
"""

import json
import os

import tfrs_logq  # noqa: F401  First: sets up tf.keras (Keras 2) and ScaNN before TensorFlow.

# isort: split
import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs
from absl import app
from absl import flags

from pipelines.data import loaders

TASKS = ("tutorial", "tfrs_logq_hits", "improved_in_batch", "improved")
SHUFFLE_BUFFER = 10_000  # The tutorial's.
KS = (10, 50, 100)
CONTEXT = 10
PADDING = "0"

if __name__ == "__main__":
    flags.DEFINE_string("data_path", None, "MovieLens-1M ratings.dat (plain or .gz).")
    flags.DEFINE_integer("max_users", 0, "Keep the first N users (0: all).", lower_bound=0)
    flags.DEFINE_integer("epochs", 3, "Training epochs.", lower_bound=1)
    flags.DEFINE_integer(
        "batch_size", 12_800, "Training batch size (the tutorial's).", lower_bound=2
    )
    flags.DEFINE_integer("dim", 32, "Embedding dimension.", lower_bound=1)
    flags.DEFINE_integer(
        "num_uniform",
        1024,
        "`improved`: uniform negatives from the vocabulary on top of the whole batch.",
        lower_bound=1,
    )
    flags.DEFINE_list("seeds", ["0"], "Seeds.")
    flags.DEFINE_list("tasks", list(TASKS), f"Tasks among {', '.join(TASKS)}.")
    flags.DEFINE_string(
        "output",
        None,
        "JSON file of the results, written after each run; "
        "rerun with the same file to resume (its runs are not trained again).",
    )

FLAGS = flags.FLAGS


def ratings_path(data_path=None):
    """--data_path, else the ratings under $TFRS_LOGQ_DATA."""
    if data_path:
        return data_path
    root = os.environ.get(loaders.DATA_ENV, "")
    path = os.path.join(root, loaders.ML_1M_RATINGS_FILE) if root else ""
    if path and os.path.exists(path):
        return path
    raise FileNotFoundError(
        f"No MovieLens-1M ratings: pass --data_path, or set {loaders.DATA_ENV} to the directory "
        f"that holds {loaders.ML_1M_RATINGS_FILE}."
    )


def examples(path, max_users=0):
    """(train, test, movies): dicts of `context` [n, 10] and `label` [n, 1] string movie ids,
    each user's last event in test, and the catalog's movie ids."""
    events = loaders.load_grouplens(path)
    keep = events.user <= max_users if max_users else np.ones(len(events.user), bool)
    users, items = events.user[keep], events.item[keep]
    names = np.asarray(events.item_ids).astype(str)
    contexts, labels, last = [], [], []
    for start in np.flatnonzero(np.r_[True, users[1:] != users[:-1]]):
        end = start + int(np.sum(users == users[start]))
        timeline = names[items[start:end]].tolist()
        for t in range(1, len(timeline)):
            window = timeline[max(0, t - CONTEXT) : t]
            contexts.append([PADDING] * (CONTEXT - len(window)) + window)
            labels.append([timeline[t]])
            last.append(t == len(timeline) - 1)
    contexts, labels, last = np.array(contexts), np.array(labels), np.array(last)
    split = [dict(context=contexts[m], label=labels[m]) for m in (~last, last)]
    return split[0], split[1], sorted(set(names[items].tolist()))


class SequentialModel(tfrs.Model):
    """The tutorial's model; `kind` picks the task's call."""

    def __init__(self, query_model, movie_model, task, kind, probability=None):
        super().__init__()
        self.query_model, self.movie_model, self.task = query_model, movie_model, task
        self.kind, self.probability = kind, probability

    def compute_loss(self, features, training=False):
        labels = features["label"]  # [batch, 1]
        query = self.query_model(features["context"])
        candidates = self.movie_model(labels[:, 0])
        if self.kind == "tutorial":
            return self.task(query, candidates, compute_metrics=not training)
        if self.kind == "tfrs_logq_hits":
            return self.task(
                query,
                candidates,
                candidate_ids=labels[:, 0],
                candidate_sampling_probability=self.probability.lookup(labels[:, 0]),
                compute_metrics=not training,
            )
        return self.task(
            query,
            candidates,
            candidate_ids=labels,
            candidate_embedding_fn=self.movie_model,
            compute_metrics=not training,
            training=training,
        )


def run(kind, train, test, movies, seed, epochs=3, batch_size=12_800, dim=32, num_uniform=1024):
    """Trains one task and returns its factorized top-k accuracies {k: value} on `test`."""
    tf.keras.utils.set_random_seed(seed)
    query_model = tf.keras.Sequential(
        [
            tf.keras.layers.StringLookup(vocabulary=movies, mask_token=None),
            tf.keras.layers.Embedding(len(movies) + 1, dim),
            tf.keras.layers.GRU(dim),
        ]
    )
    movie_model = tf.keras.Sequential(
        [
            tf.keras.layers.StringLookup(vocabulary=movies, mask_token=None),
            tf.keras.layers.Embedding(len(movies) + 1, dim),
        ]
    )
    catalog = tf.data.Dataset.from_tensor_slices(movies)
    probability = None
    if kind == "tutorial":
        task = tfrs.tasks.Retrieval(
            metrics=tfrs.metrics.FactorizedTopK(
                candidates=catalog.batch(128).map(movie_model), ks=KS
            )
        )
    else:
        metrics = tfrs.metrics.FactorizedTopK(
            candidates=tfrs_logq.candidates(catalog, movie_model), ks=KS
        )
        if kind == "tfrs_logq_hits":
            values, counts = np.unique(train["label"][:, 0], return_counts=True)
            probability = tf.lookup.StaticHashTable(
                tf.lookup.KeyValueTensorInitializer(
                    tf.constant(values), tf.constant(counts / counts.sum(), tf.float32)
                ),
                default_value=float(1.0 / counts.sum()),
            )
            task = tfrs.tasks.Retrieval(metrics=metrics, remove_accidental_hits=True)
        else:
            estimator = tfrs_logq.CountMinSketchEstimator()
            if kind == "improved":
                sampler = tfrs_logq.MixedSampler.from_lookup(
                    movie_model.layers[0],
                    num_uniform,
                    batch_size,
                    seed=seed,
                    probabilities=estimator,
                )
            else:
                sampler = tfrs_logq.InBatchSampler(probabilities=estimator, seed=seed)
            task = tfrs_logq.LogQRetrieval(metrics=metrics, correction="improved", sampler=sampler)
    model = SequentialModel(query_model, movie_model, task, kind, probability)
    model.compile(optimizer=tf.keras.optimizers.Adagrad(learning_rate=0.1))
    train_ds = (
        tf.data.Dataset.from_tensor_slices(train)
        .shuffle(SHUFFLE_BUFFER, seed=seed)
        .batch(batch_size)
    )
    model.fit(train_ds, epochs=epochs, verbose=0)
    got = model.evaluate(
        tf.data.Dataset.from_tensor_slices(test).batch(batch_size), verbose=0, return_dict=True
    )
    return {k: float(got[f"factorized_top_k/top_{k}_categorical_accuracy"]) for k in KS}


def main(argv):
    del argv
    for kind in FLAGS.tasks:
        if kind not in TASKS:
            raise app.UsageError(
                f"--tasks must name tasks among {', '.join(TASKS)}; received {kind!r}."
            )
    train, test, movies = examples(ratings_path(FLAGS.data_path), FLAGS.max_users)
    print(
        f"{len(train['label'])} training and {len(test['label'])} test examples, "
        f"{len(movies)} movies"
    )
    settings = dict(
        epochs=FLAGS.epochs,
        batch_size=FLAGS.batch_size,
        dim=FLAGS.dim,
        num_uniform=FLAGS.num_uniform,
        max_users=FLAGS.max_users,
    )
    done = load_results(FLAGS.output, settings)
    print("| task | seed | " + " | ".join(f"top-{k}" for k in KS) + " |")
    print("|---|---|" + "---|" * len(KS))
    for kind in FLAGS.tasks:
        for seed in FLAGS.seeds:
            key = f"{kind}/{seed}"
            if key not in done["runs"]:
                result = run(
                    kind,
                    train,
                    test,
                    movies,
                    int(seed),
                    FLAGS.epochs,
                    FLAGS.batch_size,
                    FLAGS.dim,
                    FLAGS.num_uniform,
                )
                done["runs"][key] = {f"top_{k}": result[k] for k in KS}
                if FLAGS.output:
                    with open(FLAGS.output + ".tmp", "w", encoding="utf-8") as f:
                        json.dump(done, f, indent=1)
                    os.replace(FLAGS.output + ".tmp", FLAGS.output)
            row = done["runs"][key]
            print(f"| {kind} | {seed} | " + " | ".join(f"{row[f'top_{k}']:.4f}" for k in KS) + " |")
    print()
    print("\n".join(summary(done["runs"])))


def summary(runs):
    """Markdown lines: each task's factorized top-k, mean ± sample std over its seeds (n)."""
    lines = [
        "| task | n | " + " | ".join(f"top-{k}" for k in KS) + " |",
        "|---|---|" + "---|" * len(KS),
    ]
    for kind in TASKS:
        rows = [row for key, row in runs.items() if key.split("/")[0] == kind]
        if not rows:
            continue
        cells = []
        for k in KS:
            values = np.array([row[f"top_{k}"] for row in rows])
            spread = f" ± {values.std(ddof=1):.4f}" if len(values) > 1 else ""
            cells.append(f"{values.mean():.4f}{spread}")
        lines.append(f"| {kind} | {len(rows)} | " + " | ".join(cells) + " |")
    return lines


def load_results(path, settings):
    """The results in `path` ({"settings", "runs": {"task/seed": {top_k: value}}}), or an empty
    record; a file written with other settings is refused, naming both."""
    if not path or not os.path.exists(path):
        return {"settings": settings, "runs": {}}
    with open(path, encoding="utf-8") as f:
        done = json.load(f)
    if done["settings"] != settings:
        raise app.UsageError(
            f"--output={path} holds runs with settings {done['settings']}; "
            f"these flags give {settings}. Use another file."
        )
    return done


if __name__ == "__main__":
    app.run(main)
