"""Local multi-worker clusters for MultiWorkerMirroredStrategy (tests and benchmarks).

Each worker process gets the same cluster and its own index through TF_CONFIG:

  cluster = local_cluster(2)
  outputs = wait_workers(start_workers(command, cluster), timeout=600)
"""

import json
import os
import socket
import subprocess
from typing import Dict, List, Sequence


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


def start_workers(command: Sequence[str], cluster: Dict[str, List[str]],
                  ) -> List[subprocess.Popen]:
    """Starts `command` once per worker of `cluster`, each with its TF_CONFIG; output is
    captured (stderr into stdout)."""
    return [subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=dict(os.environ, TF_CONFIG=tf_config(cluster, i)))
            for i in range(len(cluster["worker"]))]


def wait_workers(processes: Sequence[subprocess.Popen], timeout: float) -> List[str]:
    """Each worker's output once all have exited; any still running (a timeout, an error)
    is killed, so none outlives the call."""
    try:
        return [p.communicate(timeout=timeout)[0] for p in processes]
    finally:
        for p in processes:
            p.kill()
