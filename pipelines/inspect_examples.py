"""``beam-tfrecords inspect``: the first examples as JSON and a per-feature summary.

Works on a version directory (its manifest says the compression and the shards), a
``manifest.json``, or a glob of shard files, local or ``gs://``. Records are decoded without a
spec (raw ``tf.train.Example`` form), so any TFRecord file of Examples can be inspected. Bytes
show as text when they are valid UTF-8, otherwise as base64 with their length.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterator
from typing import Any

from beam_tfrecords.pipelines.verify import ManifestError, check_manifest
from beam_tfrecords.sinks import storage
from beam_tfrecords.sinks.format import manifest as mf
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.transforms.codec import wire

__all__ = ["iter_examples", "show_value", "summarize"]

_DISTINCT_LIMIT = 10


def shard_paths(path: str) -> tuple[list[str], str]:
    """The shard files of a version directory / manifest / glob, and their compression."""
    stripped = path.rstrip("/")
    manifest_path = stripped if stripped.endswith(".json") else storage.join(stripped,
                                                                             mf.MANIFEST)
    if storage.exists(manifest_path):
        try:  # the same checks as verify: shard paths stay inside the version directory
            manifest = check_manifest(json.loads(storage.read_text(manifest_path)))
        except ValueError as err:
            raise ManifestError(f"{manifest_path}: unusable manifest: {err}") from None
        base = manifest_path.rsplit("/", 1)[0]
        files = [storage.join(base, shard["path"]) for _, info in sorted(
            manifest["splits"].items()) for shard in info["shards"]]
        return files, manifest.get("compression", "auto")
    files = [m.path for m in storage.match(path) if not m.path.endswith(".index")]
    if not files:
        raise storage.NoMatch(f"nothing to inspect at {path}")
    return files, "auto"


def iter_examples(path: str) -> Iterator[dict[str, tuple[str | None, list]]]:
    files, compression = shard_paths(path)
    for file in files:
        with storage.open_read(file) as handle:
            for record in tff.iter_records(handle, compression, path=file):
                yield wire.decode_example(record)


def show_value(kind: str | None, values: list) -> Any:
    """JSON-friendly values: text when UTF-8, else {"base64", "length"}; non-finite as str."""
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


def summarize(examples: Iterator[dict], limit: int) -> dict[str, Any]:
    stats: dict[str, _FeatureStats] = {}
    seen = 0
    for example in examples:
        if seen >= limit:
            break
        seen += 1
        for name, (kind, values) in example.items():
            stats.setdefault(name, _FeatureStats()).add(kind, values)
    return {"examples_scanned": seen,
            "features": {name: s.report(seen) for name, s in sorted(stats.items())}}
