"""Every line the command prints passes one filter: secrets redacted, unprintable characters
escaped (sinks/format/redact.py ``safe_text``).

Paths reach our output from many places -- error messages, argparse's usage errors, warnings,
log records of Beam and of this package, progress lines, the summary, a bug's traceback,
``init``'s config text, ``verify``'s table -- and a signed URL or ``user:password@`` in one of
them must not reach a scheduler's log, nor a file name's raw bytes a terminal. Rather than
trusting each of them to clean its own text, the command replaces ``sys.stdout`` and
``sys.stderr`` with :class:`SafeLines` while it runs, so nothing written through Python's
streams can bypass the filter. Text is passed on a line at a time (a secret split across two
``write`` calls is still seen whole); ``flush`` passes on a partial line too.

What writes to the file descriptors directly (a worker process's own stderr, a native crash
report) is outside Python's streams and outside this filter.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
from collections.abc import Iterator
from typing import TextIO

from beam_tfrecords.sinks.format.redact import safe_text

__all__ = ["SafeLines", "discard_broken_pipes", "output_gone", "safe_streams"]


class SafeLines(io.TextIOBase):
    """A text stream that writes ``safe_text`` of each line to ``stream``."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream
        self._pending = ""
        self._lock = threading.Lock()  # the progress line comes from a thread of its own
        self.broken = False  # a write found the reader gone (EPIPE)

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock, self._noting_a_broken_pipe():
            self._pending += text
            if "\n" in text:
                lines, _, self._pending = self._pending.rpartition("\n")
                self.stream.write(safe_text(lines + "\n"))
        return len(text)

    def flush(self) -> None:
        with self._lock, self._noting_a_broken_pipe():
            if self._pending:
                pending, self._pending = self._pending, ""
                self.stream.write(safe_text(pending))
            self.stream.flush()

    @contextlib.contextmanager
    def _noting_a_broken_pipe(self) -> Iterator[None]:
        try:
            yield
        except BrokenPipeError:
            self.broken = True
            raise

    def close(self) -> None:  # the stream underneath is not ours to close
        if not self.stream.closed:
            self.flush()

    @property
    def closed(self) -> bool:
        return self.stream.closed

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:
        return getattr(self.stream, "errors", None)


@contextlib.contextmanager
def safe_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` are :class:`SafeLines` over themselves while the
    block runs, then restored after a last flush of both (which raises ``BrokenPipeError``
    when a reader has gone)."""
    saved = sys.stdout, sys.stderr
    wrapped = [s if s is None or isinstance(s, SafeLines) else SafeLines(s) for s in saved]
    sys.stdout, sys.stderr = wrapped
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        broken = None
        for stream in wrapped:
            try:
                if stream is not None:
                    stream.flush()
            except BrokenPipeError as err:
                broken = err
        if broken is not None:
            raise broken


def output_gone() -> bool:
    """Whether stdout's or stderr's reader has gone: a ``BrokenPipeError`` from anything
    else (a socket, a worker's pipe) is an error like any other."""
    return any(getattr(s, "broken", False) for s in (sys.stdout, sys.stderr))


def discard_broken_pipes() -> None:
    """Point stdout and stderr at the null device when their reader has gone (``| head``),
    so that the interpreter's last flush of what they still buffer neither fails nor prints
    "Exception ignored"."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
        except (OSError, ValueError, AttributeError):
            continue
