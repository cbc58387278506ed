r"""Your own event log: CSV, TSV or Parquet files of (user, item, time[, weight]) events.

`load_events` reads one file or a glob through pyarrow's dataset reader, in
record batches, twice: the first pass counts the user and item ids (their
vocabularies), the second encodes every event into dense ids. Raw ids are
never held for more than one batch; memory is the vocabularies plus 16 bytes
(dense user, dense item, time) per kept event, plus 4 with a weight column.
The next-day split trained in time order does not hold the events at all: its
second pass (`EncodedBatches`) goes to disk, day by day (`day_store`).

Ids may be strings or integers of any size (64-bit ids are read as int64 and
kept as their decimal strings in the vocabulary). Dense ids number the ids by
training count, most frequent first (ties by raw id), so dense item 1 is the
most popular item; ids seen fewer than `min_item_count` / `min_user_count`
times are out of vocabulary and their events are dropped (and counted). An event logged
twice (the same user, item and time) is kept once, the duplicates counted
(`interactions.chronological`, the rule of every loader); the same item at another time
stays.

The vocabularies are saved with the run (`save_vocabularies`) and read back
by evaluation and export (`load_vocabularies`), which encode the log with
them rather than counting again.

Times: integer or float seconds, Arrow timestamps, or ISO-8601 strings
("2024-05-01" or "2024-05-01T12:30:00").

Every malformed input raises `DataError` naming the file, the column and the
value, before anything is written: a missing column, a null id or time, a
time that cannot be read or lies outside int64 seconds, a vocabulary over the memory
budget.
"""

import dataclasses
import glob
import json
import os
import re
import time
from typing import TYPE_CHECKING, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from pipelines.data.interactions import DataError
from pipelines.data.interactions import Interactions
from pipelines.data.interactions import chronological
from pipelines.data.interactions import report_duplicates
from pipelines.data.interactions import shown

if TYPE_CHECKING:  # pyarrow is imported where a log is read.
    import pyarrow

FORMATS = {".csv": "csv", ".tsv": "tsv", ".parquet": "parquet", ".pq": "parquet"}
BATCH_ROWS = 1 << 20
# Bytes a vocabulary entry costs in training: its embedding row (dim float32) and the
# optimizer's slots (Adagrad: one; Adam: two), times this factor for the id strings, the
# lookup tables and the batch buffers around them.
_ENTRY_OVERHEAD = 1.5


@dataclasses.dataclass(frozen=True)
class EventColumns:
    """The log's column names; `weight` empty when the log has none."""

    user: str = "user_id"
    item: str = "item_id"
    time: str = "timestamp"
    weight: str = ""

    def names(self) -> List[str]:
        return [name for name in (self.user, self.item, self.time, self.weight) if name]


class Vocabulary(NamedTuple):
    """Raw ids of dense ids 1..N (as strings) and their training counts."""

    ids: np.ndarray  # [N] object (str)
    counts: np.ndarray  # [N] int64

    def __len__(self) -> int:
        return len(self.ids)


class EventLog(NamedTuple):
    """What `load_events` read: the interactions (raw ids in `user_ids` / `item_ids`), the
    event weights (None without a weight column), which ids ("user", "item") are all
    integers in the log (served as int64), and the counts of events read and dropped."""

    interactions: Interactions
    weights: Optional[np.ndarray]
    integer_ids: Tuple[str, ...]
    stats: Dict[str, float]


def event_files(pattern: str) -> List[str]:
    """The files of `pattern` (a file, a directory of files, or a glob), sorted.

    Raises:
      FileNotFoundError: nothing matches.
      DataError: a file of a format other than CSV, TSV or Parquet (.gz allowed for text).
    """
    if os.path.isdir(pattern):
        pattern = os.path.join(pattern, "*")
    files = sorted(path for path in glob.glob(pattern) if os.path.isfile(path))
    if not files:
        raise FileNotFoundError(
            f"--data_path={pattern!r} matches no event log file (expected "
            "a CSV, TSV or Parquet file, a directory of them, or a glob)."
        )
    formats = {file_format(path) for path in files}
    if len(formats) > 1:
        raise DataError(
            pattern,
            None,
            f"mixes formats ({', '.join(sorted(formats))}); give files of one format.",
        )
    return files


