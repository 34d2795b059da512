"""The whole build with input and output on gs:// (a GCS emulator on 127.0.0.1), DirectRunner.

What Cloud Storage itself reports (size, crc32c) must equal the manifest; our reader must
read every record back through storage.open_read; no staging or temporary objects remain.
The tiny-band runs write many bundles -- three worker processes (no compression), six threads
of DirectRunner's multi_threading mode (GZIP) -- so each split has several parts and shards
are composed on gs:// from more than one part.
"""

from __future__ import annotations

import csv
import json
import pathlib
from collections import Counter

import apache_beam as beam
import pytest
import yaml
from apache_beam.metrics.metric import MetricsFilter
from beam_tfrecords_tests_helpers import read_records, shard_paths

from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.config import load_config
from beam_tfrecords.runtime import storage
from beam_tfrecords.transforms.codec.splits import key_bytes

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

NOTHING_UNREAD = {"files": 0, "bytes": 0, "rows": 0}


ROOT = pathlib.Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo.yaml"
DEMO_CSV = ROOT / "configs" / "data" / "demo.csv"
TINY_BAND = {"target": "20KB", "min": "12KB", "max": "40KB"}


def expected_split_counts(config_path: pathlib.Path) -> Counter:
    config = load_config(str(config_path))
    with open(DEMO_CSV, newline="") as handle:
        return Counter(config.splits.choose(key_bytes(row["id"])) for row in csv.DictReader(handle))


@pytest.fixture
def gcs_input(gcs_emulator):
    """The demo CSV uploaded to the bucket; returns its gs:// path."""
    path = gcs_emulator.unique_prefix("input") + "/demo.csv"
    gcs_emulator.upload(path, DEMO_CSV.read_bytes())
    return path


