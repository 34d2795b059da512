"""Tests for beam_tfrecords.pipelines.config: a full round trip and every way a config is refused.

Each refusal is a table row: a change applied to a valid config, the dotted key the message must
name, and the text that shows the bad value was echoed back.
"""

from __future__ import annotations

import copy
import json
import pathlib
import re

import pytest

from beam_tfrecords.pipelines.config import Config, ConfigError, load_config, parse_config
from beam_tfrecords.sinks.format.shard_plan import ShardSize

DELETE = object()  # a change that removes the key


def full_config() -> dict:
    """A config that sets every key the contract knows, as YAML would load it."""
    return {
        "name": "tutorial",
        "source": {
            "format": "csv",
            "path": "data/tutorial/*.csv",
            "csv": {
                "delimiter": ";",
                "quotechar": "'",
                "header": True,
                "null_values": ["", "NA"],
            },
        },
        "features": {
            "feature0": {"type": "int64"},
            "feature2": {"type": "bytes"},
            "feature3": {"type": "float", "nan": "error"},
            "pixels": {"type": "float", "shape": [28, 28]},
            "tokens": {"type": "int64", "shape": [-1]},
            "words": {"type": "string", "shape": [-1, -1], "missing": "omit"},
            "label": {"type": "int64", "source": "meta.label", "missing": "default",
                      "default": 0},
            "caption": {"type": "string", "missing": "omit"},
            "when": {"type": "int64", "unit": "ms"},
            "score": {"type": "float", "nan": "missing", "missing": "default", "default": -1.0},
            "frames": {"type": "float", "shape": [3], "sequence": True},
        },
        "splits": {"key": "id", "train": 80, "eval": 20},
        "output": {
            "path": "output/tutorial",
            "compression": "gzip",
            "shard_size": {"target": "150MB", "min": "100MB", "max": "200MB"},
            "shard_name": "part",
            "index": False,
        },
        "errors": {"max_bad_fraction": 0.01},
    }


def minimal_config() -> dict:
    return {
        "name": "demo",
        "source": {"format": "csv", "path": "in/*.csv"},
        "features": {"f": {"type": "int64"}},
        "output": {"path": "out"},
    }


def changed(raw: dict, *changes: tuple[str, object]) -> dict:
    """A deep copy of ``raw`` with each dotted ``path`` set to a value (or DELETE-d)."""
    raw = copy.deepcopy(raw)
    for path, value in changes:
        *parents, last = path.split(".")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return raw


def refused(raw) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    message = str(info.value)
    assert "\n" not in message  # one line, for scheduler logs
    return message


# --- A valid config ----------------------------------------------------------------------------

def test_full_config_parses_into_frozen_dataclasses():
    config = parse_config(full_config())
    assert isinstance(config, Config)
    assert config.name == "tutorial"
    assert config.source.format == "csv"
    assert config.source.csv.delimiter == ";"
    assert config.source.csv.quotechar == "'"
    assert config.source.csv.null_values == ("", "NA")
    names = [spec.name for spec in config.features]
    assert names == list(full_config()["features"])  # YAML order kept
    by_name = {spec.name: spec for spec in config.features}
    assert by_name["pixels"].shape == (28, 28)
    assert by_name["label"].source == ("meta", "label")
    assert by_name["label"].default == 0
    assert by_name["words"].shape == (-1, -1)
    assert by_name["frames"].sequence is True
    assert config.splits.shares == (("train", 80.0), ("eval", 20.0))
    assert config.splits.key == ("id",)
    assert config.output.compression == "gzip"
    assert config.output.shard_size == ShardSize(150 * 10**6, 100 * 10**6, 200 * 10**6)
    assert config.output.shard_name == "part"
    assert config.errors.max_bad_fraction == 0.01
    with pytest.raises(AttributeError):
        config.name = "other"  # type: ignore[misc]


def test_resolved_is_strict_json_and_stable():
    first, second = parse_config(full_config()), parse_config(full_config())
    resolved = first.resolved()
    text = json.dumps(resolved, allow_nan=False, sort_keys=True)  # strict JSON
    assert json.loads(text) == resolved
    assert resolved == second.resolved()
    assert resolved["output"]["shard_size"] == {"target": 150_000_000, "min": 100_000_000,
                                                "max": 200_000_000}
    assert re.fullmatch(r"[0-9a-f]{64}", first.sha256())
    assert first.sha256() == first.sha256() == second.sha256()


def test_minimal_config_resolves_every_default():
    config = parse_config(minimal_config())
    resolved = config.resolved()
    assert resolved["splits"] == {"shares": [["train", 100.0]], "key": [], "field": [],
                                  "null_key": "reject"}
    assert resolved["output"] == {
        "path": "out", "compression": "none",
        "shard_size": {"target": 150_000_000, "min": 100_000_000, "max": 200_000_000},
        "shard_name": "demo", "index": False,
    }
    assert resolved["source"]["csv"] == {"delimiter": ",", "quotechar": '"', "header": True,
                                         "columns": [], "null_values": [""]}
    assert resolved["errors"] == {"max_bad_fraction": 0.0, "max_unread_fraction": 0.0,
                                  "abort_window": 10_000}
    assert resolved["source"]["max_record_bytes"] == 64 << 20
    assert resolved["features"] == [{
        "name": "f", "dtype": "int64", "shape": [], "source": ["f"], "missing": "error",
        "default": None, "nan": "allow", "unit": "s", "sequence": False,
    }]


