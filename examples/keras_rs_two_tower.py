r"""A keras-rs two-tower model trained with keras_logq's improved correction, on JAX.

The embedded synthetic catalog (`pipelines.data.synthetic`, leave-one-out), a
user tower and an item tower (embeddings), in-batch negatives with Q the
training frequency of each item, and two losses on the same scores, the same
initial weights and the same batches:

- keras-rs's way: `keras_rs.layers.SamplingProbabilityCorrection` (the standard
  logQ, every column corrected) and `RemoveAccidentalHits`, then softmax
  cross-entropy, as in keras-rs's retrieval examples;
- `keras_logq.SampledSoftmax(correction="standard")`: the same correction, with accidental
  hits masked (keras-rs 0.4.0's `RemoveAccidentalHits` leaves them in place, see the README);
- `keras_logq.SampledSoftmax(correction="improved")`.

Both are evaluated with `keras_rs.layers.BruteForceRetrieval` over the whole
catalog, each user's training items excluded, and the script prints
Recall@10 and NDCG@10 on the test targets.

Usage (JAX by default; KERAS_BACKEND=tensorflow or torch works too):
  python -m examples.keras_rs_two_tower
"""

import os
import time

import numpy as np
from absl import app
from absl import flags

from pipelines.data import splits
from pipelines.data import synthetic

FLAGS = flags.FLAGS
LOSSES = ("keras_rs_standard", "standard", "improved")
DTYPE_POLICIES = ("float32", "mixed_bfloat16")

if __name__ == "__main__":
    flags.DEFINE_integer("users", 3000, "Synthetic users.", lower_bound=10)
    flags.DEFINE_integer("items", 3000, "Synthetic items.", lower_bound=200)
    flags.DEFINE_integer("dim", 32, "Embedding dimension.", lower_bound=1)
    flags.DEFINE_integer(
        "batch_size", 1024, "In-batch negatives per row: batch_size - 1.", lower_bound=2
    )
    flags.DEFINE_integer("epochs", 20, "Passes over the training interactions.", lower_bound=1)
    flags.DEFINE_float("learning_rate", 0.01, "Adam's learning rate.", lower_bound=0.0)
    flags.DEFINE_float("temperature", 0.1, "Scores are divided by it.", lower_bound=1e-6)
    flags.DEFINE_integer("seed", 0, "Seed of the data, the weights and the batches.")
    flags.DEFINE_list("losses", list(LOSSES), f"Losses to train, from {LOSSES}.")
    flags.DEFINE_enum(
        "dtype_policy",
        "float32",
        DTYPE_POLICIES,
        "Keras's dtype policy: mixed_bfloat16 computes the towers and scores in bfloat16 "
        "(variables and the losses stay float32).",
    )


def build_data(users: int, items: int, seed: int):
    """(training user ids, training item ids, test EvalSet, item probabilities [items + 1])."""
    interactions, _ = synthetic.make_synthetic(num_users=users, num_items=items, seed=seed)
    split = splits.leave_one_out(interactions)
    train_users = np.concatenate([np.full(len(s), u) for u, s in enumerate(split.train)])
    train_items = np.concatenate(split.train)
    counts = split.train_counts().astype(np.float64)
    counts[0] = 0.0
    # Items never trained on get a pseudo-count of 1/2 so that log Q is finite.
    probabilities = np.maximum(counts, 0.5) / np.maximum(counts, 0.5).sum()
    return (train_users.astype(np.int32), train_items.astype(np.int32), split.test, probabilities)


def make_model(
    loss: str,
    num_users: int,
    num_items: int,
    dim: int,
    temperature: float,
    probabilities: np.ndarray,
    seed: int,
):
    """A two-tower keras.Model whose `compute_loss` is keras-rs's or keras_logq's."""
    import keras  # pylint: disable=import-outside-toplevel
    import keras_rs  # pylint: disable=import-outside-toplevel
    from keras import ops  # pylint: disable=import-outside-toplevel

    import keras_logq  # pylint: disable=import-outside-toplevel

    class TwoTower(keras.Model):
        """User and item embedding towers; the loss is one of LOSSES."""

        def __init__(self):
            super().__init__()
            init = keras.initializers.RandomNormal(stddev=0.1, seed=seed)
            self.user_tower = keras.layers.Embedding(
                num_users + 1, dim, embeddings_initializer=init
            )
            self.item_tower = keras.layers.Embedding(
                num_items + 1, dim, embeddings_initializer=init
            )
            self.frequency = keras_logq.StaticFrequency(probabilities)
            self.correction = keras_rs.layers.SamplingProbabilityCorrection()
            self.remove_hits = keras_rs.layers.RemoveAccidentalHits()
            self.sampled_softmax = keras_logq.SampledSoftmax(
                correction="standard" if loss == "standard" else "improved", temperature=temperature
            )
            # Evaluation ranks in float32 whatever the policy (fewer ties than bfloat16).
            self.retrieval = keras_rs.layers.BruteForceRetrieval(
                k=10, return_scores=False, dtype="float32"
            )

        def call(self, inputs):
            return self.user_tower(inputs["user"]), self.item_tower(inputs["item"])

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            del y, sample_weight, training
            query, candidates = y_pred
            item_ids = x["item"]
            scores = self.retrieval.compute_score(query, candidates)
            labels = ops.eye(ops.shape(scores)[0])
            log_q = self.frequency.log_q(item_ids)
            if loss != "keras_rs_standard":
                return ops.mean(
                    self.sampled_softmax(
                        scores, labels, candidate_log_q=log_q, candidate_ids=item_ids
                    )
                )
            # keras-rs's layers keep the scores' dtype: the loss in float32, as keras_logq's.
            scores = ops.cast(scores, "float32")
            scores = self.correction(scores / temperature, ops.exp(log_q)[None, :])
            scores = self.remove_hits(scores, labels, item_ids)
            return ops.mean(keras.losses.categorical_crossentropy(labels, scores, from_logits=True))

    return TwoTower()


