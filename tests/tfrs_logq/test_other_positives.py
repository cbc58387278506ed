"""Other known positives masked (issue 47, item 3): the id mask, every correction against numpy,
LogQRetrieval's query_ids / known_positive_ids / known_positives, hard negatives, the
unbiasedness of Z_hat on a known catalog, the argument errors, and the models' and pipelines'
`mask_known_positives`."""

import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from logq_core import formulas
from tests import conftest
from tests import reference
from tfrs_logq import _ops
from tfrs_logq import losses
from tfrs_logq import negatives
from tfrs_logq.models import RetrievalObjective
from tfrs_logq.models import SASRec
from tfrs_logq.models import TwoTower
from tfrs_logq.models import make_objective
from tfrs_logq.models.sasrec import sequence_ids
from tfrs_logq.tasks import LogQRetrieval


def masked_reference(
    pos,
    neg,
    correction,
    neg_log_q=None,
    pos_log_q=None,
    mask=None,
    known=None,
    excludes=False,
    num_hard=None,
):
    """Per-row loss and weight with known positives: the sums run over m_i k_i (k_i = not
    known), log Q and "improved"'s n = sum_i m_i are those before the known mask; with
    `num_hard`, the k largest corrected logits among m_i k_i, n unchanged."""
    pos = np.asarray(pos, np.float64)
    neg = np.asarray(neg, np.float64)
    batch, num = neg.shape
    mask = np.ones((batch, num), bool) if mask is None else np.asarray(mask)
    known = np.zeros((batch, num), bool) if known is None else np.asarray(known)
    log_q = (
        np.zeros((batch, num))
        if neg_log_q is None
        else np.broadcast_to(np.asarray(neg_log_q, np.float64), (batch, num))
    )
    pos_log_q = np.zeros(batch) if pos_log_q is None else np.asarray(pos_log_q, np.float64)
    losses_, weights = np.zeros(batch), np.zeros(batch)
    for r in range(batch):
        n = mask[r].sum()
        if correction == "improved" and not excludes:
            shift = np.log1p(-np.exp(pos_log_q[r]))
        else:
            shift = 0.0
        corrected = neg[r] - ((log_q[r] - shift) if correction != "none" else 0.0)
        columns = np.nonzero(mask[r] & ~known[r])[0]
        if num_hard is not None:
            columns = columns[np.argsort(-corrected[columns], kind="stable")[:num_hard]]
        terms = corrected[columns]
        if correction == "improved":
            if n == 0 or len(terms) == 0:  # Z_hat = 0: P_hat = 1, weight and loss 0.
                continue
            lse = reference.logsumexp(terms)
            weights[r] = 1.0 / (1.0 + np.exp(pos[r] - (lse - np.log(n))))
            losses_[r] = weights[r] * (lse - pos[r])
            continue
        positive = pos[r] - (pos_log_q[r] if correction == "standard" else 0.0)
        losses_[r] = reference.logsumexp(np.concatenate([[positive], terms])) - positive
    return losses_, weights


def known_reference(positive_ids, negative_ids, query_ids=None, known_ids=None, valid=None):
    """The id mask by brute force: negative d of row r is known when a valid row with r's
    query has d as its positive or among its known ids."""
    positive_ids = np.asarray(positive_ids)
    batch = len(positive_ids)
    query_ids = np.arange(batch) if query_ids is None else np.asarray(query_ids)
    valid = np.ones(batch, bool) if valid is None else np.asarray(valid)
    negative_ids = np.asarray(negative_ids)
    if negative_ids.ndim == 1:
        negative_ids = np.broadcast_to(negative_ids, (batch, len(negative_ids)))
    out = np.zeros(negative_ids.shape, bool)
    for r in range(batch):
        items = set()
        for other in range(batch):
            if valid[other] and query_ids[other] == query_ids[r]:
                items.add(positive_ids[other])
                if known_ids is not None:
                    items.update(np.asarray(known_ids)[other].tolist())
        out[r] = [d in items for d in negative_ids[r]]
    return out


# s_p = 0, two negatives with s = 0 and Q = 1/2, Q(p) = 1/4, the second a known positive:
# none = log 2; standard = -log 4 + log(4 + 2) = log 1.5; standard_negatives = log(1 + 2) = log 3;
# improved: Q' = 2/3, LSE = log 1.5, n = 2 (the known positive is still a draw),
# P_hat = sigmoid(0 - log 1.5 + log 2) = 4/7, loss = (3/7) log 1.5. Recounting n = 1 would give
# P_hat = sigmoid(-log 1.5) = 0.4 instead.
EXACT = dict(
    none=np.log(2.0),
    standard=np.log(1.5),
    standard_negatives=np.log(3.0),
    improved=3.0 / 7.0 * np.log(1.5),
)


