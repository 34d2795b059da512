"""The TFRecord container format, free of Beam and TensorFlow: framing, compression, reading.

A TFRecord file is a sequence of records framed as ``u64 LE length | u32 LE masked crc32c of
the length bytes | data | u32 LE masked crc32c of data``, optionally wrapped as a whole in one
GZIP or ZLIB stream. The module only transforms bytes and talks to file-like objects handed to
it, so the sink, the validators and the tests share one implementation of the format.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, BinaryIO

import crc32c as _crc32c
import numpy as np

from beam_tfrecords.errors import UserError

__all__ = [
    "NONE", "GZIP", "ZLIB", "COMPRESSIONS", "file_suffix", "normalize_compression",
    "compression_from_name",
    "masked_crc32c", "mask_crc32c", "unmask_crc32c", "frame", "frame_batch", "frame_pieces",
    "frame_record_pieces", "record_piece_crcs", "record_piece_crc32s",
    "record_crcs", "record_crc32s", "record_slices",
    "StreamCompressor",
    "TFRecordWriter", "CorruptRecordError", "iter_records", "iter_records_with_offsets",
    "iter_record_spans", "detect_compression", "FRAME_OVERHEAD",
    "SNIFF_BYTES", "named_like_tfrecord", "starts_like_tfrecord",
]

NONE, GZIP, ZLIB = "none", "gzip", "zlib"
COMPRESSIONS = (NONE, GZIP, ZLIB)

# ZLIB shards end in ``.deflate``: the name Beam's ReadFromTFRecord (AUTO compression) and
# Python's ``CompressionTypes.DEFLATE`` recognise (``.zlib`` is read as uncompressed there).
# Our readers detect the compression from the bytes, not the name.
_SUFFIXES = {NONE: ".tfrecord", GZIP: ".tfrecord.gz", ZLIB: ".tfrecord.deflate"}
_WBITS = {GZIP: 31, ZLIB: 15}  # 31: gzip member with header/trailer; 15: zlib header + adler32
_NOT_READABLE_BY_TF = {"zstd", "zstandard", "bzip2", "bz2", "lzma", "xz", "snappy"}
_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct("<QI")  # length, masked crc of the 8 length bytes
_U32 = struct.Struct("<I")
HEADER_SIZE, FOOTER_SIZE = 12, 4
FRAME_OVERHEAD = HEADER_SIZE + FOOTER_SIZE  # 16 bytes of framing around every record
_BULK_RECORD_BYTES = 1024  # mean record size from which frame_batch copies record by record
CHUNK_SIZE = 1 << 16  # read / inflate granularity; bounds memory apart from the current record


def normalize_compression(name: str | None) -> str:
    """Map a user-supplied compression name to one of COMPRESSIONS (case-insensitive).

    Only the codecs TensorFlow can read are accepted, so a pipeline can never write shards its
    consumers cannot open.

    Args:
        name: ``none`` (or empty, ``uncompressed``), ``gzip``, ``zlib`` or ``deflate``, any case.

    Returns:
        One of COMPRESSIONS; ValueError naming the choices for anything else.
    """
    key = (name or "").strip().lower()
    if key in ("", NONE, "uncompressed"):
        return NONE
    if key == "deflate":  # Beam's name for the ZLIB stream, and our shards' suffix
        return ZLIB
    if key in COMPRESSIONS:
        return key
    hint = (f" ({key!r} TFRecords cannot be read by TensorFlow, which supports only GZIP and "
            "ZLIB)" if key in _NOT_READABLE_BY_TF else "")
    shown = repr(name) if len(str(name)) <= 40 else repr(str(name)[:37]) + "..."  # hostile
    raise ValueError(f"unsupported compression {shown}{hint}; choose one of {COMPRESSIONS}")


def file_suffix(compression: str | None) -> str:
    """The conventional file suffix for shards written with ``compression``.

    Args:
        compression: a name :func:`normalize_compression` accepts.

    Returns:
        ``.tfrecord``, ``.tfrecord.gz`` or ``.tfrecord.deflate``.
    """
    return _SUFFIXES[normalize_compression(compression)]


def compression_from_name(path: str) -> str | None:
    """The compression a shard's file name says, else None.

    Args:
        path: a shard's path or file name.

    Returns:
        ``none``, ``gzip`` or ``zlib`` for our suffixes (``.tfrecord``, ``.tfrecord.gz``,
        ``.tfrecord.deflate``), else None.
    """
    for kind in (GZIP, ZLIB, NONE):
        if path.endswith(_SUFFIXES[kind]):
            return kind
    return None


def mask_crc32c(crc: int) -> int:
    """TensorFlow's masking step applied to a plain CRC-32C (one computed piece by piece).

    Args:
        crc: a plain CRC-32C.

    Returns:
        The masked value a TFRecord frame stores.
    """
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    """TensorFlow's masked CRC-32C, which keeps CRCs of data containing CRCs well distributed.

    Args:
        data: the bytes to checksum.

    Returns:
        Their masked CRC-32C.
    """
    return mask_crc32c(_crc32c.crc32c(data))


def unmask_crc32c(masked: int) -> int:
    """Invert :func:`mask_crc32c`, giving back the plain CRC-32C.

    Args:
        masked: a masked CRC-32C, as a frame stores it.

    Returns:
        The plain CRC-32C.
    """
    rotated = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF


def _length_header(length: int) -> bytes:
    length_bytes = struct.pack("<Q", length)
    return length_bytes + _U32.pack(masked_crc32c(length_bytes))


def frame(record: bytes | bytearray | memoryview) -> bytes:
    """Frame one record: header, data and data CRC, ready to be appended to a TFRecord stream.

    Args:
        record: one serialized record.

    Returns:
        Its framed bytes: length, masked CRC of the length, data, masked CRC of the data.
    """
    return b"".join((_length_header(len(record)), record, _U32.pack(masked_crc32c(record))))


def frame_pieces(payload: bytes | bytearray | memoryview, offsets: np.ndarray,
                 crcs: np.ndarray | None = None) -> list:
    """Frame N records as 3N buffers to write in order: header, the record's data (a view of
    ``payload``, not a copy) and footer, per record (``crcs``: their plain CRC-32Cs, when
    known already).

    For large records (images): copying 200 MB of them into one framed buffer costs more than
    three writes per record, on top of the memory.

    Args:
        payload: the records' bytes, concatenated.
        offsets: the N+1 record boundaries in ``payload``.
        crcs: the records' plain CRC-32Cs, or None to compute them.

    Returns:
        3N buffers: header, data view and footer per record, in order.
    """
    view = memoryview(payload).cast("B")
    edges = np.asarray(offsets, dtype=np.int64).tolist()
    known = None if crcs is None else np.asarray(crcs, np.uint64).tolist()
    pieces: list = []
    for k, (a, b) in enumerate(zip(edges, islice(edges, 1, None), strict=False)):
        data = view[a:b]
        crc = masked_crc32c(data) if known is None else mask_crc32c(known[k])
        pieces += (_length_header(b - a), data, _U32.pack(crc))
    return pieces


# Pieces of a record shorter than this are copied into the buffer before or after them (its
# header, a feature's tag and length, the footer); longer ones are written as they are.
_SMALL_PIECE_BYTES = 4096


def record_piece_crcs(records: Sequence[Sequence[bytes | bytearray | memoryview]]
                      ) -> np.ndarray:
    """The plain CRC-32C of each record given as pieces, chained over them (uint32).

    Args:
        records: each record as a sequence of byte pieces.

    Returns:
        Their plain CRC-32Cs, one per record.
    """
    return _chained(_crc32c.crc32c, records)


def _chained(checksum: Callable[[Any, int], int],
             records: Sequence[Sequence[bytes | bytearray | memoryview]]) -> np.ndarray:
    """``checksum(piece, running)`` chained over each record's pieces, one uint32 a record."""
    out = np.empty(len(records), np.uint32)
    for k, parts in enumerate(records):
        crc = 0
        for part in parts:
            crc = checksum(part, crc)
        out[k] = crc
    return out