def evaluate(model, test: splits.EvalSet, num_items: int, k: int = 10):
    """Recall@k and NDCG@k of the test targets, training items excluded, with keras-rs's
    BruteForceRetrieval over the whole catalog."""
    from keras import ops  # pylint: disable=import-outside-toplevel

    longest = max(len(h) for h in test.histories)
    model.retrieval.k = k + longest
    items = np.arange(1, num_items + 1, dtype=np.int32)
    model.retrieval.update_candidates(model.item_tower(items), items)
    hits, gains = [], []
    for start in range(0, len(test.users), 512):
        users = test.users[start : start + 512].astype(np.int32)
        top = ops.convert_to_numpy(model.retrieval(model.user_tower(users)))
        for row, user_top in enumerate(top):
            seen = set(test.histories[start + row].tolist())
            ranked = [item for item in user_top.tolist() if item not in seen][:k]
            target = int(test.targets[start + row][0])
            rank = ranked.index(target) if target in ranked else None
            hits.append(rank is not None)
            gains.append(0.0 if rank is None else 1.0 / np.log2(rank + 2))
    return float(np.mean(hits)), float(np.mean(gains))


def run(
    losses=LOSSES,
    users=3000,
    items=3000,
    dim=32,
    batch_size=1024,
    epochs=20,
    learning_rate=0.01,
    temperature=0.1,
    seed=0,
    verbose=1,
    dtype_policy="float32",
):
    """Trains one model per loss on the same data and batches; returns {loss: metrics}.
    `dtype_policy` (DTYPE_POLICIES) is Keras's global policy while the models are built."""
    import keras  # pylint: disable=import-outside-toplevel

    train_users, train_items, test, probabilities = build_data(users, items, seed)
    order = np.random.default_rng(seed).permutation(len(train_users))
    # Whole batches only: in-batch scores are square.
    order = order[: len(order) // batch_size * batch_size]
    data = dict(user=train_users[order], item=train_items[order])
    results = {}
    for loss in losses:
        keras.utils.set_random_seed(seed)
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy(dtype_policy)
        try:
            model = make_model(loss, users, items, dim, temperature, probabilities, seed)
        finally:
            keras.config.set_dtype_policy(previous)
        model.compile(optimizer=keras.optimizers.Adam(learning_rate))
        start = time.time()
        model.fit(data, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=verbose)
        seconds = time.time() - start
        recall, ndcg = evaluate(model, test, items)
        results[loss] = dict(recall_at_10=recall, ndcg_at_10=ndcg, train_seconds=seconds)
    return results


def main(argv):
    del argv
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras  # pylint: disable=import-outside-toplevel

    unknown = sorted(set(FLAGS.losses) - set(LOSSES))
    if unknown:
        raise app.UsageError(f"--losses must be among {LOSSES}; received {unknown}.")
    results = run(
        FLAGS.losses,
        FLAGS.users,
        FLAGS.items,
        FLAGS.dim,
        FLAGS.batch_size,
        FLAGS.epochs,
        FLAGS.learning_rate,
        FLAGS.temperature,
        FLAGS.seed,
        dtype_policy=FLAGS.dtype_policy,
    )
    print(
        f"\nkeras-rs two-tower on the synthetic catalog ({FLAGS.users} users, {FLAGS.items} "
        f"items, leave-one-out), backend {keras.backend.backend()}, batch {FLAGS.batch_size}, "
        f"{FLAGS.epochs} epochs, seed {FLAGS.seed}, dtype policy {FLAGS.dtype_policy}; "
        "BruteForceRetrieval, training items "
        "excluded:\n"
    )
    print("| loss | Recall@10 | NDCG@10 | training (s) |")
    print("|---|---|---|---|")
    names = dict(
        keras_rs_standard="keras-rs SamplingProbabilityCorrection (standard logQ)",
        standard='keras_logq SampledSoftmax(correction="standard")',
        improved='keras_logq SampledSoftmax(correction="improved")',
    )
    for loss, metrics in results.items():
        print(
            f"| {names[loss]} | {metrics['recall_at_10']:.4f} | {metrics['ndcg_at_10']:.4f} | "
            f"{metrics['train_seconds']:.0f} |"
        )


if __name__ == "__main__":
    app.run(main)
