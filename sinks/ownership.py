"""What in an output location is ours, proven by content, never by names alone.

A build claims its version folder by creating ``<version>/.beam-tfrecords-build`` exclusively
(``conditional.create``: ``O_EXCL``-like locally, ``ifGenerationMatch=0`` on Cloud Storage)
while the folder is empty, and writes nothing there before. So:

- a folder with a *committed* manifest of ours (a JSON document with our manifest's fields) is
  a version of ours, whether or not it has a marker (versions written before markers existed);
  what may be deleted of it is what the manifest lists, plus the marker and ``.staging/``;
- a folder with our marker and no manifest is a build in progress or the leftovers of one --
  leftovers only once that build holds no live lease (sinks/lease.py). Of those, its
  ``.staging/`` tree and the files at names it writes are deleted; anything else stays;
- a folder without a marker that the lease's history names as the version of a build that
  lost the lease (``formers``) -- a stalled build that went on writing after the next one
  removed its leftovers, marker included -- is that build's leftovers too, but only while
  every file in it is at a name a build writes: one file that is not keeps it foreign;
- everything else -- another tool's TFRecord export, a folder that happens to contain
  ``.staging/``, loose files -- is foreign: never deleted, never changed.

``classify`` is pure over a listing plus the markers and manifests read from it; ``scan``
does the reading.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format import layout as lay

__all__ = ["Entry", "Marker", "OutputState", "classify", "listed_by_failure",
           "listed_by_manifest", "read_marker", "scan", "written_by_build"]

TOOL = "beam-tfrecords"
# Files a build writes inside its version folder, outside .staging/ (relative paths): the
# only ones cleanup removes from leftovers, together with the marker and .staging/.
# Shards end .tfrecord[.gz|.deflate]; index sidecars are index/<split>/<shard>.index.
_SHARD = r"[^/]+-\d{5}-of-\d{5}\.tfrecord(\.gz|\.deflate)?"
_ROOT_FILES = "|".join(map(re.escape, (lay.MANIFEST, lay.FEATURE_SPEC, lay.ANOMALIES,
                                       lay.REPORT, *lay.METADATA_FILES)))
_BUILD_FILES = re.compile(
    rf"({_ROOT_FILES}"
    rf"|[^/]+/{_SHARD}"
    rf"|{re.escape(lay.INDEX)}/[^/]+/{_SHARD}\.index"
    rf"|{re.escape(lay.DEAD_LETTER)}/rejected-\d{{5}}-of-\d{{5}}\.jsonl"
    rf"|{re.escape(lay.STATISTICS)}/Split-[^/]+/{re.escape(lay.STATISTICS_FILE)})"
    r"(\.tmp-[0-9a-f]{32})?")


_OUR_TEMPORARY = re.compile(
    rf"({re.escape(lay.LATEST)}|{re.escape(lay.LEASE)})\.tmp-[0-9a-f]{{32}}")
# The marker's own temporary (local disk: written beside it, then linked into place): a build
# killed between the two leaves it, alone or beside the marker.
_MARKER_TEMPORARY = re.compile(rf"{re.escape(lay.MARKER)}\.tmp-[0-9a-f]{{32}}")


@dataclasses.dataclass(frozen=True)
class Marker:
    """The ownership marker: which build claimed a version folder, and when."""

    build_id: str
    version: str
    started: str
    tool_version: str

    def dumps(self) -> bytes:
        """The marker file's content, tagged with our tool's name.

        Returns:
            Indented JSON.
        """
        return (json.dumps({"tool": TOOL, **dataclasses.asdict(self)}, indent=2) + "\n"
                ).encode()

    @classmethod
    def loads(cls, data: bytes) -> Marker | None:
        """The marker, or None when ``data`` is not one of ours.

        Args:
            data: the marker file's content.

        Returns:
            The marker, or None.
        """
        try:
            doc = json.loads(data)
            if doc.get("tool") != TOOL:
                return None
            return cls(str(doc["build_id"]), str(doc["version"]), str(doc["started"]),
                       str(doc["tool_version"]))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None


def is_our_manifest(doc: Any) -> bool:
    """A manifest document written by this tool (any format version).

    Args:
        doc: a parsed manifest.json.

    Returns:
        Whether it is ours.
    """
    return (isinstance(doc, dict) and isinstance(doc.get("splits"), dict)
            and "format_version" in doc and "tool_version" in doc and "counts" in doc)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One top-level folder of an output root."""

    name: str
    files: tuple[str, ...]  # relative to the folder
    marker: Marker | None = None
    manifest: Mapping[str, Any] | None = None  # parsed, when it is ours


