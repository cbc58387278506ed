"""Parity with the code the paper's numbers came from (`NonameUntitled/logq`).

Each `released_*` function is a numpy transcription of one released loss
computation, line for line, in float64 (the scripts cast scores to float64):
the training step's body after `last_hidden_state[mask]`, given the negatives
it drew. The tests draw negatives with the library's samplers under the
released options (`pipelines.configs` preset "official"), replay the same
draws into the transcription, and check that `RetrievalObjective` computes the
same mean loss to 1e-5. docs/protocol.md lists the options with file and line.
"""

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from tests import conftest
from tfrs_logq.models import make_objective

NUM_ITEMS = 12
DIM = 4
# Ids 1..12 (0 is our padding). Every count positive: the released code clamps Q at 1e-10,
# our probabilities must lie in (0, 1] (pipelines.experiment adds a pseudo-count).
COUNTS = np.array([0, 40, 25, 16, 9, 7, 5, 4, 3, 2, 2, 1, 1], np.float64)
Q = np.concatenate([[1.0], COUNTS[1:] / COUNTS.sum()])  # Row 0 (padding) is never read.
# Duplicated labels: the deduplicated pool holds other rows' copies of a row's positive,
# and the per-row uniform draws over 12 items hit the positive often (accidental hits).
LABELS = np.array([1, 1, 2, 3, 1, 5, 2, 9, 12, 1], np.int64)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(len(LABELS), DIM)).astype(np.float32),
        rng.normal(size=(NUM_ITEMS + 1, DIM)).astype(np.float32),
    )


def _log_softmax_first(scores):
    """-torch.log_softmax(scores, dim=1)[:, 0], rows may hold -inf."""
    top = scores.max(axis=1, keepdims=True)
    return -(scores[:, 0] - top[:, 0] - np.log(np.exp(scores - top).sum(axis=1)))


def released_sampled_softmax(hidden, table, labels, negative_ids, variant):
    """train_in_batch.py / train_in_batch_logq_old.py / train_in_batch_logq_new.py /
    train_mns*.py / train_uniform.py, from `positive_scores` to `loss.mean()`.

    Args:
      negative_ids: [n, k] each row's negatives (the shared in-batch ones tiled, as
        `negative_inbatch_ids[None].tile(...)`).
      variant: "none" (train_in_batch.py, train_mns.py, train_uniform.py), "old"
        (*_logq_old.py, *_log_old.py) or "new" (*_logq_new.py, *_log_new.py).
    """
    hidden = hidden.astype(np.float64)
    table = table.astype(np.float64)
    positive_scores = np.einsum("ad,ad->a", hidden, table[labels])[:, None]
    negative_scores = np.einsum("ad,and->an", hidden, table[negative_ids])
    negative_mask = labels[:, None] != negative_ids
    negative_scores[~negative_mask] = -np.inf
    total = COUNTS.sum()
    if variant == "none":
        loss = _log_softmax_first(np.concatenate([positive_scores, negative_scores], axis=-1))
    elif variant == "old":
        negative_correction = np.maximum(COUNTS[negative_ids] / total, 1e-10)
        corrected = negative_scores - np.log(negative_correction)
        loss = _log_softmax_first(np.concatenate([positive_scores, corrected], axis=-1))
    else:
        negative_correction = np.maximum(
            COUNTS[negative_ids] / (total - COUNTS[labels][..., None]), 1e-10
        )
        corrected = negative_scores - np.log(negative_correction)
        loss = -np.log(
            np.maximum(
                np.exp(positive_scores.reshape(-1))
                / np.maximum(np.exp(corrected).sum(axis=-1), 1e-10),
                1e-10,
            )
        )
        corrected = (
            negative_scores
            - np.log(negative_correction)
            - np.log(np.maximum(negative_mask.sum(axis=-1)[..., None], 1e-10))
        )
        all_scores = np.concatenate([positive_scores, corrected], axis=1)
        prob = np.exp(all_scores[:, 0] - all_scores.max(axis=1)) / np.exp(
            all_scores - all_scores.max(axis=1, keepdims=True)
        ).sum(axis=1)
        loss = loss * (1.0 - prob)
    return loss.mean()


def released_binary(hidden, table, labels, negative_ids, beta=1.0):
    """train_sasrec.py (BCE; beta = 1) and gSASRec's train_gsasrec.py with gbce.py (gBCE):
    per position, beta * softplus(-s_p) + sum softplus(s_i) averaged over the 1 + n terms
    (`.mean(-1)`), no accidental-hit mask, then averaged over positions."""
    hidden = hidden.astype(np.float64)
    table = table.astype(np.float64)
    ids = np.concatenate([labels[:, None], negative_ids], axis=-1)
    logits = np.einsum("ad,and->an", hidden, table[ids])
    softplus = lambda x: np.logaddexp(0.0, x)  # noqa: E731
    terms = np.concatenate([beta * softplus(-logits[:, :1]), softplus(logits[:, 1:])], axis=1)
    return terms.mean(axis=-1).mean()


def released_gbce_beta(num_negatives, t):
    """gbce.py with pool_size = num_items - 1 (train_gsasrec.py)."""
    alpha = num_negatives / (NUM_ITEMS - 1 - 1)
    return alpha * (t * (1 - 1 / alpha) + 1 / alpha)


