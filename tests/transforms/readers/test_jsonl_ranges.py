"""JSON Lines by byte ranges (transforms/readers/jsonl_ranges.py): the lines the ranges own,
in range order, are the file's lines as the reader splits them, byte for byte."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms.readers.events import bounded_line
from beam_tfrecords.transforms.readers.jsonl_ranges import line_start, range_lines
from beam_tfrecords.transforms.readers.ranges import ByteRange, bytes_reader, plan_ranges

TEXT = st.lists(st.sampled_from([b'{"a": 1}', b"\n", b"\r\n", b"\r", b" ", b"\xef\xbb\xbf",
                                 b'{"t": "x\\ny"}', b"xyz"]), max_size=40).map(b"".join)


def whole_lines(data: bytes, limit: int) -> list:
    """(offset, line, size) of every line, as the reader reads the whole file."""
    handle, at, out = io.BytesIO(data), 0, []
    while True:
        line, size = bounded_line(handle, limit)
        if not size:
            return out
        out.append((at, line, size))
        at += size


def ranged(data: bytes, cuts: list[ByteRange], limit: int) -> list:
    got = []
    for span in cuts:
        owned = list(range_lines(bytes_reader(data), span.start, span.end, limit))
        assert all(span.start <= at < span.end for at, _, _ in owned)
        got += owned
    return got


@settings(max_examples=150, deadline=None)
@given(data=TEXT, split=st.integers(1, 50), points=st.lists(st.integers(0, 400), max_size=5),
       limit=st.sampled_from([4, 1 << 20]))
def test_ranges_own_the_whole_files_lines(data, split, points, limit):
    """CRLF, lone CR, blank lines, a last line without LF, lines over the limit; cuts of
    every size and at random bytes (on an LF, right after one, between CR and LF)."""
    assert ranged(data, plan_ranges(len(data), split), limit) == whole_lines(data, limit)
    bounds = sorted({0, len(data), *(p for p in points if p < len(data))})
    cuts = [ByteRange(a, b) for a, b in zip(bounds, bounds[1:])]
    assert ranged(data, cuts, limit) == whole_lines(data, limit)


def test_the_line_at_a_range_start_is_its_own_only_after_an_lf():
    data = b'{"a":1}\n{"a":2}\r\n{"a":3}'
    read_at = bytes_reader(data)
    assert [line_start(read_at, a) for a in (0, 1, 8, 9, 16, 17, 18, 24)] == [
        0, 8, 8, 17, 17, 17, 24, 24]


def test_every_cut_of_a_small_file():
    data = b'{"a":1}\n\n{"b":"x"}\r\n  \n{"c":3}'
    for point in range(len(data) + 1):
        cuts = [ByteRange(0, point), ByteRange(point, len(data))]
        assert ranged(data, cuts, 1 << 20) == whole_lines(data, 1 << 20)
