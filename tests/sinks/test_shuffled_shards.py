"""The seeded shuffle: keys, ranges and windows (pure), and the sink's bytes whatever the bundles.

The writer's bundle protocol is driven by hand, as in test_tfrecord_sink.py, so that the same
records can arrive in very different bundles, batches and runs; the runner matrix is in
test_shuffle_runners.py.
"""

from __future__ import annotations

import logging
import os
import random
import re
from collections import Counter

import numpy as np
import pytest
from beam_tfrecords_tests_helpers import read_examples, read_records, shard_paths
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.config import parse_config
from beam_tfrecords.runtime import serialized_batch
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks import shuffled_shards as ss
from beam_tfrecords.sinks.format import shuffle_plan as sp
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.shard_plan import ShardSize
from beam_tfrecords.sinks.shard_writers import group_shards
from beam_tfrecords.transforms.codec.label_order import (
    adjacent_changes,
    expected_changes,
    is_class_ordered,
)

BAND = ShardSize(target=30_000, min=20_000, max=40_000)
SPLITS = ("train", "eval")


def keys_of(records, seed):
    batch = SerializedBatch.from_records(records)
    crcs = tff.record_crcs(batch.payload, batch.offsets)
    return sp.record_keys(batch.payload, batch.offsets, crcs, seed)


def make_records(rng, n, low=20, high=600):
    return [rng.randbytes(8) + bytes(rng.randrange(low, high)) for _ in range(n)]


def write_runs(staging, bundles, seed):
    """Run _WriteRuns over bundles of (split, records) elements; return the (split, RunPart)s.
    """
    fn = ss._WriteRuns(str(staging), seed)
    out = []
    for bundle in bundles:
        fn.start_bundle()
        for element in bundle:
            fn.process(element)
        out.extend(wv.value for wv in fn.finish_bundle())
    return out


def commit(runs, version_dir, compression, size=BAND, index=False):
    planned = ss._plan(runs, SPLITS, str(version_dir), "ds", compression, size)
    return group_shards([ss._finalize(entry, compression, index) for entry in planned], SPLITS)


def as_bundles(rng, records_by_split, shape):
    """The same records cut into bundles: one bundle of big batches, or many small bundles of
    small batches and single records."""
    elements = []
    for split, records in records_by_split.items():
        i = 0
        while i < len(records):
            n = len(records) if shape == "one" else rng.randrange(1, 40)
            chunk = records[i:i + n]
            elements.append((split, chunk[0] if len(chunk) == 1 and shape != "one"
                             else SerializedBatch.from_records(chunk)))
            i += n
    if shape == "one":
        return [elements]
    rng.shuffle(elements)
    bundles, i = [], 0
    while i < len(elements):
        n = rng.randrange(1, 8)
        bundles.append(elements[i:i + n])
        i += n
    return bundles


# -- keys -----------------------------------------------------------------------------------

def test_keys_are_made_of_the_record_and_the_seed_only():
    rng = random.Random(3)
    records = make_records(rng, 500)
    whole = keys_of(records, 7)
    pieces = np.concatenate([keys_of(records[i:i + 37], 7) for i in range(0, 500, 37)])
    assert np.array_equal(whole, pieces)  # batches do not matter
    assert np.array_equal(keys_of(records[::-1], 7), whole[::-1])  # nor input order
    other = keys_of(records, 8)
    assert len(set(whole.tolist())) == 500
    # Another seed, another order: the rank correlation of two seeds' orders is near 0.
    ranks = np.argsort(np.argsort(whole)), np.argsort(np.argsort(other))
    assert abs(np.corrcoef(*ranks)[0, 1]) < 0.15


def test_records_that_differ_only_in_a_few_bytes_get_unrelated_keys():
    base = bytes(range(256)) * 4
    variants = [base[:k] + bytes([base[k] ^ 1]) + base[k + 1:] for k in range(0, 1024, 64)]
    keys = keys_of([base, *variants], 1)
    assert len(set(keys.tolist())) == len(keys)
    cells = sp.cells_of(keys)
    assert len(set(cells.tolist())) > len(keys) // 2  # spread, not clustered


def test_empty_and_tiny_records_have_keys():
    keys = keys_of([b"", b"a", b"ab", b""], 0)
    assert keys[0] == keys[3] and len(set(keys.tolist())) == 3


# -- plan ------------------------------------------------------------------------------------

def test_shard_count_gives_shares_in_the_band():
    size = ShardSize()
    assert sp.choose_shard_count(50e6, size) == 1  # a split below min is one shard
    assert sp.choose_shard_count(200e6, size) == 1
    for total in (201e6, 250e6, 299e6, 1e9, 10.3e9, 123.4e9):
        n = sp.choose_shard_count(total, size)
        assert size.min <= total / n <= size.max, total


