"""Image sources: folders of images or a manifest CSV -> chunks of image records, plus rejects.

Two layouts (``source.images.layout``):

- ``folders``: ``<root>/<label>/<file>`` or ``<root>/<split>/<label>/<file>``; which one is
  decided by the depth of the files below the root, and mixed depths are an error.
- ``manifest``: a CSV with a header naming at least ``path`` and ``label``; relative paths
  resolve against the CSV's folder, absolute and ``scheme://`` paths are used as they are;
  any further columns pass through as string fields (a ``split`` column becomes the split).

Listing and planning happen at launch, before the pipeline: :func:`plan_images` is pure and
returns the per-image :class:`ImageEntry` s (sorted by path for folders, in file order for a
manifest) and the label vocabulary (sorted label texts; a label's int is its index), which
the build records in its manifest. :func:`list_images` adds the file access.

:class:`ReadImages` then reads every file once (``storage.open_read``), keeps its bytes
unchanged, reads height/width/channels/format from the header (never a full decode), and
emits :class:`framework.RecordChunk` s of at most ``CHUNK_IMAGES`` records or ``CHUNK_BYTES``
bytes -- the same contract as ``ReadCsv``: main output ``records``, dead-letter rows on
``rejected`` (unreadable, empty, truncated or non-image files, naming the path and reason) and
``counts`` pairs (``read``, ``rejected_at_read``). A chunk's ``path`` is the root folder or the
manifest, and its row numbers are the images' 1-based positions in the plan (for a manifest,
its data row numbers), so BuildExamples' dead letters point back to the entry.
"""

from __future__ import annotations

import collections
import concurrent.futures
import csv
import dataclasses
import io
import itertools
import pickle
import posixpath
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.display import DisplayDataItem

from beam_tfrecords.runtime import storage
from beam_tfrecords.runtime.spread import Spread
from beam_tfrecords.sinks.format.layout import InvalidName, check_name
from beam_tfrecords.transforms.readers.framework import (
    COUNTS,
    REJECTED,
    ReadResult,
    RecordChunk,
    SourceError,
    dead_letter,
    listed,
    parse_arguments,
    records_chunk,
    source_display_data,
)
from beam_tfrecords.transforms.readers.image_files import DEFAULT_EXTENSIONS
from beam_tfrecords.transforms.readers.image_header import (
    ImageHeaderError,
    check_complete,
    read_header,
)
from beam_tfrecords.transforms.readers.source_options import (
    ImagesOptions,
    parse_images_options,
)

__all__ = [
    "DEFAULT_EXTENSIONS",
    "ImageEntry",
    "ImagePlan",
    "ImagesOptions",
    "ReadImages",
    "list_images",
    "parse_images_options",
    "plan_images",
]

# Fields every image record has; manifest columns may not reuse them (``split`` excepted).
RESERVED = ("image", "path", "label", "label_text", "height", "width", "channels", "format")
CHUNK_IMAGES = 256
# A few MB per chunk: enough to amortise Beam's per-element cost over dozens of images, small
# enough that the buffers a chunk needs (file bytes, Examples, the batch) are reused from one
# chunk to the next instead of freshly faulted in (2,000 JPEGs: 1.03-1.17 s with 64 MB
# chunks, 0.80-0.93 s with 8 MB, bench/README.md).
CHUNK_BYTES = 8 * 1024 * 1024
_BATCH = 256  # entries per element before the read step
# Files in flight per worker on Cloud Storage, where each read waits tens of milliseconds.
REMOTE_READ_THREADS = 8


@dataclasses.dataclass(frozen=True)
class ImageEntry:
    """One image to read: where it is, its label, split and pass-through fields."""

    path: str
    label: int
    label_text: str
    split: str | None = None
    extra: tuple[tuple[str, str], ...] = ()
    row: int = 0  # 1-based position in the plan (a manifest's data row number)


@dataclasses.dataclass(frozen=True)
class ImagePlan:
    source: str  # the root folder or the manifest CSV
    entries: tuple[ImageEntry, ...]
    vocabulary: tuple[str, ...]  # label texts, sorted; index = the int label
    skipped: tuple[str, ...] = ()  # listed files without an image extension

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(sorted({e.split for e in self.entries if e.split is not None}))


# -- options ----------------------------------------------------------------------------------

# -- planning (pure) --------------------------------------------------------------------------

def _relative(root: str, path: str) -> str:
    prefix = root.rstrip("/") + "/"
    if not path.startswith(prefix):
        raise ValueError(f"image listing: {path!r} is not below the root {root!r}")
    return path[len(prefix):]


