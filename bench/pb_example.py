"""One row -> serialized Example with plain protobuf: what a user without our encoder writes.

Uses the project's generated ``example_pb2`` (wire-compatible with ``tf.train.Example``) and
serializes deterministically, so equal rows give equal bytes. Shared by the stock Beam, plain
protobuf and framing-only alternatives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from beam_tfrecords.transforms.proto import example_pb2

__all__ = ["example_builder"]


def example_builder(features: list[dict[str, Any]]) -> Callable[[dict[str, Any]], bytes]:
    """A function ``row -> Example bytes`` for the data set's feature list (see datasets.py)."""
    plan = [(f["name"], f.get("source", f["name"]), f["type"], bool(f["shape"]))
            for f in features]

    def build(row: dict[str, Any]) -> bytes:
        example = example_pb2.Example()
        feature = example.features.feature
        for name, source, kind, repeated in plan:
            value = row[source]
            values = value if repeated else (value,)
            if kind == "int64":
                feature[name].int64_list.value.extend(values)
            elif kind == "float":
                feature[name].float_list.value.extend(values)
            elif kind == "string":
                feature[name].bytes_list.value.extend(v.encode() for v in values)
            else:
                feature[name].bytes_list.value.extend(values)
        return example.SerializeToString(deterministic=True)

    return build
