"""File access for every Beam filesystem (local, ``gs://``, ...) in one place.

Everything goes through ``apache_beam.io.filesystems.FileSystems`` so the sink works wherever
Beam does. Compression is always ``UNCOMPRESSED`` at this layer: FileSystems would otherwise
guess from a ``.gz`` suffix and compress a second time; the TFRecord writer compresses itself.
"""

from __future__ import annotations

import os
import uuid
from typing import BinaryIO, Iterable, Sequence

import crc32c
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

__all__ = [
    "CrcCountingWriter",
    "concatenate",
    "delete_tree",
    "exists",
    "join",
    "list_files",
    "match",
    "open_read",
    "open_write",
    "read_text",
    "rename",
    "write_atomic",
]

_COPY_CHUNK = 8 * 1024 * 1024
_RAW = CompressionTypes.UNCOMPRESSED


def join(base: str, *parts: str) -> str:
    return FileSystems.join(base, *parts) if parts else base


def is_local(path: str) -> bool:
    return "://" not in path


def open_write(path: str) -> BinaryIO:
    """A new file for writing; local parent directories are created."""
    if is_local(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    return FileSystems.create(path, compression_type=_RAW)


def open_read(path: str) -> BinaryIO:
    return FileSystems.open(path, compression_type=_RAW)


def read_text(path: str) -> str:
    with open_read(path) as handle:
        return handle.read().decode("utf-8")


def exists(path: str) -> bool:
    return FileSystems.exists(path)


def match(pattern: str) -> list:
    """FileMetadata (path, size_in_bytes, last_updated_in_seconds) of a glob, sorted by path."""
    result = FileSystems.match([pattern])[0]
    return sorted(result.metadata_list, key=lambda m: m.path)


def list_files(prefix: str) -> list[str]:
    """Every file below a directory-like prefix."""
    return [m.path for m in match(join(prefix, "**"))] if exists(prefix) else []


def delete_tree(prefix: str) -> None:
    """Remove a directory-like prefix and everything below it, if present."""
    if not exists(prefix):
        return
    if is_local(prefix):
        FileSystems.delete([prefix])
        return
    files = list_files(prefix)
    if files:
        FileSystems.delete(files)


def rename(source: str, destination: str) -> None:
    if is_local(destination):
        os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
    FileSystems.rename([source], [destination])


def write_atomic(path: str, data: bytes) -> None:
    """Readers see the old content or the new, never a partial file.

    Locally: write a unique temporary beside it, then ``os.replace``. On object stores an
    object becomes visible only when its upload completes, so a plain write is atomic.
    """
    if not is_local(path):
        with open_write(path) as handle:
            handle.write(data)
        return
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        with open_write(tmp) as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class CrcCountingWriter:
    """Wraps a binary file: counts bytes and keeps the crc32c of everything written.

    The crc32c is of the whole stored file, the value Cloud Storage reports for an object.
    """

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.bytes = 0
        self.crc32c = 0

    def write(self, data: bytes) -> int:
        self.crc32c = crc32c.crc32c(data, self.crc32c)
        self.bytes += len(data)
        self.handle.write(data)
        return len(data)

    def flush(self) -> None:
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


def concatenate(sources: Sequence[str], destination: str) -> tuple[int, int]:
    """Byte-concatenate files into ``destination`` (atomically); returns (bytes, crc32c)."""
    tmp = destination + f".tmp-{uuid.uuid4().hex}"
    out = CrcCountingWriter(open_write(tmp))
    try:
        for source in sources:
            with open_read(source) as handle:
                for chunk in iter(lambda: handle.read(_COPY_CHUNK), b""):
                    out.write(chunk)
        out.close()
        rename(tmp, destination)
    except BaseException:
        if exists(tmp):
            FileSystems.delete([tmp])
        raise
    return out.bytes, out.crc32c


def file_crc32c(path: str) -> tuple[int, int]:
    """(bytes, crc32c) of a stored file, read in full."""
    size, crc = 0, 0
    with open_read(path) as handle:
        for chunk in iter(lambda: handle.read(_COPY_CHUNK), b""):
            crc = crc32c.crc32c(chunk, crc)
            size += len(chunk)
    return size, crc


def delete(paths: Iterable[str]) -> None:
    paths = [p for p in paths if exists(p)]
    if paths:
        FileSystems.delete(paths)
