"""The sequential job on Keras 3 (JAX by default), without TensorFlow: SASRec trained on a
sequential dataset's windows with the pipelines' negatives and correction, early-stopped on
validation NDCG@10, tested by exact search on the backend's device. `tfrs-logq train
--framework=keras` runs it for a config with `--model=sasrec` (`pipelines.keras_train`).

It trains what `pipelines.train` trains for such a config (`tfrs_logq.models.SASRec`,
architecture "sasrec"): item embeddings (Keras's uniform initialiser) scaled by sqrt(dim) plus
learned positions, dropout, blocks of x = LN(x) + causal attention(LN(x), x) and x = x +
FFN(LN(x)) (Keras's `MultiHeadAttention`, LayerNorm epsilon 1e-8), a final LayerNorm, the
input item table scoring the outputs (tied). Every non-padding position of a window
(`pipelines.data.sequences.sequence_windows`: each user's last max_length + 1 training
items, shifted by one) predicts its next item; the loss is the sampled softmax over the
config's negatives (`keras_logq.make_sampler`, from `logq_core.samplers.sampler_arguments`
as TensorFlow's job builds them) with log Q from the smoothed training counts
(`datasets.static_frequencies`, as TensorFlow's job) and the correction, averaged over the
real positions.
Adam at the config's rate. The windows are read as TensorFlow's job reads them: shuffled anew at
each pass, passes concatenated, `batch_size` at a time, `steps_per_epoch` steps an epoch (0:
one pass). After each epoch: NDCG@10 and Recall@10 of the validation queries over the whole
catalog, history excluded; the best epoch's weights are kept, and training stops after
`patience` epochs without a better one. Each epoch's state is backed up: the same command run
again after a kill resumes after the last finished epoch. The test: Recall and NDCG at the
config's ks over the whole catalog by exact search on the device, with the best weights.
"""

import json
import os
import time
from typing import Any, Dict, List

import numpy as np

from logq_core import metrics as metrics_lib
from pipelines import configs
from pipelines import keras_job
from pipelines import per_query as per_query_lib
from pipelines.data import datasets
from pipelines.data import sequences
from pipelines.data import splits as splits_lib

# The settings of `pipelines.train` this job implements only at these values, for SASRec.
JOB = dict(
    architecture="sasrec",
    tie_embeddings=True,
    loss="sampled_softmax",
    frequency="static",
    num_hard_negatives=0,
    mask_known_positives=False,
    temperature=1.0,
    l2_normalize=False,
    log_q_scale=1.0,
    weight_column="",
    item_catalog="",
    table_optimizer="adam",
    partial_batches=False,
    index_size=0,
)
# Datasets read without TensorFlow (ml-1m-tfds reads through tensorflow-datasets).
DATASETS = ("synthetic", "ml-1m", "ml-1m-ratings", "steam", "steam-reviews")
BEST = "best.npz"
VALIDATION_K = 10


def refusals(config: configs.Config) -> List[str]:
    """Each setting of a SASRec `config` this job does not train, as "--flag=value (why)"."""
    flat = config.flat()
    out = [
        f"--{name}={flat[name]!r} (the Keras job: {wanted!r})"
        for name, wanted in JOB.items()
        if flat[name] != wanted
    ]
    if config.data.dataset not in DATASETS:
        out.append(
            f"--dataset={config.data.dataset} (the Keras SASRec job reads {', '.join(DATASETS)})"
        )
    return out


def windows_stream(windows: Dict[str, np.ndarray], batch_size: int, seed: int, start: int):
    """Batches of `windows` from batch `start` on: each pass over the windows in a new
    permutation (numpy's, of `seed` and the pass), passes concatenated, `batch_size` at a time
    (a batch may span two passes, as TensorFlow's shuffled, repeated stream's do)."""
    size = len(windows["inputs"])
    position = start * batch_size
    while True:
        rows: List[np.ndarray] = []
        taken = 0
        while taken < batch_size:
            epoch, offset = divmod(position, size)
            order = np.random.default_rng([seed, epoch]).permutation(size)
            take = order[offset : offset + batch_size - taken]
            rows.append(take)
            position += len(take)
            taken += len(take)
        chosen = np.concatenate(rows)
        yield ({key: value[chosen] for key, value in windows.items()},)


