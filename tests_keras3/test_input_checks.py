"""Bad inputs to keras_logq (issue 47, item 6), on whichever backend runs the suite.

Every argument of `SampledSoftmax`, the losses, the samplers and the estimators is checked
before anything is broadcast: a static shape that does not fit is a ValueError at trace time
naming the argument the caller passed and the shapes received. The log Q shapes keras-rs
users pass ([N], [1, N], [B, N]) are accepted; [B, 1] is refused. Value checks have no
portable assertion in Keras 3, so they are marked in the result, the same on every backend,
eager or compiled: a label row with no positive has loss 0 and no gradient, one with two
positives a NaN loss; an id outside a `StaticFrequency`'s table reads a NaN log Q.
"""

import re

import numpy as np
import pytest
from keras import ops

import keras_logq
from keras_logq import losses
from keras_logq import negatives
from tests import reference
from tests_keras3.backend import compiled
from tests_keras3.backend import gradients
from tests_keras3.backend import numpy

B = N = 6


def _scores_and_log_q(seed=0):
    rng = np.random.default_rng(seed)
    scores = rng.normal(size=(B, N)).astype(np.float32)
    ids = np.array([3, 1, 4, 7, 2, 5], np.int32)
    q = reference.ZIPF_Q[:10] / reference.ZIPF_Q[:10].sum()
    return scores, ids, np.log(q[ids]).astype(np.float32)


# ------------------------------------------------------------------ SampledSoftmax: log Q


def test_log_q_of_the_wrong_length_names_candidate_log_q():
    # Before: the backend's broadcast error ("Incompatible shapes: [7] vs. [6,6]").
    scores, _, _ = _scores_and_log_q()
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`candidate_log_q` must have shape [N] or [1, N] (shared by the rows) or [B, N] "
            "(per row), one value per column of `scores` (B=6, N=6); received candidate_log_q "
            "with shape (7,) and scores with shape (6, 6)."
        ),
    ):
        keras_logq.SampledSoftmax()(
            scores, np.eye(N, dtype=np.float32), candidate_log_q=np.full([7], -2.0, np.float32)
        )


@pytest.mark.parametrize("correction", losses.CORRECTIONS)
def test_log_q_as_n_1n_and_bn_gives_one_loss(correction):
    # Before: [1, N] was refused by an error naming `negative_log_q`.
    scores, _, log_q = _scores_and_log_q()
    mask = ~np.eye(N, dtype=bool)
    want, _ = reference.sampled_softmax(np.diag(scores), scores, correction, log_q, log_q, mask)
    layer = keras_logq.SampledSoftmax(correction=correction)
    for shaped in (log_q, log_q[None, :], np.broadcast_to(log_q, (B, N)).copy()):
        got = layer(scores, np.eye(N, dtype=np.float32), candidate_log_q=shaped)
        np.testing.assert_allclose(
            numpy(got), want, rtol=1e-5, atol=1e-5, err_msg=str(shaped.shape)
        )


def test_log_q_of_shape_b_1_is_refused_with_the_reason():
    # Before: refused by an error naming `negative_log_q`, a name the caller never used.
    scores, _, log_q = _scores_and_log_q()
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`candidate_log_q` must have shape [N] or [1, N] (shared by the rows) or [B, N] "
            "(per row), one value per column of `scores` (B=6, N=6); received candidate_log_q "
            "with shape (6, 1) and scores with shape (6, 6). A [B, 1] column would give every "
            "candidate of a row the same value; pass one value per candidate, as [N] or "
            "[1, N]."
        ),
    ):
        keras_logq.SampledSoftmax()(
            scores, np.eye(N, dtype=np.float32), candidate_log_q=log_q[:, None]
        )


