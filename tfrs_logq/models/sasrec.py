"""SASRec (Kang & McAuley 2018, as in gSASRec): causal self-attention over the item sequence."""

import tensorflow as tf
import tensorflow_recommenders as tfrs

from tfrs_logq import _validation as v
from tfrs_logq.models.objective import RetrievalObjective


class SASRecBlock(tf.keras.layers.Layer):
    """Q = LN(x); x = Q + causal-attention(Q, x, x); x = x + FFN(LN(x)) (SASRec's layout)."""

    def __init__(self, dim: int, num_heads: int, dropout: float, **kwargs):
        super().__init__(**kwargs)
        self.attention_norm = tf.keras.layers.LayerNormalization(epsilon=1e-8)
        self.attention = tf.keras.layers.MultiHeadAttention(
            num_heads, key_dim=dim // num_heads, dropout=dropout)
        self.ffn_norm = tf.keras.layers.LayerNormalization(epsilon=1e-8)
        self.ffn = tf.keras.Sequential([tf.keras.layers.Dense(dim, activation="relu"),
                                        tf.keras.layers.Dropout(dropout),
                                        tf.keras.layers.Dense(dim),
                                        tf.keras.layers.Dropout(dropout)])

    def call(self, x, mask, training=None):
        query = self.attention_norm(x)
        attention_mask = mask[:, tf.newaxis, :]  # Padding keys are never attended to.
        x = query + self.attention(query, x, x, attention_mask=attention_mask,
                                   use_causal_mask=True, training=training)
        x = x + self.ffn(self.ffn_norm(x), training=training)
        return x * tf.cast(mask, x.dtype)[:, :, tf.newaxis]


class SASRec(tfrs.Model):
    """SASRec with learned positions, dropout, and (by default) input and output items tied.

    Inputs are [batch, max_length] left-padded item ids (0 = padding). Every
    position predicts the next item; `compute_loss` takes {"inputs", "targets"}
    windows (see `pipelines.data.builders.sasrec_dataset`).

    Args:
      num_items: catalog size (ids 1..num_items).
      objective: the `RetrievalObjective` (loss, negatives, correction).
      max_length: sequence length L.
      dim: embedding size (the paper: 128).
      num_blocks, num_heads: transformer blocks and heads (2 and 1).
      dropout: dropout rate (0.5).
      tie_embeddings: score items with the input item table (SASRec, True), or with a
        separate output table (False; gSASRec's later `reuse_item_embeddings=False`).
        On ML-1M it did not rescue gBCE with 256 negatives in an 8-epoch probe
        (docs/results/README.md).
    """

    def __init__(self, num_items: int, objective: RetrievalObjective, max_length: int = 200,
                 dim: int = 128, num_blocks: int = 2, num_heads: int = 1, dropout: float = 0.5,
                 tie_embeddings: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.num_items = v.check_positive_int("num_items", num_items)
        self.max_length = v.check_positive_int("max_length", max_length)
        self.dim = v.check_positive_int("dim", dim)
        if dim % v.check_positive_int("num_heads", num_heads):
            raise ValueError(f"`dim` must be a multiple of `num_heads`; received dim={dim}, "
                             f"num_heads={num_heads}.")
        self.item_embedding = tf.keras.layers.Embedding(num_items + 1, dim, name="items")
        self.tie_embeddings = v.check_bool("tie_embeddings", tie_embeddings)
        self.output_embedding = (self.item_embedding if tie_embeddings else
                                 tf.keras.layers.Embedding(num_items + 1, dim,
                                                           name="output_items"))
        self.position_embedding = tf.keras.layers.Embedding(max_length, dim, name="positions")
        self.input_dropout = tf.keras.layers.Dropout(dropout)
        self.blocks = [SASRecBlock(dim, num_heads, dropout, name=f"block_{i}")
                       for i in range(v.check_positive_int("num_blocks", num_blocks))]
        self.final_norm = tf.keras.layers.LayerNormalization(epsilon=1e-8)
        self.objective = objective

    def call(self, inputs, training=None):
        """[batch, L] ids -> [batch, L, dim] sequence representations."""
        if isinstance(inputs, dict):
            inputs = inputs["inputs"]
        if not self.output_embedding.built:
            # With the model, so that optimizers and checkpoints see it from the first call.
            self.output_embedding(tf.zeros([1], tf.int32))
        mask = tf.not_equal(inputs, 0)
        x = self.item_embedding(inputs) * (self.dim ** 0.5)
        x = x + self.position_embedding(tf.range(tf.shape(inputs)[1]))[tf.newaxis]
        x = self.input_dropout(x, training=training) * tf.cast(mask, x.dtype)[:, :, tf.newaxis]
        for block in self.blocks:
            x = block(x, mask, training=training)
        return self.final_norm(x)

    def query_embeddings(self, inputs, training=False):
        """[batch, dim]: the representation at the last position (the next-item query)."""
        return self(inputs, training=training)[:, -1, :]

    def item_embeddings(self):
        """[num_items + 1, dim] output item embeddings (row 0: padding)."""
        return self.output_embedding.embeddings

    def compute_loss(self, features, training=False):
        sequence = self(features["inputs"], training=training)
        targets = features["targets"]
        valid = tf.not_equal(targets, 0)
        return self.objective(tf.boolean_mask(sequence, valid), tf.boolean_mask(targets, valid),
                              self.output_embedding, all_item_embeddings=self.item_embeddings,
                              training=training)
