"""Correctness checks on a case's output: a fast speed number on wrong data is no number.

:func:`count_records` walks every output file's framing (one header read per record) and
insists it ends exactly at the end of the file. :func:`check_sample` reads the first records
of every file with our reader (``tfrecord_format.iter_records``, both CRCs checked), decodes
them with ``ExampleDecoder`` and finds each one's input row by the data set's key feature
(the tutorial's ``feature3``, wide's row id ``i0``, an image's bytes), then compares every
feature: ints and strings exactly, floats as float32, lists element-wise, images byte for byte
with their label index and header size.
"""

from __future__ import annotations

import io
import mmap
import pathlib
import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

from beam_tfrecords.sinks.format.tfrecord_format import FRAME_OVERHEAD, HEADER_SIZE, iter_records
from beam_tfrecords.transforms.codec.example_codec import ExampleDecoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec

__all__ = ["CheckError", "check_sample", "count_records"]

_LENGTH = struct.Struct("<Q")


class CheckError(AssertionError):
    """Output that does not match the input."""


def count_records(files: Sequence[pathlib.Path]) -> int:
    """Records in uncompressed TFRecord files, by walking the length headers."""
    total = 0
    for path in files:
        size = path.stat().st_size
        if size == 0:
            continue
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0,
                                                   access=mmap.ACCESS_READ) as view:
            pos, unpack = 0, _LENGTH.unpack_from
            while pos + HEADER_SIZE <= size:
                pos += unpack(view, pos)[0] + FRAME_OVERHEAD
                total += 1
        if pos != size:
            raise CheckError(f"{path}: framing ends at byte {pos}, the file has {size}")
    return total


def _specs(meta: dict[str, Any]) -> list[FeatureSpec]:
    return [FeatureSpec(f["name"], f["type"], tuple(f["shape"])) for f in meta["features"]]


def _sample(files: Sequence[pathlib.Path], per_file: int, limit: int) -> list[bytes]:
    records: list[bytes] = []
    per_file = max(per_file, limit // max(1, len(files)))
    for path in files:
        with open(path, "rb") as handle:
            for n, record in enumerate(iter_records(handle, "none", str(path))):
                if n == per_file or len(records) == limit:
                    break
                records.append(record)
    return records


def _tabular_rows(meta: dict[str, Any], key: str, wanted: list) -> dict[Any, list[dict]]:
    """Input rows whose key (as stored: float32 for floats) is in ``wanted``, by key."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    folder = pathlib.Path(meta["folder"])
    kind = {f["name"]: f["type"] for f in meta["features"]}[key]
    arrow_type = pa.float32() if kind == "float" else pa.int64()
    value_set = pa.array(wanted, arrow_type)
    found: dict[Any, list[dict]] = {}
    for name in meta["files"]:
        if meta["format"] == "csv":
            table = pcsv.read_csv(folder / name)
        elif meta["format"] == "jsonl":
            import pyarrow.json as pjson

            table = pjson.read_json(folder / name)
        else:
            table = pq.read_table(folder / name)
        keys = table.column(key).cast(arrow_type)
        for row in table.filter(pc.is_in(keys, value_set=value_set)).to_pylist():
            stored = float(np.float32(row[key])) if kind == "float" else row[key]
            found.setdefault(stored, []).append(row)
    return found


def _image_rows(meta: dict[str, Any], wanted: list[bytes]) -> dict[bytes, list[dict]]:
    from PIL import Image
    from rows import image_entries  # bench/ is on sys.path when the harness runs

    wanted_set, found = set(wanted), {}
    for path, label in image_entries(meta):
        data = pathlib.Path(path).read_bytes()
        if data in wanted_set:
            width, height = Image.open(io.BytesIO(data)).size
            found.setdefault(data, []).append(
                {"image": data, "label": label, "height": height, "width": width})
    return found


def _same(feature: dict[str, Any], decoded: Any, expected: Any) -> bool:
    if feature["type"] == "float":
        want = np.asarray(expected, dtype=np.float64).astype(np.float32)
        return bool(np.array_equal(np.asarray(decoded, dtype=np.float32), want))
    if feature["shape"]:
        return list(decoded) == list(expected)
    return decoded == expected


def check_sample(meta: dict[str, Any], files: Sequence[pathlib.Path], per_file: int = 16,
                 limit: int = 64) -> int:
    """Decode up to ``limit`` records and match each to an input row; returns how many were
    checked, raises CheckError naming the first mismatch."""
    records = _sample(files, per_file, limit)
    if not records:
        raise CheckError("no records to sample")
    decoder = ExampleDecoder(_specs(meta))
    decoded = [decoder.decode(r) for r in records]
    key = meta["key"]
    wanted = [d[key] for d in decoded]
    if meta["format"] == "images":
        found = _image_rows(meta, wanted)
    else:
        found = _tabular_rows(meta, key, wanted)
    for n, values in enumerate(decoded):
        candidates = found.get(values[key], [])
        if not candidates:
            raise CheckError(f"sampled record {n}: no input row has {key}={values[key]!r}")
        for row in candidates:
            if all(_same(f, values[f["name"]], row[f.get("source", f["name"])])
                   for f in meta["features"]):
                break
        else:
            raise CheckError(f"sampled record {n} ({key}={values[key]!r}) differs from its "
                             f"input row: decoded {values!r}, input {candidates[0]!r}")
    return len(decoded)
