"""A DirectRunner build runs on the in-process FnApiRunner, never on a Prism attempt.

pipelines/runners.py says why: Beam's DirectRunner would first try Prism (a download from
GitHub), so the engine would depend on the network.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability import prism_runner
from apache_beam.runners.portability.fn_api_runner import fn_runner
from beam_tfrecords_tests_helpers import demo_csv_parts

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.runners import runner_for, runs_in_process
from beam_tfrecords.sinks import progress_files

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "configs" / "demo.yaml")
# Where the runner is the point, not the rows: the demo's first rows, in one file.
FEW = 200


def few_demo_rows(folder: pathlib.Path) -> str:
    """A glob of one CSV file holding the demo's first :data:`FEW` rows."""
    folder.mkdir()
    return demo_csv_parts(folder, parts=1, first=FEW)


@pytest.mark.parametrize("args", [
    [], ["--runner=DirectRunner"], ["--runner", "direct"], ["--runner=SwitchingDirectRunner"],
    ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
])
def test_direct_runner_names_get_the_fn_api_runner(args):
    assert isinstance(runner_for(PipelineOptions(args)), fn_runner.FnApiRunner)


@pytest.mark.parametrize("args", [
    ["--runner=DataflowRunner"], ["--runner=PortableRunner"], ["--runner=FlinkRunner"],
    ["--runner=PrismRunner"], ["--streaming"],
])
def test_other_runners_and_streaming_are_left_to_beam(args):
    assert runner_for(PipelineOptions(args)) is None


def test_the_worker_processes_get_the_pipeline_options():
    options = PipelineOptions(["--direct_running_mode=multi_processing",
                               "--tfrecords_progress_dir=/somewhere"])
    runner = runner_for(options)
    encoded = runner._provision_info.provision_info.pipeline_options
    assert encoded["beam:option:tfrecords_progress_dir:v1"] == "/somewhere"


@pytest.fixture
def no_prism(monkeypatch):
    def refuse(*_args, **_kwargs):
        raise AssertionError("a DirectRunner build must not try the Prism runner")

    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", refuse)


def test_a_direct_runner_build_never_tries_prism(tmp_path, no_prism):
    manifest = cli.run_build(["--config", DEMO, "--input", few_demo_rows(tmp_path / "in"),
                              "--output", str(tmp_path / "out"), "--version", "v",
                              "--runner=DirectRunner"])
    assert manifest is not None and manifest["counts"]["written"] == FEW
    assert manifest["runner"] == "DirectRunner"


