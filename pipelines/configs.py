"""Training configurations as data: four groups (data, model, loss, training), and presets.

`python -m pipelines.train --preset NAME [--field=value ...]` starts from a
preset and overrides fields one by one: every field of every group is a flag
of its own name (names are unique across the groups). `config.json` holds the
groups nested; `Config.from_dict` also reads the flat files of earlier runs.
"""

import dataclasses
from typing import Any, Dict, List, Mapping, Tuple

from logq_core import samplers
from pipelines.data.splits import TEMPORAL_TARGETS
from tfrs_logq import losses
from tfrs_logq import retrieval
from tfrs_logq.models import objective
from tfrs_logq.models import sasrec

DATASETS = ("synthetic", "ml-1m", "ml-1m-ratings", "ml-1m-tfds", "steam", "steam-reviews",
            "events", "web_synthetic")
# Datasets read as event logs (pipelines.data.events): vocabularies saved with the run, raw
# ids served by the export's default signature.
EVENT_LOGS = ("events", "web_synthetic")
SPLITS = ("loo", "temporal", "next_day")
ORDERS = ("shuffled", "time")
MODELS = ("sasrec", "two_tower")
FREQUENCIES = ("static", "count_min", "hashed")
INDEXES = ("exact", "scann", "both")
TABLE_OPTIMIZERS = ("adam", "adagrad")
STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")

# Fields that must take one of a fixed set of values; each set is defined once, where the
# value is used.
CHOICES = {"dataset": DATASETS, "split": SPLITS, "model": MODELS, "loss": objective.LOSSES,
           "negatives": samplers.KINDS, "correction": losses.CORRECTIONS,
           "frequency": FREQUENCIES, "mixture": samplers.MIXTURES, "index": INDEXES,
           "temporal_targets": TEMPORAL_TARGETS, "architecture": sasrec.ARCHITECTURES,
           "log_q": samplers.IN_BATCH_LOG_Q, "binary_reduction": objective.BINARY_REDUCTIONS,
           "gbce_alpha": objective.GBCE_ALPHAS, "table_optimizer": TABLE_OPTIMIZERS,
           "order": ORDERS}

