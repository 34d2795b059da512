"""JSON Lines, Parquet and Avro readers: records, row numbers, rejects and counts on
DirectRunner, and values surviving BuildExamples -> ExampleDecoder."""

from __future__ import annotations

import datetime
import io
import struct

import apache_beam as beam
import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms.build_examples import BuildExamples
from beam_tfrecords.transforms.codec.example_codec import ExampleDecoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F
from beam_tfrecords.transforms.readers.declared_fields import top_level_fields
from beam_tfrecords.transforms.readers.framework import CHUNK_ROWS, COUNTS, REJECTED, UNREAD_COUNTS
from beam_tfrecords.transforms.readers.read_avro import (
    AvroOptions,
    ReadAvroFiles,
    parse_avro_options,
)
from beam_tfrecords.transforms.readers.read_jsonl import (
    JsonlOptions,
    ReadJsonlFiles,
    _ReadJsonlFile,
    parse_jsonl_options,
)
from beam_tfrecords.transforms.readers.read_parquet import (
    ParquetOptions,
    ReadParquetFiles,
    needed_columns,
    parse_parquet_options,
)

UTC = datetime.timezone.utc
T0 = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


# -- helpers ----------------------------------------------------------------------------------

def _numbered(chunk):
    return [(chunk.row_number(i), row) for i, row in enumerate(chunk.records())]


def _rejects_match(expected):
    """Matcher: the dead letters are exactly ``expected`` [(row, reason substring)] (row
    None: unknown, for a file unread as a whole)."""

    def key(row):
        return -1 if row is None else row

    def check(actual):
        got = sorted(((d["row"], d["reason"]) for d in actual), key=lambda g: key(g[0]))
        expected.sort(key=lambda e: (key(e[0]), e[1]))
        assert [row for row, _ in got] == [row for row, _ in expected], got
        for (row, reason), (_, want) in zip(got, expected):
            assert want in reason, (row, reason, want)
            assert all(key in d for d in actual
                       for key in ("source", "row", "feature", "reason", "value", "record"))

    return check


def expect(reader, paths, records=None, rejects=(), counts=None, chunks=None):
    """Run ``reader`` over ``paths`` and check every output."""
    with test_pipeline.TestPipeline() as p:
        out = p | beam.Create([str(path) for path in paths]) | reader
        if records is not None:
            assert_that(out.records | "Numbered" >> beam.FlatMap(_numbered), equal_to(records),
                        label="CheckRecords")
        if chunks is not None:
            assert_that(out.records | beam.Map(lambda c: (c.first_row, len(c))),
                        equal_to(chunks), label="CheckChunks")
        assert_that(out[REJECTED], _rejects_match(list(rejects)), label="CheckRejects")
        # Every file has all six counts; the unread ones are compared when not zero.
        assert_that(out[COUNTS] | beam.Map(lambda c: c[0]),
                    equal_to(["read", "rejected_at_read", *UNREAD_COUNTS] * len(paths)),
                    label="CheckCountNames")
        if counts is not None:
            assert_that(out[COUNTS] | beam.Filter(lambda c: c[1] or c[0] not in UNREAD_COUNTS),
                        equal_to(counts), label="CheckCounts")


