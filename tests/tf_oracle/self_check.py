"""Self-check of read_with_tf.py against the goldens (not a pytest test).

    <tf venv>/bin/python tests/tf_oracle/self_check.py

Drives read_with_tf.py through its command line, exactly as the project's tests do, over the
files in tests/golden/, and checks the failure modes the tests rely on (non-zero exit with
TensorFlow's message on stderr). Scratch files go to a temporary directory. Prints one line
per check and exits non-zero if any check failed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.normpath(os.path.join(HERE, "..", "golden"))
ORACLE = os.path.join(HERE, "read_with_tf.py")

failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f"  -- {detail}" if detail and not ok else ""))
    if not ok:
        failures.append(name)


def run(args, tmp):
    out = os.path.join(tmp, "result.json")
    if os.path.exists(out):
        os.remove(out)
    t0 = time.time()
    proc = subprocess.run([sys.executable, ORACLE, *args, "--out", out],
                          capture_output=True, text=True)
    elapsed = time.time() - t0
    result = None
    if proc.returncode == 0:
        with open(out, encoding="utf-8") as f:
            result = json.load(f)
    return proc.returncode, result, proc.stderr, elapsed


def load(name):
    with open(os.path.join(GOLDEN, name), encoding="utf-8") as f:
        return json.load(f)


def same(a, b):
    """JSON equality with NaN == NaN and -0.0 != 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def tf_write(path, records, compression=""):
    """Write raw record bytes with TF's writer (valid framing, arbitrary payloads)."""
    import tensorflow as tf

    with tf.io.TFRecordWriter(path, tf.io.TFRecordOptions(compression_type=compression)) as w:
        for r in records:
            w.write(r)


def example_bytes(feats):
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString(
        deterministic=True)