@pytest.mark.parametrize("total_shards_bytes", [1e9, 80e9])
def test_ranges_tile_the_key_space_and_share_it_by_bytes(total_shards_bytes):
    rng = np.random.default_rng(0)
    cells = rng.poisson(total_shards_bytes / sp.CELLS, sp.CELLS).astype(np.int64)
    ranges = sp.plan_ranges(cells, 1.0, ShardSize())
    assert ranges[0][0] == 0 and ranges[-1][1] == sp.KEY_SPACE
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(ranges, ranges[1:]))
    n = len(ranges)
    assert n == sp.choose_shard_count(cells.sum(), ShardSize())
    # Bytes per range if each cell's bytes were spread evenly over its keys.
    width = sp.KEY_SPACE // sp.CELLS
    cumulative = np.concatenate(([0], np.cumsum(cells)))

    def at(key):
        cell = min(key // width, sp.CELLS - 1)
        return float(cumulative[cell]) + float(cells[cell]) * ((key - cell * width) / width)

    shares = [at(hi) - at(lo) for lo, hi in ranges]
    assert max(shares) / min(shares) < 1.1


def test_a_compressed_split_gets_fewer_shards():
    cells = np.full(sp.CELLS, 1e9 / sp.CELLS)
    assert len(sp.plan_ranges(cells, 1.0, ShardSize())) == 7
    assert len(sp.plan_ranges(cells, 0.3, ShardSize())) == 2


def test_windows_cut_a_range_at_cells_in_order():
    cells = np.full(sp.CELLS, 1000, np.int64)
    width = sp.KEY_SPACE // sp.CELLS
    lo, hi = 10 * width + 5, 300 * width + 17
    pieces = sp.windows(cells, lo, hi, 50_000)
    assert pieces[0][0] == lo and pieces[-1][1] == hi
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    assert all(b % width == 0 for _, b in pieces[:-1])
    assert 5 <= len(pieces) <= 7


def test_ties_are_ordered_by_bytes():
    keys = np.array([5, 3, 5, 5, 1], np.uint64)
    records = [b"c", b"x", b"a", b"b", b"y"]
    order = sp.record_order(keys, records.__getitem__)
    assert [records[i] for i in order] == [b"y", b"x", b"a", b"b", b"c"]


@pytest.mark.parametrize("mean", [100, 50_000])
def test_gather_returns_ranges_in_order(mean):
    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 2 * mean, 300)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    buffer = rng.integers(0, 256, int(sizes.sum()), dtype=np.uint8).tobytes()
    order = rng.permutation(300)
    chunks = list(sp.gather_framed(buffer, starts, sizes, order, chunk_bytes=3000))
    expected = b"".join(buffer[starts[i]:starts[i] + sizes[i]] for i in order)
    assert b"".join(bytes(c) for c, _ in chunks) == expected
    assert np.array_equal(np.concatenate([s for _, s in chunks]), sizes[order])
    assert len(chunks) > 1


# -- the sink ----------------------------------------------------------------------------------

@pytest.fixture
def small_runs(monkeypatch):
    """Runs and finalize windows of a few KB, so that many of each are exercised."""
    monkeypatch.setattr(sp, "RUN_BYTES", 20_000)
    monkeypatch.setattr(ss, "WINDOW_BYTES", 7_000)


@pytest.mark.parametrize("compression", [tff.NONE, tff.GZIP, tff.ZLIB])
def test_same_bytes_whatever_the_bundles(tmp_path, small_runs, compression, monkeypatch):
    rng = random.Random(5)
    records = {"train": make_records(rng, 900), "eval": make_records(rng, 200)}
    records["train"] += records["train"][:3]  # duplicates: equal keys, ordered by bytes
    results = {}
    for shape in ("one", "many"):
        if shape == "one":  # one big run per split against many small ones
            monkeypatch.setattr(sp, "RUN_BYTES", 10**9)
        else:
            monkeypatch.setattr(sp, "RUN_BYTES", 20_000)
        runs = write_runs(tmp_path / shape / "staging", as_bundles(rng, records, shape), 11)
        shards = commit(runs, tmp_path / shape / "v", compression)
        results[shape] = (runs, shards)
    one, many = results["one"][1], results["many"][1]
    assert len(results["many"][0]) > 3 * len(results["one"][0])
    for split in SPLITS:
        names = [os.path.basename(i.path) for i in one[split]]
        assert names == [os.path.basename(i.path) for i in many[split]]
        for a, b in zip(one[split], many[split]):
            assert open(a.path, "rb").read() == open(b.path, "rb").read(), a.path
            assert (a.records, a.bytes, a.crc32c) == (b.records, b.bytes, b.crc32c)
        got = Counter(r for info in one[split] for r in read_records(info.path))
        assert got == Counter(records[split])
        if compression == tff.GZIP:  # a fixed header: mtime 0, no name, the same OS byte
            for info in one[split]:
                header = open(info.path, "rb").read(10)
                assert header[:4] == b"\x1f\x8b\x08\x00" and header[4:8] == bytes(4)
        sizes = [i.bytes for i in one[split]]
        assert sum(not BAND.min <= s <= BAND.max for s in sizes) <= 1, sizes
        assert len(sizes) > 1 or split == "eval" or compression != tff.NONE
        # The order is the keys' order, shard after shard.
        written = [r for info in one[split] for r in read_records(info.path)]
        keys = keys_of(written, 11).tolist()
        assert keys == sorted(keys)


