"""The reader framework: what every source format shares, so a format is only its parser.

A format module (``read_csv``, ``read_jsonl``, ``read_parquet``, ``read_avro``, ``read_images``)
supplies a :class:`ReadFileFn` whose ``events(path, handle)`` turns one file into *events*
(:mod:`events`): ``(row, record)`` for a good record, a whole :class:`RecordChunk` (records
read column-wise), a :class:`Reject` for a record that cannot be read, an :class:`Unread` for
input no record came from. :func:`read_outputs` turns the events into the reader's three
outputs, the same for every format:

* ``records`` (main): :class:`RecordChunk` s -- a few thousand records of one file with the
  row number of the first, never one element per record (Beam's per-element cost would
  dominate); on the columnar path a chunk holds one ``pyarrow.RecordBatch``;
* ``rejected``: dead-letter rows (:func:`dead_letter`, :func:`unread_letter`) naming the file,
  the row, the feature and the reason; an unread region is one row of kind ``unread``;
* ``counts``: ``(name, n)`` pairs, per file ``read``, ``rejected_at_read`` and the four
  ``UNREAD_COUNTS``, so read = built + rejected and no input byte goes unaccounted for.

**Ranges.** A file larger than ``split_bytes`` is many workers' work: :class:`PlanRanges`
cuts it as its format says (``ReadFileFn.plan``: byte ranges for CSV and JSON Lines, row
groups for Parquet, blocks for Avro -- see :mod:`ranges`), the small :class:`FileRange`
descriptors cross a Reshuffle to the workers, and :class:`ReadRangesFn`, a splittable DoFn
over each range's offsets, reads the records whose starts it claims (``ReadFileFn.
range_events``), fused with whatever encodes and writes them. A file of one range is read
whole by the format's ``events``, as it always was. A range's counts travel as one
``(RANGES, RangePart)`` pair that the commit merges with the file's other ranges, checking
that they tile the file and join up.

:class:`ReadFiles` applies a format's DoFn to a PCollection of file paths; :class:`ReadSource`
is the public shape of a source (``p | btf.ReadCsv("gs://b/*.csv", features=...)``): it
matches the pattern when applied and returns a :class:`ReadResult`.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.io.restriction_trackers import (
    OffsetRange,
    OffsetRestrictionTracker,
    UnsplittableRestrictionTracker,
)
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.display import DisplayDataItem

from beam_tfrecords.errors import UserError
from beam_tfrecords.runtime import crash_note, storage
from beam_tfrecords.runtime.batch_coders import SizedPickleCoder, rows_nbytes
from beam_tfrecords.runtime.spread import Spread
from beam_tfrecords.sinks.format.file_identity import (
    FileIdentity,
    change,
    changed_region,
    not_a_file,
)
from beam_tfrecords.sinks.format.redact import redact_text
from beam_tfrecords.transforms.codec.coercion import preview
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.codec.specs import as_feature_specs
from beam_tfrecords.transforms.readers.events import (
    DEFAULT_MAX_RECORD_BYTES,
    HEAD_BYTES,
    Reject,
    Unread,
)
from beam_tfrecords.transforms.readers.formats import descriptor, plan_file
from beam_tfrecords.transforms.readers.ranges import (
    DEFAULT_SPLIT_BYTES,
    RANGES,
    ByteRange,
    Link,
    RangePart,
    RangeTally,
    UnreadSpan,
    parse_split_bytes,
    unsplittable_text,
)
from beam_tfrecords.transforms.readers.source_options import parse_max_record_bytes

__all__ = ["CHANGED_COUNTS", "COUNTS", "REJECTED", "UNREAD_COUNTS", "ClaimedWindow", "FileRange",
           "Outputs", "PlanRanges", "RangeFound", "RangeTracker", "ReadFileFn", "ReadFiles",
           "ReadRangesFn", "ReadResult", "ReadSource", "RecordChunk", "Reject", "SourceError",
           "Unread", "dead_letter", "handle_reader", "parse_max_record_bytes", "read_outputs",
           "records_chunk", "text_plan", "unread_letter"]

REJECTED = "rejected"
# Tagged output of (counter name, n) pairs that the commit step adds up: unlike runner metrics
# they are part of the data, so every runner delivers them exactly once.
COUNTS = "counts"
# Besides "read" and "rejected_at_read", every reader emits these for every file (zeros too):
# files with any unread part, unread bytes, records known lost (Avro block and Parquet row
# group counts), and unread regions (one dead-letter row of kind "unread" each).
UNREAD_COUNTS = ("unread_files", "unread_bytes", "unread_rows", "unread_regions")
# Emitted besides them for a file that changed after the launch listed it: 1 per such file,
# and its size as read minus its size as listed (the commit corrects the input's bytes).
CHANGED_COUNTS = ("changed_files", "changed_bytes")
CHUNK_ROWS = 4096  # records per chunk on the per-row path
# On the columnar path: rows per RecordBatch chunk, unless its buffers reach BATCH_BYTES.
# Wide rows make smaller chunks: past a few MB a chunk's buffers (Arrow columns, the
# assembled Examples, the batch) stop being reused from chunk to chunk and are faulted in
# fresh each time (200k rows x 30 columns: 2.17-2.20 s with chunks up to 64 MB, 1.98-2.18 s
# up to 8 or 16 MB, 1.78-2.0 s up to 4 MB; the tutorial's 65,536 rows are 2 MB).
BATCH_ROWS = 65536
BATCH_BYTES = 4 << 20
_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RecordChunk:
    """Records of one source file with their 1-based data row numbers.

    The records travel either as Python mappings (``rows``) or, on the columnar fast path, as
    one ``pyarrow.RecordBatch`` (``batch``, with ``rows`` empty); consumers that need
    mappings call :meth:`records`. Record ``i`` is row ``row_numbers[i]``, or
    ``first_row + i`` when ``row_numbers`` is empty (no row of the run was rejected while
    parsing).
    """

    path: str
    first_row: int
    rows: list
    row_numbers: tuple = ()
    batch: Any = None  # pyarrow.RecordBatch holding the records column-wise, or None
    # None: row numbers are the file's. A byte offset: the records come from a range of the
    # file that starts there, not at the file's start, and rows count from that range's first
    # record (the rows before it are not known where the range is read).
    range_offset: int | None = None

    def __len__(self) -> int:
        return self.batch.num_rows if self.batch is not None else len(self.rows)

    def records(self) -> list:
        """The records as mappings (converted from ``batch`` when the chunk is columnar).

        Returns:
            A list of mappings.
        """
        return self.batch.to_pylist() if self.batch is not None else self.rows

    def row_number(self, index: int) -> int:
        """The row number of the chunk's ``index``-th record in its file (or range).

        Args:
            index: the record's position in the chunk.

        Returns:
            Its row number.
        """
        return self.row_numbers[index] if self.row_numbers else self.first_row + index


class RecordChunkCoder(SizedPickleCoder):
    """RecordChunks' coder (runtime/batch_coders.py): sized by their buffers, not pickled."""

    value_type = RecordChunk

    def nbytes(self, value: RecordChunk) -> int:
        """The chunk's size in memory, for Beam's byte counts.

        Args:
            value: the chunk.

        Returns:
            Bytes.
        """
        return value.batch.nbytes if value.batch is not None else rows_nbytes(value.rows)