class LossTest(tf.test.TestCase, parameterized.TestCase):
    """`known_positives` in the loss functions."""

    @parameterized.parameters(*losses.CORRECTIONS)
    def test_exact_values(self, correction):
        got = losses.sampled_softmax_loss(
            np.zeros([1], np.float32),
            np.zeros([1, 2], np.float32),
            correction=correction,
            negative_log_q=np.log([0.5, 0.5]).astype(np.float32),
            positive_log_q=np.log([0.25]).astype(np.float32),
            known_positives=np.array([[False, True]]),
        )
        self.assertAllClose(got, [EXACT[correction]], rtol=1e-6)

    def test_improved_weight_counts_the_known_positive_as_a_draw(self):
        kwargs = dict(
            negative_log_q=np.log([0.5, 0.5]).astype(np.float32),
            positive_log_q=np.log([0.25]).astype(np.float32),
        )
        inputs = (np.zeros([1], np.float32), np.zeros([1, 2], np.float32))
        self.assertAllClose(
            losses.improved_weight(*inputs, known_positives=np.array([[False, True]]), **kwargs),
            [3.0 / 7.0],
        )
        # The same column through negative_mask is no draw: n = 1.
        self.assertAllClose(
            losses.improved_weight(*inputs, negative_mask=np.array([[True, False]]), **kwargs),
            [0.6],
        )

    @parameterized.product(correction=losses.CORRECTIONS, seed=[0, 1], per_row_log_q=[False, True])
    def test_against_numpy(self, correction, seed, per_row_log_q):
        pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(
            seed, per_row_log_q=per_row_log_q
        )
        known = np.random.default_rng(seed + 10).random(neg.shape) < 0.3
        known[1] = True  # Every negative of row 1 a known positive: loss 0 but "improved"'s n.
        got = losses.sampled_softmax_loss(
            pos,
            neg,
            correction=correction,
            negative_log_q=neg_log_q,
            positive_log_q=pos_log_q,
            negative_mask=mask,
            known_positives=known,
        )
        want, _ = masked_reference(pos, neg, correction, neg_log_q, pos_log_q, mask, known)
        self.assertAllClose(got, want, rtol=1e-5, atol=1e-6)
        layer = losses.SampledSoftmaxLoss(correction)
        self.assertAllClose(
            layer(pos, neg, neg_log_q, pos_log_q, mask, known_positives=known),
            want,
            rtol=1e-5,
            atol=1e-6,
        )

    def test_no_known_positive_changes_nothing(self):
        pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(3)
        for correction in losses.CORRECTIONS:
            self.assertAllClose(
                losses.sampled_softmax_loss(
                    pos,
                    neg,
                    correction=correction,
                    negative_log_q=neg_log_q,
                    positive_log_q=pos_log_q,
                    negative_mask=mask,
                    known_positives=np.zeros(neg.shape, bool),
                ),
                losses.sampled_softmax_loss(
                    pos,
                    neg,
                    correction=correction,
                    negative_log_q=neg_log_q,
                    positive_log_q=pos_log_q,
                    negative_mask=mask,
                ),
            )

    def test_hard_negatives_never_mine_a_known_positive(self):
        # Column 0 has the largest logit but is known; with k = 2 the kept columns are 1 and
        # 2 and n stays 4 (the valid columns before both masks).
        neg = np.array([[9.0, 3.0, 2.0, 1.0]], np.float32)
        mask = np.ones_like(neg, bool)
        known = np.array([[True, False, False, False]])
        valid, num_valid = formulas.mask_known_positives(_ops.TF, neg, mask, known)
        kept, kept_mask, _, n = formulas.hard_negatives(
            _ops.TF, neg, valid, None, 2, num_valid=num_valid
        )
        self.assertAllEqual(kept, [[3.0, 2.0]])
        self.assertAllEqual(kept_mask, [[True, True]])
        self.assertAllEqual(n, [4.0])
        # Fewer valid columns than k: a known column may be taken, but stays masked.
        kept, kept_mask, _, _ = formulas.hard_negatives(
            _ops.TF, neg, valid, None, 4, num_valid=num_valid
        )
        self.assertAllEqual(kept_mask, [[True, True, True, False]])

    def test_errors_name_the_argument(self):
        pos, neg = np.zeros([2], np.float32), np.zeros([2, 3], np.float32)
        with self.assertRaisesRegex(
            ValueError,
            r"`known_positives` must have the shape of "
            r"`negative_logits`.*received known_positives with shape "
            r"\(2, 1\) and negative_logits with shape \(2, 3\)",
        ):
            losses.sampled_softmax_loss(
                pos, neg, correction="none", known_positives=np.zeros([2, 1], bool)
            )
        with self.assertRaisesRegex(ValueError, r"received known_positives with shape \(3,\)"):
            losses.sampled_softmax_loss(
                pos, neg, correction="none", known_positives=np.zeros([3], bool)
            )
        with self.assertRaisesRegex(
            TypeError,
            r"`known_positives` must be a bool tensor.*"
            r"received known_positives with dtype float32",
        ):
            losses.sampled_softmax_loss(
                pos, neg, correction="none", known_positives=np.zeros([2, 3], np.float32)
            )


