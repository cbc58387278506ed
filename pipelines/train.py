r"""The training entry point: data -> model -> fit (early stopping) -> test evaluation -> export.

Usage:
  python -m pipelines.train --preset=synthetic --output_dir=runs/synthetic
  python -m pipelines.train --preset=cpu --dataset=ml-1m --negatives=in_batch \
      --correction=improved --output_dir=runs/ml1m-inbatch-improved

Writes to OUTPUT: config.json, TensorBoard logs (logs/), the best weights
(checkpoints/), a BackupAndRestore backup while running (backup/),
metrics.json (test Recall/NDCG at 1, 10, 20, 100 by exact search and ScaNN,
the config, the git revision), and SavedModels for serving (export/brute_force,
export/scann).
A run killed at any point and started again with the same flags continues
from its last backup (every --backup_every steps), estimator state included;
early stopping, the best checkpoint and the run's epoch and time totals carry
over too (OUTPUT/progress.json). A run killed after training, in the test
evaluation or the export, evaluates its best checkpoint without training again.
"""

import functools
import hashlib
import json
import os
import subprocess
import sys
import time
from typing import Dict, Optional, Tuple

import numpy as np
import tensorflow as tf
from absl import app
from absl import flags
from absl import logging

from pipelines import configs
from pipelines.data import builders
from pipelines.data import loaders
from pipelines.data import splits as splits_lib
from pipelines.data import synthetic
from pipelines.data.interactions import Interactions
from tfrs_logq import frequency as frequency_lib
from tfrs_logq import retrieval
from tfrs_logq.models import RetrievalObjective, SASRec, TwoTower

FLAGS = flags.FLAGS
VALIDATION_METRIC = "val_ndcg@10"


def define_flags() -> None:
    """--preset, --output_dir, and one override flag per `configs.Config` field."""
    flags.DEFINE_string("preset", "synthetic", f"One of {', '.join(configs.PRESETS)}.")
    flags.DEFINE_string("output_dir", None, "Where the run writes everything (required).")
    flags.DEFINE_enum("strategy", "default", list(configs.STRATEGIES),
                      "tf.distribute strategy: default (one device), mirrored (this machine's "
                      "GPUs), multi_worker (workers from TF_CONFIG), tpu (unverified here).")
    definers = {str: flags.DEFINE_string, int: flags.DEFINE_integer, float: flags.DEFINE_float,
                bool: flags.DEFINE_bool}
    for field in configs.Config.__dataclass_fields__.values():
        choices = configs.CHOICES.get(field.name)
        help_text = (f"Overrides the preset; one of {', '.join(choices)}." if choices
                     else "Overrides the preset.")
        definers[field.type if isinstance(field.type, type) else eval(field.type)](  # pylint: disable=eval-used
            field.name, None, help_text)


def config_from_flags() -> configs.Config:
    """The preset, with every flag that was given applied, validated."""
    if FLAGS.preset not in configs.PRESETS:
        raise ValueError(f"--preset must be one of {', '.join(configs.PRESETS)}; received "
                         f"--preset={FLAGS.preset!r}.")
    overrides = {name: FLAGS[name].value for name in configs.Config.__dataclass_fields__
                 if FLAGS[name].value is not None}
    return configs.validate(configs.PRESETS[FLAGS.preset].replace(**overrides))


# ---------------------------------------------------------------------------- data


def load_data(config: configs.Config) -> Interactions:
    """The interactions of `config.dataset` (files default to ../shared/data)."""
    if config.dataset == "synthetic":
        return synthetic_data(config)[0]
    if config.dataset == "ml-1m":
        return loaders.load_sasrec(config.data_path or loaders.ML_1M_SASREC)
    if config.dataset == "ml-1m-ratings":
        return loaders.load_grouplens(config.data_path or loaders.ML_1M_RATINGS)
    if config.dataset == "ml-1m-tfds":
        return loaders.load_tfds(data_dir=config.data_path or None)
    if not config.data_path:
        raise ValueError(f"--dataset={config.dataset} needs --data_path (Steam is not bundled).")
    if config.dataset == "steam":
        return loaders.load_sasrec(config.data_path)
    return loaders.load_steam_reviews(config.data_path)


