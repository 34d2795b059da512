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

Worker processes the command starts (``--direct_running_mode=multi_processing``) print to
the same stderr -- Beam's worker prints a failed step's traceback there itself -- so the
command also sets ``BEAM_TFRECORDS_REDACT_STREAMS=1`` for its children, and a process that
sees it wraps its own streams the same way when it first imports this package's storage
module (sinks/format/redact.py ``redact_streams_if_asked``). What writes to a file
descriptor directly (a native crash report) is outside Python's streams and this filter.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator

from beam_tfrecords.sinks.format.redact import STREAMS_ENV, SafeLines

__all__ = ["SafeLines", "discard_broken_pipes", "output_gone", "safe_streams"]


@contextlib.contextmanager
def safe_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` are :class:`SafeLines` over themselves while the
    block runs, then restored after a last flush of both (which raises ``BrokenPipeError``
    when a reader has gone)."""
    saved = sys.stdout, sys.stderr
    wrapped = [s if s is None or isinstance(s, SafeLines) else SafeLines(s) for s in saved]
    sys.stdout, sys.stderr = wrapped
    asked = os.environ.get(STREAMS_ENV)
    os.environ[STREAMS_ENV] = "1"  # for the processes the command starts
    try:
        yield
    finally:
        if asked is None:
            os.environ.pop(STREAMS_ENV, None)
        else:
            os.environ[STREAMS_ENV] = asked
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
    else (a socket, a worker's pipe) is an error like any other.

    Returns:
        True once a write to either found a broken pipe.
    """
    return any(getattr(s, "broken", False) for s in (sys.stdout, sys.stderr))


def discard_broken_pipes() -> None:
    """Point stdout and stderr at the null device when their reader has gone (``| head``),
    so that the interpreter's last flush of what they still buffer neither fails nor prints
    "Exception ignored"."""
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
