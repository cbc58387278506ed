"""Tests of tfrs_logq.losses against numpy references and exact values."""

import os
import tempfile

import numpy as np
import tensorflow as tf
from absl.testing import parameterized

from tests import reference
from tfrs_logq import losses
from tfrs_logq import negatives

_random_inputs = reference.sampled_inputs


class SampledSoftmaxLossTest(tf.test.TestCase, parameterized.TestCase):
    @parameterized.product(
        correction=losses.CORRECTIONS, seed=[0, 1, 2], per_row_log_q=[False, True]
    )
    def test_matches_numpy_reference(self, correction, seed, per_row_log_q):
        pos, neg, neg_log_q, pos_log_q, mask = _random_inputs(seed, per_row_log_q=per_row_log_q)
        got = losses.sampled_softmax_loss(
            pos,
            neg,
            correction=correction,
            negative_log_q=neg_log_q,
            positive_log_q=pos_log_q,
            negative_mask=mask,
        )
        want, _ = reference.sampled_softmax(pos, neg, correction, neg_log_q, pos_log_q, mask)
        self.assertEqual(got.dtype, tf.float32)
        self.assertAllClose(got, want, rtol=1e-5, atol=1e-5)

    def test_excluded_positive_log_q_is_used_as_is(self):
        pos, neg, neg_log_q, _, mask = _random_inputs(3)
        got = losses.sampled_softmax_loss(
            pos,
            neg,
            correction="improved",
            negative_log_q=neg_log_q,
            negative_mask=mask,
            log_q_excludes_positive=True,
        )
        want, _ = reference.sampled_softmax(
            pos, neg, "improved", neg_log_q, None, mask, excludes=True
        )
        self.assertAllClose(got, want, rtol=1e-5, atol=1e-5)

    def test_exact_values(self):
        case = reference.EXACT_SAMPLED
        for correction, want in case["losses"].items():
            self.assertAllClose(
                losses.sampled_softmax_loss(
                    *case["inputs"], correction=correction, **case["kwargs"]
                ),
                [want],
            )
        self.assertAllClose(
            losses.improved_weight(*case["inputs"], **case["kwargs"]), [case["improved_weight"]]
        )

    def test_improved_gradient_is_weighted_softmax_minus_onehot(self):
        pos, neg, neg_log_q, pos_log_q, mask = _random_inputs(4)
        pos_t, neg_t = tf.constant(pos), tf.constant(neg)
        with tf.GradientTape() as tape:
            tape.watch([pos_t, neg_t])
            loss = tf.reduce_sum(
                losses.sampled_softmax_loss(
                    pos_t,
                    neg_t,
                    correction="improved",
                    negative_log_q=neg_log_q,
                    positive_log_q=pos_log_q,
                    negative_mask=mask,
                )
            )
        d_pos, d_neg = tape.gradient(loss, [pos_t, neg_t])
        want_pos, want_neg = reference.improved_gradients(pos, neg, neg_log_q, pos_log_q, mask)
        self.assertAllClose(d_pos, want_pos, atol=1e-6)
        self.assertAllClose(d_neg, want_neg, atol=1e-6)

    @parameterized.product(per_row=[False, True], standard=["standard", "standard_negatives"])
    def test_standard_and_improved_gradients_differ_only_by_the_row_weight(self, per_row, standard):
        # With the same negatives, d loss / d s is (1 - p_s) * G for the two standard forms
        # and w * G for "improved", G = softmax over the corrected valid negatives -
        # onehot(p), and logit(1 - p_s) - logit(w) = log(n Q(p) / (1 - Q(p))) ("standard")
        # or log(n / (1 - Q(p))) ("standard_negatives", the positive uncorrected).
        pos, neg, neg_log_q, pos_log_q, mask = _random_inputs(8, per_row_log_q=per_row)
        pos_t, neg_t = tf.constant(pos), tf.constant(neg)
        kwargs = dict(negative_log_q=neg_log_q, positive_log_q=pos_log_q, negative_mask=mask)
        gradients, per_example = {}, {}
        for correction in (standard, "improved"):
            with tf.GradientTape() as tape:
                tape.watch([pos_t, neg_t])
                per_example[correction] = losses.sampled_softmax_loss(
                    pos_t, neg_t, correction=correction, **kwargs
                )
                loss = tf.reduce_sum(per_example[correction])
            gradients[correction] = tape.gradient(loss, [pos_t, neg_t])
        standard_weight = -np.expm1(-per_example[standard].numpy().astype(np.float64))
        improved_weight = losses.improved_weight(pos, neg, **kwargs).numpy().astype(np.float64)
        for d_standard, d_improved in zip(gradients[standard], gradients["improved"]):
            shape = (-1,) + (1,) * (d_standard.shape.rank - 1)
            self.assertAllClose(
                d_standard.numpy() * improved_weight.reshape(shape),
                d_improved.numpy() * standard_weight.reshape(shape),
                atol=1e-6,
            )
        rows = mask.any(axis=1)  # Row 0 has no valid negative: both weights are 0.
        logit = lambda p: np.log(p[rows]) - np.log1p(-p[rows])  # noqa: E731
        q_p = np.exp(pos_log_q.astype(np.float64))[rows]
        gap = np.log(mask.sum(axis=1)[rows] / (1.0 - q_p))
        if standard == "standard":
            gap += np.log(q_p)
        self.assertAllClose(logit(standard_weight) - logit(improved_weight), gap, atol=1e-3)
        self.assertAllClose(gradients["improved"][0].numpy()[rows], -improved_weight[rows])

    def test_no_gradient_flows_through_the_weight(self):
        pos, neg, neg_log_q, pos_log_q, mask = _random_inputs(5)
        pos_t, neg_t = tf.constant(pos), tf.constant(neg)
        with tf.GradientTape() as tape:
            tape.watch([pos_t, neg_t])
            weight = losses.improved_weight(
                pos_t, neg_t, negative_log_q=neg_log_q, positive_log_q=pos_log_q, negative_mask=mask
            )
        self.assertEqual(tape.gradient(weight, [pos_t, neg_t]), [None, None])

    @parameterized.parameters(*losses.CORRECTIONS)
    def test_row_without_negatives_has_zero_loss_and_gradient(self, correction):
        pos = tf.constant([3.0, -1.0])
        neg = tf.constant([[1e4, -1e4, np.inf], [0.5, 0.1, 0.2]])
        mask = tf.constant([[False, False, False], [True, False, True]])
        log_q = tf.math.log(tf.constant([0.2, 0.3, 0.5]))
        with tf.GradientTape() as tape:
            tape.watch([pos, neg])
            loss = losses.sampled_softmax_loss(
                pos,
                neg,
                correction=correction,
                negative_log_q=log_q,
                positive_log_q=tf.math.log([0.1, 0.1]),
                negative_mask=mask,
            )
        d_pos, d_neg = tape.gradient(loss, [pos, neg])
        self.assertEqual(float(loss[0]), 0.0)
        self.assertEqual(float(d_pos[0]), 0.0)
        self.assertAllEqual(d_neg[0], [0.0, 0.0, 0.0])
        for value in (loss, d_pos, d_neg):
            self.assertTrue(np.all(np.isfinite(value.numpy())))

    def test_extreme_logits_stay_finite(self):
        pos = tf.constant([80.0, -80.0])
        neg = tf.constant([[-80.0, 90.0], [80.0, 85.0]])
        log_q = tf.math.log(tf.constant([1e-9, 0.999]))
        for correction in losses.CORRECTIONS:
            loss = losses.sampled_softmax_loss(
                pos,
                neg,
                correction=correction,
                negative_log_q=log_q,
                positive_log_q=tf.math.log([1e-9, 0.999]),
            )
            self.assertTrue(np.all(np.isfinite(loss.numpy())), correction)

    @parameterized.product(dtype=["float16", "bfloat16"], correction=losses.CORRECTIONS)
    def test_low_precision_inputs_give_float32(self, dtype, correction):
        pos, neg, neg_log_q, pos_log_q, mask = _random_inputs(6)
        cast = lambda x: tf.cast(x, dtype)  # noqa: E731
        got = losses.sampled_softmax_loss(
            cast(pos),
            cast(neg),
            correction=correction,
            negative_log_q=cast(neg_log_q),
            positive_log_q=cast(pos_log_q),
            negative_mask=mask,
        )
        rounded = [cast(x).numpy().astype(np.float32) for x in (pos, neg, neg_log_q, pos_log_q)]
        want, _ = reference.sampled_softmax(*rounded[:2], correction, rounded[2], rounded[3], mask)
        self.assertEqual(got.dtype, tf.float32)
        self.assertAllClose(got, want, rtol=1e-5, atol=1e-5)

    def test_works_under_jit_compile(self):
        pos, neg, neg_log_q, pos_log_q, mask = _random_inputs(7)
        fn = tf.function(
            lambda *a: losses.sampled_softmax_loss(
                *a[:2],
                correction="improved",
                negative_log_q=a[2],
                positive_log_q=a[3],
                negative_mask=a[4],
            ),
            jit_compile=True,
        )
        want, _ = reference.sampled_softmax(pos, neg, "improved", neg_log_q, pos_log_q, mask)
        self.assertAllClose(fn(pos, neg, neg_log_q, pos_log_q, mask), want, atol=1e-5)