@functools.lru_cache(maxsize=2)
def synthetic_data(config: configs.Config):
    """(Interactions, SyntheticCatalog) of the synthetic dataset of `config`."""
    return synthetic.make_synthetic(num_users=config.synthetic_users,
                                    num_items=config.synthetic_items,
                                    temperature=config.synthetic_temperature, seed=config.seed)


def make_split(config: configs.Config, data: Interactions) -> splits_lib.Split:
    """The split of `config`; its validation set holds at most `validation_queries` queries."""
    if config.split == "loo":
        split = splits_lib.leave_one_out(data)
    else:
        split = splits_lib.temporal(data, test_fraction=config.test_fraction,
                                    validation_fraction=config.test_fraction,
                                    targets=config.temporal_targets)
    return split._replace(validation=splits_lib.subsample(split.validation,
                                                          config.validation_queries))


def make_frequency(config: configs.Config, split: splits_lib.Split):
    """Per-draw item probabilities for log Q: training counts (smoothed), or an estimator."""
    if config.frequency == "count_min":
        return frequency_lib.CountMinSketchEstimator(seed=config.seed)
    if config.frequency == "hashed":
        return frequency_lib.HashedFrequencyEstimator(seed=config.seed)
    counts = split.train_counts().astype(np.float64) + 1.0  # Unseen items: one pseudo-count.
    counts[0] = 0.0
    probabilities = counts / counts.sum()
    probabilities[0] = 1.0  # Padding id; never a positive or a negative.
    return probabilities.astype(np.float32)


def build_model(config: configs.Config, data: Interactions, split: splits_lib.Split):
    objective = RetrievalObjective(
        data.num_items, loss=config.loss, negatives=config.negatives,
        correction=config.correction, num_negatives=config.num_negatives,
        probabilities=make_frequency(config, split), gbce_t=config.gbce_t,
        mixture=config.mixture, global_batch=config.global_negatives, seed=config.seed)
    if config.model == "sasrec":
        model = SASRec(data.num_items, objective, max_length=config.max_length, dim=config.dim,
                       num_blocks=config.num_blocks, num_heads=config.num_heads,
                       dropout=config.dropout, tie_embeddings=config.tie_embeddings)
        model(tf.zeros([1, config.max_length], tf.int32))  # Build before restoring a backup.
    else:
        model = TwoTower(data.num_users, data.num_items, objective, dim=config.dim)
        model({"user": tf.zeros([1], tf.int32),
               "history": tf.zeros([1, config.history_length], tf.int32)})
        model.item_embeddings()
    return model


def training_stream(config: configs.Config, split: splits_lib.Split,
                    input_context: Optional[tf.distribute.InputContext] = None
                    ) -> Tuple[tf.data.Dataset, int]:
    """The repeated, shuffled training batches (per replica, sharded by input pipeline, with
    an `input_context`), and the number of global batches in one pass."""
    if config.model == "sasrec":
        stream = builders.sasrec_dataset(split.train, config.max_length, config.batch_size,
                                         seed=config.seed, input_context=input_context)
        size = len(builders.sequence_windows(split.train, config.max_length)["inputs"])
    else:
        stream = builders.two_tower_dataset(split.train, config.history_length,
                                            config.batch_size, seed=config.seed,
                                            input_context=input_context)
        size = int(sum(max(len(s) - 1, 0) for s in split.train))
    return stream, max(size // config.batch_size, 1)


def training_input(config: configs.Config, split: splits_lib.Split, start: tf.Variable,
                   strategy: tf.distribute.Strategy):
    """What `fit` reads: the resumable stream from step `start` (`InputStart.step`), through
    `distribute_datasets_from_function` (per-replica batches, one shard per input pipeline)
    when there are several replicas."""
    if strategy.num_replicas_in_sync == 1:
        return resumable(training_stream(config, split)[0], start)

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        stream = training_stream(config, split, input_context)[0]
        # Each step takes one batch per replica this pipeline feeds.
        return resumable(stream, start, input_context.num_replicas_in_sync
                         // input_context.num_input_pipelines)

    return strategy.distribute_datasets_from_function(dataset_fn)


def resumable(stream: tf.data.Dataset, start: tf.Variable,
              batches_per_step: int = 1) -> tf.data.Dataset:
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
        lambda _: stream.skip(tf.cast(start, tf.int64) * batches_per_step))


class InputStart(tf.keras.callbacks.Callback):
    """The step the training input starts from: the optimizer's step counter when
    training begins (0, or the step BackupAndRestore restored), for `resumable`.

    tf.data reads the skip count on the first batch's request, inside the first
    step; the optimizer's counter is incremented in that step by an op that does
    not wait for the batch, so skipping by the counter itself would start a fresh
    run at batch 0 or batch 1 by chance (and a resumed one a batch late by chance):
    same-seed runs would train on different batches. This copy is set before the
    first step and not touched again. Place it after BackupAndRestore (callbacks
    run in list order).
    """

    def __init__(self):
        super().__init__()
        with tf.device("/cpu:0"):  # Read by the tf.data function, on the host.
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="input_start")

    def on_train_begin(self, logs=None):
        self.step.assign(int(self.model.optimizer.iterations.numpy()))


