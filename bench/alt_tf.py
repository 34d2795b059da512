"""TensorFlow's tutorial loop: ``tf.train.Example`` per row, ``tf.io.TFRecordWriter``.

    .venv-tf/bin/python bench/alt_tf.py --data DIR --out DIR

Runs in TensorFlow's own virtual environment (TensorFlow needs protobuf 7, Beam protobuf 6).
The loop follows the "TFRecord and tf.train.Example" tutorial: one ``tf.train.Feature`` per
value through its ``_int64_feature`` / ``_float_feature`` / ``_bytes_feature`` helpers, one
``tf.train.Example`` per row, ``SerializeToString()`` and ``writer.write``; for images the
tutorial's ``tf.io.decode_jpeg(image).shape`` gives height and width. Parquet needs pyarrow in
that environment; without it the case reports a skip.
"""

from __future__ import annotations

import os
import pathlib
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from measure import alt_args, emit, output_bytes, skip  # noqa: E402
from rows import iter_rows, load_meta, preload  # noqa: E402


def main() -> None:
    args = alt_args(__doc__)
    meta = load_meta(args.data)
    try:
        preload(meta)
    except ImportError as err:
        skip(f"{meta['format']} input needs {err.name}, which the TensorFlow venv lacks")
    import tensorflow as tf

    def int64_feature(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    def float_feature(values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    def bytes_feature(values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))

    makers = {"int64": int64_feature, "float": float_feature, "bytes": bytes_feature,
              "string": lambda values: bytes_feature([v.encode() for v in values])}
    plan = [(f["name"], f.get("source", f["name"]), makers[f["type"]], bool(f["shape"]))
            for f in meta["features"]]
    images = meta["format"] == "images"
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows = 0
    with tf.io.TFRecordWriter(str(out / "data.tfrecord")) as writer:
        for row in iter_rows(meta):
            if images:
                row["height"], row["width"], _ = tf.io.decode_jpeg(row["image"]).shape
            feature = {name: make(row[source] if repeated else [row[source]])
                       for name, source, make, repeated in plan}
            example = tf.train.Example(features=tf.train.Features(feature=feature))
            writer.write(example.SerializeToString())
            rows += 1
    emit(rows, time.perf_counter() - start, output_bytes(out))


if __name__ == "__main__":
    main()
