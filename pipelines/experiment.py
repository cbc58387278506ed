"""Assembly of an experiment from its config: data, split, frequencies, model, input streams.

Every entry point (`pipelines.train`, `pipelines.evaluate`, `pipelines.export`,
the benchmarks) builds a run through this module, so that they cannot drift:
the data of `config.data.dataset`, its split, the log-Q probabilities, the model,
the resumable training stream, and the query embeddings and metrics of an
evaluation set.
"""

import json
import os
from typing import Dict, Iterator, List, NamedTuple, Optional, Tuple, Union

import tfrs_logq  # noqa: F401  First: sets up tf.keras (Keras 2) and ScaNN before TensorFlow.

# isort: split
import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs

from logq_core import formulas
from pipelines import configs
from pipelines.data import builders
from pipelines.data import datasets
from pipelines.data import logs
from pipelines.data import splits as splits_lib
from pipelines.data import web_synthetic
from pipelines.data.interactions import Interactions
from pipelines.run_files import RunFiles
from pipelines.run_files import RunNotFound
from tfrs_logq import frequency as frequency_lib
from tfrs_logq import retrieval
from tfrs_logq.models import SASRec
from tfrs_logq.models import TwoTower
from tfrs_logq.models import make_objective

# ---------------------------------------------------------------------------- data

# The dataset and its split (TensorFlow-free: the Keras job reads them too).
load_data = datasets.load_data
synthetic_data = datasets.synthetic_data
make_split = datasets.make_split


def save_vocabularies(config: configs.Config, output_dir: str) -> None:
    """Saves an event-log run's vocabularies to OUTPUT/vocabulary (once:
    `logs.save_vocabularies`)."""
    logs.save_vocabularies(config, output_dir)


class WebTruth(NamedTuple):
    """The web-scale synthetic log's truth, in the run's dense ids."""

    catalog: web_synthetic.WebCatalog
    # [num_items + 1] generator index of each dense item (-1: padding, or an item of an
    # --item_catalog that the law does not hold: no mass).
    item_index: np.ndarray
    dense_item: np.ndarray  # [N] dense id of each generator item (0: out of vocabulary)
    user_index: np.ndarray  # [num_users + 1] generator index of each dense user
    test_day: int  # The test day, as the truth counts days.

    def log_probabilities(self, users: np.ndarray) -> np.ndarray:
        """[len(users), num_items + 1] log P(d | u) on the test day (padding: -inf)."""
        logp = self.catalog.log_probabilities(self.user_index[users], self.test_day)
        out = np.full([len(users), len(self.item_index)], -np.inf)
        known = np.flatnonzero(self.item_index >= 0)
        out[:, known] = logp[:, self.item_index[known]]
        return out

    def support(self, users: np.ndarray) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """Per user of `users` (dense ids): (the dense ids, sorted, of the vocabulary's items
        the law gives mass on the test day, log P(d | u) of each before any
        renormalisation). The law is sparse (a user's clusters), so this holds a user's few
        thousand items, not the catalog: what the KL and the calibration read."""
        catalog = self.catalog
        within = (
            catalog.log_weights(self.test_day)
            - catalog.cluster_log_totals(self.test_day)[catalog.item_cluster]
        )
        members = np.argsort(catalog.item_cluster, kind="stable")
        starts = np.searchsorted(catalog.item_cluster[members], np.arange(catalog.num_clusters + 1))
        for user in self.user_index[np.asarray(users, np.int64)]:
            parts, values = [], []
            for slot in range(catalog.user_clusters.shape[1]):
                cluster = catalog.user_clusters[user, slot]
                items = members[starts[cluster] : starts[cluster + 1]]
                parts.append(items)
                values.append(np.log(catalog.user_weights[user, slot]) + within[items])
            items, log_p = np.concatenate(parts), np.concatenate(values)
            order = np.argsort(items, kind="stable")
            items, log_p = items[order], log_p[order]
            first = np.flatnonzero(np.r_[True, items[1:] != items[:-1]])
            items, log_p = items[first], np.logaddexp.reduceat(log_p, first)  # A cluster twice.
            dense = self.dense_item[items]
            kept = dense > 0
            dense, log_p = dense[kept], log_p[kept]
            # Sorted by dense id, which the generator's order is not: the calibration finds a
            # target in it by a sorted search (unsorted, nearly every target read as outside
            # the law, at the -1e4 floor: the records at 564d147 held those).
            order = np.argsort(dense, kind="stable")
            yield dense[order], log_p[order]

    def oracle_top_k(self, users: np.ndarray, k: int, exclude, candidates=None) -> np.ndarray:
        """[len(users), k] dense ids ranked by the true law (`retrieval.NO_ITEM` pads: a miss,
        as in the model's lists), `exclude` removed, among
        the dense `candidates` (None: every item in the vocabulary)."""
        allowed = self.dense_item > 0
        if candidates is not None:
            allowed = np.zeros(len(self.dense_item), bool)
            index = self.item_index[candidates]
            allowed[index[index >= 0]] = True
        excluded = (self.item_index[np.asarray(ids, np.int64)] for ids in exclude)
        found = self.catalog.oracle_top_k(
            self.user_index[users],
            self.test_day,
            k,
            [ids[ids >= 0] for ids in excluded],
            allowed,
        )
        return np.where(found >= 0, self.dense_item[np.maximum(found, 0)], retrieval.NO_ITEM)


