"""The drift gate's comparison: a version's statistics against the previous version's.

A scheduled rebuild compares what it wrote with what the version ``LATEST`` names, split by
split, and reports each difference past its threshold as an :class:`Anomaly`:

* ``count``: a split's record count changed by more than ``max_count_change`` (relative);
  a split added or gone;
* ``missing``: a feature's fraction of Examples without it changed by more than
  ``max_missing_change`` (absolute: a column that went all-null moves it by up to 1);
* ``schema``: a feature added, removed or retyped (``FeatureNameStatistics.type``);
* ``linf``: the L-infinity distance between a categorical (string) feature's value
  distributions -- the largest change of any value's share -- over ``max_linf`` (TFDV's
  comparator for categorical drift), from the rank histograms (the 256 most frequent values;
  the rest is one "other" share);
* ``new_values`` / ``vanished_values``: the share of a categorical feature's values that
  belong to values the other version never held, over ``max_new_values`` (only where both
  versions' top values are exact, ``btf:top_values_exact``);
* ``jsd``: the Jensen-Shannon divergence (base 2, 0 to 1) between a numeric feature's value
  distributions over ``max_jsd`` (TFDV's comparator for numeric drift): both versions'
  equal-width histograms spread over one common grid of :data:`GRID` buckets, each bucket's
  count uniformly across its range, NaN a bucket of its own;
* ``rejects`` / ``unread``: the rejected share of records read, or the unread share of the
  input bytes, grew by more than ``max_reject_increase`` / ``max_unread_increase``;
* ``duplicates`` / ``leaks``: the share of records written that are duplicates within their
  split, or that are also in another split (the manifest's ``duplicates``), grew by more
  than ``max_duplicate_increase`` / ``max_leak_increase`` (only where both versions
  counted them).

The defaults let a rebuild on a fresh sample of the same distribution pass (thousands of
records: sampling noise moves shares by about a percent and JSD by thousandths) and catch a
third of the rows gone, a column gone null, or a category's share moved by ten points.
Features named in ``ignore`` (ids, timestamps: they drift by design) are left out of the
per-feature checks. Each anomaly's ``severity`` is its value over its threshold; the worst
come first.

Pure: the standard library only; statistics as :mod:`statistics_wire` decodes them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["GRID", "Anomaly", "Thresholds", "compare", "document", "jensen_shannon",
           "one_line"]

GRID = 20  # buckets of the common grid numeric distributions are compared on


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """The drift gate's thresholds (the config's ``validate:`` section).

    Attributes:
      max_count_change: a split's record count may change by this share of the previous.
      max_missing_change: a feature's missing fraction may move by this much.
      max_linf: largest L-infinity distance of a categorical feature's value shares.
      max_jsd: largest Jensen-Shannon divergence (base 2) of a numeric feature.
      max_new_values: share of a categorical feature's values held by values new to (or
        vanished from) this version.
      max_reject_increase: the rejected share of records read may grow by this much.
      max_unread_increase: the unread share of the input bytes may grow by this much.
      max_duplicate_increase: the share of records written that duplicate another of their
        split may grow by this much.
      max_leak_increase: the share of records written that are also in another split may
        grow by this much.
      schema_changes: whether features added, removed or retyped pass.
      ignore: features left out of the per-feature checks.
    """

    max_count_change: float = 0.2
    max_missing_change: float = 0.1
    max_linf: float = 0.1
    max_jsd: float = 0.1
    max_new_values: float = 0.01
    max_reject_increase: float = 0.01
    max_unread_increase: float = 0.01
    # Looser than the rejects': records of few distinct values repeat more as a source grows
    # (from 5,000 to 6,000 rows of 10,000 possible records the duplicate share rises from
    # 21% to 25%), which a rebuild must pass.
    max_duplicate_increase: float = 0.05
    max_leak_increase: float = 0.05
    schema_changes: bool = False
    ignore: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Anomaly:
    """One difference past its threshold."""

    kind: str
    split: str
    feature: str
    value: float
    threshold: float
    message: str

    @property
    def severity(self) -> float:
        """How far past the threshold: value / threshold (infinite for a zero threshold)."""
        if self.threshold <= 0:
            return math.inf
        return abs(self.value) / self.threshold

    def as_dict(self) -> dict[str, Any]:
        """The anomaly as an ``anomalies.json`` entry; non-finite numbers become null, which JSON
        can hold.

        Returns:
            A JSON-ready dict.
        """
        severity = self.severity
        return {"kind": self.kind, "split": self.split, "feature": self.feature,
                "value": self.value if math.isfinite(self.value) else None,
                "threshold": self.threshold,
                "severity": None if math.isinf(severity) else severity,
                "message": self.message}


def _features(dataset: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    out = {}
    for feature in dataset.get("features", []):
        name = feature.get("name") or "/".join(feature.get("path", {}).get("step", []))
        out[name] = feature
    return out


def _stats(feature: Mapping[str, Any]) -> Mapping[str, Any]:
    for key in ("num_stats", "string_stats", "bytes_stats", "struct_stats"):
        if key in feature:
            return feature[key]
    return {}


def _custom(feature: Mapping[str, Any], name: str) -> float | None:
    for item in feature.get("custom_stats", []):
        if item.get("name") == name:
            return item.get("num", 0.0)
    return None


def _missing_fraction(feature: Mapping[str, Any], examples: int) -> float:
    if not examples:
        return 0.0
    return _stats(feature).get("common_stats", {}).get("num_missing", 0) / examples


def _shares(feature: Mapping[str, Any]) -> dict[str, float] | None:
    """A categorical feature's value shares (of all its values), from its rank histogram;
    None without values."""
    stats = feature.get("string_stats")
    if stats is None:
        return None
    total = stats.get("common_stats", {}).get("tot_num_values", 0)
    if not total:
        return None
    return {b.get("label", ""): b.get("sample_count", 0.0) / total
            for b in stats.get("rank_histogram", {}).get("buckets", [])}


def _standard(feature: Mapping[str, Any]) -> tuple[list[dict], float] | None:
    """A numeric feature's equal-width buckets and NaN count; None without values."""
    stats = feature.get("num_stats")
    if stats is None:
        return None
    for histogram in stats.get("histograms", []):
        if histogram.get("type", "STANDARD") == "STANDARD":
            buckets = histogram.get("buckets", [])
            nan = float(histogram.get("num_nan", 0))
            if buckets or nan:
                return buckets, nan
    return None