def released_full_softmax(hidden, table, labels):
    """train_full_softmax.py: `cross_entropy(scores, labels)` over the output table's rows
    (here ids 1..n; the released table also holds rows 0 and n + 1, see docs/protocol.md)."""
    scores = hidden.astype(np.float64) @ table[1:].astype(np.float64).T
    top = scores.max(axis=1)
    log_z = top + np.log(np.exp(scores - top[:, None]).sum(axis=1))
    return (log_z - scores[np.arange(len(labels)), labels - 1]).mean()


# (row, objective options, transcription variant), as the released scripts run them.
SAMPLED = {
    "train_in_batch": (dict(negatives="in_batch", correction="none", num_negatives=6), "none"),
    "train_in_batch_logq_old": (
        dict(negatives="in_batch", correction="standard_negatives", num_negatives=6),
        "old",
    ),
    # The like-for-like row the released scripts lack: the pure in-batch pool, improved.
    "in_batch_improved": (
        dict(negatives="in_batch", correction="improved", num_negatives=6),
        "new",
    ),
    "train_mns": (dict(negatives="mixed", correction="none", num_negatives=8), "none"),
    "train_mns_log_old": (
        dict(negatives="mixed", correction="standard_negatives", num_negatives=8),
        "old",
    ),
    # train_in_batch_logq_new.py is this same computation (mixed negatives).
    "train_mns_log_new": (dict(negatives="mixed", correction="improved", num_negatives=8), "new"),
    "train_uniform": (dict(negatives="uniform", correction="none", num_negatives=8), "none"),
}
RELEASED_OPTIONS = dict(
    deduplicate=True,
    log_q="unigram",
    per_row=True,
    mixture="paper",
    binary_reduction="mean",
    binary_accidental_hits=False,
    gbce_alpha="released",
)


class ReleasedLossParityTest(tf.test.TestCase, parameterized.TestCase):
    def _ours_and_draws(self, hidden, table, **options):
        """Our objective's loss, and the negative ids its sampler drew ([n, k])."""
        objective = make_objective(
            NUM_ITEMS, probabilities=Q, seed=3, **dict(RELEASED_OPTIONS, **options)
        )
        embed = lambda ids: tf.gather(table, ids)  # noqa: E731
        labels = tf.constant(LABELS)
        ours = objective(
            hidden, labels, embed, all_item_embeddings=lambda: tf.constant(table), training=False
        )
        conftest.reset_draws(objective)  # The same draws again.
        if objective.task is not None:
            ids = objective.task.sampler(labels, labels, embed(labels), embedding_fn=embed).ids
        elif objective.uniform is not None:
            ids = objective.uniform(labels).ids
        else:  # Full softmax draws nothing.
            return float(ours), None
        ids = ids.numpy()
        if ids.ndim == 1:
            ids = np.tile(ids[None], [len(LABELS), 1])
        return float(ours), ids

    @parameterized.named_parameters(*[(name, name) for name in SAMPLED])
    def test_sampled_softmax(self, name):
        options, variant = SAMPLED[name]
        for seed in range(3):
            hidden, table = _inputs(seed)
            ours, ids = self._ours_and_draws(hidden, table, **options)
            self.assertTrue((ids == LABELS[:, None]).any(), "no accidental hit to test")
            self.assertAllClose(
                ours,
                released_sampled_softmax(hidden, table, LABELS, ids, variant),
                rtol=1e-5,
                atol=1e-5,
            )

    def test_released_in_batch_pool(self):
        # k distinct targets of the batch, shared by every row (torch.unique + randperm[:k]).
        hidden, table = _inputs()
        _, ids = self._ours_and_draws(hidden, table, **SAMPLED["train_in_batch"][0])
        self.assertLen(set(ids[0].tolist()), 6)
        self.assertTrue(set(ids[0].tolist()) <= set(LABELS.tolist()))
        self.assertTrue((ids == ids[0]).all())
        # Mixed: the first half per row from [1, 12], the second the shared pool.
        _, ids = self._ours_and_draws(hidden, table, **SAMPLED["train_mns"][0])
        self.assertFalse((ids[:, :4] == ids[0, :4]).all())
        self.assertTrue((ids[:, 4:] == ids[0, 4:]).all())
        self.assertTrue(((ids >= 1) & (ids <= NUM_ITEMS)).all())

    @parameterized.parameters(("bce", 1, 0.0), ("gbce", 8, 0.75))
    def test_binary(self, loss, num_negatives, t):
        hidden, table = _inputs(1)
        ours, ids = self._ours_and_draws(
            hidden, table, loss=loss, num_negatives=num_negatives, gbce_t=t
        )
        beta = 1.0 if loss == "bce" else released_gbce_beta(num_negatives, t)
        self.assertAllClose(
            ours, released_binary(hidden, table, LABELS, ids, beta), rtol=1e-5, atol=1e-5
        )

    def test_full_softmax(self):
        hidden, table = _inputs(2)
        ours, _ = self._ours_and_draws(hidden, table, loss="full_softmax")
        self.assertAllClose(ours, released_full_softmax(hidden, table, LABELS), rtol=1e-5)


if __name__ == "__main__":
    tf.test.main()
