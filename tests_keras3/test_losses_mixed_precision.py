"""Under Keras's mixed_bfloat16 policy the losses stay float32: bfloat16 scores in, float32
losses out, equal to the loss of the same (bfloat16-rounded) scores in float32; a
SparseEmbedding model trains under the policy (its tables float32, its rows bfloat16)."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_logq


@pytest.fixture(name="mixed_bfloat16")
def _mixed_bfloat16():
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    yield
    keras.config.set_dtype_policy(previous)


@pytest.mark.parametrize("correction", ["standard", "improved"])
def test_sampled_softmax_is_float32_on_bfloat16_scores(mixed_bfloat16, correction):
    del mixed_bfloat16
    rng = np.random.default_rng(0)
    scores = ops.cast(rng.normal(size=(6, 6)) * 3, "bfloat16")
    log_q = np.log(rng.dirichlet(np.ones(6))).astype("float32")
    labels = np.eye(6, dtype="float32")
    layer = keras_logq.SampledSoftmax(correction=correction)
    assert layer.dtype_policy.compute_dtype == "float32"  # Its own policy, not the global.
    kwargs = dict(candidate_log_q=log_q, candidate_ids=np.arange(6))
    losses = layer(scores, labels, **kwargs)
    assert keras.backend.standardize_dtype(losses.dtype) == "float32"
    reference = layer(ops.cast(scores, "float32"), labels, **kwargs)
    np.testing.assert_allclose(
        ops.convert_to_numpy(losses), ops.convert_to_numpy(reference), rtol=1e-6
    )


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="SparseUpdates trains on JAX")
def test_sparse_tables_train_under_mixed_bfloat16(mixed_bfloat16):
    del mixed_bfloat16

    class TwoTower(keras_logq.SparseUpdates, keras.Model):
        def __init__(self):
            super().__init__()
            self.users = keras_logq.SparseEmbedding(20, 8, learning_rate=0.5)
            self.items = keras_logq.SparseEmbedding(30, 8, learning_rate=0.5)
            self.loss_layer = keras_logq.SampledSoftmax(correction="improved")

        def call(self, x):
            return self.users(x["user"]), self.items(x["item"])

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            query, candidates = y_pred
            assert keras.backend.standardize_dtype(query.dtype) == "bfloat16"
            scores = ops.matmul(query, ops.transpose(candidates))
            labels = ops.eye(ops.shape(scores)[0])
            log_q = ops.full((ops.shape(scores)[0],), np.log(1 / 30), "float32")
            return ops.mean(
                self.loss_layer(scores, labels, candidate_log_q=log_q, candidate_ids=x["item"])
            )

    model = TwoTower()
    model.compile(optimizer="sgd")
    rng = np.random.default_rng(0)
    data = {
        "user": rng.integers(0, 20, 256).astype("int32"),
        "item": rng.integers(0, 30, 256).astype("int32"),
    }
    history = model.fit(data, epochs=5, batch_size=32, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    assert keras.backend.standardize_dtype(model.items.embeddings.dtype) == "float32"
