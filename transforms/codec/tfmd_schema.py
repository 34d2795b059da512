"""``schema.pbtxt``: our features as a tensorflow_metadata ``Schema``, in protobuf text format.

TFX, TensorFlow Data Validation, tfx-bsl's decoders and Ray Data's
``read_tfrecords(tf_schema=...)`` take a ``Schema``. Without one, readers guess types and
shapes from the records (Ray turns one-value lists into scalars, then fails on the first
variable-length feature). We write the text form ourselves so that nothing of
tensorflow_metadata is needed at run time; the tests parse it with tensorflow_metadata.

What it says, per stored key (a ragged feature stores several, all listed, because readers
such as Ray refuse a key the schema lacks):

* ``type``: ``INT``, ``FLOAT`` or ``BYTES``;
* ``presence { min_fraction: 1 }`` unless ``missing: omit`` may leave the key out;
* ``shape`` for a fixed shape always stored whole (``shape {}``: a scalar), else no shape: a
  variable number of values;
* ``image_domain {}`` for an image folder's image bytes.

and a ``tensor_representation_group`` (the default one, key ``""``) that tells tfx-bsl how to
put the keys back together exactly as ``feature_spec.json`` does: ``dense_tensor`` for a
FixedLenFeature, ``varlen_sparse_tensor`` for a VarLenFeature and ``ragged_tensor`` with the
same partitions for a RaggedFeature. A SequenceExample's per-step features go into a
``STRUCT`` feature named ``##SEQUENCE##``, the name TFX's SequenceExample decoders use.
Pure: no Beam, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from beam_tfrecords.transforms.codec.feature_spec import (
    FeatureSpec,
    stored_keys,
    tf_parse_spec,
)

__all__ = ["SEQUENCE_FEATURE", "schema_pbtxt"]

SEQUENCE_FEATURE = "##SEQUENCE##"
_TYPES = {"int64": "INT", "float": "FLOAT", "bytes": "BYTES", "string": "BYTES"}


def _quote(text: str) -> str:
    """A protobuf text-format string literal: printable ASCII as is, other bytes in octal."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _block(name: str, body: list[str], indent: str) -> list[str]:
    return [f"{indent}{name} {{", *body, f"{indent}}}"]


def _feature(key: str, type_name: str, indent: str, *, present: bool,
             shape: Sequence[int] | None = None, image: bool = False) -> list[str]:
    inner = indent + "  "
    body = [f"{inner}name: {_quote(key)}", f"{inner}type: {type_name}"]
    if present:
        body += _block("presence", [f"{inner}  min_fraction: 1.0"], inner)
    if shape is not None:
        body += _block("shape", [line for d in shape
                                 for line in _block("dim", [f"{inner}    size: {d}"],
                                                    inner + "  ")], inner)
    if image:
        body.append(f"{inner}image_domain {{")
        body.append(f"{inner}}}")
    return _block("feature", body, indent)


def _features(spec: FeatureSpec, indent: str, image: bool) -> list[str]:
    """The schema features of every key ``spec`` stores."""
    present = spec.missing != "omit"
    whole = spec.is_fixed and spec.missing not in ("omit", "empty")
    if spec.sequence:
        # Per step: each step holds a fixed shape, or any number of values.
        keys = [(spec.name, _TYPES[spec.dtype], None)]
    elif not spec.is_ragged:
        keys = [(spec.name, _TYPES[spec.dtype], spec.shape if whole else None)]
    else:
        values, *lengths = stored_keys(spec)
        keys = [(values, _TYPES[spec.dtype], None)] + [(k, "INT", None) for k in lengths]
    lines: list[str] = []
    for key, type_name, shape in keys:
        lines += _feature(key, type_name, indent, present=present, shape=shape,
                          image=image and key == spec.name)
    return lines


def _representation(name: str, parse: dict[str, Any]) -> list[str]:
    """One ``tensor_representation`` map entry, mirroring a feature_spec.json entry."""
    pad = "      "
    kind = parse["type"]
    if kind == "FixedLenFeature":
        dims = [line for d in parse["shape"]
                for line in _block("dim", [f"{pad}      size: {d}"], pad + "    ")]
        body = _block("dense_tensor", [f"{pad}    column_name: {_quote(name)}",
                                       *_block("shape", dims, pad + "    ")], pad + "  ")
    elif kind == "VarLenFeature":
        body = _block("varlen_sparse_tensor", [f"{pad}    column_name: {_quote(name)}"],
                      pad + "  ")
    else:
        parts = []
        for part in parse["partitions"]:
            field = (f"row_length: {_quote(part['key'])}" if part["type"] == "RowLengths"
                     else f"uniform_row_length: {part['length']}")
            parts += _block("partition", [f"{pad}      {field}"], pad + "    ")
        path = _block("feature_path", [f"{pad}      step: {_quote(parse['value_key'])}"],
                      pad + "    ")
        body = _block("ragged_tensor", [*path, *parts, f"{pad}    row_partition_dtype: INT64"],
                      pad + "  ")
    return _block("tensor_representation",
                  [f"{pad}  key: {_quote(name)}", *_block("value", body, pad + "  ")], pad)


def schema_pbtxt(specs: Sequence[FeatureSpec], images: Collection[str] = ()) -> str:
    """The ``schema.pbtxt`` text for ``specs``; ``images`` names image-bytes features.

    Args:
        specs: the features; sequence features go into one STRUCT feature.
        images: the names of features holding image bytes.

    Returns:
        The text-format Schema.
    """
    context = [s for s in specs if not s.sequence]
    steps = [s for s in specs if s.sequence]
    lines = ["# tensorflow_metadata Schema (text format), written by beam-tfrecords.",
             "# Parse: google.protobuf.text_format.Parse(text, schema_pb2.Schema())"]
    for spec in context:
        lines += _features(spec, "", spec.name in images)
    if steps:
        inner: list[str] = []
        for spec in steps:
            inner += _features(spec, "    ", False)
        lines += _block("feature", [f"  name: {_quote(SEQUENCE_FEATURE)}", "  type: STRUCT",
                                    *_block("struct_domain", inner, "  ")], "")
    parse = tf_parse_spec(context)["features"] if context else {}
    if parse:
        reps: list[str] = []
        for name, entry in parse.items():
            reps += _representation(name, entry)
        lines += _block("tensor_representation_group",
                        ['  key: ""', *_block("value", reps, "  ")], "")
    return "\n".join(lines) + "\n"
