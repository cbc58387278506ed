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
        ({"initial_accumulator_value": float("inf")}, "initial_accumulator_value=inf"),
        ({"learning_rate": float("inf")}, "learning_rate=inf"),
        ({"input_dim": 2.0}, "input_dim=2.0"),
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


# Ids as the frequency estimators take them, and the optimizer's settings (issue 75).

TABLE = np.arange(20, dtype=np.float32).reshape(10, 2)


def _table(**kwargs):
    return SparseEmbedding(
        10, 2, embeddings_initializer=keras.initializers.Constant(TABLE), **kwargs
    )


@pytest.mark.parametrize(
    "ids, error, message",
    [
        (np.array([1, -1], np.int32), ValueError, r"\[0, 10\).*received the id -1\."),
        (np.array([10, 2], np.int64), ValueError, r"\[0, 10\).*received the id 10\."),
        (np.array(["a", "b"]), TypeError, "ids with string values"),
        (np.array([1.0, 2.0], np.float32), TypeError, "integer ids; received dtype float32"),
    ],
)
def test_bad_host_ids_are_named(ids, error, message):
    with pytest.raises(error, match=message):
        _table()(ids)


@pytest.mark.skipif(not JAX, reason="JAX without x64 cuts int64 to int32")
def test_an_int64_id_beyond_int32_is_named_not_wrapped():
    with pytest.raises(ValueError, match="holds the id 4294967299, outside int32"):
        _table()(np.array([2**32 + 3], np.int64))


def test_an_invalid_id_reads_nan_in_a_compiled_call_never_another_row():
    ids = keras.Input(shape=(), dtype="int32")
    model = keras.Model(ids, _table()(ids))
    rows = model.predict(np.array([1, -1, 10, 3], np.int32), verbose=0)
    np.testing.assert_array_equal(rows[[0, 3]], TABLE[[1, 3]])
    assert np.isnan(rows[[1, 2]]).all()


class _SumModel(SparseUpdates, keras.Model):
    """Loss = the sum of the rows read (each read row's gradient is 1), or of their logs,
    plus, with `dense`, a dense weight's (whose gradient is 1, finite)."""

    def __init__(self, dense=False, log=False, **table):
        super().__init__()
        self.table = SparseEmbedding(10, 2, embeddings_initializer="zeros", **table)
        self.dense = keras.layers.Dense(1, use_bias=False) if dense else None
        if self.dense is not None:
            self.dense.build((None, 1))
        self.log = log

    def call(self, x):
        return self.table(x)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        del x, y, sample_weight, training
        loss = ops.sum(ops.log(y_pred) if self.log else y_pred)
        if self.dense is not None:
            loss = loss + ops.sum(self.dense(ops.ones((1, 1))))
        return loss


def _trained_rows(compiled, ids=(1, 2), **model):
    network = _SumModel(**model)
    network.compile(optimizer=compiled)
    network.fit(np.array(ids, np.int32), epochs=1, batch_size=len(ids), verbose=0)
    return network, keras.ops.convert_to_numpy(network.table.embeddings)


@needs_jax
def test_fit_trains_no_row_for_an_invalid_id():
    _, rows = _trained_rows("sgd", ids=(1, -1), optimizer="sgd", learning_rate=1.0)
    np.testing.assert_array_equal(rows[1], [-1.0, -1.0])
    np.testing.assert_array_equal(rows[[0, *range(2, 10)]], 0.0)  # Row 9 (JAX's -1) too.


@needs_jax
def test_fit_refuses_an_int64_id_beyond_int32():
    network = _SumModel()
    network.compile(optimizer="sgd")
    with pytest.raises(ValueError, match="`x` holds the value 4294967299, outside int32"):
        network.fit(np.array([1, 2**32 + 3], np.int64), epochs=1, batch_size=2, verbose=0)
    with pytest.raises(ValueError, match="`x` holds the value 4294967299"):
        network.predict(np.array([2**32 + 3], np.int64), verbose=0)
    with pytest.raises(ValueError, match="`y` holds the value 1099511627776"):
        network.fit(np.array([1, 2]), np.array([2**40, 1]), epochs=1, batch_size=2, verbose=0)


