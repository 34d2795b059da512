"""The source readers: one framework (RecordChunk, reader events, dead letters and counts) and
the formats it reads -- CSV, JSON Lines, Parquet, Avro and image folders."""
