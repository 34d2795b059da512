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
  descriptor per format for the parts of the package that loop over formats;
  ``declared_fields``, the fields a Parquet or Avro file declares.
"""

from __future__ import annotations
