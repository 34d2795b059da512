"""Byte layout for the columnar encoder: many rows' short byte strings, put together at once.

A serialized Example is, per row, a fixed sequence of pieces (tags, varint lengths, keys,
values). A *block* is one such piece for every row of a batch:

* :class:`Padded` -- a ``(rows, width)`` uint8 matrix (or one broadcast row, for constants)
  and the number of leading bytes each row uses: tags, varints, float32 values, short strings;
* :class:`Flat` -- per row a slice of one flat buffer: long strings, packed lists.

:func:`assemble` concatenates every row's blocks. Runs of padded blocks are written straight to
their place in the output, a cache-sized *tile* of rows at a time. The blocks of a run are cut
into *spans* that end after each *ragged* block (one whose rows may use fewer bytes than its
width); a span's blocks are laid side by side in a tile matrix (a span of one block is read
where it is), and the span goes to every row's output offset in one numpy assignment of
``width``-byte items (a void dtype), its padding included: the padding lands on later bytes of
the same row, or past the row's end on the next row's leading spans (its *head*, which each
tile writes last), and is overwritten. A span whose padding would reach further (rows too
short for it) is written byte-wise through a mask instead. Flat blocks and the compacted runs
are then scattered into one output buffer at offsets from a cumulative sum. No Python code
runs per row.

Why spans and tiles: a single boolean mask over the whole ``(rows, width)`` matrix, filled
with one strided copy per byte column, would stream a matrix far larger than the cache
through memory once per column and then mask every byte; spans and tiles touch each output
byte about once (bench/README.md has the measurement).

Pure: numpy only.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["Flat", "Padded", "assemble", "const", "exclusive_cumsum", "segments", "varints"]

# A flat block whose longest row is at most this many bytes is padded into the matrix; longer
# ones are scattered from their buffer (padding a 100 kB image per row would be wasteful).
PAD_LIMIT = 64


class Padded:
    """Per row, the first ``lens[r]`` bytes of ``mat[r]``; an int ``lens`` holds for all rows.

    Args:
        mat: (rows, width) uint8; a single row is used for every row.
        lens: bytes used per row, or one count for all rows.
    """

    __slots__ = ("mat", "lens")

    def __init__(self, mat: np.ndarray, lens: np.ndarray | int) -> None:
        self.mat = mat
        self.lens = lens

    def only(self, on: np.ndarray | None) -> Padded:
        """The block for the rows where ``on`` is true (empty elsewhere); None: all rows.

        Args:
            on: a bool per row, or None.

        Returns:
            The block restricted to those rows.
        """
        if on is None:
            return self
        return Padded(self.mat, np.where(on, self.lens, 0))


class Flat:
    """Per row, ``data[starts[r]:starts[r] + lens[r]]``.

    Args:
        data: the bytes, uint8.
        starts: each row's start in ``data``.
        lens: each row's length.
    """

    __slots__ = ("data", "starts", "lens")

    def __init__(self, data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> None:
        self.data = data
        self.starts = starts
        self.lens = lens

    def only(self, on: np.ndarray | None) -> Flat:
        """The block for the rows where ``on`` is true (empty elsewhere); None: all rows.

        Args:
            on: a bool per row, or None.

        Returns:
            The block restricted to those rows.
        """
        if on is None:
            return self
        return Flat(self.data, self.starts, np.where(on, self.lens, 0))


Block = Padded | Flat


def exclusive_cumsum(lens: np.ndarray) -> np.ndarray:
    """Where each of the lengths starts when they are laid end to end.

    Args:
        lens: lengths, any integer dtype.

    Returns:
        int64 starts, the first 0.
    """
    out = np.zeros(lens.size, dtype=np.int64)
    if lens.size > 1:
        np.cumsum(lens[:-1], out=out[1:])
    return out


def segments(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The concatenated index ranges ``[starts[i], starts[i] + lens[i])``.

    Args:
        starts: each range's start.
        lens: each range's length.

    Returns:
        The indices, int64.
    """
    lens = lens.astype(np.int64, copy=False)
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(starts.astype(np.int64, copy=False) - exclusive_cumsum(lens), lens)
    return shift + np.arange(total, dtype=np.int64)


