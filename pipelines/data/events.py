r"""Your own event log: CSV, TSV or Parquet files of (user, item, time[, weight]) events.

`load_events` reads one file or a glob through pyarrow's dataset reader, in
record batches, twice: the first pass counts the user and item ids (their
vocabularies; an event logged more than once counted once, `count_ids`: a log with repeated
events is read once more, and the repeats' raw ids held), the second encodes every event
into dense ids. Other raw ids are never held for more than one batch; memory is the
vocabularies plus 16 bytes (dense user, dense item, time) per kept event, plus 4 with a
weight column.
The next-day split trained in time order does not hold the events at all: its
second pass (`EncodedBatches`) goes to disk, day by day (`day_store`).

Ids may be strings or integers of any size; the vocabulary keeps every id as the string
the log writes (an integer column's ids as their decimal strings). How the ids are typed is
decided once, on the first read, for the log, the catalog and the export together
(`IdTypes`): a column is integer (served as int64) when every id of the log is an int64
written as int64 prints it, digits without a sign or leading zeros ("0", "7",
"9223372036854775807"); else strings, each id as written ("007" is the string "007", not
7; "-5" the string "-5": a request's negative int64 id is padding). A catalog beside an
integer log must hold such ids too (`read_catalog`). Dense ids number the ids by
training count, most frequent first (ties by raw id), so dense item 1 is the
most popular item; ids seen fewer than `min_item_count` / `min_user_count`
times are out of vocabulary and their events are dropped (and counted). An event logged
twice (the same user, item and time) is kept once, the duplicates counted
(`interactions.chronological`, the rule of every loader); the same item at another time
stays.

The vocabularies are saved with the run (`save_vocabularies`) and read back
by evaluation and export (`load_vocabularies`), which encode the log with
them rather than counting again.

Times: numbers since 1970 in seconds, milliseconds, microseconds or nanoseconds
(`EventColumns.time_unit`; "auto" reads each number's unit from its size and refuses a
time before 1990 or after next year, or a log over 20 years), Arrow timestamps and dates,
or ISO-8601 strings ("2024-05-01", "2024-05-01T12:30:00", "2024-05-01T12:30:00Z",
"2024-05-01T14:30:00+02:00": an offset is read to UTC; a time without one as written), as
text or typed, in CSV, TSV and Parquet alike.

Ids: surrounding whitespace is stripped ("u_1 " is "u_1"), and counted, unless
`EventColumns.keep_id_whitespace`; an empty or null id, or one holding a line break (the
export's vocabulary files hold one id a line), is refused with its row.

Every malformed input raises `DataError` naming the file, the column and the
value, before anything is written: a missing column, a null id or time, a
time that cannot be read or lies outside int64 seconds, a vocabulary over the memory
budget.
"""

import dataclasses
import datetime
import glob
import json
import os
import re
import time
from typing import (
    TYPE_CHECKING,
    Callable,
    Dict,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
)

import numpy as np

from pipelines.data.interactions import DataError
from pipelines.data.interactions import Interactions
from pipelines.data.interactions import chronological
from pipelines.data.interactions import shown

if TYPE_CHECKING:  # pyarrow is imported where a log is read.
    import pyarrow

FORMATS = {".csv": "csv", ".tsv": "tsv", ".parquet": "parquet", ".pq": "parquet"}
_FILTER_OPS = {"==": lambda field, value: field == value, ">=": lambda field, value: field >= value}
BATCH_ROWS = 1 << 20
# Bytes a vocabulary entry costs in training: its embedding row (dim float32) and the
# optimizer's slots (Adagrad: one; Adam: two), times this factor for the id strings, the
# lookup tables and the batch buffers around them.
_ENTRY_OVERHEAD = 1.5


@dataclasses.dataclass(frozen=True)
class EventColumns:
    """The log's column names; `weight` empty when the log has none. `time_unit`: the unit
    of numeric times (`TIME_UNITS`; "auto": each number's from its size, the log's times
    then checked plausible: see `_seconds`)."""

    user: str = "user_id"
    item: str = "item_id"
    time: str = "timestamp"
    weight: str = ""
    time_unit: str = "auto"
    keep_id_whitespace: bool = False
    # Rows kept, by file: (file name, ((column, op, value), ...)): a file of that name keeps
    # the rows where every clause holds (op "==" or ">="); "*" names every file. A public
    # log's event filter (`pipelines.data.public_logs`: Yambda's Listen+, organic events).
    filters: Tuple[Tuple[str, Tuple[Tuple[str, str, object], ...]], ...] = ()
    # Seconds added to every time once read (so that a log's published test window starts
    # on a day of --day_seconds: Yambda's times count from its start, not from midnight).
    time_shift: int = 0

    def __post_init__(self):
        if self.time_unit not in TIME_UNITS:
            raise ValueError(
                f"time_unit must be one of {', '.join(TIME_UNITS)}; received "
                f"time_unit={self.time_unit!r}."
            )
        for _, clauses in self.filters:
            for column, op, _ in clauses:
                if op not in _FILTER_OPS:
                    raise ValueError(
                        f"a filter's op must be one of {', '.join(_FILTER_OPS)}; received "
                        f"{op!r} on column {column!r}."
                    )

    def names(self) -> List[str]:
        return [name for name in (self.user, self.item, self.time, self.weight) if name]

    def clauses(self, path: str) -> Tuple[Tuple[str, str, object], ...]:
        """The filter clauses of the file at `path` (every clause of its name and of "*")."""
        name = os.path.basename(path)
        return tuple(
            clause for named, clauses in self.filters if named in ("*", name) for clause in clauses
        )

    def kept(self) -> str:
        """ ", the rows its filters keep: ..." (empty without filters), for a message."""
        if not self.filters:
            return ""
        parts = [
            f"{'every file' if name == '*' else name} where "
            + " and ".join(f"{column} {op} {value!r}" for column, op, value in clauses)
            for name, clauses in self.filters
        ]
        return " its filters keep (" + "; ".join(parts) + ")"

    def row_filter(self, path: str):
        """The pyarrow expression of `clauses(path)`, or None without one."""
        import pyarrow.dataset as ds  # pylint: disable=import-outside-toplevel

        expression = None
        for column, op, value in self.clauses(path):
            term = _FILTER_OPS[op](ds.field(column), value)
            expression = term if expression is None else expression & term
        return expression


class Vocabulary(NamedTuple):
    """Raw ids of dense ids 1..N (as strings) and their training counts; `integer`: whether
    the log's ids of this kind are integers, served as int64 (`IdTypes`; else strings)."""

    ids: np.ndarray  # [N] object (str)
    counts: np.ndarray  # [N] int64
    integer: bool = False

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


