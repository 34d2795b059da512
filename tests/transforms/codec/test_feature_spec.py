"""Tests for feature_spec (transforms/codec): validation, stored keys, the tf.io spec."""

from __future__ import annotations

import json

import pytest

from beam_tfrecords.transforms.codec.feature_spec import (
    FeatureSpec,
    FeatureSpecError,
    stored_keys,
    tf_parse_spec,
)

# --- Validation ---------------------------------------------------------------------------------

ACCEPTED = [
    # (id, kwargs, attribute, expected)
    ("scalar", {"dtype": "int64"}, "shape", ()),
    ("shape_list_to_tuple", {"dtype": "float", "shape": [2, 3]}, "shape", (2, 3)),
    ("variable", {"dtype": "bytes", "shape": (-1,)}, "shape", (-1,)),
    ("ragged", {"dtype": "string", "shape": (-1, 4, -1)}, "shape", (-1, 4, -1)),
    ("source_from_name", {"name": "meta/height", "dtype": "int64"}, "source",
     ("meta", "height")),
    ("source_given", {"dtype": "int64", "source": ["a", "b"]}, "source", ("a", "b")),
    ("missing_default_zero", {"dtype": "int64", "missing": "default", "default": 0}, "default",
     0),
    ("missing_default_false", {"dtype": "int64", "missing": "default", "default": False},
     "default", False),
    ("missing_default_empty", {"dtype": "bytes", "missing": "default", "default": b""}, "default",
     b""),
    ("nan_error_float", {"dtype": "float", "nan": "error"}, "nan", "error"),
    ("nan_missing_scalar", {"dtype": "float", "nan": "missing"}, "nan", "missing"),
    ("nan_error_list", {"dtype": "float", "shape": (3,), "nan": "error"}, "nan", "error"),
    ("unit_days", {"dtype": "int64", "unit": "days"}, "unit", "days"),
    ("format_none", {"dtype": "int64"}, "format", None),
    ("format_iso", {"dtype": "int64", "format": "iso8601"}, "format", "iso8601"),
    ("format_strptime", {"dtype": "int64", "shape": (-1,), "format": "%d/%m/%Y %H:%M"},
     "format", "%d/%m/%Y %H:%M"),
    ("scale_none", {"dtype": "int64"}, "scale", 0),
    ("scale_cents", {"dtype": "int64", "shape": (-1,), "scale": 2}, "scale", 2),
    ("scale_max", {"dtype": "int64", "scale": 18}, "scale", 18),
    ("sequence_fixed", {"dtype": "float", "shape": (3,), "sequence": True}, "sequence", True),
    ("sequence_variable", {"dtype": "int64", "shape": (-1, 2), "sequence": True}, "shape",
     (-1, 2)),
]


@pytest.mark.parametrize("kwargs, attr, expected", [c[1:] for c in ACCEPTED],
                         ids=[c[0] for c in ACCEPTED])
def test_accepted(kwargs, attr, expected):
    spec = FeatureSpec(**{"name": "f", **kwargs})
    assert getattr(spec, attr) == expected


REFUSED = [
    # (id, kwargs, the field at fault, text the message must hold)
    ("name_empty", {"name": "", "dtype": "int64"}, "name", "name"),
    ("name_not_text", {"name": 5, "dtype": "int64"}, "name", "5"),
    ("dtype_unknown", {"dtype": "int32"}, "dtype", "'int32'"),
    ("dtype_case", {"dtype": "INT64"}, "dtype", "'INT64'"),
    ("dtype_list", {"dtype": ["int64"]}, "dtype", "['int64']"),
    ("dtype_none", {"dtype": None}, "dtype", "None"),
    ("shape_zero", {"dtype": "int64", "shape": (0,)}, "shape", "[0]"),
    ("shape_inner_zero", {"dtype": "int64", "shape": (-1, 0)}, "shape", "[-1, 0]"),
    ("shape_minus_two", {"dtype": "int64", "shape": (-2,)}, "shape", "[-2]"),
    ("shape_text", {"dtype": "int64", "shape": ("x",)}, "shape", "['x']"),
    ("shape_float", {"dtype": "int64", "shape": (2.0,)}, "shape", "[2.0]"),
    ("shape_bool", {"dtype": "int64", "shape": (True,)}, "shape", "[True]"),
    ("missing_unknown", {"dtype": "int64", "missing": "skip"}, "missing", "'skip'"),
    ("default_absent", {"dtype": "int64", "missing": "default"}, "default", "default"),
    ("nan_unknown", {"dtype": "float", "nan": "drop"}, "nan", "'drop'"),
    ("nan_error_int64", {"dtype": "int64", "nan": "error"}, "nan", "int64"),
    ("nan_missing_bytes", {"dtype": "bytes", "nan": "missing"}, "nan", "bytes"),
    ("nan_error_string", {"dtype": "string", "nan": "error"}, "nan", "string"),
    ("nan_missing_list", {"dtype": "float", "shape": (2,), "nan": "missing"}, "nan", "scalar"),
    ("unit_unknown", {"dtype": "int64", "unit": "hours"}, "unit", "'hours'"),
    ("format_float", {"dtype": "float", "format": "iso8601"}, "format", "int64 features only"),
    ("format_no_directive", {"dtype": "int64", "format": "YYYY"}, "format", "no strptime"),
    ("format_bad_directive", {"dtype": "int64", "format": "%Y-%Q"}, "format", "%Q"),
    ("format_empty", {"dtype": "int64", "format": ""}, "format", "strptime layout"),
    ("scale_float", {"dtype": "float", "scale": 2}, "scale", "int64 features only"),
    ("scale_negative", {"dtype": "int64", "scale": -1}, "scale", "-1"),
    ("scale_too_big", {"dtype": "int64", "scale": 19}, "scale", "19"),
    ("scale_bool", {"dtype": "int64", "scale": True}, "scale", "True"),
    ("scale_text", {"dtype": "int64", "scale": "2"}, "scale", "'2'"),
    ("scale_with_a_date_format", {"dtype": "int64", "scale": 2, "format": "iso8601"}, "scale",
     "choose one"),
    ("sequence_ragged", {"dtype": "int64", "shape": (-1, -1), "sequence": True}, "shape",
     "[-1, -1]"),
    ("sequence_ragged_inner", {"dtype": "int64", "shape": (2, -1), "sequence": True}, "shape",
     "[2, -1]"),
]


