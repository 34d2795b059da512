"""Consumer oracle: read committed versions the way TFDS and Ray users do, beside TensorFlow.

Run ONLY with the TensorFlow virtual environment's interpreter (tensorflow-datasets,
tensorflow-metadata and ray[data] are installed there, never in the project's environment):

    <tf venv>/bin/python tests/tf_oracle/read_with_consumers.py tfds --out R.json VERSION_DIR...
    <tf venv>/bin/python tests/tf_oracle/read_with_consumers.py schema-raw --out R.json VERSION...
    <tf venv>/bin/python tests/tf_oracle/read_with_consumers.py schema --out R.json FILE...

``tfds``: for every version and split, ``tfds.builder_from_directory(version)`` and
``as_dataset(split=...)`` -- nothing else, as the README tells users -- and, for comparison,
``tf.io.parse_example`` with the version's ``feature_spec.json`` (read_with_tf.py's parser).
Ragged features come back from TFDS as their stored parts (``flat_values``,
``row_lengths_<k>``) and are put together with ``tf.RaggedTensor`` as the README shows. Image
features are read twice: with ``tfds.decode.SkipDecoding()`` (the stored file bytes) and
decoded (their pixel array shapes). A version TFDS cannot load has no ``dataset_info.json``;
its entry is ``{"loadable": false}``.

``schema-raw``: the version's ``schema.pbtxt`` parsed with tensorflow_metadata (as a dict),
beside read_with_tf.py's ``--dump-raw`` of each split (floats also as float32 bits).

``snippet``: ``--snippet NAME=FILE`` (repeatable) runs README snippets unchanged, each in a
fresh folder whose ``output/demo`` links to each DATA_ROOT given (a data set root with
``LATEST``), and returns what the snippet's ``ds`` yields for the train split: for ``tf.data``
and ``tfds`` records in the tfds mode's form, for ``ray`` the stored keys' values (floats as
float32 bits), beside TensorFlow's parse and raw dump of the same shards.

``schema``: each ``schema.pbtxt`` FILE parsed with tensorflow_metadata, as a dict.

``all``: ``tfds`` and ``schema-raw`` of each VERSION_DIR and ``snippet`` of each one's data set
root, with one import of TensorFlow (which costs seconds): ``{"tfds": ..., "schema-raw": ...,
"snippet": ...}``.

Writes ``{version_dir or file: {...}}`` as JSON. Exit 1 when a reader fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import read_with_tf as oracle  # noqa: E402  (the same folder: the TensorFlow oracle)


def _splits(version: str) -> dict:
    with open(os.path.join(version, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)["splits"]


def _shards(version: str, split: str) -> list[str]:
    return [os.path.join(version, s["path"]) for s in _splits(version)[split]["shards"]]


def _rebuild_ragged(tf, parts: dict, spec: dict):
    """A ragged feature from TFDS's FeaturesDict of its stored parts, by feature_spec.json."""
    values = parts[spec["value_key"].rsplit("/", 1)[1]]
    partitions = spec["partitions"]
    last = max(i for i, p in enumerate(partitions) if p["type"] == "RowLengths")
    for part in reversed(partitions[: last + 1]):  # trailing uniform dims: already in values
        if part["type"] == "RowLengths":
            values = tf.RaggedTensor.from_row_lengths(values, parts[part["key"].rsplit("/", 1)[1]])
        else:
            values = tf.RaggedTensor.from_uniform_row_length(values, part["length"])
    return values


def _tfds_value(tf, value):
    if isinstance(value, tf.RaggedTensor):
        return oracle._jsonable(value.to_list())
    array = value.numpy()
    return oracle._jsonable(array.tolist() if hasattr(array, "tolist") else array)


def read_tfds(tf, tfds, version: str) -> dict:
    with open(os.path.join(version, "feature_spec.json"), encoding="utf-8") as f:
        spec = json.load(f)
    if not os.path.exists(os.path.join(version, "dataset_info.json")):
        return {"loadable": False}
    builder = tfds.builder_from_directory(version)
    images = [name for name, feature in builder.info.features.items()
              if isinstance(feature, tfds.features.Image)]
    out = {"loadable": True, "images": images, "splits": {}}
    for split in _splits(version):
        expected = oracle.parse_files(tf, _shards(version, split), "none", spec)
        decoders = {name: tfds.decode.SkipDecoding() for name in images}
        records = []
        for example in builder.as_dataset(split=split, decoders=decoders):
            record = {}
            for name, value in example.items():
                entry = spec["features"][name]
                if entry["type"] == "RaggedFeature" and isinstance(value, dict):
                    value = _rebuild_ragged(tf, value, entry)
                record[name] = _tfds_value(tf, value)
            records.append(record)
        shapes = [{name: list(example[name].shape) for name in images}
                  for example in builder.as_dataset(split=split)] if images else []
        out["splits"][split] = {"tfds": records, "tf": expected, "image_shapes": shapes}
    return out


