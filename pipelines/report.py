"""``beam-tfrecords report``: a committed version's report.html, read from what it holds.

Reads the version's ``manifest.json``, its statistics (``statistics/Split-<split>/
FeatureStats.pb``, decoded by transforms/stats/statistics_wire.py; a version built without
them gets a report that says so), its dead-letter files (rejected records and unread input,
counted by reason, with the first few rows of each as examples) and its ``anomalies.json``
when a comparison left one, local or on ``gs://`` through runtime/storage.py; the page itself
is made by sinks/format/report_html.py, which does no I/O.

The command only reads versions: it writes the page where ``--out`` says, never into a
version it reads (a committed version changes only through a build).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from beam_tfrecords.errors import UserError
from beam_tfrecords.pipelines.verify import ManifestError, version_at
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.dead_letters import reason_key
from beam_tfrecords.sinks.format import manifest as mf
from beam_tfrecords.sinks.format.layout import resolve_in_version
from beam_tfrecords.sinks.format.report_html import (
    EXAMPLES_SHOWN,
    Anomaly,
    Reason,
    VersionFacts,
    facts_from_manifest,
    render_report,
)
from beam_tfrecords.transforms.stats.statistics_wire import (
    StatisticsDecodeError,
    decode_statistics_list,
)

__all__ = ["ANOMALIES", "FEATURE_STATS", "STATISTICS", "load_version", "read_anomalies",
           "read_dead_letters", "read_statistics", "statistics_path", "write_report"]

# TFX's layout of statistics in a version (the build writes them there).
STATISTICS = "statistics"
FEATURE_STATS = "FeatureStats.pb"
# What a comparison of two versions found, as a JSON list of Anomaly.to_dict() objects.
ANOMALIES = "anomalies.json"


class ReportError(UserError, ValueError):
    """A version the report cannot be made from, or a place it must not be written."""


def statistics_path(version_dir: str, split: str) -> str:
    """``<version>/statistics/Split-<split>/FeatureStats.pb``."""
    return storage.join(version_dir, STATISTICS, f"Split-{split}", FEATURE_STATS)


def read_statistics(version_dir: str, splits: list[str]) -> dict[str, dict] | None:
    """Split -> its decoded ``DatasetFeatureStatistics`` for the splits that have a
    statistics file; None when none has (a version built without statistics)."""
    found = {}
    for split in splits:
        path = statistics_path(version_dir, split)
        if not storage.exists(path):
            continue
        with storage.open_read(path) as handle:
            data = handle.read()
        try:
            datasets = decode_statistics_list(data)
        except StatisticsDecodeError as err:
            raise ReportError(f"{path}: not a DatasetFeatureStatisticsList: {err}") from None
        found[split] = datasets[0] if datasets else {"name": split, "features": []}
    return found or None


def read_dead_letters(version_dir: str, manifest: Mapping[str, Any]
                      ) -> tuple[list[Reason], list[Reason]]:
    """(rejected records, unread input) of a version by reason, most frequent first (ties
    by reason), each with its first rows as examples, from the dead-letter files its
    manifest lists; every row is counted."""
    tallies: dict[str, dict[str, list]] = {"rejected": {}, "unread": {}}
    for entry in manifest.get("dead_letter", []):
        path = resolve_in_version(version_dir, *str(entry["path"]).split("/"))
        with storage.open_read(path) as handle:
            for number, line in enumerate(handle, 1):
                try:
                    row = json.loads(line)
                except ValueError:
                    raise ReportError(f"{path}: line {number} is not JSON") from None
                kind = "unread" if row.get("kind") == "unread" else "rejected"
                tally = tallies[kind].setdefault(reason_key(row), [0, []])
                tally[0] += 1
                if len(tally[1]) < EXAMPLES_SHOWN:
                    tally[1].append(row)
    return tuple(  # type: ignore[return-value]
        [Reason(reason, count, tuple(examples)) for reason, (count, examples) in
         sorted(tallies[kind].items(), key=lambda kv: (-kv[1][0], kv[0]))]
        for kind in ("rejected", "unread"))


def read_anomalies(version_dir: str) -> list[Anomaly]:
    """The anomalies a comparison wrote beside the version (``anomalies.json``), or []."""
    path = storage.join(version_dir, ANOMALIES)
    if not storage.exists(path):
        return []
    try:
        data = json.loads(storage.read_text(path))
        items = data.get("anomalies", []) if isinstance(data, dict) else data
        return [Anomaly.from_dict(item) for item in items]
    except (ValueError, TypeError, AttributeError) as err:
        raise ReportError(f"{path}: not a list of anomalies: {err}") from None


def load_version(path: str) -> tuple[str, VersionFacts]:
    """(version directory, its facts) of ``path``: a version directory, its manifest, or an
    output root (the version its LATEST names)."""
    version_dir = version_at(path)
    if version_dir is None:
        raise storage.NoMatch(f"{path} is neither a version directory (no manifest.json) nor "
                              "an output root (no LATEST)")
    manifest_path = storage.join(version_dir, mf.MANIFEST)
    try:
        manifest = json.loads(storage.read_text(manifest_path))
    except ValueError as err:
        raise ManifestError(f"{manifest_path}: not JSON: {err}") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("splits"), dict):
        raise ManifestError(f"{manifest_path}: no 'splits' object; not a manifest")
    statistics = read_statistics(version_dir, list(manifest["splits"]))
    rejected, unread = read_dead_letters(version_dir, manifest)
    return version_dir, facts_from_manifest(manifest, statistics, rejected, unread)


def _inside(path: str, folder: str) -> bool:
    if storage.is_local(path) and storage.is_local(folder):
        path, folder = os.path.realpath(path), os.path.realpath(folder)
        return os.path.commonpath([path, folder]) == folder
    return path.rstrip("/").startswith(folder.rstrip("/") + "/")


def write_report(path: str, out: str, against: str | None = None) -> tuple[str, int]:
    """Write the report of the version at ``path`` (compared with ``against``) to ``out``.

    Args:
      path: a version directory, its manifest, or an output root (its LATEST version).
      out: where the page goes (local or ``gs://``); never inside either version.
      against: the other version to compare with, or None.

    Returns:
      (the version directory reported, the page's size in bytes).
    """
    version_dir, facts = load_version(path)
    previous = None
    folders = [version_dir]
    if against is not None:
        other_dir, previous = load_version(against)
        folders.append(other_dir)
    for folder in folders:
        if _inside(out, folder):
            raise ReportError(f"refusing to write {out}: it is inside the committed version "
                              f"{folder}, which only a build changes; give --out elsewhere")
    page = render_report(facts, previous, read_anomalies(version_dir)).encode("utf-8")
    storage.write_atomic(out, page, content_type="text/html; charset=utf-8")
    return version_dir, len(page)
