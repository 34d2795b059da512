"""A line naming the stage and the file when native code kills the process.

A crash inside a native library (a segfault in Arrow, say) ends the process before any Python
handler or ``finally`` runs: no error line, no dead letter. :mod:`faulthandler` still writes
each thread's Python stack to stderr, a line per frame with its function's name -- so the work
on one file runs in a frame whose *name* is the stage and the file (:func:`noted`), and the
dump holds a line such as::

    File ".../framework.py", line 268 in [beam-tfrecords: reading /data/part-3.csv]

That costs one small function object per file or chunk, and nothing per record.

:func:`enable` turns faulthandler on for this process and, through ``PYTHONFAULTHANDLER``, for
the Python processes it starts (DirectRunner's ``multi_processing`` workers); the command line
calls it first thing. :func:`enable_here` is for a DoFn's ``setup`` on a remote worker (a
Dataflow or Flink harness does not enable faulthandler itself): this process only, and only
where stderr is a real file.
"""

from __future__ import annotations

import faulthandler
import io
import os
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any

from beam_tfrecords.sinks.format.redact import redact_text

__all__ = ["enable", "enable_here", "frame_name", "noted"]

_NAME_CHARS = 300  # faulthandler cuts a name at 500 characters


def enable_here() -> bool:
    """Turn faulthandler on in this process (all threads, to stderr) unless it is on already;
    False where stderr has no file descriptor (a notebook's), which it needs.

    Returns:
        True when faulthandler is on here now.
    """
    if faulthandler.is_enabled():
        return True
    try:
        faulthandler.enable(file=sys.stderr, all_threads=True)
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return False
    return True


def enable() -> None:
    """faulthandler in this process and in every Python process it starts."""
    enable_here()
    os.environ.setdefault("PYTHONFAULTHANDLER", "1")


def frame_name(stage: str, path: str) -> str:
    """The name of the frame that does ``stage`` to ``path``: ``[beam-tfrecords: reading
    /data/a.csv]`` -- printable ASCII (faulthandler escapes the rest anyway), credentials
    redacted, cut short.

    Args:
        stage: what is done (``"reading"``, ``"encoding records of"``).
        path: the file it is done to.

    Returns:
        The frame's name.
    """
    text = redact_text(f"{stage} {path}")
    text = "".join(c if " " <= c <= "~" else "?" for c in text)
    if len(text) > _NAME_CHARS:
        text = text[:_NAME_CHARS - 3] + "..."
    return f"[beam-tfrecords: {text}]"


def _through(items: Iterable[Any]) -> Iterator[Any]:
    yield from items


def noted(stage: str, path: str, items: Iterable[Any]) -> Iterator[Any]:
    """``items``, iterated inside a frame named :func:`frame_name` (``stage``, ``path``): while
    the work that produces them runs, that frame is on the stack a fault dump prints. (Work
    done by whoever consumes them runs outside it, under its own note.)

    Args:
        stage: what is done (``"reading"``).
        path: the file it is done to.
        items: the work's results, produced lazily.

    Yields:
        ``items``, unchanged.
    """
    code = _through.__code__.replace(co_name=frame_name(stage, path))
    return types.FunctionType(code, _through.__globals__)(items)
