"""CSV bytes -> blocks of rows and ``pyarrow.RecordBatch`` es of string cells, with exactly the
per-row reader's semantics (``csv_typing.py`` then types the cells).

The per-row reader (:class:`read_csv.ReadCsvFiles` with ``columnar=False``) splits text with
Python's ``csv`` module (``strict=True``) and types each cell with :func:`read_csv.parse_cell`.
This module does the same work a block at a time with ``pyarrow.csv`` and
``pyarrow.compute``, and *proves* per block that the result is the one the per-row reader
would give; when it cannot, the caller hands that block (or the rest of the file) to the
per-row reader. What the proof rests on:

* **Row boundaries.** :class:`ByteBlocks` cuts the byte stream only at a line end preceded
  by an even number of quote characters. That is a true row boundary when the quoting is
  *clean*: every opening quote starts a field, every closing quote ends one (or doubles a
  quote inside it). :func:`quoting_is_clean` checks that per block, so blocks start at true
  row boundaries as long as every block before was clean; the first unclean block sends the
  rest of the file to the per-row reader, which also raises exactly where ``csv`` would.
* **Cells.** On clean quoting Arrow's parser and ``csv`` split identically, except that
  ``csv`` yields an empty list for an empty line (Arrow: one empty cell); Arrow reports rows
  with the wrong number of cells through ``invalid_row_handler``; invalid UTF-8 anywhere in
  the block (:func:`is_utf8`) and a row longer than ``source.max_record_bytes`` are dead
  letters. Any of these sends the block to the per-row reader (:class:`BlockParser` returns
  None). Arrow splits every cell, so those checks cover every column, but only the cells of
  the columns a reader keeps become values: time follows those columns, not the file's width.
* **Rows, per row.** :class:`RowSplitter` cuts a stream into rows exactly where ``csv``
  (strict, doubled quotes, no escape character) ends them, holding at most
  ``max_record_bytes`` of a row: the per-row reader hands ``csv`` one row at a time, so a
  malformed row costs that row only, a row too large is skipped unread, and an unterminated
  quote is found as a row running to the end of the file. Python's ``csv`` has its own,
  process-wide field limit (128 KiB by default); :func:`lift_csv_field_limit` raises it out
  of the way, since the row limit here is the one that counts. In a wide row of which few
  columns are kept, :func:`pick_cells` finds them with numpy when the row is plainly well
  formed, and leaves every other row to ``csv``.
* **Types** are ``csv_typing.py``'s: the string cells of a block become typed columns only
  where Arrow's casts provably agree with :func:`read_csv.parse_cell`.

Pure: no Beam, no file systems (callers pass an open binary stream).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from beam_tfrecords.transforms.readers.events import HEAD_BYTES, Unread, unreadable_text

__all__ = [
    "BLOCK_BYTES",
    "BOM",
    "BlockParser",
    "ByteBlocks",
    "NeedsRows",
    "Prefixed",
    "RowSpan",
    "RowSplitter",
    "dialect_supported",
    "has_empty_line",
    "lift_csv_field_limit",
    "parse_block",
    "pick_cells",
    "quoting_is_clean",
    "read_csv_header",
    "row_cells",
    "text_stream",
]

BOM = b"\xef\xbb\xbf"
BLOCK_BYTES = 1 << 20  # ~30k rows of the tutorial's 4 columns per block
MAX_PENDING_BYTES = 64 << 20  # no row end in this much data: the per-row reader takes over
# The largest block when few columns are kept (a block then holds about BLOCK_BYTES of their
# text): 20,000 columns of which 3 were kept made blocks of 25 rows, and each block costs
# ~2.5 ms downstream whatever its rows.
WIDE_BLOCK_BYTES = 8 << 20


class NeedsRows(Exception):
    """This block must be read by the per-row reader (a value Arrow cannot hold)."""


def dialect_supported(delimiter: str, quotechar: str) -> bool:
    """Arrow splits on single bytes: both characters must be ASCII and not line ends.

    Args:
        delimiter: the field delimiter.
        quotechar: the quote character.

    Returns:
        True when the columnar path may be used.
    """
    return all(len(c) == 1 and c.isascii() and c not in "\r\n" for c in (delimiter, quotechar))


# -- cutting the byte stream at row boundaries -----------------------------------------------

def _last_row_end(buf: bytes, quote: bytes, final: bool) -> int:
    """Offset just past the last complete row in ``buf`` (which starts at a row start)."""
    if final:
        return len(buf)
    quoted = quote in buf
    total = buf.count(quote) if quoted else 0
    after = 0
    pos = len(buf)
    while True:
        p = max(buf.rfind(b"\n", 0, pos), buf.rfind(b"\r", 0, pos))
        if p < 0:
            return 0
        if quoted:
            after += buf.count(quote, p, pos)
        pos = p
        if quoted and (total - after) % 2:
            continue  # inside a quoted field
        if buf[p] == 0x0D:
            if p + 1 == len(buf):
                continue  # maybe the first half of a CRLF split between reads
            if buf[p + 1] == 0x0A:
                return p + 2
        return p + 1


def _first_row_end(buf: bytes, quote: bytes, final: bool) -> int:
    """Offset just past the first complete row in ``buf`` (0: not in ``buf`` yet)."""
    start = 0
    while True:
        ends = [i for i in (buf.find(b"\n", start), buf.find(b"\r", start)) if i >= 0]
        if not ends:
            return len(buf) if final else 0
        p = min(ends)
        start = p + 1
        if buf.count(quote, 0, p) % 2:
            continue
        if buf[p] == 0x0D:
            if p + 1 == len(buf):
                if final:
                    return p + 1
                return 0
            if buf[p + 1] == 0x0A:
                return p + 2
        return p + 1


class ByteBlocks:
    """A binary stream cut into blocks of whole rows (by quote parity; see the module doc).

    ``first_row()`` returns the header row's bytes, ``next_block()`` the next ~``block_bytes``
    of rows (None at the end; ``NeedsRows`` when no row ends within ``MAX_PENDING_BYTES``),
    ``rest()`` a stream of whatever has not been returned yet. A UTF-8 BOM at the start of
    the stream is dropped. ``offset`` is the byte offset in the file of what comes next
    (of the next block, or of ``rest()``); given, the stream starts there (a range's first
    row: no BOM is looked for). :meth:`grow` makes the next blocks larger.

    Args:
        handle: the file, opened in binary mode.
        quote: the quote character's byte.
        block_bytes: about how many bytes a block holds.
        max_pending: the most bytes held while looking for a row's end.
        offset: the stream's start in the file; 0 looks for a BOM.
    """

    def __init__(self, handle: BinaryIO, quote: bytes, block_bytes: int = BLOCK_BYTES,
                 max_pending: int = MAX_PENDING_BYTES, offset: int = 0) -> None:
        self._handle = handle
        self._quote = quote
        self._block = block_bytes
        self._max = max(max_pending, block_bytes)
        self._buf = b""
        self._eof = False
        self.offset = offset  # a stream from a row start inside the file: no BOM there
        while not offset and len(self._buf) < len(BOM) and not self._eof:
            self._fill()
        if not offset and self._buf.startswith(BOM):
            self._buf = self._buf[len(BOM):]
            self.offset = len(BOM)

    def grow(self, block_bytes: int) -> None:
        """Blocks of about ``block_bytes`` from now on (if that is larger).

        Args:
            block_bytes: the new block size in bytes.
        """
        self._block = max(self._block, block_bytes)
        self._max = max(self._max, self._block)

    def _fill(self) -> None:
        data = self._handle.read(self._block)
        if data:
            self._buf += data
        else:
            self._eof = True

    def _take(self, find: Callable[[bytes, bytes, bool], int]) -> bytes | None:
        if len(self._buf) < self._block and not self._eof:
            self._fill()
        while True:
            end = find(self._buf, self._quote, self._eof)
            if end:
                block, self._buf = self._buf[:end], self._buf[end:]
                self.offset += end
                return block
            if self._eof:
                return None
            if len(self._buf) >= self._max:
                raise NeedsRows(f"no row ends within {self._max} bytes")
            self._fill()

    def first_row(self) -> bytes | None:
        """The first row's bytes (its line end included), for the header.

        Returns:
            The row, or None for an empty stream.

        Raises:
            NeedsRows: no row ends within ``max_pending`` bytes.
        """
        return self._take(_first_row_end)

    def next_block(self) -> bytes | None:
        """The next block of whole rows, about ``block_bytes`` long.

        Returns:
            The block, or None at the end.

        Raises:
            NeedsRows: no row ends within ``max_pending`` bytes.
        """
        return self._take(_last_row_end)

    def rest(self) -> BinaryIO:
        """The bytes not returned yet, as a stream (the pending buffer, then the handle).

        Returns:
            A buffered binary stream.
        """
        return io.BufferedReader(Prefixed(self._buf, self._handle))


def text_stream(handle: BinaryIO) -> tuple[BinaryIO, Unread | None]:
    """``handle`` to read from the start, or -- when its first bytes say UTF-16 or UTF-32
    text, or a compressed file (:func:`events.unreadable_text`) -- the whole file as one
    :class:`Unread` saying so (its size from a seek where the stream allows one, else by
    reading it to its end): read as UTF-8 text it would be a header of garbled names and
    rows of dead letters.

    Args:
        handle: the file, opened at its start.

    Returns:
        A stream from the start and None, or a stream and the :class:`Unread` region.
    """
    head = handle.read(HEAD_BYTES)
    why = unreadable_text(head)
    seekable = handle.seekable()
    if why is None:
        if seekable:
            handle.seek(0)
            return handle, None
        return io.BufferedReader(Prefixed(head, handle)), None
    if seekable:
        try:
            return handle, Unread(0, handle.seek(0, io.SEEK_END), None, None, why)
        except (OSError, ValueError):  # a stream that seeks from its start only
            pass
    size = len(head)
    while chunk := handle.read(1 << 20):
        size += len(chunk)
    return handle, Unread(0, size, None, None, why)


class Prefixed(io.RawIOBase):
    """``prefix``, then the rest of ``handle``, as one raw stream.

    Args:
        prefix: bytes already read from ``handle``.
        handle: the rest of the stream.
    """

    def __init__(self, prefix: bytes, handle: BinaryIO) -> None:
        self._prefix = memoryview(prefix)
        self._handle = handle

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._prefix:
            n = min(len(buffer), len(self._prefix))
            buffer[:n] = self._prefix[:n]
            self._prefix = self._prefix[n:]
            return n
        data = self._handle.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)


# -- rows, one at a time, as csv splits them ---------------------------------------------------

def lift_csv_field_limit() -> None:
    """Raise Python's ``csv`` field limit (process-wide; 128 KiB by default) to its maximum:
    :class:`RowSplitter` bounds rows by ``source.max_record_bytes`` before ``csv`` sees them,
    so ``csv``'s own limit would only turn ordinary large values into errors. Never lowers
    it, so calling it from every reader is harmless."""
    limit = sys.maxsize
    while csv.field_size_limit() < limit:
        try:
            csv.field_size_limit(limit)
        except OverflowError:  # a C long narrower than sys.maxsize
            limit = (limit + 1) // 2 - 1


@dataclasses.dataclass(frozen=True)
class RowSpan:
    """One row of a CSV stream: ``size`` bytes from byte ``start`` (line end included).
    ``data`` holds them, or is None when the row is longer than the limit (then ``head``
    holds its first bytes); ``complete`` is False for a row that the end of the stream cut
    inside a quoted field (an unterminated quote: the rest of the stream)."""

    start: int
    size: int
    data: bytes | None
    head: bytes
    complete: bool = True


def _row_pattern(quote: bytes, delimiter: bytes) -> re.Pattern[bytes] | None:
    """A regular expression matching one well-formed row as group 1, or else any one byte
    (single-byte dialects only)."""
    if len(quote) != 1 or len(delimiter) != 1:
        return None
    q, d = re.escape(quote), re.escape(delimiter)
    field = (rb"(?:" + q + rb"[^" + q + rb"]*(?:" + q + q + rb"[^" + q + rb"]*)*" + q
             + rb"|[^" + q + d + rb"\r\n][^" + d + rb"\r\n]*|)")
    # The last alternative matches any one byte: finditer then never searches ahead.
    return re.compile(rb"(" + field + rb"(?:" + d + field + rb")*(?:\r\n|\n|\r))|(?s:.)")


_FIELD, _UNQUOTED, _QUOTED = 0, 1, 2  # at a field's start, in an unquoted / a quoted field
_LF, _CR = 0x0A, 0x0D
_HEAD = 200


class RowSplitter:
    """A binary stream cut into CSV rows exactly where Python's ``csv`` module ends them
    (``strict=True``, doubled quotes, no escape character, ``newline=""``): a row ends at
    ``\\n``, ``\\r`` or ``\\r\\n`` outside a quoted field; a quote opens a quoted field only at
    a field's start and is a plain character elsewhere; after a closing quote anything but a
    delimiter or a line end is the ``csv`` error that makes the row malformed, and the row
    goes on as an unquoted field (as ``csv`` itself reads it with ``strict=False``), so the
    next row starts where it would.

    Iterating yields a row up to ``limit`` bytes as its ``bytes`` (line end included), and
    a :class:`RowSpan` without data for a longer row (scanned to its end without being
    held) or for the rest of the stream after an unterminated quote. ``start`` is the
    stream's offset in the file; a UTF-8 BOM at the start is skipped when ``strip_bom``
    (then the attribute ``start`` is the offset after it). ``end`` is the offset of the end
    of what was read so far (the file's size at the end).

    Args:
        handle: the file (or a range of it), opened in binary mode.
        quote: the quote character's byte.
        delimiter: the delimiter's byte.
        limit: the longest row held, in bytes; longer ones come as a RowSpan.
        start: the stream's offset in the file.
        strip_bom: skip a UTF-8 BOM at the start.
        chunk: bytes read from the handle at a time.
    """

    def __init__(self, handle: BinaryIO, quote: bytes, delimiter: bytes, limit: int,
                 start: int = 0, strip_bom: bool = False, chunk: int = 1 << 16) -> None:
        self._handle = handle
        self._q = quote
        self._d = delimiter
        self._limit = limit
        self._chunk = max(chunk, len(quote) + len(delimiter) + 2)
        self._row_re = _row_pattern(quote, delimiter)
        self._buf = bytearray()
        self._base = start  # offset of _buf[0]
        self._eof = False
        if strip_bom:
            while len(self._buf) < len(BOM) and not self._eof:
                self._fill()
            if self._buf.startswith(BOM):
                del self._buf[:len(BOM)]
                self._base += len(BOM)
        self.start = self._base  # where the first row starts

    @property
    def end(self) -> int:
        return self._base + len(self._buf)

    def _fill(self) -> None:
        data = self._handle.read(self._chunk)
        if data:
            self._buf += data
        else:
            self._eof = True

    def drain(self) -> int:
        """Skip the rest of the stream; the offset of its end.

        Returns:
            The file offset of the stream's end.
        """
        self._base += len(self._buf)
        self._buf = bytearray()
        while not self._eof:
            data = self._handle.read(1 << 20)
            self._base += len(data)
            self._eof = not data
        return self._base

    def __iter__(self) -> Iterator[bytes | RowSpan]:
        buf = self._buf
        pos = 0  # where scanning resumes
        state = _FIELD
        row = self._base  # offset where the current row starts
        head: bytes | None = None  # set once the current row is too long to hold
        limit = self._limit
        while True:
            if self._eof and self._base + len(buf) == row:
                return
            if state == _FIELD and head is None:
                # The fast way: the whole lines before the next quote are rows as they are.
                first = row - self._base
                quote = buf.find(self._q, first)
                cut = buf.rfind(b"\n", first, len(buf) if quote < 0 else quote) + 1
                if cut > first:
                    for line in bytes(buf[first:cut]).splitlines(True):
                        if len(line) <= limit:
                            yield line
                        else:
                            yield RowSpan(row, len(line), None, line[:_HEAD])
                        row += len(line)
                    pos = cut
                    if pos > (1 << 20) and pos * 2 > len(buf):  # keep the buffer short
                        del buf[:pos]
                        self._base += pos
                        pos = 0
                    continue
                # Next fastest: consecutive well-formed rows, one match each (not a last one
                # ending in a CR that could be half a CRLF). Only with a line end to match:
                # a failed match of a 40 KB part of a row costs ~3 ms, once per read.
                if self._row_re is not None and pos == first and (
                        buf.find(b"\n", first) >= 0 or buf.find(b"\r", first) >= 0):
                    for match in self._row_re.finditer(buf, first):
                        end = match.end()
                        if match.lastindex is None or (
                                end == len(buf) and buf[-1] == _CR and not self._eof):
                            break
                        if end - pos <= limit:
                            yield match.group()
                        else:
                            yield RowSpan(row, end - pos, None, bytes(buf[pos:pos + _HEAD]))
                        row += end - pos
                        pos = end
                    if pos > first:
                        continue
            end, state, pos = self._scan(buf, pos, state)
            if end < 0:
                if self._eof:
                    if self._base + len(buf) > row:  # the stream ends inside a quoted field
                        size = self._base + len(buf) - row
                        if head is None:  # the row's first bytes (buf may start before it)
                            head = bytes(buf[row - self._base:row - self._base + _HEAD])
                        yield RowSpan(row, size, None, head, complete=False)
                        self._base += len(buf)
                        del buf[:]
                    return
                held = row - self._base  # bytes of the row before buf[0] were dropped
                if head is None and self._base + len(buf) - row > limit:
                    head = bytes(buf[held:held + _HEAD])
                drop = pos if head is not None else held
                if drop:
                    del buf[:drop]
                    self._base += drop
                    pos -= drop
                self._fill()
                continue
            size = self._base + end - row
            if head is None and size <= limit:
                start = row - self._base
                yield bytes(buf[start:end])
            else:
                if head is None:
                    start = row - self._base
                    head = bytes(buf[start:start + _HEAD])
                yield RowSpan(row, size, None, head)
            row = self._base + end
            pos, state, head = end, _FIELD, None
            if pos > (1 << 20) and pos * 2 > len(buf):  # keep the buffer short
                del buf[:pos]
                self._base += pos
                pos = 0

    def _scan(self, buf: bytearray, pos: int, state: int) -> tuple[int, int, int]:
        """From ``pos`` in ``state``: (the end of the current row or -1, the state, where to
        resume). Stops short of a quote, delimiter or CR whose meaning bytes not read yet
        decide."""
        q, d, eof = self._q, self._d, self._eof
        n = len(buf)
        need = max(len(q), len(d), 1)
        while True:
            if state == _QUOTED:
                j = buf.find(q, pos)
                if j < 0:
                    return -1, _QUOTED, max(pos, n - len(q) + 1)
                k = j + len(q)
                if n - k < need and not eof:
                    return -1, _QUOTED, j  # what follows the quote is not read yet
                if k >= n:
                    return n, _FIELD, n  # a closing quote ends the stream
                if buf.startswith(q, k):  # a doubled quote inside the field
                    pos = k + len(q)
                    continue
                if buf[k] in (_LF, _CR):
                    return self._row_end(buf, k, n, eof)
                if buf.startswith(d, k):
                    pos, state = k + len(d), _FIELD
                else:  # csv's "delimiter expected after quote": the row is malformed, and
                    pos, state = k, _UNQUOTED  # csv (non-strict) reads on, unquoted
                continue
            # At a field's start or in an unquoted field: without a quote before the next
            # line end, the row ends there (delimiters do not matter).
            lf = buf.find(b"\n", pos)
            stop = n if lf < 0 else lf
            cr = buf.find(b"\r", pos, stop)
            if cr >= 0:
                stop = cr
            j = buf.find(q, pos, stop)
            if j < 0:
                if stop < n:
                    return self._row_end(buf, stop, n, eof)
                if eof:
                    return n, _FIELD, n
                # Resume before any quote or delimiter the next bytes may complete, and not
                # inside a whole delimiter (multi-byte characters).
                resume = max(pos, n - need + 1)
                last = buf.rfind(d, pos, n)
                if 0 <= last < resume < last + len(d):
                    resume = last
                return -1, self._state_at(buf, resume, pos, state), resume
            # Between pos and j there is no quote: its delimiters are real.
            pos, state = j + len(q), (_QUOTED if self._state_at(buf, j, pos, state) == _FIELD
                                      else _UNQUOTED)

    def _state_at(self, buf: bytearray, i: int, pos: int, state: int) -> int:
        """The state at ``i``, in unquoted text that runs from ``pos`` (in ``state``)."""
        if i == pos:
            return state
        d = self._d
        return _FIELD if i - len(d) >= pos and buf.startswith(d, i - len(d)) else _UNQUOTED

    @staticmethod
    def _row_end(buf: bytearray, i: int, n: int, eof: bool) -> tuple[int, int, int]:
        """The row ends at the line end at ``i`` (CR, LF or CRLF)."""
        if buf[i] == _LF:
            return i + 1, _FIELD, i + 1
        if i + 1 < n:
            end = i + 2 if buf[i + 1] == _LF else i + 1
            return end, _FIELD, end
        if eof:
            return n, _FIELD, n
        return -1, _UNQUOTED, i  # a CR at the end of what was read: maybe half a CRLF


# -- checks that make a block safe for Arrow --------------------------------------------------

def quoting_is_clean(block: bytes, quote: bytes, delimiter: bytes) -> bool:
    """Whether every quote in ``block`` opens a field, closes one, or doubles a quote inside
    one -- the quoting on which quote parity finds the rows and Arrow and ``csv`` agree.

    Args:
        block: whole rows.
        quote: the quote character's byte.
        delimiter: the delimiter's byte.

    Returns:
        Whether the quoting is clean.
    """
    if quote not in block:
        return True
    data = np.frombuffer(block, np.uint8)
    q = np.flatnonzero(data == ord(quote))
    if len(q) % 2:
        return False  # a quoted field runs past the block
    opens, closes = q[0::2], q[1::2]
    seps = np.array([ord(delimiter), 0x0A, 0x0D], np.uint8)
    prev_close = np.concatenate(([-2], closes[:-1]))
    ok_open = ((opens == 0) | np.isin(data[np.maximum(opens - 1, 0)], seps)
               | (opens == prev_close + 1))
    next_open = np.concatenate((opens[1:], [-2]))
    after = np.minimum(closes + 1, len(data) - 1)
    ok_close = ((closes + 1 == len(data)) | np.isin(data[after], seps)
                | (closes + 1 == next_open))
    return bool(ok_open.all() and ok_close.all())


def has_empty_line(block: bytes) -> bool:
    """Whether ``block`` may hold an empty line (``csv`` yields [] for it, Arrow one cell).

    May say yes for line ends inside quoted fields; that only costs speed.

    Args:
        block: whole rows.

    Returns:
        False only when there is certainly none.
    """
    if block[:1] in (b"\n", b"\r"):
        return True
    if b"\r" not in block:
        return b"\n\n" in block
    return b"\n\n" in block or b"\r\r" in block or b"\n\r" in block


def row_ends(block: bytes, quote: bytes) -> np.ndarray:
    """The offset just past each row of a clean block (as :class:`RowSplitter` cuts rows: a
    row ends at a line end outside quotes, CRLF at its LF; the last row may have none).

    Args:
        block: a clean block of whole rows.
        quote: the quote character's byte.

    Returns:
        int64 offsets, the last ``len(block)``.
    """
    data = np.frombuffer(block, np.uint8)
    ends = (data == 0x0A) | (data == 0x0D)
    ends[:-1] &= ~((data[:-1] == 0x0D) & (data[1:] == 0x0A))  # CRLF ends at its LF
    if quote in block:
        ends &= (np.cumsum(data == ord(quote)) % 2) == 0  # not inside a quoted field
    stops = np.flatnonzero(ends) + 1
    if not len(stops) or stops[-1] != len(block):
        stops = np.append(stops, len(block))
    return stops


def longest_row(block: bytes, quote: bytes) -> int:
    """The size of the longest row of a clean block, its line end included.

    Args:
        block: a clean block of whole rows.
        quote: the quote character's byte.

    Returns:
        Its size in bytes.
    """
    return int(np.diff(row_ends(block, quote), prepend=0).max())


def is_utf8(data: bytes) -> bool:
    """Whether ``data`` is valid UTF-8, checked by Arrow without decoding it into a str.

    For CSV text this is whether every cell is: cells are the text less delimiters, quotes
    and line ends, ASCII bytes that never sit inside a multi-byte character.

    Args:
        data: a block of CSV text.

    Returns:
        Whether they are valid UTF-8.
    """
    if data.isascii():
        return True
    offsets = pa.py_buffer(np.array([0, len(data)], np.int64).tobytes())
    array = pa.Array.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(data)])
    try:
        array.cast(pa.large_string())
    except pa.ArrowInvalid:
        return False
    return True


class BlockParser:
    """Clean blocks -> RecordBatches of string cells, or None when Arrow's cells may differ
    from ``csv``'s: a row with the wrong number of cells, an empty line, invalid UTF-8, a BOM
    -- or a row longer than ``max_row_bytes`` (the per-row reader rejects it).

    Rows have ``ncols`` cells; only those of the columns ``keep`` (indices, default all) are
    converted and returned, as columns ``c<index>`` in that order. Every cell of every row is
    still found, so a row with a cell too many or too few still sends the block to the
    per-row reader; the other cells never become values. With ``keep``, a block without
    quotes is split by numpy (:meth:`_plain`), much faster than Arrow on very wide files of
    which few columns are kept, since Arrow tokenizes every cell. The Arrow options are made
    once, not per block: with tens of thousands of columns, building the name list and the
    type map costs more than parsing a block.

    Args:
        ncols: the header's number of columns.
        delimiter: the delimiter character.
        quotechar: the quote character.
        max_row_bytes: the longest row the block may hold; None for no limit.
        keep: the indices of the columns to return; None for all.
    """

    def __init__(self, ncols: int, delimiter: str, quotechar: str,
                 max_row_bytes: int | None = None, keep: Sequence[int] | None = None) -> None:
        self.ncols = ncols
        self._keep = None if keep is None else np.asarray(keep, np.int64)
        self._delimiter = ord(delimiter)
        self._quote = quotechar.encode()
        self._max = max_row_bytes
        self._all = [f"c{i}" for i in range(ncols)]
        self.names = self._all if keep is None else [self._all[i] for i in keep]
        self._invalid: list = []
        self._convert = pacsv.ConvertOptions(
            # Binary: no UTF-8 check here (per column it is slow); one check of the block.
            column_types={name: pa.binary() for name in self.names}, null_values=[],
            strings_can_be_null=False, quoted_strings_can_be_null=False,
            include_columns=self.names)
        self._parse = {
            quoted: pacsv.ParseOptions(
                delimiter=delimiter, quote_char=quotechar, double_quote=True,
                escape_char=False, newlines_in_values=quoted, ignore_empty_lines=False,
                invalid_row_handler=self._on_invalid)
            for quoted in (False, True)}
        self._read: dict[int, Any] = {}  # ReadOptions by block size class

    def _on_invalid(self, row: Any) -> str:
        self._invalid.append(row)
        return "skip"

    def _read_options(self, size: int) -> Any:
        size = 1 << size.bit_length()  # more than size: the block is one Arrow block
        options = self._read.get(size)
        if options is None:
            options = self._read[size] = pacsv.ReadOptions(
                column_names=self._all, use_threads=False, block_size=size)
        return options

    def parse(self, block: bytes) -> pa.RecordBatch | None:
        """A clean block's rows as string cells, or None when the per-row reader must read it.

        Args:
            block: whole rows, quoting clean (:func:`quoting_is_clean`).

        Returns:
            A batch with the kept columns (``c<index>``), or None.
        """
        if block.startswith(BOM):  # Arrow drops a BOM; csv keeps it
            return None
        if (self._max is not None and len(block) > self._max
                and longest_row(block, self._quote) > self._max):
            return None
        if not is_utf8(block):
            return None  # the per-row reader names the rows and columns
        if self._keep is not None and self._quote not in block:
            return self._plain(block)
        if has_empty_line(block):  # csv yields no cell for it, Arrow one
            return None
        self._invalid.clear()
        try:
            table = pacsv.read_csv(io.BytesIO(block),
                                   read_options=self._read_options(len(block)),
                                   parse_options=self._parse[self._quote in block],
                                   convert_options=self._convert)
        except pa.ArrowInvalid:
            return None
        if self._invalid:
            return None
        if table.num_rows == 0:
            return pa.RecordBatch.from_arrays([pa.array([], pa.string())] * len(self.names),
                                              names=self.names)
        batches = table.to_batches()
        batch = batches[0] if len(batches) == 1 else table.combine_chunks().to_batches()[0]
        return pa.RecordBatch.from_arrays([column.view(pa.string()) for column in batch.columns],
                                          names=self.names)


    def _plain(self, block: bytes) -> pa.RecordBatch | None:
        """A block without quotes split at its delimiters and line ends; None when a row has
        another number of cells than ``ncols`` (an empty line too: ``ncols`` > 1 here)."""
        data = np.frombuffer(block, np.uint8)
        line_end = data == 0x0A
        crlf = b"\r\n" in block
        if b"\r" in block:
            line_end |= data == 0x0D
            if crlf:
                line_end[:-1] &= ~((data[:-1] == 0x0D) & (data[1:] == 0x0A))  # at its LF
        ends = np.flatnonzero(line_end)  # each row's line end (a few per block)
        if data[-1] not in (0x0A, 0x0D):  # the last row has none
            ends = np.append(ends, len(block))
        seps = np.flatnonzero(data == self._delimiter)
        per_row = self.ncols - 1
        if (len(seps) != len(ends) * per_row or not np.array_equal(
                np.searchsorted(seps, ends), np.arange(1, len(ends) + 1) * per_row)):
            return None  # a row with a cell too many or too few
        seps = seps.reshape(len(ends), per_row)  # (row, cell) -> the delimiter after it
        arrays = []
        for j in self._keep.tolist():
            starts = seps[:, j - 1] + 1 if j else np.concatenate(([0], ends[:-1] + 1))
            if j < per_row:
                stops = seps[:, j]
            else:
                stops = ends
                if crlf:  # the CR of a CRLF is no cell's
                    inside = ends < len(block)
                    stops = ends.copy()
                    stops[inside] -= (data[ends[inside]] == 0x0A) & (data[ends[inside] - 1]
                                                                     == 0x0D)
            arrays.append(_gather(data, starts, stops))
        return pa.RecordBatch.from_arrays(arrays, names=self.names)


def _gather(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The slices ``data[starts[i]:ends[i]]`` as a string array (the bytes are valid UTF-8)."""
    lengths = ends - starts
    offsets = np.zeros(len(starts) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = data[np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])]
    return pa.Array.from_buffers(pa.string(), len(starts), [  # a block is under 2 GiB
        None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(values)])


