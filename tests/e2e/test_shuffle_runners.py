"""Seeded shuffle on every runner we claim: the same shard files, byte for byte.

Four runners (Beam's direct runner in-process and with 2 worker processes, the command line's
runner with 4 worker processes forked from its server, and the PortableRunner with the
embedded job service -- the protocol Flink and Dataflow speak), on 1,000 rows and a size band
small enough for many shards per split: the rows as one file read in ranges on all four
runners, and in 40 files with each compression on two runners
(in-process and another: every runner appears with each way of spreading the input). Every
build of a compression must write the same files with the same bytes, and the manifest the
same seed and digest; TensorFlow reads them. A runner's builds share one pipeline (each under
its own label), so its worker processes start once.
"""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from beam_tfrecords_tests_helpers import add_build, checked_records, demo_csv_parts

from beam_tfrecords.pipelines.config import parse_config
from beam_tfrecords.pipelines.runners import runner_for
from beam_tfrecords.sinks.format import tfrecord_format as tff

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

ROWS = 1000  # the demo's first: worker processes, not rows, are what these builds cost
TARGET, MIN, MAX = 2000, 1200, 4000  # bytes: some 40 shards in train, 10 in eval
RANGE = 2000  # bytes: the one file's 37 kB are read in about 19 ranges
SEED = 20261124

RUNNERS = {
    "in_process": [],
    "multi_processing_2": ["--direct_running_mode=multi_processing", "--direct_num_workers=2"],
    # On the command line's runner (pipelines/runners.runner_for: workers forked from one
    # server), as a build with 4 worker processes runs; Beam's own 2-worker one is above.
    "multi_processing_4": ["--direct_running_mode=multi_processing", "--direct_num_workers=4"],
    "portable": ["--runner=PortableRunner", "--job_endpoint=embed",
                 "--environment_type=LOOPBACK"],
}
COMPRESSIONS = (tff.NONE, tff.GZIP, tff.ZLIB)
# The runners each compression's 40-file build runs on: in-process and one other.
PAIRS = {tff.NONE: ("in_process", "multi_processing_2"), tff.GZIP: ("in_process", "portable"),
         tff.ZLIB: ("in_process", "multi_processing_4")}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[str, str]:
    """The rows cut into 40 CSV files, so reads spread over workers, and as one file (globs)."""
    return (demo_csv_parts(tmp_path_factory.mktemp("parts"), first=ROWS),
            demo_csv_parts(tmp_path_factory.mktemp("one"), parts=1, first=ROWS))


def tiny_config(compression, out, split_bytes="64MiB"):
    return parse_config({
        "name": "tiny",
        "source": {"format": "csv", "path": "unused", "split_bytes": split_bytes},
        "features": {"feature0": {"type": "int64"}, "feature1": {"type": "int64"},
                     "feature2": {"type": "string"}, "feature3": {"type": "float"}},
        "splits": {"key": "id", "train": 80, "eval": 20},
        "output": {"path": str(out), "compression": compression,
                   "shard_size": {"target": TARGET, "min": MIN, "max": MAX},
                   "shuffle": {"seed": SEED}},
    })


@pytest.fixture(scope="module")
def runs(inputs, tmp_path_factory):
    """Every build of the module, one pipeline per runner (its worker processes start once):
    the 40 files in each compression the runner is paired with, and the same rows as one file
    read in ranges, which spread over the workers.
    ``{(runner, "files" | "one_file", compression): (folder, manifest)}``."""
    parts, one = inputs
    out = {}
    for runner, args in RUNNERS.items():
        options = PipelineOptions(args)
        p = beam.Pipeline(runner=runner_for(options) if runner == "multi_processing_4" else None,
                          options=options)
        folders = {}
        for compression, runners in PAIRS.items():
            if runner in runners:
                folders["files", compression] = tmp_path_factory.mktemp(f"{runner}-{compression}")
                add_build(p, f"Files-{compression}",
                          tiny_config(compression, folders["files", compression]), parts)
        folders["one_file", tff.NONE] = tmp_path_factory.mktemp(f"one-file-{runner}")
        add_build(p, "OneFile", tiny_config(tff.NONE, folders["one_file", tff.NONE], RANGE), one)
        p.run().wait_until_finish()
        for key, folder in folders.items():
            out[(runner, *key)] = folder, json.loads((folder / "v" / "manifest.json").read_text())
    return out


@pytest.fixture(scope="module")
def builds(runs):
    """The 40-file builds: ``{(runner, compression): (folder, manifest)}``."""
    return {(runner, compression): built for (runner, kind, compression), built in runs.items()
            if kind == "files"}


@pytest.fixture(scope="module")
def one_file_builds(runs):
    """The one-file builds, on every runner: ``{runner: (folder, manifest)}``."""
    return {runner: built for (runner, kind, _), built in runs.items() if kind == "one_file"}


def files_of(folder):
    version = folder / "v"
    return {str(p.relative_to(version)): p.read_bytes()
            for p in sorted(version.glob("*/*.tfrecord*"))}


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_every_runner_writes_the_same_bytes(builds, compression):
    folder, manifest = builds["in_process", compression]
    reference = files_of(folder)
    assert len(reference) >= 4  # several shards
    for split, info in manifest["splits"].items():
        sizes = [s["bytes"] for s in info["shards"]]
        assert len(sizes) > 1 or split == "eval", (split, sizes)
        assert sum(not MIN <= s <= MAX for s in sizes) <= 1, (split, sizes)
        for shard in info["shards"]:
            checked_records(folder / "v" / shard["path"], shard)
    assert manifest["shuffle"] == {"seed": SEED}
    assert manifest["counts"]["written"] == ROWS
    for runner in PAIRS[compression]:
        other_folder, other = builds[runner, compression]
        assert files_of(other_folder) == reference, runner
        assert other["shards_digest"] == manifest["shards_digest"], runner
        assert other["splits"] == manifest["splits"], runner


def test_compressions_hold_the_same_records_in_the_same_order(builds):
    orders = {}
    for compression in COMPRESSIONS:
        folder, manifest = builds["in_process", compression]
        orders[compression] = {split: [r for s in info["shards"]
                                       for r in checked_records(folder / "v" / s["path"], s)]
                               for split, info in manifest["splits"].items()}
    assert orders[tff.NONE] == orders[tff.GZIP] == orders[tff.ZLIB]


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_tensorflow_reads_the_shuffled_shards(builds, read_with_tf, compression):
    folder, manifest = builds[PAIRS[compression][1], compression]
    files = [folder / "v" / s["path"] for info in manifest["splits"].values()
             for s in info["shards"]]
    parsed = read_with_tf(files, spec=folder / "v" / "feature_spec.json",
                          compression=compression)
    assert parsed["count"] == ROWS


def test_one_file_in_ranges_writes_the_bytes_of_forty_files_on_every_runner(builds,
                                                                            one_file_builds):
    """A seeded build's shards depend on its records only: one file read in ranges -- by one
    process, by 2 or 4 worker processes, or by the portable runner's workers -- writes the
    bytes the 40 files write in-process, and the manifest the same shard list."""
    folder, manifest = builds["in_process", tff.NONE]
    reference = files_of(folder)
    for runner, (other_folder, other) in one_file_builds.items():
        assert files_of(other_folder) == reference, runner
        assert other["splits"] == manifest["splits"], runner
        assert other["shards_digest"] == manifest["shards_digest"], runner
        assert other["counts"] == manifest["counts"], runner
