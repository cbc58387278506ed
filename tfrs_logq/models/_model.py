"""The models' base: `tfrs.Model` with a training step that frees its graph."""

from typing import Iterable, List, Tuple

import tensorflow as tf
import tensorflow_recommenders as tfrs


def apply_gradients(optimizer, grads_and_vars: Iterable[Tuple[tf.Tensor, tf.Variable]]) -> None:
    """`optimizer.apply_gradients`, without the cross-replica sum where one replica runs.

    tf-keras's optimizers sum the gradients over replicas with `ReplicaContext.all_reduce`,
    which wraps the sum in `tf.custom_gradient` even for a single replica. In a traced step
    that registers a gradient function in TensorFlow's process-wide gradient registry, and
    it is never removed: it holds the step's graph, and the graph holds every variable the
    step reads. A trained model's tables and optimizer slots then stay in memory after the
    model, its optimizer and `model.fit`'s function are released (2.3 GB retained after a
    5M-item table at dim 64 with Adagrad). With one replica the sum is the identity, so it
    is skipped; with more it is kept.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync != 1:
        optimizer.apply_gradients(grads_and_vars)
    elif isinstance(optimizer, tf.keras.optimizers.legacy.Optimizer):  # Composite included.
        optimizer.apply_gradients(grads_and_vars, experimental_aggregate_gradients=False)
    elif isinstance(optimizer, tf.keras.optimizers.Optimizer):
        optimizer.apply_gradients(grads_and_vars, skip_gradients_aggregation=True)
    else:  # Another kind of optimizer: as it is.
        optimizer.apply_gradients(grads_and_vars)


class Model(tfrs.Model):
    """`tfrs.Model` whose `train_step` applies the gradients through `apply_gradients`, so
    that a trained model's memory is freed with it; subclasses may transform the gradients
    first (`_step_gradients`)."""

    def _step_gradients(self, gradients: List) -> List:
        """The gradients `train_step` applies (the tape's, by default)."""
        return gradients

    def train_step(self, inputs):
        """`tfrs.Model.train_step`: the loss, the regularization losses and their sum."""
        with tf.GradientTape() as tape:
            loss = self.compute_loss(inputs, training=True)
            regularization_loss = tf.reduce_sum([tf.reduce_sum(x) for x in self.losses])
            total_loss = loss + regularization_loss
        gradients = self._step_gradients(tape.gradient(total_loss, self.trainable_variables))
        apply_gradients(self.optimizer, zip(gradients, self.trainable_variables))
        metrics = {metric.name: metric.result() for metric in self.metrics}
        metrics.update(loss=loss, regularization_loss=regularization_loss, total_loss=total_loss)
        return metrics