def _vocabulary(labels: Sequence[str]) -> tuple[tuple[str, ...], dict[str, int]]:
    vocabulary = tuple(sorted(set(labels)))
    return vocabulary, {text: index for index, text in enumerate(vocabulary)}


def _plan_folders(root: str, paths: Sequence[str], extensions: Sequence[str]) -> ImagePlan:
    wanted = tuple(e.lower() for e in extensions)
    images, skipped, by_depth = [], [], {}
    for path in sorted(set(paths)):
        rel = _relative(root, path)
        if not rel.lower().endswith(wanted):
            skipped.append(path)
            continue
        parts = rel.split("/")
        by_depth.setdefault(len(parts), rel)
        images.append((path, parts))
    if not images:
        raise ValueError(f"image folders: no files ending in {', '.join(wanted)} below "
                         f"{root!r} ({len(skipped)} other files)")
    depths = sorted(by_depth)
    if len(depths) > 1:
        shown = "; ".join(f"{by_depth[d]!r} ({d} levels)" for d in depths)
        raise ValueError(f"image folders below {root!r} mix layouts: {shown}; use "
                         "<label>/<file> or <split>/<label>/<file> throughout")
    depth = depths[0]
    if depth not in (2, 3):
        raise ValueError(f"image folders below {root!r}: {by_depth[depth]!r} is {depth} "
                         "levels deep; expected <label>/<file> or <split>/<label>/<file>")
    if depth == 3:  # a split folder's name becomes a folder of the output: a name, not a path
        for split in sorted({parts[0] for _, parts in images}):
            try:
                check_name("split", split)
            except InvalidName as err:
                raise ValueError(f"image folders below {root!r}: the split folder {split!r} "
                                 f"cannot name a split: {err}") from None
    vocabulary, index = _vocabulary([parts[-2] for _, parts in images])
    entries = tuple(
        ImageEntry(path=path, label=index[parts[-2]], label_text=parts[-2],
                   split=parts[0] if depth == 3 else None, row=row)
        for row, (path, parts) in enumerate(images, start=1)
    )
    return ImagePlan(root, entries, vocabulary, tuple(skipped))


def _resolve(base_dir: str, path: str) -> str:
    """A manifest path: absolute and ``scheme://`` paths as they are, others below the CSV."""
    if "://" in path or path.startswith("/"):
        return path
    scheme, sep, rest = base_dir.rpartition("://")
    return f"{scheme}{sep}{posixpath.normpath(posixpath.join(rest, path))}"


def _plan_manifest(manifest: str, rows: Sequence[Mapping[str, Any]]) -> ImagePlan:
    base_dir = manifest.rsplit("/", 1)[0] if "/" in manifest else "."
    if not rows:
        raise ValueError(f"image manifest {manifest!r} has no data rows")
    columns = list(rows[0].keys())
    for needed in ("path", "label"):
        if needed not in columns:
            raise ValueError(f"image manifest {manifest!r} has no {needed!r} column "
                             f"(columns: {', '.join(map(str, columns))})")
    clashes = [c for c in columns if c in RESERVED and c not in ("path", "label")]
    if clashes:
        raise ValueError(f"image manifest {manifest!r}: column(s) {', '.join(clashes)} would "
                         "overwrite fields read from the image; rename them")
    extra_columns = [c for c in columns if c not in ("path", "label", "split")]
    checked = []
    for row, cells in enumerate(rows, start=1):
        path, label = cells.get("path"), cells.get("label")
        if None in cells or any(cells.get(c) is None for c in columns):
            raise ValueError(f"image manifest {manifest!r}, data row {row}: expected "
                             f"{len(columns)} cells ({', '.join(columns)})")
        if not path or not path.strip():
            raise ValueError(f"image manifest {manifest!r}, data row {row}: empty path")
        if not label or not label.strip():
            raise ValueError(f"image manifest {manifest!r}, data row {row}: empty label "
                             f"for {path!r}")
        checked.append((row, _resolve(base_dir, path.strip()), label, cells))
    vocabulary, index = _vocabulary([label for _, _, label, _ in checked])
    entries = tuple(
        ImageEntry(path=path, label=index[label], label_text=label,
                   split=cells["split"] if "split" in columns else None,
                   extra=tuple((c, cells[c]) for c in extra_columns), row=row)
        for row, path, label, cells in checked
    )
    return ImagePlan(manifest, entries, vocabulary)


