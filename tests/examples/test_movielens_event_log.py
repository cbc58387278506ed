"""The README's own-log example: MovieLens ratings written as a company-style event log."""

import os
import tempfile

import pyarrow.csv
import pyarrow.parquet
import pytest

from examples import movielens_event_log


def _ratings(path):
    lines = [
        "2::1193::5::978300760",  # 2000-12-31T22:12:40Z
        "1::661::3::978302109",  # 2000-12-31T22:35:09Z
        "1::914::3::980000000",  # 2001-01-20T14:13:20Z
        "3::3408::4::983000000",  # 2001-02-24T07:33:20Z
        "3::1::1::983000001",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def test_months_of_string_ids_and_iso_times():
    directory = tempfile.mkdtemp()
    ratings = os.path.join(directory, "ratings.dat")
    _ratings(ratings)
    table = movielens_event_log.event_table(ratings)
    assert table.column_names == ["user_id", "item_id", "timestamp"]
    assert table.column("user_id").to_pylist() == [
        "u_000002",
        "u_000001",
        "u_000001",
        "u_000003",
        "u_000003",
    ]
    assert table.column("item_id").to_pylist()[:2] == ["m_1193", "m_661"]
    assert table.column("timestamp").to_pylist()[:3] == [
        "2000-12-31T22:12:40Z",
        "2000-12-31T22:35:09Z",
        "2001-01-20T14:13:20Z",
    ]
    out = os.path.join(directory, "log")
    paths = movielens_event_log.write_months(table, out)
    assert [os.path.basename(p) for p in paths] == [
        "2000-12.parquet",
        "2001-01.parquet",
        "2001-02.parquet",
    ]
    assert pyarrow.parquet.read_table(paths[2]).num_rows == 2
    csv = movielens_event_log.write_months(table, os.path.join(directory, "csv"), "csv")
    assert pyarrow.csv.read_csv(csv[0]).num_rows == 2
    kept = movielens_event_log.event_table(ratings, min_rating=4)
    assert kept.column("item_id").to_pylist() == ["m_1193", "m_3408"]
    with pytest.raises(ValueError, match="--format must be one of parquet, csv; received 'tsv'"):
        movielens_event_log.write_months(table, out, "tsv")
