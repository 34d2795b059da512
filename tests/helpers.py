"""Helpers the tests share: reading back what a build wrote.

Loaded by ``tests/conftest.py`` as the module ``beam_tfrecords_tests_helpers`` (tests/ is not a
package on sys.path), so a test imports ``from beam_tfrecords_tests_helpers import ...``;
nothing here is installed.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from typing import Any

import crc32c

from beam_tfrecords.runtime import storage
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.manifest import crc32c_b64
from beam_tfrecords.transforms.codec import wire

__all__ = ["checked_records", "demo_csv_parts", "read_examples", "read_records", "shard_paths"]

Path = pathlib.Path | str


def shard_paths(version_dir: Path, manifest: Mapping[str, Any],
                split: str | None = None) -> list:
    """The shard files a manifest lists, split after split in its order (or one split's):
    ``pathlib.Path`` below a local ``version_dir`` given as one, else ``str`` (``gs://`` too)."""
    names = list(manifest["splits"]) if split is None else [split]
    return [_join(version_dir, shard["path"])
            for name in names for shard in manifest["splits"][name]["shards"]]


def read_records(path: Path, compression: str = "auto") -> list[bytes]:
    """Every record of one TFRecord file, local or ``gs://``, CRCs checked as it is read."""
    with storage.open_read(str(path)) as handle:
        return list(tff.iter_records(handle, compression, path=str(path)))


def read_examples(path: Path, compression: str = "auto") -> list[dict]:
    """The records of one file decoded without a spec: ``{name: (kind, values)}`` each."""
    return [wire.decode_example(record) for record in read_records(path, compression)]


def checked_records(path: Path, shard: Mapping[str, Any]) -> list[bytes]:
    """The records of a local shard, after checking its size, crc32c and record count against
    its manifest entry ``shard``."""
    data = pathlib.Path(path).read_bytes()
    assert len(data) == shard["bytes"], path
    assert crc32c_b64(crc32c.crc32c(data)) == shard["crc32c"], path
    records = read_records(path)
    assert len(records) == shard["records"], path
    return records


def _join(base: Path, relative: str) -> Path:
    return base / relative if isinstance(base, pathlib.Path) else storage.join(base, relative)


def demo_csv_parts(folder: pathlib.Path, parts: int = 40) -> str:
    """The demo's 10,000 rows cut into ``parts`` CSV files (each with the header), so that
    reads spread over workers; returns their glob."""
    demo = pathlib.Path(__file__).resolve().parent.parent / "configs" / "data" / "demo.csv"
    lines = demo.read_text().splitlines()
    header, rows = lines[0], lines[1:]
    size = -(-len(rows) // parts)
    for k in range(parts):
        (folder / f"part-{k:02d}.csv").write_text(
            "\n".join([header, *rows[k * size:(k + 1) * size]]) + "\n")
    return str(folder / "*.csv")
