"""Training configurations as data: four groups (data, model, loss, training), and presets.

`python -m pipelines.train --preset NAME [--field=value ...]` starts from a
preset and overrides fields one by one: every field of every group is a flag
of its own name (names are unique across the groups). `config.json` holds the
groups nested; `Config.from_dict` also reads the flat files of earlier runs.
"""

import dataclasses
import math
import numbers
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from logq_core import formulas
from logq_core import options
from logq_core import samplers
from pipelines.data import events as events_lib
from pipelines.data import public_logs
from pipelines.data.splits import TEMPORAL_TARGETS

DATASETS = (
    "synthetic",
    "ml-1m",
    "ml-1m-ratings",
    "ml-1m-tfds",
    "steam",
    "steam-reviews",
    "events",
    "web_synthetic",
    "yambda",
    "ml-32m",
)
# Datasets read as event logs (pipelines.data.events): vocabularies saved with the run, raw
# ids served by the export's default signature. yambda and ml-32m: public logs by name
# (pipelines.data.public_logs).
EVENT_LOGS = ("events", "web_synthetic", "yambda", "ml-32m")
# Where a dataset reads otherwise than the fields' defaults, for the fields a run does not
# set (the preset's own default, a --config_file or a flag sets them): MovieLens-32M by week.
DATASET_DEFAULTS: Dict[str, Dict[str, Any]] = {"ml-32m": {"day_seconds": 604_800}}
SPLITS = ("loo", "temporal", "next_day")
ORDERS = ("shuffled", "time")
MODELS = ("sasrec", "two_tower")
FREQUENCIES = ("static", "count_min", "hashed")
# --index of pipelines.train, evaluate and export: exact search, a ScaNN index, or both.
INDEXES = ("exact", "scann", "both")
# Earlier spellings still accepted (pipelines.export named exact search brute_force, as the
# SavedModel's directory still is: tfrs_logq.export.INDEXES).
INDEX_ALIASES = {"brute_force": "exact"}
TABLE_OPTIMIZERS = ("adam", "adagrad")
STRATEGIES = ("default", "mirrored", "multi_worker", "parameter_server", "tpu")
# The job that trains a run: TensorFlow's (pipelines.train) or Keras 3's (pipelines.keras_train).
FRAMEWORKS = ("tf", "keras")
# Fields a run may change when it resumes: how it runs, not what it trains (a killed run
# resumed with more steps a call of the compiled step trains the same).
RESUMABLE = ("steps_per_execution",)
# --dtype_policy: Keras's policies the Keras job builds SASRec under.
DTYPE_POLICIES = ("float32", "mixed_bfloat16")
# How --strategy=parameter_server shards the tables (pipelines.distribute.variable_partitioner).
PARTITIONERS = ("min_size", "fixed_shards")

# Fields that must take one of a fixed set of values; each set is defined once, where the
# value is used.
CHOICES = {
    "dataset": DATASETS,
    "split": SPLITS,
    "model": MODELS,
    "loss": options.LOSSES,
    "negatives": samplers.KINDS,
    "correction": formulas.CORRECTIONS,
    "frequency": FREQUENCIES,
    "mixture": samplers.MIXTURES,
    "index": INDEXES,
    "temporal_targets": TEMPORAL_TARGETS,
    "architecture": options.ARCHITECTURES,
    "log_q": samplers.IN_BATCH_LOG_Q,
    "binary_reduction": options.BINARY_REDUCTIONS,
    "gbce_alpha": options.GBCE_ALPHAS,
    "table_optimizer": TABLE_OPTIMIZERS,
    "order": ORDERS,
    "time_unit": events_lib.TIME_UNITS,
    "framework": FRAMEWORKS,
    "dtype_policy": DTYPE_POLICIES,
    "yambda_events": public_logs.YAMBDA_EVENTS,
    "yambda_organic": public_logs.YAMBDA_ORGANIC,
}

# Fields renamed since earlier runs wrote their config.json (and old flag names).
RENAMED = {
    "per_row_negatives": "per_row",
    "global_negatives": "global_batch",
    "in_batch_log_q": "log_q",
}


