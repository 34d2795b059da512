"""Tests for splits (transforms/codec): canonical keys, pinned assignments, proportions."""

from __future__ import annotations

import datetime
import decimal
import json

import numpy as np
import pytest

from beam_tfrecords.transforms.codec.splits import BUCKETS, SplitSpec, key_bytes

# --- key_bytes ----------------------------------------------------------------------------------

SAME_KEY = [
    # (id, a, b): equal keys across types hash alike
    ("int_numpy_int32", 7, np.int32(7)),
    ("int_numpy_uint64", 7, np.uint64(7)),
    ("int_float", 7, 7.0),
    ("int_numpy_float32", 7, np.float32(7.0)),
    ("int_decimal", 7, decimal.Decimal(7)),
    ("negative_zero", 0, -0.0),
    ("big_int_float", 10**20, 1e20),
    ("fraction_numpy_float64", 3.5, np.float64(3.5)),
    ("text_bytes", "a", b"a"),
    ("text_utf8", "é", "é".encode()),
    ("text_numpy_str", "a", np.str_("a")),
    ("bytes_numpy_bytes", b"a", np.bytes_(b"a")),
    ("bytes_bytearray", b"a", bytearray(b"a")),
    ("bytes_memoryview", b"a", memoryview(b"a")),
    ("bool_numpy_bool", True, np.bool_(True)),
    ("list_tuple", [1, "x"], (1, "x")),
    ("list_array", [1, 2], np.array([1, 2], dtype=np.int16)),
]


@pytest.mark.parametrize("a, b", [c[1:] for c in SAME_KEY], ids=[c[0] for c in SAME_KEY])
def test_key_bytes_equal(a, b):
    assert key_bytes(a) == key_bytes(b)


DIFFERENT_KEY = [
    ("true_is_not_one", True, 1),
    ("false_is_not_zero", False, 0),
    ("int_is_not_text", 7, "7"),
    ("float_is_not_text", 3.5, "3.5"),
    ("none_is_not_text", None, "none"),
    ("none_is_not_empty", None, ""),
    ("zero_is_not_empty", 0, ""),
    ("list_is_not_scalar", [7], 7),
    ("order_matters", [1, 2], [2, 1]),
    ("float32_rounding_differs", 0.1, np.float32(0.1)),
    ("date_is_not_text", datetime.date(2024, 1, 2), "2024-01-02"),
]


@pytest.mark.parametrize("a, b", [c[1:] for c in DIFFERENT_KEY],
                         ids=[c[0] for c in DIFFERENT_KEY])
def test_key_bytes_differ(a, b):
    assert key_bytes(a) != key_bytes(b)


# Pinned once: the canonical bytes are part of the split contract (a change reshuffles data
# sets on their next rebuild), so they are spelled out rather than recomputed.
PINNED_BYTES = [
    ("int", 7, b"\x027"),
    ("negative_int", -12, b"\x02-12"),
    ("float", 3.5, b"\x033.5"),
    ("text", "user-1", b"\x04user-1"),
    ("bool", True, b"\x011"),
    ("none", None, b"\x00none"),
    ("list", [1, "x"], b"\x06\x021\x1f\x04x"),
    ("date", datetime.date(2024, 1, 2), b"\x052024-01-02"),
]


@pytest.mark.parametrize("value, expected", [c[1:] for c in PINNED_BYTES],
                         ids=[c[0] for c in PINNED_BYTES])
def test_key_bytes_pinned(value, expected):
    assert key_bytes(value) == expected


@pytest.mark.parametrize("value", [object(), {"a": 1}, {1, 2}], ids=["object", "dict", "set"])
def test_key_bytes_refuses_other_types(value):
    with pytest.raises(TypeError, match="split key"):
        key_bytes(value)


# --- Stability: assignments pinned from one computation -----------------------------------------

EIGHTY_TWENTY = SplitSpec(shares=(("train", 80.0), ("eval", 20.0)))
THIRDS = SplitSpec(shares=(("a", 33.33), ("b", 33.33), ("c", 33.34)))

PINNED_SPLITS = [
    # (key, 80/20 split, thirds split), computed once with BLAKE2b(person=b"btfr-split"),
    # buckets laid out in split-name order
    (0, "train", "a"),
    (1, "eval", "a"),
    (2, "train", "c"),
    (4, "train", "b"),
    (5, "train", "c"),
    (7, "train", "c"),
    (8, "train", "b"),
    ("user-1", "eval", "a"),
    ("user-2", "train", "c"),
    (True, "train", "c"),
    (None, "train", "c"),
    ([1, "x"], "train", "b"),
]


