"""The drift gate's comparison (transforms/stats/drift.py), on statistics of real samples.

Statistics are computed by the accumulators the build uses, from rows drawn here: a fresh
sample of the same distribution must pass the default thresholds; each kind of drift a
scheduled rebuild must not publish silently -- a third of the rows gone, a column gone null,
a category's share moved, a new label value, a shifted number, a feature removed or retyped,
more rejects -- must be named, the worst first.
"""

from __future__ import annotations

import math
import random

import pyarrow as pa
import pytest

from beam_tfrecords.transforms.drift_gate import counts_for_gate
from beam_tfrecords.transforms.stats import drift
from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator
from beam_tfrecords.transforms.stats.statistics_wire import (
    decode_statistics_list,
    encode_statistics_list,
)

KINDS = {"age": "int", "score": "float", "city": "string", "label": "int"}
CITIES = ["paris", "lima", "oslo", "kyiv"]
WEIGHTS = [0.4, 0.3, 0.2, 0.1]


def rows(n: int, seed: int, *, cities=CITIES, weights=WEIGHTS, shift: float = 0.0,
         null_score: bool = False) -> dict:
    rng = random.Random(seed)
    return {
        "age": [rng.randint(18, 80) for _ in range(n)],
        "score": [None if null_score else rng.gauss(shift, 1.0) for _ in range(n)],
        "city": rng.choices(cities, weights, k=n),
        "label": [rng.randint(0, 1) for _ in range(n)],
    }


def statistics(columns: dict, kinds: dict = KINDS) -> dict:
    """split -> decoded statistics, as a version's files hold them (through the wire)."""
    acc = DatasetAccumulator(kinds)
    n = len(next(iter(columns.values())))
    types = {"int": pa.int64(), "float": pa.float32(), "string": pa.string()}
    acc.add_batch(n, {k: pa.array(v, types[kinds[k]]) for k, v in columns.items()})
    (decoded,) = decode_statistics_list(encode_statistics_list([acc.result("train")]))
    return {"train": decoded}


BASE = statistics(rows(6000, 1))


def kinds_of(anomalies) -> set:
    return {(a.kind, a.feature) for a in anomalies}


def test_the_same_data_and_a_fresh_sample_pass():
    assert drift.compare(BASE, BASE) == []
    assert drift.compare(BASE, statistics(rows(6000, 2))) == []
    assert drift.compare(BASE, statistics(rows(5400, 3))) == []  # 10% fewer rows


def test_a_third_of_the_rows_gone_is_a_count_anomaly():
    found = drift.compare(BASE, statistics(rows(4000, 2)))
    assert kinds_of(found) == {("count", "")}
    assert "6000 -> 4000 records (-33.3%)" in found[0].message


def test_a_column_gone_null_is_a_missing_anomaly():
    found = drift.compare(BASE, statistics(rows(6000, 2, null_score=True)))
    assert ("missing", "score") in kinds_of(found)
    (missing,) = [a for a in found if a.kind == "missing"]
    assert missing.value == pytest.approx(1.0) and "0.0% -> 100.0%" in missing.message


def test_a_shifted_category_distribution_is_an_linf_anomaly():
    found = drift.compare(BASE, statistics(rows(6000, 2, weights=[0.2, 0.3, 0.2, 0.3])))
    assert kinds_of(found) == {("linf", "city")}
    assert found[0].value == pytest.approx(0.2, abs=0.03)
    assert "'paris'" in found[0].message or "'kyiv'" in found[0].message


def test_a_new_label_value_and_a_vanished_one_are_named():
    found = drift.compare(BASE, statistics(rows(6000, 2, cities=["paris", "lima", "oslo",
                                                                  "rome"])))
    assert {("new_values", "city"), ("vanished_values", "city")} <= kinds_of(found)
    assert any("'rome'" in a.message for a in found if a.kind == "new_values")
    assert any("'kyiv'" in a.message for a in found if a.kind == "vanished_values")


