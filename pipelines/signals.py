"""What SIGINT (Ctrl-C) and SIGTERM (``kill``, a scheduler's timeout) do to ``build``.

The command stops the whole build and exits 130 (SIGINT) or 143 (SIGTERM) with one line on
stderr saying what was and was not committed -- no traceback, on every local runner mode:

1. every process the build started (``--direct_running_mode=multi_processing`` workers) is
   killed, and the command waits until none is left, so nothing keeps writing after it exits;
2. the output's lease is released, so the next build -- on any machine -- need not wait;
3. the line says whether this build's version was committed (its ``manifest.json`` exists)
   or what it left behind, which the next build removes (``prepare_output``);
4. the process exits at once (``os._exit``): Beam's threads are abandoned, not unwound.

A second signal while that runs exits at once with the same status. Cleanup that takes longer
than ``CLEANUP_SECONDS`` (an unreachable bucket) is abandoned the same way.

How, on Linux: both signals are blocked in every thread and their action set to "ignore"
before Beam starts anything; a watcher thread takes them with ``sigtimedwait``. A blocked
signal is never discarded (it waits for ``sigtimedwait``), while worker processes -- started
through ``/bin/sh``, which clears the blocked set but keeps ignored signals ignored -- inherit
"ignore": a terminal's Ctrl-C, sent to the whole process group, reaches only the command,
which decides for its workers; they never print a ``KeyboardInterrupt`` traceback. (A worker
signalled on its own pid ignores it too; it ends when the command kills it or exits, as its
control connection closes.) Elsewhere (no ``sigtimedwait``) ordinary handlers do the same
work, and workers see the signal too.

The build tells this module what it holds through :func:`watch_lease` and
:func:`watch_version`; both do nothing unless :func:`handle_signals` is active.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from beam_tfrecords.sinks.format.redact import safe_text
from beam_tfrecords.sinks.lease import pid_running

__all__ = ["CLEANUP_SECONDS", "EXIT_STATUS", "handle_signals", "watch_lease", "watch_version"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number
CLEANUP_SECONDS = 20.0
_POLL = 0.02  # seconds between the watcher's looks at its stop flag; a build's end waits one

_active: _Watcher | None = None


def watch_lease(lease: Any) -> None:
    """The build holds ``lease`` (a sinks.lease.Lease): release it when interrupted."""
    if _active is not None:
        _active.lease = lease


def watch_version(layout: Any) -> None:
    """The build writes ``layout``'s version: report on it when interrupted."""
    if _active is not None:
        _active.layout = layout


@contextlib.contextmanager
def handle_signals(prog: str = "beam-tfrecords") -> Iterator[None]:
    """SIGINT and SIGTERM end the process as the module docstring says while the block runs.

    Only in the main thread (Python's rule for signal handlers); elsewhere it does nothing.
    Nothing is changed for the caller afterwards: the blocked set and the actions return to
    what they were.
    """
    global _active
    if threading.current_thread() is not threading.main_thread() or _active is not None:
        yield
        return
    watcher = _Watcher(prog)
    use_wait = hasattr(signal, "sigtimedwait") and sys.platform.startswith("linux")
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS) if use_wait else None
    previous = {sig: signal.signal(sig, signal.SIG_IGN if use_wait else watcher.on_signal)
                for sig in SIGNALS}
    thread = None
    if use_wait:
        thread = threading.Thread(target=watcher.wait_for_signals, name="signals",
                                  daemon=True)
        thread.start()
    _active = watcher
    try:
        yield
    finally:
        _active = None
        watcher.stop.set()
        if thread is not None:
            thread.join()
        while watcher.signalled:  # its cleanup ends the process; nothing else may run here
            time.sleep(1)
        for sig, action in previous.items():
            signal.signal(sig, action)
        if blocked is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