def _plain(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def expect_built(reader, paths, features, expected):
    """Reader -> BuildExamples -> ExampleDecoder gives ``expected`` (a list of dicts)."""
    decoder_specs = tuple(features)

    def decode(item):
        _, batch = item
        decoder = ExampleDecoder(decoder_specs)
        return [{k: _plain(v) for k, v in decoder.decode(data).items()} for data in batch]

    def check(actual):
        key = lambda d: d["id"]  # noqa: E731
        assert sorted(actual, key=key) == sorted(expected, key=key)

    with test_pipeline.TestPipeline() as p:
        read = p | beam.Create([str(path) for path in paths]) | reader
        built = read.records | BuildExamples(features)
        assert_that(built.examples | beam.FlatMap(decode), check, label="CheckDecoded")
        assert_that(built[REJECTED], equal_to([]), label="NoBuildRejects")


# -- options ----------------------------------------------------------------------------------

def test_parse_options_defaults_and_values():
    assert parse_jsonl_options(None, "source.jsonl") == JsonlOptions()
    assert parse_jsonl_options({"max_depth": 8, "max_line_bytes": 1000}, "source.jsonl") == \
        JsonlOptions(max_depth=8, max_line_bytes=1000)
    assert parse_parquet_options(None, "source.parquet") == ParquetOptions()
    assert parse_parquet_options({}, "source.parquet") == ParquetOptions()
    assert parse_avro_options(None, "source.avro") == AvroOptions()


@pytest.mark.parametrize("parse,section,raw,key,echo", [
    (parse_jsonl_options, "source.jsonl", {"depth": 3}, "source.jsonl.depth", "3"),
    (parse_jsonl_options, "source.jsonl", {"max_depth": "64"}, "source.jsonl.max_depth",
     '"64"'),
    (parse_jsonl_options, "source.jsonl", {"max_depth": True}, "source.jsonl.max_depth",
     "true"),
    (parse_jsonl_options, "source.jsonl", {"max_depth": 0}, "source.jsonl.max_depth", "0"),
    (parse_jsonl_options, "source.jsonl", {"max_line_bytes": 1.5},
     "source.jsonl.max_line_bytes", "1.5"),
    (parse_jsonl_options, "source.jsonl", ["max_depth"], "source.jsonl", '["max_depth"]'),
    (parse_parquet_options, "source.parquet", {"columns": ["a"]}, "source.parquet.columns",
     '["a"]'),
    (parse_avro_options, "source.avro", {"codec": "snappy"}, "source.avro.codec",
     '"snappy"'),
])
def test_parse_options_rejects_unknown_keys_and_bad_types(parse, section, raw, key, echo):
    with pytest.raises(ValueError) as info:
        parse(raw, section)
    message = str(info.value)
    assert f"config key {key!r}" in message
    assert message.endswith(f"(got {echo})")


def test_needed_columns_are_top_level_fields_plus_literal_dotted_names():
    specs = [F("a", "int64"), F("h", "int64", source=("meta", "h")), F("b", "bytes")]
    assert needed_columns(specs, ["key"]) == ["a", "meta", "meta.h", "meta/h", "b", "key"]


# -- JSON Lines -------------------------------------------------------------------------------

def _jsonl_file(tmp_path):
    deep = '{"a":' * 70 + "1" + "}" * 70
    lines = [
        b"\xef\xbb\xbf" + '{"id": 1, "meta": {"h": 10, "tags": ["x", "y"]}, '
        '"name": "héllo ✓"}\r\n'.encode(),  # 1: BOM, CRLF, nested, unicode
        b"\r\n",                                   # 2: blank, skipped, not counted
        b'{"id": 2, "vals": [1, 2, 3], "none": null, "zero": 0}\n',
        b'{"id": 3,\n',                            # 4: malformed
        b"[1, 2]\n",                               # 5: not an object
        deep.encode() + b"\n",                     # 6: too deep
        b'{"id": "\xff"}\n',                       # 7: invalid UTF-8
        b"   \n",                                  # 8: blank
        b'{"a": ' + b"[" * 5000 + b"]" * 5000 + b"}\n",  # 9: deeper than json can parse
        b'{"id": 4, "f": 1.5e3}',                  # 10: no final newline
    ]
    path = tmp_path / "data.jsonl"
    path.write_bytes(b"".join(lines))
    return path


@pytest.mark.slow
def test_jsonl_records_rows_rejects_and_counts(tmp_path):
    path = _jsonl_file(tmp_path)
    expect(
        ReadJsonlFiles(JsonlOptions(), [F("id", "int64")]), [path],
        records=[
            (1, {"id": 1, "meta": {"h": 10, "tags": ["x", "y"]}, "name": "héllo ✓"}),
            (3, {"id": 2, "vals": [1, 2, 3], "none": None, "zero": 0}),
            (10, {"id": 4, "f": 1500.0}),
        ],
        rejects=[(4, "not valid JSON"), (5, "not a JSON object: a list"),
                 (6, "nested deeper than max_depth (64)"), (7, "invalid UTF-8 at byte 8"),
                 (9, "nested deeper than max_depth")],
        counts=[("read", 8), ("rejected_at_read", 5)],
    )


@pytest.mark.slow
def test_jsonl_long_lines_are_skipped_not_held_and_chunks_split(tmp_path):
    path = tmp_path / "many.jsonl"
    body = [b'{"i": %d}\n' % i for i in range(CHUNK_ROWS + 10)]
    body[3] = b'{"pad": "' + b"x" * 500 + b'"}\n'
    path.write_bytes(b"".join(body))
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    expect(
        ReadJsonlFiles(JsonlOptions(max_line_bytes=100), [F("i", "int64")]), [path, empty],
        chunks=[(1, CHUNK_ROWS), (CHUNK_ROWS + 2, 9)],
        rejects=[(4, "line of 512 bytes is longer than source.max_record_bytes (100)")],
        counts=[("read", CHUNK_ROWS + 10), ("rejected_at_read", 1),
                ("read", 0), ("rejected_at_read", 0)],
    )


@pytest.mark.slow
def test_jsonl_end_to_end(tmp_path):
    path = tmp_path / "e2e.jsonl"
    path.write_text(
        '{"id": 1, "tokens": [1, 2, 3], "meta": {"h": 7}, "opt": 0.5, "name": "ä"}\n'
        '{"id": 2, "tokens": [], "meta": {"h": 8}, "opt": null, "name": ""}\n',
        encoding="utf-8")
    features = [F("id", "int64"), F("tokens", "int64", (-1,)),
                F("h", "int64", source=("meta", "h")),
                F("opt", "float", missing="omit"), F("name", "string")]
    expect_built(ReadJsonlFiles(JsonlOptions(), features), [path], features, [
        {"id": 1, "tokens": [1, 2, 3], "h": 7, "opt": 0.5, "name": "ä"},
        {"id": 2, "tokens": [], "h": 8, "opt": None, "name": ""},
    ])


# -- Parquet ----------------------------------------------------------------------------------

def _parquet_table():
    return pa.table({
        "id": pa.array([1, 2, 3], pa.int64()),
        "tokens": pa.array([[1, 2], None, []], pa.list_(pa.int64())),
        "meta": pa.array([{"h": 10, "name": "a"}, {"h": None, "name": "b"}, None],
                         pa.struct([("h", pa.int64()), ("name", pa.string())])),
        "ts": pa.array([T0, None, T0 + datetime.timedelta(seconds=1)],
                       pa.timestamp("us", tz="UTC")),
        "day": pa.array([datetime.date(2024, 1, 2)] * 3, pa.date32()),
        "opt": pa.array([0.5, None, 0.0], pa.float64()),
        "blob": pa.array([b"\x00\xff", b"", None], pa.binary()),
        "unused": pa.array(["u1", "u2", "u3"]),
    })


@pytest.mark.parametrize("columnar", [True, False])
@pytest.mark.slow
def test_parquet_records_only_needed_columns(tmp_path, columnar):
    path = tmp_path / "t.parquet"
    pq.write_table(_parquet_table(), path)
    features = [F("id", "int64"), F("tokens", "int64", (-1,)),
                F("h", "int64", source=("meta", "h")), F("ts", "int64"),
                F("day", "int64", unit="days"), F("opt", "float"), F("blob", "bytes"),
                F("absent", "int64", missing="omit")]
    base = {"meta": {"h": 10, "name": "a"}}
    expect(
        ReadParquetFiles(ParquetOptions(), features, columnar=columnar), [path],
        records=[
            (1, {"id": 1, "tokens": [1, 2], **base, "ts": T0,
                 "day": datetime.date(2024, 1, 2), "opt": 0.5, "blob": b"\x00\xff"}),
            (2, {"id": 2, "tokens": None, "meta": {"h": None, "name": "b"}, "ts": None,
                 "day": datetime.date(2024, 1, 2), "opt": None, "blob": b""}),
            (3, {"id": 3, "tokens": [], "meta": None,
                 "ts": T0 + datetime.timedelta(seconds=1),
                 "day": datetime.date(2024, 1, 2), "opt": 0.0, "blob": None}),
        ],
        counts=[("read", 3), ("rejected_at_read", 0)],
    )
    assert top_level_fields("parquet", str(path)) == _parquet_table().column_names


@pytest.mark.slow
def test_parquet_chunks_extra_fields_and_no_features(tmp_path):
    path = tmp_path / "big.parquet"
    n = CHUNK_ROWS + 5
    pq.write_table(pa.table({"i": np.arange(n), "k": np.arange(n) * 2}), path,
                   row_group_size=1000)
    expect(ReadParquetFiles(ParquetOptions(), [F("i", "int64")], extra_fields=["k"],
                       columnar=False), [path],
           chunks=[(1, CHUNK_ROWS), (CHUNK_ROWS + 1, 5)],
           counts=[("read", n), ("rejected_at_read", 0)])
    # Columnar: row groups of 1000 gathered into chunks of at least batch_rows.
    expect(ReadParquetFiles(ParquetOptions(), [F("i", "int64")], extra_fields=["k"],
                       batch_rows=2500), [path],
           chunks=[(1, 3000), (3001, n - 3000)],
           records=[(row, {"i": row - 1, "k": 2 * (row - 1)}) for row in range(1, n + 1)])
    small = tmp_path / "small.parquet"
    pq.write_table(pa.table({"i": [5], "k": [6]}), small)
    expect(ReadParquetFiles(ParquetOptions(), [F("i", "int64")], extra_fields=["k"]), [small],
           records=[(1, {"i": 5, "k": 6})])
    expect(ReadParquetFiles(ParquetOptions(), []), [small], records=[(1, {"i": 5, "k": 6})])


@pytest.mark.parametrize("columnar", [True, False])
@pytest.mark.slow
def test_parquet_unreadable_file_and_row_group_are_unread_input(tmp_path, columnar):
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"this is not parquet at all")
    broken = tmp_path / "broken.parquet"
    pq.write_table(pa.table({"i": list(range(30))}), broken, row_group_size=10,
                   compression="none")
    meta = pq.ParquetFile(broken).metadata
    offset = meta.row_group(1).column(0).data_page_offset
    column = meta.row_group(1).column(0)
    span = column.total_compressed_size  # the group's one column chunk, dictionary included
    data = bytearray(broken.read_bytes())
    data[offset:offset + 24] = b"\xff" * 24
    broken.write_bytes(bytes(data))
    expect(
        ReadParquetFiles(ParquetOptions(), [F("i", "int64")], columnar=columnar), [junk, broken],
        # the middle row group is lost (one unread region); the groups around it are read
        records=[(row, {"i": row - 1}) for row in [*range(1, 11), *range(21, 31)]],
        rejects=[(None, "not a readable Parquet file"),
                 (11, "unreadable Parquet data in row group 1 (rows 11-20): rows 11-20 are "
                      "lost")],
        counts=[("read", 0), ("rejected_at_read", 0), ("unread_files", 1),
                ("unread_bytes", len(b"this is not parquet at all")), ("unread_regions", 1),
                ("read", 20), ("rejected_at_read", 0), ("unread_files", 1),
                ("unread_bytes", span), ("unread_rows", 10), ("unread_regions", 1)],
    )