# Fields renamed since earlier runs wrote their config.json (and old flag names).
RENAMED = {"per_row_negatives": "per_row", "global_negatives": "global_batch",
           "in_batch_log_q": "log_q"}


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Which interactions, and how they are split (`experiment.load_data`, `make_split`)."""
    dataset: str = "synthetic"
    # The ml-1m / ml-1m-ratings / steam file (TFDS's data directory for ml-1m-tfds); empty:
    # the file under $TFRS_LOGQ_DATA.
    data_path: str = ""
    split: str = "loo"
    test_fraction: float = 0.1   # Temporal split: test share, and the validation share.
    # Temporal split: which items of a window are targets (pipelines.data.splits.temporal).
    temporal_targets: str = "first"
    validation_queries: int = 4096  # At most this many (seeded sample) per validation.
    # Leave-one-out: items left out of every training sequence between it and the held-out
    # targets (gSASRec's preprocess_ml1m.py trains on all but the last 2 items: 1).
    loo_train_gap: int = 0
    synthetic_users: int = 3000
    synthetic_items: int = 3000
    synthetic_temperature: float = 0.1  # Smaller: more personal, less popularity-driven.
    # --dataset=events: --data_path is a CSV / TSV / Parquet file, directory or glob; its
    # columns (weight: optional, "" for none). Ids seen fewer times than the minimum counts
    # in training are out of vocabulary (their events dropped and counted). The vocabularies'
    # training memory (embedding rows and optimizer slots at --dim) must fit
    # max_vocabulary_mb, checked while counting, before training.
    user_column: str = "user_id"
    item_column: str = "item_id"
    time_column: str = "timestamp"
    weight_column: str = ""
    min_item_count: int = 1
    min_user_count: int = 1
    max_vocabulary_mb: float = 8192.0
    # --split=next_day: test on day test_day (-1: the log's last), validate on the day before,
    # train on the days before that; a day is day_seconds of the log's time.
    test_day: int = -1
    day_seconds: int = 86_400
    # --dataset=web_synthetic (pipelines.data.web_synthetic): synthetic_items items,
    # synthetic_users users, this many days and events per user; written once to --data_path
    # (default: a directory under $TFRS_LOGQ_CACHE, else ~/.cache/tfrs_logq).
    synthetic_days: int = 14
    synthetic_events_per_user: float = 20.0


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The query and item towers (`experiment.build_model`)."""
    model: str = "sasrec"
    max_length: int = 200        # SASRec sequence length.
    history_length: int = 50     # Two-tower history features.
    dim: int = 128
    num_blocks: int = 2
    num_heads: int = 1
    dropout: float = 0.5
    tie_embeddings: bool = True  # SASRec scores with its input item table; False: its own.
    # The sequential model's layout: ours, or the released code's (tfrs_logq.models.sasrec).
    architecture: str = "sasrec"


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """The objective, its sampler and log Q: the arguments of `tfrs_logq.models.make_objective`
    (`negatives.make_sampler`'s settings among them) by their own names, and where log Q
    comes from (`frequency`, `pseudo_count`: `experiment.make_frequency`)."""
    loss: str = "sampled_softmax"
    correction: str = "improved"
    negatives: str = "in_batch"
    num_negatives: int = 256     # Mixed: half uniform, half in-batch.
    frequency: str = "static"    # Where log Q comes from: training counts or an estimator.
    pseudo_count: float = 1.0    # Static counts: added to every item's training count.
    mixture: str = "exact"
    # The in-batch pool keeps each distinct target once (the released code's pool).
    deduplicate: bool = False
    log_q: str = "horvitz_thompson"  # With deduplicate: or "unigram" (released).
    per_row: bool = False        # Uniform draws per example (released), not per step.
    # Under tf.distribute, in-batch negatives come from the global batch (all replicas).
    global_batch: bool = True
    binary_reduction: str = "sum"    # bce / gbce: sum or mean (released) of 1 + n terms.
    binary_accidental_hits: bool = True  # bce / gbce mask uniform draws equal to the positive.
    gbce_t: float = 0.75
    gbce_alpha: str = "paper"    # n / (|D| - 1); "released": n / (|D| - 2), gSASRec's code.

    def objective_settings(self) -> Dict[str, Any]:
        """The arguments of `make_objective` (all fields but where log Q comes from)."""
        settings = dataclasses.asdict(self)
        del settings["frequency"], settings["pseudo_count"]
        return settings


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """Optimisation, stopping, resumption and the test evaluation (`pipelines.train`)."""
    batch_size: int = 128
    learning_rate: float = 0.001
    adam_epsilon: float = 1e-7   # Keras's default; torch's (the released code) is 1e-8.
    # The embedding tables' optimizer: "adam" (every variable; the paper's, whose step
    # updates every row's moments, so it grows with the catalog) or "adagrad" (TFRS's
    # CompositeOptimizer: Adagrad on the tables updates only the rows a step touches, Adam
    # on the rest), at `table_learning_rate` (0: `learning_rate`).
    table_optimizer: str = "adam"
    table_learning_rate: float = 0.0
    # Compile SASRec's training step with XLA (its shapes are static, so it compiles once);
    # the two-tower step is not compiled. On by default in the SASRec presets, where it won.
    jit_compile: bool = False
    epochs: int = 200            # At most; early stopping on validation NDCG@10.
    steps_per_epoch: int = 0     # 0: one pass over the training examples.
    # Each pass over the training examples ends with its partial batch (the released code's
    # DataLoader), rather than batches running on into the next pass.
    partial_batches: bool = False
    patience: int = 20           # Epochs without a better validation NDCG@10.
    backup_every: int = 50       # Steps between BackupAndRestore backups.
    seed: int = 0
    # Test evaluation: exact search, a ScaNN index, or both (then the ANN gap is reported).
    index: str = "both"
    # A ScaNN request over fewer items than this searches exactly, in the test evaluation and
    # the export (tfrs_logq.retrieval.SCANN_MIN_ITEMS); 0: always build the index.
    scann_min_items: int = retrieval.SCANN_MIN_ITEMS
    # The cutoffs of the test report, comma-separated.
    ks: str = "1,10,20,100"
    # The test index: the index_size items with the most training events plus every positive
    # of the test queries (0: the whole catalog).
    index_size: int = 0
    # The test evaluation on at most this many test queries (a seeded sample; 0: all).
    test_queries: int = 0
    # Training order: "shuffled" (the whole training set), or "time" (two-tower on a timed
    # split: examples in time order, shuffled only within windows of shuffle_window).
    order: str = "shuffled"
    shuffle_window: int = 10_000
    # With a streaming estimator and --order=time: every drift_every steps (0: never), log
    # the estimator's error against the Q of the day being trained (drift.json, TensorBoard).
    drift_every: int = 0
    # Diagnostic: every N epochs (0: never) log test NDCG@20 / Recall@20 of the current
    # weights, on at most callbacks.TEST_CURVE_QUERIES test queries, to TensorBoard (train/,
    # epoch_test_ndcg@20). Never used to pick the checkpoint or to stop; it lets same-seed
    # runs be compared on the test split over many epochs rather than at one
    # validation-picked epoch (the paper campaign reads it).
    test_curve_every: int = 0


