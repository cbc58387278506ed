"""A two-tower retrieval model: user id and history against item id."""

import tensorflow as tf

from tfrs_logq import _validation as v
from tfrs_logq.models._model import Model
from tfrs_logq.models._tables import lookup
from tfrs_logq.models.objective import RetrievalObjective


class TwoTower(Model):
    """Query tower: [user embedding, mean of the history's item embeddings] -> dense;
    candidate tower: item embedding -> dense.

    `compute_loss` takes {"user": [B], "history": [B, H], "item": [B]} (see
    `pipelines.data.builders.two_tower_dataset`).

    Args:
      num_users, num_items: vocabulary sizes (ids from 1; 0 is padding).
      objective: the `RetrievalObjective`.
      dim: embedding size.
      share_item_table: the history's items read the candidate tower's item table (one item
        table, half the item state of two at large catalogs; the history tower and the
        candidate tower still have dense layers of their own). False: a table of its own.

    The objective's `mask_known_positives` masks, among each example's negatives, the
    user's other items in the batch and its history (`compute_loss`).
    """

    def __init__(
        self,
        num_users: int,
        num_items: int,
        objective: RetrievalObjective,
        dim: int = 64,
        share_item_table: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_items = v.check_positive_int("num_items", num_items)
        dim = v.check_positive_int("dim", dim)
        self.user_embedding = tf.keras.layers.Embedding(
            v.check_positive_int("num_users", num_users) + 1, dim, name="users"
        )
        self.share_item_table = v.check_bool("share_item_table", share_item_table)
        self.query_tower = tf.keras.layers.Dense(dim, name="query")
        self.item_embedding = tf.keras.layers.Embedding(num_items + 1, dim, name="items")
        self.history_embedding = (
            self.item_embedding
            if share_item_table
            else tf.keras.layers.Embedding(num_items + 1, dim, name="history")
        )
        self.candidate_tower = tf.keras.layers.Dense(dim, name="candidate")
        self.objective = objective

    def query_embeddings(self, features, training=False):
        """[batch, dim] from {"user", "history"}."""
        history = features["history"]
        mask = tf.cast(tf.not_equal(history, 0), tf.float32)[:, :, tf.newaxis]
        pooled = tf.reduce_sum(lookup(self.history_embedding, history) * mask, axis=1) / tf.maximum(
            tf.reduce_sum(mask, axis=1), 1.0
        )
        return self.objective.embed(
            self.query_tower(tf.concat([lookup(self.user_embedding, features["user"]), pooled], 1))
        )

    def candidate_embeddings(self, ids):
        """Item ids -> [.., dim] candidate embeddings."""
        return self.objective.embed(self.candidate_tower(lookup(self.item_embedding, ids)))

    def item_embeddings(self, ids=None):
        """[num_items + 1, dim] for every id (row 0: padding); with `ids`, those ids' rows
        only ([len(ids), dim]: what `tfrs_logq.retrieval.ItemTable` reads a chunk of the
        catalog at a time)."""
        return self.candidate_embeddings(tf.range(self.num_items + 1) if ids is None else ids)

    def call(self, features, training=None):
        return self.query_embeddings(features, training=training)

    def compute_loss(self, features, training=False):
        """Mean loss over the batch's examples. With the objective's `mask_known_positives`,
        a negative is masked when it is the item of another example of the same user
        (`query_ids` = the user) or in the example's history (`known_positive_ids`; its
        padding id 0 is never drawn: the samplers draw ids from 1)."""
        known = {}
        if self.objective.mask_known_positives:
            known = dict(query_ids=features["user"], known_positive_ids=features["history"])
        return self.objective(
            self.query_embeddings(features, training=training),
            features["item"],
            self.candidate_embeddings,
            all_item_embeddings=self.item_embeddings,
            training=training,
            example_weight=features.get("weight"),
            **known,
        )
