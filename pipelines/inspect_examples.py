"""``beam-tfrecords inspect``: the first examples as JSON and a per-feature summary.

Works on a version directory (its manifest says the compression and the shards), a
``manifest.json``, or a glob of shard files, local or ``gs://``. Records are decoded without a
spec (raw ``tf.train.Example`` form), so any TFRecord file of Examples can be inspected. Bytes
show as text when they are valid UTF-8, otherwise as base64 with their length.

A record larger than ``max_record_bytes``, or one that is not a serialized Example, is shown as
an :class:`Undecoded` -- its file, offset, size and why -- instead of its features: the large
one is passed through its CRC check piece by piece and never held, so memory stays bounded
whatever the records hold (a 2 GiB record is never read whole).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from collections.abc import Iterator
from typing import Any

from beam_tfrecords.pipelines.verify import (
    ManifestError,
    check_manifest,
    manifest_path_at,
    matched_files,
)
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.transforms.codec import wire

__all__ = ["DEFAULT_MAX_RECORD_BYTES", "Undecoded", "iter_examples", "show_value", "summarize"]

_DISTINCT_LIMIT = 10
DEFAULT_MAX_RECORD_BYTES = 4 << 20  # 4 MiB: larger records are shown by their size


@dataclasses.dataclass(frozen=True)
class Undecoded:
    """A record shown by where it is rather than by its features, and why."""

    path: str
    offset: int  # of the record's framing; in the decompressed stream for GZIP/ZLIB
    length: int  # bytes of record data
    reason: str

    def show(self) -> dict[str, Any]:
        """The record as the ``inspect`` command prints it: why it was not decoded, and where it is.

        Returns:
            A JSON-ready dict.
        """
        return {"not_decoded": self.reason, "file": self.path, "offset": self.offset,
                "bytes": self.length}


def shard_paths(path: str) -> tuple[list[str], str]:
    """The shard files of a version directory / manifest / output root (the version its
    LATEST names) / glob, and their compression.

    Args:
        path: a version folder, a manifest, an output root or a glob of TFRecord files.

    Returns:
        The shard paths and their compression (``auto`` for a glob).

    Raises:
        ManifestError: the manifest is unusable.
    """
    manifest_path = manifest_path_at(path)
    if manifest_path is not None and storage.exists(manifest_path):
        try:  # the same checks as verify: shard paths stay inside the version directory
            manifest = check_manifest(json.loads(storage.read_text(manifest_path)))
        except ValueError as err:
            raise ManifestError(f"{manifest_path}: unusable manifest: {err}") from None
        base = manifest_path.rsplit("/", 1)[0]
        files = [storage.join(base, shard["path"]) for _, info in sorted(
            manifest["splits"].items()) for shard in info["shards"]]
        return files, manifest.get("compression", "auto")
    files = [file for file in matched_files(path, "TFRecord files")
             if not file.endswith(".index")]
    if not files:
        raise storage.NoMatch(f"nothing to inspect at {path}: only index files")
    return files, "auto"


def iter_examples(path: str, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
                  ) -> Iterator[dict[str, tuple[str | None, list]] | Undecoded]:
    """Each record as ``{name: (kind, values)}``, or as an :class:`Undecoded` when it is
    larger than ``max_record_bytes`` or not a serialized Example.

    Args:
        path: as for :func:`shard_paths`.
        max_record_bytes: the largest record decoded, in bytes.

    Yields:
        Decoded Examples, or :class:`Undecoded` records.
    """
    files, compression = shard_paths(path)
    for file in files:
        with storage.open_read(file) as handle:
            for offset, length, record in tff.iter_record_spans(
                    handle, compression, path=file, max_bytes=max_record_bytes):
                if record is None:
                    yield Undecoded(file, offset, length, f"larger than the limit of "
                                    f"{max_record_bytes} bytes (--max-record-bytes)")
                    continue
                try:
                    yield wire.decode_example(record)
                except wire.ExampleDecodeError as err:
                    yield Undecoded(file, offset, length, str(err))


def show_value(kind: str | None, values: list) -> Any:
    """JSON-friendly values: text when UTF-8, else {"base64", "length"}; non-finite as str.

    Args:
        kind: the Feature's list kind (``bytes_list``, ``float_list``, ``int64_list``), or None.
        values: its values.

    Returns:
        The values, safe to dump as JSON.
    """
    if kind == "bytes_list":
        shown = []
        for v in values:
            try:
                shown.append(v.decode("utf-8"))
            except UnicodeDecodeError:
                shown.append({"base64": base64.b64encode(v).decode(), "length": len(v)})
        return shown
    if kind == "float_list":
        return [v if math.isfinite(v) else str(v) for v in values]
    return values


class _FeatureStats:
    def __init__(self) -> None:
        self.kinds: set[str] = set()
        self.present = 0
        self.min_len = math.inf
        self.max_len = 0
        self.count = 0
        self.total = 0.0
        self.low = math.inf
        self.high = -math.inf
        self.nan = 0
        self.distinct: set | None = set()

    def add(self, kind: str | None, values: list) -> None:
        self.kinds.add(kind or "none")
        self.present += 1
        self.min_len = min(self.min_len, len(values))
        self.max_len = max(self.max_len, len(values))
        for v in values:
            if kind != "bytes_list":
                if isinstance(v, float) and math.isnan(v):
                    self.nan += 1
                    continue
                self.count += 1
                self.total += v
                self.low = min(self.low, v)
                self.high = max(self.high, v)
            if self.distinct is not None:
                self.distinct.add(v)
                if len(self.distinct) > _DISTINCT_LIMIT:
                    self.distinct = None

    def report(self, examples: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "/".join(sorted(self.kinds)),
            "present_in": self.present,
            "missing_in": examples - self.present,
            "values_per_example": [self.min_len, self.max_len],
        }
        if self.count:
            out.update(min=self.low, max=self.high, mean=self.total / self.count)
        if self.nan:
            out["nan"] = self.nan
        if self.distinct is not None:
            out["distinct"] = show_value("bytes_list" if "bytes_list" in self.kinds else None,
                                         sorted(self.distinct))
        return out


def summarize(examples: Iterator[dict | Undecoded], limit: int) -> dict[str, Any]:
    """Per-feature statistics of the first ``limit`` records; records that were not decoded
    are counted (``not_decoded``) and left out of the statistics.

    Args:
        examples: the records (:func:`iter_examples`).
        limit: how many records to look at.

    Returns:
        The records seen, those not decoded, and each feature's statistics.
    """
    stats: dict[str, _FeatureStats] = {}
    seen = undecoded = 0
    for example in examples:
        if seen >= limit:
            break
        seen += 1
        if isinstance(example, Undecoded):
            undecoded += 1
            continue
        for name, (kind, values) in example.items():
            stats.setdefault(name, _FeatureStats()).add(kind, values)
    out: dict[str, Any] = {"examples_scanned": seen}
    if undecoded:
        out["not_decoded"] = undecoded
    out["features"] = {name: s.report(seen - undecoded) for name, s in sorted(stats.items())}
    return out
