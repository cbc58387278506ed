r"""Steps and examples per second on 1 and 2 replicas, and the share of the step in the all-gather.

A two-tower step (user and item embedding towers, `RetrievalObjective` with
in-batch negatives, improved correction, a count-min estimator) at a fixed
global batch is timed on:

- 1 replica (the default strategy);
- 2 replicas on 2 logical CPU devices of this process (MirroredStrategy);
- 2 local worker processes (MultiWorkerMirroredStrategy over 127.0.0.1).

On the distributed set-ups it is timed twice, with negatives from the global
batch (the candidates all-gathered) and from each replica's own half; the
difference over the global-batch time is the share of the step spent on
sharing negatives: the all-gather and its gradient, plus the logits against
twice as many negatives. The all-gather of the candidate embeddings and its
gradient are also timed alone, as a share of the step. Estimator ids are
gathered in both. Rounds of each variant are interleaved and medians
reported. On 2 CPU cores no speed-up is expected: the replicas share the
cores. The figure to watch is the overhead.

Usage:
  python -m benchmarks.scaling
"""

import json
import sys
import time

from absl import app
from absl import flags

from pipelines import cluster as cluster_lib

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_integer("batch_size", 1024, "Global batch.", lower_bound=2)
    flags.DEFINE_integer("num_items", 100_000, "Catalog size.", lower_bound=2)
    flags.DEFINE_integer("dim", 64, "Embedding size.", lower_bound=1)
    flags.DEFINE_integer("rounds", 5, "Interleaved timing rounds per variant.", lower_bound=1)
    flags.DEFINE_integer("steps_per_round", 10, "Steps per round.", lower_bound=1)
    flags.DEFINE_bool("workers", True, "Also time 2 local worker processes.")
    # Internal: set on the worker processes this program starts.
    flags.DEFINE_bool(
        "worker",
        False,
        "Internal: this process is one of the local workers (its cluster in TF_CONFIG).",
    )


def _setup_devices(count: int):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from absl import logging  # pylint: disable=import-outside-toplevel

    import tfrs_logq  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import

    logging.set_verbosity(logging.WARNING)  # tf.distribute logs every collective at INFO.
    tf.get_logger().setLevel("ERROR")
    tf.config.set_logical_device_configuration(
        tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * count
    )
    return tf


