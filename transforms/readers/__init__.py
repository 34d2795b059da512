"""The source readers: one framework and one module per format, each with its options.

- ``framework``: RecordChunk, the events -> outputs step every format shares (dead letters,
  counts), the per-file DoFn and paths transform every format subclasses, and the public
  shape of a source (a pattern matched when applied -> ``records``, ``rejected``, ``counts``);
- ``read_csv``, ``read_jsonl``, ``read_parquet``, ``read_avro``, ``read_images``: a format's
  options and their parser (the config's ``source.<format>`` section), its reader, and the
  public ``ReadCsv`` / ``ReadJsonl`` / ``ReadParquet`` / ``ReadAvro`` / ``ReadImages``;
- helpers: ``events`` (the named event types), ``csv_columnar`` and ``csv_typing`` (CSV's
  Arrow fast path: rows, then typed cells),
  ``image_header`` (image sizes from the first bytes);
- ranges (pure): ``ranges`` (planning a file's byte ranges, ownership, merging ranges'
  counts and checking their joins) and each format's boundaries beside its reader
  (``csv_ranges``, ``jsonl_ranges``, ``avro_ranges``, ``parquet_ranges``); ``formats``, one
  descriptor per format for the parts of the package that loop over formats.
"""

from __future__ import annotations

from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES


def top_level_fields(fmt: str, path: str,
                     max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> list[str] | None:
    """The top-level field names a Parquet or Avro file declares (None for other formats),
    to validate a config before the pipeline runs. Reads at most about ``max_record_bytes``
    of a footer or header (a larger one raises ValueError)."""
    if fmt == "parquet":
        from beam_tfrecords.transforms.readers.read_parquet import parquet_fields

        return parquet_fields(path, max_record_bytes)
    if fmt == "avro":
        from beam_tfrecords.transforms.readers.read_avro import avro_fields

        return avro_fields(path, max_record_bytes)
    return None
