"""The staged part file written by its own thread: every byte in order, the CRC-32C and count
of what was handed over, bounded memory, and errors (a full disk: /dev/full) raised by the
next call, naming the file."""

from __future__ import annotations

import os
import threading
import time

import crc32c
import pytest

from beam_tfrecords.runtime import threaded_file
from beam_tfrecords.runtime.threaded_file import StorageWriteError, ThreadedFile


def test_everything_handed_over_is_written_in_order_with_its_crc(tmp_path):
    path = tmp_path / "part"
    pieces = [os.urandom(n) for n in (0, 1, 7, 5000, 200_000, 3 << 20, 12)]
    out = ThreadedFile(str(path))
    out.write(pieces[0])
    out.writelines(pieces[1:4])
    out.write(memoryview(bytearray(pieces[4])))
    out.writelines([pieces[5], memoryview(pieces[6])])
    whole = b"".join(pieces)
    assert out.bytes == len(whole)
    out.close()
    out.close()  # a second close is harmless
    assert path.read_bytes() == whole
    assert out.crc32c == crc32c.crc32c(whole)
    with pytest.raises(ValueError, match="closed"):
        out.write(b"x")


def test_many_small_buffers_take_several_writev_calls(tmp_path):
    path = tmp_path / "part"
    pieces = [bytes([i % 256]) * (i % 97 + 1) for i in range(5000)]  # > IOV_MAX buffers
    out = ThreadedFile(str(path))
    out.writelines(pieces)
    out.close()
    assert path.read_bytes() == b"".join(pieces)


def test_partial_writes_are_resumed_inside_a_buffer(tmp_path, monkeypatch):
    real = os.writev

    def short(fd, buffers):  # the kernel may write less than asked: at most 1,000 bytes here
        first = bytes(memoryview(buffers[0]).cast("B"))[:1000]
        return real(fd, [first]) if first else real(fd, buffers)

    monkeypatch.setattr(threaded_file.os, "writev", short)
    path = tmp_path / "part"
    data = [os.urandom(2500), b"", os.urandom(10), os.urandom(4096)]
    out = ThreadedFile(str(path))
    out.writelines(data)
    out.close()
    assert path.read_bytes() == b"".join(data)


def test_memory_waiting_to_be_written_is_bounded(tmp_path, monkeypatch):
    gate = threading.Event()
    real = os.writev

    def slow(fd, buffers):
        gate.wait()
        return real(fd, buffers)

    monkeypatch.setattr(threaded_file.os, "writev", slow)
    out = ThreadedFile(str(tmp_path / "part"), max_pending=1 << 20)
    out.write(bytes(600_000))
    done = threading.Event()

    def second():
        out.write(bytes(600_000))  # over the bound: waits for the first to be written
        done.set()

    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(0.3)
    assert not done.is_set()
    gate.set()
    thread.join(10)
    assert done.is_set()
    out.close()
    assert (tmp_path / "part").stat().st_size == 1_200_000


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_full_disk_is_raised_by_the_next_call_naming_the_file():
    out = ThreadedFile("/dev/full")
    out.write(b"x" * 10_000)  # handed over; the thread's write fails
    with pytest.raises(StorageWriteError, match="writing /dev/full failed: .*No space left"):
        out.flush()
    with pytest.raises(OSError, match="/dev/full"):
        out.write(b"more")
    with pytest.raises(OSError, match="/dev/full"):
        out.close()


def test_a_file_dropped_unclosed_is_finished_and_its_thread_ends(tmp_path):
    """A writer that failed never calls close(): its thread still writes what it was handed,
    closes the file and ends -- no thread or descriptor is left behind."""
    import gc

    def threads():
        return [t for t in threading.enumerate() if t.name == "write-part"]

    def open_on_part() -> list[str]:
        """The descriptors of this process open on the part file (counting all descriptors
        is not deterministic: a collection may close another test's garbage meanwhile)."""
        found = []
        for name in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{name}") == str(tmp_path / "part"):
                    found.append(name)
            except OSError:  # closed between the listing and the readlink
                pass
        return found

    before = len(threads())
    out = ThreadedFile(str(tmp_path / "part"))
    out.writelines([b"a" * 3000, b"b" * 5])
    thread = out._thread
    assert open_on_part(), "the writer holds the part open while it writes"
    del out
    gc.collect()
    thread.join(10)
    assert not thread.is_alive() and len(threads()) == before
    assert (tmp_path / "part").read_bytes() == b"a" * 3000 + b"b" * 5
    assert open_on_part() == []