def test_compile_takes_keras_positional_arguments():
    network = _SumModel()
    network.compile("sgd", "mse")
    assert network.loss == "mse"


@needs_jax
def test_loss_scaling_is_undone_before_the_rows_move():
    table = dict(optimizer="sgd", learning_rate=0.5)
    plain = _trained_rows(keras.optimizers.SGD(0.1), **table)[1]
    scaled = _trained_rows(keras.optimizers.SGD(0.1, loss_scale_factor=8.0), **table)[1]
    np.testing.assert_array_equal(plain[1], [-0.5, -0.5])
    np.testing.assert_allclose(scaled, plain, rtol=1e-6)


@needs_jax
def test_mixed_float16_moves_an_adagrad_row_as_float32_does():
    table = dict(optimizer="adagrad", learning_rate=0.01)
    expected = _trained_rows("sgd", **table)[1]
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    try:
        network, rows = _trained_rows("sgd", **table)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    assert isinstance(network.optimizer, keras.optimizers.LossScaleOptimizer)
    # Adagrad's first step: 0.01 * 1 / sqrt(0.1 + 1) = 0.0095 (0.1, unscaled by 32768,
    # was the row's move before).
    np.testing.assert_allclose(expected[1], -0.01 / np.sqrt(1.1 + 1e-7), rtol=1e-6)
    np.testing.assert_allclose(rows, expected, rtol=1e-3)


@needs_jax
@pytest.mark.parametrize("dense", [False, True])
def test_a_non_finite_step_moves_nothing_under_a_loss_scale_optimizer(dense):
    # log(0): an infinite loss and gradient; Keras skips the step and halves the scale.
    optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    network = _SumModel(dense=dense, log=True, optimizer="adam", learning_rate=0.1)
    network.compile(optimizer=optimizer)
    network(np.array([1], np.int32))
    before = [keras.ops.convert_to_numpy(v) for v in network.weights]
    network.fit(np.array([1, 2], np.int32), epochs=1, batch_size=2, verbose=0)
    for old, new in zip(before, network.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(new), old)
    assert float(keras.ops.convert_to_numpy(optimizer.dynamic_scale)) == 2.0**14
    assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == 0


@needs_jax
def test_iterations_advance_when_the_tables_are_the_only_weights():
    network, _ = _trained_rows("sgd", ids=(1, 2, 3, 4), optimizer="sgd")
    network.fit(np.array([1, 2, 3, 4], np.int32), epochs=1, batch_size=2, verbose=0)
    assert int(keras.ops.convert_to_numpy(network.optimizer.iterations)) == 3


@pytest.mark.parametrize(
    "optimizer, message",
    [
        (lambda: keras.optimizers.SGD(clipnorm=1.0), "clipnorm=1.0"),
        (lambda: keras.optimizers.SGD(clipvalue=0.5), "clipvalue=0.5"),
        (lambda: keras.optimizers.SGD(global_clipnorm=2.0), "global_clipnorm=2.0"),
        (lambda: keras.optimizers.AdamW(), "weight_decay=0.004"),
        (lambda: keras.optimizers.SGD(gradient_accumulation_steps=4), "accumulation_steps=4"),
        (lambda: keras.optimizers.SGD(use_ema=True), "use_ema=True"),
        (
            lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(clipvalue=1.0)),
            "clipvalue=1.0",
        ),
    ],
)
def test_optimizer_settings_the_tables_would_miss_are_refused(optimizer, message):
    with pytest.raises(ValueError, match=f"not applied to SparseEmbedding tables.*{message}"):
        _SumModel().compile(optimizer=optimizer())
    # A model without a SparseEmbedding is not concerned.
    keras.Model().compile(optimizer=optimizer())


def test_numpy_integer_sizes_are_taken():
    layer = SparseEmbedding(np.int64(5), np.int32(2))
    assert (layer.input_dim, layer.output_dim) == (5, 2)
    assert type(layer.get_config()["input_dim"]) is int