def _field(default: Any, help_text: str) -> Any:
    """A config field whose flag's help is `help_text` (one line: what it does, its unit,
    what a special value means); `flag_help` adds the group and the choices."""
    return dataclasses.field(default=default, metadata={"help": help_text})


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Which interactions, and how they are split (`experiment.load_data`, `make_split`)."""

    dataset: str = _field(
        "synthetic",
        "Which interactions: the embedded synthetic catalog, MovieLens-1M "
        "(SASRec's file, GroupLens ratings.dat, tensorflow-datasets), Steam (SASRec's file, "
        "the reviews dump), your event log, the embedded web-scale log, or a public log "
        "by name (Yambda's flat files, MovieLens-32M's ratings.csv, read by week).",
    )
    data_path: str = _field(
        "",
        "The data file (ml-1m, ml-1m-ratings, steam, steam-reviews, ml-32m), the event "
        "log's file, directory or glob (events), a size of Yambda's flat/ (yambda), "
        "TFDS's directory (ml-1m-tfds) or web_synthetic's log; empty: the file under "
        "$TFRS_LOGQ_DATA (MovieLens-1M), the cache (web_synthetic).",
    )
    split: str = _field(
        "loo",
        "How the interactions are split: loo (each user's last item is the test "
        "target), temporal (the last --test_fraction of all interactions in time), next_day "
        "(an event log's --test_day).",
    )
    test_fraction: float = _field(
        0.1,
        "--split=temporal: the share of all interactions (the latest) in the test "
        "window, and the share before it in the validation window; 0 < f < 0.5.",
    )
    temporal_targets: str = _field(
        "first",
        "--split=temporal: which items of a window are targets: each user's first, "
        "all distinct ones, the last, or every one in turn (successive).",
    )
    validation_queries: int = _field(
        4096, "Validation queries per evaluation, at most (a seeded sample)."
    )
    # gSASRec's preprocess_ml1m.py trains on all but the last 2 items: 1.
    loo_train_gap: int = _field(
        0,
        "--split=loo: items left out of every training sequence before its held-out "
        "targets (gSASRec's preprocessing: 1); 0: none.",
    )
    synthetic_users: int = _field(3000, "Synthetic datasets: the number of users.")
    synthetic_items: int = _field(
        3000,
        "Synthetic datasets: the number of items (--dataset=synthetic: at least 100, "
        "the longest history).",
    )
    synthetic_temperature: float = _field(
        0.1,
        "--dataset=synthetic: divides the user-item affinity (> 0); smaller is more "
        "personal, less popularity-driven.",
    )
    user_column: str = _field("user_id", "--dataset=events: the column of user ids.")
    item_column: str = _field("item_id", "--dataset=events: the column of item ids.")
    time_column: str = _field(
        "timestamp",
        "--dataset=events: the column of times (numbers, timestamps or ISO-8601 strings; Z "
        "and offsets read to UTC).",
    )
    keep_id_whitespace: bool = _field(
        False,
        "--dataset=events: keep spaces around ids ('u_1 ' and 'u_1' two ids); by default "
        "they are stripped, and counted.",
    )
    time_unit: str = _field(
        "auto",
        "--dataset=events: the unit of numeric times: s, ms, us, ns, or auto (each number's "
        "from its size; times before 1990, after next year or over 20 years refused).",
    )
    weight_column: str = _field(
        "",
        "--dataset=events: the column of event weights (numbers >= 0; two-tower on "
        "--split=next_day); empty: no weights.",
    )
    min_item_count: int = _field(
        1,
        "--dataset=events: items seen fewer times in training are out of vocabulary "
        "(their events dropped and counted).",
    )
    min_user_count: int = _field(
        1,
        "--dataset=events: users seen fewer times in training are out of vocabulary "
        "(their events dropped and counted).",
    )
    max_vocabulary_mb: float = _field(
        8192.0,
        "--dataset=events: the most training memory (MB) the vocabularies may take "
        "(embedding rows and optimizer slots at --dim), checked while counting.",
    )
    item_catalog: str = _field(
        "",
        "Event logs: a file of every servable item's id (.txt: one a line; CSV, TSV, Parquet: "
        "the --item_column); the item table, index and exports then cover items without a "
        "training event too. web_synthetic: 'log', its law's catalog. Empty: the logged items.",
    )
    test_day: int = _field(
        -1,
        "--split=next_day: the test day, counted from the log's first day (0); the day "
        "before validates, the days before it train; -1: the log's last day.",
    )
    day_seconds: int = _field(
        86_400,
        "--split=next_day: the length of a day, in seconds (every log's times are read "
        "to seconds).",
    )
    synthetic_days: int = _field(
        14,
        "--dataset=web_synthetic: days of events (at least 3: training, validation and test days).",
    )
    synthetic_events_per_user: float = _field(
        20.0, "--dataset=web_synthetic: events per user over the log (> 0)."
    )
    synthetic_zipf: float = _field(
        1.0,
        "--dataset=web_synthetic: the Zipf exponent of item popularity within a cluster "
        "(> 0; larger is more skewed towards the head); 1.0: the logs written before the flag.",
    )
    synthetic_log_seed: int = _field(
        0,
        "--dataset=web_synthetic: the seed of the log (its law, events and test day), apart "
        "from --seed (the weights, shuffles and negatives): a fresh log per value.",
    )
    yambda_events: str = _field(
        "listens",
        "--dataset=yambda: which events are interactions: listens (the authors' Listen+: "
        "played_ratio_pct >= 50), likes, or both.",
    )
    yambda_organic: str = _field(
        "all",
        "--dataset=yambda: which events by is_organic: all, organic (1: the user's own "
        "choice) or recommended (0: the feed and personal playlists).",
    )


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The query and item towers (`experiment.build_model`)."""

    model: str = _field(
        "sasrec",
        "The model: sasrec (a transformer over the user's history) or two_tower "
        "(user id and history features).",
    )
    max_length: int = _field(
        200, "--model=sasrec: the sequence length, in items (a history's last max_length)."
    )
    history_length: int = _field(50, "--model=two_tower: the history feature's length, in items.")
    dim: int = _field(128, "The embedding dimension of items and queries.")
    num_blocks: int = _field(2, "--model=sasrec: transformer blocks.")
    num_heads: int = _field(1, "--model=sasrec: attention heads per block (they divide --dim).")
    dropout: float = _field(0.5, "--model=sasrec: the dropout rate, 0 <= rate < 1.")
    tie_embeddings: bool = _field(
        True,
        "--model=sasrec: score with the input item table; --notie_embeddings: with an "
        "output table of its own.",
    )
    share_item_table: bool = _field(
        False,
        "--model=two_tower: the history's items read the candidate item table (one item table: "
        "half the item state at large catalogs).",
    )
    attention_dropout: float = _field(
        -1.0,
        "--model=sasrec: the dropout rate of the attention weights, 0 <= rate < 1; -1: "
        "--dropout. 0: Keras 3 fuses the attention (ops.dot_product_attention).",
    )
    architecture: str = _field(
        "sasrec",
        "--model=sasrec: the layout, ours (sasrec) or the released gSASRec code's "
        "(gsasrec; tfrs_logq.models.sasrec).",
    )


