"""Local multi-worker clusters for MultiWorkerMirroredStrategy (tests and benchmarks).

Each worker process gets the same cluster and its own index through TF_CONFIG:

  cluster = local_cluster(2)
  env = dict(os.environ, TF_CONFIG=tf_config(cluster, index))
"""

import json
import socket
from typing import Dict, List


def local_cluster(num_workers: int) -> Dict[str, List[str]]:
    """{"worker": ["127.0.0.1:PORT", ...]} on ports that were free a moment ago."""
    if num_workers < 1:
        raise ValueError(f"`num_workers` must be positive; received {num_workers!r}.")
    sockets = [socket.socket() for _ in range(num_workers)]
    try:
        for s in sockets:  # All bound at once, so the ports differ.
            s.bind(("127.0.0.1", 0))
        ports = [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
    return {"worker": [f"127.0.0.1:{port}" for port in ports]}


def tf_config(cluster: Dict[str, List[str]], index: int) -> str:
    """The TF_CONFIG value of worker `index` of `cluster`."""
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