# Every value of the full config, changed to another valid value: each must change the hash.
SHA_CHANGES = [
    ("name", ("name", "tutorial2")),
    ("source.path", ("source.path", "data/other/*.csv")),
    ("csv.delimiter", ("source.csv.delimiter", "\t")),
    ("csv.quotechar", ("source.csv.quotechar", '"')),
    ("csv.header", ("source.csv.header", False), ("source.csv.columns", ["a"])),
    ("csv.null_values", ("source.csv.null_values", [""])),
    ("feature.type", ("features.feature2.type", "string")),
    ("feature.shape", ("features.pixels.shape", [28, 27])),
    ("feature.source", ("features.label.source", "meta.label2")),
    ("feature.missing", ("features.caption.missing", "error")),
    ("feature.default", ("features.label.default", 1)),
    ("feature.default_type", ("features.label.default", True)),
    ("feature.nan", ("features.feature3.nan", "allow")),
    ("feature.unit", ("features.when.unit", "s")),
    ("feature.format", ("features.when.format", "%d/%m/%Y")),
    ("feature.format_added", ("features.feature0.format", "iso8601")),
    ("feature.scale_added", ("features.feature0.scale", 2)),
    ("feature.sequence", ("features.frames.sequence", False)),
    ("feature.added", ("features.extra", {"type": "bytes"})),
    ("feature.removed", ("features.caption", DELETE)),
    ("splits.share", ("splits.train", 70), ("splits.eval", 30)),
    ("splits.key", ("splits.key", "user")),
    ("splits.key_removed", ("splits.key", DELETE)),
    ("splits.renamed", ("splits.eval", DELETE), ("splits.test", 20)),
    ("output.path", ("output.path", "output/other")),
    ("output.compression", ("output.compression", "zlib")),
    ("shard_size.target", ("output.shard_size.target", "160MB")),
    ("shard_size.min", ("output.shard_size.min", "90MB")),
    ("shard_size.max", ("output.shard_size.max", "250MB")),
    ("output.shard_name", ("output.shard_name", "data")),
    ("output.index", ("output.index", True), ("output.compression", "none")),
    ("errors.max_bad_fraction", ("errors.max_bad_fraction", 0.02)),
    ("errors.max_unread_fraction", ("errors.max_unread_fraction", 0.01)),
    ("source.max_record_bytes", ("source.max_record_bytes", "1MiB")),
]


@pytest.mark.parametrize("changes", [c[1:] for c in SHA_CHANGES], ids=[c[0] for c in SHA_CHANGES])
def test_sha256_changes_with_any_value(changes):
    base = parse_config(full_config()).sha256()
    other = parse_config(changed(full_config(), *changes))
    assert other.sha256() != base


def test_split_bytes_is_read_but_leaves_the_hash_alone():
    """How big files are cut for workers changes nothing in the output: same hash (and
    --skip-if-unchanged keeps its meaning); the default is not written into the manifest."""
    base = parse_config(full_config())
    other = parse_config(changed(full_config(), ("source.split_bytes", "1MiB")))
    assert other.source.split_bytes == 1 << 20
    assert other.sha256() == base.sha256()
    assert "split_bytes" not in base.resolved()["source"]
    with pytest.raises(ValueError, match="source.split_bytes"):
        parse_config(changed(full_config(), ("source.split_bytes", 1.5)))


def test_sha256_of_every_change_is_distinct():
    hashes = {parse_config(changed(full_config(), *c[1:])).sha256() for c in SHA_CHANGES}
    hashes.add(parse_config(full_config()).sha256())
    assert len(hashes) == len(SHA_CHANGES) + 1


# Spellings that mean the same config hash alike.
SAME_MEANING = [
    ("compression_case", ("output.compression", "GZIP")),
    ("size_as_int", ("output.shard_size.target", 150_000_000)),
    ("size_in_kb", ("output.shard_size.min", "100000KB")),
    ("size_fraction", ("output.shard_size.max", "0.2GB")),
    ("default_shard_size_spelled_out", ("output.shard_size", {})),
    ("percent_as_float", ("splits.train", 80.0)),
]


@pytest.mark.parametrize("change", [c[1] for c in SAME_MEANING], ids=[c[0] for c in SAME_MEANING])
def test_sha256_ignores_spelling(change):
    assert parse_config(changed(full_config(), change)).sha256() == parse_config(
        full_config()).sha256()


# --- Accepted variants --------------------------------------------------------------------------

