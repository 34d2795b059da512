"""Compare our statistics with TensorFlow Data Validation's own, on the same TFRecord files.

    <tfdv venv>/bin/python tests/tfdv_oracle/compare.py JOB.json --out RESULT.json

JOB.json lists the cases, all compared in this one process (TFDV and its Beam start once)::

    [{"name": "csv", "stats": "ours.pb" | {"train": "statistics/Split-train/FeatureStats.pb",
      ...}, "schema": "schema.pbtxt" | null,
      "splits": {"train": ["train/a.tfrecord", ...], "eval": [...]}}, ...]

For each case it (a) opens ``stats`` (a serialized ``DatasetFeatureStatisticsList`` with one
dataset per split, named by the split, or one such file per split) with
``tfdv.load_stats_binary``, (b) computes TFDV's statistics of each split's files as
``tfdv.generate_statistics_from_tfrecord`` does (its transforms; all splits of all cases in
one pass, each its own slice), (c) compares them feature
by feature, and (d) with a schema, runs ``tfdv.validate_statistics`` on each of our splits.
RESULT.json: ``{"cases": {name: {"mismatches": [...], "anomalies": {split: [...]},
"features": N}}, "tfdv_version": ..., "seconds": ...}``; a mismatch names the split, the
feature, the field, both values and why they disagree. Every case's mismatches are also
printed, as one JSON list, on stdout. Exit 0 when the comparison ran (the
caller decides on mismatches), 1 on a failure to run it.

What is compared, and how (TFDV's definitions, which ours follow):

- every feature: its presence in both (ours also lists a key of the config that no Example
  of the split holds, all missing, which TFDV cannot know of), its type (ours BYTES for
  image/binary keys, which TFDV without a schema calls STRING: counts, unique and average
  size are compared there);
- counts exactly: ``num_non_missing`` (an Example holding an empty list has the feature),
  ``num_missing``, ``min/max_num_values``, ``tot_num_values``; ``avg_num_values`` within 1e-9;
- numbers: ``min``, ``max`` and ``num_zeros`` exactly; ``mean`` within 1e-6 relative; the
  population ``std_dev`` within 1e-6 relative (absolute 1e-6 of the value range when it is
  zero in one of them); the median and the QUANTILES histograms' edges (of the values and of
  the number of values) within 2% of rank of each other: the rank ranges of the two edges
  in the exact sorted data, read here from the files, are at most 2% of the count apart
  (TFDV's own quantiles are approximate); the NaN count of the histograms exactly;
- strings: ``unique`` exactly where ours says it is exact (``btf:unique_exact``, TFDV counts
  exactly), else within 4 standard errors of HyperLogLog (3.25%); ``avg_length`` within
  1e-9; the top values (20) and the rank histogram (as far as the shorter of the two goes)
  exactly where ours says they are exact (``btf:top_values_exact``): the same values with
  the same counts in the same order (ties: the larger value first; a value that is not
  UTF-8 labelled ``__BYTES_VALUE__``), a value longer than 64 bytes by our 32-byte preview.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections import defaultdict

RANK_TOLERANCE = 0.02
MEAN_RTOL = 1e-6
STD_RTOL = 1e-6
HLL_TOLERANCE = 4 * 0.0081
LONG_VALUE = 64  # ours labels a longer top value by its first 32 bytes


def _feature_map(dataset) -> dict:
    out = {}
    for feature in dataset.features:
        name = "/".join(feature.path.step) if feature.path.step else feature.name
        out[name] = feature
    return out


def _common(feature):
    which = feature.WhichOneof("stats")
    return getattr(feature, which).common_stats if which else None


def _custom(feature) -> dict:
    return {c.name: c.num for c in feature.custom_stats}


class Truth:
    """The exact values of one split, read from its files: per feature the number of values
    of each Example holding it and, for numbers, the sorted values (NaN left out)."""

    def __init__(self, files: list[str]) -> None:
        import numpy as np
        import tensorflow as tf

        counts, values = defaultdict(list), defaultdict(list)
        # In batches: TensorFlow's iterator costs far more per element than the parse.
        for batch in tf.data.TFRecordDataset(files).batch(4096).as_numpy_iterator():
            for record in batch:
                example = tf.train.Example.FromString(record)
                for key, feature in example.features.feature.items():
                    kind = feature.WhichOneof("kind")
                    items = getattr(feature, kind).value if kind else []
                    counts[key].append(len(items))
                    if kind in ("int64_list", "float_list"):
                        values[key].extend(items)
        self.counts = {k: np.sort(np.asarray(v, dtype=np.float64)) for k, v in counts.items()}
        self.values = {}
        for key, items in values.items():
            array = np.asarray(items, dtype=np.float64)
            self.values[key] = np.sort(array[~np.isnan(array)])


def _rank_gap(data, a: float, b: float) -> float:
    """How far apart, as a fraction of ``len(data)``, the rank ranges of ``a`` and ``b`` are."""
    import numpy as np

    n = len(data)
    if not n:
        return 0.0
    lo_a, hi_a = np.searchsorted(data, a, "left"), np.searchsorted(data, a, "right")
    lo_b, hi_b = np.searchsorted(data, b, "left"), np.searchsorted(data, b, "right")
    gap = max(0, max(lo_a, lo_b) - min(hi_a, hi_b))
    return float(gap) / n


def _edges(histogram) -> list[float]:
    buckets = list(histogram.buckets)
    return [b.low_value for b in buckets] + ([buckets[-1].high_value] if buckets else [])


def _histogram(stats, kind: str):
    for h in stats.histograms:
        if h.type == getattr(type(h), kind):
            return h
    return None


class Comparison:
    def __init__(self, case: str, split: str) -> None:
        self.case, self.split = case, split
        self.mismatches: list[dict] = []

    def bad(self, feature: str, field: str, ours, theirs, why: str) -> None:
        self.mismatches.append({"case": self.case, "split": self.split, "feature": feature,
                                "field": field, "ours": _plain(ours), "tfdv": _plain(theirs),
                                "why": why})

    def exact(self, feature: str, field: str, ours, theirs) -> None:
        if ours != theirs and not (_isnan(ours) and _isnan(theirs)):
            self.bad(feature, field, ours, theirs, "differ")

    def close(self, feature: str, field: str, ours: float, theirs: float, rtol: float,
              atol: float = 0.0) -> None:
        if _isnan(ours) and _isnan(theirs):
            return
        if not math.isclose(ours, theirs, rel_tol=rtol, abs_tol=atol):
            self.bad(feature, field, ours, theirs, f"differ by more than {rtol:g} relative")

    def ranks(self, feature: str, field: str, data, ours: list[float],
              theirs: list[float]) -> None:
        if len(ours) != len(theirs):
            self.bad(feature, field, ours, theirs, "different numbers of edges")
            return
        for i, (a, b) in enumerate(zip(ours, theirs)):
            gap = _rank_gap(data, a, b)
            if gap > RANK_TOLERANCE:
                self.bad(feature, f"{field}[{i}]", a, b,
                         f"{gap:.2%} of rank apart (> {RANK_TOLERANCE:.0%})")


def _isnan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)


def _plain(x):
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    return x


def compare_feature(cmp: Comparison, name: str, ours, theirs, truth: Truth) -> None:
    ours_kind, theirs_kind = ours.WhichOneof("stats"), theirs.WhichOneof("stats")
    binary = ours_kind == "bytes_stats"
    type_name = ours.DESCRIPTOR.fields_by_name["type"].enum_type.values_by_number
    if not binary:
        cmp.exact(name, "type", type_name[ours.type].name, type_name[theirs.type].name)
    oc, tc = _common(ours), _common(theirs)
    if oc is None or tc is None:
        cmp.bad(name, "stats", ours_kind, theirs_kind, "one side has no statistics")
        return
    for field in ("num_non_missing", "num_missing", "min_num_values", "max_num_values",
                  "tot_num_values"):
        cmp.exact(name, f"common.{field}", getattr(oc, field), getattr(tc, field))
    cmp.close(name, "common.avg_num_values", oc.avg_num_values, tc.avg_num_values, 1e-9)
    counts = truth.counts.get(name)
    if counts is not None and len(counts):
        cmp.ranks(name, "common.num_values_histogram", counts,
                  _edges(oc.num_values_histogram), _edges(tc.num_values_histogram))
    if ours_kind == "num_stats" and theirs_kind == "num_stats":
        _compare_numbers(cmp, name, ours.num_stats, theirs.num_stats, truth)
    elif ours_kind == "string_stats" and theirs_kind == "string_stats":
        _compare_strings(cmp, name, ours.string_stats, theirs.string_stats, _custom(ours))
    elif binary and theirs_kind == "string_stats":
        cmp.close(name, "avg_num_bytes", ours.bytes_stats.avg_num_bytes,
                  theirs.string_stats.avg_length, 1e-9)
        _unique(cmp, name, ours.bytes_stats.unique, theirs.string_stats.unique, _custom(ours))
    elif ours_kind != theirs_kind:
        cmp.bad(name, "stats", ours_kind, theirs_kind, "different kinds of statistics")


def _compare_numbers(cmp: Comparison, name: str, ours, theirs, truth: Truth) -> None:
    data = truth.values.get(name)
    if data is None or not len(data):
        # no value but NaN (or none at all): TFDV leaves min/max/mean unset
        cmp.exact(name, "num_stats.num_zeros", ours.num_zeros, theirs.num_zeros)
        return
    cmp.exact(name, "num_stats.min", ours.min, theirs.min)
    cmp.exact(name, "num_stats.max", ours.max, theirs.max)
    cmp.exact(name, "num_stats.num_zeros", ours.num_zeros, theirs.num_zeros)
    if math.isfinite(theirs.min) and math.isfinite(theirs.max):
        cmp.close(name, "num_stats.mean", ours.mean, theirs.mean, MEAN_RTOL)
        cmp.close(name, "num_stats.std_dev", ours.std_dev, theirs.std_dev, STD_RTOL,
                  atol=STD_RTOL * (theirs.max - theirs.min) * 1e-3)
    else:
        _compare_infinite_moments(cmp, name, ours, theirs)
    cmp.ranks(name, "num_stats.median", data, [ours.median], [theirs.median])
    oq, tq = _histogram(ours, "QUANTILES"), _histogram(theirs, "QUANTILES")
    if oq is None or tq is None:
        cmp.bad(name, "num_stats.histograms", oq is not None, tq is not None,
                "a QUANTILES histogram is missing")
        return
    cmp.exact(name, "quantiles.num_nan", oq.num_nan, tq.num_nan)
    cmp.ranks(name, "quantiles.edges", data, _edges(oq), _edges(tq))


def _compare_infinite_moments(cmp: Comparison, name: str, ours, theirs) -> None:
    """With an infinite value the mean is that infinity (NaN with both), and the standard
    deviation is undefined: ours says NaN. TFDV's merge of running means turns an infinite
    mean into NaN once a second batch is merged in, and it reports ``sqrt(max(0, NaN))``,
    i.e. 0, as the standard deviation."""
    expected = math.nan if theirs.min == -math.inf and theirs.max == math.inf else (
        -math.inf if theirs.min == -math.inf else math.inf)
    cmp.exact(name, "num_stats.mean", ours.mean, expected)
    if not (theirs.mean == expected or math.isnan(theirs.mean)):
        cmp.bad(name, "num_stats.mean", ours.mean, theirs.mean, "TFDV's is neither ours "
                "nor NaN")
    if not math.isnan(ours.std_dev) or theirs.std_dev != 0.0:
        cmp.bad(name, "num_stats.std_dev", ours.std_dev, theirs.std_dev,
                "with an infinity ours must be NaN, TFDV's 0")


def _unique(cmp: Comparison, name: str, ours: int, theirs: int, custom: dict) -> None:
    if custom.get("btf:unique_exact", 1.0) == 1.0:
        cmp.exact(name, "unique", ours, theirs)
    elif abs(ours - theirs) > HLL_TOLERANCE * theirs:
        cmp.bad(name, "unique", ours, theirs, f"beyond HyperLogLog's {HLL_TOLERANCE:.2%}")


def _compare_strings(cmp: Comparison, name: str, ours, theirs, custom: dict) -> None:
    _unique(cmp, name, ours.unique, theirs.unique, custom)
    cmp.close(name, "string_stats.avg_length", ours.avg_length, theirs.avg_length, 1e-9)
    if custom.get("btf:top_values_exact", 1.0) != 1.0:
        return
    _ranked(cmp, name, "top_values", [(v.value, v.frequency) for v in ours.top_values],
            [(v.value, v.frequency) for v in theirs.top_values])
    buckets = min(len(ours.rank_histogram.buckets), len(theirs.rank_histogram.buckets))
    _ranked(cmp, name, "rank_histogram",
            [(b.label, b.sample_count) for b in ours.rank_histogram.buckets[:buckets]],
            [(b.label, b.sample_count) for b in theirs.rank_histogram.buckets[:buckets]])


def _ranked(cmp: Comparison, name: str, field: str, ours: list, theirs: list) -> None:
    """The same (value, count) in the same order (ties: the larger value first, in both);
    a value longer than 64 bytes, of which ours keeps a preview, by that preview."""
    if len(ours) != len(theirs):
        cmp.bad(name, f"{field}.length", len(ours), len(theirs), "differ")
        return
    for i, ((value, count), (their_value, their_count)) in enumerate(zip(ours, theirs)):
        long = len(their_value.encode("utf-8")) > LONG_VALUE and their_value.startswith(value)
        if count != their_count or not (value == their_value or long):
            cmp.bad(name, f"{field}[{i}]", [value, count], [their_value, their_count],
                    "differ")


def _pattern(files: list[str]) -> str:
    """The file pattern of one split's shards: their folder, which must hold nothing else."""
    folder = os.path.dirname(files[0])
    assert sorted(files) == sorted(os.path.join(folder, f) for f in os.listdir(folder)), (
        f"{folder}: other files")
    return os.path.join(folder, "*")


