"""The sharded sink: the band rule over many bundles, every record exactly once, retries.

Local runners make few bundles (NOTES.md), so the many-bundle case is exercised by driving the
writer's bundle protocol by hand, as Beam's own sink tests do; pipeline tests cover the Beam
glue and retries, on both graph shapes of the steps after the writers.
"""

from __future__ import annotations

import os
import pickle
import random
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from beam_tfrecords_tests_helpers import read_records

from beam_tfrecords.runtime import serialized_batch
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks import shard_writers
from beam_tfrecords.sinks import tfrecord_sink as sink
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.shard_plan import ShardSize
from beam_tfrecords.sinks.shard_writers import group_shards

BAND = ShardSize(target=30_000, min=20_000, max=40_000)


@pytest.fixture(autouse=True, params=["framed-batch", "pieces", "record-pieces"])
def framing(request, monkeypatch):
    """Every test runs on the three write paths: one framed buffer per batch (small records),
    header/data/footer pieces per record (large ones), chosen by mean record size, and the
    encoder's own pieces of each record, never joined (a batch of images; here every batch
    the tests make, cut into uneven pieces, is one)."""
    monkeypatch.setattr(sink, "_PIECEWISE_RECORD_BYTES",
                        1 << 60 if request.param == "framed-batch" else 0)
    if request.param == "record-pieces":
        monkeypatch.setattr(serialized_batch, "LARGE_RECORD_BYTES", 0)

        def from_records(records):
            cut = [[r[:3], r[3:7], r[7:]] for r in records]
            batch = SerializedBatch.from_pieces(cut, [len(r) for r in records])
            assert batch.pieces is not None
            return batch

        monkeypatch.setattr(SerializedBatch, "from_records", staticmethod(from_records))
    return request.param


@pytest.fixture(params=["folded", "distributed"])
def graph(request, monkeypatch):
    """For the tests that build a pipeline: the sink's steps after the writers as one step
    (plan, finalize, group; what a single in-process worker gets) or as three (plan, spread
    finalize, group; what every other runner gets), forced whatever the runner."""
    folded = request.param == "folded"
    monkeypatch.setattr(shard_writers, "runs_in_one_process", lambda runner, options: folded)
    return request.param


def write_bundles(staging, bundles, compression, size=BAND):
    """Run _WriteParts over bundles of (split, records) elements; return the (split, Part)s."""
    fn = sink._WriteParts(str(staging), compression, size)
    out = []
    for bundle in bundles:
        fn.start_bundle()
        for element in bundle:
            fn.process(element)
        out.extend(wv.value for wv in fn.finish_bundle())
    return out


def make_records(rng, n, low=20, high=900):
    return [os.urandom(8) + bytes(rng.randrange(low, high)) for _ in range(n)]


def run_sink(out, elements, splits=("train", "eval"), compression=tff.NONE, index=False):
    """Run the sink in a pipeline (Beam's in-process direct runner) into ``out``; return its
    {split: [ShardInfo]} and the sink's counters."""
    result_file = out / "shards.pickle"
    p = beam.Pipeline()
    shards = (
        p
        | beam.Create(elements)
        | "WriteShards" >> sink.WriteTFRecordShards(str(out / "v"), str(out / "staging"), "ds",
                                                    splits, compression, BAND, index=index)
    )
    _ = shards | beam.Map(lambda s: result_file.write_bytes(pickle.dumps(s)))
    result = p.run()
    result.wait_until_finish()
    counters = {c.key.metric.name: c.committed for c in result.metrics().query(
        MetricsFilter().with_namespace("tfrecord_sink"))["counters"]}
    return pickle.loads(result_file.read_bytes()), counters


def finalize(parts, version_dir, compression, size=BAND, splits=("train", "eval")):
    planned = list(sink._plan(parts, splits, str(version_dir), "ds", compression, size))
    infos = [sink._finalize_shard(entry) for entry in planned]
    return group_shards(infos, splits), planned


