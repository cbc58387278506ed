"""The next-day two-tower job on Keras 3 (JAX by default), without TensorFlow: the day store
of an event log or the web-scale synthetic log, trained in time order with a count-min sketch
and mixed negatives, tested on the next day's users over the pipelines' index on the
backend's device. `tfrs-logq train --framework=keras` runs it on a run directory
(`pipelines.keras_train`); `examples/keras_next_day.py` on a store.

The data is the day store `pipelines.train` builds (`pipelines.data.day_store`: the training
examples in time order, each with its user's previous items, and the next day's test
queries), read with numpy (`DayStore.chunks`). The model is the pipelines' two-tower
(`tfrs_logq.models.TwoTower`): a user table and the mean embedding of the history's items (a
history table of their own unless `share_item_table`), concatenated and projected (the
query); the item table, projected (the candidates); mixed negatives
(`keras_logq.MixedSampler`: `num_uniform` uniform draws a step, shared by its rows, and the
in-batch pool, at most `num_in_batch` of the batch's positives) with log Q from a
`keras_logq.CountMinSketchEstimator` fed each step's positives, and the `correction`. The
tables are `keras_logq.SparseEmbedding`s with Adagrad on JAX (a step touches the batch's rows
only), `keras.layers.Embedding` elsewhere. One pass of `model.fit` over the days in time
order, each block of `shuffle_window` examples permuted (`max_steps` stops early;
`steps_per_execution` steps a call of the compiled step), its loss recorded as the mean of
each LOSS_WINDOW steps. Every `backup_every` steps and at the pass's end the training state
is backed up: the same job run again after a kill resumes from the last backup. The test:
Recall@10/100/1000 and NDCG of each test query's next-day items over the `index_size` most
trained items plus the day's positives (the pipelines' `test_index`), its history excluded,
by exact search on the device (`keras_logq.ranking.exact_top_k`).
"""

import contextlib
import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import time
import warnings
from typing import Any, Dict

import numpy as np
from absl import app
from absl import flags

from logq_core import formulas
from logq_core import metrics as metrics_lib
from logq_core import samplers
from pipelines import per_query as per_query_lib
from pipelines import train_flags as train_flags_lib
from pipelines.data import day_store
from pipelines.data import logs
from pipelines.data import sequences
from pipelines.data import splits
from pipelines.run_files import write_json

KS = (10, 100, 1000)
# Steps whose mean loss is printed and recorded together.
LOSS_WINDOW = 100


def define_job_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """The job's settings as flags (`examples/keras_next_day.py`'s); their defaults are
    `defaults()`'s."""
    define: Dict[str, Any] = dict(flag_values=flag_values)
    flags.DEFINE_integer("dim", 64, "Embedding dimension.", lower_bound=1, **define)
    flags.DEFINE_integer("batch_size", 1024, "Examples per step.", lower_bound=2, **define)
    flags.DEFINE_integer("num_uniform", 512, "Uniform negatives per step.", lower_bound=1, **define)
    flags.DEFINE_integer(
        "num_in_batch",
        0,
        "In-batch pool's cap (0: the whole batch).",
        lower_bound=0,
        **define,
    )
    flags.DEFINE_enum("correction", "improved", list(formulas.CORRECTIONS), "The loss.", **define)
    flags.DEFINE_float("table_learning_rate", 0.5, "Adagrad's rate on the tables.", **define)
    flags.DEFINE_float("learning_rate", 0.005, "Adam's rate on the projection.", **define)
    flags.DEFINE_integer(
        "sketch_width",
        0,
        "Count-min sketch width, a power of two (0: the pipelines' for the catalog, "
        "logq_core.formulas.count_min_width).",
        lower_bound=0,
        **define,
    )
    flags.DEFINE_float("sketch_decay", 0.999, "Count-min sketch decay per step.", **define)
    flags.DEFINE_integer("index_size", 200_000, "Most trained items in the test index.", **define)
    flags.DEFINE_integer(
        "shuffle_window",
        0,
        "Shuffle the time-ordered stream within blocks of this many examples (0: none).",
        lower_bound=0,
        **define,
    )
    flags.DEFINE_bool(
        "share_item_table",
        False,
        "The history reads the candidates' item table (one table).",
        **define,
    )
    flags.DEFINE_integer("max_steps", 0, "Stop after this many steps (0: one pass).", **define)
    flags.DEFINE_integer(
        "steps_per_execution",
        1,
        "Training steps per call of the compiled step (Keras's compile argument; more "
        "amortize the call's dispatch on an accelerator).",
        lower_bound=1,
        **define,
    )
    flags.DEFINE_integer(
        "backup_every",
        5000,
        "Training steps between backups (0: none), taken at the first loss window's end; a run "
        "killed while training resumes from its last backup when run again with the same "
        "settings.",
        lower_bound=0,
        **define,
    )
    flags.DEFINE_integer("seed", 0, "Seed of the weights, the draws and the shuffle.", **define)
    flags.DEFINE_integer(
        "devices",
        0,
        "Local devices to train on, the batch split over them by "
        "keras.distribution.DataParallel (JAX; 0: every device JAX sees, 1: one).",
        lower_bound=0,
        **define,
    )