def test_parquet_columnar_chunks_hold_batches_equal_to_the_per_row_records(tmp_path):
    from beam_tfrecords.transforms.readers.framework import RecordChunk
    from beam_tfrecords.transforms.readers.read_parquet import _ReadParquetFile

    path = tmp_path / "t.parquet"
    table = pa.concat_tables([_parquet_table()] * 700)  # 2100 rows
    pq.write_table(table, path, row_group_size=300)
    features = [F("id", "int64"), F("h", "int64", source=("meta", "h")), F("ts", "int64"),
                F("blob", "bytes")]

    def run(**kwargs):
        fn = _ReadParquetFile(ParquetOptions(), features, **kwargs)
        outs = list(fn.process(str(path)))
        chunks = [o for o in outs if isinstance(o, RecordChunk)]
        numbered = [(c.row_number(i), r) for c in chunks for i, r in enumerate(c.records())]
        return chunks, numbered, [o.value for o in outs if not isinstance(o, RecordChunk)]

    fast_chunks, fast, fast_other = run(batch_rows=1000)
    slow_chunks, slow, slow_other = run(columnar=False)
    assert fast == slow and fast_other == slow_other
    assert [r for r, _ in fast] == list(range(1, 2101))
    assert all(c.batch is not None and not c.rows for c in fast_chunks)
    assert [len(c) for c in fast_chunks] == [1200, 900]
    assert fast_chunks[0].batch.schema.names == ["id", "meta", "ts", "blob"]
    assert all(c.batch is None for c in slow_chunks)