beam.coders.registry.register_coder(RecordChunk, RecordChunkCoder)


def dead_letter(path: str, row: int | None, feature: str, reason: str, value: Any,
                record: Any, range_offset: int | None = None) -> dict[str, Any]:
    """One dead-letter row for a rejected record: where it came from, what was wrong, and
    previews. ``range_offset`` (a :attr:`RecordChunk.range_offset`): the record was read in
    a range of the file starting at that byte, ``row`` counts from that range's first record;
    the row is then ``range_row`` beside ``range_offset``, and ``row`` is None.

    Args:
        path: the source file.
        row: the record's row number (None when counted in a range).
        feature: the feature at fault (``""`` for the whole record).
        reason: why the record was rejected.
        value: the bad value.
        record: the whole record.
        range_offset: the byte where the record's range starts.

    Returns:
        The row.
    """
    letter = {
        "source": path,
        "row": row,
        "feature": feature,
        "reason": reason,
        "value": preview(value),
        "record": preview(record, 400),
        "kind": "rejected",
    }
    if range_offset is not None:
        letter.update(row=None, range_offset=range_offset, range_row=row)
    return letter


def unread_letter(path: str, unread: Unread) -> dict[str, Any]:
    """One dead-letter row for a region of input no record came from: where it starts (byte
    ``offset``, first ``row`` lost or None), its ``bytes``, the ``rows`` it held (None:
    unknown) and why.

    Args:
        path: the source file.
        unread: the region of input no record came from.

    Returns:
        The row.
    """
    return {
        "source": path,
        "row": unread.row,
        "feature": "",
        "reason": unread.reason,
        "value": "",
        "record": "",
        "kind": "unread",
        "offset": unread.offset,
        "bytes": unread.bytes,
        "rows": unread.rows,
    }


def records_chunk(path: str, rows: list, numbers: Sequence[int], batch: Any = None
                  ) -> RecordChunk:
    """Records (``rows``, or ``batch`` column-wise) with their ascending row numbers as one
    chunk; ``row_numbers`` is kept only when they skip.

    Args:
        path: the source file.
        rows: the records as mappings (empty when ``batch`` holds them).
        numbers: their row numbers.
        batch: a RecordBatch of the records, or None.

    Returns:
        The chunk.
    """
    contiguous = numbers[-1] - numbers[0] == len(numbers) - 1
    return RecordChunk(path, numbers[0], rows, () if contiguous else tuple(numbers), batch)