@pytest.mark.parametrize("key, eighty_twenty, thirds", PINNED_SPLITS,
                         ids=[repr(k) for k, _, _ in PINNED_SPLITS])
def test_assignment_is_pinned(key, eighty_twenty, thirds):
    assert EIGHTY_TWENTY.choose(key_bytes(key)) == eighty_twenty
    assert THIRDS.choose(key_bytes(key)) == thirds


def test_equal_keys_land_in_the_same_split():
    for a, b in [(7, np.int64(7)), (7, 7.0), ("user-2", b"user-2")]:
        assert EIGHTY_TWENTY.choose(key_bytes(a)) == EIGHTY_TWENTY.choose(key_bytes(b))


def test_a_record_in_pieces_lands_where_the_joined_record_does():
    for record in (b"", b"abc", bytes(range(256)) * 40):
        cuts = [record[:1], b"", record[1:7], record[7:]]
        for spec in (EIGHTY_TWENTY, THIRDS):
            assert spec.choose(cuts) == spec.choose(record)


# --- Proportions --------------------------------------------------------------------------------

PROPORTIONS = [
    ("eighty_twenty", EIGHTY_TWENTY),
    ("thirds", THIRDS),
    ("uneven", SplitSpec(shares=(("train", 98.5), ("eval", 1.0), ("test", 0.5)))),
]
N_KEYS = 100_000


@pytest.mark.parametrize("spec", [p[1] for p in PROPORTIONS], ids=[p[0] for p in PROPORTIONS])
def test_proportions_over_many_keys(spec):
    counts = dict.fromkeys(spec.names, 0)
    for i in range(N_KEYS):
        counts[spec.choose(b"\x02%d" % i)] += 1  # key_bytes(i), spelled out for speed
    for name, pct in spec.shares:
        expected = N_KEYS * pct / 100
        # five binomial standard deviations: a fair hash fails this about once in 10**6 runs
        sigma = (N_KEYS * pct / 100 * (1 - pct / 100)) ** 0.5
        assert abs(counts[name] - expected) < 5 * sigma + 1, counts


def test_bounds_cover_every_bucket():
    assert THIRDS._ranges == (("a", 3333), ("b", 6666), ("c", BUCKETS))  # type: ignore[attr-defined]  # noqa: E501
    assert EIGHTY_TWENTY._ranges == (("eval", 2000), ("train", BUCKETS))  # type: ignore[attr-defined]


def test_single_split_takes_everything():
    spec = SplitSpec(shares=(("all", 100.0),))
    assert {spec.choose(key_bytes(i)) for i in range(1000)} == {"all"}
    assert spec.names == ("all",)


def test_default_is_one_train_split():
    spec = SplitSpec()
    assert spec.names == ("train",)
    assert spec.key == ()
    assert spec.choose(b"anything") == "train"


BAD_SPECS = [
    ("duplicate_names", (("train", 50.0), ("train", 50.0)), "repeat"),
    ("duplicate_among_three", (("a", 20.0), ("b", 40.0), ("a", 40.0)), "repeat"),
    ("no_split", (), "at least one"),
]


@pytest.mark.parametrize("shares, reason", [b[1:] for b in BAD_SPECS],
                         ids=[b[0] for b in BAD_SPECS])
def test_split_spec_refuses(shares, reason):
    with pytest.raises(ValueError, match=reason):
        SplitSpec(shares=shares)


def test_assignment_does_not_depend_on_the_order_splits_are_listed():
    a = SplitSpec(shares=(("train", 80.0), ("eval", 20.0)))
    b = SplitSpec(shares=(("eval", 20.0), ("train", 80.0)))
    keys = [str(i).encode() for i in range(2000)]
    assert [a.choose(k) for k in keys] == [b.choose(k) for k in keys]


def test_field_mode_takes_the_split_a_record_names():
    spec = SplitSpec(shares=(("train", 50.0), ("eval", 50.0)), field=("split",))
    assert spec.named("eval") == "eval"
    assert spec.named(b"train") == "train"
    with pytest.raises(ValueError, match="names split 'test', expected one of train, eval"):
        spec.named("test")
    with pytest.raises(ValueError, match="names split None"):
        spec.named(None)


