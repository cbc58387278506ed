"""The next-day split of an event log, out of core: memory bounded by the vocabularies and one
day of events, not by the length of the log.

`build` reads the log once more after its vocabularies are counted and writes a directory:

- the events bucketed by day on disk, each day then de-duplicated and sorted (the rule of
  every loader, `interactions.chronological`), one day in memory at a time;
- the training examples of the two-tower model in time order (ties by user, then file
  order), each with its user's previous `history_length` training items, as TFRecord files
  of int32 chunks: a user's recent items are carried from day to day in a
  [num_users + 1, history_length] table, not recovered from the whole log;
- the validation and test queries of `splits.next_day` (a query per user active on the day
  with an earlier event, targets the day's distinct items), subsampled to the run's query
  counts before their histories are gathered, so only the chosen users' histories are held;
- the counts every later step needs (training events per item, all events per user and item).

The examples, batches and queries equal those of the in-memory path (`splits.next_day`,
`builders.two_tower_dataset` with times): the tests compare them. The directory is written
under a temporary name and renamed when complete, so a killed build is started again and a
finished one is read back by evaluation and export.

Read without TensorFlow (`DayStore.chunks`), a damaged store is refused, never read short or
wrong: both CRC-32Cs of every record are checked (as tf.data's reader checks them), lengths
are bounded by the file, and each day's file is counted against the manifest; each error is
a `DataError` naming the file (and the record's byte offset).
"""

import contextlib
import dataclasses
import fcntl
import glob
import json
import math
import os
import resource
import shutil
import struct
import time
import warnings
import zipfile
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple

import numpy as np

from pipelines.data import splits as splits_lib
from pipelines.data.interactions import DataError
from pipelines.data.interactions import chronological

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
# Events buffered (all days together) before they are written to the day buckets.
BUFFER_ROWS = 1 << 22
# Training examples per TFRecord record.
CHUNK_ROWS = 1 << 13


class LogSummary(NamedTuple):
    """What the run needs of an event log read out of core (in place of `Interactions`).

    Attributes:
      num_users, num_items: vocabulary sizes (dense ids 1..num).
      user_ids, item_ids: [num + 1] raw ids of the log, as strings (index 0 unused).
      duplicates: exact duplicate events dropped.
      first_time, last_time: the log's first and last time (seconds).
      per_user, per_item: [num + 1] kept events per user / item, every day.
    """

    num_users: int
    num_items: int
    user_ids: np.ndarray
    item_ids: np.ndarray
    duplicates: int
    first_time: int
    last_time: int
    per_user: np.ndarray
    per_item: np.ndarray

    def counts(self) -> np.ndarray:
        """[num_items + 1] events per item (as `Interactions.counts`)."""
        return self.per_item

    def user_counts(self) -> np.ndarray:
        """[num_users + 1] events per user (as `Interactions.user_counts`)."""
        return self.per_user

    def time_span(self) -> Tuple[int, int]:
        return self.first_time, self.last_time


