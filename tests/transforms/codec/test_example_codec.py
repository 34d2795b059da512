"""Shapes, nesting, sequences and the decoder of the spec-driven Example codec."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms.codec import wire
from beam_tfrecords.transforms.codec.coercion import FeatureValueError
from beam_tfrecords.transforms.codec.example_codec import ExampleDecoder, ExampleEncoder, lookup
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F


def encode(specs, record):
    return ExampleEncoder(specs).encode(record)


def roundtrip(specs, record):
    return ExampleDecoder(specs).decode(encode(specs, record))


@pytest.mark.parametrize("shape,value,stored", [
    ((2, 3), [[1, 2, 3], [4, 5, 6]], [1, 2, 3, 4, 5, 6]),
    ((2, 3), [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]),  # already flat
    ((2, 3), np.arange(6).reshape(2, 3), [0, 1, 2, 3, 4, 5]),
    ((2, 3), np.arange(6), [0, 1, 2, 3, 4, 5]),
    ((-1,), [], []),
    ((-1,), (7, 8), [7, 8]),
    ((-1, 2), [[1, 2], [3, 4], [5, 6]], [1, 2, 3, 4, 5, 6]),
    ((-1, 2), np.array([[1, 2]], dtype=np.uint8), [1, 2]),
])
def test_fixed_and_variable_shapes_store_flat_row_major(shape, value, stored):
    data = encode([F("x", "int64", shape)], {"x": value})
    assert wire.decode_example(data) == {"x": ("int64_list", stored)}


def test_fixed_shape_decodes_to_array_of_shape():
    got = roundtrip([F("px", "float", (2, 2))], {"px": [[1.0, 2.0], [3.0, 4.0]]})["px"]
    assert got.shape == (2, 2) and got.dtype == np.float32
    assert got.tolist() == [[1.0, 2.0], [3.0, 4.0]]


def test_ragged_stores_flat_values_and_row_lengths():
    spec = F("tok", "int64", (-1, -1))
    value = [[1, 2], [], [3]]
    assert wire.decode_example(encode([spec], {"tok": value})) == {
        "tok/flat_values": ("int64_list", [1, 2, 3]),
        "tok/row_lengths_1": ("int64_list", [2, 0, 1]),
    }
    assert roundtrip([spec], {"tok": value})["tok"] == value


def test_ragged_three_levels_with_uniform_middle():
    spec = F("m", "string", (-1, 2, -1))
    value = [[["a"], ["b", "c"]], [[], ["d"]]]
    stored = wire.decode_example(encode([spec], {"m": value}))
    assert stored["m/row_lengths_2"] == ("int64_list", [1, 2, 0, 1])
    assert "m/row_lengths_1" not in stored  # uniform dimension: nothing stored
    assert roundtrip([spec], {"m": value})["m"] == value


def test_ragged_checks_fixed_inner_dims():
    with pytest.raises(FeatureValueError, match="dimension 1 has length 3"):
        encode([F("m", "int64", (-1, 2, -1))], {"m": [[[1], [2], [3]]]})


def test_nested_record_by_slash_name_and_dotted_source():
    specs = [F("meta/h", "int64"), F("label", "int64", source=("meta", "label"))]
    got = roundtrip(specs, {"meta": {"h": 3, "label": 1}})
    assert got == {"meta/h": 3, "label": 1}


def test_lookup_finds_literal_dotted_column_and_reports_non_records():
    assert lookup({"a.b": 5}, ("a", "b")) == 5
    assert lookup({"a": {"c": 1}}, ("a", "b")) is None
    with pytest.raises(FeatureValueError, match="non-record"):
        lookup({"a": 7}, ("a", "b"))


def test_features_sorted_and_bytes_deterministic():
    specs = [F("b", "int64"), F("a", "float"), F("c", "bytes")]
    one = encode(specs, {"b": 1, "a": 0.5, "c": b"x"})
    two = encode(list(reversed(specs)), {"c": b"x", "a": 0.5, "b": 1})
    assert one == two
    assert list(wire.decode_example(one)) == ["a", "b", "c"]


@pytest.mark.parametrize("sequence", [False, True])
def test_encode_pieces_join_to_encode_with_the_image_uncopied(sequence):
    specs = [F("image", "bytes"), F("label", "int64"), F("ragged", "int64", (-1, -1)),
             F("steps", "float", (2,) if sequence else (2, 2), sequence=sequence)]
    image = bytes(range(256)) * 400
    record = {"image": image, "label": 3, "ragged": [[1], [2, 3]], "steps": [[1, 2], [3, 4]]}
    encoder = ExampleEncoder(specs)
    pieces, size = encoder.encode_pieces(record)
    assert b"".join(pieces) == encoder.encode(record) and size == len(b"".join(pieces))
    if not sequence:  # a SequenceExample is one piece, joined by the wire module
        assert any(piece is image for piece in pieces)


def test_omitted_feature_is_absent_not_empty():
    spec = F("opt", "int64", (-1,), missing="omit")
    assert wire.decode_example(encode([spec], {"opt": None})) == {}
    assert wire.decode_example(encode([spec], {"opt": []})) == {"opt": ("int64_list", [])}
    assert roundtrip([spec], {})["opt"] is None


@pytest.mark.parametrize("dtype,shape", [("int64", ()), ("float", (3,)), ("string", (-1,)),
                                         ("bytes", (2, 2)), ("int64", (-1, 2))])
def test_missing_empty_stores_the_key_with_no_values(dtype, shape):
    spec = F("opt", dtype, shape, missing="empty")
    assert wire.decode_example(encode([spec], {"opt": None})) == {"opt": (spec.kind, [])}
    assert wire.decode_example(encode([spec], {})) == {"opt": (spec.kind, [])}


def test_missing_empty_ragged_and_sequence_features():
    ragged = F("r", "int64", (-1, -1), missing="empty")
    assert wire.decode_example(encode([ragged], {})) == {
        "r/flat_values": ("int64_list", []), "r/row_lengths_1": ("int64_list", [])}
    nan_empty = F("f", "float", missing="empty", nan="missing")
    assert wire.decode_example(encode([nan_empty], {"f": float("nan")})) == {
        "f": ("float_list", [])}
    steps = [F("n", "int64"), F("s", "float", (2,), sequence=True, missing="empty")]
    context, lists = wire.decode_sequence_example(encode(steps, {"n": 1}))
    assert context == {"n": ("int64_list", [1])} and lists == {"s": []}


def test_list_default_is_validated_at_construction():
    with pytest.raises(FeatureValueError):
        ExampleEncoder([F("d", "int64", (2,), missing="default", default=[1, 2, 3])])
    spec = F("d", "int64", (2,), missing="default", default=[0, 0])
    assert roundtrip([spec], {})["d"].tolist() == [0, 0]


def test_sequence_example_context_and_feature_lists():
    specs = [
        F("length", "int64"),
        F("frames", "float", (3,), sequence=True),
        F("words", "string", (-1,), sequence=True),
    ]
    record = {"length": 2, "frames": [[1, 2, 3], [4, 5, 6]], "words": [["a", "b"], []]}
    data = encode(specs, record)
    context, lists = wire.decode_sequence_example(data)
    assert context == {"length": ("int64_list", [2])}
    assert lists["words"] == [("bytes_list", [b"a", b"b"]), ("bytes_list", [])]
    got = ExampleDecoder(specs).decode(data)
    assert got["length"] == 2
    assert [step.tolist() for step in got["frames"]] == [[1, 2, 3], [4, 5, 6]]
    assert [step.tolist() for step in got["words"]] == [["a", "b"], []]


def test_sequence_step_errors_name_the_step():
    spec = F("frames", "float", (2,), sequence=True)
    with pytest.raises(FeatureValueError, match="dimension 0 has length 3"):
        encode([spec], {"frames": [[1, 2], [1, 2, 3]]})
    with pytest.raises(FeatureValueError, match="step 1"):
        encode([spec], {"frames": [[1, 2], [1, "x"]]})


def test_decoder_refuses_kind_mismatch():
    data = encode([F("x", "int64")], {"x": 1})
    with pytest.raises(ValueError, match="stored as int64_list"):
        ExampleDecoder([F("x", "float")]).decode(data)


@pytest.mark.parametrize("sequence", [False, True])
def test_decoder_refuses_zeros_instead_of_decoding_nothing(sequence):
    """A record of zeros is field number 0, which no Example has: an error naming byte 0,
    never an Example whose features are all missing (issue #15)."""
    specs = [F("x", "int64", missing="omit", sequence=sequence)]
    with pytest.raises(wire.ExampleDecodeError, match="invalid field number 0 .* at byte 0"):
        ExampleDecoder(specs).decode(bytes(1 << 16))


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.integers(-(2**64), 2**64), st.booleans()), st.binary(max_size=40),
       st.text(max_size=10), st.sampled_from(["s", "ms", "days"]))
