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

:class:`ReadFiles` applies a format's DoFn to a PCollection of file paths; :class:`ReadSource`
is the public shape of a source (``p | btf.ReadCsv("gs://b/*.csv", features=...)``): it
matches the pattern when applied and returns a :class:`ReadResult`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

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
from beam_tfrecords.sinks.format.shard_plan import parse_size
from beam_tfrecords.transforms.codec.coercion import preview
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.codec.specs import _fail, as_feature_specs
from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES, Reject, Unread

__all__ = ["CHANGED_COUNTS", "COUNTS", "REJECTED", "UNREAD_COUNTS", "Outputs", "ReadFileFn",
           "ReadFiles", "ReadResult", "ReadSource", "RecordChunk", "Reject", "SourceError",
           "Unread", "dead_letter", "parse_max_record_bytes", "read_outputs", "records_chunk",
           "unread_letter"]

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
_MAX_RECORD_LIMIT = 1 << 40


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

    def __len__(self) -> int:
        return self.batch.num_rows if self.batch is not None else len(self.rows)

    def records(self) -> list:
        """The records as mappings (converted from ``batch`` when the chunk is columnar)."""
        return self.batch.to_pylist() if self.batch is not None else self.rows

    def row_number(self, index: int) -> int:
        return self.row_numbers[index] if self.row_numbers else self.first_row + index


class RecordChunkCoder(SizedPickleCoder):
    """RecordChunks' coder (runtime/batch_coders.py): sized by their buffers, not pickled."""

    value_type = RecordChunk

    def nbytes(self, value: RecordChunk) -> int:
        return value.batch.nbytes if value.batch is not None else rows_nbytes(value.rows)


beam.coders.registry.register_coder(RecordChunk, RecordChunkCoder)


def dead_letter(path: str, row: int | None, feature: str, reason: str, value: Any,
                record: Any) -> dict[str, Any]:
    """One dead-letter row for a rejected record: where it came from, what was wrong, and
    previews."""
    return {
        "source": path,
        "row": row,
        "feature": feature,
        "reason": reason,
        "value": preview(value),
        "record": preview(record, 400),
        "kind": "rejected",
    }


def unread_letter(path: str, unread: Unread) -> dict[str, Any]:
    """One dead-letter row for a region of input no record came from: where it starts (byte
    ``offset``, first ``row`` lost or None), its ``bytes``, the ``rows`` it held (None:
    unknown) and why."""
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
    chunk; ``row_numbers`` is kept only when they skip."""
    contiguous = numbers[-1] - numbers[0] == len(numbers) - 1
    return RecordChunk(path, numbers[0], rows, () if contiguous else tuple(numbers), batch)


def read_outputs(path: str, events: Iterable[Any], read_counter: Any,
                 rejected_counter: Any) -> Iterator[Any]:
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
    stop (sinks/early_stop.py) -- never sees a larger share rejected than there was."""
    read = rejected = 0
    unread_bytes = unread_rows = regions = 0
    changed: list[tuple[int, int]] = []  # (size listed, size read) of a changed file
    chunk: list = []
    numbers: list = []
    waiting: list = []  # dead-letter outputs read after the records in ``chunk``

    def flush() -> list:  # the gathered records as a chunk, then the rows that waited
        nonlocal chunk, numbers, waiting
        out = [records_chunk(path, chunk, numbers)] if chunk else []
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
                path, event.row, event.feature, event.reason, event.value, event.record))
        elif kind is Unread:
            regions += 1
            if event.changed is not None:
                changed.append(event.changed)
            unread_bytes += event.bytes
            unread_rows += event.rows or 0
            letter = beam.pvalue.TaggedOutput(REJECTED, unread_letter(path, event))
        elif isinstance(event, RecordChunk):
            yield from flush()  # the records before the chunk leave first
            read += len(event)
            yield event
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
    """``source.max_record_bytes`` as the options of a format carry it."""
    return getattr(options, "max_record_bytes", DEFAULT_MAX_RECORD_BYTES)


