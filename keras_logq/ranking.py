"""Exact top-k search on the Keras backend's device: `logq_core.ranking.device_top_k` in
`keras.ops`, compiled by the backend (`jax.jit`, `tf.function`; PyTorch runs it eagerly).

The evaluation every job of the project runs, here without TensorFlow: each query's k
highest-scoring candidates by dot product, its history excluded, ties to the lower id,
`NO_ITEM` (-1) in the slots no candidate fills. The scores, exclusions and the running top
k stay on the device; only the answer comes back to the host::

    import keras_logq

    ranked = keras_logq.ranking.exact_top_k(
        queries, index_ids, index_embeddings, k=100, exclude=histories
    )
    keras_logq.ranking.recall_ndcg(ranked, targets, ks=(10, 100))

Scores are float32 products (TF32 is off while it searches on a GPU). PyTorch's `topk`
does not promise the order of equal scores, so on the torch backend ties
may come out in another order than on JAX and TensorFlow (and than the numpy reference).
"""

import contextlib
from typing import Callable, Optional, Sequence

import keras
import numpy as np
from keras import ops

from keras_logq import _ops
from logq_core import ranking
from logq_core.metrics import recall_ndcg  # noqa: F401  (re-exported: the metrics of a search)
from logq_core.ranking import NO_ITEM  # noqa: F401  (re-exported: a slot no candidate fills)

# A chunk of the index holds at most this many items (dim 64: 64 MiB of float32).
CHUNK_ITEMS = 2**18


def device() -> ranking.Device:
    """`logq_core.ranking.Device` of the current Keras backend."""
    return ranking.Device(
        _ops.OPS, _compiler(), ops.convert_to_tensor, ops.convert_to_numpy, _float32_matmuls
    )


def _float32_matmuls():
    """A context where the backend multiplies float32 in float32 (JAX and TensorFlow use
    TF32 on Ampere and later GPUs by default; PyTorch's matmuls are float32 by default)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax  # pylint: disable=import-outside-toplevel

        return jax.default_matmul_precision("float32")
    if backend == "tensorflow":
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        return ranking.tensorflow_float32_matmuls(tf)
    return contextlib.nullcontext()


def _compiler() -> Callable[[Callable], Callable]:
    """The backend's compiler of a step: `jax.jit`, `tf.function`, or none (PyTorch)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax  # pylint: disable=import-outside-toplevel

        return jax.jit
    if backend == "tensorflow":
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        return tf.function
    return lambda step: step


def exact_top_k(
    queries,
    ids: np.ndarray,
    embeddings,
    k: int,
    exclude: Optional[Sequence[np.ndarray]] = None,
    block: Optional[int] = None,
    chunk_items: int = CHUNK_ITEMS,
    scores_per_block: int = ranking.SCORES_PER_BLOCK,
    return_scores: bool = False,
):
    """[num_queries, k] int64 ids of each query's k highest-scoring candidates, exactly;
    with `return_scores`, (ids, [num_queries, k] float32 scores, -inf where `NO_ITEM`).

    Args:
      queries: [num_queries, dim] float32, an array or a tensor (on the device).
      ids: [n] the candidates' ids (any order; unique).
      embeddings: [n, dim] their embeddings, row i of ids[i]: an array or a tensor.
      k: the list's length (`NO_ITEM` past the candidates left).
      exclude: per query, ids never returned (the user's history).
      block: queries scored at once (default: as many as `scores_per_block` allows).
      chunk_items: candidates scored at once.
      scores_per_block: the most (query, item) pairs a block scores.
      return_scores: also return the scores.

    Raises:
      ValueError: `ids` not one-dimensional and unique, or `embeddings` not one row per id.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise ValueError(
            f"`ids` must be a 1-D integer array; received dtype {ids.dtype} and shape "
            f"{list(ids.shape)}."
        )
    ids = ids.astype(np.int64)
    shape = tuple(embeddings.shape)
    if len(shape) != 2 or shape[0] != len(ids):
        raise ValueError(
            f"`embeddings` must be [len(ids), dim] = [{len(ids)}, dim]; received shape "
            f"{list(shape)}."
        )
    order = np.argsort(ids, kind="stable")
    if len(ids) > 1 and (np.diff(ids[order]) == 0).any():
        repeats = len(ids) - len(np.unique(ids))
        raise ValueError(f"`ids` must be unique; received {repeats} repeats.")
    if not (order == np.arange(len(ids))).all():
        embeddings = ops.take(embeddings, ops.convert_to_tensor(order.astype(np.int32)), axis=0)
    ids = ids[order]

    def chunks():
        for start in range(0, len(ids), chunk_items):
            yield ids[start : start + chunk_items], embeddings[start : start + chunk_items]

    return ranking.device_top_k(
        device(), queries, chunks(), k, exclude, block, scores_per_block, return_scores
    )


__all__ = ["CHUNK_ITEMS", "NO_ITEM", "device", "exact_top_k", "recall_ndcg"]
