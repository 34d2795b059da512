"""Early stop (sinks/early_stop.py): a build whose records cannot meet errors.max_bad_fraction
stops after a window of records, keeps its dead letters so far under .failed/ with a
failure.json naming the top reasons, and a build whose bad records are sparse enough is left
alone. The rule and the order it relies on are tested directly; the rest through the command.

The inputs hold good records first, so the launch-time sample (pipelines/launch_check.py) lets
them through: the mistake is only visible further down, where only the early stop sees it.
"""

from __future__ import annotations

import json
import os
import pathlib

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.signals import descendants
from beam_tfrecords.sinks import early_stop
from beam_tfrecords.sinks.dead_letters import reason_key
from beam_tfrecords.transforms.build_examples import _BuildExamplesFn
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F
from beam_tfrecords.transforms.codec.splits import SplitSpec
from beam_tfrecords.transforms.readers.framework import (
    COUNTS,
    REJECTED,
    RecordChunk,
    Reject,
    read_outputs,
)

# A window of 2,500 records (errors.abort_window; the default, 10,000, is the config's to
# test): what is stopped after a window is the same at any size, and a smaller window is
# fewer records to read and dead letters to write.
WINDOW = 2_500
ROWS = 4 * WINDOW  # four windows: two workers each still read past one window of their own
GOOD_FIRST = 2_000  # more than the launch check's sample, less than a window


# -- the rule ---------------------------------------------------------------------------------

@pytest.mark.parametrize("seen, rejected, window, fraction, stops", [
    (9_999, 9_999, 10_000, 0.0, False),   # the window is not full yet
    (10_000, 1, 10_000, 0.0, True),       # max 0: one rejected record already fails the build
    (10_000, 0, 10_000, 0.0, False),
    (10_000, 10_000, 0, 0.0, False),      # abort_window 0: never
    (10_000, 4_999, 10_000, 0.01, False),  # above the fraction, but not half: may still pass
    (10_000, 5_000, 10_000, 0.01, True),
    (10_000, 9_000, 10_000, 0.95, False),  # half, but within the fraction
    (10_000, 9_600, 10_000, 0.95, True),
    (10_000, 10_000, 10_000, 1.0, False),  # everything may be rejected
])
def test_when_a_worker_stops_the_build(seen, rejected, window, fraction, stops):
    assert early_stop.should_stop(seen, rejected, window, fraction) is stops


def test_the_reason_names_the_counts_the_threshold_and_the_window():
    window = early_stop.RejectWindow(100, 0.0)
    assert window.add(built=60) is None
    assert window.add(rejected=39) is None
    assert window.add(rejected=1) == (
        "stopped early: 40 of the first 100 records a worker read were rejected (40.0000%): "
        "errors.max_bad_fraction=0.0 allows none (judged after errors.abort_window=100 "
        "records per worker; 0 turns this off)")


def test_another_processes_note_stops_this_one_within_a_look(tmp_path):
    now = [0.0]
    policy = early_stop.StopPolicy(10, 0.5, str(tmp_path / "early_stop"), "b" * 32)
    watch = early_stop.Watch(policy, clock=lambda: now[0])
    closed = []
    watch.holding("writer", lambda: closed.append("writer"))
    watch.add(built=5)
    early_stop.write_note(policy.directory, 10_000, 10_000, "stopped early: elsewhere")
    watch.add(built=5)  # not looked for yet
    now[0] = early_stop.LOOK_SECONDS
    with pytest.raises(early_stop.StoppedEarly, match="another worker"):
        watch.add(built=5)
    assert closed == ["writer"]  # this thread's open dead-letter files are closed first
    notes = early_stop.read_notes(policy.directory)
    assert sorted(n["seen"] for n in notes) == [15, 10_000]  # and its own counts noted
    reason, counts = early_stop.stopped_reason(notes)
    assert reason.startswith("stopped early: elsewhere; 2 workers stopped, having read 10015")
    assert counts == {"read": 10_015, "written": 0, "rejected": 10_000}


def test_a_reason_is_counted_without_the_value_it_quotes():
    rows = [{"feature": "age", "value": repr(v), "reason": f"feature 'age': expected int64, got "
             f"str {v!r} (not an integer)"} for v in ("x1", "x2", "a much longer value")]
    assert {reason_key(r) for r in rows} == {
        "feature 'age': expected int64, got str … (not an integer)"}
    shape = {"feature": "v", "value": "5",
             "reason": "feature 'v': expected int64 of shape [2, 5], got int 5"}
    assert reason_key(shape) == "feature 'v': expected int64 of shape [2, 5], got int …"