@dataclasses.dataclass(frozen=True)
class LossConfig:
    """The objective, its sampler and log Q: the arguments of `tfrs_logq.models.make_objective`
    (`negatives.make_sampler`'s settings among them) by their own names, and where log Q
    comes from (`frequency`, `pseudo_count`: `experiment.make_frequency`)."""

    loss: str = _field(
        "sampled_softmax",
        "The objective: sampled softmax (--negatives, --correction), the "
        "full softmax, or (g)BCE over sampled negatives.",
    )
    correction: str = _field(
        "improved",
        "--loss=sampled_softmax: the log Q correction: none, standard (every "
        "logit), standard_negatives (the negatives' only) or improved (the paper's).",
    )
    negatives: str = _field(
        "in_batch",
        "Where negatives come from: the batch's other targets (in_batch), draws "
        "over the catalog (uniform), or half of each (mixed).",
    )
    num_negatives: int = _field(
        256, "Negatives drawn per step (--negatives=mixed: half uniform, half in-batch)."
    )
    frequency: str = _field(
        "static",
        "Where log Q comes from: the training counts (static) or an estimator "
        "learnt while training (count_min, hashed).",
    )
    pseudo_count: float = _field(
        1.0, "--frequency=static: added to every item's training count (>= 0)."
    )
    mixture: str = _field(
        "exact",
        "--negatives=mixed: log Q of the exact mixture proposal, or the unigram q "
        "for every negative (paper, the released code's).",
    )
    deduplicate: bool = _field(
        False, "The in-batch pool keeps each distinct target once (the released code's pool)."
    )
    log_q: str = _field(
        "horvitz_thompson",
        "--deduplicate: the pool's log Q, unbiased (horvitz_thompson) or "
        "the unigram q (the released code's).",
    )
    per_row: bool = _field(
        False, "Uniform negatives drawn per example (the released code's), not once per step."
    )
    global_batch: bool = _field(
        True,
        "Under tf.distribute: in-batch negatives from the global batch (all replicas); "
        "--noglobal_batch: each replica's own.",
    )
    binary_reduction: str = _field(
        "sum",
        "--loss=bce or gbce: the sum or the mean (the released code's) of a row's 1 + n terms.",
    )
    binary_accidental_hits: bool = _field(
        True, "--loss=bce or gbce: mask uniform draws equal to the positive."
    )
    gbce_t: float = _field(0.75, "--loss=gbce: the calibration t, 0 <= t <= 1.")
    gbce_alpha: str = _field(
        "paper",
        "--loss=gbce: alpha = n / (|D| - 1) (paper) or n / (|D| - 2) (released, gSASRec's code).",
    )
    log_q_scale: float = _field(
        1.0,
        "--loss=sampled_softmax: lambda, the weight of the correction (Merlin's "
        "reg_factor): logits minus lambda log Q; 1 the correction, 0 no shift.",
    )
    temperature: float = _field(
        1.0,
        "--loss=sampled_softmax: divides every logit (> 0); with --l2_normalize, "
        "cosine scores in [-1, 1], typically 0.05-0.2.",
    )
    l2_normalize: bool = _field(
        False,
        "Cosine scores: L2-normalise the query and item embeddings in training, "
        "evaluation and serving.",
    )
    num_hard_negatives: int = _field(
        0,
        "--loss=sampled_softmax: keep each row's k negatives with the largest corrected "
        "logits (any correction); 0: every negative.",
    )
    mask_known_positives: bool = _field(
        False,
        "--loss=sampled_softmax: mask each example's other known positives among its "
        "negatives (SASRec: the sequence's other targets; two-tower: the user's other items "
        "in the batch and its history), log Q and n unchanged; off: only its own positive.",
    )

    def objective_settings(self) -> Dict[str, Any]:
        """The arguments of `make_objective` (all fields but where log Q comes from)."""
        settings = dataclasses.asdict(self)
        del settings["frequency"], settings["pseudo_count"]
        if settings["temperature"] == 1.0:  # Dividing by 1: no op at all.
            settings["temperature"] = None
        return settings


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """Optimisation, stopping, resumption and the test evaluation (`pipelines.train`)."""

    batch_size: int = _field(
        128, "Training examples per step (the global batch under tf.distribute)."
    )
    learning_rate: float = _field(0.001, "Adam's learning rate (finite, > 0).")
    adam_epsilon: float = _field(
        1e-7,
        "Adam's epsilon (finite, > 0); Keras's default 1e-7, torch's (the released code's) 1e-8.",
    )
    # "adam" is the paper's: its step updates every row's moments, so it grows with the
    # catalog; "adagrad" is TFRS's CompositeOptimizer (Adagrad on the tables, Adam on the
    # rest).
    table_optimizer: str = _field(
        "adam",
        "The embedding tables' optimizer: adam (every row, every step) or adagrad "
        "(only the rows a step touches).",
    )
    table_learning_rate: float = _field(
        0.0, "--table_optimizer=adagrad: the tables' learning rate; 0: --learning_rate."
    )
    # SASRec's shapes are static, so it compiles once; on by default in the SASRec presets.
    jit_compile: bool = _field(
        False, "Compile SASRec's training step with XLA (the two-tower step is not compiled)."
    )
    epochs: int = _field(200, "Training epochs, at most (early stopping on validation NDCG@10).")
    steps_per_epoch: int = _field(
        0, "Training steps per epoch; 0: one pass over the training examples."
    )
    partial_batches: bool = _field(
        False,
        "Each pass over the training examples ends with its partial batch (the "
        "released code's DataLoader), rather than running on into the next pass.",
    )
    patience: int = _field(20, "Epochs without a better validation NDCG@10 before training stops.")
    backup_every: int = _field(
        50, "Training steps between backups (a killed run resumes from the last one)."
    )
    seed: int = _field(
        0, "The seed of the weights, shuffles, negatives and synthetic data; 0 <= seed < 2^32."
    )
    index: str = _field(
        "both",
        "The test evaluation's search: exact, a ScaNN index, or both (the ANN gap "
        "is reported); brute_force is an old name of exact.",
    )
    scann_min_items: int = _field(
        options.SCANN_MIN_ITEMS,
        "A ScaNN search over fewer items than this is exact (the "
        "test evaluation and the export); 0: always build the index.",
    )
    ks: str = _field(
        "1,10,20,100", "The test report's cutoffs k, comma-separated positive integers."
    )
    index_size: int = _field(
        0,
        "The test index: the index_size items with the most training events plus every "
        "test positive; 0: the whole catalog.",
    )
    test_queries: int = _field(0, "Test queries evaluated, at most (a seeded sample); 0: all.")
    memory_budget_mb: int = _field(
        0,
        "Memory the run may use, MB: a run whose predicted peak (pipelines.memory.predict_mib) "
        "exceeds it stops before building its tables; 0: the machine's (or cgroup's) memory.",
    )
    order: str = _field(
        "shuffled",
        "Training order: shuffled, or time (two-tower on --split=next_day: time "
        "order, shuffled within --shuffle_window examples).",
    )
    shuffle_window: int = _field(
        10_000,
        "--order=time: the shuffle block, in examples: each block of this many consecutive "
        "examples is permuted (each pass anew), and no example leaves its block.",
    )
    drift_every: int = _field(
        0,
        "A streaming --frequency with --order=time: log its error against the Q of the "
        "day trained every this many steps (drift.json, TensorBoard); 0: never.",
    )
    # Never used to pick the checkpoint or to stop; it lets same-seed runs be compared on
    # the test split over many epochs rather than at one validation-picked epoch (the paper
    # campaign reads it).
    test_curve_every: int = _field(
        0,
        "Diagnostic: every this many epochs, log test NDCG@20 / Recall@20 of the current "
        "weights to TensorBoard (epoch_test_ndcg@20); 0: never.",
    )
    framework: str = _field(
        "tf",
        "The job: tf (TensorFlow: TFRS's models, tf.distribute, ScaNN) or keras (Keras 3 on "
        "KERAS_BACKEND, JAX by default, without TensorFlow: the next-day two-tower on an "
        "event log's day store, tested by exact search on the device).",
    )
    steps_per_execution: int = _field(
        1,
        "--framework=keras: training steps a call of the compiled step runs (more amortise "
        "the call's dispatch on an accelerator; SASRec: a divisor of the epoch's steps).",
    )
    dtype_policy: str = _field(
        "float32",
        "--framework=keras: Keras's dtype policy while SASRec is built: float32, or "
        "mixed_bfloat16 (the blocks in bfloat16; variables, scores and losses float32).",
    )