def make_strategy(name: str) -> tf.distribute.Strategy:
    """The tf.distribute strategy called `name` (one of configs.STRATEGIES).

    "multi_worker" reads the cluster from TF_CONFIG; "tpu" connects to the TPU
    named by the environment (TPU_NAME, or the local TPU VM) and has not been
    run by this project's tests.
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"--strategy must be one of {', '.join(configs.STRATEGIES)}; received "
                     f"--strategy={name!r}.")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True where this process writes the run's files (every process but MWMS's non-chiefs)."""
    return strategy.extended.should_checkpoint


# ---------------------------------------------------------------------- evaluation


def query_embeddings(model, config: configs.Config, eval_set: splits_lib.EvalSet) -> np.ndarray:
    """[num_queries, dim] query embeddings of an evaluation set, in its order."""
    if len(eval_set.users) == 0:
        raise ValueError("The evaluation set has no queries.")
    length = config.max_length if config.model == "sasrec" else config.history_length
    queries = []
    for batch in builders.eval_queries(eval_set.histories, eval_set.users, length):
        if config.model == "sasrec":
            queries.append(model.query_embeddings(batch["inputs"]).numpy())
        else:
            queries.append(model.query_embeddings(batch).numpy())
    return np.concatenate(queries)


def evaluate(model, config: configs.Config, eval_set: splits_lib.EvalSet,
             ks=retrieval.DEFAULT_KS, index: str = "exact",
             queries: Optional[np.ndarray] = None) -> Dict[str, float]:
    """Recall@k / NDCG@k over the whole catalog by `index`, the queries' histories filtered.
    `queries`: the set's `query_embeddings`, when the caller already has them."""
    if queries is None:
        queries = query_embeddings(model, config, eval_set)
    top = retrieval.top_k(queries, model.item_embeddings().numpy(), max(ks),
                          exclude=eval_set.histories, index=index)
    return retrieval.recall_ndcg(top, eval_set.targets, ks)


def test_report(model, config: configs.Config, split: splits_lib.Split,
                ks=retrieval.DEFAULT_KS) -> Dict:
    """Test metrics by each index of `config.index`; with both, the ANN overlap with exact
    search; and Recall@k of head / torso / tail targets (thirds by training frequency)."""
    queries = query_embeddings(model, config, split.test)
    items = model.item_embeddings().numpy()
    indexes = ("exact", "scann") if config.index == "both" else (config.index,)
    report, retrieved = {}, {}
    for index in indexes:
        started = time.time()
        retrieved[index] = retrieval.top_k(queries, items, max(ks), exclude=split.test.histories,
                                           index=index)
        report[f"test_{index}"] = retrieval.recall_ndcg(retrieved[index], split.test.targets, ks)
        report[f"search_seconds_{index}"] = round(time.time() - started, 2)
    report["test"] = report[f"test_{indexes[0]}"]
    if len(indexes) == 2:
        report[f"ann_overlap@{max(ks)}"] = retrieval.overlap_at_k(
            retrieved["scann"], retrieved["exact"], max(ks))
    if config.dataset == "synthetic":
        # The true next-item law P(d | u) / (1 - P(H | u)) over d not in H: KL from the model's.
        report["kl_to_truth"] = retrieval.kl_to_truth(
            synthetic_data(config)[1].logits(split.test.users), queries @ items.T,
            exclude=split.test.histories)
    bands = retrieval.popularity_bands(split.train_counts())
    report["by_popularity"] = {}
    for k in (10, max(ks)):
        report["by_popularity"].update(retrieval.stratified_recall(
            retrieved[indexes[0]], split.test.targets, bands, k))
    return report


