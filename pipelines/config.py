"""Data set configurations: YAML in, frozen dataclasses out, every mistake caught up front.

A config is validated completely before any pipeline starts, against one table of its keys
(pipelines/config_table.py, from which docs/config.md's reference is generated too). Each
error is one line that names the key (``features.pixels.shape``) and echoes the bad value,
because the person reading it is usually looking at a scheduler's log, not at the YAML.
Unknown keys are errors: a typo such as ``mising: omit`` must not silently fall back to a
default.

The parsing is pure (:func:`parse_config` takes the loaded mapping); :func:`load_config` adds
reading from any Beam filesystem (local or ``gs://``) with YAML's safe loader only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from beam_tfrecords.pipelines.config_table import allowed, required
from beam_tfrecords.sinks.early_stop import DEFAULT_WINDOW
from beam_tfrecords.sinks.format import croissant
from beam_tfrecords.sinks.format.shard_plan import ShardSize, derive_band, parse_size
from beam_tfrecords.sinks.format.shuffle_plan import MAX_SEED
from beam_tfrecords.sinks.format.tfrecord_format import COMPRESSIONS, normalize_compression
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.codec.specs import (
    ConfigError,
    _choice,
    _fail,
    _mapping,
    _named,
    _typed,
    parse_features,
    parse_splits,
)
from beam_tfrecords.transforms.codec.splits import SplitSpec
from beam_tfrecords.transforms.readers.events import DEFAULT_MAX_RECORD_BYTES
from beam_tfrecords.transforms.readers.ranges import DEFAULT_SPLIT_BYTES, parse_split_bytes
from beam_tfrecords.transforms.readers.source_options import (  # Beam-free, unlike the readers
    AvroOptions,
    CsvOptions,
    ImagesOptions,
    JsonlOptions,
    ParquetOptions,
    parse_avro_options,
    parse_csv_options,
    parse_images_options,
    parse_jsonl_options,
    parse_max_record_bytes,
    parse_parquet_options,
)
from beam_tfrecords.transforms.stats.drift import Thresholds

__all__ = [
    "Config",
    "ConfigError",
    "CsvOptions",
    "ErrorPolicy",
    "OutputConfig",
    "SourceConfig",
    "load_config",
    "parse_config",
]

SOURCE_FORMATS = ("csv", "jsonl", "parquet", "avro", "images")
# The file name suffix of each file format, for the glob a slip is told to use instead.
FORMAT_SUFFIXES = {"csv": ".csv", "jsonl": ".jsonl", "parquet": ".parquet", "avro": ".avro"}


@dataclasses.dataclass(frozen=True)
class SourceConfig:
    """``source``: the format, the input glob (an image root folder or manifest CSV for
    ``images``) and the options section of that format (the others keep their defaults).

    ``max_record_bytes``: the largest record (CSV row, JSON line, Avro block) a reader holds;
    a larger one is a dead letter (an Avro block: unread input), never a memory blow-up. The
    format's options carry the same value for the reader (``source.jsonl.max_line_bytes`` is
    its older name for JSON Lines)."""

    format: str
    path: str
    csv: CsvOptions = CsvOptions()
    jsonl: JsonlOptions = JsonlOptions()
    parquet: ParquetOptions = ParquetOptions()
    avro: AvroOptions = AvroOptions()
    images: ImagesOptions = ImagesOptions()
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    # A file larger than this is read as ranges that workers share (transforms/readers/
    # ranges.py); it changes nothing in the output, so it is not part of the config's hash.
    split_bytes: int = DEFAULT_SPLIT_BYTES


@dataclasses.dataclass(frozen=True)
class OutputConfig:
    path: str
    compression: str = "none"
    shard_size: ShardSize = ShardSize()
    shard_name: str = ""  # file name prefix of the shards; the data set's name by default
    index: bool = False  # write <shard>.index sidecars ("offset length" per record)
    # output.shuffle.seed: shards hold their records in this seed's pseudo-random order,
    # byte-identical on every runner (sinks/shuffled_shards.py); None: arrival order.
    shuffle_seed: int | None = None
    # output.statistics: per-split statistics (statistics/Split-<split>/FeatureStats.pb)
    # from the encoding pass; false: none.
    statistics: bool = True
    # output.duplicate_key: the field whose equal values make records duplicates (and leaks
    # across splits); empty: records are compared by their serialized bytes.
    duplicate_key: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class About:
    """What the data set is, for its ``croissant.json`` (the config's ``about:``)."""

    description: str = ""
    license: str = ""  # a URL or an SPDX name
    citation: str = ""
    url: str = ""
    version: str = croissant.DEFAULT_VERSION  # MAJOR.MINOR.PATCH


@dataclasses.dataclass(frozen=True)
class ErrorPolicy:
    max_bad_fraction: float = 0.0  # rejected / read above this fails the build
    max_unread_fraction: float = 0.0  # unread bytes / input bytes above this fails the build
    # Records a worker reads before it may stop a build that cannot meet max_bad_fraction
    # (sinks/early_stop.py); 0: never stop early.
    abort_window: int = DEFAULT_WINDOW


@dataclasses.dataclass(frozen=True)
class Config:
    """A validated data set configuration."""

    name: str
    source: SourceConfig
    features: tuple[FeatureSpec, ...]
    splits: SplitSpec
    output: OutputConfig
    errors: ErrorPolicy = ErrorPolicy()
    # The drift gate's thresholds (``validate:``); None: no gate. parse_config turns it on
    # with the defaults when statistics are on and the config says nothing.
    validate: Thresholds | None = None
    about: About = About()

    def resolved(self) -> dict[str, Any]:
        """The config with every default filled in, as JSON-ready data (for the manifest);
        of the source's option sections only the one its format uses.

        Returns:
            The resolved config as a JSON-ready dict.
        """
        resolved = _finite(json.loads(json.dumps(dataclasses.asdict(self),
                                                 default=_json_default)))
        for feature in resolved["features"]:  # a date format only where text is a date, so
            if feature.get("format") is None:  # configs without one keep their hash
                feature.pop("format", None)
            if not feature.get("scale"):  # likewise a scale: only when set
                feature.pop("scale", None)
        for section in SOURCE_FORMATS:
            if section != self.source.format:
                resolved["source"].pop(section, None)
            else:  # the reader's copy of source.max_record_bytes, shown once
                resolved["source"][section].pop("max_record_bytes", None)
        if resolved["source"].get("split_bytes") == DEFAULT_SPLIT_BYTES:
            del resolved["source"]["split_bytes"]  # configs without it keep their hash
        # As written in a config; absent when off, so configs from before shuffling existed
        # keep their hash (and --skip-if-unchanged its meaning).
        seed = resolved["output"].pop("shuffle_seed", None)
        if seed is not None:
            resolved["output"]["shuffle"] = {"seed": seed}
        # The gate's thresholds change no shard either: shown only when they are not the
        # defaults (``false`` when the gate was turned off), so configs keep their hash.
        if self.validate is None or self.validate == Thresholds():
            resolved.pop("validate")
            if self.validate is None and self.output.statistics:
                resolved["validate"] = False
        # The data set's description changes no shard either: shown only when given.
        if self.about == About():
            resolved.pop("about")
        # Likewise statistics: only when turned off (they change no shard), and the key
        # duplicates are compared by, only when set.
        if resolved["output"].pop("statistics", True) is False:
            resolved["output"]["statistics"] = False
        key = resolved["output"].pop("duplicate_key", ())
        if key:
            resolved["output"]["duplicate_key"] = ".".join(key)
        return resolved

    def sha256(self) -> str:
        """Hash of the resolved config: two builds with equal hashes mean the same thing.

        Returns:
            64 hex digits.
        """
        resolved = self.resolved()
        resolved["source"].pop("split_bytes", None)  # how it is read, not what it builds
        canonical = json.dumps(resolved, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _finite(value: Any) -> Any:
    """Strict JSON has no NaN or Infinity: non-finite floats (a default of inf) become text."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "backslashreplace")
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    return repr(value)


# -- sections ---------------------------------------------------------------------------------

_OPTION_PARSERS = {  # each format's module owns its options and their parser
    "csv": parse_csv_options,
    "jsonl": parse_jsonl_options,
    "parquet": parse_parquet_options,
    "avro": parse_avro_options,
    "images": parse_images_options,
}


def _parse_source(raw: Any) -> SourceConfig:
    raw = _mapping("source", raw, allowed("source"), required("source"))
    fmt = _choice("source.format", raw["format"], SOURCE_FORMATS)
    path = raw["path"]
    if not isinstance(path, str) or not path.strip():
        raise _fail("source.path", path, "must be a non-empty path or glob")
    for section in SOURCE_FORMATS:
        if section in raw and section != fmt:
            raise _fail(f"source.{section}", raw[section],
                        f"applies to format {section}, not {fmt}")
    limit = (parse_max_record_bytes(raw["max_record_bytes"]) if "max_record_bytes" in raw
             else None)
    options = _OPTION_PARSERS[fmt](raw.get(fmt), f"source.{fmt}")
    if fmt == "jsonl":  # source.jsonl.max_line_bytes: the older name of max_record_bytes
        alias = raw["jsonl"].get("max_line_bytes") if isinstance(raw.get("jsonl"), Mapping) \
            else None
        if alias is not None and limit is not None and alias != limit:
            raise _fail("source.jsonl.max_line_bytes", alias,
                        f"is the older name of source.max_record_bytes, which says {limit}; "
                        "give one of them")
        limit = limit if limit is not None else alias
        limit = DEFAULT_MAX_RECORD_BYTES if limit is None else limit
        options = dataclasses.replace(options, max_line_bytes=limit)
    else:
        limit = DEFAULT_MAX_RECORD_BYTES if limit is None else limit
        if hasattr(options, "max_record_bytes"):
            options = dataclasses.replace(options, max_record_bytes=limit)
    split = (parse_split_bytes(raw["split_bytes"]) if "split_bytes" in raw
             else DEFAULT_SPLIT_BYTES)
    return SourceConfig(format=fmt, path=path, max_record_bytes=limit, split_bytes=split,
                        **{fmt: options})


def _parse_output(raw: Any, name: str) -> OutputConfig:
    raw = _mapping("output", raw, allowed("output"), required("output"))
    path = raw["path"]
    if not isinstance(path, str) or not path.strip():
        raise _fail("output.path", path, "must be a non-empty local or gs:// path")
    compression = raw.get("compression", "none")
    if compression is not None and not isinstance(compression, str):
        raise _fail("output.compression", compression,
                    f"must be one of {', '.join(COMPRESSIONS)}")
    try:
        compression = normalize_compression(compression)
    except ValueError as err:
        raise _fail("output.compression", compression, str(err)) from None
    size = ShardSize()
    if "shard_size" in raw:
        sraw = _mapping("output.shard_size", raw["shard_size"], allowed("output.shard_size"))
        fields = {}
        for field in allowed("output.shard_size"):
            if field in sraw:
                try:
                    fields[field] = parse_size(sraw[field])
                except ValueError as err:
                    raise _fail(f"output.shard_size.{field}", sraw[field], str(err)) from None
        try:
            size = derive_band(fields)
        except ValueError as err:
            raise _fail("output.shard_size", dict(sraw), str(err)) from None
    shard_name = raw.get("shard_name", name)
    _named("output.shard_name", "data set", shard_name, shard_name)
    index = _typed("output.index", raw.get("index", False), bool, "true or false")
    if index and compression != "none":
        raise _fail("output.index", index, f"needs compression none: offsets into a "
                                           f"{compression} stream do not address the file")
    statistics = _typed("output.statistics", raw.get("statistics", True), bool, "true or false")
    duplicate_key = raw.get("duplicate_key")
    if duplicate_key is not None:
        if not isinstance(duplicate_key, str) or not duplicate_key.strip():
            raise _fail("output.duplicate_key", duplicate_key, "must be a field name")
        if not statistics:
            raise _fail("output.duplicate_key", duplicate_key, "duplicates are counted with "
                        "the statistics: it needs output.statistics: true")
    return OutputConfig(path=path, compression=compression, shard_size=size,
                        shard_name=shard_name, index=index,
                        shuffle_seed=_parse_shuffle(raw.get("shuffle", False)),
                        statistics=statistics,
                        duplicate_key=tuple(duplicate_key.split(".")) if duplicate_key else ())


def _parse_shuffle(raw: Any) -> int | None:
    """``output.shuffle``: ``false`` (the default: arrival order) or ``{seed: N}``."""
    if raw is False or raw is None:
        return None
    if raw is True:
        raise _fail("output.shuffle", raw, "needs a seed, so that a rebuild writes the same "
                                           "bytes: shuffle: {seed: 42}")
    raw = _mapping("output.shuffle", raw, allowed("output.shuffle"),
                   required("output.shuffle"))
    return check_seed("output.shuffle.seed", raw["seed"])


def check_seed(where: str, seed: Any) -> int:
    """A shuffle seed: an integer in [0, 2**63).

    Args:
        where: the config key or flag named in errors.
        seed: the seed given.

    Returns:
        The seed.

    Raises:
        ConfigError: not such an integer.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise _fail(where, seed, f"must be an integer from 0 to {MAX_SEED}")
    return seed


def _parse_errors(raw: Any) -> ErrorPolicy:
    raw = _mapping("errors", {} if raw is None else raw, allowed("errors"))
    fractions = {}
    for name in ("max_bad_fraction", "max_unread_fraction"):
        fraction = raw.get(name, 0.0)
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not (
            0.0 <= fraction <= 1.0
        ):
            raise _fail(f"errors.{name}", fraction, "must be a number in [0, 1]")
        fractions[name] = float(fraction)
    window = raw.get("abort_window", DEFAULT_WINDOW)
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise _fail("errors.abort_window", window, "must be a whole number of records: 0 "
                    f"(never stop early) or more (default {DEFAULT_WINDOW})")
    return ErrorPolicy(**fractions, abort_window=window)


def _parse_about(raw: Any) -> About:
    """``about:``: text fields for ``croissant.json``; ``version`` is MAJOR.MINOR.PATCH."""
    raw = _mapping("about", {} if raw is None else raw, allowed("about"))
    for name, value in raw.items():
        if not isinstance(value, str):
            raise _fail(f"about.{name}", value, "must be text")
    version = raw.get("version", croissant.DEFAULT_VERSION)
    if not re.fullmatch(croissant.SEMVER, version):
        raise _fail("about.version", version, "must be MAJOR.MINOR.PATCH, e.g. 1.2.0 "
                    "(Croissant asks for semantic versions)")
    return About(**raw)


def _parse_validate(raw: Any) -> Thresholds | None:
    """``validate:``: ``false`` (no drift gate), or the gate's thresholds (``{}`` or empty:
    the defaults)."""
    if raw is False:
        return None
    raw = _mapping("validate", {} if raw is None or raw is True else raw, allowed("validate"))
    fields: dict[str, Any] = {}
    for name in allowed("validate"):
        if name not in raw:
            continue
        value, key = raw[name], f"validate.{name}"
        if name == "schema_changes":
            fields[name] = _typed(key, value, bool, "true or false")
        elif name == "ignore":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise _fail(key, value, "must be a list of feature names")
            fields[name] = tuple(value)
        else:
            upper = math.inf if name == "max_count_change" else 1.0
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    0.0 <= value <= upper):
                raise _fail(key, value, "must be a number from 0" + (
                    " up" if upper == math.inf else " to 1"))
            fields[name] = float(value)
    return Thresholds(**fields)


def parse_config(raw: Any) -> Config:
    """A validated :class:`Config` from the mapping a YAML file loads to.

    Args:
        raw: the loaded YAML document.

    Returns:
        The config.

    Raises:
        ConfigError: a missing, unknown or invalid key; names the key and echoes the value.
    """
    raw = _mapping("", raw, allowed(""), required(""))
    name = raw["name"]
    _named("name", "data set", name, name)
    config = Config(
        name=name,
        source=_parse_source(raw["source"]),
        features=parse_features(raw["features"]),
        splits=parse_splits(raw.get("splits")),
        output=_parse_output(raw["output"], name),
        errors=_parse_errors(raw.get("errors")),
        validate=_parse_validate(raw.get("validate")),
        about=_parse_about(raw.get("about")),
    )
    if "validate" not in raw:  # the gate is on by default wherever there are statistics
        config = dataclasses.replace(
            config, validate=Thresholds() if config.output.statistics else None)
    elif config.validate is not None and not config.output.statistics:
        raise _fail("validate", raw["validate"], "the drift gate compares statistics: it "
                    "needs output.statistics: true (or validate: false)")
    return config


def load_config(path: str) -> Config:
    """Read and validate a YAML config from a local or ``gs://`` path.

    Safe tags only, and bounded: a file over 1 MiB, aliases expanding past 100,000 nodes
    (a "billion laughs"), cyclic aliases or nesting past 64 levels are refused before any
    of it is built (pipelines/safe_yaml.py); so is a mapping that holds one key twice, which
    YAML loaders otherwise resolve silently by keeping the last.

    Args:
        path: the config file's path or ``gs://`` URL.

    Returns:
        The config.

    Raises:
        ConfigError: the file is not valid YAML within those bounds, or not a valid config.
    """
    import yaml

    from beam_tfrecords.pipelines.safe_yaml import (
        MAX_BYTES,
        DuplicateKeyError,
        YamlLimitError,
        safe_load_limited,
    )
    from beam_tfrecords.runtime import storage

    try:
        with storage.open_read(path) as handle:
            data = handle.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise YamlLimitError(f"larger than {MAX_BYTES} bytes")
        text = data.decode("utf-8")
    except YamlLimitError as err:
        raise ConfigError(f"config {path!r} refused: {err}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"config {path!r} is not UTF-8 text: {err}") from None
    except Exception as err:
        raise ConfigError(f"cannot read config {path!r}: {err}") from None
    try:
        raw = safe_load_limited(text)
    except DuplicateKeyError as err:  # "config key 'features.age' appears twice (lines 7 and 12)"
        raise ConfigError(f"config {err}") from None
    except YamlLimitError as err:
        raise ConfigError(f"config {path!r} refused: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"config {path!r} is not valid YAML: {err}".replace("\n", " ")) from None
    return parse_config(raw)


def check_columns(config: Config, columns: list[str], where: str) -> None:
    """Every required feature's source field, and the split key, exist in the data.

    ``columns`` are the top-level field names of the first input (a CSV header, a schema).
    A literal dotted column name (``meta.label``) counts as present for ``source: meta.label``.

    Args:
        config: the config.
        columns: the first input's top-level field names.
        where: the input named in errors.

    Raises:
        ConfigError: a source field or the split key is missing; names it and lists the columns.
    """
    available = set(columns)
    shown = ", ".join(columns[:20]) + (", ..." if len(columns) > 20 else "")

    def present(path: tuple[str, ...]) -> bool:
        return path[0] in available or ".".join(path) in available or "/".join(
            path) in available

    for spec in config.features:
        if spec.missing == "error" and not present(spec.source):
            raise _fail(f"features.{spec.name}.source", ".".join(spec.source),
                        f"no field {spec.source[0]!r} in {where} (fields: {shown})")
    for name, path in (("splits.key", config.splits.key), ("splits.field", config.splits.field),
                       ("output.duplicate_key", config.output.duplicate_key)):
        if path and not present(path):
            raise _fail(name, ".".join(path),
                        f"no field {path[0]!r} in {where} (fields: {shown})")
