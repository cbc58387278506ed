"""One benchmark variant alone in a process, for its peak memory (no flags here, so any
benchmark may import it).

A benchmark re-runs itself as `python -m MODULE FLAGS...` with flags that select one variant;
that process builds the variant's step, calls `time_alone` and `report`; the parent reads the
last line of its output with `run_alone`.
"""

import subprocess
import sys
import time
from typing import Callable, List, NamedTuple

import numpy as np

from pipelines.memory import while_running


class Alone(NamedTuple):
    """What one variant's process measured."""

    peak_mib: float  # Peak resident memory of the whole process (imports, build, steps).
    steps_peak_mib: float  # Peak resident memory while the timed steps ran (after the first).
    seconds: float  # Median seconds per timed step.


def time_alone(step: Callable, batches, count: int) -> Alone:
    """Runs `step` once (it traces and compiles), then `count` times, timed one by one."""
    float(step(*batches[0]))
    seconds = []

    def steps():
        for i in range(count):
            started = time.perf_counter()
            float(step(*batches[(i + 1) % len(batches)]))
            seconds.append(time.perf_counter() - started)

    peak, during = while_running(steps)
    return Alone(peak, during, float(np.median(seconds)))


def report(alone: Alone) -> None:
    """Prints what `run_alone` reads: the last line of the variant's output."""
    print(f"{alone.peak_mib:.0f} {alone.steps_peak_mib:.0f} {alone.seconds:.6f}")


def run_alone(module: str, flags: List[str]) -> Alone:
    """Runs `python -m module flags...` (one variant, which calls `report`) and reads it."""
    result = subprocess.run(
        [sys.executable, "-m", module, *flags], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{module} {' '.join(flags)} exited with {result.returncode}:\n{result.stderr[-3000:]}"
        )
    peak, steps_peak, seconds = result.stdout.strip().splitlines()[-1].split()
    return Alone(float(peak), float(steps_peak), float(seconds))
