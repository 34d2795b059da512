"""A version's ``report.html``: what it holds, read back from storage, and the commit's page.

The page itself is made by sinks/format/report_html.py, which does no I/O; this module reads
what it shows -- a version's statistics (``statistics/Split-<split>/FeatureStats.pb``,
decoded by transforms/stats/statistics_wire.py), its dead letters (rejected records and
unread input, counted by reason, the first few rows of each kept as examples) and the drift
gate's ``anomalies.json`` -- local or on ``gs://`` through runtime/storage.py.

:class:`VersionReport` is handed to the commit (``CommitSpec.report``), which calls it just
before the manifest with the version it is committing and the version ``LATEST`` named before
this build, and writes the page it returns into the version folder (``report.html``): every
version carries its report, compared with the one it would replace, its anomalies marked.
``beam-tfrecords report`` (pipelines/report.py) makes the same page for any two versions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from beam_tfrecords.errors import UserError
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.dead_letters import reason_key
from beam_tfrecords.sinks.format import layout as lay
from beam_tfrecords.sinks.format.duplicates import key_method
from beam_tfrecords.sinks.format.report_html import (
    EXAMPLES_SHOWN,
    PREVIEW_CHARS,
    Anomaly,
    Reason,
    VersionFacts,
    facts_from_manifest,
    render_report,
)
from beam_tfrecords.transforms.codec.coercion import preview
from beam_tfrecords.transforms.codec.splits import INT_PREFIX
from beam_tfrecords.transforms.codec.wire import ExampleDecodeError, decode_example
from beam_tfrecords.transforms.stats.statistics_wire import (
    StatisticsDecodeError,
    decode_statistics_list,
)

__all__ = ["KeyPreview", "ReportError", "VersionReport", "anomalies_from_document",
           "decode_split_files", "read_anomalies", "read_dead_letters", "read_statistics",
           "record_preview", "version_facts"]


class ReportError(UserError, ValueError):
    """A version the report cannot be made from, or a place it must not be written."""


def decode_split_files(files: Mapping[str, bytes], where: str = "") -> dict[str, dict]:
    """Split -> its decoded ``DatasetFeatureStatistics``, from each split's serialized
    ``DatasetFeatureStatisticsList``; ``where`` names the files in an error.

    Args:
        files: split to its serialized statistics.
        where: names the files in an error.

    Returns:
        Split to its statistics.

    Raises:
        ReportError: a file is not a statistics list.
    """
    found = {}
    for split, data in files.items():
        try:
            datasets = decode_statistics_list(bytes(data))
        except StatisticsDecodeError as err:
            raise ReportError(f"{where or split}: not a DatasetFeatureStatisticsList: "
                              f"{err}") from None
        found[split] = datasets[0] if datasets else {"name": split, "features": []}
    return found


def record_preview(record: bytes, limit: int = PREVIEW_CHARS) -> str:
    """A short text of a record the duplicate count sampled: its Example's features and
    values when it decodes as one (text shown as text), else its bytes; what the manifest's
    duplicate examples and the report show (escaped there).

    Args:
        record: the record's bytes (its first bytes, for a large one).
        limit: the most characters returned.

    Returns:
        The preview.
    """
    try:
        features = decode_example(bytes(record))
    except (ExampleDecodeError, ValueError, IndexError):
        return preview(bytes(record), limit)
    shown = {}
    for name, (_, values) in sorted(features.items()):
        values = [v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else v
                  for v in values]
        shown[name] = values[0] if len(values) == 1 else values
    return preview(shown, limit)


class KeyPreview:
    """What a count of duplicates by a key shows for a sampled key: its value, as
    ``{"id": 42}`` (``codec.splits.key_bytes`` read back: integers as numbers, text as text).
    Called like :func:`record_preview`; ``method`` is the manifest's ``duplicates.method``.

    Args:
        key: the key's field path.
    """

    def __init__(self, key: tuple[str, ...]) -> None:
        self.key = tuple(key)
        self.method = key_method(self.key)

    def __call__(self, head: bytes, limit: int = PREVIEW_CHARS) -> str:
        """The key's value as a short text.

        Args:
            head: the key's bytes (``key_bytes``), or their first bytes.
            limit: the most characters returned.

        Returns:
            The preview.
        """
        kind, body = bytes(head[:1]), bytes(head[1:])
        text = body.decode("utf-8", "backslashreplace")
        value: Any = int(text) if kind == INT_PREFIX and text.lstrip("-").isdigit() else text
        return preview({".".join(self.key): value}, limit)


def read_statistics(version_dir: str, splits: list[str],
                    folder: str | None = None) -> dict[str, dict] | None:
    """Split -> its decoded ``DatasetFeatureStatistics`` for the splits that have a
    statistics file; None when none has (a version built without statistics).

    Args:
      version_dir: the version's folder.
      splits: its split names.
      folder: where the ``statistics/`` tree is, when not in the version (the out-of-band
        statistics ``beam-tfrecords stats --out`` wrote for an older version).

    Returns:
        Split to statistics, or None.
    """
    base = folder if folder is not None else version_dir
    found = {}
    for split in splits:
        path = lay.statistics_path(base, split)
        if storage.exists(path):
            with storage.open_read(path) as handle:
                found.update(decode_split_files({split: handle.read()}, path))
    return found or None


def read_dead_letters(version_dir: str, manifest: Mapping[str, Any]
                      ) -> tuple[list[Reason], list[Reason]]:
    """(rejected records, unread input) of a version by reason, most frequent first (ties
    by reason), each with its first rows as examples, from the dead-letter files its
    manifest lists; every row is counted.

    Args:
        version_dir: the version's folder.
        manifest: its manifest.

    Returns:
        The rejected records' reasons and the unread input's reasons.

    Raises:
        ReportError: a dead-letter line is not JSON.
    """
    tallies: dict[str, dict[str, list]] = {"rejected": {}, "unread": {}}
    for entry in manifest.get("dead_letter", []):
        path = lay.resolve_in_version(version_dir, *str(entry["path"]).split("/"))
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


def anomalies_from_document(data: Any) -> list[Anomaly]:
    """The report's anomalies from an ``anomalies.json`` document: the drift gate's (an
    object whose ``anomalies`` carry ``kind``, ``split``, ``feature`` and ``message``: each
    an error, since each failed the gate) or a plain list of :meth:`Anomaly.to_dict`.

    Args:
        data: the parsed ``anomalies.json``.

    Returns:
        The anomalies.
    """
    items = data.get("anomalies", []) if isinstance(data, dict) else data
    found = []
    for item in items:
        if "message" in item:  # the drift gate's: transforms/stats/drift.Anomaly.as_dict
            found.append(Anomaly(str(item.get("feature", "")), str(item.get("kind", "")),
                                 str(item["message"]), "error"))
        else:
            found.append(Anomaly.from_dict(item))
    return found


def read_anomalies(version_dir: str) -> list[Anomaly]:
    """The anomalies a comparison wrote beside the version (``anomalies.json``), or [].

    Args:
        version_dir: the version's folder.

    Returns:
        The anomalies.

    Raises:
        ReportError: the file is not a list of anomalies.
    """
    path = storage.join(version_dir, lay.ANOMALIES)
    if not storage.exists(path):
        return []
    try:
        return anomalies_from_document(json.loads(storage.read_text(path)))
    except (ValueError, TypeError, AttributeError) as err:
        raise ReportError(f"{path}: not a list of anomalies: {err}") from None


def version_facts(version_dir: str, manifest: Mapping[str, Any],
                  statistics_folder: str | None = None) -> VersionFacts:
    """The report's facts of the committed version at ``version_dir`` whose manifest is
    ``manifest``: its statistics (from ``statistics_folder`` when given) and dead letters.

    Args:
        version_dir: the version's folder.
        manifest: its manifest.
        statistics_folder: where its statistics are, when not in the version.

    Returns:
        The facts the report shows.
    """
    statistics = read_statistics(version_dir, list(manifest.get("splits") or {}),
                                 statistics_folder)
    rejected, unread = read_dead_letters(version_dir, manifest)
    return facts_from_manifest(manifest, statistics, rejected, unread)


class VersionReport:
    """Makes the commit's ``report.html`` (picklable: holds nothing).

    Args:
      baseline_statistics: where the baseline's ``statistics/`` tree is when it was built
        without statistics (``beam-tfrecords stats --out``); None: in the baseline itself.
    """

    def __init__(self, baseline_statistics: str | None = None) -> None:
        self.baseline_statistics = baseline_statistics

    def __call__(self, root: str, against: str | None, manifest: Mapping[str, Any],
                 statistics: Mapping[str, bytes] | None,
                 gate: Mapping[str, Any] | None) -> str:
        """The page of the version being committed.

        Args:
          root: the output root.
          against: the version LATEST named before this build (None: the first build).
          manifest: this build's manifest document, as it will be written (its dead letters
            are in the version folder already).
          statistics: split -> this build's serialized statistics; None: statistics off.
          gate: the drift gate's ``anomalies.json`` document, when the gate ran.

        Returns:
          The HTML page: the same text for the same versions.
        """
        version_dir = storage.join(root, str(manifest["version"]))
        rejected, unread = read_dead_letters(version_dir, manifest)
        current = facts_from_manifest(
            manifest, None if statistics is None else decode_split_files(statistics),
            rejected, unread)
        return render_report(current, self._previous(root, against),
                             anomalies_from_document(gate) if gate else [])

    def _previous(self, root: str, against: str | None) -> VersionFacts | None:
        """The facts of the version compared with; None when there is none, or it cannot be
        read (the page then shows this version alone)."""
        if against is None:
            return None
        folder = storage.join(root, against)
        try:
            previous = json.loads(storage.read_text(storage.join(folder, lay.MANIFEST)))
            own = isinstance(previous.get("statistics"), dict) and previous["statistics"]
            return version_facts(folder, previous, None if own else self.baseline_statistics)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
