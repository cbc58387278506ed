"""keras_logq.losses against the numpy references and the exact values tfrs_logq's tests use."""

import os
import tempfile

import keras
import numpy as np
import pytest
from keras import ops

import keras_logq
from keras_logq import losses
from tests import reference
from tests_keras3.backend import compiled
from tests_keras3.backend import gradients
from tests_keras3.backend import numpy


@pytest.mark.parametrize("correction", losses.CORRECTIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("per_row_log_q", [False, True])
def test_matches_numpy_reference(correction, seed, per_row_log_q):
    pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(
        seed, per_row_log_q=per_row_log_q
    )
    got = losses.sampled_softmax_loss(
        pos,
        neg,
        correction=correction,
        negative_log_q=neg_log_q,
        positive_log_q=pos_log_q,
        negative_mask=mask,
    )
    want, _ = reference.sampled_softmax(pos, neg, correction, neg_log_q, pos_log_q, mask)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    np.testing.assert_allclose(numpy(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("correction", ["standard", "standard_negatives", "improved"])
@pytest.mark.parametrize("log_q_scale", [0.0, 0.5])
def test_log_q_scale_matches_numpy_reference(correction, log_q_scale):
    pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(4)
    got = losses.sampled_softmax_loss(
        pos,
        neg,
        correction=correction,
        negative_log_q=neg_log_q,
        positive_log_q=pos_log_q,
        negative_mask=mask,
        log_q_scale=log_q_scale,
    )
    want, _ = reference.sampled_softmax(
        pos, neg, correction, neg_log_q, pos_log_q, mask, log_q_scale=log_q_scale
    )
    np.testing.assert_allclose(numpy(got), want, rtol=1e-5, atol=1e-6)
    layer = keras_logq.SampledSoftmax(correction=correction, log_q_scale=log_q_scale)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert restored.log_q_scale == log_q_scale
    with pytest.raises(
        ValueError,
        match=r"`log_q_scale` must be a finite number >= 0; "
        r"received log_q_scale=-1.0",
    ):
        keras_logq.SampledSoftmax(log_q_scale=-1.0)


@pytest.mark.parametrize("correction", ["none", "standard", "standard_negatives", "improved"])
def test_hard_negatives_match_numpy_reference(correction):
    pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(5)
    got = losses.sampled_softmax_loss(
        pos,
        neg,
        correction=correction,
        negative_log_q=neg_log_q,
        positive_log_q=pos_log_q,
        negative_mask=mask,
        log_q_scale=0.5,
        num_hard_negatives=3,
    )
    want, _ = reference.sampled_softmax(
        pos, neg, correction, neg_log_q, pos_log_q, mask, log_q_scale=0.5, num_hard=3
    )
    np.testing.assert_allclose(numpy(got), want, rtol=1e-5, atol=1e-6)
    layer = keras_logq.SampledSoftmax(correction=correction, num_hard_negatives=3)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert restored.num_hard_negatives == 3
    if correction != "none":  # An invalid log Q the mining would drop still gives NaN
        # (in every row where that negative is valid; a masked one is never read).
        bad = np.array(neg_log_q, np.float32)
        bad[..., 0] = 0.5
        got = losses.sampled_softmax_loss(
            pos,
            neg - 100.0 * (np.arange(neg.shape[1]) == 0),
            correction=correction,
            negative_log_q=bad,
            positive_log_q=pos_log_q,
            negative_mask=mask,
            num_hard_negatives=1,
        )
        valid = np.asarray(mask)[:, 0]
        assert valid.any() and np.isnan(numpy(got)[valid]).all()


def test_excluded_positive_log_q_is_used_as_is():
    pos, neg, neg_log_q, _, mask = reference.sampled_inputs(3)
    got = losses.sampled_softmax_loss(
        pos,
        neg,
        correction="improved",
        negative_log_q=neg_log_q,
        negative_mask=mask,
        log_q_excludes_positive=True,
    )
    want, _ = reference.sampled_softmax(pos, neg, "improved", neg_log_q, None, mask, excludes=True)
    np.testing.assert_allclose(numpy(got), want, rtol=1e-5, atol=1e-5)


def test_exact_values():
    case = reference.EXACT_SAMPLED
    for correction, want in case["losses"].items():
        got = losses.sampled_softmax_loss(*case["inputs"], correction=correction, **case["kwargs"])
        np.testing.assert_allclose(numpy(got), [want], rtol=1e-6)
    weight = keras_logq.improved_weight(*case["inputs"], **case["kwargs"])
    np.testing.assert_allclose(numpy(weight), [case["improved_weight"]], rtol=1e-6)


def test_improved_gradient_is_weighted_softmax_minus_onehot():
    pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(4)
    d_pos, d_neg = gradients(
        lambda p, n: ops.sum(
            losses.sampled_softmax_loss(
                p,
                n,
                correction="improved",
                negative_log_q=neg_log_q,
                positive_log_q=pos_log_q,
                negative_mask=mask,
            )
        ),
        pos,
        neg,
    )
    want_pos, want_neg = reference.improved_gradients(pos, neg, neg_log_q, pos_log_q, mask)
    np.testing.assert_allclose(d_pos, want_pos, atol=1e-6)
    np.testing.assert_allclose(d_neg, want_neg, atol=1e-6)


@pytest.mark.parametrize("correction", losses.CORRECTIONS)
def test_row_without_negatives_has_zero_loss_and_gradient(correction):
    pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(5)  # Row 0: none valid.
    kwargs = dict(
        correction=correction,
        negative_log_q=neg_log_q,
        positive_log_q=pos_log_q,
        negative_mask=mask,
    )
    loss = numpy(losses.sampled_softmax_loss(pos, neg, **kwargs))
    d_pos, d_neg = gradients(
        lambda p, n: ops.sum(losses.sampled_softmax_loss(p, n, **kwargs)), pos, neg
    )
    assert loss[0] == 0.0 and d_pos[0] == 0.0 and not d_neg[0].any()
    assert np.all(np.isfinite(loss)) and np.all(np.isfinite(d_neg))


def test_extreme_logits_stay_finite():
    pos = np.array([80.0, -80.0], np.float32)
    neg = np.array([[-80.0, 80.0], [80.0, -80.0]], np.float32)
    for correction in losses.CORRECTIONS:
        loss = numpy(
            losses.sampled_softmax_loss(
                pos,
                neg,
                correction=correction,
                negative_log_q=np.log([1e-6, 0.5]).astype("f4"),
                positive_log_q=np.log([0.3, 1e-6]).astype("f4"),
            )
        )
        assert np.all(np.isfinite(loss)), correction


def test_log_probabilities_outside_the_unit_interval_give_nan():
    pos, neg = np.zeros([2], np.float32), np.zeros([2, 2], np.float32)
    loss = numpy(
        losses.sampled_softmax_loss(
            pos,
            neg,
            correction="improved",
            negative_log_q=np.array([0.4, -1.0], np.float32),
            positive_log_q=np.array([-1.0, -1.0], np.float32),
        )
    )
    assert np.all(np.isnan(loss))


def test_errors():
    pos, neg = np.zeros([2], np.float32), np.zeros([2, 3], np.float32)
    with pytest.raises(
        ValueError,
        match=r"`correction` must be one of 'none', 'standard', "
        r"'standard_negatives', 'improved'; received correction='Improved'",
    ):
        losses.sampled_softmax_loss(pos, neg, correction="Improved")
    with pytest.raises(
        ValueError,
        match=r"correction='improved' needs sampling "
        r"probabilities: pass `negative_log_q`; "
        r"received negative_log_q=None",
    ):
        losses.sampled_softmax_loss(pos, neg, correction="improved")
    with pytest.raises(
        ValueError,
        match=r"correction='standard' needs `positive_log_q`; "
        r"received positive_log_q=None",
    ):
        losses.sampled_softmax_loss(
            pos, neg, correction="standard", negative_log_q=np.zeros([3], np.float32)
        )
    with pytest.raises(
        TypeError,
        match=r"`negative_logits` must be a floating-point tensor; "
        r"received negative_logits with dtype int32",
    ):
        losses.sampled_softmax_loss(pos, np.zeros([2, 3], np.int32), correction="none")
    with pytest.raises(TypeError, match=r"`negative_mask` must be a bool tensor"):
        losses.sampled_softmax_loss(
            pos, neg, correction="none", negative_mask=np.ones([2, 3], np.float32)
        )
    with pytest.raises(
        ValueError, match=r"`positive_logits` and `negative_logits` disagree in size"
    ):
        losses.sampled_softmax_loss(np.zeros([3], np.float32), neg, correction="none")
    with pytest.raises(
        ValueError,
        match=r"`negative_log_q` must have shape \[N\] or \[1, N\] "
        r"\(shared by the rows\) or \[B, N\] \(per row\), one value per column "
        r"of `negative_logits` \(B=2, N=3\); received negative_log_q with "
        r"shape \(4,\)",
    ):
        losses.sampled_softmax_loss(
            pos, neg, correction="standard_negatives", negative_log_q=np.zeros([4], np.float32)
        )


def test_full_softmax_bce_and_gbce_match_references():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 7)).astype(np.float32)
    labels = np.array([0, 3, 6, 2], np.int32)
    mask = np.ones(7, bool)
    mask[5] = False
    want = [reference.logsumexp(logits[b][mask]) - logits[b, labels[b]] for b in range(4)]
    np.testing.assert_allclose(
        numpy(losses.full_softmax_loss(logits, labels, mask=mask)), want, rtol=1e-6
    )
    # A label without a column reads NaN (JAX wrapped -1 to the last column, XLA clamps 7).
    outside = numpy(losses.full_softmax_loss(logits, np.array([0, 7, -1, 2], np.int32), mask=mask))
    np.testing.assert_allclose(outside[[0, 3]], [want[0], want[3]], rtol=1e-6)
    assert np.isnan(outside[[1, 2]]).all()
    pos, neg, _, _, mask = reference.sampled_inputs(8, num=4)
    np.testing.assert_allclose(
        numpy(losses.bce_loss(pos, neg, mask)), reference.bce(pos, neg, mask), rtol=1e-6
    )
    beta = keras_logq.losses.formulas.gbce_beta(4, 50, 0.75)
    np.testing.assert_allclose(
        numpy(losses.gbce_loss(pos, neg, num_items=50, t=0.75, negative_mask=mask)),
        reference.bce(pos, neg, mask, beta=beta),
        rtol=1e-5,
    )
    with pytest.raises(ValueError, match=r"`t` must be a number in \[0, 1\]; received t=1.5"):
        losses.gbce_loss(pos, neg, num_items=50, t=1.5)


# ----------------------------------------------------------------- the SampledSoftmax layer


def _in_batch(seed=11, batch=6, dim=4):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(batch, dim)).astype(np.float32)
    candidates = rng.normal(size=(batch, dim)).astype(np.float32)
    ids = np.array([3, 1, 3, 7, 2, 5], np.int32)[:batch]
    q = reference.ZIPF_Q[:10] / reference.ZIPF_Q[:10].sum()
    return query, candidates, ids, np.log(q[ids]).astype(np.float32)


