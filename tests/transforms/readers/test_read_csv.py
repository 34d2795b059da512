"""ReadCsvFiles: the columnar path (pyarrow.csv + pyarrow.compute, csv_columnar) gives the same
records, row numbers, dead letters and counts as the per-row path (Python's csv module) on
tricky files, block size by block size; and both give the values we expect."""

from __future__ import annotations

import datetime
import decimal
import math
import re
import struct

import apache_beam as beam
import pyarrow as pa
import pytest
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_tfrecords.pipelines.config import CsvOptions
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F
from beam_tfrecords.transforms.readers import csv_columnar as cc
from beam_tfrecords.transforms.readers import csv_typing
from beam_tfrecords.transforms.readers import read_csv as rc
from beam_tfrecords.transforms.readers.framework import COUNTS, REJECTED, UNREAD_COUNTS, RecordChunk
from beam_tfrecords.transforms.readers.read_csv import (
    CellError,
    ReadCsvFiles,
    _ReadCsvFile,
    parse_cell,
)
from beam_tfrecords.transforms.readers.read_parquet import needed_columns

FEATURES = [F("i", "int64"), F("f", "float"), F("s", "string"), F("b", "bytes", missing="omit")]
BLOCKS = [7, 64, 300, cc.BLOCK_BYTES]  # tiny blocks cut almost every row apart
DEFAULTS = CsvOptions()


def _plain(value):
    """Floats by their bits, so NaN equals NaN and -nan differs from nan."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def read(path, features=FEATURES, options=DEFAULTS, **kwargs):
    """Drive the DoFn by hand: ([(row, record)], [dead letter], [counts], [chunk])."""
    records, rejects, counts, chunks = [], [], [], []
    for out in _ReadCsvFile(options, features, **kwargs).process(str(path)):
        if isinstance(out, RecordChunk):
            chunks.append(out)
            records += [(out.row_number(i), r) for i, r in enumerate(out.records())]
        elif out.tag == REJECTED:
            rejects.append(out.value)
        else:
            assert out.tag == COUNTS
            counts.append(out.value)
    # All six counts, every time; the unread ones are shown only when not zero.
    assert [name for name, _ in counts] == ["read", "rejected_at_read", *UNREAD_COUNTS]
    counts = [(name, n) for name, n in counts if n or name not in UNREAD_COUNTS]
    return _plain(records), rejects, counts, chunks


def _exact(value):
    """Decimals by their repr (12.30 is not 12.3 in a dead letter), the rest as they are."""
    if isinstance(value, decimal.Decimal):
        return ("decimal", repr(value))
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_exact(v) for v in value)
    return value


def both(path, features=FEATURES, options=DEFAULTS, blocks=BLOCKS):
    """The per-row result, after checking every columnar block size gives the same."""
    rows = read(path, features, options, columnar=False)
    assert all(c.batch is None for c in rows[3])
    for size in blocks:
        fast = read(path, features, options, block_bytes=size)
        assert _exact(fast[0]) == _exact(rows[0]), size
        assert sorted(fast[1], key=lambda d: d["row"]) == sorted(rows[1], key=lambda d: d["row"])
        assert fast[2] == rows[2], size
    return rows


def _write(tmp_path, data: bytes, name="in.csv"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


TRICKY = (
    b"\xef\xbb\xbfi,f,s,b\r\n"                      # BOM, CRLF
    b"1,1.5,plain,x\r\n"                             # 1
    b'TRUE,nan,"two\r\nlines, and a ""quote""",y\r\n'  # 2: quoted CRLF, delimiter, quotes
    b"false,-inf,NA,\r\n"                            # 3: null markers ("NA", "")
    b"-7,1e-3,\xc3\xa9t\xc3\xa9,z\r\n"               # 4: UTF-8
    b"+5,-nan,s,\r\n"                                # 5: '+', -nan (sign bit kept)
    b"x,1,s,\r\n"                                    # 6: not an integer
    b"1,2\r\n"                                       # 7: malformed
    b"\r\n"                                          # 8: empty line -> malformed
    b"2,1e400,s,\r\n"                                # 9: beyond float64
    b"3,.5E+2,\xff\xfe,\r\n"                         # 10: invalid UTF-8 in a string feature
    b" 4 ,Infinity,s,\r\n"                           # 11: spaces around an int
    b"0x1f,1.,s,\r\n"                                # 12: hex is not an integer
    b"99999999999999999999,0,s,\r\n"                 # 13: beyond int64: kept, encoder rejects
    b"\xd9\xa3,1,a\"b,\r\n"                          # 14: an Arabic-Indic digit; a literal quote
    b"5,2.5,last,w"                                  # 15: no final line end
)


