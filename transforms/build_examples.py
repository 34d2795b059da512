"""``BuildExamples``: record chunks -> per-split batches of serialized Examples.

Input elements are :class:`sources.RecordChunk` s; the main output is
``(split, SerializedBatch)``, one batch per split per chunk, so the sink receives a few large
elements instead of one per record. A record the coercion policy refuses becomes a dead-letter
row (``rejected`` output) naming its file, row, feature and reason, and is counted; nothing is
dropped silently. The ``counts`` output carries (``built`` | ``rejected_at_build``, n) pairs,
so the commit step can check read = written + rejected without trusting runner metrics.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from beam_tfrecords.sinks.serialized_batch import SerializedBatch
from beam_tfrecords.transforms.coercion import FeatureValueError
from beam_tfrecords.transforms.example_codec import ExampleEncoder, lookup
from beam_tfrecords.transforms.feature_spec import FeatureSpec
from beam_tfrecords.transforms.sources import COUNTS, REJECTED, RecordChunk, dead_letter
from beam_tfrecords.transforms.splits import SplitSpec, key_bytes

__all__ = ["BuildExamples"]


class _BuildExamplesFn(beam.DoFn):
    def __init__(self, features: Sequence[FeatureSpec], splits: SplitSpec) -> None:
        self._features = tuple(features)
        self._splits = splits
        self._built = Metrics.counter("build_examples", "examples_built")
        self._rejected = Metrics.counter("build_examples", "records_rejected")

    def setup(self) -> None:
        self._encoder = ExampleEncoder(self._features)

    def process(self, chunk: RecordChunk) -> Iterator[Any]:
        by_split: dict[str, list[bytes]] = {}
        splits = self._splits
        key = splits.key
        for offset, record in enumerate(chunk.records()):
            try:
                data = self._encoder.encode(record)
                if splits.field:
                    split = self._named_split(record)
                else:
                    split = splits.choose(key_bytes(lookup(record, key)) if key else data)
            except (FeatureValueError, TypeError) as err:
                feature = getattr(err, "feature", ".".join(key))
                value = getattr(err, "value", None)
                self._rejected.inc()
                yield beam.pvalue.TaggedOutput(REJECTED, dead_letter(
                    chunk.path, chunk.row_number(offset), feature, str(err), value, record))
                continue
            by_split.setdefault(split, []).append(data)
        built = 0
        for split, records in by_split.items():
            built += len(records)
            yield split, SerializedBatch.from_records(records)  # (split, SerializedBatch)
        self._built.inc(built)
        yield beam.pvalue.TaggedOutput(COUNTS, ("built", built))
        yield beam.pvalue.TaggedOutput(COUNTS, ("rejected_at_build", len(chunk) - built))


    def _named_split(self, record: Any) -> str:
        """The split a record names in the split field (image folders); rejects others."""
        field = self._splits.field
        value = lookup(record, field)
        try:
            return self._splits.named(value)
        except ValueError as err:
            raise FeatureValueError(".".join(field), value, "a split name", str(err)) from None


class BuildExamples(beam.PTransform):
    """RecordChunks -> ``(split, SerializedBatch)``; also ``rejected`` rows and ``counts``."""

    def __init__(self, features: Sequence[FeatureSpec], splits: SplitSpec = SplitSpec()) -> None:
        super().__init__()
        self._features = tuple(features)
        self._splits = splits

    def expand(self, chunks):
        return chunks | "EncodeChunks" >> beam.ParDo(
            _BuildExamplesFn(self._features, self._splits)
        ).with_outputs(REJECTED, COUNTS, main="examples")
