"""BuildExamples on columnar chunks: the same splits, bytes, dead letters and counts as rows.

The DoFn is driven directly for the tables (fast, exact element lists); one TestPipeline run
proves the transform's wiring with batch chunks.
"""

from __future__ import annotations

import math

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.sinks.format.tfrecord_format import FRAME_OVERHEAD
from beam_tfrecords.transforms import split_hasher
from beam_tfrecords.transforms.build_examples import (
    PROTOBUF_MAX_BYTES,
    BuildExamples,
    _BuildExamplesFn,
    record_size_error,
)
from beam_tfrecords.transforms.codec import wire
from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F
from beam_tfrecords.transforms.codec.split_keys import key_bytes_column, key_column
from beam_tfrecords.transforms.codec.splits import NULL_KEY, SplitSpec, key_bytes
from beam_tfrecords.transforms.readers.framework import COUNTS, REJECTED, RecordChunk
from beam_tfrecords.transforms.split_hasher import KeyHashProcess

FEATURES = [F("id", "int64"), F("name", "string", missing="omit"), F("score", "float"),
            F("tags", "bytes", (-1,), missing="default", default=[b"none"])]


def batch_of(n=40):
    ids = list(range(n))
    names = [None if i % 7 == 0 else f"n{i}é" for i in ids]
    scores = [1e40 if i % 11 == 5 else (math.nan if i % 13 == 3 else i / 3) for i in ids]
    if n > 9:
        scores[9] = None  # missing: error
    tags = [None if i % 5 == 0 else [f"t{j}" for j in range(i % 4)] for i in ids]
    return pa.record_batch({
        "id": pa.array(ids, pa.int64()),
        "name": pa.array(names, pa.string()),
        "score": pa.array(scores, pa.float64()),
        "tags": pa.array(tags, pa.list_(pa.string())),
        "key": pa.array([f"k{i % 9}" for i in ids]),
        "part": pa.array(["train" if i % 3 else ("eval" if i % 2 else "bogus") for i in ids]),
        "odd": pa.array([{"a": i} for i in ids]),
    })


def run_fn(chunk, splits, features=FEATURES, **kwargs):
    fn = _BuildExamplesFn(features, splits, **kwargs)
    fn.setup()
    examples, rejected, counts = [], [], []
    for element in fn.process(chunk):
        if isinstance(element, beam.pvalue.TaggedOutput):
            (rejected if element.tag == REJECTED else counts).append(element.value)
            assert element.tag in (REJECTED, COUNTS)
        else:
            split, batch = element
            examples.append((split, list(batch)))
    fn.teardown()
    return examples, rejected, counts


def both_paths(batch, splits, **kwargs):
    rows = RecordChunk("in.parquet", 1, batch.to_pylist(), (), None)
    columnar = RecordChunk("in.parquet", 1, [], (), batch)
    by_rows = run_fn(rows, splits, **kwargs)
    by_columns = run_fn(columnar, splits, **kwargs)
    assert by_columns == by_rows
    return by_columns


SPLITS = {
    "one_split": SplitSpec(),
    "by_record": SplitSpec((("train", 70.0), ("eval", 30.0))),
    "by_int_key": SplitSpec((("train", 50.0), ("eval", 25.0), ("test", 25.0)), key=("id",)),
    "by_text_key": SplitSpec((("train", 60.0), ("eval", 40.0)), key=("key",)),
    "struct_key_rejected": SplitSpec((("train", 60.0), ("eval", 40.0)), key=("odd",)),
    "nested_key": SplitSpec((("train", 60.0), ("eval", 40.0)), key=("odd", "a")),
    "absent_key": SplitSpec((("train", 60.0), ("eval", 40.0)), key=("nope",)),
    "named_field": SplitSpec((("train", 50.0), ("eval", 50.0)), field=("part",)),
}


@pytest.mark.parametrize("splits", list(SPLITS.values()), ids=list(SPLITS))
def test_columnar_chunks_build_exactly_what_rows_build(splits):
    examples, rejected, counts = both_paths(batch_of(), splits)
    built = sum(len(records) for _, records in examples)
    assert counts == [("built", built), ("rejected_at_build", 40 - built)]
    assert len(rejected) == 40 - built and rejected
    assert [r["row"] for r in rejected] == sorted(r["row"] for r in rejected)


def test_rejects_name_row_feature_and_reason():
    _, rejected, _ = both_paths(batch_of(), SPLITS["by_int_key"])
    by_row = {r["row"]: r for r in rejected}
    assert by_row[6]["feature"] == "score" and "float32 range" in by_row[6]["reason"]
    assert by_row[10]["feature"] == "score" and "required" in by_row[10]["reason"]
    assert by_row[10]["source"] == "in.parquet" and "'id': 9" in by_row[10]["record"]


