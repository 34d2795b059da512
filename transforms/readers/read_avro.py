"""Avro: its options, the container framing, the reader of one file, and the public
``ReadAvro``.

The object container's framing is parsed here (header: magic, metadata, sync marker; blocks:
record count, size, data, sync marker) and each block is decoded by ``fastavro`` on its own,
so a damaged block (bad data, a damaged sync marker, a wrong size) costs that block only:
reading goes on at the next sync marker, and the block's records are counted as lost (its
header's count) in one *unread* dead-letter row. Without a later sync marker the rest of the
file is unread. A block larger than ``max_record_bytes`` is skipped unread without being held.

Records are dicts, row by row (Avro has no columnar path here): nested records are dicts,
arrays lists, nulls None, timestamps ``datetime``, bytes ``bytes``. Row numbers are 1-based
across the file.
"""

from __future__ import annotations

import dataclasses
import io
import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from beam_tfrecords.runtime import storage
from beam_tfrecords.transforms.codec.wire import varint
from beam_tfrecords.transforms.readers.avro_ranges import AvroDamage as _AvroDamage
from beam_tfrecords.transforms.readers.avro_ranges import (
    avro_head,
    avro_link,
    block_start,
    frame_block,
    read_long,
)
from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES, Reject, Unread
from beam_tfrecords.transforms.readers.framework import (
    RangeFound,
    ReadFileFn,
    ReadFiles,
    ReadSource,
    handle_reader,
    max_record_bytes_of,
    parse_arguments,
)
from beam_tfrecords.transforms.readers.ranges import DEFAULT_SPLIT_BYTES, plan_ranges
from beam_tfrecords.transforms.readers.source_options import AvroOptions, parse_avro_options

__all__ = ["AvroOptions", "ReadAvro", "ReadAvroFiles", "avro_fields", "parse_avro_options"]


# -- options ----------------------------------------------------------------------------------

_AVRO_MAGIC = b"Obj\x01"
_SYNC = 16


def _zigzag(value: int) -> bytes:
    """An Avro long: zigzag, then a base-128 varint."""
    return varint((value << 1) ^ (value >> 63))


@dataclasses.dataclass
class _AvroHeader:
    schema: Any
    codec: str
    sync: bytes
    prefix: bytes  # a container header that hands one block to fastavro: codec null or ours