def test_missing_or_non_float_log_q_names_candidate_log_q():
    scores, _, log_q = _scores_and_log_q()
    with pytest.raises(
        ValueError,
        match=r"correction='improved' needs sampling probabilities: "
        r"pass `candidate_log_q`; received candidate_log_q=None",
    ):
        keras_logq.SampledSoftmax()(scores)
    with pytest.raises(
        TypeError,
        match=r"`candidate_log_q` must be a floating-point tensor; "
        r"received candidate_log_q with dtype int32",
    ):
        keras_logq.SampledSoftmax()(scores, candidate_log_q=np.zeros([N], np.int32))
    # Correction "none" reads no log Q.
    loss = keras_logq.SampledSoftmax(correction="none")(scores)
    assert np.all(np.isfinite(numpy(loss)))


def test_the_functions_take_log_q_as_1n_and_name_negative_log_q():
    pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(2)
    kwargs = dict(correction="improved", positive_log_q=pos_log_q, negative_mask=mask)
    want = numpy(losses.sampled_softmax_loss(pos, neg, negative_log_q=neg_log_q, **kwargs))
    got = numpy(losses.sampled_softmax_loss(pos, neg, negative_log_q=neg_log_q[None, :], **kwargs))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(
        numpy(
            keras_logq.improved_weight(
                pos,
                neg,
                negative_log_q=neg_log_q[None, :],
                **{k: v for k, v in kwargs.items() if k != "correction"},
            )
        ),
        numpy(
            keras_logq.improved_weight(
                pos,
                neg,
                negative_log_q=neg_log_q,
                **{k: v for k, v in kwargs.items() if k != "correction"},
            )
        ),
        rtol=1e-6,
    )
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`negative_log_q` must have shape [N] or [1, N] (shared by the rows) or [B, N] "
            "(per row), one value per column of `negative_logits` (B=6, N=9); received "
            "negative_log_q with shape (6, 1)"
        ),
    ):
        losses.sampled_softmax_loss(pos, neg, negative_log_q=neg_log_q[:6, None], **kwargs)
    with pytest.raises(
        ValueError,
        match=r"`positive_log_q` must have rank 1; received "
        r"positive_log_q with shape \(6, 1\)",
    ):
        losses.sampled_softmax_loss(
            pos,
            neg,
            negative_log_q=neg_log_q,
            correction="standard",
            positive_log_q=pos_log_q[:, None],
        )


# ------------------------------------------------------- SampledSoftmax: ids, mask, labels


def test_candidate_ids_of_the_wrong_length_name_candidate_ids():
    # Before: a backend error (TensorFlow: "indices[5] = 5 is not in [0, 5)"; JAX:
    # "incompatible shapes for broadcasting: (6, 6), (6, 5)").
    scores, ids, log_q = _scores_and_log_q()
    for wrong in (ids[:5], np.arange(7, dtype=np.int32)):
        with pytest.raises(
            ValueError,
            match=re.escape(
                f"`candidate_ids` must have shape [N] or [1, N] (shared by the rows) or [B, N] "
                f"(per row), one value per column of `scores` (B=6, N=6); received "
                f"candidate_ids with shape ({len(wrong)},)"
            ),
        ):
            keras_logq.SampledSoftmax()(scores, candidate_log_q=log_q, candidate_ids=wrong)
    with pytest.raises(TypeError, match=r"`candidate_ids` must be an integer tensor"):
        keras_logq.SampledSoftmax()(
            scores, candidate_log_q=log_q, candidate_ids=ids.astype(np.float32)
        )


def test_candidate_ids_as_n_1n_and_bn_mask_the_same_hits():
    scores, _, log_q = _scores_and_log_q()
    ids = np.array([3, 1, 3, 7, 2, 5], np.int32)  # Rows 0 and 2 share id 3.
    layer = keras_logq.SampledSoftmax(correction="standard")
    mask = ids[:, None] != ids[None, :]
    want, _ = reference.sampled_softmax(np.diag(scores), scores, "standard", log_q, log_q, mask)
    for shaped in (ids, ids[None, :], np.broadcast_to(ids, (B, N)).copy()):
        got = layer(scores, candidate_log_q=log_q, candidate_ids=shaped)
        np.testing.assert_allclose(
            numpy(got), want, rtol=1e-5, atol=1e-5, err_msg=str(shaped.shape)
        )