def defaults() -> dict:
    """The job's settings at their defaults (`define_job_flags`')."""
    values = flags.FlagValues()
    define_job_flags(values)
    return {name: values[name].default for name in SETTINGS}


SETTINGS = (
    "dim",
    "batch_size",
    "num_uniform",
    "num_in_batch",
    "correction",
    "table_learning_rate",
    "learning_rate",
    "sketch_width",
    "sketch_decay",
    "index_size",
    "shuffle_window",
    "share_item_table",
    "max_steps",
    "steps_per_execution",
    "backup_every",
    "seed",
    "devices",
)
# Settings that do not change what a pass trains: a backup made under other values of these
# is resumed.
RESUMABLE_ACROSS = ("max_steps", "steps_per_execution", "backup_every", "devices")


# The settings of `pipelines.train` this job implements only at these values (the rest it
# takes from the config, `config_settings`, or does not read: validation, backups, exports).
JOB = dict(
    negatives="mixed",
    frequency="count_min",
    mixture="exact",
    deduplicate=False,
    per_row=False,
    loss="sampled_softmax",
    log_q_scale=1.0,
    temperature=1.0,
    l2_normalize=False,
    num_hard_negatives=0,
    mask_known_positives=False,
    table_optimizer="adagrad",
    epochs=1,
    steps_per_epoch=0,
    weight_column="",
    item_catalog="",
    partial_batches=False,
)


def build_store(train_flags: str):
    """Builds (or finds built) the day store that `pipelines.train`'s flags `train_flags`
    describe, here, without TensorFlow (`pipelines.data.logs.ensure_day_store` without a
    run: under $TFRS_LOGQ_CACHE/day_store); (its directory, the config). A store built before
    is not read back.

    Raises:
      app.UsageError: the flags do not parse, or describe no run read out of core.
    """
    values = flags.FlagValues()
    train_flags_lib.define_flags(values)
    try:
        values(["build_store", *shlex.split(train_flags), "--output_dir=unused"])
        config = train_flags_lib.config_from_flags(values)
    except (flags.Error, ValueError) as error:
        raise app.UsageError(f"--build_store={train_flags!r}: {error}") from error
    if not logs.out_of_core(config):
        raise app.UsageError(
            f"--build_store={train_flags!r} does not read an event log by day (out of core): "
            "it needs an event log or web_synthetic, --split=next_day, --model=two_tower and "
            "--order=time."
        )
    return logs.ensure_day_store(config)[0], config


def config_settings(config) -> dict:
    """The settings of this job that run the TensorFlow pipeline's job of `config`: its
    dimension, batch, negatives (mixed: n - n // 2 uniform draws and an in-batch pool of
    n // 2, as `logq_core.samplers.sampler_arguments` splits them), correction, learning
    rates, shuffle window, index size and seed.

    Raises:
      app.UsageError: `config` trains what this job does not (`JOB`), each such setting
        named with its value.
    """
    loss, training = config.loss, config.training
    flat = config.flat()
    refused = [
        f"--{name}={flat[name]!r} (this job: {wanted!r})"
        for name, wanted in JOB.items()
        if flat[name] != wanted
    ]
    if refused:
        raise app.UsageError(
            "--build_store's config trains what this job does not: " + ", ".join(refused) + "."
        )
    # The mixed negatives' split, as the pipelines' sampler takes it (num_items only
    # passes its check: the split does not depend on it).
    _, mixed = samplers.sampler_arguments(
        "mixed", num_negatives=loss.num_negatives, num_items=config.data.synthetic_items
    )
    return dict(
        dim=config.model.dim,
        batch_size=training.batch_size,
        num_uniform=mixed["num_uniform"],
        num_in_batch=mixed["num_in_batch"],
        correction=loss.correction,
        learning_rate=training.learning_rate,
        index_size=training.index_size,
        shuffle_window=training.shuffle_window,
        share_item_table=config.model.share_item_table,
        seed=training.seed,
        table_learning_rate=training.table_learning_rate or training.learning_rate,
        adam_epsilon=training.adam_epsilon,
    )


