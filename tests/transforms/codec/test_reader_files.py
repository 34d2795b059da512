"""The files other readers need, built from the feature specs and the manifest (pure parts).

tests/consumers/test_tfds_ray_loaders.py proves them with TFDS, tensorflow_metadata and Ray; these
cases pin
the decisions behind them: what TFDS can and cannot be told, how a name nests, how a ragged
feature's parts are described, and that names of any kind survive the text format.
"""

from __future__ import annotations

import json

import pytest

from beam_tfrecords.sinks.format.tfds_info import tfds_dataset_info
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.codec.reader_files import image_features, reader_documents
from beam_tfrecords.transforms.codec.tfds_features import tfds_features
from beam_tfrecords.transforms.codec.tfmd_schema import schema_pbtxt

TENSOR = "tensorflow_datasets.core.features.tensor_feature.Tensor"
DICT = "tensorflow_datasets.core.features.features_dict.FeaturesDict"


def _dims(connector):
    return [int(d) for d in connector["tensor"]["shape"].get("dimensions", [])]


def _members(doc):
    return doc["featuresDict"]["features"]


SPLITS = {
    "train": {"records": 5, "bytes": 70, "shards": [
        {"path": "train/my-data.v2-00000-of-00002.tfrecord", "records": 3},
        {"path": "train/my-data.v2-00001-of-00002.tfrecord", "records": 2}]},
    "eval": {"records": 0, "bytes": 0, "shards": []},
}


def test_dataset_info_describes_our_own_shard_names():
    info, why = tfds_dataset_info(name="my-data.v2", version="20261123T000000Z",
                                  compression="none", splits=SPLITS, tool="beam-tfrecords 1")
    assert why == ""
    assert info["name"] == "my_data_v2" and info["version"] == "1.0.0"
    assert "20261123T000000Z" in info["description"]
    train, evaluation = info["splits"]
    assert train == {"name": "train", "numBytes": "70", "shardLengths": ["3", "2"],
                     "filepathTemplate": "{SPLIT}/my-data.v2-{SHARD_X_OF_Y}.tfrecord"}
    assert evaluation["shardLengths"] == []


@pytest.mark.parametrize("name, builder", [("2020", "ds_2020"), ("_x", "ds__x"),
                                           ("ok", "ok")])
def test_builder_names_are_identifiers(name, builder):
    info, _ = tfds_dataset_info(name=name, version="v", compression="none", splits={},
                                tool="t")
    assert info["name"] == builder


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
def test_compressed_shards_get_no_dataset_info(compression):
    info, why = tfds_dataset_info(name="d", version="v", compression=compression,
                                  splits=SPLITS, tool="t")
    assert info is None and compression in why and "uncompressed" in why


def test_split_names_tfds_cannot_parse_get_no_dataset_info():
    splits = {"eval.v1": {"records": 0, "bytes": 0, "shards": []}}
    info, why = tfds_dataset_info(name="d", version="v", compression="none", splits=splits,
                                  tool="t")
    assert info is None and "'eval.v1'" in why


def test_a_shard_outside_our_naming_gets_no_dataset_info():
    splits = {"train": {"records": 1, "bytes": 1, "shards": [
        {"path": "train/part-0.tfrecord", "records": 1}]}}
    info, why = tfds_dataset_info(name="d", version="v", compression="none", splits=splits,
                                  tool="t")
    assert info is None and "train/part-0.tfrecord" in why


def test_connectors_follow_the_parse_spec():
    specs = [
        FeatureSpec("id", "int64"),
        FeatureSpec("note", "string", missing="omit"),
        FeatureSpec("scores", "float", (3,)),
        FeatureSpec("maybe_scores", "float", (2, 3), missing="empty"),
        FeatureSpec("rows", "int64", (-1, 2)),
        FeatureSpec("tokens", "int64", (-1, -1, 3)),
        FeatureSpec("gaps", "bytes", (-1, 2, -1)),
    ]
    doc, why = tfds_features(specs)
    assert why == ""
    top = _members(doc)
    assert _dims(top["id"]) == [] and top["id"]["tensor"]["dtype"] == "int64"
    assert _dims(top["note"]) == [-1] and top["note"]["tensor"]["dtype"] == "string"
    assert _dims(top["scores"]) == [3] and top["scores"]["tensor"]["dtype"] == "float32"
    assert _dims(top["maybe_scores"]) == [-1, 3]
    assert _dims(top["rows"]) == [-1, 2]
    tokens = _members(top["tokens"])
    assert top["tokens"]["pythonClassName"] == DICT
    assert sorted(tokens) == ["flat_values", "row_lengths_1"]
    assert _dims(tokens["flat_values"]) == [-1, 3]  # the trailing fixed dim stays a dim
    assert _dims(tokens["row_lengths_1"]) == [-1]
    gaps = _members(top["gaps"])
    assert sorted(gaps) == ["flat_values", "row_lengths_2"]
    assert _dims(gaps["flat_values"]) == [-1]


def test_slashed_names_nest_as_tfds_flattens_them():
    doc, why = tfds_features([FeatureSpec("meta/height", "int64"),
                              FeatureSpec("meta/width", "int64"),
                              FeatureSpec("a/b/c", "float")])
    assert why == ""
    top = _members(doc)
    assert sorted(_members(top["meta"])) == ["height", "width"]
    assert _members(_members(top["a"])["b"])["c"]["pythonClassName"] == TENSOR


@pytest.mark.parametrize("names", [("meta", "meta/x"), ("meta/x", "meta"),
                                   ("tokens", "tokens/extra")])
def test_a_name_that_is_both_a_feature_and_a_parent_gets_no_tfds_features(names):
    specs = [FeatureSpec(n, "int64", (-1, -1) if n == "tokens" else ()) for n in names]
    doc, why = tfds_features(specs)
    assert doc is None and names[0].split("/")[0] in why


def test_sequence_examples_get_no_tfds_features():
    doc, why = tfds_features([FeatureSpec("x", "int64", sequence=True)])
    assert doc is None and "SequenceExample" in why


def test_image_features_only_from_an_image_folder():
    specs = [FeatureSpec("image_raw", "bytes", source=("image",)),
             FeatureSpec("label", "int64")]
    assert image_features(specs, "images") == {"image_raw"}
    assert image_features(specs, "csv") == frozenset()
    documents, why = reader_documents(specs, image_features(specs, "images"))
    features = json.loads(documents["features.json"])
    assert _members(features)["image_raw"]["pythonClassName"].endswith("Image")
    assert "image_domain" in documents["schema.pbtxt"]


def test_no_features_no_documents():
    documents, why = reader_documents([])
    assert documents == {} and "no features" in why


def test_schema_lists_every_stored_key_once():
    text = schema_pbtxt([FeatureSpec("tokens", "int64", (-1, -1)),
                         FeatureSpec("note", "string", missing="omit"),
                         FeatureSpec("id", "int64")])
    names = [line.split(": ", 1)[1] for line in text.splitlines()
             if line.startswith("  name: ")]
    assert names == ['"tokens/flat_values"', '"tokens/row_lengths_1"', '"note"', '"id"']
    note = text.split('name: "note"')[1].split("feature {")[0]
    assert "presence" not in note and "shape" not in note


def test_schema_quotes_any_name():
    text = schema_pbtxt([FeatureSpec('a "q" \\ é\n', "int64")])
    assert 'name: "a \\"q\\" \\\\ \\303\\251\\012"' in text
