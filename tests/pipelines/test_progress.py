"""Progress lines: the pure meter and formats, the writers' totals files, and the whole loop
through the sink on DirectRunner in-process and with two worker processes."""

from __future__ import annotations

import json
import pathlib
import re
import threading

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_tfrecords.pipelines.progress import (
    ProgressMeter,
    ProgressReporter,
    format_bytes,
    format_duration,
)
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks import progress_files as pf
from beam_tfrecords.sinks import tfrecord_sink as sink
from beam_tfrecords.sinks.format.shard_plan import ShardSize

ROOT = pathlib.Path(__file__).resolve().parents[2]
LINE = re.compile(r"^progress: [\d,]+ records, [\d.]+ (B|KB|MB|GB|TB) written, [\d,]+ rejected, "
                  r"[\d,]+ records/s, [\d.]+ (B|KB|MB|GB|TB)/s, \S+( s)? elapsed"
                  r"(; top reason: [\d,]+ x .+)?$")


@pytest.mark.parametrize("n, text", [
    (0, "0 B"), (999, "999 B"), (1000, "1.0 KB"), (150 * 10**6, "150.0 MB"),
    (199_999_999, "200.0 MB"), (2.5e9, "2.5 GB"), (3e15, "3000.0 TB"),
])
def test_format_bytes_uses_the_configs_decimal_units(n, text):
    assert format_bytes(n) == text


@pytest.mark.parametrize("seconds, text", [
    (0, "0.0 s"), (8.24, "8.2 s"), (59.9, "59.9 s"), (60, "0:01:00"), (3723.4, "1:02:03"),
])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


def test_meter_rates_are_over_the_last_interval_and_totals_never_drop():
    meter = ProgressMeter(start=100.0)
    assert meter.update(110.0, 50_000, 5_000_000) == (
        "progress: 50,000 records, 5.0 MB written, 0 rejected, 5,000 records/s, 500.0 KB/s, "
        "10.0 s elapsed")
    # A stall shows as zero, not as a sinking average.
    assert meter.update(120.0, 50_000, 5_000_000).endswith(
        "50,000 records, 5.0 MB written, 0 rejected, 0 records/s, 0 B/s, 20.0 s elapsed")
    # Files gone (staging removed by the commit) or unreadable: the line keeps the last totals.
    assert meter.update(130.0, 0, 0).startswith("progress: 50,000 records, 5.0 MB written")
    assert LINE.match(meter.update(200.0, 120_000, 12_000_000))


def test_the_line_shows_rejects_and_their_top_reason_and_never_drops_them():
    meter = ProgressMeter(start=0.0)
    line = meter.update(10.0, 0, 0, 12_000, [("feature 'age': expected int64, got str …",
                                              11_000), ("other", 1_000)])
    assert line == ("progress: 0 records, 0 B written, 12,000 rejected, 0 records/s, 0 B/s, "
                    "10.0 s elapsed; top reason: 11,000 x feature 'age': expected int64, "
                    "got str …")
    assert LINE.match(line)
    # A dead-letter writer's file unreadable at this poll: the rejects keep their last count.
    assert meter.update(20.0, 100, 1000, 0, []).endswith(
        "12,000 rejected, 10 records/s, 100 B/s, 20.0 s elapsed; top reason: 11,000 x "
        "feature 'age': expected int64, got str …")


def test_dead_letter_writers_totals_add_up_with_their_reasons(tmp_path):
    pf.ProgressFile(str(tmp_path)).write(10, 100)  # a shard writer's
    pf.ProgressFile(str(tmp_path)).write(0, 0, rejected=7, reasons=[("a", 5), ("b", 2)])
    pf.ProgressFile(str(tmp_path)).write(0, 0, rejected=4, reasons=[("b", 4)])
    assert pf.read_totals(str(tmp_path)) == pf.Totals(10, 100, 11, (("b", 6), ("a", 5)))


def test_reporter_emits_one_line_per_poll_and_nothing_after_stop():
    totals = iter([(10, 1000), RuntimeError("file vanished"), (30, 3000)] + [(40, 4000)] * 1000)
    lines: list[str] = []
    three = threading.Event()

    def poll():
        value = next(totals)
        if isinstance(value, Exception):
            raise value  # a failed poll is skipped, never fatal
        return value

    def emit(line):
        lines.append(line)
        if len(lines) == 3:
            three.set()

    reporter = ProgressReporter(poll, emit, interval=0.01)
    with reporter:
        assert three.wait(30)
    emitted = len(lines)
    assert [line.split(",")[0] for line in lines[:3]] == [
        "progress: 10 records", "progress: 30 records", "progress: 40 records"]
    assert all(LINE.match(line) for line in lines)
    reporter.stop()  # twice is fine
    assert len(lines) == emitted


def test_reporter_refuses_a_non_positive_interval():
    with pytest.raises(ValueError, match="positive"):
        ProgressReporter(lambda: (0, 0), print, interval=0)


