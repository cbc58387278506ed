"""Tests of LogQRetrieval: parity with tfrs.tasks.Retrieval, the improved path, samplers, config."""

import os
import tempfile

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs
from absl.testing import parameterized

from tests import reference
from tfrs_logq import frequency
from tfrs_logq import losses
from tfrs_logq import negatives
from tfrs_logq.tasks import LogQRetrieval


def _batch(seed=0, num_queries=6, num_candidates=8, dim=4):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(num_queries, dim)).astype(np.float32)
    candidates = rng.normal(size=(num_candidates, dim)).astype(np.float32)
    ids = np.array([1, 2, 1, 3, 2, 4, 5, 1][:num_candidates], np.int64)  # Repeated ids.
    probability = rng.uniform(0.01, 0.3, size=num_candidates).astype(np.float32)
    weight = rng.uniform(0.5, 2.0, size=num_queries).astype(np.float32)
    return query, candidates, ids, probability, weight


def _metrics(candidates, ids):
    dataset = tf.data.Dataset.from_tensor_slices((ids, candidates)).batch(4)
    return dict(
        metrics=tfrs.metrics.FactorizedTopK(candidates=dataset, ks=(1, 3)),
        batch_metrics=[tf.keras.metrics.TopKCategoricalAccuracy(k=2, name="top2")],
        loss_metrics=[tf.keras.metrics.Mean(name="loss_mean")],
    )


def _results(task):
    values = [m.result() for m in task._batch_metrics + task._loss_metrics]  # pylint: disable=protected-access
    for metric in task.factorized_metrics:
        values.extend(metric.result())
    return [float(x) for x in values]


class ScaledAndMinedTest(tf.test.TestCase, parameterized.TestCase):
    """log_q_scale (lambda) and hard negatives with every correction, against numpy."""

    @parameterized.product(
        correction=["standard", "standard_negatives", "improved", "none"],
        log_q_scale=[1.0, 0.5, 0.0],
        num_hard_negatives=[None, 3],
    )
    def test_against_numpy(self, correction, log_q_scale, num_hard_negatives):
        query, candidates, ids, probability, weight = _batch()
        task = LogQRetrieval(
            correction=correction,
            log_q_scale=log_q_scale,
            num_hard_negatives=num_hard_negatives,
            remove_accidental_hits=True,
        )
        got = task(
            query,
            candidates,
            sample_weight=weight,
            candidate_ids=ids,
            candidate_sampling_probability=probability,
        )
        scores = (query @ candidates.T).astype(np.float64)
        mask = ids[None, :] != ids[:6, None]
        log_q = np.log(probability.astype(np.float64))
        want, _ = reference.sampled_softmax(
            np.diag(scores[:, :6]),
            scores,
            correction,
            log_q,
            log_q[:6],
            mask,
            log_q_scale=log_q_scale,
            num_hard=num_hard_negatives,
        )
        self.assertAllClose(got, np.sum(weight * want), rtol=1e-5)

    def test_lambda_zero_is_no_shift_and_mining_everything_is_no_mining(self):
        query, candidates, ids, probability, _ = _batch()
        call = dict(candidate_ids=ids, candidate_sampling_probability=probability)
        none = LogQRetrieval(correction="none", remove_accidental_hits=True)(
            query, candidates, **call
        )
        for correction in ("standard", "standard_negatives"):
            self.assertAllClose(
                LogQRetrieval(correction=correction, log_q_scale=0.0, remove_accidental_hits=True)(
                    query, candidates, **call
                ),
                none,
                rtol=1e-6,
            )
        for correction in ("standard", "improved"):
            full = LogQRetrieval(correction=correction, remove_accidental_hits=True)(
                query, candidates, **call
            )
            mined = LogQRetrieval(
                correction=correction, num_hard_negatives=8, remove_accidental_hits=True
            )(query, candidates, **call)
            self.assertAllClose(mined, full, rtol=1e-6)

    def test_mined_improved_with_a_mixed_sampler_matches_numpy(self):
        rng = np.random.default_rng(3)
        table = rng.normal(size=(30, 4)).astype(np.float32)
        q = rng.uniform(0.5, 2.0, size=30)
        q = (q / q.sum()).astype(np.float32)
        ids = np.array([3, 7, 3, 11, 20, 5], np.int64)
        query = rng.normal(size=(6, 4)).astype(np.float32)
        drawn = negatives.MixedSampler(30, 8, 6, probabilities=q, seed=4)(  # Same seeds,
            tf.constant(ids), tf.constant(ids)
        )  # same draws.
        task = LogQRetrieval(
            correction="improved",
            num_hard_negatives=4,
            log_q_scale=0.7,
            sampler=negatives.MixedSampler(30, 8, 6, probabilities=q, seed=4),
        )
        got = task(
            query,
            table[ids],
            candidate_ids=ids,
            candidate_embedding_fn=lambda i: tf.gather(table, i),
        )
        scores = query.astype(np.float64) @ table[drawn.ids.numpy()].T.astype(np.float64)
        want, _ = reference.sampled_softmax(
            np.sum(query * table[ids], axis=1),
            scores,
            "improved",
            drawn.log_q.numpy(),
            None,
            drawn.mask.numpy(),
            excludes=True,
            log_q_scale=0.7,
            num_hard=4,
        )
        self.assertAllClose(got, np.sum(want), rtol=1e-5)

    def _expected_gradient(self, num_hard_negatives, steps=300, rows=64, positive=2):
        """E[d loss / d s] over the catalog's scores (reference.SCORES), for rows whose
        positive is `positive` and whose 24 negatives are drawn per row from the Zipf q,
        "improved", by Monte Carlo; and the full softmax's gradient."""
        scores = tf.Variable(reference.SCORES[:, None])
        sampler = negatives.MixedSampler(
            reference.NUM_ITEMS,
            12,
            12,
            per_row=True,
            probabilities=reference.ZIPF_Q.astype(np.float32),
            seed=5,
        )
        task = LogQRetrieval(
            correction="improved", sampler=sampler, num_hard_negatives=num_hard_negatives
        )
        ids = tf.random.stateless_categorical(  # The in-batch half: other rows' positives.
            np.log(reference.ZIPF_Q)[None, :].astype(np.float32), rows, seed=[1, 2]
        )[0]
        ids = tf.concat([[positive], ids[1:]], axis=0)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = task(
                    tf.ones([rows, 1]),
                    tf.gather(scores, ids),
                    candidate_ids=ids,
                    candidate_embedding_fn=lambda i: tf.gather(scores, i),
                )
            return tape.gradient(loss, scores)

        total = np.zeros(reference.NUM_ITEMS)
        for _ in range(steps):
            total += tf.convert_to_tensor(step()).numpy()[:, 0]
        # Row 0's positive is `positive`; the other rows' positives differ: compare the
        # catalog-wide direction with the full softmax's over the same rows' positives.
        softmax = np.exp(reference.SCORES - reference.logsumexp(reference.SCORES))
        full = len(ids.numpy()) * softmax - np.bincount(ids.numpy(), minlength=reference.NUM_ITEMS)
        return total / steps, full

    def test_what_the_mined_gradient_converges_to(self):
        # Without mining, the improved loss's expected gradient over the catalog follows the
        # full softmax's (the negatives' part: the softmax's mass pushed down on every item).
        # Mining the top 4 of 24 corrected negatives concentrates that push on the items
        # with the largest s - log Q: the tail items that score well. Total variation from
        # the full softmax's direction, measured: 0.092 unmined (Monte Carlo and n = 24),
        # 0.138 keeping 12, 0.248 keeping 4, 0.353 keeping 1.
        pushed = {}
        for k in (None, 4):
            got, full = self._expected_gradient(k)
            down, want = np.maximum(got, 0.0), np.maximum(full, 0.0)
            pushed[k] = 0.5 * np.abs(down / down.sum() - want / want.sum()).sum()
        self.assertLess(pushed[None], 0.12, pushed)  # Total variation distance.
        self.assertGreater(pushed[4], 2 * pushed[None], pushed)

    def test_an_invalid_q_mined_away_still_gives_nan_under_xla(self):
        # XLA drops the graph assertion, so the bad Q becomes NaN; keeping the top 2 would
        # drop that column (its score is far below), but the loss must still be NaN.
        query, candidates, ids, probability, _ = _batch()
        candidates[7] = -50.0 * query.mean(axis=0)
        probability[7] = 2.0
        task = LogQRetrieval(correction="improved", num_hard_negatives=2)
        loss = tf.function(
            lambda: task(query, candidates, candidate_sampling_probability=(probability)),
            jit_compile=True,
        )()
        self.assertTrue(np.isnan(float(loss)))

    def test_config_round_trip(self):
        task = LogQRetrieval(correction="improved", num_hard_negatives=5, log_q_scale=0.25)
        restored = LogQRetrieval.from_config(task.get_config())
        self.assertEqual((restored.num_hard_negatives, restored.log_q_scale), (5, 0.25))


