"""Checks on where a build reads and writes, made before any pipeline starts.

Three mistakes would destroy data or build garbage, and none is caught by the config alone:

- an output location that *is* the input, or that the input glob would match (a rebuild
  would read its own shards), or that *contains* the inputs (cleaning up after a failed
  build would delete them);
- ``..`` in a Cloud Storage path: object names are never normalized, so ``gs://b/a/../x``
  names an object under a literal ``..`` folder, not ``gs://b/x``;
- a local output that cannot hold a data set: a file, a path through a file, or a folder
  whose ``LATEST`` or ``.lease`` is a folder (:func:`check_output_kind`) -- found at the
  first write otherwise, as a traceback after the lease was taken or a whole build was run.

What in a non-empty output location is ours is decided by content (markers and manifests),
never by names, in sinks/ownership.py.

Pure: paths and listings in, a verdict or :class:`OutputGuardError` out; the caller lists.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Callable, Sequence

from beam_tfrecords.errors import UserError
from beam_tfrecords.sinks.format.layout import LATEST, LEASE

__all__ = ["FILE", "FOLDER", "OutputGuardError", "SPECIAL", "check_locations",
           "check_output_kind"]

# What ``kind`` says of a path (None: nothing there). SPECIAL: a FIFO, socket, device or
# broken symbolic link -- opening a FIFO named LATEST would wait forever.
FOLDER, FILE, SPECIAL = "folder", "file", "FIFO, socket, device or broken link"

_GCS = "gs://"
_WILDCARD = re.compile(r"[*?\[]")


class OutputGuardError(UserError, ValueError):
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
    files this build will write, to test against the glob -- e.g. a shard, the manifest.

    Args:
        input_pattern: the input's path or glob.
        output_root: the output root.
        sample_outputs: files the build will write, relative to the output root.

    Raises:
        OutputGuardError: the input and the output overlap, or a ``gs://`` path holds ``.``/``..``.
    """
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


def check_output_kind(output_root: str, kind: Callable[[str], str | None]) -> None:
    """Refuse a local output root that is not a folder or lies inside a file, and one whose
    ``LATEST`` or ``.lease`` -- files we read and write there -- is not a regular file.
    ``kind(path)``: :data:`FOLDER`, :data:`FILE`, :data:`SPECIAL` or None. Cloud Storage
    has no such states (an object and a "folder" of the same name coexist), so only local
    roots are judged.

    Args:
        output_root: the output root.
        kind: tells what a local path is.

    Raises:
        OutputGuardError: the root or one of those files is of the wrong kind.
    """
    if "://" in output_root:
        return
    root = _normalize(output_root)
    found = kind(root)
    if found in (FILE, SPECIAL):
        raise OutputGuardError(f"the output {output_root!r} is a {found}, not a folder; give "
                               "a folder (it is created when absent)")
    if found is None:
        parent = os.path.dirname(root)
        while parent and parent != os.path.dirname(parent):
            above = kind(parent)
            if above in (FILE, SPECIAL):
                raise OutputGuardError(f"the output {output_root!r} lies inside {parent!r}, "
                                       f"which is a {above}, not a folder")
            if above == FOLDER:
                break
            parent = os.path.dirname(parent)
        return
    for name in (LATEST, LEASE):
        inside = kind(os.path.join(root, name))
        if inside in (FOLDER, SPECIAL):
            raise OutputGuardError(
                f"{os.path.join(output_root, name)!r} is a {inside}; a build reads and writes "
                "a file by that name there -- move it away, or choose another output")
