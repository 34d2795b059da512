"""The table of config keys (pipelines/config_table.py) and the config's validation agree:
every key of the table is accepted -- and changes the parsed config -- when a real config sets
it, and every key the validation accepts is in the table (each mapping is fed an unknown key,
and the validation's list of allowed ones must be the table's); and each default the table
reads from a dataclass is the one a config that leaves the key out gets."""

from __future__ import annotations

import copy
import dataclasses

import pytest

from beam_tfrecords.pipelines.config import ConfigError, parse_config
from beam_tfrecords.pipelines.config_table import allowed, config_keys, default, required
from beam_tfrecords.transforms.readers import formats

BASE = {"name": "demo", "source": {"format": "csv", "path": "in/*.csv"},
        "features": {"f": {"type": "int64"}}, "output": {"path": "out"}}
SHARES = {"a": 50, "b": 50}
# key -> the settings (dotted paths into BASE) of a config that gives it a value other than
# its default; "source.<format>..." keys switch the config to that format.
SAMPLES: dict[str, dict] = {
    "name": {"name": "other"},
    "source.format": {"source.format": "jsonl"},
    "source.path": {"source.path": "b/*.csv"},
    "source.max_record_bytes": {"source.max_record_bytes": "1MiB"},
    "source.split_bytes": {"source.split_bytes": "1MiB"},
    "source.csv.delimiter": {"source.csv": {"delimiter": ";"}},
    "source.csv.quotechar": {"source.csv": {"quotechar": "'"}},
    "source.csv.header": {"source.csv": {"header": False, "columns": ["f"]}},
    "source.csv.columns": {"source.csv": {"header": False, "columns": ["f"]}},
    "source.csv.null_values": {"source.csv": {"null_values": ["NA"]}},
    "source.jsonl.max_depth": {"source.jsonl": {"max_depth": 5}},
    "source.jsonl.max_line_bytes": {"source.jsonl": {"max_line_bytes": 1000}},
    "source.images.layout": {"source.images": {"layout": "manifest"}},
    "source.images.manifest": {"source.images": {"layout": "manifest", "manifest": "m.csv"}},
    "source.images.extensions": {"source.images": {"extensions": [".png"]}},
    "source.images.check_complete": {"source.images": {"check_complete": False}},
    "source.images.read_threads": {"source.images": {"read_threads": 4}},
    "features.<name>": {"features.g": {"type": "float"}},
    "features.<name>.type": {"features.f": {"type": "float"}},
    "features.<name>.shape": {"features.f": {"type": "int64", "shape": [2]}},
    "features.<name>.source": {"features.f": {"type": "int64", "source": "a.b"}},
    "features.<name>.missing": {"features.f": {"type": "int64", "missing": "omit"}},
    "features.<name>.default": {"features.f": {"type": "int64", "missing": "default",
                                               "default": 3}},
    "features.<name>.nan": {"features.f": {"type": "float", "nan": "error"}},
    "features.<name>.unit": {"features.f": {"type": "int64", "unit": "ms"}},
    "features.<name>.format": {"features.f": {"type": "int64", "format": "%Y"}},
    "features.<name>.scale": {"features.f": {"type": "int64", "scale": 2}},
    "features.<name>.sequence": {"features.f": {"type": "int64", "sequence": True}},
    "splits": {"splits": SHARES},
    "splits.key": {"splits": {"key": "id", **SHARES}},
    "splits.<split>": {"splits": SHARES},
    "splits.null_key": {"splits": {"key": "id", "null_key": "a", **SHARES}},
    "splits.field": {"splits": {"field": "s", "names": ["a", "b"]}},
    "splits.names": {"splits": {"field": "s", "names": ["a", "b"]}},
    "output.path": {"output.path": "elsewhere"},
    "output.compression": {"output.compression": "gzip"},
    "output.shard_size": {"output.shard_size": {"target": "30MB"}},
    "output.shard_size.target": {"output.shard_size": {"target": "30MB"}},
    "output.shard_size.min": {"output.shard_size": {"min": "10MB"}},
    "output.shard_size.max": {"output.shard_size": {"max": "400MB"}},
    "output.shard_name": {"output.shard_name": "part"},
    "output.index": {"output.index": True},
    "output.shuffle": {"output.shuffle": {"seed": 7}},
    "output.shuffle.seed": {"output.shuffle": {"seed": 7}},
    "output.statistics": {"output.statistics": False},
    "output.duplicate_key": {"output.duplicate_key": "id"},
    "validate": {"validate": False},  # differs from the default: the gate on
    "validate.max_count_change": {"validate": {"max_count_change": 0.5}},
    "validate.max_missing_change": {"validate": {"max_missing_change": 0.5}},
    "validate.max_linf": {"validate": {"max_linf": 0.5}},
    "validate.max_jsd": {"validate": {"max_jsd": 0.5}},
    "validate.max_new_values": {"validate": {"max_new_values": 0.5}},
    "validate.max_reject_increase": {"validate": {"max_reject_increase": 0.5}},
    "validate.max_unread_increase": {"validate": {"max_unread_increase": 0.5}},
    "validate.max_duplicate_increase": {"validate": {"max_duplicate_increase": 0.5}},
    "validate.max_leak_increase": {"validate": {"max_leak_increase": 0.5}},
    "validate.schema_changes": {"validate": {"schema_changes": True}},
    "validate.ignore": {"validate": {"ignore": ["a"]}},
    "about": {"about": {"license": "CC-BY-4.0"}},
    "about.description": {"about": {"description": "People and their scores."}},
    "about.license": {"about": {"license": "CC-BY-4.0"}},
    "about.citation": {"about": {"citation": "@misc{people}"}},
    "about.url": {"about": {"url": "https://example.org/people"}},
    "about.version": {"about": {"version": "2.1.0"}},
    "errors": {"errors": {"max_bad_fraction": 0.5}},
    "errors.max_bad_fraction": {"errors": {"max_bad_fraction": 0.5}},
    "errors.max_unread_fraction": {"errors": {"max_unread_fraction": 0.5}},
    "errors.abort_window": {"errors": {"abort_window": 5}},
}
# Keys every config holds (BASE sets them), or format sections that have no options to set.
IN_BASE = {"source", "features", "output", "source.csv",
           *(f"source.{f.name}" for f in formats.FORMATS)}


