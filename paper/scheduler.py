"""Trains the campaign's runs, one `pipelines.train` process each, several at once with each
pinned to its own share of the CPUs."""

import concurrent.futures
import functools
import json
import os
import queue
import subprocess
import threading
import time
from typing import List, Optional, Sequence

from paper.plan import Run
from paper.plan import command
from paper.plan import label
from pipelines.run_files import RunFiles


def cpu_slots(parallel: int, cpus: Optional[Sequence[int]] = None) -> List[Optional[List[int]]]:
    """The CPUs of each of `parallel` concurrent runs: this process's CPUs split evenly
    (the remainder to the first slots); [None] (no pinning) for one run at a time."""
    if parallel == 1:
        return [None]
    cpus = sorted(os.sched_getaffinity(0)) if cpus is None else list(cpus)
    if parallel > len(cpus):
        raise ValueError(
            f"--parallel={parallel} is more than the {len(cpus)} CPUs this "
            "process may use; each run needs at least one."
        )
    size, extra = divmod(len(cpus), parallel)
    slots, start = [], 0
    for slot in range(parallel):
        end = start + size + (1 if slot < extra else 0)
        slots.append(cpus[start:end])
        start = end
    return slots


def execute(run: Run, cpus: Optional[Sequence[int]] = None) -> float:
    """Runs `run` as a pipelines.train process (its output in OUTPUT/train.log); wall seconds.
    With `cpus`, the process is pinned to them and TensorFlow uses that many threads."""
    os.makedirs(run.directory, exist_ok=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    pin = None
    if cpus is not None:
        env.update(TF_NUM_INTRAOP_THREADS=str(len(cpus)), TF_NUM_INTEROP_THREADS=str(len(cpus)))
        pin = functools.partial(os.sched_setaffinity, 0, list(cpus))
    started, files = time.time(), RunFiles(run.directory)
    with open(files.train_log, "a") as log:
        log.write(" ".join(command(run)) + (f"  # CPUs {list(cpus)}" if cpus else "") + "\n")
        log.flush()
        process = subprocess.run(
            command(run), stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=pin, check=False
        )
    seconds = time.time() - started
    if process.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command(run))} exited with {process.returncode}; see {files.train_log}."
        )
    with open(files.wall_seconds, "w") as f:
        json.dump({"seconds": seconds}, f)  # This session's share of the run (it may resume).
    return seconds


def run_all(pending: Sequence[Run], slots: Sequence[Optional[List[int]]]):
    """Trains `pending` in order, len(slots) at a time, each on its slot's CPUs; yields
    (number, run, wall seconds) as each finishes (in the driver's thread, so the report is
    written by one writer). A failed run stops the others from starting; running ones finish."""
    free, failed = queue.Queue(), threading.Event()
    for slot in slots:
        free.put(slot)

    def train(number: int, run: Run):
        cpus = free.get()
        try:
            if failed.is_set():
                return None  # An earlier run failed: do not start this one.
            print(
                f"[{number}/{len(pending)}] {label(run)}: {' '.join(command(run))}"
                + (f"  # CPUs {cpus}" if cpus else ""),
                flush=True,
            )
            return number, run, execute(run, cpus)
        except BaseException:
            failed.set()
            raise
        finally:
            free.put(cpus)

    with concurrent.futures.ThreadPoolExecutor(len(slots)) as pool:
        futures = [pool.submit(train, number, run) for number, run in enumerate(pending, 1)]
        try:
            for future in concurrent.futures.as_completed(futures):
                result = future.result()
                if result is not None:  # None: not started after a failure.
                    yield result
        finally:
            for future in futures:
                future.cancel()  # Runs not started yet; the running ones finish.
