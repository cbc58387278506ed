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


def scores(query_embeddings: tf.Tensor, candidate_embeddings) -> tf.Tensor:
    """[batch, num_candidates] dot products; "maxsim" over heads for 3-D queries (as TFRS).

    Candidates are [num_candidates, dim], shared by the rows, or
    [batch, num_candidates, dim], each row's own, or a tuple of such tensors
    whose scores are concatenated along the candidates (a per-row part and a
    shared part, without copying the shared one per row).
    """
    if isinstance(candidate_embeddings, (tuple, list)):
        return tf.concat([scores(query_embeddings, part) for part in candidate_embeddings],
                         axis=1)
    per_row = candidate_embeddings.shape.rank == 3
    if query_embeddings.shape.rank == 3:
        return tf.reduce_max(tf.einsum("qne,qce->qnc" if per_row else "qne,ce->qnc",
                                       query_embeddings, candidate_embeddings), axis=1)
    if per_row:
        return tf.einsum("qe,qce->qc", query_embeddings, candidate_embeddings)
    return tf.linalg.matmul(query_embeddings, candidate_embeddings, transpose_b=True)


def row_scores(query_embeddings: tf.Tensor, candidate_embeddings: tf.Tensor) -> tf.Tensor:
    """[batch] dot product of each query with its own candidate (maxsim for 3-D queries)."""
    if query_embeddings.shape.rank == 3:
        return tf.reduce_max(tf.einsum("qne,qe->qn", query_embeddings, candidate_embeddings),
                             axis=1)
    return tf.reduce_sum(query_embeddings * candidate_embeddings, axis=1)