ACCEPTED = [
    # (id, changes to the minimal config, dotted attribute path on Config, expected value)
    ("size_MB", [("output.shard_size", {"target": "150MB"})], "output.shard_size.target",
     150 * 10**6),
    ("size_MiB", [("output.shard_size", {"target": "64MiB", "min": "32MiB", "max": "64MiB"})],
     "output.shard_size.target", 64 * 2**20),
    ("size_int", [("output.shard_size", {"target": 1000, "min": 500, "max": 1000})],
     "output.shard_size.min", 500),
    ("size_lower_case", [("output.shard_size", {"max": "1gb"})], "output.shard_size.max",
     10**9),
    ("compression_none_default", [], "output.compression", "none"),
    ("compression_gzip", [("output.compression", "gzip")], "output.compression", "gzip"),
    ("compression_ZLIB", [("output.compression", "ZLIB")], "output.compression", "zlib"),
    ("compression_uncompressed", [("output.compression", "uncompressed")],
     "output.compression", "none"),
    ("compression_null", [("output.compression", None)], "output.compression", "none"),
    ("splits_thirds", [("splits", {"a": 33.33, "b": 33.33, "c": 33.34})], "splits.names",
     ("a", "b", "c")),
    ("splits_single", [("splits", {"all": 100})], "splits.names", ("all",)),
    ("splits_absent", [], "splits.names", ("train",)),
    ("split_names", [("splits", {"train-1": 50, "eval.v2": 50})], "splits.names",
     ("train-1", "eval.v2")),
    ("split_key_dotted", [("splits", {"key": "meta.id", "train": 100})], "splits.key",
     ("meta", "id")),
    ("csv_no_header", [("source.csv", {"header": False, "columns": ["a", "b"]})],
     "source.csv.columns", ("a", "b")),
    ("csv_empty", [("source.csv", None)], "source.csv.delimiter", ","),
    ("errors_empty", [("errors", None)], "errors.max_bad_fraction", 0.0),
    ("errors_int", [("errors", {"max_bad_fraction": 1})], "errors.max_bad_fraction", 1.0),
    ("abort_window_default", [("errors", None)], "errors.abort_window", 10_000),
    ("abort_window_off", [("errors", {"abort_window": 0})], "errors.abort_window", 0),
    ("index_uncompressed", [("output.index", True)], "output.index", True),
    ("name_with_dots", [("name", "ds.v1-b_2")], "output.shard_name", "ds.v1-b_2"),
    ("split_name_underscore_first", [("splits", {"train": 80, "_x": 20})], "splits.names",
     ("train", "_x")),
    ("nested_feature_name", [("features", {"metadata/height": {"type": "int64"}})],
     "features.0.source", ("metadata", "height")),
    ("ragged_next_to_other", [("features", {"t": {"type": "int64", "shape": [-1, -1]},
                                            "t2/flat_values": {"type": "int64"}})],
     "features.1.name", "t2/flat_values"),
    ("default_int64_from_float", [("features.f", {"type": "int64", "missing": "default",
                                                  "default": 7.0})], "features.0.default", 7.0),
    ("default_int64_max", [("features.f", {"type": "int64", "missing": "default",
                                           "default": 2**63 - 1})],
     "features.0.default", 2**63 - 1),
    ("default_float_inf", [("features.f", {"type": "float", "missing": "default",
                                           "default": float("inf")})],
     "features.0.default", float("inf")),
    ("default_fixed_shape", [("features.f", {"type": "int64", "shape": [2],
                                             "missing": "default", "default": [1, 2]})],
     "features.0.default", [1, 2]),
    ("default_empty_text", [("features.f", {"type": "string", "missing": "default",
                                            "default": ""})], "features.0.default", ""),
    ("nan_missing_scalar", [("features.f", {"type": "float", "nan": "missing"})],
     "features.0.nan", "missing"),
    # Text is a date only where the feature says so: by its unit, or its layout.
    ("format_absent", [], "features.0.format", None),
    ("format_from_unit", [("features.f", {"type": "int64", "unit": "ms"})],
     "features.0.format", "iso8601"),
    ("format_given", [("features.f", {"type": "int64", "format": "%d/%m/%Y %H:%M"})],
     "features.0.format", "%d/%m/%Y %H:%M"),
    ("format_with_unit", [("features.f", {"type": "int64", "unit": "days",
                                          "format": "%Y%m%d"})], "features.0.unit", "days"),
    ("unit_on_a_float_is_no_format", [("features.f", {"type": "float", "unit": "ms"})],
     "features.0.format", None),
    ("scale_absent", [], "features.0.scale", 0),
    ("scale_given", [("features.f", {"type": "int64", "scale": 2})], "features.0.scale", 2),
]


def test_a_config_without_scale_keeps_its_hash():
    """scale (issue #18) is recorded only where it is set: older configs hash as before."""
    assert all("scale" not in f for f in parse_config(full_config()).resolved()["features"])
    scaled = parse_config(changed(full_config(), ("features.feature0.scale", 2)))
    assert scaled.resolved()["features"][0]["scale"] == 2


def _attr(obj, path: str):
    for part in path.split("."):
        obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
    return obj


@pytest.mark.parametrize("changes, path, expected", [c[1:] for c in ACCEPTED],
                         ids=[c[0] for c in ACCEPTED])
def test_accepted(changes, path, expected):
    config = parse_config(changed(minimal_config(), *changes))
    assert _attr(config, path) == expected