# -- the order the rule relies on: good records before the rejects read after them ------------

def _tags(outputs):
    return [o.tag if isinstance(o, beam.pvalue.TaggedOutput) else
            f"chunk{list(o.row_numbers) or o.first_row}" for o in outputs]


def test_a_reader_hands_on_good_records_before_the_rejects_read_after_them():
    events = [(1, {"a": 1}), Reject(2, "a", "bad", "x", "x"), (3, {"a": 3})]
    counter = beam.metrics.Metrics.counter("t", "t")
    out = list(read_outputs("f", events, counter, counter))
    assert _tags(out)[:2] == ["chunk[1, 3]", REJECTED]


def test_the_encoder_hands_on_a_chunks_counts_before_its_dead_letters():
    fn = _BuildExamplesFn([F("a", "int64")], SplitSpec())
    fn.setup()
    chunk = RecordChunk("f", 1, [], batch=pa.record_batch({"a": pa.array(["x", "one", "y"])}))
    tags = [t if t != COUNTS else COUNTS for t in _tags(fn.process(chunk))]
    assert tags == [COUNTS, COUNTS, REJECTED, REJECTED, REJECTED]


# -- through the command ----------------------------------------------------------------------

def _rows(n: int, good: int) -> list[dict]:
    return [{"id": i, "flag": i % 2 == 0, "count": i % 5 if i < good else "x",
             "name": ("dog", "cat")[i % 2], "vec": [i, i + 1] if i < good else [i]}
            for i in range(n)]


def write_input(folder: pathlib.Path, fmt: str, n: int = ROWS, good: int = GOOD_FIRST
                ) -> pathlib.Path:
    """``n`` records whose ``count`` is text (CSV, JSON Lines) or whose ``vec`` is one value
    long instead of two (Parquet) from record ``good`` on."""
    rows = _rows(n, good)
    path = folder / f"data.{fmt}"
    if fmt == "csv":
        path.write_text("id,flag,count,name\n" + "".join(
            f"{r['id']},{str(r['flag']).lower()},{r['count']},{r['name']}\n" for r in rows))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:  # row groups of a window: the reader's chunks
        for r in rows:
            r["count"] = r["id"] % 5
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=WINDOW)
    return path


def write_config(folder: pathlib.Path, data: pathlib.Path,
                 errors: str = f"errors: {{abort_window: {WINDOW}}}\n") -> pathlib.Path:
    fmt = data.suffix[1:]
    vec = "  vec: {type: int64, shape: [2]}\n" if fmt == "parquet" else ""
    config = folder / f"{fmt}.yaml"
    config.write_text(f"""name: stop
source: {{format: {fmt}, path: {data}}}
features:
  flag: {{type: int64}}
  count: {{type: int64}}
  name: {{type: string}}
{vec}splits: {{key: id, train: 80, eval: 20}}
output: {{path: {folder / 'out'}}}
{errors}""")
    return config


def build(config: pathlib.Path, *extra: str) -> int:
    return cli.main(["build", "--config", str(config), "--version", "v",
                     "--progress-interval", "0", *extra])


def failure(out: pathlib.Path) -> tuple[pathlib.Path, dict]:
    (kept,) = (out / ".failed").iterdir()
    return kept, json.loads((kept / "failure.json").read_text())


def dead_letter_rows(kept: pathlib.Path) -> list[dict]:
    return [json.loads(line) for path in sorted((kept / "dead_letter").iterdir())
            for line in path.read_text().splitlines()]


@pytest.mark.parametrize("fmt, reason", [
    ("csv", "column 'count': not an integer or true/false"),
    ("jsonl", "feature 'count': expected int64, got str …"),
    ("parquet", "feature 'vec': expected int64 of shape [2], got list …"),
])
@pytest.mark.slow
def test_a_build_that_cannot_meet_the_threshold_stops_after_a_window(tmp_path, capsys, fmt,
                                                                     reason):
    config = write_config(tmp_path, write_input(tmp_path, fmt))
    assert build(config) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line, no traceback
    assert err.startswith("beam-tfrecords build: CommitError: stopped early: 500 of the first "
                          "2500 records a worker read were rejected (20.0000%): "
                          "errors.max_bad_fraction=0.0 allows none"), err
    assert f"top reasons: 500 x {reason}" in err, err
    out = tmp_path / "out"
    kept, doc = failure(out)
    assert f"dead letters kept in {kept}/dead_letter" in err
    # Stopped after a window of records, not after the 10,000.
    assert doc["counts"] == {"read": WINDOW, "written": 0, "rejected": WINDOW - GOOD_FIRST}
    assert doc["stopped_early"] == {"abort_window": WINDOW, "workers": 1,
                                    "rejected_without_note": 0}
    assert doc["top_reasons"][0]["reason"].startswith(reason)
    rows = dead_letter_rows(kept)
    assert len(rows) == WINDOW - GOOD_FIRST == sum(d["records"] for d in doc["dead_letter"])
    assert sorted(r["row"] for r in rows) == list(range(GOOD_FIRST + 1, WINDOW + 1))
    assert sorted(p.name for p in out.iterdir()) == [".failed"]  # rolled back, lease gone