def baselines(config: configs.Config, split: splits_lib.Split,
              ks=retrieval.DEFAULT_KS) -> Dict[str, Dict[str, float]]:
    """Test metrics of two reference rankers, on the same queries and filtering:
    training popularity, and (synthetic data) the oracle that ranks by the true P(d | u).
    Each also has `by_popularity`: Recall@k of head / torso / tail targets, as the model's."""
    test = split.test
    train_counts = split.train_counts()
    bands = retrieval.popularity_bands(train_counts)

    def metrics(top):
        values = retrieval.recall_ndcg(top, test.targets, ks)
        values["by_popularity"] = {}
        for k in (10, max(ks)):
            values["by_popularity"].update(
                retrieval.stratified_recall(top, test.targets, bands, k))
        return values

    counts = train_counts.astype(np.float32)[:, np.newaxis]
    top = retrieval.exact_top_k(np.ones([len(test.users), 1], np.float32), counts, max(ks),
                                exclude=test.histories)
    result = {"popularity": metrics(top)}
    if config.dataset == "synthetic":
        catalog = synthetic_data(config)[1]
        # <[x_u / T, 1], [y_d, popularity_d]> is the true logit.
        queries = np.hstack([catalog.user_vectors[test.users] / catalog.temperature,
                             np.ones([len(test.users), 1])])
        items = np.hstack([catalog.item_vectors,
                           np.nan_to_num(catalog.popularity, neginf=0.0)[:, np.newaxis]])
        top = retrieval.exact_top_k(queries, items, max(ks), exclude=test.histories)
        result["oracle"] = metrics(top)
    return result


