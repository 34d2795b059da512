"""The fork server local worker processes are forked from, started before Beam is imported.

A ``--direct_running_mode=multi_processing`` build's workers are forked from one server
process (multiprocessing's ``forkserver``) that imports Beam and our worker-side modules once
(pipelines/forked_workers.py runs them). This module holds the part the command line needs
before it imports anything heavy: whether the flags ask for worker processes, and starting the
server in the background, so that its imports run beside the launcher's own instead of after
them. It imports only the standard library.

Starting multiprocessing's helper processes unblocks SIGINT and SIGTERM in the calling thread;
the command keeps them blocked in every thread (pipelines/signals.py), so every start here
restores the thread's blocked set.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["DIRECT_NAMES", "PRELOAD", "available", "context", "direct_runner", "signal_mask_kept",
           "start", "stop", "worker_processes_asked"]

# What the server imports once, so that each forked worker starts with them loaded: the SDK
# harness, the worker's entry (pipelines/forked_workers.py, which brings Beam's runner
# modules), and the modules our pipelines' stages unpickle -- each reader, the sink and the
# commit's report -- so that a worker imports next to nothing before its first bundle.
PRELOAD = (
    "apache_beam.runners.worker.sdk_worker_main",
    "beam_tfrecords.pipelines.forked_workers",  # the worker's own entry, and Beam's runner
    "beam_tfrecords.transforms.readers.read_csv",
    "beam_tfrecords.transforms.readers.read_jsonl",
    "beam_tfrecords.transforms.readers.read_parquet",
    "beam_tfrecords.transforms.to_examples",
    "beam_tfrecords.transforms.compute_statistics",
    "beam_tfrecords.transforms.version_report",
    "beam_tfrecords.sinks.dataset",
    "beam_tfrecords.sinks.tfrecord_sink",
    "beam_tfrecords.sinks.shuffled_shards",
)
# How Beam accepts the direct runner's name (its runner lookup ignores case).
DIRECT_NAMES = frozenset({"direct", "directrunner", "switchingdirectrunner"})

# Whether this module started the process's fork server (and so may stop it).
_started = False


def available() -> bool:
    """Whether this platform can fork workers from a server (Linux and macOS can).

    Returns:
        True when :mod:`multiprocessing` offers the ``forkserver`` start method.
    """
    return "forkserver" in multiprocessing.get_all_start_methods()


def context() -> Any:
    """The ``forkserver`` multiprocessing context, with :data:`PRELOAD` set.

    Returns:
        A multiprocessing context whose processes are forked from the server.
    """
    found = multiprocessing.get_context("forkserver")
    found.set_forkserver_preload(list(PRELOAD))
    return found


@contextlib.contextmanager
def signal_mask_kept() -> Iterator[None]:
    """Restore this thread's blocked signals afterwards (the module docstring says why)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    kept = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, kept)


def _flag(argv: Sequence[str], name: str) -> str | None:
    """The last value of ``--name`` in ``argv`` (``--name=v`` or ``--name v``), or None."""
    value = None
    for index, arg in enumerate(argv):
        if arg == name and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def direct_runner(beam_args: Sequence[str]) -> bool:
    """Whether the flags name the DirectRunner (or no runner, its default), read as Beam looks
    a runner up -- by its class name, in any case -- without importing Beam.

    Args:
        beam_args: the pipeline options of a build, as given.

    Returns:
        True for the DirectRunner.
    """
    runner = _flag(beam_args, "--runner") or "DirectRunner"
    return runner.rsplit(".", 1)[-1].lower() in DIRECT_NAMES


def worker_processes_asked(beam_args: Sequence[str]) -> int:
    """How many worker processes a DirectRunner build's flags ask for, read from the flags
    alone (no Beam import): ``N`` for ``--direct_running_mode=multi_processing
    --direct_num_workers=N`` with N of 2 or more on the DirectRunner, else 0. Beam's parser
    decides later; this only says whether starting the server early can pay.

    Args:
        beam_args: the pipeline options of a build, as given.

    Returns:
        The number of worker processes, or 0.
    """
    if not direct_runner(beam_args) or (
            _flag(beam_args, "--direct_running_mode") != "multi_processing"):
        return 0
    try:
        workers = int(_flag(beam_args, "--direct_num_workers") or 1)
    except ValueError:
        return 0
    return workers if workers >= 2 else 0


def start() -> None:
    """Start the fork server now, in the background; harmless when it is running already or
    the platform has none. The first worker would otherwise start it on the critical path."""
    global _started
    if not available():
        return
    from multiprocessing import forkserver

    if getattr(forkserver._forkserver, "_forkserver_pid", None) is None:
        context()
        with signal_mask_kept():
            forkserver.ensure_running()
        _started = True


def stop() -> None:
    """Stop the fork server (and multiprocessing's resource tracker it started) if this
    module started it, so that a build called from a long-lived program (a notebook, a
    scheduler's worker) leaves no idle process holding Beam's memory. The servers' ``_stop``
    is what CPython's own tests use (3.10 to 3.13 have it); without it they end with the
    program.

    The server is killed first (SIGKILL: the command keeps SIGTERM blocked and the server
    inherited that). By now it holds nothing of ours -- the run's workers have ended, or a
    refused command forked none -- and asked politely it would first finish what it is
    doing, importing Beam for a refused command, or tear down the heap of its imports at
    the end of a run, while the command waits for it.
    """
    global _started
    if not _started:
        return
    _started = False
    from multiprocessing import forkserver, resource_tracker

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid is not None:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    for server in (forkserver._forkserver, resource_tracker._resource_tracker):
        halt = getattr(server, "_stop", None)
        if halt is not None:
            halt()