def plan_images(options: ImagesOptions, source: str, *, paths: Sequence[str] = (),
                rows: Sequence[Mapping[str, Any]] = ()) -> ImagePlan:
    """The images to read and the label vocabulary; pure, raises ValueError on a bad layout.

    ``folders``: ``source`` is the root and ``paths`` every file below it (any order).
    ``manifest``: ``source`` is the manifest CSV and ``rows`` its data rows as mappings
    (``csv.DictReader`` rows); the vocabulary holds the labels the manifest uses.

    Args:
        options: the source's image options.
        source: the root folder, or the manifest's path.
        paths: the files below the root (``folders``).
        rows: the manifest's rows (``manifest``).

    Returns:
        The images and their labels.

    Raises:
        ValueError: an unknown layout, or files or rows the layout cannot place.
    """
    if options.layout == "folders":
        return _plan_folders(source.rstrip("/"), paths, options.extensions)
    if options.layout == "manifest":
        return _plan_manifest(source, rows)
    raise ValueError(f"unknown image layout {options.layout!r}")


def list_images(path: str, options: ImagesOptions) -> ImagePlan:
    """List (folders) or read (manifest) at launch time, then :func:`plan_images`.

    ``path`` is ``source.path``: the root folder for ``folders``; for ``manifest`` the CSV
    itself unless ``options.manifest`` names it.

    Args:
        path: ``source.path``.
        options: the source's image options.

    Returns:
        The images and their labels.

    Raises:
        ValueError: an unreadable manifest or a bad layout.
    """
    if options.layout == "manifest":
        manifest = options.manifest or path
        with storage.open_read(manifest) as raw:
            text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
            try:
                rows = list(csv.DictReader(text, strict=True))
            except (csv.Error, UnicodeDecodeError) as err:
                raise ValueError(f"image manifest {manifest!r} is not readable CSV: {err}"
                                 ) from None
        return plan_images(options, manifest, rows=rows)
    root = path.rstrip("/")
    listed = [m.path for m in storage.match(root + "/**")]
    return plan_images(options, root, paths=listed)


# -- reading (Beam) ---------------------------------------------------------------------------

def image_record(entry: ImageEntry, data: bytes, check: bool = True) -> dict[str, Any]:
    """The record for one image's bytes; raises ImageHeaderError for a bad file.

    Args:
        entry: the image's planned entry (path, label, split).
        data: its file's bytes.
        check: reject a file that ends early.

    Returns:
        The record.

    Raises:
        ImageHeaderError: not an image, or truncated.
    """
    info = read_header(data)
    if check:
        check_complete(data, info)
    record: dict[str, Any] = {
        "image": data,
        "path": entry.path,
        "label": entry.label,
        "label_text": entry.label_text,
    }
    if entry.split is not None:
        record["split"] = entry.split
    record.update({"height": info.height, "width": info.width, "channels": info.channels,
                   "format": info.format})
    record.update(entry.extra)
    return record


def _describe(entry: ImageEntry) -> dict[str, Any]:
    return {"path": entry.path, "label_text": entry.label_text, "split": entry.split,
            **dict(entry.extra)}


def read_threads_for(setting: int, paths: Sequence[str]) -> int:
    """Threads for reading ``paths``: ``setting``, or for 0 (auto) REMOTE_READ_THREADS when
    any path is remote and 1 otherwise.

    Args:
        setting: ``source.images.read_threads``; 0 for automatic.
        paths: the files to read.

    Returns:
        The number of threads.
    """
    if setting:
        return setting
    return REMOTE_READ_THREADS if any("://" in path for path in paths) else 1


def _read_file(path: str) -> tuple[bytes, OSError | None]:
    """A file's bytes, or the error reading it. Local files are read with ``open``: Beam's
    FileSystems costs ~30 us more per file, a tenth of an image's whole build."""
    try:
        if storage.is_local(path):
            refused = storage.not_a_regular_file(path)  # a FIFO would wait forever
            if refused is not None:
                return b"", OSError(refused)
            with open(path, "rb") as handle:
                return handle.read(), None
        with storage.open_read(path) as handle:
            return handle.read(), None
    except OSError as err:
        return b"", err


