"""keras_logq.SparseEmbedding and SparseUpdates: row-sparse table updates on JAX equal
Keras's dense optimizers where they should (SGD, Adagrad; Adam on steps that touch every
row), row-wise Adagrad equals its numpy reference, untouched rows stay put, the tables and
their state save and restore, and bad input is named."""

import os
import tempfile

import keras
import numpy as np
import pytest
from keras import ops

import keras_logq
from keras_logq.sparse import SparseEmbedding
from keras_logq.sparse import SparseUpdates

JAX = keras.backend.backend() == "jax"
needs_jax = pytest.mark.skipif(not JAX, reason="SparseUpdates' training step is JAX's")

USERS, ITEMS, DIM = 40, 60, 8


def _initial(rows, seed):
    return np.random.default_rng(seed).normal(size=(rows, DIM)).astype("float32") * 0.1


def _model(sparse: bool, optimizer: str, lr: float = 0.1, projection: bool = False):
    """A two-tower model, in-batch softmax; its tables a SparseEmbedding (their rule
    `optimizer`) or a keras Embedding (Keras's optimizer of that name)."""
    bases = (SparseUpdates, keras.Model) if sparse else (keras.Model,)

    class TwoTower(*bases):
        def __init__(self):
            super().__init__()
            tables = []
            for rows, seed in ((USERS, 1), (ITEMS, 2)):
                init = keras.initializers.Constant(_initial(rows, seed))
                if sparse:
                    tables.append(
                        SparseEmbedding(
                            rows,
                            DIM,
                            optimizer=optimizer,
                            learning_rate=lr,
                            embeddings_initializer=init,
                        )
                    )
                else:
                    tables.append(keras.layers.Embedding(rows, DIM, embeddings_initializer=init))
            self.users, self.items = tables
            self.projection = (
                keras.layers.Dense(
                    DIM, kernel_initializer=keras.initializers.Constant(np.eye(DIM) * 0.9)
                )
                if projection
                else None
            )

        def call(self, x):
            query = self.users(x["user"])
            if self.projection is not None:
                query = self.projection(query)
            return query, self.items(x["item"])

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            query, candidates = y_pred
            scores = ops.matmul(query, ops.transpose(candidates))
            labels = ops.eye(ops.shape(scores)[0])
            return ops.mean(keras.losses.categorical_crossentropy(labels, scores, from_logits=True))

    model = TwoTower()
    dense = {
        "sgd": keras.optimizers.SGD(lr),
        "adagrad": keras.optimizers.Adagrad(lr),
        "adam": keras.optimizers.Adam(lr),
    }
    # The sparse model's optimizer trains what is not a table (the projection): SGD here.
    model.compile(optimizer=keras.optimizers.SGD(lr) if sparse else dense[optimizer])
    return model