def event_files(pattern) -> List[str]:
    """The files of `pattern` (a file, a directory of files, or a glob), sorted; a list of
    files (a public log's, `public_logs`) as given.

    Raises:
      DataError: nothing matches, or a file of a format other than CSV, TSV or Parquet
        (.gz allowed for text).
    """
    if not isinstance(pattern, str):
        files = list(pattern)
        for path in files:
            if not os.path.isfile(path):
                raise DataError(path, None, "is not a file.")
        pattern = ", ".join(files)
    else:
        if os.path.isdir(pattern):
            pattern = os.path.join(pattern, "*")
        files = sorted(path for path in glob.glob(pattern) if os.path.isfile(path))
    if not files:
        raise DataError(
            pattern,
            None,
            "matches no event log file (--data_path: a CSV, TSV or Parquet file, a "
            "directory of them, or a glob).",
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
    order. Id and time columns of text files are read as strings (so a column of digits and
    one of names read alike, and every row's time is parsed alike by `_seconds`: pyarrow's
    own guess is made per 16 MB block, and fails on a block that mixes ISO times with and
    without an offset)."""
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
                column_types={
                    columns.user: pa.string(),
                    columns.item: pa.string(),
                    columns.time: pa.string(),
                },
                strings_can_be_null=True,
            ),
            read_options=pa_csv.ReadOptions(block_size=1 << 24),
        )
    wanted = list(only) if only else columns.names()
    for path in files:
        try:
            dataset = ds.dataset(path, format=file_kind)
            needed = wanted + [column for column, _, _ in columns.clauses(path)]
            missing = [name for name in needed if name not in dataset.schema.names]
            if missing:
                raise DataError(
                    path,
                    None,
                    f"has no column {', '.join(map(repr, missing))} "
                    f"(its columns: {', '.join(dataset.schema.names)}); name the "
                    "columns with --user_column, --item_column, --time_column "
                    "and --weight_column.",
                )
            batches = dataset.to_batches(
                columns=wanted, filter=columns.row_filter(path), batch_size=batch_rows
            )
            for batch in batches:
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


def _ids(batch, name: str, path: str = "", offset: int = 0, keep_whitespace: bool = False):
    """(ids, is_integer, stripped): the id column as strings (integer ids as their decimal
    form), whether it is an integer column whose ids are all int64 integers served as such
    (in [0, 2^63): an unsigned id at or above 2^63, or a negative one, is kept as its string;
    False for a column of strings, whose ids `_first_not_integer` types), and how many ids
    lost surrounding whitespace ("u_1 " is "u_1"; none with `keep_whitespace`). An empty id,
    or one holding a line break, raises DataError naming its row."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    column = batch.column(name)
    if pa.types.is_integer(column.type):
        bounds = pc.min_max(column)
        smallest, largest = bounds["min"].as_py(), bounds["max"].as_py()
        served = largest is None or (smallest >= 0 and largest <= _INT64_MAX)
        return column.cast(pa.string()), served, 0
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise DataError(
            path, None, f"column {name!r} holds {column.type}; ids are strings or integers."
        )
    ids, stripped = column.cast(pa.string()), 0
    if not keep_whitespace:
        trimmed = pc.utf8_trim_whitespace(ids)
        stripped = int(pc.sum(pc.not_equal(trimmed, ids)).as_py() or 0)
        ids = trimmed
    bad = _first_bad_id(ids)
    if bad is not None:
        row, spans = bad
        raise DataError(
            path,
            None,
            f"column {name!r} holds the id {shown(column[row].as_py())} in data row "
            f"{offset + row + 1}, which spans lines; an id holds no line break (in a CSV, "
            "a quote left open runs on into the next lines)."
            if spans
            else f"column {name!r} holds the empty id {shown(column[row].as_py())} in data "
            f"row {offset + row + 1}; every event needs a user and an item.",
        )
    return ids, False, stripped


def _first_bad_id(ids) -> Optional[Tuple[int, bool]]:
    """(position, whether it spans lines) of the first id of `ids` (strings, no nulls) that
    is empty, else of the first holding a line break (the export's vocabulary files hold one
    id a line); None when every id is fine."""
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    for spans, bad in (
        (False, pc.equal(pc.binary_length(ids), 0)),
        (True, pc.or_(pc.match_substring(ids, "\n"), pc.match_substring(ids, "\r"))),
    ):
        if pc.any(bad).as_py():
            return int(pc.indices_nonzero(bad)[0].as_py()), spans
    return None


_INTEGER = re.compile(r"-?[0-9]{1,19}")
# A decimal number with a point or an exponent (a time written by a spreadsheet or pandas).
_DECIMAL = r"^[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$"
_INT64_MAX = 2**63 - 1


# An id served as int64: as int64 prints a value in [0, 2^63), no sign or leading zeros.
_SERVED_INTEGER = r"^(0|[1-9][0-9]{0,18})$"


def _first_not_integer(ids) -> Optional[int]:
    """The position of the first string of `ids` (no nulls) that is not an int64 id as it
    prints (`_SERVED_INTEGER`, at most 2^63 - 1), or None when every one is."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    ok = pc.match_substring_regex(ids, _SERVED_INTEGER)
    past = pc.and_(  # 19 digits past 2^63 - 1 (strings of one length compare as numbers).
        pc.equal(pc.binary_length(ids), 19), pc.greater(ids, pa.scalar(str(_INT64_MAX)))
    )
    ok = pc.and_(ok, pc.invert(past))
    if not len(ids) or pc.all(ok).as_py():  # pc.all of nothing is null, not True.
        return None
    return int(pc.index(ok, False).as_py())


class IdTypes:
    """How a log's user and item ids are typed, decided on its first read (`count_ids`),
    for the log, its catalog and the export together: "item" is integer (served as int64)
    when every item id of the log is an int64 as it prints (`_SERVED_INTEGER`: "7", not
    "007", "-7", "7.0" or "x7"); else strings, each id as written. `example[kind]` is
    (file, data row, id) of the first id that made a kind strings."""

    def __init__(self):
        self.integer = {"user": True, "item": True}
        self.example: Dict[str, Optional[Tuple[str, int, str]]] = {"user": None, "item": None}

    def see(self, kind: str, ids, is_integer: bool, path: str, offset: int) -> None:
        """Takes a batch's ids of `kind` (`_ids`'s strings and is_integer) into account."""
        if not self.integer[kind] or is_integer:
            return
        row = _first_not_integer(ids)
        if row is not None:
            self.integer[kind] = False
            self.example[kind] = (path, offset + row + 1, ids[row].as_py())

    def describe(self) -> str:
        """One line: each kind's type, and for strings the id that made them so."""
        parts, numeric = [], False
        for kind in ("user", "item"):
            example = self.example[kind]
            if example is None:
                parts.append(f"{kind} ids are integers (served as int64)")
                continue
            path, row, value = example
            numeric |= bool(re.fullmatch(r"[-+]?[0-9.]+", value))  # Digits, not as int64 prints.
            parts.append(f"{kind} ids are strings ({shown(value)} in {path} data row {row})")
        line = "ids: " + "; ".join(parts) + "."
        if numeric:
            line += (
                " An id is an integer only as int64 prints it, without a sign, leading zeros "
                "or a point; strings are served as written ('007' is not '7')."
            )
        return line