def make_model(
    config: configs.Config,
    num_items: int,
    probabilities: np.ndarray,
    steps_per_execution: int = 1,
):
    """The SASRec keras.Model of `config` (see the module), compiled (`steps_per_execution`
    training steps a call of the compiled step)."""
    import keras  # pylint: disable=import-outside-toplevel
    from keras import ops  # pylint: disable=import-outside-toplevel

    import keras_logq  # pylint: disable=import-outside-toplevel

    towers, loss, training = config.model, config.loss, config.training
    dim, length, seed = towers.dim, towers.max_length, training.seed
    sampler = keras_logq.make_sampler(
        loss.negatives,
        num_negatives=loss.num_negatives,
        num_items=num_items,
        first_id=1,
        probabilities=keras_logq.StaticFrequency(probabilities),
        seed=seed,
        deduplicate=loss.deduplicate,
        log_q=loss.log_q,
        per_row=loss.per_row,
        global_batch=loss.global_batch and keras.backend.backend() == "jax",
        mixture=loss.mixture,
    )

    class SASRec(keras.Model):
        def __init__(self):
            super().__init__(name="sasrec")
            self.items = keras.layers.Embedding(num_items + 1, dim, name="items")
            self.positions = keras.layers.Embedding(length, dim, name="positions")
            # Seeds apart from the sampler's (`seed`): streams of their own.
            self.input_dropout = keras.layers.Dropout(towers.dropout, seed=seed + 301)
            self.blocks = [
                dict(
                    attention_norm=keras.layers.LayerNormalization(epsilon=1e-8),
                    attention=keras.layers.MultiHeadAttention(
                        towers.num_heads,
                        dim // towers.num_heads,
                        # At 0, Keras fuses it (ops.dot_product_attention).
                        dropout=configs.attention_dropout(towers),
                        seed=seed + 1 + block,
                    ),
                    ffn_norm=keras.layers.LayerNormalization(epsilon=1e-8),
                    ffn_in=keras.layers.Dense(dim, activation="relu"),
                    ffn_middle=keras.layers.Dropout(towers.dropout, seed=seed + 101 + block),
                    ffn_out=keras.layers.Dense(dim),
                    ffn_dropout=keras.layers.Dropout(towers.dropout, seed=seed + 201 + block),
                )
                for block in range(towers.num_blocks)
            ]
            self.final_norm = keras.layers.LayerNormalization(epsilon=1e-8)
            self.sampler = sampler

        def call(self, ids, training=False):
            """[B, L] left-padded ids (or the windows, their "inputs") -> [B, L, dim]."""
            ids = ids["inputs"] if isinstance(ids, dict) else ids
            real = ops.greater(ids, 0)
            x = self.items(ids) * (dim**0.5) + self.positions(ops.arange(length))[None]
            x = self.input_dropout(x, training=training) * ops.cast(real, x.dtype)[..., None]
            for block in self.blocks:
                query = block["attention_norm"](x)
                x = query + block["attention"](
                    query,
                    x,
                    x,
                    attention_mask=real[:, None, :],
                    use_causal_mask=True,
                    training=training,
                )
                h = block["ffn_in"](block["ffn_norm"](x))
                h = block["ffn_out"](block["ffn_middle"](h, training=training))
                x = x + block["ffn_dropout"](h, training=training)
                x = x * ops.cast(real, x.dtype)[..., None]
            return self.final_norm(x)

        def query(self, ids):
            """[B, dim]: the last position's representation (the next-item query)."""
            return self(ids, training=False)[:, -1, :]

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            del y, sample_weight, training
            targets = x["targets"]
            real = ops.greater(targets, 0)
            positives = self.items(targets)
            draws = self.sampler(
                ops.reshape(targets, (-1,)),
                targets,
                positives,
                candidate_mask=real,
                embedding_fn=self.items,
            )
            per_position = keras_logq.negatives_loss(
                y_pred, positives, draws, correction=loss.correction, position_mask=real
            )
            return keras_logq.masked_mean(per_position, real)

    model = SASRec()
    model.compile(
        optimizer=keras.optimizers.Adam(training.learning_rate, epsilon=training.adam_epsilon),
        steps_per_execution=steps_per_execution,
    )
    return model