def _format_section(path: str) -> bool:
    """Whether ``path`` is a format's options (``source.csv``)."""
    parts = path.split(".")
    return len(parts) == 2 and parts[0] == "source" and parts[1] in formats.names()


def _config(settings: dict) -> dict:
    raw = copy.deepcopy(BASE)
    for path, value in settings.items():
        parts = path.split(".")
        if _format_section(path):
            raw["source"] = {"format": parts[1], "path": "in"}  # that format's own config
        node = raw
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = copy.deepcopy(value)
    return raw


@pytest.mark.parametrize("key", [k.key for k in config_keys()])
def test_every_key_of_the_table_is_accepted_and_read(key):
    if key in IN_BASE:
        section = key.split(".")[1] if key.startswith("source.") else None
        assert parse_config(_config({f"source.{section}": {}} if section else {}))
        return
    assert key in SAMPLES, f"the table's key {key} has no sample config here: add one"
    same_format = {path: {} for path in SAMPLES[key] if _format_section(path)}
    assert parse_config(_config(SAMPLES[key])) != parse_config(_config(same_format))


def _allowed_by_validation(raw: dict, where: str) -> tuple[str, ...]:
    """The keys the validation lists as allowed when ``where`` holds an unknown one."""
    node = raw
    for part in where.split(".") if where else ():
        node = node.setdefault(part, {})
    node["no_such_key"] = 1
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    message = str(err.value)
    assert f"'{where + '.' if where else ''}no_such_key'" in message, message
    shown = message.split("allowed here: ", 1)[1].rsplit(" (got", 1)[0]
    return () if shown.startswith("nothing") else tuple(shown.split(", "))


@pytest.mark.parametrize("where,settings", [
    ("", {}), ("source", {}), ("features.f", {}), ("output", {}),
    ("output.shard_size", {"output.shard_size": {}}), ("output.shuffle", {"output.shuffle": {}}),
    ("errors", {"errors": {}}), ("splits", {"splits": {"field": "s", "names": ["a"]}}),
    *((f"source.{f.name}", {f"source.{f.name}": {}}) for f in formats.FORMATS)])
def test_every_key_the_validation_accepts_is_in_the_table(where, settings):
    shown = _allowed_by_validation(_config(settings), where)
    parent = "features.<name>" if where == "features.f" else where
    table = allowed(parent)
    if where == "splits":  # the field form: its own two keys, both required
        assert shown == ("field", "names") and set(shown) <= set(table)
        return
    assert shown == table
    for name in required(parent):
        raw = _config(settings)
        node = raw
        for part in where.split(".") if where else ():
            node = node.setdefault(part, {})
        node.pop(name, None)
        with pytest.raises(ConfigError, match="is required"):
            parse_config(raw)


@pytest.mark.parametrize("key", [k for k in config_keys() if k.field], ids=lambda k: k.key)
def test_each_default_shown_is_the_one_the_validation_applies(key):
    """A default the reference reads from a dataclass is what a config leaving the key out
    gets (the parsers spell some defaults out again)."""
    parts = key.key.split(".")
    section = ".".join(parts[:2])
    config = parse_config(_config({section: {}} if _format_section(section) else {}))
    if parts[0] == "features":  # the resolved config leaves some feature defaults out
        node = getattr(config.features[0], parts[-1])
    elif key.key == "source.split_bytes":  # left out of the resolved config at its default
        node = config.source.split_bytes
    elif parts[0] in ("validate", "about"):  # likewise these defaults (not shown)
        node = getattr(getattr(config, parts[0]), parts[-1])
    else:
        node = config.resolved()
        for part in parts:
            node = node[part]
    expected = default(key)
    expected = dataclasses.asdict(expected) if dataclasses.is_dataclass(expected) else expected
    listed = (tuple, list)
    assert (list(node) if isinstance(node, listed) else node) == (
        list(expected) if isinstance(expected, listed) else expected)
