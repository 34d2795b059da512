"""The manifest: what a committed data set version holds, written last as the commit point.

A version directory without ``manifest.json`` is not a data set, whatever else is in it; the
``LATEST`` pointer at the output root moves only after the manifest exists. Paths in the
manifest are relative to the version directory, so a version can be copied or moved whole.
Checksums are the crc32c of each whole shard file in Cloud Storage's own notation (base64 of
the big-endian 4 bytes), so ``gsutil ls -L`` output can be compared directly.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from beam_tfrecords.sinks.format.layout import FEATURE_SPEC, LATEST, MANIFEST
from beam_tfrecords.sinks.format.redact import redact

__all__ = [
    "LATEST",
    "MANIFEST",
    "FEATURE_SPEC",
    "crc32c_b64",
    "make_manifest",
    "shards_digest",
    "relative_path",
]

FORMAT_VERSION = 1


def crc32c_b64(value: int) -> str:
    """A crc32c in Cloud Storage's notation.

    Args:
        value: a CRC-32C as an unsigned 32-bit integer.

    Returns:
        Its 4 big-endian bytes in base64, as Cloud Storage's ``crc32c`` metadata writes it.
    """
    return base64.b64encode(value.to_bytes(4, "big")).decode("ascii")


def relative_path(path: str, base: str) -> str:
    """``path`` relative to the folder ``base``, as the manifest records shard paths.

    Args:
        path: a path (or URL) inside ``base``.
        base: a folder; a trailing ``/`` is optional.

    Returns:
        The rest of ``path`` after ``base/``.

    Raises:
        ValueError: ``path`` is not inside ``base``.
    """
    base = base.rstrip("/") + "/"
    if not path.startswith(base):
        raise ValueError(f"{path} is not inside {base}")
    return path[len(base):]


def utc_now() -> str:
    """The current UTC time in the manifest's notation.

    Returns:
        ``YYYY-MM-DDTHH:MM:SS.ffffffZ``.
    """
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def shards_digest(splits: Mapping[str, Mapping[str, Any]]) -> str:
    """``sha256:<hex>`` over every shard's split, path, records, bytes and crc32c (a manifest's
    ``splits`` section): two versions with the same digest hold the same shard files, byte for
    byte, under the same names -- what a seeded, shuffled rebuild is compared by.

    Args:
        splits: the manifest's ``splits`` section (split to ``{"shards": [...]}``).

    Returns:
        ``sha256:`` and 64 hex digits.
    """
    lines = [f"{split}\t{shard['path']}\t{shard['records']}\t{shard['bytes']}\t"
             f"{shard['crc32c']}\n"
             for split, entry in sorted(splits.items())
             for shard in sorted(entry["shards"], key=lambda s: s["path"])]
    return "sha256:" + hashlib.sha256("".join(lines).encode()).hexdigest()


def make_manifest(*, name: str, version: str, version_dir: str, created: str, compression: str,
                  counts: Mapping[str, int], shards: Mapping[str, Sequence[Any]],
                  dead_letters: Sequence[tuple[str, int]], feature_spec: Mapping[str, Any],
                  config: Mapping[str, Any], config_sha256: str, inputs: Mapping[str, Any],
                  tool_version: str, runner: str, shuffle_seed: int | None = None
                  ) -> dict[str, Any]:
    """The manifest document. ``shards`` maps a split to its ShardInfo-like objects.

    ``shuffle`` is ``{"seed": N}`` for a build whose shards hold their records in the seed's
    order (the same records and seed give the same ``shards_digest``), else null.

    ``config`` and ``inputs`` hold user-given paths and patterns, so credentials in them
    (signed-URL parameters, tokens, ``user:password@``) are redacted (sinks/format/redact.py).

    Args:
        name: the data set's name.
        version: the version's name.
        version_dir: the version folder; shard paths are recorded relative to it.
        created: when the build started, as :func:`utc_now` writes it.
        compression: the shards' compression (``none``, ``gzip``, ``zlib``).
        counts: the build's counters (records read, written, dead-lettered...).
        shards: each split's written shards (objects with ``path``, ``records``, ``bytes``,
            ``crc32c`` and optionally ``index``).
        dead_letters: ``(path, records)`` of each dead-letter file, path relative to the version.
        feature_spec: the features' spec, as the readers of the data set parse it.
        config: the build's config, as given (redacted here).
        config_sha256: the hex digest of the config's text.
        inputs: the build's inputs (patterns, files, sizes), redacted here.
        tool_version: this package's version.
        runner: the Beam runner's name.
        shuffle_seed: the shuffle's seed, or None for a build that kept the input order.

    Returns:
        The manifest as a JSON-ready dict.
    """
    splits = {}
    for split, infos in sorted(shards.items()):
        entries = []
        for info in infos:
            entry = {
                "path": relative_path(info.path, version_dir),
                "records": info.records,
                "bytes": info.bytes,
                "crc32c": crc32c_b64(info.crc32c),
            }
            if getattr(info, "index", ""):
                entry["index"] = relative_path(info.index, version_dir)
            entries.append(entry)
        splits[split] = {
            "records": sum(e["records"] for e in entries),
            "bytes": sum(e["bytes"] for e in entries),
            "shards": entries,
        }
    return {
        "format_version": FORMAT_VERSION,
        "name": name,
        "version": version,
        "created": created,
        "compression": compression,
        "counts": dict(counts),
        "splits": splits,
        "shards_digest": shards_digest(splits),
        "shuffle": None if shuffle_seed is None else {"seed": shuffle_seed},
        "dead_letter": [
            {"path": relative_path(path, version_dir), "records": records}
            for path, records in dead_letters
        ],
        "feature_spec": dict(feature_spec),
        "config": redact(dict(config)),
        "config_sha256": config_sha256,
        "inputs": redact(dict(inputs)),
        "tool_version": tool_version,
        "runner": runner,
    }


def dumps(document: Mapping[str, Any]) -> bytes:
    """The manifest's bytes: indented JSON in the document's key order, ending in a newline.

    Args:
        document: the manifest (:func:`make_manifest`'s result).

    Returns:
        UTF-8 JSON.

    Raises:
        ValueError: the document holds NaN or infinity, which JSON cannot hold.
    """
    return (json.dumps(document, indent=2, sort_keys=False, allow_nan=False) + "\n").encode()
