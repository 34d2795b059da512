"""Duplicates counted by a configured key (``ToExamples(duplicate_key=...)``,
``output.duplicate_key``): records whose key values are equal are duplicates, and leaks
across splits, whatever else they hold -- checked against ``collections.Counter`` s over the
key values read back from the committed shards, through the Python API and the command
line; the config refuses a key it cannot count."""

from __future__ import annotations

import ast
import json
import pathlib

import apache_beam as beam
import pytest
from beam_tfrecords_tests_helpers import duplicate_counts, read_examples, shard_paths

import beam_tfrecords as btf
from beam_tfrecords.errors import UserError
from beam_tfrecords.pipelines import cli
from beam_tfrecords.pipelines.config import parse_config
from beam_tfrecords.sinks.format import duplicates as dup
from beam_tfrecords.transforms.codec.splits import key_bytes
from beam_tfrecords.transforms.version_report import KeyPreview

FEATURES = {"a": {"type": "int64"}, "b": {"type": "string"}}


def _rows() -> list[dict]:
    rows = [{"a": i, "b": f"v{i}", "part": "train" if i < 100 else "eval"} for i in range(120)]
    rows += [{"a": i, "b": "again", "part": "train"} for i in range(10)]  # other bytes
    rows += [{"a": i, "b": "moved", "part": "eval"} for i in range(20, 25)]  # train keys
    rows += [{"a": 110, "b": "back", "part": "train"}]  # an eval key in train
    return rows


def _key_reference(version: pathlib.Path, key: str) -> dict:
    manifest = json.loads((version / "manifest.json").read_text())
    values = {split: [read[key][1][0] for path in shard_paths(version, manifest, split)
                      for read in read_examples(path)]
              for split in manifest["splits"]}
    return duplicate_counts(values)


@pytest.mark.slow
def test_a_key_counts_records_with_equal_keys_and_other_bytes(tmp_path):
    out = tmp_path / "out"
    with beam.Pipeline() as p:
        _ = (p | beam.Create(_rows())
             | btf.ToExamples(FEATURES, splits={"field": "part", "names": ["train", "eval"]},
                              duplicate_key="a")
             | btf.WriteTFRecordDataset(str(out), "keys", version="v1", validate=False))
    version = out / "v1"
    found = json.loads((version / "manifest.json").read_text())["duplicates"]
    want = _key_reference(version, "a")
    assert {k: found[k] for k in want} == want
    assert found["method"] == "key:a"
    assert "compared by the value of <code>a</code>" in (version / "report.html").read_text()
    # planted: 10 train keys again; 5 train keys in eval; one eval key in train
    assert want["splits"]["train"]["duplicates"] == 10
    assert want["in_several_splits"] == 6
    # every record's bytes differ from every other's: only the key makes these duplicates
    assert want["splits"]["eval"]["leaked"] == 6 and want["splits"]["train"]["leaked"] == 6


def test_a_key_preview_reads_the_key_back():
    preview = KeyPreview(("meta", "id"))
    assert preview.method == dup.key_method(("meta", "id")) == "key:meta.id"
    assert ast.literal_eval(preview(key_bytes(42))) == {"meta.id": 42}
    assert ast.literal_eval(preview(key_bytes("<b>x</b>"))) == {"meta.id": "<b>x</b>"}


def test_the_config_refuses_a_key_it_cannot_count():
    base = {"name": "k", "source": {"format": "csv", "path": "x.csv"},
            "features": {"id": {"type": "int64"}}}
    config = parse_config({**base, "output": {"path": "o", "duplicate_key": "id"}})
    assert config.output.duplicate_key == ("id",)
    assert config.resolved()["output"]["duplicate_key"] == "id"
    assert "duplicate_key" not in parse_config({**base, "output": {"path": "o"}}
                                               ).resolved()["output"]
    for output, reason in (({"path": "o", "duplicate_key": "id", "statistics": False},
                            "needs output.statistics: true"),
                           ({"path": "o", "duplicate_key": ""}, "must be a field name")):
        with pytest.raises(UserError, match=reason):
            parse_config({**base, "output": output})


@pytest.mark.slow
def test_the_command_line_counts_by_the_configured_key(tmp_path):
    data = tmp_path / "in.csv"
    lines = ["id,name,part"] + [f"{i},n{i},{'train' if i < 40 else 'eval'}" for i in range(50)]
    lines += [f"{i},again,train" for i in range(5)] + ["45,moved,train"]
    data.write_text("\n".join(lines) + "\n")
    config = tmp_path / "c.yaml"
    config.write_text(
        "name: k\nsource: {format: csv, path: in.csv}\n"
        "features: {id: {type: int64}, name: {type: string}}\n"
        "splits: {field: part, names: [train, eval]}\n"
        f"output: {{path: {tmp_path / 'out'}, duplicate_key: id}}\n")
    assert cli.main(["build", "--config", str(config), "--input", str(data),
                     "--version", "v1"]) == 0
    version = tmp_path / "out" / "v1"
    found = json.loads((version / "manifest.json").read_text())["duplicates"]
    want = _key_reference(version, "id")
    assert {k: found[k] for k in want} == want
    assert found["method"] == "key:id"
    assert want["splits"]["train"]["duplicates"] == 5 and want["in_several_splits"] == 1