class _ReadImageBatch(beam.DoFn):
    """A batch of entries -> RecordChunks of image records; bad files -> rejected.

    With ``read_threads`` > 1, files are read that many at a time, in order, a bounded window
    ahead of the one being turned into a record: reading waits on the disk or on Cloud Storage
    (tens of milliseconds per object there) without holding the GIL, so it overlaps with the
    encoding and writing that run downstream in this thread. Local files are read here, one at
    a time, by default: from the page cache a read takes ~30 us, and a reading thread waited
    for the GIL longer than that at each of its few calls per file (20,000 JPEGs: 3.6 s with
    one reading thread, 3.2 s without).
    """

    def __init__(self, source: str, check: bool, read_threads: int) -> None:
        self._source = source
        self._check = check
        self._threads = read_threads
        self._read = Metrics.counter("sources", "images_read")
        self._rejected = Metrics.counter("sources", "images_rejected_at_read")

    def setup(self) -> None:
        self._pool = (concurrent.futures.ThreadPoolExecutor(
            self._threads, thread_name_prefix="read-images") if self._threads > 1 else None)

    def teardown(self) -> None:
        if getattr(self, "_pool", None) is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def _files(self, entries: list[ImageEntry]
               ) -> Iterator[tuple[ImageEntry, bytes, OSError | None]]:
        """(entry, bytes, error) in entry order; at most 2 x read_threads files in flight."""
        if self._pool is None:
            for entry in entries:
                yield entry, *_read_file(entry.path)
            return
        pending = collections.deque()
        upcoming = iter(entries)
        for entry in itertools.islice(upcoming, 2 * self._threads):
            pending.append((entry, self._pool.submit(_read_file, entry.path)))
        while pending:
            entry, future = pending.popleft()
            following = next(upcoming, None)
            if following is not None:
                pending.append((following, self._pool.submit(_read_file, following.path)))
            yield entry, *future.result()

    def process(self, packed: bytes) -> Iterator[Any]:
        batch = [ImageEntry(*fields) for fields in pickle.loads(zlib.decompress(packed))]
        chunk: list = []
        numbers: list = []
        size = 0
        rejected = 0
        for entry, data, error in self._files(batch):
            self._read.inc()
            try:
                if error is not None:
                    raise error
                record = image_record(entry, data, self._check)
            except (OSError, ImageHeaderError) as err:
                reason = (str(err) if isinstance(err, ImageHeaderError)
                          else f"cannot read the file: {err}")
                rejected += 1
                self._rejected.inc()
                yield beam.pvalue.TaggedOutput(REJECTED, dead_letter(
                    entry.path, entry.row, "image", f"{entry.path}: {reason}", data[:32],
                    _describe(entry)))
                continue
            chunk.append(record)
            numbers.append(entry.row)
            size += len(data)
            if len(chunk) >= CHUNK_IMAGES or size >= CHUNK_BYTES:
                yield records_chunk(self._source, chunk, numbers)
                chunk, numbers, size = [], [], 0
        if chunk:
            yield records_chunk(self._source, chunk, numbers)
        yield beam.pvalue.TaggedOutput(COUNTS, ("read", len(batch)))
        yield beam.pvalue.TaggedOutput(COUNTS, ("rejected_at_read", rejected))


def _fields(entry: ImageEntry) -> tuple:
    """An entry as a tuple of plain values, in field order (``ImageEntry(*fields)``)."""
    return tuple(getattr(entry, field.name) for field in dataclasses.fields(ImageEntry))


