"""Issue 78: public logs by name. Yambda's flat files and MovieLens-32M's ratings.csv,
written here in each published schema (nothing downloaded), read with their events'
filters, days and ids, and trained, tested and exported as a user's command would."""

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from absl import flags

from pipelines import train_flags
from pipelines.data import events
from pipelines.data import logs
from pipelines.data import public_logs
from pipelines.data.interactions import DataError

DAY = 86_400
TEST_START = public_logs.YAMBDA_TEST_TIMESTAMP  # 25,913,600 s: the authors' test day.


def write_yambda(directory, users=60, listens=4000, likes=800, days=6, seed=0):
    """Yambda's flat layout as published: listens.parquet and likes.parquet, uint32 ids and
    times (seconds from the log's start, binned to 5 s, up to 26,000,000), uint8
    is_organic, a row an event, sorted by user and time. Returns the arrays written."""
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    written = {}
    for name, rows in (("listens", listens), ("likes", likes)):
        uid = (rng.integers(1, users + 1, rows) * 10).astype(np.uint32)
        item = ((rng.zipf(1.3, rows) % 300 + 1) * 7).astype(np.uint32)
        time = (26_000_000 - rng.integers(1, days * DAY // 5, rows) * 5).astype(np.uint32)
        time[0] = 26_000_000 - 5  # An event on the authors' test day, as every size has.
        columns = {
            "uid": uid,
            "timestamp": time,
            "item_id": item,
            "is_organic": rng.integers(0, 2, rows).astype(np.uint8),
        }
        if name == "listens":
            columns["played_ratio_pct"] = rng.integers(0, 130, rows).astype(np.uint16)
            columns["track_length_seconds"] = rng.integers(60, 400, rows).astype(np.uint32)
        order = np.lexsort((time, uid))
        columns = {key: value[order] for key, value in columns.items()}
        pq.write_table(pa.table(columns), os.path.join(directory, f"{name}.parquet"))
        written[name] = columns
    return written


def write_ml_32m(path, users=200, ratings=5000, weeks=10, seed=1):
    """MovieLens-32M's ratings.csv as published: userId,movieId,rating,timestamp (seconds
    since 1970, to its last day, 2023-10-12), half-star ratings."""
    rng = np.random.default_rng(seed)
    user = rng.integers(1, users + 1, ratings)
    movie = rng.zipf(1.3, ratings) % 3000 + 1
    rating = rng.integers(1, 11, ratings) / 2
    # Its last rating on the published last day (2023-10-12), as the release's.
    time = public_logs.ML_32M_END - 3_600 - rng.integers(0, weeks * 7 * DAY, ratings)
    time[0] = public_logs.ML_32M_END - 3_600
    with open(path, "w") as file:
        file.write("userId,movieId,rating,timestamp\n")
        for row in zip(user, movie, rating, time):
            file.write(f"{row[0]},{row[1]},{row[2]:.1f},{row[3]}\n")
    return user, movie, time


def _config(*argv):
    flag_values = flags.FlagValues()
    train_flags.define_flags(flag_values)
    flag_values(["train", *argv])
    return train_flags.config_from_flags(flag_values)


def _yambda_config(path, *argv):
    return _config("--preset=industrial_smoke", "--dataset=yambda", f"--data_path={path}", *argv)


def _read(config):
    """The log of `config` read into memory (its events, dense and raw)."""
    return events.load_events(logs.event_files(config.data), logs.event_columns(config.data))


@pytest.mark.parametrize(
    "kind, organic",
    [
        ("listens", "all"),
        ("likes", "all"),
        ("both", "all"),
        ("listens", "organic"),
        ("both", "recommended"),
    ],
)
def test_yambda_keeps_the_events_the_authors_count(tmp_path, kind, organic):
    """Listen+ is a listen played at least 50% (the authors' TRACK_LISTEN_THRESHOLD); likes
    as likes.parquet holds them; is_organic 1 organic, 0 recommended. Against numpy."""
    written = write_yambda(tmp_path)
    config = _yambda_config(tmp_path, f"--yambda_events={kind}", f"--yambda_organic={organic}")
    log = _read(config)
    expected = set()
    for name in ("listens", "likes"):
        if kind not in (name, "both"):
            continue
        columns = written[name]
        keep = np.ones(len(columns["uid"]), bool)
        if name == "listens":
            keep &= columns["played_ratio_pct"] >= 50
        if organic != "all":
            keep &= columns["is_organic"] == (1 if organic == "organic" else 0)
        expected |= set(
            zip(
                columns["uid"][keep].tolist(),
                columns["item_id"][keep].tolist(),
                columns["timestamp"][keep].tolist(),
            )
        )
    data = log.interactions
    shift = public_logs.yambda_time_shift(DAY)
    read = set(
        zip(
            data.user_ids[data.user].astype(int).tolist(),
            data.item_ids[data.item].astype(int).tolist(),
            (data.timestamp - shift).tolist(),
        )
    )
    assert read == expected
    assert log.stats["events_read"] >= len(expected)  # Repeats (same uid, item, time) once.
    assert set(log.integer_ids) == {"user", "item"}  # The published integers, served as int64.


def test_yambda_test_day_is_the_authors_test_day(tmp_path):
    """The next-day protocol's last day is [25,913,600, 26,000,000) of the log's seconds,
    the authors' test window (their Constants.TEST_TIMESTAMP), at a day and at a week."""
    write_yambda(tmp_path, days=22)
    assert public_logs.yambda_time_shift(DAY) == 6_400
    for day_seconds in (DAY, 7 * DAY):
        config = _yambda_config(tmp_path, f"--day_seconds={day_seconds}")
        columns = logs.event_columns(config.data)
        files = events.event_files(logs.event_files(config.data))
        span = events.time_span(files, columns)
        days = logs.log_days(config.data, span, files)
        assert days.day_start(days.test) - columns.time_shift == TEST_START
        if day_seconds == DAY:
            assert days.day_start(days.test + 1) - columns.time_shift == 26_000_000


def test_ml_32m_is_read_by_week_unless_told(tmp_path):
    path = tmp_path / "ratings.csv"
    user, movie, _ = write_ml_32m(path)
    config = _config("--preset=industrial_smoke", "--dataset=ml-32m", f"--data_path={path}")
    assert config.data.day_seconds == 7 * DAY
    assert (
        _config(
            "--preset=industrial_smoke",
            "--dataset=ml-32m",
            f"--data_path={path}",
            "--day_seconds=86400",
        ).data.day_seconds
        == DAY
    )
    # The directory holding ratings.csv reads the same; every rating is an interaction.
    log = _read(_config("--preset=industrial_smoke", "--dataset=ml-32m", f"--data_path={tmp_path}"))
    assert log.interactions.num_users == len(set(user.tolist()))
    assert log.interactions.num_items == len(set(movie.tolist()))
    assert set(log.integer_ids) == {"user", "item"}


def test_other_datasets_keep_the_default_day(tmp_path):
    write_yambda(tmp_path)
    assert _yambda_config(tmp_path).data.day_seconds == DAY


def test_a_sequential_yambda_directory_is_refused_with_the_layout(tmp_path):
    table = pa.table(
        {
            "uid": pa.array([10], pa.uint32()),
            "timestamp": pa.array([[5, 10]], pa.list_(pa.uint32())),
            "item_id": pa.array([[7, 14]], pa.list_(pa.uint32())),
            "is_organic": pa.array([[1, 0]], pa.list_(pa.uint8())),
            "played_ratio_pct": pa.array([[90, 20]], pa.list_(pa.uint16())),
            "track_length_seconds": pa.array([[100, 200]], pa.list_(pa.uint32())),
        }
    )
    pq.write_table(table, tmp_path / "listens.parquet")
    with pytest.raises(
        DataError,
        match=r"listens.parquet: is Yambda's sequential layout .*"
        r"download flat/<size>/ rather than sequential/<size>/",
    ):
        _read(_yambda_config(tmp_path))


def test_a_missing_yambda_file_is_named_with_the_layout(tmp_path):
    write_yambda(tmp_path)
    os.remove(tmp_path / "likes.parquet")
    _read(_yambda_config(tmp_path))  # Listens alone need no likes.
    with pytest.raises(
        DataError,
        match=r"likes.parquet: is missing: --dataset=yambda reads "
        r"Yambda's flat layout",
    ):
        _read(_yambda_config(tmp_path, "--yambda_events=both"))


def test_a_renamed_yambda_column_is_named(tmp_path):
    written = write_yambda(tmp_path)
    columns = dict(written["listens"])
    columns["user_id"] = columns.pop("uid")
    pq.write_table(pa.table(columns), tmp_path / "listens.parquet")
    with pytest.raises(
        DataError,
        match=r"has no column 'uid' \(its columns: .*user_id.*\); "
        r"--dataset=yambda reads Yambda's flat layout",
    ):
        _read(_yambda_config(tmp_path))


def test_the_sizes_directory_asks_for_one_size(tmp_path):
    write_yambda(tmp_path / "50m")
    os.makedirs(tmp_path / "500m")
    with pytest.raises(
        DataError,
        match=r"holds the sizes' directories \(50m, 500m\): give one "
        r"of them, e.g. --data_path=.*50m",
    ):
        _read(_yambda_config(tmp_path))


def test_a_ratings_file_with_another_header_is_refused(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_text("user,movie,rating,time\n1,2,3.0,1690000000\n")
    with pytest.raises(
        DataError,
        match=r"ratings.csv, line 1: has the header "
        r"'user,movie,rating,time'; --dataset=ml-32m reads MovieLens-32M's",
    ):
        _read(_config("--preset=industrial_smoke", "--dataset=ml-32m", f"--data_path={path}"))
    with pytest.raises(DataError, match=r"nowhere: is missing: --dataset=ml-32m reads"):
        _read(
            _config(
                "--preset=industrial_smoke",
                "--dataset=ml-32m",
                f"--data_path={tmp_path / 'nowhere'}",
            )
        )


@pytest.mark.parametrize("dataset", ["yambda", "ml-32m"])
def test_a_public_log_without_data_path_says_what_to_give(dataset):
    with pytest.raises(
        ValueError,
        match=f"--dataset={dataset} needs --data_path: .*"
        r"docs/guide/public_logs.md",
    ):
        _config("--preset=industrial_smoke", f"--dataset={dataset}")


def test_bad_yambda_choices_are_refused_by_name(tmp_path):
    for flag in ("--yambda_events=plays", "--yambda_organic=yes"):
        with pytest.raises(ValueError, match=flag.split("=")[0]):
            _yambda_config(tmp_path, flag)


def test_a_yambda_flag_on_another_dataset_is_said_unused(tmp_path, capsys):
    _config("--preset=industrial_smoke", "--yambda_organic=organic")
    assert "--yambda_organic applies with --dataset=yambda" in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.parametrize("dataset", ["yambda", "ml-32m"])
def test_the_command_trains_tests_and_exports_a_public_log(tmp_path, dataset):
    """`tfrs-logq train --dataset=... --data_path=...` on the fixture, then `evaluate`: the
    same test metrics; the export serves the published integer ids."""
    if dataset == "yambda":
        write_yambda(tmp_path / "flat50m")
        data = [f"--data_path={tmp_path / 'flat50m'}", "--yambda_events=both"]
    else:
        write_ml_32m(tmp_path / "ratings.csv")
        data = [f"--data_path={tmp_path / 'ratings.csv'}"]
    out = tmp_path / "run"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}

    def job(*argv):
        result = subprocess.run(
            [sys.executable, "-m", "pipelines.cli", *argv],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
            env=env,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    job(
        "train",
        "--preset=industrial_smoke",
        f"--dataset={dataset}",
        *data,
        f"--output_dir={out}",
        "--index=exact",
    )
    metrics = json.loads((out / "metrics.json").read_text())
    tested = metrics["test"]
    assert metrics["exports"]
    job("evaluate", str(out), "--index=exact")
    assert json.loads((out / "metrics.json").read_text())["test"] == tested
    vocabulary = json.loads((out / "vocabulary" / "vocabulary.json").read_text())
    assert sorted(vocabulary["integer_ids"]) == ["item", "user"], vocabulary


def test_compare_fingerprints_the_files_a_public_log_reads(tmp_path):
    """Not the directory's other files (a dislikes.parquet changed is no change to the log)."""
    from pipelines import compare  # pylint: disable=import-outside-toplevel

    write_yambda(tmp_path)
    (tmp_path / "dislikes.parquet").write_bytes(b"not read")
    assert compare.data_files(_yambda_config(tmp_path)) == [str(tmp_path / "listens.parquet")]
    both = compare.data_files(_yambda_config(tmp_path, "--yambda_events=both"))
    assert both == [str(tmp_path / "likes.parquet"), str(tmp_path / "listens.parquet")]
    path = tmp_path / "ratings.csv"
    write_ml_32m(path)
    config = _config("--preset=industrial_smoke", "--dataset=ml-32m", f"--data_path={tmp_path}")
    assert compare.data_files(config) == [str(path)]


def test_a_test_window_other_than_the_published_one_is_refused(tmp_path):
    """Events past Yambda's last timestamp would make a day of their own the test day; an
    ML-32M copy of another release, a last week that is not the published one."""
    written = write_yambda(tmp_path / "y")
    columns = dict(written["listens"])
    columns["timestamp"] = columns["timestamp"].copy()
    columns["timestamp"][:5] = 26_000_000
    columns["played_ratio_pct"] = columns["played_ratio_pct"].copy()
    columns["played_ratio_pct"][:5] = 100
    pq.write_table(pa.table(columns), tmp_path / "y" / "listens.parquet")
    config = _yambda_config(tmp_path / "y")
    with pytest.raises(
        DataError,
        match=r"last day starts at 26,000,000 s, not at the authors' "
        r"test day \(25,913,600 s",
    ):
        logs.ensure_day_store(config.replace(framework="keras", index="exact"), str(tmp_path / "r"))
    # A test day given by number is the user's choice: not checked.
    chosen = config.replace(test_day=5)
    assert _read_split(chosen).test == 5
    path = tmp_path / "ratings.csv"
    write_ml_32m(path)
    with open(path, "a") as f:
        f.write(f"1,1,4.0,{public_logs.ML_32M_END + 10}\n")
    config = _config("--preset=industrial_smoke", "--dataset=ml-32m", f"--data_path={path}")
    with pytest.raises(DataError, match=r"ends at .* not at the midnight after MovieLens-32M's"):
        _read_split(config)


def _read_split(config):
    files = events.event_files(logs.event_files(config.data))
    span = events.time_span(files, logs.event_columns(config.data))
    return logs.log_days(config.data, span, files)


def test_ml_32m_tests_on_its_last_whole_week(tmp_path):
    path = tmp_path / "ratings.csv"
    write_ml_32m(path)
    config = _config("--preset=industrial_smoke", "--dataset=ml-32m", f"--data_path={path}")
    days = _read_split(config)
    shift = logs.event_columns(config.data).time_shift
    assert days.day_start(days.test + 1) - shift == public_logs.ML_32M_END
    assert days.day_start(days.test) - shift == public_logs.ML_32M_END - 7 * DAY


@pytest.mark.parametrize(
    "column, kind, message",
    [
        (
            "is_organic",
            pa.bool_(),
            r"column 'is_organic' holds bool; Yambda publishes it as "
            r"integers \(uint8: 1 organic, 0 recommended\)",
        ),
        (
            "played_ratio_pct",
            pa.string(),
            r"column 'played_ratio_pct' holds string; Yambda "
            r"publishes it as a number",
        ),
    ],
)
def test_a_yambda_column_of_another_type_is_named(tmp_path, column, kind, message):
    written = write_yambda(tmp_path)
    table = pa.table(written["listens"])
    table = table.set_column(table.schema.get_field_index(column), column, table[column].cast(kind))
    pq.write_table(table, tmp_path / "listens.parquet")
    with pytest.raises(DataError, match=message):
        _read(_yambda_config(tmp_path))


def test_filters_that_keep_nothing_are_said(tmp_path):
    written = write_yambda(tmp_path)
    columns = dict(written["listens"])
    columns["is_organic"] = np.zeros_like(columns["is_organic"])
    pq.write_table(pa.table(columns), tmp_path / "listens.parquet")
    with pytest.raises(
        DataError,
        match=r"the log holds no events its filters keep \(listens"
        r".parquet where played_ratio_pct >= 50; every file where is_organic == 1\)",
    ):
        _read(_yambda_config(tmp_path, "--yambda_organic=organic"))


def test_a_zip_or_gzipped_ratings_file(tmp_path):
    (tmp_path / "ml-32m.zip").write_bytes(b"PK\x03\x04")
    with pytest.raises(DataError, match=r"ml-32m.zip: is a zip archive: unzip it"):
        _read(
            _config(
                "--preset=industrial_smoke",
                "--dataset=ml-32m",
                f"--data_path={tmp_path / 'ml-32m.zip'}",
            )
        )
    path = tmp_path / "ratings.csv"
    user, _, _ = write_ml_32m(path)
    import gzip  # pylint: disable=import-outside-toplevel

    with open(path, "rb") as plain, gzip.open(tmp_path / "ratings.csv.gz", "wb") as packed:
        packed.write(plain.read())
    log = _read(
        _config(
            "--preset=industrial_smoke",
            "--dataset=ml-32m",
            f"--data_path={tmp_path / 'ratings.csv.gz'}",
        )
    )
    assert log.interactions.num_users == len(set(user.tolist()))


def test_targets_already_in_the_history_are_counted_with_recalls_ceiling():
    """The search excludes a query's history: a target already in it (a repeated listen)
    cannot be reached. Against a hand count."""
    from pipelines.data import splits  # pylint: disable=import-outside-toplevel

    eval_set = splits.EvalSet(
        np.array([1, 2, 3]),
        [np.array([4, 5]), np.array([6]), np.array([7, 8])],
        [np.array([4, 9]), np.array([10, 11, 12]), np.array([7, 8])],
    )
    facts = splits.targets_in_history(eval_set)
    assert facts == {"in_history": 3, "targets": 7, "recall_ceiling": round((0.5 + 1 + 0) / 3, 6)}
    assert splits.history_note(facts) == (
        "note: 3 of the test's 7 targets (42.9%) are items already in their query's history, "
        "which the search excludes: no ranking reaches them, so Recall@k is at most 0.5000 at "
        "any k."
    )
    assert (
        splits.history_note(
            splits.targets_in_history(
                eval_set._replace(targets=[np.array([9]), np.array([10]), np.array([11])])
            )
        )
        is None
    )