def test_tricky_file_same_on_both_paths_and_as_expected(tmp_path):
    path = _write(tmp_path, TRICKY)
    records, rejects, counts, _ = both(path, options=CsvOptions(null_values=("", "NA")))
    got = dict(records)
    assert got[1] == {"i": 1, "f": _plain(1.5), "s": "plain", "b": "x"}
    assert got[2] == {"i": 1, "f": _plain(math.nan), "s": 'two\r\nlines, and a "quote"',
                      "b": "y"}
    assert got[3] == {"i": 0, "f": _plain(-math.inf), "s": None, "b": None}
    assert got[4]["s"] == "été" and got[4]["i"] == -7
    assert got[5]["i"] == 5 and got[5]["f"] == _plain(float("-nan"))
    assert got[11]["i"] == 4 and got[11]["f"] == _plain(math.inf)
    assert got[13]["i"] == 99999999999999999999
    assert got[14]["i"] == 3 and got[14]["s"] == 'a"b'
    assert got[15] == {"i": 5, "f": _plain(2.5), "s": "last", "b": "w"}
    by_row = {d["row"]: d for d in rejects}
    assert sorted(by_row) == [6, 7, 8, 9, 10, 12]
    assert by_row[6]["feature"] == "i" and "not an integer" in by_row[6]["reason"]
    assert "malformed line: 2 cells, the header has 4" in by_row[7]["reason"]
    assert "malformed line: 0 cells" in by_row[8]["reason"]
    assert by_row[9]["feature"] == "f" and "outside the float32 range" in by_row[9]["reason"]
    assert by_row[10]["feature"] == "s" and "not valid UTF-8" in by_row[10]["reason"]
    assert by_row[10]["value"] == repr(b"\xff\xfe")
    assert by_row[12]["reason"] == "column 'i': not an integer or true/false"
    assert counts == [("read", 15), ("rejected_at_read", 6)]


def test_a_file_of_many_blocks_yields_batches_with_row_numbers(tmp_path):
    lines = [b"i,f,s,b\n"]
    for n in range(1, 3001):
        if n % 997 == 0:
            lines.append(b"oops,1,x,\n")  # a rejected row part way through a block
        elif n == 1500:
            lines.append(b'1,2,"a quoted\nnewline",\n')
        else:
            lines.append(b"%d,%d.25,w%d,\n" % (n, n, n % 7))
    path = _write(tmp_path, b"".join(lines))
    records, rejects, counts, _ = both(path, blocks=[4096, 20000, cc.BLOCK_BYTES])
    assert [d["row"] for d in rejects] == [997, 1994, 2991]
    assert counts == [("read", 3000), ("rejected_at_read", 3)]
    assert records[0] == (1, {"i": 1, "f": _plain(1.25), "s": "w1", "b": None})
    assert dict(records)[1500]["s"] == "a quoted\nnewline"
    _, _, _, chunks = read(path, block_bytes=4096)
    assert len(chunks) > 5 and all(c.batch is not None and not c.rows for c in chunks)
    assert sum(len(c) for c in chunks) == 2997
    # a chunk holding a rejected row's neighbours numbers them explicitly
    assert any(c.row_numbers for c in chunks)
    schema = chunks[0].batch.schema
    assert schema.types == [pa.int64(), pa.float64(), pa.string(), pa.string()]
    assert all(c.batch.schema == schema for c in chunks)


@pytest.mark.parametrize("data", [
    b"",                          # empty file
    b"\xef\xbb\xbf",              # only a BOM
    b"i,f,s,b",                   # header only, no line end
    b"i,f,s,b\r\n",               # header only
    b"\n1,2,3,4\n",               # an empty header: every row is malformed
    b"i,f,s,s\n1,2,a,b\n",        # duplicate names: the per-row reader's dict
    b"i,f,\xffs,b\n1,2,3,4\n",    # the header is not UTF-8
    b'"i","f\nf",s,b\n1,2,3,4\n',  # a quoted header with a newline
    b"i,f,s,b\n1,2,3,4\n\n",      # a trailing empty line is a (malformed) row
    b"i,f,s,b\r1,2,3,4\r5,6,7,8\r",  # old Mac line ends
    b"i,f,s,b\n1,2,3,\xef\xbb\xbfb\n",  # a BOM inside the file is kept
    b"i,f,s,b\n1,2,3,4\x00\n",    # NUL is a character
])
def test_edge_files_same_on_both_paths(tmp_path, data):
    both(_write(tmp_path, data))


# -- only the named columns (extra_fields) ---------------------------------------------------

def named(path, features, extra, monkeypatch, options=DEFAULTS, blocks=BLOCKS):
    """Reading only the columns ``features`` and ``extra`` name, per row (with and without
    pick_cells on every row) and block size by block size: the per-row records of reading
    every column cut down to those columns, and the same dead letters and counts."""
    every = read(path, features, options, columnar=False)
    names = set(needed_columns(features, extra))
    expected = [(row, {k: v for k, v in record.items() if k in names})
                for row, record in every[0]]
    letters = sorted(every[1], key=lambda d: (d["row"], d["kind"]))
    for pick in (rc._PICK_BYTES, 0):
        monkeypatch.setattr(rc, "_PICK_BYTES", pick)
        for kwargs in ({"columnar": False}, *({"block_bytes": size} for size in blocks)):
            got = read(path, features, options, extra_fields=extra, **kwargs)
            assert got[0] == expected, kwargs
            assert sorted(got[1], key=lambda d: (d["row"], d["kind"])) == letters, kwargs
            assert got[2] == every[2], kwargs
    return every