def test_negative_mask_and_labels_of_the_wrong_shape_are_named():
    scores, _, log_q = _scores_and_log_q()
    layer = keras_logq.SampledSoftmax()
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`negative_mask` must have shape [N] or [1, N] (shared by the rows) or [B, N] "
            "(per row), one value per column of `scores` (B=6, N=6); received negative_mask "
            "with shape (6, 5)"
        ),
    ):
        layer(scores, candidate_log_q=log_q, negative_mask=np.ones([B, 5], bool))
    with pytest.raises(TypeError, match=r"`negative_mask` must be a bool tensor"):
        layer(scores, candidate_log_q=log_q, negative_mask=np.ones([B, N], np.float32))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`labels` must have the shape of `scores`, one entry per entry; received labels "
            "with shape (6, 5) and scores with shape (6, 6)."
        ),
    ):
        layer(scores, np.eye(B, 5, dtype=np.float32), candidate_log_q=log_q)
    with pytest.raises(
        ValueError,
        match=r"`labels` must have rank 2; received labels with "
        r"shape \(6,\)",
    ):
        layer(scores, np.arange(B, dtype=np.int32), candidate_log_q=log_q)
    # A shared [N] mask equals the same mask given per row.
    column_mask = np.array([True, True, False, True, True, True])
    np.testing.assert_allclose(
        numpy(layer(scores, candidate_log_q=log_q, negative_mask=column_mask)),
        numpy(
            layer(
                scores,
                candidate_log_q=log_q,
                negative_mask=np.broadcast_to(column_mask, (B, N)).copy(),
            )
        ),
        rtol=1e-6,
    )


def _bad_labels():
    labels = np.eye(N, dtype=np.float32)
    labels[1] = 0.0  # Row 1: no positive.
    labels[2, 4] = 1.0  # Row 2: two positives.
    return labels


@pytest.mark.parametrize("correction", losses.CORRECTIONS)
@pytest.mark.parametrize("label_dtype", ["float32", "int32", "bool"])
def test_rows_without_exactly_one_positive(correction, label_dtype):
    # Before: row 1 (no positive) and row 2 (two positives) gave finite losses (row 2's
    # positive logit was the sum of both columns).
    scores, _, log_q = _scores_and_log_q()
    labels = _bad_labels().astype(label_dtype)
    layer = keras_logq.SampledSoftmax(correction=correction)
    good = numpy(layer(scores, candidate_log_q=log_q))
    for run in (layer, compiled(lambda s, y, q: layer(s, y, candidate_log_q=q))):
        got = (
            numpy(run(scores, labels, candidate_log_q=log_q))
            if run is layer
            else numpy(run(scores, labels, log_q))
        )
        assert got[1] == 0.0, got
        assert np.isnan(got[2]), got
        np.testing.assert_allclose(got[[0, 3, 4, 5]], good[[0, 3, 4, 5]], rtol=1e-5)
    (d_scores,) = gradients(
        lambda s: ops.sum(
            ops.where(
                ops.isnan(layer(s, labels, candidate_log_q=log_q)),
                0.0,
                layer(s, labels, candidate_log_q=log_q),
            )
        ),
        scores,
    )
    assert np.all(np.isfinite(d_scores)) and not d_scores[1].any()


