"""Split keys hashed in the child process: the very digests of ``key_bytes`` row by row.

The child (transforms/split_hash_child.py) is a real process fed real requests; a child that
dies mid-request and a machine with one CPU fall back to hashing in the build's process with
the same digests. tests/transforms/test_build_examples.py holds the DoFn to the same splits
whichever path hashed.
"""

from __future__ import annotations

import logging

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms import split_hash_child, split_hasher
from beam_tfrecords.transforms.build_examples import BuildExamples
from beam_tfrecords.transforms.codec import split_keys, splits
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.codec.splits import SplitSpec, key_bytes
from beam_tfrecords.transforms.readers.framework import RecordChunk
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
    "float64": pa.array([0.1, 3.0, -0.0, 1e16, 1.5e16, 1e-7, float("nan"), float("inf"),
                         -float("inf"), 1e300, -2.5], pa.float64()),
    "float32": pa.array([0.1, 1.5, 7.0, -3.25], pa.float32()),
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


@pytest.fixture(scope="module")
def one_child():
    """One child for every example below: each starts a child process otherwise."""
    process = KeyHashProcess()
    yield process
    process.close()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=60),
       st.lists(st.text(max_size=12), max_size=60),
       st.lists(st.floats() | st.integers(-(2**60), 2**60).map(float), max_size=60))
def test_random_keys_hash_alike_in_the_child(one_child, ints, texts, floats):
    try:
        split_hasher.MIN_KEYS, saved = 1, split_hasher.MIN_KEYS
        for column in (pa.array(ints, pa.int64()), pa.array(texts, pa.string()),
                       pa.array(floats, pa.float64())):
            one_child.submit(column)
            assert one_child.collect() == expected(column.to_pylist())
            assert one_child._proc is not None or len(column) == 0  # the child answered
    finally:
        split_hasher.MIN_KEYS = saved


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


RUNNERS = {
    "in_process": [],
    "multi_processing_2": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    "portable": ["--runner=PortableRunner", "--job_endpoint=embed",
                 "--environment_type=LOOPBACK"],
}


@pytest.mark.parametrize("runner", list(RUNNERS))
@pytest.mark.slow
def test_every_runner_hashes_unique_keys_beside_the_build_with_the_same_splits(runner):
    """In a worker process of each runner the child starts, hashes every key of a batch of
    unique ids (the counter says so) and the splits are those of hashing here."""
    n = 2 * split_hasher.MIN_KEYS
    ids = (np.arange(n, dtype=np.int64) * 7919) - 10**6
    batch = pa.record_batch({"id": pa.array(ids)})
    spec = SplitSpec((("train", 80.0), ("eval", 10.0), ("test", 10.0)), key=("id",))
    codes = spec.choose_many([key_bytes(int(v)) for v in ids])  # hashed here, one by one
    expected = [(name, int((codes == k).sum())) for k, name in enumerate(spec.names)]
    p = beam.Pipeline(options=PipelineOptions(RUNNERS[runner]))
    built = (p | beam.Create([RecordChunk("in.parquet", 1, [], (), batch)])
             | BuildExamples([FeatureSpec("id", "int64")], spec))
    assert_that(built.examples | beam.Map(lambda item: (item[0], len(item[1])))
                | beam.CombinePerKey(sum), equal_to(expected))
    result = p.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("split_keys_hashed_beside"))
    assert sum(c.committed for c in counters["counters"]) == n


def test_a_request_never_collected_does_not_put_the_answers_out_of_step(hasher):
    """A batch that failed after its keys were sent: the next batch still gets its own
    digests."""
    first = pa.array(range(5000), pa.int64())
    hasher.submit(first)  # ... and the batch's encoding raised: never collected
    second = pa.array([f"k{i}" for i in range(3000)])
    hasher.submit(second)
    assert hasher.collect() == expected(second.to_pylist())


def test_a_float_column_is_shared_between_the_child_and_this_process(hasher):
    """A float's key bytes (its repr) cost the child as much as the hash: it takes the first
    FLOAT_SHARE of the column and this process the rest, after the batch is encoded; the
    digests are those of every key in order."""
    column = pa.array([i / 7 for i in range(5000)] + [2.0, float("nan")], pa.float64())
    hasher.submit(column)
    assert hasher.collect() == expected(column.to_pylist())
    assert hasher.hashed_beside == int(len(column) * split_hasher.FLOAT_SHARE)
    ints = pa.array(range(5000), pa.int64())
    hasher.submit(ints)
    assert hasher.collect() == expected(ints.to_pylist())
    assert hasher.hashed_beside == int(len(column) * split_hasher.FLOAT_SHARE) + len(ints)
