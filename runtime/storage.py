"""File access for every Beam filesystem (local, ``gs://``, ...) in one place.

A path with a scheme goes through ``apache_beam.io.filesystems.FileSystems`` so the sink works
wherever Beam does. Compression is always ``UNCOMPRESSED`` at this layer: FileSystems would
otherwise guess from a ``.gz`` suffix and compress a second time; the TFRecord writer
compresses itself.

A local path is served by plain ``os`` and ``io`` calls that do what Beam's LocalFileSystem
does -- the same globbing, listing, errors and results -- so a command that reads only local
files (``verify``, ``inspect``, ``schema``, ``init``, a refused ``build``) never imports Beam,
whose import alone costs over a second. Beam is imported on the first path with a scheme.

Cloud Storage (``gs://``) gets a few things FileSystems cannot do well, from
``runtime/gcs.py``: ``concatenate`` composes objects server-side, ``file_crc32c`` reads an
object's crc32c from its metadata, ``exists``, ``list_files`` and ``delete_tree`` treat a
name prefix as a directory, and ``write_atomic`` uploads in one retried request.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, BinaryIO

import crc32c

from beam_tfrecords.errors import UserError
from beam_tfrecords.runtime import gcs, threaded_file
from beam_tfrecords.runtime.gcs import StorageUnavailable
from beam_tfrecords.sinks.format.crc_combine import crc32c_of_joined
from beam_tfrecords.sinks.format.file_identity import (
    FileIdentity,
    kind_of_mode,
    not_a_file,
)
from beam_tfrecords.sinks.format.redact import (
    install_log_redaction,
    redact_streams_if_asked,
)

__all__ = [
    "CrcCountingWriter",
    "FileMetadata",
    "NoFilesystem",
    "NoMatch",
    "StorageUnavailable",
    "concatenate",
    "delete",
    "delete_tree",
    "exists",
    "file_crc32c",
    "identify",
    "identify_paths",
    "is_gcs",
    "is_local",
    "join",
    "list_files",
    "match",
    "not_a_regular_file",
    "observe",
    "open_read",
    "open_write",
    "read_text",
    "remove_files",
    "rename",
    "rename_many",
    "write_atomic",
]

_LOG = logging.getLogger(__name__)
install_log_redaction()  # every process that touches storage: launcher and workers
redact_streams_if_asked()  # a worker the command started prints through the same filter
_COPY_CHUNK = 8 * 1024 * 1024


def _filesystems() -> Any:
    """Beam's FileSystems, imported on the first path with a scheme (see the module
    docstring)."""
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def _raw() -> Any:
    from apache_beam.io.filesystem import CompressionTypes

    return CompressionTypes.UNCOMPRESSED


def _beam_io_error(operation: str, exceptions: dict) -> Exception:
    """The BeamIOError Beam's LocalFileSystem raises when ``operation`` fails, with the same
    message and details (Beam is imported only on this failing path)."""
    from apache_beam.io.filesystem import BeamIOError

    return BeamIOError(f"{operation} operation failed", exceptions)


class FileMetadata:
    """A listed local file: the fields of Beam's FileMetadata (``path``, ``size_in_bytes``,
    ``last_updated_in_seconds``) without importing Beam. A path with a scheme is listed as
    Beam's own FileMetadata, which has the same fields.

    Args:
        path: the file's path.
        size_in_bytes: its size.
        last_updated_in_seconds: its modification time (seconds since the epoch).
    """

    __slots__ = ("last_updated_in_seconds", "path", "size_in_bytes")

    def __init__(self, path: str, size_in_bytes: int,
                 last_updated_in_seconds: float = 0.0) -> None:
        self.path = path
        self.size_in_bytes = size_in_bytes
        self.last_updated_in_seconds = last_updated_in_seconds

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FileMetadata) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> tuple:
        return FileMetadata, self._key()

    def _key(self) -> tuple:
        return self.path, self.size_in_bytes, self.last_updated_in_seconds

    def __repr__(self) -> str:
        return (f"FileMetadata({self.path!r}, {self.size_in_bytes}, "
                f"{self.last_updated_in_seconds})")


class NoMatch(UserError, FileNotFoundError):
    """A path or glob given to read from that names nothing there."""


def join(base: str, *parts: str) -> str:
    """A path below ``base`` on its filesystem (``/`` or the local separator).

    Args:
        base: a folder, local or ``scheme://...``.
        *parts: names below it.

    Returns:
        The joined path; NoFilesystem when no Beam filesystem here serves ``base``'s scheme.
    """
    if not parts:
        return base
    if is_local(base):  # what Beam's LocalFileSystem.join does
        return os.path.join(base, *parts)
    if not is_gcs(base):
        _served(base)
    return _filesystems().join(base, *parts)


def is_local(path: str) -> bool:
    """Whether ``path`` is on local disk (it names no ``scheme://``).

    Args:
        path: any path.

    Returns:
        True for a local path.
    """
    return "://" not in path


def is_gcs(path: str) -> bool:
    """Whether ``path`` is on Cloud Storage.

    Args:
        path: any path.

    Returns:
        True for a ``gs://`` path.
    """
    return path.startswith(gcs.SCHEME)


class NoFilesystem(UserError, ValueError):
    """A path whose scheme no Beam filesystem here serves (``https://``, a typo, ``s3://``
    without its extra)."""


def _touch(path: str) -> None:
    """Called before any filesystem work on ``path``."""
    if is_gcs(path):
        gcs.quiet_beam_credentials()
    elif not is_local(path):
        _served(path)


def _served(path: str) -> None:
    """Raise :class:`NoFilesystem` unless a Beam filesystem serves ``path``'s scheme."""
    with _other_filesystem(path):
        try:
            _filesystems().get_filesystem(path)
        except ValueError:
            scheme = path.split("://", 1)[0]
            raise NoFilesystem(f"{path!r}: no filesystem for {scheme}:// here; local paths "
                               "and gs:// work, another scheme needs its Beam extra (e.g. "
                               "apache-beam[aws] for s3://)") from None


@contextlib.contextmanager
def _other_filesystem(path: str) -> Iterator[None]:
    """A scheme Beam knows but cannot use here (s3:// without boto3 or options, hdfs://
    without its client) fails in one line naming the path, not a BeamIOError traceback."""
    if is_local(path) or is_gcs(path):
        yield
        return
    from apache_beam.io.filesystem import BeamIOError

    try:
        yield
    except BeamIOError as err:
        details = getattr(err, "exception_details", None)
        inner = next(iter(details.values())) if isinstance(details, dict) and details else err
        scheme = path.split("://", 1)[0]
        raise NoFilesystem(f"{path!r}: the {scheme}:// filesystem failed here "
                           f"({type(inner).__name__}: {inner}); local paths and gs:// work, "
                           "another scheme needs its Beam extra and options") from None


# --- the interface ----------------------------------------------------------------------------


def open_write(path: str) -> BinaryIO:
    """A new file for writing; local parent directories are created.

    Args:
        path: where, on any Beam filesystem.

    Returns:
        A binary file object; what is written appears whole when it is closed on object stores.
    """
    if is_local(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return open(path, "wb")  # noqa: SIM115 -- the caller closes it
    _touch(path)
    return _filesystems().create(path, compression_type=_raw())


def open_counted_write(path: str) -> Any:
    """A new file that counts its bytes and CRC-32C (``.bytes``, ``.crc32c``): a local file is
    written by a thread of its own (:class:`threaded_file.ThreadedFile`), so the writes
    overlap with the caller's work; any other is a :class:`CrcCountingWriter`.

    Args:
        path: where, on any Beam filesystem.

    Returns:
        A writer with ``write``, ``writelines``, ``close``, ``bytes`` and ``crc32c``.
    """
    if is_local(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return threaded_file.ThreadedFile(path)
    return CrcCountingWriter(open_write(path))


def open_read(path: str) -> BinaryIO:
    """A file for reading, its bytes as stored (no decompression by suffix).

    Args:
        path: a file on any Beam filesystem.

    Returns:
        A binary file object.
    """
    if is_local(path):
        return open(path, "rb")  # noqa: SIM115 -- the caller closes it
    _touch(path)
    with _other_filesystem(path):
        return _filesystems().open(path, compression_type=_raw())


def read_text(path: str) -> str:
    """A whole file as UTF-8 text.

    Args:
        path: a file on any Beam filesystem.

    Returns:
        Its text.
    """
    with open_read(path) as handle:
        return handle.read().decode("utf-8")


def exists(path: str) -> bool:
    """Whether there is a file or a directory. On ``gs://`` a directory is a prefix with
    objects below it.

    Args:
        path: any path.

    Returns:
        True when something is there.
    """
    if is_local(path):
        return os.path.exists(path)
    _touch(path)
    if is_gcs(path):
        return gcs.exists(path)
    with _other_filesystem(path):
        return _filesystems().exists(path)


def match(pattern: str) -> list:
    """FileMetadata (path, size_in_bytes, last_updated_in_seconds) of a glob, sorted by path.

    A local glob without a folder (``*.csv``) is matched as ``./*.csv``: Beam's local
    filesystem matches nothing for it.

    Args:
        pattern: a glob on any Beam filesystem.

    Returns:
        The matches' metadata, sorted by path (empty when nothing matches).
    """
    _touch(pattern)
    if "://" not in pattern and not os.path.dirname(pattern):
        pattern = os.path.join(".", pattern)
    top = pattern[:-2]
    if is_local(pattern) and pattern.endswith("/**") and not _GLOB_CHARS.search(top) and (
            os.path.isdir(top)):
        return sorted(_walk_metadata(top), key=lambda m: m.path)
    if is_local(pattern):
        return sorted(_match_local(pattern), key=lambda m: m.path)
    with _other_filesystem(pattern):
        result = _filesystems().match([pattern])[0]
    return sorted(result.metadata_list, key=lambda m: m.path)


_GLOB_CHARS = re.compile(r"[*?\[]")


def _match_local(pattern: str) -> list[FileMetadata]:
    """What Beam's FileSystems.match lists for one local ``pattern``: a pattern without glob
    characters names itself (a folder too) when it exists; otherwise every file below the
    folder part before the first glob character, walked as ``os.walk`` does, filtered by
    :func:`_glob_regex`. A failed walk raises the BeamIOError Beam raises."""
    try:
        if pattern.endswith(("/", "\\")):
            pattern += "*"
        prefix = re.match(r"^[^[*?]*", pattern).group(0)
        matches = re.compile(_glob_regex(pattern)).match
        if prefix != pattern:
            return list(_list_local(os.path.dirname(prefix), matches))
        if not os.path.exists(pattern):
            return []
        found = FileMetadata(pattern, os.path.getsize(pattern), os.path.getmtime(pattern))
        return [found] if matches(found.path) else []
    except Exception as err:  # noqa: BLE001 -- Beam wraps every failure of a match so
        raise _beam_io_error("Match", {pattern: err}) from None


def _list_local(folder: str, matches: Any) -> Iterator[FileMetadata]:
    """Beam's LocalFileSystem listing of ``folder``, filtered by ``matches``: every file below
    it (``os.walk``: no symlinked folder entered) whose path matches, a file that vanishes
    skipped, a failed walk a BeamIOError. A path is matched before its file is looked at
    (Beam looks at every file, then matches)."""
    if not os.path.exists(folder):
        return
    try:
        for root, _, names in os.walk(folder):
            for name in names:
                path = os.path.join(root, name)
                if not matches(path):
                    continue
                try:
                    yield FileMetadata(path, os.path.getsize(path), os.path.getmtime(path))
                except OSError:  # gone since the walk saw it
                    pass
    except Exception as err:  # noqa: BLE001 -- as Beam's listing wraps it
        raise _beam_io_error("List", {folder: err}) from None


def _glob_regex(pattern: str) -> str:
    """Beam's ``FileSystem.translate_pattern``: fnmatch, except that ``*`` stops at a path
    separator and ``**`` does not; there is no way to quote a glob character."""
    i, n, out = 0, len(pattern), ""
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if i < n and pattern[i] == "*":
                out += ".*"
                i += 1
            else:
                out += r"[^/\\]*"
        elif c == "?":
            out += "."
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out += r"\["
            else:
                stuff = pattern[i:j].replace("\\", "\\\\")
                i = j + 1
                if stuff[0] == "!":
                    stuff = "^" + stuff[1:]
                elif stuff[0] == "^":
                    stuff = "\\" + stuff
                out += f"[{stuff}]"
        else:
            out += re.escape(c)
    return r"(?ms)" + out + r"\Z"


def _walk_metadata(top: str) -> list:
    """What Beam's match of ``top + "**"`` lists for a local folder -- every file below it,
    symlinked folders not entered, files that vanish skipped -- with one ``stat`` per file
    where Beam makes two and more Python around them (for an image folder of many small
    files, a noticeable share of the build: bench/README.md)."""
    found = []
    folders = [top]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(folder, entry.name)
            try:
                if entry.is_dir():
                    if not entry.is_symlink():
                        folders.append(path)
                    continue
                info = entry.stat()
            except OSError:
                continue
            found.append(FileMetadata(path, info.st_size, info.st_mtime))
    return found


# --- input identity (sinks/format/file_identity.py) ------------------------------------------

def _local_identity(path: str, info: os.stat_result) -> FileIdentity:
    return FileIdentity(path, info.st_size, kind_of_mode(info.st_mode), info.st_dev,
                        info.st_ino, info.st_mtime_ns, info.st_ctime_ns)


def identify(metadata: Sequence[Any]) -> list[FileIdentity]:
    """The identity of each listed file (Beam FileMetadata), in order, for the checks of
    sinks/format/file_identity.py: locally one ``os.stat`` (following a symlink to the file a
    reader would open, so a FIFO or a device is seen without opening it); on ``gs://`` each
    object's generation, from one listing; elsewhere the size the listing reported.

    Args:
        metadata: what :func:`match` listed.

    Returns:
        One FileIdentity per entry, in order.
    """
    metadata = list(metadata)
    remote = gcs.identities([m.path for m in metadata if is_gcs(m.path)])
    out = []
    for m in metadata:
        identity = remote.get(m.path)
        if identity is None and is_local(m.path):
            try:
                identity = _local_identity(m.path, os.stat(m.path))
            except OSError:  # gone since the listing: its read says so
                identity = None
        out.append(identity or FileIdentity(m.path, int(m.size_in_bytes)))
    return out


def identify_paths(paths: Sequence[str]) -> list[FileIdentity | str]:
    """:func:`identify` for paths given as a list rather than matched.

    Args:
        paths: file paths.

    Returns:
        One FileIdentity per path, in order; a path that cannot be looked at stays a plain
        path (its read reports why).
    """
    local: dict[str, FileIdentity] = {}
    for path in paths:
        if is_local(path):
            with contextlib.suppress(OSError):
                local[path] = _local_identity(path, os.stat(path))
    remote = gcs.identities([p for p in paths if is_gcs(p)])
    return [local.get(p) or remote.get(p) or p for p in paths]


def not_a_regular_file(path: str) -> str | None:
    """Why a local ``path`` must not be opened as input (a FIFO, a device, a socket, a
    directory: :func:`file_identity.not_a_file`), found with ``os.stat``, never by opening it.

    Args:
        path: an input path.

    Returns:
        The reason, or None for a regular file, a path that does not exist (opening it says
        so) and any object store (which holds no such things).
    """
    if not is_local(path):
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    return not_a_file(_local_identity(path, info))


def observe(path: str, handle: Any = None) -> FileIdentity | None:
    """The identity of ``path`` now -- of the open ``handle`` where it has a file descriptor
    (the file that was read, even if another has taken its name since).

    Args:
        path: a file that was listed.
        handle: the file object it was read through, if any.

    Returns:
        Its identity, or None where the filesystem tells nothing to compare.
    """
    if is_local(path):
        fileno = getattr(handle, "fileno", None)
        try:
            info = os.fstat(fileno()) if fileno is not None else os.stat(path)
        except (OSError, ValueError, io.UnsupportedOperation):
            try:
                info = os.stat(path)
            except OSError:
                return None
        return _local_identity(path, info)
    if is_gcs(path):
        return gcs.identity(path)
    return None


def list_files(prefix: str) -> list[str]:
    """Every file below a directory-like prefix.

    Args:
        prefix: a folder (or a file) on any Beam filesystem.

    Returns:
        The files' paths, sorted (the file itself for a file; empty when nothing is there).
    """
    if is_gcs(prefix):
        return [p for p in gcs.list_below(prefix) if not p.endswith("/")]
    if is_local(prefix):  # walked, not globbed: a '?', '*' or '[' in a folder name is literal
        if not os.path.isdir(prefix):
            return [prefix] if os.path.isfile(prefix) else []
        return sorted(os.path.join(folder, name) for folder, _, names in os.walk(prefix)
                      for name in names)
    return [m.path for m in match(join(prefix, "**"))] if exists(prefix) else []


def delete_tree(prefix: str) -> None:
    """Remove a directory-like prefix and everything below it, if present.

    Args:
        prefix: a folder (or a file) on any Beam filesystem.
    """
    if is_gcs(prefix):
        # Everything below the prefix (folder placeholders too), and an object of that name.
        paths = gcs.list_below(prefix)
        name = gcs.split_path(prefix)[1]
        if name and not name.endswith("/"):
            paths.append(prefix)
        gcs.delete_objects(paths)
        return
    if not exists(prefix):
        return
    if is_local(prefix):  # not FileSystems.delete, which globs: '?' in a name is literal here
        if os.path.isdir(prefix):
            shutil.rmtree(prefix)
        else:
            os.remove(prefix)
        return
    files = list_files(prefix)
    if files:
        _filesystems().delete(files)


def rename(source: str, destination: str) -> None:
    """Move a file. On object stores this is a copy and a delete (FileSystems does both).

    Args:
        source: the file.
        destination: its new path (local parent folders are created).
    """
    if is_local(destination):
        os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
    if is_local(source) and is_local(destination):  # what Beam's LocalFileSystem does
        try:
            os.rename(source, destination)
        except OSError as err:
            raise _beam_io_error("Rename", {(source, destination): OSError(err)}) from None
        return
    _touch(source)
    _touch(destination)
    _filesystems().rename([source], [destination])


def write_atomic(path: str, data: bytes,
                 content_type: str = "application/octet-stream") -> None:
    """Readers see the old content or the new, never a partial file.

    Locally: write a unique temporary beside it, then ``os.replace``. On Cloud Storage an
    object becomes visible only when its upload completes, so one upload (retried whole) is
    atomic; other object stores behave alike through FileSystems.

    Args:
        path: the file to write or replace.
        data: its whole content.
        content_type: the object's content type on Cloud Storage.
    """
    if is_gcs(path):
        gcs.upload(path, data, content_type)
        return
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


def rename_many(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Move many files at once: on Cloud Storage in batched requests (a batch of copies and
    one of deletes per 100 files, nothing looked up first), so that moving N files costs
    requests in proportion to N / 100, not N.

    Args:
        pairs: ``(source, destination)`` paths (local parent folders are created).

    Returns:
        The pairs whose source did not exist; nothing was done for them.
    """
    pairs = list(pairs)
    if pairs and all(is_gcs(s) and is_gcs(d) for s, d in pairs):
        _touch(pairs[0][0])
        return gcs.rename_objects(pairs)
    missing = []
    for source, destination in pairs:
        if is_local(source) and is_local(destination):
            os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
            try:
                os.replace(source, destination)
            except FileNotFoundError:
                if os.path.exists(source):
                    raise
                missing.append((source, destination))
        elif exists(source):
            rename(source, destination)
        else:
            missing.append((source, destination))
    return missing


def remove_files(paths: Iterable[str]) -> None:
    """Delete files -- never folders -- that exist among ``paths``: on Cloud Storage in
    batched requests with nothing looked up first (a missing object counts as deleted);
    locally each path taken literally (``os.remove``), never as a glob.

    Args:
        paths: file paths on any Beam filesystem.
    """
    paths = list(paths)
    remote = [p for p in paths if is_gcs(p)]
    gcs.delete_objects(remote)
    for path in paths:
        if is_local(path):
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
    delete([p for p in paths if not is_local(p) and not is_gcs(p)])


class CrcCountingWriter:
    """Wraps a binary file: counts bytes and keeps the crc32c of everything written.

    The crc32c is of the whole stored file, the value Cloud Storage reports for an object.

    Args:
        handle: the binary file written through.
    """

    def __init__(self, handle: BinaryIO) -> None:
        self.handle = handle
        self.bytes = 0
        self.crc32c = 0

    def write(self, data: bytes) -> int:
        """Write ``data``, counting it.

        Args:
            data: the bytes.

        Returns:
            How many bytes were written (all of them).
        """
        self.crc32c = crc32c.crc32c(data, self.crc32c)
        self.bytes += len(data)
        self.handle.write(data)
        return len(data)

    def writelines(self, buffers: Sequence[bytes | bytearray | memoryview]) -> None:
        """Write ``buffers`` one after the other in one call, counting them.

        Args:
            buffers: the byte buffers.
        """
        crc, checksum = self.crc32c, crc32c.crc32c
        for data in buffers:
            crc = checksum(data, crc)
            self.bytes += memoryview(data).nbytes
        self.crc32c = crc
        self.handle.writelines(buffers)

    def flush(self) -> None:
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


def concatenate(sources: Sequence[str], destination: str,
                known: Sequence[tuple[int, int]] | None = None) -> tuple[int, int]:
    """Byte-concatenate files into ``destination``, atomically.

    Sources are left in place. On ``gs://`` (sources and destination in one bucket) the
    objects are composed server-side and the crc32c is the one Cloud Storage reports. On
    local disk, when the sources' sizes and CRC-32Cs are ``known`` (a writer counted them),
    the kernel copies the bytes (``os.copy_file_range``: nothing is read back into Python)
    and the CRC-32C is combined from the sources' (sinks/format/crc_combine.py); a source
    whose size is not the one known fails the join.

    Args:
        sources: the files, in order.
        destination: the file to create.
        known: each source's ``(size, crc32c)``, when its writer counted them.

    Returns:
        The destination's size in bytes and its CRC-32C.
    """
    if sources and is_gcs(destination) and all(is_gcs(s) for s in sources):
        bucket = gcs.split_path(destination)[0]
        if all(gcs.split_path(s)[0] == bucket for s in sources):
            return gcs.compose(sources, destination)
    if (known is not None and len(known) == len(sources) and is_local(destination)
            and all(is_local(s) for s in sources)):
        joined = _copy_local(sources, destination, known)
        if joined is not None:
            return joined
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
        delete([tmp])
        raise
    return out.bytes, out.crc32c


# What os.copy_file_range raises where the kernel or the filesystem cannot copy (another
# device, an old kernel, a filesystem without it): the join then reads and writes the bytes.
_NO_KERNEL_COPY = (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.ETXTBSY)


def _copy_local(sources: Sequence[str], destination: str,
                known: Sequence[tuple[int, int]]) -> tuple[int, int] | None:
    """:func:`concatenate` on local disk by the kernel's copy; None where it cannot copy
    (nothing is left behind then)."""
    if not hasattr(os, "copy_file_range"):
        return None
    os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
    tmp = destination + f".tmp-{uuid.uuid4().hex}"
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            for source, (size, _) in zip(sources, known):
                src = os.open(source, os.O_RDONLY)
                copied = 0
                try:
                    while step := os.copy_file_range(src, out, _COPY_CHUNK * 64):
                        copied += step
                finally:
                    os.close(src)
                if copied != size:
                    raise OSError(f"staged part {source} has {copied} bytes, its writer "
                                  f"wrote {size}")
        finally:
            os.close(out)
    except BaseException as failed:
        os.unlink(tmp)
        if isinstance(failed, OSError) and failed.errno in _NO_KERNEL_COPY:
            return None
        raise
    rename(tmp, destination)
    return sum(size for size, _ in known), crc32c_of_joined(
        (crc, size) for size, crc in known)


def file_crc32c(path: str) -> tuple[int, int]:
    """(bytes, crc32c) of a stored file: from its metadata on ``gs://``, else read in full.

    Args:
        path: a file on any Beam filesystem.

    Returns:
        Its size in bytes and its CRC-32C.
    """
    if is_gcs(path):
        return gcs.size_and_crc32c(path)
    size, crc = 0, 0
    with open_read(path) as handle:
        for chunk in iter(lambda: handle.read(_COPY_CHUNK), b""):
            crc = crc32c.crc32c(chunk, crc)
            size += len(chunk)
    return size, crc


def delete(paths: Iterable[str]) -> None:
    """Delete the files that exist among ``paths``.

    Args:
        paths: files on any Beam filesystem.
    """
    paths = [p for p in paths if exists(p)]
    if not paths:
        return
    if is_local(paths[0]):  # Beam picks the filesystem by the first path, too
        _delete_local(paths)
        return
    for path in paths:
        _touch(path)
    _filesystems().delete(paths)


def _delete_local(paths: Sequence[str]) -> None:
    """What Beam's LocalFileSystem.delete does: each path is matched as a glob (a folder is
    removed with everything below it), and one BeamIOError names every path that failed."""
    failed: dict[str, Exception] = {}
    for path, listed in [(path, _match_local(path)) for path in paths]:
        if not listed:
            failed[path] = OSError(f"No files found to delete under: {path}")
        for item in listed:
            try:
                if os.path.isdir(item.path):
                    shutil.rmtree(item.path)
                else:
                    os.remove(item.path)
            except OSError as err:
                failed[item.path] = OSError(err)
    if failed:
        raise _beam_io_error("Delete", failed)
