"""Public logs by name, read as event logs: Yambda (`--dataset=yambda`) and MovieLens-32M
(`--dataset=ml-32m`). Neither is downloaded here nor redistributed: each is read from where
the user put it (docs/guide/public_logs.md).

**Yambda** (Yandex Music, Apache-2.0; https://huggingface.co/datasets/yandex/yambda,
arXiv 2505.22238), its flat layout: a directory per size (`flat/50m`, `flat/500m`,
`flat/5b`) of Parquet files, one row an event:

- `listens.parquet`: uid, timestamp, item_id, is_organic, played_ratio_pct,
  track_length_seconds;
- `likes.parquet` (and dislikes, unlikes, undislikes): uid, timestamp, item_id, is_organic.

Ids are the published integers (uint32). `timestamp` counts seconds (binned to 5 s) from the
log's start, not from 1970: the sizes all span about 300 days, to 26,000,000 s. The
authors' benchmark (`Constants` of their code) tests on the last day, from 25,913,600 s, so
the reader shifts every time by `yambda_time_shift(day_seconds)` seconds: that day is then
exactly the next-day protocol's last day. Which events count (`YAMBDA_EVENTS`): the
authors' Listen+ (a listen with played_ratio_pct >= 50, their TRACK_LISTEN_THRESHOLD), the
likes (as likes.parquet holds them: a like later undone still counts, as in their
benchmark), or both; `is_organic` selects organic events (1), recommended ones (0) or all.

**MovieLens-32M** (GroupLens): `ratings.csv` with the header userId,movieId,rating,
timestamp (seconds since 1970, 1995 to 2023); every rating is an interaction, as
MovieLens-1M's are here. Its days are weeks (`DATASET_DEFAULTS` in `pipelines.configs`):
MovieLens users rate most of their movies in a session or two, so a next-day test needs a
window long enough for users to come back. Its times are shifted so that the last week ends
at the midnight after its last rating (`ML_32M_END`): the test week is a whole one.

Both logs' test windows are checked to be the published ones (`check_test_window`).
"""

import gzip
import os
from typing import List, Tuple

from pipelines.data import events as events_lib
from pipelines.data.interactions import DataError

# Yambda's benchmark constants (their code's `Constants`), in the log's seconds.
YAMBDA_LAST_TIMESTAMP = 26_000_000
YAMBDA_TEST_TIMESTAMP = YAMBDA_LAST_TIMESTAMP - 86_400
YAMBDA_GAP_SECONDS = 1_800
YAMBDA_LISTEN_THRESHOLD = 50
YAMBDA_SIZES = ("50m", "500m", "5b")
# --yambda_events: the file each reads and the rows it keeps.
YAMBDA_EVENTS = ("listens", "likes", "both")
YAMBDA_ORGANIC = ("all", "organic", "recommended")
YAMBDA_FILES = {"listens": "listens.parquet", "likes": "likes.parquet"}
_BASE = ("uid", "timestamp", "item_id", "is_organic")
YAMBDA_COLUMNS = {
    "listens.parquet": _BASE + ("played_ratio_pct", "track_length_seconds"),
    "likes.parquet": _BASE,
}
YAMBDA_LAYOUT = (
    "Yambda's flat layout, one size's directory (e.g. yambda/flat/50m) holding "
    "listens.parquet (uid, timestamp, item_id, is_organic, played_ratio_pct, "
    "track_length_seconds) and likes.parquet (uid, timestamp, item_id, is_organic), a row "
    "an event"
)

ML_32M_FILE = "ratings.csv"
# The midnight (UTC) after MovieLens-32M's last rating (its README: ratings to October 12,
# 2023): the reader shifts its times so that its last week (or day) ends there, not a day
# after the week the epoch's Thursdays start.
ML_32M_END = 1_697_155_200  # 2023-10-13T00:00:00Z.
ML_32M_COLUMNS = ("userId", "movieId", "rating", "timestamp")
ML_32M_LAYOUT = (
    "MovieLens-32M's ratings.csv (from ml-32m.zip), with the header "
    "userId,movieId,rating,timestamp, or the directory holding it"
)


