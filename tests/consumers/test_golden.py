"""Files written by TensorFlow 2.21 (tests/golden, made by tests/tf_oracle/make_golden.py) are
read by our reader and decoded by our decoder to exactly the values TensorFlow recorded."""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import struct

import pytest
from beam_tfrecords_tests_helpers import read_records

from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.transforms.codec import wire

GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden"
EXPECTED = json.loads((GOLDEN / "expected.json").read_text())
FILES = sorted(EXPECTED["files"])


def raw_feature(kind, values):
    """Our decoded (kind, values) in the golden files' raw form."""
    if kind == "float_list":
        return {"kind": kind, "bits": [f"0x{struct.unpack('<I', struct.pack('<f', v))[0]:08x}"
                                       for v in values]}
    if kind == "bytes_list":
        return {"kind": kind, "value": [base64.b64encode(v).decode() for v in values]}
    return {"kind": kind, "value": values}


def golden_feature(feature):
    if feature["kind"] == "float_list":
        return {"kind": "float_list", "bits": feature["bits"]}
    return {"kind": feature["kind"], "value": feature["value"]}


def raw_features(decoded):
    return {name: raw_feature(kind, values) for name, (kind, values) in decoded.items()}


def test_golden_files_cover_what_the_issue_asks():
    assert {"examples.tfrecord", "examples.tfrecord.gz", "examples.tfrecord.zlib",
            "sequence_examples.tfrecord"} <= set(FILES)
    assert EXPECTED["tensorflow_version"].startswith("2.21")


@pytest.mark.parametrize("name", FILES)
def test_golden_file_decodes_to_tensorflows_values(name):
    meta = EXPECTED["files"][name]
    path = GOLDEN / name
    assert hashlib.sha256(path.read_bytes()).hexdigest() == meta["sha256"]
    records = read_records(path)
    assert len(records) == meta["count"] == len(meta["records"])
    for record, want in zip(records, meta["records"]):
        assert base64.b64encode(record).decode() == want["serialized_b64"]
        if meta["example_type"] == "SequenceExample":
            context, lists = wire.decode_sequence_example(record)
            assert raw_features(context) == {k: golden_feature(v)
                                             for k, v in want["context"].items()}
            assert {k: [raw_feature(*step) for step in steps] for k, steps in lists.items()} == {
                k: [golden_feature(step) for step in steps]
                for k, steps in want["feature_lists"].items()}
        else:
            decoded = wire.decode_example(record)
            assert raw_features(decoded) == {k: golden_feature(v)
                                             for k, v in want["features"].items()}


@pytest.mark.parametrize("name", FILES)
def test_our_encoder_reproduces_tensorflows_bytes(name):
    """Re-encoding what we decoded gives TensorFlow's bytes (its writer sorted the keys too)."""
    meta = EXPECTED["files"][name]
    for record in read_records(GOLDEN / name):
        if meta["example_type"] == "SequenceExample":
            context, lists = wire.decode_sequence_example(record)
            again = wire.encode_sequence_example(
                {k: wire.encode_feature(*v) for k, v in context.items()},
                {k: [wire.encode_feature(*s) for s in steps] for k, steps in lists.items()},
            )
        else:
            decoded = wire.decode_example(record)
            again = wire.encode_example({k: wire.encode_feature(*v) for k, v in decoded.items()})
        assert again == record


@pytest.mark.parametrize("name", ["examples.tfrecord.gz", "examples.tfrecord.zlib"])
def test_compression_is_detected_from_content(name):
    with open(GOLDEN / name, "rb") as handle:
        head = handle.read(64)
    assert tff.detect_compression(head) == (tff.GZIP if name.endswith(".gz") else tff.ZLIB)
