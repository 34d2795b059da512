"""One small descriptor per source format: what config loading, the build, ``init`` and the
launch check each need to know of a format, in one table they can all loop over.

Today a format's name, file suffixes, options keys, reader and parser are spelled out in
several modules (the config's format list and suffixes, ``init``'s suffix map, the build's
reader choice, the launch check); a new format meant editing each. :data:`FORMATS` holds them
once: the name (``source.format``), the file suffixes (the first is the one a glob suggests),
the keys of its ``source.<name>`` options, how its files split into ranges (``splits``:
``"bytes"`` for text cut at record starts, ``"row_groups"``, ``"blocks"``, or None for one
task per file), the function that finds a range's first record (None when nothing splits),
whether it is text (compressed or foreign text is then one range, :mod:`ranges`), and where
its public source and options parser live (names resolved on use, so that this table imports
no Beam).

Pure: no Beam, no file systems.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from beam_tfrecords.transforms.readers import (
    avro_ranges,
    csv_ranges,
    jsonl_ranges,
    parquet_ranges,
)
from beam_tfrecords.transforms.readers.ranges import ByteRange, plan_ranges, unsplittable_text

__all__ = ["FORMATS", "FormatDescriptor", "by_suffix", "descriptor", "names", "plan_file"]

_READERS = "beam_tfrecords.transforms.readers"


@dataclasses.dataclass(frozen=True)
class FormatDescriptor:
    """What every part of the package needs to know of one source format (module doc)."""

    name: str
    suffixes: tuple[str, ...]
    option_keys: tuple[str, ...]
    module: str  # the reader module under transforms/readers
    source: str  # its public PTransform (``ReadCsv``)
    parse_options: str  # its options parser (``parse_csv_options``)
    splits: str | None  # "bytes" | "row_groups" | "blocks" | None: one task per file
    split: Callable[..., Any] | None  # finds a range's first record / plans its groups
    text: bool = False

    @property
    def splittable(self) -> bool:
        return self.splits is not None

    @property
    def suffix(self) -> str:
        """The suffix a glob for this format ends with ("" when it has none)."""
        return self.suffixes[0] if self.suffixes else ""

    def _attribute(self, name: str) -> Any:
        return getattr(importlib.import_module(f"{_READERS}.{self.module}"), name)

    def source_class(self) -> Any:
        """The public source (imports the reader module, and with it Beam)."""
        return self._attribute(self.source)

    def options_parser(self) -> Callable[[Any, str], Any]:
        """The ``source.<name>`` parser (imports the reader module, and with it Beam)."""
        return self._attribute(self.parse_options)


FORMATS: tuple[FormatDescriptor, ...] = (
    FormatDescriptor("csv", (".csv", ".tsv"),
                     ("delimiter", "quotechar", "header", "columns", "null_values"),
                     "read_csv", "ReadCsv", "parse_csv_options", "bytes",
                     csv_ranges.csv_range_start, text=True),
    FormatDescriptor("jsonl", (".jsonl", ".json", ".ndjson"), ("max_depth", "max_line_bytes"),
                     "read_jsonl", "ReadJsonl", "parse_jsonl_options", "bytes",
                     jsonl_ranges.line_start, text=True),
    FormatDescriptor("parquet", (".parquet", ".pq"), (), "read_parquet", "ReadParquet",
                     "parse_parquet_options", "row_groups", parquet_ranges.plan_row_groups),
    FormatDescriptor("avro", (".avro",), (), "read_avro", "ReadAvro", "parse_avro_options",
                     "blocks", avro_ranges.block_start),
    FormatDescriptor("images", (), ("layout", "manifest", "extensions", "check_complete",
                                    "read_threads"),
                     "read_images", "ReadImages", "parse_images_options", None, None),
)


def names() -> tuple[str, ...]:
    """Every ``source.format`` value, in the table's order."""
    return tuple(f.name for f in FORMATS)


def descriptor(name: str) -> FormatDescriptor:
    """The descriptor of format ``name`` (KeyError naming the known ones otherwise)."""
    for fmt in FORMATS:
        if fmt.name == name:
            return fmt
    raise KeyError(f"no source format {name!r}; known: {', '.join(names())}")


def by_suffix(path: str) -> FormatDescriptor | None:
    """The format a file name's suffix says (case-insensitive), or None."""
    lower = path.lower()
    for fmt in FORMATS:
        if any(lower.endswith(suffix) for suffix in fmt.suffixes):
            return fmt
    return None


def plan_file(fmt: FormatDescriptor, path: str, size: int, split_bytes: int,
              head: bytes = b"") -> tuple[list[ByteRange], str | None]:
    """The byte ranges of one file of format ``fmt``, and why it is one range when it would
    otherwise split.

    Args:
      fmt: the file's format.
      path: the file (its suffix tells compressed text).
      size: its size as listed.
      split_bytes: the wanted range size.
      head: its first bytes when known (compressed or foreign text under a text name).

    Returns:
      ``(ranges, reason)``: images are one task per file (no reason: that is their unit);
      Parquet is one byte range here, its row groups planned from the footer
      (:func:`parquet_ranges.plan_row_groups`, which gives its own reason); compressed or
      foreign text is one range with the reason when it is larger than ``split_bytes``;
      everything else splits by :func:`ranges.plan_ranges`."""
    whole = [ByteRange(0, size)]
    if fmt.splits in (None, "row_groups"):
        return whole, None
    if fmt.text:
        why = unsplittable_text(path, head)
        if why is not None:
            return whole, why if size > split_bytes else None
    return plan_ranges(size, split_bytes), None
