"""Protocol buffer wire format of tf.train.Example and SequenceExample, by hand.

Why not the generated messages: the bytes must not depend on which protobuf backend is
installed, building one message object per record is where per-row pipelines spend their time,
and the columnar encoder needs the same primitives. The output equals
``SerializeToString(deterministic=True)`` of the equivalent message (feature maps sorted by
key); ``tests/transforms/codec/test_wire.py`` proves it against the generated module and
TensorFlow's own golden files.

Field numbers (TensorFlow's feature.proto / example.proto):
  Example{features=1}  SequenceExample{context=1, feature_lists=2}
  Features{map<string, Feature> feature=1}  FeatureLists{map<string, FeatureList> feature_list=1}
  FeatureList{repeated Feature feature=1}
  Feature{oneof: bytes_list=1, float_list=2, int64_list=3}
  BytesList{repeated bytes value=1}  FloatList{packed float value=1}
  Int64List{packed int64 value=1}
  map entries: {key=1, value=2}

Pure: no Beam, no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from beam_tfrecords.errors import UserError

__all__ = [
    "KINDS",
    "KIND_TAG",
    "ExampleDecodeError",
    "decode_example",
    "decode_features",
    "decode_sequence_example",
    "encode_example",
    "encode_feature",
    "encode_features",
    "encode_sequence_example",
    "example_pieces",
    "feature_pieces",
    "map_entry",
    "varint",
]

KINDS = ("bytes_list", "float_list", "int64_list")
# Feature.kind field tags (field << 3 | wire type 2): the one table of them in the package.
KIND_TAG = {"bytes_list": b"\x0a", "float_list": b"\x12", "int64_list": b"\x1a"}
_TAG_KIND = {tag[0] >> 3: kind for kind, tag in KIND_TAG.items()}  # field number -> kind
_U64 = (1 << 64) - 1
_SMALL_VARINTS = [bytes([n]) for n in range(128)]


def varint(n: int) -> bytes:
    """Base-128 varint of a non-negative integer below 2**64.

    Args:
        n: the integer, 0 <= n < 2**64.

    Returns:
        The varint bytes.
    """
    if n < 128:
        return _SMALL_VARINTS[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def _packed_int64(values: Sequence[int] | np.ndarray) -> bytes:
    if isinstance(values, np.ndarray):
        values = values.tolist()
    return b"".join([varint(v & _U64) for v in values])


def _packed_float(values: Sequence[float] | np.ndarray | bytes) -> bytes:
    if isinstance(values, bytes):  # already little-endian float32
        return values
    if isinstance(values, np.ndarray):
        return values.astype("<f4", copy=False).tobytes()
    return struct.pack(f"<{len(values)}f", *values)


def feature_pieces(kind: str, values: Any) -> list[bytes]:
    """A serialized ``Feature`` holding ``values`` as ``kind``, as pieces to join.

    ``values``: ints for int64_list (an int64 array works too), floats or a float32 array or
    the packed little-endian float32 bytes for float_list, bytes for bytes_list. An empty list
    is a present, empty feature (``Feature{int64_list{}}``), not a missing one.

    A bytes value is one piece of its own, never copied here: a large value (an image) is
    copied once, by whoever joins the record's pieces -- ideally straight into a batch buffer.

    Args:
        kind: ``int64_list``, ``float_list`` or ``bytes_list``.
        values: the values, as above.

    Returns:
        The pieces.
    """
    if kind == "bytes_list":
        body = []
        for value in values:
            body += (b"\x0a", varint(len(value)), value)
        return [KIND_TAG[kind], varint(sum(map(len, body))), *body]
    if kind == "int64_list":
        packed = _packed_int64(values)
    elif kind == "float_list":
        packed = _packed_float(values)
    else:
        raise ValueError(f"unknown feature kind {kind!r}; expected one of {KINDS}")
    return [_field(KIND_TAG[kind], _field(b"\x0a", packed) if packed else b"")]


def encode_feature(kind: str, values: Any) -> bytes:
    """A serialized ``Feature`` holding ``values`` as ``kind`` (see :func:`feature_pieces`).

    Args:
        kind: ``int64_list``, ``float_list`` or ``bytes_list``.
        values: the list's values, typed by ``kind`` as described above.

    Returns:
        The serialized Feature.
    """
    return b"".join(feature_pieces(kind, values))


def _map_pieces(items: Mapping[str, bytes | list[bytes]]) -> tuple[list[bytes], int]:
    """Map entries sorted by key in UTF-8 byte order, as C++ protobuf (TensorFlow's) and the
    pure-Python backend do for deterministic output. (upb, the default Python backend, puts a
    key before its own prefixes -- ``"ab"`` before ``"a"`` -- the one case where it differs.)

    A value is serialized bytes or a list of pieces (:func:`feature_pieces`). The result is
    pieces to join and their total size, so that values are copied only by the final join.
    """
    pieces: list[bytes] = []
    size = 0
    for key in sorted(items):
        entry, entry_size = _entry_pieces(key, items[key])
        pieces += entry
        size += entry_size
    return pieces, size


def entry_pieces(key: str, value: bytes | list[bytes]) -> tuple[list[bytes], int]:
    """One map entry ``key -> value`` (a serialized ``Feature`` or its pieces) as pieces and
    their size: the entries of all keys, in :func:`_map_pieces`' order after
    :func:`example_head`, are the ``Example``.

    Args:
        key: the feature's name.
        value: its serialized Feature, or the pieces of one.

    Returns:
        The pieces and their total size in bytes.
    """
    return _entry_pieces(key, value)


def example_head(size: int) -> bytes:
    """What precedes an ``Example``'s map entries of ``size`` bytes in all.

    Args:
        size: the map entries' total size in bytes.

    Returns:
        The Example's field tag and length.
    """
    return b"\x0a" + varint(size)


def _entry_pieces(key: str, value: bytes | list[bytes]) -> tuple[list[bytes], int]:
    """One map entry ``key -> value`` as a repeated field 1 of its map: head, value pieces."""
    name = key.encode("utf-8")
    value_size = sum(map(len, value)) if isinstance(value, list) else len(value)
    head = b"\x0a" + varint(len(name)) + name + b"\x12" + varint(value_size)
    head = b"\x0a" + varint(len(head) + value_size) + head
    return [head, *value] if isinstance(value, list) else [head, value], len(head) + value_size


def map_entry(key: str, value: bytes | list[bytes]) -> bytes:
    """One serialized entry of a ``Features`` map, ``key -> value`` (a serialized ``Feature``
    or its pieces): joined entries, sorted by key, are the map.

    Args:
        key: the feature's name.
        value: its serialized Feature, or the pieces of one.

    Returns:
        The entry's bytes.
    """
    return b"".join(_entry_pieces(key, value)[0])


def _map_entries(items: Mapping[str, bytes | list[bytes]]) -> bytes:
    return b"".join(_map_pieces(items)[0])


def encode_features(features: Mapping[str, bytes | list[bytes]]) -> bytes:
    """A serialized ``Features`` from feature name -> serialized ``Feature`` (or its pieces).

    Args:
        features: feature name to serialized Feature (or its pieces).

    Returns:
        The serialized Features map, keys sorted.
    """
    return _map_entries(features)


def example_pieces(features: Mapping[str, bytes | list[bytes]]) -> tuple[list[bytes], int]:
    """A serialized ``Example`` as pieces and their total size, from feature name ->
    serialized ``Feature`` or its pieces; ``b"".join(pieces)`` is :func:`encode_example`.

    Args:
        features: feature name to serialized Feature (or its pieces).

    Returns:
        The pieces and their total size in bytes.
    """
    pieces, size = _map_pieces(features)
    head = example_head(size)
    return [head, *pieces], len(head) + size


def encode_example(features: Mapping[str, bytes | list[bytes]]) -> bytes:
    """A serialized ``Example`` from feature name -> serialized ``Feature`` (or its pieces).

    Args:
        features: feature name to serialized Feature (or its pieces).

    Returns:
        The serialized Example.
    """
    return b"".join(example_pieces(features)[0])


def encode_sequence_example(context: Mapping[str, bytes],
                            feature_lists: Mapping[str, Iterable[bytes]]) -> bytes:
    """A serialized ``SequenceExample``: context features and per-step feature lists.

    ``feature_lists`` maps a name to the serialized ``Feature`` of every step.

    Args:
        context: feature name to serialized Feature.
        feature_lists: feature name to each step's serialized Feature.

    Returns:
        The serialized SequenceExample.
    """
    lists = {
        name: b"".join([_field(b"\x0a", step) for step in steps])
        for name, steps in feature_lists.items()
    }
    return _field(b"\x0a", encode_features(context)) + _field(b"\x12", _map_entries(lists))


class ExampleDecodeError(UserError, ValueError):
    """Bytes that are not a valid serialized Example / SequenceExample.

    Args:
        reason: what is malformed.
        offset: the byte where it was found.
    """

    def __init__(self, reason: str, offset: int) -> None:
        self.reason = reason
        self.offset = offset
        super().__init__(f"not a valid serialized Example: {reason} at byte {offset}")


def _read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = 0
    shift = 0
    start = pos
    while True:
        if pos >= end:
            raise ExampleDecodeError("truncated varint", start)
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & _U64, pos
        shift += 7
        if shift >= 70:
            raise ExampleDecodeError("varint longer than 10 bytes", start)


_MAX_FIELD_NUMBER = (1 << 29) - 1  # protobuf's largest field number


def _fields(buf: bytes, pos: int, end: int):
    """Yield (field number, wire type, value or (start, stop) slice) over one message.

    A field number of 0 or above 2**29 - 1 and the wire types 3, 4 (groups, which no Example
    message uses), 6 and 7 (undefined) are refused: protobuf's parser stops at tag 0, so a
    record of zero bytes is not an empty Example, it is not an Example.
    """
    while pos < end:
        at = pos
        key, pos = _read_varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0 or number > _MAX_FIELD_NUMBER:
            raise ExampleDecodeError(f"invalid field number {number} (tag {key})", at)
        if wire == 0:
            value, pos = _read_varint(buf, pos, end)
            yield number, wire, value
        elif wire == 2:
            length, start = _read_varint(buf, pos, end)
            pos = start + length
            if pos > end:
                raise ExampleDecodeError(f"field {number} runs past its message", start)
            yield number, wire, (start, pos)
        elif wire == 5:
            if pos + 4 > end:
                raise ExampleDecodeError("truncated fixed32", pos)
            yield number, wire, buf[pos:pos + 4]
            pos += 4
        elif wire == 1:
            if pos + 8 > end:
                raise ExampleDecodeError("truncated fixed64", pos)
            yield number, wire, buf[pos:pos + 8]
            pos += 8
        elif wire in (3, 4):
            raise ExampleDecodeError(f"wire type {wire} (a group) in field {number}, which "
                                     "no Example message has", at)
        else:
            raise ExampleDecodeError(f"invalid wire type {wire} in field {number}", at)


def _signed(n: int) -> int:
    return n - (1 << 64) if n >= 1 << 63 else n


def _decode_list(kind: str, buf: bytes, start: int, end: int) -> list:
    values: list = []
    for number, wire, value in _fields(buf, start, end):
        if number != 1:
            continue  # unknown field: skipped, as protobuf does
        if kind == "bytes_list" and wire == 2:
            values.append(buf[value[0]:value[1]])
        elif kind == "int64_list" and wire == 2:  # packed
            pos, stop = value
            while pos < stop:
                n, pos = _read_varint(buf, pos, stop)
                values.append(_signed(n))
        elif kind == "int64_list" and wire == 0:  # unpacked
            values.append(_signed(value))
        elif kind == "float_list" and wire == 2:
            if (value[1] - value[0]) % 4:
                raise ExampleDecodeError("packed floats not a multiple of 4 bytes", value[0])
            values.extend(np.frombuffer(buf[value[0]:value[1]], dtype="<f4").tolist())
        elif kind == "float_list" and wire == 5:
            values.append(struct.unpack("<f", value)[0])
        else:
            raise ExampleDecodeError(f"{kind} value with wire type {wire}", start)
    return values


def _decode_feature(buf: bytes, start: int, end: int) -> tuple[str | None, list]:
    kind, values = None, []
    for number, wire, value in _fields(buf, start, end):
        if number in _TAG_KIND and wire == 2:
            kind = _TAG_KIND[number]  # a later oneof member replaces an earlier one
            values = _decode_list(kind, buf, value[0], value[1])
    return kind, values


def _map(buf: bytes, start: int, end: int) -> list[tuple[str, tuple[int, int] | None]]:
    entries = []
    for number, wire, value in _fields(buf, start, end):
        if number != 1 or wire != 2:
            continue
        key, slot = "", None
        for n, w, v in _fields(buf, value[0], value[1]):
            if n == 1 and w == 2:
                try:
                    key = buf[v[0]:v[1]].decode("utf-8")
                except UnicodeDecodeError:
                    raise ExampleDecodeError("feature name is not UTF-8", v[0]) from None
            elif n == 2 and w == 2:
                slot = v
        entries.append((key, slot))
    return entries


def decode_features(buf: bytes, start: int = 0, end: int | None = None
                    ) -> dict[str, tuple[str | None, list]]:
    """Feature name -> (kind, values) of a serialized ``Features``; later keys win.

    Args:
        buf: the buffer holding the Features.
        start: where the Features message starts.
        end: where it ends; None for the buffer's end.

    Returns:
        Feature name to ``(kind, values)``.

    Raises:
        ExampleDecodeError: the bytes are malformed.
    """
    end = len(buf) if end is None else end
    out = {}
    for key, slot in _map(buf, start, end):
        out[key] = _decode_feature(buf, *slot) if slot else (None, [])
    return out


def decode_example(data: bytes) -> dict[str, tuple[str | None, list]]:
    """Feature name -> (kind, values) of a serialized ``Example``.

    Floats come back as Python floats holding the exact float32 values; kind is None for a
    Feature with no list set.

    Args:
        data: the serialized Example.

    Returns:
        Feature name to ``(kind, values)``.

    Raises:
        ExampleDecodeError: the bytes are malformed.
    """
    data = bytes(data)
    out: dict[str, tuple[str | None, list]] = {}
    for number, wire, value in _fields(data, 0, len(data)):
        if number == 1 and wire == 2:
            out.update(decode_features(data, *value))  # repeated message fields merge
    return out


def decode_sequence_example(data: bytes) -> tuple[dict[str, tuple[str | None, list]],
                                                   dict[str, list[tuple[str | None, list]]]]:
    """(context, feature_lists) of a serialized ``SequenceExample``.

    Args:
        data: the serialized SequenceExample.

    Returns:
        The context (feature name to ``(kind, values)``) and feature lists (name to each step's
        ``(kind, values)``).

    Raises:
        ExampleDecodeError: the bytes are malformed.
    """
    data = bytes(data)
    context: dict[str, tuple[str | None, list]] = {}
    lists: dict[str, list[tuple[str | None, list]]] = {}
    for number, wire, value in _fields(data, 0, len(data)):
        if number == 1 and wire == 2:
            context.update(decode_features(data, *value))
        elif number == 2 and wire == 2:
            for key, slot in _map(data, *value):
                steps = []
                if slot:
                    for n, w, v in _fields(data, *slot):
                        if n == 1 and w == 2:
                            steps.append(_decode_feature(data, *v))
                lists[key] = steps
    return context, lists
