"""The output layout of a data set, and the rules for the names that go into it.

```
<root>/
  LATEST                  name of the newest committed version, written last
  .lease                  held by the build that is writing now (sinks/lease.py)
  <version>/
    .beam-tfrecords-build ownership marker: written first, exclusively, with the build's id
    .staging/             parts, progress files, staged dead letters (removed by the commit):
      <split>/  shuffle/<split>/  dead_letter/  early_stop/  .progress/  publishing
    manifest.json         the commit point
    feature_spec.json
    schema.pbtxt          tensorflow_metadata Schema (TFX, TFDV, Ray)
    features.json         TensorFlow Datasets' features and splits, when TFDS can load it
    dataset_info.json
    croissant.json        its Croissant 1.1 description (MLCommons)
    statistics/Split-<split>/FeatureStats.pb                TFDV statistics, as TFX lays them out
    anomalies.json        the drift gate's findings, when the gate ran
    report.html           the version's report, compared with the version LATEST named before
    <split>/<name>-00000-of-00007.tfrecord[.gz|.deflate]   shards only, nothing else
    index/<split>/<shard file name>.index                   index sidecars, when written
    dead_letter/rejected-00000-of-00001.jsonl
  .failed/<version>-<build>/   a failed build's dead letters and failure.json, kept
```

Names are checked whole (``re.fullmatch``, never ``match``: ``$`` also matches before a
trailing newline) before anything runs, because each one becomes a path segment: a name with
``/`` or a newline, ``.``/``..`` or one of the layout's own names would write somewhere else,
or make the location unreadable for every later build. Names that come from the data (image
split folders, manifest cells, a record's split field) get the same check as configured ones.
And every path a build writes inside a version folder is made by :func:`resolve_in_version`,
which refuses -- before the write -- one that would leave the folder or put a split where the
layout keeps its own files. Pure: no Beam, no I/O.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re

from beam_tfrecords.errors import UserError

__all__ = [
    "ANOMALIES",
    "CROISSANT",
    "DEAD_LETTER",
    "FAILED",
    "FAILURE",
    "FEATURE_SPEC",
    "METADATA_FILES",
    "SCHEMA",
    "TFDS_FEATURES",
    "TFDS_INFO",
    "INDEX",
    "INDEX_SUFFIX",
    "LATEST",
    "LEASE",
    "MANIFEST",
    "MARKER",
    "EARLY_STOP",
    "PROGRESS",
    "PUBLISHING",
    "REPORT",
    "RESERVED",
    "SHUFFLE",
    "STAGING",
    "STATISTICS",
    "STATISTICS_FILE",
    "UnsafePath",
    "Layout",
    "InvalidName",
    "check_name",
    "index_path",
    "resolve_in_version",
    "statistics_path",
]

LATEST = "LATEST"
LEASE = ".lease"
MARKER = ".beam-tfrecords-build"
STAGING = ".staging"
MANIFEST = "manifest.json"
FEATURE_SPEC = "feature_spec.json"
# What other readers need beside the shards, at the version root (listed in the manifest).
SCHEMA = "schema.pbtxt"
TFDS_FEATURES = "features.json"
TFDS_INFO = "dataset_info.json"
CROISSANT = "croissant.json"  # the Croissant 1.1 description (sinks/format/croissant.py)
METADATA_FILES = (SCHEMA, TFDS_FEATURES, TFDS_INFO, CROISSANT)
DEAD_LETTER = "dead_letter"
# Per-split statistics in TFX's layout (StatisticsGen's artifact): TFDV, TFX and TFDS tools
# open ``statistics/Split-<split>/FeatureStats.pb`` as it is.
STATISTICS = "statistics"
STATISTICS_FILE = "FeatureStats.pb"
ANOMALIES = "anomalies.json"  # the drift gate's findings against the previous version
REPORT = "report.html"  # the version's self-contained report (sinks/format/report_html.py)
# Index sidecars live in a tree of their own, so that ``<split>/*`` matches shards only (Beam's
# ReadFromTFRecord and tf.data users glob split folders).
INDEX = "index"
INDEX_SUFFIX = ".index"
FAILURE = "failure.json"
FAILED = ".failed"
# Inside ``.staging/``, beside the splits' parts: the shuffle's sorted runs, a worker's note
# that it stopped the build early, the writers' progress files, and the flag that says the
# commit is under way.
SHUFFLE = "shuffle"
EARLY_STOP = "early_stop"
PROGRESS = ".progress"
PUBLISHING = "publishing"
# Every name the layout gives a meaning to, at the root, inside a version folder or inside its
# staging folder; none may be a version, data set or split name (compared case-insensitively:
# on case-insensitive filesystems ``latest`` is ``LATEST``).
RESERVED = frozenset(n.lower() for n in (LATEST, LEASE, MARKER, STAGING, MANIFEST,
                                         FEATURE_SPEC, DEAD_LETTER, FAILURE, STATISTICS,
                                         STATISTICS_FILE, ANOMALIES, REPORT, FAILED, INDEX,
                                         *METADATA_FILES, SHUFFLE, EARLY_STOP, PROGRESS,
                                         PUBLISHING))
# One path segment of a file or folder the build names itself: a shard, a part, a uuid.
_SEGMENT = re.compile(r"[A-Za-z0-9_.-]{1,255}")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_HINTS = {
    "version": "letters, digits, '_', '-' and '.', starting with a letter, digit or '_'",
    "data set": "letters, digits, '_', '-' and '.', starting with a letter, digit or '_'",
    "split": "letters, digits, '_', '-' and '.', starting with a letter, digit or '_'",
}


class InvalidName(UserError, ValueError):
    """A version, data set or split name the layout cannot hold; the message says why."""


class UnsafePath(InvalidName):
    """A path the build was about to write that would leave its folder, or put a split where
    the layout keeps its own files; raised before anything is written."""


def check_name(kind: str, name: object) -> str:
    """``name`` unchanged when it can be a path segment of the layout, else InvalidName.

    ``kind`` is what the name is for ("version", "data set", "split"), used in the message.

    Args:
        kind: what the name is for, for the message.
        name: the candidate.

    Returns:
        ``name``; InvalidName saying why it cannot be a path segment.
    """
    if not isinstance(name, str):
        raise InvalidName(f"{kind} name {name!r}: must be a string")
    if not _NAME.fullmatch(name):
        why = ("is empty" if not name else
               "is longer than 128 characters" if len(name) > 128 else
               f"may only hold {_HINTS.get(kind, _HINTS['version'])}")
        raise InvalidName(f"{kind} name {name!r} {why}")
    if name in (".", "..") or name.lower() in RESERVED:
        raise InvalidName(f"{kind} name {name!r} is reserved by the output layout "
                         f"({', '.join(sorted(RESERVED))})")
    return name


def resolve_in_version(folder: str, *names: str, within: tuple[str, ...] = (),
                       split: str | None = None) -> str:
    """``folder/<within...>/<split>/<names...>``: the one way a build names what it writes.

    ``folder`` is a version folder, or a folder of ours inside it (staging) or beside it
    (``.failed/...``). ``within`` are the layout's own folder names, ``split`` a split name
    (checked by :func:`check_name`), ``names`` single segments the build made itself. Without
    ``within`` or ``split`` the first name must be one of the layout's own, so the folder only
    ever holds our names and split folders. Anything else -- ``..``, an absolute or empty part,
    a separator, NUL or newline in a name, a reserved name where a split goes -- is an
    :class:`UnsafePath` before the write, never a file somewhere else.

    Args:
        folder: a version folder, or a folder of ours inside or beside it.
        *names: single path segments the build made.
        within: the layout's own folder names, outermost first.
        split: a split name, checked.

    Returns:
        The ``/``-joined path.
    """
    shown = "/".join(map(str, (*within, *([split] if split is not None else []), *names)))
    if not isinstance(folder, str) or not folder:
        raise UnsafePath(f"refusing to write {shown!r}: no folder to write it in")
    for name in within:
        if not isinstance(name, str) or name.lower() not in RESERVED:
            raise UnsafePath(f"refusing to write {shown!r} below {folder!r}: {name!r} is not "
                             "a folder of the output layout")
    if split is not None:
        try:
            check_name("split", split)
        except InvalidName as err:
            raise UnsafePath(f"refusing to write below {folder!r}: {err}") from None
    if not names and split is None:
        raise UnsafePath(f"refusing to write {folder!r} itself")
    for name in names:
        if not isinstance(name, str) or not _SEGMENT.fullmatch(name) or name in (".", ".."):
            raise UnsafePath(f"refusing to write {shown!r} below {folder!r}: {name!r} is not "
                             "one path segment of letters, digits, '_', '-' and '.'")
    if not within and split is None and names[0].lower() not in RESERVED:
        raise UnsafePath(f"refusing to write {shown!r} below {folder!r}: {names[0]!r} is "
                         "neither a name of the output layout nor in a split folder")
    parts = (*within, *([split] if split is not None else []), *names)
    return "/".join((folder.rstrip("/"), *parts))  # "/" stays the root: "" + "/x"


def index_path(shard_path: str) -> str:
    """The index sidecar of the shard at ``<version>/<split>/<file>``:
    ``<version>/index/<split>/<file>.index`` (``/``-joined, local or ``gs://``).

    Args:
        shard_path: a final shard's path.

    Returns:
        Its index sidecar's path.
    """
    version_dir, split, file = shard_path.rsplit("/", 2)
    return resolve_in_version(version_dir, file + INDEX_SUFFIX, within=(INDEX,), split=split)


def statistics_path(version_dir: str, split: str) -> str:
    """``<version>/statistics/Split-<split>/FeatureStats.pb``: a split's statistics.

    Args:
        version_dir: the version folder (local path or URL).
        split: the split's name; must be a valid name.

    Returns:
        The path of the split's ``FeatureStats.pb``.
    """
    check_name("split", split)
    return resolve_in_version(version_dir, f"Split-{split}", STATISTICS_FILE,
                              within=(STATISTICS,))


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where one build writes: ``<root>/<version>/`` with staging and the marker inside it.

    Paths are joined with ``/``, which every Beam filesystem we support (local, ``gs://``)
    accepts; ``root`` is kept as given, less a trailing ``/``.
    """

    root: str
    version: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", self.root.rstrip("/") or "/")
        check_name("version", self.version)

    def _join(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts) if "://" not in self.root else "/".join(
            (self.root, *parts))

    @property
    def version_dir(self) -> str:
        return self._join(self.version)

    @property
    def staging(self) -> str:
        return resolve_in_version(self.version_dir, STAGING)

    @property
    def marker(self) -> str:
        return resolve_in_version(self.version_dir, MARKER)

    @property
    def manifest(self) -> str:
        return resolve_in_version(self.version_dir, MANIFEST)

    @property
    def feature_spec(self) -> str:
        return resolve_in_version(self.version_dir, FEATURE_SPEC)

    @property
    def dead_letter_dir(self) -> str:
        return resolve_in_version(self.version_dir, DEAD_LETTER)

    def failed_dir(self, build_id: str) -> str:
        """Where a failed build keeps its dead letters and ``failure.json``: outside the
        version folder, which the next build may reuse or clean.

        Args:
            build_id: the failed build's id; its first 8 characters name the folder.

        Returns:
            The folder's path.
        """
        return self._join(FAILED, f"{self.version}-{build_id[:8]}")

    @property
    def latest(self) -> str:
        return self._join(LATEST)

    @property
    def lease(self) -> str:
        return self._join(LEASE)
