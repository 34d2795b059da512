"""Whose signals ``handle_signals`` takes: a program that calls the API with handlers of its own
(a notebook, Airflow) keeps them; Python's defaults are replaced for the block and restored.

What a signal then does to a build is tested through the console script (tests/test_kill.py);
these run in-process and never deliver one.
"""

from __future__ import annotations

import signal
import threading

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
