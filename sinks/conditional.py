"""Atomic conditional writes of small objects (the output lease, pointers), local and ``gs://``.

Overlapping builds on one output location decide who may write by compare-and-swap on small
objects: ``create`` succeeds for exactly one of several writers racing on an absent object, and
``replace``/``delete`` succeed only while the object is still at the *generation* the caller
read. A generation is an opaque string naming one stored version of an object; it changes on
every write. Readers see the old content or the new, never a partial object.

Backends, one per filesystem:

- **Local disk.** ``create`` writes a temporary file beside the target, fsyncs it and
  hard-links it to the target name (``link`` fails if the name exists, atomically, on every
  POSIX filesystem); ``replace`` and ``delete`` compare the generation and swap
  (``os.replace``) or unlink while holding an exclusive ``flock`` on the parent directory, so
  two of them cannot interleave; the kernel drops the lock if the process dies. The
  generation is ``<device>-<inode>-<mtime ns>-<size>-<sha256 prefix of the content>``: every
  write makes a new inode, its mtime is set from the nanosecond clock (filesystems stamp
  writes with a millisecond-grained one, and inodes are recycled), and the content hash
  separates writes even on a filesystem that keeps coarse mtimes. What it could not tell
  apart there is byte-identical content on a recycled inode within one tick -- the object
  then holds exactly what the stale reader saw, so its swap is a swap of equal states.
  Local disk means one machine's filesystem: ``flock`` on network filesystems (NFS, SMB)
  is not reliable, and neither then are these guarantees.
- **Cloud Storage.** The service's own generation numbers and preconditions:
  ``create`` uploads with ``ifGenerationMatch=0``, ``replace`` and ``delete`` with
  ``ifGenerationMatch=<generation>``; HTTP 412 means another writer got there first. Each
  request is retried on transient errors with runtime/gcs.py's policy; with a precondition a
  repeat cannot overwrite anyone else's write. One ambiguity is inherent: an upload that
  succeeded but whose answer was lost is retried and then fails its precondition. It is
  reported as ours when the object now holds exactly our bytes at another generation, so
  writers must write distinct content (the lease does: build id, pid, times).
  ``read`` takes the generation from the object's metadata and downloads that generation.
  The ``gcp-storage-emulator`` used by the tests ignores preconditions (and generation
  pinning); tests/sinks/test_conditional.py checks the precondition logic against a fake client
  that enforces them as the service does.
- Anything else raises ``NotImplementedError``: only local disk and ``gs://`` give atomic
  conditional writes here, so only they support output leases.

Only small objects: content is read and hashed whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import uuid
from collections.abc import Iterator

__all__ = ["Generation", "check_supported", "create", "delete", "hold", "read", "replace"]

Generation = str  # opaque: compare for equality, store, pass back; never parse
_READ_ATTEMPTS = 10  # a gs:// object replaced between its metadata and its download


def check_supported(path: str) -> None:
    """Raise NotImplementedError unless conditional writes work at ``path``.

    Args:
        path: a local path or ``gs://`` URL.

    Raises:
        NotImplementedError: the filesystem has no conditional writes.
    """
    _backend(path)


def read(path: str) -> tuple[bytes, Generation] | None:
    """The object's content and generation, or None when it does not exist.

    Args:
        path: the object's path or URL.

    Returns:
        ``(content, generation)``, or None.
    """
    return _backend(path).read(path)


def create(path: str, data: bytes) -> Generation | None:
    """Write ``data`` only if ``path`` does not exist; None when it does.

    The object is complete when it becomes visible. Local parent directories are created.

    Args:
        path: the object's path or URL.
        data: its content.

    Returns:
        The new object's generation, or None when it existed.
    """
    return _backend(path).create(path, bytes(data))


def replace(path: str, data: bytes, generation: Generation) -> Generation | None:
    """Overwrite only while the object is still at ``generation``; None if it changed or
    vanished. Returns the new generation.

    Args:
        path: the object's path or URL.
        data: its new content.
        generation: the generation the caller read.

    Returns:
        The new generation, or None.
    """
    return _backend(path).replace(path, bytes(data), generation)


def delete(path: str, generation: Generation) -> bool:
    """Delete only while the object is still at ``generation``.

    True when no object at that generation remains (deleted now, or already gone -- on
    Cloud Storage a retried delete whose first attempt succeeded looks the same); False when
    the object holds another generation, which is left alone.

    Args:
        path: the object's path or URL.
        generation: the generation the caller read.

    Returns:
        Whether no object at that generation remains.
    """
    return _backend(path).delete(path, generation)


def _backend(path: str):
    if "://" not in path:
        return _LOCAL
    if path.startswith("gs://"):
        return _GCS
    scheme = path.split("://", 1)[0]
    raise NotImplementedError(
        f"{scheme}:// has no atomic conditional writes here: output leases (and overlapping "
        f"builds) are supported on local disk and gs:// only, not at {path}")


# --- local disk ----------------------------------------------------------------------------


def _local_generation(stat: os.stat_result, data: bytes) -> Generation:
    digest = hashlib.sha256(data).hexdigest()[:16]
    return f"{stat.st_dev}-{stat.st_ino}-{stat.st_mtime_ns}-{stat.st_size}-{digest}"


def _stamp(fd: int) -> None:
    """Set the mtime from the nanosecond clock: filesystems stamp writes with a coarse clock
    (milliseconds), and a recycled inode written within one tick would repeat a generation."""
    now = time.time_ns()
    with contextlib.suppress(OSError, NotImplementedError):
        os.utime(fd, ns=(now, now))


def _fsync_dir(folder: str) -> None:
    """Make a new or renamed directory entry durable (best effort where unsupported)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


