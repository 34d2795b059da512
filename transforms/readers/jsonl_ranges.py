"""JSON Lines by byte ranges: a range owns the lines that start inside it.

The JSON Lines reader cuts a file at LF bytes only (a CR before one is part of its line, and
JSON's whitespace; a BOM is part of line 1): a line starts at byte 0 and just after every LF
that is not the file's last byte. A range ``[a, b)`` therefore owns the line starting at
``a`` exactly when ``a`` is 0 or the byte before it is an LF, and otherwise starts at the
byte after the first LF at or after ``a``; it reads on past ``b`` to finish its last line.
No line break hides inside a JSON line (JSON escapes it), so unlike CSV nothing needs
joining up: the lines of all ranges, in range order, are the whole file's lines by
construction, whatever the cuts (tests/transforms/readers/test_jsonl_ranges.py checks it byte for
byte).

Row numbers are physical lines: a range not at the file's start does not know how many lines
came before it, so its dead letters carry the byte offset instead.

Pure: no Beam, no file systems (bytes come through a :data:`ranges.ReadAt`).
"""

from __future__ import annotations

import io
from collections.abc import Iterator

from beam_tfrecords.transforms.readers.events import bounded_line
from beam_tfrecords.transforms.readers.ranges import ReadAt, WindowStream

__all__ = ["line_start", "range_lines"]

_CHUNK = 1 << 16


def line_start(read_at: ReadAt, offset: int) -> int:
    """The first line start at or after ``offset`` (the file's size when none).

    Args:
      read_at: the file's bytes.
      offset: a range's start.

    Returns:
      The offset of the range's first line."""
    if offset <= 0:
        return 0
    at = offset - 1  # an LF just before the offset starts a line at it
    while True:
        data = read_at(at, _CHUNK)
        if not data:
            return at
        lf = data.find(b"\n")
        if lf >= 0:
            return at + lf + 1
        at += len(data)


def range_lines(read_at: ReadAt, start: int, end: int, limit: int
                ) -> Iterator[tuple[int, bytes, int]]:
    """The lines the range ``[start, end)`` owns, as ``(offset, line, size)`` -- ``line``
    as :func:`events.bounded_line` gives it (its first bytes only when ``size`` is over
    ``limit``), LF included.

    Args:
      read_at: the file's bytes.
      start: the range's start.
      end: the range's end: the range reads on past it to finish its last line.
      limit: the longest line held (``source.max_record_bytes``)."""
    at = line_start(read_at, start)
    handle = io.BufferedReader(WindowStream(read_at, at), 1 << 16)
    while at < end:
        line, size = bounded_line(handle, limit)
        if not size:
            return
        yield at, line, size
        at += size