@dataclasses.dataclass(frozen=True)
class OutputState:
    """An output root sorted into what is ours and what is not."""

    latest: str | None
    committed: tuple[Entry, ...] = ()  # versions with a manifest of ours
    claimed: tuple[Entry, ...] = ()  # our marker, no manifest: in progress or leftovers
    failed: tuple[Entry, ...] = ()  # .failed/<version>-<build>/ with a failure.json of ours
    foreign: tuple[str, ...] = ()  # everything else (folders end in '/')

    def committed_names(self) -> list[str]:
        """The names of the committed versions.

        Returns:
            Folder names, in scan order.
        """
        return [e.name for e in self.committed]


def is_our_failure(doc: Any) -> bool:
    """A failure.json written by this tool for a failed build.

    Args:
        doc: a parsed failure.json.

    Returns:
        Whether it is ours.
    """
    return isinstance(doc, dict) and doc.get("tool") == TOOL and "build_id" in doc


def _failed_entries(files: Sequence[str], failures: Mapping[str, Any]
                    ) -> tuple[list[Entry], list[str]]:
    """The failed builds' folders under ``.failed/`` (files relative to it) and, apart, what
    there is not ours."""
    subs: dict[str, list[str]] = {}
    foreign = []
    for f in files:
        head, sep, below = f.partition("/")
        if sep:
            subs.setdefault(head, []).append(below)
        else:
            foreign.append(f"{lay.FAILED}/{head}")
    entries = []
    for name, inside in sorted(subs.items()):
        doc = failures.get(name)
        if is_our_failure(doc):
            entries.append(Entry(name, tuple(sorted(inside)), None, doc))
        else:
            foreign.append(f"{lay.FAILED}/{name}/")
    return entries, foreign


def classify(files_by_top: Mapping[str, Sequence[str]], loose: Sequence[str],
             markers: Mapping[str, Marker | None], manifests: Mapping[str, Any],
             latest: str | None, failures: Mapping[str, Any] | None = None,
             formers: Mapping[str, str] | None = None) -> OutputState:
    """Sort the top-level entries of a root (``files_by_top``: folder -> relative file paths;
    ``loose``: files directly in the root) by the markers, manifests and failure records
    (``failures``: ``.failed/`` subfolder -> its failure.json) read from them, and the
    lease's history (``formers``: version folder -> the build that claimed it).

    Args:
        files_by_top: each top-level folder's files, relative to it.
        loose: the names of files directly in the root.
        markers: each claimed folder's marker (None: not one of ours).
        manifests: each folder's parsed manifest.json.
        latest: the version ``LATEST`` names.
        failures: each ``.failed/`` subfolder's parsed failure.json.
        formers: version folder to the build that claimed it, from the lease's history.

    Returns:
        The root's state.
    """
    committed, claimed, failed, foreign = [], [], [], []
    for name in loose:
        # LATEST and the lease, and the temporary files their atomic writes leave when killed
        # (never deleted on their names alone; harmless, a few bytes each).
        if name not in (lay.LATEST, lay.LEASE) and not _OUR_TEMPORARY.fullmatch(name):
            foreign.append(name)
    for name, files in sorted(files_by_top.items()):
        if name == lay.FAILED:
            entries, others = _failed_entries(files, failures or {})
            failed.extend(entries)
            foreign.extend(others)
            continue
        entry = Entry(name, tuple(sorted(files)), markers.get(name),
                      manifests.get(name) if is_our_manifest(manifests.get(name)) else None)
        if entry.manifest is not None:
            committed.append(entry)
        elif entry.marker is not None:
            claimed.append(entry)
        elif (formers or {}).get(name) and _all_written_by_a_build(entry.files):
            claimed.append(dataclasses.replace(entry, marker=Marker(formers[name], name, "",
                                                                    "")))
        elif entry.files and all(_MARKER_TEMPORARY.fullmatch(f) for f in entry.files):
            # A claim cut short before its marker was in place: nothing else was written
            # (a build writes only after its claim), so it is nobody's build's.
            claimed.append(dataclasses.replace(entry, marker=Marker("", name, "", "")))
        else:
            foreign.append(name + "/")
    return OutputState(latest, tuple(committed), tuple(claimed), tuple(failed),
                       tuple(foreign))


def read_marker(version_dir: str) -> Marker | None:
    """The marker of a version folder.

    Args:
        version_dir: the version folder.

    Returns:
        The marker, or None when there is none or it is not ours.
    """
    path = storage.join(version_dir, lay.MARKER)
    if not storage.exists(path):
        return None
    with storage.open_read(path) as handle:
        return Marker.loads(handle.read(1 << 16))


