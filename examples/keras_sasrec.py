r"""SASRec in Keras 3 trained with keras_logq: in-batch and mixed negatives, with and without
the improved logQ correction, against SASRec's own BCE; MovieLens-1M, leave-one-out, JAX.

A causal self-attention encoder (plain `keras.layers`: item and position embeddings,
pre-norm blocks of `MultiHeadAttention` and a feed-forward layer) scores every position
of a user's sequence against the next item. One model, one loss per row of the table,
the same data, initial weights and batches for each seed:

- `bce`: SASRec's loss, one uniform negative per position (`keras_logq.UniformSampler`,
  `keras_logq.bce_loss`);
- `in_batch_none`, `in_batch_improved`: the targets of every real position of the batch
  are the negatives (`keras_logq.InBatchSampler(max_pool_size=--pool)`, a uniform subset
  of them), sampled softmax without correction or with the improved one
  (`keras_logq.negatives_loss`);
- `mixed_none`, `mixed_improved`: `--num_uniform` uniform negatives plus `--pool` in-batch
  ones (`keras_logq.MixedSampler`, its exact mixture log Q).

Log Q is each item's frequency among the training targets. Each loss is per position
([batch, length]) with the padding positions masked (`position_mask`), averaged over the
real positions (`keras_logq.masked_mean`). The test target of each user is ranked
against the whole catalog, the user's history excluded; the script prints Recall@10
and NDCG@10 (mean and standard deviation over the seeds, and each seed's).

Data: MovieLens-1M in SASRec's `user item` format (`ml-1m/sasrec_ml-1m.txt.gz`), read by
`pipelines.data.loaders.load_sasrec` and split by `pipelines.data.splits.leave_one_out`
(gSASRec's validation users keep their second-to-last item out of training).

Usage, from a clone with `pip install -e ".[keras]" jax` (no TensorFlow needed; JAX by
default, KERAS_BACKEND=tensorflow or torch works too):
  python -m examples.keras_sasrec --data_path=DATA/ml-1m/sasrec_ml-1m.txt.gz
"""

import json
import math
import os
import time

import numpy as np
from absl import app
from absl import flags

from pipelines import provenance
from pipelines.data import loaders
from pipelines.data import splits

FLAGS = flags.FLAGS
ROWS = ("bce", "in_batch_none", "in_batch_improved", "mixed_none", "mixed_improved")
DTYPE_POLICIES = ("float32", "mixed_bfloat16")
SASREC_FILE = os.path.join("ml-1m", "sasrec_ml-1m.txt.gz")


def default_data_path() -> str:
    """`ml-1m/sasrec_ml-1m.txt.gz` under TFRS_LOGQ_DATA (the current directory when unset)."""
    return os.path.join(os.environ.get("TFRS_LOGQ_DATA", ""), SASREC_FILE)


if __name__ == "__main__":
    flags.DEFINE_string(
        "data_path",
        None,
        "SASRec-format `user item` file (plain or .gz); "
        "default: ml-1m/sasrec_ml-1m.txt.gz under TFRS_LOGQ_DATA.",
    )
    flags.DEFINE_list("rows", list(ROWS), f"Losses to train, from {ROWS}.")
    flags.DEFINE_list("seeds", ["0"], "Seeds of the weights, the draws and the batches.")
    flags.DEFINE_integer(
        "max_len", 50, "Positions per training window and per query.", lower_bound=2
    )
    flags.DEFINE_integer("dim", 64, "Embedding dimension.", lower_bound=2)
    flags.DEFINE_integer("num_blocks", 2, "Self-attention blocks.", lower_bound=1)
    flags.DEFINE_integer(
        "num_heads", 1, "Attention heads (dim must divide by them).", lower_bound=1
    )
    flags.DEFINE_float("dropout", 0.2, "Dropout rate.", lower_bound=0.0, upper_bound=0.9)
    flags.DEFINE_integer("batch_size", 128, "Windows per batch.", lower_bound=1)
    flags.DEFINE_integer("epochs", 8, "Passes over the training windows.", lower_bound=1)
    flags.DEFINE_float("learning_rate", 1e-3, "Adam's learning rate.", lower_bound=0.0)
    flags.DEFINE_integer(
        "pool", 256, "In-batch negatives kept per batch (max_pool_size).", lower_bound=1
    )
    flags.DEFINE_integer("num_uniform", 128, "Uniform negatives of the mixed rows.", lower_bound=1)
    flags.DEFINE_string("output", None, "Also write the results as JSON to this file.")
    flags.DEFINE_enum(
        "dtype_policy",
        "float32",
        DTYPE_POLICIES,
        "Keras's dtype policy: mixed_bfloat16 computes the blocks and logits in bfloat16 "
        "(variables and the losses stay float32).",
    )
    flags.register_validator(
        "rows", lambda rows: set(rows) <= set(ROWS), message=f"--rows must be among {ROWS}."
    )