def read_outputs(path: str, events: Iterable[Any], read_counter: Any,
                 rejected_counter: Any, range_offset: int | None = None,
                 close: Callable[[int, int, list[Unread]], Any] | None = None
                 ) -> Iterator[Any]:
    """A reader's outputs for one file, from its events (:mod:`events`): ``(row,
    record)`` for a good record, a :class:`RecordChunk` (a block read column-wise, passed
    on), a :class:`Reject` or an :class:`Unread`. Records are gathered into chunks of
    ``CHUNK_ROWS`` (flushed before a columnar chunk, so rows stay in order); a Reject becomes
    a dead-letter row and counts as read and rejected; an Unread becomes a dead-letter row of
    kind ``unread`` and counts in the ``unread_*`` counts only. The counts close the file:
    ``read``, ``rejected_at_read`` and the four of ``UNREAD_COUNTS``, always all six, and
    ``CHANGED_COUNTS`` for a file that changed after it was listed.

    A dead-letter row leaves after the good records read before it (it waits while they
    gather, at most ``CHUNK_ROWS`` rows), so whoever counts both as they come -- the early
    stop (sinks/early_stop.py) -- never sees a larger share rejected than there was.

    For a range of a file (:class:`ReadRangesFn`): ``range_offset`` (None: the range starts
    where the file does and its rows are the file's) goes on its chunks and dead letters, and
    instead of the six counts ``close(read, rejected, unread)`` makes the one ``(RANGES,
    part)`` count that the commit merges with the file's other ranges (ranges.RangePart).

    Args:
        path: the source file.
        events: the reader's events for it.
        read_counter: Beam counter of records read.
        rejected_counter: Beam counter of records rejected.
        range_offset: the byte where the range starts, when reading a range.
        close: called with ``(read, rejected, unread regions)`` instead of emitting the counts (a
            range's).

    Yields:
        Records' chunks, tagged dead-letter rows and count pairs.
    """
    read = rejected = 0
    spans: list[Unread] = []
    unread_bytes = unread_rows = regions = 0
    changed: list[tuple[int, int]] = []  # (size listed, size read) of a changed file
    chunk: list = []
    numbers: list = []
    waiting: list = []  # dead-letter outputs read after the records in ``chunk``

    def flush() -> list:  # the gathered records as a chunk, then the rows that waited
        nonlocal chunk, numbers, waiting
        out = [records_chunk(path, chunk, numbers)] if chunk else []
        if out and range_offset is not None:
            out[0] = dataclasses.replace(out[0], range_offset=range_offset)
        out += waiting
        chunk, numbers, waiting = [], [], []
        return out

    for event in events:
        kind = type(event)
        if kind is tuple:
            row, record = event
            read += 1
            chunk.append(record)
            numbers.append(row)
            if len(chunk) >= CHUNK_ROWS:
                yield from flush()
            continue
        if kind is Reject:
            read += 1
            rejected += 1
            letter = beam.pvalue.TaggedOutput(REJECTED, dead_letter(
                path, event.row, event.feature, event.reason, event.value, event.record,
                range_offset))
        elif kind is Unread:
            if range_offset is not None:  # its row counts from the range: not the file's
                event = dataclasses.replace(event, row=None)
            spans.append(event)
            regions += 1
            if event.changed is not None:
                changed.append(event.changed)
            unread_bytes += event.bytes
            unread_rows += event.rows or 0
            letter = beam.pvalue.TaggedOutput(REJECTED, unread_letter(path, event))
        elif isinstance(event, RecordChunk):
            yield from flush()  # the records before the chunk leave first
            read += len(event)
            yield (event if range_offset is None
                   else dataclasses.replace(event, range_offset=range_offset))
            continue
        else:
            raise TypeError(f"not a reader event: {event!r}")
        if not chunk:
            yield letter
            continue
        waiting.append(letter)
        if len(waiting) >= CHUNK_ROWS:
            yield from flush()
    yield from flush()
    read_counter.inc(read)
    rejected_counter.inc(rejected)
    if close is not None:
        yield beam.pvalue.TaggedOutput(COUNTS, (RANGES, close(read, rejected, spans)))
        return
    yield beam.pvalue.TaggedOutput(COUNTS, ("read", read))
    yield beam.pvalue.TaggedOutput(COUNTS, ("rejected_at_read", rejected))
    yield beam.pvalue.TaggedOutput(COUNTS, ("unread_files", int(regions > 0)))
    yield beam.pvalue.TaggedOutput(COUNTS, ("unread_bytes", unread_bytes))
    yield beam.pvalue.TaggedOutput(COUNTS, ("unread_rows", unread_rows))
    yield beam.pvalue.TaggedOutput(COUNTS, ("unread_regions", regions))
    if changed:
        listed, seen = changed[0]
        yield beam.pvalue.TaggedOutput(COUNTS, (CHANGED_COUNTS[0], 1))
        yield beam.pvalue.TaggedOutput(COUNTS, (CHANGED_COUNTS[1], seen - listed))



# -- options ----------------------------------------------------------------------------------

def max_record_bytes_of(options: Any) -> int:
    """``source.max_record_bytes`` as the options of a format carry it.

    Args:
        options: a format's options.

    Returns:
        The limit in bytes.
    """
    return getattr(options, "max_record_bytes", DEFAULT_MAX_RECORD_BYTES)


# -- one file -> events -> outputs ------------------------------------------------------------