def test_the_scalar_fast_path_writes_what_the_general_path_writes(number, data, text, unit):
    """int for int64 (whatever the unit), bytes for bytes, str for string: stored as is; the
    same bytes -- or the same refusal -- as the coercion ladder gives."""
    specs = [F("n", "int64", unit=unit), F("b", "bytes"), F("t", "string")]
    record = {"n": number, "b": data, "t": text}
    fast = ExampleEncoder(specs)
    slow = ExampleEncoder(specs)
    slow._sorted = None  # the record as a dict of features, serialized by wire's map
    for plan in slow._plans:
        plan._fast = None
    try:
        expected = slow.encode(record)
    except FeatureValueError as err:
        for _ in range(2):  # the second time from the entry cache
            with pytest.raises(FeatureValueError) as got:
                fast.encode(record)
            assert str(got.value) == str(err)
    else:
        assert fast.encode(record) == expected
        assert fast.encode(dict(record)) == expected
    assert all(plan._fast is not None for plan in fast._plans)
    assert ExampleEncoder([F("n", "int64", scale=2)])._plans[0]._fast is None


NAMES = st.sampled_from(["a", "ab", "b", "B", "é", "z/y", "a.b", "日本", "x" * 40])
VALUES = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.text(max_size=8),
                   st.binary(max_size=70), st.floats(width=32), st.lists(
                       st.integers(-5, 5), max_size=4))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(NAMES, st.sampled_from(["int64", "float", "bytes", "string"]),
                          st.sampled_from([(), (-1,), (2,)]),
                          st.sampled_from(["omit", "error", "empty"])),
                min_size=1, max_size=6, unique_by=lambda f: f[0]),
       st.lists(st.dictionaries(NAMES, VALUES), min_size=1, max_size=6))
@pytest.mark.slow
def test_records_assembled_entry_by_entry_equal_the_map_path(features, records):
    """Features of one map entry each are assembled in sorted key order, small scalars from a
    cache: the same bytes, or the same refusal, as the map of features the general path
    sorts and serializes -- record after record, so cached entries are reused."""
    specs = [F(name, dtype, shape, missing=missing) for name, dtype, shape, missing in features]
    by_entry = ExampleEncoder(specs)
    by_map = ExampleEncoder(specs)
    by_map._sorted = None
    assert by_entry._sorted is not None
    for record in records + records:
        try:
            expected = by_map.encode(record)
        except FeatureValueError as err:
            with pytest.raises(FeatureValueError) as got:
                by_entry.encode(record)
            assert str(got.value) == str(err)
        else:
            assert by_entry.encode(record) == expected