class _AvroFile:
    """An Avro object container file read block by block, holding at most about
    ``limit`` bytes (a header, a block) at a time; ``pos`` is the offset of the next byte."""

    def __init__(self, handle: Any, limit: int) -> None:
        self._handle = handle
        self._limit = limit
        self._buf = b""
        self.pos = 0

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer only at the end of the file)."""
        if len(self._buf) < n:
            parts = [self._buf]
            have = len(self._buf)
            while have < n:
                data = self._handle.read(max(n - have, 1 << 16))
                if not data:
                    break
                parts.append(data)
                have += len(data)
            self._buf = b"".join(parts)
        data, self._buf = self._buf[:n], self._buf[n:]
        self.pos += len(data)
        return data

    def unread(self, data: bytes) -> None:
        """Put ``data`` (just read) back in front."""
        self._buf = data + self._buf
        self.pos -= len(data)

    def exact(self, n: int) -> bytes:
        data = self.read(n)
        if len(data) < n:
            raise _AvroDamage(f"the file ends {n - len(data)} bytes early")
        return data

    def long(self) -> int:
        return read_long(self.exact)

    def skip(self, n: int) -> int:
        """Skip up to ``n`` bytes without holding them; how many there were."""
        skipped = 0
        while skipped < n:
            got = len(self.read(min(n - skipped, 1 << 20)))
            if not got:
                break
            skipped += got
        return skipped

    def find(self, marker: bytes) -> bool:
        """Skip to just past the next ``marker`` (True), or to the end of the file."""
        while True:
            chunk = self.read(1 << 20)  # fewer bytes only at the end of the file
            at = chunk.find(marker)
            if at >= 0:
                self.unread(chunk[at + len(marker):])
                return True
            if self.at_end():
                return False
            self.unread(chunk[len(chunk) - len(marker) + 1:])  # may start the marker

    def at_end(self) -> bool:
        if self._buf:
            return False
        data = self._handle.read(1 << 16)
        self._buf = data
        return not data

    def read_header(self) -> _AvroHeader:
        """Magic, metadata (schema, codec) and sync marker; raises _AvroDamage / ValueError."""
        import fastavro

        if self.read(4) != _AVRO_MAGIC:
            raise _AvroDamage("no Avro magic bytes at the start")
        meta: dict[str, bytes] = {}
        total = 0
        while True:
            count = self.long()
            if count == 0:
                break
            if count < 0:
                count = -count
                self.long()  # the block's size in bytes
            for _ in range(count):
                key_size = self.long()
                if not 0 <= key_size <= self._limit:
                    raise _AvroDamage(f"a metadata key of {key_size} bytes")
                key = self.exact(key_size).decode("utf-8")
                size = self.long()
                total += key_size + max(size, 0)
                if not 0 <= size <= self._limit or total > self._limit:
                    raise _AvroDamage(f"metadata larger than source.max_record_bytes "
                                      f"({self._limit})")
                meta[key] = self.exact(size)
        sync = self.exact(_SYNC)
        schema = json.loads(meta["avro.schema"])
        codec = meta.get("avro.codec", b"null").decode() or "null"
        own = codec if codec not in ("null", "deflate") else "null"
        prefix = bytearray(_AVRO_MAGIC)
        prefix += _zigzag(2)
        for key, value in ((b"avro.schema", meta["avro.schema"]), (b"avro.codec", own.encode())):
            prefix += _zigzag(len(key)) + key + _zigzag(len(value)) + value
        prefix += _zigzag(0) + sync
        fastavro.reader(io.BytesIO(bytes(prefix)))  # refuses a schema or codec it cannot read
        return _AvroHeader(schema, codec, sync, bytes(prefix))


def _long_at(data: bytes, i: int) -> tuple[int, int]:
    """The Avro long at ``data[i:]`` and the offset after it."""
    value = shift = 0
    for j in range(i, min(i + 10, len(data))):
        byte = data[j]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), j + 1
        shift += 7
    raise _AvroDamage("a varint cut short or longer than 10 bytes")


def _plausible(count: int | None, region: int) -> int | None:
    """A damaged block's record count from its header, when it can be believed: records of
    at least a byte each in the ``region`` bytes skipped."""
    return count if count is not None and 0 <= count <= region else None


def _avro_events(handle: Any, limit: int) -> Iterator[Any]:
    """An Avro container's events, block by block (see the module doc)."""
    import fastavro

    avro = _AvroFile(handle, limit)
    try:
        header = avro.read_header()
    except Exception as err:  # noqa: BLE001 - any failure here means an unreadable file
        avro.skip(1 << 62)
        yield Unread(0, avro.pos, None, None,
                     f"not a readable Avro file ({type(err).__name__}: {err}); the whole file "
                     f"({avro.pos} bytes) is unread")
        return
    sync = header.sync
    row = 0
    while not avro.at_end():
        start = avro.pos
        count: int | None = None
        try:
            count, size = avro.long(), avro.long()
            if count < 0 or size < 0:
                raise _AvroDamage(f"its header says {count} records in {size} bytes")
            if size > limit:
                # Too large to hold: skipped unread, if its sync marker is where it says.
                if avro.skip(size) == size and avro.read(_SYNC) == sync:
                    yield Unread(start, avro.pos - start, count, row + 1,
                                 f"an Avro block of {size} bytes ({count} records) is larger "
                                 f"than source.max_record_bytes ({limit}); skipped unread")
                    row += count
                    continue
                raise _AvroDamage(f"its header says {size} bytes, and no sync marker "
                                  "follows them")
            data = avro.exact(size)
            marker = avro.exact(_SYNC)
            if marker != sync:
                if _next_block_is_sound(avro, sync, limit):
                    # Only this block's sync marker is damaged: the block is lost, exactly.
                    yield Unread(start, avro.pos - start, count, row + 1,
                                 f"a damaged Avro block (the sync marker after it is wrong): "
                                 f"its {count} records are lost, reading goes on after it")
                    row += count
                    continue
                avro.unread(data + marker)
                raise _AvroDamage("the sync marker after it is wrong")
        except _AvroDamage as err:
            found = avro.find(sync)
            rows = _plausible(count, avro.pos - start)
            known = (f"at least the {rows} records its header counts are lost"
                     if rows is not None else "the records lost are not known")
            yield Unread(start, avro.pos - start, rows, row + 1,
                         f"a damaged Avro block ({err}): {known}; "
                         + ("reading goes on at the next sync marker" if found
                            else "no sync marker follows, so the rest of the file is unread"))
            row += rows or 0
            continue
        try:
            records = _avro_block(fastavro, header, count, data, limit)
        except Exception as err:  # noqa: BLE001 - corrupt data inside sound framing
            yield Unread(start, avro.pos - start, count, row + 1,
                         f"an Avro block that cannot be decoded: its {count} records are "
                         f"lost, reading goes on after it ({type(err).__name__}: {err})")
            row += count
            continue
        for record in records:
            row += 1
            if not isinstance(record, dict):  # a file whose schema is not a record
                yield Reject(row, "", f"not an Avro record: a {type(record).__name__}",
                             record, record)
                continue
            yield row, record