_held = threading.local()  # folders whose lock this thread holds: name -> depth


@contextlib.contextmanager
def _folder_lock(folder: str) -> Iterator[None]:
    """An exclusive ``flock`` on the folder itself, released on close or process death.

    Re-entrant within a thread (``hold`` keeps it across several steps that each take it);
    other threads and processes wait, since each ``open`` is its own lock owner."""
    import fcntl

    key = os.path.abspath(folder)
    depth = getattr(_held, "folders", None)
    if depth is None:
        depth = _held.folders = {}
    if depth.get(key):
        depth[key] += 1
        try:
            yield
        finally:
            depth[key] -= 1
        return
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        depth[key] = 1
        try:
            yield
        finally:
            del depth[key]
    finally:
        os.close(fd)


@contextlib.contextmanager
def hold(path: str) -> Iterator[None]:
    """Keep out every other ``replace`` and ``delete`` of objects beside ``path`` while the
    block runs, so a check of ``path`` and the steps that depend on it cannot interleave
    with another writer's swap (the lease's fence, sinks/lease.py).

    Local disk: the folder's ``flock``, which those calls take (re-entrant in this thread).
    Cloud Storage has no such lock; there the block runs unguarded and the caller fences by
    generation preconditions instead.

    Args:
        path: an object whose folder's writers are kept out.

    Yields:
        Nothing; the block runs guarded.
    """
    if _backend(path) is _LOCAL:
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        with _folder_lock(folder):
            yield
    else:
        yield


class _LocalBackend:
    @staticmethod
    def read(path: str) -> tuple[bytes, Generation] | None:
        try:
            handle = open(path, "rb")
        except FileNotFoundError:
            return None
        with handle:
            stat = os.fstat(handle.fileno())  # files are never rewritten in place: the
            data = handle.read()              # inode read is the version named
        return data, _local_generation(stat, data)

    @staticmethod
    def _temporary(path: str, data: bytes) -> tuple[str, int]:
        """A fully written, fsynced temporary file beside ``path``; (name, open fd)."""
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            _stamp(fd)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(tmp)
            raise
        return tmp, fd

    def create(self, path: str, data: bytes) -> Generation | None:
        folder = os.path.dirname(os.path.abspath(path))
        os.makedirs(folder, exist_ok=True)
        tmp, fd = self._temporary(path, data)
        try:
            try:
                os.link(tmp, path)  # atomic, and fails if the name exists
            except FileExistsError:
                return None
            generation = _local_generation(os.fstat(fd), data)
        finally:
            os.close(fd)
            _unlink_quietly(tmp)
        _fsync_dir(folder)
        return generation

    def replace(self, path: str, data: bytes, generation: Generation) -> Generation | None:
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            return None
        tmp, fd = self._temporary(path, data)  # written before the lock: hold it briefly
        try:
            with _folder_lock(folder):
                current = self.read(path)
                if current is None or current[1] != generation:
                    return None
                os.replace(tmp, path)
            new = _local_generation(os.fstat(fd), data)
        finally:
            os.close(fd)
            _unlink_quietly(tmp)  # gone already after a successful replace
        _fsync_dir(folder)
        return new

    def delete(self, path: str, generation: Generation) -> bool:
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            return True
        with _folder_lock(folder):
            current = self.read(path)
            if current is None:
                return True
            if current[1] != generation:
                return False
            os.unlink(path)
        _fsync_dir(folder)
        return True


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


