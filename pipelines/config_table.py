"""Every config key in one table: the config's validation takes its allowed keys from it, and
the reference in docs/config.md is generated from it, so neither can drift from the other.

:data:`SECTION_KEYS` holds the keys of the config's own sections (``name``, ``source``,
``output``, ``errors``), beside their dataclasses in pipelines/config.py; each source format's
``source.<format>`` keys come from its descriptor (transforms/readers/formats.py), the
``features.<name>`` and ``splits`` keys from the codec that parses them
(transforms/codec/config_keys.py). :func:`config_keys` puts them together in the order the
page shows them. Defaults are read from the dataclass fields the rows name (:func:`default`),
which imports the modules holding them (and with them Beam); the table itself imports none.

``python -m beam_tfrecords.pipelines.config_table`` prints the reference as Markdown (the
docs build runs it through the project's environment: scripts/mkdocs_hooks.py).

Pure: no Beam, no I/O (until a default is read).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
from typing import Any

from beam_tfrecords.transforms.codec.config_keys import FEATURE_KEYS, SPLIT_KEYS, ConfigKey
from beam_tfrecords.transforms.readers import formats

__all__ = ["NO_DEFAULT", "SECTION_KEYS", "allowed", "config_keys", "default", "markdown",
           "required", "shown_default"]

_CONFIG = "beam_tfrecords.pipelines.config"
_SHARDS = "beam_tfrecords.sinks.format.shard_plan:ShardSize"

_ROOT = (
    ConfigKey("name", "string", "The data set's name: the shard files' prefix, and the name "
              "in its manifest.", "a name the output layout can hold", required=True),
    ConfigKey("source", "mapping", "Where the records come from ([Sources](sources.md)).",
              required=True),
)
_SOURCE = (
    ConfigKey("source.format", "string", "The input's format; its options sit in "
              "`source.<format>`.", ", ".join(f"`{name}`" for name in formats.names()),
              required=True),
    ConfigKey("source.path", "string", "A glob of input files, local or `gs://`; for `images` "
              "the root folder or the manifest CSV.", required=True),
    ConfigKey("source.max_record_bytes", "size", "The largest record (CSV row, JSON line, Avro "
              "block) a reader holds; a larger one is a dead letter ([unread input]"
              "(sources.md#unread-input)).", "bytes: `4096`, `\"64MiB\"`, `\"64MB\"`",
              field=f"{_CONFIG}:SourceConfig.max_record_bytes"),
    ConfigKey("source.split_bytes", "size", "A file larger than this is read as ranges of "
              "about this size that workers share: CSV and JSON Lines by bytes, Parquet by "
              "row groups, Avro by blocks; compressed text, images and Parquet of one row "
              "group stay whole ([Performance](performance.md#one-big-file)). It changes "
              "nothing in the output, nor the config's hash.",
              "bytes: `1048576`, `\"64MiB\"`, `\"64MB\"`",
              field=f"{_CONFIG}:SourceConfig.split_bytes"),
)
_REST = (
    ConfigKey("features", "mapping", "The output features, by name.", required=True),
    ConfigKey("splits", "mapping", "How records are divided into splits: by a hashed key and "
              "shares, or by a field naming each record's split.",
              default="one split, `train: 100`"),
)
_OUTPUT = (
    ConfigKey("output", "mapping", "Where and how the data set is written.", required=True),
    ConfigKey("output.path", "string", "The data set's root, local or `gs://`: its versions "
              "and `LATEST`.", required=True),
    ConfigKey("output.compression", "string", "How shards are compressed: `none` "
              "(`.tfrecord`), `gzip` (`.tfrecord.gz`), `zlib` (`.tfrecord.deflate`).",
              "`none`, `gzip`, `zlib`", field=f"{_CONFIG}:OutputConfig.compression"),
    ConfigKey("output.shard_size", "mapping", "The band of stored bytes per shard; any of its "
              "parts, the others following the default's proportions ([Shard sizes]"
              "(#shard-sizes)).", field=f"{_CONFIG}:OutputConfig.shard_size"),
    ConfigKey("output.shard_size.target", "size", "The shard size aimed at.",
              field=f"{_SHARDS}.target"),
    ConfigKey("output.shard_size.min", "size", "The smallest shard but a split's last.",
              field=f"{_SHARDS}.min"),
    ConfigKey("output.shard_size.max", "size", "The largest shard; at least twice `min`.",
              field=f"{_SHARDS}.max"),
    ConfigKey("output.shard_name", "string", "The shard files' name prefix.",
              "a name the output layout can hold", default="the data set's `name`"),
    ConfigKey("output.index", "bool", "Write an `index/<split>/<shard>.index` sidecar per "
              "shard (`offset length` per record); uncompressed shards only.",
              field=f"{_CONFIG}:OutputConfig.index"),
    ConfigKey("output.shuffle", "mapping", "`false`: records in arrival order; `{seed: N}`: "
              "in that seed's pseudo-random order, the same bytes on every runner "
              "([Shuffled shards](#shuffled-shards)).", "`false`, `{seed: N}`",
              default="`false`"),
    ConfigKey("output.shuffle.seed", "integer", "The shuffle's seed.", "0 to 2^63 - 1",
              required=True),
    ConfigKey("output.statistics", "bool", "Write per-split statistics in TensorFlow Data "
              "Validation's format, `statistics/Split-<split>/FeatureStats.pb`, computed in the "
              "same pass ([Statistics](statistics.md)), and count duplicate records and "
              "records in several splits ([Duplicates and leaks]"
              "(statistics.md#duplicates-and-leaks)).", default="`true`"),
    ConfigKey("output.duplicate_key", "string", "A field whose equal values make two records "
              "duplicates, and a leak when they are in different splits, whatever else they "
              "hold (a dotted path for a nested field); without it records are compared by "
              "their serialized bytes ([Duplicates and leaks]"
              "(statistics.md#duplicates-and-leaks)).", "a source field",
              default="none: the serialized bytes"),
)
_ERRORS = (
    ConfigKey("errors", "mapping", "How many bad records a build accepts.",
              default="the defaults below"),
    ConfigKey("errors.max_bad_fraction", "number", "The build fails when rejected records / "
              "records read exceed this.", "0 to 1",
              field=f"{_CONFIG}:ErrorPolicy.max_bad_fraction"),
    ConfigKey("errors.max_unread_fraction", "number", "The build fails when unread bytes / "
              "input bytes exceed this.", "0 to 1",
              field=f"{_CONFIG}:ErrorPolicy.max_unread_fraction"),
    ConfigKey("errors.abort_window", "integer", "Records a worker reads before it may stop a "
              "build that cannot meet `max_bad_fraction` ([early stop]"
              "(design.md#a-build-that-cannot-meet-the-threshold-stops-early)); 0: never "
              "stop early.", "0 or more", field=f"{_CONFIG}:ErrorPolicy.abort_window"),
)
_DRIFT = "beam_tfrecords.transforms.stats.drift:Thresholds"
_VALIDATE = (
    ConfigKey("validate", "mapping or false", "The drift gate: compare each build's "
              "statistics with the version `LATEST` names, and leave `LATEST` where it is when "
              "a difference passes a threshold below "
              "([Statistics](statistics.md#the-drift-gate)); on with statistics, `false` "
              "turns it off.", default="the defaults below"),
    ConfigKey("validate.max_count_change", "number", "A split's record count may change by "
              "this share of the previous version's.", "0 or more",
              field=f"{_DRIFT}.max_count_change"),
    ConfigKey("validate.max_missing_change", "number", "A feature's share of Examples without "
              "it may move by this much.", "0 to 1", field=f"{_DRIFT}.max_missing_change"),
    ConfigKey("validate.max_linf", "number", "The largest L-infinity distance between a "
              "string feature's value shares.", "0 to 1", field=f"{_DRIFT}.max_linf"),
    ConfigKey("validate.max_jsd", "number", "The largest Jensen-Shannon divergence (base 2) "
              "between a number feature's distributions.", "0 to 1",
              field=f"{_DRIFT}.max_jsd"),
    ConfigKey("validate.max_new_values", "number", "The share of a string feature's values "
              "that may belong to values new to the version (or vanished from it).", "0 to 1",
              field=f"{_DRIFT}.max_new_values"),
    ConfigKey("validate.max_reject_increase", "number", "The rejected share of records read "
              "may grow by this much.", "0 to 1", field=f"{_DRIFT}.max_reject_increase"),
    ConfigKey("validate.max_unread_increase", "number", "The unread share of the input bytes "
              "may grow by this much.", "0 to 1", field=f"{_DRIFT}.max_unread_increase"),
    ConfigKey("validate.max_duplicate_increase", "number", "The share of records written "
              "that duplicate another record of their split may grow by this much "
              "([Duplicates and leaks](statistics.md#duplicates-and-leaks)).", "0 to 1",
              field=f"{_DRIFT}.max_duplicate_increase"),
    ConfigKey("validate.max_leak_increase", "number", "The share of records written that are "
              "also in another split may grow by this much.", "0 to 1",
              field=f"{_DRIFT}.max_leak_increase"),
    ConfigKey("validate.schema_changes", "bool", "Features added, removed or retyped pass.",
              field=f"{_DRIFT}.schema_changes"),
    ConfigKey("validate.ignore", "list of strings", "Features left out of the per-feature "
              "checks (ids, timestamps: they drift by design).", "stored feature keys",
              default="none"),
)
_ABOUT = (
    ConfigKey("about", "mapping", "What the data set is, for each version's `croissant.json` "
              "(Croissant 1.1, [Statistics](statistics.md#croissant)).", default="the "
              "defaults below"),
    ConfigKey("about.description", "string", "One paragraph on the data set.",
              default="\"The <name> data set.\""),
    ConfigKey("about.license", "string", "Its license: a URL or an SPDX name.",
              default="`unknown`"),
    ConfigKey("about.citation", "string", "How to cite it (e.g. BibTeX).",
              default="\"<name>, version <version>\""),
    ConfigKey("about.url", "string", "Where it is described.", default="none"),
    ConfigKey("about.version", "string", "The data set's version (not a version folder's "
              "name).", "MAJOR.MINOR.PATCH", field=f"{_CONFIG}:About.version"),
)
# The config's own sections' keys (the formats', features' and splits' are elsewhere).
SECTION_KEYS: tuple[ConfigKey, ...] = (_ROOT + _SOURCE + _REST + _OUTPUT + _ERRORS + _VALIDATE
                                       + _ABOUT)


def _format_section(fmt: formats.FormatDescriptor) -> ConfigKey:
    keys = ", ".join(f"`{key}`" for key in fmt.option_keys)
    return ConfigKey(f"source.{fmt.name}", "mapping",
                     f"The `{fmt.name}` reader's options: {keys}." if keys else
                     f"The `{fmt.name}` reader's options: none yet.",
                     default="the defaults below" if keys else "`{}`")


@functools.cache
def config_keys() -> tuple[ConfigKey, ...]:
    """Every key a config may hold, in the reference's order.

    Returns:
        One row per key.
    """
    by_format = tuple(key for fmt in formats.FORMATS
                      for key in (_format_section(fmt), *fmt.config_keys()))
    return (_ROOT + _SOURCE + by_format + _REST[:1] + FEATURE_KEYS + _REST[1:] + SPLIT_KEYS
            + _OUTPUT + _ERRORS + _VALIDATE + _ABOUT)


def allowed(parent: str) -> tuple[str, ...]:
    """The names a config mapping allows, for its validation.

    Args:
      parent: the mapping's key (``""``: the root; ``output.shard_size``; ``features.<name>``).

    Returns:
      The last parts of the table's keys directly below ``parent``, in the table's order."""
    return tuple(k.leaf for k in config_keys() if k.parent == parent)


def required(parent: str) -> tuple[str, ...]:
    """The names a config mapping requires (as :func:`allowed`, the required ones only).

    Args:
      parent: the mapping's key.

    Returns:
      The last parts of its required keys, in the table's order."""
    return tuple(k.leaf for k in config_keys() if k.parent == parent and k.required)


