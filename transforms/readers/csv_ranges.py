"""CSV by byte ranges: where a range's first record starts, proven against the whole-file read.

A range owns the rows that start inside it (:mod:`ranges`). Where CSV rows start depends on
quoting: a line end inside a quoted field is data, so a line end says nothing by itself, and
a file's head says nothing about whether byte 10,000,000 is inside a quoted field. The rows
here are the rows :class:`csv_columnar.RowSplitter` cuts (Python's ``csv``, ``strict``,
doubled quotes, CR, LF or CRLF line ends, the configured delimiter and quote character, a
UTF-8 BOM skipped at the file's start): the per-row and columnar readers read exactly these.

**Points.** Call *point* an offset just after a line end: after an LF, or after a CR not
followed by an LF (the end of a CRLF is after its LF). Reading from the file's start, the
parse state at a point is one of exactly two: a row has just ended (*out*: a row starts here)
or the line end was inside a quoted field (*in*). Every other state needs its last byte to be
something else -- a delimiter, a quote, a plain byte -- or, for a CR, the byte after it; an
LF or lone CR ends the row in every state outside a quoted field (an empty row too, and after
a closing quote). So the rows of a file start at its first byte (after a BOM) and at exactly
the points whose state is *out*; and from a point, the state there determines the rest of the
parse.

**A range's start.** A range ``[a, b)`` not at the file's start looks at its *start point*,
the first point at or after ``a`` (no row starts between ``a`` and it). It parses on from
there under both states (:func:`csv_range_start`): *out* makes the point itself the first
row start, *in* the first row end of a parse that begins inside a quoted field. The two
parses can only come together after quoting that is irregular in one of them -- with every
quote opening a field at its start, closing it before a delimiter or line end, or doubled
inside it, each quote flips both parses, so they stay apart -- and from where they agree the
rest is the same. So each is scored by what it meets before they agree, within
``lookahead`` bytes: first irregular quoting (a closing quote followed by something else, a
quote inside an unquoted field, the file ending inside a quoted field), which no writer
makes; then, given the header's width, rows of another number of cells, which only a
malformed file has. The lower score wins, *out* on a tie (text without quotes ties). Walking
rows is what a start costs, so once the *in* parse meets no more quotes, the *out* parse
goes on alone for ``QUIET`` bytes at most.

**Joining up.** The choice is a guess; the proof is the join. The range reads its rows from
the chosen start (``RowSplitter``), on past ``b`` to the first row start at or after ``b``,
and reports the state at its *end point*, the first point at or after ``b`` -- which is the
next range's start point: *out* exactly when a row starts there (:func:`csv_link`). The
first range's start is certain; if every range assumed what the range before it found, every
range parsed from the true state, by induction, and its rows are the whole-file rows.
:func:`ranges.check_links` fails the build otherwise, naming the file and byte: never a
silently cut row. A row that starts in one range and ends in another is read whole by the
first. The header is the first row of the file and so of the first range only; the other
ranges are told the columns.

Pure: no Beam, no file systems (bytes come through a :data:`ranges.ReadAt`).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterator
from typing import Any

from beam_tfrecords.transforms.readers.csv_columnar import BOM, RowSpan, RowSplitter
from beam_tfrecords.transforms.readers.ranges import Link, ReadAt, WindowStream, describe_state

__all__ = ["IN", "OUT", "CsvStart", "Dialect", "Hypothesis", "RangeRows", "csv_link",
           "csv_range_start", "describe_state", "first_start", "point_at"]

OUT = "out"  # the line end before the point ended a row: a row starts at the point
IN = "in"  # the line end before the point is inside a quoted field
DEFAULT_LOOKAHEAD = 1 << 20
# How far the "out" parse goes on alone once the "in" parse has nothing more to say (text
# without quotes: both score nothing, and walking rows is the costly part).
QUIET = 1 << 14
_CHUNK = 1 << 16
_LF, _CR = 0x0A, 0x0D
_FIELD, _UNQUOTED, _QUOTED = 0, 1, 2  # at a field's start / in an unquoted / a quoted field


@dataclasses.dataclass(frozen=True)
class Dialect:
    """The bytes that split CSV rows: the quote and the delimiter, each one character in
    UTF-8 (two one-character tokens never overlap in any bytes)."""

    quote: bytes = b'"'
    delimiter: bytes = b","

    @classmethod
    def of(cls, options: Any) -> Dialect:
        """From ``CsvOptions`` (``quotechar``, ``delimiter``).

        Args:
            options: the source's CSV options.

        Returns:
            The dialect, as bytes.
        """
        return cls(options.quotechar.encode(), options.delimiter.encode())


# -- the parse, event by event ----------------------------------------------------------------

# A row ends / irregular quoting / a row of another width than the header / the file ends
# inside a quoted field (irregular quoting too).
_ROW, _ODD, _RAGGED, _OPEN = "row", "odd", "ragged", "open"


class _Walk:
    """The parse ``RowSplitter`` makes, from byte ``pos`` at a row start or (``quoted``)
    inside a quoted field, as events ``(kind, offset)``: ``row`` (a row ends; the next
    starts at offset), ``odd`` (irregular quoting, see the module doc), ``ragged`` (given
    ``ncols``, a row of another number of cells) and ``open`` (the file ends inside a quoted
    field). Reads the file in chunks, holding only the unparsed rest of one."""

    def __init__(self, read_at: ReadAt, dialect: Dialect, pos: int, quoted: bool,
                 ncols: int | None = None, until: int | None = None) -> None:
        self._read_at = read_at
        self.until = until  # read no further than this offset (None: the file's end)
        self._q = dialect.quote
        self._d = dialect.delimiter
        self._need = max(len(self._q), len(self._d), 1)
        self._ncols = ncols
        self._base = pos  # file offset of _buf[0]
        self._buf = b""
        self._eof = False
        self._pos = pos  # file offset where parsing resumes
        self._row = pos if not quoted else pos - 1  # where the current row started
        self._state = _QUOTED if quoted else _FIELD
        # Cells of the current row so far; None: unknown (a row that began before ``pos``).
        self._cells: int | None = None if quoted else 1
        self._done = False

    def _more(self) -> None:
        keep = self._pos - self._base
        data = self._read_at(self._base + len(self._buf), _CHUNK)
        self._buf = self._buf[keep:] + data
        self._base += keep
        self._eof = not data

    def __iter__(self) -> Iterator[tuple[str, int]]:
        while not self._done:
            step = self._step()
            if step is None:  # what comes next depends on bytes not read yet
                if self.until is not None and self._base + len(self._buf) >= self.until:
                    return
                self._more()
                continue
            yield from step

    def _state_at(self, i: int, pos: int) -> int:
        """The state at buffer index ``i``, in unquoted text running from ``pos``."""
        if i == pos:
            return self._state
        d = self._d
        return _FIELD if i - len(d) >= pos and self._buf.startswith(d, i - len(d)) else (
            _UNQUOTED)

    def _plain_to(self, pos: int, i: int) -> None:
        """Move through unquoted text (no quote, no line end) from ``pos`` to ``i``."""
        self._count(self._buf.count(self._d, pos, i))
        self._state = self._state_at(i, pos)
        self._pos = self._base + i

    def _count(self, delimiters: int) -> None:
        if self._cells is not None:
            self._cells += delimiters

    def _row_end(self, i: int) -> list[tuple[str, int]]:
        """The row ends at the line end at buffer index ``i`` (its bytes are all read)."""
        buf = self._buf
        if buf[i] == _LF or i + 1 == len(buf):
            end = i + 1
        else:
            end = i + 2 if buf[i + 1] == _LF else i + 1
        events = []
        cells = 0 if self._base + i == self._row else self._cells  # csv: [] for an empty line
        if self._ncols is not None and cells is not None and cells != self._ncols:
            events.append((_RAGGED, self._base + i))
        self._pos = self._row = self._base + end
        self._state, self._cells = _FIELD, 1
        events.append((_ROW, self._pos))
        return events

    def _half_crlf(self, i: int) -> bool:
        """Whether buffer index ``i`` is a CR whose LF may follow in bytes not read yet."""
        return self._buf[i] == _CR and i + 1 == len(self._buf) and not self._eof

    def _step(self) -> list[tuple[str, int]] | None:
        """The events up to and including the next row end or irregular quote (maybe none),
        or None when what comes next depends on bytes not read yet."""
        buf, n, q, d = self._buf, len(self._buf), self._q, self._d
        pos = self._pos - self._base
        if pos >= n:
            if not self._eof:
                return None
            if self._state == _QUOTED:
                self._done = True
                return [(_OPEN, self._base + n)]
            if self._pos > self._row:  # the last row has no line end
                return self._last_row()
            self._done = True
            return []
        if self._state == _QUOTED:
            j = buf.find(q, pos)
            if j < 0:
                if self._eof:
                    self._pos = self._base + n
                    self._done = True
                    return [(_OPEN, self._pos)]
                self._pos = self._base + max(pos, n - len(q) + 1)
                return None
            k = j + len(q)
            if (n - k < self._need and not self._eof) or (k < n and self._half_crlf(k)):
                self._pos = self._base + j
                return None
            if k >= n:  # a closing quote ends the file
                self._pos = self._base + n
                self._state = _FIELD
                return self._last_row()
            if buf.startswith(q, k):  # a doubled quote
                self._pos = self._base + k + len(q)
                return []
            if buf[k] in (_LF, _CR):
                return self._row_end(k)
            if buf.startswith(d, k):
                self._pos, self._state = self._base + k + len(d), _FIELD
                self._count(1)
                return []
            self._pos, self._state = self._base + k, _UNQUOTED  # csv: delimiter expected
            return [(_ODD, self._base + j)]
        lf = buf.find(b"\n", pos)
        stop = n if lf < 0 else lf
        cr = buf.find(b"\r", pos, stop)
        if cr >= 0:
            stop = cr
        j = buf.find(q, pos, stop)
        if j >= 0:
            self._plain_to(pos, j)
            self._pos = self._base + j + len(q)
            if self._state == _FIELD:
                self._state = _QUOTED
                return []
            self._state = _UNQUOTED  # a quote inside an unquoted field: csv keeps it as text
            return [(_ODD, self._base + j)]
        if stop < n:
            if self._half_crlf(stop):
                self._plain_to(pos, stop)
                return None
            self._plain_to(pos, stop)
            return self._row_end(stop)
        if self._eof:
            self._plain_to(pos, n)
            return []
        resume = max(pos, n - self._need + 1)
        last = buf.rfind(d, pos, n)
        if 0 <= last < resume < last + len(d):  # not inside a delimiter
            resume = last
        self._plain_to(pos, resume)
        return None

    def _last_row(self) -> list[tuple[str, int]]:
        """The file ends the row that started at ``_row`` (it has no line end)."""
        events = []
        if self._ncols is not None and self._cells is not None and self._cells != self._ncols:
            events.append((_RAGGED, self._pos))
        self._row = self._pos
        self._state, self._cells = _FIELD, 1
        events.append((_ROW, self._pos))
        return events


# -- points, starts, rows, links --------------------------------------------------------------

def first_start(read_at: ReadAt) -> int:
    """Where a file's first row (the header, when there is one) starts: after a UTF-8 BOM.

    Args:
        read_at: the file's bytes.

    Returns:
        3 after a BOM, else 0.
    """
    return len(BOM) if read_at(0, len(BOM)) == BOM else 0


def point_at(read_at: ReadAt, offset: int, head: int = 0) -> int:
    """The first point (see the module doc) at or after ``offset``, or the file's size when
    none follows; ``head`` (the first row's start) for an offset at or before it.

    Args:
      read_at: the file's bytes.
      offset: a range boundary.
      head: :func:`first_start` of the file.

    Returns:
      The offset of the point."""
    if offset <= head:
        return head
    at = offset - 1  # the line end may be the byte just before the offset
    while True:
        data = read_at(at, _CHUNK + 1)  # one byte more: a CR's successor
        if not data:
            return at
        lf, cr = data.find(b"\n", 0, _CHUNK), data.find(b"\r", 0, _CHUNK)
        hits = [i for i in (lf, cr) if i >= 0]
        if not hits:
            if len(data) <= _CHUNK:
                return at + len(data)
            at += _CHUNK
            continue
        i = min(hits)
        if data[i] == _CR and data[i + 1:i + 2] == b"\n":
            return at + i + 2
        return at + i + 1


@dataclasses.dataclass(frozen=True)
class Hypothesis:
    """One state assumed at a range's start point: the first row start it gives (None: not
    looked for, the other state won first), and the irregular quoting and the rows of
    another width than the header its parse met before the two parses agree (within the
    lookahead)."""

    state: str
    first: int | None
    irregular: int
    ragged: int = 0


@dataclasses.dataclass(frozen=True)
class CsvStart:
    """Where the range starting at byte ``offset`` begins reading: its start ``point``, the
    ``state`` it assumes there (None: certain -- the file's first row -- or nothing to
    assume, at the file's end), the ``first`` row start it owns (at or after its end: it
    owns none), both ``hypotheses`` and the offset from which their parses ``agreed`` (None:
    not within the lookahead)."""

    offset: int
    point: int
    state: str | None
    first: int
    hypotheses: tuple[Hypothesis, ...] = ()
    agreed: int | None = None


def csv_range_start(read_at: ReadAt, offset: int, dialect: Dialect, *,
                    ncols: int | None = None, lookahead: int = DEFAULT_LOOKAHEAD) -> CsvStart:
    """Where the range starting at byte ``offset`` starts reading, and what it assumes.

    Args:
      read_at: the file's bytes.
      offset: the range's start.
      dialect: the quote and delimiter.
      ncols: the header's number of columns, when known (a sharper guess).
      lookahead: how far past the start point the two parses are compared.

    Returns:
      The range's :class:`CsvStart`."""
    head = first_start(read_at)
    point = point_at(read_at, offset, head)
    if offset <= head:
        return CsvStart(offset, head, None, head, (), head)
    if not read_at(point, 1):
        return CsvStart(offset, point, None, point, (), point)
    until = point + lookahead
    walkers = {OUT: iter(_Walk(read_at, dialect, point, False, ncols, until)),
               IN: iter(_Walk(read_at, dialect, point, True, ncols, until))}
    rows: dict[str, list[int]] = {OUT: [point], IN: []}
    seen: dict[str, set[int]] = {OUT: {point}, IN: set()}
    odd: dict[str, list[tuple[int, str]]] = {OUT: [], IN: []}  # (offset, kind)
    front = {OUT: point, IN: point}
    live = {OUT: True, IN: True}
    agreed = None
    while agreed is None and any(live.values()):
        if not live[IN] and front[OUT] >= max(front[IN], rows[IN][-1] if rows[IN] else 0):
            # No row of the "in" parse is left to agree on: the "out" parse decides alone,
            # once it scores more (then "in" wins) or after QUIET bytes more (a tie or less).
            if _score(odd[OUT], None) > _score(odd[IN], None) or (
                    front[OUT] >= front[IN] + QUIET):
                break
        state = min((s for s in (OUT, IN) if live[s]), key=lambda s: front[s])
        other = IN if state == OUT else OUT
        event = next(walkers[state], None)
        if event is None:
            live[state] = False
            continue
        kind, at = event
        front[state] = at
        if kind == _ROW:
            rows[state].append(at)
            seen[state].add(at)
            if at in seen[other]:
                agreed = at
        else:
            odd[state].append((at, kind))
    score = {s: _score(odd[s], agreed) for s in (OUT, IN)}
    chosen = IN if score[IN] < score[OUT] else OUT
    first_in: int | None = rows[IN][0] if rows[IN] else None
    if chosen == IN and first_in is None:  # the quoted field runs past the lookahead
        walk = _Walk(read_at, dialect, point, True)
        first_in = next((at for kind, at in walk if kind == _ROW), None)
        if first_in is None:  # the file ends inside the quoted field
            first_in = _size(read_at, point)
    first = point if chosen == OUT else first_in
    assert first is not None
    return CsvStart(offset, point, chosen, first,
                    (Hypothesis(OUT, point, *score[OUT]), Hypothesis(IN, first_in, *score[IN])),
                    agreed)


