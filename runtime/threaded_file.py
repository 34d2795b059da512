"""A local staged file written by a thread of its own, so writing overlaps with encoding.

Writing a 2 GB image data set spends about a second in ``write`` calls -- copying into the
page cache, which on this kind of virtual machine also means first-touch faults -- during
which the build's thread could have been encoding the next images. :class:`ThreadedFile`
takes the buffers the sink hands it, returns at once, and a thread writes them with
``os.writev`` (many buffers per call, the GIL released throughout) and keeps the CRC-32C and
byte count of everything written (what :class:`storage.CrcCountingWriter` keeps).

The buffers must not change after they are handed over; the sink's are never reused (each
framed batch, header and footer is a new object). At most ``max_pending`` bytes wait at any
time, so memory stays bounded when the disk is slower than the encoder. An error in the
thread (a full disk) is raised as a :class:`StorageWriteError`, naming the file, by the next
call -- at the latest by
:meth:`close`, before the file can be reported as written.
"""

from __future__ import annotations

import collections
import os
import threading
import weakref
from collections.abc import Sequence

import crc32c

from beam_tfrecords.errors import UserError

__all__ = ["StorageWriteError", "ThreadedFile"]

_IOV_MAX = 1024  # buffers per writev call (Linux's IOV_MAX)
# Bytes per writev call. Measured here (2 GB in 110 KB buffers, after a sync): 1.7-3.5 MB per
# call took 0.46-0.48 s, 110 KB per call 0.70 s, 7 MB per call 0.9-1.4 s.
_WRITE_BYTES = 2 << 20
# Bytes waiting per file at most. More than a shuffle window (32 MiB), so that a shuffled
# shard's next window is read while this one is written: with 16 MB, 20,000 shuffled images
# took 12.0 s against 8.5 s (unshuffled builds were as fast either way, 2.8-3.0 s).
_MAX_PENDING = 64 << 20


class StorageWriteError(UserError, OSError):
    """A staged file could not be written (a full disk, a lost mount): the build fails, and
    the message names the file and the system's reason."""


class _Writes:
    """What the caller and the writing thread share; the thread holds only this, so a
    dropped :class:`ThreadedFile` can be noticed (and its thread ended)."""

    def __init__(self, path: str, max_pending: int) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(
            os, "O_CLOEXEC", 0), 0o666)
        self.max_pending = max_pending
        self.queue: collections.deque = collections.deque()
        self.pending = 0
        self.cond = threading.Condition()
        self.error: BaseException | None = None
        self.closing = False
        self.abandoned = False
        self.crc = 0

    def abandon(self) -> None:
        """The file was dropped unclosed: the thread writes what it holds, closes, ends."""
        with self.cond:
            self.closing = self.abandoned = True
            self.cond.notify_all()


class ThreadedFile:
    """Write-only local file; ``bytes`` and ``crc32c`` count what was handed over (exact
    once :meth:`flush` or :meth:`close` returned).

    Args:
        path: the local file to create.
        max_pending: the most bytes handed over but not yet written; ``write`` waits beyond it.
    """

    def __init__(self, path: str, max_pending: int = _MAX_PENDING) -> None:
        self.path = path
        self._w = _Writes(path, max_pending)
        self._closed = False
        self.bytes = 0
        self._thread = threading.Thread(target=_run, args=(self._w,), name="write-part",
                                        daemon=True)
        self._thread.start()
        self._dropped = weakref.finalize(self, _Writes.abandon, self._w)

    @property
    def crc32c(self) -> int:
        """The CRC-32C of everything written; waits for the writes to finish."""
        self.flush()
        return self._w.crc

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Hand ``data`` to the writing thread (waiting while too much is pending).

        Args:
            data: the bytes; not copied, so it must not change until written.

        Returns:
            Its size in bytes.
        """
        size = memoryview(data).nbytes
        self._hand_over([data], size)
        return size

    def writelines(self, buffers: Sequence[bytes | bytearray | memoryview]) -> None:
        """Hand ``buffers`` to the writing thread as one write.

        Args:
            buffers: the bytes, in order; not copied.
        """
        self._hand_over(list(buffers), sum(memoryview(b).nbytes for b in buffers))

    def flush(self) -> None:
        """Wait until everything handed over is written; raise the thread's error if any."""
        w = self._w
        with w.cond:
            while w.pending and w.error is None:
                w.cond.wait()
            self._raise()

    def close(self) -> None:
        if self._closed:
            return
        w = self._w
        try:
            self.flush()
        finally:
            self._dropped.detach()
            with w.cond:
                w.closing = True
                w.cond.notify_all()
            self._thread.join()
            self._closed = True
            os.close(w.fd)
        self._raise()

    def fileno(self) -> int:
        """The file's descriptor.

        Returns:
            The descriptor the thread writes to.
        """
        return self._w.fd

    def _raise(self) -> None:
        error = self._w.error
        if error is not None:
            raise StorageWriteError(f"writing {self.path} failed: {error}") from error

    def _hand_over(self, buffers: list, size: int) -> None:
        w = self._w
        if self._closed or w.closing:
            raise ValueError(f"write to closed file {self.path}")
        if not size:
            return
        with w.cond:
            while w.pending and w.pending + size > w.max_pending and w.error is None:
                w.cond.wait()
            self._raise()
            w.queue.append(buffers)
            w.pending += size
            self.bytes += size
            w.cond.notify_all()


def _run(w: _Writes) -> None:
    """The writing thread: batches of handed-over buffers, written in order."""
    while True:
        with w.cond:
            while not w.queue and not w.closing:
                w.cond.wait()
            if not w.queue:
                break
            batch = []
            while w.queue and len(batch) < _IOV_MAX:
                batch.extend(w.queue.popleft())
        try:
            done = _write(w, batch)
        except BaseException as err:  # noqa: BLE001  (handed to the writing thread)
            with w.cond:
                w.error = err
                w.queue.clear()
                w.pending = 0
                w.cond.notify_all()
            break
        with w.cond:
            w.pending -= done
            w.cond.notify_all()
    if w.abandoned:  # nobody will close it
        os.close(w.fd)


def _write(w: _Writes, buffers: list) -> int:
    """Write ``buffers`` in order (calls of up to _WRITE_BYTES and IOV_MAX buffers, partial
    writes resumed), keeping the file's CRC-32C; returns the bytes written."""
    views = [memoryview(b).cast("B") for b in buffers]
    crc = w.crc
    for view in views:
        crc = crc32c.crc32c(view, crc)
    total = 0
    i = 0
    while i < len(views):
        j, size = i, 0  # this call's buffers: up to _WRITE_BYTES, at least one
        while j < len(views) and j - i < _IOV_MAX and (j == i or size + views[j].nbytes
                                                       <= _WRITE_BYTES):
            size += views[j].nbytes
            j += 1
        chunk = views[i:j]
        written = os.writev(w.fd, chunk)
        total += written
        for view in chunk:  # skip what was written; resume inside a partial buffer
            if written >= view.nbytes:
                written -= view.nbytes
                i += 1
            else:
                views[i] = view[written:]
                break
    w.crc = crc
    return total
