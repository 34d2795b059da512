"""``ComputeStatistics``: per-split statistics of the Examples, from the pass that encodes them.

The encoding step emits, per split and encoded batch, a :class:`batch_parts.BatchPart` (the
values it wrote, column by column: a few Arrow arrays per batch, not an element per row).
:class:`StatisticsCombineFn` adds them to a :class:`dataset_stats.DatasetAccumulator` per
split and merges those in any grouping and order -- a Beam ``CombineFn``, so every runner
computes them, and its per-bundle half runs fused with the encoder (combiner lifting) -- and
its output is the split's ``DatasetFeatureStatisticsList``, serialized by our own wire code
(transforms/stats/statistics_wire.py). The commit writes them as
``statistics/Split-<split>/FeatureStats.pb``. What each number is, its error and memory:
transforms/stats/accumulators.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import apache_beam as beam

from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.stats.accumulators import Capacities
from beam_tfrecords.transforms.stats.batch_parts import BatchPart, add_part
from beam_tfrecords.transforms.stats.dataset_stats import DatasetAccumulator, kinds_for_specs
from beam_tfrecords.transforms.stats.statistics_wire import encode_statistics_list

__all__ = ["STATISTICS", "ComputeStatistics", "StatisticsCombineFn", "empty_statistics",
           "split_statistics", "statistics_kinds"]

# The tagged output of the encoding step that carries (split, BatchPart).
STATISTICS = "statistics"


def statistics_kinds(specs: Sequence[FeatureSpec]) -> dict[str, str]:
    """Stored key -> statistics kind: a ``string`` feature's are text statistics (top values,
    lengths), a ``bytes`` feature's -- binary: images, blobs -- sizes and unique counts.

    Args:
        specs: the features, whose ``dtype`` chooses each key's kind.

    Returns:
        Stored key to ``int``, ``float``, ``string`` or ``bytes``.
    """
    return kinds_for_specs(specs, images=[s.name for s in specs if s.dtype == "bytes"])


def split_statistics(split: str, acc: DatasetAccumulator) -> bytes:
    """The serialized ``DatasetFeatureStatisticsList`` of one split (TFDV names a split's
    dataset by the split).

    Args:
        split: the split's name.
        acc: its accumulated statistics.

    Returns:
        The serialized message.
    """
    return encode_statistics_list([acc.result(split)])


def empty_statistics(kinds: Mapping[str, str], splits: Iterable[str]) -> dict[str, bytes]:
    """Per split, the serialized statistics of no Examples: what the commit writes for a
    split no Example reached (every key all missing, ``num_examples`` 0).

    Args:
        kinds: stored key to statistics kind (:func:`statistics_kinds`).
        splits: the splits' names.

    Returns:
        Split to serialized statistics.
    """
    return {split: split_statistics(split, DatasetAccumulator(kinds)) for split in splits}


class StatisticsCombineFn(beam.CombineFn):
    """BatchParts of one split -> its serialized statistics.

    Args:
      kinds: stored key -> statistics kind (``dataset_stats.kinds_for_specs``).
      capacities: the sketches' sizes.
    """

    def __init__(self, kinds: Mapping[str, str], capacities: Capacities = Capacities()
                 ) -> None:
        self._kinds = dict(kinds)
        self._capacities = capacities

    def create_accumulator(self) -> DatasetAccumulator:
        return DatasetAccumulator(self._kinds, self._capacities)

    def add_input(self, acc: DatasetAccumulator, part: BatchPart) -> DatasetAccumulator:
        return add_part(acc, part)

    def merge_accumulators(self, accs: Iterable[DatasetAccumulator]) -> DatasetAccumulator:
        accs = iter(accs)
        first = next(accs)
        for acc in accs:
            first.merge(acc)
        return first

    def compact(self, acc: DatasetAccumulator) -> DatasetAccumulator:
        acc.flush()
        return acc

    def extract_output(self, acc: DatasetAccumulator) -> DatasetAccumulator:
        acc.flush()
        return acc


def _encode(element: tuple[str, DatasetAccumulator]) -> tuple[str, bytes]:
    split, acc = element
    return split, split_statistics(split, acc)


class ComputeStatistics(beam.PTransform):
    """``(split, BatchPart)`` -> ``(split, serialized DatasetFeatureStatisticsList)``, one per
    split that holds an Example (the commit writes the others' from no Examples).

    Args:
      kinds: stored key -> statistics kind (``dataset_stats.kinds_for_specs``).
    """

    def __init__(self, kinds: Mapping[str, str]) -> None:
        super().__init__()
        self._kinds = dict(kinds)

    def expand(self, parts: Any):
        return (parts
                | "Combine" >> beam.CombinePerKey(StatisticsCombineFn(self._kinds))
                | "Encode" >> beam.Map(_encode).with_output_types(tuple[str, bytes]))
