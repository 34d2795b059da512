"""The drift gate the commit runs: this build's statistics against those of ``LATEST``'s.

:class:`DriftGate` is handed to the commit (``CommitSpec.gate``), which calls it with the
statistics it is about to write, just before the manifest. It reads the previous version's
statistics and manifest (no Beam; storage only) and judges the difference with
transforms/stats/drift.py. The commit writes what it returns as ``anomalies.json``; when the
gate did not pass, the version is committed for inspection but ``LATEST`` stays, and
``beam-tfrecords promote`` moves it after review. The first build, and one whose previous
version has no statistics, pass with a note saying there was nothing to compare.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from beam_tfrecords.errors import UserError
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format import layout as lay
from beam_tfrecords.transforms.stats import drift
from beam_tfrecords.transforms.stats.statistics_wire import decode_statistics_list

__all__ = ["DriftGate", "DriftGateError", "check_gate", "counts_for_gate", "held_back_line"]


class DriftGateError(UserError):
    """The drift gate held a version back: it is committed (for inspection) but ``LATEST``
    still names the version before; ``beam-tfrecords promote`` publishes it after review.
    The message is one line naming the version, the worst anomalies and the way on."""


def held_back_line(manifest: Mapping[str, Any], where: str) -> str:
    """The one line that says the gate held the version of ``manifest`` back; ``where`` is
    the version as the reader should name it (its folder, or ``<output>/<version>``).

    Args:
        manifest: the held-back version's manifest.
        where: the version's folder as the reader should name it.

    Returns:
        The line.
    """
    gate = manifest.get("gate") or {}
    return (f"drift gate: version {manifest.get('version')} committed, LATEST stays at "
            f"{gate.get('against')}: {gate.get('line')}; see {where}/{gate.get('path')}, "
            f"then beam-tfrecords promote {where} to publish it")


def check_gate(manifest: Mapping[str, Any], version_dir: str) -> Mapping[str, Any]:
    """``manifest`` unchanged when the gate passed or did not run; else DriftGateError.

    Args:
      manifest: a committed version's manifest document.
      version_dir: its folder, named in the error.

    Returns:
      The manifest.
    """
    if (manifest.get("gate") or {}).get("passed") is False:
        raise DriftGateError(held_back_line(manifest, version_dir))
    return manifest


def counts_for_gate(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The counts the gate compares, from a manifest: read, rejected, unread and input
    bytes.

    Args:
        manifest: a version's manifest.

    Returns:
        ``read``, ``rejected``, ``unread_bytes`` and ``input_bytes``; with the duplicate
        count, ``written``, ``duplicates`` and ``leaked`` summed over the splits.
    """
    counts = manifest.get("counts", {})
    unread = counts.get("unread", {})
    found = {"read": counts.get("read", 0), "rejected": counts.get("rejected", 0),
             "unread_bytes": unread.get("bytes", 0) if isinstance(unread, dict) else 0,
             "input_bytes": (manifest.get("inputs") or {}).get("bytes", 0) or 0}
    duplicates = manifest.get("duplicates")
    if isinstance(duplicates, dict):
        splits = (duplicates.get("splits") or {}).values()
        found.update({key: sum(int(s.get(key, 0)) for s in splits)
                      for key in ("duplicates", "leaked")})
        found["written"] = sum(int(s.get("records", 0)) for s in splits)
    return found


def _datasets(files: Mapping[str, bytes]) -> dict[str, dict]:
    out = {}
    for split, data in files.items():
        for dataset in decode_statistics_list(bytes(data)):
            out[dataset.get("name", split)] = dataset
    return out


class DriftGate:
    """Compares a build with the version ``LATEST`` names (picklable: thresholds only).

    Args:
      thresholds: the config's ``validate:`` section.
      baseline_statistics: a folder holding the ``statistics/`` tree of the version LATEST
        names, for a baseline built without statistics (``beam-tfrecords stats --out``);
        used only when each split's statistics there count that split's records.
    """

    def __init__(self, thresholds: drift.Thresholds,
                 baseline_statistics: str | None = None) -> None:
        self.thresholds = thresholds
        self.baseline_statistics = baseline_statistics

    def __call__(self, root: str, against: str | None, manifest: Mapping[str, Any],
                 statistics: Mapping[str, bytes]) -> dict[str, Any]:
        """The ``anomalies.json`` document of this build.

        Args:
          root: the output root.
          against: the version LATEST names (None: the first build).
          manifest: this build's manifest document, as it will be written.
          statistics: split -> this build's serialized statistics.

        Returns:
          ``drift.document``: ``passed``, ``against``, ``thresholds``, ``anomalies`` and,
          when there was nothing to compare, a ``note``.
        """
        if against is None:
            return drift.document([], None, self.thresholds,
                                  "the first version: nothing to compare with")
        folder = storage.join(root, against)
        try:
            previous = json.loads(storage.read_text(storage.join(folder, lay.MANIFEST)))
        except (OSError, ValueError):
            return drift.document([], against, self.thresholds,
                                  f"version {against} has no readable manifest: nothing to "
                                  "compare with")
        entries = previous.get("statistics")
        note = ""
        if isinstance(entries, dict) and entries:
            files = {}
            for split, entry in entries.items():
                with storage.open_read(storage.join(folder, entry["path"])) as handle:
                    files[split] = handle.read()
            before = _datasets(files)
        else:
            before, why = self._baseline(previous)
            if before is None:
                return drift.document([], against, self.thresholds,
                                      f"version {against} has no statistics: nothing to "
                                      f"compare with ({why})")
            note = f"version {against}'s statistics from {self.baseline_statistics}"
        found = drift.compare(before, _datasets(statistics), self.thresholds,
                              counts_for_gate(previous), counts_for_gate(manifest))
        return drift.document(found, against, self.thresholds, note)

    def _baseline(self, previous: Mapping[str, Any]) -> tuple[dict[str, dict] | None, str]:
        """The out-of-band statistics of a baseline without its own, when they count its
        records split by split; else None and why not."""
        if self.baseline_statistics is None:
            return None, ("beam-tfrecords stats VERSION --out DIR computes them; build "
                          "--baseline-statistics DIR uses them")
        files = {}
        for split, info in (previous.get("splits") or {}).items():
            path = lay.statistics_path(self.baseline_statistics.rstrip("/"), split)
            if not storage.exists(path):
                return None, f"{path} is missing"
            with storage.open_read(path) as handle:
                files[split] = handle.read()
            counted = [d.get("num_examples", 0) for d in decode_statistics_list(files[split])]
            if counted != [info.get("records")]:
                return None, (f"{path} counts {counted} Examples, split {split!r} holds "
                              f"{info.get('records')}: not this version's")
        return _datasets(files), ""