class IdMaskTest(tf.test.TestCase, parameterized.TestCase):
    """`negatives.known_positive_mask` against brute force."""

    @parameterized.product(
        seed=[0, 1, 2], per_row=[False, True], history=[False, True], padding=[False, True]
    )
    def test_against_brute_force(self, seed, per_row, history, padding):
        rng = np.random.default_rng(seed)
        batch, num, num_items = 12, 7, 15
        positive_ids = rng.integers(1, num_items, batch)
        query_ids = rng.integers(100, 104, batch)  # 4 users, about 3 rows each.
        negative_ids = rng.integers(0, num_items, (batch, num) if per_row else num)
        known_ids = rng.integers(0, num_items, (batch, 3)) if history else None
        valid = rng.random(batch) > 0.3 if padding else None
        got = negatives.known_positive_mask(positive_ids, negative_ids, query_ids, known_ids, valid)
        self.assertAllEqual(
            got, known_reference(positive_ids, negative_ids, query_ids, known_ids, valid)
        )

    def test_strings_and_no_query_ids(self):
        got = negatives.known_positive_mask(
            tf.constant(["a", "b", "c"]),
            tf.constant([["a", "b"], ["c", "z"], ["b", "c"]]),
            query_ids=tf.constant(["u", "u", "v"]),
            known_positive_ids=tf.constant([["z"], ["q"], ["a"]]),
        )
        self.assertAllEqual(got, [[True, True], [False, True], [False, True]])
        # Without query ids each row is its own query: its positive and its own history.
        got = negatives.known_positive_mask(
            tf.constant([5, 6]), tf.constant([5, 6, 7]), known_positive_ids=tf.constant([[7], [0]])
        )
        self.assertAllEqual(got, [[True, False, True], [False, True, False]])

    def test_under_xla_and_for_an_empty_batch(self):
        mask = tf.function(negatives.known_positive_mask, jit_compile=True)
        self.assertAllEqual(
            mask(
                tf.constant([5, 6, 7, 5]), tf.constant([5, 6, 7, 8, 0]), tf.constant([1, 1, 2, 3])
            ),
            [
                [True, True, False, False, False],
                [True, True, False, False, False],
                [False, False, True, False, False],
                [True, False, False, False, False],
            ],
        )
        self.assertEqual(
            negatives.known_positive_mask(
                tf.zeros([0], tf.int64), tf.constant([5, 6], tf.int64)
            ).shape,
            (0, 2),
        )

    def test_compiled_memory_is_linear(self):
        # The synthetic preset's SASRec step: 6,400 positions (128 sequences of 50), 256
        # negatives each, 6,400 known pairs. A [positions * negatives, pairs] int32 array (how
        # XLA lowers a searchsorted) would take 42 GB; the compiled function's largest array
        # is [6400, 256], and it runs in well under 1 GB.
        rows, num, items = 6400, 256, 3000
        rng = np.random.default_rng(0)
        row_queries = np.repeat(np.arange(128, dtype=np.int64) * 7 + 3, rows // 128)
        known_items = rng.integers(1, items, rows)
        negative_ids = rng.integers(0, items, (rows, num))
        valid = rng.random(rows) > 0.1
        args = [
            tf.constant(x) for x in (row_queries, negative_ids, row_queries, known_items, valid)
        ]
        mask = tf.function(
            lambda *a: formulas.known_positive_ids_mask(_ops.TF, *a), jit_compile=True
        )
        hlo = mask.experimental_get_compiler_ir(*args)(stage="hlo")
        sizes = [
            int(np.prod([int(d) for d in dims.split(",") if d]))
            for dims in re.findall(r"\b(?:pred|[suf](?:8|16|32|64))\[([\d,]*)\]", hlo)
        ]
        self.assertGreater(len(sizes), 10)
        self.assertEqual(max(sizes), rows * num)
        known = {(q, d) for q, d, v in zip(row_queries, known_items, valid) if v}
        want = np.array(
            [
                [(q, d) in known for d in row]
                for q, row in zip(row_queries[::50], negative_ids[::50])
            ]
        )
        got = mask(*args)
        self.assertAllEqual(got[::50], want)
        self.assertGreater(int(tf.reduce_sum(tf.cast(got, tf.int32))), 1000)

    def test_jax_and_unknown_shapes(self):
        # Keras 3 ops on JAX, compiled (jax.jit): the same mask as TensorFlow's, and no array
        # above [batch, n] in its StableHLO. Traced with unknown shapes (31 search steps), the
        # TensorFlow graph gives the same mask.
        rng = np.random.default_rng(1)
        row_queries = rng.integers(0, 40, 300)
        negative_ids = rng.integers(0, 50, (300, 20))
        known_queries = np.concatenate([row_queries, rng.integers(0, 40, 500)])
        known_items = rng.integers(0, 50, 800)
        valid = rng.random(800) > 0.2
        arrays = (row_queries, negative_ids, known_queries, known_items, valid)
        want = formulas.known_positive_ids_mask(_ops.TF, *[tf.constant(x) for x in arrays])
        unknown = tf.function(
            lambda *a: formulas.known_positive_ids_mask(_ops.TF, *a),
            input_signature=[
                tf.TensorSpec([None] * x.ndim, x.dtype) for x in map(np.asarray, arrays)
            ],
        )
        self.assertAllEqual(unknown(*arrays), want)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "arrays.npz")
            np.savez(path, *[np.asarray(x, np.int32) if x.dtype != bool else x for x in arrays])
            script = (
                "import re, sys, jax, numpy as np\n"
                "from keras_logq import _ops\n"
                "from logq_core import formulas\n"
                "arrays = np.load(sys.argv[1])\n"
                "args = [arrays[f'arr_{i}'] for i in range(5)]\n"
                "f = jax.jit(lambda *a: formulas.known_positive_ids_mask(_ops.OPS, *a))\n"
                "text = f.lower(*args).as_text()\n"
                "sizes = [int(np.prod([int(d) for d in s.split('x')[:-1]] or [1]))\n"
                "         for s in re.findall(r'tensor<([0-9x]*[a-z][0-9]*)>', text)]\n"
                "np.save(sys.argv[1] + '.out.npy', np.asarray(f(*args)))\n"
                "print(max(sizes))\n"
            )
            result = subprocess.run(
                [sys.executable, "-c", script, path],
                capture_output=True,
                text=True,
                timeout=120,
                env=dict(os.environ, KERAS_BACKEND="jax", TF_USE_LEGACY_KERAS="0"),
            )
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            self.assertEqual(int(result.stdout.split()[-1]), 300 * 20)
            self.assertAllEqual(np.load(path + ".out.npy"), want)


