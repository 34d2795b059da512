"""Split keys hashed in the child process: the very digests of ``key_bytes`` row by row.

The child (transforms/split_hash_child.py) is a real process fed real requests; a child that
dies mid-request and a machine with one CPU fall back to hashing in the build's process with
the same digests. tests/test_build_examples.py holds the DoFn to the same splits whichever
path hashed.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms import split_hash_child, split_hasher
from beam_tfrecords.transforms.codec import split_keys, splits
from beam_tfrecords.transforms.codec.splits import key_bytes
from beam_tfrecords.transforms.split_hasher import KeyHashProcess


@pytest.fixture
def every_size(monkeypatch):
    """Send every request to the child, however few keys it has."""
    monkeypatch.setattr(split_hasher, "MIN_KEYS", 1)


@pytest.fixture
def hasher(every_size):
    process = KeyHashProcess()
    yield process
    process.close()


def expected(values) -> bytes:
    return splits.digests([key_bytes(v) for v in values])


def test_the_child_reads_the_header_the_parent_writes():
    assert split_hash_child.HEADER.format == split_keys.REQUEST_HEADER.format


COLUMNS = {
    "int64": pa.array([0, -5, 2**63 - 1, -(2**63), 17, 10**12], pa.int64()),
    "uint64": pa.array([0, 2**64 - 1, 2**63, 5], pa.uint64()),
    "int8": pa.array([-128, 127, 0], pa.int8()),
    "uint32": pa.array([0, 2**32 - 1], pa.uint32()),
    "string": pa.array(["a", "é", "", "x" * 300, "k\x00z"], pa.string()),
    "large_string": pa.array(["日本", ""], pa.large_string()),
    "binary": pa.array([b"\xff", b"", b"\x00\x01"], pa.binary()),
    "large_binary": pa.array([b"\x00" * 40, b"q"], pa.large_binary()),
}


@pytest.mark.parametrize("name", list(COLUMNS))
def test_the_child_hashes_key_bytes(hasher, name):
    column = COLUMNS[name]
    hasher.submit(column)
    assert hasher._proc is not None  # the child answered, not the fallback
    assert hasher.collect() == expected(column.to_pylist())
    # a slice starts inside the column's buffers: its offsets and values are rebased
    part = column.slice(1, len(column) - 1)
    hasher.submit(part)
    assert hasher.collect() == expected(part.to_pylist())


def test_an_empty_request_and_many_in_a_row(hasher):
    hasher.submit(pa.array([], pa.string()))
    assert hasher.collect() == b""
    for n in (1, 3000, 70_000):  # 70k keys: more than the pipe holds, both ways
        column = pa.array([f"id-{i}" for i in range(n)])
        hasher.submit(column)
        assert hasher.collect() == expected(column.to_pylist())


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=60),
       st.lists(st.text(max_size=12), max_size=60))
def test_random_keys_hash_alike_in_the_child(ints, texts):
    process = KeyHashProcess()
    try:
        split_hasher.MIN_KEYS, saved = 1, split_hasher.MIN_KEYS
        for column in (pa.array(ints, pa.int64()), pa.array(texts, pa.string())):
            process.submit(column)
            assert process.collect() == expected(column.to_pylist())
    finally:
        split_hasher.MIN_KEYS = saved
        process.close()


def test_nulls_never_reach_a_request():
    with pytest.raises(ValueError, match="present keys only"):
        split_keys.hash_request(pa.array([1, None]))


def test_a_child_that_dies_is_replaced_by_hashing_here(hasher, caplog):
    column = pa.array(range(50_000), pa.int64())
    hasher.submit(column)
    hasher._proc.kill()
    hasher._proc.wait()
    with caplog.at_level(logging.WARNING):
        assert hasher.collect() == expected(column.to_pylist())
    assert "hashed in the build's process from now on" in caplog.text
    assert hasher._proc is None
    hasher.submit(column)  # later batches: no new child, the same digests
    assert hasher._proc is None
    assert hasher.collect() == expected(column.to_pylist())


def test_one_cpu_hashes_here(every_size, monkeypatch):
    monkeypatch.setattr(split_hasher.os, "cpu_count", lambda: 1)
    process = KeyHashProcess()
    process.submit(pa.array(["a", "b"]))
    assert process._proc is None
    assert process.collect() == expected(["a", "b"])


def test_close_ends_the_child(hasher):
    hasher.submit(pa.array([1, 2, 3]))
    hasher.collect()
    proc = hasher._proc
    hasher.close()
    assert proc.poll() is not None
