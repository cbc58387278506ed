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
from tests_keras3.backend import gradients
from tests_keras3.backend import numpy


@pytest.mark.parametrize("correction", losses.CORRECTIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("per_row_log_q", [False, True])
def test_matches_numpy_reference(correction, seed, per_row_log_q):
    pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(
        seed, per_row_log_q=per_row_log_q)
    got = losses.sampled_softmax_loss(pos, neg, correction=correction, negative_log_q=neg_log_q,
                                      positive_log_q=pos_log_q, negative_mask=mask)
    want, _ = reference.sampled_softmax(pos, neg, correction, neg_log_q, pos_log_q, mask)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    np.testing.assert_allclose(numpy(got), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("correction", ["standard", "standard_negatives", "improved"])
@pytest.mark.parametrize("log_q_scale", [0.0, 0.5])
def test_log_q_scale_matches_numpy_reference(correction, log_q_scale):
    pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(4)
    got = losses.sampled_softmax_loss(pos, neg, correction=correction, negative_log_q=neg_log_q,
                                      positive_log_q=pos_log_q, negative_mask=mask,
                                      log_q_scale=log_q_scale)
    want, _ = reference.sampled_softmax(pos, neg, correction, neg_log_q, pos_log_q, mask,
                                        log_q_scale=log_q_scale)
    np.testing.assert_allclose(numpy(got), want, rtol=1e-5, atol=1e-6)
    layer = keras_logq.SampledSoftmax(correction=correction, log_q_scale=log_q_scale)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert restored.log_q_scale == log_q_scale
    with pytest.raises(ValueError, match=r"`log_q_scale` must be a finite number >= 0; "
                       r"received log_q_scale=-1.0"):
        keras_logq.SampledSoftmax(log_q_scale=-1.0)


@pytest.mark.parametrize("correction", ["none", "standard", "standard_negatives", "improved"])
def test_hard_negatives_match_numpy_reference(correction):
    pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(5)
    got = losses.sampled_softmax_loss(pos, neg, correction=correction, negative_log_q=neg_log_q,
                                      positive_log_q=pos_log_q, negative_mask=mask,
                                      log_q_scale=0.5, num_hard_negatives=3)
    want, _ = reference.sampled_softmax(pos, neg, correction, neg_log_q, pos_log_q, mask,
                                        log_q_scale=0.5, num_hard=3)
    np.testing.assert_allclose(numpy(got), want, rtol=1e-5, atol=1e-6)
    layer = keras_logq.SampledSoftmax(correction=correction, num_hard_negatives=3)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert restored.num_hard_negatives == 3
    if correction != "none":  # An invalid log Q the mining would drop still gives NaN
        # (in every row where that negative is valid; a masked one is never read).
        bad = np.array(neg_log_q, np.float32)
        bad[..., 0] = 0.5
        got = losses.sampled_softmax_loss(pos, neg - 100.0 * (np.arange(neg.shape[1]) == 0),
                                          correction=correction, negative_log_q=bad,
                                          positive_log_q=pos_log_q, negative_mask=mask,
                                          num_hard_negatives=1)
        valid = np.asarray(mask)[:, 0]
        assert valid.any() and np.isnan(numpy(got)[valid]).all()


def test_excluded_positive_log_q_is_used_as_is():
    pos, neg, neg_log_q, _, mask = reference.sampled_inputs(3)
    got = losses.sampled_softmax_loss(pos, neg, correction="improved", negative_log_q=neg_log_q,
                                      negative_mask=mask, log_q_excludes_positive=True)
    want, _ = reference.sampled_softmax(pos, neg, "improved", neg_log_q, None, mask,
                                        excludes=True)
    np.testing.assert_allclose(numpy(got), want, rtol=1e-5, atol=1e-5)


def test_exact_values():
    case = reference.EXACT_SAMPLED
    for correction, want in case["losses"].items():
        got = losses.sampled_softmax_loss(*case["inputs"], correction=correction,
                                          **case["kwargs"])
        np.testing.assert_allclose(numpy(got), [want], rtol=1e-6)
    weight = keras_logq.improved_weight(*case["inputs"], **case["kwargs"])
    np.testing.assert_allclose(numpy(weight), [case["improved_weight"]], rtol=1e-6)


def test_improved_gradient_is_weighted_softmax_minus_onehot():
    pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(4)
    d_pos, d_neg = gradients(
        lambda p, n: ops.sum(losses.sampled_softmax_loss(
            p, n, correction="improved", negative_log_q=neg_log_q, positive_log_q=pos_log_q,
            negative_mask=mask)), pos, neg)
    want_pos, want_neg = reference.improved_gradients(pos, neg, neg_log_q, pos_log_q, mask)
    np.testing.assert_allclose(d_pos, want_pos, atol=1e-6)
    np.testing.assert_allclose(d_neg, want_neg, atol=1e-6)


@pytest.mark.parametrize("correction", losses.CORRECTIONS)
def test_row_without_negatives_has_zero_loss_and_gradient(correction):
    pos, neg, neg_log_q, pos_log_q, mask = reference.sampled_inputs(5)  # Row 0: none valid.
    kwargs = dict(correction=correction, negative_log_q=neg_log_q, positive_log_q=pos_log_q,
                  negative_mask=mask)
    loss = numpy(losses.sampled_softmax_loss(pos, neg, **kwargs))
    d_pos, d_neg = gradients(lambda p, n: ops.sum(losses.sampled_softmax_loss(p, n, **kwargs)),
                             pos, neg)
    assert loss[0] == 0.0 and d_pos[0] == 0.0 and not d_neg[0].any()
    assert np.all(np.isfinite(loss)) and np.all(np.isfinite(d_neg))


def test_extreme_logits_stay_finite():
    pos = np.array([80.0, -80.0], np.float32)
    neg = np.array([[-80.0, 80.0], [80.0, -80.0]], np.float32)
    for correction in losses.CORRECTIONS:
        loss = numpy(losses.sampled_softmax_loss(
            pos, neg, correction=correction, negative_log_q=np.log([1e-6, 0.5]).astype("f4"),
            positive_log_q=np.log([0.3, 1e-6]).astype("f4")))
        assert np.all(np.isfinite(loss)), correction


def test_log_probabilities_outside_the_unit_interval_give_nan():
    pos, neg = np.zeros([2], np.float32), np.zeros([2, 2], np.float32)
    loss = numpy(losses.sampled_softmax_loss(
        pos, neg, correction="improved", negative_log_q=np.array([0.4, -1.0], np.float32),
        positive_log_q=np.array([-1.0, -1.0], np.float32)))
    assert np.all(np.isnan(loss))


def test_errors():
    pos, neg = np.zeros([2], np.float32), np.zeros([2, 3], np.float32)
    with pytest.raises(ValueError, match=r"`correction` must be one of 'none', 'standard', "
                       r"'standard_negatives', 'improved'; received correction='Improved'"):
        losses.sampled_softmax_loss(pos, neg, correction="Improved")
    with pytest.raises(ValueError, match=r"correction='improved' needs sampling "
                                         r"probabilities: pass `negative_log_q`; "
                       r"received negative_log_q=None"):
        losses.sampled_softmax_loss(pos, neg, correction="improved")
    with pytest.raises(ValueError, match=r"correction='standard' needs `positive_log_q`; "
                       r"received positive_log_q=None"):
        losses.sampled_softmax_loss(pos, neg, correction="standard",
                                    negative_log_q=np.zeros([3], np.float32))
    with pytest.raises(TypeError, match=r"`negative_logits` must be a floating-point tensor; "
                       r"received negative_logits with dtype int32"):
        losses.sampled_softmax_loss(pos, np.zeros([2, 3], np.int32), correction="none")
    with pytest.raises(TypeError, match=r"`negative_mask` must be a bool tensor"):
        losses.sampled_softmax_loss(pos, neg, correction="none",
                                    negative_mask=np.ones([2, 3], np.float32))
    with pytest.raises(ValueError, match=r"`positive_logits` and `negative_logits` disagree in size"):
        losses.sampled_softmax_loss(np.zeros([3], np.float32), neg, correction="none")
    with pytest.raises(ValueError, match=r"`negative_log_q` must have shape \[N\] or \[1, N\] "
                       r"\(shared by the rows\) or \[B, N\] \(per row\), one value per column "
                       r"of `negative_logits` \(B=2, N=3\); received negative_log_q with "
                       r"shape \(4,\)"):
        losses.sampled_softmax_loss(pos, neg, correction="standard_negatives",
                                    negative_log_q=np.zeros([4], np.float32))


def test_full_softmax_bce_and_gbce_match_references():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(4, 7)).astype(np.float32)
    labels = np.array([0, 3, 6, 2], np.int32)
    mask = np.ones(7, bool)
    mask[5] = False
    want = [reference.logsumexp(logits[b][mask]) - logits[b, labels[b]] for b in range(4)]
    np.testing.assert_allclose(numpy(losses.full_softmax_loss(logits, labels, mask=mask)), want,
                               rtol=1e-6)
    # A label without a column reads NaN (JAX wrapped -1 to the last column, XLA clamps 7).
    outside = numpy(losses.full_softmax_loss(logits, np.array([0, 7, -1, 2], np.int32),
                                              mask=mask))
    np.testing.assert_allclose(outside[[0, 3]], [want[0], want[3]], rtol=1e-6)
    assert np.isnan(outside[[1, 2]]).all()
    pos, neg, _, _, mask = reference.sampled_inputs(8, num=4)
    np.testing.assert_allclose(numpy(losses.bce_loss(pos, neg, mask)),
                               reference.bce(pos, neg, mask), rtol=1e-6)
    beta = keras_logq.losses.formulas.gbce_beta(4, 50, 0.75)
    np.testing.assert_allclose(
        numpy(losses.gbce_loss(pos, neg, num_items=50, t=0.75, negative_mask=mask)),
        reference.bce(pos, neg, mask, beta=beta), rtol=1e-5)
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
    mask = (ids[:, None] != ids[None, :])
    want, _ = reference.sampled_softmax(np.diag(scores), scores, correction, log_q, log_q, mask)
    layer = keras_logq.SampledSoftmax(correction=correction, temperature=0.5)
    got = layer(query @ candidates.T, ops.eye(6), candidate_log_q=log_q, candidate_ids=ids)
    np.testing.assert_allclose(numpy(got), want, rtol=1e-5, atol=1e-5)
    from_embeddings = layer(query_embeddings=query, candidate_embeddings=candidates,
                            candidate_log_q=log_q, candidate_ids=ids)
    np.testing.assert_allclose(numpy(from_embeddings), want, rtol=1e-5, atol=1e-5)


def test_layer_predict_in_functional_model():
    query, candidates, ids, log_q = _in_batch()
    scores_in = keras.Input(shape=(6,), batch_size=6, name="scores")
    labels_in = keras.Input(shape=(6,), batch_size=6, name="labels")
    log_q_in = keras.Input(shape=(6,), batch_size=6, name="log_q")
    out = keras_logq.SampledSoftmax(correction="standard")(scores_in, labels_in,
                                                           candidate_log_q=log_q_in)
    model = keras.Model([scores_in, labels_in, log_q_in], out)
    scores = query @ candidates.T
    log_q_rows = np.broadcast_to(log_q, (6, 6)).copy()
    got = model.predict([scores, np.eye(6, dtype=np.float32), log_q_rows], verbose=0,
                        batch_size=6)
    want, _ = reference.sampled_softmax(np.diag(scores), scores, "standard", log_q_rows, log_q,
                                        ~np.eye(6, dtype=bool))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_layer_serialization_round_trip_and_errors():
    layer = keras_logq.SampledSoftmax(correction="standard_negatives", temperature=0.05,
                                      log_q_excludes_positive=True, name="my_loss")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(restored, keras_logq.SampledSoftmax)
    assert restored.get_config() == layer.get_config()
    assert (restored.correction, restored.temperature) == ("standard_negatives", 0.05)
    with pytest.raises(ValueError, match=r"`temperature` must be a positive number; received "
                       r"temperature=0"):
        keras_logq.SampledSoftmax(temperature=0)
    with pytest.raises(TypeError, match=r"received log_q_excludes_positive='yes'"):
        keras_logq.SampledSoftmax(log_q_excludes_positive="yes")
    with pytest.raises(ValueError, match=r"needs `scores`, or `query_embeddings` and "
                       r"`candidate_embeddings`"):
        keras_logq.SampledSoftmax()(candidate_log_q=np.zeros([3], np.float32))


def test_model_with_the_layer_saves_and_loads():
    query, candidates, ids, log_q = _in_batch()
    scores_in = keras.Input(shape=(6,), batch_size=6)
    out = keras_logq.SampledSoftmax(correction="improved", temperature=2.0)(
        scores_in, candidate_log_q=log_q)
    model = keras.Model(scores_in, out)
    path = os.path.join(tempfile.mkdtemp(), "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    scores = query @ candidates.T
    np.testing.assert_allclose(restored.predict(scores, verbose=0, batch_size=6),
                               model.predict(scores, verbose=0, batch_size=6), rtol=1e-6)
