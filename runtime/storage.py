"""File access for every Beam filesystem (local, ``gs://``, ...) in one place.

Everything goes through ``apache_beam.io.filesystems.FileSystems`` so the sink works wherever
Beam does. Compression is always ``UNCOMPRESSED`` at this layer: FileSystems would otherwise
guess from a ``.gz`` suffix and compress a second time; the TFRecord writer compresses itself.

Cloud Storage (``gs://``) gets a few things FileSystems cannot do well, through
``google-cloud-storage``:

- ``concatenate`` joins objects server-side with the compose API (no bytes through the
  worker) and returns the crc32c Cloud Storage computed for the result;
- ``file_crc32c`` reads an object's size and crc32c from its metadata;
- ``exists``, ``list_files`` and ``delete_tree`` treat a name prefix as a directory, as on
  local disk (Cloud Storage has no directories, and FileSystems only knows objects);
- ``write_atomic`` uploads in one retried request (an object appears only once complete).

The client is built lazily, once per process (never at import, never pickled). When
``STORAGE_EMULATOR_HOST`` is set, both our client and Beam's run anonymously against that
emulator; otherwise our client uses the application default credentials.
"""

from __future__ import annotations

import base64
import contextlib
import io
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, BinaryIO

import crc32c
from apache_beam.io.filesystem import BeamIOError, CompressionTypes, FileMetadata
from apache_beam.io.filesystems import FileSystems

from beam_tfrecords.errors import UserError
from beam_tfrecords.runtime import threaded_file
from beam_tfrecords.sinks.format.file_identity import (
    MISSING,
    FileIdentity,
    kind_of_mode,
    not_a_file,
)
from beam_tfrecords.sinks.format.redact import (
    install_log_redaction,
    redact_streams_if_asked,
    redact_text,
)

__all__ = [
    "CrcCountingWriter",
    "NoFilesystem",
    "NoMatch",
    "StorageUnavailable",
    "concatenate",
    "delete",
    "delete_tree",
    "exists",
    "file_crc32c",
    "gcs_client",
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
    "rename",
    "retry_timeout",
    "write_atomic",
]

_LOG = logging.getLogger(__name__)
install_log_redaction()  # every process that touches storage: launcher and workers
redact_streams_if_asked()  # a worker the command started prints through the same filter
_COPY_CHUNK = 8 * 1024 * 1024
_RAW = CompressionTypes.UNCOMPRESSED
_GCS = "gs://"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
COMPOSE_LIMIT = 32  # source objects per compose request, fixed by Cloud Storage
_DELETE_BATCH = 100  # objects per batch request


class StorageUnavailable(UserError, OSError):
    """Cloud Storage kept failing a request until the retries ran out (network, credentials,
    an outage): one line naming the request and its last error."""


class NoMatch(UserError, FileNotFoundError):
    """A path or glob given to read from that names nothing there."""


def join(base: str, *parts: str) -> str:
    if parts and not is_local(base) and not is_gcs(base):
        _served(base)
    return FileSystems.join(base, *parts) if parts else base


def is_local(path: str) -> bool:
    return "://" not in path


def is_gcs(path: str) -> bool:
    return path.startswith(_GCS)


# --- Cloud Storage plumbing -----------------------------------------------------------------

_clients: dict[tuple[int, str], Any] = {}
_clients_lock = threading.Lock()


def _split_gcs(path: str) -> tuple[str, str]:
    """``gs://bucket/name`` -> ``(bucket, name)``; the name may be empty."""
    bucket, _, name = path[len(_GCS):].partition("/")
    if not bucket:
        raise ValueError(f"{path!r} names no bucket")
    return bucket, name


def _gcs_path(bucket: str, name: str) -> str:
    return f"{_GCS}{bucket}/{name}"


RETRY_TIMEOUT_ENV = "BEAM_TFRECORDS_GCS_RETRY_TIMEOUT"  # seconds, default 120
RETRY_INITIAL_ENV = "BEAM_TFRECORDS_GCS_RETRY_INITIAL"  # first backoff, seconds, default 1
RETRY_MAXIMUM_ENV = "BEAM_TFRECORDS_GCS_RETRY_MAXIMUM"  # longest backoff, seconds, default 60


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r}: expected a number of seconds") from None
    if not value > 0:
        raise ValueError(f"{name}={raw!r}: expected a positive number of seconds")
    return value


