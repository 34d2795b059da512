"""The statistics of one split: its Example count, a :class:`FeatureAccumulator` per stored
key and the image facts of image keys, merged and encoded as one ``DatasetFeatureStatistics``.

Fed per batch by the columnar path (Arrow arrays or ``(values, counts)`` per stored key;
small Arrow batches are gathered per key up to :data:`BUFFER_ROWS` rows first, which holds
that many rows of each non-bytes column a little longer than the batch would live) or
per Example (:meth:`DatasetAccumulator.add_examples` of decoded Examples,
:meth:`DatasetAccumulator.add_serialized` of their bytes: how statistics of a version built
without them are computed). A key no Example holds still gets its statistics (all missing),
so a column that went all-null is visible. What each statistic is, its error and its memory:
:mod:`accumulators`. SequenceExamples are not covered.

Pure: numpy, pyarrow and the standard library.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from beam_tfrecords.transforms.codec import wire
from beam_tfrecords.transforms.codec.feature_spec import FeatureSpec
from beam_tfrecords.transforms.stats.accumulators import (
    Capacities,
    FeatureAccumulator,
    check_column_type,
)

__all__ = ["BUFFER_ROWS", "DatasetAccumulator", "ImageFacts", "kinds_for_specs"]

_LIST_KINDS = {"int64_list": "int", "float_list": "float", "bytes_list": "string"}
# Small batches are gathered per key up to this many rows before their statistics are taken:
# the work per batch is a fixed cost of ~100 numpy calls, 25 ns a row at 4,096 rows.
BUFFER_ROWS = 65536


def kinds_for_specs(specs: Sequence[FeatureSpec], images: Iterable[str] = ()
                    ) -> dict[str, str]:
    """Stored key -> statistics kind for ``specs``.

    Args:
      specs: the features, as the encoders see them.
      images: names of features that hold image bytes (or other binary blobs): those get
        ``bytes_stats`` instead of ``string_stats`` (no top values of megabyte values).

    Returns:
      Every stored key (``<name>/row_lengths_<k>`` of ragged features included) and its kind.
    """
    images = set(images)
    out: dict[str, str] = {}
    for spec in specs:
        if spec.dtype in ("bytes", "string"):
            kind = "bytes" if spec.name in images else "string"
        else:
            kind = "int" if spec.dtype == "int64" else "float"
        out[spec.values_key] = kind
        for dim in spec.ragged_dims:
            out[spec.row_lengths_key(dim)] = "int"
    return out


class ImageFacts:
    """Formats and sizes of the images of one bytes key, from their headers (exact)."""

    def __init__(self) -> None:
        self.formats: dict[str, int] = {}
        self.count = 0
        self.width: tuple[int, int] | None = None  # (min, max)
        self.height: tuple[int, int] | None = None

    def add(self, formats: Sequence[str], heights: Sequence[int], widths: Sequence[int]) -> None:
        """Add images by the format, height and width read from their headers.

        Args:
            formats: each image's format (``jpeg``, ``png``...).
            heights: each image's height in pixels, where known.
            widths: each image's width in pixels, in the same order.
        """
        for fmt in formats:
            self.formats[fmt] = self.formats.get(fmt, 0) + 1
        self.count += len(formats)
        if len(heights):
            h, w = np.asarray(heights, dtype=np.int64), np.asarray(widths, dtype=np.int64)
            self.height = _span(self.height, (int(h.min()), int(h.max())))
            self.width = _span(self.width, (int(w.min()), int(w.max())))

    def merge(self, other: ImageFacts) -> ImageFacts:
        """Add ``other``'s images; returns self.

        Args:
            other: another key's or part's image facts.

        Returns:
            This object.
        """
        for fmt, count in other.formats.items():
            self.formats[fmt] = self.formats.get(fmt, 0) + count
        self.count += other.count
        if other.height is not None:
            self.height = _span(self.height, other.height)
            self.width = _span(self.width, other.width)
        return self

    def custom_stats(self) -> list[dict[str, Any]]:
        """TFDV's image statistics (``image_format_histogram``, ``image_max_width``, ...).

        Returns:
            TFDV ``CustomStatistic`` mappings.
        """
        ranked = sorted(self.formats.items(), key=lambda kv: (-kv[1], kv[0]))
        out: list[dict[str, Any]] = [{"name": "image_format_histogram", "rank_histogram": {
            "buckets": [{"low_rank": i, "high_rank": i, "label": fmt,
                         "sample_count": float(count)} for i, (fmt, count) in
                        enumerate(ranked)]}}]
        if self.height is not None:
            out += [{"name": "image_max_height", "num": float(self.height[1])},
                    {"name": "image_max_width", "num": float(self.width[1])},
                    {"name": "image_min_height", "num": float(self.height[0])},
                    {"name": "image_min_width", "num": float(self.width[0])}]
        return out


def _span(a: tuple[int, int] | None, b: tuple[int, int]) -> tuple[int, int]:
    return b if a is None else (min(a[0], b[0]), max(a[1], b[1]))


class DatasetAccumulator:
    """The statistics of one split: its Example count and an accumulator per stored key.

    Args:
      kinds: stored key -> kind (:func:`kinds_for_specs`); keys met later that are not
        listed (decoded Examples of an older version) get the kind of their list.
      capacities: the sketches' sizes (merged accumulators must share them).
    """

    def __init__(self, kinds: Mapping[str, str] | None = None,
                 capacities: Capacities = Capacities()) -> None:
        self.capacities = capacities
        self.num_examples = 0
        self.kinds = dict(kinds or {})
        self.features: dict[str, FeatureAccumulator] = {}
        self.images: dict[str, ImageFacts] = {}
        self._buffered: dict[str, list[pa.Array]] = {}  # Arrow columns not yet added
        self._buffered_rows: dict[str, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        self.flush()
        return dict(self.__dict__)

    def flush(self) -> None:
        """Add the buffered columns to their accumulators (done before every merge, result
        and pickling, so nobody needs to call it)."""
        for key in list(self._buffered):
            self._flush(key)

    def _flush(self, key: str) -> None:
        arrays = self._buffered.pop(key, [])
        self._buffered_rows.pop(key, None)
        if len(arrays) > 1:
            try:
                arrays = [pa.concat_arrays(arrays)]
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                pass  # differing types (list<int32> then list<int64>): one at a time
        for array in arrays:
            self.features[key].add_arrow(array)

    def feature(self, key: str) -> FeatureAccumulator:
        """The accumulator of ``key``, made on first use.

        Args:
            key: a stored Example key.

        Returns:
            The key's accumulator.

        Raises:
            KeyError: no statistics kind is known for the key.
        """
        acc = self.features.get(key)
        if acc is None:
            if key not in self.kinds:
                raise KeyError(f"no statistics kind for feature {key!r}; known: "
                               f"{sorted(self.kinds)}")
            acc = self.features[key] = FeatureAccumulator(self.kinds[key], self.capacities)
        return acc

    def add_batch(self, num_rows: int, columns: Mapping[str, Any]) -> None:
        """Add a batch of ``num_rows`` Examples.

        Args:
          num_rows: the Examples in the batch (rows without a key count as missing it).
          columns: stored key -> an Arrow array with a row per Example (null: missing), or
            ``(values, counts)`` of the rows holding the key (:meth:`FeatureAccumulator.add`).
        """
        self.num_examples += num_rows
        for key, column in columns.items():
            acc = self.feature(key)
            if isinstance(column, tuple):
                acc.add(*column)
                continue
            if len(column) != num_rows:
                raise ValueError(f"feature {key!r}: {len(column)} rows in a batch of "
                                 f"{num_rows}")
            check_column_type(column.type)  # a mistake shows here, not at a later flush
            if acc.kind == "bytes" or num_rows >= BUFFER_ROWS:  # large values, large batch
                acc.add_arrow(column)
                continue
            chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
            self._buffered.setdefault(key, []).extend(chunks)
            self._buffered_rows[key] = self._buffered_rows.get(key, 0) + num_rows
            if self._buffered_rows[key] >= BUFFER_ROWS:
                self._flush(key)

    def add_examples(self, examples: Iterable[Mapping[str, tuple[str | None, list]]]) -> None:
        """Add decoded Examples (``wire.decode_example``: key -> (list kind, values)).

        Args:
            examples: decoded Examples; a key not seen before takes its kind from its list kind.
        """
        rows: dict[str, list[Any]] = {}
        n = 0
        for example in examples:
            n += 1
            for key, (list_kind, values) in example.items():
                if key not in self.kinds:
                    self.kinds[key] = _LIST_KINDS.get(list_kind, "string")
                rows.setdefault(key, []).append(values)
        self.num_examples += n
        for key, values in rows.items():
            self.feature(key).add_python(values)

    def add_serialized(self, records: Iterable[bytes]) -> None:
        """Add serialized Examples (decoded here, one at a time: the slow, general way in).

        Args:
            records: serialized Examples.
        """
        self.add_examples(wire.decode_example(record) for record in records)

    def add_image_facts(self, key: str, formats: Sequence[str], heights: Sequence[int],
                        widths: Sequence[int]) -> None:
        """Add the header facts of the images stored under bytes ``key``.

        Args:
            key: the bytes key the images are stored under.
            formats: each image's format.
            heights: each image's height in pixels.
            widths: each image's width in pixels.
        """
        self.images.setdefault(key, ImageFacts()).add(formats, heights, widths)

    def merge(self, other: DatasetAccumulator) -> DatasetAccumulator:
        """Add ``other``'s Examples and statistics; returns self.

        Args:
            other: another part of the same split.

        Returns:
            This accumulator.

        Raises:
            ValueError: a key has different kinds in the two parts.
        """
        self.flush()
        other.flush()
        self.num_examples += other.num_examples
        for key, kind in other.kinds.items():
            if self.kinds.setdefault(key, kind) != kind:
                raise ValueError(f"feature {key!r} is {kind} in one part and "
                                 f"{self.kinds[key]} in another")
        for key, acc in other.features.items():
            mine = self.features.get(key)
            self.features[key] = acc if mine is None else mine.merge(acc)
        for key, facts in other.images.items():
            mine = self.images.get(key)
            self.images[key] = facts if mine is None else mine.merge(facts)
        return self

    def result(self, name: str) -> dict[str, Any]:
        """``DatasetFeatureStatistics`` named ``name`` (e.g. the split) as a mapping: every
        known key, sorted, including keys no Example held.

        Args:
            name: the statistics' name, the split's.

        Returns:
            The mapping.
        """
        self.flush()
        features = []
        for key in sorted(self.kinds):
            acc = self.features.get(key) or FeatureAccumulator(self.kinds[key], self.capacities)
            stats = acc.result(key, self.num_examples)
            if key in self.images:
                stats["custom_stats"] = stats["custom_stats"] + self.images[key].custom_stats()
            features.append(stats)
        return {"name": name, "num_examples": self.num_examples, "features": features}