class TrainingProgress(tf.keras.callbacks.Callback):
    """Carries early stopping, the best checkpoint and the run's totals across restarts.

    BackupAndRestore brings back the weights, the optimizer and the epoch, but
    EarlyStopping and ModelCheckpoint(save_best_only) start afresh: a resumed run
    would overwrite the best checkpoint with its first epoch and wait `patience`
    epochs more. After each epoch this writes OUTPUT/progress.json (the chief
    only): epochs done, the best validation value and its epoch, and the seconds
    spent, summed over the processes up to each one's last finished epoch. The
    best value is EarlyStopping's own. When training starts from a backup, it
    gives those back to the two callbacks. Place it after them and after
    BackupAndRestore (callbacks run in list order).
    `finish` marks the training done, so that a rerun goes straight to evaluation.
    """

    def __init__(self, path: str, early_stopping: tf.keras.callbacks.EarlyStopping,
                 checkpoint: tf.keras.callbacks.ModelCheckpoint, started: float,
                 write: bool = True):
        super().__init__()
        self.path, self.write, self.started = path, write, started
        self.early_stopping, self.checkpoint = early_stopping, checkpoint
        self.step = 0                     # The step training (re)started from.
        self.state = {"epochs": 0, "best": None, "best_epoch": None, "seconds": 0.0}
        self.prior_seconds = 0.0

    def on_train_begin(self, logs=None):
        self.step = int(self.model.optimizer.iterations.numpy())
        state = self._read()
        if self.step == 0 or state is None:
            return  # A fresh start (a progress file without a backup is stale).
        # Backups come every `backup_every` steps, this file at epoch ends: a backup from
        # the middle of an epoch that the file already counts means that epoch runs again.
        steps_per_epoch = (self.params or {}).get("steps")
        if steps_per_epoch:
            state["epochs"] = min(state["epochs"], self.step // steps_per_epoch)
        self.state = state
        self.prior_seconds = self.state["seconds"]
        if self.state["best"] is not None:
            self.checkpoint.best = self.state["best"]
            self.early_stopping.best = self.state["best"]
            self.early_stopping.best_epoch = self.state["best_epoch"]
            # As EarlyStopping counts: epochs finished since the best one (none when the
            # best is an epoch that runs again).
            self.early_stopping.wait = max(self.state["epochs"] - 1 - self.state["best_epoch"], 0)

    def seconds(self) -> float:
        """Seconds of training so far, this process's and the earlier ones'."""
        return self.prior_seconds + time.time() - self.started

    def on_epoch_end(self, epoch, logs=None):
        if np.isfinite(self.early_stopping.best):  # It has seen a validation value.
            self.state.update(best=float(self.early_stopping.best),
                              best_epoch=self.early_stopping.best_epoch)
        self.state.update(epochs=epoch + 1, seconds=round(self.seconds(), 1))
        self._write()

    def finish(self, **record) -> None:
        """Marks training finished, with `record` (steps, ...) for a rerun to report.

        A run killed after this (in the test evaluation or the export) and started
        again evaluates its best checkpoint without training again.
        """
        self.state.update(finished=True, seconds=round(self.seconds(), 1), **record)
        self._write()

    def finished_run(self) -> Optional[Dict]:
        """What `finish` recorded, when an earlier process finished training; else None."""
        state = self._read()
        if state is None or not state.get("finished"):
            return None
        self.state, self.step = state, state["steps"]
        return state

    def _read(self) -> Optional[Dict]:
        if not os.path.exists(self.path):
            return None
        with open(self.path) as f:
            return json.load(f)

    def _write(self) -> None:
        if self.write:
            temporary = self.path + ".tmp"
            with open(temporary, "w") as f:
                json.dump(self.state, f)
            os.replace(temporary, self.path)  # Atomic: a kill never leaves half a file.


class ValidationMetrics(tf.keras.callbacks.Callback):
    """Adds validation Recall@10 and NDCG@10 to the epoch logs (for early stopping and TensorBoard)."""

    def __init__(self, config: configs.Config, eval_set: splits_lib.EvalSet):
        super().__init__()
        self.config, self.eval_set = config, eval_set

    def on_epoch_end(self, epoch, logs=None):
        metrics = evaluate(self.model, self.config, self.eval_set, ks=(10,))
        if logs is not None:
            logs["val_recall@10"] = metrics["recall@10"]
            logs[VALIDATION_METRIC] = metrics["ndcg@10"]


# ---------------------------------------------------------------------------- run


def git_revision() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                  text=True, check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, check=True,
                               timeout=10).stdout.strip()
        return revision + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _check_output_dir(config: configs.Config, output_dir: str) -> None:
    """A directory holds one configuration: reusing it with another is refused."""
    path = os.path.join(output_dir, "config.json")
    if os.path.exists(path):
        with open(path) as f:
            # Fields added since that run was made take their defaults.
            previous = dict(configs.Config().as_dict(), **json.load(f))
        if previous != config.as_dict():
            changed = sorted(k for k in set(previous) | set(config.as_dict())
                             if previous.get(k) != config.as_dict().get(k))
            raise ValueError(f"{output_dir} holds a run with another config (differs in "
                             f"{', '.join(changed)}); use another --output_dir.")
    os.makedirs(output_dir, exist_ok=True)
    with open(path, "w") as f:
        json.dump(config.as_dict(), f, indent=1)


