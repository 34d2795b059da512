"""The batch elements' coders: lossless, sized without encoding, and the ones Beam picks."""

from __future__ import annotations

import pickle

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest

from beam_tfrecords.pipelines.config import CsvOptions
from beam_tfrecords.runtime.batch_coders import SerializedBatchCoder, rows_nbytes
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.transforms.build_examples import BuildExamples
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.readers.framework import RecordChunk, RecordChunkCoder
from beam_tfrecords.transforms.readers.read_csv import ReadCsvFiles

COLUMNAR = RecordChunk("a.csv", 1, [], (), pa.record_batch({"x": np.arange(1000),
                                                             "s": ["word"] * 1000}))
ROWS = RecordChunk("b.csv", 3, [{"x": 1, "s": "four", "b": b"\x00" * 10}], (3,))
BATCH = SerializedBatch.from_records([b"a" * 100, b"", b"bc"])


class Unpicklable:
    def __reduce__(self):
        raise AssertionError("a size estimate must not pickle the element")


def test_chunks_round_trip_and_are_sized_from_their_buffers():
    coder = RecordChunkCoder()
    back = coder.decode(coder.encode(COLUMNAR))
    assert back.batch.equals(COLUMNAR.batch) and back.path == "a.csv"
    assert coder.decode(coder.encode(ROWS)) == ROWS
    assert coder.estimate_size(COLUMNAR) == COLUMNAR.batch.nbytes
    assert coder.estimate_size(ROWS) == rows_nbytes(ROWS.rows) == 8 + 4 + 10


def test_estimates_never_encode_the_element():
    chunk = RecordChunk("c.csv", 1, [{"x": 1}], (), None)
    object.__setattr__(chunk, "row_numbers", Unpicklable())  # would fail if pickled
    assert RecordChunkCoder().estimate_size(chunk) == 8
    assert SerializedBatchCoder().estimate_size(SerializedBatch.from_records([b"x" * 7])) == 7 + 16


def test_serialized_batches_round_trip():
    coder = SerializedBatchCoder()
    back = coder.decode(coder.encode(BATCH))
    assert list(back) == list(BATCH)
    assert coder.estimate_size(BATCH) == BATCH.nbytes + BATCH.offsets.nbytes


def test_anything_else_is_sized_by_its_pickle():
    value = {"a": 1}
    assert RecordChunkCoder().estimate_size(value) == len(pickle.dumps(value, 5))


def test_the_pipeline_uses_them_for_the_batch_pcollections():
    features = [FeatureSpec("x", "int64")]
    p = beam.Pipeline()
    read = p | beam.Create(["unused.csv"]) | ReadCsvFiles(CsvOptions(), features)
    built = read.records | BuildExamples(features)
    registry = beam.coders.registry
    assert isinstance(registry.get_coder(read.records.element_type), RecordChunkCoder)
    examples = registry.get_coder(built.examples.element_type)
    assert isinstance(examples, beam.coders.TupleCoder)
    assert isinstance(examples.coders()[1], SerializedBatchCoder)


@pytest.mark.parametrize("coder", [RecordChunkCoder(), SerializedBatchCoder()])
def test_coders_compare_by_type(coder):
    assert coder == type(coder)() and hash(coder) == hash(type(coder)())
    assert not coder.is_deterministic()


def test_serialized_batch_from_pieces_equals_from_records():
    records = [b"", b"one", bytes(range(200)) * 300, b"x"]
    pieces = [[], [b"o", b"ne"], [records[2][:5], records[2][5:]], [b"", b"x"]]
    batch = SerializedBatch.from_pieces(pieces, [len(r) for r in records])
    assert batch == SerializedBatch.from_records(records)
    assert list(batch) == records
    with pytest.raises(ValueError, match="offsets must run"):  # sizes that do not add up
        SerializedBatch.from_pieces(pieces, [0, 3, len(records[2]), 2])


def test_large_records_made_of_pieces_stay_pieces_until_the_payload_is_asked_for():
    image = bytes(range(256)) * 400  # 100 KB: an image's bytes
    pieces = [[b"\x0a\x05", image, b"tail"], [b"", image[:50_000], image[50_000:]]]
    records = [b"".join(p) for p in pieces]
    batch = SerializedBatch.from_pieces(pieces, [len(r) for r in records])
    assert batch.pieces is not None and batch.pieces[0][1] is image  # not copied
    assert batch.nbytes == sum(map(len, records)) and len(batch) == 2
    assert batch[1] == records[1] and batch.pieces is not None
    again = pickle.loads(pickle.dumps(batch))  # crossing a process joins them
    assert again == SerializedBatch.from_records(records) and again.pieces is None
    assert batch.payload == b"".join(records) and batch.pieces is None
    with pytest.raises(ValueError, match="do not match"):
        SerializedBatch.from_pieces(pieces, [len(records[0]) + 1, len(records[1]) - 1])
