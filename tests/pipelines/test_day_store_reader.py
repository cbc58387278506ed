"""The day store read without TensorFlow (`day_store.read_records`, `DayStore.chunks`) never
answers silently wrong (issue 75): both CRCs of every record checked, as tf.data's reader
checks them; lengths bounded by the file; every decode error a DataError naming the file and
the record's byte offset; each day's examples counted against the manifest."""

import json
import os
import re
import shutil
import struct

import google_crc32c
import numpy as np
import pytest
import tensorflow as tf

from pipelines import configs
from pipelines.data import day_store
from pipelines.data import logs
from pipelines.data.interactions import DataError

DAY = 86_400
CHUNK_ROWS = 32  # Several records a day file: offsets other than 0.


def _masked(data: bytes) -> bytes:
    """TFRecord's masked CRC-32C of `data`, computed here (not the module's)."""
    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _offsets(path):
    """[(offset, length)] of the records of a TFRecord file, read from its headers."""
    with open(path, "rb") as f:
        data = f.read()
    found, offset = [], 0
    while offset < len(data):
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        found.append((offset, length))
        offset += 16 + length
    return found


def _patch(path, position, new_bytes):
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(new_bytes)


def _flip(path, position):
    with open(path, "rb") as f:
        f.seek(position)
        (byte,) = f.read(1)
    _patch(path, position, bytes([byte ^ 0x10]))


def _truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


