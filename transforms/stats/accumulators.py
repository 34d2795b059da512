"""Per-feature statistics of the stored Examples, as mergeable accumulators.

One :class:`FeatureAccumulator` per stored key (a ragged feature's ``/flat_values`` and each
``/row_lengths_<k>`` are keys of their own, as TFDV sees them in the Examples), held with the
split's Example count by a :class:`dataset_stats.DatasetAccumulator`. It is fed columns --
the flat values of a batch and the number of values of each row that has the key -- from
numpy or Arrow (:meth:`FeatureAccumulator.add_arrow`), or Python values on the per-row path
(:meth:`FeatureAccumulator.add_python`); accumulators merge in any grouping and order (a
Beam ``CombineFn``'s ``merge_accumulators``) and pickle small. The values are the ones
stored, after the encoder's coercion: floats as float32, dates and scaled decimals as the
int64 written, strings as their UTF-8 bytes, defaults where the policy stored one.

What each statistic is (the fields of tensorflow_metadata's ``FeatureNameStatistics``):

* every key (``common_stats``): Examples with the key (``num_non_missing``; an empty list
  counts) and without (``num_missing``, from the split's Example count), the fewest, most,
  average and total number of values per Example, and a QUANTILES histogram of the number
  of values (10 buckets). Exact counts; the histogram from an :class:`OrderSketch`, exact
  while at most 256 distinct list lengths occur.
* int64 and float keys (``num_stats``, type INT / FLOAT): exact min, max, number of zeros
  and of NaNs; mean and population standard deviation from exact sums
  (:mod:`exact_moments`: correctly rounded, the same double for any merge order); median,
  a QUANTILES histogram (10 buckets of equal count) and a STANDARD histogram (10 buckets
  of equal width over [min, max]) from an :class:`OrderSketch` of capacity 1024 (exact up
  to 1024 distinct values, then a rank/value error bounded per bucket: see
  :mod:`order_sketch`). NaN is counted (``num_nan``) and left out of every other number;
  infinities count in min, max, the median and the histograms' end buckets, and make the
  mean infinite (or NaN with both signs) and the standard deviation NaN. (TFDV's differ
  there: its running mean turns NaN once two batches are merged, and its standard
  deviation is ``sqrt(max(0, NaN))``, i.e. 0, which would claim a constant feature.)
* string keys (``string_stats``, type STRING): the number of distinct values
  (:mod:`distinct`: exact up to 2048, then HyperLogLog with 0.81% standard error), the top
  20 values and a rank histogram of the 256 most frequent (:mod:`top_values`: exact up to 256
  distinct values, ties by value bytes, the larger first; beyond, Misra-Gries lower bounds
  that may depend on the split into bundles), the average length in bytes (exact) and the
  number of values that are not UTF-8 (exact). As in TFDV, a top value that is not UTF-8 is
  labelled ``__BYTES_VALUE__``; unlike TFDV, which shows the whole value, one longer than 64
  bytes is labelled by its first 32 bytes.
* bytes keys holding images or other binary data (``bytes_stats``, type BYTES): distinct
  values as above, average, smallest and largest size in bytes (exact); with
  :meth:`DatasetAccumulator.add_image_facts`, TFDV-like ``custom_stats`` of the format,
  width and height the readers already take from each image's header (exact).

Each key also gets ``custom_stats`` saying which sketched fields are exact for this data
(``btf:quantiles_exact``, ``btf:unique_exact``, ``btf:top_values_exact``: 1 or 0).

Determinism: every field is a function of the multiset of stored values (the same bytes on
every runner and for any bundling), except the top values and rank histogram of a key with
more than 256 distinct values (marked ``btf:top_values_exact = 0``).

Memory per key (the bound that matters for a wide config): 4 KiB for the number-of-values
sketch and a few hundred bytes of counters, plus 16 KiB for a number key's sketch, or for a
string key up to 16 KiB of distinct-value state and about 50 KiB of top-value counters
(256 keys of at most 65 bytes): below 72 KiB per key -- 72 MB for a config of 1,000 string
features, 21 MB for 1,000 number features. Measured, pickled, with every sketch full: 15 KB
for a number key, 35 KB for a string key. Adding a batch needs, briefly, a few times its
own size more.

Pure: numpy, pyarrow and the standard library.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_tfrecords.transforms.codec.arrow_columns import binary_layout, decoded
from beam_tfrecords.transforms.stats.distinct import (
    DEFAULT_EXACT_CAPACITY,
    DEFAULT_PRECISION,
    DistinctSketch,
    hash_values,
)
from beam_tfrecords.transforms.stats.exact_moments import ExactMoments
from beam_tfrecords.transforms.stats.order_sketch import DEFAULT_CAPACITY as ORDER_CAPACITY
from beam_tfrecords.transforms.stats.order_sketch import OrderSketch, quantile_rank
from beam_tfrecords.transforms.stats.top_values import DEFAULT_CAPACITY as TOP_CAPACITY
from beam_tfrecords.transforms.stats.top_values import (
    TopValues,
    key_is_utf8,
    key_label,
    value_key,
)

__all__ = ["KINDS", "Capacities", "FeatureAccumulator", "check_column_type"]

# Our statistics kinds -> tensorflow_metadata's FeatureNameStatistics.Type.
KINDS = {"int": "INT", "float": "FLOAT", "string": "STRING", "bytes": "BYTES"}
HISTOGRAM_BUCKETS = 10
TOP_VALUES = 20
NUM_VALUES_CAPACITY = 256


# TFDV's label of a top value that is not UTF-8 (tensorflow_data_validation's
# constants.NON_UTF8_PLACEHOLDER): statistics hold strings, and an escaped form could equal
# a real value.
NON_UTF8_LABEL = "__BYTES_VALUE__"


def _label(key: bytes) -> str:
    """A top value as TFDV shows it: UTF-8 as is, any other bytes as :data:`NON_UTF8_LABEL`;
    a long value (:mod:`top_values` keeps its first bytes) as that preview, cut before a
    character it splits."""
    if not key_is_utf8(key):
        return NON_UTF8_LABEL
    preview, _ = key_label(key)
    for end in range(len(preview), max(len(preview) - 4, -1), -1):
        try:
            return preview[:end].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return NON_UTF8_LABEL


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def check_column_type(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` holds a list per row (else one value per row); raises
    ValueError for lists of lists (a stored Example feature is one flat list).

    Args:
        t: the column's Arrow type.

    Returns:
        True for a list column.

    Raises:
        ValueError: a list of lists.
    """
    if not _is_list(t):
        return False
    inner = t.value_type
    if pa.types.is_dictionary(inner):
        inner = inner.value_type
    if _is_list(inner):
        raise ValueError(f"statistics take one list level per stored key; got {t} (a stored "
                         "Example feature is a flat list)")
    return True