class ReadFileFn(beam.DoFn):
    """One file path -> RecordChunks, dead-letter rows (``rejected``) and ``counts``.

    A format subclasses it and defines :meth:`events`; the DoFn holds only its constructor
    arguments (and two counters), so it pickles cheaply. ``features`` and ``extra_fields``
    (top-level fields to keep besides theirs, e.g. the split key) let a format read less;
    ``columnar`` selects the format's Arrow path where it has one; ``batch_rows`` caps a
    columnar chunk.

    Args:
        options: the format's options dataclass.
        features: the features to read.
        extra_fields: other top-level fields to keep.
        columnar: use the format's Arrow path.
        batch_rows: the most rows in a columnar chunk.
    """

    def __init__(self, options: Any, features: Sequence[FeatureSpec] = (),
                 extra_fields: Sequence[str] = (), *, columnar: bool = True,
                 batch_rows: int = BATCH_ROWS) -> None:
        self._options = options
        self._features = tuple(features)
        self._extra = tuple(extra_fields)
        self._columnar = columnar
        self._batch_rows = batch_rows
        self._read = Metrics.counter("sources", "records_read")
        self._rejected = Metrics.counter("sources", "records_rejected_at_parse")

    def events(self, path: str, handle: Any) -> Iterator[Any]:
        """The events of one file, read from ``handle`` (opened by ``storage.open_read``).

        Args:
            path: the file's path, for messages.
            handle: the open file.

        Yields:
            The file's events.
        """
        raise NotImplementedError

    def plan(self, path: str, size: int, split_bytes: int) -> tuple[int, list[int]] | None:
        """How a file of ``size`` bytes splits: ``(units, cuts)`` -- the units its ranges
        count in (bytes, or Parquet's row groups) and the cuts ``[0, ..., units]`` between
        ranges -- or None to read it whole (the default: a format without ranges).

        Args:
            path: the file's path.
            size: its size in bytes.
            split_bytes: the size a range aims at.

        Returns:
            ``(units, cuts)``, or None.
        """
        return None

    def range_events(self, path: str, handle: Any, start: int, tracker: Any,
                     found: RangeFound) -> Iterator[Any]:
        """The events of the records whose starts the range from ``start`` claims on
        ``tracker`` (:class:`RangeTracker`); sets ``found`` as it goes.

        Args:
            path: the file's path.
            handle: the open file.
            start: the range's first record start.
            tracker: the range's :class:`RangeTracker`, which each record start is claimed on.
            found: filled with what the range found.

        Yields:
            The range's events.
        """
        raise NotImplementedError

    def setup(self) -> None:
        crash_note.enable_here()

    def process(self, element: str | FileIdentity) -> Iterator[Any]:
        """Read one file: ``element`` is its path, or its :class:`FileIdentity` as listed at
        launch, which is then compared with the file once it is read."""
        listed = element if isinstance(element, FileIdentity) else None
        path = listed.path if listed is not None else element
        # A native crash while this file is read still names it (crash_note).
        yield from crash_note.noted("reading", path, self._outputs(path, listed))

    def _outputs(self, path: str, listed: FileIdentity | None) -> Iterator[Any]:
        refused = storage.not_a_regular_file(path)
        if refused is not None:  # a FIFO or a device: never opened
            events: Iterable[Any] = [Unread(0, listed.size if listed else 0, None, None,
                                            refused)]
            yield from read_outputs(path, events, self._read, self._rejected)
            return
        with storage.open_read(path) as handle:
            yield from read_outputs(path, self._checked_events(path, listed, handle),
                                    self._read, self._rejected)

    def _checked_events(self, path: str, listed: FileIdentity | None, handle: Any
                        ) -> Iterator[Any]:
        """The file's events, then -- when it is no longer the file listed (shrank, grew,
        replaced, rewritten) -- the part of it that cannot be vouched for as unread input,
        whose reason names the file: the build fails unless errors.max_unread_fraction
        allows it."""
        yield from self.events(path, handle)
        if listed is None:
            return
        seen = storage.observe(path, handle)
        why = None if seen is None else change(listed, seen)
        if why is not None:
            offset, size = changed_region(listed, seen)
            yield Unread(offset, size, None, None,
                         f"{path} {why} after the launch listed it",
                         changed=(listed.size, seen.size))


# -- ranges of files ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FileRange:
    """One unit of reading work: ``file`` (a path or its identity as listed) and the part
    ``[start, end)`` of its ``size`` units (bytes; row groups for Parquet) whose records it
    reads; ``whole``: the file reader reads the whole file as one piece (a file of one range,
    compressed text, a file whose footer or header a plan could not read, a path whose size
    is not known)."""

    file: str | FileIdentity
    size: int
    start: int = 0
    end: int = 1
    whole: bool = False

    @property
    def path(self) -> str:
        return self.file.path if isinstance(self.file, FileIdentity) else self.file


class _Whole(OffsetRange):
    """The restriction of a file read whole: never split."""


class RangeTracker(OffsetRestrictionTracker):
    """Beam's offset tracker, that can also claim a run of record starts at once:
    ``try_claim((first, last))`` claims every position from ``first`` to ``last`` when
    ``last`` is before the range's end (a dynamic split then lands after ``last``), and
    otherwise claims nothing and returns False (the caller looks at the end again). A reader
    that hands out a stream of bytes claims the record starts in the bytes it hands out.
    ``try_claim(None)``: the reader has finished (a file that ended early): done."""

    def try_claim(self, position: Any) -> bool:
        if position is None:  # the reader is done: nothing more will be claimed
            stop = self._range.stop
            if self._last_claim_attempt is None or self._last_claim_attempt < stop:
                self._last_claim_attempt = stop
            return False
        if not isinstance(position, tuple):
            return super().try_claim(position)
        first, last = position
        if self._last_claim_attempt is not None and first <= self._last_claim_attempt:
            raise ValueError(f"positions claimed must increase: {first} after "
                             f"{self._last_claim_attempt}")
        if first < self._range.start or last < first:
            raise ValueError(f"cannot claim {first}-{last} of {self._range}")
        if last >= self._range.stop:
            return False
        self._last_claim_attempt = self._current_position = last
        return True