def test_a_shifted_number_is_a_jensen_shannon_anomaly():
    found = drift.compare(BASE, statistics(rows(6000, 2, shift=1.5)))
    assert kinds_of(found) == {("jsd", "score")}
    small = drift.compare(BASE, statistics(rows(6000, 2, shift=0.05)))
    assert small == []


def test_features_removed_added_or_retyped_unless_allowed():
    columns = rows(6000, 2)
    del columns["label"]
    columns["extra"] = columns["age"]
    kinds = {**KINDS, "extra": "int", "age": "float"}
    del kinds["label"]
    found = drift.compare(BASE, statistics(columns, kinds))
    assert kinds_of(found) == {("schema", "label"), ("schema", "extra"), ("schema", "age")}
    assert all(math.isinf(a.severity) for a in found)
    assert drift.compare(BASE, statistics(columns, kinds),
                         drift.Thresholds(schema_changes=True)) == []


def test_ignored_features_and_looser_thresholds_pass():
    shifted = statistics(rows(6000, 2, shift=1.5))
    assert drift.compare(BASE, shifted, drift.Thresholds(ignore=("score",))) == []
    assert drift.compare(BASE, shifted, drift.Thresholds(max_jsd=0.9)) == []


def test_more_rejects_or_unread_input_are_anomalies():
    before = {"read": 1000, "rejected": 0, "unread_bytes": 0, "input_bytes": 10_000}
    after = {"read": 1000, "rejected": 50, "unread_bytes": 2_000, "input_bytes": 10_000}
    found = drift.compare(BASE, BASE, previous_counts=before, current_counts=after)
    assert kinds_of(found) == {("rejects", ""), ("unread", "")}
    assert found[0].kind == "unread"  # 20 points over a 1-point threshold: the worst


def test_more_duplicates_or_leaks_are_anomalies_and_a_version_without_the_count_is_not():
    """The manifests' ``duplicates`` as the gate reads them (drift_gate.counts_for_gate)."""
    def manifest(duplicates: int, leaked: int) -> dict:
        return {"counts": {"read": 1000, "rejected": 0}, "duplicates": {"splits": {
            "train": {"records": 800, "duplicates": duplicates, "leaked": leaked},
            "eval": {"records": 200, "duplicates": 0, "leaked": leaked}}}}

    before, same = counts_for_gate(manifest(5, 2)), counts_for_gate(manifest(12, 4))
    assert drift.compare(BASE, BASE, previous_counts=before, current_counts=same) == []
    after = counts_for_gate(manifest(60, 30))
    found = drift.compare(BASE, BASE, previous_counts=before, current_counts=after)
    assert kinds_of(found) == {("duplicates", ""), ("leaks", "")}
    assert "leaked records: 0.40% -> 6.00% of those written" in [a.message for a in found]
    older = counts_for_gate({"counts": {"read": 1000, "rejected": 0}})
    assert drift.compare(BASE, BASE, previous_counts=older, current_counts=after) == []


def test_splits_added_or_gone():
    found = drift.compare(BASE, {**BASE, "eval": BASE["train"]})
    assert [(a.kind, a.split) for a in found] == [("count", "eval")]


def test_worst_first_and_one_line_names_them():
    drifted = statistics(rows(4000, 2, null_score=True, weights=[0.1, 0.1, 0.1, 0.7]))
    found = drift.compare(BASE, drifted)
    assert [a.severity for a in found] == sorted((a.severity for a in found), reverse=True)
    line = drift.one_line(found, worst=2)
    assert line.startswith(f"{len(found)} anomalies: ") and found[0].message in line
    assert "more)" in line
    doc = drift.document(found, "v1", drift.Thresholds())
    assert doc["passed"] is False and doc["against"] == "v1"
    assert [a["kind"] for a in doc["anomalies"]] == [a.kind for a in found]


def test_jensen_shannon_bounds():
    assert drift.jensen_shannon([1, 2, 3], [2, 4, 6]) == 0.0
    assert drift.jensen_shannon([1, 0], [0, 1]) == pytest.approx(1.0)
    assert 0 < drift.jensen_shannon([1, 1], [1, 2]) < 0.1
