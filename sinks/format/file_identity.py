"""What an input file was when the build listed it, and how a later look at it differs.

A build lists its inputs once, at launch: that listing is the input fingerprint in the
manifest and the promise of what the version holds. Two things can break the promise:

* the listing holds something that is not a regular file -- a FIFO (opening it waits for a
  writer that never comes), a character device such as ``/dev/zero`` (it never ends), a block
  device, a socket, a directory -- which no reader may open (:func:`not_a_file`);
* a file changes between the listing and the end of its reading -- truncated, appended to,
  rewritten in place or replaced by another file under the same name -- so the records read
  are not those of the file listed (:func:`change`).

A :class:`FileIdentity` travels with each file's work item to whichever worker reads it, and
the worker compares it with what it finds once the file is read: locally the device, inode,
size, modification and status-change times (nanoseconds); on Cloud Storage the object's
generation and size, which change with every write. What no such check can see: a rewrite
that keeps the size, the inode and both timestamps -- on a filesystem whose timestamps are
coarse (a whole second, or two on FAT) and that keeps no status-change time, a same-size
rewrite within one tick of the clock looks like the file listed.

Pure: no Beam, no I/O (the stat results come from runtime/storage.py).
"""

from __future__ import annotations

import dataclasses
import stat

__all__ = ["MISSING", "REGULAR", "FileIdentity", "change", "changed_region", "kind_of_mode",
           "not_a_file"]

REGULAR = "file"
MISSING = "missing"  # the kind of a file that is gone
_KINDS = ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO (named pipe)"),
          (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
          (stat.S_ISSOCK, "socket"))


@dataclasses.dataclass(frozen=True)
class FileIdentity:
    """One input file as a listing saw it. ``kind`` is :data:`REGULAR` or what else the path
    is (:func:`kind_of_mode`); a field a filesystem does not report is None and is not
    compared."""

    path: str
    size: int
    kind: str = REGULAR
    device: int | None = None
    inode: int | None = None
    mtime_ns: int | None = None
    ctime_ns: int | None = None
    generation: int | None = None  # Cloud Storage: changes with every write of the object


def kind_of_mode(mode: int) -> str:
    """``st_mode`` as :data:`REGULAR` or the name of what else it is ("FIFO (named pipe)",
    "character device", ...).

    Args:
        mode: an ``os.stat_result.st_mode``.

    Returns:
        :data:`REGULAR`, or the kind of special file.
    """
    if stat.S_ISREG(mode):
        return REGULAR
    for test, name in _KINDS:
        if test(mode):
            return name
    return "special file"


def not_a_file(identity: FileIdentity) -> str | None:
    """Why the path must never be opened as input (it is not a regular file), or None.

    Args:
        identity: the file as listed.

    Returns:
        One line naming the path, its kind and why it is not read; None for a regular file.
    """
    if identity.kind == REGULAR:
        return None
    what = {
        "FIFO (named pipe)": "opening it would wait for a writer",
        "character device": "a device such as /dev/zero never ends",
        "block device": "a disk is not a data file",
        "socket": "a socket is not a data file",
    }.get(identity.kind, "only regular files are read")
    return f"{identity.path} is a {identity.kind}, not a regular file; not opened ({what})"


def change(listed: FileIdentity, seen: FileIdentity) -> str | None:
    """How ``seen`` (the file as found after reading it) differs from ``listed`` (the file
    the build listed), as a phrase ("shrank from 100 to 40 bytes", "was replaced ..."), or
    None when every field both report agrees.

    Args:
        listed: the file's identity when the build listed its inputs.
        seen: its identity after it was read.

    Returns:
        The difference as a phrase, or None.
    """
    found = _difference(listed, seen)
    return None if found is None else found[1]


def changed_region(listed: FileIdentity, seen: FileIdentity) -> tuple[int, int]:
    """``(offset, bytes)`` of a changed file that the build cannot vouch for: the part a
    truncation took away; for any other change, the whole file (what was read may mix the
    old content with the new).

    Args:
        listed: the file's identity when the build listed its inputs.
        seen: its identity after it was read.

    Returns:
        ``(offset, bytes)`` of the region whose records cannot be trusted.
    """
    found = _difference(listed, seen)
    if found is not None and found[0] == "shrank":
        return seen.size, listed.size - seen.size
    return 0, max(listed.size, seen.size)


def _difference(listed: FileIdentity, seen: FileIdentity) -> tuple[str, str] | None:
    """``(what, phrase)``: ``what`` is "replaced", "shrank", "grew" or "rewritten"."""
    def differ(a: int | None, b: int | None) -> bool:
        return a is not None and b is not None and a != b

    sizes = f"{listed.size} -> {seen.size} bytes"
    if seen.kind == MISSING:
        return "replaced", "was deleted"
    if seen.kind != listed.kind:
        return "replaced", f"was replaced by a {seen.kind}"
    if differ(listed.generation, seen.generation):
        return "replaced", (f"was replaced (object generation {listed.generation} -> "
                            f"{seen.generation}, {sizes})")
    if differ(listed.device, seen.device) or differ(listed.inode, seen.inode):
        return "replaced", (f"was replaced by another file (inode {listed.inode} -> "
                            f"{seen.inode}, {sizes})")
    if seen.size < listed.size:
        return "shrank", f"shrank from {listed.size} to {seen.size} bytes"
    if seen.size > listed.size:
        return "grew", f"grew from {listed.size} to {seen.size} bytes"
    if differ(listed.mtime_ns, seen.mtime_ns) or differ(listed.ctime_ns, seen.ctime_ns):
        return "rewritten", (f"was rewritten in place (same size, {seen.size} bytes; its "
                             "timestamps changed)")
    return None