def test_struct_key_is_rejected_as_the_key_field():
    _, rejected, _ = both_paths(batch_of(6), SPLITS["struct_key_rejected"])
    assert {r["feature"] for r in rejected} >= {"odd"}
    assert any("split key" in r["reason"] for r in rejected)


def test_row_numbers_follow_the_chunk():
    batch = batch_of(12)
    chunk = RecordChunk("f.csv", 1, [], tuple(range(100, 112)), batch)
    _, rejected, _ = run_fn(chunk, SplitSpec())
    assert {r["row"] for r in rejected} == {105, 109}  # rows 5 (1e40) and 9 (null score)


def small_batch():
    return pa.record_batch({"id": [1, 2, 3], "blob": [b"x" * 10, b"y" * 200, b""]})


def test_records_over_the_shard_limit_are_dead_letters_not_written():
    features = [F("id", "int64"), F("blob", "bytes")]
    sizes = [len(ExampleEncoder(features).encode(r)) for r in small_batch().to_pylist()]
    limit = sizes[0] + FRAME_OVERHEAD  # the first record fits exactly, the second does not
    examples, rejected, counts = both_paths(small_batch(), SplitSpec(), features=features,
                                            max_record_bytes=limit)
    assert [len(records) for _, records in examples] == [2]
    assert counts == [("built", 2), ("rejected_at_build", 1)]
    (dead,) = rejected
    assert dead["row"] == 2 and dead["feature"] == ""
    assert f"{sizes[1]} bytes" in dead["reason"] and f"{limit} bytes" in dead["reason"]
    assert "maximum shard size" in dead["reason"]


def test_protobuf_limit_applies_without_a_shard_limit():
    assert record_size_error(PROTOBUF_MAX_BYTES, None) == ""
    reason = record_size_error(PROTOBUF_MAX_BYTES + 1, None)
    assert str(PROTOBUF_MAX_BYTES + 1) in reason and str(PROTOBUF_MAX_BYTES) in reason
    assert "protobuf" in reason
    assert record_size_error(PROTOBUF_MAX_BYTES + 1, 10**12).startswith(reason[:30])
    assert record_size_error(100, 116) == "" and record_size_error(101, 116)


@pytest.mark.slow
def test_transform_with_batch_chunks_on_direct_runner():
    features = [F("id", "int64"), F("name", "string", missing="omit")]
    first = pa.record_batch({"id": [1, 2], "name": ["a", None]})
    second = pa.record_batch({"id": [3, None], "name": ["c", "d"]})
    chunks = [RecordChunk("a", 1, [], (), first), RecordChunk("b", 1, [], (), second)]
    with test_pipeline.TestPipeline() as p:
        built = (p | beam.Create(chunks) | BuildExamples(features))
        decoded = built.examples | beam.FlatMap(
            lambda item: [(item[0], wire.decode_example(r)["id"][1][0]) for r in item[1]])
        assert_that(decoded, equal_to([("train", 1), ("train", 2), ("train", 3)]))
        assert_that(built[REJECTED] | beam.Map(lambda r: (r["source"], r["row"], r["feature"])),
                    equal_to([("b", 2, "id")]), label="Rejected")
        assert_that(built[COUNTS] | beam.CombinePerKey(sum),
                    equal_to([("built", 3), ("rejected_at_build", 1)]), label="Counts")


@pytest.mark.parametrize("kind,values", [
    (pa.int64(), [0, -5, 2**63 - 1, -(2**63), None, 17]),
    (pa.uint64(), [0, 2**64 - 1, None]),
    (pa.int8(), [-128, 127, None]),
    (pa.string(), ["a", None, "é", ""]),
    (pa.large_string(), ["x" * 300, None]),
    (pa.dictionary(pa.int8(), pa.string()), ["a", None, "a", "b"]),
    (pa.binary(), [b"\xff", None, b""]),
    (pa.large_binary(), [b"\x00", None]),
    (pa.float64(), [0.1, 3.0, -0.0, None, 1e16, 1.5e16, 1e-7, float("nan"), float("inf"),
                    -float("inf"), 1e300, -2.5, 0.1]),
    (pa.float32(), [0.1, 1.5, None, 7.0, 0.1]),
    (pa.float16(), [0.5, None, 2.0]),
])
def test_key_column_bytes_computed_by_arrow_equal_key_bytes(kind, values):
    """Integers and text by Arrow's casts, floats (whose shortest repr Arrow has no kernel
    for) once per distinct value: the bytes key_bytes gives row by row, of the column's own
    values (a float32 0.1 is not the float 0.1)."""
    batch = pa.record_batch({"k": pa.array(values, kind)})
    values = batch.column(0).to_pylist()
    def as_keys(column):  # null: a missing key, which key_bytes writes as NULL_KEY
        return [NULL_KEY if k is None else k for k in column.to_pylist()]

    column = key_column(batch, ("k",))
    assert as_keys(key_bytes_column(column)) == [key_bytes(v) for v in values]
    assert as_keys(key_bytes_column(column[::-1])) == [key_bytes(v) for v in values[::-1]]