def retry_timeout() -> float:
    """How long one request of ours is retried before the build gives up (seconds)."""
    return _env_seconds(RETRY_TIMEOUT_ENV, 120.0)


def _retry():
    """The retry policy for every request we send ourselves.

    google-cloud-storage's default policy (exponential backoff on 408/429/5xx and dropped or
    timed-out connections). It is passed explicitly because the library applies it to
    compose, copy and uploads only when a generation precondition is given. Every request we
    retry is safe to repeat: compose reads immutable staged parts, uploads carry the whole
    content, deletes tolerate a lost 404.

    The overall deadline and the backoff bounds come from the environment
    (``BEAM_TFRECORDS_GCS_RETRY_TIMEOUT``, ``..._INITIAL``, ``..._MAXIMUM``; defaults 120 s,
    1 s, 60 s as in the library), so a scheduler can bound how long a build waits on an outage
    and tests can make persistent errors fail fast. Workers inherit the environment.
    """
    from google.cloud.storage.retry import DEFAULT_RETRY

    return DEFAULT_RETRY.with_timeout(retry_timeout()).with_delay(
        initial=_env_seconds(RETRY_INITIAL_ENV, 1.0),
        maximum=_env_seconds(RETRY_MAXIMUM_ENV, 60.0))


@contextlib.contextmanager
def _gcs_errors(action: str, path: str) -> Iterator[None]:
    """Turn retries that ran out into one clear line naming the request and the last error."""
    from google.api_core.exceptions import RetryError

    try:
        yield
    except RetryError as error:
        cause = error.cause
        last = f"{type(cause).__name__}: {cause}" if cause is not None else str(error)
        last = " ".join(last.split())[:300]
        raise StorageUnavailable(redact_text(
            f"Cloud Storage {action} {path} still failing after {retry_timeout():g} s of "
            f"retries (last error: {last})")) from None


def _emulator_credentials_for_beam() -> None:
    """Against an emulator, stop Beam from searching for credentials it cannot use.

    Beam looks for application default credentials before its first ``gs://`` request in
    every process; without any it retries with backoff for ~22 s and then connects
    anonymously anyway. google-cloud-storage goes anonymous at once when
    ``STORAGE_EMULATOR_HOST`` is set; this makes Beam do the same, by marking its
    credential cache as resolved to "no credentials". Only with the emulator variable set.
    """
    if not os.environ.get(EMULATOR_ENV):
        return
    try:
        from apache_beam.internal.gcp import auth

        cache = auth._Credentials  # pylint: disable=protected-access
        with cache._credentials_lock:
            if not cache._credentials_init:
                cache._credentials = None
                cache._credentials_init = True
    except (ImportError, AttributeError):  # a Beam without this cache: slower, not wrong
        pass


class NoFilesystem(UserError, ValueError):
    """A path whose scheme no Beam filesystem here serves (``https://``, a typo, ``s3://``
    without its extra)."""


def _touch(path: str) -> None:
    """Called before any filesystem work on ``path``."""
    if is_gcs(path):
        _emulator_credentials_for_beam()
    elif not is_local(path):
        _served(path)


def _served(path: str) -> None:
    """Raise :class:`NoFilesystem` unless a Beam filesystem serves ``path``'s scheme."""
    with _other_filesystem(path):
        try:
            FileSystems.get_filesystem(path)
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
    try:
        yield
    except BeamIOError as err:
        details = getattr(err, "exception_details", None)
        inner = next(iter(details.values())) if isinstance(details, dict) and details else err
        scheme = path.split("://", 1)[0]
        raise NoFilesystem(f"{path!r}: the {scheme}:// filesystem failed here "
                           f"({type(inner).__name__}: {inner}); local paths and gs:// work, "
                           "another scheme needs its Beam extra and options") from None


def gcs_client():
    """This process's ``google.cloud.storage.Client``, built on first use.

    One per process and emulator setting: a forked worker builds its own, and a test that
    points ``STORAGE_EMULATOR_HOST`` elsewhere gets a client for that endpoint.
    """
    emulator = os.environ.get(EMULATOR_ENV, "")
    key = (os.getpid(), emulator)
    client = _clients.get(key)
    if client is not None:
        return client
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            from google.cloud import storage as gcs

            if emulator:
                from google.auth.credentials import AnonymousCredentials

                # The library reads STORAGE_EMULATOR_HOST itself for the endpoint.
                client = gcs.Client(credentials=AnonymousCredentials())
            else:
                client = gcs.Client()
            _clients[key] = client
    return client