def _two_users(seed=0):
    """6 queries of 3 users (two rows each) against 8 candidates, ids repeated."""
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(6, 4)).astype(np.float32)
    candidates = rng.normal(size=(8, 4)).astype(np.float32)
    ids = np.array([1, 2, 3, 4, 2, 5, 6, 3], np.int64)
    users = np.array([7, 7, 8, 8, 9, 9], np.int64)
    probability = rng.uniform(0.01, 0.3, size=8).astype(np.float32)
    return query, candidates, ids, users, probability


class TaskTest(tf.test.TestCase, parameterized.TestCase):
    """LogQRetrieval's query_ids, known_positive_ids and known_positives."""

    @parameterized.product(correction=losses.CORRECTIONS, num_hard_negatives=[None, 3])
    def test_candidate_columns_against_numpy(self, correction, num_hard_negatives):
        query, candidates, ids, users, probability = _two_users()
        history = np.array([[6], [0], [0], [0], [1], [0]])  # User 7 saw item 6, user 9 item 1.
        task = LogQRetrieval(correction=correction, num_hard_negatives=num_hard_negatives)
        got = task(
            query,
            candidates,
            candidate_ids=ids,
            query_ids=users,
            known_positive_ids=history,
            candidate_sampling_probability=probability,
        )
        scores = (query @ candidates.T).astype(np.float64)
        valid = ~np.eye(6, 8, dtype=bool)
        if correction == "improved":
            valid &= ids[None, :] != ids[:6, None]
        known = known_reference(ids[:6], ids, users, history)
        self.assertAllEqual(known[0], [1, 1, 0, 0, 1, 0, 1, 0])  # Items 1, 2 and 6 of user 7.
        log_q = np.log(probability.astype(np.float64))
        want, _ = masked_reference(
            np.diag(scores[:, :6]),
            scores,
            correction,
            log_q,
            log_q[:6],
            valid,
            known,
            num_hard=num_hard_negatives,
        )
        self.assertAllClose(got, want.sum(), rtol=1e-5)
        # The explicit mask gives the same loss.
        explicit = LogQRetrieval(correction=correction, num_hard_negatives=num_hard_negatives)
        self.assertAllClose(
            explicit(
                query,
                candidates,
                candidate_ids=ids,
                known_positives=known,
                candidate_sampling_probability=probability,
            ),
            got,
            rtol=1e-6,
        )

    @parameterized.product(correction=losses.CORRECTIONS, kind=["in_batch", "uniform", "mixed"])
    def test_samplers_against_numpy(self, correction, kind):
        num_items = 12
        table = tf.random.normal([num_items, 4], seed=1)
        ids = tf.constant([3, 7, 3, 9, 5, 7], tf.int64)
        users = tf.constant([1, 1, 2, 2, 2, 3], tf.int64)
        query = tf.random.normal([6, 4], seed=2)
        embed = lambda i: tf.gather(table, i)  # noqa: E731
        q = np.linspace(1.0, 2.0, num_items)
        q /= q.sum()
        sampler = {
            "in_batch": lambda: negatives.InBatchSampler(probabilities=q, seed=3),
            "uniform": lambda: negatives.UniformSampler(num_items, 8, per_row=True, seed=3),
            "mixed": lambda: negatives.MixedSampler(num_items, 6, 4, probabilities=q, seed=3),
        }[kind]()
        got = LogQRetrieval(correction=correction, sampler=sampler)(
            query, embed(ids), candidate_ids=ids, candidate_embedding_fn=embed, query_ids=users
        )
        sampler.reset()
        neg = sampler(ids, ids, embed(ids), embedding_fn=embed)
        neg_embeddings = neg.embeddings
        qn = query.numpy()
        if isinstance(neg_embeddings, tuple) or len(neg.ids.shape) == 2:
            scores = np.einsum("qd,qkd->qk", qn, table.numpy()[neg.ids.numpy()])
        else:
            scores = qn @ neg_embeddings.numpy().T
        known = known_reference(ids.numpy(), neg.ids.numpy(), users.numpy())
        self.assertTrue(np.any(known & neg.mask.numpy()))  # Some are masked besides hits.
        want, _ = masked_reference(
            np.sum(qn * table.numpy()[ids.numpy()], axis=1),
            scores,
            correction,
            neg.log_q.numpy(),
            neg.positive_log_q.numpy(),
            neg.mask.numpy(),
            known,
            excludes=neg.log_q_excludes_positive,
        )
        self.assertAllClose(got, want.sum(), rtol=1e-5)

    def test_padding_rows_are_nobodys_positives(self):
        table = tf.random.normal([10, 4], seed=1)
        ids = tf.constant([3, 7, 1, 9], tf.int64)
        users = tf.constant([1, 1, 1, 2], tf.int64)
        pool = tf.constant([True, True, False, True])  # Row 2 is padding (id 1).
        sampler = negatives.UniformSampler(10, 10, per_row=True, seed=0)
        task = LogQRetrieval(correction="improved", sampler=sampler)
        task(
            tf.random.normal([4, 4], seed=2),
            tf.gather(table, ids),
            candidate_ids=ids,
            sample_weight=tf.constant([1.0, 1.0, 0.0, 1.0]),
            candidate_mask=pool,
            candidate_embedding_fn=lambda i: tf.gather(table, i),
            query_ids=users,
        )
        got = negatives.known_positive_mask(ids, tf.constant([1, 3, 7, 9]), users, valid_rows=pool)
        self.assertAllEqual(got[0], [False, True, True, False])

    def test_errors_name_the_argument(self):
        query, candidates, ids, users, _ = _two_users()
        task = LogQRetrieval(correction="none")
        with self.assertRaisesRegex(
            ValueError,
            r"`query_ids` and `query_embeddings` disagree "
            r"in size: query_ids.shape=\(5,\)",
        ):
            task(query, candidates, candidate_ids=ids, query_ids=users[:5])
        with self.assertRaisesRegex(
            TypeError,
            r"`query_ids` must be an integer or string "
            r"tensor of item ids; received query_ids with dtype float32",
        ):
            task(query, candidates, candidate_ids=ids, query_ids=users.astype(np.float32))
        with self.assertRaisesRegex(
            ValueError,
            r"`query_ids` .*needs `candidate_ids`; "
            r"received candidate_ids=None",
        ):
            task(query, candidates, query_ids=users)
        with self.assertRaisesRegex(
            ValueError,
            r"`known_positive_ids` must have rank 2; "
            r"received known_positive_ids with shape \(6,\)",
        ):
            task(query, candidates, candidate_ids=ids, known_positive_ids=users)
        with self.assertRaisesRegex(
            TypeError,
            r"`known_positive_ids` must be ids of the kind "
            r"of `candidate_ids`; received known_positive_ids with "
            r"dtype string and candidate_ids with dtype int64",
        ):
            task(query, candidates, candidate_ids=ids, known_positive_ids=[["a"]] * 6)
        with self.assertRaisesRegex(
            ValueError,
            r"`known_positives` and `candidate_embeddings` "
            r"disagree in size: known_positives.shape=\(6, 6\)",
        ):
            task(query, candidates, known_positives=np.zeros([6, 6], bool))
        with self.assertRaisesRegex(
            TypeError,
            r"`known_positives` must be a bool tensor.*"
            r"received known_positives with dtype int64",
        ):
            task(query, candidates, known_positives=np.zeros([6, 8], np.int64))
        sampled = LogQRetrieval(correction="none", sampler=negatives.InBatchSampler())
        with self.assertRaisesRegex(
            ValueError,
            r"`known_positives` marks candidate columns.*"
            r"Received known_positives that is not None",
        ):
            sampled(
                query, candidates[:6], candidate_ids=ids[:6], known_positives=np.zeros([6, 6], bool)
            )


