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

from beam_tfrecords.sinks import storage
from beam_tfrecords.sinks.format import tfrecord_format as tff
from beam_tfrecords.sinks.format.manifest import crc32c_b64
from beam_tfrecords.transforms.codec import wire

__all__ = ["checked_records", "read_examples", "read_records", "shard_paths"]

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