class ParityWithTfrsTest(tf.test.TestCase, parameterized.TestCase):
    """correction "none"/"standard" reproduce tfrs.tasks.Retrieval loss and metrics."""

    @parameterized.product(
        use_probability=[False, True],
        remove_accidental_hits=[False, True],
        temperature=[None, 0.5],
        use_weight=[False, True],
        num_hard_negatives=[None, 3],
        extra_candidates=[False, True],
    )
    def test_loss_and_metrics_equal_tfrs(
        self,
        use_probability,
        remove_accidental_hits,
        temperature,
        use_weight,
        num_hard_negatives,
        extra_candidates,
    ):
        query, candidates, ids, probability, weight = _batch(
            num_candidates=8 if extra_candidates else 6
        )
        candidates[1] = candidates[0]  # A tie, to see that ties are broken as TFRS does.
        kwargs = dict(
            temperature=temperature,
            num_hard_negatives=num_hard_negatives,
            remove_accidental_hits=remove_accidental_hits,
        )
        their_metrics = _metrics(candidates, ids)
        if extra_candidates:
            # TFRS passes all candidate ids to the factorized metric and crashes;
            # its metric is fed the positives' ids by hand below.
            factorized = their_metrics.pop("metrics")
            factorized.update_state(
                query,
                candidates[:6],
                true_candidate_ids=ids[:6],
                sample_weight=weight if use_weight else None,
            )
        theirs = tfrs.tasks.Retrieval(**kwargs, **their_metrics)
        correction = "standard" if use_probability else "none"
        ours = LogQRetrieval(**kwargs, correction=correction, **_metrics(candidates, ids))
        call = dict(
            candidate_ids=ids,
            sample_weight=weight if use_weight else None,
            candidate_sampling_probability=probability if use_probability else None,
        )
        want = theirs(query, candidates, **call)
        got = ours(query, candidates, **call)
        self.assertAllClose(got, want, rtol=1e-5)
        their_results = _results(theirs)
        if extra_candidates:
            their_results += [float(x) for x in factorized.result()]
        self.assertAllClose(_results(ours), their_results, rtol=1e-5)

    def test_large_batches_and_unknown_shapes_equal_tfrs_and_the_reference(self):
        # Above losses.FUSED_MIN_LOGITS "none" and "standard" run the fused kernel, and under
        # a tf.function with unknown batch sizes a tf.cond picks the kernel at run time; both
        # give TFRS's loss and gradient. "improved" (always fused) matches the direct formula.
        rng = np.random.default_rng(5)
        num_queries, num_candidates, dim = 1024, 2100, 8  # 2.15M logits.
        self.assertGreater(num_queries * num_candidates, losses.FUSED_MIN_LOGITS)
        query = tf.constant(rng.normal(size=(num_queries, dim)).astype(np.float32))
        candidates = tf.constant(rng.normal(size=(num_candidates, dim)).astype(np.float32))
        ids = tf.constant(rng.integers(0, 500, size=num_candidates))
        probability = tf.constant(rng.uniform(1e-4, 1e-2, size=num_candidates).astype(np.float32))

        def loss_and_gradient(task, query, candidates, **call):
            with tf.GradientTape() as tape:
                tape.watch(query)
                loss = task(query, candidates, **call)
            return loss, tape.gradient(loss, query)

        unknown = tf.function(loss_and_gradient, reduce_retracing=True)
        for correction, given in (("none", None), ("standard", probability)):
            ours = LogQRetrieval(correction=correction)
            # The second size relaxes the traced shapes to [None, 8].
            for size, columns in ((16, 24), (num_queries, num_candidates)):
                call = {}
                if given is not None:
                    call["candidate_sampling_probability"] = given[:columns]
                batch = (query[:size], candidates[:columns])
                want = loss_and_gradient(tfrs.tasks.Retrieval(), *batch, **call)
                for got in (loss_and_gradient(ours, *batch, **call), unknown(ours, *batch, **call)):
                    msg = f"{correction}, batch {size}"
                    self.assertAllClose(got[0], want[0], rtol=1e-5, msg=msg)
                    self.assertAllClose(got[1], want[1], rtol=1e-4, atol=1e-6, msg=msg)
        scores = tf.matmul(query, candidates, transpose_b=True)
        hits = ids.numpy()[:num_queries, None] != ids.numpy()[None, :]
        want = losses.sampled_softmax_loss(
            tf.linalg.diag_part(scores),
            scores,
            correction="improved",
            negative_log_q=tf.math.log(probability),
            positive_log_q=tf.math.log(probability[:num_queries]),
            negative_mask=hits,
        )
        got = LogQRetrieval(correction="improved")(
            query, candidates, candidate_sampling_probability=probability, candidate_ids=ids
        )
        self.assertAllClose(got, tf.reduce_sum(want), rtol=1e-5)

    def test_a_step_compiled_whole_keeps_its_accidental_hits(self):
        # Integer ids are coded by sort and binary search, which XLA compiles: a step under
        # jit_compile=True equals the eager one for every correction with hits removed.
        query, candidates, ids, probability, weight = _batch(num_candidates=8)
        call = dict(
            candidate_ids=tf.constant(ids),
            candidate_sampling_probability=tf.constant(probability),
            sample_weight=tf.constant(weight),
        )
        for correction in losses.CORRECTIONS:
            task = LogQRetrieval(correction=correction, remove_accidental_hits=True)

            def loss_and_gradient(query, candidates, task=task):
                with tf.GradientTape() as tape:
                    tape.watch(candidates)
                    loss = task(query, candidates, **call)
                return loss, tape.gradient(loss, candidates)

            want = loss_and_gradient(tf.constant(query), tf.constant(candidates))
            got = tf.function(loss_and_gradient, jit_compile=True)(
                tf.constant(query), tf.constant(candidates)
            )
            self.assertAllClose(got[0], want[0], rtol=1e-5, msg=correction)
            self.assertAllClose(got[1], want[1], rtol=1e-5, atol=1e-6, msg=correction)

    def test_default_correction_follows_tfrs(self):
        query, candidates, ids, probability, _ = _batch()
        for csp in (None, probability):
            want = tfrs.tasks.Retrieval()(query, candidates, candidate_sampling_probability=csp)
            got = LogQRetrieval()(query, candidates, candidate_sampling_probability=csp)
            self.assertAllClose(got, want, rtol=1e-5)

    def test_call_takes_tfrs_arguments_in_order_and_the_rest_by_keyword(self):
        import inspect  # pylint: disable=import-outside-toplevel

        ours = inspect.signature(LogQRetrieval.call).parameters
        theirs = inspect.signature(tfrs.tasks.Retrieval.call).parameters
        positional = [
            name for name, p in ours.items() if p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD
        ]
        self.assertEqual(positional, list(theirs))
        self.assertEqual(
            [name for name, p in ours.items() if p.kind == inspect.Parameter.KEYWORD_ONLY],
            [
                "training",
                "candidate_embedding_fn",
                "candidate_table",
                "candidate_mask",
                "query_ids",
                "known_positive_ids",
                "known_positives",
            ],
        )
        query, candidates, ids, probability, weight = _batch()
        # A ninth argument by position (once candidate_embedding_fn) is refused.
        with self.assertRaisesRegex(TypeError, "positional argument"):
            LogQRetrieval().call(
                query, candidates, weight, probability, ids, True, True, None, lambda x: x
            )

    def test_custom_loss_and_score_mask(self):
        query, candidates, ids, probability, weight = _batch()
        score_mask = np.random.default_rng(1).random((6, 8)) > 0.3
        np.fill_diagonal(score_mask, True)
        make_loss = lambda: tf.keras.losses.CategoricalCrossentropy(  # noqa: E731
            from_logits=True, reduction="sum"
        )
        want = tfrs.tasks.Retrieval(loss=make_loss())(
            query,
            candidates,
            sample_weight=weight,
            candidate_sampling_probability=probability,
            score_mask=score_mask,
        )
        got = LogQRetrieval(loss=make_loss(), correction="standard")(
            query,
            candidates,
            sample_weight=weight,
            candidate_sampling_probability=probability,
            score_mask=score_mask,
        )
        self.assertAllClose(got, want, rtol=1e-5)

    def test_multi_head_queries(self):
        rng = np.random.default_rng(2)
        query = rng.normal(size=(6, 3, 4)).astype(np.float32)
        _, candidates, _, probability, _ = _batch()
        want = tfrs.tasks.Retrieval()(query, candidates, candidate_sampling_probability=probability)
        got = LogQRetrieval()(query, candidates, candidate_sampling_probability=probability)
        self.assertAllClose(got, want, rtol=1e-5)


class ImprovedTaskTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters(None, 0.5)
    def test_in_batch_improved_equals_loss_function(self, temperature):
        query, candidates, ids, probability, weight = _batch()
        task = LogQRetrieval(correction="improved", temperature=temperature)
        got = task(
            query,
            candidates,
            sample_weight=weight,
            candidate_ids=ids,
            candidate_sampling_probability=probability,
        )
        scores = query @ candidates.T / (temperature or 1.0)
        mask = ids[None, :] != ids[:6, None]  # Column i and every copy of id_i removed.
        want, _ = reference.sampled_softmax(
            np.diag(scores[:, :6]),
            scores,
            "improved",
            np.log(probability),
            np.log(probability[:6]),
            mask,
        )
        self.assertAllClose(got, np.sum(weight * want), rtol=1e-5)

    @parameterized.parameters(None, 3)
    def test_standard_negatives_leaves_the_positive_uncorrected(self, num_hard_negatives):
        # The same value from the library's loss and from a custom Keras loss on the
        # logits matrix (positive raw, negatives minus log Q), hard negatives ranked by it.
        query, candidates, ids, probability, weight = _batch()
        call = dict(sample_weight=weight, candidate_sampling_probability=probability)
        got = LogQRetrieval(correction="standard_negatives", num_hard_negatives=num_hard_negatives)(
            query, candidates, **call
        )
        custom = LogQRetrieval(
            loss=tf.keras.losses.CategoricalCrossentropy(from_logits=True, reduction="sum"),
            correction="standard_negatives",
            num_hard_negatives=num_hard_negatives,
        )
        self.assertAllClose(custom(query, candidates, **call), got, rtol=1e-5)
        if num_hard_negatives is None:
            scores = query @ candidates.T
            want, _ = reference.sampled_softmax(
                np.diag(scores[:, :6]),
                scores,
                "standard_negatives",
                np.log(probability),
                None,
                ~np.eye(6, 8, dtype=bool),
            )
            self.assertAllClose(got, np.sum(weight * want), rtol=1e-5)

    def test_in_batch_improved_without_ids_removes_the_diagonal_only(self):
        query, candidates, _, probability, _ = _batch(num_candidates=6)
        got = LogQRetrieval(correction="improved")(
            query, candidates, candidate_sampling_probability=probability
        )
        scores = query @ candidates.T
        want, _ = reference.sampled_softmax(
            np.diag(scores),
            scores,
            "improved",
            np.log(probability),
            np.log(probability),
            ~np.eye(6, dtype=bool),
        )
        self.assertAllClose(got, np.sum(want), rtol=1e-5)

    def test_deduplicating_sampler(self):
        query, candidates, ids, _, _ = _batch(num_candidates=6)
        q = np.full(8, 1 / 8, np.float32)
        sampler = negatives.InBatchSampler(deduplicate=True, probabilities=q)
        got = LogQRetrieval(correction="improved", sampler=sampler)(
            query, candidates, candidate_ids=ids
        )
        neg = sampler(ids, ids, candidates)
        want = losses.sampled_softmax_loss(
            np.sum(query * candidates, axis=1),
            query @ neg.embeddings.numpy().T,
            correction="improved",
            negative_log_q=neg.log_q,
            negative_mask=neg.mask,
            log_q_excludes_positive=True,
        )
        self.assertAllClose(got, tf.reduce_sum(want), rtol=1e-5)

    @parameterized.parameters(*losses.CORRECTIONS)
    def test_per_row_negatives_match_numpy(self, correction):
        table = tf.random.normal([30, 4], seed=1)
        ids = tf.constant([3, 7, 3, 9], tf.int64)
        query = tf.random.normal([4, 4], seed=2)
        embed = lambda i: tf.gather(table, i)  # noqa: E731
        sampler = negatives.UniformSampler(30, 6, per_row=True, seed=3)
        got = LogQRetrieval(correction=correction, sampler=sampler)(
            query, embed(ids), candidate_ids=ids, candidate_embedding_fn=embed
        )
        sampler.reset()  # The same draws again.
        neg = sampler(ids, embedding_fn=embed)
        q, t = query.numpy(), table.numpy()
        want, _ = reference.sampled_softmax(
            np.sum(q * t[ids.numpy()], axis=1),
            np.einsum("qd,qkd->qk", q, t[neg.ids.numpy()]),
            correction,
            neg.log_q.numpy(),
            neg.positive_log_q.numpy(),
            neg.mask.numpy(),
        )
        self.assertEqual(neg.ids.shape, (4, 6))
        self.assertAllClose(got, want.sum(), rtol=1e-5)

    @parameterized.parameters(*losses.CORRECTIONS)
    def test_uniform_and_mixed_samplers_train_the_item_tower(self, correction):
        table = tf.Variable(tf.random.normal([30, 4], seed=1))
        ids = tf.constant([3, 7, 3, 9], tf.int64)
        query = tf.random.normal([4, 4], seed=2)
        for sampler in (
            negatives.UniformSampler(30, 16, seed=1),
            negatives.MixedSampler(30, 8, 4, probabilities=np.full(30, 1 / 30)),
        ):
            task = LogQRetrieval(correction=correction, sampler=sampler)
            with tf.GradientTape() as tape:
                loss = task(
                    query,
                    tf.gather(table, ids),
                    candidate_ids=ids,
                    candidate_embedding_fn=lambda i: tf.gather(table, i),
                )
            grad = tf.convert_to_tensor(tape.gradient(loss, table))
            self.assertTrue(np.isfinite(loss.numpy()))
            touched = np.nonzero(np.abs(grad.numpy()).sum(axis=1))[0]
            self.assertGreater(len(set(touched) - {3, 7, 9}), 0)  # Sampled negatives got gradient.

    def test_fit_lowers_the_loss(self):
        num_items, dim = 40, 8
        rng = np.random.default_rng(0)
        users = rng.integers(0, 20, size=2048)
        items = (users * 2 + rng.integers(0, 2, size=2048)) % num_items
        counts = np.bincount(items, minlength=num_items) + 1.0

        class TwoTower(tfrs.Model):
            def __init__(self):
                super().__init__()
                self.user = tf.keras.layers.Embedding(20, dim)
                self.item = tf.keras.layers.Embedding(num_items, dim)
                self.task = LogQRetrieval(
                    correction="improved",
                    sampler=negatives.MixedSampler(
                        num_items, 16, 64, probabilities=counts / counts.sum()
                    ),
                )

            def compute_loss(self, features, training=False):
                return self.task(
                    self.user(features["user"]),
                    self.item(features["item"]),
                    candidate_ids=features["item"],
                    candidate_embedding_fn=self.item,
                )

        model = TwoTower()
        model.compile(optimizer=tf.keras.optimizers.Adam(0.05))
        data = tf.data.Dataset.from_tensor_slices(
            {"user": users, "item": items.astype(np.int64)}
        ).batch(128, drop_remainder=True)
        history = model.fit(data, epochs=4, verbose=0)
        self.assertLess(history.history["loss"][-1], 0.7 * history.history["loss"][0])