GROUPS = {"data": DataConfig, "model": ModelConfig, "loss": LossConfig, "training": TrainingConfig}
# Each field's group: field names are unique across the groups (they are the flags).
GROUP_OF = {field.name: group for group, cls in GROUPS.items() for field in dataclasses.fields(cls)}
FIELDS = {field.name: field for cls in GROUPS.values() for field in dataclasses.fields(cls)}


def flag_help(name: str) -> str:
    """The help of field `name`'s flag: its group, what it does (`_field`'s text), its
    choices, and that an unset flag keeps the preset's value."""
    choices = CHOICES.get(name)
    values = f" One of {', '.join(choices)}." if choices else ""
    return f"[{GROUP_OF[name]}] {FIELDS[name].metadata['help']}{values} Unset: the preset's."


# The --dataset=events fields that web_synthetic's log reads too (its columns and times
# are its own).
_EVERY_EVENT_LOG = ("min_item_count", "min_user_count", "max_vocabulary_mb")
# A field's help that starts "--NAME=VALUE:" (or "--NAME=A or B:") applies only there.
_APPLIES = re.compile(r"--([a-z_]+)=([a-z_0-9]+)(?: or ([a-z_0-9]+))?:")


def unused_flags(config: "Config", given: List[str]) -> List[str]:
    """The warnings for the fields of `given` (flags set on the command line) that `config`
    does not use: a field whose help says where it applies ("--split=temporal: ...") given
    with another value there (`_EVERY_EVENT_LOG`'s "--dataset=events" counts every event
    log). A given --jit_compile with the two-tower raises ValueError: a preset's is just not
    used."""
    warnings = []
    values = config.flat()
    for name in given:
        if name == "jit_compile" and values["model"] != "sasrec" and values[name]:
            raise ValueError(
                "--jit_compile compiles SASRec's training step; the two-tower's is not "
                "compiled (its tables' sparse Adagrad update has no XLA kernel); received "
                f"--model={values['model']} --jit_compile."
            )
        match = _APPLIES.match(FIELDS[name].metadata["help"]) if name in FIELDS else None
        if match is None:
            continue
        field, wanted = match.group(1), {match.group(2), match.group(3)} - {None}
        if field == "dataset" and wanted == {"events"} and name in _EVERY_EVENT_LOG:
            wanted = set(EVENT_LOGS)
        if field in values and values[field] not in wanted:
            warnings.append(
                f"warning: --{name} applies with --{field}={' or '.join(sorted(wanted))}; "
                f"this run has --{field}={values[field]}, so it is ignored."
            )
    return warnings