def test_scores_and_embeddings_are_checked_before_the_product():
    rng = np.random.default_rng(3)
    query = rng.normal(size=(B, 4)).astype(np.float32)
    layer = keras_logq.SampledSoftmax(correction="none")
    with pytest.raises(
        ValueError,
        match=r"`query_embeddings` and `candidate_embeddings` "
        r"disagree in size: query_embeddings.shape=\(6, 4\) \(axis 1\) but "
        r"candidate_embeddings.shape=\(6, 5\) \(axis 1\)",
    ):
        layer(query_embeddings=query, candidate_embeddings=np.ones([B, 5], np.float32))
    with pytest.raises(
        ValueError,
        match=r"takes `scores` or the embeddings, not both; received "
        r"scores and query_embeddings",
    ):
        layer(query @ query.T, query_embeddings=query)
    with pytest.raises(
        ValueError,
        match=r"`scores` must be \[batch, num_candidates\] or "
        r"\[batch, length, num_candidates\]; received scores with shape \(6,\)",
    ):
        layer(np.zeros([B], np.float32))


def test_static_checks_raise_at_trace_time_when_compiled():
    scores, _, log_q = _scores_and_log_q()
    layer = keras_logq.SampledSoftmax()
    step = compiled(lambda s, q: layer(s, candidate_log_q=q))
    np.testing.assert_allclose(
        numpy(step(scores, log_q[None, :])), numpy(layer(scores, candidate_log_q=log_q)), rtol=1e-5
    )
    with pytest.raises(ValueError, match=r"received candidate_log_q with shape \(6, 1\)"):
        step(scores, log_q[:, None])


# ------------------------------------------------------------------ the other losses


def test_full_softmax_mask_is_checked_per_column():
    logits = np.random.default_rng(1).normal(size=(2, 3)).astype(np.float32)
    labels = np.array([0, 2], np.int32)
    want = numpy(losses.full_softmax_loss(logits, labels, mask=np.array([True, False, True])))
    got = numpy(losses.full_softmax_loss(logits, labels, mask=np.array([[True, False, True]])))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # Before: the backend's broadcast error ("Incompatible shapes: [1,4] vs. [2,3]").
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`mask` must have shape [N] or [1, N] (shared by the rows) or [B, N] (per row), "
            "one value per column of `logits` (B=2, N=3); received mask with shape (4,)"
        ),
    ):
        losses.full_softmax_loss(logits, labels, mask=np.ones([4], bool))


def test_negatives_loss_names_its_arguments():
    sampler = negatives.InBatchSampler(probabilities=reference.ZIPF_Q, seed=0)
    ids = np.array([0, 1, 2], np.int32)
    drawn = sampler(ids, ids, candidate_embeddings=np.ones([3, 2], np.float32))
    query = np.ones([3, 2], np.float32)
    with pytest.raises(
        ValueError,
        match=r"`temperature` must be a positive number; received "
        r"temperature=0",
    ):  # Before: a NaN loss.
        losses.negatives_loss(query, query, drawn, correction="none", temperature=0)
    with pytest.raises(
        ValueError,
        match=r"`positive_embeddings` must have the shape of "
        r"`query_embeddings`, one entry per entry; received positive_embeddings "
        r"with shape \(2, 2\) and query_embeddings with shape \(3, 2\)",
    ):
        losses.negatives_loss(query, query[:2], drawn, correction="none")
    with pytest.raises(
        ValueError,
        match=r"`negatives.embeddings` and `query_embeddings` "
        r"disagree in size",
    ):
        losses.negatives_loss(
            np.ones([3, 5], np.float32), np.ones([3, 5], np.float32), drawn, correction="none"
        )
    with pytest.raises(
        TypeError,
        match=r"`negatives` must be the `Negatives` a keras_logq "
        r"sampler returns; received negatives of type tuple",
    ):
        losses.negatives_loss(query, query, tuple(drawn), correction="none")
    with pytest.raises(ValueError, match=r"`correction` must be one of"):
        losses.negatives_loss(query, query, drawn, correction="Improved")


# ------------------------------------------------------------------ samplers


