"""Splits: leave-one-out exactly as gSASRec / the logQ paper, the global temporal split, and
the next-day split of industrial logs."""

import math
import sys
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from pipelines.data.interactions import DataError
from pipelines.data.interactions import Interactions

if TYPE_CHECKING:
    from typing import Protocol

    class _DayStore(Protocol):
        """What is read of a split's `day_store.DayStore` (not imported: day_store imports
        this module)."""

        @property
        def directory(self) -> str: ...
        @property
        def num_examples(self) -> int: ...
        @property
        def days(self) -> np.ndarray: ...
        @property
        def day_ends(self) -> np.ndarray: ...
        @property
        def item_counts(self) -> np.ndarray: ...
        def day_items(self, day: int) -> np.ndarray: ...


# gSASRec's validation users on ML-1M: 512 draws of RandomState(42) over
# range(6040), compared with the 1-based user ids.
NUM_VALIDATION_USERS = 512
VALIDATION_SEED = 42


class EvalSet(NamedTuple):
    """Evaluation queries: each user's history (the query input, and what to filter) and targets."""

    users: np.ndarray  # [n] dense user ids
    histories: List[np.ndarray]  # items known before the target, in time order
    targets: List[np.ndarray]  # the positives (one for leave-one-out)


def targets_in_history(eval_set: EvalSet) -> Dict[str, float]:
    """How many of `eval_set`'s targets are items already in their query's history, which
    the search excludes (every job's evaluation filters the history): no ranking reaches
    them. {"in_history", "targets", "recall_ceiling"}: the counts, and the mean over queries
    of the share of targets a ranking can reach (Recall@k's ceiling at any k). A log of
    repeat consumption (music) has many: its Recall is capped well below 1."""
    in_history = total = 0
    reachable = []
    for history, targets in zip(eval_set.histories, eval_set.targets):
        seen = int(np.isin(targets, history).sum())
        in_history += seen
        total += len(targets)
        reachable.append(1.0 - seen / len(targets) if len(targets) else 1.0)
    return {
        "in_history": in_history,
        "targets": total,
        "recall_ceiling": round(float(np.mean(reachable)), 6) if reachable else 1.0,
    }


def history_note(facts: Dict[str, float]) -> Optional[str]:
    """One line saying `targets_in_history`'s `facts`, or None when no target is in its
    query's history."""
    if not facts["in_history"]:
        return None
    return (
        f"note: {facts['in_history']:,} of the test's {facts['targets']:,} targets "
        f"({facts['in_history'] / facts['targets']:.1%}) are items already in their query's "
        "history, which the search excludes: no ranking reaches them, so Recall@k is at most "
        f"{facts['recall_ceiling']:.4f} at any k."
    )


def report_targets_in_history(eval_set: EvalSet, say: bool = True) -> Dict[str, float]:
    """`targets_in_history` of `eval_set`, its `history_note` printed to stderr with `say`
    (where there is one)."""
    facts = targets_in_history(eval_set)
    note = history_note(facts)
    if say and note:
        print(note, file=sys.stderr, flush=True)
    return facts


class Split(NamedTuple):
    """Training sequences per user (index = dense user id), and the evaluation sets."""

    train: Optional[List[np.ndarray]]
    validation: EvalSet
    test: EvalSet
    num_items: int
    # Per user, the times of `train`'s items (splits of timed logs; else None).
    train_times: Optional[List[np.ndarray]] = None
    # Per user, the weights of `train`'s events (a log with a weight column; else None).
    train_weights: Optional[List[np.ndarray]] = None
    # The training examples on disk (`day_store.DayStore`: an event log's next-day split
    # read out of core); `train` is then None.
    stream: Optional["_DayStore"] = None

    def train_counts(self) -> np.ndarray:
        """[num_items + 1] training interactions per item."""
        if self.stream is not None:
            return self.stream.item_counts
        assert self.train is not None  # Without `stream` the split holds its sequences.
        # mypy cannot type the empty fallback [[]]; it concatenates to an empty array.
        flat = np.concatenate([np.asarray(s, np.int64) for s in self.train] or [[]])  # type: ignore[list-item]
        return np.bincount(flat.astype(np.int64), minlength=self.num_items + 1)


def gsasrec_validation_users(
    num_users: int, count: int = NUM_VALIDATION_USERS, seed: int = VALIDATION_SEED
) -> np.ndarray:
    """The validation user ids of gSASRec's preprocessing (1-based ids matched against
    RandomState(seed).choice(num_users, count, replace=False), so user num_users never is)."""
    return np.sort(np.random.RandomState(seed).choice(num_users, count, replace=False))