def _spread_bad(folder: pathlib.Path, n: int, every: int) -> pathlib.Path:
    """A CSV of ``n`` records where every ``every``-th has text in an int64 column."""
    path = folder / "data.csv"
    path.write_text("id,flag,count,name\n" + "".join(
        f"{i},true,{'x' if i % every == every - 1 else i % 5},dog\n" for i in range(n)))
    return path


SPREAD = 2 * WINDOW  # two windows: judged, and judged again


@pytest.mark.parametrize("every, fraction", [
    (100, 0.05),  # 1% bad, 5% allowed
    (4, 0.3),     # 25% bad, 30% allowed: above neither the fraction nor half
])
@pytest.mark.slow
def test_bad_records_sparse_enough_to_meet_the_threshold_do_not_stop_the_build(
        tmp_path, capsys, every, fraction):
    config = write_config(tmp_path, _spread_bad(tmp_path, SPREAD, every),
                          f"errors: {{max_bad_fraction: {fraction}, abort_window: {WINDOW}}}\n")
    assert build(config, "--progress-interval", "0.05") == 0
    captured = capsys.readouterr()
    manifest = json.loads((tmp_path / "out" / "v" / "manifest.json").read_text())
    assert manifest["counts"]["rejected"] == SPREAD // every
    assert not (tmp_path / "out" / ".failed").exists()
    # The progress line counted the rejects while the build ran, with their top reason.
    shown = [line for line in captured.err.splitlines() if " rejected," in line
             and not line.startswith("progress: 0 records, 0 B written, 0 rejected")]
    assert shown and shown[-1].split(" rejected,")[0].endswith(f"{SPREAD // every:,}"), \
        captured.err[-2000:]
    assert shown[-1].endswith(f"; top reason: {SPREAD // every:,} x column 'count': not an "
                              "integer or true/false")


@pytest.mark.slow
def test_within_the_window_or_with_abort_window_0_the_commit_judges_as_before(tmp_path,
                                                                              capsys):
    data = write_input(tmp_path, "jsonl", n=3_000, good=2_600)  # a window alone would stop
    config = write_config(tmp_path, data, "errors: {abort_window: 0}\n")
    assert build(config) == 1
    err = capsys.readouterr().err
    assert "CommitError: 400 of 3000 records were rejected (13.3333%)" in err, err
    assert "stopped_early" not in failure(tmp_path / "out")[1]
    # A window larger than the input: the same.
    (tmp_path / "out").rename(tmp_path / "first")
    config = write_config(tmp_path, data, "errors: {abort_window: 3001}\n")
    assert build(config) == 1
    assert "CommitError: 400 of 3000 records were rejected" in capsys.readouterr().err


@pytest.mark.slow
def test_worker_processes_stop_and_are_gone_before_the_command_ends(tmp_path, capsys):
    before = set(descendants(os.getpid()))  # e.g. a Cloud Storage emulator of other tests
    config = write_config(tmp_path, write_input(tmp_path, "csv"))
    assert build(config, "--direct_running_mode=multi_processing",
                 "--direct_num_workers=2") == 1
    # Our line is the last; Beam's worker prints the traceback of any failed step before it.
    # The file is read in as many ranges as there are workers: one worker reaches the
    # window, and the other stops at the window or earlier, at that worker's note.
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.startswith("beam-tfrecords build: CommitError: stopped early: "), line
    assert f" of the first {WINDOW} records a worker read were rejected" in line, line
    kept, doc = failure(tmp_path / "out")
    # The first to reach the window stops at WINDOW; the other wherever the note finds it,
    # or where the runner tears it down (then it leaves no note, only its dead letters,
    # which count as read and rejected).
    assert doc["stopped_early"]["workers"] in (1, 2)
    assert WINDOW <= doc["counts"]["read"] <= 2 * WINDOW, doc["counts"]
    assert len(dead_letter_rows(kept)) == doc["counts"]["rejected"] >= WINDOW - GOOD_FIRST
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [".failed"]
    assert set(descendants(os.getpid())) <= before  # the workers are gone