def _on_grid(buckets: Sequence[Mapping[str, Any]], nan: float, low: float, high: float
             ) -> list[float]:
    """Counts on :data:`GRID` equal buckets of [low, high] (+ a NaN bucket), each source
    bucket's count spread uniformly over its range (all of it where the range is a point)."""
    grid = [0.0] * (GRID + 1)
    width = (high - low) / GRID

    def index(x: float) -> int:
        if width <= 0 or not math.isfinite(x):
            return 0 if x <= low else GRID - 1
        return min(max(int((x - low) / width), 0), GRID - 1)

    for bucket in buckets:
        a, b = bucket.get("low_value", 0.0), bucket.get("high_value", 0.0)
        count = bucket.get("sample_count", 0.0)
        if not (math.isfinite(a) and math.isfinite(b)) or b <= a or width <= 0:
            grid[index(a if math.isfinite(a) else b)] += count
            continue
        first, last = index(a), index(b)
        for i in range(first, last + 1):
            lo, hi = max(a, low + i * width), min(b, low + (i + 1) * width)
            if i == last:
                hi = b
            if i == first:
                lo = a
            grid[i] += count * max(hi - lo, 0.0) / (b - a)
    grid[GRID] = nan
    return grid


def jensen_shannon(p: Sequence[float], q: Sequence[float]) -> float:
    """Jensen-Shannon divergence (base 2) of two count vectors over the same buckets: 0 for
    the same shares, 1 for disjoint ones.

    Args:
        p: counts per bucket in one version.
        q: counts per bucket in the other, same buckets.

    Returns:
        The divergence, 0 to 1.
    """
    sp, sq = math.fsum(p), math.fsum(q)
    if not sp or not sq:
        return 0.0 if sp == sq else 1.0
    total = 0.0
    for a, b in zip(p, q):
        a, b = a / sp, b / sq
        m = (a + b) / 2
        if a:
            total += a * math.log2(a / m) / 2
        if b:
            total += b * math.log2(b / m) / 2
    return min(max(total, 0.0), 1.0)


