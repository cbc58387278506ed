"""The losses compared in the paper's Table 1, each as overrides of `pipelines.train`'s flags
(no flags here, so any benchmark may import it).

The rows `train_step` times, and the rows the paper campaign (`paper/`, outside the library)
trains; the paper's own numbers for them live there, in `paper.plan`.
"""

from typing import Dict, NamedTuple, Optional

# The presets of the paper's released protocol (pipelines/configs.py, docs/protocol.md): each
# row runs as the released script its `script` names does.
OFFICIAL_PROFILES = ("official", "official_cpu")


class Row(NamedTuple):
    """One loss of Table 1: its config overrides.

    Under the official profiles a row runs as the released script `script` does:
    `released` overrides are applied on top of `overrides` and `released_label`
    says what the row then is. `official_only` rows (no paper number) compare
    like with like under the released protocol.
    """

    name: str
    label: str
    overrides: Dict[str, object]
    script: str = ""
    released: Optional[Dict[str, object]] = None
    released_label: str = ""
    official_only: bool = False


def as_released(row: Row) -> Row:
    """The row as the official profiles run it (its released script's options and label)."""
    return row._replace(
        label=row.released_label or f"{row.label} [{row.script}]",
        overrides=dict(row.overrides, **(row.released or {})),
    )


def _softmax(negatives: str, correction: str) -> Dict[str, object]:
    return {"loss": "sampled_softmax", "negatives": negatives, "correction": correction}


# Khrylchenko et al. 2025, Table 1, in its order, then the rows that only the released protocol
# runs.
ROWS = (
    Row(
        "bce",
        "BCE (1 uniform negative)",
        {"loss": "bce", "num_negatives": 1},
        script="train_sasrec.py",
    ),
    Row("gbce", "gBCE (t = 0.75)", {"loss": "gbce"}, script="gSASRec-pytorch train_gsasrec.py"),
    Row(
        "uniform",
        "sampled softmax, uniform",
        _softmax("uniform", "none"),
        script="train_uniform.py",
    ),
    Row(
        "in_batch-none",
        "in-batch, no logQ",
        _softmax("in_batch", "none"),
        script="train_in_batch.py",
    ),
    Row(
        "in_batch-standard",
        "in-batch, standard logQ",
        _softmax("in_batch", "standard"),
        script="train_in_batch_logq_old.py",
        released={"correction": "standard_negatives"},
        released_label="in-batch, standard logQ on negatives only [train_in_batch_logq_old.py]",
    ),
    Row(
        "in_batch-improved",
        "in-batch, improved logQ",
        _softmax("in_batch", "improved"),
        script="train_in_batch_logq_new.py",
        released={"negatives": "mixed"},
        released_label='"in-batch", improved logQ: mixed negatives [train_in_batch_logq_new.py]',
    ),
    Row("mixed-none", "mixed, no logQ", _softmax("mixed", "none"), script="train_mns.py"),
    Row(
        "mixed-standard",
        "mixed, standard logQ",
        _softmax("mixed", "standard"),
        script="train_mns_log_old.py",
        released={"correction": "standard_negatives"},
        released_label="mixed, standard logQ on negatives only [train_mns_log_old.py]",
    ),
    Row(
        "mixed-improved",
        "mixed, improved logQ",
        _softmax("mixed", "improved"),
        script="train_mns_log_new.py",
    ),
    Row("full_softmax", "full softmax", {"loss": "full_softmax"}, script="train_full_softmax.py"),
    # Like with like under the released protocol; no released script, no paper number.
    Row(
        "in_batch-improved_pool",
        "in-batch (released pool), improved logQ",
        _softmax("in_batch", "improved"),
        official_only=True,
        released_label="in-batch (released pool), improved logQ [no released script]",
    ),
    Row(
        "in_batch-standard_tfrs",
        "in-batch, standard logQ (TFRS)",
        _softmax("in_batch", "standard"),
        official_only=True,
        released_label="in-batch, standard logQ as TFRS (positive corrected too)",
    ),
    Row(
        "mixed-standard_tfrs",
        "mixed, standard logQ (TFRS)",
        _softmax("mixed", "standard"),
        official_only=True,
        released_label="mixed, standard logQ as TFRS (positive corrected too)",
    ),
)
ROWS_BY_NAME = {row.name: row for row in ROWS}