@pytest.fixture(scope="module")
def gcs_input_files(gcs_emulator):
    """The demo CSV as 40 files (each with the header) in the bucket, shared by the module's
    tests (they only read them); returns a gs:// glob. Many inputs let each worker write a
    bundle, so each split has several tails."""
    lines = DEMO_CSV.read_bytes().splitlines(keepends=True)
    header, rows = lines[0], lines[1:]
    prefix = gcs_emulator.unique_prefix("inputs")
    part = -(-len(rows) // 40)
    for i in range(40):
        gcs_emulator.upload(f"{prefix}/demo-{i:02d}.csv",
                            header + b"".join(rows[i * part:(i + 1) * part]))
    return f"{prefix}/demo-*.csv"


@pytest.fixture
def pipeline_results(monkeypatch):
    """Every PipelineResult the build produces, for its metrics (the runner collects them
    from worker processes too)."""
    results = []
    original = beam.Pipeline.run

    def run(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        results.append(result)
        return result

    monkeypatch.setattr(beam.Pipeline, "run", run)
    return results


def counter(result, name: str) -> int:
    found = result.metrics().query(MetricsFilter().with_name(name))["counters"]
    return sum(c.committed if c.committed is not None else c.attempted for c in found)


def check_build_on_gcs(emulator, out: str, manifest: dict, config: pathlib.Path,
                       version: str = "v1") -> dict:
    """The committed version as Cloud Storage shows it; returns {split: [shard sizes]}."""
    assert manifest is not None, "the build did not commit"
    version_dir = storage.join(out, version)
    assert emulator.blob(storage.join(out, "LATEST")) is not None
    assert storage.read_text(storage.join(out, "LATEST")).strip() == version
    assert emulator.blob(storage.join(version_dir, "manifest.json")) is not None
    assert json.loads(storage.read_text(storage.join(version_dir, "manifest.json"))) == manifest
    assert manifest["counts"] == {"read": 10000, "written": 10000, "rejected": 0,
                                  "unread": NOTHING_UNREAD}

    expected = expected_split_counts(config)
    sizes: dict[str, list[int]] = {}
    shard_names = []
    for split, entry in manifest["splits"].items():
        records_in_split = 0
        for shard in entry["shards"]:
            path = storage.join(version_dir, shard["path"])
            blob = emulator.blob(path)
            assert blob is not None, path
            assert blob.size == shard["bytes"], path
            assert blob.crc32c == shard["crc32c"], path  # GCS's own crc32c of the object
            count = len(read_records(path, manifest["compression"]))
            assert count == shard["records"], path
            records_in_split += count
            shard_names.append(emulator.name_of(path))
        assert records_in_split == entry["records"] == expected[split], split
        sizes[split] = [s["bytes"] for s in entry["shards"]]

    everything = emulator.names(out)
    assert not [n for n in everything if "/.staging/" in n or ".staging" in n.split("/")]
    assert not [n for n in everything if ".tmp-" in n]
    assert set(everything) == {emulator.name_of(storage.join(out, "LATEST")),
                               emulator.name_of(storage.join(version_dir, "manifest.json")),
                               emulator.name_of(storage.join(version_dir, "feature_spec.json")),
                               emulator.name_of(storage.join(version_dir,
                                                             ".beam-tfrecords-build")),
                               # schema.pbtxt, and the TFDS files of an uncompressed version
                               *(emulator.name_of(storage.join(version_dir, name))
                                 for name in manifest["metadata_files"]),
                               # statistics, the gate's anomalies.json, report.html
                               *(emulator.name_of(storage.join(version_dir, e["path"]))
                                 for e in manifest.get("statistics", {}).values()),
                               *(emulator.name_of(storage.join(version_dir, manifest[k]["path"]))
                                 for k in ("gate", "report") if k in manifest),
                               *shard_names}
    return sizes


def test_build_from_and_to_gcs(gcs_emulator, gcs_input):
    out = gcs_emulator.unique_prefix("build")
    manifest = cli.run_build(["--config", str(DEMO), "--input", gcs_input, "--output", out,
                              "--version", "v1"])
    sizes = check_build_on_gcs(gcs_emulator, out, manifest, DEMO)
    assert {split: len(s) for split, s in sizes.items()} == {"train": 1, "eval": 1}
    assert manifest["inputs"]["pattern"] == gcs_input


# The bundles of each tiny-band build: worker processes and worker threads both write them.
MANY_BUNDLES = {"none": ("multi_processing", 3), "gzip": ("multi_threading", 6)}


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_tiny_band_many_bundles_composes_parts_on_gcs(gcs_emulator, gcs_input_files, tmp_path,
                                                      pipeline_results, compression,
                                                      read_with_tf):
    mode, workers = MANY_BUNDLES[compression]
    raw = yaml.safe_load(DEMO.read_text())
    raw["output"]["shard_size"] = dict(TINY_BAND)
    raw["output"]["compression"] = compression
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))  # split order matters
    out = gcs_emulator.unique_prefix("tiny")
    manifest = cli.run_build(["--config", str(config), "--input", gcs_input_files, "--output", out,
                              "--version", "v1", f"--direct_running_mode={mode}",
                              f"--direct_num_workers={workers}"])
    sizes = check_build_on_gcs(gcs_emulator, out, manifest, config)
    assert manifest["inputs"]["files"] == 40

    band = load_config(str(config)).output.shard_size
    for split, split_sizes in sizes.items():
        # train holds ~4x eval; gzip's eval (about 23 KB) may fit one shard
        assert len(split_sizes) > 1 or (split == "eval" and compression == "gzip"), (
            split, split_sizes)
        outside = [s for s in split_sizes if not band.min <= s <= band.max]
        assert len(outside) <= 1, (split, split_sizes)  # at most the remainder

    (result,) = pipeline_results
    assert counter(result, "bundles_written") >= workers
    parts, shards = counter(result, "parts_written"), counter(result, "shards_finalized")
    assert shards == sum(len(s) for s in sizes.values())
    # More staged parts than shards: at least one shard was composed from several parts.
    assert parts > shards, (parts, shards)

    # TensorFlow reads every composed shard (copied down byte for byte).
    local = []
    version_dir = storage.join(out, "v1")
    for entry in manifest["splits"].values():
        for shard in entry["shards"]:
            target = tmp_path / shard["path"].replace("/", "_")
            with storage.open_read(storage.join(version_dir, shard["path"])) as handle:
                target.write_bytes(handle.read())
            local.append(target)
    spec = tmp_path / "feature_spec.json"
    spec.write_text(storage.read_text(storage.join(version_dir, "feature_spec.json")))
    assert read_with_tf(local, spec=spec, compression=compression)["count"] == 10000


