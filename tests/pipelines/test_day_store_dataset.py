"""The TensorFlow job's stream of a day store (`builders.day_store_dataset`) never trains a day
short (issue 75): tf.data's reader checks each record's CRCs but reads an emptied file as no
records and a file cut at a record boundary as fewer, so each day's file is checked against
the manifest before the stream is made and its parsed examples counted as it is read."""

import dataclasses
import os
import re

import numpy as np
import pytest
import tensorflow as tf

from pipelines.data import builders
from pipelines.data import day_store
from pipelines.data.interactions import DataError
from tests.pipelines.test_day_store_reader import _offsets
from tests.pipelines.test_day_store_reader import _small_store
from tests.pipelines.test_day_store_reader import _truncate
from tests.pipelines.test_day_store_reader import built  # noqa: F401  (a fixture)
from tests.pipelines.test_day_store_reader import store  # noqa: F401  (a fixture)


def _items(store, training=False, batch_size=16):  # noqa: F811
    """Every batch's items, in stream order (one pass)."""
    dataset = builders.day_store_dataset(store, batch_size, seed=0, training=training)
    if training:
        dataset = dataset.take(store.num_examples // batch_size)
    return [batch["item"].numpy() for batch in dataset]


def test_a_good_store_streams_every_example_once_in_order(store):  # noqa: F811
    items = np.concatenate(_items(store))
    expected = np.concatenate([chunk["item"] for chunk in store.chunks()])
    np.testing.assert_array_equal(items, expected)
    assert (
        sum(len(batch) for batch in _items(store, training=True)) == store.num_examples // 16 * 16
    )


def test_an_emptied_day_file_is_refused_before_the_stream_is_made(store):  # noqa: F811
    path = store.example_files()[2]
    count = int(store.day_ends[2] - store.day_ends[1])
    _truncate(path, 0)
    message = f"{path}: 0 bytes, fewer than the {count * 24} of the {count} training examples"
    with pytest.raises(DataError, match=re.escape(message)):
        builders.day_store_dataset(store, 16, seed=0)


def test_a_missing_day_file_is_refused_before_the_stream_is_made(store):  # noqa: F811
    path = store.example_files()[1]
    os.remove(path)
    with pytest.raises(DataError, match=re.escape(f"{path}: no such file, where the manifest")):
        builders.day_store_dataset(store, 16, seed=0)


@pytest.mark.parametrize("training", [False, True])
def test_a_file_cut_at_a_record_boundary_is_refused_by_its_count(tmp_path, training):
    chunks = [np.ones((4, 3), np.int32), np.ones((4, 3), np.int32), np.ones((1, 3), np.int32)]
    store = _small_store(tmp_path, chunks)  # noqa: F811
    path = store.example_files()[0]
    _truncate(path, _offsets(path)[-1][0])  # The last record (1 example) gone.
    assert os.path.getsize(path) >= 9 * 12  # Long enough for the manifest's bytes.
    dataset = builders.day_store_dataset(store, 4, seed=0, training=training)
    message = f"{path}: 8 training examples, where the manifest counts 9 on day 0: the file is cut"
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
        list(dataset.take(3))


def test_a_day_cut_at_a_record_boundary_is_named_among_several(tmp_path):
    first = [np.full((4, 3), 1, np.int32), np.full((5, 3), 2, np.int32)]
    second = [np.full((7, 3), 3, np.int32), np.full((1, 3), 4, np.int32)]
    store = dataclasses.replace(  # noqa: F811
        _small_store(tmp_path, first), days=np.array([0, 1]), day_ends=np.array([9, 17])
    )
    store = dataclasses.replace(store, num_examples=17)
    path = store.example_files()[1]
    day_store.write_records(path, (day_store.encode_int32_tensor(c) for c in second))
    items = np.concatenate(_items(store, batch_size=1))
    np.testing.assert_array_equal(items, [1] * 4 + [2] * 5 + [3] * 7 + [4])
    _truncate(path, _offsets(path)[-1][0])  # Day 1's last record gone.
    assert os.path.getsize(path) >= 8 * 12  # Long enough for the manifest's bytes.
    message = f"{path}: 7 training examples, where the manifest counts 8 on day 1: the file is cut"
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
        _items(store, batch_size=1)


def test_more_examples_than_the_manifest_counts_are_refused(tmp_path):
    chunks = [np.ones((4, 3), np.int32), np.ones((4, 3), np.int32)]
    store = _small_store(tmp_path, chunks, day_ends=[6])  # noqa: F811
    path = store.example_files()[0]
    message = f"{path}: the training examples of day 0 reach 8, past the 6 the manifest counts"
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
        list(builders.day_store_dataset(store, 2, seed=0, training=False))