class _RangeProvider(RestrictionProvider):
    """A :class:`FileRange`'s restriction: its offsets, planned already (no further initial
    split: the plan made one element per range, so that they spread over workers)."""

    def initial_restriction(self, element: FileRange) -> OffsetRange:
        return _Whole(0, 1) if element.whole else OffsetRange(element.start, element.end)

    def create_tracker(self, restriction: OffsetRange) -> Any:
        if isinstance(restriction, _Whole):
            return UnsplittableRestrictionTracker(OffsetRestrictionTracker(restriction))
        return RangeTracker(restriction)

    def split(self, element: FileRange, restriction: OffsetRange) -> Iterator[OffsetRange]:
        yield restriction

    def restriction_size(self, element: FileRange, restriction: OffsetRange) -> int:
        if isinstance(restriction, _Whole):
            return max(element.size, 1)
        return max(restriction.size(), 1)


_RESTRICTION = beam.DoFn.RestrictionParam(_RangeProvider())


class ClaimedWindow(io.RawIOBase):
    """A file's bytes from ``first`` (a record start) as a stream, handed out only as far as
    the range may claim the record starts in them (:class:`RangeTracker`): up to the range's
    end, then on to ``next_start(end)`` -- the first record start at or after the end, where
    the next range begins -- to finish the last record. The end is the tracker's at the
    moment the stream reaches it, so a split made while the range is read moves it.
    ``end_at`` is where the stream ended (None until then).

    Args:
        handle: the open file.
        first: the range's first record start.
        tracker: the range's :class:`RangeTracker`, read for its current end.
        next_start: the first record start at or after an offset.
    """

    def __init__(self, handle: Any, first: int, tracker: Any,
                 next_start: Callable[[int], int]) -> None:
        self._handle = handle
        self._pos = first
        self._tracker = tracker
        self._next_start = next_start
        self.end_at: int | None = None

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def _settle(self, want: int) -> int:
        """How many bytes from ``_pos`` may be handed out (claiming the record starts among
        them); fixes ``end_at`` when the range's end is reached."""
        while self.end_at is None:
            stop = self._tracker.current_restriction().stop
            if self._pos + want <= stop:
                if self._tracker.try_claim((self._pos, self._pos + want - 1)):
                    return want
                continue  # a split moved the end meanwhile
            if self._pos < stop and not self._tracker.try_claim((self._pos, stop - 1)):
                continue
            self._tracker.try_claim(max(stop, self._pos))  # the range is done
            self.end_at = max(self._next_start(stop), self._pos)
        return min(want, self.end_at - self._pos)

    def readinto(self, buffer: Any) -> int:
        n = self._settle(len(buffer)) if len(buffer) else 0
        if n <= 0:
            return 0
        self._handle.seek(self._pos)
        data = self._handle.read(n)
        buffer[:len(data)] = data
        self._pos += len(data)
        if len(data) < n:  # the file ends early (it shrank): nothing more to hand out
            self.end_at = self._pos
        return len(data)


def text_plan(fmt: str, path: str, size: int, split_bytes: int
              ) -> tuple[int, list[int]] | None:
    """A CSV or JSON Lines file's plan (``ReadFileFn.plan``): byte ranges
    (``formats.plan_file``), or None -- logged with its reason -- when its name or first bytes
    say compressed or foreign text, which is read whole.

    Args:
        fmt: ``csv`` or ``jsonl``.
        path: the file's path.
        size: its size in bytes.
        split_bytes: the size a range aims at.

    Returns:
        ``(size, cuts)``, or None.
    """
    with storage.open_read(path) as handle:
        head = handle.read(HEAD_BYTES)
    ranges, why = plan_file(descriptor(fmt), path, size, split_bytes, head)
    if why is not None:
        _LOG.warning("%s", why)
    if len(ranges) < 2 or unsplittable_text(path, head) is not None:
        return None
    return size, [span.start for span in ranges] + [size]


def handle_reader(handle: Any) -> Callable[[int, int], bytes]:
    """A ``ranges.ReadAt`` over a seekable handle.

    Args:
        handle: a seekable binary handle.

    Returns:
        ``read_at(offset, n)``.
    """
    def read_at(offset: int, n: int) -> bytes:
        handle.seek(offset)
        return handle.read(n)

    return read_at


class PlanRanges(beam.DoFn):
    """A file (path or identity) -> its :class:`FileRange` s, in file order: the format's
    plan (``ReadFileFn.plan``) for a file larger than ``split_bytes``, else one whole.

    Args:
        reader: the format's file reader.
        split_bytes: the size above which a file is read as ranges.
    """

    def __init__(self, reader: ReadFileFn, split_bytes: int) -> None:
        self._reader = reader
        self._split_bytes = split_bytes

    def process(self, element: str | FileIdentity) -> Iterator[FileRange]:
        listed = element if isinstance(element, FileIdentity) else None
        if (listed is None or listed.size <= self._split_bytes
                or not_a_file(listed) is not None):
            yield FileRange(element, listed.size if listed is not None else 0, whole=True)
            return
        try:
            planned = self._reader.plan(listed.path, listed.size, self._split_bytes)
        except Exception:  # noqa: BLE001 - the reader reports what it cannot read, whole
            planned = None
        if not planned or len(planned[1]) <= 2:
            yield FileRange(element, listed.size, whole=True)
            return
        units, cuts = planned
        for start, end in zip(cuts, cuts[1:]):
            yield FileRange(element, units, start, end)


