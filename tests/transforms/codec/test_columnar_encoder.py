"""The columnar encoder against the per-row encoder: same bytes, same rejects, same messages.

The reference is what the row path does with the same batch: ``ExampleEncoder.encode`` on every
row of ``batch.to_pylist()``. Hypothesis draws Arrow schemas, feature specs and values (nulls,
empty lists, NaN, inf, huge ints, unicode and invalid UTF-8, float32 overflow); the tables pin
which feature/column combinations are encoded column-wise and which fall back per row. The
layout underneath (``columnar_layout.assemble``) is also checked on its own against plain
row-by-row concatenation, in tiles of every size and with each way of writing a span.
"""

from __future__ import annotations

import datetime
import decimal
import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms.codec import arrow_columns, columnar_encoder, columnar_layout, wire
from beam_tfrecords.transforms.codec.coercion import FLOAT32_OVERFLOW, FeatureValueError
from beam_tfrecords.transforms.codec.columnar_encoder import COLUMNAR, PER_ROW, ColumnarEncoder
from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F


def row_path(specs, batch):
    """(accepted row indices, their bytes, [(row, message)]) the per-row encoder produces."""
    encoder = ExampleEncoder(specs)
    good, data, rejects = [], [], []
    for index, record in enumerate(batch.to_pylist()):
        try:
            data.append(encoder.encode(record))
            good.append(index)
        except FeatureValueError as err:
            rejects.append((index, str(err)))
    return good, data, rejects


def assert_same_as_rows(specs, batch, encoder=None):
    encoder = encoder or ColumnarEncoder(specs)
    out, good, rejects = encoder.encode(batch)
    want_good, want_data, want_rejects = row_path(specs, batch)
    assert good.tolist() == want_good
    assert list(out) == want_data
    assert [(i, str(err)) for i, err in rejects] == want_rejects
    assert all(isinstance(err, FeatureValueError) for _, err in rejects)
    return encoder


# -- strategies -------------------------------------------------------------------------------

INT64 = st.one_of(st.integers(-(2**63), 2**63 - 1),
                  st.sampled_from([0, 1, -1, 127, 128, 2**63 - 1, -(2**63), 300, -300]))
FLOAT64 = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.5, 1e40, -1e40, 3.4028234663852886e38, FLOAT32_OVERFLOW,
                     -FLOAT32_OVERFLOW, np.nextafter(FLOAT32_OVERFLOW, 0), 2.0**63, -(2.0**63),
                     1e-45, math.inf, -math.inf, math.nan, 7.0]),
)
LEAVES = {
    "int64": (pa.int64(), INT64),
    "int32": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "uint64": (pa.uint64(), st.one_of(st.integers(0, 2**64 - 1),
                                      st.sampled_from([2**63 - 1, 2**63, 2**64 - 1]))),
    "uint8": (pa.uint8(), st.integers(0, 255)),
    "float64": (pa.float64(), FLOAT64),
    "float32": (pa.float32(), st.floats(width=32)),
    "bool": (pa.bool_(), st.booleans()),
    "string": (pa.string(), st.text(max_size=6)),
    "large_string": (pa.large_string(), st.text(max_size=6)),
    "binary": (pa.binary(), st.one_of(st.binary(max_size=6),
                                      st.sampled_from([b"\xff", b"\xc3\xa9", b""]))),
    "large_binary": (pa.large_binary(), st.binary(max_size=80)),
    # Timestamps and dates (issue #18): raw values within Python's datetime range (years 1 to
    # 9999), around the epoch and the range's ends, every unit, with and without time zone.
    "ts_s": (pa.timestamp("s"), st.one_of(st.integers(-62_135_596_800, 253_402_300_799),
                                          st.sampled_from([0, -1, 1, 86_399, -86_401]))),
    "ts_ms_utc": (pa.timestamp("ms", tz="UTC"),
                  st.one_of(st.integers(-62_135_596_800_000, 253_402_300_799_999),
                            st.sampled_from([0, -1, 999, -1500, 1]))),
    # (A day inside the range's ends: to_pylist() of 0001-01-01T00:00Z in New York's local
    # time, 4:56 earlier, is before the year 1 and raises in the reference itself.)
    "ts_us_tz": (pa.timestamp("us", tz="America/New_York"),
                 st.integers(-62_135_510_400_000_000, 253_402_214_399_999_999)),
    "ts_ns": (pa.timestamp("ns"), st.one_of(st.integers(-(2**63) + 1, 2**63 - 1),
                                            st.sampled_from([0, -1, -1500, 999, 1001]))),
    "date32": (pa.date32(), st.integers(-719_162, 2_932_896)),
    "date64": (pa.date64(), st.integers(-62_135_596_800_000, 253_402_300_799_999)),
    "decimal": (pa.decimal128(12, 3), st.one_of(
        st.decimals(min_value=-10**8, max_value=10**8, places=3, allow_nan=False),
        st.sampled_from([decimal.Decimal("0.100"), decimal.Decimal("-5.000"),
                         decimal.Decimal("7.000"), decimal.Decimal("99999999.999")]))),
    "decimal_whole": (pa.decimal128(20, 0), st.integers(-(2**63), 2**63 - 1).map(decimal.Decimal)),
    "decimal256": (pa.decimal256(40, 2), st.one_of(
        st.decimals(min_value=-10**30, max_value=10**30, places=2, allow_nan=False),
        st.sampled_from([decimal.Decimal("1.25"), decimal.Decimal("-0.01")]))),
}
# Date and datetime text (issue #18, item 2), for int64 features with a date format: ISO-8601
# with and without offsets and fractions, strptime text, and near misses.
DATE_TEXT = st.one_of(
    st.builds(lambda moment, sep: moment.isoformat(sep=sep),
              st.datetimes(min_value=datetime.datetime(1, 1, 1),
                           max_value=datetime.datetime(9999, 12, 31, 23, 59, 59, 999999),
                           timezones=st.sampled_from([None, datetime.timezone.utc,
                                                      datetime.timezone(-datetime.timedelta(
                                                          hours=5, minutes=30))])),
              st.sampled_from(["T", " "])),
    st.dates().map(str),
    st.sampled_from(["2024-02-30", "0000-01-01", "2024-03-01T12:34:56.123456789Z",
                     "1969-12-31T23:59:59.5", "2300-01-01", "01/03/2024 12:34",
                     "1/3/2024 12:34", "31/02/2024 00:00", " 2024-03-01", "2024-03-01T24:00",
                     "x", ""]))
