"""Write the TensorFlow-made golden files into tests/golden/.

Run ONLY with the TensorFlow virtual environment's interpreter, from anywhere:

    <tf venv>/bin/python tests/tf_oracle/make_golden.py [--out-dir DIR]

Everything written is a pure function of the fixed data below (no randomness, no
timestamps), so a rerun with the same TensorFlow/protobuf versions reproduces identical
bytes. Records are serialized with ``SerializeToString(deterministic=True)`` (map entries
sorted by key) and framed by ``tf.io.TFRecordWriter``.

Files written (see tests/golden/README.md for what each covers):
    examples.tfrecord, examples.tfrecord.gz, examples.tfrecord.zlib
    sequence_examples.tfrecord, spec_examples.tfrecord
    <name>.feature_spec.json + <name>.parsed.json for examples, sequence_examples,
    spec_examples (the output of read_with_tf.py's spec mode for that file)
    expected.json (TF-independent raw form of every record of every .tfrecord* file)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import read_with_tf as oracle  # noqa: E402  (same directory; shares the raw form)

DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "golden"))

I64_MAX = 2**63 - 1
I64_MIN = -(2**63)
FLT_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]  # 3.4028234663852886e+38
FLT_MIN = struct.unpack("<f", struct.pack("<I", 0x00800000))[0]  # smallest normal, 2**-126
FLT_TRUE_MIN = struct.unpack("<f", struct.pack("<I", 0x00000001))[0]  # smallest subnormal, 2**-149
NAN = float("nan")
INF = float("inf")
TEXT = "héllo ✓"
NON_UTF8 = b"\xff\x00\xfe"
UNICODE_NAME = "métadonnées/ラベル ✓"  # unicode, '/' and a space in a feature name


# Features are written as {name: (kind, [values])}; kind is "i" (int64_list),
# "f" (float_list) or "b" (bytes_list; str values are UTF-8 encoded).
def I(*v):
    return ("i", list(v))


def F(*v):
    return ("f", list(v))


def B(*v):
    return ("b", list(v))


EXAMPLES = [
    {  # 0: zeros, empty bytes, a full ragged value, several floats needing float32 rounding
        "int_scalar": I(0),
        "bool": I(1),
        "float_scalar": F(0.0),
        "bytes_scalar": B(b""),
        "pixels": F(0.5, 1.0, 1.5, 2.0, 2.5, 3.0),
        "ids": I(1, 2, 3),
        "floats": F(0.1, 1 / 3, 16777217.0, FLT_MIN, -2.5),
        "tokens/flat_values": I(1, 2, 3, 4, 5),
        "tokens/row_lengths_1": I(2, 0, 3),
        UNICODE_NAME: B(TEXT),
    },
    {  # 1: -1, -0.0, non-UTF-8 bytes, empty int64/float lists, zero-row ragged value
        "int_scalar": I(-1),
        "bool": I(0),
        "float_scalar": F(-0.0),
        "bytes_scalar": B(NON_UTF8),
        "pixels": F(-1.0, -2.0, -3.0, -4.0, -5.0, -6.0),
        "ids": I(),
        "floats": F(),
        "tokens/flat_values": I(),
        "tokens/row_lengths_1": I(),
        UNICODE_NAME: B(NON_UTF8, b"", TEXT),
    },
    {  # 2: int64 max, UTF-8 text, special floats inside a fixed-shape feature
        "int_scalar": I(I64_MAX),
        "bool": I(1),
        "float_scalar": F(1.5),
        "bytes_scalar": B(TEXT),
        "pixels": F(NAN, INF, -INF, -0.0, FLT_MAX, FLT_TRUE_MIN),
        "ids": I(I64_MAX, I64_MIN, 0, -1),
        "tokens/flat_values": I(),
        "tokens/row_lengths_1": I(0, 0),
    },
    {  # 3: int64 min, float32 max
        "int_scalar": I(I64_MIN),
        "bool": I(0),
        "float_scalar": F(FLT_MAX),
        "bytes_scalar": B("plain ascii"),
        "ids": I(-7),
        "tokens/flat_values": I(9),
        "tokens/row_lengths_1": I(1),
    },
    {  # 4: smallest subnormal
        "int_scalar": I(42),
        "bool": I(1),
        "float_scalar": F(FLT_TRUE_MIN),
        "bytes_scalar": B(b"\x00"),
    },
    {  # 5: nan
        "int_scalar": I(5),
        "bool": I(0),
        "float_scalar": F(NAN),
        "bytes_scalar": B(b"\x00\x01\x02\x03\x80"),
    },
    {  # 6: inf
        "int_scalar": I(6),
        "bool": I(1),
        "float_scalar": F(INF),
        "bytes_scalar": B("x" * 300),  # a value longer than 127 bytes (2-byte length varint)
    },
    {  # 7: -inf, bytes_scalar absent
        "int_scalar": I(7),
        "bool": I(0),
        "float_scalar": F(-INF),
    },
    {},  # 8: an Example with zero features
]

# A spec under which every record of examples.tfrecord parses.
EXAMPLES_SPEC = {
    "example_type": "Example",
    "features": {
        "int_scalar": {"type": "FixedLenFeature", "shape": [], "dtype": "int64", "default_value": 0},
        "bool": {"type": "FixedLenFeature", "shape": [], "dtype": "int64", "default_value": 0},
        "float_scalar": {"type": "FixedLenFeature", "shape": [], "dtype": "float32", "default_value": 0.0},
        "bytes_scalar": {"type": "FixedLenFeature", "shape": [], "dtype": "string", "default_value": ""},
        "pixels": {"type": "FixedLenFeature", "shape": [2, 3], "dtype": "float32",
                   "default_value": [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]},
        "ids": {"type": "VarLenFeature", "dtype": "int64"},
        "floats": {"type": "VarLenFeature", "dtype": "float32"},
        "tokens": {"type": "RaggedFeature", "dtype": "int64", "value_key": "tokens/flat_values",
                   "partitions": [{"type": "RowLengths", "key": "tokens/row_lengths_1"}],
                   "row_splits_dtype": "int64"},
        UNICODE_NAME: {"type": "VarLenFeature", "dtype": "string"},
    },
}

# The contract's own example spec, with a small file every record of which parses.
SPEC_EXAMPLES = [
    {
        "feature0": I(0),
        "pixels": F(0.0, 1.0, 2.0, 3.0, 4.0, 5.0),
        "caption": B("a cat"),
        "ids": I(1, 2),
        "tokens/flat_values": I(1, 2, 3, 4, 5, 6, 7, 8, 9),
        "tokens/row_lengths_1": I(2, 1),  # 3 rows of 3 -> [[r0, r1], [r2]]
    },
    {  # caption absent -> default ""; ids empty; zero-row ragged value
        "feature0": I(-1),
        "pixels": F(-0.0, 0.1, NAN, INF, -INF, FLT_MAX),
        "ids": I(),
        "tokens/flat_values": I(),
        "tokens/row_lengths_1": I(),
    },
    {
        "feature0": I(I64_MAX),
        "pixels": F(1.5, 1.5, 1.5, 1.5, 1.5, 1.5),
        "caption": B(TEXT),
        "ids": I(5),
        "tokens/flat_values": I(0, 0, 0),
        "tokens/row_lengths_1": I(0, 1),
    },
    {
        "feature0": I(I64_MIN),
        "pixels": F(FLT_TRUE_MIN, 0.0, 0.0, 0.0, 0.0, 0.0),
        "caption": B(""),
        "ids": I(1, 1, 1, 1),
        "tokens/flat_values": I(-1, -2, -3, -4, -5, -6),
        "tokens/row_lengths_1": I(1, 0, 1),
    },
]

SPEC_EXAMPLES_SPEC = {
    "example_type": "Example",
    "features": {
        "feature0": {"type": "FixedLenFeature", "shape": [], "dtype": "int64"},
        "pixels": {"type": "FixedLenFeature", "shape": [2, 3], "dtype": "float32"},
        "caption": {"type": "FixedLenFeature", "shape": [], "dtype": "string", "default_value": ""},
        "ids": {"type": "VarLenFeature", "dtype": "int64"},
        "tokens": {"type": "RaggedFeature", "dtype": "int64", "value_key": "tokens/flat_values",
                   "partitions": [{"type": "RowLengths", "key": "tokens/row_lengths_1"},
                                  {"type": "UniformRowLength", "length": 3}],
                   "row_splits_dtype": "int64"},
    },
}

# SequenceExamples: (context, feature_lists); a feature list is a list of per-step features.
SEQUENCE_EXAMPLES = [
    (
        {"length": I(3), "label": B("first"), "weight": F(0.5), "tags": B("a", "b")},
        {
            "ids": [I(1), I(2), I(3)],
            "pairs": [I(1, 2), I(3, 4), I(5, 6)],
            "vals": [F(0.1), F(0.2, 0.3), F()],
            "words": [B("a"), B("b", "c"), B(b"")],
            "empty": [],
        },
    ),
    (
        {"length": I(1), "label": B(TEXT), "weight": F(-0.0), "tags": B()},
        {
            "ids": [I(-1)],
            "pairs": [I(0, 0)],
            "vals": [F(NAN, INF, -INF, FLT_TRUE_MIN)],
            "words": [B(NON_UTF8, TEXT)],
            "empty": [],
        },
    ),
    (  # no "tags" in the context, no "words" feature list at all
        {"length": I(2), "label": B(b""), "weight": F(FLT_MAX)},
        {
            "ids": [I(I64_MAX), I(I64_MIN)],
            "pairs": [I(-1, -2), I(-3, -4)],
            "vals": [F(), F()],
            "empty": [],
        },
    ),
]

SEQUENCE_SPEC = {
    "example_type": "SequenceExample",
    "features": {
        "length": {"type": "FixedLenFeature", "shape": [], "dtype": "int64"},
        "label": {"type": "FixedLenFeature", "shape": [], "dtype": "string"},
        "weight": {"type": "FixedLenFeature", "shape": [], "dtype": "float32"},
        "tags": {"type": "VarLenFeature", "dtype": "string"},
    },
    "sequence_features": {
        "ids": {"type": "FixedLenSequenceFeature", "shape": [], "dtype": "int64", "allow_missing": False},
        "pairs": {"type": "FixedLenSequenceFeature", "shape": [2], "dtype": "int64"},
        "vals": {"type": "RaggedFeature", "dtype": "float32", "value_key": "vals", "partitions": [],
                 "row_splits_dtype": "int64"},
        "words": {"type": "VarLenFeature", "dtype": "string"},
        "empty": {"type": "FixedLenSequenceFeature", "shape": [], "dtype": "float32", "allow_missing": False},
    },
}


# --------------------------------------------------------------------------------------


def tf_feature(tf, kind, values):
    if kind == "i":
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    if kind == "f":
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    data = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=data))


def tf_features(tf, feats):
    return tf.train.Features(feature={k: tf_feature(tf, *v) for k, v in feats.items()})


def make_example(tf, feats):
    return tf.train.Example(features=tf_features(tf, feats))


def make_sequence_example(tf, context, lists):
    return tf.train.SequenceExample(
        context=tf_features(tf, context),
        feature_lists=tf.train.FeatureLists(
            feature_list={
                k: tf.train.FeatureList(feature=[tf_feature(tf, *f) for f in steps])
                for k, steps in lists.items()
            }
        ),
    )


def intended_raw_feature(kind, values):
    """The raw form the data above should decode to (independent of TensorFlow)."""
    if kind == "i":
        return {"kind": "int64_list", "value": values}
    if kind == "f":
        bits = [oracle.float32_bits(v) for v in values]
        f32 = [struct.unpack("<f", struct.pack("<f", v))[0] for v in values]
        return {"kind": "float_list", "value": f32, "bits": bits}
    data = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
    return {"kind": "bytes_list", "value": [oracle.b64(v) for v in data]}


def intended_raw_features(feats):
    return {k: intended_raw_feature(*feats[k]) for k in sorted(feats)}


def same_raw(a, b):
    """Equality where float_list entries are compared by their bit patterns."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return False
        if a.get("kind") == "float_list":
            return a["bits"] == b["bits"] and len(a["value"]) == len(b["value"])
        return all(same_raw(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_raw(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b)


def _varint(buf, pos):
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def _fields(buf):
    """Top-level (field_number, wire_type, payload) of a protobuf message (wire types 0/2 only)."""
    pos, out = 0, []
    while pos < len(buf):
        tag, pos = _varint(buf, pos)
        wire = tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + n], pos + n
        else:
            raise ValueError(f"unexpected wire type {wire}")
        out.append((tag >> 3, wire, value))
    return out


def map_keys_in_wire_order(features_bytes):
    """Keys of a serialized Features message's map, in the order they were written."""
    keys = []
    for field, _, entry in _fields(features_bytes):
        assert field == 1
        key = [v for f, _, v in _fields(entry) if f == 1]
        keys.append(key[0] if key else b"")
    return keys


def check_map_order(data, example_type):
    """Assert the serialized maps are sorted by the UTF-8 bytes of their keys."""
    msgs = []
    for field, _, value in _fields(data):
        if example_type == "Example" and field == 1:
            msgs.append(value)
        if example_type == "SequenceExample":
            if field == 1:
                msgs.append(value)
            elif field == 2:  # FeatureLists: same map layout as Features
                msgs.append(value)
    for m in msgs:
        keys = map_keys_in_wire_order(m)
        assert keys == sorted(keys), keys


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, sort_keys=True, indent=1, allow_nan=True) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description="Write tests/golden/ with TensorFlow.")
    p.add_argument("--out-dir", default=DEFAULT_OUT)
    args = p.parse_args(argv)
    out_dir = args.out_dir
    os.makedirs(out_dir, exist_ok=True)

    tf = oracle.import_tf()
    import google.protobuf

    # Build and serialize every record; check what TF's protobuf decodes against the intent.
    sets = {}  # name -> (example_type, [serialized], [intended raw])
    nondeterministic_equal = True

    def build(name, example_type, protos, intended):
        nonlocal nondeterministic_equal
        serialized = []
        for msg in protos:
            data = msg.SerializeToString(deterministic=True)
            nondeterministic_equal &= data == msg.SerializeToString()
            check_map_order(data, example_type)
            serialized.append(data)
        sets[name] = (example_type, serialized, intended)

    build("examples", "Example", [make_example(tf, e) for e in EXAMPLES],
          [{"features": intended_raw_features(e)} for e in EXAMPLES])
    build("spec_examples", "Example", [make_example(tf, e) for e in SPEC_EXAMPLES],
          [{"features": intended_raw_features(e)} for e in SPEC_EXAMPLES])
    build("sequence_examples", "SequenceExample",
          [make_sequence_example(tf, c, fl) for c, fl in SEQUENCE_EXAMPLES],
          [{"context": intended_raw_features(c),
            "feature_lists": {k: [intended_raw_feature(*s) for s in fl[k]] for k in sorted(fl)}}
           for c, fl in SEQUENCE_EXAMPLES])

    files = [  # (file name, record set, compression)
        ("examples.tfrecord", "examples", "none"),
        ("examples.tfrecord.gz", "examples", "gzip"),
        ("examples.tfrecord.zlib", "examples", "zlib"),
        ("sequence_examples.tfrecord", "sequence_examples", "none"),
        ("spec_examples.tfrecord", "spec_examples", "none"),
    ]
    expected_files = {}
    for fname, set_name, compression in files:
        example_type, serialized, intended = sets[set_name]
        path = os.path.join(out_dir, fname)
        options = tf.io.TFRecordOptions(compression_type=oracle.COMPRESSION[compression])
        with tf.io.TFRecordWriter(path, options) as w:
            for data in serialized:
                w.write(data)
        # Read back with TF and decode with TF's protobuf classes.
        back = [t.numpy() for t in oracle.dataset(tf, [path], compression)]
        assert back == serialized, f"{fname}: TF did not read back the records written"
        raw = oracle.dump_raw(tf, [path], compression, example_type)
        for i, (got, want) in enumerate(zip(raw, intended)):
            got_cmp = {k: v for k, v in got.items() if k != "serialized_b64"}
            assert same_raw(got_cmp, want), f"{fname} record {i}: {got_cmp} != {want}"
        expected_files[fname] = {
            "compression": compression,
            "example_type": example_type,
            "sha256": sha256(path),
            "count": len(raw),
            "records": raw,
        }

    # Spec-driven goldens: the spec file and what read_with_tf.py's spec mode returns for it.
    parsed_goldens = {}
    for set_name, spec in (("examples", EXAMPLES_SPEC), ("spec_examples", SPEC_EXAMPLES_SPEC),
                           ("sequence_examples", SEQUENCE_SPEC)):
        spec_name = f"{set_name}.feature_spec.json"
        parsed_name = f"{set_name}.parsed.json"
        write_json(os.path.join(out_dir, spec_name), spec)
        records = oracle.parse_files(tf, [os.path.join(out_dir, f"{set_name}.tfrecord")], "none",
                                     spec, validate_ragged=True)
        write_json(os.path.join(out_dir, parsed_name), {"count": len(records), "records": records})
        parsed_goldens[set_name] = {"data": f"{set_name}.tfrecord", "spec": spec_name,
                                    "parsed": parsed_name}

    expected = {
        "generator": "tests/tf_oracle/make_golden.py",
        "tensorflow_version": tf.__version__,
        "protobuf_version": google.protobuf.__version__,
        "serialization": (
            "Each record is msg.SerializeToString(deterministic=True) of tf.train.Example / "
            "tf.train.SequenceExample (map entries sorted by the UTF-8 bytes of their keys), "
            "written with tf.io.TFRecordWriter."
        ),
        "default_serialization_matched_deterministic": nondeterministic_equal,
        "raw_form": {
            "Example": {"features": {"<name>": {"kind": "int64_list|float_list|bytes_list",
                                                "value": ["..."]}}},
            "SequenceExample": {"context": "same as features",
                                "feature_lists": {"<name>": ["one raw feature per step"]}},
            "float_list": "value = float32 values as JSON numbers (NaN/Infinity allowed); "
                          "bits = their IEEE-754 binary32 bit patterns, the authority",
            "bytes_list": "value = base64 strings",
            "int64_list": "value = JSON ints",
            "kind null": "a Feature whose kind oneof is unset (not present in these files)",
            "serialized_b64": "base64 of the record bytes exactly as TF read them from the file",
        },
        "parsed_goldens": parsed_goldens,
        "files": expected_files,
    }
    write_json(os.path.join(out_dir, "expected.json"), expected)

    written = [f for f, _, _ in files] + ["expected.json"]
    for g in parsed_goldens.values():
        written += [g["spec"], g["parsed"]]
    for fname in sorted(written):
        print(f"{sha256(os.path.join(out_dir, fname))}  {fname}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
