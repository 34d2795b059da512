"""``beam-tfrecords report``: a committed version's report.html, read from what it holds.

Reads the version's ``manifest.json``, its statistics (a version built without them gets a
report that says so), its dead-letter files and its ``anomalies.json`` when the drift gate
left one, through transforms/version_report.py -- the same reading the commit's own
``report.html`` uses; the page itself is made by sinks/format/report_html.py.

The command only reads versions: it writes the page where ``--out`` says, never into a
version it reads (a committed version changes only through a build).
"""

from __future__ import annotations

import json
import os

from beam_tfrecords.pipelines.verify import ManifestError, version_at
from beam_tfrecords.sinks import storage
from beam_tfrecords.sinks.format import manifest as mf
from beam_tfrecords.sinks.format.report_html import VersionFacts, render_report
from beam_tfrecords.transforms.version_report import ReportError, read_anomalies, version_facts

__all__ = ["ReportError", "load_version", "write_report"]


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
    return version_dir, version_facts(version_dir, manifest)


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