# Times of day (issue #18): every unit, the day's ends included.
LEAVES.update({
    "time32_s": (pa.time32("s"), st.one_of(st.integers(0, 86_399), st.sampled_from([0, 86_399]))),
    "time32_ms": (pa.time32("ms"), st.integers(0, 86_399_999)),
    "time64_us": (pa.time64("us"), st.integers(0, 86_399_999_999)),
    "time64_ns": (pa.time64("ns"), st.one_of(st.integers(0, 86_399_999_999_999),
                                             st.sampled_from([999, 1000, 1001]))),
})
LEAVES["date_text"] = (pa.string(), DATE_TEXT)
LEAVES["date_large_text"] = (pa.large_string(), DATE_TEXT)
NAMES = ["a", "b", "ab", "a/b", "B", "é", "z/flat_values", "a.b", "k" * 130]


def dictionary_leaves(arr: pa.Array) -> pa.Array:
    """``arr`` with its leaf values dictionary-encoded below every list level."""
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        cls = pa.ListArray if pa.types.is_list(arr.type) else pa.LargeListArray
        return cls.from_arrays(arr.offsets, dictionary_leaves(arr.values),
                               mask=arr.is_null() if arr.null_count else None)
    if pa.types.is_fixed_size_list(arr.type):
        return pa.FixedSizeListArray.from_arrays(
            dictionary_leaves(arr.values), arr.type.list_size,
            mask=arr.is_null() if arr.null_count else None)
    try:
        return arr.dictionary_encode()
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):  # a type Arrow cannot hash
        return arr


@st.composite
def column(draw, rows):
    """One Arrow column of ``rows`` values."""
    kind, values = draw(column_values(rows))
    arr = pa.array(values, type=kind)
    if not pa.types.is_struct(kind) and not pa.types.is_null(kind) and draw(st.booleans()):
        arr = dictionary_leaves(arr)  # dictionaries at the leaves, under every list level
    return arr


def list_level(draw, kind, item, max_size):
    """One more list level over (Arrow type, value strategy): a list, large_list or
    fixed_size_list (of 1 or 2), whose values may be null."""
    level = draw(st.sampled_from(["list", "large_list", "fixed"]))
    if level == "fixed":
        size = draw(st.integers(1, 2))
        kind, item = pa.list_(kind, size), st.lists(item, min_size=size, max_size=size)
    else:
        make = pa.list_ if level == "list" else pa.large_list
        kind, item = make(kind), st.lists(item, max_size=max_size)
    if draw(st.booleans()):
        item = st.one_of(st.none(), item)
    return kind, item


@st.composite
def column_values(draw, rows):
    """(arrow type, python values) of one column."""
    leaf_name = draw(st.sampled_from(sorted(LEAVES)))
    leaf_type, leaf_values = LEAVES[leaf_name]
    maybe = st.one_of(st.none(), leaf_values) if draw(st.booleans()) else leaf_values
    shape = draw(st.sampled_from(["scalar", "list", "large_list", "fixed", "nested", "deep",
                                  "struct", "null"]))
    if shape == "null":
        return pa.null(), [None] * rows
    if shape == "deep":  # three levels, each a list, large_list or fixed_size_list
        kind, item = leaf_type, maybe
        for _ in range(3):
            kind, item = list_level(draw, kind, item, max_size=2)
        return kind, draw(st.lists(item, min_size=rows, max_size=rows))
    if shape == "scalar":
        kind, item = leaf_type, maybe
    elif shape in ("list", "large_list"):
        make = pa.list_ if shape == "list" else pa.large_list
        kind, item = make(leaf_type), st.lists(maybe, max_size=4)
    elif shape == "fixed":
        size = draw(st.integers(1, 3))
        kind, item = pa.list_(leaf_type, size), st.lists(maybe, min_size=size, max_size=size)
    elif shape == "nested":
        inner = st.lists(maybe, max_size=3)
        if draw(st.booleans()):
            inner = st.one_of(st.none(), inner)
        kind, item = pa.list_(pa.list_(leaf_type)), st.lists(inner, max_size=3)
    else:
        kind = pa.struct([("x", leaf_type)])
        item = st.builds(lambda v: {"x": v}, maybe)
    nullable = draw(st.booleans())
    values = draw(st.lists(st.one_of(st.none(), item) if nullable else item, min_size=rows,
                           max_size=rows))
    return kind, values


DEFAULTS = {"int64": 7, "float": 0.5, "bytes": b"d", "string": "d"}


def nest(value, shape):
    """A value of ``shape`` (-1 as one) built of ``value``: a ragged feature's default."""
    for dim in reversed(shape):
        value = [value] * abs(dim)
    return value