def _range(histograms: Iterable[tuple[list[dict], float]]) -> tuple[float, float]:
    edges = [x for buckets, _ in histograms for b in buckets
             for x in (b.get("low_value", 0.0), b.get("high_value", 0.0)) if math.isfinite(x)]
    return (min(edges), max(edges)) if edges else (0.0, 0.0)


def _numeric_jsd(previous: Mapping[str, Any], current: Mapping[str, Any]) -> float | None:
    a, b = _standard(previous), _standard(current)
    if a is None or b is None:
        return None
    low, high = _range((a, b))
    return jensen_shannon(_on_grid(*a, low, high), _on_grid(*b, low, high))


def _share_of(counts: Mapping[str, int], key: str, total_key: str) -> float:
    total = counts.get(total_key) or 0
    return counts.get(key, 0) / total if total else 0.0


def compare(previous: Mapping[str, Mapping[str, Any]], current: Mapping[str, Mapping[str, Any]],
            thresholds: Thresholds = Thresholds(),
            previous_counts: Mapping[str, Any] | None = None,
            current_counts: Mapping[str, Any] | None = None) -> list[Anomaly]:
    """Every anomaly of ``current`` against ``previous``, the worst first.

    Args:
      previous: split -> the previous version's ``DatasetFeatureStatistics`` (decoded).
      current: split -> this version's.
      thresholds: the gate's thresholds.
      previous_counts: the previous manifest's ``counts`` plus ``input_bytes`` (the input's
        size), for the reject and unread checks; None skips them.
      current_counts: this version's, likewise.

    Returns:
      The anomalies, by severity (worst first), then split, feature and kind.
    """
    t = thresholds
    found: list[Anomaly] = []
    for split in sorted(set(previous) | set(current)):
        if split not in current or split not in previous:
            where = "gone" if split not in current else "new"
            found.append(Anomaly("count", split, "", 1.0, t.max_count_change,
                                 f"split {split} is {where}"))
            continue
        before, after = previous[split], current[split]
        n0, n1 = before.get("num_examples", 0), after.get("num_examples", 0)
        change = (n1 - n0) / n0 if n0 else (0.0 if not n1 else math.inf)
        if abs(change) > t.max_count_change:
            found.append(Anomaly("count", split, "", change, t.max_count_change,
                                 f"{split}: {n0} -> {n1} records ({change:+.1%})"))
        found += _features_drift(split, _features(before), _features(after), n0, n1, t)
    if previous_counts is not None and current_counts is not None:
        for kind, key, total, limit in (("rejects", "rejected", "read", t.max_reject_increase),
                                        ("unread", "unread_bytes", "input_bytes",
                                         t.max_unread_increase)):
            a = _share_of(previous_counts, key, total)
            b = _share_of(current_counts, key, total)
            if b - a > limit:
                found.append(Anomaly(kind, "", "", b - a, limit,
                                     f"{key.replace('_', ' ')}: {a:.2%} -> {b:.2%} of "
                                     f"{total.replace('_', ' ')}"))
        for kind, key, limit in (("duplicates", "duplicates", t.max_duplicate_increase),
                                 ("leaks", "leaked", t.max_leak_increase)):
            if key not in previous_counts or key not in current_counts:
                continue  # a version built without the count
            a = _share_of(previous_counts, key, "written")
            b = _share_of(current_counts, key, "written")
            if b - a > limit:
                found.append(Anomaly(kind, "", "", b - a, limit,
                                     f"{key} records: {a:.2%} -> {b:.2%} of those written"))
    return sorted(found, key=lambda a: (-a.severity, a.split, a.feature, a.kind))