@pytest.mark.parametrize("kwargs, field, text", [c[1:] for c in REFUSED],
                         ids=[c[0] for c in REFUSED])
def test_refused(kwargs, field, text):
    with pytest.raises(FeatureSpecError) as info:
        FeatureSpec(**{"name": "f", **kwargs})
    assert info.value.field == field
    assert isinstance(info.value, ValueError)
    assert text in str(info.value)
    if kwargs.get("name", "f") == "f":
        assert "'f'" in str(info.value)  # names the feature


# --- Shape properties and stored keys -----------------------------------------------------------

SHAPES = [
    # (id, shape, is_fixed, is_ragged, ragged_dims, stored keys)
    ("scalar", (), True, False, (), ("x",)),
    ("fixed_2x3", (2, 3), True, False, (), ("x",)),
    ("variable", (-1,), False, False, (), ("x",)),
    ("variable_rows_of_3", (-1, 3), False, False, (), ("x",)),
    ("ragged_2d", (-1, -1), False, True, (1,), ("x/flat_values", "x/row_lengths_1")),
    ("ragged_inner_fixed", (-1, 4, -1), False, True, (2,),
     ("x/flat_values", "x/row_lengths_2")),
    ("ragged_3d", (-1, -1, -1), False, True, (1, 2),
     ("x/flat_values", "x/row_lengths_1", "x/row_lengths_2")),
    ("fixed_outer_ragged_inner", (2, -1), False, True, (1,),
     ("x/flat_values", "x/row_lengths_1")),
]


@pytest.mark.parametrize("shape, fixed, ragged, dims, keys", [c[1:] for c in SHAPES],
                         ids=[c[0] for c in SHAPES])
def test_shape_properties_and_stored_keys(shape, fixed, ragged, dims, keys):
    spec = FeatureSpec("x", "int64", shape=shape)
    assert spec.is_fixed is fixed
    assert spec.is_ragged is ragged
    assert spec.ragged_dims == dims
    assert stored_keys(spec) == keys
    assert spec.values_key == keys[0]


def test_fixed_size():
    assert FeatureSpec("x", "int64").fixed_size == 1
    assert FeatureSpec("x", "int64", shape=(2, 3)).fixed_size == 6


KINDS = [
    ("int64", "int64_list", "int64"),
    ("float", "float_list", "float32"),
    ("bytes", "bytes_list", "string"),
    ("string", "bytes_list", "string"),
]


@pytest.mark.parametrize("dtype, kind, tf_dtype", KINDS, ids=[k[0] for k in KINDS])
def test_kind_and_tf_dtype(dtype, kind, tf_dtype):
    spec = FeatureSpec("x", dtype)
    assert (spec.kind, spec.tf_dtype) == (kind, tf_dtype)


# --- tf_parse_spec ------------------------------------------------------------------------------

def fixed(shape, dtype="int64"):
    return {"type": "FixedLenFeature", "shape": shape, "dtype": dtype}


def varlen(dtype="int64"):
    return {"type": "VarLenFeature", "dtype": dtype}


def ragged(value_key, *partitions, dtype="int64"):
    return {"type": "RaggedFeature", "dtype": dtype, "value_key": value_key,
            "partitions": list(partitions), "row_splits_dtype": "int64"}


def uniform(length):
    return {"type": "UniformRowLength", "length": length}


def row_lengths(key):
    return {"type": "RowLengths", "key": key}


