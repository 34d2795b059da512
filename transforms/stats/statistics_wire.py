"""tensorflow_metadata's ``DatasetFeatureStatisticsList`` on the wire, by hand.

TFDV, TFX's StatisticsGen readers and Facets read statistics as this serialized message
(``statistics/Split-<split>/FeatureStats.pb``). We write it with our own wire code, as we do
Examples: no tensorflow_metadata or protobuf class is needed at run time.

A message is given as a mapping from field name to value, the names and nesting of
statistics.proto (package ``tensorflow.metadata.v0``, syntax proto3): a nested message is a
mapping, a repeated field a list, an enum its value's name (``"STRING"``, ``"QUANTILES"``).
:func:`decode_statistics_list` reads the files back (a rebuild compares itself with the
previous version's statistics without tensorflow_metadata either).
The encoding is what ``SerializeToString(deterministic=True)`` of the same message gives:
fields in field-number order; as proto3 wants, a scalar field holding its default (0, 0.0,
"", the first enum value) is left out unless it belongs to a oneof (``FeatureNameStatistics``'
``name``/``path`` and its ``*_stats``; ``CustomStatistic``'s value), and a message field that
is given is written even when empty. ``tests/transforms/stats/test_statistics_wire.py`` parses the
bytes with the real tensorflow_metadata classes and checks every field and the bytes themselves.

Field numbers, from tensorflow_metadata/proto/v0/statistics.proto and path.proto (1.21.0):

  DatasetFeatureStatisticsList{datasets=1}
  DatasetFeatureStatistics{name=1, num_examples=2 (uint64), features=3,
                           weighted_num_examples=4 (double)}
  FeatureNameStatistics{name=1 | path=8 (oneof), type=2 (enum), num_stats=3 | string_stats=4
                        | bytes_stats=5 | struct_stats=7 (oneof), custom_stats=6}
  Path{step=1 (repeated string)}
  CommonStatistics{num_non_missing=1, num_missing=2, min_num_values=3, max_num_values=4,
                   avg_num_values=5 (float), num_values_histogram=6, tot_num_values=8}
  NumericStatistics{common_stats=1, mean=2, std_dev=3, num_zeros=4 (uint64), min=5,
                    median=6, max=7, histograms=8}
  StringStatistics{common_stats=1, unique=2 (uint64), top_values=3, avg_length=4 (float),
                   rank_histogram=5, invalid_utf8_count=8 (uint64)}
  StringStatistics.FreqAndValue{value=2, frequency=3 (double)}
  BytesStatistics{common_stats=1, unique=2 (uint64), avg_num_bytes=3, min_num_bytes=4,
                  max_num_bytes=5 (floats), max_num_bytes_int=6 (int64)}
  StructStatistics{common_stats=1}
  Histogram{num_nan=1, num_undefined=2 (uint64), buckets=3, type=4 (enum), name=5}
  Histogram.Bucket{low_value=1, high_value=2, sample_count=4 (doubles)}
  RankHistogram{buckets=1, name=2}
  RankHistogram.Bucket{low_rank=1, high_rank=2 (uint64), label=4, sample_count=5 (double)}
  CustomStatistic{name=1, num=2 (double) | str=3 | histogram=4 | rank_histogram=5 (oneof)}

Enums: FeatureNameStatistics.Type {INT=0, FLOAT=1, STRING=2, BYTES=3, STRUCT=4};
Histogram.HistogramType {STANDARD=0, QUANTILES=1}.

Pure: the standard library and our wire primitives.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from beam_tfrecords.errors import UserError
from beam_tfrecords.transforms.codec.wire import ExampleDecodeError, _read_varint, varint

__all__ = [
    "FEATURE_TYPES",
    "MESSAGES",
    "REPEATED",
    "StatisticsDecodeError",
    "decode_message",
    "decode_statistics_list",
    "encode_message",
    "encode_statistics_list",
]

FEATURE_TYPES = {"INT": 0, "FLOAT": 1, "STRING": 2, "BYTES": 3, "STRUCT": 4}
HISTOGRAM_TYPES = {"STANDARD": 0, "QUANTILES": 1}

# message -> field name -> (number, type, oneof?). A type is a scalar kind, an enum table's
# name ("enum:<name>") or another message's name; repeated fields take a list.
MESSAGES: dict[str, dict[str, tuple[int, str, bool]]] = {
    "DatasetFeatureStatisticsList": {"datasets": (1, "DatasetFeatureStatistics", False)},
    "DatasetFeatureStatistics": {
        "name": (1, "string", False), "num_examples": (2, "uint64", False),
        "features": (3, "FeatureNameStatistics", False),
        "weighted_num_examples": (4, "double", False)},
    "FeatureNameStatistics": {
        "name": (1, "string", True), "type": (2, "enum:type", False),
        "num_stats": (3, "NumericStatistics", True),
        "string_stats": (4, "StringStatistics", True),
        "bytes_stats": (5, "BytesStatistics", True),
        "custom_stats": (6, "CustomStatistic", False),
        "struct_stats": (7, "StructStatistics", True), "path": (8, "Path", True)},
    "Path": {"step": (1, "string", False)},
    "CommonStatistics": {
        "num_non_missing": (1, "uint64", False), "num_missing": (2, "uint64", False),
        "min_num_values": (3, "uint64", False), "max_num_values": (4, "uint64", False),
        "avg_num_values": (5, "float", False), "num_values_histogram": (6, "Histogram", False),
        "tot_num_values": (8, "uint64", False)},
    "NumericStatistics": {
        "common_stats": (1, "CommonStatistics", False), "mean": (2, "double", False),
        "std_dev": (3, "double", False), "num_zeros": (4, "uint64", False),
        "min": (5, "double", False), "median": (6, "double", False),
        "max": (7, "double", False), "histograms": (8, "Histogram", False)},
    "StringStatistics": {
        "common_stats": (1, "CommonStatistics", False), "unique": (2, "uint64", False),
        "top_values": (3, "FreqAndValue", False), "avg_length": (4, "float", False),
        "rank_histogram": (5, "RankHistogram", False),
        "invalid_utf8_count": (8, "uint64", False)},
    "FreqAndValue": {"value": (2, "string", False), "frequency": (3, "double", False)},
    "BytesStatistics": {
        "common_stats": (1, "CommonStatistics", False), "unique": (2, "uint64", False),
        "avg_num_bytes": (3, "float", False), "min_num_bytes": (4, "float", False),
        "max_num_bytes": (5, "float", False), "max_num_bytes_int": (6, "int64", False)},
    "StructStatistics": {"common_stats": (1, "CommonStatistics", False)},
    "Histogram": {
        "num_nan": (1, "uint64", False), "num_undefined": (2, "uint64", False),
        "buckets": (3, "HistogramBucket", False), "type": (4, "enum:histogram", False),
        "name": (5, "string", False)},
    "HistogramBucket": {
        "low_value": (1, "double", False), "high_value": (2, "double", False),
        "sample_count": (4, "double", False)},
    "RankHistogram": {"buckets": (1, "RankBucket", False), "name": (2, "string", False)},
    "RankBucket": {
        "low_rank": (1, "uint64", False), "high_rank": (2, "uint64", False),
        "label": (4, "string", False), "sample_count": (5, "double", False)},
    "CustomStatistic": {
        "name": (1, "string", False), "num": (2, "double", True), "str": (3, "string", True),
        "histogram": (4, "Histogram", True), "rank_histogram": (5, "RankHistogram", True)},
}
# The repeated fields (a list in a mapping); every other field holds one value.
REPEATED = frozenset({
    ("DatasetFeatureStatisticsList", "datasets"), ("DatasetFeatureStatistics", "features"),
    ("FeatureNameStatistics", "custom_stats"), ("Path", "step"),
    ("NumericStatistics", "histograms"), ("StringStatistics", "top_values"),
    ("Histogram", "buckets"), ("RankHistogram", "buckets")})
_ENUMS = {"enum:type": FEATURE_TYPES, "enum:histogram": HISTOGRAM_TYPES}
_ENUM_NAMES = {kind: {n: name for name, n in table.items()} for kind, table in _ENUMS.items()}
_U64 = (1 << 64) - 1


def _scalar(kind: str, value: Any, where: str) -> tuple[int, bytes]:
    """(wire type, payload) of one scalar."""
    if kind == "string":
        if not isinstance(value, str):
            raise TypeError(f"{where}: expected a str, got {type(value).__name__}")
        data = value.encode("utf-8")
        return 2, varint(len(data)) + data
    if kind == "double":
        return 1, struct.pack("<d", float(value))
    if kind == "float":
        return 5, struct.pack("<f", float(value))
    if kind in ("uint64", "int64"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{where}: expected an int, got {value!r}")
        if kind == "uint64" and not 0 <= value <= _U64:
            raise ValueError(f"{where}: {value} is outside uint64")
        return 0, varint(value & _U64)
    table = _ENUMS[kind]
    if value not in table:
        raise ValueError(f"{where}: {value!r} is not one of {sorted(table)}")
    return 0, varint(table[value])


def _is_default(kind: str, value: Any) -> bool:
    if kind in ("double", "float"):
        return struct.pack("<d", float(value)) == bytes(8)  # -0.0 is not the default
    if kind in _ENUMS:
        return _ENUMS[kind].get(value) == 0
    return value in (0, "")


def encode_message(message: str, fields: Mapping[str, Any]) -> bytes:
    """The wire bytes of ``message`` (a name in :data:`MESSAGES`) holding ``fields``.

    Args:
      message: the message's name, e.g. ``"DatasetFeatureStatistics"``.
      fields: field name -> value: a scalar, a mapping (a message) or a list (repeated).

    Returns:
      The serialized message, as ``SerializeToString(deterministic=True)`` writes it.
    """
    schema = MESSAGES[message]
    for name in fields:
        if name not in schema:
            raise ValueError(f"{message} has no field {name!r}; known: {sorted(schema)}")
    out = []
    for name, (number, kind, oneof) in sorted(schema.items(), key=lambda item: item[1][0]):
        if name not in fields or fields[name] is None:
            continue
        value = fields[name]
        where = f"{message}.{name}"
        repeated = (message, name) in REPEATED
        if repeated != isinstance(value, (list, tuple)):
            raise TypeError(f"{where}: expected {'a list' if repeated else 'one value'}, "
                            f"got {type(value).__name__}")
        for item in value if repeated else [value]:
            if kind in MESSAGES:
                body = encode_message(kind, item)
                out.append(varint(number << 3 | 2) + varint(len(body)) + body)
                continue
            if not oneof and not repeated and _is_default(kind, item):
                continue
            wire_type, payload = _scalar(kind, item, where)
            out.append(varint(number << 3 | wire_type) + payload)
    return b"".join(out)


def encode_statistics_list(datasets: Sequence[Mapping[str, Any]]) -> bytes:
    """A serialized ``DatasetFeatureStatisticsList`` of ``datasets`` (each a
    ``DatasetFeatureStatistics`` as a mapping; see the module docstring).

    Args:
        datasets: the statistics, one mapping per split.

    Returns:
        The serialized message.
    """
    return encode_message("DatasetFeatureStatisticsList", {"datasets": list(datasets)})


# -- reading ---------------------------------------------------------------------------------

class StatisticsDecodeError(UserError, ValueError):
    """Bytes that are not the statistics message expected; says which field and where."""


def _varint_at(data: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    try:
        return _read_varint(data, pos, end)  # the Example decoder's reader
    except ExampleDecodeError as err:
        raise StatisticsDecodeError(f"{where}: a {err.reason} at byte {err.offset}") from None


def _decode(message: str, data: bytes, pos: int, end: int) -> dict[str, Any]:
    by_number = {number: (name, kind) for name, (number, kind, _) in MESSAGES[message].items()}
    out: dict[str, Any] = {}
    while pos < end:
        at = pos
        key, pos = _varint_at(data, pos, end, message)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            raw, pos = _varint_at(data, pos, end, message)
        elif wire_type == 1 or wire_type == 5:
            size = 8 if wire_type == 1 else 4
            raw, pos = data[pos:pos + size], pos + size
        elif wire_type == 2:
            length, pos = _varint_at(data, pos, end, message)
            raw, pos = (pos, pos + length), pos + length
        else:
            raise StatisticsDecodeError(f"{message}: field {number} has wire type "
                                        f"{wire_type} at byte {at}")
        if pos > end:
            raise StatisticsDecodeError(f"{message}: field {number} runs past the end at byte "
                                        f"{at}")
        if number not in by_number:
            continue  # a field we do not write (weighted statistics, ...): skipped
        name, kind = by_number[number]
        value = _value(message, name, kind, wire_type, raw, data, at)
        if (message, name) in REPEATED:
            out.setdefault(name, []).append(value)
        else:
            out[name] = value
    return out


_WIRE_TYPES = {"string": 2, "double": 1, "float": 5, "uint64": 0, "int64": 0}


def _value(message: str, name: str, kind: str, wire_type: int, raw: Any, data: bytes,
           at: int) -> Any:
    expected = 2 if kind in MESSAGES else _WIRE_TYPES.get(kind, 0)
    if wire_type != expected:
        raise StatisticsDecodeError(f"{message}.{name}: wire type {wire_type} at byte {at}, "
                                    f"expected {expected}")
    if kind in MESSAGES:
        return _decode(kind, data, *raw)
    if kind == "string":
        try:
            return data[raw[0]:raw[1]].decode("utf-8")
        except UnicodeDecodeError:
            raise StatisticsDecodeError(f"{message}.{name}: not UTF-8 at byte {at}") from None
    if kind == "double":
        return struct.unpack("<d", raw)[0]
    if kind == "float":
        return struct.unpack("<f", raw)[0]
    if kind == "int64":
        return raw - (1 << 64) if raw >= 1 << 63 else raw
    if kind == "uint64":
        return raw
    return _ENUM_NAMES[kind].get(raw, raw)  # an enum value we do not know: its number


def decode_message(message: str, data: bytes) -> dict[str, Any]:
    """The fields of a serialized ``message`` as a mapping, the inverse of
    :func:`encode_message`: fields the bytes do not hold are absent (proto3: a missing
    scalar is its default), fields statistics.proto has but we do not write are skipped.

    Args:
      message: the message's name in :data:`MESSAGES`.
      data: its wire bytes.

    Returns:
      Field name -> value (a mapping for a message, a list for a repeated field).
    """
    data = bytes(data)
    return _decode(message, data, 0, len(data))


def decode_statistics_list(data: bytes) -> list[dict[str, Any]]:
    """The ``DatasetFeatureStatistics`` of a serialized ``DatasetFeatureStatisticsList``
    (a ``FeatureStats.pb``), each as a mapping; raises :class:`StatisticsDecodeError`.

    Args:
        data: a serialized ``DatasetFeatureStatisticsList``.

    Returns:
        The statistics, one mapping per data set.

    Raises:
        StatisticsDecodeError: the bytes are not such a message.
    """
    return decode_message("DatasetFeatureStatisticsList", data).get("datasets", [])