@pytest.mark.parametrize("data", [
    TRICKY,
    b"i,f,s,s\n1,2,a,b\n3,x,c,d\n",  # duplicate names
    b"i,f,s,b\r1,2,3,4\r5,6,7,8\r",  # old Mac line ends
    b"i,f,s,b\n1,2,3,4\n\n5,6\n7,8,9,10,11\n",  # an empty line, a cell short, one too many
    b"i,f,s,b\n1,2,3\n4,5,6,7,8\n",  # as many delimiters as two good rows have
    b'i,f,s,b\n1,"a,\nb",3,"x ""y"""\n2,3,"4",5',  # quoted cells in named and other columns
    b"i,f,s,b\n1,\xff,3,4\n2,3,4,5\n",  # invalid UTF-8 in a column no feature reads
])
def test_named_columns_only_same_records_and_dead_letters(tmp_path, monkeypatch, data):
    named(_write(tmp_path, data), [F("i", "int64"), F("s", "string")], ("b",), monkeypatch,
          options=CsvOptions(null_values=("", "NA")))


def _wide(rng, ncols: int, rows: int, crlf: bool, quirks: bool) -> tuple[bytes, list[str]]:
    """A CSV of ``ncols`` columns where features read ``i``, ``f``, ``s`` (at random places),
    its other cells quoted, multi-line, empty or not ASCII; with ``quirks``, rows that are
    dead letters (a cell short or too many, invalid UTF-8 in an unread column, a named cell
    that is no number, an empty line) and a quote inside an unquoted cell."""
    names = [f"c{k}" for k in range(ncols)]
    spots = rng.sample(range(ncols - 1), 3)
    if crlf:  # the last column is read: its cell ends before the CR of a CRLF
        spots[2] = ncols - 1
    for name, at in zip("ifs", spots):
        names[at] = name
    end = b"\r\n" if crlf else b"\n"
    other = [b"", b"7", b"x y", b'"a,b"', b'"two' + end + b'lines"', b'"q ""x"""', "é".encode()]
    lines = [",".join(names).encode() + end]
    for n in range(1, rows + 1):
        cells = []
        for name in names:
            if name == "i":
                cells.append(b"%d" % n)
            elif name == "f":
                cells.append(b"%d.5" % n)
            elif name == "s":
                cells.append(rng.choice(other))
            else:
                cells.append(rng.choice(other) if rng.random() < 0.2 else b"%d" % rng.randrange(9))
        if quirks and n % 17 == 0:
            kind = n // 17 % 5
            if kind == 0:
                del cells[rng.randrange(ncols)]
            elif kind == 1:
                cells.append(b"extra")
            elif kind == 2:
                cells[names.index(rng.choice([c for c in names if c[0] == "c"]))] = b"\xff\xfe"
            elif kind == 3:
                cells[names.index("i")] = b"oops"
            else:
                lines.append(end)
        if quirks and n == rows - 3:
            cells[names.index("c0") if "c0" in names else 0] = b'5" tall'
        lines.append(b",".join(cells) + end)
    return b"".join(lines), names


@pytest.mark.parametrize("seed", range(4))
def test_wide_rows_named_columns_only(tmp_path, monkeypatch, seed):
    import random

    rng = random.Random(seed)
    data, names = _wide(rng, ncols=60, rows=150, crlf=seed % 2 == 1, quirks=seed < 3)
    features = [F("i", "int64"), F("f", "float"), F("s", "string")]
    every = named(_write(tmp_path, data), features, (), monkeypatch,
                  blocks=[7, 64, 300, cc.BLOCK_BYTES])  # x20: blocks of ~block_bytes kept
    if seed < 3:
        reasons = " | ".join(d["reason"] for d in every[1])
        assert "malformed line: 59 cells" in reasons and "malformed line: 61 cells" in reasons
        assert "malformed line: 0 cells" in reasons and "not an integer" in reasons
        assert "not valid UTF-8" in reasons and "column 'c" in reasons