class ReadImages(beam.PTransform):
    """Reads image files, bytes unchanged, with their label and header facts:
    ``p | btf.ReadImages("gs://b/images")``.

    Each record holds ``image`` (the file's bytes), ``path``, ``label`` (int64: the index into
    the sorted label vocabulary), ``label_text``, ``split`` (when the layout has one),
    ``height``, ``width``, ``channels`` and ``format`` (from the header, never a full decode),
    and a manifest's further columns as strings.

    Args:
      root_or_manifest: for ``layout="folders"`` the root folder, holding
        ``<label>/<file>`` or ``<split>/<label>/<file>``; for ``layout="manifest"`` the
        manifest CSV (a header naming at least ``path`` and ``label``; relative paths resolve
        against its folder). Local or any Beam filesystem; listed when the transform is
        applied (no image found is an error naming it). Within this package it may also be an
        :class:`ImagePlan`, a sequence of :class:`ImageEntry` (with ``source=``) or
        :class:`ImagesOptions` (with ``path=``).
      layout: ``folders`` (default) or ``manifest``.
      manifest: the manifest CSV when it is not ``root_or_manifest`` (layout manifest only).
      extensions: the file endings that are images (default .jpg .jpeg .png .gif .bmp .webp).
      check_complete: reject files cut short after their header (default true).
      read_threads: files a worker reads at once: ``auto`` (default: 8 on a remote
        filesystem, 1 for local files) or 1 to 64.
      path: with :class:`ImagesOptions`, the root folder or manifest they apply to.
      source: with entries or a plan, the folder or manifest they came from, named in the
        dead letters (default: the plan's own).

    Returns a dict of PCollections, also readable as attributes: ``records`` (chunks of image
    records), ``rejected`` (dead-letter dicts: unreadable, empty, truncated or non-image
    files) and ``counts``. A bad argument raises an error naming it.
    """

    def __init__(self, root_or_manifest: str | ImagePlan | Sequence[ImageEntry] | ImagesOptions,
                 *, layout: str | None = None, manifest: str | None = None,
                 extensions: Sequence[str] | None = None, check_complete: bool | None = None,
                 read_threads: int | str | None = None, path: str = "",
                 source: str = "") -> None:
        super().__init__()
        self._options: ImagesOptions | None = None
        self._path = path
        self._entries: tuple[ImageEntry, ...] = ()
        self._source = source
        self._check = check_complete
        self._threads = read_threads
        given = {"layout": layout, "manifest": manifest, "extensions": listed(extensions),
                 "check_complete": check_complete, "read_threads": read_threads}
        if isinstance(root_or_manifest, str):
            if not root_or_manifest.strip():
                raise SourceError("ReadImages: root_or_manifest must be a non-empty path")
            options = parse_arguments("ReadImages", parse_images_options,
                                      {k: v for k, v in given.items() if v is not None})
            self._options, self._path = options, root_or_manifest
            self._check, self._threads = options.check_complete, options.read_threads
            return
        unused = [k for k in ("layout", "manifest", "extensions") if given[k] is not None]
        if unused:
            raise SourceError(f"ReadImages: {', '.join(unused)} apply to a root folder or "
                              "manifest path, not to a plan, entries or options")
        if isinstance(root_or_manifest, ImagesOptions):
            if not path:
                raise ValueError("ReadImages(options) needs path= (source.path)")
            self._options = root_or_manifest
            self._check = root_or_manifest.check_complete if check_complete is None else (
                check_complete)
            self._threads = root_or_manifest.read_threads if read_threads is None else (
                read_threads)
            return
        if isinstance(root_or_manifest, ImagePlan):
            self._source = source or root_or_manifest.source
            root_or_manifest = root_or_manifest.entries
        self._entries = tuple(root_or_manifest)

    def display_data(self) -> dict[str, Any]:
        """What the Dataflow job page shows for this step: the root or manifest (or how many
        entries it was given), the layout options, the completeness check and read threads."""
        if self._options is not None:
            items = source_display_data(self._path, self._options)
        else:
            items = source_display_data([entry.path for entry in self._entries], None)
        if self._check is not None:
            items["check_complete"] = DisplayDataItem(self._check, label="Check complete")
        if self._threads is not None:
            items["read_threads"] = DisplayDataItem(self._threads or "auto",
                                                    label="Read threads")
        return items

    def _plan(self) -> tuple[ImageEntry, ...]:
        """The entries to read: given, or listed now from the options and path."""
        if self._options is None:
            return self._entries
        try:
            plan = list_images(self._path, self._options)
        except (ValueError, OSError) as err:
            raise SourceError(f"ReadImages: {self._path!r}: {err}") from None
        self._source = plan.source
        return plan.entries

    def expand(self, pbegin):
        entries = self._plan()
        threads = read_threads_for(self._threads or 0, [entry.path for entry in entries])
        read = _ReadImageBatch(self._source, True if self._check is None else self._check,
                               threads)
        # A batch of entries travels as one pickle of plain tuples: as a list of dataclasses it
        # cost a pickle per entry at every step boundary, and Create walks a list's every
        # value to infer its type (0.15 s for 2,000 images).
        # zlib-compressed: Beam bz2-compresses the pickled pipeline, ~10 MB/s, and 20,000
        # paths cost it 0.25 s uncompressed; zlib level 1 shrinks them ~8x in milliseconds.
        fields = [_fields(entry) for entry in entries]
        batches = [zlib.compress(pickle.dumps(fields[i:i + _BATCH], pickle.HIGHEST_PROTOCOL), 1)
                   for i in range(0, len(fields), _BATCH)]
        out = (
            pbegin
            | "ListImages" >> beam.Create(batches, reshuffle=False)
            | "SpreadImages" >> Spread()
            | "ReadImageFiles" >> beam.ParDo(read)
            .with_output_types(RecordChunk).with_outputs(REJECTED, COUNTS, main="records")
        )
        return ReadResult(records=out.records, rejected=out[REJECTED], counts=out[COUNTS])
