r"""A small public event log, company-style, from MovieLens-1M's ratings: the README's own-log
example (`tfrs-logq train --dataset=events` and `tfrs-logq compare` on it).

Reads GroupLens's `ratings.dat` (`UserID::MovieID::Rating::Timestamp`, plain or .gz; download
ml-1m.zip from https://grouplens.org/datasets/movielens/1m/ , or give tensorflow-datasets'
copy) and writes one file per calendar month, each row an event with string ids and an
ISO-8601 UTC time, as a company's log would hold them:

  user_id    item_id   timestamp
  u_000001   m_1193    2000-12-31T22:12:40Z

MovieLens may not be redistributed: the files stay on your machine. Every rating is an event
(`--min_rating` keeps only those at or above it).

Usage (from the repository's root):
  python -m examples.movielens_event_log --ratings=ml-1m/ratings.dat --output=logs/ml1m
  tfrs-logq compare --output_dir=runs/compare/ml1m --corrections=standard,improved \
      --seeds=3 -- --preset=industrial --dataset=events --data_path='logs/ml1m/*.parquet' \
      --user_column=user_id --item_column=item_id --time_column=timestamp \
      --day_seconds=604800 --test_day=30

MovieLens users rate most of their movies in a session or two, so a next-day protocol needs
days of a week (`--day_seconds=604800`) and a test week whose users came back
(`--test_day=30`: the 31st week, 2000-11-21 to 11-28, about 80,000 ratings by 794 users, 353
of them seen before; later weeks hold a few hundred ratings).
"""

import os

import numpy as np
import pyarrow as pa
import pyarrow.csv
import pyarrow.parquet
from absl import app
from absl import flags

from pipelines.data import loaders

FLAGS = flags.FLAGS
FORMATS = ("parquet", "csv")


def event_table(ratings_path: str, min_rating=None) -> pa.Table:
    """The ratings as events: user_id, item_id (strings) and timestamp (ISO-8601, UTC), in
    time order."""
    ratings = loaders.load_grouplens(ratings_path, min_rating=min_rating)
    users = np.asarray(ratings.user_ids)[np.asarray(ratings.user)].astype(np.int64)
    items = np.asarray(ratings.item_ids)[np.asarray(ratings.item)].astype(np.int64)
    seconds = np.asarray(ratings.timestamp, np.int64)
    order = np.argsort(seconds, kind="stable")
    times = seconds[order].astype("datetime64[s]")
    return pa.table(
        {
            "user_id": [f"u_{user:06d}" for user in users[order]],
            "item_id": [f"m_{item}" for item in items[order]],
            "timestamp": np.datetime_as_string(times, unit="s", timezone="UTC"),
        }
    )


def write_months(table: pa.Table, output: str, file_format: str = "parquet") -> list:
    """One file per calendar month (`YYYY-MM.parquet` or `.csv`) under `output`; their paths."""
    if file_format not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}; received {file_format!r}.")
    os.makedirs(output, exist_ok=True)
    months = np.array([text[:7] for text in table.column("timestamp").to_pylist()])
    paths = []
    for month in np.unique(months):
        part = table.filter(pa.array(months == month))
        path = os.path.join(output, f"{month}.{file_format}")
        if file_format == "parquet":
            pyarrow.parquet.write_table(part, path)
        else:
            pyarrow.csv.write_csv(part, path)
        paths.append(path)
    return paths


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS.output:
        raise app.UsageError("--output is required.")
    table = event_table(FLAGS.ratings, FLAGS.min_rating)
    paths = write_months(table, FLAGS.output, FLAGS.format)
    first, last = table.column("timestamp")[0], table.column("timestamp")[-1]
    print(
        f"Wrote {table.num_rows:,} events ({first} to {last}) into {len(paths)} monthly "
        f"{FLAGS.format} files under {FLAGS.output}."
    )


if __name__ == "__main__":
    flags.DEFINE_string(
        "ratings",
        "",
        "GroupLens ratings.dat (plain or .gz); empty: ml-1m's under $TFRS_LOGQ_DATA.",
    )
    flags.DEFINE_string("output", None, "The directory the monthly files go to (required).")
    flags.DEFINE_enum("format", "parquet", list(FORMATS), "The files' format.")
    flags.DEFINE_float("min_rating", None, "Keep ratings at or above this (default: all).")
    app.run(main)
