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
# Bytes a law item of the web-scale synthetic log's truth costs while it is held (its arrays
# and the map to dense ids): from the data phase on where the data phase draws the log, and
# in evaluation (the KL and the oracle read it).
LAW_BYTES = 112
# The data phase, drawing a synthetic log and building the day store (empirical: fitted on
# the data phases of docs/results/scale/industrial_items5m.json, industrial_items20m.json
# (5M- and 20M-item laws, 20M events) and industrial_items3m_smoke.json (a 3M-item law,
# 200k events: 1,577 MB, where a fit on the first two alone predicted 1,262); checked on the
# others): what the phase holds above the runtime whatever the log (MiB), bytes a law item
# costs while the law is drawn and its ids mapped (float64 weights, their cumulative sums,
# the cluster arrays and the string ids at once), and bytes an event costs while the log is
# encoded and bucketed into days (its int64 user, item and time columns, the sort's order and
# copies, a file's string ids and the day buckets' buffers).
DATA_FIXED_MIB = 320
DATA_LAW_BYTES = 137
DATA_EVENT_BYTES = 102
# The data phase of an event log read from files out of core (`day_store`; nothing drawn),
# bytes an event of the log's busiest day costs: the day's columns sorted and de-duplicated,
# its examples' history windows and their packed rows at once (empirical: fitted on the
# out-of-core rows of docs/results/event_memory.json, 1M users and items, where 10M events
# over 14 days and 40M over 56 days (0.71M a day) peaked at 1,470 and 1,458 MiB and 40M over
# 14 days at 2,011: the peak follows a day's events, not the log's). Beside it the phase
# holds the runtime, DATA_FIXED_MIB, the vocabularies and the users' history table.
DAY_EVENT_BYTES = 264
# Bytes a slot of an exact search's [queries, k] answer costs at its peak
# (`logq_core.ranking.device_top_k`): the running top k on the device (float32 values and
# int32 positions) beside the int64 ids filled on the host.
TOP_K_SLOT_BYTES = 16
# Bytes an event costs when the data phase reads a built store back (its manifest, the
# evaluation sets and the item counts; the examples stay on disk).
STORE_EVENT_BYTES = 12
# What the build, training, evaluation and the export hold above their derived terms, MiB
# (empirical: TensorFlow's graphs, functions and allocator pools, the input pipeline's
# buffers; fitted on the records of the code since 2e759db, `tests/pipelines/test_memory.py`
# names them): the build's variables' creation; training's step functions, the stream's
# shuffle window and read-ahead, and the glibc arenas the step's threads keep (the Table 2
# runs peaked 2.3 GB apart on two machines of one kind with the same config: this term is
# set by the larger); what evaluation and the export inherit from training in one process.
BUILD_SLACK_MIB = 550
# Training's unexplained part grows with its state (the tables, their slots and the sketch):
# the Table 2 runs (two-tower, two item tables of 2.73M rows at dim 64) peaked at their
# derived terms plus 1.12 times that state; a run of a few MB of tables (MovieLens-1M)
# peaks at its runtime. Empirical; fitted on the Table 2 runs' process peaks (which do not
# say which phase peaked), loose for the 20M-item catalog's training (0.63 of it measured).
TRAIN_STATE_SLACK = 1.12
# Evaluation's: 1,400 MiB fitted on the host search's records; the device search
# (`logq_core.ranking.device_top_k`, since f6622bb) peaked up to 132 MB above that at 1M items
# (`docs/results/compare/framework_industrial/tf/`): its step's block tensors live in
# TensorFlow's allocator beside the running top k.
EVALUATE_SLACK_MIB = 1_560
EXPORT_SLACK_MIB = 1_000

PHASES = ("data", "split", "build", "train", "evaluate", "baselines", "export")