# --- Refusals -----------------------------------------------------------------------------------

def feature(**spec) -> tuple[str, dict]:
    """Replace the minimal config's only feature ``f``."""
    return ("features.f", spec)


REFUSED = [
    # (id, changes to the minimal config, key the message names, echo of the bad value or None)
    # -- unknown keys, at every level
    ("unknown_top", [("nmae", "x")], "nmae", '"x"'),
    ("unknown_source", [("source.formt", "csv")], "source.formt", '"csv"'),
    ("unknown_csv", [("source.csv", {"delimeter": ";"})], "source.csv.delimeter", '";"'),
    ("unknown_feature", [feature(type="int64", mising="omit")], "features.f.mising", '"omit"'),
    ("unknown_output", [("output.compresion", "gzip")], "output.compresion", '"gzip"'),
    ("unknown_shard_size", [("output.shard_size", {"avg": "150MB"})], "output.shard_size.avg",
     '"150MB"'),
    ("unknown_errors", [("errors", {"max_bad": 0.1})], "errors.max_bad", "0.1"),
    # -- missing required keys
    ("missing_name", [("name", DELETE)], "name", None),
    ("missing_source", [("source", DELETE)], "source", None),
    ("missing_features", [("features", DELETE)], "features", None),
    ("missing_output", [("output", DELETE)], "output", None),
    ("missing_source_format", [("source.format", DELETE)], "source.format", None),
    ("missing_source_path", [("source.path", DELETE)], "source.path", None),
    ("missing_feature_type", [feature(shape=[2])], "features.f.type", None),
    ("missing_output_path", [("output.path", DELETE)], "output.path", None),
    # -- sections of the wrong kind
    ("source_not_mapping", [("source", "in/*.csv")], "source", '"in/*.csv"'),
    ("csv_not_mapping", [("source.csv", [","])], "source.csv", '[","]'),
    ("csv_false", [("source.csv", False)], "source.csv", "false"),
    ("features_empty", [("features", {})], "features", "{}"),
    ("features_list", [("features", ["f"])], "features", '["f"]'),
    ("feature_not_mapping", [("features.f", "int64")], "features.f", '"int64"'),
    ("feature_null", [("features.f", None)], "features.f", "null"),
    ("splits_not_mapping", [("splits", "80/20")], "splits", '"80/20"'),
    ("output_not_mapping", [("output", "out")], "output", '"out"'),
    ("shard_size_not_mapping", [("output.shard_size", "150MB")], "output.shard_size",
     '"150MB"'),
    ("errors_not_mapping", [("errors", 0.1)], "errors", "0.1"),
    ("errors_false", [("errors", False)], "errors", "false"),
    # -- name
    ("name_int", [("name", 5)], "name", "5"),
    ("name_empty", [("name", "")], "name", '""'),
    ("name_space", [("name", "my data")], "name", '"my data"'),
    ("name_slash", [("name", "a/b")], "name", '"a/b"'),
    ("name_too_long", [("name", "n" * 129)], "name", "nnnn"),
    # -- source
    ("format_unknown", [("source.format", "xml")], "source.format", '"xml"'),
    ("format_int", [("source.format", 1)], "source.format", "1"),
    ("path_empty", [("source.path", "  ")], "source.path", '"  "'),
    ("path_int", [("source.path", 5)], "source.path", "5"),
    ("csv_on_jsonl", [("source.format", "jsonl"), ("source.csv", {})], "source.csv", "{}"),
    # -- csv
    ("delimiter_empty", [("source.csv", {"delimiter": ""})], "source.csv.delimiter", '""'),
    ("delimiter_two", [("source.csv", {"delimiter": ",,"})], "source.csv.delimiter", '",,"'),
    ("delimiter_newline", [("source.csv", {"delimiter": "\n"})], "source.csv.delimiter",
     '"\\n"'),
    ("delimiter_int", [("source.csv", {"delimiter": 9})], "source.csv.delimiter", "9"),
    ("quotechar_is_delimiter", [("source.csv", {"delimiter": "|", "quotechar": "|"})],
     "source.csv.quotechar", '"|"'),
    ("header_string", [("source.csv", {"header": "yes"})], "source.csv.header", '"yes"'),
    ("header_int", [("source.csv", {"header": 1})], "source.csv.header", "1"),
    ("no_header_no_columns", [("source.csv", {"header": False})], "source.csv.columns", None),
    ("columns_empty", [("source.csv", {"header": False, "columns": []})],
     "source.csv.columns", "[]"),
    ("columns_repeat", [("source.csv", {"columns": ["a", "a"]})], "source.csv.columns",
     '["a", "a"]'),
    ("columns_int", [("source.csv", {"columns": ["a", 5]})], "source.csv.columns", '["a", 5]'),
    ("columns_string", [("source.csv", {"columns": "a,b"})], "source.csv.columns", '"a,b"'),
    ("null_values_string", [("source.csv", {"null_values": "NA"})], "source.csv.null_values",
     '"NA"'),
    ("null_values_int", [("source.csv", {"null_values": ["", 0]})], "source.csv.null_values",
     '["", 0]'),
    # -- feature names
    ("feature_name_leading_slash", [("features", {"/x": {"type": "int64"}})], "features./x",
     '"/x"'),
    ("feature_name_trailing_slash", [("features", {"x/": {"type": "int64"}})], "features.x/",
     '"x/"'),
    ("feature_name_empty", [("features", {"": {"type": "int64"}})], "features.", '""'),
    ("feature_name_int", [("features", {5: {"type": "int64"}})], "features.5", "5"),
    # -- type names
    ("type_int32", [feature(type="int32")], "features.f.type", "'int32'"),
    ("type_double", [feature(type="double")], "features.f.type", "'double'"),
    ("type_case", [feature(type="Int64")], "features.f.type", "'Int64'"),
    ("type_list", [feature(type=["int64"])], "features.f.type", "['int64']"),
    ("type_null", [feature(type=None)], "features.f.type", "None"),
    # -- shapes
    ("shape_zero", [feature(type="int64", shape=[0])], "features.f.shape", "[0]"),
    ("shape_inner_zero", [feature(type="int64", shape=[2, 0])], "features.f.shape", "[2, 0]"),
    ("shape_minus_two", [feature(type="int64", shape=[-2])], "features.f.shape", "[-2]"),
    ("shape_string_dim", [feature(type="int64", shape=["x"])], "features.f.shape", "['x']"),
    ("shape_bool_dim", [feature(type="int64", shape=[True])], "features.f.shape", "[True]"),
    ("shape_float_dim", [feature(type="int64", shape=[2.0])], "features.f.shape", "[2.0]"),
    ("shape_string", [feature(type="int64", shape="x")], "features.f.shape", '"x"'),
    ("shape_int", [feature(type="int64", shape=28)], "features.f.shape", "28"),
    ("sequence_ragged_step", [feature(type="int64", shape=[-1, -1], sequence=True)],
     "features.f.shape", "[-1, -1]"),
    # -- other feature fields
    ("source_int", [feature(type="int64", source=5)], "features.f.source", "5"),
    ("source_empty_part", [feature(type="int64", source="a..b")], "features.f.source",
     '"a..b"'),
    ("source_leading_dot", [feature(type="int64", source=".a")], "features.f.source", '".a"'),
    ("missing_typo", [feature(type="int64", missing="mising")], "features.f.missing",
     "'mising'"),
    ("missing_bool", [feature(type="int64", missing=False)], "features.f.missing", "False"),
    ("unit_hours", [feature(type="int64", unit="h")], "features.f.unit", "'h'"),
    ("format_not_text", [feature(type="int64", format=3)], "features.f.format", "3"),
    ("format_bad_directive", [feature(type="int64", format="%Y-%q")], "features.f.format",
     "%q"),
    ("format_on_a_float", [feature(type="float", format="iso8601")], "features.f.format",
     "int64 features only"),
    ("scale_on_a_float", [feature(type="float", scale=2)], "features.f.scale",
     "int64 features only"),
    ("scale_negative", [feature(type="int64", scale=-2)], "features.f.scale", "-2"),
    ("scale_text", [feature(type="int64", scale="2")], "features.f.scale", "'2'"),
    ("scale_with_unit", [feature(type="int64", scale=2, unit="ms")], "features.f.scale",
     "choose one"),
    ("sequence_int", [feature(type="int64", sequence=1)], "features.f.sequence", "1"),
    ("sequence_string", [feature(type="int64", sequence="yes")], "features.f.sequence",
     '"yes"'),
    # -- defaults
    ("default_absent", [feature(type="int64", missing="default")], "features.f.default", None),
    ("default_null", [feature(type="int64", missing="default", default=None)],
     "features.f.default", None),
    ("default_int64_fraction", [feature(type="int64", missing="default", default=1.5)],
     "features.f.default", "1.5"),
    ("default_int64_text", [feature(type="int64", missing="default", default="abc")],
     "features.f.default", "'abc'"),
    ("default_int64_overflow", [feature(type="int64", missing="default", default=2**63)],
     "features.f.default", str(2**63)),
    ("default_float_beyond_float32", [feature(type="float", missing="default", default=1e40)],
     "features.f.default", "1e+40"),
    ("default_float_text", [feature(type="float", missing="default", default="x")],
     "features.f.default", "'x'"),
    ("default_bytes_int", [feature(type="bytes", missing="default", default=5)],
     "features.f.default", "5"),
    ("default_string_bad_utf8", [feature(type="string", missing="default", default=b"\xff")],
     "features.f.default", "b'\\xff'"),
    ("default_list_for_scalar", [feature(type="int64", missing="default", default=[1, 2])],
     "features.f.default", "[1, 2]"),
    ("default_wrong_shape", [feature(type="int64", shape=[2], missing="default", default=[1])],
     "features.f.default", "[1]"),
    ("default_nan_refused", [feature(type="float", nan="error", missing="default",
                                     default=float("nan"))], "features.f.default", "nan"),
    # -- nan policies
    ("nan_error_int64", [feature(type="int64", nan="error")], "features.f.nan", "error"),
    ("nan_missing_bytes", [feature(type="bytes", nan="missing")], "features.f.nan", "missing"),
    ("nan_error_string", [feature(type="string", nan="error")], "features.f.nan", "error"),
    ("nan_missing_list", [feature(type="float", shape=[2], nan="missing")], "features.f.nan",
     "missing"),
    ("nan_unknown", [feature(type="float", nan="sometimes")], "features.f.nan", "'sometimes'"),
    # -- duplicate stored keys
    ("ragged_flat_values_clash",
     [("features", {"t": {"type": "int64", "shape": [-1, -1]},
                    "t/flat_values": {"type": "float"}})],
     "features.t/flat_values", '"t/flat_values"'),
    ("ragged_flat_values_clash_reversed",
     [("features", {"t/flat_values": {"type": "float"},
                    "t": {"type": "int64", "shape": [-1, -1]}})],
     "features.t", '"t/flat_values"'),
    ("ragged_row_lengths_clash",
     [("features", {"t": {"type": "int64", "shape": [-1, 4, -1]},
                    "t/row_lengths_2": {"type": "int64", "shape": [-1]}})],
     "features.t/row_lengths_2", '"t/row_lengths_2"'),
    # -- splits
    ("splits_sum_99", [("splits", {"train": 80, "eval": 19})], "splits", "99"),
    ("splits_sum_101", [("splits", {"train": 81, "eval": 20})], "splits", "101"),
    ("splits_sum_fraction", [("splits", {"a": 33.33, "b": 33.33, "c": 33.33})], "splits",
     "99.99"),
    ("splits_only_key", [("splits", {"key": "id"})], "splits", '"key": "id"'),
    ("splits_empty", [("splits", {})], "splits", "{}"),
    ("split_zero", [("splits", {"train": 100, "eval": 0})], "splits.eval", "0"),
    ("split_negative", [("splits", {"train": 120, "eval": -20})], "splits.train", "120"),
    ("split_over_100", [("splits", {"train": 150})], "splits.train", "150"),
    ("split_string", [("splits", {"train": "80", "eval": 20})], "splits.train", '"80"'),
    ("split_bool", [("splits", {"train": True})], "splits.train", "true"),
    ("split_null", [("splits", {"train": None})], "splits.train", "null"),
    ("split_nan", [("splits", {"train": float("nan")})], "splits.train", "NaN"),
    ("split_dead_letter", [("splits", {"train": 80, "dead_letter": 20})],
     "splits.dead_letter", "20"),
    ("split_name_space", [("splits", {"train": 80, "my eval": 20})], "splits.my eval", "20"),
    ("split_name_slash", [("splits", {"train": 80, "a/b": 20})], "splits.a/b", "20"),
    ("split_name_int", [("splits", {1: 100})], "splits.1", "100"),
    ("split_key_int", [("splits", {"key": 5, "train": 100})], "splits.key", "5"),
    ("split_key_empty", [("splits", {"key": "", "train": 100})], "splits.key", '""'),
    ("split_key_empty_part", [("splits", {"key": "a..b", "train": 100})], "splits.key",
     '"a..b"'),
    # -- output
    ("output_path_empty", [("output.path", "")], "output.path", '""'),
    ("output_path_int", [("output.path", 0)], "output.path", "0"),
    ("compression_zstd", [("output.compression", "zstd")], "output.compression", '"zstd"'),
    ("compression_bz2", [("output.compression", "bz2")], "output.compression", '"bz2"'),
    ("compression_snappy", [("output.compression", "snappy")], "output.compression",
     '"snappy"'),
    ("compression_lz4", [("output.compression", "lz4")], "output.compression", '"lz4"'),
    ("compression_int", [("output.compression", 5)], "output.compression", "5"),
    ("compression_bool", [("output.compression", True)], "output.compression", "true"),
    ("shard_name_slash", [("output.shard_name", "a/b")], "output.shard_name", '"a/b"'),
    ("shard_name_int", [("output.shard_name", 5)], "output.shard_name", "5"),
    ("index_int", [("output.index", 1)], "output.index", "1"),
    ("index_gzip", [("output.index", True), ("output.compression", "gzip")], "output.index",
     "true"),
    # -- shard sizes
    ("size_unit_unknown", [("output.shard_size", {"target": "150XB"})],
     "output.shard_size.target", '"150XB"'),
    ("size_no_number", [("output.shard_size", {"target": "MB"})], "output.shard_size.target",
     '"MB"'),
    ("size_negative_text", [("output.shard_size", {"min": "-5MB"})], "output.shard_size.min",
     '"-5MB"'),
    ("size_negative_int", [("output.shard_size", {"min": -1})], "output.shard_size.min", "-1"),
    ("size_zero", [("output.shard_size", {"max": 0})], "output.shard_size.max", "0"),
    ("size_zero_text", [("output.shard_size", {"max": "0MB"})], "output.shard_size.max",
     '"0MB"'),
    ("size_bool", [("output.shard_size", {"target": True})], "output.shard_size.target",
     "true"),
    ("size_list", [("output.shard_size", {"target": [150]})], "output.shard_size.target",
     "[150]"),
    ("size_exponent", [("output.shard_size", {"target": "1e8"})], "output.shard_size.target",
     '"1e8"'),
    ("size_two_units", [("output.shard_size", {"target": "150 MB MB"})],
     "output.shard_size.target", '"150 MB MB"'),
    ("min_above_target", [("output.shard_size", {"target": "100MB", "min": "150MB",
                                                 "max": "400MB"})],
     "output.shard_size", '"min": "150MB"'),
    ("target_above_max", [("output.shard_size", {"target": "250MB", "max": "200MB"})],
     "output.shard_size", '"target": "250MB"'),
    ("max_below_twice_min", [("output.shard_size", {"target": "150MB", "min": "100MB",
                                                    "max": "150MB"})],
     "output.shard_size", '"max": "150MB"'),
    # -- errors
    ("fraction_above_one", [("errors", {"max_bad_fraction": 1.5})], "errors.max_bad_fraction",
     "1.5"),
    ("fraction_negative", [("errors", {"max_bad_fraction": -0.1})], "errors.max_bad_fraction",
     "-0.1"),
    ("fraction_string", [("errors", {"max_bad_fraction": "0.1"})], "errors.max_bad_fraction",
     '"0.1"'),
    ("fraction_bool", [("errors", {"max_bad_fraction": True})], "errors.max_bad_fraction",
     "true"),
    ("fraction_nan", [("errors", {"max_bad_fraction": float("nan")})],
     "errors.max_bad_fraction", "NaN"),
    ("abort_window_negative", [("errors", {"abort_window": -1})], "errors.abort_window", "-1"),
    ("abort_window_float", [("errors", {"abort_window": 10.5})], "errors.abort_window",
     "10.5"),
    ("abort_window_text", [("errors", {"abort_window": "10k"})], "errors.abort_window",
     '"10k"'),
    ("abort_window_bool", [("errors", {"abort_window": True})], "errors.abort_window", "true"),
]


