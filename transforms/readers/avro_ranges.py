"""Avro by byte ranges: a range owns the blocks that start inside it.

An Avro object container is a header (magic, metadata, a 16-byte sync marker) and blocks,
each a record count, a byte size, the data and the sync marker again. A block starts right
after the header or right after a sync marker, so the first block a range ``[a, b)`` owns
starts right after the first sync marker at or after byte ``a - 16`` (the header's own
marker included: the first block starts after it) -- :func:`block_start`, as Beam's
``avroio`` finds it. From there the range walks the framing block by block (count, size,
data, marker) and stops at the first block starting at or after ``b``: the blocks of all
ranges, in range order, are the whole file's blocks.

Damage is recovered as a range's start is found: a block whose framing fails (a size past
``max_record_bytes`` or the file, a wrong sync marker after it, a bad varint) is one damaged
stretch up to and including the next sync marker. (The whole-file reader also keeps the
block after a damaged marker when that block frames soundly; no range start can find such a
block, so under ranges it is part of the damaged stretch -- otherwise the range before would
read it and the range after skip it, or the other way round.)

Two assumptions, both checked rather than trusted: a sync marker's 16 random bytes occur in
no block's data (a chance of about 2**-128 per position), and damaged framing is recovered
the same way whichever range meets it (:func:`range_blocks` searches for the next marker, as
a range's start does). Each range's :class:`ranges.Link` says where it began and where its
walk stopped; :func:`ranges.check_links` fails the build when one range stops where the next
did not begin, so a block is never lost or read twice without a word.

Row numbers: a block's header counts its records, but a range not at the file's start does
not know the counts of the blocks before it, so its dead letters carry the block's byte
offset instead of a row.

Pure: no Beam, no file systems (bytes come through a :data:`ranges.ReadAt`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

from beam_tfrecords.transforms.readers.ranges import Link, ReadAt

__all__ = ["AvroBlock", "AvroDamage", "AvroHead", "avro_head", "avro_link", "block_start",
           "frame_block", "range_blocks"]

MAGIC = b"Obj\x01"
SYNC = 16
_CHUNK = 1 << 16


class AvroDamage(ValueError):
    """The bytes are not what the container format says must be there."""


def read_long(exact: Callable[[int], bytes]) -> int:
    """One Avro ``long`` (a zigzag varint of at most 10 bytes) from ``exact(n)``, which
    returns exactly ``n`` bytes or raises.

    Args:
        exact: returns the next ``n`` bytes of the stream.

    Returns:
        The decoded integer.

    Raises:
        AvroDamage: the varint runs past 10 bytes.
    """
    value = shift = 0
    for _ in range(10):
        byte = exact(1)[0]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1)
        shift += 7
    raise AvroDamage("a varint longer than 10 bytes")


@dataclasses.dataclass(frozen=True)
class AvroHead:
    """A container's sync marker and where its first block starts (its header's size)."""

    sync: bytes
    end: int


@dataclasses.dataclass(frozen=True)
class AvroBlock:
    """A block's framing: it starts at ``offset`` and takes ``size`` bytes (sync marker
    included), holding ``count`` records in ``data_size`` bytes from ``data_offset``; or --
    ``damaged`` -- ``size`` bytes up to and including the next sync marker (to the file's
    end when none) that do not frame as a block (``count`` None: unknown)."""

    offset: int
    size: int
    count: int | None
    data_offset: int
    data_size: int
    damaged: str = ""

    @property
    def end(self) -> int:
        return self.offset + self.size


class _Bytes:
    """Sequential reads from a ReadAt."""

    def __init__(self, read_at: ReadAt, pos: int) -> None:
        self.read_at = read_at
        self.pos = pos

    def exact(self, n: int) -> bytes:
        data = self.read_at(self.pos, n)
        if len(data) < n:
            raise AvroDamage(f"the file ends {n - len(data)} bytes early")
        self.pos += n
        return data

    def long(self) -> int:
        return read_long(self.exact)


def avro_head(read_at: ReadAt, limit: int) -> AvroHead:
    """The header's sync marker and size, reading at most about ``limit`` bytes of metadata.

    Args:
        read_at: the file's bytes.
        limit: the most metadata bytes read, ``source.max_record_bytes``.

    Raises:
      AvroDamage: no magic, metadata past ``limit``, or the file ends inside the header.

    Returns:
        The sync marker and the header's size.
    """
    data = _Bytes(read_at, 0)
    if data.exact(len(MAGIC)) != MAGIC:
        raise AvroDamage("no Avro magic bytes at the start")
    total = 0
    while count := data.long():
        if count < 0:
            count = -count
            data.long()  # the metadata block's size in bytes
        for _ in range(2 * count):  # keys and values
            size = data.long()
            total += max(size, 0)
            if not 0 <= size <= limit or total > limit:
                raise AvroDamage(f"metadata larger than source.max_record_bytes ({limit})")
            data.pos += size
    return AvroHead(data.exact(SYNC), data.pos)


def block_start(read_at: ReadAt, head: AvroHead, offset: int) -> int:
    """The first block start at or after ``offset``: just after the first sync marker at
    or after ``offset - 16`` (the file's size when none follows).

    Args:
      read_at: the file's bytes.
      head: the file's :func:`avro_head`.
      offset: a range's start.

    Returns:
        A block start offset.
    """
    if offset <= head.end:
        return head.end
    at = offset - SYNC
    while True:
        data = read_at(at, _CHUNK + SYNC - 1)
        found = data.find(head.sync)
        if found >= 0:
            return at + found + SYNC
        if len(data) < _CHUNK + SYNC - 1:
            return at + len(data)
        at += _CHUNK


def range_blocks(read_at: ReadAt, head: AvroHead, start: int, end: int,
                 limit: int) -> Iterator[AvroBlock]:
    """The blocks the range ``[start, end)`` owns, in order: their framing, each damaged
    stretch as one block marked ``damaged``. After the last, the walk's next block start
    (at or after ``end``, or the file's size) is :func:`avro_link`'s ``stop``.

    Args:
      read_at: the file's bytes.
      head: the file's :func:`avro_head`.
      start: the range's start.
      end: the range's end.
      limit: the largest block size believed (``source.max_record_bytes``)."""
    at = block_start(read_at, head, start)
    while at < end and read_at(at, 1):
        block = frame_block(read_at, head, at, limit)
        yield block
        at = block.end


def frame_block(read_at: ReadAt, head: AvroHead, at: int, limit: int) -> AvroBlock:
    """The block starting at ``at``: its framing, or -- when it does not frame (a size past
    ``limit`` or the file, a wrong sync marker after it, a bad varint) -- the damaged
    stretch up to and including the next sync marker.

    Args:
        read_at: the file's bytes.
        head: the file's :func:`avro_head`.
        at: a block start.
        limit: the largest block read, in bytes.

    Returns:
        The block's framing, or the damaged stretch.
    """
    data = _Bytes(read_at, at)
    count: int | None = None
    try:
        count, size = data.long(), data.long()
        if count < 0 or not 0 <= size <= limit:
            raise AvroDamage(f"its header says {count} records in {size} bytes")
        body = data.pos
        data.pos += size
        if data.exact(SYNC) != head.sync:
            raise AvroDamage("the sync marker after it is wrong")
        return AvroBlock(at, data.pos - at, count, body, size)
    except AvroDamage as err:
        resume = block_start(read_at, head, at + 1)  # the next marker after this start
        return AvroBlock(at, resume - at, None, at, 0, str(err))


def avro_link(first: int, stop: int) -> Link:
    """A range's join: it began at block start ``first`` and its walk stopped at ``stop``.

    Args:
        first: the first block start the range owned.
        stop: where its walk stopped: the first block start at or past its end.

    Returns:
        The range's link.
    """
    return Link(first, None, stop, None)
