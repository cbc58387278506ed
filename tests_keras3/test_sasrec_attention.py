"""Issue 77, item 5: the Keras job's SASRec with --attention_dropout=0 takes Keras's fused
attention (`ops.dot_product_attention`), and answers as the unfused layers do (the padding
mask and the causal mask alike)."""

import keras
import numpy as np
import pytest

from pipelines import configs
from pipelines import keras_sequential

NUM_ITEMS = 50


def _model(**fields):
    config = configs.PRESETS["synthetic"].replace(
        **{"max_length": 8, "dim": 16, "num_blocks": 2, "num_heads": 2, "dropout": 0.2, **fields}
    )
    probabilities = np.full(NUM_ITEMS + 1, 1.0 / NUM_ITEMS, np.float32)
    model = keras_sequential.make_model(config, NUM_ITEMS, probabilities)
    ids = np.array([[0, 0, 0, 3, 9, 4, 1, 7], [5, 6, 7, 8, 9, 10, 11, 12]], np.int32)
    model(ids)
    return model, ids


def test_attention_dropout_zero_is_fused_and_answers_as_the_unfused():
    unfused, ids = _model()
    fused, _ = _model(attention_dropout=0.0)
    attention = [block["attention"] for block in fused.blocks]
    assert [layer.dropout for layer in attention] == [0.0, 0.0]
    assert [block["attention"].dropout for block in unfused.blocks] == [0.2, 0.2]
    # Keras fuses where the attention has no dropout (and returns no scores).
    assert all(layer._dropout == 0.0 for layer in attention)  # pylint: disable=protected-access
    fused.set_weights(unfused.get_weights())
    expected = keras.ops.convert_to_numpy(unfused(ids, training=False))
    answered = keras.ops.convert_to_numpy(fused(ids, training=False))
    np.testing.assert_allclose(answered, expected, rtol=1e-5, atol=1e-5)
    # The feed-forward's and the input's dropouts stay --dropout.
    assert fused.input_dropout.rate == 0.2
    assert fused.blocks[0]["ffn_middle"].rate == 0.2


def test_the_default_is_dropout():
    config = configs.PRESETS["synthetic"].replace(dropout=0.3)
    assert configs.attention_dropout(config.model) == 0.3
    assert configs.attention_dropout(config.replace(attention_dropout=0.1).model) == 0.1


def test_the_exported_query_is_the_models_and_serves_from_a_file(tmp_path):
    """`keras_sequential.query_model` (stock layers and keras.ops) answers as `model.query`,
    through a `.keras` file and `keras_logq.serving` with raw ids, histories past max_length
    reading their last 8 items."""
    import keras_logq  # pylint: disable=import-outside-toplevel

    model, ids = _model(attention_dropout=0.0)
    config = configs.PRESETS["synthetic"].replace(
        max_length=8, dim=16, num_blocks=2, num_heads=2, dropout=0.2, attention_dropout=0.0
    )
    query = keras_sequential.query_model(model, config)
    users = np.zeros(len(ids), np.int32)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(query({"user": users, "history": ids})),
        keras.ops.convert_to_numpy(model.query(ids)),
        rtol=1e-5,
        atol=1e-5,
    )
    embeddings = keras.ops.convert_to_numpy(model.items.embeddings)[1:]
    path = keras_logq.serving.save(
        str(tmp_path),
        query,
        np.arange(1, NUM_ITEMS + 1),
        embeddings,
        history_length=8,
        k=5,
        user_vocabulary=[f"u{i}" for i in range(1, 4)],
        item_vocabulary=[f"i{i}" for i in range(1, NUM_ITEMS + 1)],
    )
    retriever = keras_logq.serving.load(path)
    long = [f"i{i}" for i in range(20, 40)]  # 20 items: the query reads the last 8.
    answer = retriever(["u1", "nobody"], [long, ["i3"]])
    padded = np.array([[20 + 12 + j for j in range(8)], [0] * 7 + [3]], np.int32)
    scores = keras.ops.convert_to_numpy(model.query(padded)) @ embeddings.T
    for row, history in enumerate((range(20, 40), [3])):
        scores[row, np.asarray(list(history)) - 1] = -np.inf
        best = np.argsort(-scores[row], kind="stable")[:5] + 1
        assert answer["ids"][row].tolist() == [f"i{i}" for i in best]


def test_weights_of_another_model_are_refused_by_name(tmp_path):
    model, _ = _model()
    keras_sequential.save_weights(model, str(tmp_path))
    other, _ = _model(num_blocks=1)
    with pytest.raises(ValueError, match=r"best.npz holds another model's weights"):
        keras_sequential.load_weights(other, str(tmp_path))
    keras_sequential.load_weights(model, str(tmp_path))  # Its own: loads.
