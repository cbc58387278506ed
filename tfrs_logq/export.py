"""SavedModel export for serving: query tower + candidate index, and an item-embedding lookup.

The exported model stands alone: a process that imports only TensorFlow (and
`scann`, for the ScaNN index, whose custom ops it needs) loads it with
`tf.saved_model.load` and serves

- `serving_default`: the query model's inputs -> top-k item ids and scores,
  the items in the request's history excluded;
- `item_embeddings`: item ids -> embeddings.

Ids outside [1, num_items] are out of vocabulary: in a history they count as
padding, in `item_embeddings` they map to row 0 (the padding / OOV row), and
they never crash. Stock TensorFlow Serving lacks ScaNN's ops: serve the
`index="brute_force"` export there, or the ScaNN one from TF Serving built
with ScaNN (the `google/tf-serving-scann` image) or from Python.
"""

from typing import Dict, Optional

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs

from tfrs_logq import retrieval

INDEXES = ("brute_force", "scann")
# What ScaNN's ops need to be saved (TFRS's efficient-serving guide).
SCANN_SAVE_OPTIONS = tf.saved_model.SaveOptions(namespace_whitelist=["Scann"])


class _Serving(tf.Module):
    """The exported module: the model's variables, the item table, the index, two signatures."""

    def __init__(self, model, item_embeddings: np.ndarray, k: int, index: str,
                 max_length: int, takes_user: bool):
        super().__init__()
        self.model = model
        self.num_items = int(item_embeddings.shape[0] - 1)
        self.k, self.max_length, self.takes_user = k, max_length, takes_user
        self.items = tf.Variable(item_embeddings, trainable=False, name="item_embeddings")
        self.index_kind = index
        if index == "scann":
            # Ask for k + max_length so that k remain after the history is excluded.
            wanted = min(k + max_length, self.num_items)
            settings = retrieval.scann_defaults(self.num_items, wanted)
            self.scann = tfrs.layers.factorized_top_k.ScaNN(
                k=wanted, num_leaves=min(settings["num_leaves"], max(self.num_items // 2, 1)),
                num_leaves_to_search=min(settings["num_leaves_to_search"],
                                         max(self.num_items // 2, 1)),
                num_reordering_candidates=max(settings["reorder"], wanted))
            self.scann.index(tf.constant(item_embeddings[1:]),
                             identifiers=tf.range(1, self.num_items + 1, dtype=tf.int64))

    def _in_vocabulary(self, ids):
        return tf.logical_and(ids >= 1, ids <= self.num_items)

    def _history(self, history):
        """Known ids kept in order and moved right (unknown ids and any padding dropped);
        the last max_length of them, left-padded with 0."""
        # A leading padding column keeps an empty history well-formed.
        history = tf.concat([tf.zeros_like(history[:, :1]), history], axis=1)
        known = self._in_vocabulary(history)
        order = tf.argsort(tf.cast(known, tf.int32), axis=1, stable=True)
        history = tf.where(tf.gather(known, order, batch_dims=1),
                           tf.gather(history, order, batch_dims=1), tf.zeros_like(history))
        history = history[:, -self.max_length:]
        pad = self.max_length - tf.shape(history)[1]
        return tf.cast(tf.pad(history, [[0, 0], [pad, 0]]), tf.int32)

    def _top_k(self, queries, history):
        """Top-k (scores, ids) by the index, the history's ids excluded."""
        if self.index_kind == "scann":
            scores, ids = self.scann(queries)
        else:
            scores = tf.matmul(queries, self.items, transpose_b=True)[:, 1:]
            ids = tf.broadcast_to(tf.range(1, self.num_items + 1, dtype=tf.int64),
                                  tf.shape(scores))
        seen = tf.reduce_any(tf.equal(ids[:, :, tf.newaxis],
                                      tf.cast(history, tf.int64)[:, tf.newaxis, :]), axis=2)
        scores = tf.where(seen, tf.constant(-np.inf, scores.dtype), scores)
        k = tf.minimum(self.k, tf.shape(scores)[1])
        scores, columns = tf.math.top_k(scores, k=k)
        return {"ids": tf.gather(ids, columns, batch_dims=1), "scores": scores}

    def recommend(self, user, history):
        # Dtypes and ranks are enforced by the signature; the batch sizes are checked here.
        if self.takes_user:
            with tf.control_dependencies([tf.debugging.assert_equal(
                    tf.shape(user)[0], tf.shape(history)[0],
                    message="`user` and `history` must have the same batch size")]):
                history = tf.identity(history)
        padded = self._history(history)
        if self.takes_user:
            user = tf.where(self._in_vocabulary(user) | (user > 0), user, tf.zeros_like(user))
            user = tf.where(user < tf.cast(self.model.user_embedding.input_dim, tf.int64), user,
                            tf.zeros_like(user))
            queries = self.model.query_embeddings({"user": tf.cast(user, tf.int32),
                                                   "history": padded})
        else:
            queries = self.model.query_embeddings(padded)
        return self._top_k(tf.cast(queries, self.items.dtype), padded)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="item_ids")])
    def item_embeddings(self, item_ids):
        rows = tf.where(self._in_vocabulary(item_ids), item_ids, tf.zeros_like(item_ids))
        return {"embeddings": tf.gather(self.items, rows)}


def export(model, path: str, *, k: int = 100, index: str = "brute_force",
           max_length: Optional[int] = None) -> str:
    """Writes a SavedModel of `model` (a `tfrs_logq.models.SASRec` or `TwoTower`) to `path`.

    Args:
      model: a trained model with `query_embeddings` and `item_embeddings`.
      path: the SavedModel directory.
      k: items returned per request.
      index: "brute_force" (exact; plain TensorFlow) or "scann" (needs ScaNN's ops).
      max_length: history entries the query model reads (default: the model's
        `max_length`, else 50).

    Returns:
      `path`.
    """
    if index not in INDEXES:
        raise ValueError(f"`index` must be one of {', '.join(INDEXES)}; received index={index!r}.")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"`k` must be a positive integer; received k={k!r}.")
    takes_user = hasattr(model, "user_embedding")
    max_length = max_length or getattr(model, "max_length", 50)
    module = _Serving(model, model.item_embeddings().numpy(), k, index, max_length, takes_user)
    history_spec = tf.TensorSpec([None, None], tf.int64, name="history")
    if takes_user:
        serve = tf.function(lambda user, history: module.recommend(user, history),
                            input_signature=[tf.TensorSpec([None], tf.int64, name="user"),
                                             history_spec])
    else:
        serve = tf.function(lambda history: module.recommend(None, history),
                            input_signature=[history_spec])
    module.serve = serve
    signatures: Dict[str, tf.types.experimental.ConcreteFunction] = {
        "serving_default": serve.get_concrete_function(),
        "item_embeddings": module.item_embeddings.get_concrete_function()}
    tf.saved_model.save(module, path, signatures=signatures,
                        options=SCANN_SAVE_OPTIONS if index == "scann" else None)
    return path
