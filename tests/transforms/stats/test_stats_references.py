"""Statistics against exact references computed from the rows themselves.

Counts, missing, min and max exactly; mean and standard deviation within 1e-9 relative of
``math.fsum`` (and of exact fractions); quantiles, histograms, top values and unique counts
exactly while the data fits the sketches' stated capacities, and within their stated error
beyond -- on random rows (hypothesis) and on tables nobody here wrote (numpy's own test data).
"""

from __future__ import annotations

import collections
import math
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms.stats.accumulators import Capacities, FeatureAccumulator
from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ARROW_TYPES = {"int": pa.int64(), "float": pa.float32(), "string": pa.binary()}


def accumulate(kind: str, rows: list, seed: int = 0, lists: bool = True,
               capacities: Capacities = Capacities()) -> dict:
    """The statistics of one key ``x`` over ``rows`` (None: missing), fed in random batches."""
    acc = DatasetAccumulator({"x": kind}, capacities)
    rng = random.Random(seed)
    start = 0
    while start < len(rows):
        stop = start + rng.randint(1, 7)
        part = rows[start:stop]
        value_type = ARROW_TYPES[kind]
        column = pa.array(part, pa.list_(value_type) if lists else value_type)
        acc.add_batch(len(part), {"x": column})
        start = stop
    return acc.result("train")["features"][0]


def quantile(values: list, q: float) -> float:
    """numpy's inverted-CDF quantile, the definition the statistics use."""
    return float(np.quantile(np.asarray(values, dtype=np.float64), q, method="inverted_cdf"))


def check_common(stats: dict, rows: list) -> None:
    present = [r for r in rows if r is not None]
    counts = [len(r) if isinstance(r, list) else 1 for r in present]
    common = stats.get("num_stats", stats.get("string_stats", stats.get("bytes_stats")))[
        "common_stats"]
    assert common["num_non_missing"] == len(present)
    assert common["num_missing"] == len(rows) - len(present)
    assert common["tot_num_values"] == sum(counts)
    if present:
        assert common["min_num_values"] == min(counts)
        assert common["max_num_values"] == max(counts)
        assert common["avg_num_values"] == sum(counts) / len(present)
        edges = [b["low_value"] for b in common["num_values_histogram"]["buckets"]]
        assert edges == [quantile(counts, i / 10) for i in range(10)]


def check_numbers(stats: dict, values: list[float]) -> None:
    """``values``: the stored values (float32 for floats), NaN included."""
    num = stats["num_stats"]
    ordered = [v for v in values if not math.isnan(v)]
    assert num["num_zeros"] == sum(1 for v in values if v == 0)
    histograms = {h["type"]: h for h in num["histograms"]}
    if not ordered:
        assert "min" not in num
        return
    exact = ordered
    ordered = [float(v) for v in ordered]  # statistics are doubles: an int64 past 2**53
    assert num["min"] == min(ordered) and num["max"] == max(ordered)  # is its nearest double
    assert num["median"] == quantile(ordered, 0.5)
    assert histograms["STANDARD"]["num_nan"] == len(values) - len(ordered)
    quantiles = histograms["QUANTILES"]["buckets"]
    assert [b["low_value"] for b in quantiles] == [quantile(ordered, i / 10) for i in range(10)]
    assert quantiles[-1]["high_value"] == max(ordered)
    standard = histograms["STANDARD"]["buckets"]
    for i, bucket in enumerate(standard):  # each bucket holds the values within its edges
        last = i == len(standard) - 1
        inside = sum(1 for v in ordered if bucket["low_value"] <= v < bucket["high_value"]
                     or (last and v == bucket["high_value"]) or (i == 0 and v < bucket[
                         "low_value"]))
        assert bucket["sample_count"] == inside, (i, bucket)
    finite = [v for v in exact if math.isfinite(v)]
    if len(finite) != len(ordered):
        return  # infinite values: see test_infinities_and_nan_follow_the_documented_rules
    exact_mean = sum(map(Fraction, finite)) / len(finite)
    exact_var = sum((Fraction(v) - exact_mean) ** 2 for v in finite) / len(finite)
    assert num["mean"] == float(exact_mean)  # correctly rounded
    assert math.isclose(num["std_dev"], math.sqrt(exact_var), rel_tol=1e-9, abs_tol=1e-300)
    if all(isinstance(v, float) for v in finite):  # fsum of int64s as doubles is not exact
        mean = math.fsum(finite) / len(finite)
        assert math.isclose(num["mean"], mean, rel_tol=1e-9, abs_tol=1e-300)
        fsum_var = math.fsum((v - mean) ** 2 for v in finite) / len(finite)
        assert math.isclose(num["std_dev"], math.sqrt(fsum_var), rel_tol=1e-9,
                            abs_tol=1e-9 * max(abs(v) for v in finite))