@st.composite
def spec(draw, name, sources):
    dtype = draw(st.sampled_from(["int64", "float", "bytes", "string"]))
    shape = draw(st.sampled_from([(), (), (-1,), (2,), (1,), (-1, 2), (2, 1), (-1, -1),
                                  (2, -1), (-1, -1, -1), (-1, 2, -1)]))
    missing = draw(st.sampled_from(["error", "omit", "default", "empty"]))
    nan = "allow"
    if dtype == "float":
        nan = draw(st.sampled_from(["allow", "error"] + (["missing"] if not shape else [])))
    default = None
    if missing == "default":
        value = DEFAULTS[dtype]
        if not shape:
            default = value
        elif -1 in shape[1:]:
            default = nest(value, shape)
        else:
            default = [value] * math.prod(abs(d) for d in shape)
    source = draw(st.sampled_from(sources))
    unit = draw(st.sampled_from(["s", "ms", "us", "ns", "days"]))
    fmt, scale = None, 0
    if dtype == "int64":  # text is a date for these; numbers times 10**scale
        fmt = draw(st.sampled_from([None, "iso8601", "%d/%m/%Y %H:%M"]))
        if fmt is None:  # (text read as dates takes no scale)
            scale = draw(st.sampled_from([0, 0, 1, 3, 18]))
    return F(name, dtype, shape, source=source, missing=missing, default=default, nan=nan,
             unit=unit, format=fmt, scale=scale)


@st.composite
def case(draw):
    rows = draw(st.integers(0, 7))
    ncols = draw(st.integers(1, 3))
    arrays, names = [], []
    for i in range(ncols):
        arrays.append(draw(column(rows + 1)))
        names.append(f"c{i}")
    if draw(st.booleans()):  # a literal dotted column name, as CSV headers have
        names[-1] = "c9.x"
    batch = pa.RecordBatch.from_arrays(arrays, names=names)
    batch = batch.slice(1) if draw(st.booleans()) else batch.slice(0, rows)
    sources = [(n,) for n in names] + [(n, "x") for n in names] + [("c9", "x"), ("nope",)]
    feature_names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True))
    specs = [draw(spec(name, sources)) for name in feature_names]
    return specs, batch


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case())
@pytest.mark.slow
def test_columnar_bytes_and_rejects_equal_the_row_encoder(drawn):
    specs, batch = drawn
    assert_same_as_rows(specs, batch)


# Nested lists and ragged shapes (issue #18): a column of one to three list levels (list,
# large_list, fixed_size_list; dictionaries at the leaves) against shapes as deep, shallower
# and deeper, whose stored row lengths must equal the row path's walk.
NESTED_LEAVES = ["int64", "float64", "string", "large_binary", "decimal", "time64_us", "ts_s"]
NESTED_SHAPES = [(-1,), (2,), (-1, 2), (-1, -1), (2, -1), (1, -1), (-1, -1, -1), (-1, 2, -1),
                 (2, -1, -1)]


@st.composite
def nested_case(draw):
    leaf_type, leaf_values = LEAVES[draw(st.sampled_from(NESTED_LEAVES))]
    kind, item = leaf_type, st.one_of(st.none(), leaf_values) if draw(st.booleans()) \
        else leaf_values
    for _ in range(draw(st.integers(1, 3))):
        kind, item = list_level(draw, kind, item, max_size=3)
    rows = draw(st.integers(0, 6))
    arr = pa.array(draw(st.lists(item, min_size=rows + 1, max_size=rows + 1)), type=kind)
    if draw(st.booleans()):
        arr = dictionary_leaves(arr)
    arr = arr.slice(1) if draw(st.booleans()) else arr.slice(0, rows)
    specs = []
    for name in draw(st.lists(st.sampled_from(["n", "m", "n/x"]), min_size=1, max_size=2,
                              unique=True)):
        shape = draw(st.sampled_from(NESTED_SHAPES))
        dtype = draw(st.sampled_from(["int64", "float", "bytes", "string"]))
        missing = draw(st.sampled_from(["error", "omit", "default", "empty"]))
        default = nest(DEFAULTS[dtype], shape) if missing == "default" else None
        if missing == "default" and -1 not in shape[1:]:
            default = [DEFAULTS[dtype]] * math.prod(abs(d) for d in shape)
        specs.append(F(name, dtype, shape, source=("c",), missing=missing, default=default,
                       unit=draw(st.sampled_from(["s", "us"]))))
    return specs, pa.RecordBatch.from_arrays([arr], names=["c"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nested_case())
def test_nested_and_ragged_lists_equal_the_row_encoder(drawn):
    specs, batch = drawn
    encoder = assert_same_as_rows(specs, batch)
    assert {c.mode for c in encoder.plan(batch.schema).values()} <= {COLUMNAR, PER_ROW}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), INT64), max_size=20),
       st.lists(st.one_of(st.none(), FLOAT64), max_size=20),
       st.lists(st.one_of(st.none(), st.text(max_size=30)), max_size=20))
def test_tutorial_like_scalars_equal_the_row_encoder(ints, floats, texts):
    n = min(len(ints), len(floats), len(texts))
    batch = pa.record_batch({"i": pa.array(ints[:n], pa.int64()),
                             "f": pa.array(floats[:n], pa.float64()),
                             "s": pa.array(texts[:n], pa.string())})
    specs = [F("i", "int64", missing="omit"), F("f", "float", missing="default", default=1.0),
             F("s", "bytes")]
    assert_same_as_rows(specs, batch)
    empty = [F("i", "int64", missing="empty"), F("f", "float", nan="missing", missing="empty"),
             F("s", "bytes", missing="empty")]
    assert_same_as_rows(empty, batch)


