"""Parquet by row groups (transforms/readers/parquet_ranges.py): on real files written by
pyarrow, every row group is in exactly one range, in file order, ranges are about
split_bytes, the rows they read are the file's, and one row group is said to be
unsplittable."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from beam_tfrecords.transforms.readers.parquet_ranges import group_span, plan_row_groups


def parquet(rows: int, group_rows: int, compression: str = "snappy") -> bytes:
    table = pa.table({"id": pa.array(range(rows), pa.int64()),
                      "text": pa.array([f"row {i} " * (i % 5) for i in range(rows)])})
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=group_rows, compression=compression)
    return out.getvalue()


@pytest.fixture(scope="module")
def many_groups() -> pq.ParquetFile:
    return pq.ParquetFile(io.BytesIO(parquet(20000, 700)))


@pytest.mark.parametrize("split", [1, 2000, 9000, 40000, 10**9])
def test_every_group_once_in_order_and_the_rows_are_the_files(many_groups, split):
    meta = many_groups.metadata
    ranges, reason = plan_row_groups(meta, split)
    assert reason is None
    assert [g for r in ranges for g in r.groups] == list(range(meta.num_row_groups))
    assert all(r.groups for r in ranges)
    spans = [group_span(meta.row_group(i)) for i in range(meta.num_row_groups)]
    largest = max(size for _, size in spans)
    assert all(r.bytes <= split + largest for r in ranges)
    rows = 0
    for r in ranges:
        assert r.first_row == rows
        table = many_groups.read_row_groups(list(r.groups))
        assert table.num_rows == r.rows
        assert table.column("id").to_pylist() == list(range(rows, rows + r.rows))
        rows += r.rows
    assert rows == meta.num_rows


def test_the_ranges_are_about_split_bytes(many_groups):
    meta = many_groups.metadata
    total = sum(group_span(meta.row_group(i))[1] for i in range(meta.num_row_groups))
    ranges, _ = plan_row_groups(meta, total // 4)
    assert len(ranges) in (4, 5)
    sizes = [r.bytes for r in ranges]
    assert max(sizes) < 2 * min(sizes)


def test_one_row_group_cannot_split_and_says_how_to_write_it():
    meta = pq.ParquetFile(io.BytesIO(parquet(5000, 5000))).metadata
    ranges, reason = plan_row_groups(meta, 1000, "gs://b/one.parquet")
    assert [r.groups for r in ranges] == [(0,)]
    assert reason.startswith("gs://b/one.parquet is one Parquet row group of ")
    assert "row_group_size" in reason
    assert plan_row_groups(meta, 10**9)[1] is None  # small enough: nothing to say


def test_a_file_without_rows_is_one_empty_range():
    table = pa.table({"id": pa.array([], pa.int64())})
    out = io.BytesIO()
    pq.write_table(table, out)
    meta = pq.ParquetFile(io.BytesIO(out.getvalue())).metadata
    ranges, reason = plan_row_groups(meta, 1000)
    assert len(ranges) == 1 and ranges[0].rows == 0 and reason is None
    assert ranges[0].groups == tuple(range(meta.num_row_groups))