def test_another_seed_writes_another_order(tmp_path, small_runs):
    rng = random.Random(8)
    records = {"train": make_records(rng, 400), "eval": []}
    orders = []
    for seed in (1, 2):
        runs = write_runs(tmp_path / str(seed) / "s", as_bundles(rng, records, "many"), seed)
        shards = commit(runs, tmp_path / str(seed) / "v", tff.NONE)
        orders.append([r for info in shards["train"] for r in read_records(info.path)])
        assert shards["eval"] == []
    assert Counter(orders[0]) == Counter(orders[1]) and orders[0] != orders[1]


def test_large_records_and_the_index(tmp_path, small_runs, monkeypatch):
    monkeypatch.setattr(sp, "RUN_BYTES", 300_000)
    rng = random.Random(2)
    # Large records (kept as pieces) and small ones (framed into one buffer) in one run.
    records = {"train": make_records(rng, 40, 30_000, 90_000) + make_records(rng, 300),
               "eval": make_records(rng, 5)}
    size = ShardSize(target=600_000, min=400_000, max=800_000)
    runs = write_runs(tmp_path / "s", as_bundles(rng, records, "many"), 4)
    shards = commit(runs, tmp_path / "v", tff.NONE, size=size, index=True)
    written = [r for info in shards["train"] for r in read_records(info.path)]
    assert keys_of(written, 4).tolist() == sorted(keys_of(written, 4).tolist())
    for info in shards["train"] + shards["eval"]:
        data = open(info.path, "rb").read()
        lines = open(info.index).read().splitlines()
        assert len(lines) == info.records
        for line in lines:
            offset, length = map(int, line.split())
            (record,) = tff.iter_records(iter_bytes(data[offset:offset + length]), tff.NONE)
            assert record in records[info.split]
    assert Counter(r for i in shards["train"] for r in read_records(i.path)) == Counter(
        records["train"])


def iter_bytes(data):
    import io

    return io.BytesIO(data)


def test_a_retried_finalize_writes_the_same_shard(tmp_path, small_runs):
    rng = random.Random(4)
    runs = write_runs(tmp_path / "s", as_bundles(rng, {"train": make_records(rng, 300),
                                                       "eval": []}, "many"), 9)
    planned = list(ss._plan(runs, SPLITS, str(tmp_path / "v"), "ds", tff.GZIP, BAND))
    first = [ss._finalize(entry, tff.GZIP, False) for entry in planned]
    again = [ss._finalize(entry, tff.GZIP, False) for entry in planned]
    assert first == again
    assert not [f for f in os.listdir(tmp_path / "v" / "train") if ".tmp-" in f]


def test_a_truncated_staged_run_fails_the_finalize_naming_it(tmp_path, small_runs):
    """A run cut short under .staging (a disk that lost its tail, a hand that truncated it):
    the shard's finalize fails naming the run and where it ended, and writes no shard."""
    rng = random.Random(5)
    runs = write_runs(tmp_path / "s", as_bundles(rng, {"train": make_records(rng, 300),
                                                       "eval": []}, "one"), 9)
    victim = sorted({part.path for _, part in runs})[0]
    size = os.path.getsize(victim)
    with open(victim, "r+b") as handle:
        handle.truncate(size // 2)
    planned = list(ss._plan(runs, SPLITS, str(tmp_path / "v"), "ds", tff.NONE, BAND))
    with pytest.raises(OSError, match=f"staged run {re.escape(victim)} ended at byte"):
        for entry in planned:
            ss._finalize(entry, tff.NONE, False)
    assert not [f for f in os.listdir(tmp_path / "v" / "train") if ".tmp-" in f]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=30), max_size=4), max_size=10))