def indexes(index: str) -> Tuple[str, ...]:
    """The searches of an --index value: ("exact", "scann") for both, else the one
    (an old spelling, INDEX_ALIASES, by its current name)."""
    index = INDEX_ALIASES.get(index, index)
    if index not in INDEXES:
        raise ValueError(
            f"--index must be one of {', '.join(INDEXES)}; received --index={index!r}."
        )
    return ("exact", "scann") if index == "both" else (index,)


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
                raise ValueError(
                    f"Config has no field {name!r}; its fields are {', '.join(sorted(GROUP_OF))}."
                )
            by_group.setdefault(GROUP_OF[name], {})[name] = value
        return dataclasses.replace(
            self,
            **{
                group: dataclasses.replace(getattr(self, group), **fields)
                for group, fields in by_group.items()
            },
        )

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
        fields since renamed); fields it lacks (added since) take their defaults, or the
        value the run was read with (`LEGACY_DATA`)."""
        return cls().replace(**{**LEGACY_DATA, **_stored(values)})


# Data settings added since runs were saved, at the value those runs' logs were read with:
# a config.json, vocabulary.json or day-store manifest that lacks one was made before it
# (numbers were seconds; ids kept their spaces).
LEGACY_DATA = {"time_unit": "s", "keep_id_whitespace": True}


def changed_fields(stored: Mapping[str, Any], config: "Config") -> List[str]:
    """The fields in which `config` differs from a stored config (a config.json, a backup's):
    only those the stored one holds (fields added since take this config's values), never
    `RESUMABLE`'s, always the job ("framework": a file without it was TensorFlow's)."""
    previous = Config.from_dict(stored).flat()
    current = config.flat()
    compared = {*Config.stored_fields(stored), "framework"} - set(RESUMABLE)
    return sorted(name for name in compared if name in current and previous[name] != current[name])


def with_dataset_defaults(config: "Config", given) -> "Config":
    """`config` with its dataset's `DATASET_DEFAULTS` for the fields not in `given` (the
    names a config file or a flag set) and at their field's default."""
    values = config.flat()
    changes = {
        name: value
        for name, value in DATASET_DEFAULTS.get(config.data.dataset, {}).items()
        if name not in given and values[name] == FIELDS[name].default
    }
    return config.replace(**changes) if changes else config


def stored_data_defaults() -> Dict[str, Any]:
    """The data settings a saved file that lacks some counts them at: the defaults, and
    `LEGACY_DATA`'s values for the settings that changed how a log reads."""
    return {**dataclasses.asdict(DataConfig()), **LEGACY_DATA}


def _stored(values: Mapping[str, Any]) -> Dict[str, Any]:
    """{field: value} of a config.json, nested by group or flat, names as written."""
    flat: Dict[str, Any] = {}
    for key, value in values.items():
        if key in GROUPS and isinstance(value, Mapping):
            flat.update(value)
        else:
            flat[key] = value
    return flat


def read_config_file(path: str) -> Dict[str, Any]:
    """{field: value} of a JSON file for `--config_file`: some fields, flat
    ({"dim": 32, "correction": "standard"}), or a run's whole config.json (nested by group),
    which re-runs that run's config. Unknown fields raise ValueError naming the file."""
    import json  # pylint: disable=import-outside-toplevel

    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except OSError as error:
        raise ValueError(f"--config_file={path} cannot be read ({error.strerror}).") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"--config_file={path} is not JSON ({error}).") from None
    if not isinstance(values, Mapping):
        raise ValueError(
            f"--config_file={path} must hold a JSON object of config fields; "
            f"received a {type(values).__name__}."
        )
    fields = _stored(values)
    unknown = sorted(name for name in fields if RENAMED.get(name, name) not in GROUP_OF)
    if unknown:
        raise ValueError(
            f"--config_file={path} has fields that Config lacks: "
            f"{', '.join(unknown)}; its fields are {', '.join(sorted(GROUP_OF))}."
        )
    return fields


# Integer fields: their least value (and what it means when special). Every integer is also
# below 2^31 (TensorFlow's int32 sizes and counts) but for those in _INTEGER_HIGHS.
_INTEGER_LOWS = {
    **{
        name: (1, "")
        for name in (
            "synthetic_users",
            "synthetic_items",
            "max_length",
            "history_length",
            "dim",
            "num_blocks",
            "num_heads",
            "num_negatives",
            "batch_size",
            "epochs",
            "patience",
            "backup_every",
            "validation_queries",
            "min_item_count",
            "min_user_count",
            "day_seconds",
            "synthetic_days",
            "shuffle_window",
            "steps_per_execution",
        )
    },
    "test_curve_every": (0, "never"),
    "steps_per_epoch": (0, "one pass over the data"),
    "loo_train_gap": (0, "none"),
    "scann_min_items": (0, "always the index"),
    "index_size": (0, "the whole catalog"),
    "test_queries": (0, "all queries"),
    "memory_budget_mb": (0, "the machine's memory"),
    "drift_every": (0, "never"),
    "seed": (0, ""),
    "synthetic_log_seed": (0, ""),
    "test_day": (-1, "the log's last day"),
    "num_hard_negatives": (0, "every negative"),
}
# numpy's and Python's seeds take 32 bits; a day may be counted in ms, us or ns.
_INTEGER_HIGHS = {
    "seed": (2**32 - 1, "2^32 - 1"),
    "synthetic_log_seed": (2**32 - 1, "2^32 - 1"),
    "day_seconds": (2**62, "2^62"),
}
# Float fields: (low, low included, high, high included, what the bounds mean); None: no
# bound. Every float must also be finite.
_FLOAT_RANGES = {
    "dropout": (0.0, True, 1.0, False, "a rate of 1 drops everything"),
    # Between -1 and 0 is refused by `validate` (-1 alone means --dropout).
    "attention_dropout": (-1.0, True, 1.0, False, "-1: --dropout; a rate of 1 drops everything"),
    "test_fraction": (
        0.0,
        False,
        0.5,
        False,
        "the test and the validation windows each take that share, and training the rest",
    ),
    "gbce_t": (0.0, True, 1.0, True, ""),
    "synthetic_temperature": (0.0, False, None, False, ""),
    "learning_rate": (0.0, False, None, False, ""),
    "adam_epsilon": (0.0, False, None, False, ""),
    "max_vocabulary_mb": (0.0, False, None, False, ""),
    "synthetic_events_per_user": (0.0, False, None, False, ""),
    "synthetic_zipf": (0.0, False, None, False, ""),
    "table_learning_rate": (0.0, True, None, False, "0: --learning_rate"),
    "pseudo_count": (0.0, True, None, False, ""),
    "log_q_scale": (0.0, True, None, False, ""),
    "temperature": (0.0, False, None, False, ""),
}
# The synthetic catalog's users draw 20 to 100 distinct items each (make_synthetic).
SYNTHETIC_MIN_ITEMS = 100


