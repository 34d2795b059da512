"""``beam-tfrecords stats VERSION --out DIR``: statistics for a version built without them.

A version built before statistics existed (or with ``output.statistics: false``) has no
``statistics/Split-<split>/FeatureStats.pb``. This command reads its shards (CRCs checked as
they are read), decodes every Example -- the slow, general way in that the statistics tests
use as their reference (``DatasetAccumulator.add_serialized``) -- and writes each split's
statistics in TFX's layout below ``DIR``: ``DIR/statistics/Split-<split>/FeatureStats.pb``.
Memory stays bounded: the accumulators are sketches of a stated capacity, and records are
read one at a time.

Never into the version: a committed version changes only through a build. ``build
--baseline-statistics DIR`` hands the folder to the drift gate and the report when the
version ``LATEST`` names has no statistics of its own.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

from beam_tfrecords.pipelines.report import read_manifest, refuse_inside
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format import layout as lay
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.compute_statistics import split_statistics, statistics_kinds
from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator

__all__ = ["CHUNK", "kinds_from_manifest", "write_version_statistics"]

CHUNK = 4096  # records decoded at a time: the decoded values of one chunk are all it holds


def kinds_from_manifest(manifest: Mapping[str, Any]) -> dict[str, str] | None:
    """Stored key -> statistics kind from the features a command-line build recorded in its
    manifest's config; None when they cannot be read back (the library's manifests name
    features only): each key then gets the kind of the lists it holds.

    Args:
        manifest: a version's manifest.

    Returns:
        Stored key to statistics kind, or None.
    """
    features = (manifest.get("config") or {}).get("features")
    if not isinstance(features, list):
        return None
    known = {f.name for f in dataclasses.fields(FeatureSpec)}
    try:
        specs = [FeatureSpec(**{k: tuple(v) if isinstance(v, list) else v
                                for k, v in feature.items() if k in known})
                 for feature in features]
        return statistics_kinds(specs)
    except (TypeError, ValueError, AttributeError):
        return None


def write_version_statistics(path: str, out: str) -> tuple[str, dict[str, str]]:
    """Compute the statistics of the version at ``path`` from its shards, into ``out``.

    Args:
      path: a version directory, its manifest, or an output root (its LATEST version).
      out: the folder the ``statistics/`` tree goes to (local or ``gs://``); never inside
        the version.

    Returns:
      (the version directory, split -> the statistics file written).
    """
    version_dir, manifest = read_manifest(path)
    refuse_inside(out, [version_dir])
    kinds = kinds_from_manifest(manifest)
    compression = manifest.get("compression", "auto")
    written = {}
    for split, info in manifest["splits"].items():
        acc = DatasetAccumulator(kinds)
        for shard in info["shards"]:
            shard_path = storage.join(version_dir, shard["path"])
            with storage.open_read(shard_path) as handle:
                records = tff.iter_records(handle, compression, path=shard_path)
                while chunk := list(itertools.islice(records, CHUNK)):
                    acc.add_serialized(chunk)
        target = lay.statistics_path(out.rstrip("/"), split)
        storage.write_atomic(target, split_statistics(split, acc))
        written[split] = target
    return version_dir, written