def _out_of_range(path: str, name: str, offset: int, row: int, value) -> DataError:
    return DataError(
        path,
        None,
        f"column {name!r} holds {shown(value)} in data row "
        f"{offset + row + 1}, outside int64 seconds [-2^63, 2^63); times are "
        "seconds, timestamps or ISO-8601 strings.",
    )


# The units of --time_unit; "auto" reads each number's unit from its size (`_unit_divisors`).
TIME_UNITS = ("auto", "s", "ms", "us", "ns")
_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_UNIT_NAMES = {1: "seconds", 10**3: "milliseconds", 10**6: "microseconds", 10**9: "nanoseconds"}
# With --time_unit=auto a log's times must lie in [1990-01-01, the end of next year] and span
# at most 20 years: outside, the unit (or the column) is likely misread.
EARLIEST_TIME = 631_152_000  # 1990-01-01T00:00:00Z.
MAX_SPAN_YEARS = 20
_YEAR = 365.25 * 86_400
# A time string that names its offset from UTC after its time of day (12:30Z, 12:30:00+02:00,
# 12:30:00.5-0500); a date's own "-01" is not one.
_OFFSET = r"[0-9]{2}:[0-9]{2}(:[0-9]{2}([.,][0-9]+)?)?([Zz]|[+-][0-9]{2}(:?[0-9]{2})?)$"
# A time of day's fraction of a second (12:30:00.750).
_FRACTION = r"([0-9]{2}:[0-9]{2}:[0-9]{2})[.,][0-9]+"


def latest_time() -> int:
    """The end of next year (UTC), in seconds: the latest time an --time_unit=auto log may
    hold."""
    next_next = datetime.datetime.now(datetime.timezone.utc).year + 2
    return int(datetime.datetime(next_next, 1, 1, tzinfo=datetime.timezone.utc).timestamp()) - 1


def _date(seconds: int) -> str:
    try:
        return datetime.datetime.fromtimestamp(int(seconds), datetime.timezone.utc).strftime(
            "%Y-%m-%d %H:%M:%S UTC"
        )
    except (OverflowError, OSError, ValueError):
        return f"{seconds:,} seconds from 1970"


def _unit_divisors(values: np.ndarray) -> np.ndarray:
    """--time_unit=auto: each number's unit from its size: seconds below 1e11 (the year
    5138), milliseconds below 1e14, microseconds below 1e17, nanoseconds above. Times of
    1990 to 2100 fall in one range in every unit."""
    size = np.abs(values.astype(np.float64))
    return np.where(
        size < 1e11, 1, np.where(size < 1e14, 10**3, np.where(size < 1e17, 10**6, 10**9))
    ).astype(np.int64)


def _check_plausible(path, name, offset, raw, seconds, divisors) -> None:
    """--time_unit=auto: every time in [EARLIEST_TIME, latest_time()]; else DataError naming
    the first row outside, its value as read and what it was read as."""
    latest = latest_time()
    outside = (seconds < EARLIEST_TIME) | (seconds > latest)
    if outside.any():
        row = int(np.flatnonzero(outside)[0])
        unit = _UNIT_NAMES[int(divisors[row])] if divisors is not None else "a date"
        raise DataError(
            path,
            None,
            f"column {name!r} holds {shown(raw[row])} in data row {offset + row + 1}, read as "
            f"{unit}: {_date(seconds[row])}, outside [1990-01-01, {_date(latest)[:10]}] "
            "where --time_unit=auto expects a log's times. Give --time_unit (s, ms, us or "
            "ns) if the numbers are right in that unit, or fix the column.",
        )


def _numbers_to_seconds(path, name, offset, values: np.ndarray, unit: str) -> np.ndarray:
    """Numbers (int or float) of `unit` ("auto": each number's from its size) as int64
    seconds (fractions truncated), checked plausible with "auto"."""
    if unit == "auto":
        divisors = _unit_divisors(values)
        mixed = divisors != divisors[0]
        if mixed.any():
            row = int(np.flatnonzero(mixed)[0])
            raise DataError(
                path,
                None,
                f"column {name!r} holds {shown(values[row])} in data row {offset + row + 1}, "
                f"{_UNIT_NAMES[int(divisors[row])]} by its size, where data row {offset + 1} "
                f"holds {shown(values[0])}, {_UNIT_NAMES[int(divisors[0])]}: a column's "
                "times are of one unit (--time_unit sets it).",
            )
    else:
        divisors = np.full(len(values), _PER_SECOND[unit], np.int64)
    if values.dtype.kind == "f":
        seconds = (values / divisors).astype(np.int64)
    else:
        seconds = values.astype(np.int64) // divisors
        seconds += (values.astype(np.int64) % divisors != 0) & (values < 0)  # Toward zero.
    if unit == "auto":
        _check_plausible(path, name, offset, values, seconds, divisors)
    return seconds


def _iso_seconds(column) -> Optional[np.ndarray]:
    """ISO-8601 strings as int64 seconds: UTC where a value names its offset (Z, +02:00), as
    written where it does not; fractions truncated. None when a value is not one."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    with_offset = pc.match_substring_regex(column, _OFFSET).to_numpy(zero_copy_only=False)
    seconds = np.empty(len(column), np.int64)
    for rows, zone in ((with_offset, "UTC"), (~with_offset, None)):
        if not rows.any():
            continue
        # Fractions of a second dropped first: whole seconds parse over every year, and a
        # value reads alike whatever its neighbours (`_first_unreadable` relies on it).
        part = pc.replace_substring_regex(column.filter(pa.array(rows)), _FRACTION, r"\1")
        try:
            read = part.cast(pa.timestamp("s", tz=zone))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        seconds[rows] = read.cast(pa.int64())
    return seconds


def _first_unreadable(column) -> int:
    """The first row of `column` (strings) that is not an ISO-8601 time, by halving."""
    start, stop = 0, len(column)
    while stop - start > 1:
        middle = (start + stop) // 2
        if _iso_seconds(column.slice(start, middle - start)) is None:
            stop = middle
        else:
            start = middle
    return start


def numeric_time_unit(files: Sequence[str], columns: EventColumns) -> Optional[str]:
    """The unit --time_unit=auto reads the log's numeric times in ("seconds",
    "milliseconds", ...: the first event's, from its size; `_unit_divisors`), or None when
    its times are not numbers (timestamps, ISO-8601 strings). Reads one batch."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    for _, batch in _batches(files, columns, 1, only=[columns.time]):
        value = batch.column(columns.time)[0].as_py()
        if isinstance(value, str):
            if pc.match_substring_regex(pa.array([value]), r"^-?[0-9]+$")[0].as_py():
                value = int(value)
            elif pc.match_substring_regex(pa.array([value]), _DECIMAL)[0].as_py():
                value = float(value)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
        return _UNIT_NAMES[int(_unit_divisors(np.array([value]))[0])]
    return None


