"""tf.distribute for the training entry point: strategies by name, who writes, state digests."""

import hashlib

import numpy as np
import tensorflow as tf

from pipelines import configs


def make_strategy(name: str) -> tf.distribute.Strategy:
    """The tf.distribute strategy called `name` (one of configs.STRATEGIES).

    "multi_worker" reads the cluster from TF_CONFIG; "tpu" connects to the TPU
    named by the environment (TPU_NAME, or the local TPU VM) and has not been
    run by this project's tests.
    """
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
    raise ValueError(f"--strategy must be one of {', '.join(configs.STRATEGIES)}; received "
                     f"--strategy={name!r}.")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True where this process writes the run's files (every process but MWMS's non-chiefs)."""
    return strategy.extended.should_checkpoint

def state_digest(layer: tf.keras.layers.Layer) -> str:
    """sha256 of a layer's weights: equal on every worker when the state is synchronised."""
    digest = hashlib.sha256()
    for weight in layer.weights:
        digest.update(np.ascontiguousarray(weight.numpy()).tobytes())
    return digest.hexdigest()
