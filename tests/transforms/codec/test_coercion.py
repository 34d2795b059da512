"""The coercion policy, row by row: every accepted and every rejected kind of value.

Each case encodes a one-feature record with the real encoder and decodes the bytes back, so a
row proves what lands in the file, not only what a helper returns.
"""

from __future__ import annotations

import datetime
import decimal
import math
import struct
import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms.codec.coercion import (
    FLOAT32_OVERFLOW,
    FeatureValueError,
    element_coercer,
)
from beam_tfrecords.transforms.codec.example_codec import ExampleDecoder, ExampleEncoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec

UTC = datetime.timezone.utc


def roundtrip(spec: FeatureSpec, value):
    data = ExampleEncoder([spec]).encode({spec.name: value} if value is not _ABSENT else {})
    return ExampleDecoder([spec]).decode(data)[spec.name]


_ABSENT = object()

ACCEPTED = [
    # int64 <- int, bool, numpy ints, uint64 <= 2**63-1
    ("int_zero", "int64", 0, 0),
    ("int_negative", "int64", -5, -5),
    ("int_max", "int64", 2**63 - 1, 2**63 - 1),
    ("int_min", "int64", -(2**63), -(2**63)),
    ("bool_true", "int64", True, 1),
    ("bool_false_is_a_value", "int64", False, 0),
    ("numpy_bool", "int64", np.bool_(True), 1),
    ("numpy_int8", "int64", np.int8(-7), -7),
    ("numpy_int32", "int64", np.int32(123), 123),
    ("numpy_uint64_in_range", "int64", np.uint64(2**63 - 1), 2**63 - 1),
    ("whole_float", "int64", 3.0, 3),
    ("whole_numpy_float", "int64", np.float64(-2.0), -2),
    ("whole_decimal", "int64", decimal.Decimal("42"), 42),
    # dates and datetimes -> epoch integers in the unit (seconds by default)
    ("datetime_utc", "int64", datetime.datetime(2020, 1, 1, tzinfo=UTC), 1577836800),
    ("naive_datetime_is_utc", "int64", datetime.datetime(2020, 1, 1), 1577836800),
    ("aware_datetime_other_zone", "int64",
     datetime.datetime(2020, 1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1))),
     1577836800),
    ("date", "int64", datetime.date(1970, 1, 2), 86400),
    ("pre_epoch_floors", "int64", datetime.datetime(1969, 12, 31, 23, 59, 59, 500000), -1),
    ("numpy_datetime64", "int64", np.datetime64("2020-01-01T00:00:00"), 1577836800),
    # float <- float, int, numpy floats, Decimal; explicit inf and nan are values
    ("float", "float", 1.5, 1.5),
    ("float_zero_is_a_value", "float", 0.0, 0.0),
    ("negative_zero", "float", -0.0, -0.0),
    ("int_as_float", "float", 3, 3.0),
    ("numpy_float32", "float", np.float32(0.25), 0.25),
    ("numpy_int_as_float", "float", np.int64(-4), -4.0),
    ("decimal_float", "float", decimal.Decimal("2.5"), 2.5),
    ("float32_max", "float", 3.4028234663852886e38, 3.4028234663852886e38),
    ("rounds_down_to_float32_max", "float", 3.4028235e38, 3.4028234663852886e38),
    ("explicit_inf", "float", math.inf, math.inf),
    ("explicit_negative_inf", "float", -math.inf, -math.inf),
    ("float64_precision_rounds", "float", 0.1, float(np.float32(0.1))),
    # bytes <- bytes, str (UTF-8), numpy bytes / str; binary stays binary
    ("bytes", "bytes", b"\xff\x00\xfe", b"\xff\x00\xfe"),
    ("empty_bytes_is_a_value", "bytes", b"", b""),
    ("str_as_utf8", "bytes", "héllo", "héllo".encode()),
    ("bytearray", "bytes", bytearray(b"ab"), b"ab"),
    ("memoryview", "bytes", memoryview(b"cd"), b"cd"),
    ("numpy_bytes", "bytes", np.bytes_(b"xy"), b"xy"),
    ("numpy_str", "bytes", np.str_("zé"), "zé".encode()),
    ("string_from_str", "string", "✓ text", "✓ text"),
    ("string_from_utf8_bytes", "string", "ü".encode(), "ü"),
    ("empty_string_is_a_value", "string", "", ""),
    # a UUID (fastavro's uuid strings, pyarrow's uuid extension values): its canonical text
    ("uuid_string", "string", uuid.UUID(int=2**100 + 7), str(uuid.UUID(int=2**100 + 7))),
    ("uuid_bytes", "bytes", uuid.UUID(int=5), str(uuid.UUID(int=5)).encode()),
]