@pytest.mark.parametrize("correction", losses.CORRECTIONS)
def test_layer_on_scores_equals_the_function(correction):
    query, candidates, ids, log_q = _in_batch()
    scores = query @ candidates.T / 0.5
    # Column i is row i's positive; row 0 and row 2 share id 3, an accidental hit.
    mask = ids[:, None] != ids[None, :]
    want, _ = reference.sampled_softmax(np.diag(scores), scores, correction, log_q, log_q, mask)
    layer = keras_logq.SampledSoftmax(correction=correction, temperature=0.5)
    got = layer(query @ candidates.T, ops.eye(6), candidate_log_q=log_q, candidate_ids=ids)
    np.testing.assert_allclose(numpy(got), want, rtol=1e-5, atol=1e-5)
    from_embeddings = layer(
        query_embeddings=query,
        candidate_embeddings=candidates,
        candidate_log_q=log_q,
        candidate_ids=ids,
    )
    np.testing.assert_allclose(numpy(from_embeddings), want, rtol=1e-5, atol=1e-5)


def test_layer_predict_in_functional_model():
    query, candidates, ids, log_q = _in_batch()
    scores_in = keras.Input(shape=(6,), batch_size=6, name="scores")
    labels_in = keras.Input(shape=(6,), batch_size=6, name="labels")
    log_q_in = keras.Input(shape=(6,), batch_size=6, name="log_q")
    out = keras_logq.SampledSoftmax(correction="standard")(
        scores_in, labels_in, candidate_log_q=log_q_in
    )
    model = keras.Model([scores_in, labels_in, log_q_in], out)
    scores = query @ candidates.T
    log_q_rows = np.broadcast_to(log_q, (6, 6)).copy()
    got = model.predict([scores, np.eye(6, dtype=np.float32), log_q_rows], verbose=0, batch_size=6)
    want, _ = reference.sampled_softmax(
        np.diag(scores), scores, "standard", log_q_rows, log_q, ~np.eye(6, dtype=bool)
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_layer_serialization_round_trip_and_errors():
    layer = keras_logq.SampledSoftmax(
        correction="standard_negatives",
        temperature=0.05,
        log_q_excludes_positive=True,
        name="my_loss",
    )
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(restored, keras_logq.SampledSoftmax)
    assert restored.get_config() == layer.get_config()
    assert (restored.correction, restored.temperature) == ("standard_negatives", 0.05)
    with pytest.raises(
        ValueError,
        match=r"`temperature` must be a positive number; received "
        r"temperature=0",
    ):
        keras_logq.SampledSoftmax(temperature=0)
    with pytest.raises(TypeError, match=r"received log_q_excludes_positive='yes'"):
        keras_logq.SampledSoftmax(log_q_excludes_positive="yes")
    with pytest.raises(
        ValueError,
        match=r"needs `scores`, or `query_embeddings` and "
        r"`candidate_embeddings`",
    ):
        keras_logq.SampledSoftmax()(candidate_log_q=np.zeros([3], np.float32))


def test_model_with_the_layer_saves_and_loads():
    query, candidates, ids, log_q = _in_batch()
    scores_in = keras.Input(shape=(6,), batch_size=6)
    out = keras_logq.SampledSoftmax(correction="improved", temperature=2.0)(
        scores_in, candidate_log_q=log_q
    )
    model = keras.Model(scores_in, out)
    path = os.path.join(tempfile.mkdtemp(), "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    scores = query @ candidates.T
    np.testing.assert_allclose(
        restored.predict(scores, verbose=0, batch_size=6),
        model.predict(scores, verbose=0, batch_size=6),
        rtol=1e-6,
    )


# ------------------------------------------------------------- per-position (sequence) inputs

B, L, N = 3, 4, 5


def _sequence_inputs(seed, per_position_log_q):
    """[B, L] positives, [B, L, N] negatives and their log Q, and a position mask; the
    padding positions hold what must never reach the loss: NaN logits, log Q > 0."""
    pos, neg, neg_log_q, pos_log_q, negative_mask = reference.sampled_inputs(
        seed, batch=B * L, num=N, per_row_log_q=per_position_log_q
    )
    real = np.random.default_rng(seed).random(B * L) > 0.35
    real[0], real[1] = True, False
    pos, pos_log_q = pos.copy(), pos_log_q.copy()
    pos[~real], pos_log_q[~real] = np.nan, 5.0
    neg = neg.copy()
    neg[~real] = np.nan
    if per_position_log_q:
        neg_log_q = neg_log_q.copy()
        neg_log_q[~real] = 3.0
    flat = dict(
        pos=pos,
        neg=neg,
        neg_log_q=neg_log_q,
        pos_log_q=pos_log_q,
        negative_mask=negative_mask,
        real=real,
    )
    shaped = dict(
        pos=pos.reshape(B, L),
        neg=neg.reshape(B, L, N),
        neg_log_q=neg_log_q.reshape(B, L, N) if per_position_log_q else neg_log_q,
        pos_log_q=pos_log_q.reshape(B, L),
        negative_mask=negative_mask.reshape(B, L, N),
        real=real.reshape(B, L),
    )
    return flat, shaped


def _hand_masked(flat, values):
    """The flattened computation of the real positions, 0 at padding, as [B, L]."""
    out = np.zeros(B * L)
    out[flat["real"]] = values
    return out.reshape(B, L)


@pytest.mark.parametrize("correction", losses.CORRECTIONS)
@pytest.mark.parametrize("per_position_log_q", [False, True])
def test_per_position_loss_equals_the_flattened_hand_masked_rows(correction, per_position_log_q):
    flat, seq = _sequence_inputs(31, per_position_log_q)
    real = flat["real"]
    rows_log_q = flat["neg_log_q"][real] if per_position_log_q else flat["neg_log_q"]
    want_rows, _ = reference.sampled_softmax(
        flat["pos"][real],
        flat["neg"][real],
        correction,
        rows_log_q,
        flat["pos_log_q"][real],
        flat["negative_mask"][real],
    )
    want = _hand_masked(flat, want_rows)

    def loss(pos, neg):
        return losses.sampled_softmax_loss(
            pos,
            neg,
            correction=correction,
            negative_log_q=seq["neg_log_q"],
            positive_log_q=seq["pos_log_q"],
            negative_mask=seq["negative_mask"],
            position_mask=seq["real"],
        )

    got = numpy(loss(seq["pos"], seq["neg"]))
    assert got.shape == (B, L)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.isfinite(want_rows).all() and want_rows.sum() != 0.0
    # The mean over the real positions only.
    np.testing.assert_allclose(
        numpy(keras_logq.masked_mean(got, seq["real"])), want_rows.mean(), rtol=1e-5
    )
    # Padding (NaN logits, invalid log Q) passes no gradient, and no NaN to the real ones.
    d_pos, d_neg = gradients(lambda p, n: ops.sum(loss(p, n)), seq["pos"], seq["neg"])
    assert np.isfinite(d_pos).all() and np.isfinite(d_neg).all()
    assert not d_pos[~seq["real"]].any() and not d_neg[~seq["real"]].any()
    if correction == "improved":
        np.testing.assert_allclose(
            numpy(
                losses.improved_weight(
                    seq["pos"],
                    seq["neg"],
                    negative_log_q=seq["neg_log_q"],
                    positive_log_q=seq["pos_log_q"],
                    negative_mask=seq["negative_mask"],
                    position_mask=seq["real"],
                )
            ),
            _hand_masked(
                flat,
                reference.sampled_softmax(
                    flat["pos"][real],
                    flat["neg"][real],
                    "improved",
                    rows_log_q,
                    flat["pos_log_q"][real],
                    flat["negative_mask"][real],
                )[1],
            ),
            rtol=1e-5,
            atol=1e-6,
        )


def test_exact_per_position_values():
    """EXACT_SAMPLED's row at position (0, 1) of a [1, 2] sequence whose position 0 is
    padding: [0, loss], mean = loss."""
    (pos, neg), kwargs = reference.EXACT_SAMPLED["inputs"], reference.EXACT_SAMPLED["kwargs"]
    for correction, value in reference.EXACT_SAMPLED["losses"].items():
        got = losses.sampled_softmax_loss(
            np.stack([[9.0], pos])[:, 0][None, :].astype(np.float32),
            np.concatenate([np.full([1, 2], 9.0, np.float32), neg])[None],
            correction=correction,
            negative_log_q=kwargs["negative_log_q"],
            positive_log_q=np.array([[-1.0, kwargs["positive_log_q"][0]]], np.float32),
            position_mask=np.array([[False, True]]),
        )
        np.testing.assert_allclose(numpy(got), [[0.0, value]], rtol=1e-6)


def test_per_position_bce_gbce_and_full_softmax_equal_the_flattened_rows():
    flat, seq = _sequence_inputs(32, False)
    real = flat["real"]
    np.testing.assert_allclose(
        numpy(
            losses.bce_loss(seq["pos"], seq["neg"], seq["negative_mask"], position_mask=seq["real"])
        ),
        _hand_masked(
            flat, reference.bce(flat["pos"][real], flat["neg"][real], flat["negative_mask"][real])
        ),
        rtol=1e-5,
        atol=1e-6,
    )
    beta = keras_logq.losses.formulas.gbce_beta(N, 50, 0.75)
    np.testing.assert_allclose(
        numpy(
            losses.gbce_loss(
                seq["pos"],
                seq["neg"],
                num_items=50,
                t=0.75,
                negative_mask=seq["negative_mask"],
                position_mask=seq["real"],
            )
        ),
        _hand_masked(
            flat,
            reference.bce(
                flat["pos"][real], flat["neg"][real], flat["negative_mask"][real], beta=beta
            ),
        ),
        rtol=1e-5,
        atol=1e-6,
    )
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(B * L, 7)).astype(np.float32)
    labels = rng.integers(0, 7, B * L).astype(np.int32)
    logits[~real], labels[~real] = np.nan, 99  # Padding: never read.
    columns = np.arange(7) != 5
    want = [
        reference.logsumexp(logits[i][columns]) - logits[i, labels[i]] for i in np.flatnonzero(real)
    ]
    got = losses.full_softmax_loss(
        logits.reshape(B, L, 7), labels.reshape(B, L), mask=columns, position_mask=seq["real"]
    )
    np.testing.assert_allclose(numpy(got), _hand_masked(flat, want), rtol=1e-5, atol=1e-6)


def test_per_position_negatives_loss_equals_the_flattened_rows():
    rng = np.random.default_rng(6)
    table = rng.normal(size=(reference.NUM_ITEMS, 4)).astype(np.float32)
    targets = np.array([[0, 3, 5, 9], [0, 0, 7, 3]], np.int32)  # 0 pads.
    real = targets > 0
    query = rng.normal(size=(2, 4, 4)).astype(np.float32)
    sampler = keras_logq.InBatchSampler(probabilities=reference.ZIPF_Q)
    neg = sampler(targets.reshape(-1), targets, table[targets], candidate_mask=real)
    got = keras_logq.negatives_loss(
        query, table[targets], neg, correction="improved", temperature=0.5, position_mask=real
    )
    rows = real.reshape(-1)
    q, p = query.reshape(8, 4)[rows], table[targets.reshape(-1)][rows]
    want, _ = reference.sampled_softmax(
        np.sum(q * p, axis=1) / 0.5,
        q @ table[targets.reshape(-1)].T / 0.5,
        "improved",
        numpy(neg.log_q),
        numpy(neg.positive_log_q)[rows],
        numpy(neg.mask)[rows],
    )
    expected = np.zeros(8)
    expected[rows] = want
    np.testing.assert_allclose(numpy(got), expected.reshape(2, 4), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("correction", ["none", "improved"])
def test_layer_on_per_position_scores_equals_the_flattened_rows(correction):
    rng = np.random.default_rng(8)
    num_candidates = 6
    scores = rng.normal(size=(B, L, num_candidates)).astype(np.float32)
    targets = rng.integers(0, num_candidates, (B, L))
    labels = np.eye(num_candidates, dtype=np.float32)[targets]
    real = rng.random((B, L)) > 0.3
    real[0, 0], real[0, 1] = True, False
    labels[0, 1] = 1.0  # A padding position with every label set: still no example.
    ids = np.array([4, 8, 4, 1, 2, 6], np.int32)
    log_q = np.log(reference.ZIPF_Q[ids]).astype(np.float32)
    layer = keras_logq.SampledSoftmax(correction=correction, temperature=0.5)
    got = numpy(layer(scores, labels, candidate_log_q=log_q, candidate_ids=ids, mask=real))
    rows = real.reshape(-1)
    flat_scores = scores.reshape(-1, num_candidates)[rows]
    flat_labels = labels.reshape(-1, num_candidates)[rows]
    want = numpy(layer(flat_scores, flat_labels, candidate_log_q=log_q, candidate_ids=ids))
    # And the numpy reference of those rows.
    positive = flat_labels.argmax(axis=1)
    negatives = ids[None, :] != ids[positive][:, None]
    ref, _ = reference.sampled_softmax(
        flat_scores[np.arange(len(positive)), positive] / 0.5,
        flat_scores / 0.5,
        correction,
        log_q,
        log_q[positive],
        negatives,
    )
    np.testing.assert_allclose(want, ref, rtol=1e-5, atol=1e-6)
    expected = np.zeros(B * L)
    expected[rows] = want
    np.testing.assert_allclose(got, expected.reshape(B, L), rtol=1e-5, atol=1e-6)
    mean = keras_logq.SampledSoftmax(correction=correction, temperature=0.5, reduction="mean")
    np.testing.assert_allclose(
        numpy(mean(scores, labels, candidate_log_q=log_q, candidate_ids=ids, mask=real)),
        ref.mean(),
        rtol=1e-5,
    )
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(mean))
    assert restored.reduction == "mean"


class _Sequence(keras.layers.Layer):
    """[B, L] item ids -> [B, L, dim] embeddings carrying Keras's padding mask (id 0)."""

    def __init__(self, table, **kwargs):
        super().__init__(**kwargs)
        self.embedding = keras.layers.Embedding(
            table.shape[0],
            table.shape[1],
            mask_zero=True,
            embeddings_initializer=keras.initializers.Constant(table),
        )

    def call(self, ids):
        return self.embedding(ids)

    def compute_mask(self, inputs, mask=None):
        return self.embedding.compute_mask(inputs, mask)


def test_layer_reads_the_mask_that_keras_propagates():
    rng = np.random.default_rng(9)
    table = rng.normal(size=(10, 4)).astype(np.float32)
    history = np.array([[0, 0, 3, 5], [0, 2, 9, 1]], np.int32)
    candidates = rng.normal(size=(5, 4)).astype(np.float32)
    labels = np.eye(5, dtype=np.float32)[np.array([[0, 1, 2, 3], [4, 0, 1, 2]])]
    sequence = _Sequence(table)
    query = sequence(history)
    layer = keras_logq.SampledSoftmax(correction="none", reduction="mean")
    propagated = layer(query_embeddings=query, candidate_embeddings=candidates, labels=labels)
    explicit = layer(
        query_embeddings=table[history],
        candidate_embeddings=candidates,
        labels=labels,
        mask=history > 0,
    )
    unmasked = layer(
        query_embeddings=table[history], candidate_embeddings=candidates, labels=labels
    )
    np.testing.assert_allclose(numpy(propagated), numpy(explicit), rtol=1e-6)
    assert abs(float(numpy(propagated)) - float(numpy(unmasked))) > 1e-3
    scores = ops.matmul(query, ops.transpose(ops.convert_to_tensor(candidates)))
    per_position = keras_logq.SampledSoftmax(correction="none")
    got = numpy(per_position(scores, labels, mask=history > 0))
    assert got.shape == (2, 4) and not got[history == 0].any() and got[history > 0].all()


def test_per_position_errors():
    flat, seq = _sequence_inputs(33, False)
    del flat
    with pytest.raises(
        ValueError,
        match=r"`position_mask` .*\(3, 5\).*\(3, 4\)|"
        r"`position_mask` .*\(3, 4\).*\(3, 5\)",
    ):
        losses.bce_loss(seq["pos"], seq["neg"], position_mask=np.ones([3, 5], bool))
    with pytest.raises(TypeError, match=r"`position_mask` must be a bool tensor"):
        losses.bce_loss(seq["pos"], seq["neg"], position_mask=np.ones([3, 4], np.float32))
    with pytest.raises(
        ValueError,
        match=r"`negative_logits` must have rank 3; received "
        r"negative_logits with shape \(3, 5\)",
    ):
        losses.sampled_softmax_loss(seq["pos"], seq["neg"][:, 0], correction="none")
    with pytest.raises(
        ValueError,
        match=r"needs `labels` with per-position scores \[batch, "
        r"length, num_candidates\]; received scores with "
        r"shape \(3, 4, 5\) and labels=None",
    ):
        keras_logq.SampledSoftmax(correction="none")(seq["neg"])
    with pytest.raises(ValueError, match=r"`reduction` must be one of"):
        keras_logq.SampledSoftmax(reduction="average")


def test_per_position_losses_compile():
    """Compiled (jax.jit, XLA; on TensorFlow with a batch traced as None too) as eager."""
    flat, seq = _sequence_inputs(34, True)
    del flat
    layer = keras_logq.SampledSoftmax(correction="improved", reduction="mean")
    scores = seq["neg"]
    labels = np.eye(N, dtype=np.float32)[np.arange(B * L).reshape(B, L) % N]

    def fn(pos, neg, log_q, pos_log_q, real, labels):
        return (
            losses.sampled_softmax_loss(
                pos,
                neg,
                correction="improved",
                negative_log_q=log_q,
                positive_log_q=pos_log_q,
                position_mask=real,
            ),
            layer(neg, labels, candidate_log_q=log_q, mask=real),
        )

    args = (seq["pos"], scores, seq["neg_log_q"], seq["pos_log_q"], seq["real"], labels)
    want = [numpy(x) for x in fn(*args)]
    for got, expected in zip(compiled(fn)(*args), want):
        np.testing.assert_allclose(numpy(got), expected, rtol=1e-5, atol=1e-6)
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        specs = [
            tf.TensorSpec([None, *np.shape(a)[1:]], tf.as_dtype(np.asarray(a).dtype)) for a in args
        ]
        for got, expected in zip(tf.function(fn, input_signature=specs)(*args), want):
            np.testing.assert_allclose(numpy(got), expected, rtol=1e-5, atol=1e-6)
