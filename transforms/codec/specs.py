"""The ``features:`` and ``splits:`` mappings as typed specs, every mistake named by its key.

The same mappings reach us from a config file (pipelines/config.py) and from Python and Beam
YAML users of the public transforms (``btf.ToExamples(features={...})``), so they are parsed
here, below both: Beam-free and I/O-free. Each error is one line that names the key
(``features.pixels.shape``) and echoes the bad value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from beam_tfrecords.errors import UserError
from beam_tfrecords.sinks.format.layout import InvalidName, check_name
from beam_tfrecords.transforms.codec.config_keys import FEATURE_KEYS, leaves
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec, FeatureSpecError
from beam_tfrecords.transforms.codec.splits import SplitSpec
from beam_tfrecords.transforms.codec.text_values import ISO8601

__all__ = ["ConfigError", "FeaturesLike", "SplitsLike", "as_feature_specs", "parse_features",
           "parse_splits"]

FeaturesLike = Mapping[str, Mapping[str, Any]] | Sequence[FeatureSpec]
"""What the public transforms take as ``features``: a config's ``features:`` mapping as plain
Python (``{"age": {"type": "int64"}, "emb": {"type": "float", "shape": [3]}}``), or a
sequence of FeatureSpec."""

SplitsLike = Mapping[str, Any] | SplitSpec | Sequence[str]
"""What the public transforms take as ``splits``: a config's ``splits:`` mapping
(``{"key": "id", "train": 80, "eval": 20}``), a SplitSpec, or -- for ``(split, bytes)`` input
to ``WriteTFRecordDataset`` -- the list of split names to expect."""


class ConfigError(UserError, ValueError):
    """An invalid configuration; the message names the key and echoes the value."""


def _fail(key: str, value: Any, reason: str) -> ConfigError:
    shown = json.dumps(value, default=repr)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    return ConfigError(f"config key {key!r}: {reason} (got {shown})")


def _mapping(key: str, value: Any, allowed: tuple[str, ...], required: tuple[str, ...] = ()
             ) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _fail(key, value, "must be a mapping")
    for name in value:
        if name not in allowed:
            where = ", ".join(allowed) or "nothing (no options yet)"
            raise _fail(f"{key}.{name}" if key else str(name), value[name],
                        f"unknown key; allowed here: {where}")
    for name in required:
        if name not in value:
            raise _fail(f"{key}.{name}" if key else name, None, "is required")
    return value


def _named(key: str, kind: str, name: Any, echo: Any) -> str:
    """``name`` if the output layout can hold it as a ``kind`` name (sinks/format/layout.py: checked
    whole, reserved names refused), else a ConfigError naming ``key`` and echoing ``echo``."""
    try:
        return check_name(kind, name)
    except InvalidName as err:
        shown = key if len(key) <= 160 else key[:157] + "..."
        reason = str(err) if len(str(err)) <= 200 else str(err)[:197] + "..."
        raise _fail(shown, echo, reason) from None


def _typed(key: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        raise _fail(key, value, f"must be {what}")
    if not isinstance(value, kind):
        raise _fail(key, value, f"must be {what}")
    return value


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise _fail(key, value, f"must be one of {', '.join(choices)}")
    return value


# The keys a feature's mapping allows: the documented table's (config_keys.py).
_FEATURE_KEYS = leaves(FEATURE_KEYS, "features.<name>")


def _parse_feature(name: Any, raw: Any) -> FeatureSpec:
    key = f"features.{name}"
    if not isinstance(name, str) or not name or name.startswith("/") or name.endswith("/"):
        raise _fail(key, name, "a feature name must be a non-empty string, not starting or "
                                "ending with '/'")
    raw = _mapping(key, raw, _FEATURE_KEYS, ("type",))
    shape = raw.get("shape", [])
    if not isinstance(shape, list):
        raise _fail(f"{key}.shape", shape, "must be a list of sizes, e.g. [28, 28] or [-1]")
    source = raw.get("source", "")
    if not isinstance(source, str) or (source and not all(source.split("."))):
        raise _fail(f"{key}.source", source, "must be a field name or a dotted path (a.b.c)")
    sequence = _typed(f"{key}.sequence", raw.get("sequence", False), bool, "true or false")
    # Text is a date or datetime for an int64 feature that names its unit or its layout.
    fmt = raw.get("format", ISO8601 if "unit" in raw and raw.get("type") == "int64" else None)
    if "format" in raw and not isinstance(fmt, str):
        raise _fail(f"{key}.format", fmt, f"must be {ISO8601!r} or a strptime layout such "
                                          "as '%d/%m/%Y %H:%M'")
    if "default" in raw and raw.get("missing", "error") != "default":
        raise _fail(f"{key}.default", raw["default"], "is set but would never be used; add "
                                                     "'missing: default' or remove it")
    try:
        return FeatureSpec(
            name=name,
            dtype=raw["type"],
            shape=tuple(shape),
            source=tuple(source.split(".")) if source else (),
            missing=raw.get("missing", "error"),
            default=raw.get("default"),
            nan=raw.get("nan", "allow"),
            unit=raw.get("unit", "s"),
            sequence=sequence,
            format=fmt,
            scale=raw.get("scale", 0),
        )
    except FeatureSpecError as err:  # FeatureSpec's own checks name the field at fault
        field = "type" if err.field == "dtype" else err.field
        raise ConfigError(f"config key '{key}.{field}': {err}") from None
    except ValueError as err:
        raise ConfigError(f"config key {key!r}: {err}") from None


def parse_features(raw: Any) -> tuple[FeatureSpec, ...]:
    """The ``features:`` mapping (feature name -> spec mapping) as FeatureSpecs, checked
    whole: each spec, and no two features storing the same key.

    Args:
        raw: the config's ``features:`` value.

    Returns:
        The specs, in the mapping's order.

    Raises:
        ConfigError: a spec is invalid or two features store the same key; names the key.
    """
    if not isinstance(raw, Mapping) or not raw:
        raise _fail("features", raw, "must map at least one feature name to its spec")
    specs = tuple(_parse_feature(name, spec) for name, spec in raw.items())
    from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
    from beam_tfrecords.transforms.codec.feature_spec import stored_keys

    seen: dict[str, str] = {}
    for spec in specs:
        for stored in stored_keys(spec):
            if stored in seen and seen[stored] != spec.name:
                raise _fail(f"features.{spec.name}", stored,
                            f"stores a feature key that {seen[stored]!r} also stores")
            seen[stored] = spec.name
        try:
            ExampleEncoder([spec])  # validates the default value against the policy
        except ValueError as err:
            raise ConfigError(f"config key 'features.{spec.name}.default': {err}") from None
    return specs


def as_feature_specs(features: FeaturesLike) -> tuple[FeatureSpec, ...]:
    """A ``features:`` mapping (as a config holds it) or FeatureSpecs -> FeatureSpecs.

    Args:
        features: a ``features:`` mapping or a sequence of FeatureSpec.

    Returns:
        The specs.

    Raises:
        TypeError: neither form.
        ConfigError: the mapping is invalid.
    """
    if isinstance(features, Mapping):
        return parse_features(features)
    specs = tuple(features)
    if not specs or not all(isinstance(s, FeatureSpec) for s in specs):
        raise TypeError("features must be a mapping of feature name -> spec (as in a "
                        "config's features: section) or a sequence of FeatureSpec")
    return specs


def parse_splits(raw: Any) -> SplitSpec:
    """The ``splits:`` mapping (``{key: id, train: 80, eval: 20}`` or ``{field: f, names:
    [...]}``) as a SplitSpec; None is one split named ``train``.

    Args:
        raw: the config's ``splits:`` value, or None.

    Returns:
        The split spec.

    Raises:
        ConfigError: the mapping is invalid; names the key.
    """
    if raw is None:
        return SplitSpec()
    if not isinstance(raw, Mapping):
        raise _fail("splits", raw, "must map split names to percentages (and an optional key)")
    if "field" in raw:
        return _parse_field_splits(raw)
    key = raw.get("key")
    if key is not None and (not isinstance(key, str) or not key or not all(key.split("."))):
        raise _fail("splits.key", key, "must be a field name or a dotted path")
    null_key = raw.get("null_key", "reject")
    if "null_key" in raw and key is None:
        raise _fail("splits.null_key", null_key, "applies only with a splits.key")
    shares = []
    for name, pct in raw.items():
        if name in ("key", "null_key"):
            continue
        _named(f"splits.{name}", "split", name, pct)
        if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0 < pct <= 100:
            raise _fail(f"splits.{name}", pct, "must be a percentage in (0, 100]")
        shares.append((name, float(pct)))
    if not shares:
        raise _fail("splits", dict(raw), "names no split")
    total = sum(p for _, p in shares)
    if abs(total - 100.0) > 1e-9:
        raise _fail("splits", {n: p for n, p in shares},
                    f"percentages sum to {total:.12g}, not 100")
    names = [n for n, _ in shares]
    if null_key != "reject" and null_key not in names:
        raise _fail("splits.null_key", null_key,
                    f"must be 'reject' or one of the splits ({', '.join(names)})")
    try:
        return SplitSpec(shares=tuple(shares), key=tuple(key.split(".")) if key else (),
                         null_key=null_key)
    except ValueError as err:
        raise ConfigError(f"config key 'splits': {err}") from None


def _parse_field_splits(raw: Mapping[str, Any]) -> SplitSpec:
    """``splits: {field: split, names: [train, eval]}``: each record names its split."""
    raw = _mapping("splits", raw, ("field", "names"), ("field", "names"))
    field = raw["field"]
    if not isinstance(field, str) or not field or not all(field.split(".")):
        raise _fail("splits.field", field, "must be a field name or a dotted path")
    names = raw["names"]
    if not isinstance(names, list) or not names or len(set(map(str, names))) != len(names):
        raise _fail("splits.names", names, "must list distinct split names")
    for name in names:
        _named("splits.names", "split", name, names)
    share = 100.0 / len(names)
    try:
        return SplitSpec(shares=tuple((n, share) for n in names), field=tuple(field.split(".")))
    except ValueError as err:
        raise ConfigError(f"config key 'splits': {err}") from None