@pytest.mark.parametrize("changes, key, echo", [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])
def test_refused(changes, key, echo):
    message = refused(changed(minimal_config(), *changes))
    assert f"'{key}'" in message, message
    if echo is not None:
        assert echo in message, message


@pytest.mark.parametrize("raw, echo", [(None, "null"), ([], "[]"), ("name: x", '"name: x"')],
                         ids=["empty_file", "list", "string"])
def test_refused_top_level_not_mapping(raw, echo):
    message = refused(raw)
    assert "mapping" in message
    assert echo in message


def test_refused_compression_says_why():
    message = refused(changed(minimal_config(), ("output.compression", "zstd")))
    assert "TensorFlow" in message
    for name in ("none", "gzip", "zlib"):
        assert name in message


def test_refused_duplicate_stored_key_names_both_features():
    message = refused(changed(minimal_config(), ("features", {
        "t": {"type": "int64", "shape": [-1, -1]},
        "t/row_lengths_1": {"type": "int64"},
    })))
    assert "'t'" in message
    assert "t/row_lengths_1" in message


def test_refused_error_is_a_value_error():
    with pytest.raises(ValueError):
        parse_config(changed(minimal_config(), ("name", "")))


def test_default_without_missing_default_is_refused():
    raw = {"name": "x", "source": {"format": "csv", "path": "a.csv"},
           "features": {"f": {"type": "int64", "default": 0}}, "output": {"path": "o"}}
    with pytest.raises(ConfigError, match=r"features\.f\.default"):
        parse_config(raw)