def predict_mib(
    config,
    num_users: int,
    num_items: int,
    index_items: Optional[int] = None,
    law_items: int = 0,
    sketch_items: Optional[int] = None,
    tables_on_servers: bool = False,
    num_events: int = 0,
    store_built: bool = False,
    events_per_day: Optional[int] = None,
) -> Dict[str, int]:
    """The predicted peak resident memory of each phase of a run of `config` (a
    `pipelines.configs.Config`) over `num_users` users and `num_items` items, MiB: "tables"
    and each phase of `pipelines.train` ("data", "split", "build", "train", "evaluate",
    "baselines", "export"). A bound: each phase's own peak in every committed record of the
    code since 2e759db is at most its prediction (`tests/pipelines/test_memory.py`).

    What grows with what (bytes; C is what every phase after the data holds: the runtime,
    96 a vocabulary id, 112 a law item of a synthetic log):

    - data: the runtime, 320 MiB, 137 a law item (or the vocabularies when larger) and 102
      an event (the law drawn, the log encoded and bucketed into days; empirical); a built
      store read back: C without the law, 12 an event;
    - split: C and 12 an event;
    - build: C, the tables (4 x dim a row: a two-tower model's users, history items and
      items, one item table with `share_item_table`; SASRec's item table, twice when
      untied), three chunks (`retrieval.CHUNK_BYTES`: a table is drawn a chunk at a time,
      its draws and their scaled copy beside it), a constant;
    - train: C, the tables, the optimizer's slots (one copy of the tables with Adagrad, two
      with Adam), the count-min sketch (4 rows of 2 x 8-byte counts, its width from
      `sketch_items`), a chunk and blocks of scores, the validation top k (12 an entry), a
      1.12 times the tables, slots and sketch (the step's functions, the stream's buffers,
      allocator pools; empirical);
    - evaluate and baselines: C, the tables (the slots released), a chunk and the score
      blocks, the test top k (12 an entry: queries x k), a ScaNN index over `index_items`
      (the searched embeddings gathered once, and ScaNN's own copy), the synthetic law, a
      constant (what training leaves in the process; empirical);
    - export: C, the tables, each read whole once more (the traced functions of the save
      read each table whole: TensorFlow's copy-on-read after sparse updates), the served
      embeddings (one copy of the index's; with ScaNN about five more: its searcher, its
      serialised form, the trial request's), the SavedModel's writing (about half the
      variables), a constant (empirical).

    So the tables' phases grow with catalog x dim (and users x dim), evaluation with test
    queries x k and the index, the data phase with the law and the log's events; no phase
    grows with the batch or the history beyond the constants (a batch's rows and scores are
    kilobytes to megabytes).

    `sketch_items`: the items the count-min sketch is sized for (`experiment.sketch_items`;
    None: `num_items`). `num_events`: the log's events (the data phase); `store_built`: the
    day store is built (the data phase reads it back). `events_per_day`: an event log read
    from files out of core (a public log, an own log; nothing drawn), the events of its
    busiest day: its data phase holds that day (264 bytes an event, empirical) and the users'
    history table, not the log, and its split phase reads back counts, not events.

    With `tables_on_servers` (a parameter-server chief): the tables, their slots and the
    sketch live on the servers while the chief trains, evaluates and exports (the servers
    write their shards of the SavedModel's variables), so no phase counts them.
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
    vocabularies = VOCABULARY_BYTES * (num_items + num_users)
    law = LAW_BYTES * law_items
    runtime = RUNTIME_MIB * MIB
    held_after_data = runtime + vocabularies + law  # C: the law from the data phase on.
    split = held_after_data + STORE_EVENT_BYTES * num_events
    if events_per_day is not None:
        data = (
            runtime
            + DATA_FIXED_MIB * MIB
            + vocabularies
            + 4.0 * (num_users + 1) * model.history_length
            + DAY_EVENT_BYTES * events_per_day
        )
        split = held_after_data
    elif store_built:
        data = runtime + vocabularies + STORE_EVENT_BYTES * num_events
    else:
        data = (
            runtime
            + DATA_FIXED_MIB * MIB
            + max(vocabularies, DATA_LAW_BYTES * law_items)
            + DATA_EVENT_BYTES * num_events
        )
    served = 4.0 * dim * (index_items + 1)  # A run's exports serve its index.
    held = 0.0 if tables_on_servers else tables  # What the chief's train and evaluate hold.
    if tables_on_servers:
        slots = sketch = 0.0
    evaluate = (
        held_after_data
        + held
        + chunk
        + TOP_K_SLOT_BYTES * k * queries
        + scann
        + EVALUATE_SLACK_MIB * MIB
    )
    predicted = {
        "tables": tables,
        "data": data,
        "split": split,
        "build": held_after_data + held + 3 * retrieval.CHUNK_BYTES + BUILD_SLACK_MIB * MIB,
        "train": held_after_data
        + held
        + slots
        + sketch
        + chunk
        + TOP_K_SLOT_BYTES * k * config.data.validation_queries
        + TRAIN_STATE_SLACK * (held + slots + sketch),
        "evaluate": evaluate,
        "baselines": evaluate,
        "export": held_after_data
        + 2 * held
        + served * (6 if scann else 1)
        + 0.5 * (held + served)
        + EXPORT_SLACK_MIB * MIB,
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