def frame_record_pieces(records: Sequence[Sequence[bytes | bytearray | memoryview]],
                        sizes: Sequence[int], crcs: np.ndarray | None = None
                        ) -> tuple[list, list[int]]:
    """Frame records given as pieces (``b"".join(records[i])`` is record ``i``, of ``sizes[i]``
    bytes) without joining them: the buffers to write in order, and where each record's
    buffers begin in that list (``n + 1`` entries).

    Each record's CRC is chained over its pieces; its header, small pieces and footer are
    gathered into a few short buffers around the large pieces (an image), which are passed on
    uncopied -- the image a reader read is the buffer the file gets. ``crcs``: the records'
    plain CRC-32Cs when the caller has them (:func:`record_piece_crcs`).

    Args:
        records: each record as a sequence of byte pieces.
        sizes: each record's total size in bytes.
        crcs: the records' plain CRC-32Cs, or None to compute them.

    Returns:
        The buffers to write in order, and the index in that list where each record's buffers
        begin (``n + 1`` entries).
    """
    crc32c, header, pack = _crc32c.crc32c, _length_header, _U32.pack
    known = None if crcs is None else np.asarray(crcs, np.uint64).tolist()
    out: list = []
    starts = [0]
    for k, (parts, size) in enumerate(zip(records, sizes, strict=True)):
        run = bytearray(header(size))
        crc, skip = 0, HEADER_SIZE  # a run's data starts after the header in the first run
        for part in parts:
            if len(part) < _SMALL_PIECE_BYTES:
                run += part
                continue
            if known is None:
                crc = crc32c(part, crc32c(memoryview(run)[skip:], crc))
            out.append(run)
            out.append(part)
            run, skip = bytearray(), 0
        if known is None:
            crc = crc32c(memoryview(run)[skip:], crc)
        run += pack(mask_crc32c(crc if known is None else known[k]))
        out.append(run)
        starts.append(len(out))
    return out, starts


# Mean record size below which records are sliced as copies: slicing ``bytes`` costs a third
# of slicing a memoryview (0.09 against 0.25 us a record, measured on 40-byte records), and
# the copies are small.
_COPY_SLICES_BYTES = 1024


