"""The one in-memory form every loader returns: chronological (user, item, time) interactions."""

from typing import List, NamedTuple, Optional, Tuple

import numpy as np


def shown(value, limit: int = 40) -> str:
    """`value` quoted for an error message, cut to `limit` characters (a 20-million-digit
    id would flood it)."""
    text = str(value)
    return repr(text) if len(text) <= limit else (f"{text[:limit]!r}... ({len(text):,} characters)")


class DataError(ValueError):
    """A malformed input file; the message names the file and the line."""

    def __init__(self, path: str, line_number: Optional[int], message: str):
        where = f"{path}, line {line_number}" if line_number is not None else path
        super().__init__(f"{where}: {message}")
        self.path, self.line_number = path, line_number


class Interactions(NamedTuple):
    """Interactions sorted by user, then time (ties keep file order), each event once.

    Exact duplicate events (the same user, item and time: a line written twice) are dropped
    by `chronological`, the first kept, and counted (the attribute below); the same item
    again at another time (repeat consumption) stays.

    Item ids are dense in [1, num_items] (0 is padding); user ids dense in
    [1, num_users]. `item_ids` / `user_ids` map dense ids back to the raw ids
    of the source (index 0 unused).

    Attributes:
      user: [n] int64 dense user ids.
      item: [n] int64 dense item ids.
      timestamp: [n] int64 times (seconds, or positions when the format has none).
      num_users, num_items: vocabulary sizes (largest dense id).
      user_ids, item_ids: [num + 1] raw ids of the source, as strings.
      duplicates: exact duplicate events dropped while loading.
    """

    user: np.ndarray
    item: np.ndarray
    timestamp: np.ndarray
    num_users: int
    num_items: int
    user_ids: np.ndarray
    item_ids: np.ndarray
    duplicates: int = 0

    def sequences(self) -> List[np.ndarray]:
        """Per dense user id (index 0 empty), that user's items in time order."""
        bounds = np.searchsorted(self.user, np.arange(self.num_users + 2))
        return [self.item[bounds[u] : bounds[u + 1]] for u in range(self.num_users + 1)]

    def counts(self) -> np.ndarray:
        """[num_items + 1] interactions per item (index 0: padding, always 0)."""
        return np.bincount(self.item, minlength=self.num_items + 1)

    def user_counts(self) -> np.ndarray:
        """[num_users + 1] interactions per user (index 0: always 0)."""
        return np.bincount(self.user, minlength=self.num_users + 1)

    def time_span(self) -> Tuple[int, int]:
        """(first, last) time."""
        return int(self.timestamp.min()), int(self.timestamp.max())


# With `keep_ids`, a file's largest id may exceed its number of distinct ids by this factor
# (ids with no interaction cost an unused embedding row each); beyond it the file is refused,
# so that one stray id cannot make the catalog, the run's time and its memory grow with it.
MAX_ID_SPARSITY = 2.0


def sparse_ids(raw: np.ndarray) -> Optional[Tuple[int, int]]:
    """(largest id, number of distinct ids) of positive integer ids when the largest
    exceeds MAX_ID_SPARSITY times the number of distinct ids (else None)."""
    largest, distinct = int(raw.max()), len(np.unique(raw))
    return (largest, distinct) if largest > MAX_ID_SPARSITY * distinct else None


def _dense(raw: np.ndarray, keep_ids: bool):
    """Dense 1-based ids of raw ids, and the raw id of each dense id (index 0 unused).

    With `keep_ids`, positive integer raw ids are kept as they are (SASRec files are
    already dense and 1-based; the loader refuses ids that are not, see `sparse_ids`);
    otherwise ids are numbered in sorted order.
    """
    if keep_ids:
        ids = raw.astype(np.int64)
        vocabulary = np.array([""] + [str(i) for i in range(1, int(ids.max()) + 1)])
        return ids, vocabulary, int(ids.max())
    values, dense = np.unique(raw, return_inverse=True)
    return (dense + 1).astype(np.int64), np.concatenate([[""], values.astype(str)]), len(values)


def chronological(
    user: np.ndarray, item: np.ndarray, timestamp: np.ndarray
) -> Tuple[np.ndarray, int]:
    """The order of `Interactions`, and the rule for duplicates, for every loader.

    Events sorted by user, then time, ties in file order, with each exact duplicate (the
    same user, item and time as an earlier event of the arrays) left out: the first of
    them is kept. Repeat consumption (the same item at another time) stays.

    Args:
      user, item: [n] ids (dense or raw; compared for equality only).
      timestamp: [n] int64 times.

    Returns:
      ([kept] indices into the arrays, in that order; the number of duplicates left out).
    """
    order = np.lexsort((np.arange(len(user)), timestamp, user))
    sorted_user, sorted_time = user[order], timestamp[order]
    same_time = (sorted_user[1:] == sorted_user[:-1]) & (sorted_time[1:] == sorted_time[:-1])
    del sorted_user, sorted_time
    if not same_time.any():  # Distinct (user, time) for every event: nothing to compare.
        return order, 0
    # Only events that share their user and time with another can be duplicates.
    tied = np.zeros(len(order), bool)
    tied[1:] |= same_time
    tied[:-1] |= same_time
    candidates = np.sort(order[tied])  # Positions, in file order.
    by_event = candidates[
        np.lexsort((candidates, item[candidates], timestamp[candidates], user[candidates]))
    ]
    repeat = np.ones(len(by_event), bool)
    repeat[0] = False
    for column in (user, item, timestamp):
        values = column[by_event]
        repeat[1:] &= values[1:] == values[:-1]
    if not repeat.any():
        return order, 0
    dropped = np.zeros(len(user), bool)
    dropped[by_event[repeat]] = True
    return order[~dropped[order]], int(repeat.sum())


def report_duplicates(source: str, data: Interactions) -> None:
    """Prints how many exact duplicate events the load of `source` dropped (if any)."""
    if data.duplicates:
        print(
            f"{source}: dropped {data.duplicates:,} duplicate events (the same user, item "
            f"and time as an earlier event); kept {len(data.user):,}.",
            flush=True,
        )


def from_arrays(
    user, item, timestamp=None, keep_ids: bool = False, source: Optional[str] = None
) -> Interactions:
    """Builds sorted Interactions from raw parallel arrays (file order breaks time ties;
    exact duplicate events dropped and counted, see `chronological`).

    Args:
      user, item: raw ids (ints or strings).
      timestamp: int64 times; None uses the order within each user.
      keep_ids: keep positive integer ids as dense ids (see `_dense`).
      source: the file the arrays come from, named in a printed line when duplicates
        are dropped; None prints nothing.
    """
    user, item = np.asarray(user), np.asarray(item)
    if len(user) == 0:
        raise ValueError("No interactions.")
    if timestamp is None:
        timestamp = np.arange(len(user), dtype=np.int64)
    timestamp = np.asarray(timestamp, np.int64)
    user_dense, user_ids, num_users = _dense(user, keep_ids)
    item_dense, item_ids, num_items = _dense(item, keep_ids)
    order, duplicates = chronological(user_dense, item_dense, timestamp)
    data = Interactions(
        user_dense[order],
        item_dense[order],
        timestamp[order],
        num_users,
        num_items,
        user_ids,
        item_ids,
        duplicates,
    )
    if source is not None:
        report_duplicates(source, data)
    return data
