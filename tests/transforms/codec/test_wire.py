"""Our hand-written wire format equals protobuf's deterministic serialization, byte for byte."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms.codec import wire
from beam_tfrecords.transforms.proto import example_pb2 as pb

names = st.text(min_size=0, max_size=12)
int64s = st.lists(st.integers(-(2**63), 2**63 - 1), max_size=8)
float32s = st.lists(
    st.floats(width=32, allow_nan=False).map(
        lambda f: struct.unpack("<f", struct.pack("<f", f))[0]),
    max_size=8,
)
bytess = st.lists(st.binary(max_size=20), max_size=5)
features = st.one_of(
    st.tuples(st.just("int64_list"), int64s),
    st.tuples(st.just("float_list"), float32s),
    st.tuples(st.just("bytes_list"), bytess),
)
feature_maps = st.dictionaries(names, features, max_size=6)


def _no_prefix_keys(items: dict) -> bool:
    """upb orders a key before its own prefixes; C++ and pure-Python protobuf (and we) do not.
    Comparisons with the installed upb backend avoid that one case; a subprocess test below
    compares prefix keys against the pure-Python backend."""
    keys = list(items)
    return not any(a != b and b.startswith(a) for a in keys for b in keys)


prefix_free_maps = feature_maps.filter(_no_prefix_keys)


def _fill(message: pb.Feature, kind: str, values: list) -> None:
    getattr(message, kind).SetInParent()  # an empty list is a present feature
    getattr(message, kind).value.extend(values)


def _pb_features(target: pb.Features, items: dict) -> None:
    target.SetInParent()
    for key, (kind, values) in items.items():
        _fill(target.feature[key], kind, values)


def _ours(items: dict) -> dict:
    return {key: wire.encode_feature(kind, values) for key, (kind, values) in items.items()}


@settings(max_examples=300, deadline=None)
@given(prefix_free_maps)
@pytest.mark.slow
def test_example_bytes_equal_protobuf_deterministic(items):
    message = pb.Example()
    _pb_features(message.features, items)
    assert wire.encode_example(_ours(items)) == message.SerializeToString(deterministic=True)


@settings(max_examples=200, deadline=None)
@given(feature_maps)
@pytest.mark.slow
def test_example_pieces_join_to_the_example_and_keep_bytes_values_uncopied(items):
    """Features given as pieces encode like joined ones; a bytes value stays its own piece
    (the object itself), so the one join that follows copies an image once."""
    as_pieces = {key: wire.feature_pieces(kind, values) for key, (kind, values) in items.items()}
    pieces, size = wire.example_pieces(as_pieces)
    expected = wire.encode_example(_ours(items))
    assert b"".join(pieces) == expected and size == len(expected)
    assert wire.encode_example(as_pieces) == expected
    piece_ids = {id(piece) for piece in pieces}
    for kind, values in items.values():
        if kind == "bytes_list":
            assert all(id(value) in piece_ids for value in values if len(value) > 1)


@settings(max_examples=150, deadline=None)
@given(prefix_free_maps, st.dictionaries(names, st.lists(features, max_size=4), max_size=4)
       .filter(_no_prefix_keys))
@pytest.mark.slow
def test_sequence_example_bytes_equal_protobuf(context, lists):
    message = pb.SequenceExample()
    _pb_features(message.context, context)
    message.feature_lists.SetInParent()
    for key, steps in lists.items():
        feature_list = message.feature_lists.feature_list[key]
        feature_list.SetInParent()
        for kind, values in steps:
            _fill(feature_list.feature.add(), kind, values)
    ours = wire.encode_sequence_example(
        _ours(context),
        {key: [wire.encode_feature(kind, values) for kind, values in steps]
         for key, steps in lists.items()},
    )
    assert ours == message.SerializeToString(deterministic=True)


@settings(max_examples=300, deadline=None)
@given(feature_maps)
@pytest.mark.slow
def test_decode_inverts_encode(items):
    decoded = wire.decode_example(wire.encode_example(_ours(items)))
    assert decoded == {key: (kind, list(values)) for key, (kind, values) in items.items()}


_PURE_PYTHON_CHECK = """
import random
from beam_tfrecords.transforms.codec import wire
from beam_tfrecords.transforms.proto import example_pb2 as pb
from google.protobuf.internal import api_implementation
assert api_implementation.Type() == "python", api_implementation.Type()
rng = random.Random(7)
alphabet = ["", "a", "ab", "abc", "b", "ba", "feature", "feature0", "é", "z/1"]
for _ in range(300):
    keys = rng.sample(alphabet, rng.randint(0, len(alphabet)))
    m = pb.Example(); m.features.SetInParent(); ours = {}
    for k in keys:
        values = [rng.randint(-2**63, 2**63 - 1) for _ in range(rng.randint(0, 3))]
        m.features.feature[k].int64_list.SetInParent()
        m.features.feature[k].int64_list.value.extend(values)
        ours[k] = wire.encode_feature("int64_list", values)
    assert wire.encode_example(ours) == m.SerializeToString(deterministic=True), keys
