"""Trains a list of runs, one `pipelines.train` process each, several at once with each pinned
to its own share of the CPUs: what `pipelines.compare` and the paper's campaigns schedule
with.

A run is a `Job`: a label for progress lines, its command and its output directory, where
the process's output goes (`train.log`) and, when it succeeds, its wall seconds
(`wall_seconds.json`: this session's share, the run may have resumed).
"""

import concurrent.futures
import functools
import json
import os
import queue
import subprocess
import threading
import time
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence

from pipelines.run_files import RunFiles


class Job(NamedTuple):
    label: str  # How progress lines name it.
    command: List[str]
    directory: str  # The run's --output_dir.


class Finished(NamedTuple):
    number: int  # 1-based, in the order given.
    job: Job
    seconds: float  # Wall seconds of this attempt.
    error: Optional[str]  # None when the process exited with 0.


class RunFailed(RuntimeError):
    """A run's process exited with a non-zero status."""


def cpu_slots(parallel: int, cpus: Optional[Sequence[int]] = None) -> List[Optional[List[int]]]:
    """The CPUs of each of `parallel` concurrent runs: this process's CPUs split evenly
    (the remainder to the first slots); [None] (no pinning) for one run at a time."""
    if parallel < 1:
        raise ValueError(f"--parallel must be at least 1; received --parallel={parallel}.")
    if parallel == 1:
        return [None]
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else list(cpus)
    if parallel > len(cpus):
        raise ValueError(
            f"--parallel={parallel} is more than the {len(cpus)} CPUs this "
            "process may use; each run needs at least one."
        )
    size, extra = divmod(len(cpus), parallel)
    slots: List[Optional[List[int]]] = []
    start = 0
    for slot in range(parallel):
        end = start + size + (1 if slot < extra else 0)
        slots.append(cpus[start:end])
        start = end
    return slots


def environment(cpus: Optional[Sequence[int]] = None) -> Dict[str, str]:
    """A run's environment: this process's, its output unbuffered (progress as it comes) and,
    pinned to `cpus`, TensorFlow's thread pools that size."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if cpus is not None:
        env.update(TF_NUM_INTRAOP_THREADS=str(len(cpus)), TF_NUM_INTEROP_THREADS=str(len(cpus)))
    return env


def execute(job: Job, cpus: Optional[Sequence[int]] = None) -> float:
    """Runs `job`'s command, its output appended to DIRECTORY/train.log; wall seconds.
    With `cpus`, the process is pinned to them and TensorFlow uses that many threads.

    Raises:
      RunFailed: the process exited with a non-zero status (named, with its log).
    """
    os.makedirs(job.directory, exist_ok=True)
    env = environment(cpus)
    pin = None if cpus is None else functools.partial(os.sched_setaffinity, 0, list(cpus))
    started, files = time.time(), RunFiles(job.directory)
    line = " ".join(job.command)
    with open(files.train_log, "a") as log:
        log.write(line + (f"  # CPUs {list(cpus)}" if cpus else "") + "\n")
        log.flush()
        process = subprocess.run(
            job.command, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=pin, check=False
        )
    seconds = time.time() - started
    if process.returncode != 0:
        raise RunFailed(f"{line} exited with {process.returncode}; see {files.train_log}.")
    with open(files.wall_seconds, "w") as f:
        json.dump({"seconds": seconds}, f)
    return seconds


def run_all(
    pending: Sequence[Job], slots: Sequence[Optional[List[int]]], keep_going: bool = False
) -> Iterator[Finished]:
    """Trains `pending` in order, len(slots) at a time, each on its slot's CPUs; yields a
    `Finished` as each ends (in the caller's thread, so that one writer writes the records).

    A failed run raises, and stops the runs not started yet (running ones finish); with
    `keep_going`, it is yielded with its error and the others go on."""
    free: "queue.Queue[Optional[List[int]]]" = queue.Queue()
    failed = threading.Event()
    for slot in slots:
        free.put(slot)

    def train(number: int, job: Job) -> Optional[Finished]:
        cpus = free.get()
        started = time.time()
        try:
            if failed.is_set():
                return None  # An earlier run failed: do not start this one.
            print(
                f"[{number}/{len(pending)}] {job.label}: {' '.join(job.command)}"
                + (f"  # CPUs {cpus}" if cpus else ""),
                flush=True,
            )
            return Finished(number, job, execute(job, cpus), None)
        except RunFailed as error:
            if keep_going:
                return Finished(number, job, time.time() - started, str(error))
            failed.set()
            raise
        except BaseException:
            failed.set()
            raise
        finally:
            free.put(cpus)

    with concurrent.futures.ThreadPoolExecutor(len(slots)) as pool:
        futures = [pool.submit(train, number, job) for number, job in enumerate(pending, 1)]
        try:
            for future in concurrent.futures.as_completed(futures):
                result = future.result()
                if result is not None:  # None: not started after a failure.
                    yield result
        finally:
            for future in futures:
                future.cancel()  # Runs not started yet; the running ones finish.