def leave_one_out(data: Interactions, train_gap: int = 0) -> Split:
    """Each user's last item is the test target (history: all before it). The gSASRec
    validation users' second-to-last item is the validation target and is left out
    of their training sequence; every other user trains on all but the last item.

    `train_gap` more items are left out of every training sequence (they stay in
    the evaluation histories). gSASRec's preprocess_ml1m.py (`asash/gSASRec-pytorch`,
    used by the logQ paper's code) trains on `user_items[:-2]` and, for validation
    users, `[:-3]`: `train_gap=1`.
    """
    if isinstance(train_gap, bool) or not isinstance(train_gap, int) or train_gap < 0:
        raise ValueError(
            f"`train_gap` must be a non-negative integer; received train_gap={train_gap!r}."
        )
    sequences = data.sequences()
    validation_users = set(
        gsasrec_validation_users(data.num_users, min(NUM_VALIDATION_USERS, data.num_users)).tolist()
    )
    train = [np.zeros(0, np.int64)]
    val_users, val_hist, val_targets = [], [], []
    test_users, test_hist, test_targets = [], [], []
    for user in range(1, data.num_users + 1):
        sequence = sequences[user]
        if len(sequence) < 3:
            train.append(sequence[:-1] if len(sequence) == 2 else sequence)
            if len(sequence) == 2:
                test_users.append(user)
                test_hist.append(sequence[:-1])
                test_targets.append(sequence[-1:])
            continue
        test_users.append(user)
        test_hist.append(sequence[:-1])
        test_targets.append(sequence[-1:])
        if user in validation_users:
            train.append(sequence[: len(sequence) - 2 - train_gap])
            val_users.append(user)
            val_hist.append(sequence[:-2])
            val_targets.append(sequence[-2:-1])
        else:
            train.append(sequence[: len(sequence) - 1 - train_gap])
    return Split(
        train,
        EvalSet(np.array(val_users, np.int64), val_hist, val_targets),
        EvalSet(np.array(test_users, np.int64), test_hist, test_targets),
        data.num_items,
    )


TEMPORAL_TARGETS = ("first", "all", "last", "successive")


def subsample_indices(size: int, count: int, seed: int = 42) -> np.ndarray:
    """The sorted indices of at most `count` of `size` queries, drawn without replacement
    (seeded): every index when `size` <= `count`."""
    if count < 1:
        raise ValueError(f"`count` must be a positive integer; received count={count!r}.")
    if size <= count:
        return np.arange(size)
    return np.sort(np.random.RandomState(seed).choice(size, count, replace=False))


def subsample(eval_set: EvalSet, count: int, seed: int = 42) -> EvalSet:
    """At most `count` of the queries, drawn without replacement (seeded), in their order."""
    keep = subsample_indices(len(eval_set.users), count, seed)
    if len(keep) == len(eval_set.users):
        return eval_set
    return EvalSet(
        eval_set.users[keep],
        [eval_set.histories[i] for i in keep],
        [eval_set.targets[i] for i in keep],
    )


def _window_targets(histories, users, items, targets: str) -> EvalSet:
    """The queries of one window's interactions (`users` sorted, each user's in time order).

    "first" / "all": one query per user, history = `histories[user]` (before the
    window), target = the first item of the window / every distinct one.
    "last": one query per user, target = the user's last item of the window,
    history = everything before it (the window's earlier items included).
    "successive": one query per interaction of the window, history = everything
    before it. Queries with an empty history (cold-start users) are skipped.
    """
    result_users, result_hist, result_targets = [], [], []
    distinct, starts = np.unique(users, return_index=True)
    ends = np.append(starts[1:], len(users))
    for user, start, end in zip(distinct, starts, ends):
        window = items[start:end]
        if targets in ("first", "all"):
            queries = [(histories[user], window[:1] if targets == "first" else np.unique(window))]
        else:
            sequence = np.concatenate([histories[user], window])
            positions = (
                range(len(histories[user]), len(sequence))
                if targets == "successive"
                else [len(sequence) - 1]
            )
            queries = [(sequence[:i], sequence[i : i + 1]) for i in positions]
        for history, target in queries:
            if len(history):
                result_users.append(user)
                result_hist.append(history)
                result_targets.append(target)
    return EvalSet(np.array(result_users, np.int64), result_hist, result_targets)


