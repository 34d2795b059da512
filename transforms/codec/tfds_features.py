"""``features.json`` for TensorFlow Datasets: our features as TFDS feature connectors.

``tfds.builder_from_directory(<version dir>)`` rebuilds a data set's features from this file
(and its splits from ``dataset_info.json``, sinks/format/tfds_info.py). TFDS builds its
``tf.io`` parse spec from the connectors, keyed by their flattened names, so each connector
must name exactly the keys we store and parse to the values our ``feature_spec.json`` gives:

* a fixed shape always present -> ``Tensor(shape)`` (TFDS parses it as ``FixedLenFeature``);
* a variable first dimension, or a fixed shape that ``missing: omit | empty`` may leave empty
  -> ``Tensor((None, *inner))`` (``FixedLenSequenceFeature(allow_missing=True)``: an absent
  key is an empty array, as our VarLen parse gives);
* ragged -> a ``FeaturesDict`` named after the feature whose members are the stored keys
  ``flat_values`` and ``row_lengths_<k>``: TFDS rebuilds ragged tensors only from its own key
  names (``ragged_flat_values``, ``ragged_row_lengths_<k>``), so the parts come back as
  arrays and ``tf.RaggedTensor.from_nested_row_lengths`` (README) puts them together;
* a name with ``/`` (``meta/height``) -> a member of a nested ``FeaturesDict`` (``meta``),
  which TFDS flattens back to the same key;
* an image folder's image bytes -> ``Image``: TFDS stores an image as its encoded file bytes,
  which is what we store, so TFDS decodes it to pixels (and ``tfds.decode.SkipDecoding()``
  gives the file's bytes back unchanged).

A SequenceExample has no TFDS description (TFDS parses ``tf.train.Example`` only):
:func:`tfds_features` then returns ``None`` and the reason, which the manifest records.
Pure: no Beam, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec

__all__ = ["tfds_features"]


_CLASS = "tensorflow_datasets.core.features."
_TENSOR = _CLASS + "tensor_feature.Tensor"
_DICT = _CLASS + "features_dict.FeaturesDict"
_IMAGE = _CLASS + "image_feature.Image"
# Our dtypes -> the numpy dtype names TFDS's Tensor connector records.
_DTYPES = {"int64": "int64", "float": "float32", "bytes": "string", "string": "string"}


def _shape(dims: Sequence[int]) -> dict[str, Any]:
    """A TensorShapeProto in JSON: int64s as strings, a scalar as ``{}``, ``None`` as -1."""
    return {"dimensions": [str(d) for d in dims]} if dims else {}


def _tensor(dtype: str, dims: Sequence[int]) -> dict[str, Any]:
    return {"pythonClassName": _TENSOR,
            "tensor": {"dtype": dtype, "encoding": "none", "shape": _shape(dims)}}


def _features_dict(members: dict[str, Any]) -> dict[str, Any]:
    return {"pythonClassName": _DICT, "featuresDict": {"features": members}}


def _ragged(spec: FeatureSpec) -> dict[str, Any]:
    """The stored parts of a ragged feature, under the keys we write them with."""
    last_ragged = max(spec.ragged_dims)
    inner = tuple(spec.shape[last_ragged + 1:])  # fixed dims after the last ragged one
    members = {spec.values_key.rsplit("/", 1)[1]: _tensor(_DTYPES[spec.dtype], (-1, *inner))}
    for k in spec.ragged_dims:
        members[spec.row_lengths_key(k).rsplit("/", 1)[1]] = _tensor("int64", (-1,))
    return _features_dict(members)


def _connector(spec: FeatureSpec, image: bool) -> dict[str, Any]:
    if image:
        # Channels vary across an image folder (grey PNGs beside RGB JPEGs): unknown, so TFDS
        # decodes each image with the channels its file has.
        return {"pythonClassName": _IMAGE,
                "image": {"dtype": "uint8", "shape": _shape((-1, -1, -1))}}
    if spec.is_ragged:
        return _ragged(spec)
    dims = spec.shape
    may_be_empty = spec.missing in ("omit", "empty")
    if spec.is_fixed and may_be_empty:
        dims = (-1, *dims[1:])  # 0 or d0 rows: a scalar becomes a list of 0 or 1 values
    return _tensor(_DTYPES[spec.dtype], dims)


def tfds_features(specs: Sequence[FeatureSpec], images: Collection[str] = ()
                  ) -> tuple[dict[str, Any] | None, str]:
    """``(features.json document, "")``, or ``(None, why TFDS cannot describe the data)``.

    ``images``: names of features that hold an image file's bytes unchanged (an image folder
    source's ``source: image`` feature); they become TFDS ``Image`` connectors.

    Args:
        specs: the features.
        images: the names of features holding image bytes.

    Returns:
        The document and ``""``, or None and the reason.
    """
    if any(s.sequence for s in specs):
        return None, ("TensorFlow Datasets reads tf.train.Example records only, and these are "
                      "SequenceExamples")
    if not specs:
        return None, "no features are described, so TensorFlow Datasets has nothing to parse"
    top: dict[str, Any] = {}
    names = {s.name for s in specs}
    for spec in specs:
        # TFDS names a FeaturesDict member "parent/member": a feature "meta/height" is member
        # "height" of a FeaturesDict "meta", which its sibling "meta/width" joins.
        *parents, leaf = spec.name.split("/")
        members = top
        for depth, parent in enumerate(parents):
            node = members.setdefault(parent, _features_dict({}))
            if "/".join(parents[:depth + 1]) in names:  # a ragged feature's dict, too
                return None, (f"feature {spec.name!r} nests under "
                              f"{'/'.join(parents[:depth + 1])!r}, which is a feature itself")
            members = node["featuresDict"]["features"]
        if leaf in members:
            return None, (f"feature {spec.name!r} is also the parent of other features' names")
        members[leaf] = _connector(spec, spec.name in images)
    return _features_dict(top), ""
