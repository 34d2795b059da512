"""The former home of ``WriteTFRecordDataset``, kept because Beam YAML files and programs
name it here (``constructor: beam_tfrecords.pipelines.api.WriteTFRecordDataset``); the
transform lives in ``transforms/write_dataset.py`` and is ``beam_tfrecords.WriteTFRecordDataset``.
"""

from __future__ import annotations

from beam_tfrecords.transforms.write_dataset import (
    DatasetError,
    DriftGateError,
    WriteTFRecordDataset,
)

__all__ = ["DatasetError", "DriftGateError", "WriteTFRecordDataset"]