# The last truth built, with the data it maps: the test report and the baselines of one run
# ask for it in turn (reading truth.npz and sorting a million string ids each time).
_LAST_WEB_TRUTH: List[Tuple[configs.DataConfig, Interactions, "WebTruth"]] = []


def web_truth(config: configs.Config, data: Interactions) -> WebTruth:
    """The truth of a --dataset=web_synthetic run over `data` (its dense ids)."""
    for cached_data_config, cached_data, truth in _LAST_WEB_TRUTH:
        if cached_data is data and cached_data_config == config.data:
            return truth
    truth = _web_truth(config, data)
    _LAST_WEB_TRUTH[:] = [(config.data, data, truth)]
    return truth


def _web_truth(config: configs.Config, data: Interactions) -> WebTruth:
    catalog = web_synthetic.read_truth(logs.web_synthetic_dir(config.data))

    def index_of(raw_keys, dense_keys):
        """Each dense key's position in raw_keys; -1 where it has none (an id of an
        --item_catalog outside the law)."""
        order = np.argsort(raw_keys)
        position = np.minimum(np.searchsorted(raw_keys[order], dense_keys), len(order) - 1)
        found = order[position]
        return np.where(raw_keys[found] == dense_keys, found, -1)

    # Matched by the ids' uint64 values (`web_synthetic.id_keys`): 8 bytes an id, not a
    # sorted copy of the strings.
    item_index = np.concatenate(
        [
            [-1],
            index_of(
                web_synthetic.id_keys(catalog.item_ids), web_synthetic.id_keys(data.item_ids[1:])
            ),
        ]
    )
    user_index = np.concatenate(
        [
            [0],
            index_of(
                web_synthetic.id_keys(catalog.user_ids, "u"),
                web_synthetic.id_keys(data.user_ids[1:], "u"),
            ),
        ]
    )
    dense_item = np.zeros(len(catalog.item_ids), np.int64)
    known = np.flatnonzero(item_index >= 0)
    dense_item[item_index[known]] = known
    # The truth keeps no id strings: the maps above are all it needs of them.
    catalog = catalog._replace(item_ids=np.zeros(0, str), user_ids=np.zeros(0, str))
    # The split counts days from the log's first; the truth from its START_TIME.
    first, last = data.time_span()
    first_day = (first - web_synthetic.START_TIME) // config.data.day_seconds
    test_day = logs.log_days(config.data, (first, last)).test + first_day
    return WebTruth(catalog, item_index, dense_item, user_index, test_day)


