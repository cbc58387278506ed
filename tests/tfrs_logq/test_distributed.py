"""Global-batch negatives under tf.distribute: one step on 2 replicas equals one replica on the
same global batch (loss and gradients), with MirroredStrategy over 2 logical CPU devices."""

import numpy as np
import tensorflow as tf

from tests import conftest
from tfrs_logq import negatives
from tfrs_logq.models import make_objective

NUM_ITEMS, DIM, BATCH = 30, 4, 16


def _data():
    rng = np.random.default_rng(0)
    probabilities = rng.dirichlet(np.ones(NUM_ITEMS + 1)).astype(np.float32)
    users = rng.integers(0, 10, size=BATCH).astype(np.int32)
    # Repeated items: accidental hits inside and across the replicas' halves.
    items = rng.choice(np.arange(1, 9), size=BATCH).astype(np.int64)
    initial = {
        "user": rng.normal(size=[10, DIM]).astype(np.float32),
        "item": rng.normal(size=[NUM_ITEMS + 1, DIM]).astype(np.float32),
        "projection": rng.normal(size=[DIM, DIM]).astype(np.float32),
    }
    return probabilities, users, items, initial


def _step(variables, objective, users, items):
    """(loss, dense gradients in sorted variable order) of one step on these rows."""
    names = sorted(variables)
    with tf.GradientTape() as tape:
        queries = tf.matmul(tf.gather(variables["user"], users), variables["projection"])
        loss = objective(
            queries,
            items,
            lambda ids: tf.gather(variables["item"], ids),
            all_item_embeddings=lambda: variables["item"],
            training=True,
        )
    gradients = tape.gradient(loss, [variables[n] for n in names])
    return loss, [tf.convert_to_tensor(g) for g in gradients]


class GlobalBatchTest(tf.test.TestCase):
    @property
    def strategy(self):
        return conftest.mirrored_strategy()

    def _compare(self, global_batch, **objective_args):
        probabilities, users, items, initial = _data()

        def objective():
            return make_objective(
                NUM_ITEMS,
                probabilities=probabilities,
                seed=1,
                global_batch=global_batch,
                **objective_args,
            )

        single_vars = {k: tf.Variable(v) for k, v in initial.items()}
        single_loss, single_grads = _step(single_vars, objective(), users, items)

        strategy = self.strategy
        with strategy.scope():
            mirrored = {k: tf.Variable(v) for k, v in initial.items()}
            distributed_objective = objective()
        half = BATCH // 2
        rows = strategy.experimental_distribute_values_from_function(
            lambda ctx: (
                users[ctx.replica_id_in_sync_group * half :][:half],
                items[ctx.replica_id_in_sync_group * half :][:half],
            )
        )

        @tf.function
        def distributed_step(rows):
            loss, grads = strategy.run(
                lambda u, i: _step(mirrored, distributed_objective, u, i), args=rows
            )
            return (
                strategy.reduce("SUM", loss, axis=None),
                [strategy.reduce("SUM", g, axis=None) for g in grads],
            )

        loss, grads = distributed_step(rows)
        return (single_loss, single_grads), (loss, grads)

    def test_in_batch_improved_and_standard(self):
        for correction in ("improved", "standard", "none"):
            with self.subTest(correction=correction):
                (want_loss, want_grads), (loss, grads) = self._compare(
                    True, negatives="in_batch", correction=correction, num_negatives=1000
                )
                self.assertAllClose(want_loss, loss, rtol=1e-5)
                for want, got in zip(want_grads, grads):
                    self.assertAllClose(want, got, rtol=1e-4, atol=1e-6)

    def test_full_softmax_scaling_follows_tf_distribute(self):
        # No negatives to share: only the loss scaling (sum / global count) matters.
        (want_loss, want_grads), (loss, grads) = self._compare(False, loss="full_softmax")
        self.assertAllClose(want_loss, loss, rtol=1e-5)
        for want, got in zip(want_grads, grads):
            self.assertAllClose(want, got, rtol=1e-4, atol=1e-6)

    def test_per_replica_negatives_differ(self):
        # The negative control: without global_batch each replica sees half the pool.
        (want_loss, _), (loss, _) = self._compare(
            False, negatives="in_batch", correction="improved", num_negatives=1000
        )
        self.assertNotAllClose(want_loss, loss, rtol=1e-3)

    def test_cross_replica_concat_gradient_returns_each_replica_its_rows(self):
        strategy = self.strategy
        values = strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant([[1.0, 2.0]]) * (ctx.replica_id_in_sync_group + 1.0)
        )

        @tf.function
        def step(values):
            def replica(x):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    gathered = negatives.cross_replica_concat(x)  # [[1, 2], [2, 4]]
                    replica_id = tf.distribute.get_replica_context().replica_id_in_sync_group
                    # Replica r's loss weights the gathered rows by (r + 1) * [1, 10].
                    loss = tf.reduce_sum(
                        gathered
                        * tf.cast(replica_id + 1, tf.float32)
                        * tf.constant([[1.0], [10.0]])
                    )
                return gathered, tape.gradient(loss, x)

            return strategy.run(replica, args=(values,))

        gathered, gradients = step(values)
        self.assertAllEqual(
            strategy.experimental_local_results(gathered)[1], [[1.0, 2.0], [2.0, 4.0]]
        )
        # d(sum of both replicas' losses)/d(row of replica r) = (1 + 2) * [1, 10][r].
        local = strategy.experimental_local_results(gradients)
        self.assertAllClose(local[0], [[3.0, 3.0]])
        self.assertAllClose(local[1], [[30.0, 30.0]])

    def test_outside_a_strategy_it_is_the_identity(self):
        x = tf.constant([[1.0], [2.0]])
        self.assertIs(negatives.cross_replica_concat(x), x)


