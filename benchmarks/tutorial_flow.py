r"""TFRS's own tutorial flows with `LogQRetrieval` swapped in for `tfrs.tasks.Retrieval`.

Two flows, each as TFRS's tutorials write them: a `tfrs.Model` whose `compute_loss` calls the
task, string ids looked up by `StringLookup`, embeddings of dim 32, trained by
`Model.train_step` (what `fit` runs) with Adagrad(0.1):

- "basic": the basic-retrieval tutorial (a user tower and a movie-title tower, in-batch
  negatives);
- "multitask": the multitask tutorial's retrieval-only model (rating_weight=0,
  retrieval_weight=1: the rating tower and its MSE task still run, weighted by 0).

The factorized top-K metrics are computed when `training` is False only (TFRS: "set this to
False during training for faster training"), so the step is the loss's.

The variants of one (flow, batch size) cell run interleaved in one process, round after round
(`benchmarks.steps.time_interleaved`), on the same batches, each on fresh towers:

- "tfrs": `tfrs.tasks.Retrieval()`, the tutorial's own call (no ids, no Q);
- "tfrs_q": the same with `candidate_sampling_probability` (Yi et al.'s correction in TFRS);
- "none": `LogQRetrieval(correction="none")` called as the tutorial calls TFRS's task;
- "standard_q" / "improved_q": Q per column as `candidate_sampling_probability` (a feature
  of the batch, here the title's share of the data), with the titles as `candidate_ids`;
- "standard_sketch" / "improved_sketch": a `CountMinSketchEstimator` updated with the batch
  and read in the step;
- "improved_static": a `StaticFrequency` over the title vocabulary.

Printed per cell: the median ms per step and its ratio to "tfrs" in the same run (and, for the
Q-given variants, to "tfrs_q"). With --output, a JSON record of every figure and the
commit it ran.

The data are MovieLens-1M's ratings with the movies' titles as ids when $TFRS_LOGQ_DATA holds
them (the tutorials use MovieLens-100K, which TFDS cannot download here), else a synthetic
catalog of 3,000 Zipf-distributed titles and 6,000 users.

Usage:
  python -m benchmarks.tutorial_flow --rounds=5 --steps_per_round=3
  python -m benchmarks.tutorial_flow --flows=basic --batch_sizes=1024 --variants=tfrs,none
"""

import gzip
import os
import platform
from typing import Callable, Dict, List, Optional, Tuple

import tfrs_logq  # noqa: F401  First: sets up tf.keras (Keras 2) and ScaNN before TensorFlow.

# isort: split
import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs
from absl import app
from absl import flags

from benchmarks import records
from benchmarks.steps import time_interleaved
from pipelines import provenance
from pipelines.data import loaders
from tfrs_logq import frequency
from tfrs_logq.tasks import LogQRetrieval

FLAGS = flags.FLAGS

TFRS = "tfrs"
TFRS_Q = "tfrs_q"
# name -> (correction or None for TFRS's task, where Q comes from: None, "given", "sketch",
# "static").
VARIANTS: Dict[str, Tuple[Optional[str], Optional[str]]] = {
    TFRS: (None, None),
    TFRS_Q: (None, "given"),
    "none": ("none", None),
    "standard_q": ("standard", "given"),
    "standard_sketch": ("standard", "sketch"),
    "improved_q": ("improved", "given"),
    "improved_sketch": ("improved", "sketch"),
    "improved_static": ("improved", "static"),
}
FLOWS = ("basic", "multitask")
DIM = 32


def define_flags() -> None:
    flags.DEFINE_list("flows", list(FLOWS), f"Flows to time: {', '.join(FLOWS)}.")
    flags.DEFINE_list("batch_sizes", ["1024", "8192"], "Examples per step.")
    flags.DEFINE_list(
        "variants", list(VARIANTS), "Variants to time (tfrs is always timed, as the reference)."
    )
    flags.DEFINE_integer(
        "rounds", 5, "Interleaved rounds; the median over rounds is reported.", lower_bound=1
    )
    flags.DEFINE_integer("steps_per_round", 3, "Steps timed per variant and round.", lower_bound=1)
    flags.DEFINE_integer("seed", 0, "Seed of the data order and the synthetic catalog.")
    flags.DEFINE_string("output", "", "Optional path of a JSON record of the run.")


def movielens_titles():
    """(user ids, titles, ratings) of ML-1M's ratings, the ids as strings (ratings None when
    the loader keeps none), or None without them under $TFRS_LOGQ_DATA."""
    movies = os.path.join(loaders.DATA_DIR, "ml-1m", "movies.dat.gz")
    if not (os.path.exists(movies) and os.path.exists(loaders.ML_1M_RATINGS)):
        return None
    with gzip.open(movies, "rt", encoding="latin-1") as f:
        titles = dict(line.rstrip("\n").split("::")[:2] for line in f)
    data = loaders.load_grouplens()
    return (
        data.user_ids[data.user].astype(str),
        np.array([titles.get(i, i) for i in data.item_ids])[data.item],
        data.rating.astype(np.float32) if hasattr(data, "rating") else None,
    )