class SampledSoftmaxErrorsTest(tf.test.TestCase):
    def setUp(self):
        super().setUp()
        self.pos = np.zeros([2], np.float32)
        self.neg = np.zeros([2, 3], np.float32)
        self.log_q = np.log(np.full([3], 0.2, np.float32))
        self.pos_log_q = np.log(np.full([2], 0.2, np.float32))

    def call(self, **overrides):
        kwargs = dict(
            positive_logits=self.pos,
            negative_logits=self.neg,
            correction="improved",
            negative_log_q=self.log_q,
            positive_log_q=self.pos_log_q,
        )
        kwargs.update(overrides)
        pos = kwargs.pop("positive_logits")
        neg = kwargs.pop("negative_logits")
        return losses.sampled_softmax_loss(pos, neg, **kwargs)

    def test_unknown_correction(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`correction` must be one of 'none', "
            r"'standard', 'standard_negatives', 'improved'; received "
            r"correction='yi'",
        ):
            self.call(correction="yi")

    def test_rank_and_shape_mismatches(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`positive_logits` must have rank 1; "
            r"received positive_logits with shape \(2, 1\)",
        ):
            self.call(positive_logits=np.zeros([2, 1], np.float32))
        with self.assertRaisesRegex(ValueError, r"`negative_logits` must have rank 2"):
            self.call(negative_logits=np.zeros([6], np.float32))
        with self.assertRaisesRegex(
            ValueError,
            r"`positive_logits` and `negative_logits` "
            r"disagree in size",
        ):
            self.call(positive_logits=np.zeros([5], np.float32))
        with self.assertRaisesRegex(
            ValueError,
            r"`negative_log_q` and `negative_logits` "
            r"disagree in size",
        ):
            self.call(negative_log_q=np.log(np.full([4], 0.2, np.float32)))
        with self.assertRaisesRegex(
            ValueError,
            r"`negative_log_q` must have shape \[N\] or "
            r"\[B, N\]",
        ):
            self.call(negative_log_q=np.zeros([2, 3, 1], np.float32))
        with self.assertRaisesRegex(ValueError, r"`positive_log_q` must have rank 1"):
            self.call(positive_log_q=np.zeros([2, 1], np.float32) - 1)
        with self.assertRaisesRegex(
            ValueError,
            r"`negative_mask` and `negative_logits` "
            r"disagree in size: negative_mask.shape=\(2, 2\) \(axis 1\) "
            r"but negative_logits.shape=\(2, 3\) \(axis 1\)",
        ):
            self.call(negative_mask=np.ones([2, 2], bool))

    def test_probabilities_outside_unit_interval(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`negative_log_q` must hold log-probabilities "
            r"of probabilities in \(0, 1\].*received negative_log_q "
            r"with invalid values \[0.5\]",
        ):
            self.call(negative_log_q=np.array([0.5, -1.0, -2.0], np.float32))
        with self.assertRaisesRegex(ValueError, r"`positive_log_q` must hold log-probabilities"):
            self.call(positive_log_q=np.array([-np.inf, -1.0], np.float32))

    def test_probabilities_checked_inside_tf_function(self):
        fn = tf.function(lambda log_q: self.call(negative_log_q=log_q))
        with self.assertRaisesRegex(
            tf.errors.InvalidArgumentError, r"`negative_log_q` must hold log-probabilities"
        ):
            fn(tf.constant([0.5, -1.0, -2.0]))

    def test_column_softmax_terms_equal_the_sampled_loss(self):
        # The fused path of LogQRetrieval's candidate columns: 5 queries, 7 candidates (2
        # extra), positive of row i in column i, some columns masked, given as a mask or as
        # listed accidental hits; values, weights and gradients of every correction.
        rng = np.random.default_rng(3)
        scores = rng.normal(size=[5, 7]).astype(np.float32) * 3.0
        scores[4, 4] = 40.0  # A positive that holds float32's whole mass (L rounds to 0).
        scores[3] = -30.0
        scores[3, 3] = 0.0  # A positive far below its negatives (a large L).
        log_q = np.log(rng.dirichlet(np.ones(7))).astype(np.float32)
        ids = np.array([1, 2, 1, 3, 4, 1, 3])
        mask = (ids[:5, None] != ids[None, :]) & (rng.random([5, 7]) > 0.2)
        mask[2] = False  # A row without a valid negative.
        mask[np.arange(5), np.arange(5)] = False
        # "hits": the ids' hits as codes, and the rest of `mask` as a mask.
        hits = negatives.accidental_hits(tf.constant(ids), 5)
        hits_mask = (ids[:5, None] != ids[None, :]) & ~np.eye(5, 7, dtype=bool)
        for kind in (ids, ids.astype(str)):  # Sort and search; tf.unique for strings.
            coded = negatives.accidental_hits(tf.constant(kind), 5)
            self.assertAllEqual(coded.per_row, (~hits_mask).sum(1) - 1)
            self.assertAllEqual(
                negatives.hit_columns(coded.codes, 5), ids[:5, None] == ids[None, :]
            )
        for correction in losses.CORRECTIONS:
            for scale in (1.0, 0.5):
                want_loss, want_weight = losses.sampled_softmax_terms(
                    np.diag(scores[:, :5]),
                    scores,
                    correction,
                    None if correction == "none" else log_q,
                    log_q[:5],
                    mask,
                    log_q_scale=scale,
                )
                with tf.GradientTape() as tape:
                    s = tf.constant(scores)
                    tape.watch(s)
                    want_sum = tf.reduce_sum(
                        losses.sampled_softmax_terms(
                            tf.linalg.diag_part(s[:, :5]),
                            s,
                            correction,
                            None if correction == "none" else log_q,
                            log_q[:5],
                            mask,
                            log_q_scale=scale,
                        )[0]
                    )
                want_gradient = tape.gradient(want_sum, s)
                for form in ("mask", "hits"):
                    msg = f"{correction}, lambda {scale}, {form}"
                    with tf.GradientTape() as tape:
                        s = tf.constant(scores)
                        tape.watch(s)
                        loss, weight = losses.column_softmax_terms(
                            s,
                            correction,
                            None if correction == "none" else tf.constant(log_q),
                            tf.constant(mask if form == "mask" else mask | ~hits_mask),
                            hits if form == "hits" else None,
                            log_q_scale=scale,
                            num_valid=tf.constant(mask.sum(1).astype(np.float32)),
                        )
                        total = tf.reduce_sum(loss)
                    self.assertAllClose(loss, want_loss, rtol=1e-5, atol=1e-6, msg=msg)
                    numpy_loss, numpy_weight = reference.sampled_softmax(
                        np.diag(scores[:, :5]),
                        scores,
                        correction,
                        log_q,
                        log_q[:5],
                        mask,
                        log_q_scale=scale,
                    )
                    self.assertAllClose(loss, numpy_loss, rtol=1e-5, atol=1e-6, msg=msg)
                    if correction == "improved":
                        self.assertAllClose(weight, want_weight, rtol=1e-5, atol=1e-6, msg=msg)
                        self.assertAllClose(weight, numpy_weight, rtol=1e-5, atol=1e-6, msg=msg)
                        self.assertEqual(float(loss[2]), 0.0)
                    else:
                        self.assertIsNone(weight)
                    gradient = tape.gradient(total, s)
                    self.assertTrue(np.isfinite(gradient.numpy()).all(), msg)
                    self.assertAllClose(gradient, want_gradient, rtol=1e-5, atol=1e-6, msg=msg)

    def test_accidental_hits_of_every_id_kind_and_improved_needs_its_count(self):
        # Negative ids, ids past 2**32, int32 and strings: the same hits as a comparison.
        raw = np.array([-5, 2**40, -5, 7, 2**40 + 1, 2**40, 0])
        want = raw[:4, None] == raw[None, :]
        for ids in (raw, raw.astype(str), np.array([-3, 9, -3, 4, 8, 9, 0], np.int32)):
            equal = ids[:4, None] == ids[None, :]
            hits = negatives.accidental_hits(tf.constant(ids), 4)
            self.assertAllEqual(negatives.hit_columns(hits.codes, 4), equal)
            self.assertAllEqual(hits.per_row, equal.sum(1) - 1)
        self.assertAllEqual(want.sum(1) - 1, [1, 1, 1, 0])
        scores = tf.zeros([2, 3])
        with self.assertRaisesRegex(ValueError, r"needs `num_valid`.*received num_valid=None"):
            losses.column_softmax_terms(scores, "improved", tf.fill([3], -1.0), None)

    def test_unknown_correction_is_refused_on_every_path(self):
        # Not silently "improved", the formula's last branch.
        pos, neg = np.zeros([2], np.float32), np.zeros([2, 3], np.float32)
        log_q = np.full([3], -1.0, np.float32)
        for call in (
            lambda: losses.sampled_softmax_terms(pos, neg, "standrd", log_q, log_q[:2]),
            lambda: losses.sampled_softmax_loss(
                pos, neg, correction="standrd", negative_log_q=log_q, positive_log_q=log_q[:2]
            ),
        ):
            with self.assertRaisesRegex(
                ValueError,
                r"`correction` must be one of 'none', "
                r"'standard', 'standard_negatives', 'improved'; "
                r"received correction='standrd'",
            ):
                call()

    def test_missing_log_q(self):
        with self.assertRaisesRegex(
            ValueError,
            r"correction='standard' needs `positive_log_q`; "
            r"received positive_log_q=None",
        ):
            self.call(correction="standard", positive_log_q=None)
        with self.assertRaisesRegex(
            ValueError,
            r"correction='improved' needs `positive_log_q` "
            r"\(or pass log_q_excludes_positive=True",
        ):
            self.call(positive_log_q=None)
        with self.assertRaisesRegex(
            ValueError,
            r"correction='improved' needs sampling "
            r"probabilities: pass `negative_log_q`; "
            r"received negative_log_q=None",
        ):
            self.call(negative_log_q=None)
        with self.assertRaisesRegex(
            ValueError,
            r"correction='standard_negatives' needs "
            r"sampling probabilities: pass `negative_log_q`; "
            r"received negative_log_q=None",
        ):
            self.call(correction="standard_negatives", negative_log_q=None)
        # The positive enters raw: its log Q is not needed.
        self.call(correction="standard_negatives", positive_log_q=None)

    def test_non_float_inputs(self):
        with self.assertRaisesRegex(
            TypeError,
            r"`negative_logits` must be a floating-point "
            r"tensor; received negative_logits with dtype int32",
        ):
            self.call(negative_logits=np.zeros([2, 3], np.int32))
        with self.assertRaisesRegex(
            TypeError,
            r"`negative_mask` must be a bool tensor.*"
            r"received negative_mask with dtype float32",
        ):
            self.call(negative_mask=np.ones([2, 3], np.float32))


