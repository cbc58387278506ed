"""Loaders: MovieLens-1M (GroupLens ratings.dat, SASRec file, tensorflow-datasets) and Steam.

Every loader returns `Interactions`, each event once: exact duplicates (the same user, item
and time) are dropped and counted (`interactions.chronological`); in SASRec's `user item`
format, which has no times, a line that repeats its user's previous line is such a duplicate.
Malformed input raises `DataError` naming the file, the line and the value.
"""

import ast
import datetime
import gzip
import json
import math
import os
import re
import zlib
from typing import Dict, Iterator, Optional, Tuple

import numpy as np

from pipelines.data.interactions import MAX_ID_SPARSITY
from pipelines.data.interactions import DataError
from pipelines.data.interactions import Interactions
from pipelines.data.interactions import from_arrays
from pipelines.data.interactions import shown
from pipelines.data.interactions import sparse_ids

DATA_ENV = "TFRS_LOGQ_DATA"
# The directory that holds `ml-1m/` (MovieLens is not redistributed, so there is no default):
# the TFRS_LOGQ_DATA environment variable at import, "" when it is unset. A run names its file
# with --data_path instead, or reads MovieLens through tensorflow-datasets (--dataset=ml-1m-tfds).
DATA_DIR = os.environ.get(DATA_ENV, "")
ML_1M_RATINGS_FILE = os.path.join("ml-1m", "ratings_reconstructed.dat.gz")
ML_1M_SASREC_FILE = os.path.join("ml-1m", "sasrec_ml-1m.txt.gz")
# The files under DATA_DIR, or "" (which no path check finds) when TFRS_LOGQ_DATA is unset.
ML_1M_RATINGS = os.path.join(DATA_DIR, ML_1M_RATINGS_FILE) if DATA_DIR else ""
ML_1M_SASREC = os.path.join(DATA_DIR, ML_1M_SASREC_FILE) if DATA_DIR else ""


def data_file(relative: str) -> str:
    """`relative` under the directory TFRS_LOGQ_DATA names (read now, not at import).

    Raises:
      FileNotFoundError: TFRS_LOGQ_DATA is unset, or the file is not there; the
        message says how to name the file instead.
    """
    data_dir = os.environ.get(DATA_ENV, "")
    how = (
        f"Set {DATA_ENV} to the directory that holds {relative} (a run made without "
        "--data_path reads its file from there, in pipelines.evaluate and pipelines.export "
        "too), pass the file to pipelines.train with --data_path (or the `path` argument), "
        "or read MovieLens-1M through tensorflow-datasets with --dataset=ml-1m-tfds."
    )
    if not data_dir:
        raise FileNotFoundError(
            f"No MovieLens file given and {DATA_ENV} is unset (MovieLens is not bundled). {how}"
        )
    path = os.path.join(data_dir, relative)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such data file: {path} ({DATA_ENV}={data_dir}). {how}")
    return path