def test_non_finite_default_keeps_the_manifest_strict_json():
    raw = {"name": "x", "source": {"format": "csv", "path": "a.csv"},
           "features": {"f": {"type": "float", "missing": "default", "default": float("inf")}},
           "output": {"path": "o"}}
    resolved = parse_config(raw).resolved()
    json.dumps(resolved, allow_nan=False)
    assert resolved["features"][0]["default"] == "inf"


# --- Names: checked whole, as the output layout will use them -----------------------------------

BAD_NAMES = [
    ("trailing_newline", "train\n"),    # re.match with '$' let this through
    ("inner_newline", "a\nb"),
    ("trailing_cr", "train\r"),
    ("slash", "a/b"),
    ("dot", "."),
    ("dotdot", ".."),
    ("LATEST", "LATEST"),
    ("latest", "latest"),              # the same file on a case-insensitive filesystem
    ("staging", ".staging"),
    ("dead_letter", "dead_letter"),
    ("Dead_Letter", "Dead_Letter"),
    ("lease", ".lease"),
    ("manifest", "manifest.json"),
    ("MANIFEST", "MANIFEST.JSON"),
    ("hidden", ".x"),
    ("dash_first", "-x"),
    ("space", "my data"),
    ("empty", ""),
    ("too_long", "n" * 129),
    ("not_text", 5),
]
GOOD_NAMES = ["train", "eval", "my-data.v2", "_x", "n" * 128, "Train2", "0", "latest2"]

