"""SASRec (Kang & McAuley 2018): causal self-attention over the item sequence, in two layouts.

- `architecture="sasrec"` (default): Keras's MultiHeadAttention (with its
  output projection), item embeddings scaled by sqrt(dim), Keras's default
  initialisers, LayerNorm epsilon 1e-8, tied input and output item tables.
- `architecture="gsasrec"`: the model the logQ paper's numbers came from,
  `NonameUntitled/logq` gsasrec.py (a fork of `asash/gSASRec-pytorch`) with
  gSASRec-pytorch's transformer_decoder.py, layer by layer:

  - no sqrt(dim) scaling of the item embeddings (gsasrec.py `forward`);
  - attention with Q, K and V projections (with bias) and no output
    projection; queries are LN(x), keys and values the block input x
    (transformer_decoder.py `MultiHeadAttention`, `TransformerBlock.forward`);
  - x = LN2(attention + LN1(x)); x = x + dropout(W2 dropout(relu(W1 x)))
    (`TransformerBlock.forward`: the residual is the normalised value);
  - dropout on the embeddings, the attention weights and in the feed-forward;
  - LayerNorm epsilon 1e-5 (torch's default);
  - every weight but LayerNorm's drawn from a normal with std 0.02
    truncated at 2 std, biases zero, LayerNorm gain one (gsasrec.py
    `_init_weights`);
  - a separate output item table (`build_model` never passes
    `reuse_item_embeddings`, so GSASRec's default False holds);
  - item tables of num_items + 2 rows (ids 1..n, padding n + 1 and an unused
    row 0 there; here padding is 0 and row n + 1 is the unused one, never
    looked up), so the parameter count is gSASRec's.
"""

from typing import Optional

import tensorflow as tf

from logq_core import options
from tfrs_logq import _validation as v
from tfrs_logq.models._model import Model
from tfrs_logq.models._tables import lookup
from tfrs_logq.models.objective import RetrievalObjective


