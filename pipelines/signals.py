"""What SIGINT (Ctrl-C) and SIGTERM (``kill``, a scheduler's timeout) do to ``build``.

The command stops the whole build and exits 130 (SIGINT) or 143 (SIGTERM) with one line on
stderr saying what was and was not committed -- no traceback, on every local runner mode:

1. a job the command launched outside this process (Dataflow, Flink, a remote job service:
   see :func:`watch_job`) is cancelled, and the command waits until the runner says it
   stopped (up to ``CANCEL_SECONDS``); a job that runs inside the process needs no cancel;
2. every process the build started (``--direct_running_mode=multi_processing`` workers, a
   runner's job server) is killed, and the command waits until none is left, so nothing
   keeps writing after it exits;
3. the output's lease is released, so the next build -- on any machine -- need not wait;
   not while a remote job may still run (its cancel unconfirmed): the lease then expires
   on its own;
4. the line says whether this build's version was committed (its ``manifest.json`` exists)
   or what it left behind, which the next build removes (``prepare_output``);
5. the process exits at once (``os._exit``): Beam's threads are abandoned, not unwound.

A second signal while that runs exits at once with the same status, without waiting for a
remote job to stop. Cleanup that takes longer than ``CLEANUP_SECONDS`` (an unreachable
bucket; plus ``CANCEL_SECONDS`` for a remote job) is abandoned the same way.

Which process is ours to decide for: the command's (:func:`claim_signals`, first thing in the
console script, ``python -m`` and the Flex Template entry -- before any import starts a
thread); elsewhere, each signal still at Python's default action. A program that calls
the API with handlers of its own (a notebook, Airflow) keeps them: only a signal still at its
default action is taken, only in the main thread, and everything is restored afterwards.

How, on Linux: the signals are blocked in every thread before Beam starts anything, and a
watcher thread takes them with ``sigtimedwait``. A blocked signal is never discarded (it waits
for ``sigtimedwait``). When every thread of the process blocks them -- always in the command,
which blocks them before its first import -- their action is "ignore": worker processes
inherit it (Beam's, started through ``/bin/sh``, which clears the blocked set but keeps ignored
signals ignored; ours, forked from a fork server that was started with them ignored:
pipelines/forked_workers.py), so a terminal's Ctrl-C, sent to the whole process group, reaches
only the command, which decides for its workers; they never print a ``KeyboardInterrupt``
traceback. (A worker
signalled on its own pid ignores it too; it ends when the command kills it or exits, as its
control connection closes.) When some thread started earlier does not block them (numpy's
OpenBLAS starts one at import), "ignore" would let that thread swallow them, so the action is
a real handler instead and Python's wakeup file descriptor carries the signal from whichever
thread takes it to the watcher. Elsewhere (no ``sigtimedwait``) ordinary handlers do the same
work, and workers see the signal too.

The build tells this module what it holds through :func:`watch_lease`, :func:`watch_version`
and :func:`watch_job`; they do nothing unless :func:`handle_signals` is active.
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
from collections.abc import Iterator, Sequence
from typing import Any

from beam_tfrecords.sinks.format.redact import safe_text
from beam_tfrecords.sinks.lease import pid_running

__all__ = ["CANCEL_SECONDS", "CLEANUP_SECONDS", "EXIT_STATUS", "claim_signals",
           "handle_signals", "unblock_claimed", "watch_job", "watch_lease", "watch_version"]

SIGNALS = (signal.SIGINT, signal.SIGTERM)
EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}  # 128 + the signal's number
CLEANUP_SECONDS = 20.0
CANCEL_SECONDS = 120.0  # waited, on top of CLEANUP_SECONDS, for a remote job to stop
_POLL = 0.02  # seconds between the watcher's looks at its stop flag; a build's end waits one
_USE_WAIT = hasattr(signal, "sigtimedwait") and sys.platform.startswith("linux")

_active: _Watcher | None = None
_claimed = False  # this process is the command: its signals are ours to decide
_mask_before_claim: set[int] | None = None


def claim_signals() -> None:
    """First thing in a process that *is* the command: SIGINT and SIGTERM are ours to decide
    whatever actions it inherited, and blocked in the main thread from now on (on Linux), so
    that every thread an import starts (numpy's OpenBLAS starts one) inherits the block and
    never takes them. :func:`unblock_claimed` undoes the block for a command that does not
    handle them itself."""
    global _claimed, _mask_before_claim
    if threading.current_thread() is not threading.main_thread():
        return
    _claimed = True
    if _USE_WAIT and _mask_before_claim is None:
        _mask_before_claim = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)


def unblock_claimed() -> None:
    """The main thread receives the signals again (Python's default actions: KeyboardInterrupt,
    termination); threads started meanwhile keep them blocked, so they reach the main thread."""
    global _mask_before_claim
    if _mask_before_claim is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, _mask_before_claim)
        _mask_before_claim = None


def watch_lease(lease: Any) -> None:
    """The build holds ``lease`` (a sinks.lease.Lease): release it when interrupted.

    Args:
        lease: the ``sinks.lease.Lease`` the build holds.
    """
    if _active is not None:
        _active.lease = lease


def watch_version(layout: Any) -> None:
    """The build writes ``layout``'s version: report on it when interrupted.

    Args:
        layout: the build's output layout.
    """
    if _active is not None:
        _active.layout = layout


def watch_job(pipeline: Any, remote: bool) -> None:
    """The build runs ``pipeline`` (a beam.Pipeline); ``remote``: its runner runs the job
    outside this process, so exiting does not stop it -- when interrupted, cancel the job
    (``pipeline.result``, set once the runner has submitted it) and wait until it stopped
    before the lease is released.

    Args:
        pipeline: the ``beam.Pipeline`` being run.
        remote: the job runs outside this process.
    """
    if _active is not None:
        _active.pipeline = pipeline if remote else None


def _at_default(signum: int) -> bool:
    """Whether ``signum`` still has the action Python starts with (nobody installed one)."""
    default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
    return signal.getsignal(signum) is default


def every_thread_blocks(signums: Sequence[int]) -> bool:
    """Whether every thread of this process blocks all of ``signums`` (from /proc); False when
    that cannot be told.

    Args:
        signums: signal numbers.

    Returns:
        Whether all threads block them all.
    """
    wanted = 0
    for signum in signums:
        wanted |= 1 << (signum - 1)
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return False
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/status", encoding="ascii") as handle:
                masks = [line.split()[1] for line in handle if line.startswith("SigBlk:")]
        except OSError:  # a thread that ended meanwhile
            continue
        if not masks or int(masks[0], 16) & wanted != wanted:
            return False
    return True


def _carried_by_wakeup_fd(signum: int, frame: object) -> None:
    """The action of a signal another thread may take: the watcher reads it from the wakeup
    file descriptor, which Python's own handler writes in whatever thread ran it."""


@contextlib.contextmanager
def handle_signals(prog: str = "beam-tfrecords") -> Iterator[None]:
    """SIGINT and SIGTERM end the process as the module docstring says while the block runs.

    Only in the main thread (Python's rule for signal handlers), and only for a signal that is
    the command's (:func:`claim_signals`) or still at its default action; elsewhere it does
    nothing. Nothing is changed for the caller afterwards: the blocked set, the actions and
    the wakeup file descriptor return to what they were.

    Args:
        prog: the command's name, in the line printed when interrupted.

    Yields:
        Nothing; the block runs with the handlers in place.
    """
    global _active
    ours = tuple(sig for sig in SIGNALS if _claimed or _at_default(sig))
    if threading.current_thread() is not threading.main_thread() or _active is not None \
            or not ours:
        yield
        return
    watcher = _Watcher(prog, ours)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, ours) if _USE_WAIT else None
    wakeup = previous_wakeup = None
    if not _USE_WAIT:
        action: Any = watcher.on_signal
    elif every_thread_blocks(ours):
        action = signal.SIG_IGN
    else:  # a thread that takes them must not swallow them
        action = _carried_by_wakeup_fd
        wakeup = os.pipe()
        for fd in wakeup:
            os.set_blocking(fd, False)
        previous_wakeup = signal.set_wakeup_fd(wakeup[1], warn_on_full_buffer=False)
        watcher.wakeup, watcher.forward = wakeup[0], previous_wakeup
    previous = {sig: signal.signal(sig, action) for sig in ours}
    thread = None
    if _USE_WAIT:
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
        for sig, previous_action in previous.items():
            signal.signal(sig, previous_action)
        if wakeup is not None:
            signal.set_wakeup_fd(previous_wakeup)
            for fd in wakeup:
                os.close(fd)
        if blocked is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