class GlobalBatchTest(tf.test.TestCase, parameterized.TestCase):
    """Under tf.distribute, a global in-batch pool masks the known positives of every
    replica's rows: two replicas give the loss of one on the whole batch."""

    @parameterized.parameters(("improved", True), ("improved", False), ("standard", True))
    def test_two_replicas_equal_one(self, correction, by_query):
        strategy = conftest.mirrored_strategy()
        rng = np.random.default_rng(0)
        ids = tf.constant([3, 7, 5, 9, 7, 3, 2, 4], tf.int64)
        users = tf.constant([1, 2, 3, 4, 1, 2, 3, 4], tf.int64)  # Each user on both replicas.
        history = tf.constant(rng.integers(1, 10, (8, 2)), tf.int64)
        query = tf.constant(rng.normal(size=(8, 4)), tf.float32)
        table = tf.constant(rng.normal(size=(10, 4)), tf.float32)
        q = np.full(10, 0.1)

        def loss(task, rows):
            query_rows, id_rows, user_rows, history_rows = rows
            return task(
                query_rows,
                tf.gather(table, id_rows),
                candidate_ids=id_rows,
                query_ids=user_rows if by_query else None,
                known_positive_ids=None if by_query else history_rows,
            )

        want = loss(
            LogQRetrieval(
                correction=correction,
                sampler=negatives.InBatchSampler(probabilities=q, global_batch=True),
            ),
            (query, ids, users, history),
        )
        with strategy.scope():
            task = LogQRetrieval(
                correction=correction,
                sampler=negatives.InBatchSampler(probabilities=q, global_batch=True),
            )
        rows = strategy.experimental_distribute_values_from_function(
            lambda ctx: tuple(
                x[4 * ctx.replica_id_in_sync_group :][:4] for x in (query, ids, users, history)
            )
        )
        got = tf.function(
            lambda rows: strategy.reduce(
                "SUM", strategy.run(lambda *r: loss(task, r), args=rows), axis=None
            )
        )(rows)
        self.assertAllClose(got, want, rtol=1e-5)


