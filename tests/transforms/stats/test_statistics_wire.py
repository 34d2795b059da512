"""Our DatasetFeatureStatisticsList bytes against tensorflow_metadata's own classes.

Every field of every message we write is set (to a value no other field holds) in some
message below; the real classes (in the TensorFlow venv, tests/tf_oracle/read_statistics.py)
must parse the bytes, report each field by its own name with the value we meant, and
re-serialize them (deterministic=True) to exactly our bytes.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator
from beam_tfrecords.transforms.stats.statistics_wire import (
    MESSAGES,
    REPEATED,
    StatisticsDecodeError,
    decode_message,
    decode_statistics_list,
    encode_message,
    encode_statistics_list,
)

ORACLE = Path(__file__).resolve().parents[2] / "tf_oracle" / "read_statistics.py"
# Fields of a oneof: only one of each group may be set in one message.
ONEOFS = {"FeatureNameStatistics": [("name", "path"),
                                    ("num_stats", "string_stats", "bytes_stats",
                                     "struct_stats")],
          "CustomStatistic": [("num", "str", "histogram", "rank_histogram")]}
ENUM_VALUES = {"enum:type": ["FLOAT", "STRING", "BYTES", "STRUCT", "INT"],
               "enum:histogram": ["QUANTILES", "STANDARD"]}


def _sample(message: str, counter: itertools.count, choice: int) -> dict:
    """A message with every field set to a value of its own; ``choice`` picks which member
    of each oneof (and nested messages pick the next ones)."""
    skip = set()
    for group in ONEOFS.get(message, []):
        keep = group[choice % len(group)]
        skip |= set(group) - {keep}
    out = {}
    for name, (_, kind, _) in MESSAGES[message].items():
        if name in skip:
            continue
        n = next(counter)
        if kind in MESSAGES:
            value = _sample(kind, counter, choice + n)
            repeated = (message, name) in REPEATED
            out[name] = [value, _sample(kind, counter, choice + n + 1)] if repeated else value
        elif kind == "string":
            out[name] = [f"step-{n}", "ünï/cödé"] if name == "step" else f"{name}-{n}-é"
        elif kind in ("double", "float"):
            out[name] = n + 0.25 if kind == "float" else n / 3
        elif kind.startswith("enum:"):
            out[name] = ENUM_VALUES[kind][n % len(ENUM_VALUES[kind])]
        else:
            out[name] = n * 1_000_003 if kind == "uint64" else -n * 7
    return out


def _oneof(message: str, name: str) -> bool:
    return MESSAGES[message][name][2]


def _hex(kind: str, value: float) -> str:
    if kind == "float":
        value = struct.unpack("<f", struct.pack("<f", value))[0]
    return float(value).hex()


def _float32(kind: str, value: float) -> float:
    return struct.unpack("<f", struct.pack("<f", value))[0] if kind == "float" else value


def _expected(message: str, fields: dict, floats=_hex) -> dict:
    """What the oracle's walk reports for ``fields`` (floats as hex) or what our decoder
    gives (``floats=_float32``): proto3 leaves default scalars out."""
    out = {}
    for name, value in fields.items():
        _, kind, oneof = MESSAGES[message][name]
        if value is None:
            continue
        values = value if isinstance(value, list) else [value]
        items = []
        for item in values:
            if kind in MESSAGES:
                items.append(_expected(kind, item, floats))
            elif kind in ("double", "float"):
                items.append(floats(kind, item))
            else:
                items.append(item)
        if isinstance(value, list):
            if items:
                out[name] = items
            continue
        item = items[0]
        default = item in ("", "STANDARD", "INT", "0x0.0p+0") or (
            item == 0 and not str(item).startswith("-") and math.copysign(1, item) > 0)
        if default and not oneof:
            continue
        out[name] = item
    return out


def _accumulated() -> dict:
    """Statistics our accumulators make, with infinities, NaN, -0.0, empty and non-UTF-8."""
    acc = DatasetAccumulator({"i": "int", "f": "float", "s": "string", "b": "bytes",
                              "never": "float", "r/row_lengths_1": "int"})
    acc.add_batch(5, {
        "i": pa.array([3, None, -(2**63), 2**63 - 1, 0]),
        "f": pa.array([[1.5, -0.0], [], None, [math.nan, math.inf], [-math.inf, 1e-45]],
                      pa.list_(pa.float32())),
        "s": pa.array([b"a", b"\xff\xfe", b"", b"a", None]),
        "b": pa.array([b"\x89PNG" * 40, None, b"x", None, None]),
        "r/row_lengths_1": (np.array([2, 0, 1]), np.array([1, 2])),
    })
    acc.add_image_facts("b", ["PNG", "JPEG"], [480, 2], [640, 3])
    return acc.result("train")


@pytest.fixture(scope="module")
def cases() -> dict[str, list[dict]]:
    samples = [_sample("DatasetFeatureStatistics", itertools.count(1), choice)
               for choice in range(4)]
    return {"samples": samples, "accumulated": [_accumulated()],
            "empty": [{"name": "", "num_examples": 0}]}


@pytest.fixture(scope="module")
def parsed(cases, tf_python, tmp_path_factory) -> dict:
    """Each case's bytes parsed by tensorflow_metadata (one subprocess for all)."""
    tmp = tmp_path_factory.mktemp("stats")
    files = []
    for name, datasets in cases.items():
        path = tmp / f"{name}.pb"
        path.write_bytes(encode_statistics_list(datasets))
        files.append(str(path))
    out = tmp / "parsed.json"
    done = subprocess.run([tf_python, str(ORACLE), "--out", str(out), *files],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    return {Path(path).stem: value for path, value in result.items()}


@pytest.mark.parametrize("case", ["samples", "accumulated", "empty"])
def test_tensorflow_metadata_reads_every_field_we_write(cases, parsed, case):
    want = _expected("DatasetFeatureStatisticsList", {"datasets": cases[case]})
    assert parsed[case]["fields"] == want


@pytest.mark.parametrize("case", ["samples", "accumulated", "empty"])
def test_our_bytes_are_the_deterministic_serialization(cases, parsed, case):
    assert parsed[case]["reserialized"] == encode_statistics_list(cases[case]).hex()


def test_the_samples_set_every_field_of_every_message(cases):
    """The round trip above proves a field number only for the fields the samples set."""
    seen: dict[str, set[str]] = {name: set() for name in MESSAGES}

    def visit(message: str, fields: dict) -> None:
        for name, value in fields.items():
            seen[message].add(name)
            kind = MESSAGES[message][name][1]
            if kind in MESSAGES:
                for item in value if isinstance(value, list) else [value]:
                    visit(kind, item)

    for dataset in cases["samples"]:
        visit("DatasetFeatureStatistics", dataset)
    seen["DatasetFeatureStatisticsList"].add("datasets")
    assert {m: set(f) - seen[m] for m, f in MESSAGES.items() if set(f) - seen[m]} == {}


def test_a_field_the_message_lacks_is_named():
    with pytest.raises(ValueError, match="CommonStatistics has no field 'num_mising'"):
        encode_message("CommonStatistics", {"num_mising": 3})


@pytest.mark.parametrize("fields, error", [
    ({"num_missing": -1}, "outside uint64"),
    ({"num_missing": 1.5}, "expected an int"),
    ({"num_missing": True}, "expected an int"),
])
def test_bad_scalars_are_refused(fields, error):
    with pytest.raises((TypeError, ValueError), match=error):
        encode_message("CommonStatistics", fields)


def test_defaults_are_left_out_except_in_a_oneof():
    assert encode_message("CommonStatistics", {"num_missing": 0, "avg_num_values": 0.0}) == b""
    assert encode_message("CustomStatistic", {"num": 0.0}) == b"\x11" + bytes(8)
    assert encode_message("HistogramBucket", {"low_value": -0.0}) == (
        b"\x09" + struct.pack("<d", -0.0))


@pytest.mark.parametrize("case", ["samples", "accumulated", "empty"])
def test_our_decoder_reads_back_every_field(cases, case):
    want = _expected("DatasetFeatureStatisticsList", {"datasets": cases[case]}, _float32)
    got = decode_statistics_list(encode_statistics_list(cases[case]))
    assert json.dumps(got, sort_keys=True) == json.dumps(want.get("datasets", []),
                                                          sort_keys=True)


def test_fields_we_do_not_write_are_skipped():
    """TFDV writes weighted statistics and cross-feature statistics; we read past them."""
    common = encode_message("CommonStatistics", {"num_non_missing": 3})
    weighted = bytes([7 << 3 | 2, 9]) + bytes([1 << 3 | 1]) + struct.pack("<d", 2.5)
    dataset = encode_message("DatasetFeatureStatistics", {"name": "train"})
    cross = bytes([5 << 3 | 2, 0])
    assert decode_message("CommonStatistics", common + weighted) == {"num_non_missing": 3}
    assert decode_message("DatasetFeatureStatistics", dataset + cross) == {"name": "train"}


@pytest.mark.parametrize("data, error", [
    (encode_statistics_list([{"name": "train", "num_examples": 5}])[:-1], "runs past the end"),
    (bytes([0x0A, 0x03, 0x0A, 0x01, 0xFF]), "DatasetFeatureStatistics.name: not UTF-8"),
    (bytes([0x0A, 0x02, 0x10, 0x80]), "DatasetFeatureStatistics: a truncated varint at byte 3"),
    (bytes([0x0A, 0x09, 0x09]) + bytes(8), "DatasetFeatureStatistics.name: wire type 1"),
])
def test_bad_bytes_are_named(data, error):
    with pytest.raises(StatisticsDecodeError, match=error):
        decode_statistics_list(data)


def test_a_list_for_a_single_field_is_refused():
    with pytest.raises(TypeError, match="CommonStatistics.num_missing: expected one value"):
        encode_message("CommonStatistics", {"num_missing": [1]})
    with pytest.raises(TypeError, match="Path.step: expected a list"):
        encode_message("Path", {"step": "a"})