class OtherLossesTest(tf.test.TestCase, parameterized.TestCase):
    def test_full_softmax_matches_reference(self):
        rng = np.random.default_rng(0)
        logits = rng.normal(size=(4, 7)).astype(np.float32)
        labels = np.array([0, 3, 6, 2])
        mask = np.ones(7, bool)
        mask[5] = False
        got = losses.full_softmax_loss(logits, labels, mask=mask)
        want = [reference.logsumexp(logits[b][mask]) - logits[b, labels[b]] for b in range(4)]
        self.assertAllClose(got, want, rtol=1e-6)
        self.assertAllClose(losses.full_softmax_loss([[0.0, 0.0, 0.0]], [1]), [np.log(3.0)])

    def test_full_softmax_errors(self):
        with self.assertRaisesRegex(
            TypeError,
            r"`labels` must be an integer tensor of item "
            r"indices; received labels with dtype float32",
        ):
            losses.full_softmax_loss([[0.0, 1.0]], [0.0])
        # A label without a column: an error, or NaN under XLA (which clamped it before).
        logits, labels = tf.zeros([2, 3]), tf.constant([1, 3])
        message = r"`labels` must hold ids in \[0, 3\), one per column of `logits`"
        with self.assertRaisesRegex(ValueError, message):
            losses.full_softmax_loss(logits, labels)
        with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message):
            tf.function(losses.full_softmax_loss)(logits, labels)
        got = tf.function(losses.full_softmax_loss, jit_compile=True)(logits, labels).numpy()
        self.assertAllClose(got[0], np.log(3.0))
        self.assertTrue(np.isnan(got[1]))

    def test_bce_matches_reference_and_exact_value(self):
        pos, neg, _, _, mask = _random_inputs(8)
        self.assertAllClose(
            losses.bce_loss(pos, neg, mask), reference.bce(pos, neg, mask), rtol=1e-6
        )
        # -log sigmoid(0) - log(1 - sigmoid(0)) = 2 log 2.
        self.assertAllClose(losses.bce_loss([0.0], [[0.0]]), [2 * np.log(2.0)])

    @parameterized.parameters((0.0, 1.0), (1.0, 2 / 99), (0.75, 0.75 * (2 / 99) + 0.25))
    def test_gbce_beta(self, t, want):
        # alpha = 2 / 99; beta = alpha * (t (1 - 1/alpha) + 1/alpha) = t alpha + (1 - t).
        self.assertAllClose(losses.gbce_beta(2, 100, t), want)

    def test_gbce_matches_gsasrec_transformed_logit(self):
        pos, neg, _, _, mask = _random_inputs(9, num=4)
        beta = losses.gbce_beta(4, 50, 0.75)
        # gSASRec: positive logit -> log(1 / (sigmoid(s)^-beta - 1)), then plain BCE.
        sig = 1.0 / (1.0 + np.exp(-pos.astype(np.float64)))
        transformed = np.log(1.0 / (sig**-beta - 1.0))
        want = reference.bce(transformed, neg, mask)
        got = losses.gbce_loss(pos, neg, num_items=50, t=0.75, negative_mask=mask)
        self.assertAllClose(got, want, rtol=1e-5)
        self.assertAllClose(got, reference.bce(pos, neg, mask, beta=beta), rtol=1e-5)

    def test_gbce_errors(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`t` must be a number in \[0, 1\]; received "
            r"t=1.5",
        ):
            losses.gbce_loss([0.0], [[0.0]], num_items=10, t=1.5)
        with self.assertRaisesRegex(
            ValueError,
            r"`num_items` must exceed the number of "
            r"negatives per positive \(3\); received num_items=3",
        ):
            losses.gbce_loss([0.0], [[0.0, 0.0, 0.0]], num_items=3, t=0.5)
        unknown_n = tf.function(
            lambda neg: losses.gbce_loss([0.0], neg, num_items=9, t=0.5),
            input_signature=[tf.TensorSpec([1, None])],
        )
        with self.assertRaisesRegex(
            ValueError,
            r"gbce_loss needs a static number of negatives; "
            r"received negative_logits with shape \(1, None\)",
        ):
            unknown_n.get_concrete_function()