@pytest.mark.parametrize("compression", [tff.NONE, tff.GZIP, tff.ZLIB])
def test_band_rule_and_exactly_once_over_many_bundles(tmp_path, compression):
    rng = random.Random(1)
    expected: dict[str, Counter] = {"train": Counter(), "eval": Counter()}
    bundles = []
    for b in range(24):  # bundles of very different sizes, batches and single records mixed
        bundle = []
        for _ in range(rng.randrange(1, 6)):
            split = rng.choice(["train", "train", "eval"])
            records = make_records(rng, rng.randrange(1, 120))
            expected[split].update(records)
            bundle.append((split, SerializedBatch.from_records(records) if b % 3 else records[0]))
            if not b % 3:
                expected[split].subtract(records[1:])
        bundles.append(bundle)
    parts = write_bundles(tmp_path / "staging", bundles, compression)
    assert len(parts) > 24  # rolled files plus a tail per bundle and split
    shards, planned = finalize(parts, tmp_path / "v", compression)
    assert any(len(group) > 1 for _, _, group in planned)  # tails were joined
    for split, infos in shards.items():
        got = Counter()
        for info in infos:
            records = read_records(info.path)
            assert len(records) == info.records
            assert os.path.getsize(info.path) == info.bytes
            got.update(records)
        assert got == +expected[split]
        outside = [i.bytes for i in infos if not BAND.min <= i.bytes <= BAND.max]
        assert len(outside) <= 1, (split, [i.bytes for i in infos])
        names = [os.path.basename(i.path) for i in infos]
        assert names == [f"ds-{k:05d}-of-{len(infos):05d}{tff.file_suffix(compression)}"
                         for k in range(len(infos))]


def test_small_split_is_one_shard(tmp_path):
    parts = write_bundles(tmp_path / "s", [[("train", b"x" * 100)], [("train", b"y" * 50)]],
                          tff.NONE)
    shards, _ = finalize(parts, tmp_path / "v", tff.NONE, splits=("train", "eval"))
    assert [i.records for i in shards["train"]] == [2]
    assert shards["eval"] == []


def test_record_over_max_gets_its_own_shard(tmp_path):
    big = b"b" * 50_000
    small = [b"s" * 500] * 30
    parts = write_bundles(tmp_path / "s", [[("train", SerializedBatch.from_records(
        small[:15] + [big] + small[15:]))]], tff.NONE)
    sizes = sorted(p.bytes for _, p in parts)
    assert any(s > BAND.max for s in sizes)
    shards, _ = finalize(parts, tmp_path / "v", tff.NONE)
    assert sum(i.records for i in shards["train"]) == 31
    assert [i.records for i in shards["train"] if i.bytes > BAND.max] == [1]


def test_full_parts_are_rolled_at_target(tmp_path):
    records = [b"r" * 984] * 200  # 1000 bytes framed each
    parts = write_bundles(tmp_path / "s", [[("train", SerializedBatch.from_records(records))]],
                          tff.NONE)
    sizes = [p.bytes for _, p in parts]
    assert sizes[:-1] == [30_000] * (len(sizes) - 1)
    assert sum(sizes) == 200_000


def test_finalize_is_idempotent(tmp_path):
    parts = write_bundles(tmp_path / "s", [[("train", b"a" * 10)], [("train", b"b" * 10)],
                                           [("eval", b"c")]], tff.NONE)
    planned = list(sink._plan(parts, ("train", "eval"), str(tmp_path / "v"), "ds", tff.NONE,
                              BAND))
    first = [sink._finalize_shard(e) for e in planned]
    again = [sink._finalize_shard(e) for e in planned]  # a retried finalize
    assert first == again


@pytest.mark.slow
def test_retried_bundles_neither_duplicate_nor_lose_records(tmp_path, monkeypatch, graph):
    """A writer bundle fails after writing its files; BundleBasedDirectRunner retries it.

    The failed attempt's parts are orphans under staging that no one references: the final
    shards hold every input record exactly once.
    """
    markers = tmp_path / "markers"
    markers.mkdir()

    class FlakyWriteParts(sink._WriteParts):
        def finish_bundle(self):
            out = list(super().finish_bundle())  # every part of this attempt is on disk now
            marker = markers / str(len(list(markers.iterdir())))
            if len(list(markers.iterdir())) < 2:  # the first two attempts fail
                marker.touch()
                raise RuntimeError("injected failure after the parts were written")
            yield from out

    monkeypatch.setattr(sink, "_WriteParts", FlakyWriteParts)
    rng = random.Random(5)
    records = [(f"{i:05d}".encode() + bytes(rng.randrange(0, 300))) for i in range(3000)]
    staging, version = tmp_path / "staging", tmp_path / "v"
    options = PipelineOptions(["--runner=BundleBasedDirectRunner"])
    with beam.Pipeline(options=options) as p:
        shards = (
            p
            | beam.Create([("train", SerializedBatch.from_records(records[i:i + 100]))
                           for i in range(0, 3000, 100)])
            | sink.WriteTFRecordShards(str(version), str(staging), "ds", ("train",),
                                       tff.GZIP, BAND)
        )
        assert_that(shards | beam.Map(lambda s: sum(i.records for i in s["train"])),
                    equal_to([3000]))
    assert len(list(markers.iterdir())) == 2  # the failures really happened
    orphans = list((staging / "train").iterdir())
    assert orphans  # the failed attempts' parts, never referenced
    got = Counter()
    for path in sorted((version / "train").iterdir()):
        got.update(read_records(str(path)))
    assert got == Counter(records)