@dataclasses.dataclass(frozen=True)
class DayStore:
    """The training side of a built store: what `builders.day_store_dataset` streams.

    Attributes:
      directory: the store's directory.
      num_examples: training examples (each training event but a user's first).
      history_length: items of history per example.
      weighted: whether the examples carry the log's event weights.
      days: [d] the training days, in order (counted from the log's first day).
      day_ends: [d] the examples before the end of each training day (cumulative).
      item_counts: [num_items + 1] training events per item.
    """

    directory: str
    num_examples: int
    history_length: int
    weighted: bool
    days: np.ndarray
    day_ends: np.ndarray
    item_counts: np.ndarray

    def example_files(self) -> List[str]:
        """The TFRecord files of the examples, in time order."""
        return [os.path.join(self.directory, _examples_name(day)) for day in self.days]

    def day_counts(self) -> np.ndarray:
        """[d] the training examples of each day, from `day_ends`.

        Raises:
          DataError: naming the manifest, `days`, `day_ends` and `num_examples` that do not
            agree (other lengths, ends that fall, a last end other than `num_examples`).
        """
        days, ends = np.asarray(self.days), np.asarray(self.day_ends)
        counts = np.diff(ends, prepend=0)
        last = int(ends[-1]) if len(ends) else 0
        if len(days) != len(ends) or (counts < 0).any() or last != self.num_examples:
            raise DataError(
                os.path.join(self.directory, MANIFEST),
                None,
                f"days {days.tolist()}, day_ends {ends.tolist()} and num_examples "
                f"{self.num_examples} do not agree (a day end for each day, never falling, "
                "the last one num_examples).",
            )
        return counts

    def verified_files(self) -> List[str]:
        """`example_files`, each checked against the manifest before a record is read: it
        exists and holds at least the bytes of its day's examples (an emptied or cut file is
        refused here; `chunks` counts each day's examples as it reads them).

        Raises:
          DataError: naming a day's file that is missing or too short for its examples.
        """
        row_bytes = 4 * self._columns()
        paths = self.example_files()
        for path, day, count in zip(paths, self.days, self.day_counts()):
            if not os.path.exists(path):
                raise DataError(
                    path,
                    None,
                    f"no such file, where the manifest counts {count} training examples on "
                    f"day {day}: the store is damaged; build it again.",
                )
            size = os.path.getsize(path)
            if size < count * row_bytes:
                raise DataError(
                    path,
                    None,
                    f"{size} bytes, fewer than the {count * row_bytes} of the {count} training "
                    f"examples the manifest counts on day {day} ({row_bytes} bytes each): the "
                    "file is cut short; build the store again.",
                )
        return paths

    def _columns(self) -> int:
        """int32 columns of an example: user, item, the history[, the weight's bits]."""
        return 2 + self.history_length + int(self.weighted)

    def chunks(self) -> Iterator[Dict[str, np.ndarray]]:
        """The training examples in time order, a record's chunk at a time, as numpy arrays
        {"user", "item", "history"[, "weight"]}, the same values `parse_chunk` gives, read
        without TensorFlow (`read_records`, `decode_int32_tensor`): a Keras 3 job on JAX or
        PyTorch streams the store a TensorFlow job built.

        The files are checked before the first chunk (`verified_files`); each record's CRCs
        as it is read (as TensorFlow's reader checks them) and each day's examples against the
        manifest's count when its file ends, so a damaged store is refused, never read short.

        Raises:
          DataError: naming the file (and the record's byte offset): a day's file missing,
            cut short or holding other than the manifest's count of examples; a record whose
            CRC does not match, whose length runs past the file's end, or that is not an int32
            tensor of the store's columns.
        """
        return self._chunks(self.verified_files(), self.day_counts())

    def _chunks(self, paths: List[str], counts: np.ndarray) -> Iterator[Dict[str, np.ndarray]]:
        columns, history = self._columns(), self.history_length
        for path, day, count in zip(paths, self.days, counts):
            rows = 0
            for offset, record in _records_at(path):
                try:
                    chunk = decode_int32_tensor(record)
                except ValueError as error:
                    raise DataError(
                        path, None, f"the record at byte {offset}: not an int32 tensor ({error})"
                    ) from error
                if chunk.ndim != 2 or chunk.shape[1] != columns:
                    raise DataError(
                        path,
                        None,
                        f"the record at byte {offset}: a chunk of shape {list(chunk.shape)}, "
                        f"not [rows, {columns}] (user, item, {history} history items"
                        f"{', the weight' if self.weighted else ''}).",
                    )
                rows += len(chunk)
                if rows > count:
                    raise DataError(
                        path,
                        None,
                        f"the record at byte {offset} brings day {day}'s training examples to "
                        f"{rows}, past the {count} the manifest counts: the store is damaged; "
                        "build it again.",
                    )
                features = {
                    "user": chunk[:, 0],
                    "item": chunk[:, 1],
                    "history": chunk[:, 2 : 2 + history],
                }
                if self.weighted:
                    features["weight"] = chunk[:, 2 + history].view(np.float32)
                yield features
            if rows != count:
                raise DataError(
                    path,
                    None,
                    f"{rows} training examples, where the manifest counts {count} on day {day}: "
                    "the file is cut short; build the store again.",
                )

    def day_items(self, day: int) -> np.ndarray:
        """The items of training day `day`'s examples, in stream order.

        Raises:
          ValueError: `day` is not one of the store's training days.
          DataError: naming the day's items file, missing, unreadable or of another length
            than the manifest's count of the day's examples.
        """
        index = int(np.searchsorted(self.days, day))
        if index == len(self.days) or self.days[index] != day:
            raise ValueError(
                f"day_items: day={day} is not a training day of the store {self.directory} "
                f"(days {self.days[0] if len(self.days) else None}.."
                f"{self.days[-1] if len(self.days) else None}, {len(self.days)} of them)."
            )
        count = int(self.day_counts()[index])
        path = os.path.join(self.directory, f"items-{day:05d}.npy")
        if not os.path.exists(path):
            raise DataError(
                path,
                None,
                f"no such file, where the manifest counts {count} training examples on day "
                f"{day}: the store is damaged; build it again.",
            )
        try:
            items = np.load(path)
        except (OSError, ValueError) as error:
            raise DataError(path, None, f"not a readable .npy array ({error}).") from error
        if items.shape != (count,):
            raise DataError(
                path,
                None,
                f"items of shape {list(items.shape)}, where the manifest counts {count} training "
                f"examples on day {day}: the store is damaged; build it again.",
            )
        return items