def _half_draw_uniform(generator: tf.random.Generator):
    """A `uniform_sampler` for `tf.nn.experimental.general_dropout` that takes 16 bits per
    value, two values per 32-bit draw of `generator`: values k / 2^16, k uniform in
    [0, 2^16)."""

    def sample(shape, dtype):
        size = tf.reduce_prod(shape)
        bits = generator.uniform_full_int([(size + 1) // 2], dtype=tf.uint32)
        halves = tf.concat(
            [tf.bitwise.bitwise_and(bits, 0xFFFF), tf.bitwise.right_shift(bits, 16)], axis=0
        )[:size]
        return tf.reshape(tf.cast(halves, dtype) * (1.0 / 65536.0), shape)

    return sample


@tf.keras.utils.register_keras_serializable(package="tfrs_logq")
class Dropout(tf.keras.layers.Dropout):
    """`tf.keras.layers.Dropout` that, when Keras draws from a `tf.random.Generator`
    (`tf.keras.backend.experimental.enable_tf_random_generator()`, as the pipelines do for
    exact resume), makes its mask from 16 random bits per unit: half the generator's work of
    float draws. A unit is kept with probability 1 - ceil(2^16 rate) / 2^16, within 2^-16 of
    1 - rate, and scaled by 1 / (1 - rate) as Keras does. The rest (legacy or stateless
    random ops, a `noise_shape`) is Keras's own Dropout.

    Measured with XLA on 2 cores, seven dropouts of [128, 50, 64]: 6.4 ms with 16-bit
    draws against 10.6 ms with float draws.
    """

    def call(self, inputs, training=None):
        randomness = self._random_generator
        randomness._maybe_init()  # pylint: disable=protected-access
        generator = getattr(randomness, "_generator", None)
        if self.rate == 0 or self.noise_shape is not None or generator is None:
            return super().call(inputs, training=training)
        if training is None:
            training = tf.keras.backend.learning_phase()

        def dropped():
            return tf.nn.experimental.general_dropout(
                inputs, rate=self.rate, uniform_sampler=_half_draw_uniform(generator)
            )

        return tf.__internal__.smart_cond.smart_cond(training, dropped, lambda: tf.identity(inputs))


class SASRecBlock(tf.keras.layers.Layer):
    """Q = LN(x); x = Q + causal-attention(Q, x, x); x = x + FFN(LN(x)) (SASRec's layout)."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        dropout: float,
        attention_dropout: Optional[float] = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.attention_norm = tf.keras.layers.LayerNormalization(epsilon=1e-8)
        self.attention = tf.keras.layers.MultiHeadAttention(
            num_heads,
            key_dim=dim // num_heads,
            dropout=dropout if attention_dropout is None else attention_dropout,
        )
        self.ffn_norm = tf.keras.layers.LayerNormalization(epsilon=1e-8)
        self.ffn = tf.keras.Sequential(
            [
                tf.keras.layers.Dense(dim, activation="relu"),
                Dropout(dropout),
                tf.keras.layers.Dense(dim),
                Dropout(dropout),
            ]
        )

    def call(self, x, mask, training=None):
        query = self.attention_norm(x)
        attention_mask = mask[:, tf.newaxis, :]  # Padding keys are never attended to.
        x = query + self.attention(
            query, x, x, attention_mask=attention_mask, use_causal_mask=True, training=training
        )
        x = x + self.ffn(self.ffn_norm(x), training=training)
        return x * tf.cast(mask, x.dtype)[:, :, tf.newaxis]


class GSASRecAttention(tf.keras.layers.Layer):
    """gSASRec's causal attention: Q, K, V projections with bias, no output projection.

    Heads split the projected vectors along the feature axis. Padding keys are
    never attended to; a query with no valid key (padding) gets zeros.
    """

    def __init__(self, dim: int, num_heads: int, dropout: float, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.query = tf.keras.layers.Dense(
            dim, kernel_initializer=gsasrec_initializer(), name="query"
        )
        self.key = tf.keras.layers.Dense(dim, kernel_initializer=gsasrec_initializer(), name="key")
        self.value = tf.keras.layers.Dense(
            dim, kernel_initializer=gsasrec_initializer(), name="value"
        )
        self.dropout = Dropout(dropout)

    def _heads(self, x):
        """[batch, L, dim] -> [batch, heads, L, dim / heads]."""
        shape = tf.shape(x)
        x = tf.reshape(x, [shape[0], shape[1], self.num_heads, -1])
        return tf.transpose(x, [0, 2, 1, 3])

    def call(self, queries, keys, mask, training=None):
        q, k, v = (
            self._heads(self.query(queries)),
            self._heads(self.key(keys)),
            self._heads(self.value(keys)),
        )
        logits = tf.matmul(q, k, transpose_b=True) / tf.sqrt(tf.cast(tf.shape(q)[-1], q.dtype))
        length = tf.shape(logits)[-1]
        causal = tf.linalg.band_part(tf.ones([length, length], tf.bool), -1, 0)
        allowed = tf.logical_and(causal[tf.newaxis, tf.newaxis], mask[:, tf.newaxis, tf.newaxis, :])
        logits = tf.where(allowed, logits, tf.constant(-1e9, logits.dtype))
        weights = tf.nn.softmax(logits, axis=-1) * tf.cast(
            tf.reduce_any(allowed, axis=-1, keepdims=True), logits.dtype
        )
        out = tf.matmul(self.dropout(weights, training=training), v)
        out = tf.transpose(out, [0, 2, 1, 3])
        shape = tf.shape(out)
        return tf.reshape(out, [shape[0], shape[1], -1])


class GSASRecBlock(tf.keras.layers.Layer):
    """x = LN2(attention(LN1(x), x) + LN1(x)); x = x + FFN(x) (gSASRec's `TransformerBlock`)."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        dropout: float,
        attention_dropout: Optional[float] = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.first_norm = tf.keras.layers.LayerNormalization(epsilon=GSASREC_EPSILON)
        self.second_norm = tf.keras.layers.LayerNormalization(epsilon=GSASREC_EPSILON)
        self.attention = GSASRecAttention(
            dim, num_heads, dropout if attention_dropout is None else attention_dropout
        )
        self.dense1 = tf.keras.layers.Dense(
            dim, activation="relu", kernel_initializer=gsasrec_initializer()
        )
        self.dense2 = tf.keras.layers.Dense(dim, kernel_initializer=gsasrec_initializer())
        self.dropout = Dropout(dropout)

    def call(self, x, mask, training=None):
        queries = self.first_norm(x)
        x = self.second_norm(self.attention(queries, x, mask, training=training) + queries)
        ffn = self.dropout(
            self.dense2(self.dropout(self.dense1(x), training=training)), training=training
        )
        return (x + ffn) * tf.cast(mask, x.dtype)[:, :, tf.newaxis]


ARCHITECTURES = options.ARCHITECTURES  # Defined in logq_core.options.
GSASREC_EPSILON = 1e-5  # torch.nn.LayerNorm's default.


def gsasrec_initializer() -> tf.keras.initializers.Initializer:
    """gsasrec.py `_init_weights`: trunc_normal_(std=0.02, a=-0.04, b=0.04); Keras's
    TruncatedNormal redraws beyond 2 std. A new instance per variable: one unseeded
    instance called twice returns the same values."""
    return tf.keras.initializers.TruncatedNormal(stddev=0.02)


class SASRec(Model):
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
      attention_dropout: the dropout rate of the attention weights; None: `dropout` (both
        layouts' own). 0: none, which Keras 3's MultiHeadAttention needs to fuse the
        attention (`keras.ops.dot_product_attention`; flash attention on a GPU).
      tie_embeddings: score items with the input item table (SASRec, True), or with a
        separate output table (False; gSASRec's later `reuse_item_embeddings=False`).
        On ML-1M it did not rescue gBCE with 256 negatives in an 8-epoch probe
        (docs/results/README.md). Default: True for "sasrec", False for
        "gsasrec" (as the paper's code runs it).
      architecture: "sasrec" or "gsasrec" (see the module docstring).

    The objective's `mask_known_positives` masks, among each position's negatives, the
    other targets of its sequence (`compute_loss`).
    """

    def __init__(
        self,
        num_items: int,
        objective: RetrievalObjective,
        max_length: int = 200,
        dim: int = 128,
        num_blocks: int = 2,
        num_heads: int = 1,
        dropout: float = 0.5,
        tie_embeddings: Optional[bool] = None,
        architecture: str = "sasrec",
        attention_dropout: Optional[float] = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_items = v.check_positive_int("num_items", num_items)
        self.max_length = v.check_positive_int("max_length", max_length)
        self.dim = v.check_positive_int("dim", dim)
        if dim % v.check_positive_int("num_heads", num_heads):
            raise ValueError(
                f"`dim` must be a multiple of `num_heads`; received dim={dim}, "
                f"num_heads={num_heads}."
            )
        self.architecture = v.check_choice("architecture", architecture, ARCHITECTURES)
        if attention_dropout is not None and not (
            isinstance(attention_dropout, (int, float))
            and not isinstance(attention_dropout, bool)
            and 0 <= attention_dropout < 1
        ):
            raise ValueError(
                "`attention_dropout` must be None (`dropout`) or a rate in [0, 1); received "
                f"attention_dropout={attention_dropout!r}."
            )
        gsasrec = architecture == "gsasrec"
        if tie_embeddings is None:
            tie_embeddings = not gsasrec
        self.tie_embeddings = v.check_bool("tie_embeddings", tie_embeddings)
        rows = num_items + (2 if gsasrec else 1)

        def table(size, name):
            return tf.keras.layers.Embedding(
                size,
                dim,
                embeddings_initializer=gsasrec_initializer() if gsasrec else "uniform",
                name=name,
            )

        self.item_embedding = table(rows, "items")
        self.output_embedding = (
            self.item_embedding if tie_embeddings else table(rows, "output_items")
        )
        self.position_embedding = table(max_length, "positions")
        self.input_dropout = Dropout(dropout)
        num_blocks = v.check_positive_int("num_blocks", num_blocks)
        if gsasrec:
            self.blocks = [
                GSASRecBlock(dim, num_heads, dropout, attention_dropout, name=f"block_{i}")
                for i in range(num_blocks)
            ]
        else:
            self.blocks = [
                SASRecBlock(dim, num_heads, dropout, attention_dropout, name=f"block_{i}")
                for i in range(num_blocks)
            ]
        self.final_norm = tf.keras.layers.LayerNormalization(
            epsilon=GSASREC_EPSILON if gsasrec else 1e-8
        )
        self.objective = objective

    def call(self, inputs, training=None):
        """[batch, L] ids -> [batch, L, dim] sequence representations."""
        if isinstance(inputs, dict):
            inputs = inputs["inputs"]
        if not self.output_embedding.built:
            # With the model, so that optimizers and checkpoints see it from the first call.
            self.output_embedding(tf.zeros([1], tf.int32))
        mask = tf.not_equal(inputs, 0)
        x = lookup(self.item_embedding, inputs)
        if self.architecture == "sasrec":
            x = x * (self.dim**0.5)
        x = x + self.position_embedding(tf.range(tf.shape(inputs)[1]))[tf.newaxis]
        x = self.input_dropout(x, training=training) * tf.cast(mask, x.dtype)[:, :, tf.newaxis]
        for block in self.blocks:
            x = block(x, mask, training=training)
        return self.final_norm(x)

    def query_embeddings(self, inputs, training=False):
        """[batch, dim]: the representation at the last position (the next-item query)."""
        return self.objective.embed(self(inputs, training=training)[:, -1, :])

    def item_embeddings(self, ids=None):
        """[num_items + 1, dim] output item embeddings (row 0: padding); with `ids`, those
        ids' rows only ([len(ids), dim]: what `tfrs_logq.retrieval.ItemTable` reads a chunk
        of the catalog at a time)."""
        table = self.output_embedding.embeddings
        if ids is not None:
            return self.objective.embed(tf.gather(table, ids))
        if self.architecture == "gsasrec":  # Without the unused row num_items + 1.
            return self.objective.embed(table[: self.num_items + 1])
        return self.objective.embed(table)

    def _step_gradients(self, gradients):
        """Under XLA (`compile(jit_compile=True)`) the item tables' sparse gradients are made
        dense: Keras's Adam decays and updates every row of a table at each step either way,
        and XLA's scatter of IndexedSlices cost more than the dense sum (cpu preset, ML-1M:
        about 25 against 33 ms a step)."""
        if not getattr(self, "jit_compile", False):
            return gradients
        return [
            tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in gradients
        ]

    def compute_loss(self, features, training=False):
        """Mean loss over the windows' non-padding positions.

        Every position stays a row, padding masked (`example_mask`), so that the
        step's shapes do not depend on the batch and XLA compiles it once. With the
        objective's `mask_known_positives`, each position's query is its sequence
        (`sequence_ids`): every other target of the same sequence is masked among its
        negatives (padding positions are nobody's targets).
        """
        sequence = self(features["inputs"], training=training)
        targets = tf.reshape(features["targets"], [-1])
        query_ids = (
            sequence_ids(tf.shape(features["targets"]))
            if self.objective.mask_known_positives
            else None
        )
        return self.objective(
            tf.reshape(sequence, [-1, self.dim]),
            targets,
            self.output_embedding,
            all_item_embeddings=self.item_embeddings,
            training=training,
            example_mask=tf.not_equal(targets, 0),
            query_ids=query_ids,
        )


def sequence_ids(shape) -> tf.Tensor:
    """[batch * length] int64 query id of each flattened position of a [batch, length]
    window: its row (sequence) in the batch, made unique across the replicas of
    tf.distribute (replica r's rows are numbered from r * 2^32), whose in-batch pool may
    hold every replica's positions."""
    batch, length = shape[0], shape[1]
    rows = tf.range(tf.cast(batch, tf.int64), dtype=tf.int64)
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        rows += tf.cast(context.replica_id_in_sync_group, tf.int64) * (2**32)
    return tf.repeat(rows, length)
