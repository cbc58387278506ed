r"""Local clusters of processes on this machine: MultiWorkerMirroredStrategy workers, or a
ParameterServerStrategy chief with its workers and parameter servers (tests, benchmarks,
and anyone trying --strategy=parameter_server without a cluster).

Each process gets the same cluster and its own task through TF_CONFIG:

  cluster = local_cluster(2)
  outputs = wait_workers(start_workers(command, cluster), timeout=600)

  cluster = local_cluster(2, num_ps=2, chief=True)
  tasks = start_cluster(command, cluster)  # {"chief": [...], "worker": [...], "ps": [...]}

From the shell, one command starts a chief, 2 workers and 2 parameter servers, each
running the same command, and stops the servers once the chief has finished:

  python -m pipelines.cluster --workers=2 --ps=2 -- \
      python -m pipelines.train --strategy=parameter_server --preset=industrial_smoke \
      --output_dir=runs/ps
"""

import argparse
import json
import os
import socket
import subprocess
import sys
from typing import Dict, List, Optional, Sequence

# Task types of a cluster, in the order they are started (servers before the chief, which
# connects to them).
TASK_TYPES = ("ps", "worker", "chief")


def _check_count(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "positive" if minimum == 1 else "non-negative"
        raise ValueError(f"`{name}` must be {kind}; received {value!r}.")
    return value


def local_cluster(num_workers: int, num_ps: int = 0, chief: bool = False) -> Dict[str, List[str]]:
    """{"worker": ["127.0.0.1:PORT", ...]} on ports that were free a moment ago; with
    `num_ps` > 0 also "ps" tasks, and with `chief` one "chief" task (ParameterServerStrategy
    needs both)."""
    _check_count("num_workers", num_workers, 1)
    _check_count("num_ps", num_ps, 0)
    sizes = {"worker": num_workers, "ps": num_ps, "chief": 1 if chief else 0}
    sockets = [socket.socket() for _ in range(sum(sizes.values()))]
    try:
        for s in sockets:  # All bound at once, so the ports differ.
            s.bind(("127.0.0.1", 0))
        ports = [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
    cluster, start = {}, 0
    for task_type in ("chief", "worker", "ps"):
        if sizes[task_type]:
            cluster[task_type] = [
                f"127.0.0.1:{port}" for port in ports[start : start + sizes[task_type]]
            ]
            start += sizes[task_type]
    return cluster


def tf_config(cluster: Dict[str, List[str]], index: int, task_type: str = "worker") -> str:
    """The TF_CONFIG value of task `index` of type `task_type` of `cluster`."""
    if task_type not in cluster:
        raise ValueError(
            f"`task_type` must be one of {', '.join(cluster)}; received task_type={task_type!r}."
        )
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


def start_task(
    command: Sequence[str],
    cluster: Dict[str, List[str]],
    task_type: str,
    index: int,
    output=subprocess.PIPE,
) -> subprocess.Popen:
    """Starts `command` as task `index` of type `task_type` (its TF_CONFIG set); output is
    captured (stderr into stdout) unless `output` says where it goes."""
    return subprocess.Popen(
        list(command),
        stdout=output,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, TF_CONFIG=tf_config(cluster, index, task_type)),
    )


def start_workers(
    command: Sequence[str],
    cluster: Dict[str, List[str]],
) -> List[subprocess.Popen]:
    """Starts `command` once per worker of `cluster`, each with its TF_CONFIG; output is
    captured (stderr into stdout)."""
    return [start_task(command, cluster, "worker", i) for i in range(len(cluster["worker"]))]


def start_cluster(
    command: Sequence[str], cluster: Dict[str, List[str]], output=subprocess.PIPE
) -> Dict[str, List[subprocess.Popen]]:
    """Starts `command` once per task of `cluster` (parameter servers, then workers, then
    the chief), each with its TF_CONFIG: {task type: [process, ...]}."""
    return {
        task_type: [
            start_task(command, cluster, task_type, i, output)
            for i in range(len(cluster[task_type]))
        ]
        for task_type in TASK_TYPES
        if task_type in cluster
    }


def wait_workers(processes: Sequence[subprocess.Popen], timeout: float) -> List[str]:
    """Each worker's output once all have exited; any still running (a timeout, an error)
    is killed, so none outlives the call."""
    try:
        return [p.communicate(timeout=timeout)[0] for p in processes]
    finally:
        for p in processes:
            p.kill()


def stop(processes: Sequence[subprocess.Popen]) -> List[Optional[str]]:
    """Kills `processes` (servers wait for ever) and returns their captured output."""
    for p in processes:
        p.kill()
    return [p.communicate()[0] for p in processes]


def main(argv: Optional[Sequence[str]] = None, prog: str = "python -m pipelines.cluster") -> int:
    """`python -m pipelines.cluster --workers=N --ps=M -- COMMAND...`: COMMAND as a chief,
    N workers and M parameter servers (M = 0: N MultiWorkerMirroredStrategy workers) on
    this machine; the exit status of the chief (of the first failing worker without
    parameter servers)."""
    parser = argparse.ArgumentParser(prog=prog, description=main.__doc__)
    parser.add_argument("--workers", type=int, default=2, help="Worker processes.")
    parser.add_argument(
        "--ps",
        type=int,
        default=2,
        help="Parameter-server processes (0: a MultiWorkerMirroredStrategy "
        "cluster of workers only).",
    )
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="The command every task runs, after --."
    )
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error(
            "give the command to run after --, e.g. -- python -m pipelines.train "
            "--strategy=parameter_server --output_dir=runs/ps"
        )
    for flag, value, minimum in (("--workers", args.workers, 1), ("--ps", args.ps, 0)):
        if value < minimum:
            parser.error(f"{flag} must be an integer >= {minimum}; received {flag}={value}.")
    cluster = local_cluster(args.workers, args.ps, chief=args.ps > 0)
    print(f"Cluster: {json.dumps(cluster)}", flush=True)
    tasks = start_cluster(command, cluster, output=None)  # Output goes to this terminal.
    try:
        if args.ps > 0:
            return tasks["chief"][0].wait()
        codes = [p.wait() for p in tasks["worker"]]
        return next((code for code in codes if code), 0)
    finally:
        for processes in tasks.values():
            for p in processes:
                if p.poll() is None:
                    p.kill()
                    p.wait()


if __name__ == "__main__":
    sys.exit(main())