def _at(path, offset):
    """The start of a DataError's message about the record at `offset` of `path`."""
    return re.escape(f"{path}: the record at byte {offset}: ")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A store built from a small event log (4 training days, 32-example records)."""
    root = tmp_path_factory.mktemp("built")
    rng = np.random.default_rng(0)
    rows = [
        (f"u{user}", f"i{rng.integers(60)}", day * DAY + user * 60 + k)
        for day in range(6)
        for user in range(40)
        for k in range(3)
    ]
    path = os.path.join(root, "log.csv")
    with open(path, "w") as f:
        f.write("user_id,item_id,timestamp\n" + "".join(f"{u},{i},{t}\n" for u, i, t in rows))
    config = configs.PRESETS["industrial_smoke"].replace(
        dataset="events",
        data_path=path,
        test_day=5,
        time_unit="s",
        history_length=4,
        test_queries=10,
        validation_queries=10,
    )
    old = day_store.CHUNK_ROWS
    day_store.CHUNK_ROWS = CHUNK_ROWS
    try:
        store = logs.day_store_data(config, os.path.join(root, "run"))[1].stream
    finally:
        day_store.CHUNK_ROWS = old
    assert len(store.days) == 4 and all(len(_offsets(p)) > 1 for p in store.example_files())
    return store.directory


@pytest.fixture
def store(built, tmp_path):
    """A copy of the built store, to damage."""
    directory = str(tmp_path / "day_store")
    shutil.copytree(built, directory)
    return day_store.read(directory, np.zeros(0), np.zeros(0))[1].stream


def _small_store(directory, chunks, day_ends=None, weighted=False, history_length=1):
    """A one-day store of `chunks` ([rows, 2 + history_length (+ 1)] int32 arrays), one
    record each, written as the day store writes them."""
    os.makedirs(directory, exist_ok=True)
    rows = sum(len(chunk) for chunk in chunks)
    store = day_store.DayStore(
        str(directory),
        num_examples=rows if day_ends is None else day_ends[-1],
        history_length=history_length,
        weighted=weighted,
        days=np.array([0]),
        day_ends=np.array([rows] if day_ends is None else day_ends),
        item_counts=np.zeros(0, np.int64),
    )
    day_store.write_records(
        store.example_files()[0], (day_store.encode_int32_tensor(c) for c in chunks)
    )
    return store


def _tf_records(path):
    return [record.numpy() for record in tf.data.TFRecordDataset(path)]


# A good store.


def test_a_good_store_reads_the_arrays_tensorflow_parses(store):
    parsed = tf.data.TFRecordDataset(store.example_files()).map(
        lambda record: day_store.parse_chunk(record, store.history_length, store.weighted)
    )
    chunks = list(store.chunks())
    assert sum(len(c["user"]) for c in chunks) == store.num_examples
    for got, want in zip(chunks, parsed, strict=True):
        assert sorted(got) == sorted(want)
        for key in want:
            assert got[key].dtype == want[key].dtype and got[key].flags.writeable, key
            np.testing.assert_array_equal(got[key], want[key].numpy(), key)
    for path in store.example_files():
        assert list(day_store.read_records(path)) == _tf_records(path)
    items = np.concatenate([c["item"] for c in chunks])
    for day, start, end in zip(store.days, np.r_[0, store.day_ends[:-1]], store.day_ends):
        np.testing.assert_array_equal(store.day_items(int(day)), items[start:end])


def test_a_written_store_reads_back_the_arrays_written(tmp_path):
    rng = np.random.default_rng(1)
    chunks = [rng.integers(-(2**31), 2**31, (rows, 5), dtype=np.int32) for rows in (7, 7, 3)]
    store = _small_store(tmp_path, chunks, weighted=True, history_length=2)
    read = list(store.chunks())
    assert len(read) == 3
    for got, want in zip(read, chunks):
        np.testing.assert_array_equal(got["user"], want[:, 0])
        np.testing.assert_array_equal(got["item"], want[:, 1])
        np.testing.assert_array_equal(got["history"], want[:, 2:4])
        np.testing.assert_array_equal(got["weight"], want[:, 4].view(np.float32))


# A record damaged: both readers refuse it.


def test_a_flipped_payload_byte_is_refused_as_tensorflow_refuses_it(store):
    path = store.example_files()[1]
    offset, length = _offsets(path)[1]
    with open(path, "rb") as f:
        f.seek(offset + 12)
        payload = f.read(length)
    position = offset + 12 + length - 7  # A byte of the last example's tensor_content.
    _flip(path, position)
    # Without its CRC the record decodes, to another example: silently wrong.
    flipped = bytearray(payload)
    flipped[length - 7] ^= 0x10
    good, bad = (day_store.decode_int32_tensor(bytes(p)) for p in (payload, flipped))
    assert good.shape == bad.shape and (good != bad).sum() == 1
    with pytest.raises(tf.errors.DataLossError):
        _tf_records(path)
    message = _at(path, offset) + r"its data's masked CRC-32C is [0-9a-f]{8}, where its "
    with pytest.raises(DataError, match=message + f"{length} bytes give [0-9a-f]{{8}}: the file"):
        list(day_store.read_records(path))
    with pytest.raises(DataError, match=message):
        list(store.chunks())


def test_a_flipped_length_byte_is_refused_as_tensorflow_refuses_it(store):
    path = store.example_files()[0]
    offset, _ = _offsets(path)[2]
    _flip(path, offset)
    with pytest.raises(tf.errors.DataLossError):
        _tf_records(path)
    message = _at(path, offset) + r"its length's masked CRC-32C is [0-9a-f]{8}, where its bytes "
    with pytest.raises(DataError, match=message + r"[0-9a-f]{16} give [0-9a-f]{8}: the file is"):
        list(store.chunks())


def test_a_huge_length_is_refused_not_allocated(store):
    path = store.example_files()[0]
    offset, _ = _offsets(path)[1]
    size = os.path.getsize(path)
    length = struct.pack("<Q", 2**62)
    _patch(path, offset, length + _masked(length))  # Its CRC right: only the bound catches it.
    left = size - offset - 16
    with pytest.raises(
        DataError,
        match=_at(path, offset)
        + re.escape(f"a length of {2**62} bytes, where the file ({size} bytes) holds {left} "),
    ):
        list(store.chunks())


def test_random_bytes_are_refused_at_their_first_record(tmp_path):
    path = str(tmp_path / "random.tfrecord")
    with open(path, "wb") as f:
        f.write(np.random.default_rng(2).bytes(1000))
    with pytest.raises(tf.errors.DataLossError):
        _tf_records(path)
    with pytest.raises(DataError, match=_at(path, 0) + "its length's masked CRC-32C"):
        list(day_store.read_records(path))


def test_records_of_random_bytes_are_refused_at_their_offset(tmp_path):
    """Framed with right CRCs, the records' data are no int32 tensors: each decode error is a
    DataError naming the file and the record."""
    garbage = np.random.default_rng(3).bytes(64)
    store = _small_store(tmp_path, [np.zeros((2, 3), np.int32)], day_ends=[5])
    path = store.example_files()[0]
    offset = os.path.getsize(path)
    with open(path, "ab") as f:  # A second record, after the good one.
        f.write(struct.pack("<Q", len(garbage)) + _masked(struct.pack("<Q", len(garbage))))
        f.write(garbage + _masked(garbage))
    assert len(_tf_records(path)) == 2  # TensorFlow's reader passes it to parse_tensor.
    with pytest.raises(DataError, match=_at(path, offset) + r"not an int32 tensor \("):
        list(store.chunks())


def test_a_record_of_other_columns_is_refused(tmp_path):
    store = _small_store(tmp_path, [np.zeros((2, 3), np.int32), np.zeros((2, 4), np.int32)])
    path = store.example_files()[0]
    offset = _offsets(path)[1][0]
    message = "a chunk of shape [2, 4], not [rows, 3] (user, item, 1 history items)."
    with pytest.raises(DataError, match=_at(path, offset) + re.escape(message)):
        list(store.chunks())
    weighted = _small_store(
        tmp_path / "weighted", [np.zeros(3, np.int32)], [1], weighted=True, history_length=2
    )
    path = weighted.example_files()[0]
    message = "a chunk of shape [3], not [rows, 5] (user, item, 2 history items, the weight)."
    with pytest.raises(DataError, match=_at(path, 0) + re.escape(message)):
        list(weighted.chunks())


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x08", "a varint at byte 1 runs past the message's end (1 bytes)"),
        (b"\x08" + b"\xff" * 11, "a varint at byte 1 of more than 10 bytes"),
        (b"\x22\x09abc", "field 4 at byte 0 has a length of 9 bytes, where 3 are left"),
        (b"\x0d\x00\x00\x00\x00", "field 1 at byte 0 has the protobuf wire type 5, which"),
        (
            # dtype int32, shape [2, 3], a tensor_content of 20 bytes.
            b"\x08\x03\x12\x08\x12\x02\x08\x02\x12\x02\x08\x03\x22\x14" + bytes(20),
            "A tensor_content of 20 bytes for the shape [2, 3] (6 int32 values, 24 bytes).",
        ),
        (
            b"\x08\x03\x12\x04\x12\x02\x08\x03\x38\x01\x38\x02",
            "2 int_val values for the shape [3] (3 int32 values).",
        ),
    ],
)
def test_decoding_garbage_is_a_value_error(data, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        day_store.decode_int32_tensor(data)


# A file cut: refused, never read short.


def test_a_file_cut_within_a_record_is_refused(store):
    path = store.example_files()[2]
    offset, length = _offsets(path)[-1]
    _truncate(path, offset + 12 + length - 6)  # Its data's last bytes and CRC cut.
    left = length - 6 - 4
    message = f"a length of {length} bytes, where the file ({offset + 12 + length - 6} bytes) "
    with pytest.raises(DataError, match=_at(path, offset) + re.escape(message + f"holds {left}")):
        list(day_store.read_records(path))
    with pytest.raises(DataError, match=_at(path, offset) + "a length of"):
        list(store.chunks())
    _truncate(path, offset + 5)
    message = "a header of 5 bytes, not 12: the file is cut short."
    with pytest.raises(DataError, match=_at(path, offset) + re.escape(message)):
        list(day_store.read_records(path))


def test_a_file_cut_at_a_record_boundary_is_refused_by_its_count(tmp_path):
    chunks = [np.ones((4, 3), np.int32), np.ones((4, 3), np.int32), np.ones((1, 3), np.int32)]
    store = _small_store(tmp_path, chunks)
    path = store.example_files()[0]
    _truncate(path, _offsets(path)[-1][0])  # The last record (1 example) gone.
    assert os.path.getsize(path) >= 9 * 12  # Long enough for its 9 examples' bytes.
    assert sum(len(day_store.decode_int32_tensor(r)) for r in _tf_records(path)) == 8
    message = "8 training examples, where the manifest counts 9 on day 0: the file is cut short"
    with pytest.raises(DataError, match=re.escape(f"{path}: {message}")):
        list(store.chunks())


def test_more_examples_than_the_manifest_counts_are_refused(tmp_path):
    chunks = [np.ones((4, 3), np.int32), np.ones((4, 3), np.int32)]
    store = _small_store(tmp_path, chunks, day_ends=[6])
    path = store.example_files()[0]
    offset = _offsets(path)[1][0]
    message = f"{path}: the record at byte {offset} brings day 0's training examples to 8, "
    message += "past the 6 the manifest counts"
    with pytest.raises(DataError, match=re.escape(message)):
        list(store.chunks())


# A day file emptied or missing: refused before a chunk is read.


def test_an_emptied_day_file_is_refused_against_the_manifest(store):
    path = store.example_files()[2]
    count = int(store.day_ends[2] - store.day_ends[1])
    _truncate(path, 0)
    # TensorFlow's reader reads an empty file as no records: a day short.
    assert _tf_records(path) == []
    message = (
        f"{path}: 0 bytes, fewer than the {count * 24} of the {count} training examples the "
        f"manifest counts on day {store.days[2]} (24 bytes each): the file is cut short"
    )
    with pytest.raises(DataError, match=re.escape(message)):
        store.chunks()  # Before the first chunk.


def test_a_missing_day_file_is_refused_against_the_manifest(store):
    path = store.example_files()[3]
    count = int(store.day_ends[3] - store.day_ends[2])
    os.remove(path)
    message = (
        f"{path}: no such file, where the manifest counts {count} training examples on day "
        f"{store.days[3]}: the store is damaged"
    )
    with pytest.raises(DataError, match=re.escape(message)):
        store.chunks()


def test_a_manifest_whose_counts_disagree_is_refused(store):
    manifest_path = os.path.join(store.directory, day_store.MANIFEST)
    with open(manifest_path) as f:
        manifest = json.load(f)
    manifest["num_examples"] += 1  # The steps a job takes, from a count the days lack.
    with open(manifest_path, "w") as f:
        json.dump(manifest, f)
    damaged = day_store.read(store.directory, np.zeros(0), np.zeros(0))[1].stream
    message = (
        f"{manifest_path}: days {store.days.tolist()}, day_ends {store.day_ends.tolist()} and "
        f"num_examples {store.num_examples + 1} do not agree"
    )
    with pytest.raises(DataError, match=re.escape(message)):
        damaged.chunks()


def test_a_days_items_are_checked_against_the_manifest(store):
    day = int(store.days[1])
    count = int(store.day_ends[1] - store.day_ends[0])
    path = os.path.join(store.directory, f"items-{day:05d}.npy")
    np.save(path, np.zeros(count - 1, np.int64))
    message = f"{path}: items of shape [{count - 1}], where the manifest counts {count} training"
    with pytest.raises(DataError, match=re.escape(message)):
        store.day_items(day)
    with open(path, "wb") as f:
        f.write(b"not numpy")
    with pytest.raises(DataError, match=re.escape(f"{path}: not a readable .npy array (")):
        store.day_items(day)
    os.remove(path)
    message = f"{path}: no such file, where the manifest counts {count} training examples on day"
    with pytest.raises(DataError, match=re.escape(message)):
        store.day_items(day)
    message = f"day_items: day=99 is not a training day of the store {store.directory} (days "
    with pytest.raises(ValueError, match=re.escape(message + "0..3, 4 of them).")):
        store.day_items(99)


def test_a_crc_without_its_c_extension_is_said_to_be_slow(monkeypatch):
    monkeypatch.setattr(google_crc32c, "implementation", "python")
    monkeypatch.setattr(day_store, "_SLOW_CRC_SAID", [])
    with pytest.warns(UserWarning, match="writing and reading a day store will be slow"):
        day_store._masked_crc(b"x")  # pylint: disable=protected-access


@pytest.mark.parametrize(
    "name, damage, error",
    [
        (day_store.MANIFEST, lambda path: _truncate(path, 40), "JSONDecodeError"),
        (day_store.MANIFEST, lambda path: open(path, "w").write("[1, 2]"), "not a JSON object"),
        (day_store.MANIFEST, lambda path: open(path, "w").write("{}"), "KeyError"),
        ("counts.npz", os.remove, "FileNotFoundError"),
        ("queries.npz", lambda path: _flip(path, os.path.getsize(path) // 2), "BadZipFile"),
    ],
)
def test_a_damaged_manifest_or_npz_is_named_not_a_traceback(built, tmp_path, name, damage, error):
    directory = str(tmp_path / "day_store")
    shutil.copytree(built, directory)
    path = os.path.join(directory, name)
    damage(path)
    with pytest.raises(DataError, match=rf"{re.escape(path)}: is missing or damaged \(.*{error}"):
        day_store.read(directory, np.zeros(0), np.zeros(0))
