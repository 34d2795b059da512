"""The shared range rules (transforms/readers/ranges.py): planning, ownership, and the
per-file merge of ranges' counts -- every byte in one range, every unread region counted
once, a gap, a double count or a failed join refused with the file and byte."""

from __future__ import annotations

import ast
import io
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms.readers import csv_ranges as cr
from beam_tfrecords.transforms.readers.csv_columnar import RowSplitter
from beam_tfrecords.transforms.readers.ranges import (
    ByteRange,
    Link,
    RangeError,
    RangeTally,
    UnreadSpan,
    WindowStream,
    bytes_reader,
    check_links,
    file_tally,
    merge_unread,
    owner_of,
    parse_split_bytes,
    plan_ranges,
    unsplittable_text,
)

ROOT = pathlib.Path(__file__).resolve().parents[3]
FAST = settings(max_examples=100, deadline=None)


# -- planning ---------------------------------------------------------------------------------

@FAST
@given(size=st.integers(0, 10**12), parts=st.integers(1, 500), extra=st.integers(0, 10**6))
def test_ranges_tile_the_file_and_none_is_over_split_bytes(size, parts, extra):
    split = max(1, size // parts + extra)
    ranges = plan_ranges(size, split)
    assert ranges[0].start == 0 and ranges[-1].end == size
    assert all(a.end == b.start for a, b in zip(ranges, ranges[1:]))
    assert all(len(r) <= split for r in ranges) or ranges == [ByteRange(0, size)]
    assert len(ranges) == max(1, -(-size // split))
    assert max(map(len, ranges)) - min(map(len, ranges)) <= 1


def test_an_unsplittable_file_is_one_range_whatever_its_size():
    assert plan_ranges(10**9, 64, splittable=False) == [ByteRange(0, 10**9)]
    assert plan_ranges(0) == [ByteRange(0, 0)]
    with pytest.raises(ValueError):
        plan_ranges(10, 0)


@pytest.mark.parametrize("value,size", [(67108864, 64 << 20), ("64MiB", 64 << 20),
                                        ("1MB", 10**6), (1, 1)])
def test_split_bytes_takes_sizes(value, size):
    assert parse_split_bytes(value) == size


@pytest.mark.parametrize("value", [0, -1, 1.5, "lots", True])
def test_a_bad_split_bytes_names_the_key(value):
    with pytest.raises(ValueError, match=r"^config key 'source\.split_bytes': "):
        parse_split_bytes(value)


@pytest.mark.parametrize("path,head,unsplittable", [
    ("a.csv", b"id,x\n", False), ("a.csv.gz", b"", True), ("A.JSONL.BZ2", b"", True),
    ("a.csv", b"\x1f\x8b\x08\x00", True), ("a.jsonl", b"\xff\xfe{\x00", True),
    ("a.csv", b"PAR1\x15\x04", True), ("a.zst.csv", b"id\n", False)])
def test_compressed_or_foreign_text_is_one_range(path, head, unsplittable):
    why = unsplittable_text(path, head)
    assert (why is not None) == unsplittable
    if why:
        assert why.startswith(path) and why.endswith("one range")


def test_owner_of_an_offset():
    ranges = plan_ranges(100, 30)  # 0-25-50-75-100
    assert [owner_of(o, ranges) for o in (0, 24, 25, 99, 100, 150)] == [0, 0, 1, 3, 3, 3]
    assert owner_of(0, plan_ranges(0)) == 0


def test_window_stream_reads_from_an_offset():
    stream = io.BufferedReader(WindowStream(bytes_reader(b"0123456789"), 3), 4)
    assert stream.read(5) == b"34567" and stream.read() == b"89"


# -- unread regions ---------------------------------------------------------------------------

@FAST
@given(size=st.integers(1, 300), marks=st.lists(st.integers(0, 300), max_size=10),
       cuts=st.lists(st.integers(1, 299), max_size=8))
def test_regions_cut_at_range_boundaries_merge_back_into_one(size, marks, cuts):
    """Disjoint regions, each reported by every range it crosses as the part inside that
    range (marked open where it was cut): merged, they are the regions, bytes counted once."""
    points = sorted({m for m in marks if m <= size})
    regions = [UnreadSpan(a, b - a, b - a, None, f"r{a}")
               for a, b in zip(points[::2], points[1::2]) if b > a]
    bounds = sorted({0, size, *(c for c in cuts if c < size)})
    ranges = [ByteRange(a, b) for a, b in zip(bounds, bounds[1:])]
    tallies = []
    for span in ranges:
        parts = []
        for r in regions:
            a, b = max(r.offset, span.start), min(r.end, span.end)
            if a < b:
                parts.append(UnreadSpan(a, b - a, b - a, None, r.reason,
                                        open_start=a > r.offset, open_end=b < r.end))
        tallies.append(RangeTally(span, unread=tuple(parts)))
    merged = file_tally("f", size, tallies)
    assert list(merged.regions) == regions
    assert merged.counts()["unread_bytes"] == sum(r.bytes for r in regions)
    assert merged.counts()["unread_regions"] == len(regions)
    assert merged.counts()["unread_files"] == int(bool(regions))


def test_overlapping_regions_are_a_double_count():
    spans = [UnreadSpan(0, 10, None, None, "a"), UnreadSpan(5, 10, None, None, "b")]
    with pytest.raises(RangeError, match=r"^f: byte 5: unread regions overlap"):
        merge_unread("f", spans)


@pytest.mark.parametrize("spans", [
    [UnreadSpan(0, 10, None, None, "a", open_end=True)],
    [UnreadSpan(10, 5, None, None, "a", open_start=True)],
    [UnreadSpan(0, 10, None, None, "a", open_end=True), UnreadSpan(11, 5, None, None, "a",
                                                                   open_start=True)]])
def test_a_cut_region_without_its_other_part_is_refused(spans):
    with pytest.raises(RangeError, match=r"^f: byte 1[01]: an unread region"):
        merge_unread("f", spans)


def test_rows_of_a_merged_region_are_known_only_when_every_part_knows():
    parts = [UnreadSpan(0, 4, 2, 7, "a", open_end=True),
             UnreadSpan(4, 4, None, None, "a", open_start=True)]
    assert merge_unread("f", parts) == [UnreadSpan(0, 8, None, 7, "a")]
    parts[1] = UnreadSpan(4, 4, 3, None, "a", open_start=True)
    assert merge_unread("f", parts) == [UnreadSpan(0, 8, 5, 7, "a")]


@pytest.mark.parametrize("spans,message", [
    ([ByteRange(0, 5), ByteRange(6, 10)], "byte 5: bytes 5-6 are missing"),
    ([ByteRange(0, 5), ByteRange(4, 10)], "byte 4: bytes 4-5 are read twice"),
    ([ByteRange(0, 5)], "byte 5: its ranges end there, the file has 10 bytes")])
def test_ranges_that_do_not_tile_the_file_are_refused(spans, message):
    with pytest.raises(RangeError, match=f"^f: {message}"):
        file_tally("f", 10, [RangeTally(s, read=1) for s in spans])


# -- joins ------------------------------------------------------------------------------------

def test_links_join_through_ranges_that_own_nothing():
    check_links("f", [Link(0, None, 10, "in"), Link(10, None, 10, None),
                      Link(10, "in", 20, "out"), None, Link(20, "out", 30, None)])


@pytest.mark.parametrize("links,message", [
    ([Link(0, None, 10, "in"), Link(10, "out", 20, "out")],
     "byte 10: range 1 assumed out there, but the range before it found in"),
    ([Link(0, None, 10, "in"), Link(12, None, 20, None)],
     "byte 10: range 1 starts reading at byte 12, but the range before it stopped at byte "
     "10: the records between would be lost"),
    ([Link(0, None, 10, "in"), Link(8, None, 20, None)], "byte 8: .* would be read twice")])
def test_a_failed_join_names_the_file_and_byte(links, message):
    with pytest.raises(RangeError, match=f"^f: {message}"):
        check_links("f", links)


@FAST
@given(body=st.lists(st.sampled_from([b"1,a\n", b'2,"b\nc"\n', b"3,x\r\n", b'4,"open\n']),
                     max_size=12).map(b"".join), split=st.integers(1, 40))
def test_csv_ranges_tally_to_the_whole_files_counts(body, split):
    """Rows and the unterminated-quote region of a CSV file read in ranges add up, through
    file_tally, to the whole-file read's counts: the region is owned by the range its first
    byte is in and counted once, however many ranges it crosses."""
    data = b"id,t\n" + body
    read_at, dialect = bytes_reader(data), cr.Dialect()
    tallies = []
    for span in plan_ranges(len(data), split):
        rows = cr.RangeRows(read_at, cr.csv_range_start(read_at, span.start, dialect, ncols=2),
                            span.end, dialect, 1 << 20)
        owned = list(rows)
        unread = tuple(UnreadSpan(at, row.size, None, None, "unterminated")
                       for at, row in owned if type(row) is not bytes and not row.complete)
        header = int(span.start == 0 and bool(owned))
        tallies.append(RangeTally(span, read=len(owned) - len(unread) - header, unread=unread,
                                  link=rows.link))
    try:
        got = file_tally("f.csv", len(data), tallies, cr.describe_state).counts()
    except RangeError:
        # A refused join (see tests/transforms/readers/test_csv_ranges.py): loud, never a wrong
        # count.
        return
    whole = list(RowSplitter(io.BytesIO(data), b'"', b",", 1 << 20))
    lost = [r for r in whole[1:] if type(r) is not bytes]
    assert got["read"] == len(whole) - 1 - len(lost)
    assert got["unread_regions"] == len(lost)
    assert got["unread_bytes"] == sum(r.size for r in lost)


# -- layering ---------------------------------------------------------------------------------

RANGE_MODULES = ("ranges", "csv_ranges", "jsonl_ranges", "avro_ranges", "parquet_ranges",
                 "formats")


@pytest.mark.parametrize("name", RANGE_MODULES)
def test_range_modules_are_pure(name):
    """No Beam, no storage, no reader module (those import Beam): the glue imports these."""
    path = ROOT / "transforms" / "readers" / f"{name}.py"
    tree = ast.parse(path.read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom)}
    banned = ("apache_beam", "beam_tfrecords.runtime.storage", "beam_tfrecords.transforms.readers."
              "framework", "beam_tfrecords.transforms.readers.read_")
    assert not [m for m in imported if m.startswith(banned)]