def left_padded(sequences, max_len: int) -> np.ndarray:
    """[n, max_len] int32: each sequence's last `max_len` items, zeros (padding) first."""
    out = np.zeros((len(sequences), max_len), np.int32)
    for row, sequence in enumerate(sequences):
        tail = np.asarray(sequence[-max_len:])
        if len(tail):
            out[row, max_len - len(tail) :] = tail
    return out


def training_windows(train, max_len: int):
    """(inputs, targets), each [windows, max_len] int32: every training sequence's items
    followed by the next one, cut into windows of `max_len` from its end, left-padded."""
    inputs, targets = [], []
    for sequence in train:
        sequence = np.asarray(sequence)
        for end in range(len(sequence) - 1, 0, -max_len):
            start = max(0, end - max_len)
            inputs.append(sequence[start:end])
            targets.append(sequence[start + 1 : end + 1])
    return left_padded(inputs, max_len), left_padded(targets, max_len)


def load(data_path: str, max_len: int):
    """(training windows dict, test EvalSet, num_items, item probabilities [num_items + 1])."""
    split = splits.leave_one_out(loaders.load_sasrec(data_path))
    inputs, targets = training_windows(split.train[1:], max_len)
    counts = np.bincount(targets[targets > 0], minlength=split.num_items + 1).astype(float)
    # Items never a training target get a pseudo-count of 1/2, so that log Q is finite.
    counts = np.maximum(counts, 0.5)
    counts[0] = 0.5
    return (
        dict(inputs=inputs, targets=targets),
        split.test,
        split.num_items,
        counts / counts.sum(),
    )


def make_model(
    row: str,
    num_items: int,
    probabilities: np.ndarray,
    max_len: int,
    dim: int,
    num_blocks: int,
    num_heads: int,
    dropout: float,
    pool: int,
    num_uniform: int,
    seed: int,
):
    """A SASRec keras.Model whose `compute_loss` is the loss of `row` (one of ROWS)."""
    import keras  # pylint: disable=import-outside-toplevel
    from keras import ops  # pylint: disable=import-outside-toplevel

    import keras_logq  # pylint: disable=import-outside-toplevel

    negatives, _, correction = row.partition("_")
    if negatives == "in":  # in_batch_<correction>
        negatives, correction = "in_batch", row[len("in_batch_") :]

    class SASRec(keras.Model):
        """Item and position embeddings, causal pre-norm self-attention blocks."""

        def __init__(self):
            super().__init__()
            init = keras.initializers.TruncatedNormal(stddev=0.02, seed=seed)
            self.items = keras.layers.Embedding(num_items + 1, dim, embeddings_initializer=init)
            self.positions = keras.layers.Embedding(max_len, dim, embeddings_initializer=init)
            self.dropout = keras.layers.Dropout(dropout, seed=seed)
            self.blocks = []
            for block in range(num_blocks):
                self.blocks.append(
                    dict(
                        attention_norm=keras.layers.LayerNormalization(epsilon=1e-6),
                        attention=keras.layers.MultiHeadAttention(
                            num_heads, dim // num_heads, dropout=dropout, seed=seed + block
                        ),
                        ffn_norm=keras.layers.LayerNormalization(epsilon=1e-6),
                        ffn_in=keras.layers.Dense(dim, activation="relu"),
                        ffn_out=keras.layers.Dense(dim),
                        ffn_dropout=keras.layers.Dropout(dropout, seed=seed + block),
                    )
                )
            self.final_norm = keras.layers.LayerNormalization(epsilon=1e-6)
            frequency = keras_logq.StaticFrequency(probabilities)
            if negatives == "bce":
                self.sampler = keras_logq.UniformSampler(
                    num_items, 1, first_id=1, per_row=True, seed=seed
                )
            elif negatives == "in_batch":
                self.sampler = keras_logq.InBatchSampler(
                    max_pool_size=pool, probabilities=frequency, seed=seed
                )
            else:
                self.sampler = keras_logq.MixedSampler(
                    num_items, num_uniform, pool, first_id=1, probabilities=frequency, seed=seed
                )

        def call(self, ids, training=False):
            """[batch, max_len] item ids (0 pads, on the left; or the training dict, its
            "inputs") -> [batch, max_len, dim]."""
            ids = ids["inputs"] if isinstance(ids, dict) else ids
            real = ops.greater(ids, 0)
            x = self.items(ids) * math.sqrt(dim) + self.positions(ops.arange(max_len))[None]
            x = self.dropout(x, training=training) * ops.cast(real, x.dtype)[..., None]
            causal = ops.tril(ops.ones((max_len, max_len), "bool"))
            attention_mask = ops.logical_and(causal[None], real[:, None, :])
            for block in self.blocks:
                h = block["attention_norm"](x)
                x = x + block["attention"](h, h, attention_mask=attention_mask, training=training)
                h = block["ffn_out"](block["ffn_in"](block["ffn_norm"](x)))
                x = x + block["ffn_dropout"](h, training=training)
                x = x * ops.cast(real, x.dtype)[..., None]
            return self.final_norm(x)

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            del y, sample_weight, training
            targets = x["targets"]
            real = ops.greater(targets, 0)
            flat = ops.reshape(targets, (-1,))
            positives = self.items(targets)
            if negatives == "bce":
                draws = self.sampler(flat)
                negative = self.items(ops.reshape(draws.ids, (*ops.shape(targets), 1)))
                per_position = keras_logq.bce_loss(
                    ops.sum(y_pred * positives, axis=-1),
                    ops.einsum("bld,blnd->bln", y_pred, negative),
                    position_mask=real,
                )
            else:
                draws = self.sampler(
                    flat, targets, positives, candidate_mask=real, embedding_fn=self.items
                )
                per_position = keras_logq.negatives_loss(
                    y_pred, positives, draws, correction=correction, position_mask=real
                )
            return keras_logq.masked_mean(per_position, real)

        def last_state(self, ids):
            """[batch, dim]: the representation of each row's last position."""
            return self(ids, training=False)[:, -1, :]

    return SASRec()