def sketch_items(config: configs.Config, split: splits_lib.Split) -> Optional[int]:
    """The items the count-min sketch is sized for (`formulas.count_min_width`): None, the catalog;
    with --item_catalog the items of the training events only (a catalog item without one
    never updates the sketch; sized by the catalog, a 20M-item catalog's sketch would take
    4 GB)."""
    if config.data.item_catalog:
        return max(int(np.count_nonzero(split.train_counts()[1:])), 1)
    return None


def make_frequency(
    loss: configs.LossConfig,
    split: splits_lib.Split,
    seed: int,
    sketch_items: Optional[int] = None,
):
    """Per-draw item probabilities for log Q: training counts (smoothed), or an estimator.

    Static counts get `loss.pseudo_count` added to every item (so that unseen
    items have Q > 0); with 0, Q = max(count / total, 1e-10), the released
    code's `torch.clamp(count / total, min=1e-10)`.
    """
    if loss.frequency == "count_min":
        return frequency_lib.CountMinSketchEstimator(
            width=formulas.count_min_width(sketch_items or split.num_items), seed=seed
        )
    if loss.frequency == "hashed":
        return frequency_lib.HashedFrequencyEstimator(seed=seed)
    return datasets.static_frequencies(split.train_counts(), loss.pseudo_count)


def build_model(
    config: configs.Config,
    data: Interactions,
    split: splits_lib.Split,
    weights_from_checkpoint: bool = False,
):
    """The model of `config` over `data`'s catalog: the loss group gives the objective and
    its sampler (`make_objective`), the model group the towers.

    `weights_from_checkpoint`: the caller loads every weight from a checkpoint next, so the
    tables start as zeros (`zeros_for_tables`). Otherwise a table larger than one chunk of
    rows is drawn a chunk at a time (`draw_large_tables`): Keras's initializer holds the
    draws and their scaled copy beside the table (3 times a 1.2 GB table at the build's
    peak)."""
    seed = config.training.seed
    objective = make_objective(
        data.num_items,
        seed=seed,
        probabilities=make_frequency(
            config.loss, split, seed, sketch_items=sketch_items(config, split)
        ),
        **config.loss.objective_settings(),
    )
    # Dropout draws from tf.random.Generator variables, which `track_random_generators` puts
    # into the backup, as the samplers' generators are: a resumed run draws what the
    # uninterrupted run would have. (A process-wide Keras setting; every entry point builds
    # its model here, so training, evaluation and the benchmarks build the same model.)
    tf.keras.backend.experimental.enable_tf_random_generator()
    towers = config.model
    if towers.model == "sasrec":
        model = SASRec(
            data.num_items,
            objective,
            max_length=towers.max_length,
            dim=towers.dim,
            num_blocks=towers.num_blocks,
            num_heads=towers.num_heads,
            dropout=towers.dropout,
            tie_embeddings=towers.tie_embeddings,
            architecture=towers.architecture,
            attention_dropout=configs.attention_dropout(towers),
        )
        drawn = zeros_for_tables(model, only_large=not weights_from_checkpoint)
        model(tf.zeros([1, towers.max_length], tf.int32))  # Build before restoring a backup.
    else:
        model = TwoTower(
            data.num_users,
            data.num_items,
            objective,
            dim=towers.dim,
            share_item_table=towers.share_item_table,
        )
        drawn = zeros_for_tables(model, only_large=not weights_from_checkpoint)
        model(
            {
                "user": tf.zeros([1], tf.int32),
                "history": tf.zeros([1, towers.history_length], tf.int32),
            }
        )
        model.item_embeddings(tf.zeros([1], tf.int32))  # Builds the item tower, one row.
    if not weights_from_checkpoint:
        draw_large_tables(drawn, seed)
    track_random_generators(model)
    return model


