"""Consumer oracle: read committed versions the way TFDS and Ray users do, beside TensorFlow.

Run ONLY with the TensorFlow virtual environment's interpreter (tensorflow-datasets,
tensorflow-metadata and ray[data] are installed there, never in the project's environment):

    <tf venv>/bin/python tests/tf_oracle/read_with_consumers.py tfds --out R.json VERSION_DIR...
    <tf venv>/bin/python tests/tf_oracle/read_with_consumers.py ray --out R.json VERSION_DIR...
    <tf venv>/bin/python tests/tf_oracle/read_with_consumers.py schema --out R.json FILE...

``tfds``: for every version and split, ``tfds.builder_from_directory(version)`` and
``as_dataset(split=...)`` -- nothing else, as the README tells users -- and, for comparison,
``tf.io.parse_example`` with the version's ``feature_spec.json`` (read_with_tf.py's parser).
Ragged features come back from TFDS as their stored parts (``flat_values``,
``row_lengths_<k>``) and are put together with ``tf.RaggedTensor`` as the README shows. Image
features are read twice: with ``tfds.decode.SkipDecoding()`` (the stored file bytes) and
decoded (their pixel array shapes). A version TFDS cannot load has no ``dataset_info.json``;
its entry is ``{"loadable": false}``.

``ray``: the version's ``schema.pbtxt`` parsed with tensorflow_metadata (also returned as a
dict), and ``ray.data.read_tfrecords(<split>/*, tf_schema=schema)`` per split; records in the
raw per-key form of read_with_tf.py's ``--dump-raw`` (floats as float32 bits), beside that raw
dump of the same files.

``schema``: each ``schema.pbtxt`` FILE parsed with tensorflow_metadata, as a dict.

Writes ``{version_dir or file: {...}}`` as JSON. Exit 1 when a reader fails.
"""

from __future__ import annotations

import argparse
import glob
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


def read_ray(tf, version: str) -> dict:
    import ray
    from google.protobuf import json_format, text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    with open(os.path.join(version, "schema.pbtxt"), encoding="utf-8") as f:
        schema = text_format.Parse(f.read(), schema_pb2.Schema())
    out = {"schema": json_format.MessageToDict(schema), "splits": {}}
    for split in _splits(version):
        files = _shards(version, split)
        raw = oracle.dump_raw(tf, files, "none", "Example") if files else []
        rows = []
        if files:
            dataset = ray.data.read_tfrecords(sorted(glob.glob(os.path.join(version, split, "*"))),
                                              tf_schema=schema)
            for row in dataset.iter_rows():
                rows.append({key: _ray_value(key, values, schema) for key, values in row.items()})
        out["splits"][split] = {"ray": rows, "raw": [r["features"] for r in raw]}
    return out


def _ray_value(key, values, schema) -> dict:
    kind = {f.name: f.type for f in schema.feature}[key]
    values = [] if values is None else list(values)
    if kind == 1:  # BYTES
        return {"kind": "bytes_list", "value": [oracle.b64(bytes(v)) for v in values]}
    if kind == 3:  # FLOAT
        return {"kind": "float_list", "bits": [oracle.float32_bits(v) for v in values]}
    return {"kind": "int64_list", "value": [int(v) for v in values]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reader", choices=("tfds", "ray", "schema"))
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
    if args.reader == "tfds":
        import tensorflow_datasets as tfds

        tfds.disable_progress_bar()
        for version in args.versions:
            result[version] = read_tfds(tf, tfds, version)
    else:
        import ray

        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        for version in args.versions:
            result[version] = read_ray(tf, version)
        ray.shutdown()
    oracle.write_json(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
