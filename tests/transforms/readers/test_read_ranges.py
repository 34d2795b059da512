"""Readers by ranges (transforms/readers/framework.py ``PlanRanges`` / ``ReadRangesFn``): one
file read as many ranges gives the records, the dead letters and -- merged by the commit's
``sum_counts`` -- the counts of the same file read whole, for every format; a range whose
records cannot be joined up fails loudly, naming the file and byte.

The DoFns are driven by hand (plan, then each range with its own tracker, as a runner would
after spreading them), so the quick tier needs no pipeline; the whole builds are in
tests/e2e/test_range_builds.py.
"""

from __future__ import annotations

import json

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from apache_beam.io.restriction_trackers import OffsetRange
from beam_tfrecords_tests_helpers import misguessed_csv

import beam_tfrecords as btf
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.commit import sum_counts
from beam_tfrecords.transforms.readers.framework import (
    COUNTS,
    REJECTED,
    PlanRanges,
    RangeTracker,
    ReadRangesFn,
    RecordChunk,
    SourceError,
    _RangeProvider,
)
from beam_tfrecords.transforms.readers.ranges import RANGES, RangeError

FEATURES = {"id": {"type": "int64"}, "name": {"type": "string"}, "x": {"type": "float"}}
PROVIDER = _RangeProvider()


def read(source, path, split_bytes, *, split_at=None):
    """(records, dead letters, counts) of ``source``'s reader over ``path`` planned with
    ``split_bytes``; ``split_at(index, tracker)`` may split a range's tracker as a runner's
    rebalancing would (the residual is then read after it)."""
    reader = source.file_reader()
    identity = storage.identify(storage.match(path))[0]
    fn = ReadRangesFn(reader)
    fn.setup()
    records, letters, counts, ranges = [], [], [], 0
    pending = [(work, PROVIDER.initial_restriction(work))
               for work in PlanRanges(reader, split_bytes).process(identity)]
    while pending:
        work, restriction = pending.pop(0)
        tracker = PROVIDER.create_tracker(restriction)
        ranges += 1
        outputs = fn.process(work, tracker)
        residual = None
        for index, out in enumerate(outputs):
            if split_at is not None and residual is None and index == 1:
                residual = split_at(ranges, tracker)
            if isinstance(out, RecordChunk):
                records += [(r, out.range_offset) for r in out.records()]
            elif out.tag == REJECTED:
                letters.append(out.value)
            elif out.tag == COUNTS:
                counts.append(out.value)
        tracker.check_done()  # as a runner checks: every position claimed or given up
        if residual is not None:
            pending.insert(0, (work, residual))
    return records, letters, counts, ranges


def check_equal(source, path, split_bytes, **kwargs):
    """The ranged read's records and counts are the whole read's; dead letters too, but for
    where a range not at the file's start puts its row. Returns the ranged read's counts."""
    whole, whole_letters, whole_counts, one = read(source, path, 1 << 40)
    assert one == 1
    ranged, letters, counts, many = read(source, path, split_bytes, **kwargs)
    assert many > 2
    assert [r for r, _ in ranged] == [r for r, _ in whole]
    assert sum_counts(counts) == sum_counts(whole_counts)
    assert [name for name, _ in counts] == [RANGES] * len(counts)
    assert [(d["reason"], d["kind"]) for d in letters] == [
        (d["reason"], d["kind"]) for d in whole_letters]
    for got, want in zip(letters, whole_letters):
        if "range_offset" in got:  # a range not at the start: no row, its own place
            assert got["row"] is None and got["range_row"] >= 1
        else:
            assert got["row"] == want["row"]
    return sum_counts(counts), letters


def csv_text(rows=600, bad_every=53):
    lines = ["id,name,x"]
    for i in range(rows):
        name = f'"multi\nline {i}, ""quoted"""' if i % 7 == 0 else f"n{i}"
        x = "bad" if i % bad_every == 5 else str(i * 0.5)
        lines.append(f"{i},{name},{x}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("columnar", [True, False])
def test_csv_with_quoted_line_breaks_across_range_boundaries(tmp_path, columnar):
    """Every 7th row holds a line break inside quotes; ranges of 97 bytes cut through many
    of them: the rows, their order and the dead letters are the whole file's."""
    path = tmp_path / "a.csv"
    path.write_text(csv_text())
    source = btf.ReadCsv(str(path), FEATURES)
    source.file_reader()._columnar = columnar
    counts, letters = check_equal(source, str(path), 97)
    assert counts["read"] == 600 and counts["rejected_at_read"] == len(letters) > 5
    assert any("range_offset" in d for d in letters)


def test_jsonl_ranges(tmp_path):
    path = tmp_path / "a.jsonl"
    lines = [json.dumps({"id": i, "name": f"n{i}", "x": i / 2}) for i in range(500)]
    lines[17] = "{not json"
    lines[301] = ""
    path.write_text("\n".join(lines) + "\n")
    check_equal(btf.ReadJsonl(str(path), FEATURES), str(path), 211)


def test_parquet_ranges_keep_the_files_row_numbers(tmp_path):
    path = tmp_path / "a.parquet"
    table = pa.table({"id": list(range(1000)), "name": [f"n{i}" for i in range(1000)],
                      "x": [i / 2 for i in range(1000)]})
    pq.write_table(table, path, row_group_size=50)
    source = btf.ReadParquet(str(path), FEATURES)
    check_equal(source, str(path), 1500)
    records, _, _, _ = read(source, str(path), 1500)
    assert {offset for _, offset in records} == {None}  # rows stay exact


def test_avro_ranges(tmp_path):
    path = tmp_path / "a.avro"
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
        {"name": "x", "type": "double"}]}
    with open(path, "wb") as out:
        fastavro.writer(out, schema, [{"id": i, "name": f"n{i}", "x": i / 2}
                                      for i in range(2000)], sync_interval=300)
    check_equal(btf.ReadAvro(str(path), FEATURES), str(path), 2000)