@pytest.mark.parametrize("kind,values", [
    (pa.bool_(), [True, False]), (pa.list_(pa.int64()), [[1], []]),
    (pa.decimal128(5, 2), [1, 2]),
])
def test_other_key_columns_go_row_by_row(kind, values):
    batch = pa.record_batch({"k": pa.array(values, kind)})
    assert key_column(batch, ("k",)) is None
    splits = SplitSpec((("train", 50.0), ("eval", 50.0)), key=("k",))
    both_paths(pa.record_batch({"k": pa.array(values, kind), "id": [1, 2]}), splits,
               features=[F("id", "int64")])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
                          st.one_of(st.none(), st.text(max_size=4)),
                          st.one_of(st.none(), st.floats(width=64))), max_size=30),
       st.sampled_from(["i", "s", "f", ""]), st.integers(1, 3))
def test_splits_dead_letters_and_counts_match_rows_for_random_batches(rows, key, nsplits):
    batch = pa.record_batch({
        "i": pa.array([r[0] for r in rows], pa.int64()),
        "s": pa.array([r[1] for r in rows], pa.string()),
        "f": pa.array([r[2] for r in rows], pa.float64()),
    })
    shares = tuple((name, 100.0 / nsplits) for name in ("train", "eval", "test")[:nsplits])
    splits = SplitSpec(shares, key=(key,) if key else ())
    features = [F("i", "int64", missing="omit"), F("s", "string"),
                F("f", "float", nan="error", missing="default", default=0.0)]
    both_paths(batch, splits, features=features, max_record_bytes=60)


@pytest.mark.parametrize("key", ["id", "key"])
def test_the_dofn_splits_alike_with_the_child(monkeypatch, key):
    """Unique ids go to the child, repeating keys are hashed once each here: both build what
    the row path builds."""
    monkeypatch.setattr(split_hasher, "MIN_KEYS", 1)
    spec = SplitSpec((("train", 50.0), ("eval", 25.0), ("test", 25.0)), key=(key,))
    both_paths(batch_of(), spec)


def test_float_keys_are_hashed_beside_the_build_into_the_splits_rows_get(monkeypatch):
    """A float key (the tutorial splits on one) goes to the hashing process as float64
    values; whole floats hash as integers, the others by repr -- the splits and dead letters
    of key_bytes row by row."""
    monkeypatch.setattr(split_hasher, "MIN_KEYS", 1)
    values = [0.1 * i for i in range(300)] + [3.0, -0.0, float("nan"), None, 1e300, 2.5e-8]
    batch = pa.record_batch({"x": pa.array(values, pa.float64()),
                             "id": pa.array(range(len(values)), pa.int64())})
    spec = SplitSpec((("train", 80.0), ("eval", 20.0)), key=("x",))
    examples, rejected, _ = both_paths(batch, spec, features=[F("id", "int64")])
    assert {split for split, _ in examples} == {"train", "eval"}
    assert [r["row"] for r in rejected] == [values.index(None) + 1]


def test_a_large_batch_of_unique_ids_is_hashed_beside_the_build():
    n = 3 * split_hasher.MIN_KEYS
    ids = np.arange(n, dtype=np.int64) * 7919
    batch = pa.record_batch({"id": pa.array(ids), "name": pa.array(
        [None if i % 10 == 0 else f"n{i}" for i in range(n)])})
    spec = SplitSpec((("train", 80.0), ("eval", 10.0), ("test", 10.0)), key=("id",))
    features = [FEATURES[0], FEATURES[1]]
    by_columns = both_paths(batch, spec, features=features)
    sizes = {split: len(records) for split, records in by_columns[0]}
    assert sum(sizes.values()) == n and set(sizes) == {"train", "eval", "test"}
    assert 0.75 < sizes["train"] / n < 0.85
    seen = []
    original = KeyHashProcess.collect

    def spy(self):
        seen.append(self._sent)
        return original(self)

    KeyHashProcess.collect = spy
    try:
        run_fn(RecordChunk("in.parquet", 1, [], (), batch), spec, features=features)
    finally:
        KeyHashProcess.collect = original
    assert seen == [True]