def load(directory: str):
    """(DayStore, test EvalSet, num_users, num_items) of a built store."""
    manifest = day_store.read_manifest(directory)
    if manifest.get("examples_removed"):
        raise ValueError(
            f"{directory}: its training examples were removed when its run finished training; "
            "build the store again (--build_store) or use one whose run has not finished."
        )
    _, split = day_store.read(directory, np.zeros(0), np.zeros(0))
    return split.stream, split.test, manifest["num_users"], manifest["num_items"]


def _regroup(chunks, size: int, keep_last: bool):
    """Dicts of arrays with `size` rows each, from `chunks` of any length, in order (the last
    shorter one kept with `keep_last`, else dropped)."""
    pending, rows = [], 0
    for chunk in chunks:
        pending.append(chunk)
        rows += len(chunk["user"])
        if rows < size:
            continue
        joined = {key: np.concatenate([c[key] for c in pending]) for key in chunk}
        full = rows // size * size
        for start in range(0, full, size):
            yield {key: value[start : start + size] for key, value in joined.items()}
        rest = {key: value[full:] for key, value in joined.items()}
        pending, rows = [rest], rows - full
    if keep_last and rows:
        yield {key: np.concatenate([c[key] for c in pending]) for key in pending[0]}


def batches(store, batch_size: int, shuffle_window: int = 0, seed: int = 0):
    """The store's examples in time order, `batch_size` at a time (the last partial one
    dropped: in-batch negatives want full batches); with `shuffle_window`, each block of that
    many examples permuted first, as the TensorFlow pipeline's stream is (a row moves only
    within its block; numpy's permutations, not TensorFlow's)."""
    chunks = store.chunks()
    if shuffle_window:
        rng = np.random.default_rng(seed)
        chunks = (
            {key: value[order] for key, value in block.items()}
            for block in _regroup(chunks, shuffle_window, keep_last=True)
            for order in (rng.permutation(len(block["user"])),)
        )
    yield from _regroup(chunks, batch_size, keep_last=False)


def make_model(num_users: int, num_items: int, settings):
    """The two-tower keras.Model (see the module)."""
    import keras  # pylint: disable=import-outside-toplevel
    from keras import ops  # pylint: disable=import-outside-toplevel

    import keras_logq  # pylint: disable=import-outside-toplevel

    jax = keras.backend.backend() == "jax"
    dim, seed = settings["dim"], settings["seed"]

    def table(rows, name):
        init = keras.initializers.RandomUniform(-0.05, 0.05, seed=seed)
        if jax:
            return keras_logq.SparseEmbedding(
                rows,
                dim,
                optimizer="adagrad",
                learning_rate=settings["table_learning_rate"],
                embeddings_initializer=init,
                name=name,
            )
        return keras.layers.Embedding(rows, dim, embeddings_initializer=init, name=name)

    bases = (keras_logq.SparseUpdates, keras.Model) if jax else (keras.Model,)

    class TwoTower(*bases):  # type: ignore[misc]
        def __init__(self):
            super().__init__()
            self.users = table(num_users + 1, "users")
            self.items = table(num_items + 1, "items")
            # The history's items: a table of their own, or the candidates' (as TwoTower's
            # share_item_table).
            self.history_items = (
                self.items if settings["share_item_table"] else table(num_items + 1, "history")
            )
            self.projection = keras.layers.Dense(dim, name="query")
            self.candidate = keras.layers.Dense(dim, name="candidate")
            self.sketch = keras_logq.CountMinSketchEstimator(
                width=settings["sketch_width"], decay=settings["sketch_decay"], seed=seed
            )
            self.sampler = keras_logq.MixedSampler(
                num_items,
                settings["num_uniform"],
                settings["num_in_batch"] or settings["batch_size"],
                first_id=1,
                probabilities=self.sketch,
                seed=seed,
            )

        def query(self, users, history):
            rows = self.history_items(history)
            real = ops.cast(ops.greater(history, 0), rows.dtype)[..., None]
            mean = ops.sum(rows * real, axis=1) / ops.maximum(ops.sum(real, axis=1), 1.0)
            return self.projection(ops.concatenate([self.users(users), mean], axis=-1))

        def candidates(self, ids):
            return self.candidate(self.items(ids))

        def call(self, x):
            return self.query(x["user"], x["history"]), self.candidates(x["item"])

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            query, positives = y_pred
            self.sketch.update(x["item"])
            draws = self.sampler(x["item"], x["item"], positives, embedding_fn=self.candidates)
            return ops.mean(
                keras_logq.negatives_loss(
                    query, positives, draws, correction=settings["correction"]
                )
            )

    model = TwoTower()
    # Where SparseUpdates does not apply, the dense tables and the projection train through
    # Adagrad at the tables' rate.
    model.compile(
        optimizer=keras.optimizers.Adam(
            settings["learning_rate"], epsilon=settings.get("adam_epsilon", 1e-7)
        )
        if jax
        else keras.optimizers.Adagrad(settings["table_learning_rate"]),
        steps_per_execution=settings.get("steps_per_execution", 1),
    )
    return model