class _Watcher:
    def __init__(self, prog: str, signums: Sequence[int] = SIGNALS) -> None:
        self.prog = prog
        self.signums = tuple(signums)
        self.lease: Any = None
        self.layout: Any = None
        self.pipeline: Any = None  # a job running elsewhere: beam.Pipeline, its .result
        self.wakeup: int | None = None  # read end of the wakeup file descriptor's pipe
        self.forward = -1  # the caller's wakeup descriptor (asyncio's): other signals go on
        self.stop = threading.Event()
        self.signalled: int | None = None
        self._cancelling = False
        self._stderr = 2

    # -- receiving --

    def wait_for_signals(self) -> None:
        # Once signalled, listen until the cleanup exits: the build may end meanwhile (Beam
        # fails as its workers die) and a second signal must still exit at once.
        while not self.stop.is_set() or self.signalled is not None:
            info = signal.sigtimedwait(self.signums, _POLL)
            # A process stopped (SIGSTOP, Ctrl-Z) and continued inside the wait gets an
            # answer whose si_signo is garbage: it is no signal of ours.
            if info is not None and info.si_signo in self.signums:
                self.on_signal(info.si_signo)
            for signum in self._woken():
                self.on_signal(signum)

    def _woken(self) -> list[int]:
        """Signals another thread took since the last look (the wakeup pipe's bytes)."""
        if self.wakeup is None:
            return []
        try:
            data = os.read(self.wakeup, 64)
        except (BlockingIOError, OSError):
            return []
        others = bytes(byte for byte in data if byte not in self.signums)
        if others and self.forward != -1:
            with contextlib.suppress(OSError):
                os.write(self.forward, others)
        return [byte for byte in data if byte in self.signums]

    def on_signal(self, signum: int, frame: object = None) -> None:
        if self.signalled is not None:
            self._exit("a second signal while stopping: exited at once" + (
                " without waiting for the job it launched to stop; the lease on the output "
                "expires on its own" if self._cancelling else "") + "; the next build cleans up")
        self.signalled = signum
        self._silence()
        deadline = CLEANUP_SECONDS + (CANCEL_SECONDS if self._remote_job() is not None else 0)
        for name, target, args in (("signals-cleanup", self._clean_up, ()),
                                   ("signals-deadline", self._too_long, (deadline,))):
            threading.Thread(target=target, name=name, args=args, daemon=True).start()

    def _too_long(self, seconds: float) -> None:
        time.sleep(seconds)
        self._exit(f"stopped without finishing its cleanup in {seconds:g} s; the next "
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
            job_note, job_stopped = self._cancel_job()
            stopped = stop_descendants()
            if job_stopped:
                lease_note = self._release_lease()
            else:  # the job may still write: the next build must not start yet
                lease_note = ("; the lease on the output expires on its own"
                              if self.lease is not None else "")
            line = self._state() + job_note + lease_note
            if stopped:
                line += f"; stopped {stopped} process{'es' if stopped != 1 else ''} it had started"
        except BaseException as error:  # noqa: BLE001 -- still exit with the signal's status
            line = f"stopped; could not tell what was committed ({type(error).__name__}: " \
                   f"{error}); the next build cleans up"
        self._exit(line)

    def _remote_job(self) -> Any:
        """The result of a job running outside this process (it has one once submitted)."""
        return getattr(self.pipeline, "result", None) if self.pipeline is not None else None

    def _cancel_job(self) -> tuple[str, bool]:
        """Cancel a job running elsewhere and wait until its runner says it stopped: (what the
        line says about it, whether it is known to have stopped)."""
        result = self._remote_job()
        if result is None:
            return "", True
        from apache_beam.runners.runner import PipelineState

        self._cancelling = True
        try:
            state = result.state
            if PipelineState.is_terminal(state):
                return f"; the job it launched had ended ({state})", True
            result.cancel()
            deadline = time.monotonic() + CANCEL_SECONDS
            while not PipelineState.is_terminal(state) and time.monotonic() < deadline:
                time.sleep(0.5)
                state = result.state
        except Exception as error:  # noqa: BLE001 -- an unreachable service: say so, exit
            return (f"; could not cancel the job it launched ({type(error).__name__}: "
                    f"{error}), which may still run"), False
        if not PipelineState.is_terminal(state):
            return (f"; the job it launched was asked to cancel and still ran after "
                    f"{CANCEL_SECONDS:g} s"), False
        return f"; the job it launched was cancelled (now {state})", True

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
        from beam_tfrecords.runtime import storage

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

    Args:
        root: the process whose descendants are killed; None for this one.
        wait: seconds to wait for them to end.

    Returns:
        How many were killed.
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
    """Pids of ``root``'s children, their children, and so on.

    Args:
        root: a process id.

    Returns:
        Their pids.
    """
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
