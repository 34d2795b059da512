"""Regenerate the small sample data sets under configs/data/, one per source format.

Each sample exercises what its format can express, so that tests/e2e/test_sample_configs.py can
build every configs/<format>.yaml and compare each value read back with the source:

    people.csv        CSV: UTF-8 BOM, CRLF, quoted delimiters and newlines, NA null markers,
                      true/false, exponents, nan/inf, a JSON-array cell for a list feature
    events.jsonl      JSON Lines: nested objects, variable lists, fixed and ragged arrays, nulls
    products.parquet  Parquet: scalar, list and struct columns, nulls, timestamps, binary
    users.avro        Avro: records, arrays, nullable unions, timestamp-millis
    images/<split>/<label>/<file> and images.csv
                      tiny PNG and BMP images (written byte by byte here, no imaging library)
                      in a folder layout with splits, and a manifest CSV of the same files
                      (id,path,label,caption)

Everything is derived from fixed seeds, so reruns write identical files:

    python scripts/make_sample_data.py            # rewrite configs/data/...
    python scripts/make_sample_data.py --check    # exit 1 if a committed file differs
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import pathlib
import random
import struct
import sys
import zlib

DATA = pathlib.Path(__file__).resolve().parent.parent / "configs" / "data"
UTC = datetime.timezone.utc
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]


def _rng(name: str) -> random.Random:
    return random.Random(f"beam-tfrecords-sample-{name}")


# -- CSV --------------------------------------------------------------------------------------

def people_csv() -> bytes:
    rng = _rng("csv")
    lines = ["id,name,bio,is_member,height,readings"]
    specials = ["nan", "inf", "-inf", "1.5e3", "-2.25E-2", ".5"]
    for i in range(40):
        name = rng.choice(WORDS).title()
        if i % 7 == 3:
            name = f'"{name}, Jr."'  # a quoted delimiter
        bio = "NA" if i % 5 == 0 else f'"likes {rng.choice(WORDS)}\nand {rng.choice(WORDS)}"'
        member = "true" if i % 3 == 0 else ("false" if i % 3 == 1 else str(i % 2))
        height = specials[i // 4 % len(specials)] if i % 4 == 0 else f"{rng.uniform(1.4, 2.1):.3f}"
        readings = json.dumps([round(rng.uniform(-5, 5), 2) for _ in range(i % 4)])
        quoted = '"' + readings.replace('"', '""') + '"'
        lines.append(f"{i},{name},{bio},{member},{height},{quoted}")
    return b"\xef\xbb\xbf" + ("\r\n".join(lines) + "\r\n").encode("utf-8")


# -- JSON Lines -------------------------------------------------------------------------------

def events_jsonl() -> bytes:
    rng = _rng("jsonl")
    out = []
    for i in range(40):
        record: dict = {
            "id": i,
            "user": {"name": f"{rng.choice(WORDS)}-{i}", "country": rng.choice(["de", "fr"])},
            "tags": [rng.choice(WORDS) for _ in range(i % 4)],
            "scores": [round(rng.uniform(0, 1), 4) for _ in range(3)],
            "matrix": [[rng.randint(-9, 9) for _ in range(2)] for _ in range(2)],
            "tokens": [[rng.randint(0, 99) for _ in range(rng.randint(0, 3))]
                       for _ in range(i % 3 + 1)],
            "active": i % 2 == 0,
        }
        if i % 4 != 1:
            record["user"]["age"] = 18 + i
        record["note"] = None if i % 6 == 0 else f"événement №{i} ✓"
        out.append(json.dumps(record, ensure_ascii=False))
    return ("\n".join(out) + "\n").encode("utf-8")


# -- Parquet ----------------------------------------------------------------------------------

def products_table():
    import pyarrow as pa

    rng = _rng("parquet")
    n = 40
    start = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "title": pa.array([f"{rng.choice(WORDS)} {i}" for i in range(n)], pa.string()),
        "price": pa.array([None if i % 5 == 2 else round(rng.uniform(1, 100), 2)
                           for i in range(n)], pa.float64()),
        "tags": pa.array([[rng.choice(WORDS) for _ in range(i % 3)] for i in range(n)],
                         pa.list_(pa.string())),
        "dims": pa.array([{"w": float(rng.randint(1, 50)), "h": float(rng.randint(1, 50))}
                          for _ in range(n)],
                         pa.struct([("w", pa.float32()), ("h", pa.float32())])),
        "embedding": pa.array([[round(rng.uniform(-1, 1), 3) for _ in range(4)]
                               for _ in range(n)], pa.list_(pa.float32())),
        "created": pa.array([start + datetime.timedelta(hours=7 * i, milliseconds=i)
                             for i in range(n)], pa.timestamp("ms", tz="UTC")),
        "thumbnail": pa.array([bytes(rng.randrange(256) for _ in range(8)) for _ in range(n)],
                              pa.binary()),
    })


def products_parquet() -> bytes:
    import pyarrow.parquet as pq

    sink = io.BytesIO()
    pq.write_table(products_table(), sink, row_group_size=16)
    return sink.getvalue()


# -- Avro -------------------------------------------------------------------------------------

AVRO_SCHEMA = {
    "type": "record",
    "name": "User",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "email", "type": ["null", "string"], "default": None},
        {"name": "scores", "type": {"type": "array", "items": "double"}},
        {"name": "address", "type": {
            "type": "record", "name": "Address",
            "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "int"}],
        }},
        {"name": "signup", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def users_records() -> list[dict]:
    rng = _rng("avro")
    start = datetime.datetime(2025, 6, 1, tzinfo=UTC)
    return [
        {
            "id": i,
            "name": f"{rng.choice(WORDS)}_{i}",
            "email": None if i % 4 == 0 else f"user{i}@example.com",
            "scores": [round(rng.uniform(0, 10), 3) for _ in range(i % 5)],
            "address": {"city": rng.choice(["Berlin", "Paris", "Kraków"]),
                        "zip": rng.randint(10000, 99999)},
            "signup": start + datetime.timedelta(days=i, seconds=37 * i),
        }
        for i in range(40)
    ]


def users_avro() -> bytes:
    import fastavro

    sink = io.BytesIO()
    fastavro.writer(sink, fastavro.parse_schema(AVRO_SCHEMA), users_records(),
                    sync_marker=b"beam-tfrecords!!", sync_interval=1024)
    return sink.getvalue()


# -- images -----------------------------------------------------------------------------------

def png(width: int, height: int, channels: int, seed: int) -> bytes:
    """A valid PNG (8-bit gray, RGB or RGBA), written by hand so no imaging library is needed."""
    rng = random.Random(seed)
    color_type = {1: 0, 3: 2, 4: 6}[channels]
    rows = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(width * channels))
                    for _ in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (struct.pack(">I", len(body)) + kind + body
                + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))


def bmp(width: int, height: int, seed: int) -> bytes:
    """A valid 24-bit uncompressed BMP, bottom-up rows padded to 4 bytes."""
    rng = random.Random(seed)
    stride = (width * 3 + 3) // 4 * 4
    pixels = b"".join(bytes(rng.randrange(256) for _ in range(width * 3))
                      + b"\x00" * (stride - width * 3) for _ in range(height))
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(pixels), 2835, 2835,
                       0, 0)
    header = struct.pack("<2sIHHI", b"BM", 14 + len(info) + len(pixels), 0, 0, 14 + len(info))
    return header + info + pixels


# (split, label, file name, width, height, channels)
IMAGES = [
    (split, label, f"{label}{n}.{'bmp' if n == 2 else 'png'}", 3 + n + k, 2 + n, 3 if n == 2 else
     (1, 3, 4)[(n + k) % 3])
    for k, split in enumerate(["train", "eval"])
    for label in ["cat", "dog", "fox"][: 3 - k]
    for n in range(3)
]


def image_files() -> dict[str, bytes]:
    files = {}
    for index, (split, label, name, width, height, channels) in enumerate(IMAGES):
        data = bmp(width, height, index) if name.endswith(".bmp") else png(
            width, height, channels, index)
        files[f"images/{split}/{label}/{name}"] = data
    lines = ["id,path,label,caption"]
    for index, (split, label, name, *_) in enumerate(IMAGES):
        lines.append(f'{index},images/{split}/{label}/{name},{label},"a {label}, seen in {split}"')
    files["images.csv"] = ("\n".join(lines) + "\n").encode()
    return files


def render() -> dict[str, bytes]:
    files = {
        "people.csv": people_csv(),
        "events.jsonl": events_jsonl(),
        "products.parquet": products_parquet(),
        "users.avro": users_avro(),
    }
    files.update(image_files())
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="regenerate the sample data sets")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a committed file differs from what would be written")
    args = parser.parse_args(argv)
    stale = []
    for name, data in render().items():
        target = DATA / name
        if args.check:
            if not target.exists() or target.read_bytes() != data:
                stale.append(name)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        print(f"wrote {target}")
    if stale:
        print("out of date: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
