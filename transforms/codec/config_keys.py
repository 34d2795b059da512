"""The documented config keys: one row per key, the kind every part of the config's table is
made of, and the rows of the ``features.<name>`` and ``splits`` mappings parsed here below.

A :class:`ConfigKey` says what a key holds (its type and allowed values), what it means (one
sentence, Markdown) and where its default lives: a dataclass field named by reference
(``"beam_tfrecords.transforms.codec.feature_spec:FeatureSpec.nan"``), read when the reference
page is made, so the page shows the code's own default and cannot drift from it; or, when the
default is not one field's value (the data set's name, one split named ``train``), a few
words saying what it is. The references are resolved on use, so this table imports no Beam.
The whole table -- these rows, the sections' and each source format's
(transforms/readers/formats.py) -- is put together by pipelines/config_table.py.

Pure: no Beam, no I/O.
"""

from __future__ import annotations

import dataclasses

__all__ = ["FEATURE_KEYS", "SPLIT_KEYS", "ConfigKey", "leaves"]


@dataclasses.dataclass(frozen=True)
class ConfigKey:
    """One config key.

    Attributes:
      key: the key, dotted from the config's root (``features.<name>.shape``); ``<...>`` marks
        a name the user chooses. Within a format descriptor, the key below ``source.<format>``.
      type: what YAML value it holds (``string``, ``integer``, ``number``, ``bool``, ``size``
        (bytes, or text such as ``64MiB``), ``list of strings``, ``mapping``, ``any``).
      meaning: one sentence (Markdown, links relative to docs/).
      values: the values allowed, when narrower than the type ("" when the type says it).
      field: ``"module:Class.field"``, the dataclass field holding the default.
      default: the default in words, when it is not one field's value.
      required: the key must be given (no default).
    """

    key: str
    type: str
    meaning: str
    values: str = ""
    field: str = ""
    default: str = ""
    required: bool = False

    @property
    def leaf(self) -> str:
        """The last part of the key: what its own mapping calls it."""
        return self.key.rsplit(".", 1)[-1]

    @property
    def parent(self) -> str:
        """The mapping the key sits in ("" for the root)."""
        return self.key.rsplit(".", 1)[0] if "." in self.key else ""


def leaves(keys: tuple[ConfigKey, ...], parent: str) -> tuple[str, ...]:
    """The names ``keys`` allow directly in the mapping ``parent``, in the table's order.

    Args:
        keys: the table of config keys.
        parent: the dotted path of a mapping (``""`` for the top level).

    Returns:
        The key names.
    """
    return tuple(k.leaf for k in keys if k.parent == parent)


_SPEC = "beam_tfrecords.transforms.codec.feature_spec:FeatureSpec"
_SPLITS = "beam_tfrecords.transforms.codec.splits:SplitSpec"
_F = "features.<name>"

FEATURE_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(_F, "mapping", "One output feature: its key in the Example is `<name>` "
              "(`/` allowed, e.g. `image/height`).", required=True),
    ConfigKey(f"{_F}.type", "string", "What the feature stores ([the codec's table]"
              "(design.md#our-own-codec-not-protobufs)); `string` is UTF-8 text stored as "
              "bytes, `float` is stored as float32.",
              "`int64`, `float`, `string`, `bytes`", required=True),
    ConfigKey(f"{_F}.shape", "list of integers", "The value's shape: `[]` a scalar, fixed "
              "sizes checked and stored flat, `-1` for a variable size ([how shapes are stored]"
              "(design.md#how-shapes-are-stored)).", "sizes, `-1` for variable ones",
              field=f"{_SPEC}.shape"),
    ConfigKey(f"{_F}.source", "string", "The field the value is read from; a dotted path "
              "`a.b.c` reaches into nested records.", "a field name or a dotted path",
              default="the feature's name"),
    ConfigKey(f"{_F}.missing", "string", "What a missing (null or absent) value does: "
              "`error` rejects the record, `omit` leaves the feature out of that Example, "
              "`default` stores `default:`, `empty` stores an empty list.",
              "`error`, `omit`, `default`, `empty`", field=f"{_SPEC}.missing"),
    ConfigKey(f"{_F}.default", "any", "The value stored for a missing one (with "
              "`missing: default` only), checked against the feature's type and shape.",
              "a value of the feature's type", field=f"{_SPEC}.default"),
    ConfigKey(f"{_F}.nan", "string", "What a float NaN does: `allow` stores it, `error` "
              "rejects the record, `missing` treats it as missing.",
              "`allow`, `error`, `missing`", field=f"{_SPEC}.nan"),
    ConfigKey(f"{_F}.unit", "string", "An int64 date, datetime, time or timestamp is stored "
              "as an integer in this unit since 1970-01-01 UTC (a time of day: since "
              "midnight); naming it makes text a date ([below]"
              "(#numbers-and-dates-written-as-text)).", "`s`, `ms`, `us`, `ns`, `days`",
              field=f"{_SPEC}.unit"),
    ConfigKey(f"{_F}.format", "string", "How int64 date text is laid out: `iso8601` or a "
              "`strptime` layout such as `\"%d/%m/%Y\"`.", "`iso8601`, a `strptime` layout",
              default="`iso8601` with `unit:`, else text is a number"),
    ConfigKey(f"{_F}.scale", "integer", "An int64 feature stores numbers times 10^k, refusing "
              "more than k decimal places ([below](#times-of-day-and-scaled-numbers)).",
              "0 to 18", field=f"{_SPEC}.scale"),
    ConfigKey(f"{_F}.sequence", "bool", "The feature is a per-step feature list of a "
              "`tf.train.SequenceExample`.", field=f"{_SPEC}.sequence"),
)

SPLIT_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("splits.key", "string", "The field hashed to choose each record's split.",
              "a field name or a dotted path", default="the whole record"),
    ConfigKey("splits.<split>", "number", "The share of records in split `<split>`, in "
              "percent; the shares sum to 100.", "above 0, up to 100",
              default="one split, `train: 100`"),
    ConfigKey("splits.null_key", "string", "Where a record whose `key` is null or absent goes: "
              "`reject` makes it a dead letter ([Splits](#splits)).",
              "`reject` or a split's name", field=f"{_SPLITS}.null_key"),
    ConfigKey("splits.field", "string", "The field in which each record names its own split "
              "([image folders](sources.md#image-folders)); with `names`, instead of shares.",
              "a field name or a dotted path"),
    ConfigKey("splits.names", "list of strings", "The split names `field` may hold.",
              "distinct split names"),
)