# (where, changes to the minimal config for a name, key the message names)
NAME_PLACES = [
    ("name", lambda n: [("name", n)], lambda n: "name"),
    ("split", lambda n: [("splits", {"train": 50, n: 50})], lambda n: f"splits.{n}"),
    ("split_names", lambda n: [("splits", {"field": "s", "names": ["train", n]})],
     lambda n: "splits.names"),
    ("shard_name", lambda n: [("output.shard_name", n)], lambda n: "output.shard_name"),
]


@pytest.mark.parametrize("where, changes, key", NAME_PLACES, ids=[p[0] for p in NAME_PLACES])
@pytest.mark.parametrize("name", [n for _, n in BAD_NAMES], ids=[i for i, _ in BAD_NAMES])
def test_bad_names_are_refused_everywhere_a_name_goes(where, changes, key, name):
    if where == "split" and not isinstance(name, str):
        name = 5  # an int split name: still refused, still named
    message = refused(changed(minimal_config(), *changes(name)))
    assert f"config key {key(name)!r}:" in message, message
    if isinstance(name, str) and name.lower() in {"latest", "dead_letter", "manifest.json"}:
        assert "reserved" in message, message  # '.staging', '.lease': no leading dot at all


@pytest.mark.parametrize("where, changes, key", NAME_PLACES, ids=[p[0] for p in NAME_PLACES])
@pytest.mark.parametrize("name", GOOD_NAMES, ids=lambda n: n if len(n) < 20 else "128_chars")
def test_ordinary_names_are_accepted_everywhere_a_name_goes(where, changes, key, name):
    if where in ("split", "split_names") and name == "train":
        name = "eval"  # the names must differ from the other split's
    config = parse_config(changed(minimal_config(), *changes(name)))
    if where == "name":
        assert config.name == name and config.output.shard_name == name
    elif where == "shard_name":
        assert config.output.shard_name == name
    else:
        assert name in config.splits.names