class UnbiasednessTest(tf.test.TestCase, parameterized.TestCase):
    """On a known catalog (Zipf q over 50 items), Z_hat with known positives masked has the
    expectation sum_{d not in S_u} e^{s_d}; recounting n after the mask does not."""

    POSITIVE = 3
    KNOWN = (0, 1, 3, 7)  # S_u: the positive and three other positives, two of them head items.

    def _z_hat(self, ids, log_q_prime, mask, recount=False):
        """Z_hat per row through the library's "improved" weight, w = Z_hat / (1 + Z_hat) at
        s_p = 0."""
        scores = reference.SCORES[ids]
        known = np.isin(ids, self.KNOWN)
        kwargs = (
            dict(negative_mask=mask & ~known)
            if recount
            else dict(negative_mask=mask, known_positives=known)
        )
        weight = (
            losses.improved_weight(
                np.zeros(len(ids), np.float32),
                scores.astype(np.float32),
                negative_log_q=log_q_prime.astype(np.float32),
                log_q_excludes_positive=True,
                **kwargs,
            )
            .numpy()
            .astype(np.float64)
        )
        return weight / (1.0 - weight)

    def _check(self, z_hat, expected, factor=1.0):
        mean, error = z_hat.mean(), z_hat.std() / np.sqrt(len(z_hat))
        self.assertLess(abs(mean - factor * expected), 4 * error)

    @parameterized.parameters(0, 1)
    def test_per_draw_proposal(self, seed):
        rows, draws = 4000, 20
        rng = np.random.default_rng(seed)
        q = reference.ZIPF_Q
        ids = rng.choice(reference.NUM_ITEMS, size=(rows, draws), p=q)
        mask = ids != self.POSITIVE  # The accidental hits.
        log_q_prime = np.log(q[ids]) - np.log1p(-q[self.POSITIVE])
        z_u = reference.partition_without(self.POSITIVE) - sum(
            np.exp(float(reference.SCORES[d])) for d in self.KNOWN if d != self.POSITIVE
        )
        self._check(self._z_hat(ids, log_q_prime, mask), z_u)
        # AND-ing the known positives into the validity mask: Q'' = Q / (1 - Q(S_u)) is the
        # law of the remaining draws, so E[Z_hat] = Z_u (1 - Q(p)) / (1 - Q(S_u)), 1.62 here.
        factor = (1.0 - q[self.POSITIVE]) / (1.0 - q[list(self.KNOWN)].sum())
        self.assertGreater(factor, 1.5)
        biased = self._z_hat(ids, log_q_prime, mask, recount=True)
        self._check(biased, z_u, factor)
        self.assertGreater(biased.mean(), 1.4 * z_u)

    @parameterized.parameters(0, 1)
    def test_exact_mixture(self, seed):
        # The mixed sampler's expected-draws form: u uniform and b q-draws per row,
        # log Q' = log D - log n with D(d) = u / |D| + b q(d) (`formulas.mixture_log_q`).
        rows, uniform, in_batch = 4000, 10, 10
        rng = np.random.default_rng(seed)
        q = reference.ZIPF_Q
        ids = np.concatenate(
            [
                rng.integers(0, reference.NUM_ITEMS, (rows, uniform)),
                rng.choice(reference.NUM_ITEMS, size=(rows, in_batch), p=q),
            ],
            1,
        )
        mask = ids != self.POSITIVE
        log_q_prime, _ = formulas.mixture_log_q(
            _ops.TF,
            tf.constant(np.log(q[ids]), tf.float32),
            tf.fill([rows], float(np.log(q[self.POSITIVE]))),
            tf.constant(mask),
            reference.NUM_ITEMS,
            float(uniform),
            float(in_batch),
        )
        z_u = reference.partition_without(self.POSITIVE) - sum(
            np.exp(float(reference.SCORES[d])) for d in self.KNOWN if d != self.POSITIVE
        )
        self._check(self._z_hat(ids, log_q_prime.numpy(), mask), z_u)
        self.assertGreater(
            self._z_hat(ids, log_q_prime.numpy(), mask, recount=True).mean(), 1.2 * z_u
        )


NUM_ITEMS = 30
# A Zipf-like q over ids 1..NUM_ITEMS (row 0: padding, never drawn).
Q = np.concatenate([[1.0], 1.0 / np.arange(1, NUM_ITEMS + 1)])
Q[1:] /= Q[1:].sum()
Q = Q.astype(np.float32)


