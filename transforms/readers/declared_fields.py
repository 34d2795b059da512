"""The top-level field names a Parquet or Avro file declares in its footer or header, read
before the pipeline runs so that a config naming a field the files lack fails at launch.

Its own module, not the package's ``__init__``: it imports the two readers, which import the
framework, which imports the per-format descriptors -- from the package ``__init__`` that
would close a circle.
"""

from __future__ import annotations

from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES

__all__ = ["top_level_fields"]


def top_level_fields(fmt: str, path: str,
                     max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> list[str] | None:
    """The top-level field names a Parquet or Avro file declares (None for other formats),
    to validate a config before the pipeline runs. Reads at most about ``max_record_bytes``
    of a footer or header (a larger one raises ValueError).

    Args:
        fmt: the source's format.
        path: the file's path or URL.
        max_record_bytes: the most footer or header bytes read.

    Returns:
        The field names, or None.

    Raises:
        ValueError: the footer or header is larger.
    """
    if fmt == "parquet":
        from beam_tfrecords.transforms.readers.read_parquet import parquet_fields

        return parquet_fields(path, max_record_bytes)
    if fmt == "avro":
        from beam_tfrecords.transforms.readers.read_avro import avro_fields

        return avro_fields(path, max_record_bytes)
    return None