def generate_all(tfdv, patterns: list[str], options, workdir: str) -> dict:
    """TFDV's statistics of each file pattern, as ``tfdv.generate_statistics_from_tfrecord``
    computes them (TFX's TFExampleRecord source, TFDV's statistics generators, its writer and
    loader), all patterns in one pass: ``GenerateStatistics`` keys every batch with one
    slice key and hands it to ``GenerateSlicedStatisticsImpl``; here each pattern's batches
    carry their pattern as the slice key instead (TFDV's own slicing), so its combiners keep
    one accumulator per pattern. Building and running TFDV's transforms costs seconds of CPU
    per ``GenerateStatistics``, far more than these inputs' statistics; the numbers are
    those of one call per pattern, but for the last bits of means and deviations that depend
    on the order accumulators merge in."""
    import apache_beam as beam
    from tensorflow_data_validation.statistics import stats_impl
    from tfx_bsl.tfxio import tf_example_record

    output = os.path.join(workdir, "stats.tfrecord")
    with beam.Pipeline() as p:
        keyed = [p
                 | f"ReadData-{i}" >> tf_example_record.TFExampleRecord(
                     file_pattern=pattern, schema=None,
                     telemetry_descriptors=["tfdv", "generate_statistics_from_tfrecord"])
                 .BeamSource(options.desired_batch_size)
                 | f"Key-{i}" >> beam.Map(lambda batch, key=pattern: (key, batch))
                 for i, pattern in enumerate(patterns)]
        _ = (keyed
             | "Flatten" >> beam.Flatten()
             | "GenerateStatistics" >> stats_impl.GenerateSlicedStatisticsImpl(
                 options, is_slicing_enabled=True)
             | "WriteStatsOutput" >> tfdv.WriteStatisticsToTFRecord(output))
    found = {d.name: d for d in tfdv.load_statistics(output).datasets}
    assert set(found) == set(patterns), (sorted(found), patterns)
    return found