def ranked(towers, test, index: np.ndarray, history_length: int, k: int, chunk: int = 256):
    """[num_queries, k] ids: each test query's top `k` over `index`, its history excluded
    (the query reads its last `history_length` items, as the training examples do), by the
    product's one exact search on the backend's device (`keras_logq.ranking.exact_top_k`:
    ties to the lower id, `NO_ITEM` where fewer than k candidates are left). `towers` has
    `query(users, histories)` and `candidates(ids)` (the trained model, or `Towers`): the
    queries and the index's embeddings stay on the device, and only the ranked ids come
    back."""
    from keras import ops  # pylint: disable=import-outside-toplevel

    from keras_logq import ranking as keras_ranking  # pylint: disable=import-outside-toplevel

    items = towers.candidates(index.astype(np.int32))
    queries = [
        towers.query(
            test.users[start : start + chunk].astype(np.int32),
            sequences.left_pad(test.histories[start : start + chunk], history_length),
        )
        for start in range(0, len(test.users), chunk)
    ]
    return keras_ranking.exact_top_k(
        ops.concatenate(queries, axis=0), index, items, k, test.histories
    )


def evaluate(towers, test, index: np.ndarray, history_length: int, ks=KS, per_query=False):
    """Recall and NDCG at `ks` of each test query over `index` (`ranked`); with
    `per_query`, (the means, {metric: [num_queries] values}: `per_query.save`'s "values")."""
    ids = ranked(towers, test, index, history_length, max(ks))
    means = metrics_lib.recall_ndcg(ids, test.targets, ks)
    if not per_query:
        return means
    return means, metrics_lib.per_query_recall_ndcg(ids, test.targets, ks)


# The trained towers of a run, saved when it finishes (`save_towers`): one array a table or
# dense weight, the TensorFlow job's `TwoTower` layers' names ("history" absent when the
# history reads the item table).
TOWER_WEIGHTS = (
    "users",
    "items",
    "history",
    "query/kernel",
    "query/bias",
    "candidate/kernel",
    "candidate/bias",
)
TOWERS_FILE = "towers.npz"


def tower_weights(model) -> Dict[str, np.ndarray]:
    """The trained two-tower's weights as numpy arrays, named as `TOWER_WEIGHTS`."""
    from keras import ops  # pylint: disable=import-outside-toplevel

    if hasattr(model, "jax_state_sync"):  # JAX: fit keeps the state outside the variables.
        model.jax_state_sync()
    weights = {
        "users": model.users.embeddings,
        "items": model.items.embeddings,
        "query/kernel": model.projection.kernel,
        "query/bias": model.projection.bias,
        "candidate/kernel": model.candidate.kernel,
        "candidate/bias": model.candidate.bias,
    }
    if model.history_items is not model.items:
        weights["history"] = model.history_items.embeddings
    return {name: ops.convert_to_numpy(value) for name, value in weights.items()}