def _read_manifest(path: str) -> Any:
    try:
        with storage.open_read(path) as handle:
            return json.loads(handle.read(64 << 20))
    except (OSError, ValueError):
        return None  # unreadable: not a manifest of ours, so the folder is not ours either


def _all_written_by_a_build(files: Sequence[str]) -> bool:
    return bool(files) and all(f.startswith(lay.STAGING + "/") or _BUILD_FILES.fullmatch(f)
                               or _MARKER_TEMPORARY.fullmatch(f) for f in files)


def scan(root: str, formers: Mapping[str, str] | None = None) -> OutputState:
    """List ``root`` once and classify what it holds (``formers``: see ``classify``).

    Args:
        root: the output root.
        formers: as for :func:`classify`.

    Returns:
        The root's state.
    """
    prefix = root.rstrip("/") + "/"
    files = storage.list_files(root) if storage.exists(root) else []
    tops: dict[str, list[str]] = {}
    loose: list[str] = []
    for path in files:
        rest = path[len(prefix):] if path.startswith(prefix) else path
        head, sep, below = rest.partition("/")
        if sep:
            tops.setdefault(head, []).append(below)
        elif head:
            loose.append(head)
    markers = {name: read_marker(prefix + name) for name, inside in tops.items()
               if lay.MARKER in inside}
    manifests = {name: _read_manifest(prefix + name + "/" + lay.MANIFEST)
                 for name, inside in tops.items() if lay.MANIFEST in inside}
    failures = {}
    for below in tops.get(lay.FAILED, ()):
        sub, _, rest = below.partition("/")
        if rest == lay.FAILURE:
            failures[sub] = _read_manifest(f"{prefix}{lay.FAILED}/{below}")
    latest = None
    if lay.LATEST in loose:
        latest = storage.read_text(prefix + lay.LATEST).strip() or None
    return classify(tops, loose, markers, manifests, latest, failures, formers)


def written_by_build(entry: Entry) -> list[str]:
    """The files of a claimed folder that its build wrote (relative paths), marker last:
    ``.staging/`` and the names a build writes; nothing else.

    Args:
        entry: a claimed, uncommitted folder.

    Returns:
        Paths relative to the folder.
    """
    ours = [f for f in entry.files if _all_written_by_a_build([f])]
    return ours + ([lay.MARKER] if lay.MARKER in entry.files else [])


def listed_by_failure(entry: Entry) -> list[str]:
    """The files of a failed build's folder that it wrote (relative paths), failure.json
    first: the dead letters it lists; anything else stays.

    Args:
        entry: a failed build's ``.failed/`` entry.

    Returns:
        Paths relative to the folder.
    """
    doc = entry.manifest or {}
    listed = {d["path"] for d in doc.get("dead_letter", [])
              if isinstance(d, dict) and isinstance(d.get("path"), str)}
    rest = sorted(f for f in entry.files if f in listed)
    return ([lay.FAILURE] if lay.FAILURE in entry.files else []) + rest


def listed_by_manifest(entry: Entry) -> list[str]:
    """The files of a committed version that it owns (relative paths), manifest first: what
    its manifest lists, the spec, the marker and staging; anything else stays.

    Args:
        entry: a committed version.

    Returns:
        Paths relative to the version folder.
    """
    doc = entry.manifest or {}
    listed = {lay.MANIFEST, lay.FEATURE_SPEC, lay.MARKER}
    for split in doc.get("splits", {}).values():
        for shard in split.get("shards", []) if isinstance(split, dict) else []:
            for key in ("path", "index"):
                if isinstance(shard.get(key), str):
                    listed.add(shard[key])
    for dead in doc.get("dead_letter", []):
        if isinstance(dead, dict) and isinstance(dead.get("path"), str):
            listed.add(dead["path"])
    extras = doc.get("metadata_files")
    for extra in extras if isinstance(extras, list) else []:
        if isinstance(extra, str):
            listed.add(extra)
    for key in ("gate", "report"):
        item = doc.get(key)
        if isinstance(item, dict) and isinstance(item.get("path"), str):
            listed.add(item["path"])
    stats = doc.get("statistics")
    for listed_stats in stats.values() if isinstance(stats, dict) else []:
        if isinstance(listed_stats, dict) and isinstance(listed_stats.get("path"), str):
            listed.add(listed_stats["path"])
    present = [f for f in entry.files
               if f in listed or f.startswith(lay.STAGING + "/")]
    rest = sorted(f for f in present if f != lay.MANIFEST)
    return ([lay.MANIFEST] if lay.MANIFEST in present else []) + rest
