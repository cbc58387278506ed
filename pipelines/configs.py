"""Training configurations as data: one dataclass, and presets holding the paper's settings.

`python -m pipelines.train --preset NAME [--field=value ...]` starts from a
preset and overrides fields one by one.
"""

import dataclasses
from typing import Any, Dict

from pipelines.data.splits import TEMPORAL_TARGETS
from tfrs_logq import losses
from tfrs_logq import negatives
from tfrs_logq.models import objective
from tfrs_logq.models import sasrec

DATASETS = ("synthetic", "ml-1m", "ml-1m-ratings", "ml-1m-tfds", "steam", "steam-reviews")
SPLITS = ("loo", "temporal")
MODELS = ("sasrec", "two_tower")
LOSSES = objective.LOSSES
NEGATIVES = objective.NEGATIVES
CORRECTIONS = losses.CORRECTIONS
FREQUENCIES = ("static", "count_min", "hashed")
MIXTURES = negatives.MIXTURES
ARCHITECTURES = sasrec.ARCHITECTURES
IN_BATCH_LOG_Q = negatives.IN_BATCH_LOG_Q
BINARY_REDUCTIONS = objective.BINARY_REDUCTIONS
GBCE_ALPHAS = objective.GBCE_ALPHAS
INDEXES = ("exact", "scann", "both")
STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")