class SampledSoftmaxLossLayerTest(tf.test.TestCase):
    def _inputs(self):
        pos, neg, neg_log_q, pos_log_q, mask = _random_inputs(10)
        return pos, neg, np.broadcast_to(neg_log_q, neg.shape).copy(), pos_log_q, mask

    def test_call(self):
        pos, neg, neg_log_q, pos_log_q, mask = self._inputs()
        layer = losses.SampledSoftmaxLoss(correction="improved")
        want, _ = reference.sampled_softmax(pos, neg, "improved", neg_log_q, pos_log_q, mask)
        self.assertAllClose(layer(pos, neg, neg_log_q, pos_log_q, mask), want, atol=1e-5)

    def _functional_model(self, layer):
        pos = tf.keras.Input(shape=(), name="pos")
        neg = tf.keras.Input(shape=(9,), name="neg")
        neg_log_q = tf.keras.Input(shape=(9,), name="neg_log_q")
        pos_log_q = tf.keras.Input(shape=(), name="pos_log_q")
        mask = tf.keras.Input(shape=(9,), name="mask", dtype=tf.bool)
        out = layer(pos, neg, neg_log_q, pos_log_q, mask)
        return tf.keras.Model([pos, neg, neg_log_q, pos_log_q, mask], out)

    def test_predict_in_functional_model(self):
        inputs = self._inputs()
        model = self._functional_model(losses.SampledSoftmaxLoss(correction="standard"))
        want, _ = reference.sampled_softmax(inputs[0], inputs[1], "standard", *inputs[2:])
        self.assertAllClose(model.predict(list(inputs), verbose=0), want, atol=1e-5)

    def test_serialization_round_trip(self):
        layer = losses.SampledSoftmaxLoss(
            correction="improved", log_q_excludes_positive=True, name="my_loss"
        )
        restored = tf.keras.layers.deserialize(tf.keras.layers.serialize(layer))
        self.assertIsInstance(restored, losses.SampledSoftmaxLoss)
        self.assertEqual(restored.get_config(), layer.get_config())
        self.assertEqual(restored.correction, "improved")
        self.assertTrue(restored.log_q_excludes_positive)

    def test_model_saving(self):
        inputs = self._inputs()
        model = self._functional_model(losses.SampledSoftmaxLoss(correction="improved"))
        path = os.path.join(tempfile.mkdtemp(), "model.keras")
        model.save(path)
        restored = tf.keras.models.load_model(path)
        self.assertAllClose(
            restored.predict(list(inputs), verbose=0), model.predict(list(inputs), verbose=0)
        )

    def test_layer_errors(self):
        with self.assertRaisesRegex(ValueError, r"received correction='Improved'"):
            losses.SampledSoftmaxLoss(correction="Improved")
        with self.assertRaisesRegex(
            TypeError,
            r"`log_q_excludes_positive` must be a bool; "
            r"received log_q_excludes_positive='yes'",
        ):
            losses.SampledSoftmaxLoss(correction="none", log_q_excludes_positive="yes")


if __name__ == "__main__":
    tf.test.main()