class ReadRangesFn(beam.DoFn):
    """A :class:`FileRange` -> the reader outputs of its records, as a splittable DoFn over
    the range's offsets: a whole file through the file reader (:class:`ReadFileFn`) as it
    always was read, with its six counts; a range through the format's ``range_events``,
    claiming each record start (so a runner that rebalances work -- Dataflow -- can split a
    straggling range further), with one ``(RANGES, RangePart)`` count that the commit merges
    with the file's other ranges.

    Args:
        reader: the format's file reader.
    """

    def __init__(self, reader: ReadFileFn) -> None:
        self._reader = reader

    def setup(self) -> None:
        self._reader.setup()

    def process(self, element: FileRange,
                tracker: Any = _RESTRICTION) -> Iterator[Any]:
        if element.whole:
            if tracker.try_claim(0):
                yield from self._reader.process(element.file)
            return
        yield from crash_note.noted("reading", element.path, self._range(element, tracker))

    def _range(self, element: FileRange, tracker: Any) -> Iterator[Any]:
        reader, path = self._reader, element.path
        listed = element.file if isinstance(element.file, FileIdentity) else None
        start = tracker.current_restriction().start
        with storage.open_read(path) as handle:
            found = RangeFound()
            events = iter(reader.range_events(path, handle, start, tracker, found))
            head = list(itertools.islice(events, 1))  # found.range_offset is known by then
            events = itertools.chain(head, events)

            def close(read: int, rejected: int, unread: list[Unread]) -> RangePart:
                tracker.try_claim(None)  # done, whatever its reader claimed last
                end = tracker.current_restriction().stop
                spans = tuple(UnreadSpan(u.offset, u.bytes, u.rows, u.row, u.reason)
                              for u in unread if u.changed is None)
                changed = next(((u.offset, u.bytes, *u.changed) for u in unread
                                if u.changed is not None), None)
                return RangePart(path, element.size,
                                 RangeTally(ByteRange(start, end), read, rejected, spans,
                                            found.link),
                                 changed, found.saw_change)

            checked = self._checked(path, listed, handle, events, start, found)
            yield from read_outputs(path, checked, reader._read, reader._rejected,
                                    found.range_offset if start else None, close)

    @staticmethod
    def _checked(path: str, listed: FileIdentity | None, handle: Any, events: Iterable[Any],
                 start: int, found: RangeFound) -> Iterator[Any]:
        """The range's events, then -- when the file is no longer the one listed -- its
        changed part as unread input, reported by the range that starts the file (the others
        only say they saw it: ranges.RangePart.merge fails the build if that range did not)."""
        yield from events
        if listed is None:
            return
        seen = storage.observe(path, handle)
        why = None if seen is None else change(listed, seen)
        if why is None:
            return
        if start:
            found.saw_change = True
            return
        offset, size = changed_region(listed, seen)
        yield Unread(offset, size, None, None, f"{path} {why} after the launch listed it",
                     changed=(listed.size, seen.size))


@dataclasses.dataclass
class RangeFound:
    """What a format's ``range_events`` found: the byte offset of the range's first record
    (``range_offset``, set before its first event: its rows count from there), and after its
    events its
    :class:`ranges.Link` (None: the format needs no join) and whether the file changed."""

    range_offset: int | None = None
    link: Link | None = None
    saw_change: bool = False


def _parse_paths(paths: Any, reader: ReadFileFn, label: str,
                 split_bytes: int = DEFAULT_SPLIT_BYTES) -> Any:
    # paths: file paths -> (records: RecordChunk, rejected: dict, counts: (name, n))
    return (
        paths
        | "PlanRanges" >> beam.ParDo(PlanRanges(reader, split_bytes))  # FileRange
        | "SpreadRanges" >> Spread()
        | label >> beam.ParDo(ReadRangesFn(reader))
        .with_output_types(RecordChunk).with_outputs(REJECTED, COUNTS, main="records")
    )


class ReadFiles(beam.PTransform):
    """A PCollection of file paths -> the reader outputs (``records``, ``rejected``,
    ``counts``) of one format, whose module names ``_fn`` (its :class:`ReadFileFn`) and
    ``_label`` (the parse step's name).

    ``options`` are the format's options dataclass, ``features`` FeatureSpecs; a file larger
    than ``split_bytes`` is read as ranges that workers share (the format's ``plan``); other
    keyword arguments (``columnar``, ``batch_rows``, CSV's ``block_bytes``) go to the DoFn.
    The records, their row numbers and the dead letters are the same with ``columnar`` on or
    off.

    Args:
        options: the format's options.
        features: the features to read.
        extra_fields: other top-level fields to keep.
        split_bytes: the size above which a file is read as ranges.
        knobs: the DoFn's keyword arguments.
    """

    _fn: type[ReadFileFn]
    _label: str

    def __init__(self, options: Any, features: Sequence[FeatureSpec] = (),
                 extra_fields: Sequence[str] = (), *, split_bytes: int = DEFAULT_SPLIT_BYTES,
                 **knobs: Any) -> None:
        super().__init__()
        self.reader = self._fn(options, features, extra_fields, **knobs)
        self.split_bytes = split_bytes

    def expand(self, paths):
        return _parse_paths(paths, self.reader, self._label, self.split_bytes)


