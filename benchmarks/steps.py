"""The timed two-tower training step shared by the benchmarks (no flags here, so any may
import it)."""

import time
from typing import Callable, Dict

import numpy as np
import tensorflow as tf

from benchmarks import catalog


class TwoTower(tf.keras.Model):
    """User id -> embedding -> dense; item id -> embedding -> dense."""

    def __init__(self, num_users: int, num_items: int, dim: int, seed: int):
        super().__init__()
        init = tf.keras.initializers.RandomNormal(stddev=0.05, seed=seed)
        self.user_tower = tf.keras.Sequential(
            [
                tf.keras.layers.Embedding(num_users, dim, embeddings_initializer=init),
                tf.keras.layers.Dense(dim),
            ]
        )
        self.item_tower = tf.keras.Sequential(
            [
                tf.keras.layers.Embedding(num_items, dim, embeddings_initializer=init),
                tf.keras.layers.Dense(dim),
            ]
        )


def zipf_batches(num_items: int, batch_size: int, count: int, seed: int, exponent=1.0):
    """`count` batches of (user ids, item ids, item probabilities), items ~ Zipf(exponent)."""
    rng = np.random.default_rng(seed)
    q = catalog.zipf_probabilities(num_items, exponent)
    batches = []
    for _ in range(count):
        items = rng.choice(num_items, size=batch_size, p=q).astype(np.int64)
        users = rng.integers(0, num_items, size=batch_size).astype(np.int64)
        batches.append(tuple(tf.constant(x) for x in (users, items, q[items].astype(np.float32))))
    return batches, q


def make_train_step(
    model: TwoTower,
    task: tf.keras.layers.Layer,
    use_probability: bool,
    extra: Callable = None,
    optimizer: tf.keras.optimizers.Optimizer = None,
    task_arguments: Callable = None,
) -> Callable:
    """A compiled step: loss of `task` on in-batch negatives, gradients, optimizer update.

    Args:
      model: the two towers.
      task: a retrieval task called as TFRS's (query, candidates, ...).
      use_probability: pass the items' sampling probabilities to the task.
      extra: optional callable(items) run inside the step (e.g. an estimator
        update), for benchmarks that measure what it adds.
      optimizer: default Adam(1e-3).
      task_arguments: optional callable(items) -> further keyword arguments of the task,
        called in the step under the gradient tape (e.g. the item tower as
        `candidate_embedding_fn` for a sampler, or Q read from an estimator as
        `candidate_sampling_probability`).
    """
    optimizer = optimizer or tf.keras.optimizers.Adam(1e-3)

    @tf.function
    def step(users, items, probability):
        if extra is not None:
            extra(items)
        with tf.GradientTape() as tape:
            arguments = dict(
                candidate_sampling_probability=(probability if use_probability else None)
            )
            arguments.update(task_arguments(items) if task_arguments is not None else {})
            loss = task(
                model.user_tower(users),
                model.item_tower(items),
                candidate_ids=items,
                compute_metrics=False,
                **arguments,
            )
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return step


def time_interleaved(
    steps: Dict[str, Callable], batches, rounds: int, steps_per_round: int
) -> Dict[str, float]:
    """Median seconds per step of each variant, the variants interleaved round by round.

    `batches`: one list of batches for every variant, or {variant: its list}.
    """
    of = batches if isinstance(batches, dict) else {name: batches for name in steps}
    for name, fn in steps.items():  # Compile and warm up.
        for batch in of[name][:3]:
            fn(*batch).numpy()
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, fn in steps.items():
            started = time.perf_counter()
            for i in range(steps_per_round):
                loss = fn(*of[name][i % len(of[name])])
            loss.numpy()
            times[name].append((time.perf_counter() - started) / steps_per_round)
    return {name: float(np.median(t)) for name, t in times.items()}