@pytest.mark.parametrize("config_name", ["images", "images_manifest", "parquet"])
def test_other_sources_on_gcs(gcs_emulator, sample_builds, config_name):
    """Image folders and manifests are listed and fingerprinted on gs://, Parquet is read
    from it; the records match a local build of the same data, byte for byte (the run's
    shared build of the sample config, as configured)."""
    data = ROOT / "configs" / "data"
    prefix = gcs_emulator.unique_prefix(config_name)
    for path in data.rglob("*"):
        if path.is_file() and (path.suffix in (".png", ".bmp", ".parquet")
                               or path.name == "images.csv"):
            gcs_emulator.upload(f"{prefix}/{path.relative_to(data).as_posix()}",
                                path.read_bytes())
    config_path = ROOT / "configs" / f"{config_name}.yaml"
    local_input = str(ROOT / load_config(str(config_path)).source.path)
    remote_input = prefix + "/" + pathlib.Path(local_input).relative_to(data).as_posix()
    remote = cli.run_build(["--config", str(config_path), "--input", remote_input,
                            "--output", f"{prefix}/out", "--version", "v1"])
    local_version = sample_builds[config_name]
    local = json.loads((local_version / "manifest.json").read_text())

    def records(root: str, manifest: dict) -> dict:
        version_dir = storage.join(root, "v1")
        return {split: sorted(record for path in shard_paths(version_dir, manifest, split)
                              for record in read_records(path))
                for split in manifest["splits"]}

    assert remote["counts"] == local["counts"] and remote["counts"]["rejected"] == 0
    assert remote["inputs"]["files"] == local["inputs"]["files"]
    if config_name == "parquet":
        assert records(f"{prefix}/out", remote) == records(str(local_version.parent), local)
    else:  # image records carry their path; everything else is equal
        assert remote.get("label_vocabulary") == local.get("label_vocabulary") == [
            "cat", "dog", "fox"]
        assert {s: i["records"] for s, i in remote["splits"].items()} == {
            s: i["records"] for s, i in local["splits"].items()}


def test_a_shuffled_build_on_gcs_writes_the_bytes_of_a_local_one(gcs_emulator, gcs_input_files,
                                                                 tmp_path):
    """Runs, their .keys sidecars and ranged reads on gs://: two worker processes there write
    the files one process writes locally, byte for byte (GZIP, several shards per split)."""
    raw = yaml.safe_load(DEMO.read_text())
    raw["output"].update(shard_size=dict(TINY_BAND), compression="gzip", shuffle={"seed": 7})
    config = tmp_path / "shuffled.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = gcs_emulator.unique_prefix("shuffled")
    remote = cli.run_build(["--config", str(config), "--input", gcs_input_files, "--output", out,
                            "--version", "v1", "--direct_running_mode=multi_processing",
                            "--direct_num_workers=2"])
    sizes = check_build_on_gcs(gcs_emulator, out, remote, config)
    assert len(sizes["train"]) > 1, sizes
    local = cli.run_build(["--config", str(config), "--input", str(DEMO_CSV), "--output",
                           str(tmp_path / "out"), "--version", "v1"])
    assert remote["shuffle"] == local["shuffle"] == {"seed": 7}
    assert remote["shards_digest"] == local["shards_digest"]
    assert remote["splits"] == local["splits"]
