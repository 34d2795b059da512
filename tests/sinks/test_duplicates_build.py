"""Duplicates and leaks in real builds: the manifest's ``duplicates`` against a
``collections.Counter`` over the records read back from the committed shards, on rows with
planted duplicates within a split and planted leaks across splits (each row names its split,
which is not a feature, so one Example can land in two splits) -- unshuffled in-process and
seeded on two worker processes, the same counts both ways; a sampled repeated record shows
in report.html as escaped text."""

from __future__ import annotations

import json
import pathlib
import zlib

import apache_beam as beam
import crc32c
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from beam_tfrecords_tests_helpers import HOSTILE, duplicate_counts, read_records, shard_paths

import beam_tfrecords as btf
from beam_tfrecords.sinks.format import duplicates as dup
from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
from beam_tfrecords.transforms.codec.specs import as_feature_specs

pytestmark = pytest.mark.e2e  # whole builds

FEATURES = {"a": {"type": "int64"}, "b": {"type": "string"}}
RUNS = {
    "unshuffled-in-process": ([], None),
    "seeded-multi-processing-2": (["--direct_running_mode=multi_processing",
                                   "--direct_num_workers=2"], 7),
}


def _sampled_hostile_row() -> dict:
    """A row holding a hostile string whose Example's fingerprint is sampled (its bytes kept
    for the report): found by trying values of ``a``, one in 4,096 is."""
    encoder = ExampleEncoder(as_feature_specs(FEATURES))
    for a in range(10**6):
        row = {"a": a, "b": HOSTILE[0]}
        record = encoder.encode(row)
        fp = dup.fingerprints([crc32c.crc32c(record)], [zlib.crc32(record)], [len(record)])
        if int(fp[0]) < dup.SAMPLE_BELOW:
            return row
    raise AssertionError("no sampled value of a")


def _rows() -> list[dict]:
    rows = [{"a": i, "b": f"v{i % 7}", "part": "train" if i < 200 else "eval"}
            for i in range(240)]
    rows += [dict(r) for r in rows[:20]] + [dict(r) for r in rows[5:10]]  # train duplicates
    rows += [r | {"part": "train"} for r in rows[200:210]]  # eval records in train too
    rows += [r | {"part": "eval"} for r in rows[30:35]]  # train records in eval too
    hostile = _sampled_hostile_row()
    rows += [hostile | {"part": "train"}] * 2 + [hostile | {"part": "eval"}]
    return rows


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, pathlib.Path]:
    rows = _rows()
    done = {}
    for name, (flags, seed) in RUNS.items():
        out = tmp_path_factory.mktemp(name)
        with beam.Pipeline(options=PipelineOptions(flags)) as p:
            _ = p | beam.Create(rows) | btf.WriteTFRecordDataset(
                str(out), "dupes", features=FEATURES,
                splits={"field": "part", "names": ["train", "eval"]}, version="v1",
                shuffle_seed=seed, shard_size={"target": "2KB", "min": "1KB", "max": "4KB"},
                validate=False)
        done[name] = out / "v1"
    return done


def _manifest(version: pathlib.Path) -> dict:
    return json.loads((version / "manifest.json").read_text())


def _reference(version: pathlib.Path) -> dict:
    manifest = _manifest(version)
    return duplicate_counts({split: [record for path in shard_paths(version, manifest, split)
                                     for record in read_records(path)]
                             for split in manifest["splits"]})


@pytest.mark.parametrize("run", RUNS)
def test_counts_are_those_of_a_counter_over_the_committed_records(builds, run):
    found = _manifest(builds[run])["duplicates"]
    want = _reference(builds[run])
    assert {k: found[k] for k in want} == want
    # what was planted: 20 + 5 train rows again and the hostile row twice; 10 eval rows
    # and the hostile one in train, 5 train rows and the hostile one in eval
    assert want["splits"]["train"]["duplicates"] == 26
    assert want["splits"]["eval"]["duplicates"] == 0
    assert want["in_several_splits"] == 16
    assert want["splits"]["eval"]["leaked"] == 16 and want["splits"]["train"]["leaked"] == 17


def test_both_runners_and_orders_give_the_same_document(builds):
    first, second = (_manifest(v)["duplicates"] for v in builds.values())
    assert first == second
    assert first["examples"] and len(first["examples"]) <= dup.EXAMPLES_KEPT


def test_the_sampled_record_is_an_example_and_shows_escaped_in_the_report(builds):
    version = builds["unshuffled-in-process"]
    examples = _manifest(version)["duplicates"]["examples"]
    (hostile,) = [e for e in examples if "preview" in e]
    assert hostile["copies"] == {"eval": 1, "train": 2}
    assert HOSTILE[0] in hostile["preview"]
    page = (version / "report.html").read_text()
    assert "<h2>Duplicates and leaks</h2>" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script" not in page