print("ok")
"""


def test_prefix_keys_sort_like_cpp_and_pure_python_protobuf():
    import os
    import subprocess
    import sys

    env = dict(os.environ, PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python")
    done = subprocess.run([sys.executable, "-c", _PURE_PYTHON_CHECK], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_numpy_and_packed_inputs_encode_like_lists():
    floats = [0.5, -2.0, 3.25]
    as_list = wire.encode_feature("float_list", floats)
    assert wire.encode_feature("float_list", np.array(floats, dtype=np.float64)) == as_list
    assert wire.encode_feature("float_list", struct.pack("<3f", *floats)) == as_list
    assert wire.encode_feature("int64_list", np.array([1, -1])) == wire.encode_feature(
        "int64_list", [1, -1])


def test_decoder_reads_unpacked_repeated_fields():
    """Other writers may emit non-packed repeated scalars; parsers must accept them."""
    # Int64List{value: 1, value: 300} unpacked: tag 0x08 (field 1, varint) per value.
    int_list = b"\x08\x01\x08\xac\x02"
    # FloatList{value: 1.5} unpacked: tag 0x0d (field 1, fixed32).
    float_list = b"\x0d" + struct.pack("<f", 1.5)
    entry_a = b"\x0a\x01a" + b"\x12" + bytes([len(int_list) + 2]) + b"\x1a" + bytes(
        [len(int_list)]) + int_list
    entry_b = b"\x0a\x01b" + b"\x12" + bytes([len(float_list) + 2]) + b"\x12" + bytes(
        [len(float_list)]) + float_list
    body = b"\x0a" + bytes([len(entry_a)]) + entry_a + b"\x0a" + bytes([len(entry_b)]) + entry_b
    data = b"\x0a" + bytes([len(body)]) + body
    assert wire.decode_example(data) == {"a": ("int64_list", [1, 300]),
                                         "b": ("float_list", [1.5])}
    assert pb.Example.FromString(data).features.feature["a"].int64_list.value == [1, 300]


@pytest.mark.parametrize("data,reason", [
    (b"\x0a", "truncated varint"),
    (b"\x0a\x05\x0a", "runs past its message"),
    (b"\x0b", "wire type 3 \\(a group\\)"),
    (b"\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", "varint longer than 10 bytes"),
])
def test_corrupt_examples_raise_with_offset(data, reason):
    with pytest.raises(wire.ExampleDecodeError, match=reason) as info:
        wire.decode_example(data)
    assert isinstance(info.value.offset, int)


EMPTY_A = wire.encode_example({"a": wire.encode_feature("int64_list", [])})


def example_with_feature(feature: bytes) -> bytes:
    return wire.encode_example({"a": feature})


@pytest.mark.parametrize("data,reason,offset", [  # offset < 0: from the end
    (bytes(64), "invalid field number 0", 0),              # all zeros: not an empty Example
    (b"\x00\x00", "invalid field number 0", 0),
    (b"\x0a\x02\x00\x00", "invalid field number 0", 2),    # inside Features
    (example_with_feature(b"\x1a\x01\x00"), "invalid field number 0", -1),  # in Int64List
    (b"\x80\x80\x80\x80\x10\x00", "invalid field number 536870912", 0),  # 2**29
    (b"\x0b\x0c", "wire type 3 \\(a group\\) in field 1", 0),
    (b"\x0c", "wire type 4 \\(a group\\) in field 1", 0),
    (b"\x0e", "invalid wire type 6 in field 1", 0),
    (EMPTY_A + b"\x0f", "invalid wire type 7 in field 1", -1),
    (example_with_feature(b"\x1a\x03\x0a\x00\x17"), "invalid wire type 7 in field 2", -1),
])
def test_invalid_field_numbers_and_wire_types_are_refused(data, reason, offset):
    """Field number 0 (protobuf's parser stops at tag 0), numbers past 2**29 - 1 and wire
    types 3, 4, 6, 7 raise ExampleDecodeError with the tag's offset, at any depth. A record of
    zeros used to decode as ``{}``, an empty Example (issue #15). Protobuf refuses these too,
    except a well-formed group (``0b 0c``), which it would skip and no Example holds."""
    with pytest.raises(wire.ExampleDecodeError, match=reason) as info:
        wire.decode_example(data)
    assert info.value.offset == offset % len(data)
    with pytest.raises(wire.ExampleDecodeError, match=reason):
        wire.decode_sequence_example(data)
    if data != b"\x0b\x0c":
        with pytest.raises(Exception, match="Error parsing"):
            pb.Example.FromString(data)


def test_field_numbers_up_to_the_maximum_are_skipped_as_unknown():
    top = wire.varint((((1 << 29) - 1) << 3) | 0) + b"\x05"  # field 2**29 - 1, varint 5
    assert wire.decode_example(top + EMPTY_A) == {"a": ("int64_list", [])}
    assert pb.Example.FromString(top).features.feature == {}


def test_tutorial_record_from_the_seed_document():
    """The TensorFlow guide (shared/seeds/001) prints this serialized Example; we decode it."""
    data = (b'\nQ\n\x11\n\x08feature0\x12\x05\x1a\x03\n\x01\x01\n\x11\n\x08feature1\x12\x05\x1a'
            b'\x03\n\x01\x01\n\x13\n\x08feature2\x12\x07\n\x05\n\x03dog\n\x14\n\x08feature3'
            b'\x12\x08\x12\x06\n\x04\x97_\xcc>')
    decoded = wire.decode_example(data)
    assert decoded["feature0"] == ("int64_list", [1])
    assert decoded["feature2"] == ("bytes_list", [b"dog"])
    assert decoded["feature3"][1] == [struct.unpack("<f", b"\x97_\xcc>")[0]]
    # TensorFlow's map order here happens to be sorted, so our encoder reproduces it exactly.
    assert wire.encode_example(_ours(decoded)) == data
