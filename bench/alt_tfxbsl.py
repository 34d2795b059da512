"""tfx-bsl's C++ Arrow -> Example encoder, framed in Python with crc32c.

    bench/.venv-tfxbsl/bin/python bench/alt_tfxbsl.py --data DIR --out DIR

Runs in its own virtual environment (``python bench/run.py setup-tfxbsl`` makes it). Input is
read as Arrow record batches (``pyarrow.csv.open_csv`` / ``ParquetFile.iter_batches``), every
column is made the list column the encoder requires (scalars wrapped as one-element lists,
strings as binary, floats as float32), ``RecordBatchToExamples`` encodes a batch, and each
record is framed with ``struct`` and ``crc32c`` and written. Images: batches of file bytes,
labels and Pillow's header sizes.
"""

from __future__ import annotations

import io
import pathlib
import struct
import time

import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
from measure import alt_args, emit, output_bytes
from rows import image_entries, load_meta
from tfx_bsl.coders import example_coder

BATCH = 65_536
_MASK_DELTA = 0xA282EAD8
_ARROW = {"int64": pa.int64(), "float": pa.float32(), "string": pa.binary(),
          "bytes": pa.binary()}


def _masked(data: bytes) -> int:
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def _as_lists(batch: pa.RecordBatch, features: list[dict]) -> pa.RecordBatch:
    """The encoder's input: one list column per feature, named as the feature."""
    n = batch.num_rows
    offsets = pa.array(np.arange(n + 1, dtype=np.int32))
    columns, names = [], []
    for feature in features:
        column = batch.column(feature.get("source", feature["name"]))
        kind = _ARROW[feature["type"]]
        if feature["shape"]:
            column = column.cast(pa.list_(kind))
        else:
            column = pa.ListArray.from_arrays(offsets, column.cast(kind))
        columns.append(column)
        names.append(feature["name"])
    return pa.RecordBatch.from_arrays(columns, names)


def _batches(meta: dict):
    folder = pathlib.Path(meta["folder"])
    if meta["format"] == "images":
        from PIL import Image

        entries = image_entries(meta)
        for first in range(0, len(entries), 256):
            data, labels, heights, widths = [], [], [], []
            for path, label in entries[first:first + 256]:
                with open(path, "rb") as handle:
                    data.append(handle.read())
                width, height = Image.open(io.BytesIO(data[-1])).size
                labels.append(label)
                heights.append(height)
                widths.append(width)
            yield pa.record_batch({"image": pa.array(data, pa.binary()), "label": labels,
                                   "height": heights, "width": widths})
        return
    for name in meta["files"]:
        if meta["format"] == "csv":
            reader = pcsv.open_csv(folder / name,
                                   read_options=pcsv.ReadOptions(block_size=1 << 22))
            yield from reader
        else:
            yield from pq.ParquetFile(folder / name).iter_batches(batch_size=BATCH)


def main() -> None:
    args = alt_args(__doc__)
    meta = load_meta(args.data)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    encoder = example_coder.RecordBatchToExamplesEncoder()
    encoder.encode(pa.record_batch({"warm_up": pa.array([[1]])}))  # first call loads lazily
    start = time.perf_counter()
    rows = 0
    pack_q, pack_i = struct.Struct("<Q").pack, struct.Struct("<I").pack
    with open(out / "data.tfrecord", "wb", buffering=1 << 20) as handle:
        for batch in _batches(meta):
            for record in encoder.encode(_as_lists(batch, meta["features"])):
                length = pack_q(len(record))
                handle.write(length + pack_i(_masked(length)) + record + pack_i(_masked(record)))
                rows += 1
    emit(rows, time.perf_counter() - start, output_bytes(out))


if __name__ == "__main__":
    main()