@pytest.mark.slow
def test_two_worker_processes_see_the_progress_option(tmp_path, no_prism, monkeypatch):
    """The workers only learn the progress directory from the provision info we pass."""
    seen = []
    real = progress_files.read_totals
    monkeypatch.setattr(progress_files, "read_totals",
                        lambda path: seen.append(real(path)) or seen[-1])
    manifest = cli.run_build(["--config", DEMO, "--output", str(tmp_path), "--version", "v",
                              "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
                             progress_interval=0.05)
    assert manifest is not None
    assert json.loads((tmp_path / "v" / "manifest.json").read_text())["counts"]["read"] == 10_000
    # Without the option the workers write no progress files and every poll reads 0.
    assert seen and max(totals.records for totals in seen) > 0


# --- runners that cannot run a build say so, through the installed console script ---

CONSOLE_SCRIPT = pathlib.Path(sys.executable).with_name("beam-tfrecords")
REFUSED = {
    "DaskRunner": "--runner DaskRunner: Beam's DaskRunner translates only Create, ParDo, "
                  "GroupByKey and Flatten: it drops Impulse",
    "apache_beam.runners.dask.dask_runner.DaskRunner": "--runner apache_beam.runners.dask."
                                                       "dask_runner.DaskRunner: Beam's DaskRunner",
    "NoSuchRunner": "--runner NoSuchRunner: Beam knows no runner of that name",
    "nowhere.NoSuchRunner": "--runner nowhere.NoSuchRunner: Beam cannot load it "
                            "(ModuleNotFoundError: No module named 'nowhere')",
}


def _build_command(out: pathlib.Path, runner: str) -> subprocess.Popen:
    return subprocess.Popen([str(CONSOLE_SCRIPT), "build", "--config", DEMO, "--output",
                             str(out), "--runner", runner], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


# Through the console script: one runner known not to work and one Beam does not know -- the
# two ways check_runner refuses, each printed as the command's one line. The dotted forms of
# the same refusals are check_runner's reading of a name, checked in-process below.
THROUGH_THE_COMMAND = ("DaskRunner", "NoSuchRunner")


@pytest.mark.slow
def test_runners_that_cannot_run_a_build_are_refused_in_one_line_before_any_write(tmp_path):
    started = {runner: _build_command(tmp_path / f"out{index}", runner)
               for index, runner in enumerate(THROUGH_THE_COMMAND)}
    for index, (runner, proc) in enumerate(started.items()):
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 1, (runner, stderr)
        assert len(stderr.splitlines()) == 1, stderr  # no traceback
        assert stderr.startswith(f"beam-tfrecords build: UnsupportedRunner: {REFUSED[runner]}")
        assert stdout == ""
        assert not (tmp_path / f"out{index}").exists()  # nothing written to the output


@pytest.mark.parametrize("runner", sorted(REFUSED))
def test_a_runner_is_refused_by_its_class_name_or_its_dotted_path(runner):
    from beam_tfrecords.pipelines.runners import UnsupportedRunner, check_runner

    with pytest.raises(UnsupportedRunner) as refused:
        check_runner(PipelineOptions(["--runner", runner]))
    assert str(refused.value).startswith(REFUSED[runner])
    assert len(str(refused.value).splitlines()) == 1


@pytest.mark.slow
def test_a_runner_we_do_not_test_is_tried_after_one_warning_line(tmp_path, preforked):
    """The console script's entry, forked from the session's server that imported Beam once:
    the warning is a line of the command's own stderr either way."""
    proc = preforked.command(["build", "--config", DEMO, "--output", str(tmp_path / "out"),
                              "--runner", "TestDirectRunner",  # Beam's, runs on Direct
                              "--input", few_demo_rows(tmp_path / "in")], cwd=tmp_path)
    _, stderr = proc.communicate(timeout=180)
    stdout = proc.stdout.read()
    assert proc.returncode == 0, stderr
    warned = [line for line in stderr.splitlines() if "TestDirectRunner" in line]
    assert len(warned) == 1 and warned[0].endswith(
        "--runner TestDirectRunner is not a runner beam-tfrecords is tested on (DirectRunner, "
        "PortableRunner, DataflowRunner, FlinkRunner); trying it"), stderr
    assert stdout.startswith("built demo version ") and f"written {FEW}," in stdout


@pytest.mark.parametrize("args,inside", [
    ([], True), (["--direct_running_mode=multi_processing"], True),
    (["--runner=PortableRunner", "--job_endpoint=embed"], True),
    (["--runner=PortableRunner", "--job_endpoint=localhost:8099"], False),
    (["--runner=DataflowRunner"], False), (["--runner=FlinkRunner"], False),
])
def test_which_runners_run_the_job_in_this_process(args, inside):
    """A job elsewhere outlives the command: a signal must cancel it (pipelines/signals.py)."""
    assert runs_in_process(PipelineOptions(args)) is inside


@pytest.mark.parametrize(("args", "size", "ranges", "expected"), [
    ([], 1 << 30, 16, ["--direct_running_mode=multi_processing", "--direct_num_workers=4"]),
    ([], 1 << 30, 3, ["--direct_running_mode=multi_processing", "--direct_num_workers=3"]),
    ([], 100 << 20, 16, []),  # small: starting processes costs more than they give back
    ([], 1 << 30, 1, []),  # one range: one worker would read it all
    (["--direct_num_workers=1"], 1 << 30, 16, []),  # the user's choice stands
    (["--direct_running_mode", "multi_threading"], 1 << 30, 16, []),
    (["--runner=PortableRunner"], 1 << 30, 16, []),
])
def test_a_large_input_uses_every_core_where_a_threshold_says_so(args, size, ranges, expected):
    from beam_tfrecords.pipelines.build_launch import local_workers

    thresholds = {"csv": 256 << 20}
    assert local_workers(args, size, ranges, cores=4, thresholds=thresholds) == expected
    assert local_workers(args, size, ranges, cores=4, fmt="jsonl", thresholds=thresholds) == []


@pytest.mark.parametrize(("fmt", "small", "large"), [
    ("csv", 100 << 20, 300 << 20),  # 3M rows (87 MB) broke even, 10M (290 MB) gained 1.35x
    ("jsonl", 300 << 20, 900 << 20),  # 252 MB broke even, 840 MB gained 1.47x
    ("parquet", 40 << 20, 110 << 20),  # 33 MB broke even, 109 MB gained 1.25x
])
def test_the_command_line_uses_every_core_only_for_inputs_measured_to_gain(fmt, small,
                                                                            large):
    """The default thresholds (build_launch.LOCAL_PARALLEL_BYTES) sit where bench/one_file.py
    measured worker processes winning on a 2-core machine, not below (docs/performance.md)."""
    from beam_tfrecords.pipelines.build_launch import local_workers

    assert local_workers([], small, 64, cores=2, fmt=fmt) == []
    assert local_workers([], large, 64, cores=2, fmt=fmt) == [
        "--direct_running_mode=multi_processing", "--direct_num_workers=2"]


def test_unmeasured_formats_stay_in_one_process():
    """Avro was not measured; images are one task per file and read in threads."""
    from beam_tfrecords.pipelines.build_launch import local_workers

    for fmt in ("avro", "images"):
        assert local_workers([], 1 << 40, 10_000, cores=16, fmt=fmt) == []


@pytest.mark.parametrize(("sizes", "split", "workers", "expected_ranges"), [
    ([290_000_000], 64 << 20, 2, 6),  # five ranges would give one worker three
    ([290_000_000], 64 << 20, 1, 5),  # in-process: as configured
    ([290_000_000], 64 << 20, 4, 8),
    ([200 << 20], 64 << 20, 2, 4),  # a multiple already: as configured
    ([50 << 20], 64 << 20, 2, 2),  # one range for two workers: each gets half
    ([0], 64 << 20, 2, 1),  # size unknown: read whole
])
def test_worker_processes_get_equal_shares_of_the_ranges(sizes, split, workers,
                                                         expected_ranges):
    from beam_tfrecords.pipelines.runners import balanced_split_bytes
    from beam_tfrecords.transforms.readers.ranges import plan_ranges

    balanced = balanced_split_bytes(sizes, split, workers)
    assert balanced <= split
    ranges = [r for size in sizes if size for r in plan_ranges(size, balanced)] or [None]
    assert len(ranges) == expected_ranges
    if len(ranges) > 1:  # nearly equal
        lengths = [len(r) for r in ranges]
        assert max(lengths) - min(lengths) <= 1


@pytest.mark.parametrize(("args", "expected"), [
    ([], 1), (["--direct_num_workers=4"], 1),  # in-process, whatever the count
    (["--direct_running_mode=multi_processing", "--direct_num_workers=3"], 3),
    (["--direct_running_mode", "multi_threading", "--direct_num_workers", "2"], 1),
    (["--runner=PortableRunner", "--direct_running_mode=multi_processing",
      "--direct_num_workers=2"], 1),
])
def test_worker_processes_read_from_the_direct_runner_flags(args, expected):
    from beam_tfrecords.pipelines.runners import worker_processes

    assert worker_processes(args) == expected