_LIMITS = [np.uint64(1 << (7 * k)) for k in range(1, 10)]


def varints(values: np.ndarray) -> tuple[Padded, np.ndarray]:
    """Varints of int64 values (negative ones as 10-byte two's complement), and their lengths.

    Args:
        values: int64 values.

    Returns:
        The varints as a :class:`Padded` block, and each one's length in bytes.
    """
    u = values.astype(np.int64, copy=False).view(np.uint64)
    vlen = np.ones(u.shape, dtype=np.int64)
    for limit in _LIMITS:
        more = u >= limit
        if not more.any():
            break
        vlen += more
    width = int(vlen.max()) if vlen.size else 1
    if width == 1:
        return Padded(u.astype(np.uint8).reshape(-1, 1), 1), vlen
    mat = np.empty((u.size, width), dtype=np.uint8)
    for j in range(width):
        byte = ((u >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        mat[:, j] = byte | ((vlen > j + 1).view(np.uint8) << 7)
    return Padded(mat, width if int(vlen.min()) == width else vlen), vlen


def const(data: bytes, on: np.ndarray | None = None) -> Padded:
    """The same bytes in every row where ``on`` (None: every row).

    Args:
        data: the bytes each selected row gets, such as a field's tag.
        on: a bool per row, or None for every row.

    Returns:
        The block.
    """
    row = np.frombuffer(data, dtype=np.uint8)[None, :]
    return Padded(row, len(data) if on is None else on.astype(np.int64) * len(data))


def _to_padded(block: Flat, n: int) -> Padded:
    width = max(int(block.lens.max()) if n else 0, 1)
    mat = np.zeros((n, width), dtype=np.uint8)
    rows = np.arange(n, dtype=np.int64) * width
    mat.reshape(-1)[segments(rows, block.lens)] = block.data[segments(block.starts, block.lens)]
    return Padded(mat, block.lens)


# -- compacting a run of padded blocks ---------------------------------------------------------

# Rows are laid out about this many bytes of padded width at a time (a *tile*), so the tile
# matrix, the block rows copied into it and the output written from it stay in the CPU cache.
TILE_BYTES = 1 << 20


@functools.cache
def _item(width: int) -> np.dtype:
    return np.dtype((np.void, width))


def _items(rows: np.ndarray) -> np.ndarray:
    """``(k, w)`` uint8 rows (each row contiguous) as ``k`` items of ``w`` bytes: one numpy
    operation then moves ``w`` bytes per row, instead of one operation per byte column."""
    return rows.view(_item(rows.shape[1]))[:, 0]


def _fills_width(block: Padded) -> bool:
    """Every row uses the whole width (some blocks only know it from their lengths)."""
    width = block.mat.shape[1]
    if isinstance(block.lens, int):
        return block.lens == width
    return bool((block.lens == width).all())


def _group(blocks: list[Padded]) -> tuple[list[tuple[list[Padded], bool]], int]:
    """The blocks cut into spans ``(blocks, ends ragged)``, and how many lead (the *head*).

    A span ends after every ragged block, so padding only ever trails a span. The head ends as
    soon as it holds as many fixed bytes in a row as the widest ragged block: padding spilled
    past a row's end then lands inside the next row's head. (Without such a run the head is
    the first span, and a span whose padding would reach too far is written without it.)
    """
    blocks = [b for b in blocks if b.mat.shape[1]]
    fills = [_fills_width(b) for b in blocks]
    widest = max((b.mat.shape[1] for b, f in zip(blocks, fills) if not f), default=0)
    groups: list[tuple[list[Padded], bool]] = []
    current: list[Padded] = []
    head, run = 0, 0
    for b, f in zip(blocks, fills):
        current.append(b)
        run = run + b.mat.shape[1] if f else 0
        head_ends = f and not head and widest and run >= widest
        if head_ends or not f:
            groups.append((current, not f))
            current = []
        if head_ends:
            head = len(groups)
    if current:
        groups.append((current, False))
    return groups, head or 1


class _Span:
    """Adjacent blocks of a run, written at every row's position with one numpy assignment.

    ``lens``: the bytes each row uses, an int if all of them (a *fixed* span), else per row
    (the last block is ragged: the rest of the width is padding). ``source``: the bytes, a
    ``(1, width)`` constant, a block's own ``(n, width)`` matrix, or (``tiled``) the span's
    columns of the ``(tile rows, ...)`` tile matrix where its blocks are laid side by side.
    """

    __slots__ = ("width", "lens", "source", "tiled")

    def __init__(self, width: int, lens: np.ndarray | int, source: np.ndarray,
                 tiled: bool = False) -> None:
        self.width = width
        self.lens = lens
        self.source = source
        self.tiled = tiled

    @property
    def fixed(self) -> bool:
        return isinstance(self.lens, int)

    def rows(self, lo: int, hi: int) -> np.ndarray:
        """The bytes of rows ``lo:hi`` as ``(hi - lo, width)``, or ``(1, width)`` if constant."""
        if self.tiled:  # the tile holds rows lo:hi now
            return self.source[:hi - lo]
        return self.source if self.source.shape[0] == 1 else self.source[lo:hi]

    def lens_of(self, lo: int, hi: int) -> np.ndarray | int:
        return self.lens if self.fixed else self.lens[lo:hi]


def _spans(blocks: list[Padded], n: int
           ) -> tuple[list[_Span], int, list[tuple[np.ndarray, np.ndarray]], int]:
    """(spans, how many form the head, per-tile copies ``(tile columns, block rows)``, rows
    per tile).

    A span of one block, or of constants only, reads its bytes where they are; a span of
    several blocks is laid out in the tile matrix, whose constant columns are filled once.
    """
    groups, head = _group(blocks)
    tile_rows = max(1, min(n, TILE_BYTES // max(1, sum(b.mat.shape[1] for b in blocks))))
    in_tile = [len(g) > 1 and any(b.mat.shape[0] > 1 for b in g) for g, _ in groups]
    tiled_width = sum(sum(b.mat.shape[1] for b in g) for (g, _), t in zip(groups, in_tile) if t)
    tile = np.empty((tile_rows, tiled_width), dtype=np.uint8)
    constants = np.zeros(tiled_width, dtype=np.uint8)  # the other columns: copied per tile
    spans: list[_Span] = []
    copies: list[tuple[np.ndarray, np.ndarray]] = []
    col = 0
    for (g, ragged), tiled in zip(groups, in_tile):
        width = sum(b.mat.shape[1] for b in g)
        lens: np.ndarray | int = width
        if ragged:
            lens = np.full(n, width - g[-1].mat.shape[1], dtype=np.int64) + g[-1].lens
        if not tiled:
            source = np.concatenate([b.mat for b in g], axis=1) if len(g) > 1 else g[0].mat
            spans.append(_Span(width, lens, np.ascontiguousarray(source)))
            continue
        spans.append(_Span(width, lens, tile[:, col:col + width], tiled=True))
        for b in g:
            w = b.mat.shape[1]
            if b.mat.shape[0] == 1:
                constants[col:col + w] = b.mat[0]
            else:
                copies.append((_items(tile[:, col:col + w]), _items(np.ascontiguousarray(b.mat))))
            col += w
    tile[:] = constants
    return spans, head, copies, tile_rows


def _padding_fits(pos: np.ndarray, width: int, limit: np.ndarray) -> bool:
    """No row's ``width`` bytes from ``pos`` pass ``limit``."""
    return bool((pos + width <= limit).all())


class _Output:
    """The output bytes, plus room for padding spilled past the last row."""

    def __init__(self, size: int, slack: int) -> None:
        self.buf = np.empty(size + slack, dtype=np.uint8)
        self._items: dict[int, np.ndarray] = {}

    def items(self, width: int) -> np.ndarray:
        """The buffer as overlapping ``width``-byte items, one starting at every byte."""
        view = self._items.get(width)
        if view is None:
            view = np.ndarray((self.buf.size - width + 1,), _item(width), buffer=self.buf,
                              strides=(1,))
            self._items[width] = view
        return view

    def write(self, span: _Span, lo: int, hi: int, pos: np.ndarray, limit: np.ndarray) -> None:
        """Rows ``lo:hi`` of ``span`` at ``pos``: whole, padding included, if no row's padding
        passes ``limit`` (the bytes up to there are all written later), else only the bytes
        each row uses (a byte-wise mask, much slower: rows too short for their padding)."""
        rows = span.rows(lo, hi)
        if span.fixed or _padding_fits(pos, span.width, limit):
            self.items(span.width)[pos] = _items(rows)
            return
        lens = span.lens_of(lo, hi)
        used = np.arange(span.width) < lens[:, None]
        self.buf[segments(pos, lens)] = np.broadcast_to(rows, used.shape)[used]


def _write_tile(out: _Output, spans: list[_Span], head: int, lo: int, hi: int,
                starts: np.ndarray, head_end: np.ndarray, next_head_end: np.ndarray) -> None:
    """Rows ``lo:hi``, span by span: the head last, over any padding spilled into it."""
    pos = starts[lo:hi]
    later = []
    for i, span in enumerate(spans):
        if i < head:
            later.append((span, pos))
        else:  # padding may run on into the next row's head, written after it
            out.write(span, lo, hi, pos, next_head_end[lo:hi])
        pos = pos + span.lens_of(lo, hi)
    for span, at in later:
        out.write(span, lo, hi, at, head_end[lo:hi])


def _compact(blocks: list[Padded], n: int) -> Flat:
    """Consecutive padded blocks as one flat block, written a tile of rows at a time."""
    spans, head, copies, tile_rows = _spans(blocks, n) if n else ([], 0, [], 1)
    lens = np.full(n, sum(s.width for s in spans if s.fixed), dtype=np.int64)
    for s in spans:
        if not s.fixed:
            lens += s.lens
    starts = exclusive_cumsum(lens)
    total = int(lens.sum())
    slack = max((s.width for s in spans if not s.fixed), default=0)
    out = _Output(total, slack)
    if not spans:
        return Flat(out.buf, starts, lens)
    side_by_side = len(spans) == 1 and spans[0].fixed  # all rows one width: no offsets needed
    if side_by_side:
        rows_out = out.buf[:total].reshape(n, spans[0].width)
    else:
        head_end = starts + sum(s.lens for s in spans[:head])  # (n,) where each head ends
        next_head_end = np.append(head_end[1:], total + slack)
    for lo in range(0, n, tile_rows):
        hi = min(n, lo + tile_rows)
        for tile_cols, block_rows in copies:
            tile_cols[:hi - lo] = block_rows[lo:hi]
        if side_by_side:
            rows_out[lo:hi] = spans[0].rows(lo, hi)
        else:
            _write_tile(out, spans, head, lo, hi, starts, head_end, next_head_end)
    return Flat(out.buf[:total], starts, lens)


def assemble(blocks: list[Block], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the concatenation of every block's bytes: (uint8 payload, ``n + 1`` offsets).

    Args:
        blocks: the rows' byte blocks, in the order their bytes are joined.
        n: the number of rows.

    Returns:
        The uint8 payload and the rows' int64 offsets into it.
    """
    runs: list[Flat] = []
    pending: list[Padded] = []
    for b in blocks:
        if isinstance(b, Flat) and (n == 0 or int(b.lens.max()) <= PAD_LIMIT):
            b = _to_padded(b, n)
        if isinstance(b, Padded):
            pending.append(b)
            continue
        if pending:
            runs.append(_compact(pending, n))
            pending = []
        runs.append(b)
    if pending:
        runs.append(_compact(pending, n))
    offsets = np.zeros(n + 1, dtype=np.int64)
    if not runs:
        return np.zeros(0, dtype=np.uint8), offsets
    lens = np.stack([r.lens for r in runs], axis=1)
    np.cumsum(lens.sum(axis=1), out=offsets[1:])
    if len(runs) == 1:
        return runs[0].data, offsets
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    starts = offsets[:-1, None] + np.cumsum(lens, axis=1) - lens
    for k, run in enumerate(runs):
        out[segments(starts[:, k], run.lens)] = run.data[segments(run.starts, run.lens)]
    return out, offsets
