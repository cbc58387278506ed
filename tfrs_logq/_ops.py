"""Small numerical helpers shared by the library's modules."""

import tensorflow as tf

# Stands in for a masked logit. Finite, so that masked slots carry neither inf
# nor NaN into the forward pass or the gradient; far below any real logit.
MASKED_LOGIT = -1e30


def log1mexp(x: tf.Tensor) -> tf.Tensor:
    """log(1 - exp(x)) for x < 0, accurate near 0 and for very negative x (Maechler 2012)."""
    return tf.where(x > -0.6931472,
                    tf.math.log(-tf.math.expm1(x)),
                    tf.math.log1p(-tf.exp(x)))


def masked(logits: tf.Tensor, mask) -> tf.Tensor:
    """Replaces masked-out logits (mask False) by MASKED_LOGIT; `mask=None` keeps all."""
    if mask is None:
        return logits
    return tf.where(mask, logits, tf.constant(MASKED_LOGIT, logits.dtype))