def record_slices(payload: bytes | bytearray | memoryview, offsets: np.ndarray) -> list:
    """Each record ``payload[offsets[i]:offsets[i+1]]`` as its own buffer, for checksums
    taken one call a record: copies for small records (faster to make), views otherwise.

    Args:
        payload: the records' bytes, concatenated.
        offsets: the N+1 record boundaries in ``payload``.

    Returns:
        One buffer per record.
    """
    edges = np.asarray(offsets, dtype=np.int64).tolist()
    if not isinstance(payload, (bytes, bytearray)) or (
            len(payload) >= _COPY_SLICES_BYTES * max(len(edges) - 1, 1)):
        payload = memoryview(payload).cast("B")
    return [payload[a:b] for a, b in zip(edges, islice(edges, 1, None), strict=False)]


def record_crcs(payload: bytes | bytearray | memoryview, offsets: np.ndarray,
                slices: list | None = None) -> np.ndarray:
    """The plain CRC-32C of each record ``payload[offsets[i]:offsets[i+1]]`` (uint32): one
    call per record, the one thing framing cannot do with whole arrays.

    Args:
        payload: the records' bytes, concatenated.
        offsets: the N+1 record boundaries in ``payload``.
        slices: the records as :func:`record_slices` gives them, when the caller has them.

    Returns:
        One plain CRC-32C per record.
    """
    if slices is None:
        slices = record_slices(payload, offsets)
    return np.fromiter(map(_crc32c.crc32c, slices), dtype=np.uint32, count=len(slices))


def record_crc32s(payload: bytes | bytearray | memoryview, offsets: np.ndarray,
                  slices: list | None = None) -> np.ndarray:
    """zlib's CRC-32 of each record ``payload[offsets[i]:offsets[i+1]]`` (uint32): a second
    checksum of another polynomial, for the records' fingerprints (sinks/format/duplicates.py).

    Args:
        payload: the records' bytes, concatenated.
        offsets: the N+1 record boundaries in ``payload``.
        slices: the records as :func:`record_slices` gives them, when the caller has them.

    Returns:
        One CRC-32 per record.
    """
    if slices is None:
        slices = record_slices(payload, offsets)
    return np.fromiter(map(zlib.crc32, slices), dtype=np.uint32, count=len(slices))


def record_piece_crc32s(records: Sequence[Sequence[bytes | bytearray | memoryview]]
                        ) -> np.ndarray:
    """zlib's CRC-32 of each record given as pieces, chained over them (uint32).

    Args:
        records: each record as a sequence of byte pieces.

    Returns:
        Their CRC-32s, one per record.
    """
    return _chained(zlib.crc32, records)


def frame_batch(payload: bytes | bytearray | memoryview, offsets: np.ndarray,
                crcs: np.ndarray | None = None) -> bytearray:
    """Frame N records given as one concatenated ``payload`` and N+1 ``offsets`` boundaries.

    ``crcs``: the records' plain CRC-32Cs when the caller has them already (the shuffle's keys
    are made of them), so they are not computed twice.

    The writer's hot path: one exact-size buffer, filled column-wise with numpy, and returned
    as that bytearray (a ``bytes`` copy would cost as much again as framing large records;
    slice it through a memoryview to avoid copies too).

    Per record, Python does only the one thing numpy cannot, the CRC of its data (one call);
    masking those CRCs, the length headers (computed once per distinct length), and placing
    headers, data and footers into the output are whole-array operations. Framing was the
    largest cost of a columnar build when done record by record.

    Args:
        payload: the records' bytes, concatenated.
        offsets: the N+1 record boundaries in ``payload``.
        crcs: the records' plain CRC-32Cs, or None to compute them.

    Returns:
        The framed records, in order, as one bytearray.
    """
    view = memoryview(payload).cast("B")
    bounds = np.asarray(offsets, dtype=np.int64)
    if bounds.ndim != 1 or len(bounds) == 0 or bounds[0] != 0 or bounds[-1] != len(view):
        raise ValueError("offsets must be 1-D, start at 0 and end at len(payload)")
    lengths = np.diff(bounds)
    if np.any(lengths < 0):
        raise ValueError("offsets must be non-decreasing")
    n = len(lengths)
    out = bytearray(len(view) + FRAME_OVERHEAD * n)
    if n == 0:
        return out
    edges = bounds.tolist()
    if crcs is None:
        crcs = record_crcs(payload, bounds)
    crcs = np.asarray(crcs, np.uint64)
    if crcs.shape != (n,):
        raise ValueError(f"{crcs.size} crcs for {n} records")
    masked = (((crcs >> 15) | (crcs << 17)) + _MASK_DELTA) & 0xFFFFFFFF
    distinct, which = np.unique(lengths, return_inverse=True)
    header_rows = np.frombuffer(b"".join(_length_header(int(size)) for size in distinct),
                                dtype=np.uint8).reshape(-1, HEADER_SIZE)
    frame_sizes = lengths + FRAME_OVERHEAD
    starts = np.zeros(n, dtype=np.int64)  # where each record's frame begins in the output
    np.cumsum(frame_sizes[:-1], out=starts[1:])
    target = np.frombuffer(out, dtype=np.uint8)
    header_at = starts[:, None] + np.arange(HEADER_SIZE)
    footer_at = (starts + HEADER_SIZE + lengths)[:, None] + np.arange(FOOTER_SIZE)
    target[header_at] = header_rows[which]
    target[footer_at] = masked.astype("<u4").view(np.uint8).reshape(n, FOOTER_SIZE)
    if len(view) >= _BULK_RECORD_BYTES * n:  # large records: one memcpy each is cheapest
        for start, a, b in zip((starts + HEADER_SIZE).tolist(), edges,
                               islice(edges, 1, None), strict=False):
            out[start:start + b - a] = view[a:b]
        return out
    is_data = np.ones(len(out), dtype=bool)  # small records: one masked copy of the payload
    is_data[header_at] = False
    is_data[footer_at] = False
    target[is_data] = np.frombuffer(view, dtype=np.uint8)
    return out