def main():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    expected = load("expected.json")
    g = lambda name: os.path.join(GOLDEN, name)  # noqa: E731

    with tempfile.TemporaryDirectory() as tmp:
        # 1. Spec mode over every golden data file, each compression.
        for set_name, files in (
            ("examples", [("examples.tfrecord", "none"), ("examples.tfrecord.gz", "gzip"),
                          ("examples.tfrecord.zlib", "zlib")]),
            ("spec_examples", [("spec_examples.tfrecord", "none")]),
            ("sequence_examples", [("sequence_examples.tfrecord", "none")]),
        ):
            want = load(f"{set_name}.parsed.json")
            for fname, comp in files:
                for extra in ([], ["--batch-size", "1"], ["--batch-size", "4"], ["--validate-ragged"]):
                    rc, res, err, dt = run(["--spec", g(f"{set_name}.feature_spec.json"),
                                            "--compression", comp, *extra, g(fname)], tmp)
                    check(f"spec {fname} {' '.join(extra)} ({dt:.1f}s)",
                          rc == 0 and same(res, want), err[-500:])

        # 2. Many files in one process: order kept, counts add up.
        want = load("examples.parsed.json")
        rc, res, err, _ = run(["--spec", g("examples.feature_spec.json"), "--batch-size", "4",
                               g("examples.tfrecord"), g("examples.tfrecord")], tmp)
        check("spec two files, file order", rc == 0 and res["count"] == 2 * want["count"]
              and same(res["records"], want["records"] * 2), err[-500:])

        # 3. --dump-raw reproduces expected.json's records (incl. serialized_b64) for every file.
        for fname, entry in expected["files"].items():
            rc, res, err, _ = run(["--dump-raw", "--example-type", entry["example_type"],
                                   "--compression", entry["compression"], g(fname)], tmp)
            check(f"dump-raw {fname}", rc == 0 and res["count"] == entry["count"]
                  and same(res["records"], entry["records"]), err[-500:])

        # 4. Failures must exit non-zero with TensorFlow's message on stderr.
        def fails(name, args, rc_want=1, needle=""):
            rc, _, err, _ = run(args, tmp)
            check(f"fails: {name} (rc={rc})", rc == rc_want and needle in err, err[-400:])
            return err

        spec = g("examples.feature_spec.json")
        fails("wrong compression (gzip read as none)",
              ["--spec", spec, "--compression", "none", g("examples.tfrecord.gz")])
        fails("wrong compression (none read as zlib)",
              ["--spec", spec, "--compression", "zlib", g("examples.tfrecord")])
        fails("missing file", ["--spec", spec, os.path.join(tmp, "nope.tfrecord")],
              needle="NotFound")
        with open(g("examples.tfrecord"), "rb") as f:
            original = f.read()
        data = bytearray(original)
        bad = os.path.join(tmp, "flipped.tfrecord")
        data[40] ^= 0x01
        with open(bad, "wb") as f:
            f.write(data)
        fails("payload byte flipped (crc)", ["--spec", spec, bad], needle="DataLoss")
        fails("payload byte flipped, dump-raw", ["--dump-raw", bad], needle="DataLoss")
        trunc = os.path.join(tmp, "truncated.tfrecord")
        with open(trunc, "wb") as f:
            f.write(original[:-3])
        fails("truncated file", ["--spec", spec, trunc], needle="DataLoss")
        unframed = os.path.join(tmp, "unframed.bin")
        with open(unframed, "wb") as f:
            f.write(b"".join(base64_records(expected["files"]["examples.tfrecord"])))
        fails("serialized Examples without framing", ["--spec", spec, unframed])

        import tensorflow as tf

        I = lambda v: tf.train.Feature(int64_list=tf.train.Int64List(value=v))  # noqa: E731
        Fl = lambda v: tf.train.Feature(float_list=tf.train.FloatList(value=v))  # noqa: E731
        notproto = os.path.join(tmp, "notproto.tfrecord")
        tf_write(notproto, [b"\xff\xff\xff\xff"])
        fails("framed record that is not an Example", ["--spec", spec, notproto])
        wrongkind = os.path.join(tmp, "wrongkind.tfrecord")
        tf_write(wrongkind, [example_bytes({"ids": Fl([1.0])})])
        fails("float_list where spec says int64", ["--spec", spec, wrongkind],
              needle="Data types don't match")
        emptyfixed = os.path.join(tmp, "emptyfixed.tfrecord")
        tf_write(emptyfixed, [example_bytes({"int_scalar": I([])})])
        fails("empty int64_list for FixedLenFeature with default", ["--spec", spec, emptyfixed],
              needle="Values size: 0")
        shortfixed = os.path.join(tmp, "shortfixed.tfrecord")
        tf_write(shortfixed, [example_bytes({"pixels": Fl([1.0] * 5)})])
        fails("5 floats for shape [2,3]", ["--spec", spec, shortfixed], needle="Values size: 5")
        ragged_bad = os.path.join(tmp, "ragged_bad.tfrecord")
        tf_write(ragged_bad, [example_bytes({"tokens/flat_values": I([1, 2, 3, 4, 5]),
                                             "tokens/row_lengths_1": I([2, 2])})])
        # Eager tf.io.parse_example silently truncates here; returning the RaggedTensor from a
        # tf.data map (as read_with_tf.py does) checks the outer splits against the values.
        fails("ragged row_lengths sum 4 < 5 values (tf.data checks splits)",
              ["--spec", spec, ragged_bad], needle="Invalid ragged splits")
        ragged_neg = os.path.join(tmp, "ragged_neg.tfrecord")
        tf_write(ragged_neg, [example_bytes({"tokens/flat_values": I([1, 2, 3]),
                                             "tokens/row_lengths_1": I([-1, 4])})])
        fails("negative row length (tf.data checks splits are monotonic)",
              ["--spec", spec, ragged_neg], needle="monotonically")
        fails("negative row length with --validate-ragged",
              ["--spec", spec, "--validate-ragged", ragged_neg])
        fails("ragged row_lengths mismatch with --validate-ragged",
              ["--spec", spec, "--validate-ragged", ragged_bad])

        seq_spec = load("sequence_examples.feature_spec.json")
        seq_spec["sequence_features"]["words"] = {"type": "FixedLenSequenceFeature", "shape": [],
                                                  "dtype": "string", "allow_missing": False}
        seq_spec_path = os.path.join(tmp, "seq_spec.json")
        with open(seq_spec_path, "w") as f:
            json.dump(seq_spec, f)
        err = fails("missing feature list for FixedLenSequenceFeature(allow_missing=false)",
                    ["--spec", seq_spec_path, g("sequence_examples.tfrecord")])
        print("     stderr tail:", err.strip().splitlines()[-1][:300])

        # 5. Bad specs exit 2.
        def bad_spec(name, obj):
            path = os.path.join(tmp, "bad_spec.json")
            with open(path, "w") as f:
                json.dump(obj, f)
            fails(f"bad spec: {name}", ["--spec", path, g("examples.tfrecord")], rc_want=2,
                  needle="bad spec")

        bad_spec("unknown type", {"example_type": "Example",
                                  "features": {"a": {"type": "SparseFeature", "dtype": "int64"}}})
        bad_spec("unknown dtype", {"example_type": "Example",
                                   "features": {"a": {"type": "VarLenFeature", "dtype": "float64"}}})
        bad_spec("unknown key", {"example_type": "Example",
                                 "features": {"a": {"type": "VarLenFeature", "dtype": "int64",
                                                    "shape": []}}})
        bad_spec("unknown partition", {"example_type": "Example", "features": {
            "a": {"type": "RaggedFeature", "dtype": "int64",
                  "partitions": [{"type": "RowLens", "key": "x"}]}}})
        bad_spec("sequence feature in an Example", {"example_type": "Example", "features": {
            "a": {"type": "FixedLenSequenceFeature", "shape": [], "dtype": "int64"}}})
        bad_spec("bad example_type", {"example_type": "Examples", "features": {}})

        # 6. Import cost vs. per-record cost: one process, 200 copies of examples.tfrecord.
        files = [g("examples.tfrecord")] * 200
        rc, res, err, dt = run(["--spec", spec, *files], tmp)
        check(f"200 files x 9 records in one process ({dt:.1f}s)", rc == 0 and res["count"] == 1800,
              err[-400:])

    print(f"\n{len(failures)} failure(s)" + (": " + ", ".join(failures) if failures else ""))
    return 1 if failures else 0


def base64_records(entry):
    import base64

    return [base64.b64decode(r["serialized_b64"]) for r in entry["records"]]


if __name__ == "__main__":
    sys.exit(main())