def parse_block(block: bytes, ncols: int, delimiter: str, quotechar: str,
                max_row_bytes: int | None = None) -> pa.RecordBatch | None:
    """A clean block's rows as a RecordBatch of ``ncols`` string columns (``c0``...), or None
    (see :class:`BlockParser`, which a reader of many blocks makes once).

    Args:
        block: whole rows, quoting clean.
        ncols: the header's number of columns.
        delimiter: the delimiter character.
        quotechar: the quote character.
        max_row_bytes: the longest row allowed; None for no limit.

    Returns:
        The batch, or None.
    """
    return BlockParser(ncols, delimiter, quotechar, max_row_bytes).parse(block)


def pick_cells(row: bytes, keep: Sequence[int], ncols: int, quote: bytes,
               delimiter: bytes) -> list[str] | None:
    """The cells of the columns ``keep`` (indices) of one row (as :class:`RowSplitter` cuts
    rows, line end included) as ``csv`` splits it, or None
    unless the row is plainly well formed -- ``ncols`` cells, clean quoting, valid UTF-8, not
    empty -- so that ``csv`` must split it for its exact cells and errors.

    For wide rows of which few columns are read: numpy finds the delimiters and only the
    wanted cells become strings, where ``csv`` makes a string of every cell.

    Args:
        row: one row's bytes.
        keep: the indices of the columns wanted.
        ncols: the header's number of columns.
        quote: the quote character's byte.
        delimiter: the delimiter's byte.

    Returns:
        The kept cells, or None.
    """
    end = len(row)
    if row.endswith(b"\r\n"):
        end -= 2
    elif row.endswith((b"\n", b"\r")):
        end -= 1
    if not end or len(quote) != 1 or len(delimiter) != 1:
        return None
    body = row[:end] if end < len(row) else row
    data = np.frombuffer(body, np.uint8)
    seps = np.flatnonzero(data == delimiter[0])
    quoted = quote in body
    if quoted:
        if not quoting_is_clean(body, quote, delimiter):
            return None
        quotes = np.flatnonzero(data == quote[0])
        seps = seps[np.searchsorted(quotes, seps) % 2 == 0]  # not inside a quoted field
    if len(seps) + 1 != ncols or not is_utf8(body):
        return None
    cells = []
    for i in keep:
        cell = body[int(seps[i - 1]) + 1 if i else 0:int(seps[i]) if i < len(seps) else end]
        if quoted and cell[:1] == quote:
            cell = cell[1:-1].replace(quote + quote, quote)
        cells.append(cell.decode("utf-8"))
    return cells