def test_a_default_shard_name_is_the_checked_data_set_name():
    message = refused(changed(minimal_config(), ("name", "LATEST")))
    assert message.startswith("config key 'name':"), message


def test_a_refused_name_message_stays_short():
    message = refused(changed(minimal_config(), ("splits", {"train": 50, "n" * 5000: 50})))
    assert len(message) < 600, message


# --- Loading YAML: duplicate keys, sample configs -------------------------------------------------

ROOT = pathlib.Path(__file__).resolve().parents[2]

DEMO_TEXT = """\
name: demo
source:
  format: csv
  path: in/*.csv
features:
  age:
    type: int64
  city:
    type: string
output:
  path: out
errors:
  max_bad_fraction: 0.0
"""


def load_text(tmp_path, text: str):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return load_config(str(path))


def test_the_duplicate_test_config_loads_without_its_duplicate(tmp_path):
    config = load_text(tmp_path, DEMO_TEXT)
    assert [f.dtype for f in config.features] == ["int64", "string"]


@pytest.mark.parametrize("addition, message", [
    # a duplicated feature silently changed type from int64 to float
    ("features:\n  age:\n    type: float\n",
     "config key 'features' appears twice (lines 5 and 14)"),
    # a second errors section raised the threshold to 1.0
    ("errors:\n  max_bad_fraction: 1.0\n",
     "config key 'errors' appears twice (lines 12 and 14)"),
], ids=["features_section", "errors_section"])
def test_a_repeated_section_is_refused_with_both_lines(tmp_path, addition, message):
    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, DEMO_TEXT + addition)
    assert str(caught.value) == message


def test_a_repeated_feature_is_refused_with_its_dotted_path(tmp_path):
    text = DEMO_TEXT.replace("  city:\n", "  age:\n    type: float\n  city:\n")
    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, text)
    assert str(caught.value) == "config key 'features.age' appears twice (lines 6 and 8)"


def test_a_repeated_key_deep_inside_is_refused(tmp_path):
    text = DEMO_TEXT.replace("    type: int64\n", "    type: int64\n    type: float\n")
    with pytest.raises(ConfigError) as caught:
        load_text(tmp_path, text)
    assert str(caught.value) == "config key 'features.age.type' appears twice (lines 7 and 8)"


def test_keys_equal_once_loaded_are_refused(tmp_path):
    text = DEMO_TEXT + "splits:\n  key: id\n  1: 50\n  0x1: 50\n"
    with pytest.raises(ConfigError, match=r"^config key 'splits\.1' appears twice "
                                          r"\(lines 16 and 17\); '1' and '0x1' are the same"):
        load_text(tmp_path, text)


def test_a_merge_key_override_is_not_a_duplicate(tmp_path):
    text = DEMO_TEXT.replace("features:\n  age:\n    type: int64\n",
                             "features:\n  age: &base\n    type: int64\n"
                             "  height:\n    <<: *base\n    type: float\n")
    config = load_text(tmp_path, text)
    assert [(f.name, f.dtype) for f in config.features] == [
        ("age", "int64"), ("height", "float"), ("city", "string")]


def test_a_name_with_a_trailing_newline_from_yaml_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"^config key 'name': data set name 'demo\\n'"):
        load_text(tmp_path, DEMO_TEXT.replace("name: demo", 'name: "demo\\n"'))


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")),
                         ids=lambda p: p.stem)
def test_every_sample_config_loads(path):
    assert load_config(str(path)).name