def tutorial_data(seed: int):
    """(users, titles, ratings, a line naming the data): the ratings as string ids."""
    found = movielens_titles()
    if found is not None:
        users, titles, ratings = found
        source = "MovieLens-1M, titles as ids"
    else:
        rng = np.random.default_rng(seed)
        q = 1.0 / np.arange(1, 3001)
        size = 1_000_000
        users = rng.integers(0, 6000, size=size).astype(str)
        titles = np.array([f"Movie {i} (1999)" for i in range(3000)])[
            rng.choice(3000, size=size, p=q / q.sum())
        ]
        ratings = None
        source = "synthetic: 3,000 Zipf-distributed titles, 6,000 users"
    if ratings is None:
        ratings = np.random.default_rng(seed + 1).integers(1, 6, size=len(users)).astype(np.float32)
    return users, titles, ratings, source


def batches_of(users, titles, ratings, batch_size: int, count: int, seed: int):
    """`count` batches of the tutorial's features, with Q per title (its share of the data)."""
    vocabulary, inverse, counts = np.unique(titles, return_inverse=True, return_counts=True)
    share = (counts / counts.sum()).astype(np.float32)[inverse]
    order = np.random.default_rng(seed).permutation(len(users))[: count * batch_size]
    return (
        [
            (
                {
                    "user_id": tf.constant(users[rows]),
                    "movie_title": tf.constant(titles[rows]),
                    "user_rating": tf.constant(ratings[rows]),
                    "q": tf.constant(share[rows]),
                },
            )
            for rows in np.split(order, count)
        ],
        vocabulary,
        counts,
    )


def make_task(variant: str, title_vocabulary, counts) -> tf.keras.layers.Layer:
    correction, source = VARIANTS[variant]
    if correction is None:
        return tfrs.tasks.Retrieval()
    estimator = None
    if source == "sketch":
        estimator = frequency.CountMinSketchEstimator(seed=1)
    elif source == "static":
        estimator = frequency.StaticFrequency(
            (counts / counts.sum()).astype(np.float32), vocabulary=list(title_vocabulary)
        )
    return LogQRetrieval(correction=correction, frequency=estimator)


def task_arguments(variant: str, features) -> dict:
    """The tutorial's task call, plus what the variant reads: ids, Q."""
    correction, source = VARIANTS[variant]
    arguments = {}
    if source == "given":
        arguments["candidate_sampling_probability"] = features["q"]
    if correction is not None and source is not None:
        arguments["candidate_ids"] = features["movie_title"]
    return arguments


def tower(vocabulary) -> tf.keras.Model:
    return tf.keras.Sequential(
        [
            tf.keras.layers.StringLookup(vocabulary=list(vocabulary), mask_token=None),
            tf.keras.layers.Embedding(len(vocabulary) + 1, DIM),
        ]
    )


class BasicRetrieval(tfrs.Model):
    """The basic-retrieval tutorial's model, its task `task`."""

    def __init__(self, user_vocabulary, title_vocabulary, task, variant: str):
        super().__init__()
        self.user_model = tower(user_vocabulary)
        self.movie_model = tower(title_vocabulary)
        self.task = task
        self.variant = variant

    def compute_loss(self, features, training=False):
        user_embeddings = self.user_model(features["user_id"])
        positive_movie_embeddings = self.movie_model(features["movie_title"])
        return self.task(
            user_embeddings,
            positive_movie_embeddings,
            compute_metrics=not training,
            training=training,
            **task_arguments(self.variant, features),
        )


class Multitask(tfrs.Model):
    """The multitask tutorial's model with rating_weight=0, retrieval_weight=1."""

    def __init__(self, user_vocabulary, title_vocabulary, task, variant: str):
        super().__init__()
        self.user_model = tower(user_vocabulary)
        self.movie_model = tower(title_vocabulary)
        self.rating_model = tf.keras.Sequential(
            [
                tf.keras.layers.Dense(256, activation="relu"),
                tf.keras.layers.Dense(128, activation="relu"),
                tf.keras.layers.Dense(1),
            ]
        )
        self.rating_task = tfrs.tasks.Ranking(
            loss=tf.keras.losses.MeanSquaredError(),
            metrics=[tf.keras.metrics.RootMeanSquaredError()],
        )
        self.retrieval_task = task
        self.variant = variant
        self.rating_weight, self.retrieval_weight = 0.0, 1.0

    def call(self, features):
        user_embeddings = self.user_model(features["user_id"])
        movie_embeddings = self.movie_model(features["movie_title"])
        return (
            user_embeddings,
            movie_embeddings,
            self.rating_model(tf.concat([user_embeddings, movie_embeddings], axis=1)),
        )

    def compute_loss(self, features, training=False):
        ratings = features["user_rating"]
        user_embeddings, movie_embeddings, rating_predictions = self(features)
        rating_loss = self.rating_task(labels=ratings, predictions=rating_predictions)
        retrieval_loss = self.retrieval_task(
            user_embeddings,
            movie_embeddings,
            compute_metrics=not training,
            training=training,
            **task_arguments(self.variant, features),
        )
        return self.rating_weight * rating_loss + self.retrieval_weight * retrieval_loss


