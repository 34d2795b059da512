"""``ToExamples``: the rows of any Beam pipeline -> serialized Examples per split.

Beam programmers' rows come as dicts, ``beam.Row`` s (every schema'd PCollection, Beam SQL,
Beam YAML), NamedTuples, or Arrow: ``pyarrow.RecordBatch`` es and ``pyarrow.Table`` s (what
``beam.io.ReadFromParquetBatched`` yields). Each kind is turned into the one element our encoder
takes, a :class:`RecordChunk`, without a Python object per row where it can be avoided:

- Arrow batches and tables become chunks as they are (column-wise encoding; no Python rows);
- dicts, Rows and NamedTuples are gathered per bundle, ``batch_rows`` at a time, and turned
  into one Arrow batch each, so they take the columnar path too -- unless Arrow cannot type
  them (mixed types in a column), in which case that chunk is encoded row by row. Both paths
  write the same bytes;
- our own readers' RecordChunks pass through.

The outputs are those of :class:`BuildExamples`: ``examples`` (``(split, SerializedBatch)``),
``rejected`` (dead-letter rows) and ``counts``; for rows that did not come from our readers
``read`` is counted here, so read = written + rejected holds for them too. With statistics
(the default), also ``statistics``: ``(split, serialized DatasetFeatureStatisticsList)`` per
split, taken from the values each batch wrote (transforms/compute_statistics.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import apache_beam as beam

from beam_tfrecords.runtime.bundle_output import finish_bundle_outputs
from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks.duplicates import DUPLICATE_KEYS, CountDuplicates
from beam_tfrecords.transforms.build_examples import _BuildExamplesFn
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.codec.specs import (
    FeaturesLike,
    SplitsLike,
    as_feature_specs,
    parse_splits,
)
from beam_tfrecords.transforms.codec.splits import SplitSpec
from beam_tfrecords.transforms.compute_statistics import (
    STATISTICS,
    ComputeStatistics,
    statistics_kinds,
)
from beam_tfrecords.transforms.readers.framework import (
    COUNTS,
    REJECTED,
    Outputs,
    RecordChunk,
    dead_letter,
)

__all__ = ["Examples", "FeaturesLike", "SplitsLike", "ToExamples", "UnbatchExamples",
           "as_feature_specs", "as_split_spec", "is_read_result", "plain"]

DEFAULT_BATCH_ROWS = 4096


def as_split_spec(splits: Mapping[str, Any] | SplitSpec | None) -> SplitSpec:
    """A ``splits:`` mapping, None (one split, ``train``) or a SplitSpec -> SplitSpec.

    Args:
        splits: the split config.

    Returns:
        The split spec.

    Raises:
        ConfigError: the mapping is invalid.
    """
    if isinstance(splits, SplitSpec):
        return splits
    return parse_splits(dict(splits) if splits is not None else None)


def plain(value: Any) -> Any:
    """A record as plain Python: ``beam.Row`` s and NamedTuples become dicts, at any depth.

    Args:
        value: a record or any value in it.

    Returns:
        The value with rows, NamedTuples and dataclasses turned into dicts.
    """
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, beam.Row):
        return {k: plain(v) for k, v in value.as_dict().items()}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


_SCALARS = frozenset({int, float, str, bytes, bool, type(None)})


def _is_plain(record: dict) -> bool:
    """True when ``record`` needs no :func:`plain`: scalars, lists of scalars and dicts of
    those only -- the common case, checked for a fraction of what converting costs."""
    for value in record.values():
        kind = type(value)
        if kind in _SCALARS:
            continue
        if kind is list:
            if all(type(item) in _SCALARS for item in value):
                continue
            return False
        if kind is dict and _is_plain(value):
            continue
        return False
    return True


def _is_row(value: Any) -> bool:
    return isinstance(value, (Mapping, beam.Row)) or (
        isinstance(value, tuple) and hasattr(value, "_asdict")) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type))


class _ToExamplesFn(_BuildExamplesFn):
    """Any row-like element -> RecordChunks -> the BuildExamples outputs, in one step."""

    def __init__(self, features: Sequence[FeatureSpec], splits: SplitSpec,
                 max_record_bytes: int | None, batch_rows: int, source: str,
                 statistics: Mapping[str, str] | None = None,
                 duplicate_key: Sequence[str] = ()) -> None:
        super().__init__(features, splits, max_record_bytes, statistics, duplicate_key)
        self._batch_rows = batch_rows
        self._source = source

    def start_bundle(self) -> None:
        self._pending: list = []
        self._first = 1
        self._seen = 0  # rows counted in this bundle, for row numbers in dead letters

    def process(self, element: Any) -> Iterator[Any]:
        import pyarrow as pa

        if isinstance(element, RecordChunk):  # from our readers: counted there
            yield from super().process(element)
            return
        if isinstance(element, (pa.RecordBatch, pa.Table)):
            yield from self._flush()
            batches = (element.combine_chunks().to_batches(max_chunksize=1 << 16)
                       if isinstance(element, pa.Table) else [element])
            for batch in batches:
                if batch.num_rows:
                    yield from self._chunk(RecordChunk(self._source, self._first, [],
                                                       batch=batch))
            return
        if not _is_row(element):
            self._seen += 1
            self._first += 1
            yield beam.pvalue.TaggedOutput(COUNTS, ("read", 1))
            yield beam.pvalue.TaggedOutput(COUNTS, ("rejected_at_read", 1))
            yield beam.pvalue.TaggedOutput(REJECTED, dead_letter(
                self._source, self._seen, "", f"not a record: a {type(element).__name__} "
                "(expected a dict, beam.Row, NamedTuple or Arrow batch)", element, element))
            return
        self._pending.append(element if type(element) is dict and _is_plain(element)
                             else plain(element))
        if len(self._pending) >= self._batch_rows:
            yield from self._flush()

    def _chunk(self, chunk: RecordChunk) -> Iterator[Any]:
        self._seen += len(chunk)
        self._first += len(chunk)
        yield beam.pvalue.TaggedOutput(COUNTS, ("read", len(chunk)))
        yield from super().process(chunk)

    def _flush(self) -> Iterator[Any]:
        import pyarrow as pa

        rows, self._pending = self._pending, []
        if not rows:
            return
        try:  # Arrow types the columns; the columnar encoder then does the rest
            chunk = RecordChunk(self._source, self._first, [], batch=pa.RecordBatch.from_pylist(
                rows))
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            chunk = RecordChunk(self._source, self._first, rows)  # mixed types: row by row
        yield from self._chunk(chunk)

    def finish_bundle(self) -> Iterator[Any]:
        yield from finish_bundle_outputs(self._flush())


class ToExamples(beam.PTransform):
    """Rows -> serialized ``tf.train.Example`` s per split, with dead letters and counts.

    Args:
      features: the ``features:`` mapping a config holds, as plain dicts (``{"age": {"type":
        "int64"}, "emb": {"type": "float", "shape": [3]}}``), or a sequence of FeatureSpec.
      splits: the ``splits:`` mapping (``{"key": "id", "train": 80, "eval": 20}``); None
        writes every record to one split, ``train``.
      max_record_bytes: the largest framed record to accept (the output's maximum shard
        size); larger records are dead letters. None checks only protobuf's 2 GiB limit.
      batch_rows: rows gathered into one batch before encoding (dicts, Rows, NamedTuples).
      source: what dead-letter rows name as their source for rows from this PCollection.
      statistics: also compute per-split statistics of the Examples written, in
        TensorFlow Data Validation's format (``statistics`` output); off saves their cost.
        A ``string`` feature gets text statistics (top values, lengths), a ``bytes``
        feature (binary: images, blobs) sizes and unique counts.
      duplicate_key: a source field (``"id"``, ``"meta.id"``) whose equal values make two
        records duplicates (and a leak across splits) whatever else they hold; the
        ``duplicates`` output carries the counts to ``WriteTFRecordDataset``. None: records
        are compared by their serialized bytes (the writer counts them). Needs
        ``statistics``.

    Input elements: dicts, ``beam.Row`` s, NamedTuples or dataclasses (nested ones become
    dotted features: ``source: meta.label``), ``pyarrow.RecordBatch`` es or ``Table`` s, or
    the RecordChunks our sources emit. Anything else is a dead letter. Applied to a source's
    whole result (``p | btf.ReadCsv(...) | btf.ToExamples(features)``), it encodes the records
    and carries the source's rejected rows and counts on with its own.

    Returns:
      An :class:`Examples` dict of PCollections, also readable as attributes: ``examples``
      (``(split, SerializedBatch)`` -- apply ``btf.WriteTFRecordDataset`` to the whole
      result, or ``btf.UnbatchExamples`` for plain serialized Examples), ``rejected``
      (dead-letter dicts: source, row, feature, reason, value, record), ``counts``
      (``(name, n)`` pairs) and, with ``statistics``, ``statistics`` (``(split, bytes)``: a
      serialized ``DatasetFeatureStatisticsList`` per split that holds an Example); with
      ``duplicate_key``, ``duplicates`` (each fingerprint bucket's counts).

    Raises:
      ValueError: a bad ``batch_rows``, or ``duplicate_key`` without ``statistics``.
    """

    def __init__(self, features: FeaturesLike, splits: SplitsLike | None = None,
                 max_record_bytes: int | None = None,
                 batch_rows: int = DEFAULT_BATCH_ROWS, source: str = "pcollection", *,
                 statistics: bool = True, duplicate_key: str | None = None) -> None:
        super().__init__()
        self.features = as_feature_specs(features)
        self.statistics = bool(statistics)
        if duplicate_key is not None and (not isinstance(duplicate_key, str)
                                          or not duplicate_key.strip()):
            raise ValueError(f"duplicate_key must be a field name, not {duplicate_key!r}")
        if duplicate_key is not None and not self.statistics:
            raise ValueError("duplicate_key counts duplicates with the statistics: it needs "
                             "statistics=True")
        self.duplicate_key = tuple(duplicate_key.split(".")) if duplicate_key else ()
        self._kinds = statistics_kinds(self.features) if self.statistics else None
        self.splits = as_split_spec(splits)
        if not isinstance(batch_rows, int) or batch_rows < 1:
            raise ValueError(f"batch_rows must be a positive integer, not {batch_rows!r}")
        self._max_record_bytes = max_record_bytes
        self._batch_rows = batch_rows
        self._source = source

    def expand(self, rows):
        read = rows if is_read_result(rows) else None
        result = (read["records"] if read else rows) | "Encode" >> beam.ParDo(_ToExamplesFn(
            self.features, self.splits, self._max_record_bytes, self._batch_rows, self._source,
            self._kinds, self.duplicate_key,
        )).with_output_types(tuple[str, SerializedBatch]).with_outputs(
            REJECTED, COUNTS, STATISTICS, DUPLICATE_KEYS, main="examples")
        # Beam rebuilds dicts it pipes on; the split names and the features (for the
        # feature_spec.json WriteTFRecordDataset exports) ride on the examples PCollection.
        result.examples.split_names = self.splits.names
        result.examples.feature_specs = self.features
        rejected, counts = result[REJECTED], result[COUNTS]
        if read:  # a source's rejects and counts go on with ours: read = built + rejected
            rejected = (read[REJECTED], rejected) | "MergeRejects" >> beam.Flatten()
            counts = (read[COUNTS], counts) | "MergeCounts" >> beam.Flatten()
        if self._kinds is None:
            return Examples(examples=result.examples, rejected=rejected, counts=counts)
        statistics = result[STATISTICS] | "Statistics" >> ComputeStatistics(self._kinds)
        statistics.statistics_kinds = self._kinds  # what the commit writes for empty splits
        if not self.duplicate_key:
            return Examples(examples=result.examples, rejected=rejected, counts=counts,
                            statistics=statistics)
        duplicates = result[DUPLICATE_KEYS] | "CountDuplicateKeys" >> CountDuplicates()
        duplicates.duplicate_key = self.duplicate_key  # what the commit names as its method
        return Examples(examples=result.examples, rejected=rejected, counts=counts,
                        statistics=statistics, duplicates=duplicates)


def is_read_result(value: Any) -> bool:
    """Whether ``value`` is a source's result (``btf.ReadCsv`` ...): ``records``,
    ``rejected`` and ``counts``, as a dict.

    Args:
        value: the input of ``ToExamples``.

    Returns:
        Whether it is a source's result.
    """
    return isinstance(value, Mapping) and {"records", REJECTED, COUNTS} <= set(value)


class Examples(Outputs):
    """ToExamples' result: the ``examples``, ``rejected`` and ``counts`` PCollections, as a
    dict (so Beam pipes the whole result on: ``rows | ToExamples(f) | WriteTFRecordDataset(...)``)
    with attribute access."""


def _unbatch(element: tuple[str, Any], split: str | None, with_split: bool) -> Iterator[Any]:
    name, batch = element  # (split, SerializedBatch | bytes)
    if split is not None and name != split:
        return
    records = (bytes(batch),) if isinstance(batch, (bytes, bytearray, memoryview)) else batch
    for record in records:
        yield (name, record) if with_split else record


class UnbatchExamples(beam.PTransform):
    """``ToExamples``' result -> one serialized ``tf.train.Example`` (``bytes``) per element,
    for sinks that take records one by one, such as Beam's own ``WriteToTFRecord``::

        (rows | btf.ToExamples(features, splits={"key": "id", "train": 80, "eval": 20})
              | btf.UnbatchExamples(split="train")
              | beam.io.WriteToTFRecord("out/train"))

    ToExamples moves Examples in batches (``(split, SerializedBatch)``), which Beam's sinks
    cannot write. This takes them apart. The rejected rows and counts of ToExamples' result
    are left behind: take them from that result (``.rejected``) when you want them;
    ``btf.WriteTFRecordDataset`` keeps all three.

    Args:
      split: keep only this split's Examples; None (the default): every split's.
      with_split: emit ``(split, bytes)`` pairs instead of ``bytes``.

    Returns:
      A PCollection of ``bytes`` (or of ``(str, bytes)`` with ``with_split``).
    """

    def __init__(self, split: str | None = None, *, with_split: bool = False) -> None:
        super().__init__()
        if split is not None and not isinstance(split, str):
            raise TypeError(f"split must be a split name or None, not {split!r}")
        self.split = split
        self.with_split = bool(with_split)

    def expand(self, pvalueish):
        examples = (pvalueish["examples"] if isinstance(pvalueish, Mapping)
                    else pvalueish.examples if isinstance(pvalueish, beam.pvalue.DoOutputsTuple)
                    else pvalueish)
        kind = tuple[str, bytes] if self.with_split else bytes
        return examples | "Unbatch" >> beam.FlatMap(
            _unbatch, self.split, self.with_split).with_output_types(kind)