def test_a_wide_file_makes_values_of_its_named_cells_only(tmp_path, monkeypatch):
    """2,000 columns of which features read 3: the cells that become values -- Arrow's, csv's
    and pick_cells' -- are those 3 per row, and every cell of the header and of a rejected
    row (its dead letter shows them), not 2,000 per row. Reading every column made 2,000."""
    ncols, rows = 2000, 300
    names = [f"c{k}" for k in range(ncols)]
    names[0], names[ncols // 2], names[-1] = "i", "f", "s"
    lines = [",".join(names).encode() + b"\n"]
    for n in range(1, rows + 1):
        cells = [b"%d" % (n % 10)] * ncols
        cells[0], cells[ncols // 2], cells[-1] = b"%d" % n, b"0.5", b"w"
        if n % 50 == 0:  # a quoted cell: that block goes to Arrow, not to the numpy split
            cells[7] = b'"a,b"'
        if n == 123:
            cells[0] = b"oops"
        lines.append(b",".join(cells) + b"\n")
    path = _write(tmp_path, b"".join(lines))
    made = []
    parse, csv_cells, pick = cc.BlockParser.parse, rc._csv_cells, cc.pick_cells

    def counted_parse(self, block):
        batch = parse(self, block)
        made.append(0 if batch is None else batch.num_columns * batch.num_rows)
        return batch

    def counted_csv_cells(options):
        cells_of = csv_cells(options)
        return lambda text: made.append(len(cells := cells_of(text))) or cells

    def counted_pick(*args):
        cells = pick(*args)
        made.append(0 if cells is None else len(cells))
        return cells

    plain = cc.BlockParser._plain
    split = []
    monkeypatch.setattr(cc.BlockParser, "_plain", lambda self, b: split.append(1) or plain(self, b))
    monkeypatch.setattr(cc.BlockParser, "parse", counted_parse)
    monkeypatch.setattr(rc, "_csv_cells", counted_csv_cells)
    monkeypatch.setattr(cc, "pick_cells", counted_pick)
    features = [F("i", "int64"), F("f", "float"), F("s", "string")]
    # 100-byte blocks grow to 66 KB (~16 rows): with and without a quote, numpy's and Arrow's
    for kwargs in ({"columnar": False}, {"block_bytes": 100}, {}):
        made.clear()
        records, rejects, counts, _ = read(path, features, extra_fields=(), **kwargs)
        assert counts == [("read", rows), ("rejected_at_read", 1)], kwargs
        assert [d["row"] for d in rejects] == [123] and len(records) == rows - 1
        assert records[0] == (1, {"i": 1, "f": _plain(0.5), "s": "w"})
        assert sum(made) <= 3 * rows + 2 * ncols, kwargs  # the header, the rejected row
    assert split  # numpy split some blocks


def test_no_column_named_keeps_the_first_so_rows_still_count(tmp_path, monkeypatch):
    path = _write(tmp_path, b"a,b,c\n1,2,3\n4,5,6\n")
    records, _, counts, _ = read(path, [F("x", "int64")], extra_fields=())
    assert records == [(1, {"a": "1"}), (2, {"a": "4"})]
    assert counts == [("read", 2), ("rejected_at_read", 0)]
    named(path, [F("x", "int64"), F("a", "string")], (), monkeypatch)


def test_empty_and_header_only_files_count_zero(tmp_path):
    for data in (b"", b"i,f,s,b\n"):
        records, rejects, counts, _ = both(_write(tmp_path, data))
        assert (records, rejects, counts) == ([], [], [("read", 0), ("rejected_at_read", 0)])


def test_header_that_is_not_utf8_leaves_the_file_unread(tmp_path):
    data = b"i,\xff\n1,2\n"
    _, rejects, counts, _ = both(_write(tmp_path, data))
    assert [(d["row"], d["kind"], d["offset"], d["bytes"], d["rows"],
             "header is not valid UTF-8" in d["reason"]) for d in rejects] == [
        (0, "unread", 0, len(data), None, True)]
    assert counts == [("read", 0), ("rejected_at_read", 0), ("unread_files", 1),
                      ("unread_bytes", len(data)), ("unread_regions", 1)]


def test_malformed_quote_mid_file_is_one_dead_letter_and_reading_goes_on(tmp_path):
    rows = [b"%d,1,s,\n" % n for n in range(1, 400)]
    rows[199] = b'200,2,"a"b,4\n'  # csv: ',' expected after '"'
    records, rejects, counts, _ = both(_write(tmp_path, b"i,f,s,b\n" + b"".join(rows)))
    assert [r for r, _ in records] == [*range(1, 200), *range(201, 400)]
    assert [(d["row"], d["kind"], "malformed CSV row: ',' expected after '\"'" in d["reason"])
            for d in rejects] == [(200, "rejected", True)]
    assert counts == [("read", 399), ("rejected_at_read", 1)]


def test_unterminated_quote_is_unread_from_its_row_to_the_end(tmp_path):
    before = b"i,f,s,b\n1,2,3,4\n"
    data = before + b'1,2,"unclosed\n5,6,7,8\n9,9,9,9\n'
    records, rejects, counts, _ = both(_write(tmp_path, data))
    assert [r for r, _ in records] == [1]
    assert [(d["row"], d["kind"], d["offset"], d["bytes"], d["rows"], d["value"],
             d["record"], d["feature"]) for d in rejects] == [
        (2, "unread", len(before), len(data) - len(before), None, "", "", "")]
    assert "unterminated quoted field" in rejects[0]["reason"]
    assert counts == [("read", 1), ("rejected_at_read", 0), ("unread_files", 1),
                      ("unread_bytes", len(data) - len(before)), ("unread_regions", 1)]


def test_unusual_quotes_between_clean_blocks(tmp_path):
    rows = [b"%d,1,s,\n" % n for n in range(1, 200)]
    rows[150] = b'151,1,5" tall,\n'  # a quote inside an unquoted field is a character
    rows[160] = b'161,1,"q ""x"" q",\n'
    records, rejects, _, _ = both(_write(tmp_path, b"i,f,s,b\n" + b"".join(rows)),
                                  blocks=[64, 500, cc.BLOCK_BYTES])
    assert not rejects
    got = dict(records)
    assert got[151]["s"] == '5" tall' and got[161]["s"] == 'q "x" q'


def test_a_cell_over_the_old_csv_field_limit_is_a_value(tmp_path):
    """Python's csv refuses fields over 128 KiB by default; a valid 150 KB cell is read."""
    cell = "é" + "x" * 150_000 + '"q"'
    data = ('i,f,s,b\n1,2,"' + cell.replace('"', '""') + '",\n2,3,ok,\n').encode()
    records, rejects, counts, _ = both(_write(tmp_path, data), blocks=[4096, cc.BLOCK_BYTES])
    assert not rejects and counts == [("read", 2), ("rejected_at_read", 0)]
    assert records[0][1]["s"] == cell and records[1][1]["s"] == "ok"


@pytest.mark.parametrize("quoted", [False, True])
def test_rows_over_max_record_bytes_are_rejected_and_reading_goes_on(tmp_path, quoted):
    big = b'"' + b"x" * 60 + b'\n' + b"y" * 20 + b'"' if quoted else b"x" * 80
    data = b"i,f,s,b\n1,2,ok,\n2,3," + big + b",\n3,4,ok,\n"
    options = CsvOptions(max_record_bytes=40)
    records, rejects, counts, _ = both(_write(tmp_path, data), options=options,
                                       blocks=[16, 40, 64, cc.BLOCK_BYTES])
    assert [r for r, _ in records] == [1, 3]
    assert [(d["row"], d["kind"]) for d in rejects] == [(2, "rejected")]
    size = len(b"2,3," + big + b",\n")
    assert (f"row of {size} bytes is larger than source.max_record_bytes (40)"
            in rejects[0]["reason"])
    assert counts == [("read", 3), ("rejected_at_read", 1)]


DATED = [F("id", "int64"), F("n", "int64"), F("when", "int64", unit="ms", format="iso8601"),
         F("day", "int64", unit="days", format="%d/%m/%Y")]


def test_whole_numbers_and_dates_same_on_both_paths(tmp_path):
    """Whole numbers in decimal text and date text become the int64 a Parquet double or
    timestamp of the same value gives -- on the per-row and the columnar path alike, and with
    the same dead letters naming the column and the value (issue #18, item 2)."""
    rows = [b"id,n,when,day\n"]
    for k in range(60):  # clean rows, so that most blocks are typed column-wise
        rows.append(b"%d,%d.0,2024-01-01T00:00:%02dZ,%02d/01/2024\n" % (k, k, k, k % 28 + 1))
    rows += [
        b"100,517.0,2024-03-01,01/03/2024\n",
        b"101,1e3,2024-03-01T12:34:56.5+02:00,1/3/2024\n",  # unpadded: strptime reads it
        b"102,-2.0E+2,2024-03-01 12:34:56.123456789Z,20240301\n",  # a number, not a date
        b"103, 12 ,1969-12-31T23:59:59.9995,31/12/1969\n",  # floors to the millisecond
        b"104,517.5,2024-03-01,01/03/2024\n",  # not a whole number
        b"105,1,2024-02-30,01/03/2024\n",  # no such day
        b"106,1,1709251200000,01/03/2024\n",  # a number is a number here
        b"107,1,2024-03-01,30/02/2024\n",
        b"108,9223372036854775808.0,2024-03-01,01/03/2024\n",
        b"109,1,soon,01/03/2024\n",
    ]
    records, rejects, counts, _ = both(_write(tmp_path, b"".join(rows)), features=DATED)
    got = {record["id"]: record for _, record in records}
    assert got[0] == {"id": 0, "n": 0, "when": 1704067200000, "day": 19723}
    assert got[100] == {"id": 100, "n": 517, "when": 1709251200000, "day": 19783}
    assert got[101] == {"id": 101, "n": 1000, "when": 1709289296500, "day": 19783}
    assert got[102] == {"id": 102, "n": -200, "when": 1709296496123, "day": 20240301}
    assert got[103] == {"id": 103, "n": 12, "when": -1, "day": -1}
    assert got[106]["when"] == 1709251200000
    reasons = {d["row"] + 39: (d["feature"], d["reason"], d["value"]) for d in rejects}  # ids
    assert sorted(reasons) == [104, 105, 107, 108, 109]
    assert reasons[104] == ("n", "column 'n': has a fractional part; refusing to truncate",
                            "'517.5'")
    assert reasons[105][:2] == ("when", "column 'when': not an integer or true/false, and not "
                                        "a valid date: day is out of range for month")
    assert reasons[107][0] == "day" and "format '%d/%m/%Y'" in reasons[107][1]
    assert reasons[108][1] == "column 'n': outside the int64 range [-2**63, 2**63-1]"
    assert reasons[109][0] == "when" and "not an ISO-8601 date or datetime" in reasons[109][1]
    assert counts == [("read", 70), ("rejected_at_read", 5)]


def test_list_features_headerless_files_and_other_delimiters(tmp_path):
    lists = [F("i", "int64"), F("v", "float", shape=(-1,))]
    path = _write(tmp_path, b'i,v\n1,"[1, 2.5]"\n2,[]\n3,nope\n')
    records, rejects, _, _ = both(path, lists)
    assert records == [(1, {"i": 1, "v": [1, _plain(2.5)]}), (2, {"i": 2, "v": []})]
    assert [d["row"] for d in rejects] == [3] and "JSON array" in rejects[0]["reason"]
    tsv = _write(tmp_path, b"1\t2.5\tx\ty\n2\tNA\tz\t\n")
    opts = CsvOptions(delimiter="\t", header=False, columns=("i", "f", "s", "b"),
                      null_values=("NA",))
    records, _, _, _ = both(tsv, options=opts)
    assert records == [(1, {"i": 1, "f": _plain(2.5), "s": "x", "b": "y"}),
                       (2, {"i": 2, "f": None, "s": "z", "b": ""})]


@pytest.mark.slow
def test_read_csv_transform_emits_batches_rejects_and_counts(tmp_path):
    path = _write(tmp_path, b"i,f,s,b\n1,0.5,a,\n2,x,b,\n3,1.5,c,\n")

    def rows(chunk):
        assert chunk.batch is not None and chunk.path == str(path)
        return [(chunk.row_number(k), r) for k, r in enumerate(chunk.records())]

    with test_pipeline.TestPipeline() as p:
        out = p | beam.Create([str(path)]) | ReadCsvFiles(CsvOptions(), FEATURES)
        assert_that(out.records | beam.FlatMap(rows), equal_to([
            (1, {"i": 1, "f": 0.5, "s": "a", "b": None}),
            (3, {"i": 3, "f": 1.5, "s": "c", "b": None})]), label="Records")
        assert_that(out[REJECTED] | beam.Map(lambda d: (d["row"], d["feature"])),
                    equal_to([(2, "f")]), label="Rejects")
        assert_that(out[COUNTS], equal_to([("read", 3), ("rejected_at_read", 1),
                                           *[(name, 0) for name in UNREAD_COUNTS]]),
                    label="Counts")


# -- csv_columnar, directly -------------------------------------------------------------------

@pytest.mark.parametrize("block,clean", [
    (b"a,b\n", True),
    (b'"a","b"\n"c",d\n', True),
    (b'"a ""q""",b\n', True),
    (b'"",""\n', True),
    (b'a,"x\ny"', True),
    (b'a,"unclosed\n', False),
    (b'a,"x"y,b\n', False),
    (b'a,5"\n', False),
    (b'a,5"",b\n', False),
    (b'x"a",b\n', False),
])
def test_quoting_is_clean(block, clean):
    assert cc.quoting_is_clean(block, b'"', b",") is clean


@pytest.mark.parametrize("buf,final,last,first", [
    (b"a\nb\nc", False, 4, 2),
    (b"a\nb\nc", True, 5, 2),
    (b'a\n"b\nc', False, 2, 2),
    (b'"a\nb"\nc\n', False, 8, 6),
    (b"a\r", False, 0, 0),        # maybe half of a CRLF
    (b"a\r", True, 2, 2),
    (b"a\r\nb\r", False, 3, 3),
    (b"abc", False, 0, 0),
])
def test_row_ends(buf, final, last, first):
    assert cc._last_row_end(buf, b'"', final) == last
    assert cc._first_row_end(buf, b'"', final) == first


def test_byte_blocks_cut_whole_rows_and_give_back_the_rest():
    import io

    data = b'\xef\xbb\xbfh\n"1\n2",3\n' + b"x,y\n" * 10
    blocks = cc.ByteBlocks(io.BytesIO(data), b'"', block_bytes=5)
    assert blocks.first_row() == b"h\n"
    assert blocks.next_block() == b'"1\n2",3\n'
    assert blocks.rest().read() == b"x,y\n" * 10
    with pytest.raises(cc.NeedsRows):
        cc.ByteBlocks(io.BytesIO(b'"' + b"z" * 100), b'"', 8, max_pending=32).next_block()


def test_scaled_decimal_text_is_read_exactly_on_both_paths(tmp_path):
    """A CSV cell of a feature with scale: is its exact decimal value, stored times 10**scale
    by the encoder (12.34 -> 1234) or refused there (1.005), never rounded (issue #18)."""
    from beam_tfrecords.transforms.codec.example_codec import ExampleDecoder, ExampleEncoder

    specs = [F("id", "int64"), F("cents", "int64", scale=2)]
    lines = [b"id,cents\n"] + [b"%d,%d.%02d\n" % (k, k, k) for k in range(40)]
    lines += [b"100, 12.34 \n", b"101,7\n", b"102,1e-2\n", b"103,1.005\n", b"104,abc\n"]
    records, rejects, _, _ = both(_write(tmp_path, b"".join(lines)), features=specs)
    encoder, decoder = ExampleEncoder(specs), ExampleDecoder(specs)
    stored, refused = {}, {}
    for _, record in records:
        try:
            stored[record["id"]] = decoder.decode(encoder.encode(record))["cents"]
        except ValueError as err:
            refused[record["id"]] = str(err)
    assert stored[3] == 303 and stored[100] == 1234 and stored[101] == 700
    assert stored[102] == 1
    assert list(refused) == [103] and "more than 2 decimal places" in refused[103]
    assert [(d["feature"], d["reason"]) for d in rejects] == [
        ("cents", "column 'cents': not an integer or true/false")]


SPECIAL = ["true", "FALSE", "True ", "-nan", "+inf", "Infinity", "1e400", "-0", "007", "0x1f",
           "9223372036854775807", "9223372036854775808", "-9223372036854775809", "1_0",
           "4.9406564584124654e-324", "2.4703282292062328e-324", "1.", ".5", ".",
           # whole numbers written as decimals, and near misses (issue #18, item 2)
           "517.0", "1e3", "-2.0E+2", " 12.0 ", "517.5", "1e-400", "1.0000000000000000001",
           "9223372036854775807.0", "9223372036854775808.0", "-9223372036854775808.0", "1e19",
           "\u0663.0", "+5.", "1e999999999",
           # dates and datetimes, for the features with a date format
           "2024-03-01", "2024-03-01T12:34:56.5+02:00", "2024-03-01 12:34:56.123456789Z",
           "2024-02-30", "0000-01-01", "1969-12-31T23:59:59.5", " 2024-03-01 ", "20240301",
           "01/03/2024 12:34", "1/3/2024 12:34", "31/02/2024 00:00", "2300-01-01"]
CELLS = st.one_of(
    st.text(alphabet="0123456789+-.eEnaiftyrulsxTRUEFALS \t\u0663\u00a0\u017f", max_size=12),
    st.sampled_from(SPECIAL),
    st.datetimes(min_value=datetime.datetime(1, 1, 1)).map(str),
    st.datetimes().map(lambda moment: moment.strftime("%d/%m/%Y %H:%M")))
# (dtype, date format): plain int64 and float cells, and int64 cells that may be dates
KINDS = [("int64", None), ("float", None), ("int64", "iso8601"), ("int64", "%d/%m/%Y %H:%M")]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(CELLS, min_size=1, max_size=30), st.sampled_from(KINDS),
       st.sampled_from(["s", "ns", "days"]))
@pytest.mark.slow
def test_type_batch_agrees_with_parse_cell(cells, kind, unit):
    dtype, fmt = kind
    spec = F("c", dtype, unit=unit, format=fmt)
    batch = pa.RecordBatch.from_arrays([pa.array(cells, pa.string())], names=["c"])
    expected = []
    for text in cells:
        try:
            expected.append(("ok", _plain(None if text == "" else parse_cell(spec, text))))
        except CellError as err:
            expected.append(("bad", f"column 'c': {err.reason}"))
    try:
        typed, bad = csv_typing.type_batch(batch, ["c"], {"c": spec}, [""], parse_cell, CellError)
    except cc.NeedsRows:  # only for integers an int64 column cannot hold
        assert any(kind == "ok" and isinstance(v, int) and abs(v) >= 2**63
                   for kind, v in expected)
        return
    values = typed.column(0).to_pylist()
    got = [("bad", bad[k][1]) if k in bad else ("ok", _plain(values[k]))
           for k in range(len(cells))]
    assert got == expected


def _decimal_text(units: int, places: int, style: int) -> str:
    """``units`` / 10**places written with exactly ``places`` decimal places; ``style`` adds a
    plus sign or leading zeros now and then."""
    sign = "-" if units < 0 else ("+" if style == 1 else "")
    whole, fraction = divmod(abs(units), 10**places)
    text = ("00" if style == 2 else "") + str(whole)
    return sign + text + (f".{fraction:0{places}d}" if places else "")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 6), st.lists(st.one_of(st.none(), st.tuples(
    st.one_of(st.integers(-10**20, 10**20), st.integers(-10**40, 10**40)), st.integers(0, 3))),
    min_size=1, max_size=20), st.sampled_from([1, 2, 3, 18]), st.data())