# -- tables -----------------------------------------------------------------------------------

PLAN_CASES = [
    # (feature spec, arrow type of column "c", expected mode, words in the reason)
    ("int_scalar", F("x", "int64", source=("c",)), pa.int64(), COLUMNAR, "int64 -> int64"),
    ("bool_to_int", F("x", "int64", source=("c",)), pa.bool_(), COLUMNAR, "bool"),
    ("int_to_float", F("x", "float", source=("c",)), pa.int32(), COLUMNAR, "int32 -> float"),
    ("text_to_int", F("x", "int64", source=("c",)), pa.string(), PER_ROW,
     "number text is parsed per row"),
    ("text_to_float", F("x", "float", source=("c",)), pa.string(), PER_ROW,
     "number text is parsed per row"),
    ("date_text", F("x", "int64", source=("c",), unit="ms", format="iso8601"), pa.string(),
     COLUMNAR, "string -> int64"),
    ("fixed_list", F("x", "float", (2,), source=("c",)), pa.list_(pa.float32(), 2), COLUMNAR,
     "shape [2]"),
    ("nested_list", F("x", "int64", (-1, 3), source=("c",)), pa.list_(pa.list_(pa.int64())),
     COLUMNAR, "shape [-1, 3]"),
    ("flat_list_for_2d", F("x", "int64", (2, 3), source=("c",)), pa.list_(pa.int64()),
     COLUMNAR, "shape [2, 3]"),
    ("list_into_scalar", F("x", "int64", source=("c",)), pa.list_(pa.int64()), COLUMNAR,
     "every present value is rejected"),
    ("dictionary", F("x", "string", source=("c",)), pa.dictionary(pa.int8(), pa.string()),
     COLUMNAR, "string"),
    ("null_column", F("x", "int64", source=("c",), missing="omit"), pa.null(), COLUMNAR,
     "null"),
    ("ragged", F("x", "int64", (-1, -1), source=("c",)), pa.list_(pa.list_(pa.int64())),
     COLUMNAR, "shape [-1, -1]"),
    ("ragged_shallower", F("x", "int64", (2, -1, -1), source=("c",), missing="omit"),
     pa.large_list(pa.list_(pa.int64())), COLUMNAR, "shape [2, -1, -1]"),
    ("ragged_deeper", F("x", "float", (-1, -1), source=("c",)),
     pa.list_(pa.list_(pa.list_(pa.float32(), 2))), COLUMNAR, "shape [-1, -1]"),
    ("ragged_scalar_column", F("x", "int64", (-1, -1), source=("c",)), pa.int64(), COLUMNAR,
     "every present value is rejected"),
    ("time_of_day", F("x", "int64", source=("c",), unit="ms"), pa.time64("us"), COLUMNAR,
     "time64[us] -> int64"),
    ("time32_list", F("x", "int64", (-1,), source=("c",), unit="ns"), pa.list_(pa.time32("s")),
     COLUMNAR, "shape [-1]"),
    ("time_to_float_rejects", F("x", "float", source=("c",)), pa.time32("ms"), COLUMNAR,
     "time32[ms] -> float"),
    ("decimal_scaled", F("x", "int64", source=("c",), scale=2), pa.decimal128(9, 2), COLUMNAR,
     "decimal128(9, 2) -> int64"),
    ("int_scaled", F("x", "int64", (-1,), source=("c",), scale=3), pa.list_(pa.int32()),
     COLUMNAR, "int32"),
    ("float_scaled", F("x", "int64", source=("c",), scale=2), pa.float64(), COLUMNAR,
     "double -> int64"),
    ("dictionary_in_list", F("x", "string", (-1,), source=("c",)),
     pa.large_list(pa.dictionary(pa.int32(), pa.large_string())), COLUMNAR, "shape [-1]"),
    ("dictionary_of_timestamps", F("x", "int64", source=("c",), unit="ms"),
     pa.dictionary(pa.int16(), pa.timestamp("us", tz="UTC")), COLUMNAR, "int64"),
    ("fixed_size_binary", F("x", "bytes", source=("c",)), pa.binary(3), COLUMNAR,
     "fixed_size_binary[3] -> bytes"),
    ("timestamp", F("x", "int64", source=("c",)), pa.timestamp("ms"), COLUMNAR,
     "timestamp[ms] -> int64"),
    ("timestamp_tz_list", F("x", "int64", (-1,), source=("c",), unit="ns"),
     pa.list_(pa.timestamp("us", tz="UTC")), COLUMNAR, "shape [-1]"),
    ("date", F("x", "int64", source=("c",), unit="days"), pa.date32(), COLUMNAR,
     "date32[day] -> int64"),
    ("timestamp_to_float_rejects", F("x", "float", source=("c",)), pa.timestamp("s"),
     COLUMNAR, "timestamp[s] -> float"),
    ("decimal", F("x", "float", source=("c",)), pa.decimal128(5, 2), COLUMNAR,
     "decimal128(5, 2) -> float"),
    ("map", F("x", "int64", (-1,), source=("c",)), pa.map_(pa.string(), pa.int64()), PER_ROW,
     "map"),
    ("three_levels_for_1d", F("x", "int64", (-1,), source=("c",)),
     pa.list_(pa.list_(pa.list_(pa.int64()))), COLUMNAR, "shape [-1]"),
    ("two_levels_for_3d", F("x", "int64", (-1, 2, 3), source=("c",)),
     pa.list_(pa.list_(pa.int64())), COLUMNAR, "shape [-1, 2, 3]"),
    ("path_through_scalar", F("x", "int64", source=("c", "y")), pa.int64(), PER_ROW,
     "goes through"),
    ("struct_field", F("x", "int64", source=("c", "y")), pa.struct([("y", pa.int64())]),
     COLUMNAR, "int64"),
    ("struct_without_field", F("x", "int64", source=("c", "z")),
     pa.struct([("y", pa.int64())]), PER_ROW, "absent"),
    ("absent_column", F("x", "int64", source=("gone",), missing="omit"), pa.int64(), COLUMNAR,
     "missing in every row"),
    ("sequence_makes_all_per_row", F("x", "int64", source=("c",), sequence=True),
     pa.list_(pa.int64()), PER_ROW, "SequenceExample"),
]


