"""Byte layout for the columnar encoder: many rows' short byte strings, put together at once.

A serialized Example is, per row, a fixed sequence of pieces (tags, varint lengths, keys,
values). A *block* is one such piece for every row of a batch:

* :class:`Padded` -- a ``(rows, width)`` uint8 matrix (or one broadcast row, for constants)
  and the number of leading bytes each row uses: tags, varints, float32 values, short strings;
* :class:`Flat` -- per row a slice of one flat buffer: long strings, packed lists.

:func:`assemble` concatenates every row's blocks. Runs of padded blocks are laid side by side
in one matrix and compacted with one boolean mask (row-major order concatenates each row's
pieces; blocks that every row fills completely need no mask at all); flat blocks and the
compacted runs are then scattered into one output buffer at offsets from a cumulative sum.
No Python code runs per row.

Pure: numpy only.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Flat", "Padded", "assemble", "const", "exclusive_cumsum", "segments", "varints"]

# A flat block whose longest row is at most this many bytes is padded into the matrix; longer
# ones are scattered from their buffer (padding a 100 kB image per row would be wasteful).
PAD_LIMIT = 64


class Padded:
    """Per row, the first ``lens[r]`` bytes of ``mat[r]``; an int ``lens`` holds for all rows."""

    __slots__ = ("mat", "lens")

    def __init__(self, mat: np.ndarray, lens: np.ndarray | int) -> None:
        self.mat = mat
        self.lens = lens

    @property
    def full(self) -> bool:
        """Every row uses the whole width: no mask needed."""
        return isinstance(self.lens, int) and self.lens == self.mat.shape[1]

    def only(self, on: np.ndarray | None) -> Padded:
        """The block for the rows where ``on`` is true (empty elsewhere); None: all rows."""
        if on is None:
            return self
        return Padded(self.mat, np.where(on, self.lens, 0))


class Flat:
    """Per row, ``data[starts[r]:starts[r] + lens[r]]``."""

    __slots__ = ("data", "starts", "lens")

    def __init__(self, data: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> None:
        self.data = data
        self.starts = starts
        self.lens = lens

    def only(self, on: np.ndarray | None) -> Flat:
        if on is None:
            return self
        return Flat(self.data, self.starts, np.where(on, self.lens, 0))


Block = Padded | Flat


def exclusive_cumsum(lens: np.ndarray) -> np.ndarray:
    out = np.zeros(lens.size, dtype=np.int64)
    if lens.size > 1:
        np.cumsum(lens[:-1], out=out[1:])
    return out


def segments(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The concatenated index ranges ``[starts[i], starts[i] + lens[i])``."""
    lens = lens.astype(np.int64, copy=False)
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(starts.astype(np.int64, copy=False) - exclusive_cumsum(lens), lens)
    return shift + np.arange(total, dtype=np.int64)


_LIMITS = [np.uint64(1 << (7 * k)) for k in range(1, 10)]


def varints(values: np.ndarray) -> tuple[Padded, np.ndarray]:
    """Varints of int64 values (negative ones as 10-byte two's complement), and their lengths."""
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
    """The same bytes in every row where ``on`` (None: every row)."""
    row = np.frombuffer(data, dtype=np.uint8)[None, :]
    return Padded(row, len(data) if on is None else on.astype(np.int64) * len(data))


def _lens(block: Block, n: int) -> np.ndarray:
    lens = block.lens
    return np.full(n, lens, dtype=np.int64) if isinstance(lens, int) else lens


def _to_padded(block: Flat, n: int) -> Padded:
    width = max(int(block.lens.max()) if n else 0, 1)
    mat = np.zeros((n, width), dtype=np.uint8)
    rows = np.arange(n, dtype=np.int64) * width
    mat.reshape(-1)[segments(rows, block.lens)] = block.data[segments(block.starts, block.lens)]
    return Padded(mat, block.lens)


def _compact(blocks: list[Padded], n: int) -> Flat:
    """Consecutive padded blocks as one flat block."""
    width = sum(b.mat.shape[1] for b in blocks)
    # Constant blocks go in with one broadcast copy of a template row; the others column by
    # column (numpy copies a narrow strided column block far slower than single columns).
    template = np.zeros(width, dtype=np.uint8)
    col = 0
    for b in blocks:
        w = b.mat.shape[1]
        if b.mat.shape[0] == 1:
            template[col:col + w] = b.mat[0]
        col += w
    mat = np.empty((n, width), dtype=np.uint8)
    mat[:] = template
    mask = None
    col = 0
    for b in blocks:
        w = b.mat.shape[1]
        if b.mat.shape[0] != 1:
            for j in range(w):
                mat[:, col + j] = b.mat[:, j]
        if not b.full:
            if mask is None:
                mask = np.ones((n, width), dtype=bool)
            np.less(np.arange(w), _lens(b, n).reshape(-1, 1), out=mask[:, col:col + w])
        col += w
    data = mat.reshape(-1) if mask is None else mat[mask]
    lens = np.zeros(n, dtype=np.int64)
    for b in blocks:
        lens += b.lens
    return Flat(data, exclusive_cumsum(lens), lens)


def assemble(blocks: list[Block], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the concatenation of every block's bytes: (uint8 payload, ``n + 1`` offsets)."""
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
