"""Whose signals ``handle_signals`` takes: a program that calls the API with handlers of its own
(a notebook, Airflow) keeps them; Python's defaults are replaced for the block and restored.

What a signal then does to a build is tested through the console script (tests/e2e/test_kill.py);
these run in-process and never deliver one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest
from apache_beam.runners.runner import PipelineResult, PipelineState

from beam_tfrecords.pipelines import signals


def _state():
    return ({sig: signal.getsignal(sig) for sig in signals.SIGNALS},
            signal.pthread_sigmask(signal.SIG_BLOCK, []))


def _with_handlers(handlers):
    previous = {sig: signal.signal(sig, action) for sig, action in handlers.items()}
    return lambda: [signal.signal(sig, action) for sig, action in previous.items()]


def test_a_callers_own_handlers_are_kept():
    def own(signum, frame):
        raise AssertionError("never delivered here")

    restore = _with_handlers({signal.SIGINT: own, signal.SIGTERM: own})
    try:
        before = _state()
        with signals.handle_signals():
            assert _state() == before
            assert signals._active is None
        assert _state() == before
    finally:
        restore()


def test_only_a_signal_at_its_default_is_taken_and_everything_is_restored():
    def own(signum, frame):
        raise AssertionError("never delivered here")

    restore = _with_handlers({signal.SIGINT: own, signal.SIGTERM: signal.SIG_DFL})
    try:
        before = _state()
        with signals.handle_signals():
            actions, blocked = _state()
            assert actions[signal.SIGINT] is own  # the caller's
            assert actions[signal.SIGTERM] not in (signal.SIG_DFL, own)  # ours
            assert signal.SIGTERM in blocked and signal.SIGINT not in blocked
            assert signals._active is not None and signals._active.signums == (signal.SIGTERM,)
        assert _state() == before
        assert signal.set_wakeup_fd(-1) == -1  # no wakeup file descriptor left behind
    finally:
        restore()


def test_nothing_is_taken_outside_the_main_thread():
    seen = []

    def body():
        before = _state()
        with signals.handle_signals():
            seen.append((_state() == before, signals._active))

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [(True, None)]


class _RemoteJob(PipelineResult):
    """A job a runner runs elsewhere, as its PipelineResult shows it: RUNNING until cancelled,
    then CANCELLED after ``stops_after`` more looks at its state (None: never)."""

    def __init__(self, stops_after: int | None) -> None:
        super().__init__(PipelineState.RUNNING)
        self.stops_after, self.cancels = stops_after, 0

    @property
    def state(self):
        if self.cancels and self.stops_after is not None:
            if self.stops_after == 0:
                self._state = PipelineState.CANCELLED
            self.stops_after -= 1
        return self._state

    def cancel(self):
        self.cancels += 1


class _Launched:
    """What a beam.Pipeline holds once its runner submitted the job."""

    def __init__(self, result: PipelineResult) -> None:
        self.result = result


@pytest.mark.slow
def test_a_remote_job_is_cancelled_and_waited_for_before_the_lease_goes():
    watcher = signals._Watcher("beam-tfrecords")
    job = _RemoteJob(stops_after=2)
    watcher.pipeline = _Launched(job)
    assert watcher._cancel_job() == ("; the job it launched was cancelled (now CANCELLED)", True)
    assert job.cancels == 1


@pytest.mark.slow
def test_a_remote_job_that_does_not_stop_keeps_the_lease(monkeypatch):
    monkeypatch.setattr(signals, "CANCEL_SECONDS", 1.0)
    watcher = signals._Watcher("beam-tfrecords")
    watcher.pipeline = _Launched(_RemoteJob(stops_after=None))
    note, stopped = watcher._cancel_job()
    assert not stopped  # _clean_up then leaves the lease to expire instead of releasing it
    assert note == "; the job it launched was asked to cancel and still ran after 1 s"


def test_a_job_in_this_process_or_not_yet_submitted_needs_no_cancel():
    watcher = signals._Watcher("beam-tfrecords")
    assert watcher._cancel_job() == ("", True)  # in-process: watch_job(remote=False)
    watcher.pipeline = object()  # remote, still being submitted: no result yet
    assert watcher._cancel_job() == ("", True)


def test_other_signals_still_reach_the_callers_wakeup_descriptor():
    """A thread that does not block the signals (started before, as OpenBLAS's is) makes the
    watcher read Python's wakeup descriptor; what it reads for other signals -- asyncio's
    SIGCHLD, a caller's SIGUSR1 -- goes on to the descriptor the caller had set."""
    release = threading.Event()
    unblocked = threading.Thread(target=release.wait)  # started with nothing blocked
    unblocked.start()
    read_end, write_end = os.pipe()
    for fd in (read_end, write_end):
        os.set_blocking(fd, False)
    callers = signal.set_wakeup_fd(write_end)
    restore = _with_handlers({signal.SIGUSR1: lambda signum, frame: None})
    try:
        with signals.handle_signals():
            assert signals._active.wakeup is not None  # a real handler, not "ignore"
            os.kill(os.getpid(), signal.SIGUSR1)
            deadline, got = time.monotonic() + 10, b""
            while not got and time.monotonic() < deadline:
                time.sleep(0.02)
                with contextlib.suppress(BlockingIOError):
                    got = os.read(read_end, 16)
        assert got == bytes([signal.SIGUSR1])
        assert signal.set_wakeup_fd(callers) == write_end  # the caller's, restored
    finally:
        restore()
        release.set()
        unblocked.join()
        os.close(read_end)
        os.close(write_end)
