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


class _Where(beam.DoFn):
    """Each element with the pid and parent pid of the process that ran it."""

    def process(self, element):
        yield element, os.getpid(), os.getppid()


@pytest.mark.slow
def test_multi_processing_workers_are_forked_from_one_server_that_ends_with_the_run():
    before = set(descendants(os.getpid()))
    options = PipelineOptions(["--direct_running_mode=multi_processing",
                               "--direct_num_workers=2"])
    runner = runner_for(options)
    assert isinstance(runner, forked_workers.ForkedWorkersRunner)
    with beam.Pipeline(runner=runner, options=options) as p:
        where = (p | beam.Create(range(40)) | beam.Reshuffle() | beam.ParDo(_Where()))
        assert_that(where | beam.Map(lambda row: row[0]), equal_to(list(range(40))))
    assert p.result.state == "DONE"
    assert set(descendants(os.getpid())) <= before  # fork server and workers are gone


@pytest.mark.slow
def test_the_workers_parent_is_the_fork_server_not_a_shell(tmp_path):
    """The workers write where they run; their parent is one process (the server), not
    the launcher and not ``/bin/sh``, which Beam's own subprocess workers have."""
    options = PipelineOptions(["--direct_running_mode=multi_processing",
                               "--direct_num_workers=2"])
    marks = tmp_path / "marks"
    marks.mkdir()

    def mark(element):
        (marks / f"{os.getpid()}").write_text(str(os.getppid()))
        return element

    with beam.Pipeline(runner=runner_for(options), options=options) as p:
        _ = p | beam.Create(range(200)) | beam.Reshuffle() | beam.Map(mark)
    parents = {path.read_text() for path in marks.iterdir()}
    workers = {int(path.name) for path in marks.iterdir()}
    assert os.getpid() not in workers  # the stages ran in worker processes
    assert len(parents) == 1 and int(parents.pop()) != os.getpid()


def test_starting_the_fork_server_keeps_the_blocked_signals_blocked():
    """multiprocessing's resource tracker unblocks SIGINT and SIGTERM in the thread that
    starts it; the command blocks them in every thread (pipelines/signals.py), and a thread
    that no longer blocks them would swallow a Ctrl-C whose action is "ignore"."""
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