def check_strings(stats: dict, values: list[bytes], top_capacity: int = 256) -> None:
    counter = collections.Counter(values)
    strings = stats["string_stats"]
    assert strings["unique"] == len(counter)
    if values:
        assert strings["avg_length"] == sum(map(len, values)) / len(values)
    assert len(counter) <= top_capacity  # below the capacity: exact and fully ordered
    ranked = sorted(counter.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)  # TFDV's
    labels = [(v.decode() if _utf8(v) else "__BYTES_VALUE__", float(c)) for v, c in ranked]
    assert [(t["value"], t["frequency"]) for t in strings["top_values"]] == labels[:20]
    assert [(b["label"], b["sample_count"]) for b in strings["rank_histogram"]["buckets"]
            ] == labels
    bad = sum(c for v, c in counter.items() if not _utf8(v))
    assert strings["invalid_utf8_count"] == bad


def _utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _stored(values: list[float]) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float32)]


def _rows(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(st.none() | st.lists(values, max_size=4), max_size=40)


# -- random rows ---------------------------------------------------------------------------

@FAST
@given(_rows(st.integers(-(2**63), 2**63 - 1) | st.integers(-3, 3)), st.integers(0, 9))
def test_int64_lists_match_the_exact_reference(rows, seed):
    stats = accumulate("int", rows, seed)
    check_common(stats, rows)
    check_numbers(stats, [v for r in rows if r for v in r])


@FAST
@given(_rows(st.floats(width=32, allow_nan=False, allow_infinity=False)
             | st.sampled_from([0.0, -0.0, 1.5, 1e-45])), st.integers(0, 9))
def test_float_lists_match_the_exact_reference(rows, seed):
    stats = accumulate("float", rows, seed)
    check_common(stats, rows)
    check_numbers(stats, _stored([v for r in rows if r for v in r]))


@FAST
@given(st.lists(st.none() | st.just(math.nan) | st.floats(min_value=-3e38, max_value=3e38),
                max_size=40),
       st.integers(0, 9))
def test_float_scalars_are_stats_of_the_float32_values_stored(rows, seed):
    """float64 input is stored as float32: the statistics are those of what is stored."""
    stats = accumulate("float", rows, seed, lists=False)
    check_common(stats, rows)
    check_numbers(stats, _stored([v for v in rows if v is not None]))


@FAST
@given(_rows(st.binary(max_size=3) | st.sampled_from([b"", b"\xff", "é".encode()])),
       st.integers(0, 9))
def test_bytes_lists_match_the_exact_reference(rows, seed):
    stats = accumulate("string", rows, seed)
    check_common(stats, rows)
    check_strings(stats, [v for r in rows if r for v in r])


def test_infinities_and_nan_follow_the_documented_rules():
    values = [1.0, math.inf, math.nan, -2.0, math.inf, 0.0]
    stats = accumulate("float", [[v] for v in values])["num_stats"]
    assert (stats["min"], stats["max"], stats["median"]) == (-2.0, math.inf, 1.0)
    assert stats["mean"] == math.inf and math.isnan(stats["std_dev"])
    standard = stats["histograms"][0]
    assert standard["num_nan"] == 1 and standard["buckets"][-1]["high_value"] == math.inf
    assert sum(b["sample_count"] for b in standard["buckets"]) == 5
    both = accumulate("float", [[math.inf], [-math.inf]])["num_stats"]
    assert math.isnan(both["mean"]) and (both["min"], both["max"]) == (-math.inf, math.inf)
    only_nan = accumulate("float", [[math.nan]])["num_stats"]
    assert "min" not in only_nan and only_nan["histograms"][0]["num_nan"] == 1


def test_a_key_no_example_holds_is_all_missing():
    acc = DatasetAccumulator({"x": "int", "y": "string"})
    acc.add_batch(3, {"x": pa.array([1, 2, 3])})
    y = acc.result("eval")["features"][1]
    assert y["path"] == {"step": ["y"]}
    assert y["string_stats"]["common_stats"] == {"num_non_missing": 0, "num_missing": 3,
                                                 "tot_num_values": 0}


# -- beyond the capacities: the stated errors ------------------------------------------------

@pytest.mark.parametrize("data, worst", [("normal", 0.001), ("mixed", 0.01)])
def test_quantiles_past_the_capacity_stay_within_their_bucket(data, worst):
    """Past 1024 distinct values a quantile lies in the true order statistic's bucket: its rank
    is off by at most that bucket's count. Measured over 99 percentiles of 100k values: 0.01%
    on a normal sample, 0.95% on a mix of a wide lognormal and a narrow normal cluster (the
    cluster shares few buckets with the spread of the rest)."""
    rng = np.random.default_rng(7)
    if data == "normal":
        values = rng.normal(0, 1, 100_000)
    else:
        values = np.concatenate([rng.lognormal(3, 2, 60_000), rng.normal(-50, 1, 40_000)])
        rng.shuffle(values)
    acc = FeatureAccumulator("float")
    for part in np.array_split(values, 23):
        acc.add(part)
    stored = np.sort(values.astype(np.float32).astype(np.float64))
    n = stored.size
    assert not acc.order.exact()
    for q in (0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99):
        got = acc.order.quantile(q)
        rank = math.ceil(q * n) - 1
        low, high = np.searchsorted(stored, got, "left"), np.searchsorted(stored, got, "right")
        error = 0 if low <= rank < high else min(abs(rank - low), abs(rank - high + 1))
        assert error <= int(acc.order.counts.max()), q
        assert error / n < worst, (q, error)


def test_unique_counts_past_the_exact_capacity_are_within_three_standard_errors():
    """HyperLogLog at precision 14: standard error 0.81%, three of them 2.43%."""
    for n in (2_049, 10_000, 40_000, 150_000):
        values = pa.array([b"k%07d" % i for i in range(n)] * 2)
        acc = FeatureAccumulator("bytes")
        acc.add(values)
        assert not acc.distinct.exact()
        assert abs(acc.distinct.count() / n - 1) < 0.0243, n


def test_top_values_past_the_capacity_keep_the_misra_gries_bound():
    """Each kept count c of a value of true count f has f - (n - N)/(k + 1) <= c <= f, and
    every value more frequent than n/(k + 1) is kept."""
    rng = np.random.default_rng(3)
    values = [b"v%d" % v for v in rng.zipf(1.3, 20_000) % 5_000]
    k = 64
    acc = FeatureAccumulator("string", Capacities(top_values=k))
    for start in range(0, len(values), 997):
        acc.add(values[start:start + 997])
    truth = collections.Counter(values)
    kept = dict(acc.top.ranked())
    slack = (len(values) - sum(kept.values())) / (k + 1)
    assert not acc.top.exact()
    for key, count in kept.items():
        f = truth[key[1:]]
        assert f - slack <= count <= f
    heavy = {v for v, f in truth.items() if f > len(values) / (k + 1)}
    assert heavy and heavy <= {key[1:] for key in kept}


# -- data nobody here wrote ------------------------------------------------------------------

def _numpy_tables() -> list[Path]:
    table = Path(np.__file__).parent / "_core" / "tests" / "data"
    found = sorted(table.glob("umath-validation-set-*.csv"))
    assert found, "numpy ships its validation tables in this pinned version"
    return found


@pytest.fixture(scope="module")
def umath() -> pa.Table:
    """numpy's ufunc validation tables (26k rows): dtype, input and output bit patterns in
    hex, an ulp tolerance; the float32 rows' inputs decoded to their values."""
    tables = []
    for path in _numpy_tables():
        table = pacsv.read_csv(path, parse_options=pacsv.ParseOptions(
            invalid_row_handler=lambda row: "skip"),  # their "## section ##" lines
            convert_options=pacsv.ConvertOptions(
            column_types={"dtype": pa.string(), "input": pa.string(), "output": pa.string(),
                          "ulperrortol": pa.int64()}))
        tables.append(table.select(["dtype", "input", "output", "ulperrortol"]))
    return pa.concat_tables(tables).combine_chunks()


def test_a_table_nobody_here_wrote_matches_its_reference(umath):
    dtype = umath.column("dtype").to_pylist()
    inputs = umath.column("input").to_pylist()
    tol = umath.column("ulperrortol").to_pylist()
    f32 = [int(h, 16) for h, d in zip(inputs, dtype) if d == "np.float32"]
    floats = np.array(f32, dtype=np.uint32).view(np.float32).tolist()
    kinds = {"dtype": "string", "input": "string", "tol": "int", "bits": "float"}
    acc = DatasetAccumulator(kinds, Capacities(quantiles=1 << 15))  # holds every value
    parts = np.array_split(np.arange(umath.num_rows), 11)
    it = iter(floats)
    bits_rows = [[next(it)] if d == "np.float32" else None for d in dtype]
    for part in parts:
        lo, hi = int(part[0]), int(part[-1]) + 1
        acc.add_batch(hi - lo, {
            "dtype": umath.column("dtype").slice(lo, hi - lo),
            "input": umath.column("input").slice(lo, hi - lo),
            "tol": umath.column("ulperrortol").slice(lo, hi - lo),
            "bits": pa.array(bits_rows[lo:hi], pa.list_(pa.float32()))})
    stats = {f["path"]["step"][0]: f for f in acc.result("train")["features"]}
    rows = umath.num_rows
    assert acc.num_examples == rows
    check_common(stats["tol"], tol)
    check_numbers(stats["tol"], tol)
    check_common(stats["bits"], bits_rows)
    check_numbers(stats["bits"], floats)
    check_common(stats["dtype"], dtype)
    check_strings(stats["dtype"], [d.encode() for d in dtype])
    unique = len(set(inputs))
    assert unique > 2048  # the HyperLogLog regime
    assert abs(stats["input"]["string_stats"]["unique"] / unique - 1) < 0.0243
    assert stats["input"]["string_stats"]["avg_length"] == sum(map(len, inputs)) / rows


def test_a_parquet_file_nobody_here_wrote_matches_its_reference():
    """pyarrow's own test file (diamonds: doubles, int64 prices, string categories)."""
    import pyarrow.parquet as pq

    path = Path(pa.__file__).parent / "tests" / "data" / "parquet" / "v0.7.1.parquet"
    assert path.exists(), "pyarrow ships its parquet test data in this pinned version"
    table = pq.read_table(path)
    kinds = {"carat": "float", "depth": "float", "price": "int", "cut": "string",
             "color": "string", "clarity": "string"}
    acc = DatasetAccumulator(kinds)
    for batch in table.to_batches(max_chunksize=3):
        acc.add_batch(batch.num_rows, {name: batch.column(name) for name in kinds})
    stats = {f["path"]["step"][0]: f for f in acc.result("train")["features"]}
    for name, kind in kinds.items():
        rows = table.column(name).to_pylist()
        check_common(stats[name], rows)
        present = [v for v in rows if v is not None]
        if kind == "string":
            check_strings(stats[name], [v.encode() for v in present])
        else:
            check_numbers(stats[name], _stored(present) if kind == "float" else present)