@pytest.mark.slow
def test_parquet_end_to_end(tmp_path):
    path = tmp_path / "e2e.parquet"
    pq.write_table(_parquet_table(), path)
    features = [F("id", "int64"), F("tokens", "int64", (-1,), missing="omit"),
                F("h", "int64", source=("meta", "h"), missing="default", default=-1),
                F("ts", "int64", missing="omit"), F("opt", "float", missing="omit"),
                F("blob", "bytes", missing="omit")]
    seconds = int(T0.timestamp())
    expect_built(ReadParquetFiles(ParquetOptions(), features), [path], features, [
        {"id": 1, "tokens": [1, 2], "h": 10, "ts": seconds, "opt": 0.5, "blob": b"\x00\xff"},
        {"id": 2, "tokens": None, "h": -1, "ts": None, "opt": None, "blob": b""},
        {"id": 3, "tokens": [], "h": -1, "ts": seconds + 1, "opt": 0.0, "blob": None},
    ])


# -- Avro -------------------------------------------------------------------------------------

AVRO_SCHEMA = {
    "type": "record", "name": "Row", "fields": [
        {"name": "id", "type": "long"},
        {"name": "tokens", "type": {"type": "array", "items": "long"}},
        {"name": "opt", "type": ["null", "double"], "default": None},
        {"name": "meta", "type": {"type": "record", "name": "Meta", "fields": [
            {"name": "h", "type": "long"},
            {"name": "inner", "type": ["null", {"type": "record", "name": "Inner",
                                                "fields": [{"name": "z", "type": "string"}]}]},
        ]}},
        {"name": "blob", "type": "bytes"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
AVRO_ROWS = [
    {"id": 1, "tokens": [1, 2, 3], "opt": 0.25, "meta": {"h": 5, "inner": {"z": "ü"}},
     "blob": b"\x00\x01", "ts": T0},
    {"id": 2, "tokens": [], "opt": None, "meta": {"h": 6, "inner": None},
     "blob": b"", "ts": T0 + datetime.timedelta(seconds=2)},
]


def _write_avro(path, rows, **kwargs):
    with open(path, "wb") as handle:
        fastavro.writer(handle, fastavro.parse_schema(AVRO_SCHEMA), rows, **kwargs)


@pytest.mark.slow
def test_avro_records_rows_and_counts(tmp_path):
    path = tmp_path / "t.avro"
    _write_avro(path, AVRO_ROWS, codec="deflate")
    expect(ReadAvroFiles(AvroOptions(), [F("id", "int64")]), [path],
           records=[(1, AVRO_ROWS[0]), (2, AVRO_ROWS[1])],
           counts=[("read", 2), ("rejected_at_read", 0)])
    assert top_level_fields("avro", str(path)) == ["id", "tokens", "opt", "meta", "blob", "ts"]


@pytest.mark.slow
def test_avro_unreadable_file_and_truncated_block_are_unread_input(tmp_path):
    junk = tmp_path / "junk.avro"
    junk.write_bytes(b"definitely not avro")
    cut = tmp_path / "cut.avro"
    rows = [dict(AVRO_ROWS[1], id=i) for i in range(1, 301)]
    _write_avro(cut, rows, sync_interval=200)  # many small blocks
    data = cut.read_bytes()
    cut.write_bytes(data[: len(data) - 40])  # the last block is truncated
    with open(cut, "rb") as handle:
        readable = 0
        try:
            for _ in fastavro.reader(handle):
                readable += 1
        except Exception:  # noqa: BLE001 - we only count what fastavro yields before failing
            pass
    assert 0 < readable < 300
    # where the last block starts (fastavro's Block.offset, before the file was cut)
    last = max(b.offset for b in fastavro.block_reader(io.BytesIO(data)))
    expect(
        ReadAvroFiles(AvroOptions(), [F("id", "int64")]), [junk, cut],
        records=[(i, rows[i - 1]) for i in range(1, readable + 1)],
        rejects=[(None, "not a readable Avro file"),
                 (readable + 1, "the file ends 24 bytes early): at least the "
                                f"{300 - readable} records")],
        counts=[("read", 0), ("rejected_at_read", 0), ("unread_files", 1),
                ("unread_bytes", len(b"definitely not avro")), ("unread_regions", 1),
                ("read", readable), ("rejected_at_read", 0), ("unread_files", 1),
                ("unread_bytes", len(data) - 40 - last),
                ("unread_rows", 300 - readable), ("unread_regions", 1)],
    )


@pytest.mark.slow
def test_avro_end_to_end(tmp_path):
    path = tmp_path / "e2e.avro"
    _write_avro(path, AVRO_ROWS)
    features = [F("id", "int64"), F("tokens", "int64", (-1,)),
                F("h", "int64", source=("meta", "h")),
                F("z", "string", source=("meta", "inner", "z"), missing="omit"),
                F("opt", "float", missing="omit"), F("blob", "bytes"),
                F("ts", "int64", unit="ms")]
    millis = int(T0.timestamp()) * 1000
    expect_built(ReadAvroFiles(AvroOptions(), features), [path], features, [
        {"id": 1, "tokens": [1, 2, 3], "h": 5, "z": "ü", "opt": 0.25,
         "blob": b"\x00\x01", "ts": millis},
        {"id": 2, "tokens": [], "h": 6, "z": None, "opt": None, "blob": b"",
         "ts": millis + 2000},
    ])


def test_depth_limit_is_inclusive_and_iterative():
    from beam_tfrecords.transforms.readers.read_jsonl import _too_deep

    def nest(levels):
        value = {}
        for _ in range(levels - 1):
            value = {"a": value}
        return value

    assert not _too_deep(nest(64), 64)
    assert _too_deep(nest(65), 64)
    assert not _too_deep({"a": [1, {"b": []}]}, 4)  # dict, list, dict, list
    assert _too_deep({"a": [1, {"b": []}]}, 3)
    assert _too_deep(nest(100_000), 64)  # far past the interpreter's recursion limit


# -- columnar and per-row paths agree ---------------------------------------------------------

def _bits(value):
    """Floats by their bits (NaN == NaN, 1 != 1.0), containers recursively."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, dict):
        return {k: _bits(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_bits(v) for v in value)
    return value


def _run_fn(fn, path):
    from beam_tfrecords.transforms.readers.framework import RecordChunk

    chunks, rejects, counts = [], [], []
    for out in fn.process(str(path)):
        if isinstance(out, RecordChunk):
            chunks.append(out)
        elif out.tag == REJECTED:
            rejects.append(out.value)
        else:
            counts.append(out.value)
    records = sorted(((c.row_number(i), r) for c in chunks for i, r in enumerate(c.records())),
                     key=lambda item: item[0])
    return chunks, _bits(records), sorted(rejects, key=lambda d: d["row"]), counts


JSONL_TRICKY = [
    b"\xef\xbb\xbf" + b'{"i": 1, "f": 2.5, "s": "a", "t": "2024-01-02"}\r\n',  # BOM, CRLF
    b'{"i": 2, "f": 3, "s": "b", "t": "2024-01-03T04:05:06"}\n',  # 3, not 3.0
    b"\n",
    b"   \t \n",                                                 # blank lines
    b'{"i": 3, "f": 0.1, "s": "caf\\u00e9 \\ud83d\\ude00", "t": "x"}\n',
    b'{"i": 4, "f": 1e-3, "s": "d"}\n',                          # missing key
    b'{"i": 5, "f": null, "s": "e", "t": null}\n',               # explicit nulls
    b'{"i": 6, "f": NaN, "s": "f", "t": "y"}\n',
    b'{"i": 7, "f": -NaN, "s": "g", "t": "y"}\n',                # json refuses -NaN
    b'{"i": 99999999999999999999, "f": 1.5, "s": "h", "t": "y"}\n',  # beyond int64
    b'{"i": 9, "f": 1.5, "s": "\\udc00", "t": "y"}\n',          # a lone surrogate
    b'{"i": 10, "i": 11, "f": 1.5, "s": "i", "t": "y"}\n',      # a duplicate key
    b'{"i": 12, "f": 1.5, "s": "j", "t": "y"} {"i": 13}\n',     # two objects
    b'{"i": 14, "f": 1.5, "s": "\xff", "t": "y"}\n',             # invalid UTF-8
    b'{"i": 15, "f":\n',                                         # malformed
    b"[1, 2]\n",                                                 # not an object
    b'{"i": 16, "f": 1.5, "s": "' + b"k" * 300 + b'", "t": "y"}\n',  # too long
    b'{"i": 17, "f": -0.0, "s": "l", "t": "y"}\n',
    b'{"i": 18, "f": 2.75, "s": "m", "t": "y", "nested": {"a": [1]}}\n',
    b'{"i": 19, "f": 0.5, "s": "n", "t": "y"}',                  # no final newline
]


@pytest.mark.parametrize("block", [16, 64, 200, 1 << 20])
def test_jsonl_columnar_and_per_row_paths_agree(tmp_path, monkeypatch, block):
    from beam_tfrecords.transforms.readers import read_jsonl as tabular_sources
    from beam_tfrecords.transforms.readers.read_jsonl import _ReadJsonlFile

    path = tmp_path / "t.jsonl"
    clean = [b'{"i": %d, "f": %d.5, "s": "w%d", "t": "z"}\n' % (n, n, n) for n in range(50)]
    path.write_bytes(b"\xef\xbb\xbf" + b"".join(clean + JSONL_TRICKY[:-1] + clean
                                                 + JSONL_TRICKY[-1:]))
    monkeypatch.setattr(tabular_sources, "_JSONL_BLOCK", block)
    options = JsonlOptions(max_line_bytes=250)
    _, slow, slow_rejects, slow_counts = _run_fn(
        _ReadJsonlFile(options, [F("i", "int64")], columnar=False), path)
    chunks, fast, fast_rejects, fast_counts = _run_fn(
        _ReadJsonlFile(options, [F("i", "int64")]), path)
    assert fast == slow
    assert fast_rejects == slow_rejects
    assert fast_counts == slow_counts
    # 51: a BOM after line 1, 59: -NaN, 63: two objects, 64: invalid UTF-8, 65: malformed,
    # 66: not an object, 67: too long
    assert [d["row"] for d in slow_rejects] == [51, 59, 63, 64, 65, 66, 67]
    got = dict(slow)
    assert got[1]["i"] == 0 and got[52]["f"] == 3 and got[52]["t"] == "2024-01-03T04:05:06"
    assert "t" not in got[56] and got[57]["f"] is None
    assert got[60]["i"] == 99999999999999999999 and got[61]["s"] == "\udc00"
    assert got[62]["i"] == 11 and got[120]["i"] == 19
    if block >= 200:
        assert any(c.batch is not None for c in chunks)  # the clean lines went column-wise


def test_parquet_columnar_rows_equal_per_row_rows_bit_for_bit(tmp_path):
    from beam_tfrecords.transforms.readers.read_parquet import _ReadParquetFile

    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"f": [0.5, float("nan"), -0.0, None], "i": [1, None, 3, 4]}), path)
    fn = _ReadParquetFile
    assert _run_fn(fn(ParquetOptions(), []), path)[1:] == \
        _run_fn(fn(ParquetOptions(), [], columnar=False), path)[1:]


# -- date and datetime text (issue #18, item 2) ------------------------------------------------

def _built(features, chunks):
    """Every chunk through BuildExamples' DoFn: ({id: decoded values}, {row: reason})."""
    from beam_tfrecords.transforms.build_examples import _BuildExamplesFn
    from beam_tfrecords.transforms.codec.splits import SplitSpec

    fn = _BuildExamplesFn(features, SplitSpec())
    fn.setup()
    decoder = ExampleDecoder(features)
    values, reasons = {}, {}
    for chunk in chunks:
        for out in fn.process(chunk):
            if isinstance(out, beam.pvalue.TaggedOutput):
                if out.tag == REJECTED:
                    reasons[out.value["row"]] = (out.value["feature"], out.value["reason"])
                continue
            for data in out[1]:
                decoded = decoder.decode(data)
                values[decoded["id"]] = decoded["when"]
    return values, reasons


def test_jsonl_date_text_becomes_epoch_integers_on_both_paths(tmp_path):
    """JSON strings into a feature with ``unit:`` are ISO-8601 dates and datetimes -- the same
    integers on the columnar and the per-row path, and the per-row refusals."""
    lines = [
        '{"id": 1, "when": "2024-03-01"}',
        '{"id": 2, "when": "2024-03-01T12:34:56.5+02:00"}',
        '{"id": 3, "when": "2024-03-01 12:34:56.123456789Z"}',
        '{"id": 4, "when": "1969-12-31T23:59:59.9995"}',  # floors to the millisecond
        '{"id": 6, "when": "2024-02-30"}',
        '{"id": 7, "when": "1709251200000"}',  # whole-number text: a number, as in CSV
        '{"id": 8, "when": "2024-03-01T12:34:56+02:00"}',
    ]
    clean = [f'{{"id": {100 + n}, "when": "2024-01-01T00:00:{n:02d}Z"}}' for n in range(40)]
    path = tmp_path / "dates.jsonl"
    path.write_text("\n".join(clean + lines) + "\n")
    features = [F("id", "int64"), F("when", "int64", unit="ms", format="iso8601")]
    results = []
    for columnar in (True, False):
        chunks = _run_fn(_ReadJsonlFile(JsonlOptions(), features, columnar=columnar), path)[0]
        assert any(c.batch is not None for c in chunks) == columnar
        results.append(_built(features, chunks))
    assert results[0] == results[1]
    values, reasons = results[0]
    assert values[1] == 1709251200000 and values[2] == 1709289296500
    assert values[3] == 1709296496123 and values[4] == -1
    assert values[8] == 1709289296000 and values[100] == 1704067200000
    assert values[7] == 1709251200000 and sorted(reasons) == [45]
    assert reasons[45][0] == "when" and "day is out of range for month" in reasons[45][1]
    assert "'2024-02-30'" in reasons[45][1]


def test_jsonl_number_text_follows_the_csv_cell_rules(tmp_path):
    """A JSON string holding a number, for a number feature, is read by the rules of the
    same text in a CSV cell (one table of coercions on every entry point); a date stays a
    date only where the feature has a date format."""
    path = tmp_path / "n.jsonl"
    path.write_text('{"id": 1, "when": "517.0"}\n{"id": 2, "when": 517.0}\n'
                    '{"id": 3, "when": "2024-03-01"}\n{"id": 4, "when": "517.5"}\n')
    features = [F("id", "int64"), F("when", "int64")]
    for columnar in (False, True):
        values, reasons = _built(features, _run_fn(_ReadJsonlFile(JsonlOptions(), features,
                                                                  columnar=columnar), path)[0])
        assert values == {1: 517, 2: 517} and sorted(reasons) == [3, 4]
    dated = [F("id", "int64"), F("when", "int64", unit="days", format="iso8601")]
    values, reasons = _built(dated, _run_fn(_ReadJsonlFile(JsonlOptions(), dated,
                                                           columnar=False), path)[0])
    assert values == {1: 517, 2: 517, 3: 19783} and sorted(reasons) == [4]


# --- JSON Lines records leave in file order ----------------------------------------------------

def _emitted_rows(fn, path) -> list[int]:
    """The row numbers of the records ``fn`` emits for ``path``, in emission order."""
    from beam_tfrecords.transforms.readers.framework import RecordChunk

    rows = []
    for out in fn.process(str(path)):
        if isinstance(out, RecordChunk):
            rows.extend(out.row_number(i) for i in range(len(out)))
    return rows


@settings(max_examples=60, deadline=None)
@given(kinds=st.lists(st.sampled_from(["plain", "null", "whole_float", "missing", "blank"]),
                      min_size=1, max_size=400))
def test_jsonl_records_keep_their_file_order(tmp_path_factory, kinds):
    """Lines Arrow cannot read exactly (nulls, whole-number floats, missing keys) go through
    ``json``; they still leave in their place among the others, at any mix."""
    lines = []
    for n, kind in enumerate(kinds):
        lines.append({"plain": f'{{"i": {n}, "f": {n}.5}}', "null": f'{{"i": {n}, "f": null}}',
                      "whole_float": f'{{"i": {n}, "f": 7.0}}', "missing": f'{{"i": {n}}}',
                      "blank": ""}[kind])
    path = tmp_path_factory.mktemp("order") / "o.jsonl"
    path.write_text("\n".join(lines) + "\n")
    features = [F("i", "int64"), F("f", "float", missing="omit")]
    rows = _emitted_rows(_ReadJsonlFile(JsonlOptions(), features), path)
    expected = [n + 1 for n, kind in enumerate(kinds) if kind != "blank"]
    assert rows == expected