def make_step(tf, strategy, global_batch: bool, batch_size: int, num_items: int, dim: int):
    """A compiled distributed training step and its per-replica inputs."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    from tfrs_logq import frequency  # pylint: disable=import-outside-toplevel
    from tfrs_logq.models import make_objective  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(0)
    num_users = 10_000
    with strategy.scope():
        users = tf.Variable(rng.normal(0, 0.1, [num_users, dim]).astype(np.float32))
        items = tf.Variable(rng.normal(0, 0.1, [num_items + 1, dim]).astype(np.float32))
        objective = make_objective(
            num_items,
            negatives="in_batch",
            correction="improved",
            num_negatives=batch_size,
            probabilities=frequency.CountMinSketchEstimator(width=2**16, depth=4),
            global_batch=global_batch,
            seed=0,
        )
        optimizer = tf.keras.optimizers.Adagrad(0.1)
    ranks = np.arange(1, num_items + 1)
    probabilities = (1.0 / ranks) / (1.0 / ranks).sum()
    per_replica = batch_size // strategy.num_replicas_in_sync
    worker = getattr(strategy.cluster_resolver, "task_id", 0) or 0

    def values(context):
        replica = context.replica_id_in_sync_group + (
            worker * len(strategy.extended.worker_devices) if worker else 0
        )
        local = np.random.default_rng(replica)
        return (
            tf.constant(local.integers(0, num_users, per_replica)),
            tf.constant(local.choice(ranks, per_replica, p=probabilities).astype(np.int64)),
        )

    inputs = strategy.experimental_distribute_values_from_function(values)

    def replica_step(user_ids, item_ids):
        with tf.GradientTape() as tape:
            loss = objective(
                tf.gather(users, user_ids),
                item_ids,
                lambda ids: tf.gather(items, ids),
                training=True,
            )
        gradients = tape.gradient(loss, [users, items])
        optimizer.apply_gradients(zip(gradients, [users, items]))
        return loss

    @tf.function
    def step():
        return strategy.run(replica_step, args=inputs)

    return step


def make_gather(tf, strategy, batch_size: int, dim: int):
    """The all-gather of one step alone: each replica's [batch / replicas, dim] candidate
    embeddings gathered (`cross_replica_concat`), and its gradient."""
    from tfrs_logq import negatives  # pylint: disable=import-outside-toplevel

    per_replica = batch_size // strategy.num_replicas_in_sync
    inputs = strategy.experimental_distribute_values_from_function(
        lambda context: tf.random.normal([per_replica, dim])
    )

    def replica_step(embeddings):
        with tf.GradientTape() as tape:
            tape.watch(embeddings)
            gathered = negatives.cross_replica_concat(embeddings)
            loss = tf.reduce_sum(gathered * gathered)
        return tape.gradient(loss, embeddings)

    @tf.function
    def step():
        return strategy.run(replica_step, args=(inputs,))

    return step


def time_variants(tf, variants, rounds: int, steps_per_round: int):
    """Median seconds per step of each variant, rounds interleaved."""
    import numpy as np  # pylint: disable=import-outside-toplevel

    for step in variants.values():  # Trace and warm up.
        for _ in range(3):
            step()
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, step in variants.items():
            started = time.perf_counter()
            for _ in range(steps_per_round):
                result = step()
            tf.nest.map_structure(
                lambda t: t.numpy() if hasattr(t, "numpy") else t, tf.nest.flatten(result)
            )
            times[name].append((time.perf_counter() - started) / steps_per_round)
    return {name: float(np.median(values)) for name, values in times.items()}


def run_worker() -> None:
    """One of the 2 local workers: times MWMS with global and per-replica negatives."""
    tf = _setup_devices(1)  # The cluster comes from TF_CONFIG (cluster.start_workers).
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    args = (FLAGS.batch_size, FLAGS.num_items, FLAGS.dim)
    variants = {
        "global": make_step(tf, strategy, True, *args),
        "local": make_step(tf, strategy, False, *args),
        "gather": make_gather(tf, strategy, FLAGS.batch_size, FLAGS.dim),
    }
    print(
        "RESULT " + json.dumps(time_variants(tf, variants, FLAGS.rounds, FLAGS.steps_per_round)),
        flush=True,
    )


def run_workers():
    args = [
        sys.executable,
        "-m",
        "benchmarks.scaling",
        "--worker",
        f"--batch_size={FLAGS.batch_size}",
        f"--num_items={FLAGS.num_items}",
        f"--dim={FLAGS.dim}",
        f"--rounds={FLAGS.rounds}",
        f"--steps_per_round={FLAGS.steps_per_round}",
    ]
    processes = cluster_lib.start_workers(args, cluster_lib.local_cluster(2))
    outputs = cluster_lib.wait_workers(processes, timeout=1800)
    for p, output in zip(processes, outputs):
        if p.returncode != 0:
            raise RuntimeError(f"A worker failed (exit {p.returncode}):\n{output[-3000:]}")
    line = next(text for text in outputs[0].splitlines() if text.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    if FLAGS.worker:
        run_worker()
        return
    if FLAGS.batch_size % 2:
        raise app.UsageError(
            f"--batch_size must be even (2 replicas); received {FLAGS.batch_size}."
        )
    tf = _setup_devices(2)
    args = (FLAGS.batch_size, FLAGS.num_items, FLAGS.dim)
    mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    variants = {
        "1 replica": make_step(tf, tf.distribute.get_strategy(), True, *args),
        "2 replicas, global": make_step(tf, mirrored, True, *args),
        "2 replicas, local": make_step(tf, mirrored, False, *args),
        "2 replicas, gather": make_gather(tf, mirrored, FLAGS.batch_size, FLAGS.dim),
    }
    seconds = time_variants(tf, variants, FLAGS.rounds, FLAGS.steps_per_round)
    rows = [
        ("1 replica (default strategy)", seconds["1 replica"], None, None),
        (
            "2 replicas, 1 process (MirroredStrategy)",
            seconds["2 replicas, global"],
            seconds["2 replicas, local"],
            seconds["2 replicas, gather"],
        ),
    ]
    if FLAGS.workers:
        workers = run_workers()
        rows.append(
            (
                "2 local workers (MultiWorkerMirroredStrategy)",
                workers["global"],
                workers["local"],
                workers["gather"],
            )
        )
    print(
        f"\nTwo-tower step, global batch {FLAGS.batch_size:,}, {FLAGS.num_items:,} items, "
        f"dim {FLAGS.dim}, in-batch negatives from the global batch, improved correction, "
        f"count-min estimator; medians of {FLAGS.rounds} interleaved rounds of "
        f"{FLAGS.steps_per_round} steps.\n"
    )
    print(
        "| set-up | ms/step | steps/s | examples/s | vs 1 replica | all-gather alone "
        "(share of step) | global minus per-replica negatives (share of step) |"
    )
    print("|---|---|---|---|---|---|---|")
    base = rows[0][1]
    for name, global_seconds, local_seconds, gather_seconds in rows:
        share = gather = "–"
        if local_seconds is not None:
            share = (
                f"{1000 * (global_seconds - local_seconds):+.1f} ms "
                f"({100 * (global_seconds - local_seconds) / global_seconds:+.1f}%)"
            )
            gather = (
                f"{1000 * gather_seconds:.1f} ms ({100 * gather_seconds / global_seconds:.1f}%)"
            )
        print(
            f"| {name} | {1000 * global_seconds:.1f} | {1 / global_seconds:.2f} | "
            f"{FLAGS.batch_size / global_seconds:,.0f} | {base / global_seconds:.2f}x | "
            f"{gather} | {share} |"
        )
    print(
        "\nOn 2 CPU cores the replicas share the cores, so no speed-up is expected. "
        "'All-gather alone': the candidate embeddings' all-gather and its gradient, timed "
        "by themselves. 'Global minus per-replica negatives': the whole cost of sharing "
        "negatives, the logits against twice the negatives included."
    )


if __name__ == "__main__":
    define_flags()
    app.run(main)