@pytest.mark.parametrize("name,dtype,value,expected", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_accepted(name, dtype, value, expected):
    got = roundtrip(FeatureSpec("f", dtype), value)
    if isinstance(expected, float):
        assert struct.pack("<f", got) == struct.pack("<f", expected)
    else:
        assert got == expected and type(got) is type(expected)


# Text into an int64 feature with a date format (a config's unit: or format:): dates and
# datetimes, as transforms/codec/text_values.py parses them in every format.
TEXT_DATES = [
    ("iso_date", {}, "2020-01-01", 1577836800),
    ("iso_offset_ms", {"unit": "ms"}, "2020-01-01T01:00:00.5+01:00", 1577836800500),
    ("iso_floors_to_the_unit", {}, "1969-12-31T23:59:59.5", -1),
    ("iso_spaces", {"unit": "days"}, " 1970-01-02 ", 1),
    ("numpy_str", {"unit": "days"}, np.str_("1970-01-02"), 1),
    ("strptime", {"format": "%d/%m/%Y %H:%M"}, "01/01/2020 00:01", 1577836860),
    ("in_a_list", {"shape": (-1,)}, ["1970-01-01", "1970-01-02T00:00:01Z"], [0, 86401]),
]


@pytest.mark.parametrize("name,kwargs,value,expected", TEXT_DATES,
                         ids=[c[0] for c in TEXT_DATES])
def test_text_dates(name, kwargs, value, expected):
    spec = FeatureSpec("f", "int64", **{"format": "iso8601", **kwargs})
    got = roundtrip(spec, value)
    assert (got.tolist() if isinstance(got, np.ndarray) else got) == expected


@pytest.mark.parametrize("kwargs,value,needle", [
    ({}, "2020-01-01", "not an integer or true/false"),  # no format: a date is no number
    ({"format": "iso8601"}, "2020-02-30", "day is out of range for month"),
    ({"format": "iso8601"}, "yesterday", "not an integer or true/false, and not an ISO-8601"),
    ({"format": "iso8601"}, b"2020-01-01", "not an integer, bool, date or datetime"),
    ({"format": "%d/%m/%Y"}, "2020-01-01", "not a date or datetime in format '%d/%m/%Y'"),
    ({"format": "iso8601", "unit": "ns"}, "2300-01-01", "outside the int64 range"),
])
def test_text_date_refusals_name_the_feature_and_value(kwargs, value, needle):
    with pytest.raises(FeatureValueError) as info:
        roundtrip(FeatureSpec("when", "int64", **kwargs), value)
    message = str(info.value)
    assert needle in message and "'when'" in message and repr(value) in message


# Times of day (Arrow time32/time64 columns, datetime.time) since midnight in the unit.
TIMES_OF_DAY = [
    ("seconds", "s", datetime.time(1, 2, 3, 999_999), 3723),
    ("ms", "ms", datetime.time(0, 0, 1, 2500), 1002),
    ("us", "us", datetime.time(23, 59, 59, 999_999), 86_399_999_999),
    ("ns", "ns", datetime.time(0, 0, 0, 7), 7000),
    ("days_floor_to_zero", "days", datetime.time(12), 0),
    ("midnight", "s", datetime.time(0), 0),
]


@pytest.mark.parametrize("name,unit,value,expected", TIMES_OF_DAY,
                         ids=[c[0] for c in TIMES_OF_DAY])
def test_times_of_day(name, unit, value, expected):
    assert roundtrip(FeatureSpec("f", "int64", unit=unit), value) == expected


def test_a_time_of_day_with_a_zone_is_refused():
    zoned = datetime.time(1, tzinfo=UTC)
    with pytest.raises(FeatureValueError, match="time of day with a time zone"):
        roundtrip(FeatureSpec("f", "int64"), zoned)


# scale: k stores numbers (not bools, dates or times) times 10**k, never rounded; a float as
# the decimal it is written as (its repr).
SCALED = [
    ("decimal_cents", 2, decimal.Decimal("12.34"), 1234),
    ("decimal_fewer_places", 3, decimal.Decimal("-1.5"), -1500),
    ("decimal_trailing_zeros", 1, decimal.Decimal("2.500"), 25),
    ("decimal_exponent", 2, decimal.Decimal("1E+3"), 100000),
    ("int", 2, 7, 700),
    ("numpy_uint", 1, np.uint64(5), 50),
    ("whole_float", 2, 3.0, 300),
    ("binary_fraction", 1, 0.5, 5),
    ("float_as_written", 2, 12.34, 1234),  # the double is 12.339999..., its repr 12.34
    ("float_exponent", 3, 2.5e-1, 250),
    ("bool_unscaled", 2, True, 1),
    ("date_unscaled", 2, datetime.date(1970, 1, 2), 86400),
    ("max", 18, 9, 9 * 10**18),
    ("min_edge", 1, decimal.Decimal("-922337203685477580.8"), -(2**63)),
]


@pytest.mark.parametrize("name,scale,value,expected", SCALED, ids=[c[0] for c in SCALED])
def test_scale(name, scale, value, expected):
    assert roundtrip(FeatureSpec("f", "int64", scale=scale), value) == expected


@pytest.mark.parametrize("scale,value,needle", [
    (2, decimal.Decimal("1.005"), "more than 2 decimal places"),
    (1, 0.15, "more than 1 decimal places"),
    (1, 1e300, "outside the int64 range"),
    (2, decimal.Decimal("1E+999999999"), "outside the int64 range"),  # no 10**999999999
    (2, decimal.Decimal("-1E-999999999"), "more than 2 decimal places"),
    (18, 10, "outside the int64 range"),
    (1, 2**62, "outside the int64 range"),
    (2, decimal.Decimal("NaN"), "not a finite number"),
    (2, math.inf, "not a finite number"),
])
def test_scale_refusals(scale, value, needle):
    with pytest.raises(FeatureValueError, match=needle):
        roundtrip(FeatureSpec("f", "int64", scale=scale), value)


def test_nan_allowed_by_default_and_stored():
    assert math.isnan(roundtrip(FeatureSpec("f", "float"), math.nan))


REJECTED = [
    # (name, spec kwargs, value, text that must appear in the message)
    ("fraction_to_int", {"dtype": "int64"}, 3.5, "fractional part"),
    ("nan_to_int", {"dtype": "int64"}, math.nan, "not a finite number"),
    ("inf_to_int", {"dtype": "int64"}, math.inf, "not a finite number"),
    ("int_too_big", {"dtype": "int64"}, 2**63, "outside the int64 range"),
    ("int_too_small", {"dtype": "int64"}, -(2**63) - 1, "outside the int64 range"),
    ("uint64_too_big", {"dtype": "int64"}, np.uint64(2**63), "outside the int64 range"),
    ("float_too_big_for_int", {"dtype": "int64"}, 1e19, "outside the int64 range"),
    ("text_to_int", {"dtype": "int64"}, "one", "not an integer or true/false"),
    ("bytes_to_int", {"dtype": "int64"}, b"1", "not an integer"),
    ("fractional_decimal", {"dtype": "int64"}, decimal.Decimal("1.5"), "fractional part"),
    ("bool_to_float", {"dtype": "float"}, True, "a bool is not a float"),
    ("numpy_bool_to_float", {"dtype": "float"}, np.bool_(False), "a bool is not a float"),
    ("beyond_float32", {"dtype": "float"}, 1e40, "outside the float32 range"),
    ("beyond_float32_negative", {"dtype": "float"}, -1e39, "outside the float32 range"),
    ("just_past_float32", {"dtype": "float"}, FLOAT32_OVERFLOW, "outside the float32 range"),
    ("huge_int_to_float", {"dtype": "float"}, 10**400, "outside the float32 range"),
    ("text_to_float", {"dtype": "float"}, "1.5.2", "not a number"),
    ("nan_when_refused", {"dtype": "float", "nan": "error"}, math.nan, "NaN is not allowed"),
    ("int_to_bytes", {"dtype": "bytes"}, 5, "not bytes or str"),
    ("float_to_bytes", {"dtype": "bytes"}, 1.0, "not bytes or str"),
    ("lone_surrogate", {"dtype": "bytes"}, "\ud800", "not encodable as UTF-8"),
    ("invalid_utf8_string", {"dtype": "string"}, b"\xff\xfe", "invalid UTF-8"),
    ("missing_required", {"dtype": "int64"}, None, "required"),
    ("absent_required", {"dtype": "float"}, _ABSENT, "required"),
    ("nat_is_missing", {"dtype": "int64"}, np.datetime64("NaT"), "required"),
    ("list_for_scalar", {"dtype": "int64"}, [1], "a list where a single value belongs"),
    ("scalar_for_list", {"dtype": "int64", "shape": (-1,)}, 1, "a single value where a list"),
    ("wrong_fixed_length", {"dtype": "float", "shape": (3,)}, [1.0, 2.0], "dimension 0 has"),
    ("wrong_fixed_shape_array", {"dtype": "float", "shape": (2, 2)}, np.zeros((3, 2)),
     "does not fit shape"),
    ("null_inside_list", {"dtype": "int64", "shape": (-1,)}, [1, None], "null inside a list"),
    ("bad_element_in_list", {"dtype": "int64", "shape": (-1,)}, [1, 2.5], "element 1"),
    ("bad_element_in_array", {"dtype": "float", "shape": (-1,)}, np.array([1.0, 1e39]),
     "element 1"),
    ("ragged_too_shallow", {"dtype": "int64", "shape": (-1, -1)}, [1, 2], "needs a list"),
    ("dict_for_scalar", {"dtype": "int64"}, {"a": 1}, "not an integer"),
]


@pytest.mark.parametrize("name,kwargs,value,needle", REJECTED, ids=[c[0] for c in REJECTED])
def test_rejected(name, kwargs, value, needle):
    spec = FeatureSpec("my_feature", **kwargs)
    with pytest.raises(FeatureValueError) as info:
        roundtrip(spec, value)
    message = str(info.value)
    assert needle in message
    assert "'my_feature'" in message  # names the feature
    assert "expected" in message  # says what was expected
    assert info.value.feature == "my_feature"


def test_rejection_names_type_and_value():
    with pytest.raises(FeatureValueError) as info:
        roundtrip(FeatureSpec("age", "int64"), 3.5)
    assert str(info.value).startswith("feature 'age': expected int64, got float 3.5")


def test_huge_value_preview_is_bounded():
    with pytest.raises(FeatureValueError) as info:
        roundtrip(FeatureSpec("blob", "int64"), "x" * 100_000)
    assert len(str(info.value)) < 300


@pytest.mark.parametrize("unit,expected", [
    ("s", 1577836800), ("ms", 1577836800123), ("us", 1577836800123456),
    ("ns", 1577836800123456000), ("days", 18262),
])
def test_datetime_units(unit, expected):
    value = datetime.datetime(2020, 1, 1, 0, 0, 0, 123456, tzinfo=UTC)
    assert roundtrip(FeatureSpec("t", "int64", unit=unit), value) == expected


@pytest.mark.parametrize("missing,default,value,expected", [
    ("omit", None, None, None),
    ("default", 7, None, 7),
    ("default", 7, 0, 0),  # zero is a value, not missing
    ("default", "n/a", "", ""),
])
def test_missing_policies(missing, default, value, expected):
    dtype = "string" if isinstance(default, str) else "int64"
    spec = FeatureSpec("f", dtype, missing=missing, default=default)
    assert roundtrip(spec, value) == expected


def test_nan_as_missing_uses_the_missing_policy():
    spec = FeatureSpec("f", "float", nan="missing", missing="default", default=-1.0)
    assert roundtrip(spec, math.nan) == -1.0
    spec = FeatureSpec("f", "float", nan="missing")
    with pytest.raises(FeatureValueError, match="required"):
        roundtrip(spec, math.nan)


def test_policy_does_not_depend_on_protobuf_backend():
    """protobuf 6 accepts True in an Int64List and turns 1e40 into inf; we decide ourselves."""
    from beam_tfrecords.transforms.proto import example_pb2

    lenient = example_pb2.FloatList(value=[1e40])
    assert math.isinf(lenient.value[0])  # what the backend would silently store
    with pytest.raises(FeatureValueError):
        ExampleEncoder([FeatureSpec("f", "float")]).encode({"f": 1e40})


# --- text reaching the coercion follows a CSV cell's rules, whatever brought it -----------------

TEXT_CELLS = ["42", " 42 ", "-7", "+3", "true", "FALSE", "517.0", "1e3", "-2.0E+2", "12.5",
              "0e-999999999", "1e999999999999", "9223372036854775807", "9223372036854775808",
              "nan", "inf", "-Infinity", "1e400", "1e-400", "2.5", ".5", "5.", "", " ", "x",
              "0x1f", "1_000", "١٢٣", "2020-01-01", "12.34", "1.005"]


def _csv_then_coerced(spec: FeatureSpec, text: str):
    """What a CSV cell of ``text`` becomes: parse_cell, then the coercion (or the reason)."""
    from beam_tfrecords.transforms.readers.read_csv import CellError, parse_cell

    try:
        value = parse_cell(spec, text)
    except CellError as err:
        return ("refused", err.reason)
    return _coerced(spec, value)


def _coerced(spec: FeatureSpec, value):
    coerce = element_coercer(spec.dtype, spec.name, spec.unit, spec.nan, spec.format,
                             spec.scale)
    try:
        got = coerce(value)
    except FeatureValueError as err:
        return ("refused", err.reason)
    return ("value", repr(got))


@pytest.mark.parametrize("kwargs", [{"dtype": "int64"}, {"dtype": "float"},
                                    {"dtype": "int64", "scale": 2},
                                    {"dtype": "int64", "format": "iso8601", "unit": "days"}],
                         ids=["int64", "float", "scale", "date"])
@pytest.mark.parametrize("text", TEXT_CELLS)
def test_text_in_a_row_is_what_the_same_csv_cell_is(kwargs, text):
    """Rows from the API, Beam YAML (its CSV reader types a column as text after one bad cell)
    or a BigQuery STRING column meet the rules our CSV reader applies to the same text."""
    spec = FeatureSpec("f", **kwargs)
    assert _coerced(spec, text) == _csv_then_coerced(spec, text)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="0123456789+-.eE xtruefalsn", max_size=12),
       dtype=st.sampled_from(["int64", "float"]))
def test_any_text_agrees_with_the_csv_cell_rules(text, dtype):
    spec = FeatureSpec("f", dtype)
    assert _coerced(spec, text) == _csv_then_coerced(spec, text)