def file_format(path: str) -> str:
    """ "csv", "tsv" or "parquet", from the file's extension (before any .gz)."""
    name = path[:-3] if path.endswith(".gz") else path
    extension = os.path.splitext(name)[1].lower()
    if extension not in FORMATS:
        raise DataError(
            path,
            None,
            f"has extension {extension or '(none)'!r}; an event log "
            f"is {', '.join(sorted(FORMATS))} (text formats may be .gz).",
        )
    return FORMATS[extension]


def _batches(
    files: Sequence[str],
    columns: EventColumns,
    batch_rows: int = BATCH_ROWS,
    only: Optional[Sequence[str]] = None,
) -> Iterator[Tuple[str, "pyarrow.RecordBatch"]]:
    """(file, record batch of the log's columns, or of `only`), file after file, in file
    order. Id columns of text files are read as strings (so a column of digits and one of
    names read alike)."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.csv as pa_csv  # pylint: disable=import-outside-toplevel
    import pyarrow.dataset as ds  # pylint: disable=import-outside-toplevel

    kind = file_format(files[0])
    if kind == "parquet":
        file_kind = ds.ParquetFileFormat()
    else:
        file_kind = ds.CsvFileFormat(
            parse_options=pa_csv.ParseOptions(delimiter="\t" if kind == "tsv" else ","),
            convert_options=pa_csv.ConvertOptions(
                column_types={columns.user: pa.string(), columns.item: pa.string()},
                strings_can_be_null=True,
            ),
            read_options=pa_csv.ReadOptions(block_size=1 << 24),
        )
    wanted = list(only) if only else columns.names()
    for path in files:
        try:
            dataset = ds.dataset(path, format=file_kind)
            missing = [name for name in wanted if name not in dataset.schema.names]
            if missing:
                raise DataError(
                    path,
                    None,
                    f"has no column {', '.join(map(repr, missing))} "
                    f"(its columns: {', '.join(dataset.schema.names)}); name the "
                    "columns with --user_column, --item_column, --time_column "
                    "and --weight_column.",
                )
            for batch in dataset.to_batches(columns=wanted, batch_size=batch_rows):
                if batch.num_rows:
                    yield path, batch
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as error:
            if isinstance(error, FileNotFoundError):
                raise
            raise DataError(path, None, f"cannot be read as {kind} ({error}).") from None


def _no_nulls(path: str, batch, name: str, offset: int) -> None:
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    column = batch.column(name)
    if column.null_count:
        row = int(pc.indices_nonzero(pc.is_null(column))[0].as_py())
        raise DataError(
            path,
            None,
            f"column {name!r} is empty (null) in data row "
            f"{offset + row + 1}; every event needs a user, an item and a time.",
        )


def _ids(batch, name: str):
    """The id column as strings (integer ids as their decimal form), and whether it holds
    int64 integers (an unsigned id at or above 2^63 is kept as its string)."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    column = batch.column(name)
    if pa.types.is_integer(column.type):
        largest = pc.max(column).as_py() if len(column) else 0
        return column.cast(pa.string()), largest is None or largest <= _INT64_MAX
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.cast(pa.string()), False
    raise DataError("", None, f"column {name!r} holds {column.type}; ids are strings or integers.")


_INTEGER = re.compile(r"-?[0-9]{1,19}")
_INT64_MAX = 2**63 - 1