def test_index_sidecar_addresses_every_record_of_joined_shards(tmp_path):
    rng = random.Random(3)
    bundles = [[("train", SerializedBatch.from_records(make_records(rng, rng.randrange(5, 60))))]
               for _ in range(12)]
    fn_parts = []
    fn = sink._WriteParts(str(tmp_path / "s"), tff.NONE, BAND, index=True)
    for bundle in bundles:
        fn.start_bundle()
        for element in bundle:
            fn.process(element)
        fn_parts.extend(wv.value for wv in fn.finish_bundle())
    planned = list(sink._plan(fn_parts, ("train",), str(tmp_path / "v"), "ds", tff.NONE, BAND))
    assert any(len(group) > 1 for _, _, group in planned)
    for entry in planned:
        info = sink._finalize_shard(entry, index=True)
        data = open(info.path, "rb").read()
        lines = open(info.index).read().splitlines()
        assert len(lines) == info.records
        records = read_records(info.path)
        position = 0
        for line, record in zip(lines, records):
            offset, length = map(int, line.split())
            assert offset == position and length == len(record) + 16
            assert data[offset:offset + length] == tff.frame(record)
            position += length
        assert position == len(data)


def test_index_needs_uncompressed_shards():
    with pytest.raises(ValueError, match="uncompressed"):
        sink.WriteTFRecordShards("v", "s", "ds", ("train",), tff.GZIP, BAND, index=True)


@pytest.mark.parametrize("compression", [tff.NONE, tff.GZIP, tff.ZLIB])
def test_pipeline_writes_every_record_once_in_band_and_keeps_the_empty_split(
        tmp_path, graph, compression):
    rng = random.Random(7)
    records = make_records(rng, 400)
    elements = [("train", SerializedBatch.from_records(records[i:i + 50]))
                for i in range(0, 400, 50)]
    index = compression == tff.NONE
    shards, counters = run_sink(tmp_path, elements, ("train", "eval"), compression, index)
    assert shards["eval"] == []
    infos = shards["train"]
    assert [os.path.basename(i.path) for i in infos] == [
        f"ds-{k:05d}-of-{len(infos):05d}{tff.file_suffix(compression)}"
        for k in range(len(infos))]
    assert len([i for i in infos if not BAND.min <= i.bytes <= BAND.max]) <= 1
    got = Counter()
    for info in infos:
        shard = read_records(info.path)
        assert len(shard) == info.records and os.path.getsize(info.path) == info.bytes
        got.update(shard)
        if index:
            assert len(open(info.index).read().splitlines()) == info.records
        else:
            assert info.index == ""
    assert got == Counter(records)
    assert counters["shards_finalized"] == len(infos)


@pytest.mark.slow
def test_both_graph_shapes_write_the_same_shards(tmp_path, monkeypatch):
    rng = random.Random(11)
    elements = [(split, SerializedBatch.from_records(make_records(rng, 60)))
                for split in ("train", "eval", "train", "train", "eval")]
    results = {}
    for folded in (True, False):
        monkeypatch.setattr(shard_writers, "runs_in_one_process",
                            lambda runner, options, f=folded: f)
        out = tmp_path / str(folded)
        shards, counters = run_sink(out, elements, ("train", "eval", "test"), index=True)
        results[folded] = (
            {split: [(os.path.relpath(i.path, out), i.records, i.bytes, i.crc32c,
                      os.path.relpath(i.index, out), open(i.path, "rb").read(),
                      open(i.index).read()) for i in infos]
             for split, infos in shards.items()},
            counters["shards_finalized"],
        )
    assert results[True] == results[False]
    assert results[True][0]["test"] == [] and results[True][1] > 2  # several shards, in order


@pytest.mark.parametrize("args,folded", [
    ([], True),
    (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], False),
])
def test_a_single_in_process_worker_gets_one_step_after_the_writers(args, folded):
    p = beam.Pipeline(options=PipelineOptions(args))
    _ = (p | beam.Create([("train", b"x")])
         | "WriteShards" >> sink.WriteTFRecordShards("v", "s", "ds", ("train",)))
    labels = {t.unique_name for t in p.to_runner_api().components.transforms.values()}
    steps = {label for label in labels if label.startswith("WriteShards/")
                   and "/" not in label.removeprefix("WriteShards/")}
    one_step = {"WriteShards/WriteParts", "WriteShards/CommitTrigger",
                "WriteShards/PlanFinalizeGroup"}
    three_steps = {"WriteShards/WriteParts", "WriteShards/PlanTrigger",
                   "WriteShards/PlanShards", "WriteShards/SpreadFinalize",
                   "WriteShards/FinalizeShards", "WriteShards/GatherTrigger",
                   "WriteShards/GroupBySplit"}
    assert steps == (one_step if folded else three_steps)
