"""One benchmark variant alone in a process, for its peak memory (no flags here, so any
benchmark may import it).

A benchmark re-runs itself as `python -m MODULE FLAGS...` with flags that select one variant;
that process builds the variant's step, calls `time_alone` and `report`; the parent reads the
last line of its output with `run_alone`.
"""

import re
import resource
import subprocess
import sys
import time
from typing import Callable, List, NamedTuple, Optional, Tuple

import numpy as np


class Alone(NamedTuple):
    """What one variant's process measured."""
    peak_mib: float  # Peak resident memory of the whole process (imports, build, steps).
    steps_peak_mib: float  # Peak resident memory while the timed steps ran (after the first).
    seconds: float  # Median seconds per timed step.


def peak_rss_mib() -> float:
    """This process's peak resident memory since it started, MiB: Linux's VmHWM before any
    `_reset_high_water` (getrusage's ru_maxrss elsewhere). Not ru_maxrss on Linux: a child
    inherits its parent's peak there (exec keeps the larger), so a benchmark cell started by
    a parent that drew a 40M-event log read 5.6 GB where it held 3 GB."""
    hwm = _high_water_mib()
    return hwm if hwm is not None else resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss / 1024


def _high_water_mib() -> Optional[float]:
    """Peak resident memory of this process image since it started or since the last
    `_reset_high_water` (Linux's VmHWM), MiB; None where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            return int(re.search(r"VmHWM:\s+(\d+)", status.read()).group(1)) / 1024
    except (OSError, AttributeError):
        return None


def _reset_high_water() -> None:
    """Restarts Linux's peak-RSS counter (VmHWM) from the current RSS, where allowed."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
            clear.write("5")
    except OSError:
        pass


def while_running(work: Callable[[], object]) -> Tuple[float, float]:
    """Runs `work`; returns (this process's peak resident memory, MiB, since it started,
    `work` included; the peak while `work` ran, MiB)."""
    before = peak_rss_mib()
    _reset_high_water()
    work()
    during = _high_water_mib()
    if during is None:  # No VmHWM: the whole process's peak is all there is.
        during = before = peak_rss_mib()
    return max(before, during), during


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
    result = subprocess.run([sys.executable, "-m", module, *flags], capture_output=True,
                            text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(flags)} exited with {result.returncode}:\n"
                           f"{result.stderr[-3000:]}")
    peak, steps_peak, seconds = result.stdout.strip().splitlines()[-1].split()
    return Alone(float(peak), float(steps_peak), float(seconds))