def _next_block_is_sound(avro: _AvroFile, sync: bytes, limit: int) -> bool:
    """Whether the end of the file or a block whose sync marker is right comes next;
    reads nothing away."""
    if avro.at_end():
        return True
    whole = avro.read(20)
    try:
        count, i = _long_at(whole, 0)
        size, i = _long_at(whole, i)
        if count < 0 or not 0 <= size <= limit:
            return False
        need = i + size + _SYNC
        if need > len(whole):
            whole += avro.read(need - len(whole))
        return len(whole) >= need and whole[need - _SYNC:need] == sync
    except _AvroDamage:
        return False
    finally:
        avro.unread(whole)


def _avro_block(fastavro: Any, header: _AvroHeader, count: int, data: bytes,
                limit: int) -> list:
    """One block's records, decoded by fastavro from a one-block container (null and
    deflate are decompressed here, at most ``limit`` bytes; other codecs by fastavro)."""
    if header.codec == "deflate":
        inflate = zlib.decompressobj(-15)
        data = inflate.decompress(data, limit + 1)
        if len(data) > limit or inflate.unconsumed_tail:
            raise _AvroDamage(f"it inflates to more than source.max_record_bytes ({limit})")
        if not inflate.eof:
            raise _AvroDamage("its deflate stream is cut short")
    block = b"".join((header.prefix, _zigzag(count), _zigzag(len(data)), data, header.sync))
    records = list(fastavro.reader(io.BytesIO(block)))
    if len(records) != count:
        raise _AvroDamage(f"it holds {len(records)} records, its header says {count}")
    return records


