"""Local worker processes forked from a fork server (pipelines/forked_workers.py): a
``multi_processing`` build's workers are forked children of one server that imported Beam
once, they run the stages, the server is gone when the run ends, and starting it never
unblocks the signals the command keeps blocked."""

from __future__ import annotations

import os
import signal
import threading

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecords.pipelines import forked_workers
from beam_tfrecords.pipelines.runners import runner_for
from beam_tfrecords.pipelines.signals import descendants
from beam_tfrecords.runtime import fork_server

pytestmark = pytest.mark.skipif(not fork_server.available(), reason="no forkserver here")


@pytest.fixture(scope="module")
def forked_run(tmp_path_factory):
    """One ``multi_processing`` run with two workers, shared by the tests below (its fork
    server and workers start once): every element through a Reshuffle to a step that notes,
    in a file named by its pid, the parent of the process that ran it.
    ``(runner, pipeline, descendants before the run, {worker pid: parent pid})``."""
    before = set(descendants(os.getpid()))
    options = PipelineOptions(["--direct_running_mode=multi_processing",
                               "--direct_num_workers=2"])
    marks = tmp_path_factory.mktemp("marks")

    def mark(element):
        (marks / f"{os.getpid()}").write_text(str(os.getppid()))
        return element

    runner = runner_for(options)
    with beam.Pipeline(runner=runner, options=options) as p:
        kept = p | beam.Create(range(200)) | beam.Reshuffle() | beam.Map(mark)
        assert_that(kept, equal_to(list(range(200))))
    workers = {int(path.name): int(path.read_text()) for path in marks.iterdir()}
    return runner, p, before, workers


@pytest.mark.slow
def test_multi_processing_workers_are_forked_from_one_server_that_ends_with_the_run(
        forked_run):
    runner, p, before, _ = forked_run
    assert isinstance(runner, forked_workers.ForkedWorkersRunner)
    assert p.result.state == "DONE"  # and every element came through (assert_that)
    assert set(descendants(os.getpid())) <= before  # fork server and workers are gone


@pytest.mark.slow
def test_the_workers_parent_is_the_fork_server_not_a_shell(forked_run):
    """The workers write where they run; their parent is one process (the server), not
    the launcher and not ``/bin/sh``, which Beam's own subprocess workers have."""
    _, _, _, workers = forked_run
    assert workers and os.getpid() not in workers  # the stages ran in worker processes
    parents = set(workers.values())
    assert len(parents) == 1 and parents.pop() != os.getpid()


def test_starting_the_fork_server_keeps_the_blocked_signals_blocked(monkeypatch):
    """multiprocessing's resource tracker unblocks SIGINT and SIGTERM in the thread that
    starts it; the command blocks them in every thread (pipelines/signals.py), and a thread
    that no longer blocks them would swallow a Ctrl-C whose action is "ignore". What the
    server imports has no part in that: it starts here with nothing to preload."""
    monkeypatch.setattr(fork_server, "PRELOAD", ())
    masks = []

    def start():
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT, signal.SIGTERM])
        fork_server.start()
        masks.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        fork_server.stop()

    thread = threading.Thread(target=start)  # its own mask: the test's main thread keeps its
    thread.start()
    thread.join()
    assert {signal.SIGINT, signal.SIGTERM} <= masks[0]


@pytest.mark.parametrize("flags,workers", [
    (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], 2),
    (["--direct_running_mode", "multi_processing", "--direct_num_workers", "4"], 4),
    (["--direct_running_mode=multi_processing"], 0),  # one worker: nothing to start
    (["--direct_running_mode=multi_threading", "--direct_num_workers=2"], 0),
    (["--runner=DataflowRunner", "--direct_running_mode=multi_processing",
      "--direct_num_workers=2"], 0),
    (["--direct_running_mode=multi_processing", "--direct_num_workers=x"], 0),
    ([], 0),
])
def test_the_flags_say_without_beam_whether_to_start_the_server_early(flags, workers):
    assert fork_server.worker_processes_asked(flags) == workers