class SASRecTest(tf.test.TestCase, parameterized.TestCase):
    """SASRec's loss with `mask_known_positives`: each position's query is its sequence."""

    # Two left-padded windows and one full one; sequences 0 and 2 repeat targets 4 and 9, and
    # every sequence shares items with the others (in-batch negatives that are positives).
    FEATURES = {
        "inputs": tf.constant([[0, 0, 3, 4, 5, 4], [0, 7, 8, 9, 2, 5], [1, 9, 3, 6, 9, 2]]),
        "targets": tf.constant([[0, 0, 4, 5, 4, 6], [0, 8, 9, 2, 5, 1], [9, 3, 6, 9, 2, 4]]),
    }

    def _model(self, mask_known_positives, **settings):
        objective = make_objective(
            NUM_ITEMS,
            probabilities=Q,
            seed=1,
            num_negatives=10_000,
            mask_known_positives=mask_known_positives,
            **settings,
        )
        model = SASRec(NUM_ITEMS, objective, max_length=6, dim=8, num_blocks=1, dropout=0.0)
        model(self.FEATURES["inputs"])
        return model

    def test_sequence_ids(self):
        self.assertAllEqual(sequence_ids(tf.constant([3, 2])), [0, 0, 1, 1, 2, 2])

    @parameterized.parameters(
        dict(correction="none"),
        dict(correction="standard"),
        dict(correction="improved"),
        dict(correction="improved", deduplicate=True),  # Horvitz-Thompson's log Q'.
        dict(correction="improved", num_hard_negatives=4),
    )
    def test_equals_logq_retrieval_on_the_valid_positions(self, **settings):
        # An in-batch pool cap above the batch's positions: no draw is random, so the loss can
        # be built by hand: LogQRetrieval on the 15 valid positions, query = their sequence.
        settings["negatives"] = "in_batch"
        model = self._model(True, **settings)
        targets = self.FEATURES["targets"]
        valid = tf.not_equal(targets, 0)
        sequence = model(self.FEATURES["inputs"], training=True)
        rows = tf.cast(tf.boolean_mask(targets, valid), tf.int64)
        queries = tf.boolean_mask(tf.repeat(tf.range(3, dtype=tf.int64)[:, None], 6, axis=1), valid)
        self.assertAllEqual(queries, [0] * 4 + [1] * 5 + [2] * 6)
        task = model.objective.task
        hand = LogQRetrieval(
            correction=task.correction,
            sampler=task.sampler,
            num_hard_negatives=task.num_hard_negatives,
        )
        want = (
            hand(
                tf.boolean_mask(sequence, valid),
                model.output_embedding(rows),
                candidate_ids=rows,
                candidate_embedding_fn=model.output_embedding,
                query_ids=queries,
            )
            / 15.0
        )
        got = model.compute_loss(self.FEATURES, training=True)
        self.assertAllClose(got, want, rtol=1e-5)
        # Under XLA too (the synthetic preset's step is compiled).
        compiled = tf.function(
            lambda: model.compute_loss(self.FEATURES, training=True), jit_compile=True
        )
        self.assertAllClose(compiled(), want, rtol=1e-5)
        # Masking changes the loss: targets of the same sequence were negatives before.
        without = self._model(False, **settings)
        without.set_weights(model.get_weights())
        self.assertNotAllClose(without.compute_loss(self.FEATURES, training=True), got)

    def test_masks_exactly_the_sequences_other_targets(self):
        # The library's id mask on the 15 valid targets: position (0, 2) (target 4) has every
        # pool entry equal to a target of sequence 0 (4, 5, 6) masked, from any sequence.
        targets = tf.cast(
            tf.boolean_mask(self.FEATURES["targets"], self.FEATURES["targets"] > 0), tf.int64
        )
        queries = tf.constant([0] * 4 + [1] * 5 + [2] * 6, tf.int64)
        known = negatives.known_positive_mask(targets, targets, queries).numpy()
        self.assertAllEqual(
            known, known_reference(targets.numpy(), targets.numpy(), queries.numpy())
        )
        self.assertAllEqual(targets.numpy()[known[0]], [4, 5, 4, 6, 5, 6, 4])


class TwoTowerTest(tf.test.TestCase, parameterized.TestCase):
    """The two-tower loss with `mask_known_positives`: query = the user, known ids = its
    history."""

    # Users 1 and 2 have two examples each; histories hold other rows' items (padding 0).
    FEATURES = {
        "user": tf.constant([1, 2, 1, 3, 2, 4]),
        "history": tf.constant([[0, 5], [3, 7], [5, 11], [0, 0], [7, 12], [4, 13]]),
        "item": tf.constant([11, 12, 13, 3, 4, 5]),
    }

    @parameterized.product(
        negatives_kind=["in_batch", "mixed"], correction=["none", "standard_negatives", "improved"]
    )
    def test_equals_logq_retrieval_with_users_and_histories(self, negatives_kind, correction):
        objective = make_objective(
            NUM_ITEMS,
            negatives=negatives_kind,
            correction=correction,
            probabilities=Q,
            seed=3,
            num_negatives=16,
            mask_known_positives=True,
        )
        model = TwoTower(5, NUM_ITEMS, objective, dim=8)
        model(self.FEATURES)
        features = self.FEATURES
        got = model.compute_loss(features, training=False)
        conftest.reset_draws(objective)  # The hand-built call draws what the model's drew.
        task = objective.task
        items = tf.cast(features["item"], tf.int64)
        want = (
            LogQRetrieval(correction=correction, sampler=task.sampler)(
                model.query_embeddings(features),
                model.candidate_embeddings(items),
                candidate_ids=items,
                candidate_embedding_fn=model.candidate_embeddings,
                query_ids=features["user"],
                known_positive_ids=features["history"],
            )
            / 6.0
        )
        self.assertAllClose(got, want, rtol=1e-5)
        if negatives_kind == "in_batch":
            # Row 0 (user 1: items 11, 13, history 5): pool 11, 12, 13, 3, 4, 5 -> 11, 13 and 5.
            known = negatives.known_positive_mask(
                items, items, features["user"], features["history"]
            ).numpy()
            self.assertAllEqual(known[0], [True, False, True, False, False, True])
            plain = make_objective(
                NUM_ITEMS,
                negatives="in_batch",
                correction=correction,
                probabilities=Q,
                num_negatives=16,
            )
            self.assertNotAllClose(
                plain(model.query_embeddings(features), items, model.candidate_embeddings), got
            )

    @parameterized.parameters("in_batch", "uniform", "mixed")
    def test_padding_id_is_never_drawn(self, negatives_kind):
        # The history's padding 0 is never a negative: the samplers draw ids from 1, and the
        # in-batch pool holds the batch's items (>= 1).
        objective = make_objective(
            5,
            negatives=negatives_kind,
            correction="improved",
            probabilities=np.full(6, 0.2, np.float32),
            seed=0,
            num_negatives=512,
        )
        ids = tf.constant([1, 2, 3, 4, 5, 1], tf.int64)
        draws = objective.sampler(
            ids,
            ids,
            tf.zeros([6, 2]),
            embedding_fn=lambda i: tf.zeros(tf.concat([tf.shape(i), [2]], 0)),
        ).ids.numpy()
        self.assertEqual(draws.min(), 1)
        self.assertEqual(draws.max(), 5)