def _blob_crc32c(blob) -> int:
    """Cloud Storage reports crc32c as base64 of the big-endian 4 bytes."""
    if not blob.crc32c:
        raise OSError(f"{_gcs_path(blob.bucket.name, blob.name)} has no crc32c in its metadata")
    return int.from_bytes(base64.b64decode(blob.crc32c), "big")


def _gcs_list(prefix: str) -> list[str]:
    """Names of every object below a directory-like prefix, sorted."""
    bucket, name = _split_gcs(prefix)
    below = name.rstrip("/") + "/" if name.rstrip("/") else ""
    with _gcs_errors("list", prefix):
        blobs = gcs_client().list_blobs(bucket, prefix=below, retry=_retry())
        return sorted(_gcs_path(bucket, b.name) for b in blobs)


def _gcs_delete(paths: Sequence[str]) -> None:
    """Delete objects in batches; a missing object counts as deleted; failures raise."""
    if not paths:
        return
    from apache_beam.io.gcp.gcsio import GcsIO

    io = GcsIO(storage_client=gcs_client(), pipeline_options={})  # {}: not sys.argv
    failed = []
    for start in range(0, len(paths), _DELETE_BATCH):
        failed += [(p, e) for p, e in io.delete_batch(list(paths[start:start + _DELETE_BATCH]))
                   if e is not None]
    if failed:
        raise OSError(f"could not delete {len(failed)} object(s), e.g. {failed[0][0]} "
                      f"(HTTP {failed[0][1]})")


# --- the interface ----------------------------------------------------------------------------


