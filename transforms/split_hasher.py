"""Split keys hashed in a child process while the encoder runs (keyed splits).

A split keyed on unique ids costs one BLAKE2b per record, a fixed cost in Python however it is
called, and Python has no batch BLAKE2b: in the build's own process that added a large share to
a real table's build (bench/README.md). The hash cannot change -- every existing data set keeps
its splits -- so it moves beside the build instead: :class:`KeyHashProcess` sends a batch's key
column (its raw int64 values, or offsets and bytes; :func:`codec.split_keys.hash_request`) to a
small standard-library process (``split_hash_child.py``) before the batch is encoded, and
collects the digests after, by which time the other core has computed them.

The digests are the same either way: the child hashes exactly ``splits.key_bytes`` of each
key. When no other core is free to use (one CPU), when the child cannot start, or when it
dies, the keys are hashed here instead -- slower, never different -- and a broken child is not
restarted for the rest of the worker's life.
"""

from __future__ import annotations

import logging
import os
import pathlib
import subprocess
import sys
import weakref

import pyarrow as pa

from beam_tfrecords.transforms.codec import splits as split_rules
from beam_tfrecords.transforms.codec.split_keys import hash_request, key_bytes_column

__all__ = ["KeyHashProcess"]

_LOG = logging.getLogger(__name__)
_CHILD = pathlib.Path(__file__).with_name("split_hash_child.py")
# Fewer keys than this are hashed here: the round trip would cost more than it saves.
MIN_KEYS = 4096
_PIPE_BYTES = 1 << 20  # the pipes' buffer (Linux): a 50k-key request in a few writes
# The share of a float key column the child hashes; the rest is hashed here once the batch is
# encoded. A float's key bytes are its shortest repr, which costs the child as much as the
# BLAKE2b (1.2 us a key against 0.6 for an integer), more than encoding the batch takes here:
# alone the child kept the build waiting (the tutorial's 5M rows, split on a float: 5 s of
# waiting), shared the two finish together.
FLOAT_SHARE = 0.6


def _stop(proc: subprocess.Popen) -> None:
    for stream in (proc.stdin, proc.stdout):
        try:
            stream.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _widen(fd: int) -> None:
    """A larger pipe buffer where Linux allows it (fewer wake-ups per request); the default
    pipe works too."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass


class KeyHashProcess:
    """One outstanding request at a time: :meth:`submit` a key column, :meth:`collect` its
    digests (``digest_size`` bytes per key, in order; of a float column the child hashes the
    first :data:`FLOAT_SHARE` and this process the rest). Not thread-safe; one per DoFn."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._broken = (os.cpu_count() or 1) < 2
        self._pending: pa.Array | None = None
        self._sent = False
        self._beside = 0  # how many of the pending keys went to the child
        self._finalizer = None
        self.hashed_beside = 0  # keys whose digests came from the child, so far

    def submit(self, keys: pa.Array) -> None:
        """Start hashing ``keys`` (a key column without nulls) in the child, if worth it.

        A request never collected (its batch failed between the two calls) is collected and
        dropped first, so the child's answers stay in step with the requests.

        Args:
            keys: the batch's key column, without nulls.
        """
        if self._pending is not None:
            self.collect()
        self._pending = keys
        self._sent = False
        if self._broken or len(keys) < MIN_KEYS:
            return
        self._beside = (int(len(keys) * FLOAT_SHARE) if pa.types.is_floating(keys.type)
                        else len(keys))
        try:
            header, buffers = hash_request(keys.slice(0, self._beside))
            proc = self._process()
            proc.stdin.write(header)
            for buf in buffers:
                proc.stdin.write(memoryview(buf).cast("B"))
            proc.stdin.flush()
            self._sent = True
        except (OSError, ValueError) as err:
            self._give_up(err)

    def collect(self) -> bytes:
        """The digests of the submitted keys, joined, from the child or computed here.

        Returns:
            ``HASH_DIGEST_SIZE`` bytes per key.

        Raises:
            RuntimeError: nothing was submitted.
        """
        keys, self._pending = self._pending, None
        if keys is None:
            raise RuntimeError("nothing submitted")
        if self._sent:
            self._sent = False
            beside = self._beside
            rest = keys.slice(beside)  # hashed here while the child answers
            here = split_rules.digests(key_bytes_column(rest).to_pylist()) if len(rest) else b""
            size = beside * split_rules.HASH_DIGEST_SIZE
            try:
                got = self._proc.stdout.read(size)
                if len(got) == size:
                    self.hashed_beside += beside
                    return got + here
                raise OSError(f"the split-key hashing process answered {len(got)} of "
                              f"{size} bytes (exit status {self._proc.poll()})")
            except (OSError, ValueError) as err:
                self._give_up(err)
        return split_rules.digests(key_bytes_column(keys).to_pylist())

    def close(self) -> None:
        self._pending = None
        if self._finalizer is not None:
            self._finalizer()
        self._proc = None

    def _process(self) -> subprocess.Popen:
        if self._proc is None:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_CHILD), str(split_rules.HASH_DIGEST_SIZE),
                 split_rules.HASH_PERSON.hex()],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
            self._finalizer = weakref.finalize(self, _stop, self._proc)
            for stream in (self._proc.stdin, self._proc.stdout):
                _widen(stream.fileno())
        return self._proc

    def _give_up(self, err: Exception) -> None:
        _LOG.warning("split keys are hashed in the build's process from now on: the hashing "
                     "process failed (%s); the splits are the same, the build is slower", err)
        self._broken = True
        self._sent = False
        if self._finalizer is not None:
            self._finalizer()
        self._proc = None
