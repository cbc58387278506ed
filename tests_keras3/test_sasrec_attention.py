"""Issue 77, item 5: the Keras job's SASRec with --attention_dropout=0 takes Keras's fused
attention (`ops.dot_product_attention`), and answers as the unfused layers do (the padding
mask and the causal mask alike)."""

import keras
import numpy as np

from pipelines import configs
from pipelines import keras_sequential

NUM_ITEMS = 50


def _model(**fields):
    config = configs.PRESETS["synthetic"].replace(
        max_length=8, dim=16, num_blocks=2, num_heads=2, dropout=0.2, **fields
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