def yambda_time_shift(day_seconds: int) -> int:
    """Seconds added to Yambda's times so that its benchmark's test day (from
    `YAMBDA_TEST_TIMESTAMP`) starts on a day boundary of `day_seconds`."""
    return -YAMBDA_TEST_TIMESTAMP % day_seconds


def ml_32m_time_shift(day_seconds: int) -> int:
    """Seconds added to MovieLens-32M's times so that a day (a week) ends at `ML_32M_END`."""
    return -ML_32M_END % day_seconds


def check_test_window(dataset: str, test_start: int, test_end: int, source: str) -> None:
    """Raises DataError unless the last day of a public log (`test_start`, `test_end`: its
    test window in the log's own seconds, the shift taken off) is the published one: Yambda's
    benchmark test day, from `YAMBDA_TEST_TIMESTAMP`; MovieLens-32M's last day or week, to
    `ML_32M_END`. A copy with events past them (or filters that leave the last day empty)
    would otherwise test on another window, silently."""
    if dataset == "yambda" and test_start != YAMBDA_TEST_TIMESTAMP:
        raise DataError(
            source,
            None,
            f"the log's last day starts at {test_start:,} s, not at the authors' test day "
            f"({YAMBDA_TEST_TIMESTAMP:,} s to {YAMBDA_LAST_TIMESTAMP:,} s): --day_seconds "
            "other than 86,400 or its multiples (the test window is one of them), events past "
            "it, or filters (--yambda_events, --yambda_organic) that keep none on its last "
            "day? --test_day=N tests on another window, counted from the log's first (0).",
        )
    if dataset == "ml-32m" and test_end != ML_32M_END:
        raise DataError(
            source,
            None,
            f"the log's last window ends at {test_end:,} s, not at the midnight after "
            f"MovieLens-32M's last rating ({ML_32M_END:,} s, 2023-10-13T00:00:00Z): is it "
            "another release? --test_day=N tests on another window, counted from the first "
            "(0).",
        )


def yambda_files(directory: str, events: str) -> List[str]:
    """The files of `--yambda_events=events` in Yambda's flat directory `directory`,
    checked.

    Raises:
      DataError: the directory is missing or holds the sizes' directories rather than one
        size's files, a file is missing, is the sequential layout (a row a user, its events
        in lists) or lacks a published column; each names the expected layout.
      ValueError: `events` is not one of `YAMBDA_EVENTS`.
    """
    if events not in YAMBDA_EVENTS:
        raise ValueError(
            f"--yambda_events must be one of {', '.join(YAMBDA_EVENTS)}; received "
            f"--yambda_events={events!r}."
        )
    if not os.path.isdir(directory):
        raise DataError(
            directory, None, f"is not a directory: --dataset=yambda reads {YAMBDA_LAYOUT}."
        )
    sizes = [size for size in YAMBDA_SIZES if os.path.isdir(os.path.join(directory, size))]
    if sizes and not any(
        os.path.exists(os.path.join(directory, name)) for name in YAMBDA_FILES.values()
    ):
        raise DataError(
            directory,
            None,
            f"holds the sizes' directories ({', '.join(sizes)}): give one of them, e.g. "
            f"--data_path={os.path.join(directory, sizes[0])} ({YAMBDA_LAYOUT}).",
        )
    kinds = ("listens", "likes") if events == "both" else (events,)
    files = [os.path.join(directory, YAMBDA_FILES[kind]) for kind in kinds]
    for path in files:
        _check_yambda_file(path)
    return files