@pytest.mark.slow
def test_a_range_split_while_read_gives_the_same_records(tmp_path):
    """A runner's dynamic rebalancing splits a range being read (at half its remainder):
    the primary stops at the split, the residual starts there, and nothing is lost or read
    twice (the claims of the stream are what a split can move past)."""
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"id": i, "name": "n" * (i % 50), "x": 1.5}) + "\n"
                            for i in range(100_000)))
    splits = []

    def split(index, tracker):
        found = tracker.try_split(0.5)
        if found:
            splits.append(found)
            return found[1]
        return None

    source = btf.ReadJsonl(str(path), FEATURES)
    check_equal(source, str(path), 3 << 20, split_at=split)
    assert splits


@pytest.mark.slow
def test_a_range_that_cannot_be_joined_up_fails_naming_file_and_byte(tmp_path, monkeypatch):
    """A quoted cell of 90 kB that reads like rows of three cells, and a lookahead too short
    to see its end: the guess at a range start inside it (a row start) is wrong, the range
    before finds its end inside quotes, and the merge of the counts refuses the file."""
    path = tmp_path / "a.csv"
    misguessed_csv(path, monkeypatch)
    _, _, counts, _ = read(btf.ReadCsv(str(path), FEATURES), str(path), 30_000)
    with pytest.raises(RangeError, match=rf"{path.name}: byte \d+: range 1 assumed a row "
                                         r"start there, but the range before it found the "
                                         r"inside of a quoted field"):
        sum_counts(counts)


def test_the_tracker_claims_runs_of_record_starts():
    tracker = RangeTracker(OffsetRange(10, 100))
    assert tracker.try_claim((10, 49))
    assert tracker.try_split(0.5)[1] == OffsetRange(74, 100)  # after the run claimed
    assert not tracker.try_claim((50, 80))  # past the end now: nothing claimed
    assert tracker.try_claim((50, 73))
    assert not tracker.try_claim(74)
    tracker.check_done()


def test_small_files_and_compressed_text_are_read_whole(tmp_path):
    """A file not larger than split_bytes, or gzip text, is one element read by the file
    reader as before: its six counts, no range parts."""
    import gzip

    small = tmp_path / "a.csv"
    small.write_text(csv_text(20))
    packed = tmp_path / "b.csv.gz"
    packed.write_bytes(gzip.compress(csv_text(400).encode()))
    for path, split_bytes in ((small, small.stat().st_size), (packed, 64)):
        _, _, counts, ranges = read(btf.ReadCsv(str(path), FEATURES), str(path), split_bytes)
        assert ranges == 1 and RANGES not in dict(counts)


def test_a_changed_file_is_reported_once(tmp_path):
    """A file that grew after the launch listed it: every range sees the change, the range
    starting the file reports it (one unread region, one dead letter)."""
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(300)))
    source = btf.ReadJsonl(str(path), FEATURES)
    reader = source.file_reader()
    identity = storage.identify(storage.match(str(path)))[0]
    with open(path, "a") as grow:
        grow.write('{"id": 300}\n')
    fn = ReadRangesFn(reader)
    fn.setup()
    outputs = []
    for work in PlanRanges(reader, 1000).process(identity):
        outputs += fn.process(work, PROVIDER.create_tracker(PROVIDER.initial_restriction(work)))
    counts = sum_counts(o.value for o in outputs
                        if not isinstance(o, RecordChunk) and o.tag == COUNTS)
    letters = [o.value for o in outputs if not isinstance(o, RecordChunk) and o.tag == REJECTED]
    assert counts["changed_files"] == 1 and counts["unread_regions"] == 1
    assert len(letters) == 1 and "after the launch listed it" in letters[0]["reason"]


def test_bad_split_bytes_is_refused_by_name():
    with pytest.raises(SourceError, match="ReadJsonl: argument 'split_bytes'"):
        btf.ReadJsonl("x.jsonl", split_bytes="lots")
