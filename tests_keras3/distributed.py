"""A two-tower trained with keras_logq's samplers on one device and under `keras.distribution`.

Run by `tests_keras3/test_distribution.py` in a child process, because the number of JAX
host devices is fixed when JAX starts (XLA_FLAGS must be set before it is imported):

    KERAS_BACKEND=jax python -m tests_keras3.distributed --devices=2

prints one JSON object: for every sampler and every setting ("single": no distribution,
on device 0; "data_parallel": `DataParallel` over the devices; "model_parallel":
`ModelParallel` over a (devices / 2, 2) mesh with the item table's rows sharded over the
"model" axis by a `LayoutMap`), the loss of each step, the weights after the first step
and after the last, the samplers' seed state, the frequency estimator's state, the
static number of in-batch slots the sampler saw when the step was traced, and the
sharding of the item ids and of the item table inside the step. The same global batches,
initial weights and seeds in every setting, so equal numbers mean the distributed step
draws what the single-device step draws, from the global batch.

`--tables=sgd` (or another of `keras_logq.sparse.OPTIMIZERS`) makes both tables
`SparseEmbedding`s of that rule in a `SparseUpdates` model; under `ModelParallel` the item
table's optimizer state is sharded by rows with the table.
"""

import argparse
import json
import os
import sys


def _parse():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--samplers", default="in_batch_dedup_capped,mixed_sketch_per_row")
    parser.add_argument("--tables", default="dense", help="dense, or a SparseEmbedding rule")
    return parser.parse_args()


ARGS = _parse()
# Before JAX is imported: the host platform as ARGS.devices CPU devices.
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), f"--xla_force_host_platform_device_count={ARGS.devices}"]
).strip()
os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402  pylint: disable=wrong-import-position
import keras  # noqa: E402  pylint: disable=wrong-import-position
import numpy as np  # noqa: E402  pylint: disable=wrong-import-position
from keras import ops  # noqa: E402  pylint: disable=wrong-import-position

import keras_logq  # noqa: E402  pylint: disable=wrong-import-position
from keras_logq import sparse  # noqa: E402  pylint: disable=wrong-import-position
from tests import reference  # noqa: E402  pylint: disable=wrong-import-position

NUM_ITEMS, ZIPF_Q = reference.NUM_ITEMS, reference.ZIPF_Q
DIM = 8
LEARNING_RATE = 0.5
# What the step saw when traced (a module dict: Keras would track a model's own).
TRACE = {}


def make_sampler(kind):
    """The sampler `kind` names, seeded; "mixed_sketch" reads a count-min sketch that the
    step updates with the batch's ids."""
    if kind == "in_batch":
        return keras_logq.InBatchSampler(probabilities=ZIPF_Q, seed=1)
    if kind == "in_batch_dedup_capped":
        return keras_logq.InBatchSampler(
            deduplicate=True, max_pool_size=16, probabilities=ZIPF_Q, seed=2
        )
    if kind == "mixed_per_row":
        return keras_logq.MixedSampler(NUM_ITEMS, 6, 16, per_row=True, probabilities=ZIPF_Q, seed=3)
    if kind in ("mixed_sketch", "mixed_sketch_per_row"):
        sketch = keras_logq.CountMinSketchEstimator(width=64, depth=2, decay=0.9, seed=4)
        return keras_logq.MixedSampler(
            NUM_ITEMS, 6, 16, per_row=kind.endswith("per_row"), probabilities=sketch, seed=5
        )
    raise ValueError(kind)


class TwoTower(keras.Model):
    """User and item embeddings; the loss draws negatives with the sampler."""

    def __init__(self, kind, **kwargs):
        super().__init__(**kwargs)
        self.users, self.items = (self._table(name) for name in ("users", "items"))
        self.sampler = make_sampler(kind)

    def _table(self, name):
        if ARGS.tables == "dense":
            return keras.layers.Embedding(NUM_ITEMS, DIM, name=name)
        return sparse.SparseEmbedding(
            NUM_ITEMS, DIM, optimizer=ARGS.tables, learning_rate=LEARNING_RATE, name=name
        )

    def call(self, inputs):
        return self.users(inputs["user"]), self.items(inputs["item"])

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del y, sample_weight, training
        query, positives = y_pred
        frequency = self.sampler.frequency
        if isinstance(frequency, keras_logq.CountMinSketchEstimator):
            frequency.update(x["item"])
        negatives = self.sampler(
            x["item"], x["item"], positives, embedding_fn=lambda ids: self.items(ids)
        )
        # Trace time: the static shapes are the step's (the global batch under jit).
        TRACE["batch"] = int(x["item"].shape[0])
        TRACE["negatives"] = [int(n) for n in negatives.ids.shape]
        jax.debug.inspect_array_sharding(
            x["item"], callback=lambda s: TRACE.update(item_ids=str(_spec(s)))
        )
        jax.debug.inspect_array_sharding(
            self.items.embeddings.value, callback=lambda s: TRACE.update(item_table=str(_spec(s)))
        )
        return ops.mean(
            keras_logq.negatives_loss(query, positives, negatives, correction="improved")
        )


