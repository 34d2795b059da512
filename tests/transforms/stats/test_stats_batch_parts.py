"""Statistics from the encoder's columns equal those of the Examples it wrote, byte for byte.

The build takes each split's statistics from the values the columnar encoder wrote
(``ColumnarEncoder.encode(batch, columns)`` -> ``batch_parts.part_for_rows``), not from the
serialized Examples. The reference is the slow, general way in: the same Examples serialized,
decoded one by one (``DatasetAccumulator.add_serialized``). Hypothesis draws the encoder's own
test cases (tests/transforms/codec/test_columnar_encoder.py: every Arrow type, nulls, NaN, defaults,
ragged and fixed shapes, dates, scales, rows it rejects) and the rows of a split.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms.codec.columnar_encoder import ColumnarEncoder
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec as F
from beam_tfrecords.transforms.stats.batch_parts import add_part, part_for_rows, part_from_records
from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator, kinds_for_specs
from beam_tfrecords.transforms.stats.statistics_wire import encode_statistics_list


def _encoder_cases():
    """tests/transforms/codec/test_columnar_encoder.py as a module, for its strategies."""
    name = "beam_tfrecords_tests_columnar_cases"
    if name not in sys.modules:
        path = pathlib.Path(__file__).parents[1] / "codec" / "test_columnar_encoder.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


CASES = _encoder_cases()
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _kinds(specs):
    return kinds_for_specs(specs, images=[s.name for s in specs if s.dtype == "bytes"])


def _both_ways(specs, batch, pick) -> None:
    """Statistics of the Examples ``pick`` chooses among those accepted, from the columns
    and from the bytes, must be the same bytes."""
    columns: dict = {}
    out, good, _ = ColumnarEncoder(specs).encode(batch, columns)
    records = list(out)
    chosen = np.asarray([i for i in range(len(records)) if pick(i)], dtype=np.int64)
    mine = [records[i] for i in chosen.tolist()]
    kinds = _kinds(specs)
    part = part_for_rows(columns, good[chosen] if chosen.size else chosen, batch.num_rows,
                         mine, kinds)
    from_columns = add_part(DatasetAccumulator(kinds), part).result("s")
    reference = DatasetAccumulator(kinds)
    reference.add_serialized(mine)
    assert encode_statistics_list([from_columns]) == encode_statistics_list(
        [reference.result("s")])


@FAST
@given(CASES.case(), st.sampled_from(["all", "even", "odd"]))
def test_columns_give_the_statistics_of_the_examples_written(drawn, which):
    specs, batch = drawn
    _both_ways(specs, batch, {"all": lambda i: True, "even": lambda i: i % 2 == 0,
                              "odd": lambda i: i % 2 == 1}[which])


@FAST
@given(CASES.nested_case())
def test_nested_ragged_and_default_lists_give_the_same_statistics(drawn):
    specs, batch = drawn
    _both_ways(specs, batch, lambda i: i % 3 != 1)


def test_defaults_empty_lists_nan_as_missing_and_per_row_keys():
    """The policies that store something for a missing value, and a feature the encoder
    writes per row (a map column), in one batch."""
    specs = [F("d", "int64", missing="default", default=7),
             F("e", "float", (-1,), missing="empty"),
             F("n", "float", nan="missing", missing="omit"),
             F("r", "int64", (-1, -1), missing="omit"),
             F("s", "string", missing="default", default="zz"),
             F("m", "string", source=("m", "k"), missing="omit")]
    batch = pa.record_batch({
        "d": [1, None, 3, None],
        "e": [[1.5], None, [], [2.5, 3.5]],
        "n": [1.0, float("nan"), None, 2.0],
        "r": [[[1], [2, 3]], None, [[]], [[4]]],
        "s": ["a", None, "b", "a"],
        "m": pa.array([[("k", "x")], None, [("k", "y")], []],
                      pa.map_(pa.string(), pa.string())),
    })
    columns: dict = {}
    ColumnarEncoder(specs).encode(batch, columns)
    assert "m" not in columns and {"d", "e", "n", "s", "r/flat_values"} <= set(columns)
    for pick in (lambda i: True, lambda i: i != 2):
        _both_ways(specs, batch, pick)


def test_rescued_rows_leave_the_columns_to_the_bytes(monkeypatch):
    """Rows a columnar check flagged but the row encoder accepts are written from the row
    encoder's bytes: then no column is handed over, and the statistics come from the bytes."""
    specs = [F("i", "int64"), F("s", "string", missing="omit")]
    batch = pa.record_batch({"i": [1, 2, 3], "s": ["a", "b", None]})
    real = ColumnarEncoder._encode_column

    def flag_everything(self, spec, *args):
        enc = real(self, spec, *args)
        enc.bad[:] = True
        return enc

    monkeypatch.setattr(ColumnarEncoder, "_encode_column", flag_everything)
    columns: dict = {}
    ColumnarEncoder(specs).encode(batch, columns)
    assert columns == {}
    _both_ways(specs, batch, lambda i: True)


def test_a_part_from_records_counts_every_example():
    specs = [F("i", "int64", missing="omit")]
    out, _, _ = ColumnarEncoder(specs).encode(pa.record_batch({"i": [1, None, 3]}))
    part = part_from_records(out, _kinds(specs))
    stats = add_part(DatasetAccumulator(_kinds(specs)), part).result("s")
    assert stats["num_examples"] == 3
    common = stats["features"][0]["num_stats"]["common_stats"]
    assert (common["num_non_missing"], common["num_missing"]) == (2, 1)


@pytest.mark.parametrize("rows", [[], [0, 2]])
def test_a_split_of_some_rows_holds_only_those(rows):
    specs = [F("x", "int64", (-1,), missing="omit")]
    batch = pa.record_batch({"x": [[1, 2], [5], None]})
    columns: dict = {}
    out, good, _ = ColumnarEncoder(specs).encode(batch, columns)
    part = part_for_rows(columns, np.asarray(rows, dtype=np.int64), 3,
                         [list(out)[i] for i in rows], _kinds(specs))
    stats = add_part(DatasetAccumulator(_kinds(specs)), part).result("s")
    num = stats["features"][0]["num_stats"]
    assert stats["num_examples"] == len(rows)
    assert num["common_stats"]["tot_num_values"] == (2 if rows else 0)
    if rows:
        assert (num["min"], num["max"], num["common_stats"]["num_missing"]) == (1, 2, 1)