def _features_drift(split: str, before: Mapping[str, Mapping[str, Any]],
                    after: Mapping[str, Mapping[str, Any]], n0: int, n1: int,
                    t: Thresholds) -> list[Anomaly]:
    found = []
    for name in sorted(set(before) | set(after)):
        if name in t.ignore:
            continue
        if name not in after or name not in before:
            if not t.schema_changes:
                what = "removed" if name not in after else "added"
                found.append(Anomaly("schema", split, name, 1.0, 0.0,
                                     f"{split}/{name}: feature {what}"))
            continue
        old, new = before[name], after[name]
        if old.get("type", "INT") != new.get("type", "INT"):
            if not t.schema_changes:
                found.append(Anomaly("schema", split, name, 1.0, 0.0,
                                     f"{split}/{name}: type {old.get('type', 'INT')} -> "
                                     f"{new.get('type', 'INT')}"))
            continue
        m0, m1 = _missing_fraction(old, n0), _missing_fraction(new, n1)
        if abs(m1 - m0) > t.max_missing_change:
            found.append(Anomaly("missing", split, name, m1 - m0, t.max_missing_change,
                                 f"{split}/{name}: missing {m0:.1%} -> {m1:.1%}"))
        found += _value_drift(split, name, old, new, t)
    return found


def _value_drift(split: str, name: str, old: Mapping[str, Any], new: Mapping[str, Any],
                 t: Thresholds) -> list[Anomaly]:
    found = []
    p, q = _shares(old), _shares(new)
    if p is not None and q is not None:
        worst = max(p.keys() | q.keys(), key=lambda v: (abs(q.get(v, 0) - p.get(v, 0)), v))
        linf = abs(q.get(worst, 0.0) - p.get(worst, 0.0))
        if linf > t.max_linf:
            found.append(Anomaly("linf", split, name, linf, t.max_linf,
                                 f"{split}/{name}: L-inf {linf:.3f} (value {worst!r}: "
                                 f"{p.get(worst, 0.0):.1%} -> {q.get(worst, 0.0):.1%})"))
        exact = _custom(old, "btf:top_values_exact") and _custom(new, "btf:top_values_exact")
        if exact:
            for kind, mine, other, word in (("new_values", q, p, "new"),
                                            ("vanished_values", p, q, "vanished")):
                values = sorted(v for v in mine if v not in other)
                share = math.fsum(mine[v] for v in values)
                if values and share > t.max_new_values:
                    shown = ", ".join(repr(v) for v in values[:3]) + (
                        f" and {len(values) - 3} more" if len(values) > 3 else "")
                    found.append(Anomaly(kind, split, name, share, t.max_new_values,
                                         f"{split}/{name}: {word} values {shown} "
                                         f"({share:.1%} of values)"))
    jsd = _numeric_jsd(old, new)
    if jsd is not None and jsd > t.max_jsd:
        found.append(Anomaly("jsd", split, name, jsd, t.max_jsd,
                             f"{split}/{name}: Jensen-Shannon {jsd:.3f}"))
    return found


def one_line(anomalies: Sequence[Anomaly], worst: int = 3) -> str:
    """The gate's one line: how many anomalies, and the worst few.

    Args:
        anomalies: the anomalies, worst first.
        worst: how many to show.

    Returns:
        The line.
    """
    shown = "; ".join(a.message for a in anomalies[:worst])
    more = f" (+{len(anomalies) - worst} more)" if len(anomalies) > worst else ""
    return f"{len(anomalies)} anomal{'y' if len(anomalies) == 1 else 'ies'}: {shown}{more}"


def document(anomalies: Sequence[Anomaly], against: str | None, thresholds: Thresholds,
             note: str = "") -> dict[str, Any]:
    """``anomalies.json``: whether the gate passed, against which version, its one line, the
    thresholds and every anomaly (worst first).

    Args:
        anomalies: the anomalies, worst first.
        against: the version compared with, or None when there was none.
        thresholds: the gate's thresholds.
        note: a remark for the reader, such as why nothing was compared.

    Returns:
        The JSON-ready document.
    """
    return {"passed": not anomalies, "against": against,
            "line": one_line(anomalies) if anomalies else "",
            "thresholds": dataclasses.asdict(thresholds),
            "anomalies": [a.as_dict() for a in anomalies],
            **({"note": note} if note else {})}