@pytest.mark.parametrize("spec,kind,mode,words", [c[1:] for c in PLAN_CASES],
                         ids=[c[0] for c in PLAN_CASES])
def test_plan_choice_and_reason(spec, kind, mode, words):
    schema = pa.schema([("c", kind)])
    choice = ColumnarEncoder([spec]).plan(schema)["x"]
    assert (choice.mode, choice.feature) == (mode, "x")
    assert words in choice.reason


@pytest.mark.parametrize("spec,kind,mode,words", [c[1:] for c in PLAN_CASES],
                         ids=[c[0] for c in PLAN_CASES])
def test_plan_cases_encode_like_the_row_encoder(spec, kind, mode, words):
    values = {
        pa.types.is_timestamp: [datetime.datetime(2020, 1, 2, 3, 4, 5), None],
        pa.types.is_date: [datetime.date(2021, 5, 6), None],
        pa.types.is_decimal: [None, None],
        pa.types.is_map: [[("k", 1)], []],
        pa.types.is_time: [datetime.time(1, 2, 3), None],
    }
    sample = next((v for test, v in values.items() if test(kind)), None)
    arr = pa.array(sample, kind) if sample is not None else pa.nulls(2, kind)
    batch = pa.RecordBatch.from_arrays([arr], names=["c"])
    assert_same_as_rows([spec], batch)


def test_per_row_feature_merges_in_sorted_key_order():
    # "x/flat_values" and "x/row_lengths_1" (columnar) sort around "x/m" (per row: a map).
    specs = [F("x", "int64", (-1, -1), source=("r",)), F("x/m", "int64", (-1,), source=("i",)),
             F("a", "string", source=("s",))]
    batch = pa.record_batch({"r": pa.array([[[1, 2], []], [[3]]]),
                             "i": pa.array([[("k", 5)], []], pa.map_(pa.string(), pa.int64())),
                             "s": ["p", "q"]})
    encoder = assert_same_as_rows(specs, batch)
    assert encoder.plan(batch.schema)["x"].mode == COLUMNAR
    assert encoder.plan(batch.schema)["x/m"].mode == PER_ROW
    out, _, _ = encoder.encode(batch)
    assert list(wire.decode_example(out[0])) == ["a", "x/flat_values", "x/m", "x/row_lengths_1"]


def test_ragged_rows_store_the_row_encoders_row_lengths():
    specs = [F("x", "int64", (-1, -1, -1), source=("r",), missing="default",
               default=[[[9]]]), F("y", "float", (2, -1), source=("f",), missing="empty")]
    r = pa.array([[[[1, 2], []], [[3]]], None, [], [[]]], pa.list_(pa.large_list(
        pa.list_(pa.int64()))))
    f = pa.array([[[0.5], [1.5, 2.5]], None, [[], []], [[1.0], []]],
                 pa.list_(pa.list_(pa.float32())))
    batch = pa.record_batch({"r": r, "f": f})
    encoder = assert_same_as_rows(specs, batch)
    assert {c.mode for c in encoder.plan(batch.schema).values()} == {COLUMNAR}
    out, _, _ = encoder.encode(batch)
    first = wire.decode_example(out[0])
    assert first["x/row_lengths_1"] == ("int64_list", [2, 1])
    assert first["x/row_lengths_2"] == ("int64_list", [2, 0, 1])
    assert first["y/row_lengths_1"] == ("int64_list", [1, 2])
    assert wire.decode_example(out[1])["x/row_lengths_2"] == ("int64_list", [1])  # default


def test_rejected_rows_of_a_sliced_fixed_size_list_of_fixed_size_lists_keep_their_values():
    # pyarrow 25's take on such a sliced column reads the unsliced rows: the re-encoded
    # reject's message named another row's value (found by the property test).
    kind = pa.list_(pa.list_(pa.int64(), 1), 2)
    column = pa.array([[[5], [6]], [[0], [1]], [[2], [3]]], kind)
    batch = pa.record_batch({"c": column, "s": pa.array([{"x": v} for v in column.to_pylist()],
                                                        pa.struct([("x", kind)]))}).slice(1)
    assert_same_as_rows([F("a", "int64", source=("c",)), F("b", "int64", source=("s", "x"))],
                        batch)


def test_times_of_day_and_scaled_decimals_are_columnar():
    times = pa.array([0, 1_500, 86_399_999_999_999, None], pa.time64("ns"))
    prices = pa.array([decimal.Decimal("12.34"), decimal.Decimal("-0.10"), None,
                       decimal.Decimal("1.23")], pa.decimal128(9, 2))
    batch = pa.record_batch({"t": times, "p": prices, "d": prices.dictionary_encode()})
    specs = [F("t", "int64", unit="ns", missing="omit"),
             F("p", "int64", scale=2, missing="omit"),
             F("tenths", "int64", source=("d",), scale=1, missing="omit")]
    encoder = assert_same_as_rows(specs, batch)
    assert {c.mode for c in encoder.plan(batch.schema).values()} == {COLUMNAR}
    out, good, rejects = encoder.encode(batch)
    assert good.tolist() == [1, 2]  # tenths: 12.34 and 1.23 have two decimal places
    assert "more than 1 decimal places" in str(rejects[0][1])
    assert wire.decode_example(out[0])["t"] == ("int64_list", [1000])  # ns truncated to us
    assert wire.decode_example(out[0])["p"] == ("int64_list", [-10])
    assert wire.decode_example(out[0])["tenths"] == ("int64_list", [-1])