# Fields that must take one of a fixed set of values.
CHOICES = {"dataset": DATASETS, "split": SPLITS, "model": MODELS, "loss": LOSSES,
           "negatives": NEGATIVES, "correction": CORRECTIONS, "frequency": FREQUENCIES,
           "mixture": MIXTURES, "index": INDEXES, "temporal_targets": TEMPORAL_TARGETS,
           "architecture": ARCHITECTURES, "in_batch_log_q": IN_BATCH_LOG_Q,
           "binary_reduction": BINARY_REDUCTIONS, "gbce_alpha": GBCE_ALPHAS}


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything a training run depends on (written to OUTPUT/config.json)."""
    # Data.
    dataset: str = "synthetic"
    data_path: str = ""          # The file for ml-1m / steam; empty: ../shared/data.
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
    # Model.
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
    # Loss.
    loss: str = "sampled_softmax"
    negatives: str = "in_batch"
    correction: str = "improved"
    num_negatives: int = 256     # Mixed: half uniform, half in-batch.
    frequency: str = "static"    # Where log Q comes from: training counts or an estimator.
    pseudo_count: float = 1.0    # Static counts: added to every item's training count.
    mixture: str = "exact"
    # The in-batch pool keeps each distinct target once (the released code's pool).
    deduplicate: bool = False
    in_batch_log_q: str = "horvitz_thompson"  # With deduplicate: or "unigram" (released).
    per_row_negatives: bool = False  # Uniform draws per example (released), not per step.
    binary_reduction: str = "sum"    # bce / gbce: sum or mean (released) of 1 + n terms.
    binary_accidental_hits: bool = True  # bce / gbce mask uniform draws equal to the positive.
    gbce_t: float = 0.75
    gbce_alpha: str = "paper"    # n / (|D| - 1); "released": n / (|D| - 2), gSASRec's code.
    # Under tf.distribute, in-batch negatives come from the global batch (all replicas).
    global_negatives: bool = True
    # Optimisation.
    batch_size: int = 128
    learning_rate: float = 0.001
    adam_epsilon: float = 1e-7   # Keras's default; torch's (the released code) is 1e-8.
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
    # Diagnostic: every N epochs (0: never) log test NDCG@20 / Recall@20 of the current
    # weights, on at most callbacks.TEST_CURVE_QUERIES test queries, to TensorBoard (train/,
    # epoch_test_ndcg@20). Never used to pick the checkpoint or to stop; it lets same-seed
    # runs be compared on the test split over many epochs rather than at one
    # validation-picked epoch (pipelines.benchmarks.reproduce).
    test_curve_every: int = 0

    def replace(self, **changes) -> "Config":
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def validate(config: Config) -> Config:
    """Raises ValueError naming the field, the value and the valid values."""
    for field, choices in CHOICES.items():
        value = getattr(config, field)
        if value not in choices:
            raise ValueError(f"--{field} must be one of {', '.join(choices)}; received "
                             f"--{field}={value!r}.")
    for field in ("synthetic_users", "synthetic_items", "max_length", "history_length", "dim",
                  "num_blocks", "num_heads", "num_negatives", "batch_size", "epochs",
                  "patience", "backup_every", "validation_queries"):
        if getattr(config, field) < 1:
            raise ValueError(f"--{field} must be a positive integer; received "
                             f"--{field}={getattr(config, field)!r}.")
    if config.test_curve_every < 0:
        raise ValueError("--test_curve_every must be >= 0 (0: never); received "
                         f"--test_curve_every={config.test_curve_every}.")
    if config.steps_per_epoch < 0:
        raise ValueError("--steps_per_epoch must be >= 0 (0: one pass over the data); "
                         f"received --steps_per_epoch={config.steps_per_epoch}.")
    for field, low, high in (("dropout", 0.0, 1.0), ("test_fraction", 0.0, 0.5),
                             ("gbce_t", 0.0, 1.0)):
        value = getattr(config, field)
        if not low <= value <= high or (field == "test_fraction" and value == 0.0):
            raise ValueError(f"--{field} must be in [{low}, {high}]; received --{field}={value}.")
    if config.synthetic_temperature <= 0:
        raise ValueError("--synthetic_temperature must be positive; received "
                         f"{config.synthetic_temperature}.")
    if config.learning_rate <= 0:
        raise ValueError(f"--learning_rate must be positive; received {config.learning_rate}.")
    if config.pseudo_count < 0:
        raise ValueError(f"--pseudo_count must be >= 0; received {config.pseudo_count}.")
    if config.adam_epsilon <= 0:
        raise ValueError(f"--adam_epsilon must be positive; received {config.adam_epsilon}.")
    if config.loo_train_gap < 0:
        raise ValueError("--loo_train_gap must be >= 0; received "
                         f"--loo_train_gap={config.loo_train_gap}.")
    if config.deduplicate and config.negatives == "mixed" and config.mixture != "paper":
        raise ValueError("--deduplicate with --negatives=mixed needs --mixture=paper (the "
                         "exact mixture of a deduplicated pool is not implemented); received "
                         f"--mixture={config.mixture}.")
    if config.dim % config.num_heads:
        raise ValueError(f"--dim must be a multiple of --num_heads; received --dim={config.dim} "
                         f"--num_heads={config.num_heads}.")
    if config.negatives == "mixed" and config.num_negatives < 2:
        raise ValueError("--negatives=mixed needs --num_negatives >= 2 (half uniform, half "
                         f"in-batch); received --num_negatives={config.num_negatives}.")
    return config


# The paper's settings (Khrylchenko et al. 2025, after gSASRec): SASRec, sequence 200,
# dim 128, 2 blocks, 1 head, dropout 0.5, batch 128, 256 negatives (128 + 128 mixed), Adam,
# early stopping on validation NDCG@10.
PAPER = Config(dataset="ml-1m", split="loo", model="sasrec", max_length=200, dim=128,
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
                         deduplicate=True, in_batch_log_q="unigram", per_row_negatives=True,
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
    # The README's main job: synthetic catalog, improved correction, mixed negatives.
    "synthetic": Config(dataset="synthetic", split="loo", model="sasrec", max_length=50,
                        dim=64, num_blocks=2, num_heads=1, dropout=0.2, batch_size=128,
                        negatives="mixed", correction="improved", num_negatives=256,
                        learning_rate=0.002, epochs=20, steps_per_epoch=100, patience=4,
                        jit_compile=True),
    # The synthetic study of pipelines.benchmarks.reproduce: the two-tower query holds the user
    # id, as the generative law P(d|u) = softmax(<x_u, y_d>/T - s log rank d) does, so the
    # distance to the truth measures the loss rather than how well a sequence encodes x_u.
    # An epoch is ~1/3 of the 180k training interactions; ~1 minute per run on 2 cores.
    "synthetic_two_tower": Config(dataset="synthetic", split="loo", model="two_tower",
                                  dim=64, batch_size=128, negatives="mixed",
                                  correction="improved", num_negatives=256,
                                  learning_rate=0.005, epochs=30, steps_per_epoch=500,
                                  patience=5),
    # Tests and quick checks: seconds.
    "smoke": Config(dataset="synthetic", synthetic_users=300, synthetic_items=400,
                    max_length=20, dim=16, num_blocks=1, dropout=0.1, batch_size=32,
                    num_negatives=32, negatives="mixed", correction="improved",
                    learning_rate=0.005, epochs=2, steps_per_epoch=25, patience=2,
                    backup_every=5),
}
