"""TensorFlow oracle: read TFRecord files with TensorFlow and print what TensorFlow sees.

Run ONLY with the TensorFlow virtual environment's interpreter (TensorFlow is a test
oracle for this project, never a dependency):

    <tf venv>/bin/python tests/tf_oracle/read_with_tf.py \
        --spec feature_spec.json --compression none|gzip|zlib --out result.json FILE [FILE ...]

    <tf venv>/bin/python tests/tf_oracle/read_with_tf.py \
        --dump-raw [--example-type Example|SequenceExample] --compression none \
        --out raw.json FILE [FILE ...]

Spec mode reads every file (in the order given) with ``tf.data.TFRecordDataset``, parses
the records with ``tf.io.parse_example`` (batched) or ``tf.io.parse_single_sequence_example``
(one record at a time, so that the number of steps of each record survives), using a parse
spec built only from the spec file, and writes ``{"count": N, "records": [...]}``.

Raw mode decodes every record with ``tf.train.Example.FromString`` (or
``SequenceExample.FromString``) and writes the same raw form as ``tests/golden/expected.json``.

``--serve`` (alone) reads such command lines as JSON lists from stdin, one per line, and
answers each with a JSON line on stdout (``{"status": N, "stdout": ..., "stderr": ...}``):
the tests keep one such process per worker, since importing TensorFlow costs seconds of CPU
each time. A line may instead name a Python file to run there, as ``python FILE ARGS`` would
run it (``{"script": FILE, "argv": [...], "cwd": DIR}``).

Exit status: 0 on success; 1 when TensorFlow fails to read, decompress, decode or parse
(the TensorFlow error text goes to stderr); 2 for a bad command line or a bad spec file.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import struct
import sys

# --------------------------------------------------------------------------------------
# Spec file -> tf.io parse spec
# --------------------------------------------------------------------------------------

DTYPES = ("int64", "float32", "string")
ROW_SPLITS_DTYPES = ("int32", "int64")
COMPRESSION = {"none": "", "gzip": "GZIP", "zlib": "ZLIB"}

# Allowed keys per feature "type": (required keys, optional keys).
_FEATURE_KEYS = {
    "FixedLenFeature": ({"type", "shape", "dtype"}, {"default_value"}),
    "VarLenFeature": ({"type", "dtype"}, set()),
    "RaggedFeature": (
        {"type", "dtype"},
        {"value_key", "partitions", "row_splits_dtype", "validate"},
    ),
    "FixedLenSequenceFeature": (
        {"type", "shape", "dtype"},
        {"allow_missing", "default_value"},
    ),
}
_CONTEXT_TYPES = ("FixedLenFeature", "VarLenFeature", "RaggedFeature")
_SEQUENCE_TYPES = ("FixedLenSequenceFeature", "VarLenFeature", "RaggedFeature")
# Partition "type" -> (name of the tf.io.RaggedFeature attribute, the key holding its argument)
_PARTITIONS = {
    "RowSplits": "key",
    "RowLengths": "key",
    "RowStarts": "key",
    "RowLimits": "key",
    "ValueRowIds": "key",
    "UniformRowLength": "length",
}


class SpecError(ValueError):
    """The spec file does not follow the contract."""


def _check_keys(where, entry, required, optional):
    if not isinstance(entry, dict):
        raise SpecError(f"{where}: expected an object, got {type(entry).__name__}")
    missing = sorted(required - entry.keys())
    unknown = sorted(entry.keys() - required - optional)
    if missing:
        raise SpecError(f"{where}: missing key(s) {missing}")
    if unknown:
        raise SpecError(f"{where}: unknown key(s) {unknown}")


def _dtype(tf, where, name, allowed=DTYPES):
    if name not in allowed:
        raise SpecError(f"{where}: dtype {name!r} is not one of {list(allowed)}")
    return tf.as_dtype(name)


def _shape(where, shape):
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
    ):
        raise SpecError(f"{where}: shape must be a list of non-negative ints, got {shape!r}")
    return shape


def _bool(where, value):
    if not isinstance(value, bool):
        raise SpecError(f"{where}: expected true/false, got {value!r}")
    return value


def feature_to_tf(tf, name, entry, *, sequence, validate_ragged=False):
    """Map one spec entry onto the tf.io feature object it names.

    ``sequence`` says whether the entry is in "sequence_features". ``validate_ragged``
    forces ``validate=True`` on RaggedFeatures (TensorFlow's default is False, which
    silently truncates or drops values when row partitions disagree with the values).
    """
    where = f"{'sequence_features' if sequence else 'features'}[{name!r}]"
    if not isinstance(entry, dict) or "type" not in entry:
        raise SpecError(f"{where}: expected an object with a \"type\"")
    kind = entry["type"]
    if kind not in _FEATURE_KEYS:
        raise SpecError(f"{where}: unknown type {kind!r}")
    allowed = _SEQUENCE_TYPES if sequence else _CONTEXT_TYPES
    if kind not in allowed:
        raise SpecError(f"{where}: type {kind!r} is not allowed here (allowed: {list(allowed)})")
    required, optional = _FEATURE_KEYS[kind]
    _check_keys(where, entry, required, optional)
    dtype = _dtype(tf, where, entry["dtype"])

    if kind == "FixedLenFeature":
        return tf.io.FixedLenFeature(
            _shape(where, entry["shape"]), dtype, default_value=entry.get("default_value")
        )
    if kind == "FixedLenSequenceFeature":
        return tf.io.FixedLenSequenceFeature(
            _shape(where, entry["shape"]),
            dtype,
            allow_missing=_bool(where, entry.get("allow_missing", False)),
            default_value=entry.get("default_value"),
        )
    if kind == "VarLenFeature":
        return tf.io.VarLenFeature(dtype)

    # RaggedFeature
    value_key = entry.get("value_key", name)
    if not isinstance(value_key, str):
        raise SpecError(f"{where}: value_key must be a string")
    partitions = entry.get("partitions", [])
    if not isinstance(partitions, list):
        raise SpecError(f"{where}: partitions must be a list")
    tf_partitions = []
    for i, part in enumerate(partitions):
        pwhere = f"{where}.partitions[{i}]"
        if not isinstance(part, dict) or part.get("type") not in _PARTITIONS:
            raise SpecError(
                f"{pwhere}: type must be one of {sorted(_PARTITIONS)}, got {part!r}"
            )
        arg = _PARTITIONS[part["type"]]
        _check_keys(pwhere, part, {"type", arg}, set())
        value = part[arg]
        if arg == "key" and not isinstance(value, str):
            raise SpecError(f"{pwhere}: key must be a string")
        if arg == "length" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise SpecError(f"{pwhere}: length must be a non-negative int")
        tf_partitions.append(getattr(tf.io.RaggedFeature, part["type"])(value))
    validate = _bool(where, entry.get("validate", False)) or validate_ragged
    return tf.io.RaggedFeature(
        dtype,
        value_key=value_key,
        partitions=tuple(tf_partitions),
        row_splits_dtype=_dtype(
            tf, where, entry.get("row_splits_dtype", "int64"), ROW_SPLITS_DTYPES
        ),
        validate=validate,
    )


def build_parse_spec(tf, spec, validate_ragged=False):
    """Return (example_type, {name: tf.io feature}, {name: tf.io feature} or None)."""
    if not isinstance(spec, dict):
        raise SpecError("spec: expected a JSON object")
    example_type = spec.get("example_type")
    if example_type not in ("Example", "SequenceExample"):
        raise SpecError(f"spec: example_type must be Example or SequenceExample, got {example_type!r}")
    optional = {"sequence_features"} if example_type == "SequenceExample" else set()
    _check_keys("spec", spec, {"example_type", "features"}, optional)
    sections = [("features", False)]
    if example_type == "SequenceExample":
        sections.append(("sequence_features", True))
    out = []
    for section, sequence in sections:
        entries = spec.get(section, {})
        if not isinstance(entries, dict):
            raise SpecError(f"spec: {section} must be an object")
        out.append(
            {
                name: feature_to_tf(tf, name, entry, sequence=sequence, validate_ragged=validate_ragged)
                for name, entry in entries.items()
            }
        )
    if example_type == "Example":
        return example_type, out[0], None
    return example_type, out[0], out[1]


# --------------------------------------------------------------------------------------
# Python forms
# --------------------------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def float32_bits(value: float) -> str:
    return "0x%08x" % struct.unpack("<I", struct.pack("<f", value))[0]


def _jsonable(value):
    """bytes -> base64 str, recursively; ints and floats pass through."""
    if isinstance(value, bytes):
        return b64(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _tensor_list(tf, t):
    """A (possibly ragged) eager tensor as nested Python lists / scalar."""
    if isinstance(t, tf.RaggedTensor):
        return _jsonable(_ragged_list(tf, t))
    value = t.numpy()
    return _jsonable(value.tolist() if hasattr(value, "tolist") else value)


def _ragged_list(tf, t) -> list:
    """``t.to_list()``, cut by its row splits here: TensorFlow's own slices a tensor of two
    or more ragged dimensions row by row, one op per row (seconds for a few hundred)."""
    inner = t.values
    values = (_ragged_list(tf, inner) if isinstance(inner, tf.RaggedTensor)
              else inner.numpy().tolist())
    splits = t.row_splits.numpy().tolist()
    return [values[start:end] for start, end in zip(splits, splits[1:])]


def _sparse_rows(t, nrows):
    """Split a SparseTensor along dimension 0 into ``nrows`` groups of its values."""
    import numpy as np

    rows = t.indices.numpy()[:, 0]
    values = t.values.numpy()
    bounds = np.searchsorted(rows, np.arange(nrows + 1), side="left")
    return [_jsonable(values[bounds[i] : bounds[i + 1]].tolist()) for i in range(nrows)]


def raw_feature(feature):
    """tf.train.Feature -> {"kind": ..., "value": [...]} (+ "bits" for float_list)."""
    kind = feature.WhichOneof("kind")
    if kind is None:
        return {"kind": None, "value": []}
    values = list(getattr(feature, kind).value)
    if kind == "bytes_list":
        return {"kind": kind, "value": [b64(v) for v in values]}
    if kind == "float_list":
        return {"kind": kind, "value": values, "bits": [float32_bits(v) for v in values]}
    return {"kind": kind, "value": values}


def raw_features(features):
    return {name: raw_feature(features.feature[name]) for name in sorted(features.feature)}


def raw_record(tf, example_type, data: bytes):
    """Decode one serialized record with the protobuf classes TensorFlow ships."""
    if example_type == "Example":
        msg = tf.train.Example.FromString(data)
        raw = {"features": raw_features(msg.features)}
    else:
        msg = tf.train.SequenceExample.FromString(data)
        lists = msg.feature_lists.feature_list
        raw = {
            "context": raw_features(msg.context),
            "feature_lists": {
                name: [raw_feature(f) for f in lists[name].feature] for name in sorted(lists)
            },
        }
    raw["serialized_b64"] = b64(data)
    return raw


# --------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------


def import_tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


def dataset(tf, files, compression):
    return tf.data.TFRecordDataset(list(files), compression_type=COMPRESSION[compression])


def dump_raw(tf, files, compression, example_type):
    return [
        raw_record(tf, example_type, t.numpy()) for t in dataset(tf, files, compression)
    ]


def parse_files(tf, files, compression, spec, batch_size=1024, validate_ragged=False):
    """Parse every record of ``files`` with the spec; return the list of Python records."""
    example_type, features, sequence_features = build_parse_spec(tf, spec, validate_ragged)
    ds = dataset(tf, files, compression)
    records = []
    if example_type == "Example":
        if not features:
            # tf.io.parse_example refuses an empty spec; each record is then {}.
            return [{} for _ in ds]
        ds = ds.batch(batch_size).map(lambda s: (tf.shape(s)[0], tf.io.parse_example(s, features)))
        ds = ds.prefetch(1)
        for n, parsed in ds:
            n = int(n)
            columns = {}
            for key, feat in features.items():
                t = parsed[key]
                if isinstance(feat, tf.io.VarLenFeature):
                    columns[key] = _sparse_rows(t, n)
                else:
                    rows = _tensor_list(tf, t)
                    columns[key] = rows
            for i in range(n):
                records.append({key: columns[key][i] for key in features})
        return records

    if not features and not sequence_features:
        return [{"context": {}, "sequence": {}} for _ in ds]

    def parse_one(s):
        return tf.io.parse_single_sequence_example(
            s, context_features=features or None, sequence_features=sequence_features or None
        )

    ds = ds.map(parse_one).prefetch(16)
    for context, sequence in ds:
        rec_context = {}
        for key, feat in features.items():
            t = context[key]
            if isinstance(feat, tf.io.VarLenFeature):
                rec_context[key] = _jsonable(t.values.numpy().tolist())
            else:
                rec_context[key] = _tensor_list(tf, t)
        rec_sequence = {}
        for key, feat in sequence_features.items():
            t = sequence[key]
            if isinstance(feat, tf.io.VarLenFeature):
                # 2-D SparseTensor [steps, max_len]: one list per step, steps from dense_shape.
                rec_sequence[key] = _sparse_rows(t, int(t.dense_shape.numpy()[0]))
            else:
                rec_sequence[key] = _tensor_list(tf, t)
        records.append({"context": rec_context, "sequence": rec_sequence})
    return records


def write_json(obj, out, indent=None):
    text = json.dumps(obj, sort_keys=True, indent=indent, allow_nan=True) + "\n"
    if out == "-":
        sys.stdout.write(text)
    else:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--spec", help="feature_spec.json (the parse contract)")
    mode.add_argument(
        "--dump-raw",
        action="store_true",
        help="decode each record with tf.train.Example/SequenceExample.FromString instead",
    )
    p.add_argument("--example-type", choices=("Example", "SequenceExample"), default="Example",
                   help="record type for --dump-raw (default Example)")
    p.add_argument("--compression", choices=sorted(COMPRESSION), default="none")
    p.add_argument("--out", required=True, help="result JSON path, or - for stdout")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--validate-ragged", action="store_true",
                   help="parse every RaggedFeature with validate=True")
    p.add_argument("--indent", type=int, default=None, help="indent the JSON output")
    p.add_argument("files", nargs="+", metavar="FILE")
    args = p.parse_args(argv)
    if args.batch_size < 1:
        p.error("--batch-size must be >= 1")

    spec = None
    if args.spec:
        try:
            with open(args.spec, encoding="utf-8") as f:
                spec = json.load(f)
        except (OSError, ValueError) as e:
            print(f"read_with_tf: cannot read spec {args.spec}: {e}", file=sys.stderr)
            return 2

    tf = import_tf()
    try:
        if spec is not None:
            records = parse_files(tf, args.files, args.compression, spec,
                                  args.batch_size, args.validate_ragged)
        else:
            records = dump_raw(tf, args.files, args.compression, args.example_type)
    except SpecError as e:
        print(f"read_with_tf: bad spec: {e}", file=sys.stderr)
        return 2
    except tf.errors.OpError as e:
        print(f"read_with_tf: TensorFlow error: {type(e).__name__}: {e.message}", file=sys.stderr)
        return 1
    except Exception as e:  # protobuf DecodeError, TF-side ValueError/TypeError, ...
        print(f"read_with_tf: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    write_json({"count": len(records), "records": records}, args.out, args.indent)
    return 0


def run_script(path: str, argv: list[str], cwd: str) -> int:
    """Run the Python file ``path`` as ``python path ARGV...`` run in ``cwd`` would, but in
    this process, whose TensorFlow is imported already: as ``__main__`` in a namespace of
    its own, with its ``sys.argv``, ``sys.path[0]`` and working folder (restored after), by
    tests/run_preloaded.py's runner. Returns its exit status: 0, its ``sys.exit`` code, or 1
    after an uncaught exception (printed as the interpreter prints it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "run_preloaded", os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                      "run_preloaded.py"))
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    here, saved = os.getcwd(), (sys.argv, sys.path[0])
    try:
        os.chdir(cwd)
        return runner._run([path, *argv])
    finally:
        os.chdir(here)
        sys.argv, sys.path[0] = saved


def serve(requests, replies) -> int:
    """Answer many requests in one process, so TensorFlow is imported once: each line of
    ``requests`` is a JSON list of the arguments ``main`` takes, or ``{"script": FILE,
    "argv": [...], "cwd": DIR}`` (``run_script``); each reply is one JSON line,
    ``{"status": N, "stdout": "...", "stderr": "..."}``. What ``main`` prints goes to the
    reply's stderr, what a script prints to the reply's stdout and stderr, never to
    ``replies``. Ends at the end of ``requests``."""
    import contextlib
    import io

    for line in requests:
        request = json.loads(line)
        out, err = io.StringIO(), io.StringIO()
        if isinstance(request, dict):
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                status = run_script(request["script"], request.get("argv", []),
                                    request["cwd"])
        else:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
                try:
                    status = main(request)
                except SystemExit as e:  # argparse's errors
                    status = e.code if isinstance(e.code, int) else 2
        replies.write(json.dumps({"status": status, "stdout": out.getvalue(),
                                  "stderr": err.getvalue()}) + "\n")
        replies.flush()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        sys.exit(serve(sys.stdin, sys.stdout))
    sys.exit(main())
