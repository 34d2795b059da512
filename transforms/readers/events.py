"""What a source reader says about one file, as named types instead of positional tuples.

A reader turns a file into a stream of *events* that :func:`framework.read_outputs` turns into
the reader's outputs (record chunks, dead-letter rows, counts):

* ``(row, record)`` -- a plain 2-tuple, one good record (the common case: kept a tuple
  because a reader makes one per row);
* :class:`framework.RecordChunk` -- many good records read column-wise;
* :class:`Reject` -- one record that could not be read (a malformed CSV row, a line that is
  not JSON, a row over ``source.max_record_bytes``): it counts as read *and* rejected, so
  read = written + rejected still holds;
* :class:`Unread` -- input that yields no record at all (an unterminated quote running to the
  end of the file, a damaged Avro block, a lost Parquet row group, a file that cannot be
  opened): not a record, but never invisible -- it becomes one dead-letter row of kind
  ``unread`` and the ``unread_*`` counts.

Pure: no Beam, no file systems.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, BinaryIO

__all__ = ["DEFAULT_MAX_RECORD_BYTES", "Reject", "Unread", "bounded_line", "unreadable_text"]

# ``source.max_record_bytes``: the largest record (CSV row, JSON line, Avro block) a reader
# holds in memory; a larger one is a dead letter (or, for an Avro block, unread input).
DEFAULT_MAX_RECORD_BYTES = 64 << 20
PREVIEW_BYTES = 200  # how much of a record too large to hold a dead letter shows
# The byte order marks of text our CSV and JSON Lines readers do not read (UTF-8's own is
# dropped): Excel's "Unicode Text" and PowerShell write UTF-16 with one. UTF-32 first: its
# little-endian mark starts with UTF-16's.
FOREIGN_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32", "little"), (b"\x00\x00\xfe\xff", "UTF-32", "big"),
                (b"\xff\xfe", "UTF-16", "little"), (b"\xfe\xff", "UTF-16", "big"))
# The magic numbers of compressed files (bzip2's with its first block's, so that no CSV
# header starting "BZh" matches), and the command that decompresses each.
COMPRESSED = ((re.compile(rb"\A\x1f\x8b"), "gzip", "gunzip"),
              (re.compile(rb"\ABZh[1-9]1AY&SY"), "bzip2", "bunzip2"),
              (re.compile(rb"\A\x28\xb5\x2f\xfd"), "zstd", "unzstd"),
              (re.compile(rb"\A\xfd7zXZ\x00"), "xz", "unxz"),
              (re.compile(rb"\APK\x03\x04"), "zip", "unzip"))
# The magic numbers of the binary formats we read, which a text reader must not take for
# text (Parquet's with the Thrift page header that follows it, so that no CSV header starting
# "PAR1" matches): the format's name and its ``source.format``.
BINARY_FORMATS = ((re.compile(rb"\APAR1\x15"), "Parquet", "parquet"),
                  (re.compile(rb"\AObj\x01"), "Avro", "avro"))
HEAD_BYTES = 10  # enough of a file's start for every mark and magic number above


def unreadable_text(head: bytes) -> str | None:
    """Why a CSV or JSON Lines file starting with ``head`` (its first :data:`HEAD_BYTES`
    bytes) cannot be read -- UTF-16 or UTF-32 text by its byte order mark, a Parquet or Avro
    file or a compressed file by its magic number -- with the format or the command that reads
    it; None otherwise.

    Args:
        head: the file's first bytes.

    Returns:
        The reason, or None.
    """
    for mark, family, order in FOREIGN_BOMS:
        if head.startswith(mark):
            return (f"the file is {family} text ({order}-endian byte order mark "
                    f"{mark.hex(' ').upper()}); the CSV and JSON Lines readers read UTF-8: "
                    f"convert it first, e.g. iconv -f {family} -t UTF-8")
    for magic, name, fmt in BINARY_FORMATS:
        if magic.match(head):
            return (f"the file is {name} data (magic bytes {head[:4]!r}), not CSV or JSON "
                    f"Lines text: read it with format {fmt} (source.format: {fmt}; init: "
                    f"--format {fmt})")
    for magic, kind, command in COMPRESSED:
        if magic.match(head):
            return (f"the file is {kind}-compressed; the CSV and JSON Lines readers read "
                    f"uncompressed text: decompress it first, e.g. {command}")
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class Reject:
    """One record that could not be read: its 1-based row (0: a header), the feature at
    fault ("" for the whole record), why, and previews of the value and the record."""

    row: int | None
    feature: str
    reason: str
    value: Any = ""
    record: Any = ""


@dataclasses.dataclass(frozen=True, slots=True)
class Unread:
    """Input no record came from: ``bytes`` bytes from byte ``offset`` of the file, holding
    ``rows`` records when the format says how many (None: unknown), the first of them row
    ``row`` (None: unknown)."""

    offset: int
    bytes: int
    rows: int | None
    row: int | None
    reason: str
    # For a file that changed after the launch listed it (sinks/format/file_identity.py):
    # its size as listed and as read; None otherwise.
    changed: tuple[int, int] | None = None


def bounded_line(handle: BinaryIO, limit: int) -> tuple[bytes, int]:
    """The next line of ``handle`` (newline included) and its size in bytes, holding at most
    ``limit + 1`` bytes of it: a longer line comes back as its first ``PREVIEW_BYTES`` bytes
    with its full size, the rest skipped in pieces. ``(b"", 0)`` at the end of the file.

    Args:
        handle: the file, opened in binary mode.
        limit: the longest line held, in bytes.

    Returns:
        The line (or its preview) and its size in bytes.
    """
    line = handle.readline(limit + 1)
    if len(line) <= limit or line.endswith(b"\n"):
        return line, len(line)
    head, size = line[:PREVIEW_BYTES], len(line)
    while not line.endswith(b"\n"):  # skip the rest without holding it
        line = handle.readline(1 << 20)
        if not line:
            break
        size += len(line)
    return head, size
