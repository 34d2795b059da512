"""``dataset_info.json`` for TensorFlow Datasets, from the committed shards.

With it and ``features.json`` (transforms/codec/tfds_features.py) in a version folder,
``tfds.builder_from_directory(<version dir>)`` loads the version as it is: no copies, no
renamed links. TFDS finds a split's shards through the split's ``filepathTemplate``, so ours
describes our own names, ``<split>/<name>-00000-of-00003.tfrecord``; TFDS writes the shard
numbers with at least 5 digits, as we do.

TFDS cannot load a version when:

* its shards are compressed: TFDS's TFRecord reader opens files with no compression type;
* a split name is not ``[A-Za-z0-9_-]+``: TFDS's split syntax (``train[:10%]``) and its
  file-name patterns allow no other characters.

:func:`tfds_dataset_info` then returns ``None`` and the reason, which the manifest records.
Pure: no Beam, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["tfds_dataset_info"]

# TFDS builder names are identifiers; ours may hold "-" and ".".
_IDENTIFIER = re.compile(r"[A-Za-z]\w*")
_SPLIT = re.compile(r"[A-Za-z0-9_-]+")
# A shard path relative to the version folder, uncompressed: <split>/<prefix>-i-of-n.tfrecord
_SHARD = re.compile(r"(?P<split>[^/]+)/(?P<prefix>[^/]+)-\d{5,}-of-\d{5,}\.tfrecord")


def _builder_name(name: str) -> str:
    """A TFDS-valid name for the data set: ours with other characters as ``_``."""
    candidate = re.sub(r"\W", "_", name)
    return candidate if _IDENTIFIER.fullmatch(candidate) else f"ds_{candidate}"


def tfds_dataset_info(*, name: str, version: str, compression: str,
                      splits: Mapping[str, Mapping[str, Any]], tool: str
                      ) -> tuple[dict[str, Any] | None, str]:
    """``(dataset_info.json document, "")`` or ``(None, why TFDS cannot load the version)``.

    ``splits`` is the manifest's ``splits`` section (relative shard paths, record and byte
    counts); ``version`` is our version name, kept in the description because TFDS wants
    a semantic version (``1.0.0``) of its own.

    Args:
        name: the data set's name.
        version: our version's name.
        compression: the shards' compression; only ``none`` can be loaded by TFDS.
        splits: the manifest's ``splits`` section.
        tool: this package's name and version, recorded as the writer.

    Returns:
        The document and ``""``, or None and the reason.
    """
    if compression != "none":
        return None, (f"the shards are {compression}-compressed and TensorFlow Datasets "
                      "reads uncompressed TFRecord files only (output.compression: none)")
    entries = []
    for split, info in splits.items():
        if not _SPLIT.fullmatch(split):
            return None, (f"split {split!r} holds characters TensorFlow Datasets does not "
                          "allow in split names (only letters, digits, '_' and '-')")
        prefixes = set()
        for shard in info.get("shards", []):
            match = _SHARD.fullmatch(shard["path"])
            if match is None or match["split"] != split:
                return None, f"shard {shard['path']} is not named as TensorFlow Datasets expects"
            prefixes.add(match["prefix"])
        if len(prefixes) > 1:
            return None, f"split {split!r} mixes shard names {sorted(prefixes)}"
        prefix = prefixes.pop() if prefixes else name
        entries.append({
            "name": split,
            "numBytes": str(info.get("bytes", 0)),
            "shardLengths": [str(shard["records"]) for shard in info.get("shards", [])],
            # TFDS fills {SPLIT} and {SHARD_X_OF_Y} (00000-of-00003); the rest is literal.
            "filepathTemplate": f"{{SPLIT}}/{prefix}-{{SHARD_X_OF_Y}}.tfrecord",
        })
    document = {
        "name": _builder_name(name),
        "version": "1.0.0",
        "description": (f"{name}, version {version}, written by {tool}; load with "
                        "tfds.builder_from_directory(<this folder>)"),
        "fileFormat": "tfrecord",
        "splits": entries,
    }
    return document, ""