def test_in_batch_sampler_checks_its_candidates():
    sampler = negatives.InBatchSampler(probabilities=reference.ZIPF_Q, seed=0)
    ids = np.array([0, 1, 2], np.int32)
    # Before: the backend's broadcast error at the mask ("Incompatible shapes: [3,3] vs.
    # [1,2]"), and embeddings of 4 rows for 3 ids were taken silently.
    with pytest.raises(
        ValueError,
        match=r"`candidate_mask` must have the shape of "
        r"`candidate_ids`, one entry per entry; received candidate_mask with "
        r"shape \(2,\) and candidate_ids with shape \(3,\)",
    ):
        sampler(ids, ids, candidate_mask=np.array([True, False]))
    with pytest.raises(
        ValueError,
        match=r"`candidate_embeddings` and `candidate_ids` disagree "
        r"in size: candidate_embeddings.shape=\(4, 2\) \(axis 0\)",
    ):
        sampler(ids, ids, candidate_embeddings=np.ones([4, 2], np.float32))
    with pytest.raises(
        TypeError,
        match=r"`candidate_embeddings` must be a floating-point "
        r"tensor",
    ):
        sampler(ids, ids, candidate_embeddings=np.ones([3, 2], np.int32))


def test_uniform_and_mixed_samplers_check_their_arguments():
    ids = np.array([0, 1, 2], np.int32)
    sampler = negatives.UniformSampler(10, 4, seed=0)
    with pytest.raises(
        TypeError,
        match=r"`embedding_fn` must be a callable mapping ids to "
        r"embeddings \(the item tower\); received embedding_fn=3",
    ):
        sampler(ids, embedding_fn=3)
    with pytest.raises(ValueError, match=r"`embedding_fn\(ids\)` and `ids` disagree in size"):
        sampler(ids, embedding_fn=lambda x: ops.ones((5, 2)))
    # Before: a third of the uniform draws read a NaN log Q, at random.
    with pytest.raises(
        ValueError,
        match=re.escape(
            "MixedSampler draws uniform ids in [first_id, first_id + num_items) = [1, 11), but "
            "`probabilities` has 10 items (ids [0, 10)): the ids beyond would read a NaN log "
            "Q; received num_items=10, first_id=1."
        ),
    ):
        negatives.MixedSampler(10, 2, 2, first_id=1, probabilities=np.full(10, 0.1))
    negatives.MixedSampler(9, 2, 2, first_id=1, probabilities=np.full(10, 0.1))


@pytest.mark.parametrize("deduplicate", [False, True])
def test_samplers_follow_the_id_rule_eager_and_compiled(deduplicate):
    """An id outside the table reads a NaN log Q (never a wrapped or clamped row); a padding
    slot may hold any id."""
    sampler = negatives.InBatchSampler(deduplicate=deduplicate, probabilities=reference.ZIPF_Q)
    ids = np.array([0, 1, 50, -1], np.int32)  # 50 items: ids 50 and -1 are outside.
    for run in (sampler, compiled(lambda p, c: sampler(p, c))):
        drawn = run(ids, ids)
        log_q, positive_log_q = numpy(drawn.log_q), numpy(drawn.positive_log_q)
        assert np.isnan(positive_log_q[2:]).all() and np.isfinite(positive_log_q[:2]).all()
        assert np.isnan(log_q[..., 2:]).all() and np.isfinite(log_q[..., :2]).all()
    embeddings = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    padded = sampler(
        ids[:2],
        np.array([0, 1, 7, -1], np.int32),
        candidate_embeddings=embeddings,
        candidate_mask=np.array([True, True, True, False]),
    )
    for correction in losses.CORRECTIONS:
        loss = numpy(
            losses.negatives_loss(embeddings[:2], embeddings[:2], padded, correction=correction)
        )
        assert np.isfinite(loss).all(), correction


# ------------------------------------------------------------------ estimators