def _all_int64(ids) -> bool:
    """Whether every string of `ids` is a decimal int64 (ASCII digits, in range)."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    if not pc.all(pc.match_substring_regex(ids, r"^-?[0-9]{1,19}$")).as_py():
        return False
    try:
        ids.cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False  # 19 digits past 2^63 - 1.
    return True


def _out_of_range(path: str, name: str, offset: int, row: int, value) -> DataError:
    return DataError(
        path,
        None,
        f"column {name!r} holds {shown(value)} in data row "
        f"{offset + row + 1}, outside int64 seconds [-2^63, 2^63); times are "
        "seconds, timestamps or ISO-8601 strings.",
    )


def _seconds(path: str, batch, name: str, offset: int) -> np.ndarray:
    """The time column as int64 seconds."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    column = batch.column(name)
    if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
        values = column.to_numpy(zero_copy_only=False)
        if pa.types.is_floating(column.type) and not np.isfinite(values).all():
            row = int(np.flatnonzero(~np.isfinite(values))[0])
            raise DataError(
                path,
                None,
                f"column {name!r} holds {values[row]} in data row "
                f"{offset + row + 1}; times are finite seconds.",
            )
        if pa.types.is_floating(column.type):
            outside = (values >= 2.0**63) | (values < -(2.0**63))
        else:  # Only uint64 goes past int64.
            outside = values > _INT64_MAX if values.dtype == np.uint64 else np.zeros(0, bool)
        if outside.any():
            row = int(np.flatnonzero(outside)[0])
            raise _out_of_range(path, name, offset, row, values[row])
        return values.astype(np.int64)
    if pa.types.is_timestamp(column.type) or pa.types.is_date(column.type):
        # Whole seconds (finer units truncated); nothing overflows going coarser.
        return (
            column.cast(pa.timestamp("s"), safe=False)
            .cast(pa.int64())
            .to_numpy(zero_copy_only=False)
        )
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        try:
            return column.cast(pa.timestamp("s")).cast(pa.int64()).to_numpy(zero_copy_only=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        numeric = pc.match_substring_regex(column, r"^-?[0-9]+$")
        if pc.all(numeric).as_py():
            try:
                return column.cast(pa.int64()).to_numpy(zero_copy_only=False)
            except pa.ArrowInvalid:  # A number past int64: name the first.
                for row, value in enumerate(column.to_pylist()):
                    if not _INTEGER.fullmatch(value) or not (-(2**63) <= int(value) <= _INT64_MAX):
                        raise _out_of_range(path, name, offset, row, value) from None
                raise
        for row, value in enumerate(column.to_pylist()):
            try:
                pa.array([value]).cast(pa.timestamp("s"))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                if not _INTEGER.fullmatch(value):
                    raise DataError(
                        path,
                        None,
                        f"cannot read the time {shown(value)} in "
                        f"column {name!r}, data row {offset + row + 1} (expected "
                        "seconds or an ISO-8601 date or time).",
                    ) from None
    raise DataError(
        path,
        None,
        f"column {name!r} holds {column.type}; times are seconds, timestamps or ISO-8601 strings.",
    )


def _merge_counts(parts: List) -> "pyarrow.Table":
    """One (id, count) table from per-batch value counts."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel

    table = pa.concat_tables(parts)
    return table.group_by("id").aggregate([("count", "sum")]).rename_columns(["id", "count"])


def time_span(
    files: Sequence[str], columns: EventColumns, batch_rows: int = BATCH_ROWS
) -> Tuple[int, int]:
    """(first, last) time of the log, in seconds (reads the time column; checks it)."""
    first, last = None, None
    offsets: Dict[str, int] = {}
    for path, batch in _batches(files, columns, batch_rows, only=[columns.time]):
        offset = offsets.get(path, 0)
        offsets[path] = offset + batch.num_rows
        _no_nulls(path, batch, columns.time, offset)
        seconds = _seconds(path, batch, columns.time, offset)
        first = seconds.min() if first is None else min(first, seconds.min())
        last = seconds.max() if last is None else max(last, seconds.max())
    if first is None:
        raise DataError(", ".join(files), None, "the log holds no events.")
    assert last is not None  # Set with `first`.
    return int(first), int(last)


def count_ids(
    files: Sequence[str],
    columns: EventColumns,
    max_entries: Optional[int] = None,
    batch_rows: int = BATCH_ROWS,
    count_before: Optional[int] = None,
) -> Dict[str, "pyarrow.Table"]:
    """{"user", "item": (id, count) tables} over the log (the events before time
    `count_before` only, when given); also checks every batch (columns, nulls, times).
    `max_entries`: the most distinct ids (users plus items) allowed; a log with more raises
    DataError as soon as the count passes it."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    parts: Dict[str, List] = {"user": [], "item": []}
    offsets: Dict[str, int] = {}
    pending = 0
    for path, batch in _batches(files, columns, batch_rows):
        offset = offsets.get(path, 0)
        offsets[path] = offset + batch.num_rows
        for name in (columns.user, columns.item, columns.time):
            _no_nulls(path, batch, name, offset)
        seconds = _seconds(path, batch, columns.time, offset)
        for kind, name in (("user", columns.user), ("item", columns.item)):
            try:
                ids = _ids(batch, name)[0]
            except DataError as error:
                raise DataError(path, None, str(error).lstrip(": ")) from None
            if count_before is not None:
                ids = ids.filter(pa.array(seconds < count_before))
            counted = pc.value_counts(ids).flatten()
            parts[kind].append(pa.table({"id": counted[0], "count": counted[1]}))
        pending += batch.num_rows
        if pending >= 8 * batch_rows:  # Keep the partial counts near the vocabulary's size.
            parts = {kind: [_merge_counts(tables)] for kind, tables in parts.items()}
            pending = 0
            _check_budget(files, parts, max_entries)
    if not offsets:
        raise DataError(", ".join(files), None, "the log holds no events.")
    parts = {kind: [_merge_counts(tables)] for kind, tables in parts.items()}
    _check_budget(files, parts, max_entries)
    return {kind: tables[0] for kind, tables in parts.items()}


def source_name(files: Sequence[str]) -> str:
    """The log's files, as an error names them: the first, and how many more."""
    return files[0] if len(files) == 1 else f"{files[0]} (and {len(files) - 1} more files)"


def _check_budget(files, parts, max_entries) -> None:
    if max_entries is None:
        return
    entries = sum(tables[0].num_rows for tables in parts.values())
    if entries > max_entries:
        raise DataError(
            source_name(files),
            None,
            f"holds more than {entries:,} distinct users and items, over the "
            f"{max_entries:,} the memory budget (--max_vocabulary_mb) allows; raise "
            "--min_item_count / --min_user_count or the budget.",
        )


def entries_in_budget(budget_mb: float, dim: int, slots: int = 2) -> int:
    """How many vocabulary entries (users plus items) fit `budget_mb` of training memory: an
    embedding row of `dim` float32 and `slots` optimizer slots each, with overhead."""
    return int(budget_mb * 2**20 / (4 * dim * (1 + slots) * _ENTRY_OVERHEAD))


def vocabulary(counts: "pyarrow.Table", min_count: int) -> Vocabulary:
    """The ids seen at least `min_count` times, most frequent first (ties by id)."""
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    kept = counts.filter(pc.greater_equal(counts["count"], min_count))
    kept = kept.sort_by([("count", "descending"), ("id", "ascending")])
    return Vocabulary(
        np.asarray(kept["id"].to_pylist(), dtype=object), kept["count"].to_numpy().astype(np.int64)
    )


CATALOG_TEXT = (".txt", ".txt.gz")


def read_catalog(
    path: str, column: str = "item_id", batch_rows: int = BATCH_ROWS
) -> "pyarrow.Array":
    """The distinct item ids of the catalog file `path` (--item_catalog), as strings, sorted:
    a text file (.txt, .txt.gz) of one id per line (empty lines skipped), or a CSV, TSV or
    Parquet file whose `column` holds them (integer ids as their decimal strings, as the
    log's).

    Raises:
      FileNotFoundError: no file at `path`.
      DataError: an empty catalog, a null id, no `column`, or a file that cannot be read.
    """
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel
    import pyarrow.csv as pa_csv  # pylint: disable=import-outside-toplevel

    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"--item_catalog={path!r} is not a file (expected a .txt file of one item id per "
            "line, or a CSV, TSV or Parquet file with the item column)."
        )
    parts = []
    if path.endswith(CATALOG_TEXT) and os.path.getsize(path) == 0:
        raise DataError(path, None, "--item_catalog holds no item id.")
    if path.endswith(CATALOG_TEXT):
        try:
            table = pa_csv.read_csv(
                path,
                read_options=pa_csv.ReadOptions(column_names=[column]),
                parse_options=pa_csv.ParseOptions(delimiter="\t", quote_char=False),
                convert_options=pa_csv.ConvertOptions(column_types={column: pa.string()}),
            )
        except (pa.ArrowInvalid, OSError) as error:
            raise DataError(
                path, None, f"cannot be read as one item id a line ({error})."
            ) from None
        parts = [table.column(column).combine_chunks()]
    else:
        columns = EventColumns(user=column, item=column, time="")
        offset = 0
        for _, batch in _batches([path], columns, batch_rows, only=[column]):
            _no_nulls(path, batch, column, offset)
            offset += batch.num_rows
            parts.append(_ids(batch, column)[0])
    ids = pc.unique(pa.concat_arrays(parts)) if parts else pa.array([], pa.string())
    if not len(ids):
        raise DataError(path, None, "--item_catalog holds no item id.")
    return ids.take(pc.array_sort_indices(ids))


