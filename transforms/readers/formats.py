"""One small descriptor per source format: what config loading, the build, ``init`` and the
launch check each need to know of a format, in one table they can all loop over.

Today a format's name, file suffixes, options keys, reader and parser are spelled out in
several modules (the config's format list and suffixes, ``init``'s suffix map, the build's
reader choice, the launch check); a new format meant editing each. :data:`FORMATS` holds them
once: the name (``source.format``), the file suffixes (the first is the one a glob suggests),
the keys of its ``source.<name>`` options, each documented (:class:`ConfigKey`: type, allowed
values, meaning; the default read from the options dataclass, which the config reference
shows -- pipelines/config_table.py), how its files split into ranges (``splits``:
``"bytes"`` for text cut at record starts, ``"row_groups"``, ``"blocks"``, or None for one
task per file), the function that finds a range's first record (None when nothing splits),
whether it is text (compressed or foreign text is then one range, :mod:`ranges`), where its
public source and options parser live, and which function of readers/declared_fields.py reads
the field names a file declares (names resolved on use, so that this table imports no Beam).

Pure: no Beam, no file systems.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from beam_tfrecords.transforms.codec.config_keys import ConfigKey
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
    options: tuple[ConfigKey, ...]  # the ``source.<name>`` keys, each below that mapping
    module: str  # the reader module under transforms/readers
    source: str  # its public PTransform (``ReadCsv``)
    parse_options: str  # its options parser (``parse_csv_options``)
    options_class: str  # the dataclass it parses into, holding the defaults (``CsvOptions``)
    splits: str | None  # "bytes" | "row_groups" | "blocks" | None: one task per file
    split: Callable[..., Any] | None  # finds a range's first record / plans its groups
    text: bool = False
    # the function of readers/declared_fields.py naming the fields a file declares (its
    # header, schema or first records), for the launch check; None: the format has none
    fields: str | None = None

    @property
    def option_keys(self) -> tuple[str, ...]:
        """The keys its ``source.<name>`` mapping allows, in the table's order."""
        return tuple(option.key for option in self.options)

    def config_keys(self) -> tuple[ConfigKey, ...]:
        """Its options as rows of the config's table: keyed from the root, each default
        read from the field of the options dataclass that the key names.

        Returns:
            One row per option.
        """
        where = f"beam_tfrecords.transforms.readers.{self.module}:{self.options_class}"
        return tuple(dataclasses.replace(
            option, key=f"source.{self.name}.{option.key}",
            field=option.field or ("" if option.default else f"{where}.{option.key}"))
            for option in self.options)

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
        """The public source (imports the reader module, and with it Beam).

        Returns:
            The class, such as ``ReadCsv``.
        """
        return self._attribute(self.source)

    def options_parser(self) -> Callable[[Any, str], Any]:
        """The ``source.<name>`` parser (imports the reader module, and with it Beam).

        Returns:
            A function of ``(raw mapping, key)`` that returns the options.
        """
        return self._attribute(self.parse_options)


_CSV = (
    ConfigKey("delimiter", "string", "The character between cells (`\\t` for TSV).",
              "one character, not a newline"),
    ConfigKey("quotechar", "string", "The character that quotes a cell holding delimiters or "
              "line breaks.", "one character, not the delimiter"),
    ConfigKey("header", "bool", "The first line names the columns; without it, `columns` "
              "does."),
    ConfigKey("columns", "list of strings", "The column names, in order, of files without a "
              "header (required with `header: false`).", "distinct, non-empty names"),
    ConfigKey("null_values", "list of strings", "Cells spelled like one of these are missing, "
              "e.g. `[\"\", \"NA\"]`.", "cell texts"),
)
_JSONL = (
    ConfigKey("max_depth", "integer", "A line whose objects and arrays nest deeper than this "
              "(its object is level 1) is a dead letter.", "1 or more"),
    ConfigKey("max_line_bytes", "integer", "The older name, for JSON Lines, of "
              "`source.max_record_bytes`; give one of them.", "bytes, 1 or more"),
)
_IMAGES = (
    ConfigKey("layout", "string", "`folders`: `<split>/<label>/<file>` or `<label>/<file>` "
              "below `source.path`; `manifest`: a CSV of `path,label[,more columns]`.",
              "`folders`, `manifest`"),
    ConfigKey("manifest", "string", "The manifest CSV (with `layout: manifest`); empty: "
              "`source.path` names it.", "a CSV path"),
    ConfigKey("extensions", "list of strings", "The file name endings read as images; other "
              "files are skipped.", "endings with their dot, e.g. `.jpg`"),
    ConfigKey("check_complete", "bool", "Reject image files cut short after their header."),
    ConfigKey("read_threads", "integer", "Files read at once per worker; `auto` (stored as 0): "
              "several for Cloud Storage, 1 for local files.", "1 to 64, `auto`"),
)

FORMATS: tuple[FormatDescriptor, ...] = (
    FormatDescriptor("csv", (".csv", ".tsv"), _CSV, "read_csv", "ReadCsv", "parse_csv_options",
                     "CsvOptions", "bytes", csv_ranges.csv_range_start, text=True,
                     fields="csv_fields"),
    FormatDescriptor("jsonl", (".jsonl", ".json", ".ndjson"), _JSONL, "read_jsonl",
                     "ReadJsonl", "parse_jsonl_options", "JsonlOptions", "bytes",
                     jsonl_ranges.line_start, text=True, fields="jsonl_fields"),
    FormatDescriptor("parquet", (".parquet", ".pq"), (), "read_parquet", "ReadParquet",
                     "parse_parquet_options", "ParquetOptions", "row_groups",
                     parquet_ranges.plan_row_groups, fields="parquet_fields"),
    FormatDescriptor("avro", (".avro",), (), "read_avro", "ReadAvro", "parse_avro_options",
                     "AvroOptions", "blocks", avro_ranges.block_start, fields="avro_fields"),
    FormatDescriptor("images", (), _IMAGES, "read_images", "ReadImages",
                     "parse_images_options", "ImagesOptions", None, None),
)


def names() -> tuple[str, ...]:
    """Every ``source.format`` value, in the table's order.

    Returns:
        The format names.
    """
    return tuple(f.name for f in FORMATS)


def descriptor(name: str) -> FormatDescriptor:
    """The descriptor of format ``name`` (KeyError naming the known ones otherwise).

    Args:
        name: a ``source.format`` value.

    Returns:
        The format's descriptor.

    Raises:
        KeyError: an unknown format.
    """
    for fmt in FORMATS:
        if fmt.name == name:
            return fmt
    raise KeyError(f"no source format {name!r}; known: {', '.join(names())}")


def by_suffix(path: str) -> FormatDescriptor | None:
    """The format a file name's suffix says (case-insensitive), or None.

    Args:
        path: a file path or URL.

    Returns:
        The format's descriptor, or None.
    """
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
