"""Framing only: TFRecord framing and writing of already serialized Examples, no encoding.

    .venv/bin/python bench/alt_framing.py --data DIR --out DIR

The ceiling for any encoder: records are built with plain protobuf in batches of 10,000
*outside* the timer, then each batch is framed with our ``tfrecord_format.frame_batch`` and
written *inside* it. The images target (ours >= 80% of this rate) compares against it.
"""

from __future__ import annotations

import io
import pathlib
import time

import numpy as np
from measure import alt_args, emit, output_bytes
from pb_example import example_builder
from rows import iter_rows, load_meta, preload

from beam_tfrecords.sinks.format.tfrecord_format import frame_batch

BATCH = 10_000


def _batches(meta: dict, build) -> object:
    images = meta["format"] == "images"
    if images:
        from PIL import Image
    records: list[bytes] = []
    for row in iter_rows(meta):
        if images:
            row["width"], row["height"] = Image.open(io.BytesIO(row["image"])).size
        records.append(build(row))
        if len(records) == BATCH:
            yield records
            records = []
    if records:
        yield records


def main() -> None:
    args = alt_args(__doc__)
    meta = load_meta(args.data)
    preload(meta)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seconds, rows = 0.0, 0
    with open(out / "data.tfrecord", "wb", buffering=1 << 20) as handle:
        for records in _batches(meta, example_builder(meta["features"])):
            payload = b"".join(records)  # one buffer + offsets: the sink's batch shape
            offsets = np.zeros(len(records) + 1, dtype=np.int64)
            np.cumsum([len(r) for r in records], out=offsets[1:])
            start = time.perf_counter()
            handle.write(frame_batch(payload, offsets))
            seconds += time.perf_counter() - start
            rows += len(records)
        start = time.perf_counter()
        handle.flush()
        seconds += time.perf_counter() - start
    emit(rows, seconds, output_bytes(out))


if __name__ == "__main__":
    main()