def zeros_for_tables(
    model: tf.keras.Model, only_large: bool = False
) -> List[Tuple[tf.keras.layers.Embedding, tf.keras.initializers.Initializer]]:
    """Sets every unbuilt `Embedding` layer of `model` to start as zeros (a fill, written once)
    rather than its random initializer (which holds the draws and their scaled copy beside
    the table): for a model whose weights a checkpoint gives next. `only_large`: only the
    tables above `retrieval.CHUNK_BYTES` whose initializer is Keras's `RandomUniform` (the
    Embedding's default), for `draw_large_tables` to draw after the build.

    Returns (layer, its initializer) for each table set to zeros."""
    zeroed = []
    for layer in model._flatten_layers():  # pylint: disable=protected-access
        if not isinstance(layer, tf.keras.layers.Embedding) or layer.built:
            continue
        initializer = layer.embeddings_initializer
        if only_large and (
            4 * layer.input_dim * layer.output_dim <= retrieval.CHUNK_BYTES
            or type(initializer) is not tf.keras.initializers.RandomUniform
        ):
            continue
        zeroed.append((layer, initializer))
        layer.embeddings_initializer = tf.keras.initializers.Zeros()
    return zeroed


def draw_large_tables(
    zeroed: List[Tuple[tf.keras.layers.Embedding, tf.keras.initializers.Initializer]], seed: int
) -> None:
    """Fills each built table of `zeroed` (`zeros_for_tables(only_large=True)`) with its
    `RandomUniform` initializer's distribution, `retrieval.CHUNK_BYTES` of rows at a time
    (stateless draws of `seed`, the table's place and the chunk): the build then holds the
    table and one chunk."""
    for place, (layer, initializer) in enumerate(zeroed):
        table = layer.embeddings
        rows, dim = table.shape
        chunk = max(1, retrieval.CHUNK_BYTES // (4 * dim))
        for number, start in enumerate(range(0, rows, chunk)):
            stop = min(rows, start + chunk)
            draws = tf.random.stateless_uniform(
                [stop - start, dim],
                seed=[seed, place * 2**20 + number],
                minval=initializer.minval,
                maxval=initializer.maxval,
                dtype=table.dtype,
            )
            # A scatter writes in place on one process, on mirrored and on sharded tables.
            table.scatter_update(tf.IndexedSlices(draws, tf.range(start, stop, dtype=tf.int64)))


def embedding_tables(model: tf.keras.Model) -> List[tf.Variable]:
    """The trainable weights of every `tf.keras.layers.Embedding` in `model`: the tables whose
    rows grow with the catalog (and the users)."""
    tables = {}
    for layer in model._flatten_layers():  # pylint: disable=protected-access
        if isinstance(layer, tf.keras.layers.Embedding):
            tables.update({id(weight): weight for weight in layer.trainable_weights})
    return list(tables.values())


def make_optimizer(
    training: configs.TrainingConfig, model: tf.keras.Model, parameter_server: bool = False
):
    """The optimizer of `training` for the built `model`: Adam, or TFRS's CompositeOptimizer
    with Adagrad on the embedding tables (sparse updates: only the rows a step touches) and
    Adam on the other variables (`training.table_optimizer`).

    The composite holds Keras's legacy Adagrad and Adam, except with `parameter_server`
    (a ParameterServerStrategy's model), where it holds the current ones: with 2
    asynchronous workers the legacy pair diverged in 3 of 4 runs and the current pair in
    none of 3 (docs/guide/distributed.md, parameter servers).
    """
    adam = dict(learning_rate=training.learning_rate, epsilon=training.adam_epsilon)
    if training.table_optimizer == "adam":
        return tf.keras.optimizers.Adam(**adam)
    tables = embedding_tables(model)
    in_tables = {id(table) for table in tables}
    table_rate = training.table_learning_rate or training.learning_rate
    optimizers = tf.keras.optimizers if parameter_server else tf.keras.optimizers.legacy
    return tfrs.experimental.optimizers.CompositeOptimizer(
        [
            (optimizers.Adagrad(table_rate), lambda: tables),
            (
                optimizers.Adam(**adam),
                lambda: [v for v in model.trainable_variables if id(v) not in in_tables],
            ),
        ]
    )


def track_random_generators(model: tf.keras.Model) -> None:
    """Puts the `tf.random.Generator` of every built Keras random layer (dropout) into the
    model's checkpoint, as `model.random_generators`.

    Keras keeps those generators out of checkpoints on purpose, so a run resumed from a
    `BackupAndRestore` backup would restart its dropout masks; with them saved (and the
    samplers' generators, which are layer variables), a resumed run draws exactly what the
    uninterrupted run would have. Needs `tf.keras.backend.experimental
    .enable_tf_random_generator()` before the model is built (else Keras uses legacy
    stateful ops, which hold no state to save, and nothing is added)."""
    generators = []
    for layer in model._flatten_layers():  # pylint: disable=protected-access
        generator = getattr(getattr(layer, "_random_generator", None), "_generator", None)
        if isinstance(generator, tf.random.Generator):
            generators.append(generator)
    if generators:
        model.random_generators = generators


def uses_xla(config: configs.Config, strategy: tf.distribute.Strategy) -> bool:
    """Whether the training step is compiled with XLA: `config.training.jit_compile`, for
    SASRec (whose step has static shapes) on one replica; the two-tower step and tf.distribute
    runs are
    not compiled (not measured here), nor a parameter-server worker's step (remote variables)."""
    return bool(
        config.training.jit_compile
        and config.model.model == "sasrec"
        and strategy.num_replicas_in_sync == 1
        and not isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)
    )