def with_catalog(vocab: Vocabulary, catalog: "pyarrow.Array") -> Tuple[Vocabulary, Dict[str, int]]:
    """The item vocabulary `vocab` extended by every id of `catalog` (`read_catalog`) it
    lacks, after its own ids, in id order, with count 0: so that the item table, the index
    and the exports cover every servable item, those without a training event included.
    Returns it with {"catalog_items", "catalog_items_added" (the ids added),
    "log_items_not_in_catalog" (kept: they have training events)}."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    known = pa.array(list(vocab.ids), pa.string())
    added = catalog.filter(pc.invert(pc.is_in(catalog, value_set=known)))
    missing = len(known) - int(pc.sum(pc.is_in(known, value_set=catalog)).as_py() or 0)
    extended = Vocabulary(
        np.concatenate([vocab.ids, np.asarray(added.to_pylist(), dtype=object)]),
        np.concatenate([vocab.counts, np.zeros(len(added), np.int64)]),
    )
    return extended, {
        "catalog_items": len(catalog),
        "catalog_items_added": len(added),
        "log_items_not_in_catalog": missing,
    }


def log_vocabularies(
    files: Sequence[str],
    columns: EventColumns,
    min_item_count: int = 1,
    min_user_count: int = 1,
    vocabularies: Optional[Dict[str, Vocabulary]] = None,
    max_entries: Optional[int] = None,
    batch_rows: int = BATCH_ROWS,
    count_before: Optional[int] = None,
) -> Dict[str, Vocabulary]:
    """{"user", "item": Vocabulary} of the log: `vocabularies` when given (a saved run's),
    else counted (arguments as in `load_events`). An empty vocabulary raises DataError."""
    for name, value in (("min_item_count", min_item_count), ("min_user_count", min_user_count)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"--{name} must be a positive integer; received {name}={value!r}.")
    if vocabularies is None:
        counted = count_ids(files, columns, max_entries, batch_rows, count_before)
        vocabularies = {
            "user": vocabulary(counted["user"], min_user_count),
            "item": vocabulary(counted["item"], min_item_count),
        }
    for kind, vocab in vocabularies.items():
        if not len(vocab):
            raise DataError(
                source_name(files),
                None,
                f"no {kind} is seen --min_{kind}_count "
                "times or more; the vocabulary would be empty.",
            )
    return vocabularies


class Encoded(NamedTuple):
    """One record batch of the log in dense ids, the events out of vocabulary left out."""

    user: np.ndarray  # [n] int32, 1-based
    item: np.ndarray  # [n] int32, 1-based
    time: np.ndarray  # [n] int64 seconds
    weight: Optional[np.ndarray]  # [n] float32 (a log with a weight column), else None


class EncodedBatches:
    """The log's events in dense ids, batch after batch in file order (iterate once).

    Every batch is checked (nulls, ids, times, weights: `DataError` naming the file, the
    column and the row). After the iteration, `read` holds the events read and
    `integer_ids()` the id columns whose every id is an int64 integer.
    """

    def __init__(
        self,
        files: Sequence[str],
        columns: EventColumns,
        vocabularies: Dict[str, Vocabulary],
        batch_rows: int = BATCH_ROWS,
    ):
        import pyarrow as pa  # pylint: disable=import-outside-toplevel

        self.files, self.columns, self.batch_rows = files, columns, batch_rows
        self.value_sets = {
            kind: pa.array(list(vocab.ids), pa.string()) for kind, vocab in vocabularies.items()
        }
        self.integer = {"user": True, "item": True}
        self.read = 0

    def integer_ids(self) -> Tuple[str, ...]:
        return tuple(kind for kind in ("user", "item") if self.integer[kind])

    def __iter__(self) -> Iterator[Encoded]:
        import pyarrow as pa  # pylint: disable=import-outside-toplevel
        import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

        columns = self.columns
        offsets: Dict[str, int] = {}
        for path, batch in _batches(self.files, columns, self.batch_rows):
            offset = offsets.get(path, 0)
            offsets[path] = offset + batch.num_rows
            for name in (columns.user, columns.item, columns.time):
                _no_nulls(path, batch, name, offset)
            self.read += batch.num_rows
            dense = {}
            for kind, name in (("user", columns.user), ("item", columns.item)):
                ids, is_integer = _ids(batch, name)
                if self.integer[kind] and not is_integer:  # A regex: only while needed.
                    self.integer[kind] = _all_int64(ids)
                dense[kind] = pc.index_in(ids, value_set=self.value_sets[kind])
            keep = pc.and_(pc.is_valid(dense["user"]), pc.is_valid(dense["item"]))
            keep = keep.to_numpy(zero_copy_only=False)
            weight = None
            if columns.weight:
                weight = batch.column(columns.weight)
                if not (pa.types.is_integer(weight.type) or pa.types.is_floating(weight.type)):
                    raise DataError(
                        path,
                        None,
                        f"weight column {columns.weight!r} holds "
                        f"{weight.type}; weights are numbers.",
                    )
                weight = weight.to_numpy(zero_copy_only=False).astype(np.float32)
                bad = ~np.isfinite(weight) | (weight < 0)
                if bad.any():
                    row = int(np.flatnonzero(bad)[0])
                    raise DataError(
                        path,
                        None,
                        f"weight column {columns.weight!r} holds "
                        f"{weight[row]} in data row {offset + row + 1}; weights "
                        "are finite and >= 0.",
                    )
                weight = weight[keep]
            yield Encoded(
                dense["user"].to_numpy(zero_copy_only=False)[keep].astype(np.int32) + 1,
                dense["item"].to_numpy(zero_copy_only=False)[keep].astype(np.int32) + 1,
                _seconds(path, batch, columns.time, offset)[keep],
                weight,
            )


def load_events(
    pattern: str,
    columns: EventColumns = EventColumns(),
    min_item_count: int = 1,
    min_user_count: int = 1,
    vocabularies: Optional[Dict[str, Vocabulary]] = None,
    max_entries: Optional[int] = None,
    batch_rows: int = BATCH_ROWS,
    count_before: Optional[int] = None,
) -> EventLog:
    """Reads an event log into dense `Interactions` (see the module's docstring).

    Args:
      pattern: a file, a directory or a glob of CSV / TSV / Parquet files.
      columns: the column names.
      min_item_count, min_user_count: ids seen fewer times are out of vocabulary.
      vocabularies: {"user", "item": Vocabulary} to encode with (a saved run's), instead of
        counting the log.
      max_entries: the most distinct users plus items (`entries_in_budget`).
      batch_rows: rows per record batch read.
      count_before: count the vocabularies on the events before this time only (the
        training days); the others are encoded with them.
    """
    files = event_files(pattern)
    started = time.time()
    vocabularies = log_vocabularies(
        files,
        columns,
        min_item_count,
        min_user_count,
        vocabularies,
        max_entries,
        batch_rows,
        count_before,
    )
    counted_at = time.time()
    encoded = EncodedBatches(files, columns, vocabularies, batch_rows)
    users, items, times, weights = [], [], [], []
    for batch in encoded:
        users.append(batch.user)
        items.append(batch.item)
        times.append(batch.time)
        if batch.weight is not None:
            weights.append(batch.weight)
    user, item, when = (np.concatenate(parts) for parts in (users, items, times))
    if len(user) == 0:
        raise DataError(pattern, None, "no event has both its user and its item in the vocabulary.")
    order, duplicates = chronological(user, item, when)
    interactions = Interactions(
        user[order].astype(np.int64),
        item[order].astype(np.int64),
        when[order],
        len(vocabularies["user"]),
        len(vocabularies["item"]),
        np.concatenate([[""], vocabularies["user"].ids]).astype(object),
        np.concatenate([[""], vocabularies["item"].ids]).astype(object),
        duplicates,
    )
    report_duplicates(pattern, interactions)
    weight = np.concatenate(weights)[order] if columns.weight else None
    stats = {
        "events_read": int(encoded.read),
        "events_kept": int(len(order)),
        "events_dropped_out_of_vocabulary": int(encoded.read - len(user)),
        "events_dropped_duplicate": duplicates,
        "files": len(files),
        "seconds_vocabulary": round(counted_at - started, 1),
        "seconds_encode": round(time.time() - counted_at, 1),
    }
    return EventLog(interactions, weight, encoded.integer_ids(), stats)


VOCABULARY_FILES = {"user": "users.parquet", "item": "items.parquet"}


def save_vocabularies(directory: str, data, facts: Dict, settings: Dict) -> None:
    """Writes the item and user vocabularies (id, count; row i is dense id i + 1) and
    vocabulary.json (`facts`: which ids are integers and the read statistics; `settings`).

    `data`: the log read (`Interactions`, or `day_store.LogSummary`)."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

    os.makedirs(directory, exist_ok=True)
    for kind, raw, count in (
        ("user", data.user_ids, data.user_counts()),
        ("item", data.item_ids, data.counts()),
    ):
        table = pa.table(
            {"id": pa.array(list(raw[1:]), pa.string()), "count": pa.array(count[1:], pa.int64())}
        )
        temporary = os.path.join(directory, "." + VOCABULARY_FILES[kind])
        pq.write_table(table, temporary)
        os.replace(temporary, os.path.join(directory, VOCABULARY_FILES[kind]))
    with open(os.path.join(directory, "vocabulary.json"), "w") as f:
        json.dump({**facts, **settings}, f, indent=1)


def has_vocabularies(directory: str) -> bool:
    return all(
        os.path.exists(os.path.join(directory, name))
        for name in (*VOCABULARY_FILES.values(), "vocabulary.json")
    )


def load_vocabularies(directory: str) -> Dict[str, Vocabulary]:
    """The vocabularies `save_vocabularies` wrote."""
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

    result = {}
    for kind, name in VOCABULARY_FILES.items():
        table = pq.read_table(os.path.join(directory, name))
        result[kind] = Vocabulary(
            np.asarray(table["id"].to_pylist(), dtype=object),
            table["count"].to_numpy().astype(np.int64),
        )
    return result
