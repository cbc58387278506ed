"""This process's peak resident memory, for the jobs' reports and the benchmarks.

`peak_rss_mib` reads Linux's VmHWM (getrusage elsewhere); `while_running` measures the peak
of one piece of work apart from what the process held before it. `predict_mib` is the
memory model: each phase's predicted peak, which a run prints beside the measured one and
checks against `available_mib` (or --memory_budget_mb) before it builds its tables.
"""

import ctypes
import gc
import os
import re
import resource
from typing import Callable, Dict, Optional, Tuple


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


def release() -> None:
    """Returns freed memory to the system: collects Python's reference cycles (a SavedModel
    export's module holds 1.6 GB in them at 5M items) and, with glibc, `malloc_trim(0)` (which
    returned another 1.6 GB there), so that the next phase starts from what is alive."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # Not glibc: nothing to trim.
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


# ------------------------------------------------------------------ the memory model

MIB = 2**20
# What a job holds besides its tables, in MiB: the interpreter, TensorFlow, the packages and
# the run's small state (industrial_smoke at 85k items: 851 MiB after reading its log).
RUNTIME_MIB = 850
# Bytes an id of the vocabularies costs (Python strings in an object array, and their
# lookups).
VOCABULARY_BYTES = 96
# Bytes a law item of the web-scale synthetic log's truth costs while it is read (its arrays
# and the map to dense ids; the id strings while they are converted).
LAW_BYTES = 112


def predict_mib(
    config,
    num_users: int,
    num_items: int,
    index_items: Optional[int] = None,
    law_items: int = 0,
    sketch_items: Optional[int] = None,
    tables_on_servers: bool = False,
) -> Dict[str, int]:
    """The predicted peak resident memory of each phase of a run of `config` (a
    `pipelines.configs.Config`) over `num_users` users and `num_items` items, MiB:
    {"tables", "build", "train", "evaluate", "export"}.

    - tables: every embedding table, float32 (a two-tower model's users, history items and
      items, one item table with `share_item_table`; SASRec's item table, twice when
      untied);
    - build: the runtime, the vocabularies, the tables and one chunk (a large table is
      drawn, or zeroed for a checkpoint, a chunk at a time: `experiment.build_model`);
    - train: the runtime, the vocabularies, the tables and the optimizer's slots (one copy
      of the tables with Adagrad, two with Adam), the count-min sketch, one chunk of the
      catalog and blocks of scores (`tfrs_logq.retrieval`), the validation top k;
    - evaluate: the runtime, the vocabularies, the tables (the slots released), a chunk and
      the score blocks, the test top k, a ScaNN index over `index_items` (the searched
      embeddings gathered once, and ScaNN's own copy), the synthetic law (`law_items`);
    - export: the runtime, the vocabularies, the tables, the served item embeddings (one
      copy of the index's), with ScaNN its index (about five copies of the served
      embeddings: ScaNN's searcher, its serialised form and the trial request's), and the
      SavedModel's writing (about half the variables).

    `sketch_items`: the items the count-min sketch is sized for (`experiment.sketch_items`;
    None: `num_items`).

    With `tables_on_servers` (a parameter-server chief): the tables, their slots and the
    sketch live on the servers while the chief trains, evaluates and exports (the servers
    write their shards of the SavedModel's variables), so no phase counts them.

    A model to compare with the measured peaks (`phase_peak_rss_mb`), not a bound.
    """
    # pylint: disable=import-outside-toplevel
    from logq_core import formulas
    from pipelines import configs
    from tfrs_logq import retrieval

    model, training = config.model, config.training
    dim = model.dim
    two_tower = model.model == "two_tower"
    if two_tower:
        item_tables = 1 if model.share_item_table else 2
    else:
        item_tables = 1 if model.tie_embeddings else 2
    rows = item_tables * (num_items + 1) + (num_users + 1 if two_tower else 0)
    tables = 4.0 * dim * rows
    slots = tables * (1 if training.table_optimizer == "adagrad" else 2)
    sketch = 0.0
    if config.loss.frequency == "count_min":
        sketch = 4 * formulas.count_min_width(sketch_items or num_items) * 8.0 * 2
    chunk = retrieval.CHUNK_BYTES + 3 * 4.0 * retrieval.SCORES_PER_BATCH
    k = max(configs.ks(training))
    queries = training.test_queries or 20_000
    index_items = num_items if index_items is None else index_items
    scann = 2 * 4.0 * dim * index_items if training.index in ("scann", "both") else 0.0
    runtime = RUNTIME_MIB * MIB + VOCABULARY_BYTES * (num_items + num_users)
    served = 4.0 * dim * (index_items + 1)  # A run's exports serve its index.
    held = 0.0 if tables_on_servers else tables  # What the chief's train and evaluate hold.
    if tables_on_servers:
        slots = sketch = 0.0
    predicted = {
        "tables": tables,
        "build": runtime + held + retrieval.CHUNK_BYTES,
        "train": runtime
        + held
        + slots
        + sketch
        + chunk
        + 12.0 * k * config.data.validation_queries,
        "evaluate": runtime + held + chunk + 12.0 * k * queries + scann + LAW_BYTES * law_items,
        # The served embeddings; a ScaNN export's index (its searcher, the searcher serialised
        # into the module, the trial request's: about 5 copies, measured at 5M items) and the
        # SavedModel's writing (about half the variables, measured there).
        "export": runtime + held + served * (6 if scann else 1) + 0.5 * (held + served),
    }
    return {name: round(value / MIB) for name, value in predicted.items()}


def available_mib() -> float:
    """The memory this process may use, MiB: the cgroup's limit where one is set (v2's
    memory.max, v1's limit_in_bytes), else the machine's physical memory."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path, encoding="ascii") as limit:
                value = limit.read().strip()
            if value.isdigit() and int(value) < 2**60:
                return int(value) / MIB
        except OSError:
            pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / MIB
