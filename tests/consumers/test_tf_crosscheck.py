"""TensorFlow reads what we write: every feature kind, every compression, Example and
SequenceExample, parsed with the spec we export and compared value by value."""

from __future__ import annotations

import base64
import json
import math
import pathlib
import random
import struct

import numpy as np
import pytest

from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F
from beam_tfrecords.transforms.codec.feature_spec import tf_parse_spec

TF_READER = pathlib.Path(__file__).resolve().parents[1] / "tf_oracle" / "read_with_tf.py"

SPECS = [
    F("i", "int64"),
    F("f", "float"),
    F("s", "string"),
    F("b", "bytes"),
    F("pixels", "float", (2, 3)),
    F("ids", "int64", (-1,)),
    F("rows", "float", (-1, 2)),
    F("tokens", "string", (-1, -1)),
    F("deep", "int64", (-1, 2, -1)),
    F("maybe", "int64", missing="omit"),
    F("label", "int64", source=("meta", "label"), missing="default", default=-1),
]


def f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def make_record(rng: random.Random, i: int) -> dict:
    return {
        "i": rng.choice([0, -1, 2**63 - 1, -(2**63), rng.randrange(-10**12, 10**12)]),
        "f": rng.choice([0.0, -0.0, 1.5, math.inf, -math.inf, 3.4028234663852886e38,
                         rng.gauss(0, 1)]),
        "s": rng.choice(["", "héllo ✓", "cat", "x" * 50]),
        "b": bytes(rng.randrange(256) for _ in range(rng.randrange(0, 12))),
        "pixels": np.array([[rng.random() for _ in range(3)] for _ in range(2)]),
        "ids": [rng.randrange(-5, 5) for _ in range(rng.randrange(0, 5))],
        "rows": [[rng.random(), rng.random()] for _ in range(rng.randrange(0, 4))],
        "tokens": [[rng.choice(["a", "bb", "ccc"]) for _ in range(rng.randrange(0, 3))]
                   for _ in range(rng.randrange(0, 4))],
        "deep": [[[rng.randrange(9)] * rng.randrange(0, 3) for _ in range(2)]
                 for _ in range(rng.randrange(0, 3))],
        "maybe": rng.choice([None, 7]),
        "meta": {"label": rng.choice([None, 3])},
    }


def expected_tf_value(spec_name: str, record: dict):
    """What TensorFlow's parser must return for one record, per our spec mapping."""
    v = record.get(spec_name)
    if spec_name == "f":
        return f32(v)
    if spec_name in ("s",):
        return base64.b64encode(v.encode()).decode()
    if spec_name == "b":
        return base64.b64encode(v).decode()
    if spec_name == "pixels":
        return [[f32(x) for x in row] for row in v.tolist()]
    if spec_name == "rows":
        return [[f32(x) for x in row] for row in v]
    if spec_name == "tokens":
        return [[base64.b64encode(t.encode()).decode() for t in row] for row in v]
    if spec_name == "maybe":  # VarLen: 0 or 1 values
        return [] if v is None else [v]
    if spec_name == "label":
        label = record["meta"]["label"]
        return -1 if label is None else label
    return v


def write(path, records, compression):
    encoder = ExampleEncoder(SPECS)
    with open(path, "wb") as handle:
        writer = tff.TFRecordWriter(handle, compression)
        for record in records:
            writer.write(encoder.encode(record))
        writer.close()


@pytest.mark.parametrize("compression", [tff.NONE, tff.GZIP, tff.ZLIB])
def test_tensorflow_parses_every_feature_kind(tmp_path, read_with_tf, compression):
    rng = random.Random(11)
    records = [make_record(rng, i) for i in range(200)]
    path = tmp_path / f"data{tff.file_suffix(compression)}"
    write(path, records, compression)
    spec_path = tmp_path / "feature_spec.json"
    spec_path.write_text(json.dumps(tf_parse_spec(SPECS)))
    parsed = read_with_tf([path], spec=spec_path, compression=compression)
    assert parsed["count"] == len(records)
    for record, got in zip(records, parsed["records"]):
        for spec in SPECS:
            assert got[spec.name] == expected_tf_value(spec.name, record), spec.name