def run_case(tfdv, case: dict, computed: dict) -> dict:
    """One case compared with TFDV's statistics of its splits (``computed``, by file
    pattern)."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    # One file of every split's datasets, or a file per split (a version's own
    # statistics/Split-<split>/FeatureStats.pb), each opened as TFDV opens any.
    files = case["stats"] if isinstance(case["stats"], dict) else {"": case["stats"]}
    ours = {d.name: d for path in files.values()
            for d in tfdv.load_stats_binary(path).datasets}
    mismatches, anomalies, features = [], {}, 0
    schema = tfdv.load_schema_text(case["schema"]) if case.get("schema") else None
    for split, files in case["splits"].items():
        cmp = Comparison(case["name"], split)
        if split not in ours:
            cmp.bad("", "dataset", None, split, "our statistics lack this split")
            mismatches += cmp.mismatches
            continue
        theirs = computed[_pattern(files)]
        mine = ours[split]
        cmp.exact("", "num_examples", mine.num_examples, theirs.num_examples)
        truth = Truth(files)
        om, tm = _feature_map(mine), _feature_map(theirs)
        for name in sorted(set(om) | set(tm)):
            if name in om and name not in tm and _common(om[name]).num_non_missing == 0:
                continue  # ours lists a key of the config that no Example holds; TFDV cannot
            if name not in om or name not in tm:
                cmp.bad(name, "feature", name in om, name in tm, "listed on one side only")
                continue
            compare_feature(cmp, name, om[name], tm[name], truth)
            features += 1
        mismatches += cmp.mismatches
        if schema is not None:
            one = statistics_pb2.DatasetFeatureStatisticsList(datasets=[mine])
            found = tfdv.validate_statistics(one, schema)
            anomalies[split] = [f"{key}: {info.short_description} -- {info.description}"
                                for key, info in found.anomaly_info.items()]
    return {"mismatches": mismatches, "anomalies": anomalies, "features": features}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("job")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    started = time.monotonic()
    import tensorflow_data_validation as tfdv

    with open(args.job, encoding="utf-8") as f:
        cases = json.load(f)
    options = tfdv.StatsOptions(num_top_values=20, num_quantiles_histogram_buckets=10,
                                num_values_histogram_buckets=10, num_histogram_buckets=10)
    result = {"cases": {}, "tfdv_version": tfdv.__version__}
    # Each split's shards once (a tampered copy of a case's statistics shares its shards).
    patterns = list(dict.fromkeys(_pattern(files) for case in cases
                                  for files in case["splits"].values()))
    with tempfile.TemporaryDirectory() as workdir:
        computed = generate_all(tfdv, patterns, options, workdir)
    for case in cases:
        result["cases"][case["name"]] = run_case(tfdv, case, computed)
    result["seconds"] = round(time.monotonic() - started, 1)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    print(json.dumps([m for case in result["cases"].values() for m in case["mismatches"]],
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