@pytest.mark.slow
def test_decimal_cells_of_a_scaled_feature_are_parse_cells_decimals(places, drawn, scale,
                                                                    data):
    """A block whose cells share their decimal places is typed column-wise, each value the
    Decimal parse_cell gives (its repr too); any other block is left to the per-row reader."""
    cells = ["" if d is None else _decimal_text(d[0], places, d[1]) for d in drawn]
    if data.draw(st.booleans()):  # now and then a cell that sends the block per row
        cells[data.draw(st.integers(0, len(cells) - 1))] = data.draw(st.sampled_from(
            ["-0", "-0.00", "1e3", " 1.00", "true", "1.5", "12", "1.", ".5", "nan", "x"]))
    spec = F("c", "int64", scale=scale)
    batch = pa.RecordBatch.from_arrays([pa.array(cells, pa.string())], names=["c"])
    try:
        typed, bad = csv_typing.type_batch(batch, ["c"], {"c": spec}, [""], parse_cell, CellError)
    except cc.NeedsRows:
        present = [c for c in cells if c]
        # Text is judged by its length for Arrow's cast (text_values.decimal_text): a sign,
        # leading zeros and the point count, so 39 characters go per row even when the
        # value's digits would fit.
        longest = max(len(c) for c in present) if present else 0
        assert (any(not re.fullmatch(r"[+-]?[0-9]+(\.[0-9]+)?", c) or
                    re.fullmatch(r"-[0.]*", c) for c in present)
                or len({len(c.partition(".")[2]) for c in present}) > 1 or longest > 38), cells
        return
    assert bad == {}
    want = [None if c == "" else _exact(parse_cell(spec, c)) for c in cells]
    assert [_exact(v) for v in typed.column(0).to_pylist()] == want