class StreamCompressor:
    """Write a byte stream to ``fileobj`` through optional GZIP/ZLIB compression, counting bytes.

    ``bytes_out`` is exact at all times; ``estimated_size()`` adds a guess for input still held
    inside the compressor, so a sink can cut shards by size without flushing after every write.

    Args:
        fileobj: the binary file written to.
        compression: ``none``, ``gzip`` or ``zlib`` (any name :func:`normalize_compression` takes).
        level: the zlib compression level, 0 to 9.
        close_file: close ``fileobj`` in :meth:`close`; otherwise it is only flushed.
    """

    def __init__(self, fileobj: BinaryIO, compression: str = NONE, level: int = 6,
                 close_file: bool = False) -> None:
        self.compression = normalize_compression(compression)
        self._file, self._close_file, self._closed = fileobj, close_file, False
        self._z = (None if self.compression == NONE
                   else zlib.compressobj(level, zlib.DEFLATED, _WBITS[self.compression]))
        self.bytes_in = self.bytes_out = 0
        self._exact_in = self._exact_out = 0  # a point where output covered all input exactly

    def _emit(self, data: bytes | bytearray | memoryview, size: int | None = None) -> None:
        size = len(data) if size is None else size
        if size:
            self._file.write(data)
            self.bytes_out += size

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Compress (if configured) and hand ``data`` to the file.

        Args:
            data: the bytes to write.

        Raises:
            ValueError: the stream is closed.
        """
        if self._closed:
            raise ValueError("write to a closed StreamCompressor")
        self.bytes_in += memoryview(data).nbytes
        if self._z is None:
            self._emit(data, memoryview(data).nbytes)
        else:
            self._emit(self._z.compress(data))

    def write_many(self, buffers: Sequence[bytes | bytearray | memoryview]) -> None:
        """:meth:`write` each of ``buffers``; uncompressed, one call down to the file.

        Args:
            buffers: the byte buffers, written in order.

        Raises:
            ValueError: the stream is closed.
        """
        if self._closed:
            raise ValueError("write to a closed StreamCompressor")
        if self._z is not None:
            for data in buffers:
                self.write(data)
            return
        size = sum(memoryview(data).nbytes for data in buffers)
        self.bytes_in += size
        if size:
            if hasattr(self._file, "writelines"):
                self._file.writelines(buffers)
            else:
                for data in buffers:
                    self._file.write(data)
            self.bytes_out += size

    def estimated_size(self) -> int:
        """Bytes the stream would occupy if flushed now (exact for NONE and right after sync).

        Input written since the last exact point is scaled by the compression ratio seen at that
        point; before any sync the ratio is taken as 1, an upper bound that errs towards small
        shards rather than oversized ones.

        Returns:
            The estimate in bytes, never below ``bytes_out``.
        """
        if self._z is None or self._closed:
            return self.bytes_out
        pending = self.bytes_in - self._exact_in
        if self._exact_in:  # pending * out / in, rounded up, in exact integer arithmetic
            pending = -(-pending * self._exact_out // self._exact_in)
        return max(self.bytes_out, self._exact_out + pending)

    def _mark_exact(self) -> None:
        self._exact_in, self._exact_out = self.bytes_in, self.bytes_out

    def sync(self) -> int:
        """Flush the compressor (Z_SYNC_FLUSH) and the file; return the now exact ``bytes_out``.

        Returns:
            The bytes written to the file so far.
        """
        if self._z is not None and not self._closed and self.bytes_in > self._exact_in:
            self._emit(self._z.flush(zlib.Z_SYNC_FLUSH))
            self._mark_exact()
        if hasattr(self._file, "flush") and not self._closed:
            self._file.flush()
        return self.bytes_out

    def close(self) -> int:
        """Finish the stream (gzip trailer / zlib adler32), optionally close the file.

        Returns the total number of bytes written; calling it again is harmless.

        Returns:
            The bytes written to the file.
        """
        if not self._closed:
            if self._z is not None:
                self._emit(self._z.flush(zlib.Z_FINISH))
            self._mark_exact()
            self._closed = True
            if self._close_file:
                self._file.close()
            elif hasattr(self._file, "flush"):
                self._file.flush()
        return self.bytes_out


class TFRecordWriter:
    """Append framed records to a binary file object, with optional whole-stream compression.

    With ``track_offsets=True`` every record is reported to ``on_record(offset, length)``, where
    offset is where its framing starts in the uncompressed stream and length its framed size;
    nothing is retained, so an index sidecar can be streamed out in O(1) memory.

    Args:
        fileobj: the binary file written to.
        compression: ``none``, ``gzip`` or ``zlib``.
        level: the zlib compression level, 0 to 9.
        close_file: close ``fileobj`` when the writer is closed.
        track_offsets: report every record to ``on_record``.
        on_record: called with ``(offset, framed_length)`` per record; required with
            ``track_offsets``.

    Raises:
        ValueError: ``track_offsets`` without ``on_record``.
    """

    def __init__(self, fileobj: BinaryIO, compression: str = NONE, level: int = 6, *,
                 close_file: bool = False, track_offsets: bool = False,
                 on_record: Callable[[int, int], None] | None = None) -> None:
        if track_offsets and on_record is None:
            raise ValueError("track_offsets=True needs an on_record(offset, length) callback")
        self._stream = StreamCompressor(fileobj, compression, level, close_file)
        self._on_record = on_record if track_offsets else None
        self.records = 0

    @property
    def uncompressed_bytes(self) -> int:
        """Framed bytes written so far, i.e. the size of the uncompressed stream."""
        return self._stream.bytes_in

    @property
    def bytes_on_disk(self) -> int:
        """Exact bytes handed to the file so far (compressed data still buffered excluded)."""
        return self._stream.bytes_out

    def estimated_bytes_on_disk(self) -> int:
        """The bytes the file would hold if the stream were flushed now (see
        ``StreamCompressor.estimated_size``), for cutting shards by size.

        Returns:
            The estimate in bytes.
        """
        return self._stream.estimated_size()

    def _report(self, sizes: Iterable[int]) -> None:
        offset = self._stream.bytes_in
        for size in sizes:
            framed = size + FRAME_OVERHEAD
            self._on_record(offset, framed)  # type: ignore[misc]
            offset += framed

    def write(self, record: bytes | bytearray | memoryview) -> None:
        """Frame and write one record.

        Args:
            record: the record's data (a serialized Example).
        """
        if self._on_record is not None:
            self._report((memoryview(record).nbytes,))
        self._stream.write(frame(record))
        self.records += 1

    def write_batch(self, payload: bytes | bytearray | memoryview, offsets: np.ndarray) -> None:
        """Frame and write the records ``payload[offsets[i]:offsets[i+1]]`` (see frame_batch).

        Args:
            payload: the records' data, back to back.
            offsets: the records' boundaries in ``payload`` (length records + 1).
        """
        framed = frame_batch(payload, offsets)
        if self._on_record is not None:
            self._report(np.diff(np.asarray(offsets, dtype=np.int64)).tolist())
        self._stream.write(framed)
        self.records += len(offsets) - 1

    def write_framed(self, framed: bytes | bytearray | memoryview, n_records: int,
                     sizes: Iterable[int] | None = None) -> None:
        """Write already framed data holding ``n_records`` records of data lengths ``sizes``.

        ``sizes`` is only needed for offset tracking; when omitted the headers are walked.

        Args:
            framed: the framed records, back to back.
            n_records: how many records ``framed`` holds.
            sizes: each record's data length, or None to read them from the headers.
        """
        if self._on_record is not None:
            self._report(_walk_sizes(framed, n_records) if sizes is None else sizes)
        self._stream.write(framed)
        self.records += n_records

    def write_pieces(self, pieces: Sequence[bytes | memoryview], n_records: int,
                     sizes: Sequence[int] | None = None) -> None:
        """Write ``n_records`` framed records as buffers: those of :func:`frame_pieces` (three
        per record), or of :func:`frame_record_pieces` with the records' data ``sizes``.

        Args:
            pieces: the framed records' buffers.
            n_records: how many records the pieces frame.
            sizes: each record's data length when the pieces are :func:`frame_record_pieces`'; None
                for three pieces per record.

        Raises:
            ValueError: the pieces or sizes do not match ``n_records``.
        """
        if sizes is None and len(pieces) != 3 * n_records:
            raise ValueError(f"{len(pieces)} pieces do not frame {n_records} records")
        if sizes is not None and len(sizes) != n_records:
            raise ValueError(f"{len(sizes)} sizes for {n_records} records")
        if self._on_record is not None:
            self._report([memoryview(data).nbytes for data in pieces[1::3]] if sizes is None
                         else sizes)
        self._stream.write_many(pieces)
        self.records += n_records

    def sync(self) -> int:
        """Flush the compressor and the file, so that the bytes on disk are exact.

        Returns:
            The bytes written to the file so far.
        """
        return self._stream.sync()

    def close(self) -> int:
        """Finish the stream; return the bytes on disk.

        Returns:
            The file's size in bytes.
        """
        return self._stream.close()

    def __enter__(self) -> TFRecordWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _walk_sizes(framed: bytes | bytearray | memoryview, n_records: int) -> list[int]:
    """Data lengths of the records in ``framed``, checking it holds exactly ``n_records``."""
    sizes, pos, view = [], 0, memoryview(framed).cast("B")
    while pos < len(view):
        if pos + HEADER_SIZE > len(view):
            raise ValueError("framed data ends inside a record header")
        (length,) = struct.unpack_from("<Q", view, pos)
        sizes.append(length)
        pos += length + FRAME_OVERHEAD
    if pos != len(view) or len(sizes) != n_records:
        raise ValueError(f"framed data holds {len(sizes)} records, not {n_records}")
    return sizes


class CorruptRecordError(UserError, ValueError):
    """A TFRecord stream that is not well formed, located by path and byte offset.

    Args:
        path: the file's path or URL.
        offset: where the bad record starts, in bytes.
        reason: what is wrong, such as a CRC mismatch.
        decompressed: the offset counts in the decompressed stream, not the file.
    """

    def __init__(self, path: str, offset: int, reason: str, decompressed: bool = False) -> None:
        where = " (in the decompressed stream)" if decompressed else ""
        super().__init__(f"{path}: corrupt TFRecord at byte offset {offset}{where}: {reason}")
        self.path, self.offset, self.reason, self.decompressed = path, offset, reason, decompressed

    def __reduce__(self) -> tuple:  # keep the attributes when pickled across worker processes
        return type(self), (self.path, self.offset, self.reason, self.decompressed)


def detect_compression(head: bytes, path: str = "<stream>") -> str:
    """Guess a file's compression from its first bytes (at least 12 unless the file is shorter).

    A valid uncompressed header wins over the gzip magic (a first record's length may start with
    1f 8b); a head too short to judge is NONE, so the reader reports the truncation precisely.

    Args:
        head: the file's first bytes.
        path: the file's name, for the error.

    Returns:
        ``none``, ``gzip`` or ``zlib``; CorruptRecordError when the bytes are none of them.
    """
    if len(head) >= HEADER_SIZE and _HEADER.unpack_from(head)[1] == masked_crc32c(head[:8]):
        return NONE
    if head[:2] == b"\x1f\x8b":
        return GZIP
    if len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] * 256 + head[1]) % 31 == 0:
        return ZLIB
    if len(head) < HEADER_SIZE:
        return NONE
    raise CorruptRecordError(
        path, 0, "not a TFRecord file (no valid header in any supported compression)")


# Names TFRecord files go by: ours (`.tfrecord[.gz|.deflate]`), other tools' (`.zlib`, `.z`),
# TensorFlow's and TFDS's (`train.tfrecord-00000-of-00010`), `.tfrecords`, `.tfr`; any case,
# with a compression suffix.
# A sidecar such as `x.tfrecord.index` is not one by name (its content decides).
_TFRECORD_NAME = re.compile(
    r".*\.tfr(ecords?)?(\.(gz|gzip|deflate|zlib|zz|z))?(-\d+-of-\d+)?", re.I | re.S)
# How much of a file's start is enough to judge it: a gzip header with a long name or comment
# comes before the first compressed bytes.
SNIFF_BYTES = 1 << 14


def named_like_tfrecord(name: str) -> bool:
    """Whether a file name (its last segment) says TFRecord, as readers' globs pick files.

    Args:
        name: a file name or path.

    Returns:
        True when the name says TFRecord (ours, TensorFlow's, TFDS's, any case).
    """
    return _TFRECORD_NAME.fullmatch(name.rsplit("/", 1)[-1]) is not None


def _framed(head: bytes) -> bool:
    return len(head) >= HEADER_SIZE and _HEADER.unpack_from(head)[1] == masked_crc32c(head[:8])


def starts_like_tfrecord(head: bytes) -> bool:
    """Whether a file whose first bytes are ``head`` (up to :data:`SNIFF_BYTES`) begins with a
    TFRecord frame: 12 bytes whose masked CRC matches the length before it, as they are or
    after inflating the start of a GZIP or ZLIB stream. A chance match is one in 2^32; an
    empty file (a TFRecord file of no records) is told by its name alone.

    Args:
        head: the file's first bytes.

    Returns:
        True when they begin with a valid TFRecord frame, compressed or not.
    """
    if _framed(head):
        return True
    for kind in (GZIP, ZLIB):
        try:
            start = zlib.decompressobj(_WBITS[kind]).decompress(head, HEADER_SIZE)
        except zlib.error:
            continue
        if _framed(start):
            return True
    return False


def _raw_chunks(fileobj: BinaryIO, first: bytes) -> Iterator[bytes]:
    yield first
    while chunk := fileobj.read(CHUNK_SIZE):
        yield chunk


def _inflate(chunks: Iterator[bytes], compression: str, path: str) -> Iterator[bytes]:
    """Decompress a GZIP (possibly multi-member) or ZLIB stream in bounded-size pieces."""
    name, produced, fed = compression.upper(), 0, 0
    inflater, started = zlib.decompressobj(_WBITS[compression]), False

    def fail(reason: str) -> CorruptRecordError:
        return CorruptRecordError(path, produced, f"{reason} (compressed byte offset ~{fed})", True)

    for data in chunks:
        pending = False
        while data or pending:
            if inflater.eof:  # a member/stream ended with bytes left over
                if compression == ZLIB:
                    raise fail("data after the end of the ZLIB stream: concatenated ZLIB streams "
                               "are not readable by TensorFlow (it silently stops after the first)")
                inflater, started = zlib.decompressobj(_WBITS[compression]), False
            try:
                out = inflater.decompress(data, CHUNK_SIZE)
            except zlib.error as exc:
                raise fail(f"corrupt {name} stream ({exc})") from None
            started = True
            fed += len(data) - len(inflater.unconsumed_tail) - len(inflater.unused_data)
            data = inflater.unconsumed_tail or inflater.unused_data
            pending = len(out) == CHUNK_SIZE and not inflater.eof  # output capped: drain it
            if out:
                produced += len(out)
                yield out
    if started and not inflater.eof:
        raise fail(f"truncated {name} stream")


class _ChunkReader:
    """Exact-size reads over an iterator of chunks; short reads only at end of stream."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._buf, self._pos = chunks, b"", 0

    def read(self, n: int) -> bytes:
        end = self._pos + n
        if end <= len(self._buf):
            self._pos = end
            return self._buf[end - n:end]
        parts, have = [self._buf[self._pos:]], len(self._buf) - self._pos
        self._buf, self._pos = b"", 0
        while have < n:  # grows with data actually present, never with the claimed length
            if (chunk := next(self._chunks, None)) is None:
                break
            take = min(n - have, len(chunk))
            parts.append(chunk[:take])
            have += take
            if take < len(chunk):
                self._buf, self._pos = chunk, take
        return b"".join(parts)

    def window(self) -> tuple[bytes, int]:
        """The chunk at hand and the position in it: what :meth:`skip_to` may move over
        without a read."""
        return self._buf, self._pos

    def skip_to(self, pos: int) -> None:
        """Move within the chunk at hand (``pos`` <= its length), past bytes taken from
        :meth:`window`."""
        self._pos = pos

    def pieces(self, n: int) -> Iterator[bytes | memoryview]:
        """The next ``n`` bytes (fewer at end of stream) in the pieces they arrive in, none
        of them copied or kept: how a record too large to hold is passed through its CRC."""
        while n:
            if self._pos >= len(self._buf):
                if (chunk := next(self._chunks, None)) is None:
                    return
                self._buf, self._pos = chunk, 0
            take = min(n, len(self._buf) - self._pos)
            yield memoryview(self._buf)[self._pos:self._pos + take]
            self._pos += take
            n -= take