def test_keys_and_crcs_from_pieces_equal_those_of_the_joined_records(shapes):
    """Large records reach the shuffle as the encoder's pieces: their CRCs and sampled bytes,
    hence their keys, are the joined records' -- the same order, the same shards."""
    offsets = np.zeros(len(shapes) + 1, np.int64)
    np.cumsum([sum(map(len, parts)) for parts in shapes], out=offsets[1:])
    joined = b"".join(b"".join(parts) for parts in shapes)
    crcs = tff.record_piece_crcs(shapes)
    assert crcs.tolist() == tff.record_crcs(joined, offsets).tolist()
    sampled = sp.sampled_bytes_of_pieces(shapes, offsets)
    assert [w.tolist() for w in sampled] == [w.tolist() for w in sp._sampled_bytes(joined,
                                                                                    offsets)]
    assert sp.record_keys(None, offsets, crcs, 11, sampled).tolist() == sp.record_keys(
        joined, offsets, crcs, 11).tolist()
    sizes = np.diff(offsets).tolist()
    assert tff.frame_record_pieces(shapes, sizes, crcs) == tff.frame_record_pieces(shapes, sizes)


def test_runs_of_unjoined_large_records_equal_runs_of_joined_ones(tmp_path, small_runs,
                                                                    monkeypatch):
    rng = random.Random(6)
    records = [rng.randbytes(8) + bytes(rng.randrange(5000, 9000)) for _ in range(60)]
    cut = [[r[:10], r[10:4200], r[4200:]] for r in records]
    sizes = [len(r) for r in records]
    monkeypatch.setattr(serialized_batch, "LARGE_RECORD_BYTES", 0)
    kept = SerializedBatch.from_pieces(cut[:30], sizes[:30]), SerializedBatch.from_pieces(
        cut[30:], sizes[30:])
    assert all(batch.pieces is not None for batch in kept)
    joined = SerializedBatch.from_records(records[:30]), SerializedBatch.from_records(
        records[30:])
    runs = {}
    for name, batches in (("kept", kept), ("joined", joined)):
        parts = write_runs(tmp_path / name, [[("train", b) for b in batches]], 3)
        runs[name] = [(open(part.path, "rb").read(), open(part.path + ss.KEYS_SUFFIX, "rb")
                       .read()) for _, part in sorted(parts, key=lambda p: p[1].path)]
    assert runs["kept"] == runs["joined"] and runs["kept"]


# -- label order ------------------------------------------------------------------------------

