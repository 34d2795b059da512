"""The accumulators' surface: every way in gives the same statistics, mistakes are named,
and the memory per key stays within what the module docstring states."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pyarrow as pa
import pytest

from beam_tfrecords.transforms.codec import wire
from beam_tfrecords.transforms.codec.example_codec import ExampleEncoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.stats.accumulators import FeatureAccumulator
from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator, kinds_for_specs
from beam_tfrecords.transforms.stats.statistics_wire import encode_statistics_list

SPECS = [
    FeatureSpec("age", "int64", missing="omit"),
    FeatureSpec("name", "string", missing="omit"),
    FeatureSpec("emb", "float", shape=(-1,)),
    FeatureSpec("grid", "int64", shape=(-1, -1)),
    FeatureSpec("image", "bytes", missing="omit"),
]


def _records(n: int) -> list[dict]:
    rng = random.Random(5)
    return [{"age": rng.choice([None, 0, 7, -3, 2**40]),
             "name": rng.choice([None, "ann", "bob", "", "zoë"]),
             "emb": [rng.uniform(-1, 1) for _ in range(rng.randint(0, 3))],
             "grid": [[rng.randint(0, 9) for _ in range(rng.randint(0, 2))]
                      for _ in range(rng.randint(0, 3))],
             "image": rng.choice([None, b"\x89PNG" + bytes(100), b"GIF89a"])}
            for _ in range(n)]


def test_kinds_for_specs_lists_every_stored_key():
    assert kinds_for_specs(SPECS, images=["image"]) == {
        "age": "int", "name": "string", "emb": "float", "grid/flat_values": "int",
        "grid/row_lengths_1": "int", "image": "bytes"}


def test_decoded_examples_and_arrow_columns_give_the_same_statistics():
    """The per-row ways in (decoded or serialized Examples, as a version built earlier is
    read back) and the columnar way in (Arrow arrays per stored key) agree."""
    records = _records(300)
    encoder = ExampleEncoder(SPECS)
    serialized = [encoder.encode(r) for r in records]
    decoded = [wire.decode_example(r) for r in serialized]
    kinds = kinds_for_specs(SPECS, images=["image"])
    by_rows = DatasetAccumulator(kinds)
    by_rows.add_examples(decoded[:120])
    by_rows.add_serialized(serialized[120:])

    by_columns = DatasetAccumulator(kinds)
    types = {"int": pa.int64(), "float": pa.float32(), "string": pa.binary(),
             "bytes": pa.binary()}
    for start in range(0, len(decoded), 64):
        part = decoded[start:start + 64]
        columns = {key: pa.array([d[key][1] if key in d else None for d in part],
                                 pa.list_(types[kind])) for key, kind in kinds.items()}
        by_columns.add_batch(len(part), columns)
    assert encode_statistics_list([by_rows.result("train")]) == encode_statistics_list(
        [by_columns.result("train")])
    stats = {f["path"]["step"][0]: f for f in by_columns.result("train")["features"]}
    assert stats["grid/row_lengths_1"]["type"] == "INT"
    assert stats["image"]["type"] == "BYTES" and "bytes_stats" in stats["image"]
    ages = [r["age"] for r in records if r["age"] is not None]
    assert stats["age"]["num_stats"]["common_stats"]["num_missing"] == len(records) - len(ages)


def test_numpy_values_with_row_counts_and_scalars():
    acc = FeatureAccumulator("int")
    acc.add(np.array([1, 2, 3]), np.array([2, 0, 1]))  # three rows, one of them empty
    acc.add(np.array([4, 5]))  # two scalar rows
    common = acc.common(num_examples=6)
    assert common == {"num_non_missing": 5, "num_missing": 1, "tot_num_values": 5,
                      "min_num_values": 0, "max_num_values": 2, "avg_num_values": 1.0,
                      "num_values_histogram": common["num_values_histogram"]}
    assert acc.moments.total == 15


def test_image_facts_become_tfdv_like_custom_stats():
    acc = DatasetAccumulator({"image": "bytes"})
    acc.add_batch(3, {"image": pa.array([b"a", b"bb", None])})
    acc.add_image_facts("image", ["PNG", "JPEG"], [480, 20], [640, 30])
    other = DatasetAccumulator({"image": "bytes"})
    other.add_image_facts("image", ["PNG"], [1000], [10])
    acc.merge(other)
    custom = {c["name"]: c for c in acc.result("train")["features"][0]["custom_stats"]}
    assert [(b["label"], b["sample_count"]) for b in
            custom["image_format_histogram"]["rank_histogram"]["buckets"]] == [
        ("PNG", 2.0), ("JPEG", 1.0)]
    assert {k: custom[k]["num"] for k in ("image_max_height", "image_max_width",
                                           "image_min_height", "image_min_width")} == {
        "image_max_height": 1000.0, "image_max_width": 640.0, "image_min_height": 20.0,
        "image_min_width": 10.0}


@pytest.mark.parametrize("call, error", [
    (lambda: FeatureAccumulator("int").add(np.array([1, 2]), np.array([3])),
     "row counts add up to 3 values, but 2 were given"),
    (lambda: FeatureAccumulator("int").merge(FeatureAccumulator("float")),
     "cannot merge float statistics into int ones"),
    (lambda: FeatureAccumulator("date"), "statistics kind 'date' is not one of"),
    (lambda: DatasetAccumulator({"x": "int"}).add_batch(2, {"y": pa.array([1, 2])}),
     "no statistics kind for feature 'y'"),
    (lambda: DatasetAccumulator({"x": "int"}).add_batch(3, {"x": pa.array([1, 2])}),
     "feature 'x': 2 rows in a batch of 3"),
    (lambda: FeatureAccumulator("int").add_arrow(pa.array([[[1]]])),
     "one list level per stored key"),
])
def test_mistakes_are_named(call, error):
    with pytest.raises((ValueError, KeyError), match=error):
        call()


def test_memory_per_key_stays_within_the_stated_bound():
    """The module docstring states below 72 KiB per key at the default capacities; measured
    as the pickled size (what a combiner ships) after filling every sketch to its limit."""
    rng = np.random.default_rng(0)
    number = FeatureAccumulator("float")
    for _ in range(5):
        number.add(rng.lognormal(0, 5, 50_000), rng.multinomial(
            50_000, np.full(5_000, 1 / 5_000)))
    words = FeatureAccumulator("string")
    for _ in range(5):  # 64-byte values: many distinct (HyperLogLog), 400 frequent ones
        frequent = [b"%064d" % v for v in range(400) for _ in range(v // 8 + 1)]
        words.add(pa.array(frequent + [b"%064d" % v for v in rng.integers(0, 10**9, 20_000)]))
    assert len(words.top.counters) > 200
    sizes = {name: len(pickle.dumps(acc)) for name, acc in (("number", number),
                                                            ("string", words))}
    assert not number.order.exact() and not words.distinct.exact() and not words.top.exact()
    assert sizes["number"] < 24 * 1024, sizes
    assert sizes["string"] < 72 * 1024, sizes


def test_exact_sums_of_a_large_batch_of_extreme_floats():
    """Sums past one chunk of bins (2**15 values), over every float32 exponent, equal the
    integer arithmetic of the values' exact ratios."""
    from beam_tfrecords.transforms.stats.exact_moments import float32_sums, int64_sums

    rng = np.random.default_rng(11)
    bits = rng.integers(0, 2**32, 70_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = np.concatenate([x[np.isfinite(x)], np.float32([3.4028235e38] * 40_000)])
    total = square = 0
    for v in x.tolist():
        num, den = v.as_integer_ratio()  # den is a power of two up to 2**149
        total += num * ((1 << 172) // den)
        square += num * num * ((1 << 345) // (den * den))
    assert float32_sums(x) == (total, square)
    ints = rng.integers(-(2**63), 2**63 - 1, 50_000, dtype=np.int64, endpoint=True)
    values = ints.tolist()
    assert int64_sums(ints) == (sum(values), sum(v * v for v in values))


_WORDS = [["a", "bb"], None, [], ["a"], ["ccc", "a", "bb"]]


@pytest.mark.parametrize("column", [
    pa.array(_WORDS, pa.list_(pa.string())),
    pa.array(_WORDS, pa.large_list(pa.large_string())),
    pa.array([[w.encode() for w in r] if r is not None else None for r in _WORDS],
             pa.list_(pa.large_binary())),
    pa.chunked_array([pa.array(_WORDS[:2], pa.list_(pa.string())),
                      pa.array(_WORDS[2:], pa.list_(pa.string()))]),
    pa.array(_WORDS, pa.list_(pa.dictionary(pa.int8(), pa.string()))),
    pa.array(_WORDS, pa.list_(pa.string())).slice(0),
], ids=["string", "large", "large_binary", "chunked", "dictionary", "slice"])
def test_arrow_layouts_of_the_same_values_give_the_same_statistics(column):
    expected = DatasetAccumulator({"w": "string"})
    expected.add_examples([{"w": ("bytes_list", [w.encode() for w in r])} if r is not None
                           else {} for r in _WORDS])
    acc = DatasetAccumulator({"w": "string"})
    acc.add_batch(len(_WORDS), {"w": column})
    assert acc.result("s") == expected.result("s")


def test_a_sliced_fixed_size_list_column():
    column = pa.array([[1, 2], [3, 4], None, [5, 6]], pa.list_(pa.int64(), 2)).slice(1)
    acc = DatasetAccumulator({"x": "int"})
    acc.add_batch(3, {"x": column})
    num = acc.result("s")["features"][0]["num_stats"]
    assert (num["min"], num["max"], num["mean"]) == (3.0, 6.0, 4.5)
    assert num["common_stats"]["num_missing"] == 1


def test_booleans_are_the_int64_they_are_stored_as():
    acc = DatasetAccumulator({"flag": "int"})
    acc.add_batch(4, {"flag": pa.array([True, False, None, True])})
    num = acc.result("s")["features"][0]["num_stats"]
    assert (num["num_zeros"], num["max"], num["common_stats"]["num_missing"]) == (1, 1.0, 1)


def test_small_batches_of_differing_types_are_gathered_and_still_agree():
    """Small Arrow batches are buffered per key and concatenated; batches whose types differ
    cannot be, and are added one at a time. Either way: the statistics of the values."""
    batches = [pa.array([[1, 2], None], pa.list_(pa.int32())),
               pa.array([[3]], pa.list_(pa.int64())),
               pa.array([[4, 5, 6], []], pa.large_list(pa.int64()))]
    acc = DatasetAccumulator({"x": "int"})
    for column in batches:
        acc.add_batch(len(column), {"x": column})
    assert acc.features["x"].present == 0  # still buffered
    expected = DatasetAccumulator({"x": "int"})
    expected.add_batch(5, {"x": (np.array([1, 2, 3, 4, 5, 6]), np.array([2, 1, 3, 0]))})
    assert acc.result("s") == expected.result("s")
    restored = pickle.loads(pickle.dumps(DatasetAccumulator({"x": "int"})))
    restored.add_batch(2, {"x": batches[0]})
    assert pickle.loads(pickle.dumps(restored)).features["x"].present == 1  # flushed


def test_a_nested_list_is_refused_when_added_not_when_flushed():
    acc = DatasetAccumulator({"x": "int"})
    with pytest.raises(ValueError, match="one list level per stored key"):
        acc.add_batch(1, {"x": pa.array([[[1]]])})


def test_top_values_are_labelled_as_tfdv_labels_them():
    """A value that is not UTF-8 shows as TFDV's ``__BYTES_VALUE__`` (an escaped form could
    equal a real value); a long value as its UTF-8 preview, cut before a split character."""
    acc = FeatureAccumulator("string")
    long = "é" * 40  # 80 bytes: its 32-byte preview ends on a whole character
    odd = b"a" + "é".encode() * 40  # 81 bytes: its preview splits the 16th é
    image = b"BMv" + bytes(30) + b"\xff" * 40  # its preview is UTF-8, the whole is not
    acc.add([b"\xff\xfe", b"\xff\xfe", b"ok", long.encode(), odd, image],
            np.array([2, 1, 1, 1, 1]))
    stats = acc.result("x", 5)["string_stats"]
    assert [(t["value"], t["frequency"]) for t in stats["top_values"]] == [
        ("__BYTES_VALUE__", 2.0), ("é" * 16, 1.0), ("ok", 1.0), ("a" + "é" * 15, 1.0),
        ("__BYTES_VALUE__", 1.0)]
    assert stats["invalid_utf8_count"] == 3