def evaluate(model, test, max_len: int, k: int = 10, chunk: int = 512):
    """(Recall@k, NDCG@k) of each test user's target over the whole catalog, the user's
    history excluded."""
    from keras import ops  # pylint: disable=import-outside-toplevel

    table = ops.convert_to_numpy(model.items.embeddings)[1:]  # Items 1..num_items.
    hits, gains = [], []
    for start in range(0, len(test.users), chunk):
        histories = test.histories[start : start + chunk]
        state = ops.convert_to_numpy(
            ops.cast(model.last_state(left_padded(histories, max_len)), "float32")
        )
        scores = state @ table.T
        for row, history in enumerate(histories):
            scores[row, np.asarray(history) - 1] = -np.inf
        targets = np.array([int(t[0]) - 1 for t in test.targets[start : start + chunk]])
        target_scores = scores[np.arange(len(targets)), targets]
        # Rank: items scored above the target (ties count against it).
        ranks = np.sum(scores >= target_scores[:, None], axis=1) - 1
        hits.append(ranks < k)
        gains.append(np.where(ranks < k, 1.0 / np.log2(ranks + 2.0), 0.0))
    return float(np.mean(np.concatenate(hits))), float(np.mean(np.concatenate(gains)))


def run(
    data_path: str,
    rows=ROWS,
    seeds=(0,),
    max_len=50,
    dim=64,
    num_blocks=2,
    num_heads=1,
    dropout=0.2,
    batch_size=128,
    epochs=8,
    learning_rate=1e-3,
    pool=256,
    num_uniform=128,
    verbose=2,
    on_result=None,
    dtype_policy="float32",
):
    """Trains one model per row and seed on the same windows, seed by seed (every row of a
    seed before the next seed); returns {"rows": {row: {seed: metrics}}, ...} with
    Recall@10, NDCG@10 and training seconds. `on_result(results)` is called after each
    model (to save what is done so far). `dtype_policy` (DTYPE_POLICIES) is Keras's global
    policy while the models are built."""
    import keras  # pylint: disable=import-outside-toplevel

    data, test, num_items, probabilities = load(data_path, max_len)
    results = dict(
        num_windows=int(len(data["inputs"])),
        num_items=int(num_items),
        num_test_users=int(len(test.users)),
        rows={row: {} for row in rows},
    )
    for seed in seeds:
        for row in rows:
            keras.utils.set_random_seed(seed)
            previous = keras.config.dtype_policy()
            keras.config.set_dtype_policy(dtype_policy)
            try:
                model = make_model(
                    row,
                    num_items,
                    probabilities,
                    max_len,
                    dim,
                    num_blocks,
                    num_heads,
                    dropout,
                    pool,
                    num_uniform,
                    seed,
                )
            finally:
                keras.config.set_dtype_policy(previous)
            model.compile(optimizer=keras.optimizers.Adam(learning_rate))
            start = time.time()
            history = model.fit(
                data, batch_size=batch_size, epochs=epochs, shuffle=True, verbose=verbose
            )
            seconds = time.time() - start
            recall, ndcg = evaluate(model, test, max_len)
            results["rows"][row][str(seed)] = dict(
                recall_at_10=recall,
                ndcg_at_10=ndcg,
                train_seconds=seconds,
                final_loss=float(history.history["loss"][-1]),
            )
            print(
                f"{row} seed {seed}: Recall@10 {recall:.4f} NDCG@10 {ndcg:.4f} ({seconds:.0f} s)",
                flush=True,
            )
            if on_result is not None:
                on_result(results)
    return results


