"""The options of every source format (``source.csv``, ``source.jsonl``, ...) and their
parsers, and ``source.max_record_bytes``'s. Kept apart from the readers, which bring Beam, so
that loading a config -- and refusing a bad one, or a build whose input is not there -- never
imports Beam. Each reader module imports its own from here, where callers find them too."""

from __future__ import annotations

import dataclasses
from typing import Any

from beam_tfrecords.sinks.format.shard_plan import parse_size
from beam_tfrecords.transforms.codec.specs import _fail, _mapping, _typed
from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES
from beam_tfrecords.transforms.readers.formats import descriptor
from beam_tfrecords.transforms.readers.image_files import DEFAULT_EXTENSIONS

__all__ = ["LAYOUTS", "AvroOptions", "CsvOptions", "ImagesOptions", "JsonlOptions",
           "ParquetOptions", "parse_avro_options", "parse_csv_options", "parse_images_options",
           "parse_jsonl_options", "parse_max_record_bytes", "parse_parquet_options"]

_MAX_RECORD_LIMIT = 1 << 40
_MAX_DEPTH_LIMIT = 512  # json's C parser raises RecursionError somewhat below 1000 levels
LAYOUTS = ("folders", "manifest")  # source.images.layout


# -- source.max_record_bytes ------------------------------------------------------------------

def parse_max_record_bytes(value: Any, key: str = "source.max_record_bytes") -> int:
    """A record size limit (67108864, "64MiB", "64MB"): the config's ``source.max_record_bytes``
    and every public source's ``max_record_bytes`` argument.

    Args:
        value: a number of bytes or a size text.
        key: the config key or argument named in errors.

    Returns:
        The limit in bytes.

    Raises:
        ConfigError: not a size, or above the largest limit.
    """
    if isinstance(value, float):
        raise _fail(key, value, "must be a whole number of bytes or a size such as '64MiB'")
    try:
        size = parse_size(value)
    except ValueError as err:
        raise _fail(key, value, str(err)) from None
    if size > _MAX_RECORD_LIMIT:
        raise _fail(key, value, f"must be at most {_MAX_RECORD_LIMIT} bytes")
    return size


# -- csv --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CsvOptions:
    """How CSV text is split into cells. Cells are typed by the feature specs."""

    delimiter: str = ","
    quotechar: str = '"'
    header: bool = True
    columns: tuple[str, ...] = ()  # required when header is false
    null_values: tuple[str, ...] = ("",)  # cells spelled like this are missing
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES  # from source.max_record_bytes


def parse_csv_options(raw: Any, key: str = "source.csv") -> CsvOptions:
    """The ``source.csv`` mapping (None: defaults) as :class:`CsvOptions`; the error names
    ``key.<option>`` and echoes the bad value. ``max_record_bytes`` is set apart (it is
    ``source.max_record_bytes`` in a config).

    Args:
        raw: the mapping, or None.
        key: the config key named in errors.

    Returns:
        The options.

    Raises:
        ConfigError: an unknown option or a bad value.
    """
    raw = _mapping(key, {} if raw is None else raw, descriptor("csv").option_keys)
    opts = {}
    for name in ("delimiter", "quotechar"):
        if name in raw:
            value = raw[name]
            if not isinstance(value, str) or len(value) != 1 or value in "\r\n":
                raise _fail(f"{key}.{name}", value, "must be one character (not a newline)")
            opts[name] = value
    if "header" in raw:
        opts["header"] = _typed(f"{key}.header", raw["header"], bool, "true or false")
    if "columns" in raw:
        cols = _typed(f"{key}.columns", raw["columns"], list, "a list of column names")
        if not cols or not all(isinstance(c, str) and c for c in cols) or len(set(cols)) != len(
            cols
        ):
            raise _fail(f"{key}.columns", cols, "must be distinct, non-empty column names")
        opts["columns"] = tuple(cols)
    if "null_values" in raw:
        nulls = _typed(f"{key}.null_values", raw["null_values"], list, "a list of strings")
        if not all(isinstance(n, str) for n in nulls):
            raise _fail(f"{key}.null_values", nulls, "must hold strings only")
        opts["null_values"] = tuple(nulls)
    options = CsvOptions(**opts)
    if not options.header and not options.columns:
        raise _fail(f"{key}.columns", None, "is required when header is false")
    if options.delimiter == options.quotechar:
        raise _fail(f"{key}.quotechar", options.quotechar, "must differ from the delimiter")
    return options


# -- jsonl ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class JsonlOptions:
    """How JSON Lines text is read.

    ``max_depth``: a line whose objects/arrays nest deeper than this (the line's object is
    level 1) is a dead letter. ``max_line_bytes``: a longer physical line is a dead letter
    and is skipped without being held in memory (the config sets it from
    ``source.max_record_bytes``; ``source.jsonl.max_line_bytes`` is that key's older name).
    """

    max_depth: int = 64
    max_line_bytes: int = DEFAULT_MAX_RECORD_BYTES

    @property
    def max_record_bytes(self) -> int:
        return self.max_line_bytes