def _stream_size(fileobj: BinaryIO) -> int | None:
    """Bytes left in a seekable file, or None when that cannot be known without reading."""
    try:
        if not fileobj.seekable():
            return None
        here = fileobj.tell()
        return fileobj.seek(0, 2) - fileobj.seek(here)
    except (AttributeError, OSError, TypeError, ValueError):
        return None


def _check_body_size(available: int, length: int, fail: Callable) -> None:
    if available < length:
        raise fail(f"truncated record data: {available} of {length} bytes")
    if available < length + FOOTER_SIZE:
        raise fail(f"truncated data CRC: {available - length} of {FOOTER_SIZE} bytes")


def _pass_through(reader: _ChunkReader, length: int) -> tuple[int, int]:
    """Read ``length`` bytes of record data without keeping them: (bytes read, their crc32c)."""
    crc = got = 0
    for piece in reader.pieces(length):
        crc = _crc32c.crc32c(piece, crc)
        got += len(piece)
    return got, crc


def _parse(reader: _ChunkReader, path: str, verify_crc: bool, decompressed: bool,
           size: int | None, max_bytes: int | None) -> Iterator[tuple[int, int, bytes | None]]:
    offset = 0
    small = CHUNK_SIZE if max_bytes is None else min(CHUNK_SIZE, max_bytes)

    def fail(reason: str) -> CorruptRecordError:
        return CorruptRecordError(path, offset, reason, decompressed)

    def check_data_crc(stored: int, computed: int, length: int) -> None:
        if stored != computed:
            raise fail(f"data CRC mismatch (stored {stored:#010x}, computed {computed:#010x}) "
                       f"for a record of {length} bytes")

    crc32c_of = _crc32c.crc32c
    unpack_header, unpack_u32 = _HEADER.unpack_from, _U32.unpack_from
    while True:
        # The records lying whole in the chunk at hand, sound and small, in a tight loop: a
        # record-by-record read cost ~2.8 us each (verify read 23 MB/s of 65-byte records).
        # Anything else -- a record crossing chunks, a large one, a bad CRC, a truncation --
        # is left to the general path below, which reads it again and says what is wrong.
        buf, pos = reader.window()
        end = len(buf)
        while pos + HEADER_SIZE <= end:
            length, length_crc = unpack_header(buf, pos)
            start = pos + HEADER_SIZE
            stop = start + length + FOOTER_SIZE
            if length > small or stop > end or (
                    size is not None and offset + stop - pos > size):
                break
            data = buf[start:start + length]
            if verify_crc:
                c = crc32c_of(buf[pos:pos + 8])
                if length_crc != (((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF:
                    break
                c = crc32c_of(data)
                if unpack_u32(buf, start + length)[0] != (
                        ((c >> 15) | (c << 17)) + _MASK_DELTA) & 0xFFFFFFFF:
                    break
            reader.skip_to(stop)
            yield offset, length, data
            offset += stop - pos
            pos = stop
        header = reader.read(HEADER_SIZE)
        if not header:
            return
        if len(header) < HEADER_SIZE:
            raise fail(f"truncated record header: {len(header)} of {HEADER_SIZE} bytes")
        length, length_crc = _HEADER.unpack(header)
        if verify_crc and length_crc != (want := masked_crc32c(header[:8])):
            raise fail(f"length CRC mismatch (stored {length_crc:#010x}, computed {want:#010x}) "
                       f"for length field {length}")
        needed = length + FOOTER_SIZE
        if size is not None and offset + HEADER_SIZE + needed > size:
            _check_body_size(size - offset - HEADER_SIZE, length, fail)  # no read of a bad length
        if length <= small:  # the common case: data and footer in one read, small slices
            body = reader.read(needed)
            _check_body_size(len(body), length, fail)
            data: bytes | None = body[:length]
            if verify_crc:
                check_data_crc(_U32.unpack_from(body, length)[0], masked_crc32c(data), length)
        else:
            if max_bytes is None or length <= max_bytes:  # held: no slice copies it again
                data = reader.read(length)
                got = len(data)
            else:  # passed through its CRC piece by piece, never held
                data, (got, crc) = None, _pass_through(reader, length)
            footer = reader.read(FOOTER_SIZE) if got == length else b""
            _check_body_size(got + len(footer), length, fail)
            if verify_crc:
                check_data_crc(_U32.unpack(footer)[0], mask_crc32c(crc) if data is None
                               else masked_crc32c(data), length)
        yield offset, length, data
        offset += HEADER_SIZE + needed


def iter_record_spans(fileobj: BinaryIO, compression: str | None = "auto",
                      path: str = "<stream>", verify_crc: bool = True,
                      max_bytes: int | None = None) -> Iterator[tuple[int, int, bytes | None]]:
    """Stream ``(offset, length, data)`` per record, offset being the record's framing start.

    ``data`` is None for a record longer than ``max_bytes``: its bytes pass through the CRC
    check in the pieces they are read and decompressed in, and are never held, so memory stays
    within ``max_bytes`` and a few chunks whatever a record's size (a 2 GiB record of zeros is
    a 2 MB gzip file). ``max_bytes=None`` returns every record's data.

    For compressed files offsets count decompressed bytes. Works on non-seekable streams. Any
    malformation, including a damaged compressed stream, raises CorruptRecordError.

    Args:
        fileobj: a binary file object, read from its current position.
        compression: ``none``, ``gzip``, ``zlib``, or ``auto`` (from the first bytes).
        path: the file's name, for errors.
        verify_crc: check each length's and each record's CRC.
        max_bytes: the largest record whose data is returned; None: every record's.

    Yields:
        ``(offset, length, data)`` per record.
    """
    auto = (compression or "").lower() == "auto"
    kind = NONE if auto else normalize_compression(compression)
    size = _stream_size(fileobj) if kind == NONE else None
    head = b""
    if auto:
        while len(head) < HEADER_SIZE and (more := fileobj.read(CHUNK_SIZE)):
            head += more
        kind = detect_compression(head, path)
    chunks = _raw_chunks(fileobj, head)
    if kind != NONE:
        chunks, size = _inflate(chunks, kind, path), None
    yield from _parse(_ChunkReader(chunks), path, verify_crc, kind != NONE, size, max_bytes)


def iter_records_with_offsets(fileobj: BinaryIO, compression: str | None = "auto",
                              path: str = "<stream>",
                              verify_crc: bool = True) -> Iterator[tuple[int, bytes]]:
    """Stream ``(offset, record)`` pairs; see :func:`iter_record_spans`, whose arguments
    these are (without ``max_bytes``). Memory holds the current record and a few chunks.

    Args:
        fileobj: the binary stream read from.
        compression: ``none``, ``gzip``, ``zlib``, or ``auto`` (from the first bytes).
        path: the file's name in errors.
        verify_crc: check every record's CRCs.

    Yields:
        ``(offset, record)`` per record.
    """
    for offset, _, data in iter_record_spans(fileobj, compression, path, verify_crc):
        yield offset, data  # type: ignore[misc]  # max_bytes=None: never None


def iter_records(fileobj: BinaryIO, compression: str | None = "auto", path: str = "<stream>",
                 verify_crc: bool = True) -> Iterator[bytes]:
    """Stream the records of a TFRecord file.

    Args:
        fileobj: a binary file object, read from its current position.
        compression: ``none``, ``gzip``, ``zlib``, or ``auto`` (from the first bytes).
        path: the file's name, for errors.
        verify_crc: check each length's and each record's CRC.

    Yields:
        Each record's bytes.
    """
    yield from (r for _, _, r in iter_record_spans(fileobj, compression, path, verify_crc))