def temporal(
    data: Interactions,
    test_fraction: float = 0.1,
    validation_fraction: float = 0.1,
    targets: str = "first",
) -> Split:
    """Global temporal split: all interactions sorted by time; the last `test_fraction` are
    test, the `validation_fraction` before them validation, the rest training.

    The queries of a window (see `TEMPORAL_TARGETS`): with "first" (default)
    or "all", one per user with interactions in the window, its history every
    interaction of that user before the window (training, plus validation for
    test), its target the first item in the window or every distinct item
    there. "last" asks for each user's last item of the window and "successive"
    for every item of the window, each from everything the user did before it
    (the window's earlier items included). Queries with no history are skipped.
    """
    if not (
        0 < test_fraction < 1
        and 0 < validation_fraction < 1
        and test_fraction + validation_fraction < 1
    ):
        raise ValueError(
            "Need 0 < test_fraction, validation_fraction and their sum < 1; "
            f"received test_fraction={test_fraction}, "
            f"validation_fraction={validation_fraction}."
        )
    if targets not in TEMPORAL_TARGETS:
        raise ValueError(
            f"`targets` must be one of {', '.join(map(repr, TEMPORAL_TARGETS))}; "
            f"received targets={targets!r}."
        )
    n = len(data.user)
    order = np.lexsort((np.arange(n), data.timestamp))  # Time, then file order.
    test_start = n - int(math.ceil(test_fraction * n))
    val_start = test_start - int(math.ceil(validation_fraction * n))
    if val_start < 1:
        raise ValueError(
            f"{n} interactions leave none to train on: the test window takes "
            f"{n - test_start} and the validation window {test_start - val_start} "
            f"(test_fraction={test_fraction}, validation_fraction="
            f"{validation_fraction}); lower --test_fraction."
        )
    part = np.empty(n, np.int8)
    part[order[:val_start]], part[order[val_start:test_start]], part[order[test_start:]] = 0, 1, 2
    # `data` is sorted by user then time, so each user's slice keeps its order.
    bounds = np.searchsorted(data.user, np.arange(data.num_users + 2))
    slices = [slice(bounds[u], bounds[u + 1]) for u in range(data.num_users + 1)]
    train_data = [data.item[s][part[s] == 0] for s in slices]
    before_test = [data.item[s][part[s] < 2] for s in slices]
    in_val, in_test = part == 1, part == 2
    validation = _window_targets(train_data, data.user[in_val], data.item[in_val], targets)
    test = _window_targets(before_test, data.user[in_test], data.item[in_test], targets)
    return Split(train_data, validation, test, data.num_items)


DAY_SECONDS = 86_400


