"""The sink under real runners: many bundles, tiny size bands, both compressions.

DirectRunner in multi_threading mode with 8 workers makes 8 writer bundles in one process
(the local runners make one bundle per worker, NOTES.md); PortableRunner with the embedded job
service speaks the protocol Flink and Dataflow use (its job service runs each stage as one
bundle), with both compressions in one pipeline; DirectRunner in-process completes the set.
Worker processes write bundles in tests/e2e/test_shuffle_runners.py (2 and 4),
test_gcs_build.py (3, unshuffled), tests/pipelines/test_api.py and test_kill.py. Every run
must satisfy the band rule, match its manifest, be readable by TensorFlow, and hold exactly
the same records as the others.
"""

from __future__ import annotations

import json
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from beam_tfrecords_tests_helpers import (
    add_build,
    checked_records,
    demo_csv_parts,
    duplicate_counts,
)

from beam_tfrecords.pipelines.config import parse_config
from beam_tfrecords.sinks.format import tfrecord_format as tff

pytestmark = pytest.mark.e2e  # whole builds through the console script or a runner

MIN, MAX = 12_000, 40_000

RUNNERS = {
    "in_process": [],
    "multi_threading_8": ["--direct_running_mode=multi_threading", "--direct_num_workers=8"],
    "portable": ["--runner=PortableRunner", "--job_endpoint=embed",
                 "--environment_type=LOOPBACK"],
}


# The runner that runs both compressions; the others show every runner writes the same
# records, and the band holds under many bundles.
BOTH_COMPRESSIONS = ("portable",)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> str:
    """The demo rows cut into 40 CSV files, so reads spread over workers."""
    return demo_csv_parts(tmp_path_factory.mktemp("inputs"))


def tiny_config(compression: str, output: str):
    return parse_config({
        "name": "tiny",
        "source": {"format": "csv", "path": "unused"},
        "features": {"feature0": {"type": "int64"}, "feature1": {"type": "int64"},
                     "feature2": {"type": "string"}, "feature3": {"type": "float"}},
        "splits": {"key": "id", "train": 80, "eval": 20},
        "output": {"path": output, "compression": compression,
                   "shard_size": {"target": "20KB", "min": MIN, "max": MAX}},
    })


@pytest.fixture(scope="module")
def builds(inputs, tmp_path_factory):
    """One pipeline per runner, holding a build per compression it runs:
    ``{(runner, compression): (folder, manifest, the pipeline's sink counters)}``."""
    out = {}
    for runner, args in RUNNERS.items():
        p = beam.Pipeline(options=PipelineOptions(args))
        folders = {}
        for compression in (tff.NONE, tff.GZIP) if runner in BOTH_COMPRESSIONS else (tff.NONE,):
            folder = folders[compression] = tmp_path_factory.mktemp(f"{runner}-{compression}")
            add_build(p, f"Build-{compression}", tiny_config(compression, str(folder)), inputs)
        result = p.run()
        result.wait_until_finish()
        counters = {c.key.metric.name: c.committed for c in result.metrics().query(
            MetricsFilter().with_namespace("tfrecord_sink"))["counters"]}
        for compression, folder in folders.items():
            manifest = json.loads((folder / "v" / "manifest.json").read_text())
            out[runner, compression] = folder, manifest, counters
    return out


def shard_records(folder, manifest):
    by_split = {}
    for split, info in manifest["splits"].items():
        records = Counter()
        for shard in info["shards"]:
            records.update(checked_records(folder / "v" / shard["path"], shard))
        by_split[split] = records
    return by_split


@pytest.mark.parametrize("runner,compression", [("multi_threading_8", tff.NONE),
                                                ("portable", tff.NONE),
                                                ("portable", tff.GZIP)])
def test_band_rule_and_manifest(builds, runner, compression):
    folder, manifest, counters = builds[runner, compression]
    if runner == "multi_threading_8":
        assert counters["bundles_written"] >= 8
    assert manifest["counts"] == {"read": 10000, "written": 10000, "rejected": 0,
                                  "unread": {"files": 0, "bytes": 0, "rows": 0}}
    for split, info in manifest["splits"].items():
        sizes = [s["bytes"] for s in info["shards"]]
        assert split == "eval" or len(sizes) > 1  # train holds ~4x eval; both span shards raw
        assert sum(not MIN <= size <= MAX for size in sizes) <= 1, (split, sizes)
    shard_records(folder, manifest)


def test_runners_write_the_same_records(builds):
    """... and count the same duplicates and leaks, those of Counters over the records."""
    reference = None
    for (runner, compression), (folder, manifest, _) in sorted(builds.items()):
        records = shard_records(folder, manifest)
        if reference is None:
            reference = records
        assert records == reference, (runner, compression)
        want = duplicate_counts({s: list(c.elements()) for s, c in records.items()})
        assert {k: manifest["duplicates"][k] for k in want} == want, (runner, compression)


def test_tensorflow_reads_every_shard(builds, read_with_tf):
    for (runner, compression), (folder, manifest, _) in sorted(builds.items()):
        files = [folder / "v" / s["path"]
                 for info in manifest["splits"].values() for s in info["shards"]]
        parsed = read_with_tf(files, spec=folder / "v" / "feature_spec.json",
                              compression=compression)
        assert parsed["count"] == 10000, (runner, compression)
