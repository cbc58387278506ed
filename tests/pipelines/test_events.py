"""Event logs, the web-scale synthetic log, the next-day split and the industrial run (small)."""

import contextlib
import dataclasses
import glob
import gzip
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from pipelines import configs
from pipelines import evaluate
from pipelines import experiment
from pipelines import train
from pipelines.data import builders
from pipelines.data import day_store
from pipelines.data import events
from pipelines.data import logs
from pipelines.data import splits
from pipelines.data import web_synthetic
from pipelines.data.interactions import DataError
from tfrs_logq import retrieval

DAY = 86_400
SMOKE = configs.PRESETS["industrial_smoke"]
# Logs of small numbers (times 1, 2, ...: 1970 in seconds) read as seconds, not refused.
SECONDS = events.EventColumns(time_unit="s")
AUTO = events.EventColumns()


def _write_csv(path, rows, header="user_id,item_id,timestamp", delimiter=","):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as f:
        f.write(header.replace(",", delimiter) + "\n")
        for row in rows:
            f.write(delimiter.join(str(v) for v in row) + "\n")
    return path


class EventLogTest(tf.test.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp()

    def test_csv_string_ids_dense_by_count_and_min_count(self):
        path = _write_csv(
            os.path.join(self.dir, "log.csv"),
            [
                ("ann", "b", 30),
                ("ann", "a", 10),
                ("bob", "a", 20),
                ("bob", "c", 5),
                ("cy", "a", 7),
                ("cy", "b", 8),
            ],
        )
        log = events.load_events(path, SECONDS)
        data = log.interactions
        # "a" 3 events, "b" 2, "c" 1: dense ids by count.
        self.assertEqual(list(data.item_ids), ["", "a", "b", "c"])
        self.assertEqual(list(data.user_ids[1:]), ["ann", "bob", "cy"])
        # Sorted by user, then time.
        self.assertEqual(data.user.tolist(), [1, 1, 2, 2, 3, 3])
        self.assertEqual(data.item.tolist(), [1, 2, 3, 1, 1, 2])
        self.assertEqual(data.timestamp.tolist(), [10, 30, 5, 20, 7, 8])
        self.assertFalse(log.integer_ids)
        dropped = events.load_events(path, SECONDS, min_item_count=2)
        self.assertEqual(dropped.interactions.num_items, 2)
        self.assertEqual(dropped.stats["events_dropped_out_of_vocabulary"], 1)

    def test_tsv_gz_int64_ids_iso_times_and_weights(self):
        big = 2**62 + 7  # Beyond float precision: must stay exact.
        path = _write_csv(
            os.path.join(self.dir, "log.tsv.gz"),
            [
                (big, 5, "2026-01-02T00:00:00", 1.5),
                (big, big + 1, "2026-01-01", 0.5),
                (3, 5, "2026-01-03 12:00:00", 2.0),
            ],
            header="u,i,t,w",
            delimiter="\t",
        )
        log = events.load_events(path, events.EventColumns("u", "i", "t", "w", time_unit="s"))
        data = log.interactions
        self.assertTrue(log.integer_ids)
        self.assertIn(str(big + 1), list(data.item_ids))
        self.assertIn(str(big), list(data.user_ids))
        first = list(data.user_ids).index(str(big))
        rows = data.user == first
        self.assertEqual(data.timestamp[rows].tolist(), [1767225600, 1767312000])
        np.testing.assert_allclose(np.sort(log.weights), [0.5, 1.5, 2.0])

    def test_parquet_glob_and_saved_vocabularies_encode_alike(self):
        for day in range(2):
            pq.write_table(
                pa.table(
                    {
                        "user_id": ["x", "y", "x"],
                        "item_id": ["p", "q", "q"],
                        "timestamp": pa.array([day * DAY + i for i in range(3)], pa.int64()),
                    }
                ),
                os.path.join(self.dir, f"day-{day}.parquet"),
            )
        pattern = os.path.join(self.dir, "day-*.parquet")
        log = events.load_events(pattern, SECONDS)
        self.assertEqual(log.stats["files"], 2)
        self.assertLen(log.interactions.user, 6)
        events.save_vocabularies(
            os.path.join(self.dir, "vocabulary"),
            log.interactions,
            {"integer_ids": list(log.integer_ids)},
            {},
        )
        saved = events.load_vocabularies(os.path.join(self.dir, "vocabulary"))
        again = events.load_events(pattern, SECONDS, vocabularies=saved)
        for field in ("user", "item", "timestamp"):
            np.testing.assert_array_equal(
                getattr(again.interactions, field), getattr(log.interactions, field)
            )
        # Counting only before a time: later-only ids are out of vocabulary.
        early = events.load_events(pattern, SECONDS, count_before=DAY)
        self.assertEqual(early.interactions.num_items, 2)

    def test_a_log_with_every_line_twice_is_read_once(self):
        # Issue 46: each exact duplicate (user, item, time) dropped, counted in the stats
        # and printed; repeat consumption at another time stays; weights stay aligned.
        rows = [
            ("ann", "b", 30, 1.0),
            ("ann", "a", 10, 2.0),
            ("bob", "a", 20, 3.0),
            ("bob", "a", 25, 4.0),
            ("cy", "c", 7, 5.0),
        ]
        header = "user_id,item_id,timestamp,w"
        once = events.load_events(
            _write_csv(os.path.join(self.dir, "once.csv"), rows, header),
            events.EventColumns(weight="w", time_unit="s"),
        )
        path = _write_csv(
            os.path.join(self.dir, "twice.csv"), [row for row in rows for _ in range(2)], header
        )
        twice = events.load_events(path, events.EventColumns(weight="w", time_unit="s"))
        with mock.patch("builtins.print") as printed:
            logs.say_dropped(twice.stats)  # What a run prints of them.
        printed.assert_called_once_with(
            "[data] read 10 events; kept 5; dropped 5 duplicates (the same user, item and "
            "time), 0 out of the vocabulary (an id under --min_user_count / --min_item_count "
            "in the training days, or first seen after them), 0 after the test day (never "
            "used).",
            flush=True,
        )
        self.assertEqual(once.stats["events_dropped_duplicate"], 0)
        self.assertEqual(
            {k: twice.stats[k] for k in ("events_read", "events_kept", "events_dropped_duplicate")},
            {"events_read": 10, "events_kept": 5, "events_dropped_duplicate": 5},
        )
        self.assertEqual(twice.interactions.duplicates, 5)
        for field in ("user", "item", "timestamp", "user_ids", "item_ids"):
            np.testing.assert_array_equal(
                getattr(twice.interactions, field), getattr(once.interactions, field)
            )
        np.testing.assert_array_equal(twice.weights, once.weights)
        self.assertEqual(twice.interactions.sequences()[2].tolist(), [1, 1])  # bob: a, a.

    def test_times_and_ids_outside_int64_are_named(self):
        cases = {
            # A time at 2^63, as written (a CSV's time column is read as text), and a float
            # past it.
            "column 'timestamp' holds '9223372036854775808' in data row 2, outside int64 "
            "seconds [-2^63, 2^63)": [("a", "x", 1), ("b", "y", 2**63)],
            "column 'timestamp' holds '1e+19' in data row 1, outside int64 seconds": [
                ("a", "x", "1e19"),
                ("b", "y", 2.5),
            ],
            # 20,000 digits: the value itself, cut.
            f"column 'timestamp' holds '{'9' * 40}'... (20,000 characters) in data row 1, "
            "outside int64 seconds": [("a", "x", "9" * 20_000), ("b", "y", 5)],
            # Beside a date: both named.
            f"column 'timestamp' holds the number '{'9' * 40}'... (20,000 characters) in data "
            "row 2 and '2026-01-01' in data row 1": [
                ("a", "x", "2026-01-01"),
                ("b", "y", "9" * 20_000),
            ],
        }
        for number, (expected, rows) in enumerate(cases.items()):
            path = _write_csv(os.path.join(self.dir, f"range{number}.csv"), rows)
            with self.assertRaisesRegex(DataError, re.escape(f"{path}: {expected}")):
                events.load_events(path)
        # Unsigned ids at or above 2^63 are kept exactly, as strings (not served as int64).
        path = os.path.join(self.dir, "ids.parquet")
        pq.write_table(
            pa.table(
                {
                    "user_id": pa.array([2**63 + 1, 2], pa.uint64()),
                    "item_id": pa.array([3, 4], pa.uint64()),
                    "timestamp": pa.array([1, 2], pa.uint64()),
                }
            ),
            path,
        )
        log = events.load_events(path, SECONDS)
        self.assertIn(str(2**63 + 1), list(log.interactions.user_ids))
        self.assertEqual(log.integer_ids, ("item",))
        pq.write_table(
            pa.table(
                {"user_id": ["a"], "item_id": ["b"], "timestamp": pa.array([2**63], pa.uint64())}
            ),
            path,
        )
        with self.assertRaisesRegex(
            DataError,
            re.escape(f"{path}: column 'timestamp' holds '{2**63}' in data row 1, outside int64"),
        ):
            events.load_events(path)
        pq.write_table(
            pa.table(
                {"user_id": ["a", "b"], "item_id": ["b", "c"], "timestamp": ["5", str(2**63)]}
            ),
            path,
        )
        with self.assertRaisesRegex(
            DataError,
            re.escape(f"{path}: column 'timestamp' holds '{2**63}' in data row 2, outside int64"),
        ):
            events.load_events(path)
        # Millisecond timestamps with a remainder are whole seconds (the cast used to fail).
        pq.write_table(
            pa.table(
                {
                    "user_id": ["a"],
                    "item_id": ["b"],
                    "timestamp": pa.array([1_500_000_000_123], pa.timestamp("ms")),
                }
            ),
            path,
        )
        self.assertEqual(events.load_events(path).interactions.timestamp.tolist(), [1_500_000_000])

    def test_bad_input_is_a_named_error(self):
        good = [("a", "x", 1), ("b", "y", 2)]
        cases = {
            "no column 'timestamp'": ("user_id,item_id,when", good, {}),
            "column 'item_id' is empty (null) in data row 2": (
                "user_id,item_id,timestamp",
                [("a", "x", 1), ("b", "", 2)],
                {},
            ),
            "cannot read the time 'yesterday'": (
                "user_id,item_id,timestamp",
                [("a", "x", "2026-01-01"), ("b", "y", "yesterday")],
                {},
            ),
            "over the 3 the memory budget": ("user_id,item_id,timestamp", good, {"max_entries": 3}),
        }
        for expected, (header, rows, kwargs) in cases.items():
            path = _write_csv(os.path.join(self.dir, f"{len(expected)}.csv"), rows, header)
            with self.assertRaisesRegex(
                DataError, expected.replace("(", r"\(").replace(")", r"\)")
            ):
                events.load_events(path, **{"columns": SECONDS, **kwargs})
        with self.assertRaisesRegex(DataError, "none-\\*.csv: matches no event log file"):
            events.load_events(os.path.join(self.dir, "none-*.csv"))
        with self.assertRaisesRegex(DataError, "extension '.json'"):
            open(os.path.join(self.dir, "log.json"), "w").close()
            events.load_events(os.path.join(self.dir, "log.json"))
        with self.assertRaisesRegex(ValueError, "min_item_count must be a positive integer"):
            events.load_events(os.path.join(self.dir, "*.csv"), min_item_count=0)


class TimesTest(tf.test.TestCase):
    """Times as text or typed, in any offset or epoch unit, read to the same UTC seconds;
    implausible times refused with their row."""

    # 2024-05-01T12:30:00Z and 2024-05-02T00:00:00Z.
    WANT = [1_714_566_600, 1_714_608_000]

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp()

    def _times(self, times, columns=AUTO, kind="parquet"):
        path = os.path.join(self.dir, f"log{len(os.listdir(self.dir))}.{kind}")
        table = pa.table({"user_id": ["a", "b"], "item_id": ["x", "y"], "timestamp": times})
        if kind == "parquet":
            pq.write_table(table, path)
        else:
            pa_csv.write_csv(table, path)
        log = events.load_events(path, columns)
        order = np.argsort(log.interactions.user_ids[log.interactions.user])
        return log.interactions.timestamp[order].tolist()

    def test_iso_strings_with_an_offset_read_to_utc_as_text_or_typed(self):
        for kind in ("parquet", "csv"):
            for times in (
                ["2024-05-01T12:30:00Z", "2024-05-02T00:00:00Z"],
                ["2024-05-01T14:30:00+02:00", "2024-05-01T19:00:00-0500"],
                ["2024-05-01T12:30:00.750Z", "2024-05-02 00:00:00"],  # Fraction; no offset.
            ):
                self.assertEqual(self._times(times, kind=kind), self.WANT, (kind, times))
        typed = pa.array([self.WANT[0] * 1000, self.WANT[1] * 1000], pa.timestamp("ms", "UTC"))
        self.assertEqual(self._times(typed), self.WANT)
        berlin = pa.array(self.WANT, pa.timestamp("s", "Europe/Berlin"))  # Stored as UTC.
        self.assertEqual(self._times(berlin), self.WANT)

    def test_epoch_units_are_read_from_the_numbers_size_or_given(self):
        for scale in (1, 10**3, 10**6, 10**9):
            numbers = pa.array([t * scale + scale // 2 for t in self.WANT], pa.int64())
            self.assertEqual(self._times(numbers), self.WANT, scale)
            self.assertEqual(self._times(pa.array([str(t * scale) for t in self.WANT])), self.WANT)
        self.assertEqual(self._times(pa.array([1.7145666e12, 1.714608e12])), self.WANT)
        with self.assertRaisesRegex(DataError, "holds inf in data row 2; times are finite"):
            self._times(pa.array([1.7145666e12, float("inf")]))
        # A run says which unit it read.
        path = os.path.join(self.dir, "ms.csv")
        _write_csv(path, [("a", "x", self.WANT[0] * 1000), ("a", "y", self.WANT[1] * 1000)])
        config = configs.PRESETS["smoke"].replace(
            dataset="events", data_path=path, split="loo", min_user_count=1
        )
        with contextlib.redirect_stdout(io.StringIO()) as printed:
            data = experiment.load_data(config)
        self.assertIn("[data] times read as milliseconds since 1970", printed.getvalue())
        self.assertEqual(sorted(data.timestamp.tolist()), self.WANT)
        given = events.EventColumns(time_unit="ms")
        self.assertEqual(self._times(pa.array([5_000, 86_400_000]), given), [5, 86_400])
        with self.assertRaisesRegex(
            ValueError, "time_unit must be one of auto, s, ms, us, ns; received time_unit='sec'"
        ):
            events.EventColumns(time_unit="sec")

    def test_a_csv_reads_every_block_alike_and_decimal_times_as_numbers(self):
        # pyarrow guesses a text column's type per 16 MB block: a block of ISO times without
        # an offset and a later one with "Z" made two types and a read error.
        # So did a block of whole seconds before one with fractions.
        rows = 400_000  # 14-16 MB a half: the halves fall in different blocks.
        for first, then in (
            ("2024-05-01T12:30:00Z", "2024-05-02 00:00:00"),
            ("1714566600", "1714608000.5"),
        ):
            path = os.path.join(self.dir, f"mixed{len(os.listdir(self.dir))}.csv")
            with open(path, "w") as f:
                f.write("user_id,item_id,timestamp\n")
                f.writelines(f"u{i % 50},i{i % 7},{first}\n" for i in range(rows))
                f.writelines(f"u{i % 50},i{i % 7},{then}\n" for i in range(rows))
            log = events.load_events(path, AUTO, min_user_count=1)
            self.assertEqual(np.unique(log.interactions.timestamp).tolist(), self.WANT, first)
        # Decimal numbers as text (a spreadsheet's export) read as numbers, in their unit.
        self.assertEqual(self._times(["1714566600.5", "1.714608e9"], kind="csv"), self.WANT)
        self.assertEqual(self._times(["1714566600000.0", "1.714608E12"], kind="csv"), self.WANT)
        # Numbers beside dates: both named, neither called unreadable.
        for kind in ("csv", "parquet"):
            with self.assertRaisesRegex(
                DataError,
                "holds the number '1714566600' in data row 2 and '2024-05-02T00:00:00Z' in "
                "data row 1: a column's times are all numbers",
            ):
                self._times(["2024-05-02T00:00:00Z", "1714566600"], kind=kind)

    def test_implausible_times_are_refused_with_their_row(self):
        cases = {
            # Days or positions as seconds: 1970.
            "column 'timestamp' holds '5' in data row 2, read as seconds: 1970-01-01 00:00:05 "
            "UTC, outside [1990-01-01, ": pa.array([self.WANT[0], 5]),
            # Seconds times 1,000 past the millisecond range's start: the year 56,000 would
            # read as milliseconds; a value beyond next year is named.
            "holds '4102444800' in data row 1, read as seconds: 2100-01-01 00:00:00 UTC": pa.array(
                [4_102_444_800, self.WANT[0]]
            ),
        }
        cases[
            "holds '1714608000000' in data row 2, milliseconds by its size, where data row 1 "
            "holds '1714566600', seconds: a column's times are of one unit"
        ] = pa.array([self.WANT[0], self.WANT[1] * 1000])
        for expected, times in cases.items():
            with self.assertRaisesRegex(DataError, re.escape(expected)):
                self._times(times)
        # Given the unit, the numbers are taken as they are.
        self.assertEqual(
            self._times(pa.array([self.WANT[0], 5]), events.EventColumns(time_unit="s")),
            [self.WANT[0], 5],
        )
        path = os.path.join(self.dir, "long.parquet")
        pq.write_table(
            pa.table(
                {"user_id": ["a", "b"], "item_id": ["x", "y"], "timestamp": [700_000_000, 1.7e9]}
            ),
            path,
        )
        with self.assertRaisesRegex(
            DataError,
            re.escape(
                f"{path}: column 'timestamp' spans 31.7 years, from 1992-03-07 20:26:40 UTC to "
                "2023-11-14 22:13:20 UTC: more than the 20 years"
            ),
        ):
            events.time_span([path], events.EventColumns())

    def test_an_unreadable_time_is_named_by_its_row_and_value(self):
        for rows, row, value in (
            (["2024-05-01", "yesterday"], 2, "yesterday"),
            (["noon", "2024-05-01"], 1, "noon"),
            (["2024-05-01T12:30:00Z"] * 5 + ["2024-13-01T00:00:00Z"], 6, "2024-13-01T00:00:00Z"),
            # A fraction beside a value that parses only in whole seconds: each row alone.
            (["2024-05-01T00:00:00.5", "2024-05-02", "0001-01-01T00:00:00", "x"], 4, "x"),
        ):
            path = os.path.join(self.dir, f"bad{len(rows)}{row}.parquet")
            pq.write_table(
                pa.table(
                    {"user_id": ["a"] * len(rows), "item_id": ["x"] * len(rows), "timestamp": rows}
                ),
                path,
            )
            with self.assertRaisesRegex(
                DataError,
                re.escape(
                    f"{path}: cannot read the time '{value}' in column 'timestamp', data row {row}"
                ),
            ):
                events.load_events(path)


class IdWhitespaceTest(tf.test.TestCase):
    def test_spaces_around_ids_are_stripped_and_counted_unless_kept(self):
        directory = tempfile.mkdtemp()
        path = os.path.join(directory, "log.parquet")
        pq.write_table(
            pa.table(
                {
                    "user_id": ["u_1 ", "u_1", "\tu_2", "u_2"],
                    "item_id": ["a", " a ", "b", "b"],
                    "timestamp": [1, 2, 3, 4],
                }
            ),
            path,
        )
        log = events.load_events(path, SECONDS)
        self.assertEqual(sorted(log.interactions.user_ids[1:]), ["u_1", "u_2"])
        self.assertEqual(sorted(log.interactions.item_ids[1:]), ["a", "b"])
        self.assertEqual((log.stats["user_ids_stripped"], log.stats["item_ids_stripped"]), (2, 1))
        kept = events.load_events(path, events.EventColumns(time_unit="s", keep_id_whitespace=True))
        self.assertEqual(len(kept.interactions.user_ids) - 1, 4)
        self.assertEqual(kept.stats["user_ids_stripped"], 0)
        # An id of spaces only is empty: named with its row.
        pq.write_table(
            pa.table({"user_id": ["u_1", "  "], "item_id": ["a", "b"], "timestamp": [1, 2]}),
            path,
        )
        with self.assertRaisesRegex(
            DataError, re.escape(f"{path}: column 'user_id' holds the empty id '  ' in data row 2")
        ):
            events.load_events(path, SECONDS)
        # A catalog's ids are stripped alike.
        catalog = os.path.join(directory, "items.txt")
        with open(catalog, "w") as f:
            f.write("a \n  \nb\n")
        self.assertEqual(events.read_catalog(catalog).to_pylist(), ["a", "b"])
        self.assertEqual(
            events.read_catalog(catalog, keep_whitespace=True).to_pylist(), ["  ", "a ", "b"]
        )


class DroppedEventsTest(tf.test.TestCase):
    def test_events_after_the_test_day_are_counted_apart_in_memory_and_in_the_store(self):
        start = web_synthetic.START_TIME
        rows = [
            ("a", "x", start),
            ("b", "x", start + 5),
            ("a", "y", start + DAY),
            ("b", "y", start + DAY + 1),
            ("a", "x", start + 2 * DAY),  # The validation day.
            ("a", "y", start + 3 * DAY),  # The test day (3).
            ("z", "new", start + 3 * DAY),  # Out of the vocabulary, on the test day.
            ("a", "x", start + 4 * DAY),  # After the test day: in the vocabulary,
            ("late", "w", start + 5 * DAY),  # out of it,
            ("late", "w", start + 5 * DAY),  # and its duplicate.
        ]
        path = _write_csv(os.path.join(tempfile.mkdtemp(), "log.csv"), rows)
        want = {
            "events_read": 10,
            "events_dropped_out_of_vocabulary": 1,
            "events_after_test_day": 3,
        }
        for model, order in (("sasrec", "shuffle"), ("two_tower", "time")):
            config = SMOKE.replace(
                dataset="events",
                data_path=path,
                test_day=3,
                min_user_count=1,
                model=model,
                order=order,
                history_length=4,
            )
            out = tempfile.mkdtemp()
            with contextlib.redirect_stdout(io.StringIO()) as printed:
                experiment.load_data(config, out)
                facts = logs.event_log_facts(config, out)
            self.assertEqual({key: facts[key] for key in want}, want, model)
            # The parts sum to the events read: 6 kept + 1 + 3.
            self.assertIn(
                "[data] read 10 events; kept 6; dropped 0 duplicates (the same user, item and "
                "time), 1 out of the vocabulary",
                printed.getvalue(),
            )
            parts = ("events_kept", "events_dropped_duplicate", *list(want)[1:])
            self.assertEqual(sum(facts[key] for key in parts), facts["events_read"])
            self.assertIn("3 after the test day (never used).", printed.getvalue())


class DuplicateCountTest(tf.test.TestCase):
    """The vocabularies count an event logged more than once once (issue 62, carried): the
    minimum counts and the ids' order see the events `load_events` keeps."""

    ROWS = [
        # "once" has one event, logged three times (twice in another file's batch): under
        # --min_user_count=2 it is out of the vocabulary, as its one kept event says.
        ("once", "a", 1_700_000_000),
        ("twice", "a", 1_700_000_000),
        ("twice", "b", 1_700_000_050),
        ("once", "a", 1_700_000_000),
        ("thrice", "a", 1_700_000_100),
        ("thrice", "b", 1_700_000_200),
        ("thrice", "c", 1_700_000_300),
        ("once ", "a", 1_700_000_000),  # The same id once stripped.
        ("twice", "c", 1_700_000_050),  # The same time, another item: no duplicate.
    ]

    def _counts(self, pattern, **kwargs):
        vocabularies = events.log_vocabularies(
            events.event_files(pattern), AUTO, min_user_count=2, **kwargs
        )
        return {
            kind: dict(zip(vocab.ids.tolist(), vocab.counts.tolist()))
            for kind, vocab in vocabularies.items()
        }

    def test_an_event_logged_again_counts_once(self):
        directory = tempfile.mkdtemp()
        _write_csv(os.path.join(directory, "part-1.csv"), self.ROWS[:4])
        _write_csv(os.path.join(directory, "part-2.csv"), self.ROWS[4:])
        pattern = os.path.join(directory, "part-*.csv")
        want = {
            "user": {"thrice": 3, "twice": 3},
            "item": {"a": 3, "b": 2, "c": 2},  # "a": once, twice and thrice's; not 5.
        }
        for batch_rows in (1, 2, 1 << 20):  # Repeats in the same batch or in others.
            self.assertEqual(self._counts(pattern, batch_rows=batch_rows), want, batch_rows)
        # The events read: "once"'s three out of the vocabulary (before, it was in the
        # vocabulary with a count of 3, and two of them dropped as duplicates).
        log = events.load_events(pattern, AUTO, min_user_count=2)
        self.assertEqual(log.stats["events_dropped_out_of_vocabulary"], 3)
        self.assertEqual(log.stats["events_dropped_duplicate"], 0)
        self.assertEqual(log.interactions.num_users, 2)

    def test_a_hash_collision_is_no_duplicate(self):
        # Every event keyed alike: the ids and times compared themselves decide.
        directory = tempfile.mkdtemp()
        pattern = _write_csv(os.path.join(directory, "log.csv"), self.ROWS)
        want = self._counts(pattern)
        with mock.patch.object(
            events._Duplicates, "_hash", lambda self, strings: np.zeros(len(strings), np.uint64)
        ):
            self.assertEqual(self._counts(pattern, batch_rows=3), want)

    def test_a_log_changed_between_its_two_reads_is_named(self):
        # The repeats are found on a second read; a log cut short in between (a file being
        # rewritten) would take the wrong events off the counts, so it is refused.
        pattern = _write_csv(os.path.join(tempfile.mkdtemp(), "log.csv"), self.ROWS)
        read = events._counted_events
        calls = []

        def counted_events(*args, **kwargs):
            calls.append(1)
            if len(calls) == 2:
                _write_csv(pattern, self.ROWS[:5])
            return read(*args, **kwargs)

        with mock.patch.object(events, "_counted_events", counted_events):
            with self.assertRaisesRegex(
                events.DataError,
                "changed while it was read: 9 events counted at first, 5 when read again",
            ):
                self._counts(pattern)
        self.assertLen(calls, 2)

    def test_no_temporary_file_is_left(self):
        pattern = _write_csv(os.path.join(tempfile.mkdtemp(), "log.csv"), self.ROWS)
        before = set(glob.glob(os.path.join(tempfile.gettempdir(), "tfrs_logq_duplicates_*")))
        self._counts(pattern)
        after = set(glob.glob(os.path.join(tempfile.gettempdir(), "tfrs_logq_duplicates_*")))
        self.assertEqual(after, before)


class OneDayLogTest(tf.test.TestCase):
    def test_a_log_of_one_day_is_refused_for_its_days_not_the_minimum_counts(self):
        start = web_synthetic.START_TIME
        rows = [
            (f"u{u}", f"i{(u + i) % 30}", start + 100 * u + i) for u in range(50) for i in range(5)
        ]
        path = _write_csv(os.path.join(tempfile.mkdtemp(), "log.csv"), rows)
        config = SMOKE.replace(dataset="events", data_path=path)
        with self.assertRaisesRegex(
            DataError,
            re.escape(
                f"{path}: --test_day=-1 leaves no training day: the log spans days 0..0 "
                "(86400 s each)"
            ),
        ):
            experiment.load_data(config, tempfile.mkdtemp())


class ItemCatalogTest(tf.test.TestCase):
    """--item_catalog: every catalog item gets a row, those without an event after the log's."""

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp()

    def test_text_csv_and_parquet_catalogs_read_alike(self):
        text = os.path.join(self.dir, "items.txt")
        with open(text, "w") as f:
            f.write("c\na\n\nd\na\n")  # A duplicate and an empty line.
        csv = _write_csv(
            os.path.join(self.dir, "items.csv"), [("c", 1), ("a", 2), ("d", 3)], "item_id,x"
        )
        parquet = os.path.join(self.dir, "items.parquet")
        pq.write_table(pa.table({"sku": pa.array([7, 3, 7], pa.int64())}), parquet)
        for path, column, expected in (
            (text, "item_id", ["a", "c", "d"]),
            (csv, "item_id", ["a", "c", "d"]),
            (parquet, "sku", ["3", "7"]),  # Integer ids as the log's: decimal strings.
        ):
            self.assertEqual(events.read_catalog(path, column).to_pylist(), expected)

    def test_the_vocabulary_grows_by_the_catalog_after_the_log_items(self):
        vocab = events.Vocabulary(np.array(["b", "a"], object), np.array([3, 1]))
        extended, facts = events.with_catalog(vocab, pa.array(["a", "c", "d"]))
        self.assertEqual(list(extended.ids), ["b", "a", "c", "d"])
        self.assertEqual(extended.counts.tolist(), [3, 1, 0, 0])
        self.assertEqual(
            facts, {"catalog_items": 3, "catalog_items_added": 2, "log_items_not_in_catalog": 1}
        )

    def test_an_event_log_run_loads_every_catalog_item(self):
        log = _write_csv(
            os.path.join(self.dir, "log.csv"),
            [("u1", "a", 1), ("u1", "b", 2), ("u2", "a", 3), ("u2", "b", 4)],
        )
        catalog = os.path.join(self.dir, "items.txt")
        with open(catalog, "w") as f:
            f.write("a\nb\nnew1\nnew2\n")
        config = configs.PRESETS["smoke"].replace(
            dataset="events",
            data_path=log,
            split="loo",
            min_user_count=1,
            item_catalog=catalog,
            time_unit="s",
        )
        configs.validate(config)
        data = experiment.load_data(config)
        self.assertEqual(list(data.item_ids), ["", "a", "b", "new1", "new2"])
        self.assertEqual(data.num_items, 4)
        self.assertEqual(np.bincount(data.item, minlength=5).tolist(), [0, 2, 2, 0, 0])

    def test_the_synthetic_log_writes_its_law_as_the_catalog(self):
        config = SMOKE.replace(item_catalog="log")
        with mock.patch.dict(os.environ, {logs.CACHE_ENV: self.dir}):
            path = logs.item_catalog_path(config.data)
            self.assertLen(events.read_catalog(path), SMOKE.data.synthetic_items)
            self.assertEqual(experiment.load_data(config).num_items, SMOKE.data.synthetic_items)

    def test_bad_catalogs_are_named(self):
        with self.assertRaisesRegex(DataError, "/nowhere.txt: is not a file \\(--item_catalog"):
            events.read_catalog("/nowhere.txt")
        empty = os.path.join(self.dir, "empty.txt")
        open(empty, "w").close()
        with self.assertRaisesRegex(DataError, "holds no item id"):
            events.read_catalog(empty)
        csv = _write_csv(os.path.join(self.dir, "c.csv"), [("x",)], "sku")
        with self.assertRaisesRegex(DataError, "has no column 'item_id'"):
            events.read_catalog(csv)
        with self.assertRaisesRegex(ValueError, "--item_catalog is for event logs"):
            configs.validate(configs.PRESETS["smoke"].replace(item_catalog=csv))
        with self.assertRaisesRegex(ValueError, "--item_catalog=log reads the catalog"):
            configs.validate(SMOKE.replace(dataset="events", data_path=csv, item_catalog="log"))


class IdTypesTest(tf.test.TestCase):
    """Issue 75: the ids' type is decided once, on the log's first read, for the log, the
    catalog and the export: integers (int64) only as int64 prints them, else strings as
    written; a catalog the log's integers cannot hold, or a malformed one, is refused with
    its file, line and value before anything is trained."""

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp()

    def _file(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w", newline="") as f:
            f.write(text)
        return path

    def test_negative_and_zero_padded_ids_are_strings_as_written(self):
        path = _write_csv(
            os.path.join(self.dir, "log.csv"),
            [(-1, "007", 1), (-2, "7", 2), (-1, -5, 3), (-2, "007", 4)],
        )
        said = []
        vocabularies = events.log_vocabularies(events.event_files(path), SECONDS, say=said.append)
        self.assertEqual([v.integer for v in vocabularies.values()], [False, False])
        self.assertEqual(
            said,
            [
                f"ids: user ids are strings ('-1' in {path} data row 1); item ids are strings "
                f"('007' in {path} data row 1). An id is an integer only as int64 prints it, "
                "without a sign, leading zeros or a point; strings are served as written "
                "('007' is not '7')."
            ],
        )
        log = events.load_events(path, SECONDS)
        self.assertEqual(log.integer_ids, ())  # Was ("user", "item"): the export then failed.
        # "007" and "7" are two items, each as written.
        self.assertEqual(list(log.interactions.item_ids), ["", "007", "-5", "7"])
        self.assertEqual(list(log.interactions.user_ids), ["", "-1", "-2"])
        # Typed integer columns alike: a negative int64 id makes the column strings.
        parquet = os.path.join(self.dir, "log.parquet")
        pq.write_table(
            pa.table(
                {
                    "user_id": pa.array([3, 9], pa.int64()),
                    "item_id": pa.array([-4, 2**62], pa.int64()),
                    "timestamp": [1, 2],
                }
            ),
            parquet,
        )
        log = events.load_events(parquet, SECONDS)
        self.assertEqual(log.integer_ids, ("user",))
        self.assertIn("-4", list(log.interactions.item_ids))
        # Integers as int64 prints them (0 and 2^63 - 1 included) are served as int64.
        plain = _write_csv(
            os.path.join(self.dir, "plain.csv"),
            [(0, 2**63 - 1, 1), (10, 7, 2), (10, 0, 3)],
        )
        said.clear()
        log = events.load_events(plain, SECONDS)
        self.assertEqual(log.integer_ids, ("user", "item"))
        events.log_vocabularies([plain], SECONDS, say=said.append)
        self.assertEqual(
            said,
            [
                "ids: user ids are integers (served as int64); item ids are integers "
                "(served as int64)."
            ],
        )
        # 19 digits past 2^63 - 1, a plus sign, a point: strings.
        for value in (2**63, "+7", "7.0"):
            other = _write_csv(os.path.join(self.dir, "other.csv"), [(1, 5, 1), (2, value, 2)])
            self.assertEqual(events.load_events(other, SECONDS).integer_ids, ("user",), value)

    def test_the_saved_vocabularies_keep_their_types(self):
        path = _write_csv(os.path.join(self.dir, "log.csv"), [(1, "007", 1), (2, 8, 2)])
        log = events.load_events(path, SECONDS)
        directory = os.path.join(self.dir, "vocabulary")
        events.save_vocabularies(
            directory, log.interactions, {"integer_ids": list(log.integer_ids)}, {}
        )
        saved = events.load_vocabularies(directory)
        self.assertEqual((saved["user"].integer, saved["item"].integer), (True, False))
        again = events.load_events(path, SECONDS, vocabularies=saved)
        self.assertEqual(again.integer_ids, ("user",))
        # A run saved before the types were decided up front said "item" for "007": strings.
        with open(os.path.join(directory, "vocabulary.json"), "w") as f:
            json.dump({"integer_ids": ["user", "item"]}, f)
        saved = events.load_vocabularies(directory)
        self.assertEqual((saved["user"].integer, saved["item"].integer), (True, False))

    def test_a_catalog_the_logs_integer_ids_cannot_hold_is_refused_with_its_line(self):
        parquet = os.path.join(self.dir, "items.parquet")
        pq.write_table(pa.table({"item_id": ["5", "6", "1.0"]}), parquet)
        negative = os.path.join(self.dir, "negative.parquet")
        pq.write_table(pa.table({"item_id": pa.array([5, -6], pa.int64())}), negative)
        cases = [
            (self._file("a.csv", "item_id,x\n7,a\n8,b\nabc,c\n"), "line 4", "'abc'"),
            (self._file("b.txt", "7\n\n007\n"), "line 3", "'007'"),
            (self._file("c.tsv", "x\titem_id\n1\t-7\n"), "line 2", "'-7'"),
            (parquet, None, "'1.0' in data row 3"),
            (negative, None, "'-6' in data row 2"),
        ]
        for path, line, value in cases:
            where = f"{path}, {line}" if line else path
            with self.assertRaisesRegex(
                DataError,
                re.escape(
                    f"{where}: holds the item id {value}, which the event log's item ids "
                    "cannot hold: they are integers (served as int64), and a catalog id beside "
                    "them is an int64 as it prints ('7'; not '007', '-7', '7.0' or a name). "
                    "Write the catalog's ids as the log writes them."
                ),
            ):
                events.read_catalog(path, integer=True)
            # Beside a log of strings, every one of them is an id.
            self.assertIn(value.split("'")[1], events.read_catalog(path).to_pylist())

    def test_a_malformed_csv_catalog_is_named_by_its_line(self):
        cases = {
            # The quote opened on line 3 swallowed the rest of the file: 1 id of 3 was read.
            "q.csv": (
                'item_id,x\n7,1\n"8,2\n9,3\n',
                "line 3: is not well-formed CSV: a quote opened on this line is never closed "
                "(unexpected end of data).",
            ),
            "r.csv": (
                "item_id,x\n7,1\n\n8\n9,3\n",
                "line 4: holds 1 field where the header has 2: every row of a CSV catalog "
                "has the header's fields.",
            ),
            "r.tsv": (
                "item_id\tx\n7\t1\t2\n",
                "line 2: holds 3 fields where the header has 2: every row of a TSV catalog "
                "has the header's fields.",
            ),
            "s.csv": (
                'item_id\n7\n"8\n9"\n',
                "line 3: column 'item_id' holds '8\\n9', an id that spans lines: an id holds "
                "no line break (a quote left open runs on into the next lines).",
            ),
            "e.csv": (
                "item_id,x\n7,1\n  ,2\n",
                "line 3: column 'item_id' holds '  ', an empty id: every row of a catalog "
                "names an item.",
            ),
            "m.csv": (
                'item_id,x\n7,1\n"8"x,2\n',
                "line 3: is not well-formed CSV (',' expected after '\"').",
            ),
            "t.txt": (
                "7\n8\t9\n",
                "line 2: holds '8\\t9', with a tab: a .txt catalog holds one item id a line (a "
                "table of items is a .tsv or .csv file with the --item_column).",
            ),
        }
        for name, (text, message) in cases.items():
            path = self._file(name, text)
            with self.assertRaisesRegex(DataError, re.escape(f"{path}, {message}")):
                events.read_catalog(path)
        # Quoted ids, a byte order mark, CRLF line ends, gzip: read as written.
        path = os.path.join(self.dir, "ok.csv.gz")
        with gzip.open(path, "wt", newline="") as f:
            f.write('\ufeffitem_id,x\r\n"7",1\r\n"a,b",2\r\n\r\n')
        self.assertEqual(events.read_catalog(path).to_pylist(), ["7", "a,b"])
        self.assertEqual(events.read_catalog(path, integer=False).to_pylist(), ["7", "a,b"])

    def test_an_id_that_spans_lines_in_the_log_is_named(self):
        path = os.path.join(self.dir, "log.parquet")
        pq.write_table(
            pa.table({"user_id": ["u", "v"], "item_id": ["a", "b\r\nc"], "timestamp": [1, 2]}),
            path,
        )
        with self.assertRaisesRegex(
            DataError,
            re.escape(
                f"{path}: column 'item_id' holds the id 'b\\r\\nc' in data row 2, which spans "
                "lines; an id holds no line break (in a CSV, a quote left open runs on into "
                "the next lines)."
            ),
        ):
            events.load_events(path, SECONDS)

    def test_a_run_refuses_a_bad_catalog_before_training_and_writes_nothing(self):
        start = web_synthetic.START_TIME
        rows = [(u, (u * 7 + d) % 50, start + d * DAY + u) for d in range(5) for u in range(40)]
        log = _write_csv(os.path.join(self.dir, "log.csv"), rows)
        catalogs = {
            self._file("abc.txt", "1\n2\nabc\n"): "abc.txt, line 3: holds the item id 'abc'",
            self._file("q.csv", 'item_id\n1\n"2\n3\n'): "q.csv, line 3: is not well-formed CSV",
        }
        for catalog, message in catalogs.items():
            for config in (
                SMOKE.replace(dataset="events", data_path=log, index="exact", ks="10"),
                configs.PRESETS["smoke"].replace(
                    dataset="events", data_path=log, split="loo", min_user_count=1
                ),
            ):
                out = tempfile.mkdtemp()
                config = config.replace(item_catalog=catalog)
                configs.validate(config)
                with self.assertRaisesRegex(DataError, re.escape(message)):
                    train.run(config, out, verbose=0)
                self.assertEqual(os.listdir(out), [])


class NextDaySplitTest(tf.test.TestCase):
    def test_days_queries_and_no_leakage(self):
        path = _write_csv(
            os.path.join(tempfile.mkdtemp(), "log.csv"),
            [
                ("u1", "a", 0 * DAY + 5),
                ("u1", "b", 1 * DAY),
                ("u1", "c", 2 * DAY + 1),
                ("u1", "d", 3 * DAY),
                ("u1", "a2", 3 * DAY + 9),
                ("u2", "a", 0 * DAY + 1),
                ("u2", "c", 3 * DAY + 2),
                ("u3", "b", 3 * DAY + 3),
            ],
        )
        data = events.load_events(path, SECONDS).interactions
        split = splits.next_day(data)
        raw = data.item_ids
        u1 = list(data.user_ids).index("u1")
        self.assertEqual(sorted(raw[split.train[u1]]), ["a", "b"])  # Days 0 and 1.
        # Validation: day 2; test: day 3, every distinct item of the day a target; u3 has no
        # history before day 3 (cold start): no query.
        self.assertEqual([raw[t].tolist() for t in split.validation.targets], [["c"]])
        queries = {
            data.user_ids[u]: (sorted(raw[h]), sorted(raw[t]))
            for u, h, t in zip(split.test.users, split.test.histories, split.test.targets)
        }
        self.assertEqual(queries, {"u1": (["a", "b", "c"], ["a2", "d"]), "u2": (["a"], ["c"])})
        self.assertEqual([len(t) for t in split.train_times], [len(s) for s in split.train])
        with self.assertRaisesRegex(DataError, "leaves no training day"):
            splits.next_day(data, test_day=1)
        gap = data._replace(
            timestamp=np.where(data.timestamp >= 2 * DAY, data.timestamp + DAY, data.timestamp)
        )
        with self.assertRaisesRegex(DataError, "the test day \\(day 2\\) holds no query"):
            splits.next_day(gap, test_day=2)  # No event on day 2.


class WebSyntheticTest(tf.test.TestCase):
    def test_deterministic_no_repeats_and_the_oracle_ranks_by_the_law(self):
        catalog = web_synthetic.make_catalog(3000, 400, 5, cluster_size=500, seed=3)
        drawn = web_synthetic.draw_events(catalog, 15, seed=3)
        again = web_synthetic.draw_events(
            web_synthetic.make_catalog(3000, 400, 5, cluster_size=500, seed=3), 15, seed=3
        )
        for key in drawn:
            np.testing.assert_array_equal(drawn[key], again[key])
        keys = drawn["user"] * 3000 + drawn["item"]
        self.assertLen(np.unique(keys), len(keys))
        self.assertTrue((np.diff(drawn["time"]) >= 0).all())
        np.testing.assert_allclose(catalog.item_marginal(2).sum(), 1.0, rtol=1e-9)
        users = np.array([0, 7, 11])
        exclude = [np.array([1, 2]), np.array([], np.int64), np.array([5])]
        logp = catalog.log_probabilities(users, 4)
        np.testing.assert_allclose(np.logaddexp.reduce(logp, axis=1), 0.0, atol=1e-9)
        oracle = catalog.oracle_top_k(users, 4, 20, exclude)
        for row in range(3):
            scores = logp[row].copy()
            scores[exclude[row]] = -np.inf
            expected = np.argsort(-scores, kind="stable")[:20]
            np.testing.assert_allclose(logp[row][oracle[row]], logp[row][expected])
        # Popularity drifts: the law of day 0 and of day 4 differ.
        self.assertGreater(np.abs(catalog.item_marginal(0) - catalog.item_marginal(4)).sum(), 0.1)

    def test_first_draws_follow_the_law(self):
        catalog = web_synthetic.make_catalog(400, 20000, 3, cluster_size=100, drift=3.0, seed=0)
        drawn = web_synthetic.draw_events(catalog, 1, seed=0)  # One event each: no redraws.
        day = (drawn["time"] - web_synthetic.START_TIME) // DAY
        on_day = drawn["item"][day == 1]
        empirical = np.bincount(on_day, minlength=400) / len(on_day)

        def law(at_day):  # The day's users, one event each.
            probability = np.exp(catalog.log_probabilities(drawn["user"][day == 1], at_day)).sum(
                axis=0
            )
            return probability / probability.sum()

        # The sampling noise of as many draws from the law itself.
        rng = np.random.default_rng(0)
        noise = np.mean(
            [
                0.5 * np.abs(rng.multinomial(len(on_day), law(1)) / len(on_day) - law(1)).sum()
                for _ in range(20)
            ]
        )
        self.assertLess(0.5 * np.abs(empirical - law(1)).sum(), 1.3 * noise)
        # The drifted law of another day does not fit them.
        self.assertGreater(0.5 * np.abs(empirical - law(-2)).sum(), 2 * noise)


class CandidatesTest(tf.test.TestCase):
    def test_top_k_over_candidates_matches_the_subset_search(self):
        rng = np.random.default_rng(0)
        items, queries = rng.normal(size=[50, 4]), rng.normal(size=[6, 4])
        candidates = np.array([3, 5, 8, 13, 21, 34, 40, 41, 49])
        exclude = [
            np.array([5, 2]),
            np.array([], np.int64),
            np.array([49]),
            np.array([1]),
            np.array([3, 8]),
            np.array([13]),
        ]
        found = retrieval.top_k(queries, items, 4, exclude=exclude, candidates=candidates)
        for row in range(6):
            allowed = np.setdiff1d(candidates, exclude[row])
            scores = items[allowed] @ queries[row]
            np.testing.assert_array_equal(found[row], allowed[np.argsort(-scores)[:4]])
        with self.assertRaisesRegex(ValueError, "`candidates` must be ids in"):
            retrieval.top_k(queries, items, 4, candidates=np.array([0, 3]))


class TimeOrderTest(tf.test.TestCase):
    def test_examples_in_time_order_and_window_shuffled_stream(self):
        sequences = [np.array([], np.int64), np.array([1, 2, 3]), np.array([4, 5])]
        times = [np.array([], np.int64), np.array([0, 50, 60]), np.array([10, 20])]
        examples = builders.two_tower_examples(sequences, times)
        self.assertEqual(examples["time"].tolist(), [20, 50, 60])
        self.assertEqual(examples["flat"][examples["position"]].tolist(), [5, 2, 3])
        stream = builders.two_tower_dataset(sequences, 2, 1, seed=0, times=times, shuffle_window=1)
        items = [int(b["item"][0]) for b in stream.take(6)]
        self.assertEqual(items, [5, 2, 3, 5, 2, 3])  # A window of 1: time order, each pass.


class DayStoreTest(tf.test.TestCase):
    """The out-of-core next-day split (`day_store`) against the in-memory one: the same
    queries, counts and training batches, whatever the buffer; its examples read without
    TensorFlow (`DayStore.chunks`) as TensorFlow parses them."""

    def _log(self, weighted, early=False):
        catalog = web_synthetic.make_catalog(600, 300, 5, cluster_size=100, seed=1)
        drawn = web_synthetic.draw_events(catalog, 10, seed=1)
        rng = np.random.default_rng(0)
        rows = list(
            zip(
                catalog.user_ids[drawn["user"]],
                drawn["item"] * 1000 + 7,
                drawn["time"],
                rng.choice([0.0, 1.0, 3.0], len(drawn["user"])),
            )
        )
        rows += rows[:50]  # Logged twice: dropped and counted on both paths.
        if early:  # Two days before the rest, of a user seen once.
            rows.append(("early", 7, int(drawn["time"].min()) - 2 * DAY, 1.0))
        header = "who,what,when" + (",reward" if weighted else "")
        rows = rows if weighted else [row[:3] for row in rows]
        path = _write_csv(os.path.join(tempfile.mkdtemp(), "log.csv"), rows, header)
        return SMOKE.replace(
            dataset="events",
            data_path=path,
            user_column="who",
            item_column="what",
            time_column="when",
            weight_column="reward" if weighted else "",
            test_queries=200,
            validation_queries=100,
            shuffle_window=50,
            batch_size=32,
        )

    def test_a_store_built_before_a_new_data_setting_is_still_built(self):
        config = self._log(weighted=False)
        run_dir = tempfile.mkdtemp()
        logs.day_store_data(config, run_dir)
        directory = logs.day_store_dir(config, run_dir)
        settings = logs.store_settings(config)
        manifest_path = os.path.join(directory, day_store.MANIFEST)
        with open(manifest_path) as f:
            manifest = json.load(f)
        del manifest["settings"]["source"]["item_catalog"]  # As a store built before it.
        with open(manifest_path, "w") as f:
            json.dump(manifest, f)
        defaults = dataclasses.asdict(configs.DataConfig())
        self.assertTrue(day_store.is_built(directory, **settings, source_defaults=defaults))
        self.assertFalse(day_store.is_built(directory, **settings))
        changed = logs.store_settings(config.replace(item_catalog="x.txt"))
        self.assertFalse(day_store.is_built(directory, **changed, source_defaults=defaults))

    def _in_memory(self, config):
        log = logs.event_log(config.data, config.model.dim)[0]
        split = splits.next_day(
            log.interactions,
            config.data.test_day,
            config.data.day_seconds,
            weights=log.weights,
            span=(log.stats["first_time"], log.stats["last_time"]),
        )
        return log, split._replace(
            validation=splits.subsample(split.validation, config.data.validation_queries),
            test=splits.subsample(split.test, config.training.test_queries),
        )

    def _check_equal(self, config, buffer_rows):
        old = day_store.BUFFER_ROWS
        day_store.BUFFER_ROWS = buffer_rows
        try:
            summary, split = logs.day_store_data(config, tempfile.mkdtemp())
        finally:
            day_store.BUFFER_ROWS = old
        log, reference = self._in_memory(config)
        # The 50 rows logged twice; under --min_user_count=2, one of them is its user's only
        # training event, counted once (issue 62), so both its copies are out of the
        # vocabulary, not one a duplicate.
        self.assertEqual(summary.duplicates, 50 if config.data.min_user_count == 1 else 49)
        self.assertEqual(summary.duplicates, log.interactions.duplicates)
        self.assertAllEqual(summary.counts(), log.interactions.counts())
        self.assertAllEqual(summary.user_counts(), log.interactions.user_counts())
        self.assertAllEqual(split.train_counts(), reference.train_counts())
        for name in ("validation", "test"):
            got, want = getattr(split, name), getattr(reference, name)
            self.assertAllEqual(got.users, want.users)
            for part in ("histories", "targets"):
                self.assertEqual(
                    [a.tolist() for a in getattr(got, part)],
                    [a.tolist() for a in getattr(want, part)],
                    (name, part),
                )
        # Read without TensorFlow (a Keras 3 job's way): the records TensorFlow parses.
        store = split.stream
        parsed = tf.data.TFRecordDataset(store.example_files()).map(
            lambda record: day_store.parse_chunk(record, store.history_length, store.weighted)
        )
        chunks = list(store.chunks())
        self.assertEqual(sum(len(c["user"]) for c in chunks), store.num_examples)
        for got, want in zip(chunks, parsed, strict=True):
            self.assertEqual(sorted(got), sorted(want))
            for key in want:
                self.assertAllEqual(got[key], want[key], key)
        steps = experiment.pass_steps(config, split)
        self.assertEqual(steps, experiment.pass_steps(config, reference))
        streamed = experiment.training_stream(config, split)[0]
        in_memory = builders.two_tower_dataset(
            reference.train,
            config.model.history_length,
            config.training.batch_size,
            seed=config.training.seed,
            times=reference.train_times,
            shuffle_window=config.training.shuffle_window,
            weights=reference.train_weights,
        )
        for got, want in zip(streamed.take(2 * steps + 1), in_memory.take(2 * steps + 1)):
            self.assertEqual(sorted(got), sorted(want))
            for key in want:
                self.assertAllEqual(got[key], want[key], key)

    def test_tfrecords_of_int32_tensors_read_without_tensorflow(self):
        arrays = [
            np.arange(24, dtype=np.int32).reshape(4, 6) - 5,
            np.array([[2**31 - 1, -(2**31)]], np.int32),
            np.zeros((0, 6), np.int32),
            np.array(7, np.int32),
        ]
        path = os.path.join(tempfile.mkdtemp(), "x.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for array in arrays:
                writer.write(tf.io.serialize_tensor(array).numpy())
        records = list(day_store.read_records(path))
        self.assertLen(records, len(arrays))
        for record, array in zip(records, arrays):
            decoded = day_store.decode_int32_tensor(record)
            self.assertEqual(decoded.shape, array.shape)
            self.assertAllEqual(decoded, array)
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[:-3])  # The last record's CRC cut.
        with self.assertRaisesRegex(DataError, "cut short"):
            list(day_store.read_records(path))
        # TensorProtos with int_val (a negative one; one value for a constant tensor).
        for value, shape in ((-3, None), (4, [2, 3])):
            proto = tf.make_tensor_proto(value, dtype=tf.int32, shape=shape)
            self.assertAllEqual(
                day_store.decode_int32_tensor(proto.SerializeToString()), tf.make_ndarray(proto)
            )
        with self.assertRaisesRegex(ValueError, "not int32"):
            day_store.decode_int32_tensor(tf.io.serialize_tensor(np.zeros(2)).numpy())

    def test_tfrecords_of_int32_tensors_written_without_tensorflow(self):
        """The store's writer gives the bytes of tf.io.TFRecordWriter and serialize_tensor,
        CRCs included (TensorFlow's reader checks them)."""
        arrays = [
            np.arange(24, dtype=np.int32).reshape(4, 6) - 5,
            np.array([[2**31 - 1, -(2**31)]], np.int32),
            np.zeros((0, 6), np.int32),
            np.zeros((3, 0), np.int32),
            np.array(7, np.int32),
            np.random.default_rng(0).integers(0, 10**6, (day_store.CHUNK_ROWS, 23), np.int32),
        ]
        for array in arrays:
            self.assertEqual(
                day_store.encode_int32_tensor(array),
                tf.io.serialize_tensor(array).numpy(),
                array.shape,
            )
        records = [day_store.encode_int32_tensor(array) for array in arrays] + [b"", b"x" * 300]
        directory = tempfile.mkdtemp()
        mine, theirs = os.path.join(directory, "mine"), os.path.join(directory, "theirs")
        day_store.write_records(mine, iter(records))
        with tf.io.TFRecordWriter(theirs) as writer:
            for record in records:
                writer.write(record)
        with open(mine, "rb") as f, open(theirs, "rb") as g:
            self.assertEqual(f.read(), g.read())
        read = [r.numpy() for r in tf.data.TFRecordDataset(mine)]
        self.assertEqual(read, records)
        self.assertEqual(list(day_store.read_records(mine)), records)
        with self.assertRaisesRegex(ValueError, "int32 arrays; received dtype int64"):
            day_store.encode_int32_tensor(np.zeros(2, np.int64))

    def test_the_same_split_and_batches_as_in_memory(self):
        self._check_equal(self._log(weighted=False), day_store.BUFFER_ROWS)

    def test_both_count_days_from_the_raw_log_when_its_first_day_is_dropped(self):
        # The first day's only event is out of the vocabulary: day 0 is still its day.
        config = self._log(weighted=False, early=True).replace(min_user_count=2, test_day=5)
        self._check_equal(config, day_store.BUFFER_ROWS)
        split = experiment.make_split(config, experiment.load_data(config))
        self.assertNotEmpty(split.test.users)
        log = logs.event_log(config.data, config.model.dim)[0]
        kept_first = int(log.interactions.timestamp.min())
        self.assertEqual(log.stats["first_time"] // DAY, kept_first // DAY - 2)

    def test_weights_and_a_small_buffer_change_nothing(self):
        # A buffer of 500 events writes each day in several parts.
        self._check_equal(self._log(weighted=True), 500)

    def test_histories_carry_over_days(self):
        # Users 1 and 2 (last items before the day: 7, 8 and none), events sorted by user.
        state = np.array([[0, 0, 0], [0, 7, 8], [0, 0, 0]], np.int32)
        blocks, starts = day_store._history_windows(  # pylint: disable=protected-access
            state, np.array([1, 1, 1, 2, 2], np.int32), np.array([4, 5, 6, 9, 3], np.int32)
        )
        history = blocks[starts[:, None] + np.arange(3)]
        self.assertAllEqual(history, [[0, 7, 8], [7, 8, 4], [8, 4, 5], [0, 0, 0], [0, 0, 9]])
        self.assertAllEqual(state, [[0, 0, 0], [4, 5, 6], [0, 9, 3]])

    def test_an_empty_test_day_is_a_named_error_and_leaves_nothing(self):
        directory = tempfile.mkdtemp()
        path = _write_csv(
            os.path.join(directory, "log.csv"),
            [
                ("a", "x", 0),
                ("a", "y", DAY),
                ("b", "x", DAY),
                ("a", "z", 2 * DAY),
                ("c", "x", 3 * DAY),
            ],
        )
        config = SMOKE.replace(dataset="events", data_path=path, test_day=3, time_unit="s")
        out = os.path.join(directory, "run")
        with self.assertRaisesRegex(DataError, r"the test day \(day 3\) holds no query"):
            logs.day_store_data(config, out)
        self.assertEqual(os.listdir(out), [])


@pytest.mark.integration
class IndustrialRunTest(tf.test.TestCase):
    def test_industrial_smoke_run_serves_raw_ids_as_evaluated(self):
        os.environ[logs.CACHE_ENV] = tempfile.mkdtemp()
        out = tempfile.mkdtemp()
        config = SMOKE.replace(index="exact")
        metrics = train.run(config, out, verbose=0)
        self.assertEqual(
            sorted(metrics["test"]),
            sorted(f"{m}@{k}" for m in ("recall", "ndcg") for k in (10, 100, 1000)),
        )
        self.assertLess(metrics["index_items"], metrics["num_items"])
        for name in ("popularity", "oracle"):
            self.assertIn("recall@1000", metrics["baselines"][name])
        self.assertGreater(
            metrics["baselines"]["oracle"]["recall@10"],
            metrics["baselines"]["popularity"]["recall@10"],
        )
        self.assertGreater(metrics["kl_to_truth"], 0.0)
        # The model's P(p | u) of the KL queries' targets next to the true one.
        calibration = metrics["calibration"]
        self.assertGreater(len(calibration["model_log_p"]), 256)
        self.assertEqual(len(calibration["true_log_p"]), len(calibration["model_log_p"]))
        self.assertEqual(len(calibration["band"]), len(calibration["model_log_p"]))
        self.assertTrue(np.all(np.array(calibration["model_log_p"]) <= 0.0))
        self.assertTrue(set(calibration["band"]) <= {0, 1, 2})
        # The targets are read in the law, not at its -1e4 floor for items outside it (an
        # unsorted support put 99.8% of them there; the smoke run's are all inside).
        self.assertLess(np.mean(np.array(calibration["true_log_p"]) < -1000), 0.05)
        self.assertEqual(metrics["event_log"]["files"], config.data.synthetic_days)
        drift = json.load(open(os.path.join(out, "drift.json")))["readings"]
        self.assertNotEmpty(drift)
        self.assertTrue(all(0 <= row["total_variation"] <= 2 for row in drift))
        self.assertTrue(events.has_vocabularies(os.path.join(out, "vocabulary")))
        # Vocabularies of other data settings are not reused (counted anew).
        self.assertTrue(logs.saved_for(os.path.join(out, "vocabulary"), config.data))
        self.assertFalse(
            logs.saved_for(
                os.path.join(out, "vocabulary"),
                config.data.__class__(**{**config.data.__dict__, "min_item_count": 3}),
            )
        )

        # The export holds the model, not its optimizer's slots.
        saved = tf.train.load_checkpoint(
            os.path.join(metrics["exports"][0], "variables", "variables")
        )
        self.assertFalse(
            [name for name in saved.get_variable_to_shape_map() if "OPTIMIZER_SLOT" in name]
        )
        self.assertIn("data", metrics["phase_peak_rss_mb"])
        # The test report and the baselines share one truth per run's data.
        data = experiment.load_run(out)[3]
        truth = experiment.web_truth(config, data)
        self.assertIs(experiment.web_truth(config, data), truth)
        self.assertIsNot(
            experiment.web_truth(config, data._replace(per_item=data.per_item.copy())), truth
        )
        # The sparse law the KL reads (a user's clusters) is the dense one where it has mass.
        users = np.arange(1, 6)
        dense = truth.log_probabilities(users)
        for row, (ids, log_p) in enumerate(truth.support(users)):
            self.assertTrue(np.all(np.diff(ids) > 0))  # Sorted: searched by the calibration.
            self.assertAllClose(dense[row, ids], log_p)
            rest = np.ones(dense.shape[1], bool)
            rest[ids] = False
            self.assertTrue(np.all(np.isneginf(dense[row, rest])))
        # Read out of core: the training examples were deleted once training was done.
        self.assertIsNotNone(experiment.load_run(out)[2].stream)
        self.assertFalse(day_store.has_examples(os.path.join(out, "day_store")))
        # pipelines.evaluate re-evaluates the run as its report did (ks, index, queries).
        again = evaluate.evaluate_run(out, "test", "exact")[1]
        for name, value in metrics["test_exact"].items():
            self.assertAllClose(again[name], value, atol=1e-9)

        # Served = evaluated, on raw ids: the brute-force export's answer for test users'
        # raw histories (plus an unknown id) against the exact search over the catalog.
        _, model, split, data = experiment.load_run(out)
        served = tf.saved_model.load(metrics["exports"][0]).signatures["serving_default"]
        users = split.test.users[:5]
        histories = split.test.histories[:5]
        longest = max(len(h) for h in histories) + 1
        raw = np.full([5, longest], "", object)
        for row, history in enumerate(histories):
            raw[row, longest - len(history) - 1 :] = ["never-seen"] + list(data.item_ids[history])
        answer = served(
            user=tf.constant(data.user_ids[users].astype(str)), history=tf.constant(raw.astype(str))
        )
        self.assertEqual(answer["unknown_history_ids"].numpy().tolist(), [1] * 5)
        self.assertEqual(answer["unknown_user"].numpy().tolist(), [False] * 5)
        # A user the vocabulary lacks, with no history: answered, and said.
        stranger = served(
            user=tf.constant(["nobody", str(data.user_ids[users[0]])]),
            history=tf.constant([["", ""], ["", ""]]),
        )
        self.assertEqual(stranger["unknown_user"].numpy().tolist(), [True, False])
        self.assertEqual(stranger["num_found"].numpy().tolist(), [100, 100])
        queries = model.query_embeddings(
            {
                "user": tf.constant(users, tf.int32),
                "history": builders.left_pad(histories, config.model.history_length),
            }
        )
        expected = retrieval.exact_top_k(
            queries.numpy(), model.item_embeddings().numpy(), 100, exclude=histories
        )
        self.assertAllEqual(answer["ids"].numpy().astype(str), data.item_ids[expected])


@pytest.mark.integration
class WeightedEventLogTest(tf.test.TestCase):
    def test_a_weighted_csv_log_trains_with_weights_in_the_batches(self):
        catalog = web_synthetic.make_catalog(600, 300, 5, cluster_size=100, seed=1)
        drawn = web_synthetic.draw_events(catalog, 10, seed=1)
        directory = tempfile.mkdtemp()
        rng = np.random.default_rng(0)
        rows = zip(
            catalog.user_ids[drawn["user"]],
            drawn["item"] * 1000 + 7,
            drawn["time"],
            rng.choice([0.0, 1.0, 3.0], len(drawn["user"])),
        )
        path = _write_csv(os.path.join(directory, "log.csv"), rows, "who,what,when,reward")
        config = SMOKE.replace(
            dataset="events",
            data_path=path,
            user_column="who",
            item_column="what",
            time_column="when",
            weight_column="reward",
            index="exact",
            ks="10,100",
        )
        split = experiment.make_split(config, experiment.load_data(config))
        batch = next(iter(experiment.training_stream(config, split)[0]))
        self.assertEqual(batch["weight"].shape, [config.training.batch_size])
        self.assertTrue(set(np.unique(batch["weight"].numpy())) <= {0.0, 1.0, 3.0})
        out = tempfile.mkdtemp()
        metrics = train.run(config, out, verbose=0)
        self.assertGreater(metrics["test"]["recall@100"], 0.0)
        # Integer item ids: the export serves int64 ids.
        served = tf.saved_model.load(metrics["exports"][0]).signatures["serving_default"]
        self.assertEqual(served.structured_input_signature[1]["history"].dtype, tf.int64)
        answer = served(
            user=tf.constant([catalog.user_ids[drawn["user"][0]]]),
            history=tf.constant([[-1, int(drawn["item"][0] * 1000 + 7), 123]], tf.int64),
        )
        self.assertEqual(answer["unknown_history_ids"].numpy().tolist(), [1])
        self.assertTrue((answer["ids"].numpy() % 1000 == 7).all())


@pytest.mark.integration
class BadLogRunTest(tf.test.TestCase):
    def test_a_bad_log_stops_before_training_and_writes_nothing(self):
        directory, out = tempfile.mkdtemp(), tempfile.mkdtemp()
        start = web_synthetic.START_TIME
        rows = [
            (f"u{u}", f"i{(u * 7 + d) % 50}", start + d * DAY + u)
            for d in range(5)
            for u in range(40)
        ]
        path = _write_csv(os.path.join(directory, "log.csv"), rows[:-1] + [("u1", "", start + 3)])
        config = SMOKE.replace(dataset="events", data_path=path, index="exact", ks="10")
        with self.assertRaisesRegex(DataError, "column 'item_id' is empty"):
            train.run(config, out, verbose=0)
        self.assertEqual(os.listdir(out), [])
        _write_csv(path, rows)  # Fixed: the same command now trains.
        metrics = train.run(config, out, verbose=0)
        self.assertIn("recall@10", metrics["test"])


@pytest.mark.integration
class IdTypesRunTest(tf.test.TestCase):
    """Issue 75: a log of negative and zero-padded integer ids trains, exports and serves
    them as the strings the log writes; a bad catalog is one line on the command line."""

    @staticmethod
    def _item(index: int) -> str:
        """50 items: "000".."009", "0".."9" (so "007" beside "7"), "-1".."-15", "35".."49"."""
        if index < 10:
            return f"{index:03d}"
        if index < 20:
            return str(index - 10)
        if index < 35:
            return str(19 - index)
        return str(index)

    def test_negative_and_zero_padded_ids_train_export_and_serve_as_written(self):
        directory, out = tempfile.mkdtemp(), tempfile.mkdtemp()
        start = web_synthetic.START_TIME
        rows = [
            (-(u + 1), self._item((u * 7 + d) % 50), start + d * DAY + u)
            for d in range(5)
            for u in range(40)
        ]
        path = _write_csv(os.path.join(directory, "log.csv"), rows)
        config = SMOKE.replace(dataset="events", data_path=path, index="exact", ks="10")
        metrics = train.run(config, out, verbose=0)  # It failed at the export.
        self.assertIn("recall@10", metrics["test"])
        self.assertTrue(os.path.exists(os.path.join(out, "metrics.json")))
        _, model, split, data = experiment.load_run(out)
        for raw in ("007", "7", "-3", "-1"):
            self.assertIn(raw, list(data.item_ids))
        served = tf.saved_model.load(metrics["exports"][0]).signatures["serving_default"]
        inputs = served.structured_input_signature[1]
        self.assertEqual((inputs["user"].dtype, inputs["history"].dtype), (tf.string, tf.string))
        # Served = the model's exact search, in the log's ids.
        users = split.test.users[:5]
        histories = split.test.histories[:5]
        longest = max(len(h) for h in histories)
        raw = np.full([5, longest], "", object)
        for row, history in enumerate(histories):
            raw[row, longest - len(history) :] = data.item_ids[history]
        answer = served(
            user=tf.constant(data.user_ids[users].astype(str)), history=tf.constant(raw.astype(str))
        )
        self.assertEqual(answer["unknown_history_ids"].numpy().tolist(), [0] * 5)
        self.assertEqual(answer["unknown_user"].numpy().tolist(), [False] * 5)
        queries = model.query_embeddings(
            {
                "user": tf.constant(users, tf.int32),
                "history": builders.left_pad(histories, config.model.history_length),
            }
        )
        expected = retrieval.exact_top_k(
            queries.numpy(), model.item_embeddings().numpy(), 10, exclude=histories
        )
        self.assertAllEqual(answer["ids"].numpy()[:, :10].astype(str), data.item_ids[expected])
        # "007" is not 7: a history of "007" excludes it, not "7"; "-3" is an id, not padding.
        for seen, other in (("007", "7"), ("7", "007"), ("-3", "3")):
            answer = served(user=tf.constant(["-1"]), history=tf.constant([[seen]]))
            ids = answer["ids"].numpy()[0].astype(str).tolist()
            self.assertEqual(answer["unknown_history_ids"].numpy().tolist(), [0], seen)
            self.assertNotIn(seen, ids)
            self.assertIn(other, ids)

    def test_a_bad_catalog_is_one_line_on_the_command_line_and_writes_nothing(self):
        directory = tempfile.mkdtemp()
        out = os.path.join(directory, "run")
        start = web_synthetic.START_TIME
        rows = [(u, (u * 7 + d) % 50, start + d * DAY + u) for d in range(5) for u in range(40)]
        log = _write_csv(os.path.join(directory, "log.csv"), rows)
        catalog = os.path.join(directory, "items.csv")
        with open(catalog, "w") as f:
            f.write("item_id\n1\n1.0\n")
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipelines.cli",
                "train",
                "--preset=industrial_smoke",
                "--dataset=events",
                f"--data_path={log}",
                f"--item_catalog={catalog}",
                f"--output_dir={out}",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        self.assertEqual(result.returncode, 1, result.stderr[-3000:])
        self.assertIn(
            f"error: {catalog}, line 3: holds the item id '1.0', which the event log's item ids "
            "cannot hold",
            result.stderr,
        )
        self.assertNotIn("Traceback", result.stderr)
        self.assertIn("[data] ids: user ids are integers (served as int64)", result.stdout)
        self.assertFalse(os.path.exists(out) and os.listdir(out), out)


class IndustrialConfigTest(tf.test.TestCase):
    def test_bad_settings_are_named(self):
        cases = {
            "--order=time trains the two-tower": dict(model="sasrec"),
            "--split=next_day needs a timed event log": dict(dataset="synthetic", order="shuffled"),
            "--ks must be comma-separated": dict(ks="10,x"),
            "--test_day must be a day number": dict(test_day=-2),
            "--dataset=events needs --data_path": dict(dataset="events"),
        }
        for message, change in cases.items():
            with self.assertRaisesRegex(ValueError, message):
                configs.validate(SMOKE.replace(**change))
        self.assertEqual(configs.ks(SMOKE.training), (10, 100, 1000))


class PlainCatalogTest(tf.test.TestCase):
    """A catalog without quotes is read by Arrow, with quotes by the strict reader: the same
    ids either way, whitespace stripped alike; gzipped and TSV too."""

    def test_arrow_and_the_strict_reader_read_the_same_ids(self):
        directory = self.get_temp_dir()
        rows = "item_id,title\n 7 ,a\n12,b\n\n7,c\n300,d\n"
        cases = {
            "plain.csv": (rows, "plain"),
            "quoted.csv": (rows + '301,"e, f"\n', "strict"),
            "plain.tsv": (rows.replace(",", "\t"), "plain"),
            "plain.csv.gz": (rows, "plain"),
        }
        for name, (text, reader) in cases.items():
            path = os.path.join(directory, name)
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "wt") as f:
                f.write(text)
            delimiter = "\t" if name.endswith(".tsv") else ","
            fast = events._plain_csv_catalog(path, "item_id", delimiter, False)  # pylint: disable=protected-access
            self.assertEqual(fast is None, reader == "strict", name)
            strict, _ = events._csv_catalog(path, "item_id", delimiter, False)  # pylint: disable=protected-access
            if fast is not None:
                self.assertEqual(fast.to_pylist(), strict.to_pylist(), name)
            expected = ["12", "300", "7"] + (["301"] if reader == "strict" else [])
            self.assertEqual(
                sorted(events.read_catalog(path, integer=True).to_pylist()), sorted(expected)
            )

    def test_a_catalog_without_ids_beside_an_integer_log_is_named(self):
        directory = self.get_temp_dir()
        for name, text in (("h.csv", "item_id,title\n"), ("h.tsv", "item_id\n"), ("b.txt", "\n\n")):
            path = os.path.join(directory, name)
            with open(path, "w") as f:
                f.write(text)
            with self.assertRaisesRegex(events.DataError, "holds no item id"):
                events.read_catalog(path, integer=True)
