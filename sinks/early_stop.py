"""Stopping a doomed build within seconds instead of after a full pass.

A wrong type or shape in a config rejects every record, and the threshold only said so at the
commit, after reading everything (200k Parquet rows: 106 s). Now each worker process keeps
running counts of the records built and rejected as they leave the encoder and the reader --
the dead-letter writers count the rejected rows, a small step counts ToExamples'
``("built", n)`` -- and, once it has seen ``errors.abort_window`` records, stops the build as
soon as :func:`should_stop` says the threshold cannot be met:

- ``errors.max_bad_fraction`` 0: one rejected record already fails the build, so any will do;
- above 0: at least half of the process's records so far were rejected (and more than the
  fraction). So high a share is a config mistake, not a few bad rows. It is a guess about the
  rest of the input: bad records that come in runs longer than a window (one bad file among
  many good ones) can stop a build that would have passed; ``abort_window: 0`` turns the
  check off.

Readers and ToExamples hand a chunk's good records on before its rejects, so the share seen
while rows arrive is never above the truth. The counts are per process (one :class:`Watch` per
build, shared by the threads of the process), so the steps must run in the same stage as the
encoder -- no Flatten in between, which Beam's local runner would materialize.

Stopping, the process closes the dead-letter files of the stopping thread (every row handed so
far stays), leaves a *note* under ``<staging>/early_stop/`` with its counts and why, and raises
:class:`StoppedEarly`; its other threads stop at their next element, and other processes look
for notes every :data:`LOOK_SECONDS`, so no worker reads on. The launcher, finding notes after
the pipeline failed, fails the build as a threshold failure does
(:func:`sinks.commit.fail_stopped_early`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from beam_tfrecords.errors import UserError
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format.layout import EARLY_STOP

__all__ = ["DEFAULT_WINDOW", "FOLDER", "LOOK_SECONDS", "STOP_SHARE", "RejectWindow",
           "StopPolicy", "StoppedEarly", "Watch", "read_notes", "should_stop", "stop_reason",
           "stopped_reason", "watch", "write_note"]

_LOG = logging.getLogger(__name__)
DEFAULT_WINDOW = 10_000  # records a worker reads before it may stop the build
STOP_SHARE = 0.5  # with max_bad_fraction above 0: the rejected share that stops a build
FOLDER = EARLY_STOP  # under the version's staging folder, removed with it
LOOK_SECONDS = 2.0  # how often a worker looks for another's note


class StoppedEarly(UserError):
    """A worker stopped the build: its records so far cannot meet the threshold. One line."""


@dataclasses.dataclass(frozen=True)
class StopPolicy:
    """What the steps that count need to stop a build: the window (records per worker
    process, at least 1), the threshold, the folder for notes (``<staging>/early_stop``)
    and the build (whose counts a process keeps apart from any earlier build's)."""

    window: int
    max_bad_fraction: float
    directory: str
    build_id: str


def should_stop(seen: int, rejected: int, window: int, max_bad_fraction: float) -> bool:
    """Whether a worker that has seen ``seen`` records, ``rejected`` of them rejected, stops
    the build (the module docstring says why).

    Args:
        seen: records the worker read.
        rejected: how many of them were rejected.
        window: records a worker reads before it judges (``errors.abort_window``; 0: never).
        max_bad_fraction: the build's threshold (``errors.max_bad_fraction``).

    Returns:
        Whether to stop.
    """
    if window < 1 or seen < window or rejected < 1:
        return False
    share = rejected / seen
    return share > max_bad_fraction and (max_bad_fraction == 0 or share >= STOP_SHARE)


def stop_reason(seen: int, rejected: int, window: int, max_bad_fraction: float) -> str:
    """The line that says why, in the words of the commit's threshold failure.

    Args:
        seen: records the worker read.
        rejected: how many of them were rejected.
        window: ``errors.abort_window``.
        max_bad_fraction: ``errors.max_bad_fraction``.

    Returns:
        The reason, on one line.
    """
    why = ("errors.max_bad_fraction=0.0 allows none" if max_bad_fraction == 0 else
           f"at least half, more than errors.max_bad_fraction={max_bad_fraction} can allow")
    return (f"stopped early: {rejected} of the first {seen} records a worker read were "
            f"rejected ({rejected / seen:.4%}): {why} (judged after errors.abort_window="
            f"{window} records per worker; 0 turns this off)")


class RejectWindow:
    """Running counts: records built and rejected. Pure.

    Args:
        window: records seen before judging (``errors.abort_window``).
        max_bad_fraction: the share of rejected records the build allows.
    """

    def __init__(self, window: int, max_bad_fraction: float) -> None:
        self.window = window
        self.max_bad_fraction = max_bad_fraction
        self.built = 0
        self.rejected = 0

    @property
    def seen(self) -> int:
        return self.built + self.rejected

    def add(self, built: int = 0, rejected: int = 0) -> str | None:
        """Count; the reason to stop now, or None.

        Args:
            built: records built since the last call.
            rejected: records rejected since the last call.

        Returns:
            The reason, or None.
        """
        self.built += built
        self.rejected += rejected
        if should_stop(self.seen, self.rejected, self.window, self.max_bad_fraction):
            return stop_reason(self.seen, self.rejected, self.window, self.max_bad_fraction)
        return None


class Watch:
    """One build's counts in one process, shared by the steps and threads that count.

    Steps register a ``close`` function per thread while they hold an open file
    (:meth:`holding`), so that a thread that stops the build closes them all: the exception
    unwinds the whole chain of fused steps of its bundle, which never see another element.

    Args:
        policy: the build's early-stop policy.
        clock: seconds, for when to look for other processes' notes; tests pass a fake one.
    """

    def __init__(self, policy: StopPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._window = RejectWindow(policy.window, policy.max_bad_fraction)
        self._next_look = clock() + LOOK_SECONDS
        self._open: dict[int, dict[int, Callable[[], None]]] = {}
        self.stopped: str | None = None  # the reason, once stopped ("": by another process)
        self._noted = False

    def holding(self, owner: object, close: Callable[[], None] | None) -> None:
        """``owner`` holds an open file in this thread (``close`` closes it), or no longer
        (None).

        Args:
            owner: the step holding the file.
            close: closes it; None when the file was closed.
        """
        with self._lock:
            mine = self._open.setdefault(threading.get_ident(), {})
            if close is None:
                mine.pop(id(owner), None)
            else:
                mine[id(owner)] = close

    def add(self, built: int = 0, rejected: int = 0) -> None:
        """Count, and stop the build (raise :class:`StoppedEarly`) when the counts say so,
        when another thread stopped it, or -- looked for every few seconds -- when another
        process did.

        Args:
            built: records built since the last call.
            rejected: records rejected since the last call.

        Raises:
            StoppedEarly: the build stops.
        """
        with self._lock:
            reason = self._window.add(built, rejected) if self.stopped is None else None
            if reason is not None:
                self.stopped = reason
        if self.stopped is None:
            now = self._clock()
            if now < self._next_look:
                return
            self._next_look = now + LOOK_SECONDS
            if not read_notes(self.policy.directory):
                return
            self.stopped = ""
        self._stop()

    def _stop(self) -> None:
        with self._lock:
            closers = list(self._open.pop(threading.get_ident(), {}).values())
            note, self._noted = not self._noted, True
            seen, rejected = self._window.seen, self._window.rejected
        for close in closers:  # every row handed so far stays, for the launcher
            close()
        if note:
            write_note(self.policy.directory, seen, rejected, self.stopped or "")
        raise StoppedEarly(self.stopped or "stopped early: another worker stopped the build")


_WATCHES: dict[tuple[str, str], Watch] = {}
_WATCHES_LOCK = threading.Lock()


def watch(policy: StopPolicy) -> Watch:
    """This process's :class:`Watch` of the policy's build (made on first use).

    Args:
        policy: the build's early-stop policy.

    Returns:
        The process's watch for that build.
    """
    key = (policy.directory, policy.build_id)
    with _WATCHES_LOCK:
        found = _WATCHES.get(key)
        if found is None:
            found = _WATCHES[key] = Watch(policy)
        return found


def write_note(directory: str, seen: int, rejected: int, reason: str) -> None:
    """Leave a stopping process's counts and reason ("" when another process's note stopped
    it) where the launcher and the other processes find them.

    Args:
        directory: the build's early-stop folder.
        seen: records this process read.
        rejected: how many of them it rejected.
        reason: why it stopped.
    """
    storage.write_atomic(storage.join(directory, uuid.uuid4().hex + ".json"), json.dumps(
        {"seen": seen, "rejected": rejected, "reason": reason}).encode())


def read_notes(directory: str) -> list[dict[str, Any]]:
    """The notes under ``directory``: empty when no worker stopped. A note that cannot be
    read (cut short) still says that one did.

    Args:
        directory: the build's early-stop folder.

    Returns:
        ``{"seen", "rejected", "reason"}`` per note.
    """
    notes = []
    for path in storage.list_files(directory):
        if not path.endswith(".json"):
            continue  # an atomic write in flight
        try:
            doc = json.loads(storage.read_text(path))
            notes.append({"seen": int(doc["seen"]), "rejected": int(doc["rejected"]),
                          "reason": str(doc.get("reason", ""))})
        except Exception as err:  # noqa: BLE001 - a worker stopped; its counts are lost
            _LOG.debug("cannot read early-stop note %s: %s", path, err)
            notes.append({"seen": 0, "rejected": 0, "reason": ""})
    return notes


def stopped_reason(notes: Sequence[Mapping[str, Any]]) -> tuple[str, dict[str, int]]:
    """A failed build's reason and counts from its workers' notes: the first reason given,
    and what the stopped workers had read and rejected.

    Args:
        notes: the workers' notes (:func:`read_notes`).

    Returns:
        The reason, and ``read``, ``written`` and ``rejected`` counts.
    """
    reasons = sorted(n["reason"] for n in notes if n["reason"]) or [
        "stopped early: a worker's records could not meet errors.max_bad_fraction"]
    seen = sum(n["seen"] for n in notes)
    rejected = sum(n["rejected"] for n in notes)
    if len(notes) > 1:
        reasons[0] += (f"; {len(notes)} workers stopped, having read {seen} records and "
                       f"rejected {rejected}")
    return reasons[0], {"read": seen, "written": 0, "rejected": rejected}
