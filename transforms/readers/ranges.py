"""One input file as many ranges that workers read apart: the rules every format shares.

A build whose unit of work is a whole file uses one core per file; Beam's own file sources
split a file into offset ranges so that many workers (and a runner's dynamic rebalancing)
share it. This module holds the format-independent half of that; each format's own half lives
beside its reader (``csv_ranges``, ``jsonl_ranges``, ``avro_ranges``, ``parquet_ranges``).

**Planning** (:func:`plan_ranges`): a file of N bytes is cut into ``ceil(N / split_bytes)``
ranges of nearly equal size (never larger than ``split_bytes``), ``[start, end)`` each, tiling
``[0, N)`` without gap or overlap. A file that cannot be entered in the middle is one range:
compressed text (``.gz`` and the like, by name -- :func:`unsplittable_text` also tells it by
its first bytes, since our text readers refuse compressed content as a whole-file unread
region), an image (one record per file), a Parquet file of one row group.

**Ownership.** A range owns the records that *start* inside it. It reads on past its end to
finish its last record, and skips what comes before its first record start: that belongs to
the range before. Where a format's records start is that format's question; the answer must
not depend on where the ranges were cut, so that the records owned by all the ranges of a
file, in range order, are exactly the records of the whole file read at once. An unread
region (input no record came from) is owned the same way: by the range its first byte falls
in, or -- when a range can only see the part of it inside its own bytes -- reported in parts
that :func:`merge_unread` joins again (:class:`UnreadSpan` ``open_start`` / ``open_end``).
Either way it is one region and its bytes are counted once: :func:`file_tally` merges the
:class:`RangeTally` s of one file into the per-file counts the whole-file reader gives
(``read``, ``rejected_at_read`` and the four ``unread_*``), and refuses ranges that do not tile
the file or regions that overlap -- a gap or a double count fails loudly, never silently.

**Joins.** Where a range had to assume something about its start that only the bytes before
it decide (CSV: whether its first line end is inside a quoted field), it says so in a
:class:`Link`: the state it assumed at a point, and the state it found at the point where the
next range's assumption is made. :func:`check_links` verifies, in range order, that every
assumption equals what the range before found. The first range's start is certain, so by
induction every range's start -- and therefore every record it owns -- is the one a
whole-file read gives, or the build fails naming the file and byte offset.

Pure: no Beam, no file systems. A file's bytes come through a :data:`ReadAt` function
(``read_at(offset, n)``: up to ``n`` bytes from ``offset``, fewer only at the end of the
file), so tests use in-memory bytes and the reader uses storage.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from beam_tfrecords.errors import UserError
from beam_tfrecords.sinks.format.shard_plan import parse_size
from beam_tfrecords.transforms.readers.events import unreadable_text

__all__ = ["COMPRESSED_SUFFIXES", "DEFAULT_SPLIT_BYTES", "RANGES", "ByteRange", "FileTally",
           "Link", "RangeError", "RangePart", "RangeTally", "ReadAt", "UnreadSpan",
           "WindowStream", "bytes_reader", "check_links", "describe_state", "file_tally",
           "merge_unread", "owner_of", "parse_split_bytes", "plan_ranges", "unsplittable_text"]

DEFAULT_SPLIT_BYTES = 64 << 20
# The name under which a range's :class:`RangePart` travels among the build's ``(name, n)``
# counts: the commit merges them per file (:meth:`RangePart.merge`) instead of adding them up.
RANGES = "ranges"
# Compressed files our text readers cannot enter in the middle (Beam's CompressionTypes
# suffixes and the other compressors events.COMPRESSED names).
COMPRESSED_SUFFIXES = (".gz", ".gzip", ".bz2", ".zst", ".zstd", ".xz", ".lzma", ".zip",
                       ".deflate", ".z")

ReadAt = Callable[[int, int], bytes]  # (offset, n) -> up to n bytes; fewer only at the end


class RangeError(UserError, ValueError):
    """The records of a file's ranges cannot be joined up into the file's records, or its
    ranges' counts into the file's counts: one line naming the file, the byte offset and
    why."""


def bytes_reader(data: bytes) -> ReadAt:
    """A :data:`ReadAt` over bytes in memory.

    Args:
        data: a file's bytes, in memory (tests, small files).

    Returns:
        ``read_at(offset, n)``.
    """
    view = memoryview(data)

    def read_at(offset: int, n: int) -> bytes:
        return bytes(view[offset:offset + n])

    return read_at


class WindowStream(io.RawIOBase):
    """A :data:`ReadAt` from ``offset`` on as a binary stream (for the readers' splitters).

    Wrap it in ``io.BufferedReader`` for small reads; ``tell()`` is the file offset.

    Args:
        read_at: the file's bytes.
        offset: where the stream starts.
    """

    def __init__(self, read_at: ReadAt, offset: int) -> None:
        self._read_at = read_at
        self._offset = offset

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._offset

    def readinto(self, buffer: Any) -> int:
        data = self._read_at(self._offset, len(buffer))
        buffer[:len(data)] = data
        self._offset += len(data)
        return len(data)


# -- planning ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, order=True)
class ByteRange:
    """Bytes ``[start, end)`` of one file: the records that start there are this range's."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


def parse_split_bytes(value: Any, key: str = "source.split_bytes") -> int:
    """A range size (67108864, "64MiB", "64MB") as bytes; a ValueError names ``key``.

    Args:
      value: the configured size.
      key: the config key or argument the error names.

    Returns:
      The size in bytes (at least 1)."""
    if isinstance(value, float):
        raise ValueError(f"config key {key!r}: must be a whole number of bytes or a size such "
                         f"as '64MiB', not {value!r}")
    try:
        return parse_size(value)
    except ValueError as err:
        raise ValueError(f"config key {key!r}: {err}, not {value!r}") from None


def plan_ranges(size: int, split_bytes: int = DEFAULT_SPLIT_BYTES, *,
                splittable: bool = True) -> list[ByteRange]:
    """A file of ``size`` bytes as ranges of at most ``split_bytes`` each, nearly equal.

    Args:
      size: the file's size in bytes (as listed).
      split_bytes: the largest range.
      splittable: False for a file that is one range whatever its size.

    Returns:
      Ranges in file order tiling ``[0, size)``; one range ``[0, size)`` when the file is not
      splittable or not larger than ``split_bytes`` (an empty file too)."""
    if size < 0 or split_bytes < 1:
        raise ValueError(f"cannot plan ranges of {split_bytes} bytes over {size} bytes")
    count = -(-size // split_bytes) if splittable else 1
    if count <= 1:
        return [ByteRange(0, size)]
    cuts = [size * i // count for i in range(count + 1)]
    return [ByteRange(a, b) for a, b in zip(cuts, cuts[1:])]


def unsplittable_text(path: str, head: bytes = b"") -> str | None:
    """Why a CSV or JSON Lines file must be read as one range, or None.

    Args:
      path: the file's path (its suffix tells compressed files).
      head: its first bytes when known (``events.HEAD_BYTES`` suffice): compressed content,
        UTF-16/32 text or a Parquet/Avro file under a text name is read by the first range
        alone (as one unread region), so the other ranges must own nothing.

    Returns:
      A reason to show, or None when the file splits."""
    lower = path.lower()
    for suffix in COMPRESSED_SUFFIXES:
        if lower.endswith(suffix):
            return (f"{path} is compressed ({suffix}): a compressed stream cannot be entered "
                    f"in the middle, so it is one range")
    why = unreadable_text(head) if head else None
    if why is not None:
        return f"{path}: {why}; it is one range"
    return None


def owner_of(offset: int, ranges: Sequence[ByteRange]) -> int:
    """The index of the range owning something that starts at byte ``offset``: the range it
    falls in, the last one for an offset at or past the planned end (a file that grew after it
    was listed), the first one for an empty file.

    Args:
        offset: a byte offset.
        ranges: the file's ranges, in order.

    Returns:
        The range's index.

    Raises:
        ValueError: no ranges.
    """
    for index, span in enumerate(ranges):
        if span.start <= offset < span.end:
            return index
    if not ranges:
        raise ValueError("no ranges")
    return 0 if offset < ranges[0].start else len(ranges) - 1


# -- joins ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Link:
    """What a range assumed at its start and found at its end (a format's two-valued parse
    state at a point the format defines, e.g. CSV's "in" / "out" of a quoted field).

    ``start_state`` None: nothing was assumed (the file's first range, whose start is certain;
    or a range that owns nothing and passes the state before it on: then ``start_point ==
    end_point``). ``end_state`` None: the state at ``end_point`` was not found (only for such
    a passing range, or a last range, whose end nobody joins)."""

    start_point: int
    start_state: str | None
    end_point: int
    end_state: str | None

    @property
    def passes(self) -> bool:
        return self.start_state is None and self.start_point == self.end_point


# The join states formats assume at a range's start, in words for errors (csv_ranges' OUT and
# IN): here, below the formats, so that merging any format's ranges can name them.
_STATE_WORDS = {"out": "a row start", "in": "the inside of a quoted field"}


def describe_state(state: str) -> str:
    """A join state in words, for errors (the state itself when it has none).

    Args:
        state: a join state.

    Returns:
        A phrase.
    """
    return _STATE_WORDS.get(state, state)


def check_links(path: str, links: Sequence[Link | None], describe: Callable[[str], str] = str
                ) -> None:
    """Raise :class:`RangeError` unless every range's assumption is what the range before it
    found (see the module doc: then every range's records are the whole-file read's).

    Args:
      path: the file, for the message.
      links: the ranges' links in range order (None for formats without joins).
      describe: a state in words, for the message."""
    found: tuple[int, str | None] | None = None  # (point, state) the ranges so far reached
    for index, link in enumerate(links):
        if link is None:
            continue
        if found is not None and link.start_point != found[0]:
            raise RangeError(f"{path}: byte {min(found[0], link.start_point)}: range {index} "
                             f"starts reading at byte {link.start_point}, but the range before "
                             f"it stopped at byte {found[0]}: the records between would be "
                             f"{'lost' if link.start_point > found[0] else 'read twice'}")
        if link.passes:
            continue
        if link.start_state is not None:
            if found is None:
                raise RangeError(f"{path}: byte {link.start_point}: range {index} assumed "
                                 f"{describe(link.start_state)} but no range before it was read")
            if found[1] != link.start_state:
                raise RangeError(
                    f"{path}: byte {link.start_point}: range {index} assumed "
                    f"{describe(link.start_state)} there, but the range before it found "
                    f"{describe(found[1] or '?')}: its records cannot be joined up (read the "
                    f"file whole, with a source.split_bytes larger than the file)")
        found = (link.end_point, link.end_state)


# -- counts -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class UnreadSpan:
    """Input no record came from: ``bytes`` bytes from byte ``offset``, holding ``rows``
    records (None: unknown), the first of them row ``row`` (None: unknown).

    A range that cuts a region at its own edges marks the cut: ``open_end`` when the region
    goes on past the range's end, ``open_start`` when it began before the range's start; the
    parts join into one region in :func:`merge_unread`."""

    offset: int
    bytes: int
    rows: int | None
    row: int | None
    reason: str
    open_start: bool = False
    open_end: bool = False

    @property
    def end(self) -> int:
        return self.offset + self.bytes


def merge_unread(path: str, spans: Iterable[UnreadSpan]) -> list[UnreadSpan]:
    """The unread regions of one file from its ranges' spans: parts cut at a range boundary
    (an ``open_end`` span and the ``open_start`` span that begins where it ends) become one
    region, with its first part's reason and row and the rows of all parts (None when any
    part's are unknown).

    Args:
      path: the file, for errors.
      spans: every range's spans, in any order.

    Returns:
      The regions in file order, none open.

    Raises:
      RangeError: regions overlap (bytes counted twice), or a cut part has no partner (a
        region's bytes lost)."""
    merged: list[UnreadSpan] = []
    for span in sorted(spans, key=lambda s: (s.offset, s.end)):
        if span.bytes < 0:
            raise RangeError(f"{path}: byte {span.offset}: an unread region of {span.bytes} "
                             f"bytes")
        last = merged[-1] if merged else None
        if last is not None and span.offset < last.end:
            raise RangeError(f"{path}: byte {span.offset}: unread regions overlap (bytes "
                             f"{last.offset}-{last.end} and {span.offset}-{span.end}): their "
                             f"bytes would be counted twice")
        if span.open_start:
            if last is None or not last.open_end or last.end != span.offset:
                raise RangeError(f"{path}: byte {span.offset}: an unread region continues "
                                 f"from a range before, which did not report its start")
            rows = None if last.rows is None or span.rows is None else last.rows + span.rows
            merged[-1] = dataclasses.replace(last, bytes=last.bytes + span.bytes, rows=rows,
                                             open_end=span.open_end)
            continue
        if last is not None and last.open_end:
            raise RangeError(f"{path}: byte {last.end}: an unread region goes on past a "
                             f"range's end, but no range reported the rest")
        merged.append(span)
    if merged and merged[-1].open_end:
        raise RangeError(f"{path}: byte {merged[-1].end}: an unread region goes on past a "
                         f"range's end, but no range reported the rest")
    return merged


@dataclasses.dataclass(frozen=True)
class RangeTally:
    """What one range of a file read: its bytes, its records (``read``, of which
    ``rejected`` were dead letters), its unread spans and its :class:`Link` (None: the format
    needs no join)."""

    span: ByteRange
    read: int = 0
    rejected: int = 0
    unread: tuple[UnreadSpan, ...] = ()
    link: Link | None = None


@dataclasses.dataclass(frozen=True)
class FileTally:
    """One file's counts from all its ranges, as the whole-file reader reports them."""

    read: int
    rejected: int
    regions: tuple[UnreadSpan, ...]

    def counts(self) -> dict[str, int]:
        """``read``, ``rejected_at_read`` and the four ``unread_*`` counts (framework's).

        Returns:
            Count name to count.
        """
        return {
            "read": self.read,
            "rejected_at_read": self.rejected,
            "unread_files": int(bool(self.regions)),
            "unread_bytes": sum(r.bytes for r in self.regions),
            "unread_rows": sum(r.rows or 0 for r in self.regions),
            "unread_regions": len(self.regions),
        }


def file_tally(path: str, size: int, tallies: Iterable[RangeTally],
               describe: Callable[[str], str] = str) -> FileTally:
    """Merge the tallies of every range of one file of ``size`` bytes (as planned).

    Args:
      path: the file, for errors.
      size: the file's planned size: the ranges must tile ``[0, size)``.
      tallies: one per range, in any order.
      describe: a join state in words, for :func:`check_links`.

    Returns:
      The file's counts and unread regions (cut parts joined).

    Raises:
      RangeError: a range is missing or read twice, the joins fail, or regions overlap."""
    ordered = sorted(tallies, key=lambda t: (t.span.start, t.span.end))
    at = 0
    for tally in ordered:
        if tally.span.start != at:
            what = "missing" if tally.span.start > at else "read twice"
            raise RangeError(f"{path}: byte {min(at, tally.span.start)}: bytes "
                             f"{min(at, tally.span.start)}-{max(at, tally.span.start)} are "
                             f"{what} among its ranges")
        at = tally.span.end
    if at != size:
        raise RangeError(f"{path}: byte {at}: its ranges end there, the file has {size} bytes")
    check_links(path, [t.link for t in ordered], describe)
    regions = merge_unread(path, [s for t in ordered for s in t.unread])
    return FileTally(sum(t.read for t in ordered), sum(t.rejected for t in ordered),
                     tuple(regions))


@dataclasses.dataclass(frozen=True)
class RangePart:
    """One range's tally as it travels among a build's ``(name, n)`` counts, as
    ``(RANGES, part)``: the file, its size in the units its ranges tile (bytes; row groups for
    Parquet), the range's :class:`RangeTally`, and -- for a file that changed after the launch
    listed it -- the unread region and sizes the range starting at 0 reports
    (``changed``: ``(offset, bytes, size listed, size read)``), or whether any other range saw
    the change (``saw_change``).

    The counts a whole-file read emits are sums; a file's ranges' counts are not (a file with
    unread regions in two ranges is one unread file), so the step that adds the counts up
    merges parts with :meth:`merge`, which also checks that the ranges tile the file and join
    up (:func:`file_tally`) -- the one place every range of a file meets."""

    path: str
    size: int
    tally: RangeTally
    changed: tuple[int, int, int, int] | None = None
    saw_change: bool = False

    @classmethod
    def merge(cls, parts: Iterable[RangePart]) -> dict[str, int]:
        """The counts of every file the parts cover, as its whole-file read gives them
        (``read``, ``rejected_at_read``, the four ``unread_*`` and, for a changed file,
        ``changed_files`` and ``changed_bytes``), added up over the files.

        Args:
            parts: every range's part, of any files.

        Raises:
          RangeError: a file's ranges do not tile it, do not join up, count a region twice,
            or one saw the file change while the range that reports changes did not.

        Returns:
            Count name to count.
        """
        by_file: dict[str, list[RangePart]] = {}
        for part in parts:
            by_file.setdefault(part.path, []).append(part)
        totals: dict[str, int] = {}
        for path, mine in sorted(by_file.items()):
            sizes = {part.size for part in mine}
            if len(sizes) != 1:
                raise RangeError(f"{path}: its ranges were planned on sizes {sorted(sizes)}")
            counts = file_tally(path, sizes.pop(), [p.tally for p in mine],
                                describe_state).counts()
            changed = [part.changed for part in mine if part.changed is not None]
            if not changed and any(part.saw_change for part in mine):
                seen = min(p.tally.span.start for p in mine if p.saw_change)
                raise RangeError(f"{path}: byte {seen}: the file changed while its ranges were "
                                 f"read (its first range saw it unchanged): rebuild")
            if changed:
                _, size, listed, seen = changed[0]
                counts["unread_files"] = 1
                counts["unread_bytes"] += size
                counts["unread_regions"] += 1
                counts["changed_files"] = 1
                counts["changed_bytes"] = seen - listed
            for name, n in counts.items():
                totals[name] = totals.get(name, 0) + n
        return totals
