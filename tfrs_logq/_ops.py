"""Small numerical helpers shared by the library's modules."""

import functools
import types

import tensorflow as tf

from logq_core import formulas
from logq_core import ranking

# The maths lives in logq_core.formulas, written against `keras.ops`'s names; `TF`
# gives those names TensorFlow's ops, so tfrs_logq runs the very same formulas.
TF = types.SimpleNamespace(
    all=tf.reduce_all,
    arange=tf.range,
    argsort=lambda x: tf.argsort(x, stable=True),
    broadcast_to=tf.broadcast_to,
    cast=tf.cast,
    concatenate=tf.concat,
    cumsum=tf.cumsum,
    einsum=tf.einsum,
    equal=tf.equal,
    exp=tf.exp,
    isfinite=tf.math.is_finite,
    isnan=tf.math.is_nan,
    expm1=tf.math.expm1,
    full_like=lambda x, value: tf.fill(tf.shape(x), tf.cast(value, x.dtype)),
    log=tf.math.log,
    log1p=tf.math.log1p,
    logical_and=tf.logical_and,
    logical_not=tf.logical_not,
    logical_or=tf.logical_or,
    logsumexp=tf.reduce_logsumexp,
    maximum=tf.maximum,
    min=tf.reduce_min,
    minimum=tf.minimum,
    not_equal=tf.not_equal,
    num_columns=lambda x: tf.cast(tf.shape(x)[1], tf.float32),
    ones=tf.ones,
    ones_like=tf.ones_like,
    reshape=tf.reshape,
    roll=lambda x, shift: tf.roll(x, shift, axis=0),
    scatter=tf.scatter_nd,
    scatter_update=tf.tensor_scatter_nd_update,
    segment_sum=lambda data, segment_ids, num_segments: tf.math.unsorted_segment_sum(
        data, segment_ids, num_segments
    ),
    shape=tf.shape,
    sigmoid=tf.sigmoid,
    sort=tf.sort,
    softplus=tf.math.softplus,
    stack=tf.stack,
    stop_gradient=tf.stop_gradient,
    sum=tf.reduce_sum,
    take=lambda x, indices, axis=None: tf.gather(x, indices, axis=axis),
    take_along_axis=lambda x, indices, axis: tf.gather(x, indices, batch_dims=axis),
    top_k=lambda x, k: tf.math.top_k(x, k=k),
    where=tf.where,
    zeros_like=tf.zeros_like,
)

MASKED_LOGIT = formulas.MASKED_LOGIT


# `logq_core.ranking.device_top_k` on TensorFlow: its step a tf.function, on whatever device
# TensorFlow places it (a GPU when there is one), its scores in float32.
DEVICE = ranking.Device(
    ops=TF,
    compile=tf.function,
    to_device=tf.convert_to_tensor,
    to_numpy=lambda t: t.numpy(),
    exact=functools.partial(ranking.tensorflow_float32_matmuls, tf),
)


def log1mexp(x: tf.Tensor) -> tf.Tensor:
    """log(1 - exp(x)) for x < 0 (`logq_core.formulas.log1mexp` in TensorFlow)."""
    return formulas.log1mexp(TF, x)


def scores(query_embeddings: tf.Tensor, candidate_embeddings) -> tf.Tensor:
    """[batch, num_candidates] dot products; "maxsim" over heads for 3-D queries (as TFRS).

    Candidates are [num_candidates, dim], shared by the rows, or
    [batch, num_candidates, dim], each row's own, or a tuple of such tensors
    whose scores are concatenated along the candidates (a per-row part and a
    shared part, without copying the shared one per row).
    """
    if isinstance(candidate_embeddings, (tuple, list)):
        return tf.concat([scores(query_embeddings, part) for part in candidate_embeddings], axis=1)
    per_row = candidate_embeddings.shape.rank == 3
    if query_embeddings.shape.rank == 3:
        return tf.reduce_max(
            tf.einsum(
                "qne,qce->qnc" if per_row else "qne,ce->qnc", query_embeddings, candidate_embeddings
            ),
            axis=1,
        )
    if per_row:
        return tf.einsum("qe,qce->qc", query_embeddings, candidate_embeddings)
    return tf.linalg.matmul(query_embeddings, candidate_embeddings, transpose_b=True)


def row_scores(query_embeddings: tf.Tensor, candidate_embeddings: tf.Tensor) -> tf.Tensor:
    """[batch] dot product of each query with its own candidate (maxsim for 3-D queries)."""
    if query_embeddings.shape.rank == 3:
        return tf.reduce_max(
            tf.einsum("qne,qe->qn", query_embeddings, candidate_embeddings), axis=1
        )
    return tf.reduce_sum(query_embeddings * candidate_embeddings, axis=1)