def _check_type(name: str, value: Any) -> None:
    kind = FIELDS[name].type
    if kind is bool:
        ok, what = isinstance(value, bool), "true or false"
    elif kind is int:
        ok, what = isinstance(value, numbers.Integral) and not isinstance(value, bool), "an integer"
    elif kind is float:
        ok, what = isinstance(value, numbers.Real) and not isinstance(value, bool), "a number"
    else:
        ok, what = isinstance(value, str), "a string"
    if not ok:
        raise ValueError(f"--{name} must be {what}; received --{name}={value!r}.")


def _check_range(name: str, value: Any) -> None:
    low: float  # An integer field's bounds are ints; a float field's, floats (high: or None).
    high: Optional[float]
    if name in _INTEGER_LOWS:
        low, meaning = _INTEGER_LOWS[name]
        high, high_text = _INTEGER_HIGHS.get(name, (2**31 - 1, "2^31 - 1"))
        if value < low:
            if low == 1:
                raise ValueError(
                    f"--{name} must be a positive integer; received --{name}={value!r}."
                )
            if low == -1:
                raise ValueError(
                    f"--{name} must be a day number >= 0, or -1 for {meaning}; "
                    f"received --{name}={value}."
                )
            raise ValueError(
                f"--{name} must be >= 0{f' (0: {meaning})' if meaning else ''}; "
                f"received --{name}={value}."
            )
        if value > high:
            raise ValueError(f"--{name} must be at most {high_text}; received --{name}={value}.")
    if name in _FLOAT_RANGES:
        if not math.isfinite(value):
            raise ValueError(f"--{name} must be a finite number; received --{name}={value}.")
        low, low_in, high, high_in, why = _FLOAT_RANGES[name]
        if (
            value < low
            or value == low
            and not low_in
            or high is not None
            and (value > high or value == high and not high_in)
        ):
            if high is not None:
                bounds = f"in {'[' if low_in else '('}{low}, {high}{']' if high_in else ')'}"
            else:
                bounds = ">= 0" if low_in else "positive"
            raise ValueError(
                f"--{name} must be {bounds}{f' ({why})' if why else ''}; received --{name}={value}."
            )


