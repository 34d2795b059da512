"""One encoded batch's contribution to a split's statistics: a :class:`BatchPart`.

The encoder hands over, per stored key, the values it wrote for every row of a batch
(:class:`columnar_encoder.StoredColumn`); the build knows which rows it accepted and which
split each went to. :func:`part_for_rows` cuts the columns to one split's rows as Arrow
columns with a row per Example (null: the Example lacks the key), which
:meth:`DatasetAccumulator.add_batch` gathers and takes a few numpy calls per key for -- so
statistics cost a few operations per key and batch, not per row. Keys the encoder wrote per
row (or a batch whose rows it re-encoded one by one), and chunks encoded row by row, are
taken from the serialized Examples themselves (:func:`part_from_records`): slower, and the
same values.

Pure: numpy, pyarrow and our wire code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_tfrecords.transforms.codec import wire
from beam_tfrecords.transforms.codec.columnar_encoder import StoredColumn
from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator

__all__ = ["BatchPart", "add_part", "part_for_rows", "part_from_records"]


@dataclasses.dataclass
class BatchPart:
    """Some Examples of one split, as the statistics take them.

    Attributes:
      num_rows: the Examples.
      columns: stored key -> an Arrow column with a row per Example (null: missing).
      defaults: stored key -> ``(values, counts)`` of the Examples holding the feature's
        default (they hold the key; they are not rows of ``columns``).
      rows: stored key -> decoded values per Example (None: missing), for keys taken from
        the serialized Examples.
      images: stored key of an image feature -> (formats, heights, widths) its images'
        headers gave the reader (``ImageFacts``).
    """

    num_rows: int
    columns: dict[str, Any] = dataclasses.field(default_factory=dict)
    defaults: dict[str, tuple[Any, np.ndarray]] = dataclasses.field(default_factory=dict)
    rows: dict[str, list] = dataclasses.field(default_factory=dict)
    images: dict[str, tuple[list, list, list]] = dataclasses.field(default_factory=dict)


def add_part(acc: DatasetAccumulator, part: BatchPart) -> DatasetAccumulator:
    """Add ``part``'s Examples to ``acc``; returns ``acc``.

    Args:
        acc: the split's accumulator.
        part: the statistics a batch left for the combine.

    Returns:
        ``acc``.
    """
    acc.add_batch(part.num_rows, part.columns)
    for key, (values, counts) in part.defaults.items():
        acc.feature(key).add(values, counts)
    for key, rows in part.rows.items():
        acc.feature(key).add_python(rows)
    for key, (formats, heights, widths) in part.images.items():
        acc.add_image_facts(key, formats, heights, widths)
    return acc


def _arrow_values(values: Any) -> pa.Array:
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        if pa.types.is_null(values.type):
            return values.cast(pa.binary())
        return values
    return pa.array(values)


def _column(stored: StoredColumn, rows: np.ndarray, n: int) -> pa.Array:
    """``stored`` for ``rows`` of a batch of ``n``: a row per Example, null where the
    Example does not hold its own value."""
    present = stored.present[rows]
    absent = None if present.all() else pa.array(~present)
    values = stored.values
    if stored.owner is None:  # a slot per row
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            column = _arrow_values(values).take(pa.array(rows))
            if absent is not None:
                column = pc.if_else(pa.array(present), column,
                                    pa.scalar(None, column.type))
            return column
        return pa.array(values[rows], mask=None if absent is None else ~present)
    owner = stored.owner
    counts = np.bincount(owner, minlength=n)[rows] if owner.size else np.zeros(
        rows.size, np.int64)
    wanted = np.zeros(n, dtype=bool)
    wanted[rows] = True
    leaves = wanted[owner]
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        flat = _arrow_values(values).filter(pa.array(leaves))
    else:
        flat = pa.array(values[leaves])
    offsets = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return pa.LargeListArray.from_arrays(pa.array(offsets), flat, mask=absent)


def part_for_rows(columns: Mapping[str, StoredColumn], rows: np.ndarray, n: int,
                  records: Sequence[bytes] = (), kinds: Iterable[str] = ()) -> BatchPart:
    """The statistics' part of the Examples at ``rows`` of an encoded batch of ``n``.

    Args:
      columns: the encoder's :class:`StoredColumn` per stored key it wrote column-wise.
      rows: the batch rows of the Examples (sorted, each accepted).
      n: the batch's rows.
      records: the same Examples serialized, in the same order: the keys of ``kinds`` that
        ``columns`` lacks are read from them.
      kinds: every stored key the statistics cover.

    Returns:
      The BatchPart.
    """
    rows = np.asarray(rows, dtype=np.int64)
    part = BatchPart(int(rows.size))
    for key, stored in columns.items():
        part.columns[key] = _column(stored, rows, n)
        if stored.default_rows is not None:
            k = int(np.count_nonzero(stored.default_rows[rows]))
            if k:
                size = len(stored.default)
                values = list(stored.default) * k
                if values and not isinstance(values[0], (bytes, str)):
                    values = np.asarray(values)
                part.defaults[key] = (values, np.full(k, size, dtype=np.int64))
    rest = [key for key in kinds if key not in columns]
    if rest:
        part.rows = _decoded_rows(records, rest)
    return part


def part_from_records(records: Iterable[bytes], kinds: Iterable[str],
                      images: Mapping[str, Sequence[Mapping[str, Any]]] | None = None
                      ) -> BatchPart:
    """The statistics' part of serialized Examples (the row-by-row path).

    Args:
      records: the serialized Examples.
      kinds: every stored key the statistics cover.
      images: stored key of an image feature -> the source records of its Examples that
        hold one, whose ``format``, ``height`` and ``width`` the image reader took from the
        header.

    Returns:
      The BatchPart.
    """
    records = list(records)
    part = BatchPart(len(records))
    part.rows = _decoded_rows(records, list(kinds))
    for key, sources in (images or {}).items():
        held = [r for r in sources if all(r.get(f) is not None
                                          for f in ("format", "height", "width"))]
        if held:
            part.images[key] = ([str(r["format"]) for r in held],
                                [int(r["height"]) for r in held],
                                [int(r["width"]) for r in held])
    return part


def _decoded_rows(records: Sequence[bytes], keys: Sequence[str]) -> dict[str, list]:
    rows: dict[str, list] = {key: [] for key in keys}
    for record in records:
        example = wire.decode_example(bytes(record))
        for key in keys:
            held = example.get(key)
            rows[key].append(None if held is None else held[1])
    return rows
