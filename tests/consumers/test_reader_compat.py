"""Every reader loads a version as it is: shard names Beam's AUTO compression understands, and
split folders that hold shards only (index sidecars in a tree of their own).

- ``<split>/*`` read by Beam's own ``ReadFromTFRecord`` with ``CompressionTypes.AUTO`` gives
  back every record, for none, gzip and zlib (``.deflate``) shards, with and without index
  sidecars;
- index sidecars are listed in the manifest, checked by verify, and removed by retention.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.io.filesystem import CompressionTypes

import beam_tfrecords as btf
from beam_tfrecords.pipelines.verify import verify_path
from beam_tfrecords.sinks import ownership
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.transforms.proto import example_pb2

FEATURES = {"id": {"type": "int64"}, "name": {"type": "string"}}
SPLITS = {"key": "id", "train": 70, "eval": 30}
N = 120


def rows() -> list[dict]:
    return [{"id": i, "name": f"row-{i}"} for i in range(N)]


def build(out: Path, version: str, compression: str = "none", index: bool = False,
          keep_versions: int = 5) -> Path:
    with beam.Pipeline() as p:
        _ = p | beam.Create(rows()) | btf.WriteTFRecordDataset(
            output=str(out), name="ds", features=FEATURES, splits=SPLITS,
            compression=compression, version=version, index=index,
            keep_versions=keep_versions,
            shard_size={"target": "1KB", "min": "512B", "max": "2KB"})  # several shards
    return out / version


def example_id(record: bytes) -> int:
    return example_pb2.Example.FromString(record).features.feature["id"].int64_list.value[0]


def beam_read_split_glob(version: Path, split: str, tmp: Path) -> list[int]:
    """The ids Beam's ReadFromTFRecord with AUTO compression reads from ``<split>/*``."""
    out = tmp / f"beam-{split}-{len(list(tmp.iterdir()))}"
    with beam.Pipeline() as p:
        _ = (p | beam.io.ReadFromTFRecord(str(version / split / "*"),
                                          compression_type=CompressionTypes.AUTO)
             | beam.Map(example_id) | beam.io.WriteToText(str(out)))
    return [int(line) for f in tmp.glob(out.name + "*") for line in f.read_text().split()]


@pytest.fixture(scope="module")
def versions(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("out")
    built = {c: build(out / c, "v1", c) for c in ("none", "gzip", "zlib")}
    built["index"] = build(out / "index", "v1", index=True)
    return built


@pytest.mark.parametrize("kind,suffix", [("none", ".tfrecord"), ("gzip", ".tfrecord.gz"),
                                         ("zlib", ".tfrecord.deflate"),
                                         ("index", ".tfrecord")])
@pytest.mark.slow
def test_beam_auto_compression_reads_every_split_glob(versions, kind, suffix, tmp_path):
    version = versions[kind]
    manifest = json.loads((version / "manifest.json").read_text())
    everything = []
    for split, info in manifest["splits"].items():
        files = sorted(os.listdir(version / split))
        assert files and all(f.endswith(suffix) for f in files), files  # shards only
        assert len(files) == len(info["shards"]) >= 1
        got = beam_read_split_glob(version, split, tmp_path)
        assert len(got) == info["records"]
        everything += got
    assert sorted(everything) == list(range(N))


def test_index_sidecars_live_in_their_own_tree_listed_by_the_manifest(versions):
    version = versions["index"]
    manifest = json.loads((version / "manifest.json").read_text())
    for split, info in manifest["splits"].items():
        for shard in info["shards"]:
            name = shard["path"].rsplit("/", 1)[1]
            assert shard["path"] == f"{split}/{name}"
            assert shard["index"] == f"index/{split}/{name}.index"
            lines = (version / shard["index"]).read_text().splitlines()
            data = (version / shard["path"]).read_bytes()
            position = 0
            for line in lines:  # DALI's tfrecord2idx format: "offset length", framing included
                offset, length = map(int, line.split())
                assert offset == position
                position += length
            assert len(lines) == shard["records"] and position == len(data)
    assert all(c.ok for c in verify_path(str(version)))


@pytest.mark.slow
def test_verify_checks_the_index_sidecars(tmp_path):
    version = build(tmp_path / "out", "v1", index=True)
    manifest = json.loads((version / "manifest.json").read_text())
    shard = manifest["splits"]["train"]["shards"][0]
    index = version / shard["index"]
    lines = index.read_text().splitlines()
    index.write_text("".join(f"{line}\n" for line in lines[:-1]))
    problems = [p for c in verify_path(str(version)) for p in c.problems]
    assert problems == [f"index {index} has {len(lines) - 1} lines for {len(lines)} records"]
    first, length = lines[1].split()
    index.write_text("".join(f"{line}\n" for line in
                             [lines[0], f"{int(first) + 1} {length}", *lines[2:]]))
    problems = [p for c in verify_path(str(version)) for p in c.problems]
    assert len(problems) == 1 and "line 2" in problems[0]
    index.unlink()
    problems = [p for c in verify_path(str(version)) for p in c.problems]
    assert problems == [f"index {index} is missing"]


@pytest.mark.slow
def test_retention_and_cleanup_know_the_index_tree(tmp_path):
    out = tmp_path / "out"
    first = build(out, "v1", index=True)
    assert (first / "index").is_dir()
    build(out, "v2", index=True, keep_versions=1)
    assert not first.exists()  # every file it listed went, sidecars too, then its folders
    state = ownership.scan(str(out))
    (entry,) = state.committed
    listed = ownership.listed_by_manifest(entry)
    assert [f for f in entry.files if f.startswith("index/")] and all(
        f in listed for f in entry.files if f.startswith("index/"))
    # A build's leftovers: its sidecars are files it writes, someone else's are not, and no
    # build writes a .zlib shard or a sidecar in a split folder.
    leftover = ownership.Entry("v3", ("index/train/ds-00000-of-00002.tfrecord.index",
                                      "index/train/notes.txt",
                                      "train/ds-00000-of-00002.tfrecord.deflate",
                                      "train/ds-00000-of-00002.tfrecord.deflate.index",
                                      "train/ds-00001-of-00002.tfrecord.zlib"))
    assert ownership.written_by_build(leftover) == [
        "index/train/ds-00000-of-00002.tfrecord.index",
        "train/ds-00000-of-00002.tfrecord.deflate"]


def test_zlib_shards_are_named_for_beam_and_read_as_zlib(versions):
    version = versions["zlib"]
    (shard, *_) = sorted((version / "train").iterdir())
    assert shard.name.endswith(".tfrecord.deflate")
    assert tff.compression_from_name(shard.name) == tff.ZLIB
    assert tff.compression_from_name("x.tfrecord.zlib") is None  # not a name we write
    with shard.open("rb") as handle:
        assert len(list(tff.iter_records(handle, tff.ZLIB))) > 0
    # Beam's own name-based choice: .deflate means DEFLATE, which reads ZLIB streams.
    assert CompressionTypes.detect_compression_type(str(shard)) == CompressionTypes.DEFLATE