# -- the public sources -----------------------------------------------------------------------

def source_display_data(pattern: str | Sequence[str], options: Any,
                        features: Sequence[FeatureSpec] = ()) -> dict[str, Any]:
    """The display data every source shows: what it reads (a pattern, or how many paths and
    the first; URLs' secrets redacted as in logs), its features and its options' fields.

    Args:
        pattern: the file pattern, or the list of paths (or of FileIdentity, as the command
            line passes its listing) the source was given.
        options: the format's options dataclass (None: none).
        features: the FeatureSpecs the source was given.

    Returns:
        ``{key: DisplayDataItem}`` for ``PTransform.display_data``.
    """
    if isinstance(pattern, str):
        items = {"file_pattern": DisplayDataItem(redact_text(pattern), label="File pattern")}
    else:
        first = getattr(pattern[0], "path", pattern[0]) if pattern else None  # FileIdentity
        shown = redact_text(str(first)) if pattern else "(none)"
        more = f" and {len(pattern) - 1} more" if len(pattern) > 1 else ""
        items = {"files": DisplayDataItem(shown + more, label="Files")}
    if features:
        items["features"] = DisplayDataItem(", ".join(f.name for f in features),
                                            label="Features")
    if dataclasses.is_dataclass(options):
        for field in dataclasses.fields(options):
            value = getattr(options, field.name)
            if isinstance(value, (tuple, list)):
                value = ", ".join(map(str, value))
            if isinstance(value, (str, int, float, bool)) and value != "":
                items[field.name] = DisplayDataItem(
                    redact_text(value) if isinstance(value, str) else value,
                    label=field.name.replace("_", " ").capitalize())
    return items


class SourceError(UserError, ValueError):
    """A source that cannot read: a bad argument (named) or a pattern that matches nothing."""