def _check_yambda_file(path: str) -> None:
    import pyarrow as pa  # pylint: disable=import-outside-toplevel
    import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

    if not os.path.isfile(path):
        raise DataError(path, None, f"is missing: --dataset=yambda reads {YAMBDA_LAYOUT}.")
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as error:
        raise DataError(path, None, f"cannot be read as Parquet ({error}).") from None
    expected = YAMBDA_COLUMNS[os.path.basename(path)]
    if "item_id" in schema.names and pa.types.is_list(schema.field("item_id").type):
        raise DataError(
            path,
            None,
            "is Yambda's sequential layout (a row a user, the events in lists: item_id is "
            f"{schema.field('item_id').type}); --dataset=yambda reads {YAMBDA_LAYOUT}: "
            "download flat/<size>/ rather than sequential/<size>/.",
        )
    missing = [name for name in expected if name not in schema.names]
    if missing:
        raise DataError(
            path,
            None,
            f"has no column {', '.join(map(repr, missing))} (its columns: "
            f"{', '.join(schema.names)}); --dataset=yambda reads {YAMBDA_LAYOUT}.",
        )
    for name in expected:
        kind = schema.field(name).type
        numeric = pa.types.is_integer(kind) or (
            name in ("played_ratio_pct", "track_length_seconds") and pa.types.is_floating(kind)
        )
        if not numeric:
            raise DataError(
                path,
                None,
                f"column {name!r} holds {kind}; Yambda publishes it as "
                f"{'a number' if name == 'played_ratio_pct' else 'integers'}"
                + (" (uint8: 1 organic, 0 recommended)" if name == "is_organic" else "")
                + f" ({YAMBDA_LAYOUT}).",
            )


def yambda_columns(events: str, organic: str, day_seconds: int) -> events_lib.EventColumns:
    """The event columns of Yambda's flat files: its ids and times (seconds, shifted by
    `yambda_time_shift`), and the rows `--yambda_events` and `--yambda_organic` keep."""
    if organic not in YAMBDA_ORGANIC:
        raise ValueError(
            f"--yambda_organic must be one of {', '.join(YAMBDA_ORGANIC)}; received "
            f"--yambda_organic={organic!r}."
        )
    filters: List[Tuple[str, Tuple[Tuple[str, str, object], ...]]] = []
    if events in ("listens", "both"):
        filters.append(
            (YAMBDA_FILES["listens"], (("played_ratio_pct", ">=", YAMBDA_LISTEN_THRESHOLD),))
        )
    if organic != "all":
        filters.append(("*", (("is_organic", "==", 1 if organic == "organic" else 0),)))
    return events_lib.EventColumns(
        "uid",
        "item_id",
        "timestamp",
        time_unit="s",
        filters=tuple(filters),
        time_shift=yambda_time_shift(day_seconds),
    )


def ml_32m_file(path: str) -> str:
    """MovieLens-32M's ratings.csv at `path` (the file, or a directory holding it), its
    header checked.

    Raises:
      DataError: no such file, or a header other than the published one.
    """
    if os.path.isdir(path):
        path = os.path.join(path, ML_32M_FILE)
    if not os.path.isfile(path):
        raise DataError(path, None, f"is missing: --dataset=ml-32m reads {ML_32M_LAYOUT}.")
    if path.endswith(".zip"):
        raise DataError(
            path, None, f"is a zip archive: unzip it; --dataset=ml-32m reads {ML_32M_LAYOUT}."
        )
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as file:
            header = tuple(name.strip() for name in file.readline().strip().split(","))
    except (OSError, UnicodeDecodeError) as error:
        raise DataError(path, None, f"cannot be read as CSV text ({error}).") from None
    if header != ML_32M_COLUMNS:
        raise DataError(
            path,
            1,
            f"has the header {','.join(header)!r}; --dataset=ml-32m reads {ML_32M_LAYOUT}.",
        )
    return path


def ml_32m_columns(day_seconds: int) -> events_lib.EventColumns:
    """The event columns of MovieLens-32M's ratings.csv (times in seconds since 1970,
    shifted by `ml_32m_time_shift`)."""
    return events_lib.EventColumns(
        "userId", "movieId", "timestamp", time_unit="s", time_shift=ml_32m_time_shift(day_seconds)
    )