def test_a_block_of_prices_with_scale_is_typed_column_wise():
    spec = F("cents", "int64", scale=2)
    batch = pa.RecordBatch.from_arrays([pa.array(["12.34", "0.50", "", "-7.00"])], names=["p"])
    typed, bad = csv_typing.type_batch(batch, ["p"], {"p": spec}, [""], parse_cell, CellError)
    assert typed.column(0).type == pa.decimal128(38, 2) and bad == {}
    assert typed.column(0).to_pylist() == [decimal.Decimal("12.34"), decimal.Decimal("0.50"),
                                           None, decimal.Decimal("-7.00")]


ROW_CELLS = st.one_of(
    st.text(alphabet='ab ,"é\x00\r\n\t', max_size=8).map(lambda t: '"' + t.replace('"', '""')
                                                          + '"'),  # quoted: anything goes
    # unquoted: a quote inside is a character (at the start it would open a quoted field)
    st.text(alphabet='ab "é\x00\t', max_size=8).filter(lambda t: not t.startswith('"')),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ROW_CELLS, min_size=1, max_size=12), st.sampled_from(["\n", "\r\n", "\r", ""]),
       st.integers(0, 2), st.booleans(), st.data())
@pytest.mark.slow
def test_pick_cells_agrees_with_csv(cells, end, ncols_off, bad_byte, data):
    """pick_cells gives csv's cells of the kept columns, or None -- never for a row that is
    plainly well formed (clean quoting, valid UTF-8, the expected number of cells)."""
    import csv
    import io

    row = (",".join(cells) + end).encode()
    if bad_byte:
        row = row.replace(b"b", b"\xff", 1)
    ncols = len(cells) + ncols_off - 1
    keep = sorted(data.draw(st.sets(st.integers(0, max(ncols, 1) - 1), max_size=3)))
    got = cc.pick_cells(row, keep, ncols, b'"', b",")
    text = row.decode("utf-8", "surrogateescape")
    try:
        want = next(csv.reader(io.StringIO(text, newline=""), strict=True), [])
    except csv.Error:  # a quoted field closed before a character: a malformed row
        assert got is None
        return
    plain = (len(want) == ncols and row.strip(b"\r\n") != b"" and b"\xff" not in row
             and cc.quoting_is_clean(row, b'"', b","))
    if got is None:
        assert not plain
    else:
        assert [want[i] for i in keep] == got


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.text(alphabet="ab é\x00\t", max_size=4), min_size=3, max_size=3),
                min_size=1, max_size=8),
       st.sampled_from(["\n", "\r\n", "\r"]), st.booleans(), st.integers(0, 3))
def test_block_parser_splits_plain_blocks_as_arrow_does(rows, end, last_end, drop):
    """Kept columns of a block without quotes: numpy's split is Arrow's, row-count checks
    included (a row with a cell dropped makes both refuse the block)."""
    lines = [",".join(r) for r in rows]
    if drop and drop <= len(lines):
        lines[drop - 1] = lines[drop - 1].rsplit(",", 1)[0]
    block = (end.join(lines) + (end if last_end else "")).encode()
    keep = [0, 2]
    fast = cc.BlockParser(3, ",", '"', keep=keep).parse(block)
    full = cc.BlockParser(3, ",", '"').parse(block)
    if full is None:
        assert fast is None
    else:
        assert fast is not None
        assert fast.to_pydict() == full.select(keep).to_pydict()
