"""Id-keyed candidates for `tfrs.metrics.FactorizedTopK`.

A streaming frequency estimator (and any sampler) needs `candidate_ids`, and once
`LogQRetrieval` is given ids its factorized metrics evaluate by id: the index must then
return ids of the kind of the labels. TFRS's tutorials build their candidates as embeddings
only (`movies.batch(128).map(movie_model)`): the index then returns integer positions, and
comparing them with string labels fails (`Equal` of string and int32). `candidates` builds
the (id, embedding) batches the metric needs, from the same catalog and item tower.
"""

from typing import Any, Callable

import tensorflow as tf

from tfrs_logq import _validation as v


def candidates(
    items: Any, item_tower: Callable[[tf.Tensor], tf.Tensor], batch_size: int = 128
) -> tf.data.Dataset:
    """A tf.data.Dataset of (ids, embeddings) batches of the catalog, for id-based top-K.

    Give it to `tfrs.metrics.FactorizedTopK(candidates=...)` (a `Streaming` index), or to
    `tfrs.layers.factorized_top_k.BruteForce().index_from_dataset(...)`. The tower is called
    each time the dataset is read, so the index follows the tower's training.

    Example (TFRS's retrieval tutorials, with `LogQRetrieval` and ids):

    >>> metrics = tfrs.metrics.FactorizedTopK(
    ...     candidates=tfrs_logq.candidates(movies, movie_model))
    >>> task = tfrs_logq.LogQRetrieval(metrics=metrics, correction="improved",
    ...                                frequency=tfrs_logq.CountMinSketchEstimator())
    >>> # compute_loss: task(query, movie_model(ids), candidate_ids=ids, training=training)

    Args:
      items: the catalog's ids, each once: a tf.data.Dataset of single integer or string
        ids (scalars, as `movies` in the tutorials, or [1] each), or a 1-D list, array or
        tensor of ids.
      item_tower: callable mapping a [batch] tensor of ids to [batch, dim] embeddings (the
        item tower as it is, e.g. a `StringLookup` followed by an `Embedding`).
      batch_size: ids embedded per batch.

    Returns:
      A dataset of (ids [batch], embeddings [batch, dim]) pairs.
    """
    batch_size = v.check_positive_int("batch_size", batch_size)
    if not callable(item_tower):
        raise TypeError(
            "`item_tower` must be callable (ids -> embeddings); received "
            f"item_tower={item_tower!r}."
        )
    if not isinstance(items, tf.data.Dataset):
        items = tf.data.Dataset.from_tensor_slices(v.ids_tensor("items", items, rank=1))
    spec = items.element_spec
    if not isinstance(spec, tf.TensorSpec):
        raise TypeError(
            "`items` must be a dataset of single ids; received items with element_spec "
            f"{spec!r}. Map it to the id first (e.g. items.map(lambda x: x['movie_id']))."
        )
    if not (spec.dtype.is_integer or spec.dtype == tf.string):
        raise TypeError(
            f"`items` must hold integer or string ids; received items with dtype {spec.dtype.name}."
        )
    if spec.shape.rank is not None and spec.shape.as_list() not in ([], [1]):
        raise ValueError(
            "`items` must be a dataset of single ids (each of shape [] or [1]); "
            f"received items with elements of shape {spec.shape}."
        )
    ids = items.map(lambda item: tf.reshape(item, []))
    return ids.batch(batch_size).map(lambda batch: (batch, item_tower(batch)))