def validate(config: Config) -> Config:
    """Raises ValueError naming the field, the value and the valid values; returns the
    config with old spellings (INDEX_ALIASES) by their current names. Every rule that needs
    no data is checked here, before anything loads."""
    if config.training.index in INDEX_ALIASES:
        config = config.replace(index=INDEX_ALIASES[config.training.index])
    values = config.flat()
    for name, value in values.items():
        _check_type(name, value)
    for field, choices in CHOICES.items():
        value = values[field]
        if value not in choices:
            raise ValueError(
                f"--{field} must be one of {', '.join(choices)}; received --{field}={value!r}."
            )
    for name, value in values.items():
        _check_range(name, value)
    if config.loss.loss == "sampled_softmax":
        # The samplers' own rules, before any data is loaded (the catalog size is not known
        # yet): the flags are the sampler's arguments by name.
        loss = config.loss
        try:
            samplers.sampler_arguments(
                loss.negatives,
                num_items=1,
                num_negatives=loss.num_negatives,
                deduplicate=loss.deduplicate,
                mixture=loss.mixture,
            )
        except ValueError as error:
            raise ValueError(
                f"--negatives={loss.negatives} --num_negatives="
                f"{loss.num_negatives} --deduplicate={loss.deduplicate} "
                f"--mixture={loss.mixture} do not make a sampler: {error}"
            ) from None
    if config.loss.mask_known_positives and config.loss.loss != "sampled_softmax":
        raise ValueError(
            "--mask_known_positives masks the negatives of the sampled softmax: "
            "needs --loss=sampled_softmax; received --loss="
            f"{config.loss.loss} --mask_known_positives."
        )
    ks(config.training)  # Raises on a bad --ks.
    if config.model.share_item_table and config.model.model != "two_tower":
        raise ValueError(
            "--share_item_table shares the two-tower's history and candidate item tables: "
            f"needs --model=two_tower; received --model={config.model.model} "
            "--share_item_table (SASRec's is --tie_embeddings)."
        )
    if config.data.dataset == "events" and not config.data.data_path:
        raise ValueError(
            "--dataset=events needs --data_path: the event log (a CSV, TSV or "
            "Parquet file, a directory of them, or a glob)."
        )
    if config.data.dataset in ("yambda", "ml-32m") and not config.data.data_path:
        raise ValueError(
            f"--dataset={config.data.dataset} needs --data_path: "
            + (
                f"{public_logs.YAMBDA_LAYOUT}."
                if config.data.dataset == "yambda"
                else f"{public_logs.ML_32M_LAYOUT}."
            )
            + " It is not bundled (docs/guide/public_logs.md: how to download it)."
        )
    if config.data.dataset in ("steam", "steam-reviews") and not config.data.data_path:
        raise ValueError(
            f"--dataset={config.data.dataset} needs --data_path: Steam is not bundled; "
            "give the path of its file."
        )
    if config.data.dataset == "events":
        named = [getattr(config.data, f"{c}_column") for c in ("user", "item", "time")]
        if not all(named) or len(set(named)) < 3:
            raise ValueError(
                "--user_column, --item_column and --time_column must name three "
                f"different columns; received {', '.join(map(repr, named))}."
            )
    if config.data.item_catalog and config.data.dataset not in EVENT_LOGS:
        raise ValueError(
            f"--item_catalog is for event logs ({', '.join(EVENT_LOGS)}); received "
            f"--item_catalog={config.data.item_catalog!r} with --dataset={config.data.dataset}."
        )
    if config.data.item_catalog == "log" and config.data.dataset != "web_synthetic":
        raise ValueError(
            "--item_catalog=log reads the catalog the web_synthetic log writes; give "
            "--dataset=events the path of a catalog file."
        )
    if config.data.dataset == "synthetic" and config.data.synthetic_items < SYNTHETIC_MIN_ITEMS:
        raise ValueError(
            f"--dataset=synthetic needs --synthetic_items >= "
            f"{SYNTHETIC_MIN_ITEMS} (each user draws up to {SYNTHETIC_MIN_ITEMS} "
            "distinct items); received "
            f"--synthetic_items={config.data.synthetic_items}."
        )
    if config.data.dataset == "web_synthetic" and config.data.synthetic_days < 3:
        raise ValueError(
            "--dataset=web_synthetic needs --synthetic_days >= 3 (a training, a "
            "validation and a test day); received "
            f"--synthetic_days={config.data.synthetic_days}."
        )
    if config.data.weight_column and config.data.dataset != "events":
        raise ValueError(
            "--weight_column names a column of your event log (--dataset=events); "
            f"received --dataset={config.data.dataset} "
            f"--weight_column={config.data.weight_column}."
        )
    if config.data.weight_column and (
        config.model.model != "two_tower" or config.data.split != "next_day"
    ):
        raise ValueError(
            "--weight_column weights the two-tower's training events on "
            "--split=next_day; received --model="
            f"{config.model.model} --split={config.data.split}."
        )
    if config.training.order == "time" and (
        config.model.model != "two_tower" or config.data.split != "next_day"
    ):
        raise ValueError(
            "--order=time trains the two-tower model on a timed split: needs "
            "--model=two_tower --split=next_day; received "
            f"--model={config.model.model} --split={config.data.split}."
        )
    if config.data.split == "next_day" and config.data.dataset not in EVENT_LOGS:
        raise ValueError(
            f"--split=next_day needs a timed event log (--dataset={', '.join(EVENT_LOGS)}); "
            f"received --dataset={config.data.dataset}."
        )
    rate = config.model.attention_dropout
    if rate != -1.0 and not 0.0 <= rate < 1.0:
        raise ValueError(
            "--attention_dropout must be -1 (--dropout) or a rate in [0, 1); received "
            f"--attention_dropout={rate}."
        )
    if config.model.dim % config.model.num_heads:
        raise ValueError(
            "--dim must be a multiple of --num_heads; received "
            f"--dim={config.model.dim} --num_heads={config.model.num_heads}."
        )
    return config


def attention_dropout(model: ModelConfig) -> float:
    """SASRec's dropout rate of the attention weights: --attention_dropout, or --dropout
    where it is -1."""
    return model.dropout if model.attention_dropout == -1.0 else model.attention_dropout


def ks(training: TrainingConfig) -> Tuple[int, ...]:
    """The cutoffs of --ks, sorted."""
    try:
        values = sorted({int(k) for k in training.ks.split(",") if k.strip()})
    except ValueError:
        values = []
    if not values or values[0] < 1:
        raise ValueError(
            "--ks must be comma-separated positive integers such as 10,100,1000; "
            f"received --ks={training.ks!r}."
        )
    return tuple(values)


# The paper's settings (Khrylchenko et al. 2025, after gSASRec): SASRec, sequence 200,
# dim 128, 2 blocks, 1 head, dropout 0.5, batch 128, 256 negatives (128 + 128 mixed), Adam,
# early stopping on validation NDCG@10.
PAPER = Config().replace(
    dataset="ml-1m",
    split="loo",
    model="sasrec",
    max_length=200,
    dim=128,
    num_blocks=2,
    num_heads=1,
    dropout=0.5,
    batch_size=128,
    num_negatives=256,
    learning_rate=0.001,
    epochs=200,
    patience=20,
    jit_compile=True,
)