NAMES = dict(
    bce="BCE, 1 uniform negative per position (SASRec)",
    in_batch_none="in-batch, no correction",
    in_batch_improved="in-batch, improved",
    mixed_none="mixed, no correction",
    mixed_improved="mixed, improved",
)


def table(results) -> str:
    """The Markdown table of `run`'s results: mean and standard deviation over the seeds."""
    lines = [
        "| loss | Recall@10 | NDCG@10 | Recall@10 per seed | training (s) per run |",
        "|---|---|---|---|---|",
    ]
    for row, by_seed in results["rows"].items():
        if not by_seed:
            continue
        recall = np.array([m["recall_at_10"] for m in by_seed.values()])
        ndcg = np.array([m["ndcg_at_10"] for m in by_seed.values()])
        seconds = np.mean([m["train_seconds"] for m in by_seed.values()])
        spread = lambda x: f" ± {x.std(ddof=1):.4f}" if len(x) > 1 else ""  # noqa: E731
        lines.append(
            f"| {NAMES[row]} | {recall.mean():.4f}{spread(recall)} | "
            f"{ndcg.mean():.4f}{spread(ndcg)} | "
            f"{', '.join(f'{r:.4f}' for r in recall)} | {seconds:.0f} |"
        )
    return "\n".join(lines)


def main(argv):
    del argv
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras  # pylint: disable=import-outside-toplevel

    if FLAGS.dim % FLAGS.num_heads:
        raise app.UsageError(
            f"--dim must divide by --num_heads; received dim={FLAGS.dim}, "
            f"num_heads={FLAGS.num_heads}."
        )
    try:
        seeds = [int(seed) for seed in FLAGS.seeds]
    except ValueError:
        raise app.UsageError(f"--seeds must be integers; received {FLAGS.seeds}.") from None
    data_path = FLAGS.data_path or default_data_path()
    if not os.path.exists(data_path):
        raise app.UsageError(
            f"No such data file: {data_path}. Pass --data_path, or set "
            "TFRS_LOGQ_DATA to the directory that holds "
            f"{SASREC_FILE}."
        )
    settings = dict(
        rows=FLAGS.rows,
        seeds=seeds,
        max_len=FLAGS.max_len,
        dim=FLAGS.dim,
        num_blocks=FLAGS.num_blocks,
        num_heads=FLAGS.num_heads,
        dropout=FLAGS.dropout,
        batch_size=FLAGS.batch_size,
        epochs=FLAGS.epochs,
        learning_rate=FLAGS.learning_rate,
        pool=FLAGS.pool,
        num_uniform=FLAGS.num_uniform,
        dtype_policy=FLAGS.dtype_policy,
    )
    device = keras.backend.backend()
    if device == "jax":
        import jax  # pylint: disable=import-outside-toplevel

        device = f"jax on {jax.devices()[0].device_kind}"

    def save(results):
        if FLAGS.output:
            with open(FLAGS.output, "w", encoding="utf-8") as f:
                json.dump(
                    dict(
                        settings=settings,
                        git_revision=provenance.revision(),
                        device=device,
                        keras=keras.__version__,
                        data=os.path.basename(data_path),
                        **results,
                    ),
                    f,
                    indent=1,
                )

    results = run(data_path, on_result=save, **settings)
    print(
        f"\nSASRec (Keras 3) on {os.path.basename(data_path)}, leave-one-out, "
        f"{results['num_windows']} training windows of {FLAGS.max_len}, "
        f"{results['num_test_users']} test users over {results['num_items']} items "
        f"(history excluded), backend {device}, batch {FLAGS.batch_size}, "
        f"{FLAGS.epochs} epochs, {FLAGS.num_blocks} blocks of dim {FLAGS.dim}, in-batch "
        f"pool {FLAGS.pool}, mixed {FLAGS.num_uniform} uniform + {FLAGS.pool} in-batch, "
        f"seeds {', '.join(map(str, seeds))}, dtype policy {FLAGS.dtype_policy}:\n"
    )
    print(table(results))


if __name__ == "__main__":
    app.run(main)