def save_towers(model, directory: str, history_length: int) -> str:
    """Writes the trained towers' weights (`tower_weights`) and the query's history length
    to `directory`/towers.npz, whole or not at all (a temporary file renamed); its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, TOWERS_FILE)
    partial = path + ".partial.npz"
    weights = tower_weights(model)
    np.savez(partial, history_length=np.int64(history_length), **weights)  # type: ignore[arg-type]
    os.replace(partial, path)
    return path


def read_towers(directory: str) -> Dict[str, np.ndarray]:
    """The arrays `save_towers` wrote to `directory` (memory-mapped where numpy can).

    Raises:
      FileNotFoundError: `directory` holds no towers.npz.
      ValueError: the file lacks a weight, or its shapes do not fit together.
    """
    path = os.path.join(directory, TOWERS_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} is missing: the Keras run has not finished training (its towers are "
            "saved with metrics.json)."
        )
    with np.load(path) as saved:
        weights = {name: saved[name] for name in saved.files}
    # "history" is absent where the history read the item table.
    needed = [name for name in TOWER_WEIGHTS if name != "history"] + ["history_length"]
    missing = [name for name in needed if name not in weights]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}: not a Keras run's towers.")
    dim = weights["items"].shape[1]
    if weights["candidate/kernel"].shape != (dim, dim) or weights["query/kernel"].shape != (
        2 * dim,
        dim,
    ):
        raise ValueError(
            f"{path}: the dense kernels {weights['query/kernel'].shape} and "
            f"{weights['candidate/kernel'].shape} do not fit tables of dimension {dim}."
        )
    return weights


class Towers:
    """The two towers of saved weights (`read_towers`) as functional Keras models of plain
    layers (`keras.layers.Embedding`, `Dense`, `keras.ops`): `query_model` ({"user": [B],
    "history": [B, history_length]} -> [B, dim]) and `candidate_model` (ids -> [.., dim]),
    which `keras.saving` writes and reads back without this module. The same products as the
    trained model on any backend."""

    def __init__(self, weights: Dict[str, np.ndarray]):
        import keras  # pylint: disable=import-outside-toplevel
        from keras import ops  # pylint: disable=import-outside-toplevel

        self.history_length = int(weights["history_length"])
        rows_items, dim = weights["items"].shape

        def table(name):
            layer = keras.layers.Embedding(len(weights[name]), dim, name=f"{name}_table")
            layer.build()
            layer.embeddings.assign(weights[name])
            return layer

        def dense(name):
            layer = keras.layers.Dense(dim, name=name)
            layer.build((None, weights[f"{name}/kernel"].shape[0]))
            layer.kernel.assign(weights[f"{name}/kernel"])
            layer.bias.assign(weights[f"{name}/bias"])
            return layer

        items = table("items")
        history_table = table("history") if "history" in weights else items
        user = keras.Input((), dtype="int32", name="user")
        history = keras.Input((self.history_length,), dtype="int32", name="history")
        rows = history_table(history)
        real = ops.cast(ops.greater(history, 0), rows.dtype)[..., None]
        mean = ops.sum(rows * real, axis=1) / ops.maximum(ops.sum(real, axis=1), 1.0)
        query = dense("query")(ops.concatenate([table("users")(user), mean], axis=-1))
        self.query_model = keras.Model({"user": user, "history": history}, query, name="query")
        ids = keras.Input((), dtype="int32", name="item")
        self.candidate_model = keras.Model(ids, dense("candidate")(items(ids)), name="candidate")
        self.num_items = rows_items - 1

    def query(self, users, histories):
        """[B, dim] query embeddings of dense user ids and [B, history_length] histories."""
        return self.query_model({"user": users, "history": histories})

    def candidates(self, ids):
        """[len(ids), dim] candidate embeddings of dense item ids."""
        return self.candidate_model(ids)


class NonFiniteLoss(ArithmeticError):
    """The training loss became NaN or infinite: the job stops, and writes no results."""


def backup_dir_for(store_dir: str, settings, backend: str) -> str:
    """The default backup directory of a run: named by the store, the Keras backend and the
    settings that shape its training, under $TFRS_LOGQ_CACHE/keras_next_day."""
    key = json.dumps(
        dict(
            store=os.path.abspath(store_dir),
            backend=backend,
            **{k: v for k, v in settings.items() if k not in RESUMABLE_ACROSS},
        ),
        sort_keys=True,
    )
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(logs.cache_root(), "keras_next_day", name)


def _state_variables(model):
    """What a backup holds: the model's variables (tables, projections, the sketch's counts,
    the sparse tables' optimizer state, the samplers' seeds) and its optimizer's."""
    return list(model.variables) + list(model.optimizer.variables)


BACKUP = re.compile(r"step-(\d{9})$")
PARTIAL_BACKUP = re.compile(r"step-\d{9}\.partial$")


def _backups(directory: str):
    """The complete backups in `directory` (step-NNNNNNNNN directories holding state.json),
    oldest first."""
    if not directory or not os.path.isdir(directory):
        return []
    found = sorted(
        (int(match.group(1)), os.path.join(directory, name))
        for name in os.listdir(directory)
        for match in [BACKUP.match(name)]
        if match and os.path.isfile(os.path.join(directory, name, "state.json"))
    )
    return [path for _, path in found]


def latest_backup(directory: str):
    """The path of the newest complete backup in `directory`, or None."""
    found = _backups(directory)
    return found[-1] if found else None