def read_schema(tf, version: str) -> dict:
    """The version's schema.pbtxt parsed with tensorflow_metadata, and TensorFlow's raw dump
    of each split, to hold the one against the other."""
    from google.protobuf import json_format, text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    with open(os.path.join(version, "schema.pbtxt"), encoding="utf-8") as f:
        schema = text_format.Parse(f.read(), schema_pb2.Schema())
    out = {"schema": json_format.MessageToDict(schema), "splits": {}}
    for split in _splits(version):
        files = _shards(version, split)
        raw = oracle.dump_raw(tf, files, "none", "Example") if files else []
        out["splits"][split] = {"raw": [r["features"] for r in raw]}
    return out


def _records_of(tf, name: str, ds, spec: dict) -> list:
    """What a snippet's ``ds`` yields, in the comparison form of its mode."""
    if name == "ray":
        from tensorflow_metadata.proto.v0 import schema_pb2  # noqa: F401  (types only)

        rows = ds.take_all()
        return [{k: _ray_kind(v) for k, v in row.items()} for row in rows]
    if name == "tf.data":
        ds = ds.unbatch()
    records = []
    for example in ds:
        record = {}
        for key, value in example.items():
            entry = spec["features"][key]
            if isinstance(value, dict):
                value = _rebuild_ragged(tf, value, entry)
            elif isinstance(value, tf.SparseTensor):
                value = value.values
            record[key] = _tfds_value(tf, value)
        records.append(record)
    return records


def _ray_kind(values) -> list:
    """Ray's values without their type: bytes base64, floats as float32 bits."""
    import numpy as np

    out = []
    for v in [] if values is None else list(values):
        if isinstance(v, (bytes, bytearray)):
            out.append(oracle.b64(bytes(v)))
        elif isinstance(v, (float, np.floating)):
            out.append(oracle.float32_bits(v))
        else:
            out.append(int(v))
    return out


def run_snippet(tf, name: str, path: str, root: str) -> dict:
    import tempfile

    with open(path, encoding="utf-8") as f:
        code = f.read()
    with open(os.path.join(root, "LATEST"), encoding="utf-8") as f:
        version = os.path.join(root, f.read().strip())
    with open(os.path.join(version, "feature_spec.json"), encoding="utf-8") as f:
        spec = json.load(f)
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as folder:
        os.makedirs(os.path.join(folder, "output"))
        os.symlink(os.path.abspath(root), os.path.join(folder, "output", "demo"))
        os.chdir(folder)
        try:
            namespace: dict = {"__name__": "__main__"}
            exec(compile(code, f"README snippet {name}", "exec"), namespace)
            records = _records_of(tf, name, namespace["ds"], spec)
        finally:
            os.chdir(here)
    shards = _shards(version, "train")
    raw = [r["features"] for r in oracle.dump_raw(tf, shards, "none", "Example")]
    return {"records": records, "tf": oracle.parse_files(tf, shards, "none", spec),
            "raw": [{k: v.get("bits", v["value"]) for k, v in r.items()} for r in raw]}


def _tfds_all(tf, versions: list[str]) -> dict:
    import tensorflow_datasets as tfds

    tfds.disable_progress_bar()
    return {version: read_tfds(tf, tfds, version) for version in versions}


def _snippets_all(tf, snippets: dict[str, str], roots: list[str]) -> dict:
    return {root: {name: run_snippet(tf, name, path, root) for name, path in snippets.items()}
            for root in roots}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reader", choices=("tfds", "schema-raw", "schema", "snippet", "all"))
    parser.add_argument("--snippet", action="append", default=[],
                        help="NAME=FILE: a README snippet (snippet mode)")
    parser.add_argument("--out", required=True)
    parser.add_argument("versions", nargs="+")
    args = parser.parse_args(argv)
    result = {}
    if args.reader == "schema":
        from google.protobuf import json_format, text_format
        from tensorflow_metadata.proto.v0 import schema_pb2

        for path in args.versions:
            with open(path, encoding="utf-8") as f:
                schema = text_format.Parse(f.read(), schema_pb2.Schema())
            result[path] = json_format.MessageToDict(schema)
        oracle.write_json(result, args.out)
        return 0
    tf = oracle.import_tf()
    snippets = dict(item.split("=", 1) for item in args.snippet)
    try:
        if args.reader == "all":
            roots = sorted({os.path.dirname(os.path.abspath(v)) for v in args.versions})
            result = {"tfds": _tfds_all(tf, args.versions),
                      "schema-raw": {v: read_schema(tf, v) for v in args.versions},
                      "snippet": _snippets_all(tf, snippets, roots)}
        elif args.reader == "snippet":
            result = _snippets_all(tf, snippets, args.versions)
        elif args.reader == "tfds":
            result = _tfds_all(tf, args.versions)
        else:
            result = {version: read_schema(tf, version) for version in args.versions}
    finally:
        _stop_ray()
    oracle.write_json(result, args.out)
    return 0


def _stop_ray() -> None:
    """End the Ray cluster a snippet started (``read_tfrecords`` starts one on first use):
    run in the TensorFlow oracle's long-lived process, its processes would otherwise stay
    up, and busy, until the test session ends."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