def run(config: configs.Config, output_dir: str, verbose: Optional[int] = None,
        strategy: Optional[tf.distribute.Strategy] = None) -> Dict:
    """Trains, evaluates on the test split, writes OUTPUT/metrics.json and returns it.

    Under `strategy` (default: the current one) the model is built in its scope
    and the input distributed per replica; `config.batch_size` is the global
    batch. With several workers, only the chief writes the run's files and
    evaluates; every worker restores the backup (BackupAndRestore), and each
    non-chief returns (and writes to OUTPUT/workers/worker-N/) a short report
    with a digest of its estimator state.
    """
    strategy = strategy or tf.distribute.get_strategy()
    chief = is_chief(strategy)
    if chief:
        _check_output_dir(config, output_dir)
    tf.keras.utils.set_random_seed(config.seed)
    started = time.time()
    data = load_data(config)
    split = make_split(config, data)
    with strategy.scope():
        model = build_model(config, data, split)
        model.compile(optimizer=tf.keras.optimizers.Adam(config.learning_rate))
    pass_steps = training_stream(config, split)[1]
    steps_per_epoch = config.steps_per_epoch or pass_steps
    best_path = os.path.join(output_dir, "checkpoints", "best")
    checkpoint = tf.keras.callbacks.ModelCheckpoint(
        best_path, monitor=VALIDATION_METRIC, mode="max", save_best_only=True,
        save_weights_only=True)
    early_stopping = tf.keras.callbacks.EarlyStopping(monitor=VALIDATION_METRIC, mode="max",
                                                      patience=config.patience)
    # Every worker reads the chief's progress (early stopping must agree); the chief writes it.
    progress = TrainingProgress(os.path.join(output_dir, "progress.json"), early_stopping,
                                checkpoint, started, write=chief)
    input_start = InputStart()
    callbacks = [
        ValidationMetrics(config, split.validation),
        tf.keras.callbacks.BackupAndRestore(os.path.join(output_dir, "backup"),
                                            save_freq=config.backup_every),
        input_start,  # After BackupAndRestore, which restores the step.
        checkpoint,
        early_stopping,
        tf.keras.callbacks.TensorBoard(os.path.join(output_dir, "logs")),
        progress,  # After the callbacks whose state it restores and records.
    ]
    if verbose is None:
        verbose = 1 if sys.stdout.isatty() else 2
    source = model.objective.task.sampler.frequency if model.objective.task else None
    streaming = getattr(source, "streaming", False)
    trained = progress.finished_run() if os.path.exists(best_path + ".index") else None
    if trained is None:
        history = model.fit(training_input(config, split, input_start.step, strategy),
                            epochs=config.epochs, steps_per_epoch=steps_per_epoch,
                            callbacks=callbacks, verbose=verbose)
        progress.finish(
            steps=int(model.optimizer.iterations.numpy()),  # Before the best weights load.
            estimator_steps=int(source.step.numpy()) if streaming else None,
            # The last epoch's training logs (loss and the task's diagnostics).
            last_epoch={k: float(v[-1]) for k, v in history.history.items() if v},
            estimator_state_digest=state_digest(source) if streaming else None)
        trained = progress.state
    else:
        print(f"{output_dir} finished training earlier ({trained['epochs']} epochs); "
              "evaluating its best checkpoint.", flush=True)
    train_seconds = trained["seconds"]
    steps, estimator_steps = trained["steps"], trained["estimator_steps"]
    replicas = {"strategy": type(strategy).__name__, "last_epoch": trained["last_epoch"],
                "num_replicas": strategy.num_replicas_in_sync,
                "estimator_state_digest": trained["estimator_state_digest"]}
    if not chief:
        worker = {"steps": steps, "estimator_steps": estimator_steps, **replicas}
        worker_dir = os.path.join(output_dir, "workers",
                                  f"worker-{strategy.cluster_resolver.task_id}")
        os.makedirs(worker_dir, exist_ok=True)
        with open(os.path.join(worker_dir, "report.json"), "w") as f:
            json.dump(worker, f, indent=1)
        return worker
    if os.path.exists(best_path + ".index"):
        if strategy.num_replicas_in_sync > 1:
            # Evaluate and export a plain copy: saving or reading the distributed model's
            # on-read state (its metrics) would need every worker to take part.
            model = build_model(config, data, split)
        model.load_weights(best_path).expect_partial()
    metrics = dict(test_report(model, config, split))
    metrics.update({
        "baselines": baselines(config, split),
        # Over the whole run, the epochs before a restart included.
        "best_validation_ndcg@10": np.nan if trained["best"] is None else trained["best"],
        "epochs_run": trained["epochs"],
        "steps": steps,
        "resumed_from_step": progress.step,
        "estimator_steps": estimator_steps,  # Updates a streaming estimator received.
        **replicas,
        "steps_per_epoch": steps_per_epoch,
        "train_seconds": round(train_seconds, 1),
        "num_users": data.num_users, "num_items": data.num_items,
        "num_test_queries": len(split.test.users),
        "config": config.as_dict(),
        "git_revision": git_revision(),
    })
    from pipelines import export  # pylint: disable=import-outside-toplevel
    metrics["exports"] = export.export_run(model, output_dir)
    with open(os.path.join(output_dir, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=1)
    return metrics


def state_digest(layer: tf.keras.layers.Layer) -> str:
    """sha256 of a layer's weights: equal on every worker when the state is synchronised."""
    digest = hashlib.sha256()
    for weight in layer.weights:
        digest.update(np.ascontiguousarray(weight.numpy()).tobytes())
    return digest.hexdigest()


def format_metrics(metrics: Dict) -> str:
    """A short markdown table of the test metrics (and of the baselines, when present)."""
    ks = sorted({int(k.split("@")[1]) for k in metrics["test"]})
    lines = ["| ranker | metric | " + " | ".join(f"@{k}" for k in ks) + " |",
             "|---|---|" + "---|" * len(ks)]
    rankers = {"model": metrics["test"]}
    rankers.update({f"{name} (baseline)": values
                    for name, values in metrics.get("baselines", {}).items()})
    for ranker, values in rankers.items():
        for name in ("recall", "ndcg"):
            lines.append(f"| {ranker} | {name} | " + " | ".join(
                f"{values[f'{name}@{k}']:.4f}" for k in ks) + " |")
    return "\n".join(lines)


def describe_indexes(metrics: Dict) -> str:
    """A line on the ANN gap and the popularity bands, when reported."""
    lines = []
    if "test_scann" in metrics and "test_exact" in metrics:
        e, a = metrics["test_exact"], metrics["test_scann"]
        overlap = next(v for k, v in metrics.items() if k.startswith("ann_overlap@"))
        lines.append(f"\nScaNN vs exact: Recall@10 {a['recall@10']:.4f} vs {e['recall@10']:.4f}, "
                     f"NDCG@10 {a['ndcg@10']:.4f} vs {e['ndcg@10']:.4f}; ScaNN returns "
                     f"{100 * overlap:.1f}% of the exact top-100.")
    if "kl_to_truth" in metrics:
        lines.append(f"KL(true next-item law || model's softmax) on the test users: "
                     f"{metrics['kl_to_truth']:.4f} nats.")
    rankers = {"model": metrics.get("by_popularity", {})}
    rankers.update({name: values.get("by_popularity", {})
                    for name, values in metrics.get("baselines", {}).items()})
    rankers = {name: bands for name, bands in rankers.items() if bands}
    if rankers:
        lines.append("Recall@10 by target popularity (thirds of the catalog by training count): "
                     + "; ".join(f"{name} head {b['head_recall@10']:.4f}, torso "
                                 f"{b['torso_recall@10']:.4f}, tail {b['tail_recall@10']:.4f}"
                                 for name, b in rankers.items()) + ".")
    return "\n".join(lines)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir is required.")
    try:
        config = config_from_flags()
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    tf.get_logger().setLevel("ERROR")
    logging.set_verbosity(logging.WARNING)  # TF's checkpoint saver logs at INFO every backup.
    strategy = make_strategy(FLAGS.strategy)
    metrics = run(config, FLAGS.output_dir, strategy=strategy)
    if "config" not in metrics:  # A non-chief worker: the chief evaluates and writes.
        print(f"\nWorker done: {metrics['steps']} steps on {metrics['num_replicas']} replicas "
              f"({metrics['strategy']}); estimator state {metrics['estimator_state_digest']}.")
        return
    c = metrics["config"]
    index = "exact search" if c["index"] != "scann" else "ScaNN"
    print(f"\n{c['model']} on {c['dataset']} ({c['split']}), {c['loss']} / {c['negatives']} / "
          f"{c['correction']}: {metrics['epochs_run']} epochs, {metrics['steps']} steps, "
          f"{metrics['train_seconds']:.0f} s; test over {metrics['num_test_queries']} users, "
          f"{index}, history filtered:\n")
    print(format_metrics(metrics))
    print(describe_indexes(metrics))
    print(f"\nWrote {os.path.join(FLAGS.output_dir, 'metrics.json')}")


if __name__ == "__main__":
    define_flags()
    app.run(main)