def ranked(model, eval_set, num_items: int, length: int, k: int, chunk: int = 512):
    """[num_queries, k] ids of each query's top k over the whole catalog, its history
    excluded, by exact search on the device (`keras_logq.ranking.exact_top_k`)."""
    from keras import ops  # pylint: disable=import-outside-toplevel

    from keras_logq import ranking as keras_ranking  # pylint: disable=import-outside-toplevel

    queries = [
        model.query(sequences.left_pad(eval_set.histories[start : start + chunk], length))
        for start in range(0, len(eval_set.users), chunk)
    ]
    ids = np.arange(1, num_items + 1)
    return keras_ranking.exact_top_k(
        ops.concatenate(queries, axis=0),
        ids,
        model.items.embeddings[1:],
        k,
        eval_set.histories,
    )


def run(
    config: configs.Config,
    output_dir: str,
    backup_dir: str,
    model_dir: str,
    verbose: bool = True,
):
    """Trains and tests the SASRec `config` (see the module) under Keras's
    --dtype_policy, --steps_per_execution steps a call of the compiled step; the results,
    with each test query's record under "per_query"."""
    import keras  # pylint: disable=import-outside-toplevel

    training = config.training
    steps_per_execution, dtype_policy = training.steps_per_execution, training.dtype_policy
    keras.utils.set_random_seed(training.seed)
    _, split, windows = _data(config, output_dir)
    in_history = splits_lib.report_targets_in_history(split.test, verbose)
    length = config.model.max_length
    # As TensorFlow's job: a pass's batches an epoch, at least one (batches span passes).
    steps = training.steps_per_epoch or max(len(windows["inputs"]) // training.batch_size, 1)
    if steps % steps_per_execution:
        raise ValueError(
            f"--steps_per_execution={steps_per_execution} does not divide the epoch's {steps} "
            "steps: Keras would train whole calls past the epoch's end."
        )
    model = _model(config, split, windows)
    # As state.json holds them (a resumed run's config compared with the backup's).
    settings = json.loads(json.dumps(dict(config=config.as_dict(), dtype_policy=dtype_policy)))
    state: Dict[str, Any] = dict(epoch=0, best=None, best_epoch=None, wait=0, history=[])
    latest = keras_job.latest_backup(backup_dir)
    resumed_from_step = 0
    if latest:
        # A backup of this config (its fields added since at their defaults, the steps a
        # call free to change) is compared as its own state wrote it.
        stored = keras_job.backup_settings(latest).get("config")
        if isinstance(stored, dict) and not configs.changed_fields(stored, config):
            settings = {**settings, "config": stored}
        done, _ = keras_job.restore_backup(model, latest, settings)
        state = keras_job.backup_extra(latest)
        resumed_from_step = state["epoch"] * steps  # Trained by an earlier, killed process.
        if state["best_epoch"] == state["epoch"]:  # Its weights are the best's: saved again,
            save_weights(model, model_dir)  # in case a kill came before best.npz was.
        if verbose:
            print(f"resumed from {latest}: {done} of {training.epochs} epochs trained", flush=True)
    started = time.time()

    class Epochs(keras_job.keras_callback()):  # type: ignore[misc]
        """Validation after each epoch, the best weights kept, patience, and a backup."""

        def on_epoch_end(self, epoch, logs=None):
            ids = ranked(model, split.validation, split.num_items, length, VALIDATION_K)
            values = metrics_lib.recall_ndcg(ids, split.validation.targets, (VALIDATION_K,))
            loss = float((logs or {}).get("loss", float("nan")))
            if not np.isfinite(loss):
                raise keras_job.NonFiniteLoss(
                    f"the training loss is {loss} in epoch {epoch + 1}: the model diverged (a "
                    "learning rate too high?); no results are written."
                )
            value = values[f"ndcg@{VALIDATION_K}"]
            state["history"].append(dict(epoch=epoch + 1, loss=loss, **values))
            better = state["best"] is None or value > state["best"]
            if better:
                state.update(best=value, best_epoch=epoch + 1, wait=0)
            else:
                state["wait"] += 1
            state["epoch"] = epoch + 1
            # The backup first: a kill before best.npz is written resumes from it, which
            # writes it again (its weights are the best's).
            keras_job.save_backup(model, backup_dir, epoch + 1, [], settings, extra=state)
            if better:
                save_weights(model, model_dir)
            if verbose:  # After the backup: an epoch said done is one a rerun resumes after.
                print(
                    f"epoch {epoch + 1} of {training.epochs}: loss {loss:.4f}, validation "
                    f"NDCG@10 {value:.4f} (best {state['best']:.4f}, epoch "
                    f"{state['best_epoch']})",
                    flush=True,
                )
            if state["wait"] >= training.patience:
                self.model.stop_training = True

    if state["epoch"] < training.epochs and state["wait"] < training.patience:
        model.fit(
            windows_stream(windows, training.batch_size, training.seed, state["epoch"] * steps),
            steps_per_epoch=steps,
            epochs=training.epochs,
            initial_epoch=state["epoch"],
            shuffle=False,  # The stream is shuffled (`windows_stream`).
            verbose=0,
            callbacks=[Epochs()],
        )
    train_seconds = time.time() - started
    load_weights(model, model_dir)
    started = time.time()
    test, values = evaluate(model, config, split, split.test)
    record = dict(
        users=np.asarray(split.test.users),
        targets_digest=per_query_lib.targets_digest(split.test.targets),
        split="test",
        index="exact",
        values=values,
    )
    return dict(
        backend=keras.backend.backend(),
        devices=1,
        steps=state["epoch"] * steps,
        epochs_run=state["epoch"],
        # 0-based, as TensorFlow's job records it (its `validation` rows count from 1).
        best_epoch=None if state["best_epoch"] is None else state["best_epoch"] - 1,
        validation=state["history"],
        first_loss=state["history"][0]["loss"] if state["history"] else None,
        last_loss=state["history"][-1]["loss"] if state["history"] else None,
        resumed_from_step=resumed_from_step,
        train_seconds=round(train_seconds, 1),  # This process's (not the killed one's).
        test_seconds=round(time.time() - started, 1),
        num_items=split.num_items,
        num_test_queries=len(split.test.users),
        index_items=split.num_items,
        test=test,
        test_targets_in_history=in_history,
        per_query=record,
    )


def _data(config: configs.Config, output_dir: str):
    """(interactions, split, training windows) of the SASRec `config`."""
    data = datasets.load_data(config, output_dir)
    split = datasets.make_split(config, data, output_dir)
    assert split.train is not None  # A sequential split holds its sequences.
    windows = sequences.sequence_windows(split.train, config.model.max_length)
    if not len(windows["inputs"]):
        raise ValueError("No user has 2 or more items to train on.")
    return data, split, windows


def _model(config: configs.Config, split, windows):
    """The SASRec model of `config`, built under its --dtype_policy (its variables, and its
    optimizer's, made by one window batch, as `fit` makes them)."""
    import keras  # pylint: disable=import-outside-toplevel

    training = config.training
    probabilities = datasets.static_frequencies(split.train_counts(), config.loss.pseudo_count)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(training.dtype_policy)
    try:
        model = make_model(config, split.num_items, probabilities, training.steps_per_execution)
    finally:
        keras.config.set_dtype_policy(previous)
    keras_job.build(model, next(windows_stream(windows, training.batch_size, training.seed, 0))[0])
    return model


def trained(config: configs.Config, output_dir: str, model_dir: str):
    """(the SASRec model of `config` with its best epoch's weights, the split, the
    interactions) of the finished Keras run in `output_dir` (its weights in `model_dir`),
    built as `run` built it."""
    data, split, windows = _data(config, output_dir)
    model = _model(config, split, windows)
    load_weights(model, model_dir)
    return model, split, data


def query_model(model, config: configs.Config):
    """The trained SASRec's query as a functional keras.Model of its own (stock) layers and
    `keras.ops`, for `keras_logq.serving`: {"user": [B] int32 (not read: a sequence model's
    query is its history), "history": [B, max_length] left-padded int32} -> [B, dim], the last
    position's representation, as `model.query` (no dropout)."""
    import keras  # pylint: disable=import-outside-toplevel
    from keras import ops  # pylint: disable=import-outside-toplevel

    length, dim = config.model.max_length, config.model.dim
    user = keras.Input((), dtype="int32", name="user")
    ids = keras.Input((length,), dtype="int32", name="history")
    real = ops.greater(ids, 0)
    positions = ops.cumsum(ops.ones_like(ids), axis=1) - 1  # 0..length-1 in every row.
    x = model.items(ids) * (dim**0.5) + model.positions(positions)
    mask = ops.cast(real, x.dtype)[..., None]
    x = x * mask
    for block in model.blocks:
        query = block["attention_norm"](x)
        x = query + block["attention"](
            query, x, x, attention_mask=real[:, None, :], use_causal_mask=True
        )
        x = (x + block["ffn_out"](block["ffn_in"](block["ffn_norm"](x)))) * mask
    out = model.final_norm(x)[:, -1, :]
    # The user input joins the graph as a zero (a model's every input must reach its output).
    out = out + ops.zeros_like(ops.cast(user, out.dtype))[:, None]
    return keras.Model({"user": user, "history": ids}, out, name="sasrec_query")


def evaluate(model, config: configs.Config, split, eval_set):
    """(means, each query's values) of `eval_set` (a split's test or validation queries):
    `ranked` over the whole catalog at the config's --ks, as `run` tests."""
    ks = configs.ks(config.training)
    ids = ranked(model, eval_set, split.num_items, config.model.max_length, max(ks))
    return (
        metrics_lib.recall_ndcg(ids, eval_set.targets, ks),
        metrics_lib.per_query_recall_ndcg(ids, eval_set.targets, ks),
    )


def save_weights(model, directory: str) -> str:
    """Writes the model's weights (one array each, by position) to `directory`/best.npz,
    whole or not at all."""
    from keras import ops  # pylint: disable=import-outside-toplevel

    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, BEST)
    partial = path + ".partial.npz"
    arrays = {f"{i:04d}": ops.convert_to_numpy(v) for i, v in enumerate(model.weights)}
    np.savez(partial, **arrays)
    os.replace(partial, path)
    with open(os.path.join(directory, "weights.json"), "w") as f:
        json.dump([keras_job.variable_name(v) for v in model.weights], f)
    return path


def load_weights(model, directory: str) -> None:
    """Loads what `save_weights` wrote into `model`, its variables checked by name against
    the saved ones (weights.json) first.

    Raises:
      ValueError: the saved weights are another model's (names or count differ).
    """
    names_path = os.path.join(directory, "weights.json")
    if os.path.exists(names_path):
        with open(names_path) as f:
            saved_names = json.load(f)
        ours = [keras_job.variable_name(v) for v in model.weights]
        if saved_names != ours:
            first = next(
                (f"{a} against {b}" for a, b in zip(saved_names, ours) if a != b),
                f"{len(saved_names)} variables against this model's {len(ours)}",
            )
            raise ValueError(f"{directory}/{BEST} holds another model's weights: {first}.")
    with np.load(os.path.join(directory, BEST)) as saved:
        for i, variable in enumerate(model.weights):
            variable.assign(saved[f"{i:04d}"])


__all__: List[Any] = ["JOB", "make_model", "query_model", "refusals", "run"]