# --- Cloud Storage -------------------------------------------------------------------------


class _GcsBackend:
    """google-cloud-storage through ``gcs.client()`` (looked up on every call, so a
    test can substitute a client), with runtime/gcs.py's retry policy and error messages."""

    @staticmethod
    def _bucket(path: str):
        from beam_tfrecords.runtime import gcs

        bucket, name = gcs.split_path(path)
        if not name or name.endswith("/"):
            raise ValueError(f"{path!r} names no object")
        return gcs.client().bucket(bucket), name

    def read(self, path: str) -> tuple[bytes, Generation] | None:
        from google.api_core.exceptions import NotFound

        from beam_tfrecords.runtime import gcs

        bucket, name = self._bucket(path)
        for _ in range(_READ_ATTEMPTS):
            with gcs.errors_named("metadata of", path):
                meta = bucket.get_blob(name, retry=gcs.retry_policy())
            if meta is None:
                return None
            generation = meta.generation
            try:
                with gcs.errors_named("download of", path):
                    data = bucket.blob(name, generation=generation).download_as_bytes(
                        retry=gcs.retry_policy())
            except NotFound:  # replaced or deleted between the two requests: look again
                continue
            return data, str(generation)
        raise OSError(f"{path} changed {_READ_ATTEMPTS} times while being read")

    def _upload(self, path: str, data: bytes, if_generation_match: int) -> Generation | None:
        from google.api_core.exceptions import PreconditionFailed

        from beam_tfrecords.runtime import gcs

        bucket, name = self._bucket(path)
        blob = bucket.blob(name)
        try:
            with gcs.errors_named("conditional upload of", path):
                blob.upload_from_string(data, content_type="application/octet-stream",
                                        if_generation_match=if_generation_match,
                                        retry=gcs.retry_policy())
        except PreconditionFailed:
            # Someone else's write -- or our own, when a retry repeated a request that had
            # succeeded but lost its answer. Ours if the object holds exactly our bytes.
            current = self.read(path)
            if current is not None and current[0] == data and current[1] != str(
                    if_generation_match):
                return current[1]
            return None
        if blob.generation is None:  # every upload answer carries it; be safe
            current = self.read(path)
            return current[1] if current is not None and current[0] == data else None
        return str(blob.generation)

    def create(self, path: str, data: bytes) -> Generation | None:
        return self._upload(path, data, 0)

    def replace(self, path: str, data: bytes, generation: Generation) -> Generation | None:
        number = _gcs_generation(generation)
        if number is None:
            return None
        return self._upload(path, data, number)

    def delete(self, path: str, generation: Generation) -> bool:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        from beam_tfrecords.runtime import gcs

        number = _gcs_generation(generation)
        if number is None:
            return False
        bucket, name = self._bucket(path)
        try:
            with gcs.errors_named("conditional delete of", path):
                bucket.blob(name).delete(if_generation_match=number, retry=gcs.retry_policy())
        except PreconditionFailed:
            return False
        except NotFound:
            return True
        return True


def _gcs_generation(generation: Generation) -> int | None:
    """A Cloud Storage generation is a positive integer; anything else matches no object."""
    try:
        number = int(generation)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


_LOCAL = _LocalBackend()
_GCS = _GcsBackend()