def test_field_and_key_exclude_each_other():
    with pytest.raises(ValueError, match="not both"):
        SplitSpec(shares=(("train", 100.0),), key=("id",), field=("split",))


@pytest.mark.parametrize("spec", [THIRDS, EIGHTY_TWENTY, SplitSpec()])
def test_choose_many_agrees_with_choose(spec):
    keys = [key_bytes(i) for i in range(2000)] + [b"", memoryview(b"abc")]
    names = list(spec.names)
    assert spec.choose_many(keys).tolist() == [names.index(spec.choose(bytes(k))) for k in keys]


# -- records whose split key is missing (issue #17, item 5) -----------------------------------

def _null_key_build(tmp, fmt: str, splits: dict, rows: int = 300) -> dict:
    """Build ``rows`` records whose key ``k`` is null in every third, absent in every fifth
    (JSON Lines) -- through the row path (jsonl) or the columnar one (parquet, csv)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import yaml

    from beam_tfrecords.pipelines import cli

    keys = [None if i % 3 == 0 else i for i in range(rows)]
    if fmt == "jsonl":
        lines = [json.dumps({"x": i} if i % 5 == 0 else {"k": k, "x": i})
                 for i, k in enumerate(keys)]
        path = tmp / "in.jsonl"
        path.write_text("\n".join(lines) + "\n")
    elif fmt == "parquet":
        path = tmp / "in.parquet"
        pq.write_table(pa.table({"k": pa.array(keys, pa.int64()), "x": list(range(rows))}), path)
    else:
        path = tmp / "in.csv"
        path.write_text("k,x\n" + "".join(f"{'' if k is None else k},{i}\n"
                                          for i, k in enumerate(keys)))
    config = {"name": "t", "source": {"format": fmt, "path": str(path)},
              "features": {"x": {"type": "int64"}}, "splits": {"key": "k", **splits},
              "errors": {"max_bad_fraction": 0.5}, "output": {"path": str(tmp / "out")}}
    (tmp / "c.yaml").write_text(yaml.safe_dump(config))
    return cli.run_build(["--config", str(tmp / "c.yaml")])


def _missing(rows: int, fmt: str) -> int:
    return sum(1 for i in range(rows) if i % 3 == 0 or (fmt == "jsonl" and i % 5 == 0))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "csv"])
def test_missing_split_keys_are_rejected_by_default(fmt, tmp_path):
    manifest = _null_key_build(tmp_path, fmt, {"train": 80, "eval": 20})
    missing = _missing(300, fmt)
    assert manifest["counts"]["rejected"] == missing
    assert manifest["counts"]["written"] == 300 - missing
    letters = [json.loads(line) for entry in manifest["dead_letter"]
               for line in (tmp_path / "out" / manifest["version"] / entry["path"])
               .read_text().splitlines()]
    assert len(letters) == missing
    assert all("split key 'k' is missing" in letter["reason"] for letter in letters)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "csv"])
def test_missing_split_keys_go_to_the_named_split(fmt, tmp_path):
    manifest = _null_key_build(tmp_path, fmt, {"train": 80, "eval": 10, "unkeyed": 10,
                                               "null_key": "unkeyed"})
    missing = _missing(300, fmt)
    assert manifest["counts"]["rejected"] == 0
    assert manifest["splits"]["unkeyed"]["records"] >= missing  # and its hashed share
    keyed = {s: e["records"] for s, e in manifest["splits"].items() if s != "unkeyed"}
    assert sum(keyed.values()) + manifest["splits"]["unkeyed"]["records"] == 300
    assert keyed["train"] > 3 * keyed["eval"] > 0  # the keyed rows still spread 80/10


def test_one_split_takes_missing_keys_too(tmp_path):
    manifest = _null_key_build(tmp_path, "parquet", {"train": 100})
    assert manifest["counts"]["written"] == 300


@pytest.mark.parametrize("raw, words", [
    ({"key": "k", "train": 50, "eval": 50, "null_key": "test"}, "must be 'reject' or one of"),
    ({"train": 50, "eval": 50, "null_key": "eval"}, "applies only with a splits.key"),
])
def test_null_key_config_errors(raw, words):
    from beam_tfrecords.transforms.codec.specs import ConfigError, parse_splits

    with pytest.raises(ConfigError, match=words):
        parse_splits(raw)
    assert parse_splits({"key": "k", "train": 50, "eval": 50}).null_key == "reject"
