"""Tests of pipelines.data: loaders, the synthetic catalog, splits and tf.data builders."""

import gzip
import os
import tempfile
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from pipelines.data import builders
from pipelines.data import loaders
from pipelines.data import splits
from pipelines.data import synthetic
from pipelines.data.interactions import DataError
from pipelines.data.interactions import chronological
from pipelines.data.interactions import from_arrays


def _write(text: str, name: str, compress: bool = False) -> str:
    path = os.path.join(tempfile.mkdtemp(), name)
    if compress:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)
    return path


class LoaderTest(tf.test.TestCase):
    def test_grouplens_plain_and_gz(self):
        text = "2::30::4::300\n1::20::5::200\n1::10::3::100\n\n2::10::1::50\n"
        for compress in (False, True):
            data = loaders.load_grouplens(
                _write(text, "ratings.dat.gz" if compress else "ratings.dat", compress)
            )
            self.assertEqual((data.num_users, data.num_items), (2, 3))
            # Sorted by user, then time; movie ids 10, 20, 30 -> 1, 2, 3.
            self.assertAllEqual(data.user, [1, 1, 2, 2])
            self.assertAllEqual(data.item, [1, 2, 1, 3])
            self.assertAllEqual(data.timestamp, [100, 200, 50, 300])
            self.assertAllEqual(data.item_ids, ["", "10", "20", "30"])
        filtered = loaders.load_grouplens(_write(text, "r.dat"), min_rating=4)
        self.assertLen(filtered.user, 2)

    def test_grouplens_errors_name_file_and_line(self):
        path = _write("1::10::3::100\n1::10::3\n", "ratings.dat")
        with self.assertRaisesRegex(
            DataError,
            rf"{path}, line 2: expected "
            r"UserID::MovieID::Rating::Timestamp; received '1::10::3'",
        ):
            loaders.load_grouplens(path)
        path = _write("1::10::3::100\n\nx::10::3::5\n", "ratings.dat")
        with self.assertRaisesRegex(DataError, r"line 3: expected integer ids"):
            loaders.load_grouplens(path)
        with self.assertRaisesRegex(DataError, r"the file holds no interactions"):
            loaders.load_grouplens(_write("\n", "empty.dat"))
        with self.assertRaisesRegex(FileNotFoundError, r"No such data file: /nonexistent"):
            loaders.load_grouplens("/nonexistent/ratings.dat")

    def test_sasrec_format_keeps_ids_and_order(self):
        data = loaders.load_sasrec(_write("1 5\n1 2\n2 3\n1 4\n", "ml.txt"))
        self.assertEqual((data.num_users, data.num_items), (2, 5))
        self.assertAllEqual(data.item, [5, 2, 4, 3])
        sequences = data.sequences()
        self.assertAllEqual(sequences[1], [5, 2, 4])
        with self.assertRaisesRegex(
            DataError,
            r"line 2: expected two positive integer ids "
            r"`user item` \(ASCII digits\); received '1 0'",
        ):
            loaders.load_sasrec(_write("1 5\n1 0\n", "bad.txt"))

    def test_a_huge_id_is_refused_not_grown_into(self):
        # One stray id would make the catalog (or the user table) 2M rows.
        text = "".join(f"{u} {i}\n" for u in range(1, 4) for i in range(1, 6))
        with self.assertRaisesRegex(
            DataError,
            r"ml.txt, line 16: item id 2,000,000 is more "
            r"than 2x the file's 6 distinct item ids",
        ):
            loaders.load_sasrec(_write(text + "3 2000000\n", "ml.txt"))
        with self.assertRaisesRegex(
            DataError,
            r"ml.txt, line 16: user id 999,999,999 is more "
            r"than 2x the file's 4 distinct user ids",
        ):
            loaders.load_sasrec(_write(text + "999999999 3\n", "ml.txt"))
        # A few unused ids are fine (each costs an embedding row).
        data = loaders.load_sasrec(_write(text + "3 9\n", "ml.txt"))
        self.assertEqual(data.num_items, 9)

    def test_unreadable_files_raise_data_error_naming_the_path(self):
        directory = tempfile.mkdtemp()
        with self.assertRaisesRegex(DataError, rf"{directory}: is a directory"):
            loaders.load_sasrec(directory)
        fake = _write("1 2\n1 3\n", "plain.txt.gz")  # Plain text named .gz.
        with self.assertRaisesRegex(DataError, rf"{fake}: unreadable \(BadGzipFile"):
            loaders.load_sasrec(fake)
        whole = _write(
            "".join(f"{u} {i}\n" for u in range(1, 300) for i in range(1, 40)),
            "ml.txt.gz",
            compress=True,
        )
        with open(whole, "rb") as f:
            payload = f.read()
        truncated = os.path.join(tempfile.mkdtemp(), "truncated.txt.gz")
        with open(truncated, "wb") as f:
            f.write(payload[: len(payload) // 2])
        with self.assertRaisesRegex(
            DataError,
            rf"{truncated}, line [0-9]+: a truncated gzip "
            r"file \(EOFError",
        ):
            loaders.load_sasrec(truncated)
        with self.assertRaisesRegex(DataError, r"ratings.dat.gz: unreadable"):
            loaders.load_grouplens(_write("1::2::3::4\n", "ratings.dat.gz"))

    def test_steam_reviews_python_literals_and_json(self):
        text = (
            "{'username': 'ann', 'product_id': '725280', 'date': '2017-12-17', 'text': 'x'}\n"
            '{"username": "bob", "product_id": "10", "date": "2017-12-01"}\n'
            "{'username': 'ann', 'product_id': '10', 'date': '2017-12-01'}\n"
        )
        data = loaders.load_steam_reviews(_write(text, "steam.json.gz", compress=True))
        self.assertEqual((data.num_users, data.num_items), (2, 2))
        self.assertAllEqual(data.user_ids, ["", "ann", "bob"])
        self.assertAllEqual(data.sequences()[1], [1, 2])  # ann: "10" (Dec 1) then "725280".
        with self.assertRaisesRegex(
            DataError,
            r"line 2: the record lacks date; it has "
            r"product_id, username",
        ):
            loaders.load_steam_reviews(
                _write(text.splitlines()[0] + "\n{'username': 'x', 'product_id': '1'}\n", "s.json")
            )
        with self.assertRaisesRegex(DataError, r"line 1: expected a JSON or Python dict"):
            loaders.load_steam_reviews(_write("not a record\n", "s.json"))
        with self.assertRaisesRegex(DataError, r"line 1: cannot read the date 'yesterday'"):
            loaders.load_steam_reviews(
                _write("{'username': 'x', 'product_id': '1', 'date': 'yesterday'}\n", "s.json")
            )

    def test_a_file_with_every_line_twice_is_read_once(self):
        # Issue 46: every line twice put each test target in its own history (filtered out
        # of the answer: Recall@10 0.000). Exact duplicates are dropped, counted and
        # printed, in place or with the file appended to itself; the split is the single
        # file's.
        lines = [
            "1::10::5::100",
            "1::20::4::200",
            "1::30::3::300",
            "2::10::1::50",
            "2::40::2::60",
            "2::20::5::70",
            "3::30::4::10",
            "3::40::4::20",
            "3::10::4::30",
        ]
        once = loaders.load_grouplens(_write("\n".join(lines) + "\n", "once.dat"))
        self.assertEqual(once.duplicates, 0)
        for name, text in (
            ("in_place.dat", "".join(f"{line}\n{line}\n" for line in lines)),
            ("appended.dat", "\n".join(lines + lines) + "\n"),
        ):
            path = _write(text, name)
            with mock.patch("builtins.print") as printed:
                twice = loaders.load_grouplens(path)
            printed.assert_called_once_with(
                f"{path}: dropped 9 duplicate events (the same user, item and time as an "
                "earlier event); kept 9.",
                flush=True,
            )
            self.assertEqual(twice.duplicates, 9)
            for field in ("user", "item", "timestamp", "user_ids", "item_ids"):
                self.assertAllEqual(getattr(twice, field), getattr(once, field))
            split = splits.leave_one_out(twice)
            for history, target in zip(split.test.histories, split.test.targets):
                self.assertNotIn(target[0], history)
        # SASRec's file has no times: a line repeating its user's previous line is the
        # duplicate; the same item again later is repeat consumption and stays.
        sasrec = loaders.load_sasrec(_write("1 5\n1 5\n1 2\n1 2\n2 3\n2 3\n1 5\n", "s.txt"))
        self.assertEqual(sasrec.duplicates, 3)
        self.assertAllEqual(sasrec.sequences()[1], [5, 2, 5])
        self.assertAllEqual(sasrec.sequences()[2], [3])
        steam = "{'username': 'a', 'product_id': '1', 'date': '2017-01-02'}\n"
        data = loaders.load_steam_reviews(_write(steam * 3, "steam.json"))
        self.assertEqual((data.duplicates, len(data.user)), (2, 1))

    def test_the_duplicate_rule(self):
        # Same user, item and time: the first in file order is kept. Another item at the
        # same time, or the same item at another time, stays. The order is the usual one.
        user = np.array([2, 1, 1, 1, 1, 2, 1])
        item = np.array([7, 5, 6, 5, 5, 7, 5])
        time = np.array([3, 1, 1, 1, 2, 3, 1], np.int64)
        order, dropped = chronological(user, item, time)
        self.assertEqual(dropped, 3)
        self.assertAllEqual(order, [1, 2, 4, 0])
        data = from_arrays(user, item, time, keep_ids=True)
        self.assertAllEqual(data.item, [5, 6, 5, 7])
        self.assertEqual(data.duplicates, 3)
        distinct = np.arange(5)
        order, dropped = chronological(distinct, distinct, distinct)
        self.assertEqual(dropped, 0)
        self.assertAllEqual(order, distinct)

    def test_bad_numbers_are_named_with_file_line_and_value(self):
        # Each a DataError naming the file, the line and the value (cut when huge), not a
        # crash in int(), numpy or the model: a non-ASCII digit (str.isdigit says yes), a
        # 20-million-digit id, a time at 2^63, a NaN or infinite date.
        huge = "9" * 20_000_000
        cases = [
            (
                loaders.load_sasrec,
                "1 \u00b2\n",
                r"line 1: expected two positive integer ids "
                r"`user item` \(ASCII digits\); received '1 \u00b2'",
            ),
            (loaders.load_sasrec, "1 \u0663\n", r"line 1: expected two positive integer ids"),
            (
                loaders.load_sasrec,
                f"1 2\n{huge} 3\n",
                r"line 2: the user id '9{40}'\.\.\. "
                r"\(20,000,000 characters\) is beyond 2\^63 - 1; SASRec-format ids are used as "
                r"they are \(embedding rows 1\.\.N\): renumber them 1\.\.N\.",
            ),
            (
                loaders.load_grouplens,
                "1::\u0661\u0660::3::100\n",
                r"line 1: expected integer ids, a numeric rating and an integer timestamp",
            ),
            (
                loaders.load_grouplens,
                f"1::10::3::100\n{huge}::1::3::5\n",
                r"line 2: the UserID '9{40}'\.\.\. \(20,000,000 characters\) is outside the "
                r"64-bit range \[-2\^63, 2\^63\); ids are 64-bit integers",
            ),
            (
                loaders.load_grouplens,
                f"1::10::3::{2**63}\n",
                r"line 1: the timestamp "
                r"'9223372036854775808' is outside the 64-bit range \[-2\^63, 2\^63\); times "
                r"are integer seconds\. Fix or remove the line\.",
            ),
            (
                loaders.load_grouplens,
                "1::10::nan::100\n",
                r"line 1: expected integer ids, a "
                r"numeric rating and an integer timestamp \(ASCII digits, a finite rating\)",
            ),
            (
                loaders.load_steam_reviews,
                '{"username": "a", "product_id": "1", "date": NaN}\n',
                r"line 1: cannot read the date 'nan' \(expected ISO YYYY-MM-DD or finite "
                r"seconds below 2\^63\)",
            ),
            (
                loaders.load_steam_reviews,
                '{"username": "a", "product_id": "1", "date": Infinity}\n',
                r"line 1: cannot read the date 'inf'",
            ),
            (
                loaders.load_steam_reviews,
                f"{{'username': 'a', 'product_id': '1', 'date': {2**63}}}\n",
                r"line 1: cannot read the date '9223372036854775808'",
            ),
            (
                loaders.load_steam_reviews,
                "{'username': None, 'product_id': '1', 'date': 5}\n",
                r"line 1: the record's username is 'None'; every review needs a user and an "
                r"item id\.",
            ),
        ]
        for number, (load, text, message) in enumerate(cases):
            path = _write(text, f"bad{number}.txt")
            with self.assertRaisesRegex(DataError, rf"{path}, ({message})"):
                load(path)
        # An ISO time with an offset keeps it (it used to be read as UTC).
        data = loaders.load_steam_reviews(
            _write(
                "{'username': 'a', 'product_id': '1', 'date': '1970-01-01T01:00:00+01:00'}\n"
                "{'username': 'a', 'product_id': '2', 'date': '1970-01-01'}\n",
                "tz.json",
            )
        )
        self.assertAllEqual(data.timestamp, [0, 0])

    def test_the_real_tfds_builder_reaches_its_download(self):
        # The real MovieLens builder, no mock: everything download_and_prepare reads before
        # the network (its code path and checksums file need importlib_resources).
        builder = tfds.builder("movielens/1m-ratings", data_dir=tempfile.mkdtemp())
        self.assertIn("movie_id", builder.info.features)
        self.assertTrue(type(builder).code_path.exists())
        checksums = type(builder)._checksums_path  # pylint: disable=protected-access
        self.assertTrue(checksums.exists(), checksums)

    def test_tfds_path_with_mock_data(self):
        with tfds.testing.mock_data(num_examples=40):
            data = loaders.load_tfds()
        self.assertLen(data.user, 40)
        self.assertEqual(data.num_users, len(np.unique(data.user)))
        self.assertTrue(np.all(np.diff(data.user) >= 0))


def _movielens_files_missing() -> str:
    """Why the MovieLens-1M file tests cannot run here, or "" when they can."""
    if not loaders.DATA_DIR:
        return (
            "TFRS_LOGQ_DATA is unset: set it to the directory that holds ml-1m/ "
            "(`make test` points it at ../shared/data; MovieLens is not redistributed)"
        )
    absent = [
        path for path in (loaders.ML_1M_SASREC, loaders.ML_1M_RATINGS) if not os.path.exists(path)
    ]
    return f"TFRS_LOGQ_DATA={loaders.DATA_DIR} lacks {', '.join(absent)}" if absent else ""


class DataDirectoryTest(tf.test.TestCase):
    def test_movielens_without_a_path_names_the_ways_to_give_one(self):
        with mock.patch.dict(os.environ, {loaders.DATA_ENV: ""}):
            with self.assertRaisesRegex(
                FileNotFoundError,
                r"No MovieLens file given and "
                r"TFRS_LOGQ_DATA is unset.*Set TFRS_LOGQ_DATA to the "
                r"directory that holds ml-1m/sasrec_ml-1m.txt.gz.*"
                r"--data_path.*--dataset=ml-1m-tfds",
            ):
                loaders.load_sasrec()
        with mock.patch.dict(os.environ, {loaders.DATA_ENV: tempfile.mkdtemp()}):
            with self.assertRaisesRegex(
                FileNotFoundError,
                r"No such data file: .*"
                r"ratings_reconstructed.dat.gz \(TFRS_LOGQ_DATA=",
            ):
                loaders.load_grouplens()


@pytest.mark.skipif(bool(_movielens_files_missing()), reason=_movielens_files_missing())
class MovieLensFilesTest(tf.test.TestCase):
    def test_sasrec_file_and_leave_one_out(self):
        data = loaders.load_sasrec()
        self.assertEqual((data.num_users, data.num_items, len(data.user)), (6040, 3416, 999611))
        split = splits.leave_one_out(data)
        self.assertLen(split.test.users, 6040)
        self.assertLen(split.validation.users, 512)
        # 999,611 - 6,040 test - 512 validation interactions remain for training.
        self.assertEqual(sum(len(s) for s in split.train), 999611 - 6040 - 512)
        # gSASRec's datasets/ml1m/train/input.txt (preprocess_ml1m.py): every user's items
        # but the last 2, the last 3 for the 512 validation users.
        gsasrec = splits.leave_one_out(data, train_gap=1)
        self.assertEqual(sum(len(s) for s in gsasrec.train), 999611 - 2 * 6040 - 512)
        self.assertEqual(sum(1 for s in gsasrec.train[1:] if len(s)), 6040)
        self.assertAllEqual(gsasrec.test.targets, split.test.targets)
        self.assertAllEqual(gsasrec.validation.histories[0], split.validation.histories[0])

    def test_grouplens_file_and_temporal_split(self):
        data = loaders.load_grouplens()
        self.assertEqual((data.num_users, len(data.user)), (6040, 1000204))
        split = splits.temporal(data)
        self.assertEqual(sum(len(s) for s in split.train), 1000204 - 2 * 100021)


class SplitTest(tf.test.TestCase):
    def test_gsasrec_validation_users(self):
        users = splits.gsasrec_validation_users(6040)
        self.assertLen(users, 512)
        self.assertAllEqual(users[:5], [14, 17, 23, 31, 37])  # RandomState(42), 1-based ids.
        self.assertAllEqual(
            users, np.sort(np.random.RandomState(42).choice(6040, 512, replace=False))
        )

    def test_leave_one_out(self):
        # 600 users so that some are gSASRec validation users; user u has u % 5 + 2 items.
        users, items = [], []
        for u in range(1, 601):
            n = u % 5 + 2
            users += [u] * n
            items += list(range(1, n + 1))
        data = from_arrays(users, items, keep_ids=True)
        split = splits.leave_one_out(data)
        validation = set(splits.gsasrec_validation_users(600).tolist())
        self.assertAllEqual(split.validation.users, sorted(u for u in validation if u % 5 + 2 >= 3))
        for index, user in enumerate(split.test.users):
            n = user % 5 + 2
            self.assertAllEqual(split.test.targets[index], [n])
            self.assertAllEqual(split.test.histories[index], np.arange(1, n))
            want_train = n - 2 if (user in validation and n >= 3) else n - 1
            self.assertLen(split.train[user], want_train)
        for index, user in enumerate(split.validation.users):
            n = user % 5 + 2
            self.assertAllEqual(split.validation.targets[index], [n - 1])
            self.assertAllEqual(split.validation.histories[index], np.arange(1, n - 1))

    def test_leave_one_out_train_gap(self):
        data = from_arrays(
            np.repeat(np.arange(1, 601), 6), np.tile(np.arange(1, 7), 600), keep_ids=True
        )
        split = splits.leave_one_out(data, train_gap=1)
        validation = set(splits.gsasrec_validation_users(600).tolist())
        other = min(set(range(1, 601)) - validation)
        self.assertAllEqual(split.train[other], [1, 2, 3, 4])
        self.assertAllEqual(split.train[min(validation - {0})], [1, 2, 3])  # 0 is no user.
        self.assertAllEqual(split.test.histories[0], [1, 2, 3, 4, 5])
        self.assertAllEqual(split.validation.histories[0], [1, 2, 3, 4])
        with self.assertRaisesRegex(
            ValueError,
            r"`train_gap` must be a non-negative integer; "
            r"received train_gap=-1",
        ):
            splits.leave_one_out(data, train_gap=-1)

    def test_temporal_split_counts_and_no_leakage(self):
        data, _ = synthetic.make_synthetic(num_users=300, num_items=400, seed=3)
        split = splits.temporal(data, test_fraction=0.1, validation_fraction=0.1)
        n = len(data.user)
        self.assertEqual(sum(len(s) for s in split.train), n - 2 * int(np.ceil(0.1 * n)))
        order = np.sort(data.timestamp)
        val_start, test_start = (
            order[n - 2 * int(np.ceil(0.1 * n))],
            order[n - int(np.ceil(0.1 * n))],
        )
        sequences = data.sequences()
        times = {u: data.timestamp[data.user == u] for u in range(1, 301)}
        for user, history, target in zip(
            split.test.users, split.test.histories, split.test.targets
        ):
            # History: every interaction before the test window; target: the first after.
            self.assertTrue(np.all(times[user][: len(history)] <= test_start))
            self.assertAllEqual(sequences[user][: len(history)], history)
            self.assertEqual(target[0], sequences[user][len(history)])
        for user in range(1, 301):
            self.assertTrue(np.all(times[user][: len(split.train[user])] <= val_start))
        with self.assertRaisesRegex(ValueError, r"Need 0 < test_fraction"):
            splits.temporal(data, test_fraction=0.6, validation_fraction=0.5)
        with self.assertRaisesRegex(
            ValueError,
            r"`targets` must be one of 'first', 'all', "
            r"'last', 'successive'; received targets='next'",
        ):
            splits.temporal(data, targets="next")
        tiny = from_arrays([1, 1, 2], [1, 2, 3], [1, 2, 3], keep_ids=True)
        with self.assertRaisesRegex(
            ValueError,
            r"3 interactions leave none to train on: the "
            r"test window takes 2 and the validation window 2 "
            r"\(test_fraction=0.4, validation_fraction=0.4\); lower "
            r"--test_fraction.",
        ):
            splits.temporal(tiny, test_fraction=0.4, validation_fraction=0.4)

    def test_temporal_last_and_successive_targets(self):
        # Times 1..10: training is times 1-6, validation 7-8, test 9-10.
        data = from_arrays(
            user=[1, 1, 1, 1, 2, 2, 2, 3, 3, 3],
            item=[11, 12, 13, 14, 21, 22, 23, 31, 32, 33],
            timestamp=[1, 2, 9, 10, 3, 7, 8, 4, 5, 6],
            keep_ids=True,
        )
        want = {  # targets: (test queries, validation queries), each (user, history, target).
            "first": ([(1, [11, 12], [13])], [(2, [21], [22])]),
            "all": ([(1, [11, 12], [13, 14])], [(2, [21], [22, 23])]),
            "last": ([(1, [11, 12, 13], [14])], [(2, [21, 22], [23])]),
            "successive": (
                [(1, [11, 12], [13]), (1, [11, 12, 13], [14])],
                [(2, [21], [22]), (2, [21, 22], [23])],
            ),
        }
        raw = lambda ids: [int(i) for i in ids]  # noqa: E731  (keep_ids: dense = raw)
        for targets, (test, validation) in want.items():
            split = splits.temporal(
                data, test_fraction=0.2, validation_fraction=0.2, targets=targets
            )
            self.assertEqual([raw(s) for s in split.train[1:]], [[11, 12], [21], [31, 32, 33]])
            for eval_set, expected in ((split.test, test), (split.validation, validation)):
                got = [
                    (int(u), raw(h), raw(t))
                    for u, h, t in zip(eval_set.users, eval_set.histories, eval_set.targets)
                ]
                self.assertEqual(got, expected, msg=targets)

    def test_subsample_keeps_order_and_is_seeded(self):
        eval_set = splits.EvalSet(
            np.arange(10),
            [np.array([i]) for i in range(10)],
            [np.array([i + 1]) for i in range(10)],
        )
        a, b = splits.subsample(eval_set, 4), splits.subsample(eval_set, 4)
        self.assertAllEqual(a.users, b.users)
        self.assertLen(a.users, 4)
        self.assertTrue(np.all(np.diff(a.users) > 0))
        for user, history, target in zip(a.users, a.histories, a.targets):
            self.assertAllEqual(history, [user])
            self.assertAllEqual(target, [user + 1])
        self.assertIs(splits.subsample(eval_set, 10), eval_set)
        with self.assertRaisesRegex(
            ValueError,
            r"`count` must be a positive integer; "
            r"received count=0",
        ):
            splits.subsample(eval_set, 0)


class SyntheticTest(tf.test.TestCase):
    def test_deterministic_without_repeats_and_with_known_truth(self):
        a, catalog = synthetic.make_synthetic(
            num_users=40, num_items=60, min_length=5, max_length=9, seed=1
        )
        b, _ = synthetic.make_synthetic(
            num_users=40, num_items=60, min_length=5, max_length=9, seed=1
        )
        self.assertAllEqual(a.item, b.item)
        self.assertAllEqual(a.timestamp, b.timestamp)
        for sequence in a.sequences()[1:]:
            self.assertBetween(len(sequence), 5, 9)
            self.assertLen(set(sequence.tolist()), len(sequence))
        log_p = catalog.log_probabilities(np.array([1, 2]))
        self.assertAllClose(np.exp(log_p).sum(axis=1), [1.0, 1.0])
        self.assertEqual(log_p[0, 0], -np.inf)

    def test_first_draws_follow_the_truth(self):
        # The first item of each user is one draw from P(. | u): its mean log-likelihood
        # under the truth beats a uniform guess by a wide margin.
        data, catalog = synthetic.make_synthetic(
            num_users=500, num_items=200, min_length=3, max_length=3, seed=2
        )
        firsts = np.array([s[0] for s in data.sequences()[1:]])
        log_p = catalog.log_probabilities(np.arange(1, 501))
        self.assertGreater(log_p[np.arange(500), firsts].mean(), np.log(1 / 200) + 1.0)

    def test_bad_sizes(self):
        with self.assertRaisesRegex(
            ValueError,
            r"`num_items` must be a positive integer; "
            r"received num_items=0",
        ):
            synthetic.make_synthetic(num_items=0)
        with self.assertRaisesRegex(
            ValueError,
            r"Need 3 <= min_length <= max_length <= "
            r"num_items",
        ):
            synthetic.make_synthetic(num_items=10, max_length=20)


class BuilderTest(tf.test.TestCase):
    def test_sequence_windows(self):
        windows = builders.sequence_windows(
            [np.array([]), np.array([1, 2, 3, 4]), np.array([5])], max_length=5
        )
        self.assertAllEqual(windows["inputs"], [[0, 0, 1, 2, 3]])
        self.assertAllEqual(windows["targets"], [[0, 0, 2, 3, 4]])
        windows = builders.sequence_windows([np.arange(1, 10)], max_length=3)
        self.assertAllEqual(windows["inputs"], [[6, 7, 8]])
        self.assertAllEqual(windows["targets"], [[7, 8, 9]])

    def test_sasrec_dataset_shapes_and_sharding(self):
        sequences = [np.arange(1, 8)] * 10
        dataset = builders.sasrec_dataset(sequences, max_length=4, batch_size=4, seed=0)
        batch = next(iter(dataset))
        self.assertEqual(batch["inputs"].shape, (4, 4))
        self.assertEqual(batch["inputs"].dtype, tf.int32)
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2
        )
        sharded = builders.sasrec_dataset(sequences, 4, batch_size=4, seed=0, input_context=context)
        self.assertEqual(next(iter(sharded))["inputs"].shape, (2, 4))  # Per-replica batch.
        eval_batches = list(builders.sasrec_dataset(sequences, 4, 4, training=False))
        self.assertEqual([b["inputs"].shape[0] for b in eval_batches], [4, 4, 2])

    def test_partial_batches_end_each_pass(self):
        # As a DataLoader(shuffle=True): every pass is a new permutation of the 10 windows in
        # batches of 4, 4 and 2.
        sequences = [np.array([u, u + 100]) for u in range(1, 11)]
        dataset = builders.sasrec_dataset(
            sequences, max_length=1, batch_size=4, seed=0, partial_batches=True
        )
        batches = [b["inputs"].numpy()[:, 0] for b in dataset.take(6)]
        self.assertEqual([len(b) for b in batches], [4, 4, 2, 4, 4, 2])
        passes = [np.concatenate(batches[:3]), np.concatenate(batches[3:])]
        for one_pass in passes:
            self.assertAllEqual(np.sort(one_pass), np.arange(1, 11))
        self.assertNotAllEqual(passes[0], passes[1])

    def test_two_tower_dataset_histories(self):
        sequences = [np.array([], np.int64), np.array([3, 1, 4, 1]), np.array([5, 9])]
        examples = list(
            builders.two_tower_dataset(sequences, history_length=2, batch_size=1, training=False)
        )
        got = [
            (int(e["user"][0]), e["history"][0].numpy().tolist(), int(e["item"][0]))
            for e in examples
        ]
        self.assertEqual(got, [(1, [0, 3], 1), (1, [3, 1], 4), (1, [1, 4], 1), (2, [0, 5], 9)])
        batch = next(iter(builders.two_tower_dataset(sequences, 2, batch_size=3, seed=1)))
        self.assertEqual(batch["history"].shape, (3, 2))

    def test_an_input_pipeline_without_examples_is_refused_not_spun(self):
        # 3 examples over 4 input pipelines: the last gets none, and its repeated passes would
        # yield nothing forever.
        context = tf.distribute.InputContext(
            num_input_pipelines=4, input_pipeline_id=3, num_replicas_in_sync=4
        )
        with self.assertRaisesRegex(
            ValueError, r"3 training examples leave input pipeline 3 of 4 none"
        ):
            builders.sasrec_dataset([np.array([1, 2])] * 3, 4, 4, seed=0, input_context=context)
        sharded = builders.sasrec_dataset(
            [np.array([1, 2])] * 3, 4, 4, seed=0, input_context=context, training=False
        )
        self.assertEqual(list(sharded), [])  # Evaluation: nothing to read is no error.

    def test_empty_training_data(self):
        with self.assertRaisesRegex(ValueError, r"No user has 2 or more items to train on"):
            builders.sasrec_dataset([np.array([1])], 4, 2)


if __name__ == "__main__":
    tf.test.main()
