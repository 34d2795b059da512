"""``beam-tfrecords verify``: trust what is on disk without TensorFlow.

Given a version directory (or its ``manifest.json``), every shard the manifest lists is read in
full, once: each record's two CRCs and framing are checked (a corrupt or truncated record is
reported with its file and byte offset), the records are counted, and the crc32c and size of the
whole file are compared with the manifest. An index sidecar the manifest lists that is missing
or whose ``offset length`` lines do not address the shard's records is a problem too.

The version folder is listed once and compared with the manifest: a file it lists that is
missing (a shard, an index, a dead letter, a metadata file) is a problem, and so is a file in a
split folder that it does not list -- a ``<split>/*`` glob, as tf.data and Beam users write,
would read it as data -- and so is a TFRecord file anywhere else (the version root, ``index/``,
a new folder), told by its name or, reading only its first bytes, by a valid first frame: any
glob a reader writes may match it. Any other file it does not list (a note at the root, a
stray ``.jsonl`` under ``dead_letter/``, a leftover ``.staging/``) is a warning: no reader of a
split reads it, but the version holds more than it says. Each split's statistics file the
manifest lists (``statistics/Split-<split>/FeatureStats.pb``) must match its size and crc32c,
decode, and count the split's records; the ``report.html`` it lists, its size and crc32c.
Given a glob of shards instead, every file is checked for framing and counted. Exit status 1
on any problem, 0 with warnings only, for schedulers.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from typing import BinaryIO

import crc32c

from beam_tfrecords.errors import UserError
from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format import layout as lay
from beam_tfrecords.sinks.format import manifest as mf
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.transforms.stats.statistics_wire import decode_statistics_list

__all__ = ["ShardCheck", "verify_path"]

# Lists of further files a manifest may hold -> what each file is, for messages: the files
# other readers need at the version root (schema.pbtxt, ...).
_PATH_LISTS = {"metadata_files": "metadata file"}
# What a version folder holds without its manifest listing it (sinks/format/layout.py).
_UNLISTED_OURS = frozenset((lay.MANIFEST, lay.FEATURE_SPEC, lay.MARKER))


@dataclasses.dataclass
class ShardCheck:
    """What verify found for one file."""

    path: str
    records: int = 0
    bytes: int = 0
    crc32c: str = ""
    problems: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)  # worth a look, not failing

    @property
    def ok(self) -> bool:
        return not self.problems


class _CrcReader:
    """A read-only file wrapper that keeps the crc32c and size of what was read."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self.crc = 0
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self._handle.read(n)
        self.crc = crc32c.crc32c(data, self.crc)
        self.size += len(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


def check_file(path: str, compression: str = "auto",
               index_lines: list[str] | None = None) -> ShardCheck:
    """Read one file in full: framing, CRCs, record count, whole-file crc32c and size, in
    memory bounded by a few chunks whatever the size of its records.

    Args:
        path: the shard file.
        compression: ``auto`` (from the name), or the compression it was written with.
        index_lines: a list to fill with each record's ``offset length`` line as DALI's
            tfrecord2idx writes it (length including the 16 bytes of framing); None: none.

    Returns:
        The file's ShardCheck (records, bytes, crc32c, problems).
    """
    check = ShardCheck(path)
    try:
        handle = storage.open_read(path)
    except Exception as err:  # missing, permission, transport: reported, not raised
        check.problems.append(f"cannot open: {err}")
        return check
    with handle:
        reader = _CrcReader(handle)
        try:  # records over a chunk pass through their CRC piece by piece, never held whole
            for offset, length, _ in tff.iter_record_spans(reader, compression, path=path,
                                                           max_bytes=tff.CHUNK_SIZE):
                check.records += 1
                if index_lines is not None:
                    index_lines.append(f"{offset} {length + tff.FRAME_OVERHEAD}")
        except tff.CorruptRecordError as err:
            check.problems.append(str(err))
        reader.drain()
    check.bytes, check.crc32c = reader.size, mf.crc32c_b64(reader.crc)
    return check


def manifest_path_at(path: str) -> str | None:
    """The manifest ``path`` names: itself (a ``.json``), a version directory's, or that of
    the version an output root's ``LATEST`` names; None for anything else (a glob).

    Args:
        path: what the user named.

    Returns:
        The manifest's path, or None.
    """
    path = path.rstrip("/")
    if path.endswith(".json"):
        return path
    version = version_at(path)
    return None if version is None else storage.join(version, mf.MANIFEST)


class ManifestError(UserError, ValueError):
    """A manifest that cannot be trusted to describe its version: unreadable or malformed."""


def version_at(path: str) -> str | None:
    """The version directory ``path`` names: itself when it holds a manifest.json (or is
    one), else the version its ``LATEST`` names when it is an output root -- what the
    config's ``output.path`` is; None when it is neither.

    Args:
        path: what the user named.

    Returns:
        The version directory, or None.

    Raises:
        ManifestError: a ``LATEST`` names a version without a manifest.
    """
    path = path.rstrip("/") or "/"
    if path.endswith(".json"):
        path = path.rsplit("/", 1)[0] if "/" in path else "."
    if storage.exists(storage.join(path, mf.MANIFEST)):
        return path
    latest = storage.join(path, lay.LATEST)
    if not storage.exists(latest):
        return None
    version = storage.read_text(latest).strip()
    candidate = storage.join(path, lay.check_name("version", version))
    if storage.exists(storage.join(candidate, mf.MANIFEST)):
        return candidate
    raise ManifestError(f"{latest} names version {version!r}, which has no manifest.json")


def matched_files(path: str, what: str) -> list[str]:
    """The files a glob (or one file's path) matches, folders left out.

    Args:
        path: the glob or path.
        what: what was looked for, named in the error.

    Returns:
        The matched files' paths.

    Raises:
        storage.NoMatch: nothing matched.
    """
    files = [m.path for m in storage.match(path)
             if not (storage.is_local(m.path) and os.path.isdir(m.path))]
    if not files:
        raise storage.NoMatch(f"{path} is neither a version directory (no manifest.json), an "
                              f"output root (no LATEST) nor a glob that matches {what}")
    return files


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise ManifestError(what)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _inside(path: object) -> bool:
    """A relative ``/``-joined path that stays inside the version directory."""
    if not isinstance(path, str):
        return False
    parts = path.split("/")
    return not path.startswith("/") and "://" not in path and ".." not in parts and (
        "" not in parts)


def check_manifest(manifest: object) -> dict:
    """The parts of a manifest verify relies on, checked for shape before any is used.

    A damaged or hand-edited manifest becomes one reported problem instead of a traceback;
    every path it lists must stay inside the version directory (no ``..``, not absolute).

    Args:
        manifest: the parsed manifest.json.

    Returns:
        The manifest, checked.

    Raises:
        ManifestError: a part has the wrong shape or a path leaves the version.
    """
    _expect(isinstance(manifest, dict), "not a JSON object")
    splits = manifest.get("splits")
    _expect(isinstance(splits, dict), "'splits' is not an object")
    for split, info in splits.items():
        _expect(isinstance(info, dict) and isinstance(info.get("shards"), list)
                and _is_count(info.get("records")),
                f"split {split!r} needs 'records' and a list of 'shards'")
        _expect("/" not in split and split not in ("", ".", ".."),
                f"split name {split!r} is not a directory name")
        for shard in info["shards"]:
            _expect(isinstance(shard, dict) and isinstance(shard.get("path"), str)
                    and _is_count(shard.get("records")) and _is_count(shard.get("bytes"))
                    and isinstance(shard.get("crc32c"), str),
                    f"a shard of split {split!r} needs path, records, bytes and crc32c")
            _expect(_inside(shard["path"]),
                    f"shard path {shard['path']!r} leaves the version directory")
            index = shard.get("index")
            _expect(index is None or _inside(index),
                    f"index path {index!r} leaves the version directory")
    dead = manifest.get("dead_letter", [])
    _expect(isinstance(dead, list) and all(isinstance(d, dict) for d in dead),
            "'dead_letter' must be a list of objects")
    for entry in dead:
        _expect(_inside(entry.get("path")),
                f"dead letter path {entry.get('path')!r} leaves the version directory")
    statistics = manifest.get("statistics", {})
    _expect(isinstance(statistics, dict) and all(
        isinstance(e, dict) and _inside(e.get("path")) and _is_count(e.get("bytes"))
        and isinstance(e.get("crc32c"), str) for e in statistics.values()),
        "'statistics' must map splits to {path, bytes, crc32c} inside the version directory")
    report = manifest.get("report")
    _expect(report is None or (isinstance(report, dict) and _inside(report.get("path"))
                               and _is_count(report.get("bytes"))
                               and isinstance(report.get("crc32c"), str)),
            "'report' must be {path, bytes, crc32c} inside the version directory")
    for key in _PATH_LISTS:
        paths = manifest.get(key, [])
        _expect(isinstance(paths, list), f"{key!r} must be a list of paths")
        for path in paths:
            _expect(_inside(path), f"{key} path {path!r} leaves the version directory")
    compression = manifest.get("compression", "auto")
    _expect(compression == "auto" or compression in tff.COMPRESSIONS,
            f"unknown compression {compression!r}")
    counts = manifest.get("counts", {})
    _expect(isinstance(counts, dict) and all(
        _is_count(v) or (k == "unread" and isinstance(v, dict)
                         and all(_is_count(n) for n in v.values()))
        for k, v in counts.items()), "'counts' must map names to record counts")
    return manifest


def _check_index(path: str, present: bool, expected: list[str], shard_ok: bool) -> list[str]:
    """Problems of an index sidecar: missing, or lines that do not address the shard's
    records (compared only when the shard itself read cleanly)."""
    if not present:
        return [f"index {path} is missing"]
    try:
        got = storage.read_text(path).splitlines()
    except (OSError, UnicodeDecodeError) as err:
        return [f"index {path} is unreadable: {err}"]
    if not shard_ok or got == expected:
        return []
    if len(got) != len(expected):
        return [f"index {path} has {len(got)} lines for {len(expected)} records"]
    first = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
    return [f"index {path} line {first + 1} is {got[first]!r}, the record is at "
            f"{expected[first]!r}"]


def _relative_files(version_dir: str) -> set[str]:
    """Every file below ``version_dir`` (one listing), as ``/``-joined relative paths."""
    files = storage.list_files(version_dir)
    if storage.is_local(version_dir):
        return {os.path.relpath(f, version_dir).replace(os.sep, "/") for f in files}
    base = version_dir.rstrip("/") + "/"
    return {f[len(base):] for f in files if f.startswith(base)}


def _other_listed(manifest: dict) -> Iterator[tuple[str, str]]:
    """(relative path, what it is) of the files a manifest lists besides shards and their
    index sidecars: dead letters and metadata files."""
    for entry in manifest.get("dead_letter", []):
        yield entry["path"], "dead-letter file"
    for key, what in _PATH_LISTS.items():
        for path in manifest.get(key, []):
            yield path, what
    gate = manifest.get("gate")
    if isinstance(gate, dict) and _inside(gate.get("path")):
        yield gate["path"], "drift gate's anomalies file"


def _tfrecord_evidence(path: str) -> str:
    """Why the file at ``path`` is a TFRecord file ("its name", "its first bytes"), or "".

    Its first bytes are read, never the whole file: a frame whose CRC matches, as they are or
    once the start of a GZIP or ZLIB stream is inflated. A file that cannot be opened is judged
    by its name alone."""
    if tff.named_like_tfrecord(path):
        return "by its name"
    try:
        with storage.open_read(path) as handle:
            head = handle.read(tff.SNIFF_BYTES)
    except OSError:
        return ""
    return "by its first bytes" if tff.starts_like_tfrecord(head) else ""


def _unlisted(version_dir: str, paths: list[str], splits: dict) -> Iterator[ShardCheck]:
    """One finding per file the manifest does not list (one for a whole ``.staging/``).

    A TFRecord file anywhere (the version root, ``index/``, a folder of its own) is a problem
    like any file in a split folder: a reader's glob (``*/*.tfrecord``, ``**``) may read it as
    data. Other files are warnings. The staging folder stays one warning: it is the build's
    own, holds its parts until the commit removes it, and the next build cleans it."""
    staging = [p for p in paths if p.startswith(lay.STAGING + "/")]
    if staging:
        framed = sum(tff.named_like_tfrecord(p) for p in staging)
        held = f", {framed} of them TFRecord parts" if framed else ""
        yield ShardCheck(storage.join(version_dir, lay.STAGING), warnings=[
            f"a build's staging folder ({len(staging)} file(s){held}): the build is still "
            "writing, or did not finish removing it"])
    for path in paths:
        folder = path.split("/", 1)[0] if "/" in path else None
        if folder == lay.STAGING:
            continue
        full = storage.join(version_dir, path)
        if folder in splits:
            yield ShardCheck(full, problems=[
                f"extra: a file in split folder {folder!r} the manifest does not list "
                f"(a {folder}/* glob reads it as data)"])
        elif evidence := _tfrecord_evidence(full):
            yield ShardCheck(full, problems=[
                f"extra: a TFRecord file ({evidence}) the manifest does not list (a reader's "
                "glob may read it as data)"])
        else:
            yield ShardCheck(full, warnings=[
                "not listed in the manifest (no reader of a split reads it)"])


def _check_listed_file(path: str, entry: dict, what: str) -> tuple[ShardCheck, bytes]:
    """A file the manifest lists with its size and crc32c (statistics, the report) against
    that entry; returns the check and the bytes read."""
    check = ShardCheck(path)
    try:
        with storage.open_read(path) as handle:
            data = handle.read()
    except OSError as err:
        check.problems.append(f"{what} unreadable: {err}")
        return check, b""
    check.bytes, check.crc32c = len(data), mf.crc32c_b64(crc32c.crc32c(data))
    if check.bytes != entry["bytes"]:
        check.problems.append(f"{check.bytes} bytes, the manifest says {entry['bytes']}")
    if check.crc32c != entry["crc32c"]:
        check.problems.append(f"crc32c {check.crc32c}, the manifest says {entry['crc32c']}")
    return check, data


def _check_statistics(path: str, entry: dict, split: str, records: int | None) -> ShardCheck:
    """A split's statistics file against its manifest entry: size, crc32c, and a
    ``DatasetFeatureStatisticsList`` of one dataset counting the split's records."""
    check, data = _check_listed_file(path, entry, "statistics file")
    if check.problems:
        return check
    try:
        datasets = decode_statistics_list(data)
    except ValueError as err:
        check.problems.append(f"not a DatasetFeatureStatisticsList: {err}")
        return check
    found = [d.get("num_examples", 0) for d in datasets]
    if records is not None and found != [records]:
        check.problems.append(f"statistics of {found} Examples, split {split!r} holds "
                              f"{records} records")
    return check


def _verify_manifest(manifest_path: str) -> Iterator[ShardCheck]:
    version_dir = manifest_path.rsplit("/", 1)[0] if "/" in manifest_path else "."
    try:
        manifest = check_manifest(json.loads(storage.read_text(manifest_path)))
    except (ManifestError, ValueError) as err:  # JSONDecodeError, UnicodeDecodeError too
        yield ShardCheck(manifest_path, problems=[f"unusable manifest: {err}"])
        return
    on_disk = _relative_files(version_dir)
    listed = set(_UNLISTED_OURS)
    written = 0
    for split, info in sorted(manifest["splits"].items()):
        for shard in info["shards"]:
            path = storage.join(version_dir, shard["path"])
            index = shard.get("index")
            listed.update((shard["path"], index) if isinstance(index, str) else (shard["path"],))
            if shard["path"] not in on_disk:
                yield ShardCheck(path, problems=["missing: listed in the manifest, not on disk"])
                continue
            lines: list[str] | None = [] if isinstance(index, str) else None
            check = check_file(path, manifest.get("compression", "auto"), lines)
            if lines is not None:
                check.problems += _check_index(storage.join(version_dir, index),
                                               index in on_disk, lines, check.ok)
            if check.records != shard["records"]:
                check.problems.append(f"{check.records} records, the manifest says "
                                      f"{shard['records']}")
            if check.bytes != shard["bytes"]:
                check.problems.append(f"{check.bytes} bytes, the manifest says {shard['bytes']}")
            if check.crc32c != shard["crc32c"]:
                check.problems.append(f"crc32c {check.crc32c}, the manifest says "
                                      f"{shard['crc32c']}")
            written += check.records
            yield check
        if info["records"] != sum(s["records"] for s in info["shards"]):
            yield ShardCheck(storage.join(version_dir, split),
                             problems=["the split's record total disagrees with its shards"])
    for split, entry in sorted(manifest.get("statistics", {}).items()):
        listed.add(entry["path"])
        path = storage.join(version_dir, entry["path"])
        if entry["path"] not in on_disk:
            yield ShardCheck(path, problems=["missing: a statistics file listed in the "
                                             "manifest, not on disk"])
            continue
        records = manifest["splits"].get(split, {}).get("records")
        yield _check_statistics(path, entry, split, records)
    report = manifest.get("report")
    if isinstance(report, dict):
        listed.add(report["path"])
        path = storage.join(version_dir, report["path"])
        if report["path"] not in on_disk:
            yield ShardCheck(path, problems=["missing: the report listed in the manifest, "
                                             "not on disk"])
        else:
            yield _check_listed_file(path, report, "report")[0]
    for path, what in _other_listed(manifest):
        listed.add(path)
        if path not in on_disk:
            yield ShardCheck(storage.join(version_dir, path),
                             problems=[f"missing: a {what} listed in the manifest, not on disk"])
    yield from _unlisted(version_dir, sorted(on_disk - listed), manifest["splits"])
    counts = manifest.get("counts", {})
    if counts and counts.get("written") != written:
        yield ShardCheck(manifest_path, problems=[
            f"counts.written is {counts.get('written')}, the shards hold {written}"])
    if counts and counts.get("read") != counts.get("written", 0) + counts.get("rejected", 0):
        yield ShardCheck(manifest_path, problems=["counts: read != written + rejected"])


def verify_path(path: str) -> list[ShardCheck]:
    """Check a version directory, a manifest.json, an output root (the version its LATEST
    names), or a glob of shard files.

    Args:
        path: what to check.

    Returns:
        One ShardCheck per file (shards, and for a version its other listed files).
    """
    manifest_path = manifest_path_at(path)
    if manifest_path is not None:
        return list(_verify_manifest(manifest_path))
    return [check_file(f) for f in matched_files(path, "files")]


def format_table(checks: list[ShardCheck]) -> str:
    """One line per file (records and bytes ``-`` for a file that was not read), then totals.

    Args:
        checks: :func:`verify_path`'s result.

    Returns:
        The table as text.
    """
    width = max([len(c.path) for c in checks] + [4])
    lines = [f"{'file':<{width}}  {'records':>9}  {'bytes':>12}  {'crc32c':<8}  status"]
    for c in checks:
        status = ("; ".join(c.problems) if c.problems else
                  "warning: " + "; ".join(c.warnings) if c.warnings else "ok")
        records, size = (c.records, c.bytes) if c.crc32c else ("-", "-")
        lines.append(f"{c.path:<{width}}  {records:>9}  {size:>12}  {c.crc32c:<8}  {status}")
    bad = sum(not c.ok for c in checks)
    warned = sum(c.ok and bool(c.warnings) for c in checks)
    lines.append(f"{len(checks)} file(s) checked, {sum(c.records for c in checks)} records, "
                 f"{bad} with problems" + (f", {warned} with warnings" if warned else ""))
    return "\n".join(lines)