def days(timestamps: np.ndarray, day_seconds: int = DAY_SECONDS) -> np.ndarray:
    """The day of each time, counted from the log's first day (day 0)."""
    timestamps = np.asarray(timestamps, np.int64)
    first = (timestamps.min() // day_seconds) * day_seconds
    return (timestamps - first) // day_seconds


def test_day_number(
    first: int, last: int, test_day: int = -1, day_seconds: int = DAY_SECONDS
) -> int:
    """The test day of a log whose times run from `first` to `last`, counted as `days`
    counts (`test_day` -1: the last day)."""
    return (
        (last - (first // day_seconds) * day_seconds) // day_seconds
        if test_day == -1
        else int(test_day)
    )


class DayLayout(NamedTuple):
    """The days of a log whose times span [first, last]: `start`, the start of day 0 (the
    first time's day), in the log's seconds; `test`, the test day's number; `last`, the last
    day's number."""

    start: int
    test: int
    last: int
    day_seconds: int

    def day_start(self, day: int) -> int:
        """The first second of day `day` (counted as `days` counts)."""
        return self.start + day * self.day_seconds


def day_layout(
    first: int, last: int, test_day: int, day_seconds: int, source: str = "the log"
) -> DayLayout:
    """The `DayLayout` of a log whose times run from `first` to `last` (its raw times, before
    any event is dropped: every reader of the log, in memory or out of core, counts its days
    alike), checked by `check_test_day`."""
    start = (int(first) // day_seconds) * day_seconds
    layout = DayLayout(
        start,
        test_day_number(first, last, test_day, day_seconds),
        (int(last) - start) // day_seconds,
        day_seconds,
    )
    check_test_day(source, test_day, layout.test, layout.last, day_seconds)
    return layout


def check_test_day(source: str, test_day: int, test: int, last: int, day_seconds: int) -> None:
    """Raises DataError unless the test day `test` leaves a training and a validation day
    before it in a log of days 0..`last`."""
    if not 2 <= test <= last:
        raise DataError(
            source,
            None,
            f"--test_day={test_day} leaves no training day: the log "
            f"spans days 0..{last} ({day_seconds} s each) and the protocol needs a "
            "training day and a validation day before the test day.",
        )


def empty_day(source: str, name: str, number: int):
    """The DataError of an evaluation day ("test" or "validation") without a query."""
    return DataError(
        source,
        None,
        f"the {name} day (day {number}) holds no query: no user "
        "active that day has an earlier interaction.",
    )


def nothing_to_train(source: str, test: int):
    """The DataError of a log with no event before the validation day."""
    return DataError(
        source,
        None,
        f"no interaction precedes the validation day (day {test - 1}): nothing to train on.",
    )


def next_day(
    data: Interactions,
    test_day: int = -1,
    day_seconds: int = DAY_SECONDS,
    source: str = "the log",
    weights: Optional[np.ndarray] = None,
    span: Optional[Tuple[int, int]] = None,
) -> Split:
    """Train on the days before the validation day, validate on the day before the test day,
    test on `test_day` (the paper's industrial protocol: train on days 1..T, evaluate on day
    T + 1).

    A query per user active on the evaluated day: its history every interaction of the user
    before that day, its targets the distinct items of the day. Users with no history are
    skipped (cold start).

    Args:
      test_day: the test day, counted from the log's first day (0); -1: the last day.
      day_seconds: the length of a day in the log's time unit.
      weights: optional [n] event weights, in `data`'s order (`Split.train_weights`).
      span: (first, last) time of the log the days are counted on (an event log's raw
        times, as its day store counts them); None: `data`'s.

    Raises:
      DataError: the test day holds no queries, or no day is left to train on.
    """
    if (
        isinstance(day_seconds, bool)
        or not isinstance(day_seconds, (int, np.integer))
        or (day_seconds < 1)
    ):
        raise ValueError(f"--day_seconds must be a positive integer; received {day_seconds!r}.")
    if span is None:
        span = (int(data.timestamp.min()), int(data.timestamp.max()))
    layout = day_layout(*span, test_day, day_seconds, source)
    day = (np.asarray(data.timestamp, np.int64) - layout.start) // day_seconds
    test = layout.test
    part = np.where(day < test - 1, 0, np.where(day == test - 1, 1, np.where(day == test, 2, 3)))
    bounds = np.searchsorted(data.user, np.arange(data.num_users + 2))
    train, train_times, train_weights, before_test = [], [], [], []
    for user in range(data.num_users + 1):
        rows = slice(bounds[user], bounds[user + 1])
        kind = part[rows]
        train.append(data.item[rows][kind == 0])
        train_times.append(data.timestamp[rows][kind == 0])
        if weights is not None:
            train_weights.append(weights[rows][kind == 0])
        before_test.append(data.item[rows][kind < 2])
    in_val, in_test = part == 1, part == 2
    validation = _window_targets(train, data.user[in_val], data.item[in_val], "all")
    test_set = _window_targets(before_test, data.user[in_test], data.item[in_test], "all")
    for name, (eval_set, number) in {
        "test": (test_set, test),
        "validation": (validation, test - 1),
    }.items():
        if len(eval_set.users) == 0:
            raise empty_day(source, name, number)
    if not (part == 0).any():
        raise nothing_to_train(source, test)
    return Split(
        train,
        validation,
        test_set,
        data.num_items,
        train_times,
        train_weights if weights is not None else None,
    )


def most_trained(counts: np.ndarray, size: int) -> np.ndarray:
    """The `size` ids with the most training events (`counts`: [num_items + 1], row 0 the
    padding; ties: the lower id), sorted: the served index of the next-day protocol."""
    return np.sort(np.argsort(-counts[1:], kind="stable")[:size] + 1)


def served_index(counts: np.ndarray, index_size: int) -> Optional[np.ndarray]:
    """What a run's exports serve: the `index_size` ids with the most training events
    (`most_trained`); None (index_size 0): the whole catalog."""
    return most_trained(counts, index_size) if index_size else None


def test_index(counts: np.ndarray, index_size: int, eval_set: "EvalSet") -> Optional[np.ndarray]:
    """The ids the test search covers: `served_index` plus every target of `eval_set` (the
    paper's industrial index); None: the whole catalog."""
    served = served_index(counts, index_size)
    return None if served is None else with_positives(served, eval_set)


def with_positives(index: np.ndarray, eval_set: "EvalSet") -> np.ndarray:
    """`index` plus every target of `eval_set`, sorted: the test index of the paper's
    industrial protocol (the served items and the day's positives)."""
    targets = np.concatenate(eval_set.targets) if eval_set.targets else np.zeros(0, np.int64)
    return np.union1d(index, targets)