CONTEXT = [
    # (id, FeatureSpec kwargs beyond name "x", expected parse spec)
    ("scalar", {"dtype": "int64"}, fixed([])),
    ("scalar_float", {"dtype": "float"}, fixed([], "float32")),
    ("scalar_string", {"dtype": "string"}, fixed([], "string")),
    ("scalar_default", {"dtype": "int64", "missing": "default", "default": 0}, fixed([])),
    ("fixed_2", {"dtype": "float", "shape": (2,)}, fixed([2], "float32")),
    ("fixed_2x3", {"dtype": "int64", "shape": (2, 3)}, fixed([2, 3])),
    ("variable", {"dtype": "bytes", "shape": (-1,)}, varlen("string")),
    ("rows_of_3", {"dtype": "int64", "shape": (-1, 3)}, ragged("x", uniform(3))),
    ("ragged_2d", {"dtype": "int64", "shape": (-1, -1)},
     ragged("x/flat_values", row_lengths("x/row_lengths_1"))),
    ("ragged_inner_fixed", {"dtype": "float", "shape": (-1, 4, -1)},
     ragged("x/flat_values", uniform(4), row_lengths("x/row_lengths_2"), dtype="float32")),
    ("ragged_3d", {"dtype": "int64", "shape": (-1, -1, -1)},
     ragged("x/flat_values", row_lengths("x/row_lengths_1"), row_lengths("x/row_lengths_2"))),
    # omit: a fixed shape may be absent, so its first dimension is "0 or d0"
    ("omit_scalar", {"dtype": "int64", "missing": "omit"}, varlen()),
    ("omit_fixed_2", {"dtype": "int64", "shape": (2,), "missing": "omit"}, varlen()),
    ("omit_fixed_2x3", {"dtype": "int64", "shape": (2, 3), "missing": "omit"},
     ragged("x", uniform(3))),
    ("omit_variable", {"dtype": "int64", "shape": (-1,), "missing": "omit"}, varlen()),
    ("omit_ragged", {"dtype": "int64", "shape": (-1, -1), "missing": "omit"},
     ragged("x/flat_values", row_lengths("x/row_lengths_1"))),
    # empty: a missing value is stored as an empty list, which a fixed shape cannot parse
    ("empty_scalar", {"dtype": "int64", "missing": "empty"}, varlen()),
    ("empty_fixed_2", {"dtype": "float", "shape": (2,), "missing": "empty"}, varlen("float32")),
    ("empty_fixed_2x3", {"dtype": "int64", "shape": (2, 3), "missing": "empty"},
     ragged("x", uniform(3))),
    ("empty_variable", {"dtype": "string", "shape": (-1,), "missing": "empty"},
     varlen("string")),
    ("empty_ragged", {"dtype": "int64", "shape": (-1, -1), "missing": "empty"},
     ragged("x/flat_values", row_lengths("x/row_lengths_1"))),
]


@pytest.mark.parametrize("kwargs, expected", [c[1:] for c in CONTEXT],
                         ids=[c[0] for c in CONTEXT])
def test_tf_parse_spec_context(kwargs, expected):
    doc = tf_parse_spec([FeatureSpec("x", **kwargs)])
    assert doc == {"example_type": "Example", "features": {"x": expected}}
    assert json.loads(json.dumps(doc)) == doc  # feature_spec.json is plain JSON


SEQUENCE = [
    ("scalar_steps", {"dtype": "int64"},
     {"type": "FixedLenSequenceFeature", "shape": [], "dtype": "int64", "allow_missing": False}),
    ("fixed_steps", {"dtype": "float", "shape": (3,)},
     {"type": "FixedLenSequenceFeature", "shape": [3], "dtype": "float32",
      "allow_missing": False}),
    ("fixed_steps_2x2_omit", {"dtype": "int64", "shape": (2, 2), "missing": "omit"},
     {"type": "FixedLenSequenceFeature", "shape": [2, 2], "dtype": "int64",
      "allow_missing": True}),
    ("fixed_steps_empty", {"dtype": "int64", "shape": (2,), "missing": "empty"},
     {"type": "FixedLenSequenceFeature", "shape": [2], "dtype": "int64",
      "allow_missing": False}),
    ("variable_steps", {"dtype": "bytes", "shape": (-1,)}, varlen("string")),
    ("variable_rows_steps", {"dtype": "int64", "shape": (-1, 2)}, varlen()),
]


@pytest.mark.parametrize("kwargs, expected", [c[1:] for c in SEQUENCE],
                         ids=[c[0] for c in SEQUENCE])
def test_tf_parse_spec_sequence(kwargs, expected):
    specs = [FeatureSpec("ctx", "int64"), FeatureSpec("x", sequence=True, **kwargs)]
    doc = tf_parse_spec(specs)
    assert doc == {
        "example_type": "SequenceExample",
        "features": {"ctx": fixed([])},
        "sequence_features": {"x": expected},
    }


def test_tf_parse_spec_keeps_feature_order_and_nested_names():
    specs = (FeatureSpec("b", "int64"), FeatureSpec("metadata/height", "int64"),
             FeatureSpec("a", "float", shape=(-1,)))
    doc = tf_parse_spec(specs)
    assert list(doc["features"]) == ["b", "metadata/height", "a"]
    assert "sequence_features" not in doc