def test_tensorflow_parses_sequence_examples(tmp_path, read_with_tf):
    specs = [
        F("length", "int64"),
        F("frames", "float", (3,), sequence=True),
        F("words", "string", (-1,), sequence=True),
    ]
    rng = random.Random(2)
    records = []
    for _ in range(20):
        steps = rng.randrange(0, 4)
        records.append({
            "length": steps,
            "frames": [[rng.random() for _ in range(3)] for _ in range(steps)],
            "words": [[rng.choice(["x", "yz"]) for _ in range(rng.randrange(0, 3))]
                      for _ in range(steps)],
        })
    encoder = ExampleEncoder(specs)
    path = tmp_path / "seq.tfrecord"
    with open(path, "wb") as handle:
        writer = tff.TFRecordWriter(handle)
        for record in records:
            writer.write(encoder.encode(record))
        writer.close()
    spec_path = tmp_path / "feature_spec.json"
    spec_path.write_text(json.dumps(tf_parse_spec(specs)))
    parsed = read_with_tf([path], spec=spec_path)
    assert parsed["count"] == len(records)
    for record, got in zip(records, parsed["records"]):
        assert got["context"]["length"] == record["length"]
        assert got["sequence"]["frames"] == [[f32(x) for x in step] for step in record["frames"]]
        words = [[base64.b64encode(w.encode()).decode() for w in step]
                 for step in record["words"]]
        assert got["sequence"]["words"] == words


SEQUENCE_SPECS = [F("n", "int64"), F("steps", "float", (2,), sequence=True),
                  F("w", "string", (-1,), sequence=True)]


CHECKED = {"example": SPECS, "sequence": SEQUENCE_SPECS}


@pytest.fixture(scope="module")
def python_snippet_checks(tf_oracle, tmp_path_factory) -> dict:
    """For each of ``CHECKED``: `schema --python`'s output for its feature_spec.json, followed
    by a check that it builds exactly the objects the oracle builds from that file, run as a
    program in the TensorFlow oracle's process (``tf_oracle.script``: importing TensorFlow
    costs seconds, once per worker)."""
    from beam_tfrecords.transforms.codec.feature_spec import tf_parse_spec_python

    tmp = tmp_path_factory.mktemp("python-snippet")
    checks = {}
    for name, specs in CHECKED.items():
        doc = tf_parse_spec(specs)
        spec_file = tmp / f"{name}-spec.json"
        spec_file.write_text(json.dumps(doc))
        checks[name] = tmp / f"{name}-check.py"
        checks[name].write_text(tf_parse_spec_python(doc) + (
            "import json, importlib.util\n"
            f"s = importlib.util.spec_from_file_location('oracle', {str(TF_READER)!r})\n"
            "oracle = importlib.util.module_from_spec(s)\n"
            "s.loader.exec_module(oracle)\n"
            f"_, ctx, seq = oracle.build_parse_spec(tf, json.load(open({str(spec_file)!r})))\n"
            "if seq is None:\n"
            "    assert features == ctx, (features, ctx)\n"
            "else:\n"
            "    assert context_features == ctx and sequence_features == seq\n"
            "print('same', len(ctx) + len(seq or {}))\n"
        ))
    return {name: tf_oracle.script(path, cwd=tmp) for name, path in checks.items()}


@pytest.mark.parametrize("case", list(CHECKED))
def test_python_snippet_builds_the_same_tf_objects(case, python_snippet_checks):
    """`schema --python` output runs in TensorFlow and builds exactly the objects that the
    oracle builds from feature_spec.json."""
    result = python_snippet_checks[case]
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == f"same {len(CHECKED[case])}"