def training_stream(
    config: configs.Config,
    split: splits_lib.Split,
    input_context: Optional[tf.distribute.InputContext] = None,
) -> Tuple[tf.data.Dataset, int]:
    """The repeated, shuffled training batches (per replica, sharded by input pipeline, with
    an `input_context`), and the number of global batches in one pass (the last, partial
    one included with `config.training.partial_batches`)."""
    if split.stream is not None:
        stream = builders.day_store_dataset(
            split.stream,
            config.training.batch_size,
            seed=config.training.seed,
            input_context=input_context,
            partial_batches=config.training.partial_batches,
            shuffle_window=config.training.shuffle_window,
        )
    elif config.model.model == "sasrec":
        assert split.train is not None  # A split without `stream` holds its training sequences.
        stream = builders.sasrec_dataset(
            split.train,
            config.model.max_length,
            config.training.batch_size,
            seed=config.training.seed,
            input_context=input_context,
            partial_batches=config.training.partial_batches,
        )
    else:
        assert split.train is not None  # A split without `stream` holds its training sequences.
        in_time = config.training.order == "time"
        stream = builders.two_tower_dataset(
            split.train,
            config.model.history_length,
            config.training.batch_size,
            seed=config.training.seed,
            input_context=input_context,
            partial_batches=config.training.partial_batches,
            times=split.train_times if in_time else None,
            shuffle_window=config.training.shuffle_window,
            weights=split.train_weights,
        )
    return stream, pass_steps(config, split)