NO_DEFAULT = object()  # what :func:`default` gives for a key whose default is no field's value


def default(key: ConfigKey) -> Any:
    """The default of a key as the code holds it.

    Args:
      key: a row of the table.

    Returns:
      The value of the dataclass field the row names (importing that module, which may import
      Beam), or :data:`NO_DEFAULT` when it names none (its default is said in words)."""
    if not key.field:
        return NO_DEFAULT
    module, _, path = key.field.partition(":")
    owner, name = path.split(".")
    cls = getattr(importlib.import_module(module), owner)
    for field in dataclasses.fields(cls):
        if field.name == name:
            if field.default_factory is not dataclasses.MISSING:
                return field.default_factory()
            return field.default
    raise LookupError(f"{key.key}: {owner} has no field {name!r}")


def _shown(value: Any, kind: str) -> str:
    """A default as YAML would spell it."""
    if dataclasses.is_dataclass(value):
        return "`{" + ", ".join(f"{f.name}: {_plain(getattr(value, f.name))}"
                                for f in dataclasses.fields(value)) + "}`"
    shown = f"`{_plain(value)}`"
    if kind == "size" and isinstance(value, int) and value:
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("GB", 10**9), ("MB", 10**6)):
            if value % size == 0:
                return f"{shown} ({value // size} {unit})"
    return shown


def _plain(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value)


def shown_default(key: ConfigKey) -> str:
    """What the reference says of a key's default.

    Args:
      key: a row of the table.

    Returns:
      ``required``, the default as YAML spells it (in backticks, a size also in MiB or MB), or
      the row's words for it."""
    if key.required:
        return "required"
    value = default(key)
    if value is not NO_DEFAULT:
        return _shown(value, key.type)
    return key.default or "none"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown() -> str:
    """The config reference, for docs/config.md.

    Returns:
      A Markdown table, one row per key of :func:`config_keys`: key, type, allowed values,
      default, meaning."""
    rows = ["| key | type | values | default | meaning |", "|---|---|---|---|---|"]
    rows += [f"| `{k.key}` | {k.type} | {_cell(k.values)} | {_cell(shown_default(k))} | "
             f"{_cell(k.meaning)} |" for k in config_keys()]
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown())