# Floats into an int64 feature with ``scale:`` (issue #18): the decimal each float is written
# as, times 10**k. Drawn as decimals of 0 to 6 places (most accepted at some scales, refused at
# others), raw doubles, and magnitudes around 2**50 and the int64 range once scaled.
SCALED_FLOATS = st.one_of(
    st.decimals(places=3, allow_nan=False, allow_infinity=False, min_value=-10**9,
                max_value=10**9).map(float),
    st.integers(-10**6, 10**6).flatmap(
        lambda n: st.integers(0, 6).map(lambda places: float(decimal.Decimal(n).scaleb(-places)))),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.floats(width=32),
    st.sampled_from([0.0, -0.0, 12.34, 1.005, 0.125, 0.1 + 0.2, 2.0**50, 2.0**53, 1e15, 1e16,
                     -1e17, 9.2e18, 9.3e18, 1e19, 1.5e300, 11258999068426.24, 1125899906842.624,
                     112589990684262.4, 5e-324]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), SCALED_FLOATS), max_size=8),
       st.sampled_from([0, 1, 2, 3, 6, 18]), st.sampled_from([pa.float64(), pa.float32()]),
       st.booleans())
def test_scaled_floats_equal_the_row_encoder(values, scale, kind, as_list):
    if kind == pa.float32():
        values = [None if v is None else float(np.float32(v)) if abs(v) < 3e38 or
                  not math.isfinite(v) else 1.0 for v in values]
    column = pa.array([[v] for v in values] if as_list else values,
                      pa.list_(kind) if as_list else kind)
    spec = F("x", "int64", (-1,) if as_list else (), source=("c",), missing="omit", scale=scale)
    encoder = assert_same_as_rows([spec], pa.record_batch({"c": column}))
    assert encoder.plan(pa.schema([("c", column.type)]))["x"].mode == COLUMNAR


def test_scaled_floats_are_the_decimal_they_are_written_as():
    values = [12.34, 0.1 + 0.2, 1.005, -7.0, 2.0**49 / 100, math.nan, 1e300, None]
    batch = pa.record_batch({"p": pa.array(values, pa.float64())})
    encoder = assert_same_as_rows([F("p", "int64", scale=2, missing="omit")], batch)
    out, good, rejects = encoder.encode(batch)
    assert good.tolist() == [0, 3, 4, 7]
    assert [wire.decode_example(r).get("p") for r in out] == [
        ("int64_list", [1234]), ("int64_list", [-700]), ("int64_list", [2**49]), None]
    assert [i for i, _ in rejects] == [1, 2, 5, 6]
    assert "more than 2 decimal places" in str(rejects[0][1])
    # Past 2**50 once scaled, one batch goes per row, where the test is exact.
    big = pa.record_batch({"p": pa.array([12.34, 1e16], pa.float64())})
    encoder = assert_same_as_rows([F("p", "int64", scale=2)], big)
    assert [wire.decode_example(r)["p"] for r in encoder.encode(big)[0]] == [
        ("int64_list", [1234]), ("int64_list", [10**18])]


def test_struct_fields_literal_dotted_columns_and_parent_nulls():
    meta = pa.array([{"label": 1}, None, {"label": None}],
                    pa.struct([("label", pa.int64())]))
    batch = pa.RecordBatch.from_arrays([meta, pa.array([7, 8, 9])], names=["meta", "x.y"])
    specs = [F("label", "int64", source=("meta", "label"), missing="default", default=-1),
             F("xy", "int64", source=("x", "y"))]
    encoder = assert_same_as_rows(specs, batch)
    assert {c.mode for c in encoder.plan(batch.schema).values()} == {COLUMNAR}


def test_rejects_carry_the_row_encoders_error():
    batch = pa.record_batch({"f": [1.0, 1e40, math.nan], "i": pa.array([1, 2**64 - 1, 3],
                                                                        pa.uint64())})
    specs = [F("f", "float", nan="error"), F("i", "int64")]
    out, good, rejects = ColumnarEncoder(specs).encode(batch)
    assert good.tolist() == [0] and len(out) == 1
    assert [(i, err.feature) for i, err in rejects] == [(1, "f"), (2, "f")]
    assert "outside the float32 range" in str(rejects[0][1])
    assert "NaN is not allowed" in str(rejects[1][1])


def test_long_values_and_many_rows_take_the_scatter_path():
    rng = np.random.default_rng(0)
    blobs = [rng.bytes(int(n)) for n in rng.integers(0, 300, size=500)]
    blobs[3] = None
    batch = pa.record_batch({"img": pa.array(blobs, pa.binary()),
                             "v": pa.array([rng.normal(size=int(k)).tolist()
                                            for k in rng.integers(0, 50, size=500)]),
                             "n": pa.array(rng.integers(-(2**62), 2**62, size=500))})
    specs = [F("img", "bytes", missing="omit"), F("v", "float", (-1,)), F("n", "int64")]
    assert_same_as_rows(specs, batch)