# A record: its length (uint64) and the length's masked CRC-32C, the data, the data's.
_HEADER_BYTES, _FOOTER_BYTES = 12, 4


def read_records(path: str) -> Iterator[bytes]:
    """The records of a TFRecord file, in order, without TensorFlow: each is a little-endian
    uint64 length, its masked CRC-32C, the data and the data's masked CRC-32C. Both CRCs are
    checked and the length is bounded by the file, as TensorFlow's reader does.

    Raises:
      DataError: naming `path` and the record's byte offset: a CRC that does not match, a
        header or a length that runs past the file's end.
    """
    for _, record in _records_at(path):
        yield record


def _records_at(path: str) -> Iterator[Tuple[int, bytes]]:
    """(byte offset, data) of each record of the TFRecord file `path` (see `read_records`)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        offset = 0
        while True:
            header = f.read(_HEADER_BYTES)
            if not header:
                return
            where = f"the record at byte {offset}"
            if len(header) < _HEADER_BYTES:
                raise DataError(
                    path,
                    None,
                    f"{where}: a header of {len(header)} bytes, not {_HEADER_BYTES}: the file "
                    "is cut short.",
                )
            (length,) = struct.unpack("<Q", header[:8])
            expected = _masked_crc(header[:8])
            if header[8:] != expected:
                raise DataError(
                    path,
                    None,
                    f"{where}: its length's masked CRC-32C is {header[8:].hex()}, where its "
                    f"bytes {header[:8].hex()} give {expected.hex()}: the file is corrupt.",
                )
            left = size - offset - _HEADER_BYTES - _FOOTER_BYTES
            if length > left:
                raise DataError(
                    path,
                    None,
                    f"{where}: a length of {length} bytes, where the file ({size} bytes) "
                    f"holds {max(left, 0)} after its header: the file is cut short.",
                )
            data = f.read(length)
            footer = f.read(_FOOTER_BYTES)  # Short only if the file shrank: then no match.
            expected = _masked_crc(data)
            if footer != expected:
                raise DataError(
                    path,
                    None,
                    f"{where}: its data's masked CRC-32C is {footer.hex()}, where its {length} "
                    f"bytes give {expected.hex()}: the file is corrupt.",
                )
            yield offset, data
            offset += _HEADER_BYTES + length + _FOOTER_BYTES


_SLOW_CRC_SAID: List[bool] = []  # Said once a process.


def _masked_crc(data: bytes) -> bytes:
    """TFRecord's checksum of `data`: its CRC-32C rotated right by 15 bits plus a constant
    (TensorFlow's `crc32c::Mask`), little-endian."""
    import google_crc32c  # pylint: disable=import-outside-toplevel

    if google_crc32c.implementation != "c" and not _SLOW_CRC_SAID:
        _SLOW_CRC_SAID.append(True)
        warnings.warn(
            "google-crc32c runs its pure-Python CRC-32C here (no C extension for this "
            "platform): writing and reading a day store will be slow.",
            stacklevel=2,
        )
    crc = google_crc32c.value(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def write_records(path: str, records: Iterator[bytes]) -> None:
    """Writes `records` to a TFRecord file at `path`, the bytes `tf.io.TFRecordWriter`
    writes (uncompressed), without TensorFlow: each a little-endian uint64 length, its
    masked CRC-32C, the data and the data's masked CRC-32C (`read_records` reads them)."""
    with open(path, "wb") as f:
        for record in records:
            header = struct.pack("<Q", len(record))
            f.write(header + _masked_crc(header))
            f.write(record)
            f.write(_masked_crc(record))


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def encode_int32_tensor(array: np.ndarray) -> bytes:
    """`tf.io.serialize_tensor(array).numpy()` of an int32 array, in numpy: a TensorProto of
    its dtype, shape and little-endian `tensor_content` (`decode_int32_tensor` reads it)."""
    array = np.asarray(array)
    if array.dtype != np.int32:
        raise ValueError(f"encode_int32_tensor takes int32 arrays; received dtype {array.dtype}.")
    dims = b"".join(
        _length_delimited(2, _encode_varint(1 << 3) + _encode_varint(size) if size else b"")
        for size in array.shape
    )
    content = array.astype("<i4", copy=False).tobytes()
    return (
        _encode_varint(1 << 3)
        + _encode_varint(_DT_INT32)
        + _length_delimited(2, dims)
        + (_length_delimited(4, content) if content else b"")
    )


def _varint(data, position: int) -> Tuple[int, int]:
    """(value, next position) of the protobuf varint at `position` of `data` (bytes or a
    memoryview).

    Raises:
      ValueError: the varint runs past the data's end or over 10 bytes.
    """
    value = shift = 0
    start = position
    while True:
        if position >= len(data):
            raise ValueError(
                f"a varint at byte {start} runs past the message's end ({len(data)} bytes)"
            )
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift >= 70:
            raise ValueError(f"a varint at byte {start} of more than 10 bytes")


def _fields(data) -> Iterator[Tuple[int, int, int, memoryview]]:
    """(field number, wire type, varint value, bytes value) of each field of a protobuf
    message: varints (wire 0) and length-delimited fields (wire 2, a view of `data`: not
    copied), the only wire types a TensorProto of int32 uses.

    Raises:
      ValueError: another wire type, or a varint or a field that runs past the data's end.
    """
    view = memoryview(data)
    position = 0
    while position < len(view):
        start = position
        key, position = _varint(view, position)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _varint(view, position)
            yield number, wire, value, view[0:0]
        elif wire == 2:
            length, position = _varint(view, position)
            if length > len(view) - position:
                raise ValueError(
                    f"field {number} at byte {start} has a length of {length} bytes, where "
                    f"{len(view) - position} are left in the message"
                )
            yield number, wire, 0, view[position : position + length]
            position += length
        else:
            raise ValueError(
                f"field {number} at byte {start} has the protobuf wire type {wire}, which a "
                "TensorProto of int32 does not use"
            )


_DT_INT32 = 3  # TensorFlow's DataType enum.


def decode_int32_tensor(data: bytes) -> np.ndarray:
    """`tf.io.parse_tensor(data, tf.int32)` in numpy: a serialized TensorProto of int32 (its
    `tensor_content` bytes, or its `int_val` list where TensorFlow wrote one).

    Raises:
      ValueError: not a TensorProto of int32 (another dtype, values other than its shape's,
        a message cut or malformed).
    """
    shape: List[int] = []
    content: Optional[memoryview] = None
    values: List[int] = []
    for number, wire, integer, raw in _fields(data):
        if number == 1 and integer != _DT_INT32:
            raise ValueError(f"A TensorProto of dtype {integer}, not int32 ({_DT_INT32}).")
        if number == 2:  # TensorShapeProto: repeated dim (2) {size (1)}.
            for dim_number, _, _, dim in _fields(raw):
                if dim_number == 2:
                    sizes = [size for n, _, size, _ in _fields(dim) if n == 1]
                    shape.append(sizes[0] if sizes else 0)
        elif number == 4:
            content = raw
        elif number == 7:  # int_val: packed (wire 2) or one varint per value.
            if wire == 2:
                position = 0
                while position < len(raw):
                    item, position = _varint(raw, position)
                    values.append(item)
            else:
                values.append(integer)
    size = math.prod(shape)
    if content is not None:
        if len(content) != 4 * size:
            raise ValueError(
                f"A tensor_content of {len(content)} bytes for the shape {shape} "
                f"({size} int32 values, {4 * size} bytes)."
            )
        # One copy, native and writable, of the message's bytes.
        array = np.frombuffer(content, "<i4").astype(np.int32)
    else:  # Varints of negatives are their 64-bit two's complement: keep the low 32 bits.
        array = (np.array(values, np.uint64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
        if array.size == 1 and size > 1:  # One value written for a constant tensor.
            array = np.full(size, array[0], np.int32)
        if array.size != size:
            raise ValueError(
                f"{array.size} int_val values for the shape {shape} ({size} int32 values)."
            )
    return array.reshape(shape)


def _peak_mib() -> float:
    """This process's peak resident memory so far, MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _examples_name(day: int) -> str:
    return f"examples-{day:05d}.tfrecord"


def _day_dir(root: str, day: int) -> str:
    return os.path.join(root, f"day-{day:05d}")


def parse_chunk(record, history_length: int, weighted: bool):
    """A TFRecord record of the store as {"user", "history", "item"[, "weight"]} tensors."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    chunk = tf.io.parse_tensor(record, tf.int32)
    chunk.set_shape([None, 2 + history_length + int(weighted)])
    features = {
        "user": chunk[:, 0],
        "item": chunk[:, 1],
        "history": chunk[:, 2 : 2 + history_length],
    }
    if weighted:
        features["weight"] = tf.bitcast(chunk[:, 2 + history_length], tf.float32)
    return features


class _Buckets:
    """Events bucketed by day on disk: `add` buffers, `flush` writes one part per day."""

    def __init__(self, root: str, first_day_start: int, day_seconds: int, weighted: bool):
        self.root, self.start, self.day_seconds = root, first_day_start, day_seconds
        self.weighted = weighted
        self.pending: List[Tuple[np.ndarray, ...]] = []
        self.rows, self.parts = 0, 0
        self.days: Set[int] = set()

    def add(self, user, item, when, weight) -> None:
        columns = (user, item, when) + ((weight,) if self.weighted else ())
        self.pending.append(columns)
        self.rows += len(user)
        if self.rows >= BUFFER_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        columns = [np.concatenate(parts) for parts in zip(*self.pending)]
        self.pending, self.rows = [], 0
        day = (columns[2] - self.start) // self.day_seconds
        order = np.argsort(day, kind="stable")  # File order kept within a day.
        bounds = np.flatnonzero(np.diff(day[order])) + 1
        for rows in np.split(order, bounds):
            number = int(day[rows[0]])
            os.makedirs(_day_dir(self.root, number), exist_ok=True)
            path = os.path.join(_day_dir(self.root, number), f"part-{self.parts:06d}.npz")
            np.savez(path, *(column[rows] for column in columns))
            self.days.add(number)
        self.parts += 1

    def read(self, day: int) -> Tuple[np.ndarray, ...]:
        """The day's events in file order: (user, item, time[, weight])."""
        directory = _day_dir(self.root, day)
        if not os.path.isdir(directory):
            return ()
        parts = []
        for name in sorted(os.listdir(directory)):
            with np.load(os.path.join(directory, name)) as part:
                parts.append([part[f"arr_{i}"] for i in range(len(part.files))])
        return tuple(np.concatenate(columns) for columns in zip(*parts))


def _history_windows(
    state: np.ndarray, user: np.ndarray, item: np.ndarray
) -> Tuple[np.ndarray, np.ndarray]:
    """(blocks, starts): event i's previous L items of its user are
    blocks[starts[i]:starts[i] + L]; `state` is advanced past the day.

    `user` / `item`: the day's events sorted by user, then time; `state[u]`: user u's last
    L items before the day (left-padded with 0). The events of a user form a block
    [state[u], its items]; its j-th event's window starts j items into the block. No
    [events, L] array is made: the caller copies the windows it keeps, a column at a time.
    """
    length = state.shape[1]
    users, starts, sizes = np.unique(user, return_index=True, return_counts=True)
    block_starts = np.arange(len(users)) * length + starts
    blocks = np.empty(len(users) * length + len(user), np.int32)
    for j in range(length):
        blocks[block_starts + j] = state[users, j]
    item_slots = np.repeat(block_starts + length - starts, sizes) + np.arange(len(user))
    blocks[item_slots] = item
    ends = block_starts + length + sizes
    for j in range(length):
        state[users, j] = blocks[ends - length + j]
    return blocks, item_slots - length


def _settings(
    history_length: int,
    validation_queries: Optional[int],
    test_queries: Optional[int],
    day_seconds: int,
    test_day: int,
    source: Dict,
) -> Dict:
    return {
        "format": FORMAT_VERSION,
        "history_length": history_length,
        "validation_queries": validation_queries or 0,
        "test_queries": test_queries or 0,
        "day_seconds": day_seconds,
        "test_day": test_day,
        "source": source,
    }


def build(
    directory: str,
    encoded,
    num_users: int,
    num_items: int,
    first_time: int,
    last_time: int,
    day_seconds: int,
    test_day: int,
    history_length: int,
    validation_queries: Optional[int],
    test_queries: Optional[int],
    weighted: bool,
    source: str,
    settings_source: Dict,
    stats: Optional[Dict] = None,
    say=None,
) -> None:
    """Writes the store of an encoded log to `directory` (see the module's docstring).

    Args:
      directory: where the store goes (written as `directory`.partial-PID, then renamed;
        call under `building(directory)`, which also makes the left-overs of killed
        builds safe to remove).
      encoded: `events.EncodedBatches` of the log (iterated once).
      num_users, num_items: the vocabulary sizes.
      first_time, last_time: the log's time span (`events.time_span`).
      day_seconds, test_day: as `splits.next_day`.
      history_length: items of history per training example.
      validation_queries, test_queries: queries kept (subsampled as `splits.subsample`
        draws); 0 or None: every query.
      weighted: `encoded` carries weights, kept with the examples.
      source: the log, as errors name it.
      settings_source: the data settings the store is made for (kept in its manifest;
        `is_built` is False for a store made for others).
      stats: more read statistics to keep (`facts`).
      say: prints a progress line (None: silent).

    Raises:
      DataError: as `splits.next_day` (no training day, an empty evaluation day).
    """
    for stale in glob.glob(f"{glob.escape(directory)}.partial-*"):  # Killed builds'.
        shutil.rmtree(stale, ignore_errors=True)
    partial = f"{directory}.partial-{os.getpid()}"
    try:
        _build_into(
            partial,
            directory,
            encoded,
            num_users,
            num_items,
            first_time,
            last_time,
            day_seconds,
            test_day,
            history_length,
            validation_queries,
            test_queries,
            weighted,
            source,
            settings_source,
            stats,
            say,
        )
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # Nothing half-built is left behind.
        raise


def _build_into(
    partial,
    directory,
    encoded,
    num_users,
    num_items,
    first_time,
    last_time,
    day_seconds,
    test_day,
    history_length,
    validation_queries,
    test_queries,
    weighted,
    source,
    settings_source,
    stats,
    say,
) -> None:
    """`build`, written in `partial` and renamed to `directory`."""
    say = say or (lambda text: None)
    started = time.time()
    layout = splits_lib.day_layout(first_time, last_time, test_day, day_seconds, source)
    first_day_start, last, test = layout.start, layout.last, layout.test
    buckets = _Buckets(os.path.join(partial, "days"), first_day_start, day_seconds, weighted)
    for batch in encoded:
        buckets.add(batch.user, batch.item, batch.time, batch.weight)
    buckets.flush()
    read_seconds = time.time() - started
    say(
        f"bucketed {encoded.read:,} events by day in {read_seconds:.0f} s (peak memory "
        f"{_peak_mib():,.0f} MiB)"
    )

    # Pass 1: each day de-duplicated and sorted by user, then time, then file order.
    user_counts = np.zeros(num_users + 1, np.int64)
    item_counts = np.zeros(num_items + 1, np.int64)
    train_item_counts = np.zeros(num_items + 1, np.int64)
    # "test" is filled in by the end of the pass (below).
    before: Dict[str, np.ndarray] = {"validation": np.zeros(num_users + 1, np.int64), "test": None}  # type: ignore[dict-item]
    active = {}
    duplicates = kept = 0
    for day in range(last + 1):
        columns: Sequence[np.ndarray] = buckets.read(day)
        if not columns:
            continue
        order, dropped = chronological(*columns[:3])
        columns = tuple(column[order] for column in columns)
        duplicates += dropped
        kept += len(order)
        np.savez(os.path.join(_day_dir(buckets.root, day), "sorted.npz"), *columns)
        for name in os.listdir(_day_dir(buckets.root, day)):
            if name.startswith("part-"):
                os.remove(os.path.join(_day_dir(buckets.root, day), name))
        user, item = columns[0], columns[1]
        user_counts += np.bincount(user, minlength=num_users + 1)
        item_counts += np.bincount(item, minlength=num_items + 1)
        if day < test - 1:
            before["validation"] += np.bincount(user, minlength=num_users + 1)
            train_item_counts += np.bincount(item, minlength=num_items + 1)
        elif day == test - 1:
            before["test"] = before["validation"] + np.bincount(user, minlength=num_users + 1)
            active["validation"] = np.unique(user)
        elif day == test:
            active["test"] = np.unique(user)
    if before["test"] is None:
        before["test"] = before["validation"]
    if not before["validation"].any():
        raise splits_lib.nothing_to_train(source, test)
    say(f"sorted the days (peak memory {_peak_mib():,.0f} MiB)")
    # The queries: users active on the day with an earlier event, subsampled.
    chosen = {}
    for name, count, number in (
        ("test", test_queries, test),
        ("validation", validation_queries, test - 1),
    ):
        users = active.get(name, np.zeros(0, np.int64))
        users = users[before[name][users] > 0]
        if len(users) == 0:
            raise splits_lib.empty_day(source, name, number)
        if count:
            users = users[splits_lib.subsample_indices(len(users), count)]
        chosen[name] = users
    wanted = np.zeros(num_users + 1, np.int8)  # Bit 1: a validation query; bit 2: a test one.
    wanted[chosen["validation"]] |= 1
    wanted[chosen["test"]] |= 2

    # Pass 2: the training examples in time order, and the chosen users' histories.
    state = np.zeros([num_users + 1, history_length], np.int32)
    seen = np.zeros(num_users + 1, np.int64)
    kept_history: Dict[str, List[Tuple[np.ndarray, np.ndarray]]] = {"validation": [], "test": []}
    days, day_ends, total = [], [], 0
    targets = {}
    for day in range(last + 1):
        path = os.path.join(_day_dir(buckets.root, day), "sorted.npz")
        if not os.path.exists(path):
            continue
        with np.load(path) as stored:
            columns = [stored[f"arr_{i}"] for i in range(len(stored.files))]
        user, item = columns[0], columns[1]
        if day == test - 1:
            targets["validation"] = (user, item)
        elif day == test:
            targets["test"] = (user, item)
        if day < test:
            mine = (wanted[user] & 2).astype(bool)
            kept_history["test"].append((user[mine], item[mine]))
        if day >= test - 1:
            continue
        mine = (wanted[user] & 1).astype(bool)
        kept_history["validation"].append((user[mine], item[mine]))
        blocks, windows = _history_windows(state, user, item)
        # Each user's first training event has no history: it is no example.
        first = np.ones(len(user), bool)
        first[1:] = user[1:] != user[:-1]
        fresh = first & (seen[user] == 0)
        seen += np.bincount(user, minlength=num_users + 1)
        keep = ~fresh
        # Time order; ties by user, then file order (the order `chronological` left).
        order = np.flatnonzero(keep)[np.argsort(columns[2][keep], kind="stable")]
        packed = np.empty([len(order), 2 + history_length + int(weighted)], np.int32)
        packed[:, 0], packed[:, 1] = user[order], item[order]
        windows = windows[order]
        for j in range(history_length):  # A column at a time: no [events, L] index array.
            packed[:, 2 + j] = blocks[windows + j]
        if weighted:
            packed[:, -1] = columns[3][order].view(np.int32)
        del blocks, windows
        write_records(
            os.path.join(partial, _examples_name(day)),
            (
                encode_int32_tensor(packed[start : start + CHUNK_ROWS])
                for start in range(0, len(packed), CHUNK_ROWS)
            ),
        )
        np.save(os.path.join(partial, f"items-{day:05d}.npy"), item[order])
        total += len(order)
        days.append(day)
        day_ends.append(total)
    if total == 0:
        raise DataError(source, None, "no user has two training events: nothing to train on.")
    # The evaluation sets, as splits.next_day builds them (the chosen users only).
    eval_sets = {}
    for name in ("validation", "test"):
        pairs = kept_history[name]
        user = np.concatenate([p[0] for p in pairs]) if pairs else np.zeros(0, np.int32)
        item = np.concatenate([p[1] for p in pairs]) if pairs else np.zeros(0, np.int32)
        order = np.argsort(user, kind="stable")  # Days in order; within a day, time order.
        user, item = user[order], item[order]
        bounds = np.searchsorted(user, chosen[name])
        ends = np.searchsorted(user, chosen[name], side="right")
        histories = {
            int(u): item[b:e].astype(np.int64) for u, b, e in zip(chosen[name], bounds, ends)
        }
        day_user, day_item = targets[name]
        mine = np.isin(day_user, chosen[name])
        eval_sets[name] = splits_lib._window_targets(  # pylint: disable=protected-access
            histories, day_user[mine].astype(np.int64), day_item[mine].astype(np.int64), "all"
        )
    shutil.rmtree(buckets.root)
    _write_eval(partial, eval_sets)
    np.savez(
        os.path.join(partial, "counts.npz"),
        user=user_counts,
        item=item_counts,
        train_item=train_item_counts,
    )
    manifest = {
        "settings": _settings(
            history_length, validation_queries, test_queries, day_seconds, test_day, settings_source
        ),
        "num_users": num_users,
        "num_items": num_items,
        "first_time": int(first_time),
        "last_time": int(last_time),
        "duplicates": int(duplicates),
        "events_kept": int(kept),
        "num_examples": int(total),
        "weighted": weighted,
        "days": days,
        "day_ends": day_ends,
        "test_day": int(test),
        "facts": {
            "events_read": int(encoded.read),
            "events_kept": int(kept),
            "events_dropped_out_of_vocabulary": int(
                encoded.read - kept - duplicates - encoded.after
            ),
            "events_dropped_duplicate": int(duplicates),
            "events_after_test_day": int(encoded.after),
            "user_ids_stripped": int(encoded.stripped["user"]),
            "item_ids_stripped": int(encoded.stripped["item"]),
            "files": len(encoded.files),
            "seconds_encode": round(time.time() - started, 1),
            "integer_ids": list(encoded.integer_ids()),
            **(stats or {}),
        },
    }
    with open(os.path.join(partial, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=1)
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(partial, directory)
    say(
        f"wrote {total:,} training examples over {len(days)} days"
        + (f" of {day_seconds:,} s" if day_seconds != 86_400 else "")
        + " (peak memory "
        f"{_peak_mib():,.0f} MiB), "
        f"{len(eval_sets['validation'].users):,} validation and "
        f"{len(eval_sets['test'].users):,} test queries in {time.time() - started:.0f} s"
    )


@contextlib.contextmanager
def building(directory: str):
    """One process at a time builds the store in `directory` (or checks that it is built):
    the processes of a multi-worker run wait for the first. The lock is taken on the parent
    directory itself, so that it leaves no file behind."""
    parent = os.path.dirname(os.path.abspath(directory))
    os.makedirs(parent, exist_ok=True)
    handle = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # Releases the lock.


def _write_eval(directory: str, eval_sets: Dict[str, splits_lib.EvalSet]) -> None:
    arrays = {}
    for name, eval_set in eval_sets.items():
        arrays[f"{name}_users"] = eval_set.users
        for part in ("histories", "targets"):
            values = getattr(eval_set, part)
            arrays[f"{name}_{part}"] = np.concatenate(values) if values else np.zeros(0)
            arrays[f"{name}_{part}_lengths"] = np.array([len(v) for v in values], np.int64)
    # (mypy: no key of `arrays` is savez's `allow_pickle`.)
    np.savez(os.path.join(directory, "queries.npz"), **arrays)  # type: ignore[arg-type]


@contextlib.contextmanager
def _store_file(path: str) -> Iterator[None]:
    """A store file read inside is named when it is missing or damaged (a truncated
    manifest, a lost or corrupt .npz), as a DataError, never a bare traceback."""
    try:
        yield
    except DataError:
        raise
    except (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as error:
        raise DataError(
            path,
            None,
            f"is missing or damaged ({type(error).__name__}: {error}): this day store "
            "cannot be read; remove it and build it again.",
        ) from None


def read_manifest(directory: str) -> Dict:
    """The store's manifest (`_store_file`'s errors)."""
    path = os.path.join(directory, MANIFEST)
    with _store_file(path), open(path) as f:
        manifest = json.load(f)
        if not isinstance(manifest, dict):
            raise ValueError("not a JSON object")
        return manifest


def read_eval(directory: str, name: str) -> splits_lib.EvalSet:
    """The store's "validation" or "test" queries."""
    path = os.path.join(directory, "queries.npz")
    with _store_file(path), np.load(path) as stored:
        parts = {}
        for part in ("histories", "targets"):
            bounds = np.cumsum(stored[f"{name}_{part}_lengths"])[:-1]
            parts[part] = np.split(stored[f"{name}_{part}"].astype(np.int64), bounds)
        return splits_lib.EvalSet(stored[f"{name}_users"], parts["histories"], parts["targets"])


def is_built(
    directory: str,
    history_length: int,
    validation_queries: Optional[int],
    test_queries: Optional[int],
    day_seconds: int,
    test_day: int,
    settings_source: Dict,
    source_defaults: Optional[Dict] = None,
) -> bool:
    """Whether `directory` holds a complete store made with these settings; a setting of
    `source_defaults` that the store's manifest lacks (added since it was built) counts at
    its default."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(path):
        return False
    manifest = read_manifest(directory)
    with _store_file(path):
        saved = manifest["settings"]
    if source_defaults and isinstance(saved.get("source"), dict):
        defaults = json.loads(json.dumps(source_defaults))
        saved = {**saved, "source": {**defaults, **saved["source"]}}
    return saved == json.loads(
        json.dumps(
            _settings(
                history_length,
                validation_queries,
                test_queries,
                day_seconds,
                test_day,
                settings_source,
            )
        )
    )


def read(
    directory: str, user_ids: np.ndarray, item_ids: np.ndarray
) -> Tuple[LogSummary, splits_lib.Split]:
    """(LogSummary, Split) of a built store; the split's `stream` is its `DayStore`.

    Raises:
      DataError: a store file missing or damaged, named.
    """
    manifest = read_manifest(directory)
    counts_path = os.path.join(directory, "counts.npz")
    with _store_file(counts_path), np.load(counts_path) as counts:
        user_counts, item_counts = counts["user"], counts["item"]
        train_item = counts["train_item"]
    with _store_file(os.path.join(directory, MANIFEST)):  # A key missing from it, say.
        return _read(directory, manifest, user_ids, item_ids, user_counts, item_counts, train_item)


def _read(directory, manifest, user_ids, item_ids, user_counts, item_counts, train_item):
    summary = LogSummary(
        manifest["num_users"],
        manifest["num_items"],
        user_ids,
        item_ids,
        manifest["duplicates"],
        manifest["first_time"],
        manifest["last_time"],
        user_counts,
        item_counts,
    )
    store = DayStore(
        directory,
        manifest["num_examples"],
        manifest["settings"]["history_length"],
        manifest["weighted"],
        np.array(manifest["days"], np.int64),
        np.array(manifest["day_ends"], np.int64),
        train_item,
    )
    split = splits_lib.Split(
        None,
        read_eval(directory, "validation"),
        read_eval(directory, "test"),
        manifest["num_items"],
        stream=store,
    )
    return summary, split


def remove_examples(directory: str) -> None:
    """Deletes a store's training examples (kept: what evaluation and export read)."""
    if not os.path.isdir(directory):
        return
    path = os.path.join(directory, MANIFEST)
    for name in os.listdir(directory):
        if name.startswith(("examples-", "items-")):
            os.remove(os.path.join(directory, name))
    if os.path.exists(path):
        with open(path) as f:
            manifest = json.load(f)
        manifest["examples_removed"] = True
        with open(path + ".partial", "w") as f:
            json.dump(manifest, f, indent=1)
        os.replace(path + ".partial", path)


def has_examples(directory: str) -> bool:
    return not read_manifest(directory).get("examples_removed", False)


def facts(directory: str) -> Dict:
    """The read statistics of the store's log, and "integer_ids" (as `events.load_events`
    reports them)."""
    manifest = read_manifest(directory)
    with _store_file(os.path.join(directory, MANIFEST)):
        return manifest["facts"]