def test_progress_file_is_rewritten_only_when_due(tmp_path):
    now = [0.0]
    progress = pf.ProgressFile(str(tmp_path), period=2.0, clock=lambda: now[0])
    assert not progress.due()
    now[0] = 2.0
    assert progress.due()
    progress.write(10, 100)
    assert not progress.due()
    assert json.loads(pathlib.Path(progress.path).read_text()) == {"records": 10, "bytes": 100}
    other = pf.ProgressFile(str(tmp_path))
    other.write(5, 50)
    (tmp_path / "x.json.tmp-123").write_text("half")  # an atomic write in flight
    (tmp_path / "broken.json").write_text("{")  # unreadable: skipped
    assert pf.read_totals(str(tmp_path)) == pf.Totals(15, 150)
    assert pf.read_totals(str(tmp_path / "missing")) == pf.Totals()


def batches(n_batches, per_batch, size=300):
    for b in range(n_batches):
        records = [b.to_bytes(2, "big") + k.to_bytes(4, "big") + bytes(size)
                   for k in range(per_batch)]
        yield ("train" if b % 4 else "eval"), SerializedBatch.from_records(records)


def run_sink(tmp_path, args, progress_dir=None):
    """The sink over a few batches, on the runner the command line would run ``args`` on
    (worker processes are forked from its fork server)."""
    from beam_tfrecords.pipelines.runners import runner_for

    options = PipelineOptions(args)
    p = beam.Pipeline(runner=runner_for(options), options=options)
    _ = (
        p
        | beam.Create(list(batches(12, 500)))
        | sink.WriteTFRecordShards(str(tmp_path / "v"), str(tmp_path / "staging"), "ds",
                                   ("train", "eval"), size=ShardSize(200_000, 100_000, 400_000),
                                   progress_dir=progress_dir)
    )
    p.run().wait_until_finish()
    shards = [f for f in (tmp_path / "v").rglob("*.tfrecord")]
    return sum(f.stat().st_size for f in shards)


@pytest.mark.slow
def test_sink_totals_add_up_to_what_it_wrote_in_process(tmp_path):
    written = run_sink(tmp_path, [], progress_dir=str(tmp_path / "progress"))
    assert pf.read_totals(str(tmp_path / "progress"))[:2] == (12 * 500, written)


@pytest.mark.slow
def test_sink_totals_from_two_worker_processes_via_the_pipeline_option(tmp_path):
    progress = tmp_path / "progress"
    written = run_sink(tmp_path, ["--direct_running_mode=multi_processing",
                                  "--direct_num_workers=2",
                                  f"--tfrecords_progress_dir={progress}"])
    assert pf.read_totals(str(progress))[:2] == (12 * 500, written)


@pytest.mark.slow
def test_no_progress_files_unless_asked(tmp_path):
    run_sink(tmp_path, [])
    assert not list(tmp_path.rglob("*.json"))


@pytest.mark.slow
def test_build_command_prints_progress_lines_on_stderr(tmp_path, capsys):
    from beam_tfrecords.pipelines import cli

    out = tmp_path / "out"
    assert cli.main(["build", "--config", str(ROOT / "configs" / "demo.yaml"), "--output",
                     str(out), "--version", "v", "--progress-interval", "0.05"]) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("progress:")]
    assert lines and all(LINE.match(line) for line in lines)
    assert "total  10,000   10,000" in captured.out
    assert not (out / "v" / ".staging").exists()  # the progress files went with staging


def test_negative_progress_interval_is_refused(tmp_path):
    from beam_tfrecords.pipelines import build, cli

    with pytest.raises(build.BuildError, match="progress-interval"):
        cli.run_build(["--config", str(ROOT / "configs" / "demo.yaml"), "--output",
                           str(tmp_path), "--progress-interval", "-1"])


def test_the_last_line_shows_the_final_totals_when_the_build_ends_between_polls():
    """Rejects reach the totals after the records they came with: a build that ends between
    two polls gets one more line, at stop, with what it finally counted -- and a reporter that
    never showed a line stays quiet."""
    state = {"totals": (100, 5000, 0)}
    lines: list[str] = []
    shown = threading.Event()

    def emit(line):
        lines.append(line)
        shown.set()

    reporter = ProgressReporter(lambda: state["totals"], emit, interval=0.01)
    with reporter:
        assert shown.wait(30)
        reporter._stop.set()  # no more polls; then the build's last counts arrive
        reporter._thread.join()
        reporter._thread = threading.Thread(target=lambda: None)
        reporter._thread.start()
        state["totals"] = (100, 5000, 7)
    assert lines[-1].split(", ")[2] == "7 rejected" and len(lines) >= 2
    quiet: list[str] = []
    with ProgressReporter(lambda: (1, 1, 0), quiet.append, interval=3600):
        pass
    assert quiet == []
