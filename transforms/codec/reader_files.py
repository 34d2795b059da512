"""The files other readers need beside our shards, from the feature specs.

``schema.pbtxt`` (tensorflow_metadata: TFX, TFDV, Ray) and TFDS's ``features.json``; the
commit adds TFDS's ``dataset_info.json`` once the shards are known (sinks/commit.py). One
function, so the command and the Python API write the same files. Pure: no Beam, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence

from beam_tfrecords.sinks.format.layout import SCHEMA, TFDS_FEATURES
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.codec.tfds_features import tfds_features
from beam_tfrecords.transforms.codec.tfmd_schema import schema_pbtxt

__all__ = ["IMAGE_SOURCE", "image_features", "reader_documents"]

# The image folder source's field that holds each file's bytes unchanged.
IMAGE_SOURCE = ("image",)


def image_features(specs: Sequence[FeatureSpec], source_format: str) -> frozenset[str]:
    """Names of the features that hold an image file's bytes, as read from an image folder.

    Args:
        specs: the features, as the config declares them.
        source_format: the source's format (``images``, ``csv``...).

    Returns:
        The features' names; empty for any other format.
    """
    if source_format != "images":
        return frozenset()
    return frozenset(s.name for s in specs
                     if s.source == IMAGE_SOURCE and s.dtype == "bytes" and s.shape == ())


def reader_documents(specs: Sequence[FeatureSpec], images: Collection[str] = ()
                     ) -> tuple[dict[str, str], str]:
    """``({file name: text}, why TFDS gets no features.json or "")`` for ``specs``.

    Args:
        specs: the features; none for records passed through serialized.
        images: the names of features holding image bytes.

    Returns:
        The files to write beside the shards, and why ``features.json`` is missing (``""`` if
        written).
    """
    if not specs:
        return {}, "no features are described (serialized records passed through)"
    documents = {SCHEMA: schema_pbtxt(specs, images)}
    features, why = tfds_features(specs, images)
    if features is not None:
        documents[TFDS_FEATURES] = json.dumps(features, indent=2) + "\n"
    return documents, why