def _data(steps=8, batch=16, every_row=False, seed=0):
    rng = np.random.default_rng(seed)
    if every_row:  # Batches of ITEMS rows: every item once, every user at least once.
        users = np.concatenate(
            [
                rng.permutation(np.concatenate([np.arange(USERS), rng.integers(0, USERS, 20)]))
                for _ in range(steps)
            ]
        )
        items = np.concatenate([rng.permutation(ITEMS) for _ in range(steps)])
    else:  # Repeated ids inside batches: their gradients add up.
        users = rng.integers(0, USERS // 2, size=steps * batch)
        items = rng.integers(0, ITEMS // 2, size=steps * batch)
    return {"user": users.astype("int32"), "item": items.astype("int32")}


def _fit(model, data, batch):
    history = model.fit(data, epochs=2, batch_size=batch, shuffle=False, verbose=0)
    return (
        keras.ops.convert_to_numpy(model.users.embeddings),
        keras.ops.convert_to_numpy(model.items.embeddings),
        history.history["loss"],
    )


@needs_jax
@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_sgd_and_adagrad_equal_keras_on_a_dense_table(optimizer):
    data = _data()
    dense = _fit(_model(False, optimizer), data, 16)
    sparse = _fit(_model(True, optimizer), data, 16)
    np.testing.assert_allclose(sparse[0], dense[0], atol=1e-6)
    np.testing.assert_allclose(sparse[1], dense[1], atol=1e-6)
    np.testing.assert_allclose(sparse[2], dense[2], rtol=1e-6)
    # Rows no batch read kept their initial values.
    np.testing.assert_array_equal(sparse[0][USERS // 2 :], _initial(USERS, 1)[USERS // 2 :])


@needs_jax
def test_lazy_adam_equals_adam_where_every_row_is_touched_and_leaves_others():
    data = _data(every_row=True)
    dense = _fit(_model(False, "adam"), data, ITEMS)
    sparse = _fit(_model(True, "adam"), data, ITEMS)
    np.testing.assert_allclose(sparse[0], dense[0], atol=2e-6)
    np.testing.assert_allclose(sparse[2], dense[2], rtol=1e-5)
    # Rows never read stay put (Keras's Adam moves a row its moments carry, lazy Adam not).
    model = _model(True, "adam")
    _fit(model, _data(), 16)
    items = keras.ops.convert_to_numpy(model.items.embeddings)
    np.testing.assert_array_equal(items[ITEMS // 2 :], _initial(ITEMS, 2)[ITEMS // 2 :])
    assert float(keras.ops.convert_to_numpy(model.items.slots["step"])) == 16.0


@needs_jax
def test_rowwise_adagrad_against_numpy_with_repeated_ids():
    layer = SparseEmbedding(
        5,
        3,
        optimizer="rowwise_adagrad",
        learning_rate=0.5,
        embeddings_initializer=keras.initializers.Constant(np.ones((5, 3))),
    )
    layer.build()
    ids = np.array([1, 3, 1, 4], np.int32)
    grads = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    table, accumulator = layer.sparse_update(
        [ops.convert_to_tensor(v) for v in layer.state_variables()], ids, grads
    )
    expected, acc = np.ones((5, 3)), np.full(5, 0.1)
    for row in (1, 3, 4):
        g = grads[ids == row].sum(axis=0)
        acc[row] += np.mean(g * g)
        expected[row] -= 0.5 * g / (np.sqrt(acc[row]) + 1e-7)
    np.testing.assert_allclose(np.asarray(table), expected, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(accumulator), acc, rtol=1e-6)


@needs_jax
def test_the_rest_of_the_model_trains_through_its_optimizer():
    data = _data()
    dense = _model(False, "sgd", projection=True)
    sparse = _model(True, "sgd", projection=True)
    _fit(dense, data, 16)
    _fit(sparse, data, 16)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(sparse.projection.kernel),
        keras.ops.convert_to_numpy(dense.projection.kernel),
        atol=1e-6,
    )
    assert not np.allclose(keras.ops.convert_to_numpy(sparse.projection.kernel), np.eye(DIM) * 0.9)


@needs_jax
def test_tables_and_their_state_save_and_restore():
    model = _model(True, "adam")
    _fit(model, _data(), 16)
    path = os.path.join(tempfile.mkdtemp(), "model.weights.h5")
    model.save_weights(path)
    other = _model(True, "adam")
    other(_data(steps=1))  # Built.
    other.load_weights(path)
    for a, b in zip(model.items.state_variables(), other.items.state_variables()):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    # Training on from the restored state equals training on without the save.
    data = _data(seed=1)
    np.testing.assert_allclose(_fit(other, data, 16)[1], _fit(model, data, 16)[1], atol=1e-6)


def test_config_round_trip_and_a_plain_lookup_outside_training():
    layer = SparseEmbedding(
        7,
        4,
        optimizer="rowwise_adagrad",
        learning_rate=0.3,
        initial_accumulator_value=0.2,
        beta_1=0.8,
        beta_2=0.99,
        epsilon=1e-6,
        embeddings_initializer="zeros",
        name="items",
    )
    again = SparseEmbedding.from_config(layer.get_config())
    assert again.get_config() == layer.get_config()
    rows = again(np.array([[1, 2], [3, 6]], np.int32))
    assert tuple(rows.shape) == (2, 2, 4)
    assert [v.path.split("/")[-1] for v in again.state_variables()] == [
        "embeddings",
        "accumulator",
    ]
    assert again.trainable_variables == []


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"input_dim": 0}, "input_dim=0"),
        ({"output_dim": 2.5}, "output_dim=2.5"),
        ({"optimizer": "rmsprop"}, "optimizer='rmsprop'"),
        ({"learning_rate": 0}, "learning_rate=0"),
        ({"initial_accumulator_value": -1}, "initial_accumulator_value=-1"),
        ({"beta_1": 1.0}, "beta_1=1.0"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    arguments = {"input_dim": 5, "output_dim": 2, **kwargs}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        SparseEmbedding(**arguments)


def test_float_ids_are_refused():
    with pytest.raises(TypeError, match="integer ids; received dtype float32"):
        SparseEmbedding(5, 2)(np.array([1.0, 2.0], np.float32))


@pytest.mark.skipif(JAX, reason="the other backends' message")
def test_other_backends_say_what_to_use():
    model = _model(True, "sgd")
    with pytest.raises(NotImplementedError, match="SparseUpdates trains on JAX"):
        model.fit(_data(steps=1), epochs=1, batch_size=16, verbose=0)


def test_exported_from_the_package():
    assert keras_logq.SparseEmbedding is SparseEmbedding
    assert keras_logq.SparseUpdates is SparseUpdates
