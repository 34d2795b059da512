"""Checks on where a build reads and writes, made before any pipeline starts.

Three mistakes would destroy data or build garbage, and none is caught by the config alone:

- an output location that *is* the input, or that the input glob would match (a rebuild
  would read its own shards), or that *contains* the inputs (cleaning up after a failed
  build would delete them);
- ``..`` in a Cloud Storage path: object names are never normalized, so ``gs://b/a/../x``
  names an object under a literal ``..`` folder, not ``gs://b/x``;
- writing into a non-empty location that is not ours -- files that are neither ``LATEST``,
  nor a committed version (``<v>/manifest.json``), nor the leftovers of one of our builds
  (``<v>/.staging/``, or what a cut-short retention leaves). Without an explicit flag that
  is refused; with it, the build writes beside them and never deletes them.

Pure: paths and listings in, a verdict or :class:`OutputGuardError` out; the caller lists.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
from collections.abc import Sequence

__all__ = [
    "OutputGuardError",
    "OutputState",
    "check_locations",
    "check_output_state",
    "classify_output",
]

_GCS = "gs://"
_WILDCARD = re.compile(r"[*?\[]")
LATEST, MANIFEST, STAGING = "LATEST", "manifest.json", ".staging"
# What a version folder of ours holds once its manifest is gone (a retention cut short).
_OUR_FILES = re.compile(r"(feature_spec\.json|[^/]+/[^/]+-\d{5}-of-\d{5}\.tfrecord"
                        r"(\.gz|\.zlib)?(\.index)?|dead_letter/rejected-\d{5}-of-\d{5}\.jsonl)\Z")


class OutputGuardError(ValueError):
    """A build that must not start: the message names both paths and what to do instead."""


def _normalize(path: str) -> str:
    """Absolute and normalized for local paths; gs:// paths as given, without a trailing /."""
    if "://" in path:
        return path.rstrip("/")
    return os.path.normpath(os.path.abspath(path))


def _static_dir(pattern: str) -> str:
    """The directory a glob starts from: everything before the first wildcard's segment; the
    pattern itself when it has no wildcard (a file, or a folder of images)."""
    match = _WILDCARD.search(pattern)
    if match is None:
        return pattern
    return pattern[:match.start()].rsplit("/", 1)[0] if "/" in pattern[:match.start()] else ""


def _glob_regex(pattern: str) -> re.Pattern:
    """Beam-style glob semantics: ``**`` crosses folders, ``*`` and ``?`` do not."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1:end].replace("\\", "\\\\")
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def check_locations(input_pattern: str, output_root: str,
                    sample_outputs: Sequence[str] = ()) -> None:
    """Refuse an output that is the input, is matched by the input glob, or holds the inputs,
    and ``..`` in gs:// paths. ``sample_outputs``: names (relative to the output root) of
    files this build will write, to test against the glob -- e.g. a shard, the manifest."""
    for what, path in (("input", input_pattern), ("output", output_root)):
        if path.startswith(_GCS) and any(part in (".", "..") for part in
                                         path[len(_GCS):].split("/")):
            raise OutputGuardError(
                f"{what} path {path!r} has a '.' or '..' segment; Cloud Storage names are not "
                "normalized, so it would not mean what it seems -- write the path out in full")
    if "://" in input_pattern and "://" in output_root and (
            input_pattern.split("://", 1)[0] != output_root.split("://", 1)[0]):
        return  # different filesystems cannot overlap
    if ("://" in input_pattern) != ("://" in output_root):
        return
    pattern, root = _normalize(input_pattern), _normalize(output_root)
    base = _normalize(_static_dir(pattern)) if _static_dir(pattern) else ""
    if root == pattern or root == base:
        raise OutputGuardError(
            f"the output {output_root!r} is the input {input_pattern!r}; choose an output "
            "location outside the inputs")
    if base and _inside(base, root):
        raise OutputGuardError(
            f"the inputs {input_pattern!r} lie inside the output {output_root!r}: cleaning up "
            "after a failed build could delete them; choose an output location of its own")
    if _WILDCARD.search(pattern) is None:
        if _inside(root, pattern):  # a folder source (images) read recursively
            raise OutputGuardError(
                f"the output {output_root!r} is inside the input folder {input_pattern!r}; "
                "a rebuild would read its own output")
        return
    regex = _glob_regex(pattern)
    probes = [root, *(posixpath.join(root, name) for name in
                      (LATEST, *sample_outputs))]
    hit = next((p for p in probes if regex.match(p)), None)
    if hit is not None:
        raise OutputGuardError(
            f"the input glob {input_pattern!r} matches the output ({hit!r}); a rebuild would "
            "read its own output -- choose an output location the glob cannot match")


@dataclasses.dataclass(frozen=True)
class OutputState:
    """What an output root holds, by its top-level entries."""

    latest: bool = False
    committed: tuple[str, ...] = ()  # version folders with a manifest
    leftovers: tuple[str, ...] = ()  # our unfinished builds (.staging/) or half-deleted ones
    foreign: tuple[str, ...] = ()  # everything else

    @property
    def ours(self) -> bool:
        return not self.foreign


def classify_output(root: str, files: Sequence[str]) -> OutputState:
    """Sort the files below ``root`` (full paths, as storage.list_files gives) into ours and
    not ours, by top-level entry."""
    prefix = root.rstrip("/") + "/"
    tops: dict[str, set[str]] = {}
    loose: list[str] = []
    latest = False
    for path in files:
        rest = path[len(prefix):] if path.startswith(prefix) else path
        head, sep, below = rest.partition("/")
        if not sep:
            if head == LATEST:
                latest = True
            else:
                loose.append(head)
            continue
        tops.setdefault(head, set()).add(below)
    committed, leftovers, foreign = [], [], list(loose)
    for name, inside in sorted(tops.items()):
        if MANIFEST in inside:
            committed.append(name)
        elif any(p.startswith(STAGING + "/") for p in inside) or all(
                _OUR_FILES.match(p) for p in inside):
            leftovers.append(name)
        else:
            foreign.append(name + "/")
    return OutputState(latest, tuple(committed), tuple(leftovers), tuple(sorted(foreign)))


def check_output_state(root: str, files: Sequence[str], allow_non_empty: bool) -> OutputState:
    """Refuse a root holding files that are not ours, unless ``allow_non_empty``."""
    state = classify_output(root, files)
    if state.foreign and not allow_non_empty:
        shown = ", ".join(state.foreign[:5]) + (", ..." if len(state.foreign) > 5 else "")
        raise OutputGuardError(
            f"the output {root!r} is not empty and does not look like a beam-tfrecords output "
            f"(found {shown}); choose an empty location, or pass --allow-non-empty-output to "
            "write beside those files (they are never deleted)")
    return state