# The paper's released protocol for ML-1M (NonameUntitled/logq configs/ml1m_other.py on
# gSASRec-pytorch; docs/protocol.md lists every difference with file and line): gSASRec's
# model and split, the released negatives (per-position uniform draws, the deduplicated
# in-batch pool corrected by unigram q, mixed = 128 + 128), mean bce / gbce over 1 + n
# terms, torch's Adam epsilon, epochs of one pass (48 batches of 128, the last partial),
# validation NDCG@10 on 512 users after every epoch, patience 200 epochs of at most 10,000.
# The reproduce runner maps its rows onto the released scripts (standard = logq_old =
# "standard_negatives"; the "in-batch improved" script draws mixed negatives).
OFFICIAL = PAPER.replace(
    architecture="gsasrec",
    tie_embeddings=False,
    loo_train_gap=1,
    deduplicate=True,
    log_q="unigram",
    per_row=True,
    mixture="paper",
    binary_reduction="mean",
    binary_accidental_hits=False,
    gbce_alpha="released",
    pseudo_count=0.0,
    adam_epsilon=1e-8,
    partial_batches=True,
    steps_per_epoch=0,
    epochs=10000,
    patience=200,
    validation_queries=512,
    index="exact",
    test_curve_every=10,
)  # A diagnostic of ours; it changes no training.

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
    "synthetic": Config().replace(
        dataset="synthetic",
        split="loo",
        model="sasrec",
        max_length=50,
        dim=64,
        num_blocks=2,
        num_heads=1,
        dropout=0.2,
        batch_size=128,
        negatives="mixed",
        correction="improved",
        num_negatives=256,
        learning_rate=0.002,
        epochs=20,
        steps_per_epoch=100,
        patience=4,
        jit_compile=True,
        scann_min_items=0,
    ),
    # The synthetic study of the paper campaign (paper/): the two-tower query holds the user
    # id, as the generative law P(d|u) = softmax(<x_u, y_d>/T - s log rank d) does, so the
    # distance to the truth measures the loss rather than how well a sequence encodes x_u.
    # An epoch is ~1/3 of the 180k training interactions; ~1 minute per run on 2 cores.
    "synthetic_two_tower": Config().replace(
        dataset="synthetic",
        split="loo",
        model="two_tower",
        dim=64,
        batch_size=128,
        negatives="mixed",
        correction="improved",
        num_negatives=256,
        learning_rate=0.005,
        epochs=30,
        steps_per_epoch=500,
        patience=5,
    ),
    # The paper's industrial protocol on a web-scale synthetic log (1M items, 1M users, 20M
    # events over 14 days, string ids): the two-tower model trained once over the days in
    # time order (shuffled within windows), mixed negatives corrected by a count-min sketch
    # learnt online, Adagrad on the tables; tested on the next day over an index of the top
    # 200,000 training items plus the day's positives, Recall@10/100/1000 on 20,000 of the
    # day's users by exact search and ScaNN (the gap), with popularity and the oracle. The
    # learning rates won a sweep on the 100k-item log (docs/speed.md): Adagrad 0.05 on the
    # tables and Adam 0.001 reached a tenth of the oracle's Recall@10, 3.0 and 0.02 two thirds.
    "industrial": Config().replace(
        dataset="web_synthetic",
        split="next_day",
        model="two_tower",
        synthetic_items=1_000_000,
        synthetic_users=1_000_000,
        synthetic_days=14,
        synthetic_events_per_user=20.0,
        history_length=20,
        dim=64,
        batch_size=1024,
        negatives="mixed",
        num_negatives=1024,
        correction="improved",
        frequency="count_min",
        table_optimizer="adagrad",
        learning_rate=0.02,
        table_learning_rate=3.0,
        epochs=1,
        steps_per_epoch=0,
        patience=1,
        order="time",
        shuffle_window=100_000,
        drift_every=500,
        validation_queries=2000,
        backup_every=500,
        ks="10,100,1000",
        index_size=200_000,
        test_queries=20_000,
        scann_min_items=0,
        index="both",
    ),
    # The same at a size for tests and CI: seconds.
    "industrial_smoke": Config().replace(
        dataset="web_synthetic",
        split="next_day",
        model="two_tower",
        synthetic_items=5000,
        synthetic_users=2000,
        synthetic_days=6,
        synthetic_events_per_user=12.0,
        history_length=10,
        dim=16,
        batch_size=128,
        negatives="mixed",
        num_negatives=64,
        correction="improved",
        frequency="count_min",
        table_optimizer="adagrad",
        learning_rate=0.005,
        table_learning_rate=0.1,
        epochs=1,
        steps_per_epoch=0,
        patience=1,
        order="time",
        shuffle_window=1000,
        drift_every=40,
        validation_queries=500,
        backup_every=50,
        ks="10,100,1000",
        index_size=1000,
        test_queries=500,
        scann_min_items=0,
        index="both",
    ),
    # Tests and quick checks: seconds.
    "smoke": Config().replace(
        dataset="synthetic",
        synthetic_users=300,
        synthetic_items=400,
        max_length=20,
        dim=16,
        num_blocks=1,
        dropout=0.1,
        batch_size=32,
        num_negatives=32,
        negatives="mixed",
        correction="improved",
        learning_rate=0.005,
        epochs=2,
        steps_per_epoch=25,
        patience=2,
        backup_every=5,
    ),
}

# The industrial protocol at web scale: a 20M-item law (1M users, 20M events over 14 days:
# the vocabulary holds the items those events reach) tested over the paper's own index size,
# the 2M most trained items plus the day's positives. Sized for 2 CPU cores and 16 GB
# (docs/guide/scale.md).
PRESETS["industrial_20m"] = PRESETS["industrial"].replace(
    synthetic_items=20_000_000, index_size=2_000_000
)

# One line per preset, for `tfrs-logq --help` (the comments above say more).
PRESET_SUMMARIES: Dict[str, str] = {
    "paper": "SASRec on ML-1M at the paper's settings (sequence 200, dim 128, 128 + 128 mixed).",
    "official": "The paper's released ML-1M protocol (gSASRec, its negatives and early stopping).",
    "official_cpu": "The released protocol at sequence 50 and dim 64, for 2 CPU cores.",
    "cpu": "SASRec on ML-1M sized for 2 CPU cores (sequence 50, dim 64, at most 120 epochs).",
    "synthetic": "The main job: SASRec on the embedded synthetic catalog, improved, mixed, ScaNN.",
    "synthetic_two_tower": "A two-tower model on the synthetic catalog (the paper campaign's).",
    "industrial": "The industrial protocol: 1M items, 20M events, next-day test, count-min sketch.",
    "industrial_smoke": "The industrial protocol at a size for tests: seconds.",
    "smoke": "A tiny synthetic SASRec run for tests and quick checks: seconds.",
    "industrial_20m": "The industrial protocol at 20M items over the paper's 2M-item index.",
}
