"""``missing: empty``: a missing value is stored as an empty list, so that every record carries
every feature (DALI needs that; the PyTorch ``tfrecord`` loader raises KeyError on an absent
key), and TensorFlow parses it with the exported spec as an empty VarLen / Ragged value."""

from __future__ import annotations

import base64
import json

import pytest

from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F
from beam_tfrecords.transforms.codec.feature_spec import tf_parse_spec
from beam_tfrecords.transforms.codec.specs import ConfigError, parse_features

SPECS = [F("id", "int64"),
         F("age", "int64", missing="empty"),
         F("score", "float", missing="empty", nan="missing"),
         F("emb", "float", (3,), missing="empty"),
         F("name", "string", missing="empty"),
         F("tags", "string", (-1,), missing="empty"),
         F("grid", "int64", (2, 2), missing="empty"),
         F("nested", "int64", (-1, -1), missing="empty")]
FULL = {"age": 7, "score": 0.5, "emb": [1.0, 2.0, 3.0], "name": "x", "tags": ["a", "b"],
        "grid": [[1, 2], [3, 4]], "nested": [[1], [2, 3]]}
ROWS = [{"id": 0, **FULL}, {"id": 1}, {"id": 2, "score": float("nan"), "tags": []},
        {"id": 3, **{k: None for k in FULL}}]


def test_the_config_parser_accepts_empty_and_names_it_in_errors():
    (spec,) = parse_features({"x": {"type": "int64", "missing": "empty"}})
    assert spec.missing == "empty"
    with pytest.raises(ConfigError, match="empty"):
        parse_features({"x": {"type": "int64", "missing": "blank"}})
    with pytest.raises(ConfigError, match="never be used"):
        parse_features({"x": {"type": "int64", "missing": "empty", "default": 0}})


def test_tensorflow_parses_an_empty_list_as_an_empty_value(tmp_path, read_with_tf):
    encoder = ExampleEncoder(SPECS)
    shard = tmp_path / "records.tfrecord"
    with open(shard, "wb") as out, tff.TFRecordWriter(out) as writer:
        for row in ROWS:
            writer.write(encoder.encode(row))
    spec = tmp_path / "feature_spec.json"
    doc = tf_parse_spec(SPECS)
    assert doc["features"]["age"] == {"type": "VarLenFeature", "dtype": "int64"}
    spec.write_text(json.dumps(doc))
    parsed = read_with_tf([shard], spec=spec)
    assert parsed["count"] == len(ROWS)
    full, *missing = parsed["records"]
    assert full["age"] == [7] and full["score"] == [0.5] and full["emb"] == [1.0, 2.0, 3.0]
    assert [base64.b64decode(v) for v in full["name"]] == [b"x"]
    assert [base64.b64decode(v) for v in full["tags"]] == [b"a", b"b"]
    assert full["grid"] == [[1, 2], [3, 4]] and full["nested"] == [[1], [2, 3]]
    for record in missing:
        assert {k: record[k] for k in FULL} == {k: [] for k in FULL}, record