if __name__ == "__main__":
    tf.test.main()


class ShardedTableTest(tf.test.TestCase):
    """Sharded variables are read right live, traced, and from a SavedModel of them loaded in
    one process, where TensorFlow 2.20 restores each as one variable and a function traced
    for the save reads that whole variable (`_tables.saved_table`), by a lookup and as a
    dense kernel. The failure it prevents needs a parameter-server cluster's variables
    (there a traced read of the shards served a table's rows past the first shard from the
    wrong place and a two-shard [32, 16] kernel as [64, 16]):
    tests/pipelines/test_parameter_server.py's `ChiefMemoryTest` serves such an export."""

    def test_rows_and_kernels_of_every_shard_live_traced_and_saved(self):
        import os  # pylint: disable=import-outside-toplevel
        import tempfile  # pylint: disable=import-outside-toplevel

        from tfrs_logq.models._tables import lookup  # pylint: disable=import-outside-toplevel

        sharded = tf.__internal__.distribute.ShardedVariable
        full = np.arange(10 * 3, dtype=np.float32).reshape(10, 3)
        kernel = np.arange(4 * 3, dtype=np.float32).reshape(4, 3) / 10
        layer = tf.keras.layers.Embedding(10, 3)
        layer.build(None)
        # Uneven shards, as a partitioner makes them (the first ones a row longer).
        layer.embeddings = sharded(
            [tf.Variable(full[:4]), tf.Variable(full[4:7]), tf.Variable(full[7:])]
        )
        dense = tf.keras.layers.Dense(3, use_bias=False)
        dense.build((None, 4))
        dense.kernel = sharded([tf.Variable(kernel[:2]), tf.Variable(kernel[2:])])

        class Served(tf.Module):
            def __init__(self):
                super().__init__()
                self.layer, self.dense = layer, dense

            @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64)])
            def rows(self, ids):
                return lookup(self.layer, ids)

            @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
            def project(self, x):
                return self.dense(x)

        ids = np.array([[0, 3, 4], [6, 7, 9]])
        x = np.eye(4, dtype=np.float32)
        self.assertAllEqual(lookup(layer, ids), full[ids])  # Eager: each shard's own rows.
        self.assertAllClose(dense(x), kernel)  # Eager: the shards concatenated.
        served = Served()
        self.assertAllEqual(served.rows(ids), full[ids])  # Traced before the save.
        self.assertAllClose(served.project(x), kernel)
        path = os.path.join(tempfile.mkdtemp(), "served")
        tf.saved_model.save(
            served, path, signatures={"rows": served.rows, "project": served.project}
        )
        loaded = tf.saved_model.load(path)
        self.assertAllEqual(loaded.rows(ids), full[ids])
        self.assertAllClose(loaded.project(x), kernel)
        self.assertAllEqual(loaded.signatures["rows"](ids=ids)["output_0"], full[ids])
        self.assertAllClose(loaded.signatures["project"](x=x)["output_0"], kernel)