class DiagnosticsTest(tf.test.TestCase):
    def test_hand_computed_diagnostics(self):
        # All logits 0. Ids [1, 1, 2, 3]: rows 0-1 keep 2 of the 4 in-batch negatives (P_hat
        # 1/3, half masked), rows 2-3 keep 3 (P_hat 1/4, a quarter masked).
        task = LogQRetrieval(
            sampler=negatives.InBatchSampler(), correction="none", diagnostics=True
        )
        ids = tf.constant([1, 1, 2, 3], tf.int64)
        task(tf.zeros([4, 2]), tf.ones([4, 2]), candidate_ids=ids, compute_metrics=False)
        self.assertAllClose(task.mean_p_hat.result(), (1 / 3 + 1 / 4) / 2)
        self.assertAllClose(task.masked_negatives.result(), 0.375)
        self.assertAllClose(task.valid_negatives.result(), 2.5)
        self.assertFalse(hasattr(task, "mean_w"))  # Only with "improved".


class EstimatorWiringTest(tf.test.TestCase, parameterized.TestCase):
    """Streaming estimators: updated with the step's positives, then read, once per step."""

    def _count_min(self):
        # Exact counts over the ids used here (no collisions among ids 1-5 at this width).
        return frequency.CountMinSketchEstimator(width=4096, depth=2, decay=1.0)

    def test_task_frequency_is_updated_then_read(self):
        query, candidates, ids, _, weight = _batch(num_candidates=6)  # ids 1 2 1 3 2 4
        estimator = self._count_min()
        task = LogQRetrieval(frequency=estimator, correction="standard")
        got = task(query, candidates, sample_weight=weight, candidate_ids=ids)
        self.assertEqual(int(estimator.step.numpy()), 1)
        # Q read after this step's update: counts 2, 2, 1, 1 of 6 draws.
        q = np.array([2, 2, 2, 1, 2, 1]) / 6.0
        scores = query @ candidates.T
        want, _ = reference.sampled_softmax(
            np.diag(scores), scores, "standard", np.log(q), np.log(q), ~np.eye(6, dtype=bool)
        )
        self.assertAllClose(got, np.sum(weight * want), rtol=1e-5)

    def test_training_flag_and_zero_weights(self):
        query, candidates, ids, _, _ = _batch(num_candidates=6)
        estimator = self._count_min()
        task = LogQRetrieval(frequency=estimator)
        task(query, candidates, candidate_ids=ids, training=False)
        self.assertEqual(int(estimator.step.numpy()), 0)
        graph_call = tf.function(
            lambda training: task(query, candidates, candidate_ids=ids, training=training)
        )
        graph_call(tf.constant(False))
        self.assertEqual(int(estimator.step.numpy()), 0)
        graph_call(tf.constant(True))
        self.assertEqual(int(estimator.step.numpy()), 1)
        # Rows with a zero sample weight (padding) are not fed to the estimator.
        task(
            query,
            candidates,
            candidate_ids=ids,
            training=True,
            sample_weight=np.array([1, 0, 1, 1, 0, 1], np.float32),
        )
        self.assertAllClose(estimator.effective_draws, 6 + 4)

    @parameterized.parameters("in_batch", "mixed")
    def test_sampler_estimator_is_updated_once_per_step(self, kind):
        query, candidates, ids, _, _ = _batch(num_candidates=6)
        estimator = self._count_min()
        sampler = (
            negatives.InBatchSampler(probabilities=estimator)
            if kind == "in_batch"
            else negatives.MixedSampler(10, 4, 6, probabilities=estimator, seed=1)
        )
        task = LogQRetrieval(correction="improved", sampler=sampler)
        table = tf.random.normal([10, 4], seed=3)
        task(
            query,
            candidates,
            candidate_ids=ids,
            candidate_embedding_fn=lambda i: tf.gather(table, i),
        )
        self.assertEqual(int(estimator.step.numpy()), 1)
        self.assertAllClose(estimator.effective_draws, 6.0)

    def test_model_fit_updates_and_checkpoints_the_estimator(self):
        num_items, dim = 40, 8
        rng = np.random.default_rng(0)
        users = rng.integers(0, 20, size=512)
        items = ((users * 2 + rng.integers(0, 2, size=512)) % num_items).astype(np.int64)

        class TwoTower(tfrs.Model):
            def __init__(self):
                super().__init__()
                self.user = tf.keras.layers.Embedding(20, dim)
                self.item = tf.keras.layers.Embedding(num_items, dim)
                self.task = LogQRetrieval(
                    correction="improved",
                    sampler=negatives.InBatchSampler(
                        probabilities=frequency.CountMinSketchEstimator(width=256, depth=2)
                    ),
                )

            def compute_loss(self, features, training=False):
                return self.task(
                    self.user(features["user"]),
                    self.item(features["item"]),
                    candidate_ids=features["item"],
                    training=training,
                )

        model = TwoTower()
        model.compile(optimizer=tf.keras.optimizers.Adam(0.05))
        data = tf.data.Dataset.from_tensor_slices({"user": users, "item": items}).batch(
            128, drop_remainder=True
        )
        model.fit(data, epochs=2, verbose=0)
        estimator = model.task.sampler.frequency
        self.assertEqual(int(estimator.step.numpy()), 8)
        model.evaluate(data, verbose=0)  # training=False: the estimator is not fed.
        self.assertEqual(int(estimator.step.numpy()), 8)
        names = [w.name for w in model.non_trainable_weights]
        self.assertIn("counts:0", names)
        path = os.path.join(tempfile.mkdtemp(), "weights")
        model.save_weights(path)
        restored = TwoTower()
        restored.load_weights(path).assert_existing_objects_matched()
        for a, b in zip(estimator.weights, restored.task.sampler.frequency.weights):
            self.assertAllEqual(a, b)

    def test_backup_and_restore_neither_loses_nor_repeats_updates(self):
        # fit is interrupted after step 6 of 8 in the second epoch, then started again
        # with the same BackupAndRestore directory: the estimator must end exactly
        # as after an uninterrupted run (each of the 16 steps applied once).
        # Keras restores the step count but not the input position (a resumed epoch
        # re-reads its first batches), so the input is one repeated stream that
        # skips the steps already taken: a number fixed before `fit` (a skip that read
        # optimizer.iterations inside the pipeline raced the restore, 1 run in 3 failed).
        rng = np.random.default_rng(1)
        users = rng.integers(0, 20, size=256)
        items = rng.integers(0, 40, size=256).astype(np.int64)
        stream = (
            tf.data.Dataset.from_tensor_slices({"user": users, "item": items})
            .batch(32, drop_remainder=True)
            .repeat()
        )
        interrupted_at = 14  # Step 6 of 8 in the second epoch.

        class TwoTower(tfrs.Model):
            def __init__(self):
                super().__init__()
                self.user = tf.keras.layers.Embedding(
                    20, 4, embeddings_initializer=tf.keras.initializers.RandomNormal(seed=1)
                )
                self.item = tf.keras.layers.Embedding(
                    40, 4, embeddings_initializer=tf.keras.initializers.RandomNormal(seed=2)
                )
                self.task = LogQRetrieval(
                    frequency=frequency.HashedFrequencyEstimator(num_buckets=64, alpha=0.3)
                )

            def compute_loss(self, features, training=False):
                return self.task(
                    self.user(features["user"]),
                    self.item(features["item"]),
                    candidate_ids=features["item"],
                    training=training,
                )

        class Interrupt(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if self.model.optimizer.iterations.numpy() == interrupted_at:
                    raise KeyboardInterrupt

        def fit(model, callbacks, skip=0):
            # BackupAndRestore needs a built model: an unbuilt one restores its variables
            # later, on creation inside the first traced step, which is not reliable.
            model.compute_loss(next(iter(stream)), training=False)  # Builds, no update.
            model.compile(optimizer=tf.keras.optimizers.SGD(0.1))
            model.fit(
                stream.skip(skip), epochs=2, steps_per_epoch=8, verbose=0, callbacks=callbacks
            )
            return model.task.frequency

        reference_state = [w.numpy() for w in fit(TwoTower(), []).weights]
        backup = tf.keras.callbacks.BackupAndRestore(tempfile.mkdtemp(), save_freq=1)
        with self.assertRaises(KeyboardInterrupt):
            fit(TwoTower(), [backup, Interrupt()])
        resumed = fit(TwoTower(), [backup], skip=interrupted_at)  # The backup's steps.
        self.assertEqual(int(resumed.step.numpy()), 16)
        for want, got in zip(reference_state, resumed.weights):
            self.assertAllClose(want, got, msg=got.name)

    def test_config_round_trip_and_errors(self):
        task = LogQRetrieval(
            frequency=frequency.CountMinSketchEstimator(
                width=32, depth=3, decay=0.9, conservative=True, seed=2
            ),
            correction="improved",
        )
        restored = LogQRetrieval.from_config(task.get_config())
        self.assertEqual(restored.get_config(), task.get_config())
        self.assertIsInstance(restored.frequency, frequency.CountMinSketchEstimator)
        self.assertEqual(restored.frequency.decay, 0.9)

        query, candidates, ids, probability, _ = _batch(num_candidates=6)
        with self.assertRaisesRegex(ValueError, r"Pass the probability source to the sampler"):
            LogQRetrieval(
                frequency=np.full(10, 0.1),
                sampler=negatives.InBatchSampler(probabilities=np.full(10, 0.1)),
            )
        with self.assertRaisesRegex(
            ValueError,
            r"The task has a `frequency` source; received "
            r"candidate_sampling_probability as well",
        ):
            LogQRetrieval(frequency=np.full(10, 0.1))(
                query, candidates, candidate_ids=ids, candidate_sampling_probability=probability
            )
        with self.assertRaisesRegex(
            ValueError,
            r"The task's `frequency` reads log Q by id and "
            r"needs `candidate_ids`; received candidate_ids=None",
        ):
            LogQRetrieval(frequency=np.full(10, 0.1))(query, candidates, training=False)
        with self.assertRaisesRegex(
            ValueError,
            r"A streaming estimator \(CountMinSketchEstimator"
            r"\) is updated with the positives' ids; received "
            r"candidate_ids=None",
        ):
            LogQRetrieval(frequency=self._count_min())(query, candidates)


class MixedPrecisionTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.parameters("float16", "bfloat16")
    def test_low_precision_towers_give_float32_loss(self, dtype):
        query, candidates, ids, probability, _ = _batch()
        low = [tf.cast(x, dtype) for x in (query, candidates)]
        task = LogQRetrieval(correction="improved")
        got = task(*low, candidate_ids=ids, candidate_sampling_probability=probability)
        want = task(
            *[tf.cast(x, tf.float32) for x in low],
            candidate_ids=ids,
            candidate_sampling_probability=probability,
        )
        self.assertEqual(got.dtype, tf.float32)
        self.assertAllClose(got, want, rtol=1e-6)

    def test_under_a_mixed_precision_policy(self):
        query, candidates, ids, probability, _ = _batch()
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
        try:
            task = LogQRetrieval(correction="improved")
            got = task(
                query, candidates, candidate_ids=ids, candidate_sampling_probability=probability
            )
        finally:
            tf.keras.mixed_precision.set_global_policy("float32")
        want = LogQRetrieval(correction="improved")(
            query, candidates, candidate_ids=ids, candidate_sampling_probability=probability
        )
        self.assertEqual(got.dtype, tf.float32)
        self.assertAllClose(got, want, rtol=1e-6)  # Inputs were not rounded to bfloat16.


class ConfigAndErrorsTest(tf.test.TestCase):
    def test_config_round_trip(self):
        task = LogQRetrieval(
            loss_metrics=[tf.keras.metrics.Mean(name="m")],
            batch_metrics=[tf.keras.metrics.TopKCategoricalAccuracy(k=3)],
            temperature=0.2,
            remove_accidental_hits=True,
            correction="improved",
            sampler=negatives.MixedSampler(
                10, 4, 4, mixture="paper", probabilities=np.full(10, 0.1)
            ),
            name="retrieval",
        )
        restored = LogQRetrieval.from_config(task.get_config())
        self.assertEqual(restored.get_config(), task.get_config())
        self.assertEqual(restored.correction, "improved")
        self.assertEqual(restored.sampler.mixture, "paper")
        custom = LogQRetrieval(
            loss=tf.keras.losses.CategoricalCrossentropy(from_logits=True),
            num_hard_negatives=5,
            correction="standard",
        )
        self.assertEqual(
            LogQRetrieval.from_config(custom.get_config()).get_config(), custom.get_config()
        )

    def test_constructor_errors(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`correction` must be one of None, 'none', "
            r"'standard', 'standard_negatives', 'improved'; received "
            r"correction='logq'",
        ):
            LogQRetrieval(correction="logq")
        with self.assertRaisesRegex(
            ValueError,
            r"correction='improved' computes its own "
            r"weighted loss and cannot use a custom `loss`",
        ):
            LogQRetrieval(loss=tf.keras.losses.MeanSquaredError(), correction="improved")
        for bad in (-0.5, float("nan"), "1", True):
            with self.assertRaisesRegex(
                ValueError,
                r"`log_q_scale` must be a finite number >= "
                rf"0; received log_q_scale={bad!r}",
            ):
                LogQRetrieval(log_q_scale=bad)
        with self.assertRaisesRegex(
            ValueError,
            r"`temperature` must be a positive number; "
            r"received temperature=0",
        ):
            LogQRetrieval(temperature=0)
        with self.assertRaisesRegex(
            ValueError,
            r"`num_hard_negatives` must be a positive "
            r"integer; received num_hard_negatives=0",
        ):
            LogQRetrieval(num_hard_negatives=0)
        with self.assertRaisesRegex(
            TypeError,
            r"`sampler` must be a tfrs_logq.negatives."
            r"NegativeSampler",
        ):
            LogQRetrieval(sampler="in_batch")
        with self.assertRaisesRegex(
            TypeError,
            r"`remove_accidental_hits` must be a bool; "
            r"received remove_accidental_hits='yes'",
        ):
            LogQRetrieval(remove_accidental_hits="yes")

    def test_candidate_mask_needs_a_sampler(self):
        query, candidates, ids, _, _ = _batch()
        with self.assertRaisesRegex(
            ValueError,
            r"`candidate_mask` masks a sampler's pool; "
            r"without a sampler, mask candidate columns with "
            r"`score_mask`",
        ):
            LogQRetrieval(correction="none")(
                query, candidates, candidate_ids=ids, candidate_mask=np.ones(8, bool)
            )

    def test_call_errors(self):
        query, candidates, ids, probability, _ = _batch()
        with self.assertRaisesRegex(
            ValueError,
            r"correction='standard' needs sampling "
            r"probabilities: pass `candidate_sampling_probability`",
        ):
            LogQRetrieval(correction="standard")(query, candidates)
        with self.assertRaisesRegex(
            ValueError,
            r"remove_accidental_hits=True needs "
            r"`candidate_ids`; received candidate_ids=None",
        ):
            LogQRetrieval(remove_accidental_hits=True)(query, candidates)
        with self.assertRaisesRegex(
            ValueError,
            r"`candidate_sampling_probability` must hold "
            r"probabilities in \(0, 1\]; received "
            r"candidate_sampling_probability with invalid values "
            r"\[1.5\]",
        ):
            LogQRetrieval()(
                query, candidates, candidate_sampling_probability=np.r_[1.5, probability[1:]]
            )
        with self.assertRaisesRegex(
            ValueError,
            r"`query_embeddings` and `candidate_embeddings` "
            r"disagree in size",
        ):
            LogQRetrieval()(query[:, :3], candidates)
        with self.assertRaisesRegex(
            TypeError,
            r"`query_embeddings` must be a floating-point "
            r"tensor; received query_embeddings with dtype int64",
        ):
            LogQRetrieval()(ids[:, None], candidates)
        with self.assertRaisesRegex(
            ValueError,
            r"`query_embeddings` must have shape "
            r"\[num_queries, dim\] or \[num_queries, num_heads, dim\]; "
            r"received query_embeddings with shape \(6,\)",
        ):
            LogQRetrieval()(query[:, 0], candidates)
        sampled = LogQRetrieval(sampler=negatives.UniformSampler(10, 3))
        with self.assertRaisesRegex(
            ValueError,
            r"`candidate_sampling_probability` cannot be "
            r"combined with a sampler",
        ):
            sampled(
                query, candidates, candidate_ids=ids, candidate_sampling_probability=probability
            )
        with self.assertRaisesRegex(ValueError, r"A sampler needs `candidate_ids`"):
            sampled(query, candidates)
        with self.assertRaisesRegex(
            ValueError,
            r"UniformSampler drew ids outside the batch and "
            r"needs `candidate_embedding_fn`",
        ):
            sampled(query, candidates, candidate_ids=ids)

    def test_value_checks_in_graphs_and_under_xla(self):
        # Eagerly a Q above 1 raises ValueError (above); in a graph an assertion fails; under
        # XLA, which drops assertions, the loss is NaN instead of silently wrong.
        query, candidates, _, probability, _ = _batch()
        task = LogQRetrieval(correction="standard")
        bad = np.r_[1.5, probability[1:]].astype(np.float32)

        def loss(q):
            return task(query, candidates, candidate_sampling_probability=q, compute_metrics=False)

        with self.assertRaisesRegex(
            tf.errors.InvalidArgumentError,
            r"`candidate_sampling_probability` must hold probabilities",
        ):
            tf.function(loss)(tf.constant(bad))
        self.assertTrue(np.isnan(tf.function(loss, jit_compile=True)(tf.constant(bad)).numpy()))
        nan_log_q = np.r_[np.nan, probability[1:]].astype(np.float32)
        self.assertTrue(
            np.isnan(tf.function(loss, jit_compile=True)(tf.constant(nan_log_q)).numpy())
        )
        # Valid input: compiled and eager agree.
        self.assertAllClose(
            tf.function(loss, jit_compile=True)(tf.constant(probability, tf.float32)),
            loss(tf.constant(probability, tf.float32)),
        )


class ColumnIdsTest(tf.test.TestCase, parameterized.TestCase):
    """[batch, 1] ids, as TFRS's tutorials give their labels, give exactly the [batch] results."""

    @parameterized.parameters("none", "standard", "improved")
    def test_column_ids_give_the_flat_result(self, correction):
        query, candidates, ids, probability, weight = _batch()
        table = tf.random.normal([8, 4], seed=3)
        cases = [
            dict(
                kwargs=dict(remove_accidental_hits=True),
                call=dict(candidate_sampling_probability=probability),
            ),
            dict(
                kwargs=dict(sampler=None, frequency=np.full(8, 1 / 8, np.float32)),
                call=dict(query_ids=np.array([0, 1, 0, 2, 1, 3])),
            ),
            dict(
                kwargs=dict(sampler="mixed"),
                call=dict(
                    candidate_embedding_fn=lambda i: tf.gather(table, i),
                    query_ids=np.array([0, 1, 0, 2, 1, 3]),
                ),
            ),
        ]
        for case in cases:
            values = []
            for as_column in (False, True):
                kwargs = dict(case["kwargs"])
                if kwargs.get("sampler") == "mixed":
                    kwargs["sampler"] = negatives.MixedSampler(
                        8, 3, 4, per_row=True, probabilities=np.full(8, 1 / 8), seed=5
                    )
                task = LogQRetrieval(correction=correction, **kwargs, **_metrics(candidates, ids))
                call = dict(case["call"])
                if as_column and "query_ids" in call:
                    call["query_ids"] = call["query_ids"][:, None]
                loss = task(
                    query,
                    candidates,
                    sample_weight=weight,
                    candidate_ids=ids[:, None] if as_column else ids,
                    **call,
                )
                values.append([float(loss)] + _results(task))
            self.assertEqual(values[1], values[0])  # Exactly.
            self.assertGreater(values[0][0], 0.0)

    def test_other_shapes_are_refused_with_the_name_and_shape(self):
        query, candidates, ids, _, _ = _batch()
        pairs = np.stack([ids, ids], axis=1)
        with self.assertRaisesRegex(
            ValueError,
            r"`candidate_ids` must have shape \[N\] or "
            r"\[N, 1\] \(one id per row\); received candidate_ids with "
            r"shape \(8, 2\)",
        ):
            LogQRetrieval(remove_accidental_hits=True)(query, candidates, candidate_ids=pairs)
        with self.assertRaisesRegex(
            ValueError,
            r"`query_ids` must have shape \[N\] or "
            r"\[N, 1\] \(one id per row\); received query_ids with "
            r"shape \(6, 2\)",
        ):
            LogQRetrieval()(query, candidates, candidate_ids=ids, query_ids=pairs[:6])
        with self.assertRaisesRegex(
            ValueError,
            r"`candidate_ids` and `candidate_embeddings` "
            r"disagree in size",
        ):
            LogQRetrieval()(query, candidates, candidate_ids=ids[:7, None])

    def test_string_vocabulary_sampler_with_the_item_tower_as_it_is(self):
        # The tutorial's string-keyed tower: the sampler draws titles, the tower embeds them.
        titles = [f"title {i}" for i in range(12)]
        lookup = tf.keras.layers.StringLookup(vocabulary=titles)
        tower = tf.keras.Sequential([lookup, tf.keras.layers.Embedding(13, 4)])
        ids = tf.constant([["title 3"], ["title 7"], ["title 3"], ["title 0"]])  # [batch, 1]
        query = tf.random.normal([4, 4], seed=2)
        sampler = negatives.MixedSampler.from_lookup(
            lookup,
            6,
            4,
            per_row=True,
            seed=1,
            probabilities=frequency.CountMinSketchEstimator(width=64, depth=2),
        )
        task = LogQRetrieval(correction="improved", sampler=sampler)
        with tf.GradientTape() as tape:
            loss = task(query, tower(ids[:, 0]), candidate_ids=ids, candidate_embedding_fn=tower)
        self.assertTrue(np.isfinite(float(loss)) and float(loss) > 0.0)
        gradient = tf.convert_to_tensor(tape.gradient(loss, tower.trainable_variables[0]))
        touched = set(np.nonzero(np.abs(gradient.numpy()).sum(axis=1))[0].tolist())
        self.assertNotIn(0, touched)  # The out-of-vocabulary row: never drawn.
        self.assertGreater(len(touched - {1, 4, 8}), 0)  # Drawn titles got gradient.
        with self.assertRaisesRegex(TypeError, r"`candidate_table` is read by integer id"):
            task(
                query,
                tower(ids[:, 0]),
                candidate_ids=ids,
                candidate_table=tower.layers[1].embeddings,
            )


class ShapesAndIdsTest(tf.test.TestCase):
    """Sizes that would slice or broadcast silently, and ids outside `candidate_table`."""

    def test_fewer_candidate_rows_than_queries(self):
        # Before: rows 4 and 5 had no positive column and a loss of 0 (a finite, wrong sum,
        # as tfrs.tasks.Retrieval gives), with [6, heads, dim] and [6, dim] queries alike.
        query, candidates, _, _, _ = _batch()
        heads = np.stack([query, -query], axis=1)
        for queries in (heads, query):
            shape = r"\(6, 2, 4\)" if queries.ndim == 3 else r"\(6, 4\)"
            with self.assertRaisesRegex(
                ValueError,
                r"`candidate_embeddings` must have at least one row per query "
                r"\(row i is query i's positive; extra rows are extra negatives\); received "
                r"candidate_embeddings with shape \(4, 4\) for query_embeddings with shape "
                + shape,
            ):
                LogQRetrieval()(queries, candidates[:4])

        task = LogQRetrieval()

        @tf.function(input_signature=[tf.TensorSpec([None, 2, 4]), tf.TensorSpec([None, 4])])
        def graph(q, c):
            return task(q, c, compute_metrics=False)

        with self.assertRaisesRegex(
            tf.errors.InvalidArgumentError,
            r"`candidate_embeddings` must have at least one row per "
            r"query",
        ):
            graph(heads, candidates[:4])
        self.assertAllClose(graph(heads, candidates), LogQRetrieval()(heads, candidates))
        # XLA drops the assertion: the loss is NaN, not the 0 of the rows without a positive.
        compiled = tf.function(graph.python_function, jit_compile=True).get_concrete_function(
            tf.TensorSpec([None, 2, 4]), tf.TensorSpec([None, 4])
        )
        self.assertTrue(np.isnan(compiled(tf.constant(heads), tf.constant(candidates[:4]))))
        self.assertAllClose(
            compiled(tf.constant(heads), tf.constant(candidates)),
            LogQRetrieval()(heads, candidates),
        )

    def test_maxsim_needs_a_head_and_sizes_must_match(self):
        query, candidates, ids, probability, weight = _batch()
        heads = np.stack([query, -query], axis=1)
        task = LogQRetrieval(remove_accidental_hits=True)
        with self.assertRaisesRegex(
            ValueError,
            r"need num_heads >= 1; received "
            r"query_embeddings with shape \(6, 0, 4\)",
        ):
            task(np.zeros([6, 0, 4], np.float32), candidates, candidate_ids=ids)
        # Each of these broadcast before (a [1] weight or id over the whole batch).
        with self.assertRaisesRegex(
            ValueError,
            r"`sample_weight` and `query_embeddings` "
            r"disagree in size: sample_weight.shape=\(1,\) \(axis 0\) "
            r"but query_embeddings.shape=\(6, 2, 4\) \(axis 0\)",
        ):
            task(heads, candidates, sample_weight=weight[:1], candidate_ids=ids)
        with self.assertRaisesRegex(
            ValueError,
            r"`candidate_ids` and `candidate_embeddings` "
            r"disagree in size: candidate_ids.shape=\(1,\)",
        ):
            task(heads, candidates, candidate_ids=ids[:1])
        with self.assertRaisesRegex(
            ValueError,
            r"`score_mask` and `query_embeddings` disagree "
            r"in size: score_mask.shape=\(1, 8\)",
        ):
            LogQRetrieval()(heads, candidates, score_mask=np.ones([1, 8], bool))
        with self.assertRaisesRegex(
            ValueError,
            r"`score_mask` and `candidate_embeddings` "
            r"disagree in size: score_mask.shape=\(6, 1\)",
        ):
            LogQRetrieval()(heads, candidates, score_mask=np.ones([6, 1], bool))
        with self.assertRaisesRegex(
            ValueError,
            r"`candidate_sampling_probability` and "
            r"`candidate_embeddings` disagree in size",
        ):
            LogQRetrieval()(heads, candidates, candidate_sampling_probability=probability[:1])

        plain = LogQRetrieval()

        @tf.function(input_signature=[tf.TensorSpec(None)])
        def unknown_rank(q):
            return plain(q, candidates, compute_metrics=False)

        with self.assertRaisesRegex(
            ValueError,
            r"`query_embeddings` must have shape "
            r"\[num_queries, dim\] or \[num_queries, num_heads, dim\]; "
            r"received query_embeddings with shape <unknown>",
        ):
            unknown_rank(heads)
        # Maxsim itself is unchanged: [6, 2, 4] queries score each column by the best head.
        self.assertAllClose(
            task(heads, candidates, candidate_ids=ids),
            tfrs.tasks.Retrieval(remove_accidental_hits=True)(heads, candidates, candidate_ids=ids),
        )

    def test_ids_outside_the_candidate_table(self):
        table = tf.random.normal([5, 4], seed=1)
        query, candidates = tf.random.normal([3, 4], seed=2), tf.random.normal([3, 4], seed=3)
        task = LogQRetrieval(correction="none", sampler=negatives.InBatchSampler())

        def loss(ids):
            return task(query, candidates, candidate_ids=ids, candidate_table=table)

        bad = tf.constant([1, 7, 2], tf.int64)
        message = r"`negatives.ids` must hold ids in \[0, 5\), one per row of `candidate_table`"
        with self.assertRaisesRegex(
            ValueError,
            message + r"; received negatives.ids with "
            r"invalid values \[7\]",
        ):
            loss(bad)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message):
            tf.function(loss)(bad)
        # Before, XLA read row 4 for id 7 and the loss was finite.
        self.assertTrue(np.isnan(tf.function(loss, jit_compile=True)(bad).numpy()))
        self.assertTrue(
            np.isfinite(
                tf.function(loss, jit_compile=True)(tf.constant([1, 4, 2], tf.int64)).numpy()
            )
        )