def test_plan_is_cached_per_schema_and_logged_once(caplog):
    encoder = ColumnarEncoder([F("x", "int64", (-1,), source=("c",), missing="omit")])
    batch = pa.record_batch({"c": pa.array([[("k", 1)], None], pa.map_(pa.string(),
                                                                         pa.int64()))})
    with caplog.at_level("INFO", logger="beam_tfrecords.transforms.codec.columnar_encoder"):
        encoder.encode(batch)
        encoder.encode(batch)
    messages = [r.getMessage() for r in caplog.records if "encoded per row" in r.getMessage()]
    assert len(messages) == 1 and "'x'" in messages[0]


def test_rows_flagged_by_mistake_keep_the_row_encoders_bytes(monkeypatch, caplog):
    """The safety net: a columnar check stricter than the policy never drops a good row."""
    specs = [F("i", "int64"), F("s", "string", missing="omit")]
    batch = pa.record_batch({"i": [1, None, 3], "s": ["a", "b", None]})
    encoder = ColumnarEncoder(specs)
    real = ColumnarEncoder._encode_column

    def flag_everything(self, spec, *args):
        enc = real(self, spec, *args)
        enc.bad[:] = True
        return enc

    monkeypatch.setattr(ColumnarEncoder, "_encode_column", flag_everything)
    with caplog.at_level("WARNING", logger="beam_tfrecords.transforms.codec.columnar_encoder"):
        assert_same_as_rows(specs, batch, encoder)
    assert any("flagged 2 rows" in r.getMessage() for r in caplog.records)


# -- the row layout ---------------------------------------------------------------------------

def write_modes():
    """(tile bytes, padding allowed): one tile, one row per tile, a few rows per tile, and a
    few rows per tile with every ragged span written byte-wise instead of with its padding."""
    default = columnar_layout.TILE_BYTES
    return [(default, True), (1, True), (40, True), (40, False), (default, False)]


def assemble_as(blocks, n, tile_bytes, padding):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(columnar_layout, "TILE_BYTES", tile_bytes)
        if not padding:
            mp.setattr(columnar_layout, "_padding_fits", lambda *args: False)
        payload, offsets = columnar_layout.assemble(blocks, n)
    return [payload[offsets[r]:offsets[r + 1]].tobytes() for r in range(n)]


@st.composite
def layout_case(draw):
    """(blocks, rows, every row's expected bytes): constants, constants in some rows, blocks
    every row fills (lengths as an int or per row), ragged blocks, short and long flat ones."""
    n = draw(st.integers(0, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    blocks, pieces = [], []
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["const", "const_on", "full", "full_lens", "ragged", "flat"]))
        width = draw(st.integers(1, 12))
        mat = rng.integers(0, 256, (n, width), dtype=np.uint8)
        row_lens = st.lists(st.integers(0, width), min_size=n, max_size=n)
        if kind in ("const", "const_on"):
            data = mat[0].tobytes() if n else b"c" * width
            on = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
            block = columnar_layout.const(data, on if kind == "const_on" else None)
            piece = [data if kind == "const" or on[r] else b"" for r in range(n)]
        elif kind == "flat":
            lens = np.array(draw(st.lists(st.sampled_from([0, 1, 5, 64, 65, 90]), min_size=n,
                                          max_size=n)), dtype=np.int64)
            data = rng.integers(0, 256, int(lens.sum()), dtype=np.uint8)
            starts = columnar_layout.exclusive_cumsum(lens)
            block = columnar_layout.Flat(data, starts, lens)
            piece = [data[starts[r]:starts[r] + lens[r]].tobytes() for r in range(n)]
        else:
            lens = width if kind == "full" else np.full(n, width, dtype=np.int64)
            if kind == "ragged":
                lens = np.array(draw(row_lens), dtype=np.int64)
            block = columnar_layout.Padded(mat, lens)
            piece = [mat[r, :width if kind != "ragged" else lens[r]].tobytes() for r in range(n)]
        blocks.append(block)
        pieces.append(piece)
    return blocks, n, [b"".join(p[r] for p in pieces) for r in range(n)]


@settings(max_examples=200, deadline=None)
@given(layout_case())
def test_assemble_concatenates_each_rows_blocks_in_every_write_mode(drawn):
    blocks, n, want = drawn
    for tile_bytes, padding in write_modes():
        assert assemble_as(blocks, n, tile_bytes, padding) == want, (tile_bytes, padding)


def test_wide_rows_in_small_tiles_keep_the_row_encoders_bytes(monkeypatch):
    """Padding spilled across row and tile ends (a string ends each row), rows missing a
    feature, and the byte-wise writes forced everywhere: still the row encoder's bytes."""
    rng = np.random.default_rng(3)
    n = 300
    words = ["", "a", "bb", "x" * 20, "é" * 7]
    batch = pa.record_batch({
        "f": pa.array(rng.standard_normal(n)),
        "i": pa.array(rng.integers(-(2**40), 2**40, n)),
        "l": pa.array([rng.standard_normal(int(k)).astype(np.float32).tolist()
                       for k in rng.integers(0, 4, n)], pa.list_(pa.float32())),
        "o": pa.array([None if k == 0 else int(k) * 1000 for k in rng.integers(0, 3, n)]),
        "s": pa.array([words[k] for k in rng.integers(0, len(words), n)]),
    })
    specs = [F("f", "float"), F("i", "int64"), F("l", "float", (-1,)),
             F("o", "int64", missing="omit"), F("s", "string")]
    for tile_bytes, padding in write_modes():
        with monkeypatch.context() as mp:
            mp.setattr(columnar_layout, "TILE_BYTES", tile_bytes)
            if not padding:
                mp.setattr(columnar_layout, "_padding_fits", lambda *args: False)
            assert_same_as_rows(specs, batch)


