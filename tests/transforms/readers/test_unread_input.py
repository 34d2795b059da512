"""Every input byte is accounted for (issue #13, the readers' half): damage becomes rejected
records (a malformed row, a line too long) or unread regions (an unterminated quote, a lost
Parquet row group, a damaged Avro block, a file that cannot be opened) -- each region one
dead letter of kind "unread" with its offset, bytes and rows, and the unread_* counts --
and reading goes on after it wherever the format allows. Records read plus rows known lost
equal the rows written into each file."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import time
import tracemalloc
import zipfile

import apache_beam as beam
import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecords.pipelines import build, build_inputs
from beam_tfrecords.pipelines.config import ConfigError, CsvOptions, parse_config
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F
from beam_tfrecords.transforms.readers.declared_fields import top_level_fields
from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES
from beam_tfrecords.transforms.readers.framework import COUNTS, REJECTED, UNREAD_COUNTS, RecordChunk
from beam_tfrecords.transforms.readers.read_avro import AvroOptions, ReadAvroFiles, _ReadAvroFile
from beam_tfrecords.transforms.readers.read_csv import ReadCsvFiles, _ReadCsvFile
from beam_tfrecords.transforms.readers.read_jsonl import JsonlOptions, _ReadJsonlFile
from beam_tfrecords.transforms.readers.read_parquet import ParquetOptions, _ReadParquetFile

KIB = 1024
UNREAD_KEYS = {"source", "row", "feature", "reason", "value", "record", "kind", "offset",
               "bytes", "rows"}


def run(fn, path):
    """Drive a reader DoFn by hand: ([(row, record)], [dead letters], {count: n})."""
    records, letters, counts = [], [], {}
    for out in fn.process(str(path)):
        if isinstance(out, RecordChunk):
            records += [(out.row_number(i), r) for i, r in enumerate(out.records())]
        elif out.tag == REJECTED:
            letters.append(out.value)
        else:
            assert out.tag == COUNTS and out.value[0] not in counts
            counts[out.value[0]] = out.value[1]
    assert list(counts) == ["read", "rejected_at_read", *UNREAD_COUNTS]  # all six, always
    unread = [d for d in letters if d["kind"] == "unread"]
    assert all(set(d) == UNREAD_KEYS and d["feature"] == d["value"] == d["record"] == ""
               for d in unread)
    assert counts["unread_regions"] == len(unread)
    assert counts["unread_files"] == int(bool(unread))
    assert counts["unread_bytes"] == sum(d["bytes"] for d in unread)
    assert counts["unread_rows"] == sum(d["rows"] or 0 for d in unread)
    assert counts["read"] == len(records) + counts["rejected_at_read"]
    assert counts["rejected_at_read"] == sum(d["kind"] == "rejected" for d in letters)
    return records, letters, counts


# -- config -----------------------------------------------------------------------------------

def _config(source=None, errors=None):
    raw = {"name": "t", "source": {"format": "jsonl", "path": "in/*.jsonl", **(source or {})},
           "features": {"i": {"type": "int64"}}, "output": {"path": "out"}}
    if errors is not None:
        raw["errors"] = errors
    return parse_config(raw)


@pytest.mark.parametrize("value,size", [
    (None, DEFAULT_MAX_RECORD_BYTES), (4096, 4096), ("64MiB", 64 << 20), ("64MB", 64_000_000),
    ("1.5KiB", 1536),
])
def test_max_record_bytes_takes_sizes_and_reaches_every_reader(value, size):
    source = {} if value is None else {"max_record_bytes": value}
    config = _config(source)
    assert config.source.max_record_bytes == size
    assert config.source.jsonl.max_line_bytes == size
    for fmt, section in (("csv", "csv"), ("parquet", "parquet"), ("avro", "avro")):
        other = parse_config({**_raw(fmt), "source": {"format": fmt, "path": "x", **source}})
        assert other.source.max_record_bytes == size
        assert getattr(other.source, section).max_record_bytes == size
        resolved = other.resolved()["source"]
        assert resolved["max_record_bytes"] == size and "max_record_bytes" not in resolved[fmt]


def _raw(fmt):
    return {"name": "t", "source": {"format": fmt, "path": "x"},
            "features": {"i": {"type": "int64"}}, "output": {"path": "out"}}


@pytest.mark.parametrize("value", [0, -1, "lots", True, 1.5, "2TiB"])
def test_max_record_bytes_refuses_what_is_not_a_size(value):
    with pytest.raises(ConfigError, match="source.max_record_bytes"):
        _config({"max_record_bytes": value})


def test_jsonl_max_line_bytes_is_an_alias():
    assert _config({"jsonl": {"max_line_bytes": 2048}}).source.max_record_bytes == 2048
    same = _config({"max_record_bytes": "2KiB", "jsonl": {"max_line_bytes": 2048}})
    assert same.source.max_record_bytes == same.source.jsonl.max_line_bytes == 2048
    with pytest.raises(ConfigError, match="source.jsonl.max_line_bytes.*older name"):
        _config({"max_record_bytes": "1KiB", "jsonl": {"max_line_bytes": 2048}})


def test_max_unread_fraction():
    assert _config().errors.max_unread_fraction == 0.0
    assert _config(errors={"max_unread_fraction": 0.25}).errors.max_unread_fraction == 0.25
    assert _config(errors={"max_unread_fraction": 1}).errors.max_bad_fraction == 0.0
    for bad in (-0.1, 1.5, "x", True):
        with pytest.raises(ConfigError, match="errors.max_unread_fraction"):
            _config(errors={"max_unread_fraction": bad})


# -- CSV --------------------------------------------------------------------------------------

FEATURES = [F("i", "int64"), F("s", "string")]


@pytest.mark.parametrize("columnar", [True, False])
def test_csv_damage_of_every_kind_in_one_file(tmp_path, columnar):
    rows = [b"%d,row %d\n" % (n, n) for n in range(1, 301)]
    rows[9] = b'10,"a"b\n'                              # malformed quoting: one dead letter
    rows[19] = b"20," + b"x" * 3000 + b"\n"             # over max_record_bytes: one dead letter
    rows[29] = b'30,"' + b"y" * 900 + b'"\n'            # under it: a value
    rows[39] = b"40\n"                                  # wrong field count: one dead letter
    tail = b'301,"never closed\n302,b\n303,c\n'
    head = b"i,s\n" + b"".join(rows)
    path = tmp_path / "damaged.csv"
    path.write_bytes(head + tail)
    options = CsvOptions(max_record_bytes=KIB)
    records, letters, counts = run(_ReadCsvFile(options, FEATURES, columnar=columnar), path)
    assert [r for r, _ in records] == [n for n in range(1, 301) if n not in (10, 20, 40)]
    assert dict(records)[30]["s"] == "y" * 900
    assert [(d["row"], d["kind"]) for d in letters] == [
        (10, "rejected"), (20, "rejected"), (40, "rejected"), (301, "unread")]
    assert "larger than source.max_record_bytes (1024)" in letters[1]["reason"]
    assert letters[3]["offset"] == len(head) and letters[3]["bytes"] == len(tail)
    assert letters[3]["rows"] is None
    assert counts == {"read": 300, "rejected_at_read": 3, "unread_files": 1,
                      "unread_bytes": len(tail), "unread_rows": 0, "unread_regions": 1}


@pytest.mark.slow
def test_csv_unterminated_quote_on_direct_runner(tmp_path):
    path = tmp_path / "open.csv"
    head = b"i,s\n1,a\n2,b\n"
    path.write_bytes(head + b'3,"c\n4,d\n')
    with test_pipeline.TestPipeline() as p:
        out = p | beam.Create([str(path)]) | ReadCsvFiles(CsvOptions(), FEATURES)
        assert_that(out.records | beam.Map(len) | beam.CombineGlobally(sum), equal_to([2]),
                    label="Records")
        assert_that(out[REJECTED] | beam.Map(lambda d: (d["kind"], d["row"], d["offset"],
                                                         d["bytes"], d["rows"])),
                    equal_to([("unread", 3, len(head), 9, None)]), label="Unread")
        assert_that(out[COUNTS], equal_to([
            ("read", 2), ("rejected_at_read", 0), ("unread_files", 1), ("unread_bytes", 9),
            ("unread_rows", 0), ("unread_regions", 1)]), label="Counts")


def test_csv_header_over_the_limit_leaves_the_file_unread(tmp_path):
    path = tmp_path / "wide.csv"
    data = b",".join(b"c%d" % n for n in range(600)) + b"\n1,2\n"
    path.write_bytes(data)
    for columnar in (True, False):
        records, letters, counts = run(
            _ReadCsvFile(CsvOptions(max_record_bytes=KIB), FEATURES, columnar=columnar), path)
        assert not records and [(d["kind"], d["row"], d["offset"], d["bytes"])
                                for d in letters] == [("unread", 0, 0, len(data))]
        assert "header is" in letters[0]["reason"] and counts["read"] == 0


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32"])
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_utf16_and_utf32_text_is_one_unread_file_saying_so(tmp_path, fmt, encoding):
    """Excel's "Unicode Text" and PowerShell write UTF-16 with a byte order mark; read as
    UTF-8 its header would be garbled names and every row a dead letter. The whole file is
    one unread region saying what it is and how to convert it; a UTF-8 file (its BOM
    included) reads as before."""
    text = ("a,b\n1,x\n2,y\n" if fmt == "csv"
            else '{"a": 1, "b": "x"}\n{"a": 2, "b": "y"}\n')
    # Python's utf-16 and utf-32 codecs write a (little-endian) mark; utf-16-be writes none.
    data = ("\ufeff" + text if encoding == "utf-16-be" else text).encode(encoding)
    path = tmp_path / f"t.{fmt}"
    path.write_bytes(data)
    specs = [F("a", "int64"), F("b", "string")]
    for columnar in (True, False):
        fn = (_ReadCsvFile(CsvOptions(), specs, columnar=columnar) if fmt == "csv"
              else _ReadJsonlFile(JsonlOptions(), specs, columnar=columnar))
        records, letters, counts = run(fn, path)
        assert not records and counts["read"] == 0
        (letter,) = letters
        assert (letter["kind"], letter["offset"], letter["bytes"]) == ("unread", 0, len(data))
        family = "UTF-32" if encoding == "utf-32" else "UTF-16"
        assert letter["reason"].startswith(f"the file is {family} text (")
        assert f"iconv -f {family} -t UTF-8" in letter["reason"]
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())  # UTF-8, with Excel's BOM
    records, letters, counts = run(
        _ReadCsvFile(CsvOptions(), specs) if fmt == "csv" else _ReadJsonlFile(JsonlOptions(),
                                                                              specs), path)
    assert [r for _, r in records] == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}] and not letters


def _zipped(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("t.csv", data)
    return buffer.getvalue()


@pytest.mark.parametrize("kind,compress", [
    ("gzip", gzip.compress),
    ("bzip2", bz2.compress),
    ("xz", lzma.compress),
    ("zip", _zipped),
])
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_a_compressed_text_file_is_one_unread_file_saying_so(tmp_path, fmt, kind, compress):
    """A .csv.gz read as text would be a garbled header and dead letters: the readers read
    uncompressed text, and say so for the whole file."""
    text = b"a,b\n1,x\n" if fmt == "csv" else b'{"a": 1, "b": "x"}\n'
    path = tmp_path / f"t.{fmt}.gz"
    path.write_bytes(data := compress(text))
    specs = [F("a", "int64"), F("b", "string")]
    for columnar in (True, False):
        fn = (_ReadCsvFile(CsvOptions(), specs, columnar=columnar) if fmt == "csv"
              else _ReadJsonlFile(JsonlOptions(), specs, columnar=columnar))
        records, letters, _ = run(fn, path)
        assert not records and [(d["kind"], d["bytes"]) for d in letters] == [
            ("unread", len(data))]
        assert letters[0]["reason"].startswith(f"the file is {kind}-compressed; ")


def test_a_header_that_starts_like_a_magic_number_is_still_text():
    from beam_tfrecords.transforms.readers.events import unreadable_text

    assert unreadable_text(b"BZhash,PK,x\n1,2,3\n"[:10]) is None
    assert unreadable_text(b"PK,id\n") is None


# -- JSON Lines -------------------------------------------------------------------------------

@pytest.mark.parametrize("columnar", [True, False])
def test_jsonl_line_over_the_limit_is_one_dead_letter_read_in_bounded_memory(tmp_path,
                                                                             columnar):
    path = tmp_path / "huge.jsonl"
    big = 24 << 20  # 24 MiB on one line; the limit is 64 KiB
    with open(path, "wb") as handle:
        handle.write(b'{"i": 1}\n{"i": "not an int", "pad": "')
        for _ in range(big >> 20):
            handle.write(b"x" * (1 << 20))
        handle.write(b'"}\n{"i": 3}\nnot json\n{"i": 5}\n')
    fn = _ReadJsonlFile(JsonlOptions(max_line_bytes=64 * KIB), [F("i", "int64")],
                        columnar=columnar)
    tracemalloc.start()
    try:
        records, letters, counts = run(fn, path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak  # never the 24 MiB line
    assert [r for r, _ in records] == [1, 3, 5]
    assert [(d["row"], d["kind"]) for d in letters] == [(2, "rejected"), (4, "rejected")]
    assert "longer than source.max_record_bytes (65536)" in letters[0]["reason"]
    assert counts["read"] == 5 and counts["unread_bytes"] == 0


# -- Parquet ----------------------------------------------------------------------------------

def _parquet(path, groups=5, rows=1000):
    table = pa.table({"i": list(range(groups * rows)),
                      "s": [f"value {n:08d}" for n in range(groups * rows)]})
    pq.write_table(table, path, row_group_size=rows, compression="none",
                   write_page_checksum=True, use_dictionary=False)
    return groups * rows


@pytest.mark.parametrize("columnar", [True, False])
def test_parquet_corrupted_row_group_loses_its_rows_only(tmp_path, columnar):
    path = tmp_path / "groups.parquet"
    total = _parquet(path)
    meta = pq.ParquetFile(path).metadata
    group = meta.row_group(2)
    column = group.column(1)  # flip bytes inside the values of the "s" page
    middle = column.data_page_offset + column.total_compressed_size // 2
    data = bytearray(path.read_bytes())
    data[middle:middle + 8] = bytes(b ^ 0x5A for b in data[middle:middle + 8])
    path.write_bytes(bytes(data))
    fn = _ReadParquetFile(ParquetOptions(), [F("i", "int64"), F("s", "string")],
                          columnar=columnar)
    records, letters, counts = run(fn, path)
    assert [r for r, _ in records] == [*range(1, 2001), *range(3001, 5001)]
    assert all(rec["i"] == row - 1 for row, rec in records)
    [lost] = letters
    first = min(group.column(c).data_page_offset for c in range(group.num_columns))
    span = sum(group.column(c).total_compressed_size for c in range(group.num_columns))
    assert (lost["kind"], lost["row"], lost["rows"], lost["offset"], lost["bytes"]) == (
        "unread", 2001, 1000, first, span)
    assert counts["read"] + counts["unread_rows"] == total
    assert counts["rejected_at_read"] == 0 and counts["unread_files"] == 1


def test_truncated_parquet_is_unread_as_a_whole(tmp_path):
    path = tmp_path / "cut.parquet"
    _parquet(path, groups=2)
    data = path.read_bytes()[:-100]  # the footer is gone
    path.write_bytes(data)
    records, letters, counts = run(_ReadParquetFile(ParquetOptions(), []), path)
    assert not records
    assert [(d["kind"], d["offset"], d["bytes"], d["rows"], d["row"]) for d in letters] == [
        ("unread", 0, len(data), None, None)]
    assert counts["unread_bytes"] == len(data) and counts["read"] == 0


def test_parquet_footer_over_the_limit_is_not_read(tmp_path):
    path = tmp_path / "wide.parquet"
    _parquet(path, groups=50, rows=10)  # 50 row groups: a footer of some KiB
    records, letters, _ = run(_ReadParquetFile(ParquetOptions(max_record_bytes=KIB), []), path)
    assert not records and "footer is" in letters[0]["reason"]
    with pytest.raises(ValueError, match="footer is"):
        top_level_fields("parquet", str(path), KIB)
    assert top_level_fields("parquet", str(path)) == ["i", "s"]


# -- Avro -------------------------------------------------------------------------------------

SCHEMA = {"type": "record", "name": "R",
          "fields": [{"name": "i", "type": "long"}, {"name": "s", "type": "string"}]}


def _avro(path, codec="null", n=3000):
    rows = [{"i": i, "s": f"row {i}"} for i in range(n)]
    with open(path, "wb") as handle:
        fastavro.writer(handle, fastavro.parse_schema(SCHEMA), rows, codec=codec,
                        sync_interval=2000)
    with open(path, "rb") as handle:
        blocks = [(b.offset, b.size, b.num_records) for b in fastavro.block_reader(handle)]
    assert len(blocks) > 10
    return rows, blocks  # (offset, whole span, records) per block


def _check_avro(path, rows, lost_blocks, blocks, exact_bytes=True, **options):
    records, letters, counts = run(_ReadAvroFile(AvroOptions(**options), []), path)
    lost_rows = set()
    before = 0
    for offset, _, n in blocks:
        if offset in lost_blocks:
            lost_rows.update(range(before + 1, before + n + 1))
        before += n
    assert [r for r, _ in records] == [r for r in range(1, len(rows) + 1)
                                       if r not in lost_rows]
    assert all(rec == rows[r - 1] for r, rec in records)
    assert counts["read"] + counts["unread_rows"] == len(rows)
    if exact_bytes:
        assert counts["unread_bytes"] == sum(size for offset, size, _ in blocks
                                             if offset in lost_blocks)
    return letters, counts


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_avro_damaged_sync_marker_loses_one_block(tmp_path, codec):
    path = tmp_path / "sync.avro"
    rows, blocks = _avro(path, codec)
    offset, size, n = blocks[4]
    data = bytearray(path.read_bytes())
    data[offset + size - 5] ^= 0xFF  # inside block 4's trailing sync marker
    path.write_bytes(bytes(data))
    letters, counts = _check_avro(path, rows, {offset}, blocks)
    assert [(d["kind"], d["offset"], d["bytes"], d["rows"]) for d in letters] == [
        ("unread", offset, size, n)]


def test_avro_block_that_cannot_be_decoded_loses_its_records(tmp_path):
    path = tmp_path / "data.avro"
    rows, blocks = _avro(path, "deflate")
    offset, size, n = blocks[7]
    data = bytearray(path.read_bytes())
    data[offset + 4:offset + 24] = b"\xff" * 20  # the deflate stream (reserved block type)
    path.write_bytes(bytes(data))
    letters, _ = _check_avro(path, rows, {offset}, blocks)
    assert letters[0]["rows"] == n and "cannot be decoded" in letters[0]["reason"]


def test_avro_wrong_block_size_resyncs_at_the_next_marker(tmp_path):
    path = tmp_path / "size.avro"
    rows, blocks = _avro(path)
    offset, size, n = blocks[3]
    data = bytearray(path.read_bytes())
    count_bytes = len(_varint(n))
    data[offset + count_bytes] = 0x02  # the size varint now says 1 byte
    path.write_bytes(bytes(data))
    letters, counts = _check_avro(path, rows, {offset}, blocks)
    assert letters[0]["offset"] == offset and letters[0]["rows"] == n
    assert "reading goes on at the next sync marker" in letters[0]["reason"]


def test_avro_block_over_the_limit_is_skipped_unread(tmp_path):
    path = tmp_path / "big.avro"
    rows = [{"i": i, "s": ("x" * 3000 if i == 500 else f"row {i}")} for i in range(2000)]
    with open(path, "wb") as handle:
        fastavro.writer(handle, fastavro.parse_schema(SCHEMA), rows, sync_interval=2000)
    with open(path, "rb") as handle:
        blocks = [(b.offset, b.size, b.num_records) for b in fastavro.block_reader(handle)]
    big = [b for b in blocks if b[1] > 2500]
    assert len(big) == 1
    letters, _ = _check_avro(path, rows, {big[0][0]}, blocks, max_record_bytes=2500)
    assert "larger than source.max_record_bytes (2500)" in letters[0]["reason"]


def test_avro_truncated_and_unreadable_files(tmp_path):
    path = tmp_path / "cut.avro"
    rows, blocks = _avro(path, "deflate")
    offset, size, n = blocks[-3]
    data = path.read_bytes()[:offset + size // 2]  # the file ends inside a block
    path.write_bytes(data)
    letters, counts = _check_avro(path, rows[:sum(b[2] for b in blocks[:-2])],
                                  {offset}, blocks[:-2], exact_bytes=False)
    assert counts["unread_bytes"] == len(data) - offset and letters[0]["rows"] == n
    junk = tmp_path / "junk.avro"
    junk.write_bytes(b"Obj\x01" + b"\xff" * 50)
    records, letters, counts = run(_ReadAvroFile(AvroOptions(), []), junk)
    assert not records and [(d["offset"], d["bytes"], d["rows"]) for d in letters] == [
        (0, 54, None)]


def test_avro_read_on_direct_runner(tmp_path):
    path = tmp_path / "sync.avro"
    rows, blocks = _avro(path)
    offset, size, n = blocks[2]
    data = bytearray(path.read_bytes())
    data[offset + size - 1] ^= 0xFF
    path.write_bytes(bytes(data))
    with test_pipeline.TestPipeline() as p:
        out = p | beam.Create([str(path)]) | ReadAvroFiles(AvroOptions(), [F("i", "int64")])
        assert_that(out[COUNTS] | beam.Filter(lambda c: c[0] in ("read", "unread_rows")),
                    equal_to([("read", len(rows) - n), ("unread_rows", n)]))


def _varint(value):
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# -- launch-time probes -----------------------------------------------------------------------

class _Counting(io.RawIOBase):
    """A file whose reads are counted."""

    def __init__(self, path):
        self._file = open(path, "rb")
        self.read_bytes = 0

    def readable(self):
        return True

    def readinto(self, buffer):
        n = self._file.readinto(buffer)
        self.read_bytes += n
        return n

    def close(self):
        self._file.close()
        super().close()


@pytest.fixture
def counted(monkeypatch):
    handles = []

    def open_read(path):
        handle = io.BufferedReader(_Counting(path), 8192)
        handles.append(handle.raw)
        return handle

    monkeypatch.setattr(build.storage, "open_read", open_read)
    return handles


def test_jsonl_probe_reads_at_most_the_limit_of_a_huge_line(tmp_path, counted):
    path = tmp_path / "probe.jsonl"
    with open(path, "wb") as handle:
        handle.write(b'{"a": 1, "b": 2}\n{"c": "')
        handle.write(b"x" * (40 << 20))
        handle.write(b'"}\n{"d": 4}\n')
    config = parse_config({
        "name": "t", "source": {"format": "jsonl", "path": str(path),
                                "max_record_bytes": "64KiB"},
        "features": {"a": {"type": "int64"}}, "output": {"path": str(tmp_path / "out")}})
    started = time.perf_counter()
    assert build_inputs.first_columns(config, str(path)) == ["a", "b"]
    assert time.perf_counter() - started < 5
    assert counted[0].read_bytes <= 64 * KIB + 2 * 8192


def test_csv_probe_reads_at_most_the_limit_of_a_huge_header(tmp_path, counted):
    path = tmp_path / "probe.csv"
    path.write_bytes(b"a," + b"b" * (8 << 20) + b"\n1,2\n")
    config = parse_config({
        "name": "t", "source": {"format": "csv", "path": str(path), "max_record_bytes": 4096},
        "features": {"a": {"type": "int64"}}, "output": {"path": str(tmp_path / "out")}})
    assert build_inputs.first_columns(config, str(path)) == []
    assert counted[0].read_bytes <= 4096 + 2 * 8192 + 64 * KIB
    small = tmp_path / "small.csv"
    small.write_bytes(b'\xef\xbb\xbfa,"b\nc"\n1,2\n')
    assert build_inputs.first_columns(config, str(small)) == ["a", "b\nc"]


def test_avro_probe_refuses_a_header_over_the_limit(tmp_path):
    path = tmp_path / "meta.avro"
    with open(path, "wb") as handle:
        fastavro.writer(handle, fastavro.parse_schema(SCHEMA), [{"i": 1, "s": "x"}],
                        metadata={"note": "n" * 5000})
    assert top_level_fields("avro", str(path)) == ["i", "s"]
    with pytest.raises(Exception, match="max_record_bytes"):
        top_level_fields("avro", str(path), KIB)
    records, letters, _ = run(_ReadAvroFile(AvroOptions(max_record_bytes=KIB), []), path)
    assert not records and letters[0]["bytes"] == path.stat().st_size
    assert json.dumps(letters)  # dead letters are JSON