def parse_max_record_bytes(value: Any, key: str = "source.max_record_bytes") -> int:
    """A record size limit (67108864, "64MiB", "64MB"): the config's ``source.max_record_bytes``
    and every public source's ``max_record_bytes`` argument."""
    if isinstance(value, float):
        raise _fail(key, value, "must be a whole number of bytes or a size such as '64MiB'")
    try:
        size = parse_size(value)
    except ValueError as err:
        raise _fail(key, value, str(err)) from None
    if size > _MAX_RECORD_LIMIT:
        raise _fail(key, value, f"must be at most {_MAX_RECORD_LIMIT} bytes")
    return size


# -- one file -> events -> outputs ------------------------------------------------------------

class ReadFileFn(beam.DoFn):
    """One file path -> RecordChunks, dead-letter rows (``rejected``) and ``counts``.

    A format subclasses it and defines :meth:`events`; the DoFn holds only its constructor
    arguments (and two counters), so it pickles cheaply. ``features`` and ``extra_fields``
    (top-level fields to keep besides theirs, e.g. the split key) let a format read less;
    ``columnar`` selects the format's Arrow path where it has one; ``batch_rows`` caps a
    columnar chunk.
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
        """The events of one file, read from ``handle`` (opened by ``storage.open_read``)."""
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


def _parse_paths(paths: Any, reader: ReadFileFn, label: str) -> Any:
    # paths: file paths -> (records: RecordChunk, rejected: dict, counts: (name, n))
    return (
        paths
        | "SpreadFiles" >> Spread()
        | label >> beam.ParDo(reader)
        .with_output_types(RecordChunk).with_outputs(REJECTED, COUNTS, main="records")
    )


class ReadFiles(beam.PTransform):
    """A PCollection of file paths -> the reader outputs (``records``, ``rejected``,
    ``counts``) of one format, whose module names ``_fn`` (its :class:`ReadFileFn`) and
    ``_label`` (the parse step's name).

    ``options`` are the format's options dataclass, ``features`` FeatureSpecs; keyword
    arguments (``columnar``, ``batch_rows``, CSV's ``block_bytes``) go to the DoFn. The records,
    their row numbers and the dead letters are the same with ``columnar`` on or off.
    """

    _fn: type[ReadFileFn]
    _label: str

    def __init__(self, options: Any, features: Sequence[FeatureSpec] = (),
                 extra_fields: Sequence[str] = (), **knobs: Any) -> None:
        super().__init__()
        self.reader = self._fn(options, features, extra_fields, **knobs)

    def expand(self, paths):
        return _parse_paths(paths, self.reader, self._label)


# -- the public sources -----------------------------------------------------------------------

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
    :class:`SourceError` naming the argument."""
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
    """A tuple argument as the list a config parser expects (YAML gives lists)."""
    return list(value) if isinstance(value, tuple) else value


def match_files(transform: str, file_pattern: str | Sequence[str | FileIdentity]
                ) -> list[str | FileIdentity]:
    """The files to read, sorted, each as its :class:`FileIdentity` where its filesystem
    tells one (the reader compares it with the file it reads): a pattern matched on its Beam
    filesystem, or a list of paths (or identities listed already) taken as they are. Nothing
    matched is a :class:`SourceError` naming the pattern; so is a FIFO, a device or a
    directory among the files, which no reader may open."""
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
    """

    _files: type[ReadFiles]

    def __init__(self, file_pattern: str | Sequence[str], features: Any, options: Any,
                 extra_fields: Sequence[str] = ()) -> None:
        super().__init__()
        name = type(self).__name__
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
        self._reader = self._files(options, self.features, tuple(extra_fields))

    def file_reader(self) -> ReadFileFn:
        """The DoFn that reads one file, for callers that sample a file before the pipeline
        runs (pipelines/launch_check.py)."""
        return self._reader.reader

    def expand(self, pbegin):
        files = match_files(type(self).__name__, self.file_pattern)
        read = self._reader.expand(pbegin | "ListInputs" >> beam.Create(files))  # file paths
        if self.features:  # what ToExamples / WriteTFRecordDataset use when given none
            read.records.feature_specs = self.features
        return ReadResult(records=read.records, rejected=read[REJECTED], counts=read[COUNTS])
