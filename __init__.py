"""beam-tfrecords: Apache Beam transforms that turn rows into TFRecord data sets of
serialized ``tf.train.Example`` protos -- sized shards, dead letters, a manifest and an
atomic commit -- without depending on TensorFlow.

The public surface::

    import apache_beam as beam, beam_tfrecords as btf

    rows | btf.WriteTFRecordDataset(output="gs://b/ds", name="ds",
                                    features={"age": {"type": "int64"}},
                                    splits={"key": "id", "train": 80, "eval": 20})
    rows | btf.ToExamples(features) | btf.WriteTFRecordDataset(output=..., name=...)
    rows | btf.ToExamples(features) | btf.UnbatchExamples() | beam.io.WriteToTFRecord(...)
    serialized_examples | btf.WriteTFRecordDataset(output=..., name=...)
    p | btf.ReadCsv("gs://b/*.csv", features) | btf.WriteTFRecordDataset(output=..., name=...)

The sources -- ``ReadCsv``, ``ReadJsonl``, ``ReadParquet``, ``ReadAvro``, ``ReadImages`` -- read
file patterns on any Beam filesystem, their options as keyword arguments, and return
``records``, ``rejected`` and ``counts``; the command line's ``build`` is these transforms,
``ToExamples`` and the commit.

Everything not named in ``__all__`` is private and may change. The repository root *is* this
package (``setup.py`` maps ``beam_tfrecords`` onto ``.``), so ``pipelines/``, ``transforms/``
and ``sinks/`` import as ``beam_tfrecords.pipelines`` and friends.
"""

__version__ = "0.1.0"

__all__ = ["DriftGateError", "ExampleParser", "ReadAvro", "ReadCsv", "ReadImages", "ReadJsonl",
           "ReadParquet", "ToExamples", "UnbatchExamples", "UserError", "WriteTFRecordDataset",
           "__version__", "read_examples"]

_LAZY = {
    "ReadAvro": "beam_tfrecords.transforms.readers.read_avro",
    "ReadCsv": "beam_tfrecords.transforms.readers.read_csv",
    "ReadImages": "beam_tfrecords.transforms.readers.read_images",
    "ReadJsonl": "beam_tfrecords.transforms.readers.read_jsonl",
    "ReadParquet": "beam_tfrecords.transforms.readers.read_parquet",
    "ToExamples": "beam_tfrecords.transforms.to_examples",
    "UnbatchExamples": "beam_tfrecords.transforms.to_examples",
    "WriteTFRecordDataset": "beam_tfrecords.transforms.write_dataset",
    "DriftGateError": "beam_tfrecords.transforms.drift_gate",
    "UserError": "beam_tfrecords.errors",
    "read_examples": "beam_tfrecords.pipelines.read",
    "ExampleParser": "beam_tfrecords.pipelines.read",
    "TFRecordIterableDataset": "beam_tfrecords.pipelines.read",  # only where torch is installed
}


def __getattr__(name: str):
    """Import the public classes on first use: ``import beam_tfrecords`` stays cheap (the
    command line reads ``__version__`` without importing Beam)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'beam_tfrecords' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