def pass_steps(config: configs.Config, split: splits_lib.Split) -> int:
    """The number of global batches in one pass over the training examples (the last,
    partial one included with `config.training.partial_batches`), without building the
    stream."""
    if split.stream is not None:
        size = split.stream.num_examples
    elif config.model.model == "sasrec":
        assert split.train is not None  # A split without `stream` holds its training sequences.
        size = sum(len(s) >= 2 for s in split.train)  # One window per user with 2+ items.
    else:
        assert split.train is not None  # A split without `stream` holds its training sequences.
        size = int(sum(max(len(s) - 1, 0) for s in split.train))
    if config.training.partial_batches:
        return max(-(-size // config.training.batch_size), 1)
    return max(size // config.training.batch_size, 1)


def training_input(
    config: configs.Config,
    split: splits_lib.Split,
    start: tf.Variable,
    strategy: tf.distribute.Strategy,
):
    """What `fit` reads: the resumable stream from step `start` (`InputStart.step`), through
    `distribute_datasets_from_function` (per-replica batches, one shard per input pipeline)
    when there are several replicas; under a ParameterServerStrategy, a `DatasetCreator`
    that each worker runs (`worker_stream`; `start` is not read)."""
    if isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy):
        return tf.keras.utils.experimental.DatasetCreator(
            lambda context: worker_stream(config, split, context)
        )
    if strategy.num_replicas_in_sync == 1:
        return resumable(training_stream(config, split)[0], start)

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        stream = training_stream(config, split, input_context)[0]
        # Each step takes one batch per replica this pipeline feeds.
        return resumable(
            stream, start, input_context.num_replicas_in_sync // input_context.num_input_pipelines
        )

    return strategy.distribute_datasets_from_function(dataset_fn)


def worker_stream(
    config: configs.Config, split: splits_lib.Split, input_context: tf.distribute.InputContext
) -> tf.data.Dataset:
    """A parameter-server worker's training stream: the whole repeated stream (a coordinator
    gives every worker input pipeline 0 of 1), started at a position of its own.

    The dataset function is traced once and run on every worker, so the shuffle seed is the
    same everywhere; each worker skips a number of batches drawn from its clock, uniform in
    [0, one pass), so that the workers do not train on the same batches in lockstep. The
    run is not resumable to the batch (the steps are asynchronous anyway).
    """
    stream, steps = training_stream(config, split, input_context)
    clock = tf.cast(tf.timestamp() * 1e6, tf.int64)
    return stream.skip(tf.math.floormod(clock, steps))


def resumable(
    stream: tf.data.Dataset, start: tf.Variable, batches_per_step: int = 1
) -> tf.data.Dataset:
    """`stream` from the position after `start` steps, `start` read when iteration starts.

    Keras's BackupAndRestore restores the step counter but restarts the input
    at the beginning of the epoch; skipping the restored number of steps of one
    repeated, deterministically shuffled stream neither repeats nor loses a batch.
    `start` must not change while training runs (`InputStart.step`, not the
    optimizer's counter: see `InputStart`).
    `batches_per_step`: batches of `stream` one step consumes (the replicas an
    input pipeline feeds under tf.distribute).
    """
    return tf.data.Dataset.range(1).flat_map(
        lambda _: stream.skip(tf.cast(start, tf.int64) * batches_per_step)
    )


# ---------------------------------------------------------------------- evaluation


def query_length(config: configs.Config) -> int:
    """How many of a user's latest items the query model reads."""
    towers = config.model
    return towers.max_length if towers.model == "sasrec" else towers.history_length


def query_embeddings(model, config: configs.Config, eval_set: splits_lib.EvalSet) -> np.ndarray:
    """[num_queries, dim] query embeddings of an evaluation set, in its order."""
    if len(eval_set.users) == 0:
        raise ValueError("The evaluation set has no queries.")
    length = query_length(config)
    queries = []
    for batch in builders.eval_queries(eval_set.histories, eval_set.users, length):
        if config.model.model == "sasrec":
            queries.append(model.query_embeddings(batch["inputs"]).numpy())
        else:
            queries.append(model.query_embeddings(batch).numpy())
    return np.concatenate(queries)


def evaluate(
    model,
    config: configs.Config,
    eval_set: splits_lib.EvalSet,
    ks=retrieval.DEFAULT_KS,
    index: str = "exact",
    queries: Optional[np.ndarray] = None,
    per_query: bool = False,
    candidates: Optional[np.ndarray] = None,
) -> Union[Dict[str, float], Dict[str, np.ndarray]]:
    """Recall@k / NDCG@k over the whole catalog (or the ids `candidates`) by `index`, the
    queries' histories filtered: their means, or with `per_query` each query's
    ([num_queries] arrays in the set's order). `queries`: the set's `query_embeddings`, when
    the caller already has them."""
    if queries is None:
        queries = query_embeddings(model, config, eval_set)
    top = retrieval.top_k(
        queries,
        retrieval.ItemTable.of(model),  # Read a chunk at a time, never copied whole.
        max(ks),
        min_items=config.training.scann_min_items,
        exclude=eval_set.histories,
        index=index,
        candidates=candidates,
    )
    metrics = retrieval.per_query_recall_ndcg if per_query else retrieval.recall_ndcg
    return metrics(top, eval_set.targets, ks)


def served_index(config: configs.Config, split: splits_lib.Split) -> Optional[np.ndarray]:
    """The `index_size` items with the most training events (ties: the lower id), sorted:
    what a run's exports serve; None (index_size 0): the whole catalog."""
    return splits_lib.served_index(split.train_counts(), config.training.index_size)


def test_index(config: configs.Config, split: splits_lib.Split) -> Optional[np.ndarray]:
    """The ids the test search covers: `served_index` plus every test positive (the paper's
    industrial index); None: the whole catalog."""
    return splits_lib.test_index(split.train_counts(), config.training.index_size, split.test)


def evaluate_split(
    model,
    config: configs.Config,
    split: splits_lib.Split,
    which: str,
    index: str = "exact",
    queries: Optional[np.ndarray] = None,
    per_query: bool = False,
) -> Union[Dict[str, float], Dict[str, np.ndarray]]:
    """`evaluate` on the split's "test" or "validation" set as the run's report does: at
    the run's --ks, the test set over `test_index`."""
    if which not in ("test", "validation"):
        raise ValueError(f"`which` must be test or validation; received which={which!r}.")
    eval_set = split.test if which == "test" else split.validation
    return evaluate(
        model,
        config,
        eval_set,
        ks=configs.ks(config.training),
        index=index,
        queries=queries,
        per_query=per_query,
        candidates=test_index(config, split) if which == "test" else None,
    )


def load_run(output_dir: str):
    """(config, model with the best weights, data split, data) of the run in `output_dir`."""
    files = RunFiles(output_dir)
    if not os.path.exists(files.config):
        raise RunNotFound(
            f"{output_dir} holds no training run (no config.json): give the --output_dir of "
            "a `tfrs-logq train` run."
        )
    with open(files.config) as f:
        config = configs.validate(configs.Config.from_dict(json.load(f)))
    if config.training.framework == "keras":
        return _load_keras_run(config, output_dir)
    if not files.has_best():
        raise RunNotFound(
            f"{output_dir} has no checkpoint yet ({files.best}.index): its training has not "
            "finished an epoch."
        )
    data = load_data(config, output_dir)
    data_split = make_split(config, data, output_dir)
    model = build_model(config, data, data_split, weights_from_checkpoint=True)
    model.load_weights(files.best).expect_partial()
    return config, model, data_split, data


def _load_keras_run(config: configs.Config, output_dir: str):
    """`load_run` of a run the Keras job trained: its saved towers
    (`keras_job.read_towers`, numpy) in the TensorFlow job's `TwoTower`, whose layers they
    name."""
    from pipelines import keras_train  # pylint: disable=import-outside-toplevel

    files = RunFiles(output_dir)
    weights = keras_train.saved_towers(config, output_dir)
    data = load_data(config, output_dir)
    data_split = make_split(config, data, output_dir)
    model = build_model(config, data, data_split, weights_from_checkpoint=True)
    length = int(weights["history_length"])
    model.query_embeddings(
        {"user": tf.zeros([1], tf.int32), "history": tf.zeros([1, length], tf.int32)}
    )
    model.candidate_embeddings(tf.zeros([1], tf.int32))
    tables = dict(users=model.user_embedding, items=model.item_embedding)
    if not model.share_item_table:
        tables["history"] = model.history_embedding
    for name, layer in tables.items():
        if layer.embeddings.shape != weights[name].shape:
            raise ValueError(
                f"{files.keras_model}: the {name} table is {list(weights[name].shape)}; this "
                f"run's data makes {list(layer.embeddings.shape)} (rebuilt store?)."
            )
        layer.embeddings.assign(weights[name])
    for name, layer in (("query", model.query_tower), ("candidate", model.candidate_tower)):
        layer.kernel.assign(weights[f"{name}/kernel"])
        layer.bias.assign(weights[f"{name}/bias"])
    return config, model, data_split, data
