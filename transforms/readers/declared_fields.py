"""The top-level field names a file declares -- a CSV header (or the configured columns), a
Parquet footer's or an Avro header's schema, the keys of the first JSON Lines records -- read
before the pipeline runs so that a config naming a field the files lack fails at launch.

Each format's function is named by its descriptor (readers/formats.py ``fields``), so the
launch check loops over formats instead of naming them. Its own module, not the package's
``__init__``: it imports the readers, which import the framework, which imports the
descriptors -- from the package ``__init__`` that would close a circle. The CSV, JSON Lines and
Parquet functions need no Beam, so a build that starts worker processes can start their fork
server before it imports Beam (pipelines/cli.py); the Avro function imports its reader (and
with it Beam) when called.
"""

from __future__ import annotations

import io
import json
from typing import Any

from beam_tfrecords.runtime import storage
from beam_tfrecords.transforms.readers.csv_columnar import read_csv_header
from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES
from beam_tfrecords.transforms.readers.formats import descriptor

__all__ = ["JSONL_LINES", "avro_fields", "check_parquet_footer", "csv_fields", "declared_fields",
           "jsonl_fields", "parquet_fields", "top_level_fields"]

JSONL_LINES = 100  # JSON Lines records whose keys are looked at


def csv_fields(path: str, options: Any, max_record_bytes: int) -> list[str] | None:
    """A CSV file's column names: its header, or the configured ``columns`` without one.

    Args:
        path: the file.
        options: its CsvOptions (``header``, ``columns``, delimiter and quoting).
        max_record_bytes: the most bytes of the header read; a longer or malformed header
            gives no columns (the reader reports the file as unread).

    Returns:
        The column names, or None.
    """
    if not options.header:
        return list(options.columns)
    with storage.open_read(path) as raw:
        # Only the header matters here; a bad byte further down is the reader's dead letter,
        # not a reason to refuse the build.
        return read_csv_header(raw, options, max_record_bytes)


def jsonl_fields(path: str, options: Any = None,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> list[str] | None:
    """The top-level keys of the first :data:`JSONL_LINES` JSON objects of a JSON Lines file.

    The readers report bad lines; this check is only a shortcut (a required field that none
    of the first records has would reject them all). A line longer than ``max_record_bytes``
    (the reader's dead letter) ends the look, so no more than :data:`JSONL_LINES` times the
    limit is ever read.

    Args:
        path: the file.
        options: its JsonlOptions (unused: the keys do not depend on them).
        max_record_bytes: the most bytes of one line read.

    Returns:
        The keys in order of first appearance, or None when no line parses to an object.
    """
    fields: dict[str, None] = {}
    with storage.open_read(path) as handle:
        for _ in range(JSONL_LINES):
            raw = handle.readline(max_record_bytes + 1)
            if not raw or len(raw) > max_record_bytes:
                break
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):  # too deep: the reader's dead letter
                continue
            if isinstance(record, dict):
                fields.update(dict.fromkeys(record))
    return list(fields) or None


def parquet_fields(path: str, options: Any = None,
                   max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> list[str] | None:
    """A Parquet file's top-level schema fields, from its footer.

    Args:
        path: the file.
        options: its ParquetOptions (unused).
        max_record_bytes: the largest footer read.

    Returns:
        The field names.

    Raises:
        ValueError: the footer is larger, or the file is not Parquet.
    """
    import pyarrow.parquet as pq

    with storage.open_read(path) as handle:
        check_parquet_footer(handle, max_record_bytes)
        return list(pq.ParquetFile(handle).schema_arrow.names)


def avro_fields(path: str, options: Any = None,
                max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> list[str] | None:
    """An Avro file's top-level record fields, from its header's schema.

    Args:
        path: the file.
        options: its AvroOptions (unused).
        max_record_bytes: the largest header read.

    Returns:
        The field names.

    Raises:
        ValueError: the header is larger, or the file is not Avro.
    """
    from beam_tfrecords.transforms.readers import read_avro

    return read_avro.avro_fields(path, max_record_bytes)


def check_parquet_footer(handle: Any, limit: int) -> int:
    """The file's size, after checking that its footer (as its last 8 bytes declare it) is
    at most ``limit`` bytes; pyarrow would read a declared 4 GB footer whole.

    Args:
        handle: the file, open for reading (left at its start).
        limit: the largest footer allowed (``source.max_record_bytes``).

    Returns:
        The file's size in bytes.

    Raises:
        ValueError: the footer is larger.
    """
    size = handle.seek(0, io.SEEK_END)
    if size >= 12:
        handle.seek(size - 8)
        tail = handle.read(8)
        declared = int.from_bytes(tail[:4], "little")
        if tail[4:] == b"PAR1" and declared > limit:
            raise ValueError(f"its footer is {declared} bytes, larger than "
                             f"source.max_record_bytes ({limit})")
    handle.seek(0)
    return size


def declared_fields(fmt: str, path: str, options: Any,
                    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> list[str] | None:
    """The field names ``path`` declares, by its format's function (descriptor ``fields``).

    Args:
        fmt: the source format (``source.format``).
        path: the file.
        options: the format's options dataclass.
        max_record_bytes: the most bytes of one record, header or footer read.

    Returns:
        The field names, or None when the format declares none (images) or nothing parsed.
    """
    name = descriptor(fmt).fields
    return None if name is None else globals()[name](path, options, max_record_bytes)


def top_level_fields(fmt: str, path: str,
                     max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> list[str] | None:
    """The top-level field names a Parquet or Avro file declares in its schema (None for
    other formats, whose names need their options), as ``init`` and the launch check read
    them.

    Args:
        fmt: the source's format.
        path: the file's path or URL.
        max_record_bytes: the most footer or header bytes read.

    Returns:
        The field names, or None.

    Raises:
        ValueError: the footer or header is larger.
    """
    if fmt not in ("parquet", "avro"):
        return None
    return declared_fields(fmt, path, None, max_record_bytes)
