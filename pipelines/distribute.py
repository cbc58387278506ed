"""tf.distribute for the training entry point: strategies by name, who writes, state digests."""

import hashlib
import json
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from pipelines import configs


def make_strategy(
    name: str, partitioner: str = "min_size", min_shard_bytes: int = 256 << 10
) -> tf.distribute.Strategy:
    """The tf.distribute strategy called `name` (one of configs.STRATEGIES).

    "multi_worker" and "parameter_server" read the cluster from TF_CONFIG; "tpu"
    connects to the TPU named by the environment (TPU_NAME, or the local TPU VM)
    and has not been run by this project's tests. "parameter_server" is built on
    the chief (the coordinator); its workers and parameter servers run
    `serve_parameter_server_task` instead. `partitioner` and `min_shard_bytes`
    choose how its tables are sharded (`variable_partitioner`).
    """
    if name == "parameter_server":
        # TensorFlow's parameter-server tutorial: RPCs to a dead worker fail at once, so
        # the coordinator moves its steps to the others instead of waiting on it.
        os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        return tf.distribute.experimental.ParameterServerStrategy(
            resolver,
            variable_partitioner=variable_partitioner(
                partitioner, len(resolver.cluster_spec().as_dict().get("ps", [])), min_shard_bytes
            ),
        )
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(
        f"--strategy must be one of {', '.join(configs.STRATEGIES)}; received --strategy={name!r}."
    )


class TablePartitioner(tf.distribute.experimental.partitioners.Partitioner):
    """Shards variables of rank 2 and more (the embedding tables and their optimizer slots)
    by `partitioner`; keeps every other variable whole, on one parameter server.

    The streaming estimators' state (a sketch of 1-D counters, scalars) then stays one
    variable per array, so that each update is one scatter op on one server (atomic per
    variable: see `docs/guide/distributed.md`, parameter servers), and the dense layers' kernels
    are small.
    """

    def __init__(self, partitioner: tf.distribute.experimental.partitioners.Partitioner):
        self.partitioner = partitioner

    def __call__(self, shape, dtype, axis=0):
        if shape.rank is None or shape.rank < 2:
            return [1] * (shape.rank or 0)
        return self.partitioner(shape, dtype, axis)


def variable_partitioner(
    kind: str, num_ps: int, min_shard_bytes: int = 256 << 10
) -> TablePartitioner:
    """The `variable_partitioner` of a ParameterServerStrategy over `num_ps` servers.

    kind: "min_size" (`MinSizePartitioner`: shards of at least `min_shard_bytes`, at most
    one per server) or "fixed_shards" (`FixedShardsPartitioner`: one shard per server,
    whatever the table's size). Either applies to the tables only (`TablePartitioner`).
    """
    if kind not in configs.PARTITIONERS:
        raise ValueError(
            f"--partitioner must be one of {', '.join(configs.PARTITIONERS)}; "
            f"received --partitioner={kind!r}."
        )
    if isinstance(num_ps, bool) or not isinstance(num_ps, int) or num_ps < 1:
        raise ValueError(
            '--strategy=parameter_server needs at least one "ps" task in '
            f"TF_CONFIG's cluster; received num_ps={num_ps!r}."
        )
    if (
        isinstance(min_shard_bytes, bool)
        or not isinstance(min_shard_bytes, int)
        or (min_shard_bytes < 1)
    ):
        raise ValueError(
            "--min_shard_bytes must be a positive integer; received "
            f"--min_shard_bytes={min_shard_bytes!r}."
        )
    partitioners = tf.distribute.experimental.partitioners
    if kind == "fixed_shards":
        return TablePartitioner(partitioners.FixedShardsPartitioner(num_shards=num_ps))
    return TablePartitioner(
        partitioners.MinSizePartitioner(min_shard_bytes=min_shard_bytes, max_shards=num_ps)
    )


def is_parameter_server(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` is a ParameterServerStrategy (steps scheduled by a coordinator)."""
    return isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)


def parameter_server_task() -> Optional[Tuple[str, int]]:
    """(task type, index) of this process when TF_CONFIG names a "worker" or "ps" task of
    a cluster with parameter servers; None for the chief, or without TF_CONFIG."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task", {})
    if "ps" not in config.get("cluster", {}) or task.get("type") not in ("worker", "ps"):
        return None
    return task["type"], int(task.get("index", 0))


def serve_parameter_server_task() -> None:
    """Runs this process's worker or parameter server (TF_CONFIG) until it is killed: the
    chief's ClusterCoordinator sends it the steps and the variables."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")  # As on the chief.
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol="grpc",
        start=True,
    )
    print(
        f"{resolver.task_type} {resolver.task_id} serving at "
        f"{resolver.cluster_spec().task_address(resolver.task_type, resolver.task_id)}",
        flush=True,
    )
    server.join()


def cluster_sizes(strategy: tf.distribute.Strategy) -> Dict[str, int]:
    """{"num_workers": W, "num_ps": P} of a ParameterServerStrategy's cluster; {} for the
    other strategies."""
    if not is_parameter_server(strategy):
        return {}
    extended = strategy.extended
    return {
        "num_workers": extended._num_workers,  # pylint: disable=protected-access
        "num_ps": extended._num_ps,
    }  # pylint: disable=protected-access


def placement(
    tables: Sequence[tf.Variable], estimator: Optional[tf.keras.layers.Layer] = None
) -> Dict[str, Dict[str, List[str]]]:
    """Where a parameter-server model keeps its state: {"tables": {name: [device of each
    shard]}, "estimator": {name: [device]}} (a table that was not sharded has one)."""
    shards: Dict[str, List[str]] = {}
    for table in tables:  # A sharded table's layer lists its shards, named .../part_N.
        for shard in getattr(table, "variables", [table]):
            shards.setdefault(re.sub(r"/part_\d+(:\d+)?$", "", shard.name), []).append(shard.device)
    return {
        "tables": shards,
        "estimator": {w.name: [w.device] for w in (estimator.weights if estimator else [])},
    }


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True where this process writes the run's files (every process but MWMS's non-chiefs)."""
    return strategy.extended.should_checkpoint


def state_digest(layer: tf.keras.layers.Layer) -> str:
    """sha256 of a layer's weights: equal on every worker when the state is synchronised."""
    digest = hashlib.sha256()
    for weight in layer.weights:
        digest.update(np.ascontiguousarray(weight.numpy()).tobytes())
    return digest.hexdigest()