if __name__ == "__main__":
    tf.test.main()


class ScoringHelpersTest(tf.test.TestCase, parameterized.TestCase):
    """`_ops.scores` / `_ops.row_scores`, shared by the task and the SASRec objective."""

    @parameterized.parameters((False, False), (False, True), (True, False), (True, True))
    def test_scores_match_numpy(self, multi_head, per_row):
        from tfrs_logq import _ops  # pylint: disable=import-outside-toplevel

        rng = np.random.default_rng(3)
        queries = rng.normal(size=(4, 2, 5) if multi_head else (4, 5)).astype(np.float32)
        candidates = rng.normal(size=(4, 3, 5) if per_row else (3, 5)).astype(np.float32)
        q = queries if multi_head else queries[:, None, :]  # [batch, heads, dim]
        c = candidates if per_row else np.broadcast_to(candidates, (4, 3, 5))
        expected = np.einsum("bhd,bcd->bhc", q, c).max(axis=1)
        queries_t, candidates_t = tf.constant(queries), tf.constant(candidates)
        self.assertAllClose(_ops.scores(queries_t, candidates_t), expected, atol=1e-5)
        expected_rows = np.einsum("bhd,bd->bh", q, c[:, 0]).max(axis=1)
        self.assertAllClose(
            _ops.row_scores(queries_t, tf.constant(c[:, 0])), expected_rows, atol=1e-5
        )

    def test_check_bool_names_the_argument(self):
        from tfrs_logq import _validation  # pylint: disable=import-outside-toplevel

        self.assertIs(_validation.check_bool("flag", False), False)
        with self.assertRaisesRegex(TypeError, r"`flag` must be a bool; received flag=1\."):
            _validation.check_bool("flag", 1)


