"""Plain protobuf + crc32c loop: one Example message per row, framed by hand, one file.

    .venv/bin/python bench/alt_protobuf.py --data DIR --out DIR

The floor a user reaches without Beam or TensorFlow: rows read the plain way (csv module,
pyarrow, open()), ``example_pb2`` messages serialized deterministically, TFRecord framing
written out here with ``struct`` and the ``crc32c`` package. Image height and width come from
Pillow's header parse (no decode).
"""

from __future__ import annotations

import io
import pathlib
import struct
import time

import crc32c
from measure import alt_args, emit, output_bytes
from pb_example import example_builder
from rows import iter_rows, load_meta, preload

_MASK_DELTA = 0xA282EAD8


def _masked(data: bytes) -> int:
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def main() -> None:
    args = alt_args(__doc__)
    meta = load_meta(args.data)
    preload(meta)
    build = example_builder(meta["features"])
    images = meta["format"] == "images"
    if images:
        from PIL import Image
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows = 0
    with open(out / "data.tfrecord", "wb", buffering=1 << 20) as handle:
        for row in iter_rows(meta):
            if images:
                row["width"], row["height"] = Image.open(io.BytesIO(row["image"])).size
            record = build(row)
            length = struct.pack("<Q", len(record))
            handle.write(length + struct.pack("<I", _masked(length)) + record
                         + struct.pack("<I", _masked(record)))
            rows += 1
    emit(rows, time.perf_counter() - start, output_bytes(out))


if __name__ == "__main__":
    main()