class ObjectiveOptionTest(tf.test.TestCase):
    """`mask_known_positives` of the objective: config round trip, and the losses that take it."""

    def test_config_round_trip(self):
        objective = make_objective(
            NUM_ITEMS,
            negatives="mixed",
            num_negatives=8,
            probabilities=Q,
            mask_known_positives=True,
        )
        restored = RetrievalObjective.from_config(objective.get_config())
        self.assertTrue(restored.mask_known_positives)
        self.assertEqual(restored.get_config(), objective.get_config())
        self.assertFalse(
            make_objective(NUM_ITEMS, probabilities=Q).get_config()["mask_known_positives"]
        )

    def test_errors_name_the_argument(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`mask_known_positives` masks the negatives "
            r"of the sampled softmax \(loss='sampled_softmax'\); "
            r"received mask_known_positives=True with loss='gbce'",
        ):
            make_objective(NUM_ITEMS, loss="gbce", mask_known_positives=True)
        with self.assertRaisesRegex(
            TypeError,
            r"`mask_known_positives` must be a bool; "
            r"received mask_known_positives='yes'",
        ):
            make_objective(NUM_ITEMS, probabilities=Q, mask_known_positives="yes")
        objective = make_objective(NUM_ITEMS, loss="full_softmax")
        table = tf.zeros([NUM_ITEMS + 1, 4])
        with self.assertRaisesRegex(
            ValueError,
            r"`query_ids` masks known positives among the "
            r"negatives of the sampled softmax; received query_ids "
            r"with loss='full_softmax'",
        ):
            objective(
                tf.zeros([2, 4]),
                tf.constant([1, 2]),
                lambda i: tf.gather(table, i),
                all_item_embeddings=lambda: table,
                query_ids=tf.constant([0, 0]),
            )


class GlobalSequenceIdsTest(tf.test.TestCase):
    """Under tf.distribute with a global in-batch pool, SASRec's sequence ids are unique across
    replicas: two replicas give the loss of one on the whole batch."""

    def test_two_replicas_equal_one(self):
        strategy = conftest.mirrored_strategy()
        rng = np.random.default_rng(0)
        targets = tf.constant([[0, 4, 5, 4], [7, 8, 9, 2], [0, 0, 4, 6], [9, 5, 9, 2]], tf.int64)
        query = tf.constant(rng.normal(size=(16, 4)), tf.float32)
        table = tf.constant(rng.normal(size=(NUM_ITEMS + 1, 4)), tf.float32)

        def loss(objective, query_rows, target_rows):
            flat = tf.reshape(target_rows, [-1])
            return objective(
                query_rows,
                flat,
                lambda i: tf.gather(table, i),
                example_mask=tf.not_equal(flat, 0),
                query_ids=sequence_ids(tf.shape(target_rows)),
            )

        def objective():
            return make_objective(
                NUM_ITEMS,
                negatives="in_batch",
                correction="improved",
                probabilities=Q,
                num_negatives=10_000,
                global_batch=True,
                mask_known_positives=True,
            )

        want = loss(objective(), query, targets)
        with strategy.scope():
            distributed = objective()
        rows = strategy.experimental_distribute_values_from_function(
            lambda ctx: (
                query[8 * ctx.replica_id_in_sync_group :][:8],
                targets[2 * ctx.replica_id_in_sync_group :][:2],
            )
        )
        got = tf.function(
            lambda rows: strategy.reduce(
                "SUM", strategy.run(lambda *r: loss(distributed, *r), args=rows), axis=None
            )
        )(rows)
        self.assertAllClose(got, want, rtol=1e-5)
        # Replica 1's sequence 0 is not replica 0's: with both numbered 0 the loss differs.
        same = tf.function(
            lambda rows: strategy.reduce(
                "SUM",
                strategy.run(
                    lambda q, t: distributed(
                        q,
                        tf.reshape(t, [-1]),
                        lambda i: tf.gather(table, i),
                        example_mask=tf.not_equal(tf.reshape(t, [-1]), 0),
                        query_ids=tf.repeat(tf.range(2, dtype=tf.int64), 4),
                    ),
                    args=rows,
                ),
                axis=None,
            )
        )(rows)
        self.assertNotAllClose(same, want)


def test_options_table_rows():
    # The user guide's options table, as benchmarks.options_synthetic prints it from
    # docs/results/options_synthetic.json: mean +- std over seeds, NDCG@10 paired by seed.
    import json  # pylint: disable=import-outside-toplevel

    from benchmarks import options_synthetic  # pylint: disable=import-outside-toplevel

    with open(options_synthetic.RESULTS) as f:
        runs = json.load(f)["runs"]
    assert options_synthetic.row("hard32", runs) == (
        "| hard32 | 0.0493 ± 0.0013 | 0.0259 ± 0.0016 | -0.0091 (SE 0.0028) |"
    )
    assert options_synthetic.row("mask_known_positives_nojit", runs, "default_nojit") == (
        "| mask_known_positives_nojit | 0.0660 ± 0.0133 | 0.0333 ± 0.0068 | +0.0061 (SE 0.0039) |"
    )
    # Under XLA (the preset's default), against the default.
    assert options_synthetic.row("mask_known_positives", runs) == (
        "| mask_known_positives | 0.0897 ± 0.0139 | 0.0445 ± 0.0083 | +0.0096 (SE 0.0020) |"
    )


if __name__ == "__main__":
    tf.test.main()
