"""Parquet by row groups: consecutive row groups gathered into ranges of about
``split_bytes`` of compressed column data each.

A Parquet file can be entered only at a row group: the footer says where each group's column
chunks lie and how many rows it holds, and any worker reads any group on its own. So a range
of a Parquet file is a run of consecutive row groups, planned from the footer
(``pyarrow.parquet.FileMetaData``) alone: with ``n = ceil(total / split_bytes)`` ranges
wanted, group ``i`` goes to range ``floor(before_i * n / total)``, ``before_i`` being the
compressed bytes of the groups before it -- a group belongs to the range its first byte
falls in, counted in compressed column bytes -- and ranges left empty by large groups are
dropped. Every group is in exactly one range, in file order, and each range knows its first
row, so row numbers stay exact across ranges (unlike text formats).

A file of one row group cannot split: :func:`plan_row_groups` says so in words the launch
check and ``init`` can show, with the writer's option that would make it splittable.

Pure: no Beam, no file systems (it reads the footer's metadata object only).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["GroupRange", "group_span", "plan_row_groups"]


@dataclasses.dataclass(frozen=True)
class GroupRange:
    """Consecutive row groups ``groups`` of one file: ``rows`` rows after the first
    ``first_row`` (0-based), their column chunks ``bytes`` compressed bytes from byte
    ``offset``."""

    groups: tuple[int, ...]
    first_row: int
    rows: int
    offset: int
    bytes: int


def group_span(group: Any) -> tuple[int, int]:
    """(first byte, bytes) of a row group's column chunks (``RowGroupMetaData``).

    Args:
        group: the row group's metadata.

    Returns:
        The span, ``(0, 0)`` for a group without columns.
    """
    starts, ends = [], []
    for index in range(group.num_columns):
        column = group.column(index)
        first = column.data_page_offset
        if column.has_dictionary_page and column.dictionary_page_offset:
            first = min(first, column.dictionary_page_offset)
        starts.append(first)
        ends.append(first + column.total_compressed_size)
    if not starts:
        return 0, 0
    return min(starts), max(ends) - min(starts)


def plan_row_groups(meta: Any, split_bytes: int, path: str = "the file"
                    ) -> tuple[list[GroupRange], str | None]:
    """A Parquet file's row groups gathered into ranges (see the module doc).

    Args:
      meta: its footer (``pyarrow.parquet.FileMetaData``).
      split_bytes: the wanted compressed bytes per range.
      path: the file, for the reason.

    Returns:
      ``(ranges, reason)``: the ranges in file order (one, holding no groups, for a file
      without any); ``reason`` says why a file larger than ``split_bytes`` is one range
      anyway (one row group), else None."""
    if split_bytes < 1:
        raise ValueError(f"cannot plan ranges of {split_bytes} bytes")
    groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
    spans = [group_span(group) for group in groups]
    total = sum(size for _, size in spans)
    wanted = max(1, -(-total // split_bytes))
    members: dict[int, list[int]] = {}
    before = 0
    for index, (_, size) in enumerate(spans):
        members.setdefault(before * wanted // total if total else 0, []).append(index)
        before += size
    ranges, row = [], 0
    for slot in sorted(members):
        chosen = members[slot]
        rows = sum(groups[i].num_rows for i in chosen)
        first = min(spans[i][0] for i in chosen)
        end = max(spans[i][0] + spans[i][1] for i in chosen)
        ranges.append(GroupRange(tuple(chosen), row, rows, first, end - first))
        row += rows
    if not ranges:
        ranges.append(GroupRange((), 0, 0, 0, 0))
    reason = None
    if len(groups) == 1 and total > split_bytes:
        reason = (f"{path} is one Parquet row group of {total} compressed bytes: a Parquet file "
                  f"splits only between row groups, so one worker reads it; write it with "
                  f"row groups of at most about {split_bytes} bytes (pyarrow.parquet."
                  f"write_table(..., row_group_size=ROWS), pandas to_parquet(..., "
                  f"row_group_size=ROWS)) for it to split")
    return ranges, reason