@pytest.mark.parametrize(
    "estimator",
    [
        lambda: keras_logq.CountMinSketchEstimator(width=16, depth=2),
        lambda: keras_logq.CountMinSketchEstimator(width=16, depth=2, conservative=True),
        lambda: keras_logq.HashedFrequencyEstimator(num_buckets=16),
    ],
)
def test_update_mask_must_match_the_ids(estimator):
    # Before: a [1] mask was broadcast over every id silently (a False one dropped the step).
    estimator = estimator()
    ids = np.array([0, 1, 2], np.int32)
    for mask in (np.array([False]), np.array([True, False])):
        with pytest.raises(
            ValueError,
            match=re.escape(
                f"`mask` must have the shape of `ids`, one entry per entry; received mask with "
                f"shape ({len(mask)},) and ids with shape (3,)."
            ),
        ):
            estimator.update(ids, mask=mask)
    estimator.update(ids.reshape(3, 1), mask=np.array([[True], [False], [True]]))


def test_num_draws_and_probabilities_are_checked():
    frequency = keras_logq.StaticFrequency([0.5, 0.25, 0.25])
    ids = np.array([0, 1], np.int32)
    for value, message in (
        (0, "a positive integer; received num_draws=0"),
        (-2.0, "a positive number; received num_draws=-2.0"),
        (True, "a positive number; received num_draws=True"),
    ):
        with pytest.raises(ValueError, match=f"`num_draws` must be {message}"):
            frequency.log_inclusion_probability(ids, value)
    with pytest.raises(
        ValueError,
        match=r"`num_draws` must have rank 0; received num_draws "
        r"with shape \(2,\)",
    ):
        frequency.log_inclusion_probability(ids, np.array([2.0, 3.0], np.float32))
    np.testing.assert_allclose(
        numpy(frequency.log_inclusion_probability(ids, 2.5)),
        np.log(1 - (1 - np.array([0.5, 0.25])) ** 2.5),
        rtol=1e-5,
    )
    with pytest.raises(
        ValueError,
        match=r"`probabilities` must be a non-empty 1-D array of "
        r"values in \(0, 1\] \(or a keras_logq estimator\); received 'uniform'",
    ):
        negatives.InBatchSampler(probabilities="uniform")
    # The probe: the same NaNs on every backend.
    np.testing.assert_array_equal(
        numpy(frequency.log_q(np.array([3, -1], np.int32))), [np.nan, np.nan]
    )


# ------------------------------------------------------------------ host ids the backend loses


def test_string_ids_are_refused_by_name_on_every_backend():
    strings = np.array(["a", "b"])
    message = r"`ids` must be an integer tensor of item ids; received ids with string values"
    with pytest.raises(TypeError, match=message):
        keras_logq.StaticFrequency(probabilities=np.full([10], 0.1)).log_q(strings)
    with pytest.raises(TypeError, match=message):
        keras_logq.CountMinSketchEstimator(width=64).update(strings)
    scores, _, log_q = _scores_and_log_q()
    with pytest.raises(TypeError, match=r"`candidate_ids` must be an integer tensor"):
        keras_logq.SampledSoftmax(correction="standard")(
            np.eye(B, N, dtype=np.float32),
            scores,
            candidate_log_q=log_q,
            candidate_ids=np.array(list("abcdef")),
        )


def test_temperature_is_a_finite_positive_number_of_any_numeric_type():
    # math.isfinite, not np.isfinite (which torch.compile traced as a tensor, breaking the
    # graph at every call): the same values accepted and refused as before.
    scores, ids, log_q = _scores_and_log_q()
    labels = np.eye(B, dtype=np.float32)
    for temperature in (1, 0.5, np.float32(2.0), np.int64(3)):
        loss = keras_logq.SampledSoftmax(temperature=temperature)(
            scores, labels, candidate_log_q=log_q, candidate_ids=ids
        )
        assert np.all(np.isfinite(numpy(loss)))
    for temperature in (float("inf"), float("nan"), np.float32("nan"), 10**400, 0, True):
        with pytest.raises(ValueError, match=r"`temperature` must be a positive number"):
            keras_logq.SampledSoftmax(temperature=temperature)