def make_step(flow: str, variant: str, users, title_vocabulary, counts) -> Callable:
    """`Model.train_step` of a fresh model of `flow` with `variant`'s task, compiled."""
    model_class = BasicRetrieval if flow == "basic" else Multitask
    model = model_class(
        users, title_vocabulary, make_task(variant, title_vocabulary, counts), variant
    )
    model.compile(optimizer=tf.keras.optimizers.Adagrad(0.1))
    train_step = tf.function(model.train_step)
    return lambda features: train_step(features)["loss"]


def check_flags() -> Tuple[List[str], List[int], List[str]]:
    flows = [f for f in FLAGS.flows]
    bad = [f for f in flows if f not in FLOWS]
    if bad or not flows:
        raise app.UsageError(f"--flows must be among {', '.join(FLOWS)}; received {FLAGS.flows}.")
    try:
        sizes = [int(b) for b in FLAGS.batch_sizes]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 2:
        raise app.UsageError(
            f"--batch_sizes must be integers >= 2; received {','.join(FLAGS.batch_sizes)}."
        )
    bad = [v for v in FLAGS.variants if v not in VARIANTS]
    if bad:
        raise app.UsageError(
            f"--variants must be among {', '.join(VARIANTS)}; received {', '.join(bad)}."
        )
    variants = [TFRS] + [v for v in FLAGS.variants if v != TFRS]
    if (
        any(VARIANTS[v][1] == "given" and VARIANTS[v][0] for v in variants)
        and TFRS_Q not in variants
    ):
        variants.insert(1, TFRS_Q)
    return flows, sizes, variants


def main(argv) -> None:
    del argv
    flows, sizes, variants = check_flags()
    users, titles, ratings, source = tutorial_data(FLAGS.seed)
    user_vocabulary = sorted(set(users.tolist()))
    print(
        f"TFRS's tutorial flows, {source}: {len(user_vocabulary):,} users; dim {DIM}, "
        f"Adagrad(0.1); {FLAGS.rounds} interleaved rounds of {FLAGS.steps_per_round} steps.\n"
    )
    cells = []
    for flow in flows:
        for batch_size in sizes:
            batches, title_vocabulary, counts = batches_of(
                users, titles, ratings, batch_size, 8, FLAGS.seed
            )
            steps = {
                v: make_step(flow, v, user_vocabulary, title_vocabulary, counts) for v in variants
            }
            medians = time_interleaved(steps, batches, FLAGS.rounds, FLAGS.steps_per_round)
            print(
                f"{flow} flow, batch {batch_size}, {len(title_vocabulary):,} titles:\n\n"
                "| variant | ms/step | vs tfrs | vs tfrs_q |\n|---|---|---|---|"
            )
            for v in variants:
                q_ratio = (
                    f"{medians[v] / medians[TFRS_Q]:.3f}x"
                    if VARIANTS[v][1] == "given" and TFRS_Q in medians
                    else ""
                )
                print(
                    f"| {v} | {medians[v] * 1e3:.1f} | {medians[v] / medians[TFRS]:.3f}x | "
                    f"{q_ratio} |"
                )
            print()
            cells.append(
                {
                    "flow": flow,
                    "batch_size": batch_size,
                    "num_titles": len(title_vocabulary),
                    "seconds_per_step": {v: medians[v] for v in variants},
                    "ratio_to_tfrs": {v: medians[v] / medians[TFRS] for v in variants},
                }
            )
    if FLAGS.output:
        records.write(
            FLAGS.output,
            {
                "benchmark": "tutorial_flow",
                "git_revision": provenance.revision(),
                "machine": platform.processor() or platform.machine(),
                "cpus": os.cpu_count(),
                "tensorflow": tf.__version__,
                "data": source,
                "dim": DIM,
                "rounds": FLAGS.rounds,
                "steps_per_round": FLAGS.steps_per_round,
                "cells": cells,
            },
        )


if __name__ == "__main__":
    define_flags()
    app.run(main)