def open_write(path: str) -> BinaryIO:
    """A new file for writing; local parent directories are created."""
    if is_local(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _touch(path)
    return FileSystems.create(path, compression_type=_RAW)


def open_counted_write(path: str) -> Any:
    """A new file that counts its bytes and CRC-32C (``.bytes``, ``.crc32c``): a local file is
    written by a thread of its own (:class:`threaded_file.ThreadedFile`), so the writes
    overlap with the caller's work; any other is a :class:`CrcCountingWriter`."""
    if is_local(path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        return threaded_file.ThreadedFile(path)
    return CrcCountingWriter(open_write(path))


def open_read(path: str) -> BinaryIO:
    _touch(path)
    with _other_filesystem(path):
        return FileSystems.open(path, compression_type=_RAW)


def read_text(path: str) -> str:
    with open_read(path) as handle:
        return handle.read().decode("utf-8")


def exists(path: str) -> bool:
    """A file, or a directory. On ``gs://`` a directory is a prefix with objects below it."""
    _touch(path)
    if not is_gcs(path):
        with _other_filesystem(path):
            return FileSystems.exists(path)
    bucket, name = _split_gcs(path)
    client = gcs_client()
    with _gcs_errors("exists", path):
        if not name.rstrip("/"):
            return client.bucket(bucket).exists(retry=_retry())
        if not name.endswith("/") and client.bucket(bucket).blob(name).exists(retry=_retry()):
            return True
        below = client.list_blobs(bucket, prefix=name.rstrip("/") + "/", max_results=1,
                                  retry=_retry())
        return any(True for _ in below)


def match(pattern: str) -> list:
    """FileMetadata (path, size_in_bytes, last_updated_in_seconds) of a glob, sorted by path.

    A local glob without a folder (``*.csv``) is matched as ``./*.csv``: Beam's local
    filesystem matches nothing for it."""
    _touch(pattern)
    if "://" not in pattern and not os.path.dirname(pattern):
        pattern = os.path.join(".", pattern)
    top = pattern[:-2]
    if is_local(pattern) and pattern.endswith("/**") and not _GLOB_CHARS.search(top) and (
            os.path.isdir(top)):
        return sorted(_walk_metadata(top), key=lambda m: m.path)
    with _other_filesystem(pattern):
        result = FileSystems.match([pattern])[0]
    return sorted(result.metadata_list, key=lambda m: m.path)


_GLOB_CHARS = re.compile(r"[*?\[]")


def _walk_metadata(top: str) -> list:
    """What Beam's match of ``top + "**"`` lists for a local folder -- every file below it,
    symlinked folders not entered, files that vanish skipped -- with one ``stat`` per file
    where Beam makes two and more Python around them (20,000 images: 0.2 s of a 3 s build)."""
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


def _gcs_identities(paths: Sequence[str]) -> dict[str, FileIdentity]:
    """Size and generation of the objects ``paths`` name, from one listing per bucket (of
    the names' common prefix), not one request per object."""
    by_bucket: dict[str, list[str]] = {}
    for path in paths:
        bucket, name = _split_gcs(path)
        by_bucket.setdefault(bucket, []).append(name)
    found: dict[str, FileIdentity] = {}
    for bucket, names in by_bucket.items():
        wanted = set(names)
        prefix = os.path.commonprefix(names)
        with _gcs_errors("list", _gcs_path(bucket, prefix)):
            for blob in gcs_client().list_blobs(bucket, prefix=prefix, retry=_retry()):
                if blob.name in wanted:
                    path = _gcs_path(bucket, blob.name)
                    found[path] = FileIdentity(path, int(blob.size or 0),
                                               generation=blob.generation)
    return found


def identify(metadata: Sequence[Any]) -> list[FileIdentity]:
    """The identity of each listed file (Beam FileMetadata), in order, for the checks of
    sinks/format/file_identity.py: locally one ``os.stat`` (following a symlink to the file a
    reader would open, so a FIFO or a device is seen without opening it); on ``gs://`` each
    object's generation, from one listing; elsewhere the size the listing reported."""
    metadata = list(metadata)
    remote = _gcs_identities([m.path for m in metadata if is_gcs(m.path)])
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
    """:func:`identify` for paths given as a list rather than matched: a path that cannot be
    looked at stays a plain path (its read reports why)."""
    local: dict[str, FileIdentity] = {}
    for path in paths:
        if is_local(path):
            with contextlib.suppress(OSError):
                local[path] = _local_identity(path, os.stat(path))
    remote = _gcs_identities([p for p in paths if is_gcs(p)])
    return [local.get(p) or remote.get(p) or p for p in paths]


def not_a_regular_file(path: str) -> str | None:
    """Why a local ``path`` must not be opened as input (a FIFO, a device, a socket, a
    directory: :func:`file_identity.not_a_file`), found with ``os.stat``, never by opening
    it; None for a regular file, a path that does not exist (opening it says so) and any
    object store (which holds no such things)."""
    if not is_local(path):
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    return not_a_file(_local_identity(path, info))


def observe(path: str, handle: Any = None) -> FileIdentity | None:
    """The identity of ``path`` now -- of the open ``handle`` where it has a file descriptor
    (the file that was read, even if another has taken its name since) -- or None where the
    filesystem tells nothing to compare."""
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
        bucket, name = _split_gcs(path)
        with _gcs_errors("metadata of", path):
            blob = gcs_client().bucket(bucket).get_blob(name, retry=_retry())
        if blob is None:
            return FileIdentity(path, 0, kind=MISSING)
        return FileIdentity(path, int(blob.size or 0), generation=blob.generation)
    return None


def list_files(prefix: str) -> list[str]:
    """Every file below a directory-like prefix."""
    if is_gcs(prefix):
        return [p for p in _gcs_list(prefix) if not p.endswith("/")]
    if is_local(prefix):  # walked, not globbed: a '?', '*' or '[' in a folder name is literal
        if not os.path.isdir(prefix):
            return [prefix] if os.path.isfile(prefix) else []
        return sorted(os.path.join(folder, name) for folder, _, names in os.walk(prefix)
                      for name in names)
    return [m.path for m in match(join(prefix, "**"))] if exists(prefix) else []


def delete_tree(prefix: str) -> None:
    """Remove a directory-like prefix and everything below it, if present."""
    if is_gcs(prefix):
        # Everything below the prefix (folder placeholders too), and an object of that name.
        paths = _gcs_list(prefix)
        name = _split_gcs(prefix)[1]
        if name and not name.endswith("/"):
            paths.append(prefix)
        _gcs_delete(paths)
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
        FileSystems.delete(files)


def rename(source: str, destination: str) -> None:
    """Move a file. On object stores this is a copy and a delete (FileSystems does both)."""
    if is_local(destination):
        os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
    _touch(source)
    _touch(destination)
    FileSystems.rename([source], [destination])


def write_atomic(path: str, data: bytes) -> None:
    """Readers see the old content or the new, never a partial file.

    Locally: write a unique temporary beside it, then ``os.replace``. On Cloud Storage an
    object becomes visible only when its upload completes, so one upload (retried whole) is
    atomic; other object stores behave alike through FileSystems.
    """
    if is_gcs(path):
        bucket, name = _split_gcs(path)
        blob = gcs_client().bucket(bucket).blob(name)
        with _gcs_errors("upload of", path):
            blob.upload_from_string(data, content_type="application/octet-stream",
                                    retry=_retry())
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

    def writelines(self, buffers: Sequence[bytes | bytearray | memoryview]) -> None:
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


def concatenate(sources: Sequence[str], destination: str) -> tuple[int, int]:
    """Byte-concatenate files into ``destination`` (atomically); returns (bytes, crc32c).

    Sources are left in place. On ``gs://`` (sources and destination in one bucket) the
    objects are composed server-side and the crc32c is the one Cloud Storage reports.
    """
    if sources and is_gcs(destination) and all(is_gcs(s) for s in sources):
        bucket = _split_gcs(destination)[0]
        if all(_split_gcs(s)[0] == bucket for s in sources):
            return _compose(sources, destination)
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


def _compose(sources: Sequence[str], destination: str) -> tuple[int, int]:
    """Compose ``sources`` into ``destination`` with as few requests as possible.

    A compose request takes at most 32 sources, so longer lists are first reduced: runs of
    consecutive sources are composed into temporary objects (``<destination>.tmp-<id>-<n>``)
    until 32 components remain, keeping the order. The last request composes straight into
    the final name: Cloud Storage creates the composed object atomically (a reader sees no
    object, the previous generation, or the whole new one -- never a part), so composing to
    a temporary name and copying it over would add a request without adding safety.
    Temporary objects are deleted whether or not the compose succeeds.
    """
    from google.api_core.exceptions import NotFound

    client = gcs_client()
    bucket_name, final_name = _split_gcs(destination)
    bucket = client.bucket(bucket_name)
    token = uuid.uuid4().hex
    temps: list = []

    def compose(components: list, name: str):
        target = bucket.blob(name)
        target.content_type = "application/octet-stream"
        with _gcs_errors("compose of", _gcs_path(bucket_name, name)):
            target.compose(components, retry=_retry())
        return target

    components = [bucket.blob(_split_gcs(s)[1]) for s in sources]
    try:
        while len(components) > COMPOSE_LIMIT:
            reduced: list = []
            i = 0
            while i < len(components):
                remaining = len(components) - i
                if len(reduced) + remaining <= COMPOSE_LIMIT:
                    reduced.extend(components[i:])
                    break
                # Merge just enough to reach the limit (at most 32 at a time).
                take = min(COMPOSE_LIMIT, len(reduced) + remaining - COMPOSE_LIMIT + 1)
                temp = compose(components[i:i + take], f"{final_name}.tmp-{token}-{len(temps)}")
                temps.append(temp)
                reduced.append(temp)
                i += take
            components = reduced
        result = compose(components, final_name)
    except NotFound as error:  # a missing source; the final object was not created
        raise FileNotFoundError(f"cannot compose {destination}: a source object is missing "
                                f"({error.message})") from error
    finally:
        if temps:
            try:
                _gcs_delete([_gcs_path(bucket_name, t.name) for t in temps])
            except Exception:  # noqa: BLE001 -- leftovers under a .tmp- name are harmless
                _LOG.warning("could not delete temporary compose objects of %s", destination,
                             exc_info=True)
    if result.size is None:
        with _gcs_errors("metadata of", destination):
            result.reload(retry=_retry())
    return int(result.size), _blob_crc32c(result)


def file_crc32c(path: str) -> tuple[int, int]:
    """(bytes, crc32c) of a stored file: from its metadata on ``gs://``, else read in full."""
    if is_gcs(path):
        bucket, name = _split_gcs(path)
        with _gcs_errors("metadata of", path):
            blob = gcs_client().bucket(bucket).get_blob(name, retry=_retry())
        if blob is None:
            raise FileNotFoundError(path)
        return int(blob.size), _blob_crc32c(blob)
    size, crc = 0, 0
    with open_read(path) as handle:
        for chunk in iter(lambda: handle.read(_COPY_CHUNK), b""):
            crc = crc32c.crc32c(chunk, crc)
            size += len(chunk)
    return size, crc


def delete(paths: Iterable[str]) -> None:
    paths = [p for p in paths if exists(p)]
    if not paths:
        return
    for path in paths:
        _touch(path)
    FileSystems.delete(paths)
