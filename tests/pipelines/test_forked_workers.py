"""Local worker processes forked from a fork server (pipelines/forked_workers.py): a
``multi_processing`` build's workers are forked children of one server that imported Beam
once, they run the stages, the server is gone when the run ends, and starting it never
unblocks the signals the command keeps blocked."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
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
SCRIPT = pathlib.Path(sys.executable).with_name("beam-tfrecords")
WORKER_FLAGS = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]


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


def _probe(folder: pathlib.Path, before: str = "") -> pathlib.Path:
    """A program that runs the console script's ``entry()`` (after ``before``) and prints, when
    the fork server is started, whether Beam was imported by then."""
    probe = folder / "probe.py"
    probe.write_text(
        "import sys\n" + before +
        "from beam_tfrecords.runtime import fork_server\n"
        "started = fork_server.start\n"
        "def start():\n"
        "    print('beam imported:', 'apache_beam' in sys.modules, flush=True)\n"
        "    started()\n"
        "fork_server.start = start\n"
        "from beam_tfrecords.pipelines.cli import entry\n"
        "sys.argv[0] = 'beam-tfrecords'\n"
        "entry()\n")
    return probe


@pytest.mark.slow
def test_the_server_starts_before_the_command_imports_beam_and_goes_with_a_refusal(tmp_path):
    """The console script with worker flags and a config it refuses: the server was started
    before the command imported Beam (Beam's own check of the flags' values imports it), so
    the two imports ran side by side; and the refusal leaves no process behind -- not the
    server, which was still importing (its own session: every process in it is looked
    for)."""
    probe = _probe(tmp_path)
    missing = tmp_path / "missing.yaml"
    for command in ([sys.executable, str(probe)], [str(SCRIPT)]):
        proc = subprocess.Popen([*command, "build", "--config", str(missing), *WORKER_FLAGS],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, text=True)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 1 and "cannot read config" in err, err
        with pytest.raises(ProcessLookupError):
            os.killpg(proc.pid, 0)  # nothing left in its session
        if command[0] == sys.executable:
            assert out.splitlines() == ["beam imported: False"]


def _tiny_input(folder: pathlib.Path, fmt: str) -> str:
    """One small file of ``fmt`` whose column ``a`` holds text (an int64 feature rejects it),
    of 600 rows: several ranges of 1 KiB."""
    folder.mkdir()
    path = folder / f"part.{fmt}"
    if fmt == "csv":
        path.write_text("a,b\n" + "x,2\n" * 600)
    elif fmt == "jsonl":
        path.write_text('{"a": "x", "b": 2}\n' * 600)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"a": ["x"] * 600, "b": [2] * 600}), path, row_group_size=100)
    return str(path)


def _config(tmp_path: pathlib.Path, fmt: str) -> pathlib.Path:
    path = _tiny_input(tmp_path / "in", fmt)
    config = tmp_path / "c.yaml"
    config.write_text(f"name: t\nsource: {{format: {fmt}, path: '{path}', split_bytes: 1KiB}}\n"
                      f"features: {{a: {{type: int64}}}}\n"
                      f"output: {{path: '{tmp_path / 'out'}'}}\n")
    return config


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_the_launch_checks_read_a_header_or_footer_without_beam(tmp_path, fmt):
    """What the command needs to decide on worker processes -- the config, the inputs and
    the fields their header or footer declares -- comes without importing Beam."""
    config = _config(tmp_path, fmt)
    code = ("import sys\n"
            "from beam_tfrecords.pipelines import cli\n"
            "from beam_tfrecords.pipelines.build_launch import launch_workers, prepare\n"
            f"args, rest = cli.build_parser(0).parse_known_args(['--config', r'{config}'])\n"
            "launch = prepare(args, rest)\n"
            "print(launch.config.source.format, launch_workers(launch, rest), "
            "'apache_beam' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [fmt, "[]", "False"]


@pytest.mark.slow
def test_workers_the_build_chooses_itself_start_their_server_before_beam_is_imported(
        tmp_path):
    """No worker flags, input above the format's threshold (lowered here to a byte): the
    command decides on worker processes from what the launch checks found and starts their
    server before it imports Beam. The build's sample check then refuses it (every value is
    text), and it leaves no process behind."""
    config = _config(tmp_path, "csv")
    probe = _probe(tmp_path, "from beam_tfrecords.pipelines import build_launch\n"
                             "build_launch.LOCAL_PARALLEL_BYTES = "
                             "dict.fromkeys(build_launch.LOCAL_PARALLEL_BYTES, 1)\n")
    proc = subprocess.Popen([sys.executable, str(probe), "build", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, text=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "TypeMistake" in err, err  # the sample check refused
    assert out.splitlines()[0] == "beam imported: False", (out, err)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
