"""This process's peak resident memory, for the jobs' reports and the benchmarks.

`peak_rss_mib` reads Linux's VmHWM (getrusage elsewhere); `while_running` measures the peak
of one piece of work apart from what the process held before it.
"""

import re
import resource
from typing import Callable, Optional, Tuple


def peak_rss_mib() -> float:
    """This process's peak resident memory since it started, MiB: Linux's VmHWM before any
    `reset_high_water` (getrusage's ru_maxrss elsewhere). Not ru_maxrss on Linux: a child
    inherits its parent's peak there (exec keeps the larger), so a benchmark cell started by
    a parent that drew a 40M-event log read 5.6 GB where it held 3 GB."""
    hwm = high_water_mib()
    return hwm if hwm is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def high_water_mib() -> Optional[float]:
    """Peak resident memory of this process image since it started or since the last
    `reset_high_water` (Linux's VmHWM), MiB; None where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            # No match: None.group raises AttributeError, caught below.
            return int(re.search(r"VmHWM:\s+(\d+)", status.read()).group(1)) / 1024  # type: ignore[union-attr]
    except (OSError, AttributeError):
        return None


def reset_high_water() -> None:
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
    reset_high_water()
    work()
    during = high_water_mib()
    if during is None:  # No VmHWM: the whole process's peak is all there is.
        during = before = peak_rss_mib()
    return max(before, during), during