@dataclasses.dataclass(frozen=True)
class Capacities:
    """The sketches' sizes (the defaults are the ones the module docstring states).

    Attributes:
      quantiles: buckets of a number key's :class:`OrderSketch`.
      num_values: buckets of the number-of-values :class:`OrderSketch`.
      exact_distinct: distinct values counted exactly before HyperLogLog takes over.
      precision: HyperLogLog precision (``2**precision`` registers).
      top_values: counters of :class:`TopValues`.
    """

    quantiles: int = ORDER_CAPACITY
    num_values: int = NUM_VALUES_CAPACITY
    exact_distinct: int = DEFAULT_EXACT_CAPACITY
    precision: int = DEFAULT_PRECISION
    top_values: int = TOP_CAPACITY


class FeatureAccumulator:
    """Statistics of one stored key; see the module docstring.

    Args:
        kind: ``int``, ``float``, ``string`` or ``bytes``: which statistics TFDV keeps for the key.
        capacities: the sketches' sizes.

    Raises:
        ValueError: an unknown kind.
    """

    def __init__(self, kind: str, capacities: Capacities = Capacities()) -> None:
        if kind not in KINDS:
            raise ValueError(f"statistics kind {kind!r} is not one of {sorted(KINDS)}")
        self.kind = kind
        self.present = 0  # Examples holding the key
        self.total_values = 0
        self.num_values = OrderSketch("int", capacities.num_values)
        if kind in ("int", "float"):
            self.order = OrderSketch("int" if kind == "int" else "float", capacities.quantiles)
            self.moments = ExactMoments(kind)
            self.zeros = 0
            self.nan = 0
            self.pos_inf = 0
            self.neg_inf = 0
        else:
            self.distinct = DistinctSketch(capacities.precision, capacities.exact_distinct)
            self.top = TopValues(capacities.top_values) if kind == "string" else None
            self.total_bytes = 0
            self.min_bytes: int | None = None
            self.max_bytes: int | None = None
            self.invalid_utf8 = 0

    # -- feeding ----------------------------------------------------------------------------

    def add(self, values: Any, counts: np.ndarray | None = None) -> None:
        """Add the values of a batch's rows that hold this key.

        Args:
          values: the flat values of those rows in row order: numbers as a numpy array
            (or anything ``np.asarray`` takes), bytes as an Arrow binary/string array or a
            list of bytes/str.
          counts: how many of ``values`` each such row holds (0 for an empty list); None:
            one value per row (a scalar feature).
        """
        if self.kind in ("int", "float"):
            values = np.asarray(values, dtype=np.int64 if self.kind == "int" else np.float32)
            size = values.size
        else:
            if not isinstance(values, (pa.Array, pa.ChunkedArray)):
                values = pa.array([v.encode("utf-8") if isinstance(v, str) else v
                                   for v in values], pa.binary())
            size = len(values)
        if counts is None:
            self.present += size
            self.num_values.add_repeated(1, size)
        else:
            counts = np.asarray(counts, dtype=np.int64)
            if int(counts.sum()) != size:
                raise ValueError(f"the row counts add up to {int(counts.sum())} values, "
                                 f"but {size} were given")
            self.present += counts.size
            self.num_values.add(counts)
        self.total_values += size
        if not size:
            return
        if self.kind in ("int", "float"):
            self._add_numbers(values)
        else:
            self._add_bytes(values)

    def add_arrow(self, array: pa.Array | pa.ChunkedArray) -> None:
        """Add a column of one value per row (a scalar) or of one list per row; a null row
        does not hold the key (it is missing), an empty list does.

        Args:
            array: the key's column over a batch of Examples.
        """
        if isinstance(array, pa.ChunkedArray):
            for chunk in array.chunks:
                self.add_arrow(chunk)
            return
        array = decoded(array)
        if check_column_type(array.type):
            lengths = pc.list_value_length(array).drop_null()
            values = decoded(array.flatten())
            counts = lengths.to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            values, counts = array.drop_null(), None
        if values.null_count:
            raise ValueError("a null inside a list cannot be stored in an Example")
        if self.kind in ("int", "float"):
            if pa.types.is_boolean(values.type):
                values = values.cast(pa.int64())
            self.add(values.to_numpy(zero_copy_only=False), counts)
        else:
            self.add(values, counts)

    def add_python(self, rows: Iterable[Any]) -> None:
        """Add rows of Python values: None (missing), a scalar, or a list of values.

        Args:
            rows: one entry per Example.
        """
        flat: list[Any] = []
        counts: list[int] = []
        for row in rows:
            if row is None:
                continue
            if isinstance(row, (list, tuple, np.ndarray)):
                flat.extend(row)
                counts.append(len(row))
            else:
                flat.append(row)
                counts.append(1)
        if self.kind in ("int", "float"):
            dtype = np.int64 if self.kind == "int" else np.float32
            self.add(np.asarray(flat, dtype=dtype), np.asarray(counts, dtype=np.int64))
        else:
            self.add(flat, np.asarray(counts, dtype=np.int64))

    def _add_numbers(self, values: np.ndarray) -> None:
        self.zeros += int(np.count_nonzero(values == 0))
        if self.kind == "float":
            finite = np.isfinite(values)
            if not finite.all():
                nan = np.isnan(values)
                self.nan += int(np.count_nonzero(nan))
                self.pos_inf += int(np.count_nonzero(values == np.inf))
                self.neg_inf += int(np.count_nonzero(values == -np.inf))
                values = values[finite]
        self.order.add(values)
        self.moments.add(values)

    def _add_bytes(self, values: pa.Array | pa.ChunkedArray) -> None:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        values = decoded(values)
        t = values.type
        if pa.types.is_large_string(t):
            values = values.cast(pa.large_binary())
        elif not (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
            values = values.cast(pa.binary())  # string, fixed_size_binary
        _, _, lens = binary_layout(values, None)
        self.total_bytes += int(lens.sum())
        low, high = int(lens.min()), int(lens.max())
        self.min_bytes = low if self.min_bytes is None else min(self.min_bytes, low)
        self.max_bytes = high if self.max_bytes is None else max(self.max_bytes, high)
        counted = pc.value_counts(values)  # distinct values and their counts, at C speed
        distinct = counted.field("values")
        counts = counted.field("counts").to_numpy()
        data, starts, lens = binary_layout(distinct, None)
        self.distinct.add_hashes(hash_values(data, starts, lens))
        if self.kind == "string":
            self.invalid_utf8 += self._invalid_utf8(distinct, counts)
            # Only the values that can survive this batch's own Misra-Gries cut reach Python
            # (all of them while the batch has at most ``capacity`` distinct values).
            keep, cut = self.top.batch_cut(counts)
            kept = distinct if keep is None else distinct.filter(pa.array(keep))
            kept_counts = counts if keep is None else counts[keep] - cut
            self.top.add_counts([value_key(v) for v in kept.to_pylist()],
                                kept_counts.tolist(), dropped=int(counts.sum() -
                                                                  kept_counts.sum()))

    @staticmethod
    def _invalid_utf8(distinct: pa.Array, counts: np.ndarray) -> int:
        try:
            distinct.cast(pa.large_string())  # validates every value at C speed
            return 0
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        bad = 0
        for value, count in zip(distinct.to_pylist(), counts.tolist()):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                bad += count
        return bad

    # -- merging ----------------------------------------------------------------------------

    def merge(self, other: FeatureAccumulator) -> FeatureAccumulator:
        """Add everything ``other`` holds; returns self.

        Args:
            other: an accumulator of the same kind.

        Returns:
            This accumulator.

        Raises:
            ValueError: the kinds differ.
        """
        if other.kind != self.kind:
            raise ValueError(f"cannot merge {other.kind} statistics into {self.kind} ones")
        self.present += other.present
        self.total_values += other.total_values
        self.num_values.merge(other.num_values)
        if self.kind in ("int", "float"):
            self.order.merge(other.order)
            self.moments.merge(other.moments)
            for name in ("zeros", "nan", "pos_inf", "neg_inf"):
                setattr(self, name, getattr(self, name) + getattr(other, name))
        else:
            self.distinct.merge(other.distinct)
            if self.top is not None:
                self.top.merge(other.top)
            self.total_bytes += other.total_bytes
            self.invalid_utf8 += other.invalid_utf8
            for name, pick in (("min_bytes", min), ("max_bytes", max)):
                mine, theirs = getattr(self, name), getattr(other, name)
                setattr(self, name, theirs if mine is None else (
                    mine if theirs is None else pick(mine, theirs)))
        return self

    # -- results ----------------------------------------------------------------------------

    def common(self, num_examples: int) -> dict[str, Any]:
        """``CommonStatistics`` as a mapping (see :mod:`statistics_wire`).

        Args:
            num_examples: the Examples in the split, present or not.

        Returns:
            The mapping.
        """
        out: dict[str, Any] = {"num_non_missing": self.present,
                               "num_missing": max(num_examples - self.present, 0),
                               "tot_num_values": self.total_values}
        if self.present:
            nv = self.num_values
            out.update(min_num_values=int(nv.min_value()), max_num_values=int(nv.max_value()),
                       avg_num_values=self.total_values / self.present,
                       num_values_histogram=_quantiles_histogram(nv, 0, 0))
        return out

    def result(self, name: str, num_examples: int) -> dict[str, Any]:
        """``FeatureNameStatistics`` of this key named ``name``, for a split of
        ``num_examples`` Examples, as a mapping (see :mod:`statistics_wire`).

        Args:
            name: the stored key.
            num_examples: the Examples in the split.

        Returns:
            The mapping.
        """
        common = self.common(num_examples)
        out: dict[str, Any] = {"path": {"step": [name]}, "type": KINDS[self.kind]}
        custom = []
        if self.kind in ("int", "float"):
            out["num_stats"] = self._numeric(common)
            custom.append(("btf:quantiles_exact", self.order.exact()))
        elif self.kind == "string":
            out["string_stats"] = self._strings(common)
            custom.append(("btf:unique_exact", self.distinct.exact()))
            custom.append(("btf:top_values_exact", self.top.exact()))
        else:
            out["bytes_stats"] = self._bytes(common)
            custom.append(("btf:unique_exact", self.distinct.exact()))
        out["custom_stats"] = [{"name": key, "num": 1.0 if flag else 0.0}
                               for key, flag in custom]
        return out

    def _numeric(self, common: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"common_stats": common, "num_zeros": self.zeros}
        finite = self.order.count
        ordered = self.neg_inf + finite + self.pos_inf
        if ordered:
            if self.neg_inf:
                out["min"] = -math.inf
            else:
                out["min"] = self.order.min_value() if finite else math.inf
            if self.pos_inf:
                out["max"] = math.inf
            else:
                out["max"] = self.order.max_value() if finite else -math.inf
            out["median"] = self._value_at(quantile_rank(0.5, ordered))
            out["mean"], out["std_dev"] = self._moments()
        histograms = []
        if ordered or self.nan:
            histograms.append(self._standard_histogram())
            histograms.append(_quantiles_histogram(self.order, self.neg_inf, self.pos_inf,
                                                   self.nan))
        out["histograms"] = histograms
        return out

    def _moments(self) -> tuple[float, float]:
        if self.pos_inf or self.neg_inf:
            mean = math.nan if self.pos_inf and self.neg_inf else (
                math.inf if self.pos_inf else -math.inf)
            return mean, math.nan
        return self.moments.mean(), self.moments.std_dev()

    def _value_at(self, rank: int) -> float:
        if rank < self.neg_inf:
            return -math.inf
        rank -= self.neg_inf
        if rank >= self.order.count:
            return math.inf
        return self.order.value_at_rank(rank)

    def _standard_histogram(self) -> dict[str, Any]:
        buckets = []
        if self.order.count:
            low, high = self.order.min_value(), self.order.max_value()
            counts = self.order.equal_width(low, high, HISTOGRAM_BUCKETS)
            width = (high - low) / HISTOGRAM_BUCKETS
            for b, count in enumerate(counts):
                edge_hi = high if b == HISTOGRAM_BUCKETS - 1 else low + (b + 1) * width
                buckets.append({"low_value": low + b * width, "high_value": edge_hi,
                                "sample_count": float(count)})
            if low == high:  # one value: one bucket holds it
                buckets = [{"low_value": low, "high_value": high,
                            "sample_count": float(self.order.count)}]
        if self.neg_inf:
            if buckets:
                buckets[0]["low_value"] = -math.inf
                buckets[0]["sample_count"] += self.neg_inf
            else:
                buckets.append({"low_value": -math.inf, "high_value": -math.inf,
                                "sample_count": float(self.neg_inf)})
        if self.pos_inf:
            if buckets and buckets[-1]["high_value"] != -math.inf:
                buckets[-1]["high_value"] = math.inf
                buckets[-1]["sample_count"] += self.pos_inf
            else:
                buckets.append({"low_value": math.inf, "high_value": math.inf,
                                "sample_count": float(self.pos_inf)})
        return {"num_nan": self.nan, "buckets": buckets, "type": "STANDARD"}

    def _strings(self, common: dict[str, Any]) -> dict[str, Any]:
        ranked = self.top.ranked(self.top.capacity)
        labels = [(_label(key), count) for key, count in ranked]
        out: dict[str, Any] = {
            "common_stats": common,
            "unique": self.distinct.count(),
            "top_values": [{"value": label, "frequency": float(count)}
                           for label, count in labels[:TOP_VALUES]],
            "rank_histogram": {"buckets": [
                {"low_rank": rank, "high_rank": rank, "label": label,
                 "sample_count": float(count)}
                for rank, (label, count) in enumerate(labels)]},
            "invalid_utf8_count": self.invalid_utf8,
        }
        if self.total_values:
            out["avg_length"] = self.total_bytes / self.total_values
        return out

    def _bytes(self, common: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"common_stats": common, "unique": self.distinct.count()}
        if self.total_values:
            out.update(avg_num_bytes=self.total_bytes / self.total_values,
                       min_num_bytes=float(self.min_bytes), max_num_bytes=float(self.max_bytes),
                       max_num_bytes_int=self.max_bytes)
        return out


def _quantiles_histogram(sketch: OrderSketch, neg_inf: int, pos_inf: int, nan: int = 0
                         ) -> dict[str, Any]:
    """TFDV's QUANTILES histogram: bucket edges at the i/10 quantiles, equal counts."""
    n = neg_inf + sketch.count + pos_inf
    buckets = []
    if n:
        def at(rank: int) -> float:
            if rank < neg_inf:
                return -math.inf
            if rank - neg_inf >= sketch.count:
                return math.inf
            return sketch.value_at_rank(rank - neg_inf)

        edges = [at(quantile_rank(i / HISTOGRAM_BUCKETS, n)) for i in
                 range(HISTOGRAM_BUCKETS + 1)]
        buckets = [{"low_value": edges[i], "high_value": edges[i + 1],
                    "sample_count": n / HISTOGRAM_BUCKETS} for i in range(HISTOGRAM_BUCKETS)]
    return {"num_nan": nan, "buckets": buckets, "type": "QUANTILES"}