class FactorizedMetricsTest(tf.test.TestCase):
    """`factorized_metrics` takes one metric or a list, as the constructor's `metrics`: TFRS's
    efficient-serving tutorial assigns one (`task.factorized_metrics = metric`), which TFRS
    0.7.7 turned into an empty list, losing the metric."""

    def test_one_metric_or_a_list_in_the_setter_and_the_constructor(self):
        query, candidates, ids, _, _ = _batch()
        metric = _metrics(candidates, ids)["metrics"]
        task = LogQRetrieval(correction="none")
        task.factorized_metrics = metric
        self.assertEqual(list(task.factorized_metrics), [metric])
        task(query, candidates, candidate_ids=ids)
        self.assertGreater(float(metric.result()[-1]), 0.0)  # The metric was updated.
        task.factorized_metrics = [metric, metric]
        self.assertLen(task.factorized_metrics, 2)
        task.factorized_metrics = None
        self.assertEqual(list(task.factorized_metrics), [])
        self.assertEqual(list(LogQRetrieval(metrics=metric).factorized_metrics), [metric])

    def test_anything_else_is_named(self):
        task = LogQRetrieval()
        with self.assertRaisesRegex(
            TypeError, "`factorized_metrics` must be .* received factorized_metrics='top10'"
        ):
            task.factorized_metrics = "top10"
        with self.assertRaisesRegex(TypeError, "`metrics` must be a tfrs.metrics.Factorized"):
            LogQRetrieval(metrics=[tf.keras.metrics.Mean()])