# -- a row's text as cells, and the header a build reads at launch (no Beam) -----------------


class _Feed:
    """One row's text at a time for a long-lived ``csv.reader``."""

    __slots__ = ("text",)

    def __init__(self) -> None:
        self.text: str | None = None

    def __iter__(self) -> _Feed:
        return self

    def __next__(self) -> str:
        text, self.text = self.text, None
        if text is None:
            raise StopIteration
        return text


def row_cells(options: Any) -> Any:
    """A function from one row's text to its cells (``csv``, strict), raising csv.Error.

    Args:
        options: the source's CSV options (delimiter and quote character).

    Returns:
        The function.
    """
    lift_csv_field_limit()
    feed = _Feed()
    reader = csv.reader(feed, delimiter=options.delimiter, quotechar=options.quotechar,
                        strict=True)

    def cells(text: str) -> list[str]:
        feed.text = text
        try:
            return next(reader)
        except StopIteration:  # pragma: no cover - every row holds at least a line end
            return []

    return cells


def read_csv_header(handle: Any, options: Any, limit: int) -> list[str]:
    """The header row of a CSV stream, reading at most about ``limit`` bytes of it (the
    launch-time check of the config; invalid UTF-8 shows as U+FFFD). [] when the stream is
    empty or its first row is longer than ``limit`` or malformed (the reader reports it).

    Args:
        handle: the binary stream, at its start.
        options: the source's CSV options.
        limit: the most bytes of the row read.

    Returns:
        The column names, or [].
    """
    splitter = RowSplitter(_Capped(handle, limit + len(BOM) + 1),
                           options.quotechar.encode(), options.delimiter.encode(), limit,
                           strip_bom=True)
    head = next(iter(splitter), None)
    if type(head) is not bytes:
        return []
    try:
        return row_cells(options)(head.decode("utf-8", "replace"))
    except csv.Error:
        return []


class _Capped:
    """The first ``cap`` bytes of a stream, then its end."""

    def __init__(self, handle: Any, cap: int) -> None:
        self._handle = handle
        self._left = cap

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._handle.read(n) if n else b""
        self._left -= len(data)
        return data