def _int_in(key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _fail(key, value, f"must be an integer from {low} to {high}")
    return value


def parse_jsonl_options(raw: Any, key: str = "source.jsonl") -> JsonlOptions:
    """The ``source.jsonl`` mapping (None: defaults) as :class:`JsonlOptions`.

    Args:
        raw: the mapping, or None.
        key: the config key named in errors.

    Returns:
        The options.

    Raises:
        ConfigError: an unknown option or a bad value.
    """
    raw = _mapping(key, {} if raw is None else raw, descriptor("jsonl").option_keys)
    opts: dict[str, int] = {}
    if "max_depth" in raw:
        opts["max_depth"] = _int_in(f"{key}.max_depth", raw["max_depth"], 1, _MAX_DEPTH_LIMIT)
    if "max_line_bytes" in raw:
        opts["max_line_bytes"] = _int_in(f"{key}.max_line_bytes", raw["max_line_bytes"], 1,
                                         2**40)
    return JsonlOptions(**opts)


# -- avro and parquet: no options of their own ------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _RecordBound:
    """A format with no options of its own: only ``max_record_bytes`` (from
    ``source.max_record_bytes``), the most bytes of one header, footer or block a reader
    will hold."""

    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES


class AvroOptions(_RecordBound):
    """Avro's: ``max_record_bytes`` bounds the header and the blocks a reader will hold."""


class ParquetOptions(_RecordBound):
    """Parquet's: ``max_record_bytes`` bounds the footer a reader will hold."""


def _without_options(cls: type[_RecordBound], raw: Any, key: str) -> _RecordBound:
    _mapping(key, {} if raw is None else raw, ())  # any key is one the format does not have
    return cls()


def parse_avro_options(raw: Any, key: str = "source.avro") -> AvroOptions:
    """The ``source.avro`` mapping (None: defaults) as :class:`AvroOptions`.

    Args:
        raw: the mapping, or None.
        key: the config key named in errors.

    Returns:
        The options.

    Raises:
        ConfigError: an option Avro does not have.
    """
    return _without_options(AvroOptions, raw, key)


def parse_parquet_options(raw: Any, key: str = "source.parquet") -> ParquetOptions:
    """The ``source.parquet`` mapping (None: defaults) as :class:`ParquetOptions`.

    Args:
        raw: the mapping, or None.
        key: the config key named in errors.

    Returns:
        The options.

    Raises:
        ConfigError: an option Parquet does not have.
    """
    return _without_options(ParquetOptions, raw, key)


# -- images -----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ImagesOptions:
    """``source.images``: how image files are found and checked."""

    layout: str = "folders"  # folders | manifest
    manifest: str = ""  # the manifest CSV; empty: source.path names it
    extensions: tuple[str, ...] = DEFAULT_EXTENSIONS  # lower case, with the dot
    check_complete: bool = True  # reject files cut short after their header
    # Files read at once per worker; 0 (``auto``): REMOTE_READ_THREADS for Cloud Storage,
    # 1 for local files (read from the page cache, threads only add GIL hand-offs).
    read_threads: int = 0


def parse_images_options(raw: Any, key: str = "source.images") -> ImagesOptions:
    """The ``source.images`` mapping (or None) as :class:`ImagesOptions`; ValueError names
    ``key.<field>`` and echoes the bad value.

    Args:
        raw: the mapping, or None.
        key: the config key named in errors.

    Returns:
        The options.

    Raises:
        ConfigError: an unknown option or a bad value.
    """
    raw = _mapping(key, {} if raw is None else raw, descriptor("images").option_keys)
    opts: dict[str, Any] = {}
    if "layout" in raw:
        if raw["layout"] not in LAYOUTS:
            raise _fail(f"{key}.layout", raw["layout"], f"must be one of {', '.join(LAYOUTS)}")
        opts["layout"] = raw["layout"]
    if "manifest" in raw:
        value = raw["manifest"]
        if not isinstance(value, str) or not value.strip():
            raise _fail(f"{key}.manifest", value, "must be a non-empty path to a CSV file")
        opts["manifest"] = value
    if "extensions" in raw:
        value = raw["extensions"]
        if (not isinstance(value, list) or not value
                or not all(isinstance(e, str) and len(e) > 1 and e.startswith(".")
                           and "/" not in e for e in value)):
            raise _fail(f"{key}.extensions", value,
                        "must be a non-empty list of file extensions such as .jpg")
        opts["extensions"] = tuple(dict.fromkeys(e.lower() for e in value))
    if "read_threads" in raw:
        value = raw["read_threads"]
        if value == "auto":
            value = 0
        elif isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 64:
            raise _fail(f"{key}.read_threads", value,
                        "must be auto or a whole number from 1 to 64")
        opts["read_threads"] = value
    if "check_complete" in raw:
        if not isinstance(raw["check_complete"], bool):
            raise _fail(f"{key}.check_complete", raw["check_complete"], "must be true or false")
        opts["check_complete"] = raw["check_complete"]
    options = ImagesOptions(**opts)
    if options.manifest and options.layout != "manifest":
        raise _fail(f"{key}.manifest", options.manifest, "applies to layout manifest only")
    return options