def remove_backups(directory: str) -> None:
    """Removes the backups in `directory`, complete or left half-written by a killed
    process; nothing else there."""
    if not directory or not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if (BACKUP.match(name) or PARTIAL_BACKUP.match(name)) and os.path.isdir(path):
            shutil.rmtree(path)


def variable_name(variable) -> str:
    """A variable's path without the numbers Keras appends to a name already taken in the
    process (two_tower_1/... is two_tower/...)."""
    return re.sub(r"_\d+(?=[/_]|$)", "", variable.path)


def save_backup(model, directory: str, steps: int, windows, settings, extra=None) -> str:
    """Writes the training state after `steps` steps to `directory`/step-STEPS (one .npy a
    variable, then state.json), built under a temporary name and renamed when complete; the
    older backups are removed after. Returns the backup's path."""
    import keras  # pylint: disable=import-outside-toplevel
    from keras import ops  # pylint: disable=import-outside-toplevel

    if hasattr(model, "jax_state_sync"):  # JAX: fit keeps the state outside the variables.
        model.jax_state_sync()
    target = os.path.join(directory, f"step-{steps:09d}")
    partial = f"{target}.partial"
    for name in os.listdir(directory) if os.path.isdir(directory) else []:
        if PARTIAL_BACKUP.match(name):  # Left by a process killed while it saved.
            shutil.rmtree(os.path.join(directory, name))
    os.makedirs(partial)
    variables = _state_variables(model)
    for i, variable in enumerate(variables):  # One at a time: at most one extra copy.
        np.save(os.path.join(partial, f"{i:04d}.npy"), ops.convert_to_numpy(variable))
    write_json(
        os.path.join(partial, "state.json"),
        dict(
            steps=steps,
            windows=windows,
            settings=settings,
            backend=keras.backend.backend(),
            keras=keras.__version__,
            variables=[[variable_name(v), list(v.shape), str(v.dtype)] for v in variables],
            extra=extra,
        ),
    )
    shutil.rmtree(target, ignore_errors=True)
    os.replace(partial, target)
    for older in _backups(directory):
        if older != target:
            shutil.rmtree(older)
    return target


def backup_settings(path: str) -> Dict[str, Any]:
    """The settings `save_backup` wrote for the backup at `path`."""
    with open(os.path.join(path, "state.json")) as f:
        return json.load(f).get("settings") or {}


def backup_extra(path: str):
    """What `save_backup` was given as `extra` for the backup at `path` (None if nothing)."""
    with open(os.path.join(path, "state.json")) as f:
        return json.load(f).get("extra")


def restore_backup(model, path: str, settings):
    """Loads the backup at `path` into `model` (built, its optimizer too); (steps, windows).

    Raises:
      ValueError: the backup was made under other settings, or of another model.
    """
    with open(os.path.join(path, "state.json")) as f:
        state = json.load(f)
    differ = [
        f"{name}={state['settings'].get(name)!r} (this run: {value!r})"
        for name, value in settings.items()
        if name not in RESUMABLE_ACROSS and state["settings"].get(name) != value
    ]
    if differ:
        raise ValueError(
            f"The backup {path} was made with other settings: {', '.join(differ)}. Remove it "
            "(its directory) to train from the start."
        )
    import keras  # pylint: disable=import-outside-toplevel

    if state["backend"] != keras.backend.backend():
        raise ValueError(
            f"The backup {path} was made on Keras's {state['backend']} backend; this run is "
            f"on {keras.backend.backend()} (KERAS_BACKEND)."
        )
    variables = _state_variables(model)
    ours = [[variable_name(v), list(v.shape), str(v.dtype)] for v in variables]
    if state["variables"] != ours:
        first = next(
            (
                f"{saved} against this model's {mine}"
                for saved, mine in zip(state["variables"], ours)
                if saved != mine
            ),
            f"{len(state['variables'])} variables against this model's {len(ours)}",
        )
        raise ValueError(f"The backup {path} is not of this model: {first}.")
    for i, variable in enumerate(variables):
        variable.assign(np.load(os.path.join(path, f"{i:04d}.npy")))
    return state["steps"], [tuple(window) for window in state["windows"]]


def build(model, batch) -> None:
    """Creates the model's and its optimizer's variables, as `fit` does, from one batch."""
    model(batch)
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)