GROUPS = {"data": DataConfig, "model": ModelConfig, "loss": LossConfig,
          "training": TrainingConfig}
# Each field's group: field names are unique across the groups (they are the flags).
GROUP_OF = {field.name: group for group, cls in GROUPS.items()
            for field in dataclasses.fields(cls)}
FIELDS = {field.name: field for cls in GROUPS.values() for field in dataclasses.fields(cls)}


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything a training run depends on (written to OUTPUT/config.json)."""
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    loss: LossConfig = LossConfig()
    training: TrainingConfig = TrainingConfig()

    def replace(self, **changes) -> "Config":
        """A copy with fields changed by their (flat) names, e.g. replace(dim=64, seed=1)."""
        by_group: Dict[str, Dict[str, Any]] = {}
        for name, value in changes.items():
            name = RENAMED.get(name, name)
            if name not in GROUP_OF:
                raise ValueError(f"Config has no field {name!r}; its fields are "
                                 f"{', '.join(sorted(GROUP_OF))}.")
            by_group.setdefault(GROUP_OF[name], {})[name] = value
        return dataclasses.replace(self, **{
            group: dataclasses.replace(getattr(self, group), **fields)
            for group, fields in by_group.items()})

    def flat(self) -> Dict[str, Any]:
        """{field: value} over every group."""
        return {name: getattr(getattr(self, group), name) for name, group in GROUP_OF.items()}

    def as_dict(self) -> Dict[str, Dict[str, Any]]:
        """The nested form config.json holds."""
        return dataclasses.asdict(self)

    @staticmethod
    def stored_fields(values: Mapping[str, Any]) -> List[str]:
        """The (current) names of the fields a config.json holds: an earlier run's file
        lacks the fields added since."""
        return [RENAMED.get(name, name) for name in _stored(values)]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "Config":
        """The config of a config.json: nested by group, or flat (earlier runs, with the
        fields since renamed); fields it lacks (added since) take their defaults."""
        return cls().replace(**_stored(values))


def _stored(values: Mapping[str, Any]) -> Dict[str, Any]:
    """{field: value} of a config.json, nested by group or flat, names as written."""
    flat: Dict[str, Any] = {}
    for key, value in values.items():
        if key in GROUPS and isinstance(value, Mapping):
            flat.update(value)
        else:
            flat[key] = value
    return flat


def validate(config: Config) -> Config:
    """Raises ValueError naming the field, the value and the valid values."""
    values = config.flat()
    for field, choices in CHOICES.items():
        value = values[field]
        if value not in choices:
            raise ValueError(f"--{field} must be one of {', '.join(choices)}; received "
                             f"--{field}={value!r}.")
    for field in ("synthetic_users", "synthetic_items", "max_length", "history_length", "dim",
                  "num_blocks", "num_heads", "num_negatives", "batch_size", "epochs",
                  "patience", "backup_every", "validation_queries", "min_item_count",
                  "min_user_count", "day_seconds", "synthetic_days", "shuffle_window"):
        if values[field] < 1:
            raise ValueError(f"--{field} must be a positive integer; received "
                             f"--{field}={values[field]!r}.")
    for field, zero in (("test_curve_every", "never"), ("steps_per_epoch", "one pass over the "
                                                          "data"), ("loo_train_gap", "none"),
                        ("scann_min_items", "always the index"),
                        ("index_size", "the whole catalog"), ("test_queries", "all queries"),
                        ("drift_every", "never")):
        if values[field] < 0:
            raise ValueError(f"--{field} must be >= 0 (0: {zero}); received "
                             f"--{field}={values[field]}.")
    for field, low, high in (("dropout", 0.0, 1.0), ("test_fraction", 0.0, 0.5),
                             ("gbce_t", 0.0, 1.0)):
        value = values[field]
        if not low <= value <= high or (field == "test_fraction" and value == 0.0):
            raise ValueError(f"--{field} must be in [{low}, {high}]; received --{field}={value}.")
    for field in ("synthetic_temperature", "learning_rate", "adam_epsilon", "max_vocabulary_mb",
                  "synthetic_events_per_user"):
        if not values[field] > 0:
            raise ValueError(f"--{field} must be positive; received --{field}={values[field]}.")
    if config.training.table_learning_rate < 0:
        raise ValueError("--table_learning_rate must be >= 0 (0: --learning_rate); received "
                         f"--table_learning_rate={config.training.table_learning_rate}.")
    if config.loss.pseudo_count < 0:
        raise ValueError("--pseudo_count must be >= 0; received "
                         f"--pseudo_count={config.loss.pseudo_count}.")
    if config.loss.loss == "sampled_softmax":
        # The samplers' own rules, before any data is loaded (the catalog size is not known
        # yet): the flags are the sampler's arguments by name.
        loss = config.loss
        try:
            samplers.sampler_arguments(loss.negatives, num_items=1,
                                       num_negatives=loss.num_negatives,
                                       deduplicate=loss.deduplicate, mixture=loss.mixture)
        except ValueError as error:
            raise ValueError(f"--negatives={loss.negatives} --num_negatives="
                             f"{loss.num_negatives} --deduplicate={loss.deduplicate} "
                             f"--mixture={loss.mixture} do not make a sampler: {error}") from None
    ks(config.training)  # Raises on a bad --ks.
    if config.data.test_day < -1:
        raise ValueError(f"--test_day must be a day number >= 0, or -1 for the log's last "
                         f"day; received --test_day={config.data.test_day}.")
    if config.data.dataset == "events" and not config.data.data_path:
        raise ValueError("--dataset=events needs --data_path: the event log (a CSV, TSV or "
                         "Parquet file, a directory of them, or a glob).")
    if config.data.dataset == "events":
        named = [getattr(config.data, f"{c}_column") for c in ("user", "item", "time")]
        if not all(named) or len(set(named)) < 3:
            raise ValueError("--user_column, --item_column and --time_column must name three "
                             f"different columns; received {', '.join(map(repr, named))}.")
    if config.data.weight_column and (config.model.model != "two_tower"
                                      or config.data.split != "next_day"):
        raise ValueError("--weight_column weights the two-tower's training events on "
                         "--split=next_day; received --model="
                         f"{config.model.model} --split={config.data.split}.")
    if config.training.order == "time" and (config.model.model != "two_tower"
                                            or config.data.split != "next_day"):
        raise ValueError("--order=time trains the two-tower model on a timed split: needs "
                         "--model=two_tower --split=next_day; received "
                         f"--model={config.model.model} --split={config.data.split}.")
    if config.data.split == "next_day" and config.data.dataset not in EVENT_LOGS:
        raise ValueError("--split=next_day needs a timed event log (--dataset=events or "
                         f"web_synthetic); received --dataset={config.data.dataset}.")
    if config.model.dim % config.model.num_heads:
        raise ValueError("--dim must be a multiple of --num_heads; received "
                         f"--dim={config.model.dim} --num_heads={config.model.num_heads}.")
    return config


def ks(training: TrainingConfig) -> Tuple[int, ...]:
    """The cutoffs of --ks, sorted."""
    try:
        values = sorted({int(k) for k in training.ks.split(",") if k.strip()})
    except ValueError:
        values = []
    if not values or values[0] < 1:
        raise ValueError("--ks must be comma-separated positive integers such as 10,100,1000; "
                         f"received --ks={training.ks!r}.")
    return tuple(values)


# The paper's settings (Khrylchenko et al. 2025, after gSASRec): SASRec, sequence 200,
# dim 128, 2 blocks, 1 head, dropout 0.5, batch 128, 256 negatives (128 + 128 mixed), Adam,
# early stopping on validation NDCG@10.
PAPER = Config().replace(dataset="ml-1m", split="loo", model="sasrec", max_length=200, dim=128,
                         num_blocks=2, num_heads=1, dropout=0.5, batch_size=128, num_negatives=256,
                         learning_rate=0.001, epochs=200, patience=20, jit_compile=True)

# The paper's released protocol for ML-1M (NonameUntitled/logq configs/ml1m_other.py on
# gSASRec-pytorch; docs/protocol.md lists every difference with file and line): gSASRec's
# model and split, the released negatives (per-position uniform draws, the deduplicated
# in-batch pool corrected by unigram q, mixed = 128 + 128), mean bce / gbce over 1 + n
# terms, torch's Adam epsilon, epochs of one pass (48 batches of 128, the last partial),
# validation NDCG@10 on 512 users after every epoch, patience 200 epochs of at most 10,000.
# The reproduce runner maps its rows onto the released scripts (standard = logq_old =
# "standard_negatives"; the "in-batch improved" script draws mixed negatives).
OFFICIAL = PAPER.replace(architecture="gsasrec", tie_embeddings=False, loo_train_gap=1,
                         deduplicate=True, log_q="unigram", per_row=True,
                         mixture="paper", binary_reduction="mean", binary_accidental_hits=False,
                         gbce_alpha="released", pseudo_count=0.0,
                         adam_epsilon=1e-8, partial_batches=True, steps_per_epoch=0,
                         epochs=10000, patience=200, validation_queries=512, index="exact",
                         test_curve_every=10)  # A diagnostic of ours; it changes no training.

PRESETS: Dict[str, Config] = {
    "paper": PAPER,
    "official": OFFICIAL,
    # The same protocol at sequence 50 and dim 64, for 2 CPU cores.
    "official_cpu": OFFICIAL.replace(max_length=50, dim=64),
    # ML-1M on 2 CPU cores: shorter sequences, a smaller model, a larger step, at most 120
    # epochs. Leave-one-out epochs take ~4 s with sampled negatives; runs averaged 6-9 minutes
    # of training, full softmax 19 and gBCE 25 (docs/results/ml1m_loo_cpu.md).
    "cpu": PAPER.replace(max_length=50, dim=64, learning_rate=0.002, epochs=120, patience=20),
    # The README's main job: synthetic catalog, improved correction, mixed negatives; the test
    # evaluation and the export build a real ScaNN index over its 3,000 items (the ANN gap is
    # reported) rather than searching exactly as catalogs under 10,000 items do by default.
    "synthetic": Config().replace(dataset="synthetic", split="loo", model="sasrec", max_length=50,
                                  dim=64, num_blocks=2, num_heads=1, dropout=0.2, batch_size=128,
                                  negatives="mixed", correction="improved", num_negatives=256,
                                  learning_rate=0.002, epochs=20, steps_per_epoch=100, patience=4,
                                  jit_compile=True, scann_min_items=0),
    # The synthetic study of the paper campaign (paper/): the two-tower query holds the user
    # id, as the generative law P(d|u) = softmax(<x_u, y_d>/T - s log rank d) does, so the
    # distance to the truth measures the loss rather than how well a sequence encodes x_u.
    # An epoch is ~1/3 of the 180k training interactions; ~1 minute per run on 2 cores.
    "synthetic_two_tower": Config().replace(dataset="synthetic", split="loo", model="two_tower",
                                            dim=64, batch_size=128, negatives="mixed",
                                            correction="improved", num_negatives=256,
                                            learning_rate=0.005, epochs=30, steps_per_epoch=500,
                                            patience=5),
    # The paper's industrial protocol on a web-scale synthetic log (1M items, 1M users, 20M
    # events over 14 days, string ids): the two-tower model trained once over the days in
    # time order (shuffled within windows), mixed negatives corrected by a count-min sketch
    # learnt online, Adagrad on the tables; tested on the next day over an index of the top
    # 200,000 training items plus the day's positives, Recall@10/100/1000 on 20,000 of the
    # day's users by exact search and ScaNN (the gap), with popularity and the oracle. The
    # learning rates won a sweep on the 100k-item log (docs/speed.md): Adagrad 0.05 on the
    # tables and Adam 0.001 reached a tenth of the oracle's Recall@10, 3.0 and 0.02 two thirds.
    "industrial": Config().replace(
        dataset="web_synthetic", split="next_day", model="two_tower", synthetic_items=1_000_000,
        synthetic_users=1_000_000, synthetic_days=14, synthetic_events_per_user=20.0,
        history_length=20, dim=64, batch_size=1024, negatives="mixed", num_negatives=1024,
        correction="improved", frequency="count_min", table_optimizer="adagrad",
        learning_rate=0.02, table_learning_rate=3.0, epochs=1, steps_per_epoch=0,
        patience=1, order="time", shuffle_window=100_000, drift_every=500,
        validation_queries=2000, backup_every=500, ks="10,100,1000", index_size=200_000,
        test_queries=20_000, scann_min_items=0, index="both"),
    # The same at a size for tests and CI: seconds.
    "industrial_smoke": Config().replace(
        dataset="web_synthetic", split="next_day", model="two_tower", synthetic_items=5000,
        synthetic_users=2000, synthetic_days=6, synthetic_events_per_user=12.0,
        history_length=10, dim=16, batch_size=128, negatives="mixed", num_negatives=64,
        correction="improved", frequency="count_min", table_optimizer="adagrad",
        learning_rate=0.005, table_learning_rate=0.1, epochs=1, steps_per_epoch=0, patience=1,
        order="time", shuffle_window=1000, drift_every=40, validation_queries=500,
        backup_every=50, ks="10,100,1000", index_size=1000, test_queries=500,
        scann_min_items=0, index="both"),
    # Tests and quick checks: seconds.
    "smoke": Config().replace(dataset="synthetic", synthetic_users=300, synthetic_items=400,
                              max_length=20, dim=16, num_blocks=1, dropout=0.1, batch_size=32,
                              num_negatives=32, negatives="mixed", correction="improved",
                              learning_rate=0.005, epochs=2, steps_per_epoch=25, patience=2,
                              backup_every=5),
}