def avro_fields(path: str, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> list[str]:
    """The top-level field names an Avro file's schema declares ([] when it is not a record),
    to check a config before the pipeline runs; reads at most about ``max_record_bytes`` of
    its header (a larger one raises ValueError).

    Args:
        path: the file's path or URL.
        max_record_bytes: the most header bytes read.

    Returns:
        The field names.

    Raises:
        ValueError: the header is larger.
    """
    with storage.open_read(path) as handle:
        schema = _AvroFile(handle, max_record_bytes).read_header().schema
    if isinstance(schema, Mapping) and schema.get("type") == "record":
        return [field["name"] for field in schema.get("fields", ())]
    return []


class _ReadAvroFile(ReadFileFn):
    def events(self, path: str, handle: Any) -> Iterator[Any]:
        return _avro_events(handle, max_record_bytes_of(self._options))

    def plan(self, path: str, size: int, split_bytes: int) -> tuple[int, list[int]] | None:
        """Byte ranges, whose blocks avro_ranges finds by their sync markers; a file whose
        header cannot be read is read whole (and reported unread as a whole)."""
        with storage.open_read(path) as handle:
            _AvroFile(handle, max_record_bytes_of(self._options)).read_header()
        ranges = plan_ranges(size, split_bytes)
        return size, [span.start for span in ranges] + [size]

    def range_events(self, path: str, handle: Any, start: int, tracker: Any,
                     found: RangeFound) -> Iterator[Any]:
        """The blocks starting in the range (avro_ranges), each claimed at its start and
        decoded on its own; rows count from the range's first block. Its Link says where it
        began and where its walk stopped, for ranges.check_links."""
        import fastavro

        limit = max_record_bytes_of(self._options)
        read_at = handle_reader(handle)
        handle.seek(0)
        header = _AvroFile(handle, limit).read_header()
        head = avro_head(read_at, limit)
        at = first = block_start(read_at, head, start)
        found.range_offset = first
        row = 0
        while True:
            if not read_at(at, 1):  # the file's end: the range is done
                tracker.try_claim(max(at, tracker.current_restriction().stop))
                break
            if not tracker.try_claim(at):  # a block of the next range
                break
            block = frame_block(read_at, head, at, limit)
            at = block.end
            if block.damaged:
                yield Unread(block.offset, block.size, None, row + 1,
                             f"a damaged Avro block ({block.damaged}): the records lost are "
                             f"not known; reading goes on at the next sync marker")
                continue
            data = read_at(block.data_offset, block.data_size)
            try:
                records = _avro_block(fastavro, header, block.count, data, limit)
            except Exception as err:  # noqa: BLE001 - corrupt data inside sound framing
                yield Unread(block.offset, block.size, block.count, row + 1,
                             f"an Avro block that cannot be decoded: its {block.count} "
                             f"records are lost, reading goes on after it "
                             f"({type(err).__name__}: {err})")
                row += block.count
                continue
            for record in records:
                row += 1
                if not isinstance(record, dict):
                    yield Reject(row, "", f"not an Avro record: a {type(record).__name__}",
                                 record, record)
                    continue
                yield row, record
        found.link = avro_link(first, at)


class ReadAvroFiles(ReadFiles):
    """Avro object container file paths -> RecordChunks of dicts (main ``records``),
    dead-letter rows (``rejected``) and ``counts`` pairs, with :class:`AvroOptions`."""

    _fn = _ReadAvroFile
    _label = "ParseAvro"


class ReadAvro(ReadSource):
    """Reads Avro object container files: ``p | btf.ReadAvro("gs://b/*.avro")``.

    Args:
      file_pattern: the Avro container files: a glob or a list of paths.
      features: optional FeatureSpecs or ``features:`` mapping, for the transforms downstream
        (records keep every field; nested records are dicts: ``source: address.city``).
      max_record_bytes: the largest header or block held in memory (bytes, or a size such as
        "64MiB"); a larger block is skipped as unread input.
      split_bytes: a file larger than this (bytes, or a size such as "64MiB") is read as
        ranges of about this size that workers share (default 64 MiB).

    Returns a :class:`ReadResult` (``records``, ``rejected``: damaged blocks and files as
    dead-letter dicts, ``counts``); a bad argument raises an error naming it.
    """

    _files = ReadAvroFiles

    def __init__(self, file_pattern: str | Sequence[str], features: Any = None, *,
                 max_record_bytes: int | str = DEFAULT_MAX_RECORD_BYTES,
                 split_bytes: int | str = DEFAULT_SPLIT_BYTES) -> None:
        super().__init__(file_pattern, features, parse_arguments(
            "ReadAvro", parse_avro_options, {}, max_record_bytes), split_bytes=split_bytes)