def test_class_order_is_told_from_a_random_order():
    labels = [k // 50 for k in range(300)]  # six classes, one after another
    assert adjacent_changes(labels) == 5 and is_class_ordered(labels)
    random.Random(0).shuffle(labels)
    assert abs(adjacent_changes(labels) - expected_changes(labels)) < 30
    assert not is_class_ordered(labels)
    assert not is_class_ordered([3] * 40)  # one class: nothing to mix
    assert expected_changes([1, 2]) == 1.0


# -- config, command line, manifest ----------------------------------------------------------

def config_with(output_extra):
    return parse_config({
        "name": "s", "source": {"format": "csv", "path": "x.csv"},
        "features": {"a": {"type": "int64"}},
        "output": {"path": "out", **output_extra}})


def test_config_takes_a_seed_and_says_what_is_wrong():
    assert config_with({}).output.shuffle_seed is None
    assert config_with({"shuffle": False}).output.shuffle_seed is None
    on = config_with({"shuffle": {"seed": 3}})
    assert on.output.shuffle_seed == 3
    assert on.resolved()["output"]["shuffle"] == {"seed": 3}
    assert "shuffle" not in config_with({}).resolved()["output"]  # old configs keep their hash
    assert "shuffle_seed" not in on.resolved()["output"]
    assert on.sha256() != config_with({}).sha256()
    for raw, words in ((True, "needs a seed"), ({"seed": -1}, "integer from 0"),
                       ({"seed": "7"}, "integer from 0"), ({"seed": 1.5}, "integer from 0"),
                       ({}, "seed"), ({"seed": 1, "key": "id"}, "key")):
        with pytest.raises(ValueError, match=words) as err:
            config_with({"shuffle": raw})
        assert "output.shuffle" in str(err.value)


def write_image_folder(root, labels=4, per_label=60):
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in range(labels):
        folder = root / "train" / f"class{label}"
        folder.mkdir(parents=True)
        for k in range(per_label):
            pixels = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{k:03d}.png")


def image_config(tmp_path, shuffle=None):
    write_image_folder(tmp_path / "images")
    lines = ["name: pics", "source:", "  format: images", f"  path: {tmp_path / 'images'}",
             "features:", "  image_raw: {type: bytes, source: image}",
             "  label: {type: int64}", "output:", f"  path: {tmp_path / 'out'}",
             "  shard_size: {target: 6KB, min: 4KB, max: 8KB}"]
    if shuffle is not None:
        lines.append(f"  shuffle: {{seed: {shuffle}}}")
    config = tmp_path / "config.yaml"
    config.write_text("\n".join(lines) + "\n")
    return config


def labels_in_order(out, manifest):
    version = out / manifest["version"]
    return [example["label"][1][0] for path in shard_paths(version, manifest, "train")
            for example in read_examples(path)]


@pytest.mark.slow
def test_a_shuffled_image_folder_build_loses_the_class_order(tmp_path, caplog):
    config = image_config(tmp_path)
    with caplog.at_level(logging.WARNING, logger="beam_tfrecords.pipelines.build"):
        plain = cli.run_build(["--config", str(config), "--version", "plain"])
    warnings = [r.getMessage() for r in caplog.records if "class by class" in r.getMessage()]
    assert len(warnings) == 1 and "output.shuffle" in warnings[0]
    assert plain["shuffle"] is None
    assert is_class_ordered(labels_in_order(tmp_path / "out", plain))

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="beam_tfrecords.pipelines.build"):
        mixed = cli.run_build(["--config", str(config), "--version", "mixed",
                               "--shuffle-seed", "1"])
    assert not [r for r in caplog.records if "class by class" in r.getMessage()]
    labels = labels_in_order(tmp_path / "out", mixed)
    assert sorted(labels) == sorted(labels_in_order(tmp_path / "out", plain))
    assert len(mixed["splits"]["train"]["shards"]) > 3
    # A random order of 4 x 60 labels changes at ~179 of 239 neighbours (sd ~6.7); the class
    # order changes 3 times.
    assert abs(adjacent_changes(labels) - expected_changes(labels)) < 25
    assert mixed["shuffle"] == {"seed": 1}
    assert mixed["config"]["output"]["shuffle"] == {"seed": 1}

    again = cli.run_build(["--config", str(config), "--version", "again", "--shuffle-seed", "1"])
    assert again["shards_digest"] == mixed["shards_digest"] != plain["shards_digest"]
    other = cli.run_build(["--config", str(config), "--version", "other", "--shuffle-seed", "2"])
    assert other["shards_digest"] != mixed["shards_digest"]
    assert labels_in_order(tmp_path / "out", other) != labels


def test_the_flag_turns_a_configured_shuffle_off(tmp_path, caplog):
    config = image_config(tmp_path, shuffle=5)
    with caplog.at_level(logging.WARNING, logger="beam_tfrecords.pipelines.build"):
        manifest = cli.run_build(["--config", str(config), "--version", "v", "--no-shuffle"])
    assert manifest["shuffle"] is None and "shuffle" not in manifest["config"]["output"]
    assert any("class by class" in r.getMessage() for r in caplog.records)
    with pytest.raises(SystemExit):
        cli.run_build(["--config", str(config), "--shuffle-seed", "1", "--no-shuffle"])


def test_run_index_slices_are_the_runs_records_in_the_range():
    rng = np.random.default_rng(4)
    runs = []
    for n in (0, 5, 3000):
        keys = np.sort(rng.integers(0, 2**64, n, dtype=np.uint64))
        sizes = rng.integers(16, 300, n)
        runs.append((keys, sizes, sp.run_cells(keys, sizes)))
    index = sp.RunIndex([census for _, _, census in runs])
    width = sp.KEY_SPACE // sp.CELLS
    for lo, hi in ((0, sp.KEY_SPACE), (7 * width + 3, 900 * width), (sp.KEY_SPACE - 5,
                                                                      sp.KEY_SPACE)):
        for (keys, sizes, _), (r0, r1, b0, b1) in zip(runs, index.slices(lo, hi).tolist()):
            cells = sp.cells_of(keys)
            whole = np.flatnonzero((cells >= lo // width) & (cells <= (hi - 1) // width))
            expected = (whole[0], whole[-1] + 1) if whole.size else (r0, r0)
            assert (r0, r1) == tuple(int(x) for x in expected)
            assert (b0, b1) == (int(sizes[:r0].sum()), int(sizes[:r1].sum()))
    assert index.cell_bytes().sum() == sum(int(s.sum()) for _, s, _ in runs)