class SparseTwoTower(sparse.SparseUpdates, TwoTower):
    """The two-tower whose tables are `SparseEmbedding`s, updated row by row."""


def _spec(sharding):
    """A sharding as its partition spec (a single device's as "single device")."""
    return getattr(sharding, "spec", "single device")


def _numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def _state(model):
    sampler = model.sampler
    seeds = (
        [sampler.seed_generator]
        if isinstance(sampler, keras_logq.InBatchSampler)
        else [sampler.uniform.seed_generator, sampler.in_batch.seed_generator]
    )
    state = {"seeds": [_numpy(s.state).tolist() for s in seeds]}
    frequency = sampler.frequency
    if isinstance(frequency, keras_logq.CountMinSketchEstimator):
        state["sketch"] = [_numpy(w).tolist() for w in frequency.non_trainable_weights]
    return state


def train(kind, distribution, data, initial):
    """Trains `kind`'s two-tower for ARGS.steps steps of ARGS.batch rows (the global batch)
    under `distribution` (None: one device)."""
    keras.utils.set_random_seed(0)
    TRACE.clear()
    scope = distribution.scope() if distribution is not None else _NoScope()
    with scope:
        model = (TwoTower if ARGS.tables == "dense" else SparseTwoTower)(kind)
        model.compile(optimizer=keras.optimizers.SGD(LEARNING_RATE))
        model({"user": data["user"][:2], "item": data["item"][:2]})  # Builds the tables.
        model.users.embeddings.assign(initial["users"])
        model.items.embeddings.assign(initial["items"])
        losses, after_first = [], None
        for step in range(ARGS.steps):
            rows = slice(step * ARGS.batch, (step + 1) * ARGS.batch)
            batch = {name: values[rows] for name, values in data.items()}
            losses.append(float(model.train_on_batch(batch)))
            if step == 0:
                after_first = {
                    "users": _numpy(model.users.embeddings).tolist(),
                    "items": _numpy(model.items.embeddings).tolist(),
                }
        return dict(
            losses=losses,
            after_first=after_first,
            users=_numpy(model.users.embeddings).tolist(),
            items=_numpy(model.items.embeddings).tolist(),
            table_sharding=str(_spec(model.items.embeddings.value.sharding)),
            state_sharding={
                name: str(_spec(slot.value.sharding))
                for name, slot in getattr(model.items, "slots", {}).items()
            },
            trace=dict(TRACE),
            **_state(model),
        )


class _NoScope:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main():
    devices = jax.devices()
    assert len(devices) == ARGS.devices, devices
    rng = np.random.default_rng(1)
    rows = ARGS.steps * ARGS.batch
    data = dict(
        user=rng.integers(0, NUM_ITEMS, rows).astype(np.int32),
        item=rng.choice(NUM_ITEMS, rows, p=ZIPF_Q).astype(np.int32),
    )
    initial = dict(
        users=rng.normal(size=(NUM_ITEMS, DIM)).astype(np.float32) * 0.3,
        items=rng.normal(size=(NUM_ITEMS, DIM)).astype(np.float32) * 0.3,
    )
    mesh = keras.distribution.DeviceMesh((ARGS.devices // 2, 2), ("batch", "model"), devices)
    layout_map = keras.distribution.LayoutMap(mesh)
    layout_map[".*items/embeddings"] = ("model", None)  # The item table's rows, sharded.
    if ARGS.tables != "dense":  # ...and its optimizer state's rows (row-wise: one per row).
        layout_map[".*items/(m|v)"] = ("model", None)
        layout_map[".*items/accumulator"] = (
            ("model",) if ARGS.tables == "rowwise_adagrad" else ("model", None)
        )
    settings = {
        "single": None,
        "data_parallel": keras.distribution.DataParallel(devices=devices),
        "model_parallel": keras.distribution.ModelParallel(
            layout_map=layout_map, batch_dim_name="batch"
        ),
    }
    results = {
        "learning_rate": LEARNING_RATE,
        "initial": {k: v.tolist() for k, v in initial.items()},
    }
    for kind in ARGS.samplers.split(","):
        results[kind] = {
            name: train(kind, distribution, data, initial)
            for name, distribution in settings.items()
        }
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
