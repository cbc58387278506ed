"""Reading an embedding table's rows, on one process or from parameter servers."""

import tensorflow as tf


def lookup(layer: tf.keras.layers.Embedding, ids):
    """`layer(ids)`: the rows of `ids`, read by `tf.gather`.

    The same values and gradients as the layer's own call. On a table sharded over
    parameter servers (a `ShardedVariable`), the layer's `embedding_lookup` is dispatched to
    the shards only inside a graph: called eagerly (a chief evaluating, exporting or
    serving), it first concatenates every shard on the caller, a whole copy of the table per
    call. `tf.gather` reads each shard's own rows (`ShardedVariable.sparse_read`). Inside a
    graph a sharded table is read by `tf.nn.embedding_lookup`, dispatched to the shards
    there: a SavedModel of the sharded table loads it as one variable, and a traced
    `tf.gather` then reads every row past the first shard from the wrong place (TensorFlow
    2.20: row i of a 10-row table in two shards served as row i mod 5).
    """
    ids = tf.convert_to_tensor(ids)
    if not layer.built:  # Its table made here, not by a first call that reads it whole.
        with tf.name_scope(layer.name):
            layer.build(ids.shape)
    table = layer.embeddings
    if isinstance(table, tf.__internal__.distribute.ShardedVariable) and not tf.executing_eagerly():
        rows = tf.nn.embedding_lookup(table, ids)
    elif ids.shape.rank == 1:
        rows = tf.gather(table, ids)
    else:  # A sharded table's sparse reads take 1-D ids.
        rows = tf.gather(table, tf.reshape(ids, [-1]))
        rows = tf.reshape(rows, tf.concat([tf.shape(ids), tf.shape(rows)[1:]], 0))
        rows.set_shape(ids.shape.concatenate(table.shape[1:]))
    return tf.cast(rows, layer.compute_dtype) if rows.dtype != layer.compute_dtype else rows