class _Watcher:
    def __init__(self, prog: str) -> None:
        self.prog = prog
        self.lease: Any = None
        self.layout: Any = None
        self.stop = threading.Event()
        self.signalled: int | None = None
        self._stderr = 2

    # -- receiving --

    def wait_for_signals(self) -> None:
        # Once signalled, listen until the cleanup exits: the build may end meanwhile (Beam
        # fails as its workers die) and a second signal must still exit at once.
        while not self.stop.is_set() or self.signalled is not None:
            info = signal.sigtimedwait(SIGNALS, _POLL)
            if info is not None:
                self.on_signal(info.si_signo)

    def on_signal(self, signum: int, frame: object = None) -> None:
        if self.signalled is not None:
            self._exit("a second signal while stopping: exited at once; the next build "
                       "cleans up")
        self.signalled = signum
        self._silence()
        for name, target in (("signals-cleanup", self._clean_up),
                             ("signals-deadline", self._too_long)):
            threading.Thread(target=target, name=name, daemon=True).start()

    def _too_long(self) -> None:
        time.sleep(CLEANUP_SECONDS)
        self._exit(f"stopped without finishing its cleanup in {CLEANUP_SECONDS:g} s; the next "
                   "build cleans up")

    # -- what a signal does --

    def _silence(self) -> None:
        """From now on the one line is all stderr shows: Beam's threads fail as their
        workers die, and our progress line may be due."""
        with contextlib.suppress(OSError):
            self._stderr = os.dup(2)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 2)
            os.close(devnull)
        logging.disable(logging.CRITICAL)
        threading.excepthook = lambda args: None

    def _clean_up(self) -> None:
        try:
            stopped = stop_descendants()
            lease_note = self._release_lease()
            line = self._state() + lease_note
            if stopped:
                line += f"; stopped {stopped} process{'es' if stopped != 1 else ''} it had started"
        except BaseException as error:  # noqa: BLE001 -- still exit with the signal's status
            line = f"stopped; could not tell what was committed ({type(error).__name__}: " \
                   f"{error}); the next build cleans up"
        self._exit(line)

    def _release_lease(self) -> str:
        if self.lease is None:
            return ""
        try:
            self.lease.release()
        except Exception as error:  # noqa: BLE001 -- it expires on its own
            return f"; the lease on the output was not released ({type(error).__name__}), it " \
                   "expires on its own"
        return ""

    def _state(self) -> str:
        from beam_tfrecords.sinks import storage

        layout = self.layout
        if layout is None:
            return "nothing committed, nothing written"
        if storage.exists(layout.manifest):
            latest = storage.read_text(layout.latest).strip() if storage.exists(
                layout.latest) else None
            if latest == layout.version:
                return f"version {layout.version} was committed (LATEST names it)"
            return (f"version {layout.version} was committed, LATEST not yet moved to it; the "
                    "next build completes that")
        if storage.exists(layout.version_dir):
            return (f"nothing committed; version {layout.version} left for the next build to "
                    "clean")
        return "nothing committed"

    def _exit(self, message: str) -> None:
        signum = self.signalled or signal.SIGTERM
        name = signal.Signals(signum).name
        # One line, redacted and escaped as the command's own lines are (it bypasses them).
        line = f"{self.prog}: interrupted ({name}): {safe_text(' '.join(message.split()))}\n"
        with contextlib.suppress(OSError):
            os.write(self._stderr, line.encode("utf-8", "replace"))
        os._exit(EXIT_STATUS.get(signum, 128 + signum))


# --- the build's processes ------------------------------------------------------------------


def stop_descendants(root: int | None = None, wait: float = 5.0) -> int:
    """SIGKILL every process descended from ``root`` (default: this one) and wait up to
    ``wait`` seconds until none runs; returns how many were killed.

    The whole tree is listed before anything is killed: a worker whose ``/bin/sh`` parent
    dies first is adopted by init and would no longer look like ours.
    """
    root = os.getpid() if root is None else root
    killed: set[int] = set()
    for _ in range(3):  # again, for a worker started while the first round was killing
        found = [pid for pid in descendants(root) if pid not in killed and _running(pid)]
        if not found:
            break
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
    deadline = time.monotonic() + wait
    while any(_running(pid) for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(killed)


def descendants(root: int) -> list[int]:
    """Pids of ``root``'s children, their children, and so on."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _process_table():
        children.setdefault(ppid, []).append(pid)
    found, pending = [], [root]
    while pending:
        for child in children.get(pending.pop(), ()):
            found.append(child)
            pending.append(child)
    return found


def _process_table() -> list[tuple[int, int]]:
    """(pid, parent pid) of every process we can see."""
    if os.path.isdir("/proc/self"):
        table = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                stat = _stat(int(name))
                if stat is not None:
                    table.append((int(name), int(stat[1])))
        return table
    listing = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid="], capture_output=True,
                             text=True, timeout=10, check=False).stdout
    return [(int(pid), int(ppid)) for pid, ppid in
            (line.split() for line in listing.splitlines() if len(line.split()) == 2)]


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, ...)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].decode().split()
    except (OSError, IndexError):
        return None


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie does not): the lease's own test."""
    return pid_running(pid)
