"""Reading an embedding table's rows, on one process or from parameter servers."""

import tensorflow as tf
from tensorflow.python.framework import tensor_conversion_registry
from tensorflow.python.saved_model import save_context

_SHARDED = tf.__internal__.distribute.ShardedVariable


def lookup(layer: tf.keras.layers.Embedding, ids):
    """`layer(ids)`: the rows of `ids`, read by `tf.gather`.

    The same values and gradients as the layer's own call. On a table sharded over
    parameter servers (a `ShardedVariable`), the layer's `embedding_lookup` is dispatched to
    the shards only inside a graph: called eagerly (a chief evaluating, exporting or
    serving), it first concatenates every shard on the caller, a whole copy of the table per
    call. `tf.gather` reads each shard's own rows (`ShardedVariable.sparse_read`). Inside a
    graph a sharded table is read by `tf.nn.embedding_lookup`, dispatched to the shards
    there; traced for a SavedModel, it reads the table whole (`saved_table`).
    """
    ids = tf.convert_to_tensor(ids)
    if not layer.built:  # Its table made here, not by a first call that reads it whole.
        with tf.name_scope(layer.name):
            layer.build(ids.shape)
    table = layer.embeddings
    if isinstance(table, _SHARDED) and not tf.executing_eagerly():
        if save_context.in_save_context():
            rows = tf.gather(saved_table(table), ids)
        else:
            rows = tf.nn.embedding_lookup(table, ids)
    elif ids.shape.rank == 1:
        rows = tf.gather(table, ids)
    else:  # A sharded table's sparse reads take 1-D ids.
        rows = tf.gather(table, tf.reshape(ids, [-1]))
        rows = tf.reshape(rows, tf.concat([tf.shape(ids), tf.shape(rows)[1:]], 0))
        rows.set_shape(ids.shape.concatenate(table.shape[1:]))
    return tf.cast(rows, layer.compute_dtype) if rows.dtype != layer.compute_dtype else rows


def saved_table(variable):
    """The whole variable that a SavedModel of the sharded `variable` holds.

    `tf.saved_model.save` writes a `ShardedVariable` as one variable of its whole shape (its
    shards' values as slices of it; each server writes its own shards, so the exporting
    process never holds the table), and loads it as that one variable. A function traced
    for the SavedModel must read that variable, not the shards: TensorFlow 2.20 binds every
    shard a function captured to the whole loaded variable, so a traced read of the shards
    serves wrong (a `tf.gather` read row i of a 10-row table in two shards as row i mod 5; a
    [32, 16] kernel in two shards, concatenated, loaded as [64, 16]). Outside a save there is
    nothing to read: the variable holds no value of its own.
    """
    return variable._saving_variable  # pylint: disable=protected-access


def _sharded_as_saved(value, dtype=None, name=None, as_ref=False):
    """A `ShardedVariable` read as a tensor (a dense layer's kernel, say) while a SavedModel is
    traced: the whole saved variable (`saved_table`). Elsewhere TensorFlow's own conversion
    (the shards concatenated) applies."""
    del name
    if as_ref or not save_context.in_save_context():
        return NotImplemented
    tensor = saved_table(value).read_value()
    if dtype is not None and not dtype.is_compatible_with(tensor.dtype):
        return NotImplemented
    return tensor


# Before TensorFlow's own conversion (priority 100), which it defers to outside a save.
tensor_conversion_registry.register_tensor_conversion_function(
    _SHARDED, _sharded_as_saved, priority=90
)