def _lines(path: str) -> Iterator[Tuple[int, str]]:
    """(1-based line number, stripped line) of a plain or .gz text file, blank lines skipped.
    A file that cannot be read (a directory, a truncated or fake gzip) raises DataError."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"No such data file: {path}")
    if os.path.isdir(path):
        raise DataError(path, None, "is a directory; expected a data file.")
    opener = gzip.open if path.endswith(".gz") else open
    number = 0
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, start=1):
                line = line.strip()
                if line:
                    yield number, line
    except (OSError, EOFError, zlib.error) as error:  # gzip.BadGzipFile is an OSError.
        kind = "a truncated gzip file" if isinstance(error, EOFError) else "unreadable"
        raise DataError(
            path, number + 1 if number else None, f"{kind} ({type(error).__name__}: {error})."
        ) from None


def _finish(path: str, rows, keep_ids: bool) -> Interactions:
    if not rows:
        raise DataError(path, None, "the file holds no interactions.")
    columns = list(zip(*rows))
    return from_arrays(
        columns[0],
        columns[1],
        columns[2] if len(columns) > 2 else None,
        keep_ids=keep_ids,
        source=path,
    )


# Integers as the files write them: ASCII digits (str.isdigit and int() also take other
# scripts' digits, and superscripts that int() then refuses).
_DECIMAL = re.compile(r"[+-]?[0-9]+")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _int64(text: str) -> Optional[int]:
    """`text` as an integer when it is one in ASCII digits (else None); it may lie outside
    the 64-bit range (checked by the caller)."""
    if not _DECIMAL.fullmatch(text):
        return None
    if len(text.lstrip("+-").lstrip("0")) > 20:  # Far outside int64: never parsed.
        return INT64_MAX + 1
    return int(text)


def _in_int64(path: str, number: int, value: int, text: str, what: str, unit: str) -> int:
    if not INT64_MIN <= value <= INT64_MAX:
        raise DataError(
            path,
            number,
            f"the {what} {shown(text)} is outside the 64-bit range "
            f"[-2^63, 2^63); {unit}. Fix or remove the line.",
        )
    return value


def load_grouplens(path: Optional[str] = None, min_rating: Optional[float] = None) -> Interactions:
    """MovieLens `ratings.dat`: `UserID::MovieID::Rating::Timestamp` per line (plain or .gz).

    Args:
      path: the file; None (or "") reads `ml-1m/ratings_reconstructed.dat.gz` under
        TFRS_LOGQ_DATA (`data_file`).
      min_rating: keep only ratings >= this (None keeps all, as the paper does).
    """
    path = path or data_file(ML_1M_RATINGS_FILE)
    rows = []
    for number, line in _lines(path):
        parts = [part.strip() for part in line.split("::")]
        if len(parts) != 4:
            raise DataError(
                path,
                number,
                f"expected UserID::MovieID::Rating::Timestamp; received {shown(line, 80)}.",
            )
        user, movie, timestamp = (_int64(parts[i]) for i in (0, 1, 3))
        try:
            rating = float(parts[2]) if len(parts[2]) < 40 else math.nan
        except ValueError:
            rating = math.nan
        if None in (user, movie, timestamp) or not math.isfinite(rating):
            raise DataError(
                path,
                number,
                "expected integer ids, a numeric rating and an "
                "integer timestamp (ASCII digits, a finite rating); received "
                f"{shown(line, 80)}.",
            )
        assert user is not None and movie is not None and timestamp is not None  # Checked above.
        for value, text, what in ((user, parts[0], "UserID"), (movie, parts[1], "MovieID")):
            _in_int64(path, number, value, text, what, "ids are 64-bit integers")
        _in_int64(path, number, timestamp, parts[3], "timestamp", "times are integer seconds")
        if min_rating is None or rating >= min_rating:
            rows.append((user, movie, timestamp))
    return _finish(path, rows, keep_ids=False)


def load_sasrec(path: Optional[str] = None) -> Interactions:
    """SASRec's `user item` format: 1-based integer ids, chronological within each user.

    Ids are kept as they are, so results compare with SASRec and gSASRec. The
    timestamp is the line's number; a line that repeats its user's previous line is a
    duplicate (dropped and counted, as every loader's). `path` None (or "") reads
    `ml-1m/sasrec_ml-1m.txt.gz` under TFRS_LOGQ_DATA (`data_file`).
    """
    path = path or data_file(ML_1M_SASREC_FILE)
    rows = []
    # user: (item, time) of the user's previous line.
    previous: Dict[Optional[int], Tuple[Optional[int], int]] = {}
    for number, line in _lines(path):
        parts = line.split()
        ids = [_int64(part) if part.isascii() and part.isdigit() else None for part in parts]
        # (mypy: `None in ids` is checked before `min(ids)`.)
        if len(parts) != 2 or None in ids or min(ids) < 1:  # type: ignore[type-var, operator]
            raise DataError(
                path,
                number,
                "expected two positive integer ids `user item` "
                f"(ASCII digits); received {shown(line, 80)}.",
            )
        for value, text, what in zip(ids, parts, ("user id", "item id")):
            if value > INT64_MAX:  # type: ignore[operator]  # No None: checked above.
                raise DataError(
                    path,
                    number,
                    f"the {what} {shown(text)} is beyond 2^63 - 1; "
                    "SASRec-format ids are used as they are (embedding rows "
                    "1..N): renumber them 1..N.",
                )
        user, item = ids
        # No times: a line's time is its number, and a line that repeats its user's
        # previous line is the same event again (a duplicate, dropped by `_finish`).
        last = previous.get(user)
        time = last[1] if last is not None and last[0] == item else number
        previous[user] = (item, time)
        rows.append((user, item, time))
    if rows:
        for column, name in ((0, "user"), (1, "item")):
            sparse = sparse_ids(np.array([row[column] for row in rows], np.int64))
            if sparse is not None:
                largest, distinct = sparse
                line_number = next(row[2] for row in rows if row[column] == largest)
                raise DataError(
                    path,
                    line_number,
                    f"{name} id {largest:,} is more than "
                    f"{MAX_ID_SPARSITY:g}x the file's {distinct:,} distinct {name} "
                    "ids. SASRec-format ids are used as they are (embedding rows "
                    f"1..{largest:,}); renumber the {name}s 1..N.",
                )
    return _finish(path, rows, keep_ids=True)


def _parse_record(path: str, number: int, line: str) -> dict:
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        pass
    try:  # The Steam reviews dump has Python dict literals, not JSON.
        record = ast.literal_eval(line)
    except (ValueError, SyntaxError):
        raise DataError(
            path, number, f"expected a JSON or Python dict; received {line[:80]!r}."
        ) from None
    if not isinstance(record, dict):
        raise DataError(path, number, f"expected a dict; received {line[:80]!r}.")
    return record


def _timestamp(value, path: str, number: int) -> int:
    """Seconds of a record's date: a number of seconds, or an ISO date or time (UTC unless
    it names its offset)."""
    how = "expected ISO YYYY-MM-DD or finite seconds below 2^63"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not (math.isfinite(value) and INT64_MIN <= value < 2.0**63):
            raise DataError(path, number, f"cannot read the date {shown(value)} ({how}).")
        return int(value)
    try:
        if not isinstance(value, str) or len(value) > 64:
            raise ValueError(value)
        when = datetime.datetime.fromisoformat(value)
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        return int(when.timestamp())
    except (ValueError, OverflowError):
        raise DataError(path, number, f"cannot read the date {shown(value)} ({how}).") from None


def load_steam_reviews(
    path: str, user_key: str = "username", item_key: str = "product_id", time_key: str = "date"
) -> Interactions:
    """The raw Steam reviews dump (Kang & McAuley 2018): one record per line, JSON or Python dict.

    Args:
      path: the file (plain or .gz).
      user_key, item_key, time_key: the record's fields; dates are ISO
        `YYYY-MM-DD` (as in the dump) or seconds.
    """
    rows = []
    for number, line in _lines(path):
        record = _parse_record(path, number, line)
        missing = [k for k in (user_key, item_key, time_key) if k not in record]
        if missing:
            raise DataError(
                path,
                number,
                f"the record lacks {', '.join(missing)}; it has {', '.join(sorted(record))}.",
            )
        for key in (user_key, item_key):
            if record[key] is None or record[key] == "" or isinstance(record[key], (dict, list)):
                raise DataError(
                    path,
                    number,
                    f"the record's {key} is {shown(record[key])}; "
                    "every review needs a user and an item id.",
                )
        rows.append(
            (
                str(record[user_key]),
                str(record[item_key]),
                _timestamp(record[time_key], path, number),
            )
        )
    return _finish(path, rows, keep_ids=False)


def load_tfds(
    name: str = "movielens/1m-ratings", data_dir: Optional[str] = None, download: bool = True
) -> Interactions:
    """MovieLens through tensorflow-datasets (`user_id`, `movie_id`, `timestamp` features).

    Needs the TFDS files (downloaded once into `data_dir`; no internet here).
    """
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    dataset = tfds.load(name, split="train", data_dir=data_dir, download=download)
    user_parts, item_parts, times = [], [], []
    columns = ("user_id", "movie_id", "timestamp")
    dataset = dataset.map(lambda x: {k: x[k] for k in columns})  # Other features vary in shape.
    for batch in tfds.as_numpy(dataset.batch(65536)):
        user_parts.append(batch["user_id"].astype(str))
        item_parts.append(batch["movie_id"].astype(str))
        times.append(batch["timestamp"].astype(np.int64))
    if not user_parts:
        raise DataError(name, None, "the dataset holds no interactions.")
    users, items = np.concatenate(user_parts), np.concatenate(item_parts)
    try:  # Raw ids are numeric strings: order them as numbers, as the GroupLens loader does.
        users, items = users.astype(np.int64), items.astype(np.int64)
    except ValueError:
        pass  # Not numbers (e.g. another MovieLens variant): keep them as strings.
    return from_arrays(users, items, np.concatenate(times), source=name)