def test_nanosecond_timestamps_keep_their_nanoseconds_on_both_paths():
    # Arrow's timestamp[ns] becomes a pandas Timestamp per row; its nanoseconds used to be
    # dropped (-1500 ns stored as -2000). Both paths now store the exact value, and floor for
    # coarser units (-1500 ns is microsecond -2, second -1).
    raw = [-1500, 1, 1_700_000_000_123_456_789]
    batch = pa.record_batch({"t": pa.array(raw, pa.timestamp("ns", tz="UTC"))})
    for unit, expected in (("ns", raw), ("us", [-2, 0, 1_700_000_000_123_456]),
                           ("s", [-1, 0, 1_700_000_000])):
        specs = [F("t", "int64", unit=unit)]
        assert_same_as_rows(specs, batch)
        examples, rows, errors = ColumnarEncoder(specs).encode(batch)
        assert errors == [] and list(rows) == [0, 1, 2]
        stored = [wire.decode_example(bytes(r))["t"] for r in examples]
        assert stored == [("int64_list", [v]) for v in expected], unit


def test_date_text_is_parsed_over_the_column(monkeypatch):
    """ISO-8601 text into an int64 feature with a date format: Arrow decides the column, and
    only the values around a bad one are parsed one by one (issue #18, item 2)."""
    from beam_tfrecords.transforms.codec import text_values

    calls = []
    reference = text_values.parse_time
    monkeypatch.setattr(text_values, "parse_time",
                        lambda *args: calls.append(args) or reference(*args))
    texts = [f"2024-03-{d:02d}T{h:02d}:00:00{zone}" for d in range(1, 29) for h in range(24)
             for zone in ("", "Z", ".5+02:00")]
    texts[100] = "2024-02-30"
    batch = pa.record_batch({"c": pa.array(texts), "d": pa.array(texts).dictionary_encode()})
    specs = [F("x", "int64", source=("c",), unit="ms", format="iso8601"),
             F("y", "int64", source=("d",), unit="ns", format="iso8601")]  # dictionary
    assert_same_as_rows(specs, batch)
    calls.clear()  # the per-row reference above parses every value; count the columnar path
    ColumnarEncoder(specs).encode(batch)
    assert 0 < len(calls) <= 2 * 2 * text_values._LEAF
    lists = pa.record_batch({"d": pa.array([texts[:3], [], None, texts[99:102]])})
    assert_same_as_rows([F("y", "int64", (-1,), source=("d",), format="iso8601",
                           missing="omit")], lists)


# -- wide configs stay linear ----------------------------------------------------------------------

class _CountingSchema:
    """A schema that counts the column names read from it and the fields looked up."""

    def __init__(self, schema):
        self._schema = schema
        self.names_read = 0
        self.fields_read = 0

    @property
    def names(self):
        self.names_read += len(self._schema)
        return self._schema.names

    def field(self, i):
        self.fields_read += 1
        return self._schema.field(i)


class _CountingColumns(arrow_columns.Columns):
    built = 0
    finds = 0

    def __init__(self, schema):
        type(self).built += 1
        super().__init__(schema)

    def find(self, name):
        type(self).finds += 1
        return super().find(name)


WIDE = 2000


def _wide_schema():
    struct = pa.struct([(f"f{i}", pa.int64()) for i in range(WIDE)])
    return pa.schema([(f"c{i}", pa.int64()) for i in range(WIDE)] + [("s", struct)])


def test_resolving_every_feature_of_a_wide_schema_reads_its_names_once():
    """2,000 top-level features and 2,000 struct fields: the names are read once, each
    feature is a lookup or two -- O(n), where scanning the names per feature was n**2."""
    schema = _CountingSchema(_wide_schema())
    columns = arrow_columns.Columns(schema)
    for i in range(WIDE):
        assert arrow_columns.resolve(columns, (f"c{i}",)) == ("column", [i])
        assert arrow_columns.resolve(columns, ("s", f"f{i}")) == ("column", [WIDE, i])
    assert arrow_columns.resolve(columns, ("nowhere",)) == ("absent", None)
    assert schema.names_read == WIDE + 1
    assert schema.fields_read == WIDE  # the struct column's type, once per nested feature


@pytest.mark.slow
def test_a_wide_config_plans_once_per_schema_and_looks_each_feature_up_once(monkeypatch):
    monkeypatch.setattr(columnar_encoder, "Columns", _CountingColumns)
    monkeypatch.setattr(_CountingColumns, "built", 0)
    monkeypatch.setattr(_CountingColumns, "finds", 0)
    names = [f"c{i}" for i in range(WIDE)]
    specs = [F(name, "int64") for name in names]
    batch = pa.RecordBatch.from_arrays([pa.array([i, i + 1]) for i in range(WIDE)], names=names)
    encoder = ColumnarEncoder(specs)
    for _ in range(3):
        out, good, rejects = encoder.encode(batch)
        assert good.tolist() == [0, 1] and not rejects
    assert _CountingColumns.built == 1 and _CountingColumns.finds == WIDE
    # Features that go per row (a path through an int64 value: every row a dead letter) look
    # their columns up once per batch each: still O(features) per batch.
    per_row = [F(f"r{i}", "int64", source=(name, "x")) for i, name in enumerate(names)]
    encoder = ColumnarEncoder(per_row)
    built, finds = _CountingColumns.built, _CountingColumns.finds
    for _ in range(3):
        out, good, rejects = encoder.encode(batch)
        assert not good.size and [row for row, _ in rejects] == [0, 1]
    assert _CountingColumns.built - built == 1 + 3
    assert _CountingColumns.finds - finds <= 2 * WIDE + 3 * 3 * WIDE
