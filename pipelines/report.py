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
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format import manifest as mf
from beam_tfrecords.sinks.format.report_html import VersionFacts, render_report
from beam_tfrecords.transforms.version_report import ReportError, read_anomalies, version_facts

__all__ = ["ReportError", "load_version", "read_manifest", "refuse_inside", "write_report"]


def read_manifest(path: str) -> tuple[str, dict]:
    """(version directory, its manifest) of ``path``: a version directory, its manifest, or
    an output root (the version its LATEST names).

    Args:
        path: a version folder, its manifest, or an output root.

    Returns:
        The version folder and its manifest.

    Raises:
        NoMatch: nothing there.
        ManifestError: the manifest is not JSON or not a manifest.
    """
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
    return version_dir, manifest


def load_version(path: str, statistics_folder: str | None = None
                 ) -> tuple[str, VersionFacts]:
    """(version directory, its facts) of ``path`` (as :func:`read_manifest`); its statistics
    from ``statistics_folder`` when given (``beam-tfrecords stats --out``).

    Args:
        path: as for :func:`read_manifest`.
        statistics_folder: where its statistics are, when not in the version.

    Returns:
        The version folder and its facts.
    """
    version_dir, manifest = read_manifest(path)
    return version_dir, version_facts(version_dir, manifest, statistics_folder)


def _inside(path: str, folder: str) -> bool:
    if storage.is_local(path) and storage.is_local(folder):
        path, folder = os.path.realpath(path), os.path.realpath(folder)
        return os.path.commonpath([path, folder]) == folder
    return path.rstrip("/").startswith(folder.rstrip("/") + "/")


def refuse_inside(out: str, folders: list[str]) -> None:
    """ReportError when ``out`` is inside one of the committed version ``folders``.

    Args:
        out: where the report would be written.
        folders: the committed versions' folders.

    Raises:
        ReportError: ``out`` is inside one of them.
    """
    for folder in folders:
        if _inside(out, folder):
            raise ReportError(f"refusing to write {out}: it is inside the committed version "
                              f"{folder}, which only a build changes; give --out elsewhere")


def write_report(path: str, out: str, against: str | None = None,
                 against_statistics: str | None = None) -> tuple[str, int]:
    """Write the report of the version at ``path`` (compared with ``against``) to ``out``.

    Args:
      path: a version directory, its manifest, or an output root (its LATEST version).
      out: where the page goes (local or ``gs://``); never inside either version.
      against: the other version to compare with, or None.
      against_statistics: the other version's statistics folder when it has none of its own
        (``beam-tfrecords stats --out``).

    Returns:
      (the version directory reported, the page's size in bytes).
    """
    version_dir, facts = load_version(path)
    previous = None
    folders = [version_dir]
    if against is not None:
        other_dir, previous = load_version(against, against_statistics)
        folders.append(other_dir)
    refuse_inside(out, folders)
    page = render_report(facts, previous, read_anomalies(version_dir)).encode("utf-8")
    storage.write_atomic(out, page, content_type="text/html; charset=utf-8")
    return version_dir, len(page)