class Outputs(dict):
    """A transform's named PCollections as a dict -- so Beam pipes the whole result on to the
    next transform -- with attribute access (``result.records``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class ReadResult(Outputs):
    """A source's result: ``records`` (RecordChunks), ``rejected`` (dead-letter dicts) and
    ``counts`` (``(name, n)`` pairs). Apply ``btf.ToExamples`` or ``btf.WriteTFRecordDataset``
    to the whole result: they encode the records and carry the rejected rows and counts on,
    so read = written + rejected holds in the manifest."""


def parse_arguments(transform: str, parse: Callable[[Any, str], Any], raw: Mapping[str, Any],
                    max_record_bytes: Any = None, limit_field: str = "max_record_bytes") -> Any:
    """A public source's keyword arguments as its options, checked by the parser the config
    uses for the same options (``max_record_bytes``, when given, by the one for
    ``source.max_record_bytes``, into the options' ``limit_field``); a bad one is a
    :class:`SourceError` naming the argument.

    Args:
        transform: the source's name, for errors.
        parse: the format's options parser.
        raw: the keyword arguments given.
        max_record_bytes: the record size limit given, or None.
        limit_field: the options' field it sets.

    Returns:
        The options.

    Raises:
        SourceError: a bad argument.
    """
    try:
        options = parse(dict(raw), transform)
        if max_record_bytes is None:
            return options
        limit = parse_max_record_bytes(max_record_bytes, f"{transform}.max_record_bytes")
    except ValueError as err:
        raise SourceError(_argument_message(transform, err)) from None
    return dataclasses.replace(options, **{limit_field: limit})


def _argument_message(transform: str, err: Exception) -> str:
    """A config parser's "config key 'ReadCsv.delimiter': ..." as "ReadCsv: argument
    'delimiter': ..." -- the caller wrote no config."""
    return str(err).replace(f"config key '{transform}.", f"{transform}: argument '", 1)


def listed(value: Any) -> Any:
    """A tuple argument as the list a config parser expects (YAML gives lists).

    Args:
        value: a keyword argument as given.

    Returns:
        A list for a tuple, else ``value``.
    """
    return list(value) if isinstance(value, tuple) else value


def match_files(transform: str, file_pattern: str | Sequence[str | FileIdentity]
                ) -> list[str | FileIdentity]:
    """The files to read, sorted, each as its :class:`FileIdentity` where its filesystem
    tells one (the reader compares it with the file it reads): a pattern matched on its Beam
    filesystem, or a list of paths (or identities listed already) taken as they are. Nothing
    matched is a :class:`SourceError` naming the pattern; so is a FIFO, a device or a
    directory among the files, which no reader may open.

    Args:
        transform: the source's name, for errors.
        file_pattern: a pattern, or a list of paths or identities.

    Returns:
        The files.

    Raises:
        SourceError: nothing matched, or a file is not a regular file.
    """
    if not isinstance(file_pattern, str):
        given = list(file_pattern)
        if not given or not all(isinstance(p, FileIdentity) or (isinstance(p, str) and p)
                                for p in given):
            raise SourceError(f"{transform}: file_pattern must be a pattern or a non-empty list "
                              f"of file paths, not {file_pattern!r}")
        paths = sorted(p for p in given if isinstance(p, str))
        listed = [p for p in given if isinstance(p, FileIdentity)]
        files = sorted([*listed, *storage.identify_paths(paths)], key=_path_of)
    else:
        try:
            found = storage.match(file_pattern)
            files = list(storage.identify(found))
        except Exception as err:  # noqa: BLE001 - a filesystem's own error, shown whole
            raise SourceError(f"{transform}: cannot match {file_pattern!r}: {err}") from None
        if not files:
            raise SourceError(f"{transform}: no files match {file_pattern!r}")
    special = [why for f in files if isinstance(f, FileIdentity)
               for why in [not_a_file(f)] if why is not None]
    if special:
        more = f" (and {len(special) - 1} more)" if len(special) > 1 else ""
        raise SourceError(f"{transform}: {special[0]}{more}")
    return files


def _path_of(file: str | FileIdentity) -> str:
    return file.path if isinstance(file, FileIdentity) else file


class ReadSource(beam.PTransform):
    """The public shape of a source: a pipeline root that reads the files ``file_pattern``
    matches with one format's :class:`ReadFiles` and returns a :class:`ReadResult`.

    The pattern is matched when the transform is applied (``FileSystems.match``, so any Beam
    filesystem: local, ``gs://``, ...), in the launching process, not by ``fileio`` inside the
    pipeline: a pattern that matches nothing fails there with one line naming it, before a job
    is submitted; the files are fixed in the job graph, as the command line's input
    fingerprint needs; and ``Spread`` shares them out among workers either way. Each file
    travels as its :class:`FileIdentity`, so the worker that reads it can tell whether it
    changed since (sinks/format/file_identity.py). (A template staged for later runs
    therefore reads the files that matched when it was made, as they were then.)

    Args:
        file_pattern: a file pattern on any Beam filesystem, or a list of paths.
        features: a ``features:`` mapping or FeatureSpecs.
        options: the format's options.
        extra_fields: other top-level fields to keep.
        split_bytes: the size above which a file is read as ranges (bytes or text like ``64MiB``).

    Raises:
        SourceError: a bad argument.
    """

    _files: type[ReadFiles]

    def __init__(self, file_pattern: str | Sequence[str], features: Any, options: Any,
                 extra_fields: Sequence[str] = (),
                 split_bytes: int | str = DEFAULT_SPLIT_BYTES) -> None:
        super().__init__()
        name = type(self).__name__
        try:
            self.split_bytes = parse_split_bytes(split_bytes, f"{name}.split_bytes")
        except ValueError as err:
            raise SourceError(_argument_message(name, err)) from None
        if not isinstance(file_pattern, str) and (
                isinstance(file_pattern, (bytes, Mapping)) or not isinstance(file_pattern,
                                                                             Iterable)):
            raise SourceError(f"{name}: file_pattern must be a pattern or a list of file "
                              f"paths, not {file_pattern!r}")
        if isinstance(file_pattern, str) and not file_pattern.strip():
            raise SourceError(f"{name}: file_pattern must be a non-empty pattern")
        self.file_pattern = file_pattern if isinstance(file_pattern, str) else list(
            file_pattern)
        try:
            self.features = as_feature_specs(features) if features is not None else ()
        except (TypeError, ValueError) as err:  # "config key 'features.a.type': ..."
            shown = str(err).replace("config key 'features", "argument 'features", 1)
            raise SourceError(f"{name}: {shown}") from None
        if isinstance(extra_fields, str) or not all(
                isinstance(f, str) and f for f in extra_fields):
            raise SourceError(f"{name}: extra_fields must be a list of field names, not "
                              f"{extra_fields!r}")
        self.options = options
        self.extra_fields: tuple[str, ...] | None = tuple(extra_fields)
        self._reader = self._files(options, self.features, tuple(extra_fields),
                                   split_bytes=self.split_bytes)

    def file_reader(self) -> ReadFileFn:
        """The DoFn that reads one file, for callers that sample a file before the pipeline
        runs (pipelines/launch_check.py).

        Returns:
            The DoFn.
        """
        return self._reader.reader

    def display_data(self) -> dict[str, Any]:
        """What the Dataflow job page shows for this step: the pattern (secrets redacted),
        the features, the fields kept besides them, the range size and the format's options."""
        items = source_display_data(self.file_pattern, self.options, self.features)
        if self.extra_fields is None or self.extra_fields:
            kept = "every column" if self.extra_fields is None else ", ".join(self.extra_fields)
            items["extra_fields"] = DisplayDataItem(kept, label="Fields kept besides features")
        items["split_bytes"] = DisplayDataItem(self.split_bytes,
                                               label="Largest range read by one task (bytes)")
        return items

    def expand(self, pbegin):
        files = match_files(type(self).__name__, self.file_pattern)
        read = self._reader.expand(pbegin | "ListInputs" >> beam.Create(files))  # file paths
        if self.features:  # what ToExamples / WriteTFRecordDataset use when given none
            read.records.feature_specs = self.features
        return ReadResult(records=read.records, rejected=read[REJECTED], counts=read[COUNTS])