def _event_seconds(path: str, batch, columns: EventColumns, offset: int) -> np.ndarray:
    """The batch's event times as int64 seconds (`_seconds`), shifted by
    `columns.time_shift`."""
    seconds = _seconds(path, batch, columns.time, offset, columns.time_unit)
    return seconds + columns.time_shift if columns.time_shift else seconds


def _seconds(path: str, batch, name: str, offset: int, unit: str = "auto") -> np.ndarray:
    """The time column as int64 seconds: numbers in `unit` (`TIME_UNITS`; "auto": each
    number's from its size, and checked plausible), Arrow timestamps and dates, or strings
    of digits (numbers) or ISO-8601 times (offsets such as Z or +02:00 read to UTC)."""
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
                f"{offset + row + 1}; times are finite numbers.",
            )
        if pa.types.is_floating(column.type):
            outside = (values >= 2.0**63) | (values < -(2.0**63))
        else:  # Only uint64 goes past int64.
            outside = values > _INT64_MAX if values.dtype == np.uint64 else np.zeros(0, bool)
        if outside.any():
            row = int(np.flatnonzero(outside)[0])
            raise _out_of_range(path, name, offset, row, values[row])
        return _numbers_to_seconds(path, name, offset, values, unit)
    if pa.types.is_timestamp(column.type) or pa.types.is_date(column.type):
        # Whole seconds (finer units truncated); nothing overflows going coarser.
        return (
            column.cast(pa.timestamp("s", tz=getattr(column.type, "tz", None)), safe=False)
            .cast(pa.int64())
            .to_numpy(zero_copy_only=False)
        )
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        numeric = pc.match_substring_regex(column, r"^-?[0-9]+$")
        if pc.all(numeric).as_py():
            try:
                values = column.cast(pa.int64()).to_numpy(zero_copy_only=False)
            except pa.ArrowInvalid:  # A number past int64: name the first.
                for row, value in enumerate(column.to_pylist()):
                    if not _INTEGER.fullmatch(value) or not (-(2**63) <= int(value) <= _INT64_MAX):
                        raise _out_of_range(path, name, offset, row, value) from None
                raise
            return _numbers_to_seconds(path, name, offset, values, unit)
        number = pc.match_substring_regex(column, _DECIMAL).to_numpy(zero_copy_only=False)
        if number.all():  # 1.7e9, 978300760.5
            as_numbers = pa.record_batch([column.cast(pa.float64())], names=[name])
            return _seconds(path, as_numbers, name, offset, unit)
        if number.any():  # Some numbers, some not: name one of each, not a number as bad.
            text, digits = int(np.flatnonzero(~number)[0]), int(np.flatnonzero(number)[0])
            raise DataError(
                path,
                None,
                f"column {name!r} holds the number {shown(column[digits].as_py())} in data row "
                f"{offset + digits + 1} and {shown(column[text].as_py())} in data row "
                f"{offset + text + 1}: a column's times are all numbers (since 1970, "
                "--time_unit) or all ISO-8601 dates or times.",
            )
        seconds = _iso_seconds(column)
        if seconds is None:
            row = _first_unreadable(column)
            raise DataError(
                path,
                None,
                f"cannot read the time {shown(column[row].as_py())} in column {name!r}, data "
                f"row {offset + row + 1} (expected a number or an ISO-8601 date or time).",
            )
        return seconds
    raise DataError(
        path,
        None,
        f"column {name!r} holds {column.type}; times are numbers, timestamps or ISO-8601 strings.",
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
        seconds = _event_seconds(path, batch, columns, offset)
        first = seconds.min() if first is None else min(first, seconds.min())
        last = seconds.max() if last is None else max(last, seconds.max())
    if first is None:
        raise DataError(", ".join(files), None, "the log holds no events" + columns.kept() + ".")
    assert last is not None  # Set with `first`.
    if columns.time_unit == "auto" and last - first > MAX_SPAN_YEARS * _YEAR:
        raise DataError(
            source_name(files),
            None,
            f"column {columns.time!r} spans {(last - first) / _YEAR:.1f} years, from "
            f"{_date(first)} to {_date(last)}: more than the {MAX_SPAN_YEARS} years "
            "--time_unit=auto expects of a log. Give --time_unit (s, ms, us or ns) if the "
            "times are right in that unit, or fix the column.",
        )
    return int(first), int(last)


def _counted_events(files, columns, batch_rows, count_before, types=None, count=False):
    """(path, batch, {"user", "item": id strings}, seconds, {"user", "item": value_counts}
    or None) of each record batch, checked (nulls, ids, times); the ids and seconds of the
    events before `count_before` only, when given; with `count`, each kind's
    `pc.value_counts` of those ids. `types` (`IdTypes`), when given, sees every id, counted
    or not. The batches are checked (and counted) `workers()` at a time on threads, in file
    order (`ordered_map`); `types` sees them in that order."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    offsets: Dict[str, int] = {}

    def located():
        for path, batch in _batches(files, columns, batch_rows):
            offset = offsets.get(path, 0)
            offsets[path] = offset + batch.num_rows
            yield path, batch, offset

    def checked(path, batch, offset):
        for name in (columns.user, columns.item, columns.time):
            _no_nulls(path, batch, name, offset)
        seconds = _event_seconds(path, batch, columns, offset)
        every, integer = {}, {}
        for kind, name in (("user", columns.user), ("item", columns.item)):
            every[kind], integer[kind], _ = _ids(
                batch, name, path, offset, columns.keep_id_whitespace
            )
        ids = every
        if count_before is not None:
            counted = seconds < count_before
            ids = {kind: value.filter(pa.array(counted)) for kind, value in every.items()}
            seconds = seconds[counted]
        counts = None
        if count:
            counts = {kind: pc.value_counts(value).flatten() for kind, value in ids.items()}
        return path, offset, batch, every, integer, ids, seconds, counts

    for path, offset, batch, every, integer, ids, seconds, counts in ordered_map(
        checked, located(), workers()
    ):
        if types is not None:
            for kind in ("user", "item"):
                types.see(kind, every[kind], integer[kind], path, offset)
        yield path, batch, ids, seconds, counts


def count_ids(
    files: Sequence[str],
    columns: EventColumns,
    max_entries: Optional[int] = None,
    batch_rows: int = BATCH_ROWS,
    count_before: Optional[int] = None,
) -> Tuple[Dict[str, "pyarrow.Table"], IdTypes]:
    """({"user", "item": (id, count) tables}, the ids' `IdTypes`) over the log (the counts
    of the events before time `count_before` only, when given; the types of every event's
    ids), an event logged more than once (the same user, item and time) counted once, as
    `load_events` keeps it (`_Duplicates`: a log with repeated events is read once more);
    also checks every batch (columns, nulls, ids, times). `max_entries`: the most distinct
    ids (users plus items) allowed; a log with more raises DataError as soon as the count
    passes it."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel

    parts: Dict[str, List] = {"user": [], "item": []}
    pending, read = 0, False
    types = IdTypes()
    with _Duplicates() as duplicates:
        for _, batch, ids, seconds, counts in _counted_events(
            files, columns, batch_rows, count_before, types, count=True
        ):
            read = True
            for kind, counted in counts.items():
                parts[kind].append(pa.table({"id": counted[0], "count": counted[1]}))
            duplicates.add(ids["user"], ids["item"], seconds)
            pending += batch.num_rows
            if pending >= 8 * batch_rows:  # Keep the partial counts near the vocabulary's size.
                parts = {kind: [_merge_counts(tables)] for kind, tables in parts.items()}
                pending = 0
                _check_budget(files, parts, max_entries)
        if not read:
            raise DataError(
                ", ".join(files), None, "the log holds no events" + columns.kept() + "."
            )
        if duplicates.candidates():  # Each repeat of an event taken off its ids' counts.
            again = _counted_events(files, columns, batch_rows, count_before)
            repeats = duplicates.repeats((ids, seconds) for _, _, ids, seconds, _ in again)
            for kind in parts:
                parts[kind].append(repeats[kind])
    parts = {kind: [_merge_counts(tables)] for kind, tables in parts.items()}
    _check_budget(files, parts, max_entries)
    return {kind: tables[0] for kind, tables in parts.items()}, types


class _Duplicates:
    """Finds the events of a log logged more than once (the same user id, item id and
    time), in bounded memory, so that the vocabulary counts an event once, as
    `interactions.chronological` keeps it.

    Each event added (`add`, batch after batch) is keyed by a 64-bit hash of its ids and
    time and written with its position to one of `PARTS` files on disk, by the key's top
    bits. `candidates` then reads one part at a time (1/`PARTS` of the keys in memory) and
    takes the events whose key is not unique; `repeats`, given the same batches again,
    compares those events' ids and times themselves (a hash collision is no duplicate):
    every event after the first of its kind is a repeat. Disk: 16 bytes per event, in a
    temporary directory under $TMPDIR removed on exit. Memory: the candidates' raw ids (a
    log that is mostly repeats, two overlapping exports say, holds most of its ids then).
    """

    PARTS = 64

    def __init__(self):
        import tempfile  # pylint: disable=import-outside-toplevel

        # Under $TMPDIR (16 bytes an event: point it at a disk, not a RAM-backed tmpfs, for a
        # log of billions of events).
        self._directory = tempfile.mkdtemp(prefix="tfrs_logq_duplicates_")
        self._files: List = []
        try:
            for part in range(self.PARTS):
                self._files.append(open(os.path.join(self._directory, f"{part:02d}"), "wb"))
        except BaseException:
            self.__exit__()
            raise
        self._added = 0
        self._candidates: Optional[np.ndarray] = None
        self._weights = np.random.default_rng(20250101).integers(
            1, 2**63, size=256, dtype=np.uint64
        ) | np.uint64(1)

    def __enter__(self) -> "_Duplicates":
        return self

    def __exit__(self, *exc) -> None:
        import shutil  # pylint: disable=import-outside-toplevel

        for file in self._files:
            file.close()
        shutil.rmtree(self._directory, ignore_errors=True)

    HASH_ROWS = 1 << 16  # Strings hashed at once: about 50 bytes of arrays per id byte.

    def _hash(self, strings) -> np.ndarray:
        """[n] uint64 hashes of a string array without nulls (a polynomial of its bytes),
        `HASH_ROWS` strings at a time."""
        return np.concatenate(
            [
                self._hash_slice(strings.slice(first, self.HASH_ROWS))
                for first in range(0, len(strings), self.HASH_ROWS)
            ]
            or [np.zeros(0, np.uint64)]
        )

    def _hash_slice(self, strings) -> np.ndarray:
        import pyarrow as pa  # pylint: disable=import-outside-toplevel

        strings = pa.concat_arrays([strings.cast(pa.large_string())])  # Offsets from 0.
        offsets = np.frombuffer(strings.buffers()[1], np.int64)[: len(strings) + 1]
        data = np.frombuffer(strings.buffers()[2] or b"", np.uint8)[: offsets[-1]]
        lengths = np.diff(offsets)
        position = np.arange(len(data), dtype=np.int64) - np.repeat(offsets[:-1], lengths)
        longest = int(lengths.max()) if len(lengths) else 0
        if longest > len(self._weights):  # A weight per byte position, drawn once.
            more = np.random.default_rng(longest).integers(
                1, 2**63, size=longest - len(self._weights), dtype=np.uint64
            )
            self._weights = np.concatenate([self._weights, more | np.uint64(1)])
        weight = self._weights[position]
        sums = np.zeros(len(strings), np.uint64)
        with np.errstate(over="ignore"):
            terms = data.astype(np.uint64) * weight
            filled = lengths > 0
            if filled.any():
                sums[filled] = np.add.reduceat(terms, offsets[:-1][filled])
        return _mix(sums ^ lengths.astype(np.uint64))

    def add(self, users, items, seconds: np.ndarray) -> None:
        """Adds a batch's events (user and item id string arrays, int64 seconds)."""
        if not len(seconds):
            return
        with np.errstate(over="ignore"):
            keys = _mix(
                _mix(self._hash(users) ^ np.uint64(0x9E3779B97F4A7C15))
                ^ self._hash(items) * np.uint64(0xBF58476D1CE4E5B9)
                ^ seconds.astype(np.int64).view(np.uint64) * np.uint64(0x94D049BB133111EB)
            )
        positions = np.arange(self._added, self._added + len(keys), dtype=np.int64)
        part = (keys >> np.uint64(58)).astype(np.int64)
        order = np.argsort(part, kind="stable")
        bounds = np.searchsorted(part[order], np.arange(self.PARTS + 1))
        for index in range(self.PARTS):
            chosen = order[bounds[index] : bounds[index + 1]]
            if len(chosen):
                pairs = np.stack([keys[chosen].view(np.int64), positions[chosen]], 1)
                pairs.tofile(self._files[index])
        self._added += len(keys)

    def candidates(self) -> int:
        """How many events share their key with another (after the last `add`)."""
        found = []
        for index, file in enumerate(self._files):
            file.close()
            pairs = np.fromfile(os.path.join(self._directory, f"{index:02d}"), np.int64)
            pairs = pairs.reshape(-1, 2)
            keys = np.sort(pairs[:, 0])
            shared = np.unique(keys[1:][keys[1:] == keys[:-1]])
            if len(shared):
                found.append(pairs[np.isin(pairs[:, 0], shared), 1])
            del pairs, keys
        self._candidates = np.sort(np.concatenate(found)) if found else np.zeros(0, np.int64)
        return len(self._candidates)

    def repeats(self, batches) -> Dict[str, "pyarrow.Table"]:
        """{"user", "item": (id, -repeats) tables}: minus how many repeated events each id
        has. `batches`: ({"user", "item": ids}, seconds) of the batches `add` was given, in
        the same order (the log read again)."""
        import pyarrow as pa  # pylint: disable=import-outside-toplevel
        import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

        assert self._candidates is not None, "candidates() first"
        positions, start = self._candidates, 0
        taken: Dict[str, List] = {"user": [], "item": [], "seconds": []}
        for ids, seconds in batches:
            mine = positions[(positions >= start) & (positions < start + len(seconds))] - start
            start += len(seconds)
            if len(mine):
                for kind in ("user", "item"):
                    taken[kind].append(ids[kind].take(pa.array(mine)))
                taken["seconds"].append(seconds[mine])
        if start != self._added:
            raise DataError(
                "the event log",
                None,
                f"changed while it was read: {self._added:,} events counted at first, "
                f"{start:,} when read again.",
            )
        events = pa.table(
            {
                "user": pa.concat_arrays(taken["user"]),
                "item": pa.concat_arrays(taken["item"]),
                "seconds": np.concatenate(taken["seconds"]),
                "position": positions,
            }
        ).sort_by([(name, "ascending") for name in ("user", "item", "seconds", "position")])
        same = np.zeros(events.num_rows, bool)  # The same event as the row before.
        if events.num_rows > 1:
            when = events["seconds"].to_numpy()
            same[1:] = when[1:] == when[:-1]
            for name in ("user", "item"):
                column = events[name].combine_chunks()
                same[1:] &= pc.equal(column[1:], column[:-1]).to_numpy(zero_copy_only=False)
        repeated = events.filter(pa.array(same))
        result = {}
        for kind in ("user", "item"):
            values = pc.value_counts(repeated[kind].combine_chunks()).flatten()
            result[kind] = pa.table({"id": values[0], "count": pc.negate(values[1])})
        return result


def _mix(values: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser: every bit of the [n] uint64 `values` spread over the result."""
    with np.errstate(over="ignore"):
        values = (values ^ (values >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        values = (values ^ (values >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return values ^ (values >> np.uint64(31))


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


def vocabulary(counts: "pyarrow.Table", min_count: int, integer: bool = False) -> Vocabulary:
    """The ids seen at least `min_count` times, most frequent first (ties by id); `integer`:
    whether they are served as int64 (`IdTypes`)."""
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    kept = counts.filter(pc.greater_equal(counts["count"], min_count))
    kept = kept.sort_by([("count", "descending"), ("id", "ascending")])
    return Vocabulary(
        np.asarray(kept["id"].to_pylist(), dtype=object),
        kept["count"].to_numpy().astype(np.int64),
        integer,
    )


CATALOG_TEXT = (".txt", ".txt.gz")


def read_catalog(
    path: str,
    column: str = "item_id",
    batch_rows: int = BATCH_ROWS,
    keep_whitespace: bool = False,
    integer: bool = False,
) -> "pyarrow.Array":
    """The distinct item ids of the catalog file `path` (--item_catalog), as strings, sorted:
    a text file (.txt, .txt.gz) of one id per line (empty lines skipped), or a CSV, TSV or
    Parquet file whose `column` holds them (integer ids as their decimal strings, as the
    log's). Surrounding whitespace is stripped, as the log's ids', unless `keep_whitespace`.
    A CSV or TSV catalog is read strictly (Python's csv module, each id's line known).
    `integer`: the log's item ids are integers (`IdTypes`), so every catalog id must be an
    int64 as it prints ("7"; not "007", "-7", "7.0" or "abc": the export serves int64).

    Raises:
      DataError: naming the file and the line (a Parquet file's data row), before anything
        is trained: no file at `path`, an empty catalog, a null or empty id, an id that
        spans lines, no `column`, a malformed CSV or TSV (a quote left open, a row with
        more or fewer fields than the header), a file that cannot be read, or with
        `integer` an id the log's integer ids cannot hold.
    """
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    if not os.path.isfile(path):
        raise DataError(
            path,
            None,
            "is not a file (--item_catalog: a .txt file of one item id per line, or a CSV, "
            "TSV or Parquet file with the item column).",
        )
    # (ids, the line of each, or None for a Parquet batch, its first data row, and whether
    # its ids are known to be integers already).
    parts: List[Tuple["pyarrow.Array", Optional[np.ndarray], int, bool]] = []
    if path.endswith(CATALOG_TEXT):
        parts.append((*_text_catalog(path, keep_whitespace), 0, False))
    elif file_format(path) == "parquet":
        columns = EventColumns(user=column, item=column, time="")
        offset = 0
        for _, batch in _batches([path], columns, batch_rows, only=[column]):
            _no_nulls(path, batch, column, offset)
            ids = _ids(batch, column, path, offset, keep_whitespace)[0]
            parts.append((ids, None, offset, False))
            offset += batch.num_rows
    else:
        delimiter = "\t" if file_format(path) == "tsv" else ","
        fast = _plain_csv_catalog(path, column, delimiter, keep_whitespace)
        if fast is None or (integer and _first_not_integer(fast) is not None):
            # The strict reader, which knows each id's line, for the error to name it.
            parts.append((*_csv_catalog(path, column, delimiter, keep_whitespace), 0, False))
        else:
            parts.append((fast, None, 0, integer))
    if integer:
        for ids, lines, offset, checked in parts:
            row = None if checked else _first_not_integer(ids)
            if row is None:
                continue
            line = None if lines is None else int(lines[row])
            where = "" if lines is not None else f" in data row {offset + row + 1}"
            raise DataError(
                path,
                line,
                f"holds the item id {shown(ids[row].as_py())}{where}, which the event "
                "log's item ids cannot hold: they are integers (served as int64), and a "
                "catalog id beside them is an int64 as it prints ('7'; not '007', '-7', "
                "'7.0' or a name). Write the catalog's ids as the log writes them.",
            )
    ids = pa.concat_arrays([part[0] for part in parts]) if parts else pa.array([], pa.string())
    ids = pc.unique(ids)
    if not len(ids):
        raise DataError(path, None, "--item_catalog holds no item id.")
    return ids.take(pc.array_sort_indices(ids))


def _open_text(path: str):
    """`path` (gzipped when it ends in .gz) as UTF-8 text (a byte order mark skipped), its
    line ends as written (the csv module reads them)."""
    import gzip  # pylint: disable=import-outside-toplevel

    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
    return open(path, encoding="utf-8-sig", newline="")


def _stripped(ids: List[str], lines: List[int], keep_whitespace: bool):
    """(ids as an Arrow string array, surrounding whitespace stripped unless
    `keep_whitespace`, as the log's; [n] int64 line of each)."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    array = pa.array(ids, pa.string())
    if not keep_whitespace:
        array = pc.utf8_trim_whitespace(array)
    return array, np.asarray(lines, np.int64)


def _text_catalog(path: str, keep_whitespace: bool):
    """(ids, [n] line of each) of a .txt catalog: one id a line, empty lines skipped; a line
    holding a tab refused (a table is a .tsv or .csv file)."""
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

    ids: List[str] = []
    lines: List[int] = []
    try:
        with _open_text(path) as f:
            for number, line in enumerate(f, 1):  # Lines end at \n, \r\n or \r.
                ids.append(line.rstrip("\r\n"))
                lines.append(number)
    except (OSError, UnicodeDecodeError, EOFError) as error:
        raise DataError(path, None, f"cannot be read as one item id a line ({error}).") from None
    array, numbers = _stripped(ids, lines, keep_whitespace)
    tabbed = pc.match_substring(array, "\t").to_numpy(zero_copy_only=False)
    if tabbed.any():
        row = int(np.flatnonzero(tabbed)[0])
        raise DataError(
            path,
            int(numbers[row]),
            f"holds {shown(array[row].as_py())}, with a tab: a .txt catalog holds one item "
            "id a line (a table of items is a .tsv or .csv file with the --item_column).",
        )
    filled = pc.greater(pc.binary_length(array), 0)
    return array.filter(filled), numbers[filled.to_numpy(zero_copy_only=False)]


def _is_plain(path: str) -> bool:
    """Whether the text file `path` (gzipped when it ends in .gz) holds no quote, no carriage
    return and no byte order mark: then each line is a row and each delimiter a field's end,
    as Arrow's CSV reader reads them."""
    import gzip  # pylint: disable=import-outside-toplevel

    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            first = True
            while True:
                chunk = f.read(1 << 24)
                if not chunk:
                    return True
                if (first and chunk.startswith(b"\xef\xbb\xbf")) or b'"' in chunk or b"\r" in chunk:
                    return False
                first = False
    except (OSError, EOFError):
        return False


def _plain_csv_catalog(path: str, column: str, delimiter: str, keep_whitespace: bool):
    """The ids of `column` of a CSV or TSV catalog by Arrow's reader (about 15x the csv
    module's speed, a fraction of its memory), surrounding whitespace stripped unless
    `keep_whitespace`; None where this cannot vouch for them (`_csv_catalog` then reads the
    file strictly and names the line at fault): a quote, a carriage return or a byte order
    mark in the file, a row Arrow refuses, no `column`, or an empty id."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel
    import pyarrow.csv as pa_csv  # pylint: disable=import-outside-toplevel

    if not _is_plain(path):
        return None
    try:
        table = pa_csv.read_csv(
            path,
            parse_options=pa_csv.ParseOptions(delimiter=delimiter, quote_char=False),
            convert_options=pa_csv.ConvertOptions(
                column_types={column: pa.string()},
                include_columns=[column],
                strings_can_be_null=False,
            ),
            read_options=pa_csv.ReadOptions(block_size=1 << 24),
        )
    except (pa.ArrowInvalid, pa.ArrowKeyError, OSError, UnicodeDecodeError, EOFError, KeyError):
        return None
    if column not in table.column_names:
        return None
    array = table.column(column).combine_chunks()
    if not keep_whitespace:
        array = pc.utf8_trim_whitespace(array)
    if not len(array) or _first_bad_id(array) is not None:
        return None
    return array


def _csv_catalog(path: str, column: str, delimiter: str, keep_whitespace: bool):
    """(ids, [n] line of each) of `column` of a CSV or TSV catalog (a header line, then a
    row per item; empty lines skipped), read strictly: DataError naming the line of a quote
    left open, of a row whose field count is not the header's, or of an empty id or one
    that spans lines."""
    import csv  # pylint: disable=import-outside-toplevel

    kind = "TSV" if delimiter == "\t" else "CSV"
    ids: List[str] = []
    lines: List[int] = []
    start = 1  # The line the row being read starts on.
    try:
        with _open_text(path) as f:
            reader = csv.reader(f, delimiter=delimiter, strict=True)
            header = next(reader, None)
            if not header:
                raise DataError(path, None, "--item_catalog holds no item id.")
            if column not in header:
                raise DataError(
                    path,
                    None,
                    f"has no column {column!r} (its columns: {', '.join(header)}); name "
                    "the item column with --item_column.",
                )
            index = header.index(column)
            start = reader.line_num + 1
            for row in reader:
                if row and len(row) != len(header):
                    raise DataError(
                        path,
                        start,
                        f"holds {len(row)} field{'s' * (len(row) != 1)} where the header "
                        f"has {len(header)}: every row of a {kind} catalog has the "
                        "header's fields.",
                    )
                if row:
                    ids.append(row[index])
                    lines.append(start)
                start = reader.line_num + 1
    except csv.Error as error:
        unclosed = "unexpected end of data" in str(error) or "field limit" in str(error)
        raise DataError(
            path,
            start,
            "is not well-formed "
            + kind
            + (
                f": a quote opened on this line is never closed ({error})."
                if unclosed
                else f" ({error})."
            ),
        ) from None
    except (OSError, UnicodeDecodeError, EOFError) as error:
        raise DataError(path, None, f"cannot be read as {kind} ({error}).") from None
    array, numbers = _stripped(ids, lines, keep_whitespace)
    bad = _first_bad_id(array)
    if bad is not None:
        first, spans = bad
        what = (
            "an id that spans lines: an id holds no line break (a quote left open runs on "
            "into the next lines)"
            if spans
            else "an empty id: every row of a catalog names an item"
        )
        raise DataError(
            path, int(numbers[first]), f"column {column!r} holds {shown(ids[first])}, {what}."
        )
    return array, numbers


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
        vocab.integer,
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
    say: Optional[Callable[[str], None]] = None,
) -> Dict[str, Vocabulary]:
    """{"user", "item": Vocabulary} of the log: `vocabularies` when given (a saved run's),
    else counted, each typed (`IdTypes`; `say`, when given, is told how, in one line).
    Other arguments as in `load_events`. An empty vocabulary raises DataError."""
    for name, value in (("min_item_count", min_item_count), ("min_user_count", min_user_count)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"--{name} must be a positive integer; received {name}={value!r}.")
    if vocabularies is None:
        counted, types = count_ids(files, columns, max_entries, batch_rows, count_before)
        vocabularies = {
            "user": vocabulary(counted["user"], min_user_count, types.integer["user"]),
            "item": vocabulary(counted["item"], min_item_count, types.integer["item"]),
        }
        if say is not None:
            say(types.describe())
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


def workers() -> int:
    """Threads that read the log at once: $TFRS_LOGQ_DATA_THREADS, else this machine's
    cores (1: one thread)."""
    value = os.environ.get("TFRS_LOGQ_DATA_THREADS", "")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(
                f"TFRS_LOGQ_DATA_THREADS must be a positive integer; received {value!r}."
            )
        return int(value)
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


def ordered_map(function, items, threads: int):
    """`function(*item)` for each of `items`, in order, computed `threads` at a time ahead of
    the caller (at most 2 x threads results held): the same results, in the same order, as
    a loop; a call's error is raised when its result's turn comes."""
    if threads <= 1:
        for item in items:
            yield function(*item)
        return
    import collections  # pylint: disable=import-outside-toplevel
    from concurrent import futures  # pylint: disable=import-outside-toplevel

    with futures.ThreadPoolExecutor(threads) as pool:
        pending: "collections.deque" = collections.deque()
        try:
            for item in items:
                pending.append(pool.submit(function, *item))
                if len(pending) >= 2 * threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for future in pending:  # A caller that stops early, or an error: none left running.
                future.cancel()


class EncodedBatches:
    """The log's events in dense ids, batch after batch in file order (iterate once).

    Every batch is checked (nulls, ids, times, weights: `DataError` naming the file, the
    column and the row). After the iteration, `read` holds the events read, `stripped`
    the user and item ids read without their surrounding whitespace, `after` the events at
    or after `count_after` (the end of a next-day split's test day: never trained or tested
    on, so dropped here, in or out of the vocabulary). `integer_ids()`: the id columns
    served as int64, as the vocabularies were typed when counted (`IdTypes`), not read again.
    """

    def __init__(
        self,
        files: Sequence[str],
        columns: EventColumns,
        vocabularies: Dict[str, Vocabulary],
        batch_rows: int = BATCH_ROWS,
        count_after: Optional[int] = None,
    ):
        import pyarrow as pa  # pylint: disable=import-outside-toplevel

        self.files, self.columns, self.batch_rows = files, columns, batch_rows
        self.count_after = count_after
        self.after = 0
        self.value_sets = {
            kind: pa.array(list(vocab.ids), pa.string()) for kind, vocab in vocabularies.items()
        }
        self.integer = {kind: bool(vocab.integer) for kind, vocab in vocabularies.items()}
        self.read = 0
        self.stripped = {"user": 0, "item": 0}  # Ids read without surrounding whitespace.

    def integer_ids(self) -> Tuple[str, ...]:
        return tuple(kind for kind in ("user", "item") if self.integer.get(kind))

    def __iter__(self) -> Iterator[Encoded]:
        """The batches in file order, encoded `workers()` at a time on threads (pyarrow's and
        numpy's kernels release the GIL): the same batches, in the same order, as one thread
        makes; a bad batch's error is raised when its turn comes."""
        offsets: Dict[str, int] = {}

        def located():
            for path, batch in _batches(self.files, self.columns, self.batch_rows):
                offset = offsets.get(path, 0)
                offsets[path] = offset + batch.num_rows
                yield path, batch, offset

        for encoded, read, stripped, after in ordered_map(self._encode, located(), workers()):
            self.read += read
            self.after += after
            for kind in stripped:
                self.stripped[kind] += stripped[kind]
            yield encoded

    def _encode(self, path, batch, offset: int):
        """(Encoded, rows read, ids stripped by kind, events after `count_after`) of one
        batch, checked."""
        import pyarrow as pa  # pylint: disable=import-outside-toplevel
        import pyarrow.compute as pc  # pylint: disable=import-outside-toplevel

        columns = self.columns
        for name in (columns.user, columns.item, columns.time):
            _no_nulls(path, batch, name, offset)
        dense, stripped_ids = {}, {}
        for kind, name in (("user", columns.user), ("item", columns.item)):
            ids, _, stripped = _ids(batch, name, path, offset, columns.keep_id_whitespace)
            stripped_ids[kind] = stripped
            dense[kind] = pc.index_in(ids, value_set=self.value_sets[kind])
        keep = pc.and_(pc.is_valid(dense["user"]), pc.is_valid(dense["item"]))
        keep = keep.to_numpy(zero_copy_only=False)
        seconds = _event_seconds(path, batch, columns, offset)
        after_count = 0
        if self.count_after is not None:  # Never used: dropped here, and counted.
            after = seconds >= self.count_after
            after_count = int(after.sum())
            keep &= ~after
        weight = None
        if columns.weight:
            weight = batch.column(columns.weight)
            if not (pa.types.is_integer(weight.type) or pa.types.is_floating(weight.type)):
                raise DataError(
                    path,
                    None,
                    f"weight column {columns.weight!r} holds {weight.type}; weights are numbers.",
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
        encoded = Encoded(
            dense["user"].to_numpy(zero_copy_only=False)[keep].astype(np.int32) + 1,
            dense["item"].to_numpy(zero_copy_only=False)[keep].astype(np.int32) + 1,
            seconds[keep],
            weight,
        )
        return encoded, batch.num_rows, stripped_ids, after_count


def load_events(
    pattern,
    columns: EventColumns = EventColumns(),
    min_item_count: int = 1,
    min_user_count: int = 1,
    vocabularies: Optional[Dict[str, Vocabulary]] = None,
    max_entries: Optional[int] = None,
    batch_rows: int = BATCH_ROWS,
    count_before: Optional[int] = None,
    count_after: Optional[int] = None,
) -> EventLog:
    """Reads an event log into dense `Interactions` (see the module's docstring).

    Args:
      pattern: a file, a directory or a glob of CSV / TSV / Parquet files (or a list of
        files: `event_files`).
      columns: the column names.
      min_item_count, min_user_count: ids seen fewer times are out of vocabulary.
      vocabularies: {"user", "item": Vocabulary} to encode with (a saved run's), instead of
        counting the log; their ids typed as they say (`Vocabulary.integer`).
      max_entries: the most distinct users plus items (`entries_in_budget`).
      batch_rows: rows per record batch read.
      count_before: count the vocabularies on the events before this time only (the
        training days); the others are encoded with them.
      count_after: the end of the test day: the events from it on are dropped and counted
        apart (`stats["events_after_test_day"]`), not as out of the vocabulary.
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
    encoded = EncodedBatches(files, columns, vocabularies, batch_rows, count_after)
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
    weight = np.concatenate(weights)[order] if columns.weight else None
    stats = {
        "events_read": int(encoded.read),
        "events_kept": int(len(order)),
        "events_dropped_out_of_vocabulary": int(encoded.read - len(user) - encoded.after),
        "events_dropped_duplicate": duplicates,
        "events_after_test_day": encoded.after,
        "user_ids_stripped": encoded.stripped["user"],
        "item_ids_stripped": encoded.stripped["item"],
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
    """The vocabularies `save_vocabularies` wrote, typed as vocabulary.json's "integer_ids"
    says (a kind whose saved ids are not all int64 as they print, as a run saved before the
    types were decided up front may hold, is strings)."""
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

    with open(os.path.join(directory, "vocabulary.json")) as f:
        integer_ids = json.load(f).get("integer_ids", [])
    result = {}
    for kind, name in VOCABULARY_FILES.items():
        table = pq.read_table(os.path.join(directory, name))
        ids = table["id"].combine_chunks()
        result[kind] = Vocabulary(
            np.asarray(ids.to_pylist(), dtype=object),
            table["count"].to_numpy().astype(np.int64),
            kind in integer_ids and _first_not_integer(ids) is None,
        )
    return result