def _score(events: list[tuple[int, str]], before: int | None) -> tuple[int, int]:
    """(irregular quoting, ragged rows) among ``events`` before offset ``before`` (None:
    all): quoting first, as no writer makes it, while ragged rows are a mere malformed
    file's."""
    counted = [kind for at, kind in events if before is None or at < before]
    ragged = counted.count(_RAGGED)
    return len(counted) - ragged, ragged


def _size(read_at: ReadAt, at: int) -> int:
    """The file's size, reading on from ``at``."""
    while data := read_at(at, 1 << 20):
        at += len(data)
    return at


def csv_link(start: CsvStart, end_point: int, stop: int) -> Link:
    """The join of a range that started at ``start`` and whose parse found its first row
    start at or after its end at ``stop`` (the file's size when none), ``end_point`` being
    :func:`point_at` its end: *out* there exactly when a row starts there.

    Args:
        start: where and in which state the range started.
        end_point: :func:`point_at` the range's end.
        stop: the first row start at or after the end.

    Returns:
        The range's link.
    """
    if start.point >= end_point:  # owns no row start: the state before passes through
        return Link(start.point, None, start.point, None)
    return Link(start.point, start.state, end_point, OUT if stop == end_point else IN)


class RangeRows:
    """The rows a range owns, as ``(offset, row)`` pairs -- ``row`` as
    :class:`csv_columnar.RowSplitter` yields it: bytes, or a :class:`RowSpan` for a row over
    ``limit`` bytes or an unterminated quote -- read from ``start.first`` up to the first row
    starting at or after ``end``. After iterating, ``stop`` is that row's start (the file's
    size when none) and ``link`` the range's :class:`ranges.Link`.

    Args:
        read_at: the file's bytes.
        start: where the range's first row starts, and the quote state assumed there.
        end: the range's end offset.
        dialect: the quote and delimiter bytes.
        limit: the longest row held, in bytes.
    """

    def __init__(self, read_at: ReadAt, start: CsvStart, end: int, dialect: Dialect,
                 limit: int) -> None:
        self._read_at = read_at
        self._start = start
        self._end = end
        self._dialect = dialect
        self._limit = limit
        self.stop: int | None = None

    def __iter__(self) -> Iterator[tuple[int, bytes | RowSpan]]:
        at = self._start.first
        stream = io.BufferedReader(WindowStream(self._read_at, at), 1 << 16)
        splitter = RowSplitter(stream, self._dialect.quote, self._dialect.delimiter,
                               self._limit, start=at)
        for row in splitter:
            if at >= self._end:
                break
            yield at, row
            at += len(row) if type(row) is bytes else row.size
        self.stop = at

    @property
    def link(self) -> Link:
        if self.stop is None:
            raise RuntimeError("iterate the rows first")
        head = first_start(self._read_at)
        return csv_link(self._start, point_at(self._read_at, self._end, head), self.stop)