def train(model, store, settings, verbose: bool = True, backup_dir: str = ""):
    """One pass of `model.fit` over the store's batches (`batches`), at most
    `settings["max_steps"]`; (the steps a backup held at the start, [(steps, mean loss over
    those steps)]), a window of LOSS_WINDOW steps (rounded up to whole calls of
    `steps_per_execution`) at a time, the last maybe shorter.

    `fit` rather than a loop of `train_on_batch`: Keras dispatches each step without waiting
    for the last one's loss (a `train_on_batch` call returns its logs to the host), so the
    next batch is read while the device trains; `settings["steps_per_execution"]` steps run in
    one call of the compiled function.

    With `backup_dir`, the state is saved there at the first window's end `backup_every`
    steps or more after the last backup, and at the pass's end (`save_backup`), and a backup found
    there is loaded first and its steps skipped: a killed run goes on where its last backup
    left it, and trains what one uninterrupted run trains.
    """
    steps = store.num_examples // settings["batch_size"]
    if settings["max_steps"]:
        steps = min(steps, settings["max_steps"])
    if not steps:
        raise ValueError(
            f"batch_size={settings['batch_size']} is more than the store's "
            f"{store.num_examples} training examples: no full batch to train on."
        )

    def stream(start):
        return itertools.islice(
            batches(store, settings["batch_size"], settings["shuffle_window"], settings["seed"]),
            start,
            steps,
        )

    # A window is whole calls of the compiled step (Keras takes steps_per_execution batches
    # at each call); the last may be shorter.
    per_call = settings.get("steps_per_execution", 1)
    window = -(-LOSS_WINDOW // per_call) * per_call
    start, windows = 0, []
    latest = _backups(backup_dir)[-1:] if backup_dir else []
    if latest:
        build(model, next(stream(0)))
        start, windows = restore_backup(model, latest[0], settings)
        if start > steps:
            raise ValueError(
                f"max_steps={settings['max_steps']}: the backup {latest[0]} holds {start} "
                "steps trained already. Remove it (or give another --backup_dir) to train "
                "fewer."
            )
        if verbose:
            print(f"resumed from {latest[0]}: {start} of {steps} steps trained", flush=True)
    if start >= steps:
        return start, windows

    class Windows(keras_callback()):  # type: ignore[misc]  # pylint: disable=too-few-public-methods
        """Closes each window when the next call of the step begins: records (and prints)
        its mean loss, backs up when due, and resets the loss's mean. It reads nothing at a
        step's end, so Keras dispatches the steps without waiting for their losses."""

        def __init__(self):
            super().__init__()
            self.last = self.last_backup = start  # The last window's end, the last backup.

        def close(self, done):
            if hasattr(self.model, "jax_state_sync"):  # JAX: the metrics' state, read back.
                self.model.jax_state_sync()
            loss = float(self.model.get_metrics_result()["loss"])
            if not np.isfinite(loss):
                raise NonFiniteLoss(
                    f"the training loss is {loss} over steps {self.last + 1}-{done} of {steps}: "
                    "the model diverged (a learning rate too high?), or the store holds ids "
                    "past the tables (a rebuilt or edited store?); no results are written."
                )
            windows.append((done - self.last, loss))
            self.last = done
            if verbose:
                print(f"step {done} of {steps}: loss {loss:.4f}", flush=True)
            every = settings.get("backup_every", 0)
            due = every and done - self.last_backup >= every
            if backup_dir and (done == steps or due):
                save_backup(self.model, backup_dir, done, windows, settings)
                self.last_backup = done
            self.model.reset_metrics()  # On JAX the next step reads the synced state.

        def on_train_batch_begin(self, batch, logs=None):
            if start + batch - self.last >= window:  # `batch`: the steps of this fit so far.
                self.close(start + batch)

    windows_callback = Windows()
    with warnings.catch_warnings():
        # The last call may find fewer than steps_per_execution batches left: Keras then
        # trains on those and warns that the stream ran out, as it should.
        warnings.filterwarnings("ignore", "Your input ran out of data")
        # One epoch of exactly the steps left: on TensorFlow a step asked of a spent stream
        # still advances the counters that do not wait for its data (the optimizer's, the
        # sketch's, the samplers' seeds), and a second call of fit would lose the batches
        # tf.data read ahead for the first.
        model.fit(
            ((batch,) for batch in stream(start)),
            steps_per_epoch=steps - start,
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=[windows_callback],
        )
    windows_callback.close(steps)
    return start, windows


def keras_callback():
    """keras.callbacks.Callback (Keras imported when the job runs, after the backend is set)."""
    import keras  # pylint: disable=import-outside-toplevel

    return keras.callbacks.Callback


def data_parallel(devices: int, batch_size: int):
    """`keras.distribution.DataParallel` over `devices` local devices (0: as many of those
    the backend sees as divide the batch, said when fewer than all), or None where that is
    one device or the backend is not JAX (Keras 3 distributes on JAX).

    Raises:
      ValueError: more devices asked than there are, or a batch they do not divide.
    """
    import keras  # pylint: disable=import-outside-toplevel

    if devices == 1 or keras.backend.backend() != "jax":
        return None
    found = keras.distribution.list_devices()
    if devices > len(found):
        raise ValueError(
            f"devices={devices}: the backend sees {len(found)} device(s) ({found[0]}, ...)."
        )
    if devices:
        chosen = found[:devices]
        if batch_size % devices:
            raise ValueError(
                f"batch_size={batch_size} does not split over devices={devices}: give a "
                f"multiple of {devices}, or devices=1."
            )
    else:  # As many as divide the batch.
        count = max(n for n in range(1, len(found) + 1) if batch_size % n == 0)
        if count < len(found):
            print(
                f"batch_size={batch_size} splits over {count} of the {len(found)} devices: "
                f"the job trains on {count}.",
                flush=True,
            )
        chosen = found[:count]
    if len(chosen) == 1:
        return None
    return keras.distribution.DataParallel(devices=chosen)


def run(
    store_dir: str,
    settings,
    verbose: bool = True,
    backup_dir: str = "",
    ks=KS,
    towers_dir: str = "",
    per_query: bool = False,
):
    """Trains (backing up to `backup_dir`, see `train`) and tests (Recall and NDCG at `ks`)
    on the store at `store_dir`; returns the results. With `towers_dir`, the trained towers
    are saved there (`save_towers`); with `per_query`, the results hold each test query's
    values under "per_query" (`pipelines.per_query.save`'s record, but its description)."""
    import keras  # pylint: disable=import-outside-toplevel

    store, test, num_users, num_items = load(store_dir)
    keras.utils.set_random_seed(settings["seed"])
    if not settings["sketch_width"]:
        settings = {**settings, "sketch_width": formulas.count_min_width(num_items)}
    distribution = data_parallel(settings.get("devices", 1), settings["batch_size"])
    with distribution.scope() if distribution else contextlib.nullcontext():
        model = make_model(num_users, num_items, settings)
        started = time.time()
        resumed_from_step, losses = train(model, store, settings, verbose, backup_dir)
        train_seconds = time.time() - started
        index = test_index(store.item_counts, test, settings["index_size"])
        started = time.time()
        test_metrics = evaluate(
            model, test, index, store.history_length, ks=tuple(ks), per_query=per_query
        )
        test_seconds = time.time() - started
        if towers_dir:
            save_towers(model, towers_dir, store.history_length)
    record = {}
    if per_query:
        test_metrics, values = test_metrics
        record = dict(
            users=np.asarray(test.users),
            targets_digest=per_query_lib.targets_digest(test.targets),
            split="test",
            index="exact",
            values=values,
        )
    return dict(
        backend=keras.backend.backend(),
        devices=len(distribution.device_mesh.devices.flat) if distribution else 1,
        steps=sum(steps for steps, _ in losses),
        # The mean loss of the first and of the last LOSS_WINDOW steps.
        first_loss=losses[0][1],
        last_loss=losses[-1][1],
        loss_window=LOSS_WINDOW,
        # The steps a backup held when the run began (trained by an earlier, killed process,
        # and not counted in train_seconds).
        resumed_from_step=resumed_from_step,
        train_seconds=round(train_seconds, 1),
        test_seconds=round(test_seconds, 1),
        num_users=num_users,
        num_items=num_items,
        num_test_queries=len(test.users),
        index_items=len(index),
        test=test_metrics,
        settings=settings,
        **(dict(per_query=record) if per_query else {}),
    )


def test_index(counts: np.ndarray, test, index_size: int) -> np.ndarray:
    """The pipelines' test index (`splits.test_index`) over training counts `counts`: the
    `index_size` most trained items plus the test day's positives; index_size 0: the whole
    catalog."""
    index = splits.test_index(counts, index_size, test)
    return np.arange(1, len(counts)) if index is None else index


def served_index(counts: np.ndarray, index_size: int) -> np.ndarray:
    """What an export serves (`splits.served_index`): the `index_size` most trained items
    (the test index without the test day's positives, which a server cannot know);
    index_size 0: the whole catalog."""
    index = splits.served_index(counts, index_size)
    return np.arange(1, len(counts)) if index is None else index
