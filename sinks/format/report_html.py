"""The report of one data set version: one self-contained HTML page a person reads.

:func:`render_report` takes what a version holds -- its manifest's facts
(:func:`facts_from_manifest`: records, shards and their sizes against the configured band),
its statistics (decoded ``FeatureStats.pb`` per split, transforms/stats/statistics_wire.py),
its rejected records and unread input by reason with a few examples -- optionally the same
of a previous version and the anomalies a comparison found (:class:`Anomaly`), and returns
the page: summary numbers first, then the comparison and its anomalies, splits and shard
sizes, rejects and unread input, and a section per feature with its splits side by side
(histograms and top values as inline SVG, the previous version's drawn over them).

The page opens offline, from a bucket or a CI artifact: no script, no font, image or style
from elsewhere, and a Content-Security-Policy that forbids them (its one stylesheet is
allowed by hash). Every value that comes from data -- feature names, top values, file names,
reasons, dead-letter previews -- is escaped (:func:`svg_charts.esc`), so a category
``<script>alert(1)</script>`` shows as text. The same input gives the same bytes: nothing
of the time or place of rendering is in the page.

Pure: the standard library and the other pure format modules; no Beam, no I/O.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from beam_tfrecords.sinks.format.layout import REPORT
from beam_tfrecords.sinks.format.shard_plan import format_bytes
from beam_tfrecords.sinks.format.svg_charts import (
    Bar,
    Bucket,
    esc,
    fmt_num,
    fmt_share,
    histogram_svg,
    ranked_bars_svg,
)

__all__ = ["REPORT", "SEVERITIES", "Anomaly", "Reason", "VersionFacts", "facts_from_manifest",
           "feature_name", "render_report"]

SEVERITIES = ("error", "warning", "info")
TOP_VALUES_SHOWN = 10
# The top values a statistics file keeps per feature (transforms/stats/accumulators.py): a
# shorter list holds every value the feature had.
TOP_VALUES_KEPT = 20
EXAMPLES_SHOWN = 3
PREVIEW_CHARS = 200


@dataclasses.dataclass(frozen=True)
class Anomaly:
    """One finding of a comparison between two versions, marked in the report.

    Args:
      feature: the feature it is about ("" for the data set as a whole, e.g. a split's
        record count).
      kind: a short, stable name of the check (``missing_fraction``, ``new_values``, ...).
      description: one sentence for people, with the numbers.
      severity: ``error`` (fails a gate), ``warning`` or ``info``.
    """

    feature: str
    kind: str
    description: str
    severity: str = "error"

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"anomaly severity {self.severity!r} is not one of {SEVERITIES}")

    def to_dict(self) -> dict[str, str]:
        """The anomaly as a JSON object (``anomalies.json``).

        Returns:
            Field name to value.
        """
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Anomaly:
        """The inverse of :meth:`to_dict`; unknown keys are an error.

        Args:
            data: a JSON object that :meth:`to_dict` wrote.

        Returns:
            The anomaly.

        Raises:
            TypeError: a key is not a field of :class:`Anomaly`.
        """
        return cls(**{key: str(value) for key, value in data.items()})


@dataclasses.dataclass(frozen=True)
class Reason:
    """Dead-letter rows of one reason: how many, and the first few (their ``source``,
    ``row``, ``feature``, ``value``, ``record``; unread input's ``offset`` and ``bytes``)."""

    reason: str
    count: int
    examples: tuple[Mapping[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class VersionFacts:
    """What the report shows of one version (see :func:`facts_from_manifest`).

    ``statistics`` maps a split to its ``DatasetFeatureStatistics`` as
    ``statistics_wire.decode_statistics_list`` gives it; None when the version has none.
    ``shards`` maps a split to its shards' sizes in bytes; ``band`` is the configured shard
    size band ``(min, target, max)`` in bytes, None when the manifest does not say.
    ``duplicates`` is the manifest's ``duplicates`` (sinks/format/duplicates.py ``summarize``),
    None when the version was built without the count.
    """

    name: str
    version: str
    created: str = ""
    compression: str = "none"
    counts: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    records: Mapping[str, int] = dataclasses.field(default_factory=dict)
    shards: Mapping[str, Sequence[int]] = dataclasses.field(default_factory=dict)
    band: tuple[int, int, int] | None = None
    statistics: Mapping[str, Mapping[str, Any]] | None = None
    rejected: Sequence[Reason] = ()
    unread: Sequence[Reason] = ()
    duplicates: Mapping[str, Any] | None = None


def facts_from_manifest(manifest: Mapping[str, Any],
                        statistics: Mapping[str, Mapping[str, Any]] | None = None,
                        rejected: Sequence[Reason] = (), unread: Sequence[Reason] = ()
                        ) -> VersionFacts:
    """The report's facts of a version from its ``manifest.json`` document.

    Args:
      manifest: the manifest, as parsed JSON.
      statistics: split -> decoded statistics, or None when the version has none.
      rejected: rejected records by reason, most frequent first.
      unread: unread input by reason, most frequent first.

    Returns:
      The facts :func:`render_report` shows.
    """
    splits = manifest.get("splits") or {}
    output = (manifest.get("config") or {}).get("output")  # the library's: only a path
    size = (output.get("shard_size") if isinstance(output, dict) else None) or {}
    band = None
    if all(isinstance(size.get(k), int) for k in ("min", "target", "max")):
        band = (size["min"], size["target"], size["max"])
    return VersionFacts(
        name=str(manifest.get("name", "")), version=str(manifest.get("version", "")),
        created=str(manifest.get("created", "")),
        compression=str(manifest.get("compression", "none")),
        counts=dict(manifest.get("counts") or {}),
        records={split: int(info.get("records", 0)) for split, info in splits.items()},
        shards={split: tuple(int(s.get("bytes", 0)) for s in info.get("shards", ()))
                for split, info in splits.items()},
        band=band, statistics=statistics, rejected=tuple(rejected), unread=tuple(unread),
        duplicates=manifest.get("duplicates") if isinstance(manifest.get("duplicates"), dict)
        else None)


# -- reading the statistics ------------------------------------------------------------------

_KIND_FIELDS = (("num_stats", "number"), ("string_stats", "string"), ("bytes_stats", "bytes"),
                ("struct_stats", "struct"))


def feature_name(feature: Mapping[str, Any]) -> str:
    """A ``FeatureNameStatistics``' name: its ``name``, or its path's steps joined by ``.``
    (as TFDV shows them).

    Args:
        feature: a ``FeatureNameStatistics`` as a JSON object.

    Returns:
        The feature's name, or ``""`` when it has neither a name nor a path.
    """
    if feature.get("name"):
        return str(feature["name"])
    return ".".join(str(s) for s in (feature.get("path") or {}).get("step", ()))


def _by_name(dataset: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {feature_name(f): f for f in (dataset or {}).get("features", ())}


def _kind(feature: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
    for field, kind in _KIND_FIELDS:
        if field in feature:
            return kind, feature[field]
    return "struct", {}


def _custom(feature: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    for stat in feature.get("custom_stats", ()):
        if stat.get("name") == name:
            return stat
    return None


def _histogram(stats: Mapping[str, Any], kind: str = "STANDARD") -> list[Bucket]:
    for hist in stats.get("histograms", ()):
        if hist.get("type", "STANDARD") == kind:
            return [Bucket(b.get("low_value", 0.0), b.get("high_value", 0.0),
                           b.get("sample_count", 0.0)) for b in hist.get("buckets", ())]
    return []


def _nan_count(stats: Mapping[str, Any]) -> int:
    hists = stats.get("histograms", ())
    return int(hists[0].get("num_nan", 0)) if hists else 0


def _rows(feature: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(statistic, value) rows of one feature in one split, in the order people read them."""
    kind, stats = _kind(feature)
    common = stats.get("common_stats", {})
    present, missing = common.get("num_non_missing", 0), common.get("num_missing", 0)
    rows = [("present", fmt_num(present)),
            ("missing", f"{fmt_num(missing)} ({fmt_share(missing, present + missing)})")]
    low, high = common.get("min_num_values", 0), common.get("max_num_values", 0)
    if present and (low, high) != (1, 1):
        rows.append(("values per example",
                     f"{fmt_num(low)}–{fmt_num(high)}, "
                     f"avg {fmt_num(common.get('avg_num_values', 0.0))}"))
    if kind == "number":
        rows += [(name, fmt_num(stats.get(name, 0.0) if present else None))
                 for name in ("mean", "std_dev", "min", "median", "max")]
        rows.append(("zeros", fmt_num(stats.get("num_zeros", 0))))
        if _nan_count(stats):
            rows.append(("NaN", fmt_num(_nan_count(stats))))
    elif kind == "string":
        rows += [("unique", _approx(feature, "btf:unique_exact", stats.get("unique", 0))),
                 ("avg length", f"{fmt_num(stats.get('avg_length', 0.0))} bytes")]
        if stats.get("invalid_utf8_count"):
            rows.append(("not UTF-8", fmt_num(stats["invalid_utf8_count"])))
    elif kind == "bytes":
        rows += [("unique", _approx(feature, "btf:unique_exact", stats.get("unique", 0))),
                 ("size", f"{format_bytes(stats.get('min_num_bytes', 0.0))} – "
                          f"{format_bytes(stats.get('max_num_bytes', 0.0))}, avg "
                          f"{format_bytes(stats.get('avg_num_bytes', 0.0))}")]
        sizes = [_custom(feature, f"image_{e}_{d}") for e in ("min", "max")
                 for d in ("width", "height")]
        if all(sizes):
            w0, h0, w1, h1 = (int(s.get("num", 0)) for s in sizes)
            rows.append(("image size", f"{w0}×{h0} – {w1}×{h1} px"))
    return rows


def _approx(feature: Mapping[str, Any], flag: str, value: int) -> str:
    exact = _custom(feature, flag)
    return fmt_num(value) if exact is None or exact.get("num", 1.0) else f"≈{fmt_num(value)}"


def _top_bars(feature: Mapping[str, Any], before: Mapping[str, Any] | None) -> list[Bar]:
    """The top values of a string feature (or the formats of an image feature) as shares of
    its values, with the previous version's share of the same value."""
    def shares(f: Mapping[str, Any] | None) -> tuple[list[tuple[str, float]], float]:
        if f is None:
            return [], 0.0
        kind, stats = _kind(f)
        if kind == "string":
            pairs = [(str(t.get("value", "")), float(t.get("frequency", 0.0)))
                     for t in stats.get("top_values", ())]
            total = float(stats.get("common_stats", {}).get("tot_num_values", 0))
            return pairs, total
        formats = _custom(f, "image_format_histogram")
        if formats is None:
            return [], 0.0
        pairs = [(str(b.get("label", "")), float(b.get("sample_count", 0.0)))
                 for b in formats.get("rank_histogram", {}).get("buckets", ())]
        return pairs, sum(n for _, n in pairs)

    now, total = shares(feature)
    then, then_total = shares(before)
    was = {value: n / then_total for value, n in then} if then_total else {}
    # A value missing from a list the other version kept whole is new there.
    complete = bool(then) and len(then) < TOP_VALUES_KEPT
    return [Bar(value, n / total if total else 0.0, was.get(value),
                "new" if complete and value not in was else "")
            for value, n in now[:TOP_VALUES_SHOWN]]


# -- the page --------------------------------------------------------------------------------

_STYLE = """
:root{--fg:#1d2330;--muted:#5f6b7a;--line:#dde2ea;--bg:#fff;--panel:#f6f8fb;--accent:#2f6fdb;
--before:#444;--bad:#c62828;--warn:#a86400;--ok:#2e7d32;--band:#d8ecd9}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;
color:var(--fg);background:var(--bg)}
main{max-width:1240px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:32px 0 10px;padding-bottom:4px;
border-bottom:1px solid var(--line)}h3{font-size:15px;margin:0 0 8px}
.sub,.note{color:var(--muted)}.note{margin:6px 0}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:10px;
margin:18px 0}
.card{background:var(--panel);border:1px solid var(--line);border-radius:8px;padding:10px 12px}
.card .n{font-size:22px;font-weight:600}.card .l{color:var(--muted);font-size:12px}
.card.bad{border-color:var(--bad)}.card.bad .n{color:var(--bad)}
.card .d{font-size:12px;color:var(--muted)}
table{border-collapse:collapse;margin:6px 0}
th,td{padding:3px 10px 3px 0;text-align:left;vertical-align:top;border-bottom:1px solid var(--line)}
th{font-weight:600;color:var(--muted);font-size:12px}
td.r,th.r{text-align:right}td.bad{color:var(--bad);font-weight:600}
code{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace;background:var(--panel);
padding:1px 4px;border-radius:4px;word-break:break-all;white-space:pre-wrap}
.anomalies li{margin:4px 0}
.sev{display:inline-block;font-size:11px;font-weight:600;padding:0 6px;border-radius:9px;
color:#fff;margin-right:6px}
.sev.error{background:var(--bad)}.sev.warning{background:var(--warn)}.sev.info{background:var(--muted)}
.badge{display:inline-block;font-size:11px;padding:0 6px;border-radius:9px;
border:1px solid var(--line);color:var(--muted);margin-left:6px;font-weight:400}
.feature{border:1px solid var(--line);border-radius:8px;padding:12px 14px;margin:14px 0}
.feature.flagged{border-color:var(--bad);border-width:2px}
.splits{display:grid;grid-template-columns:repeat(auto-fit,minmax(340px,1fr));gap:14px}
.split h4{margin:0 0 4px;font-size:13px;color:var(--muted)}
.chart{display:block;margin:4px 0;max-width:100%;height:auto}
.chart .bar{fill:var(--accent)}.chart .before{fill:none;stroke:var(--before);stroke-width:1.5;
stroke-dasharray:4 2}
.chart .axis{stroke:var(--muted)}.chart .band{fill:var(--band)}
.chart .target{stroke:var(--ok);stroke-dasharray:3 3}
.chart text{font-size:11px;fill:var(--fg)}.chart .tick{fill:var(--muted)}
.chart .end{text-anchor:end}.chart .label{text-anchor:end}
.legend{font-size:12px;color:var(--muted)}
.legend .sw{display:inline-block;width:12px;height:10px;background:var(--accent);
margin:0 4px 0 10px}.legend .sw.b{background:none;border:1.5px dashed var(--before)}
.legend .sw.band{background:var(--band)}
.up{color:var(--ok)}.down{color:var(--bad)}
a{color:var(--accent)}
"""
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()
# No script, font, frame, connection or remote image; the one stylesheet by its hash; the
# favicon a data: URL (browsers fetch /favicon.ico otherwise, from the bucket serving it).
CONTENT_SECURITY_POLICY = (f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; "
                           "img-src data:; base-uri 'none'; form-action 'none'")


def render_report(current: VersionFacts, previous: VersionFacts | None = None,
                  anomalies: Sequence[Anomaly] = ()) -> str:
    """The report of ``current`` as one HTML page.

    Args:
      current: the version's facts (:func:`facts_from_manifest`).
      previous: another version's, to compare with (the one LATEST named before), or None.
      anomalies: what a comparison found; each is listed at the top and marked at its feature.

    Returns:
      The page, the same text for the same arguments.
    """
    order = {s: i for i, s in enumerate(SEVERITIES)}
    anomalies = sorted(anomalies, key=lambda a: order[a.severity])  # stable: errors first
    ids = _feature_ids(current, previous)
    title = f"{current.name} {current.version}"
    body = [_header(current, previous), _cards(current, previous, anomalies),
            _anomalies(anomalies, ids), _splits(current, previous), _duplicates(current),
            _shard_sizes(current),
            _reasons("Rejected records", current.rejected, current.counts.get("rejected", 0),
                     "No record was rejected."),
            _reasons("Unread input", current.unread, _unread_regions(current),
                     "All input was read.", unread=True),
            _features(current, previous, anomalies, ids)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CONTENT_SECURITY_POLICY}\">\n"
            "<meta name=\"referrer\" content=\"no-referrer\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            "<link rel=\"icon\" href=\"data:,\">\n"
            f"<title>{esc(title)} · beam-tfrecords report</title>\n"
            f"<style>{_STYLE}</style></head>\n<body><main>\n" + "\n".join(p for p in body if p)
            + "\n</main></body></html>\n")


def _feature_ids(current: VersionFacts, previous: VersionFacts | None) -> dict[str, str]:
    """Feature name -> the id of its section (never the name itself: ids stay ours)."""
    names = set()
    for facts in (current, previous):
        for dataset in ((facts.statistics or {}).values() if facts else ()):
            names.update(_by_name(dataset))
    return {name: f"f{i}" for i, name in enumerate(sorted(names))}


def _header(current: VersionFacts, previous: VersionFacts | None) -> str:
    parts = [f"<h1>{esc(current.name)} <span class=\"sub\">version {esc(current.version)}"
             "</span></h1>"]
    line = [f"created {esc(current.created)}" if current.created else "",
            f"compression {esc(current.compression)}"]
    if previous is not None:
        line.append(f"compared with version <b>{esc(previous.version)}</b>"
                    + (f" of {esc(previous.name)}" if previous.name != current.name else ""))
    parts.append(f"<p class=\"sub\">{' · '.join(x for x in line if x)}</p>")
    return "\n".join(parts)


def _delta(now: float, then: float | None) -> str:
    if then is None:
        return ""
    if now == then:
        return "<div class=\"d\">unchanged</div>"
    change = f"{'+' if now > then else '−'}{fmt_num(abs(now - then))}"
    share = f" ({fmt_share(abs(now - then), then)})" if then else ""
    return f"<div class=\"d {'up' if now > then else 'down'}\">{change}{share}</div>"


def _card(value: str, label: str, extra: str = "", bad: bool = False) -> str:
    return (f"<div class=\"card{' bad' if bad else ''}\"><div class=\"n\">{value}</div>"
            f"<div class=\"l\">{label}</div>{extra}</div>")


def _feature_count(facts: VersionFacts) -> int | None:
    if facts.statistics is None:
        return None
    return len({n for d in facts.statistics.values() for n in _by_name(d)})


def _count(n: int, noun: str) -> str:
    """``1 file``, ``3 files``."""
    return f"{fmt_num(n)} {noun}{'' if n == 1 else 's'}"


def _feature_change(current: VersionFacts, previous: VersionFacts | None) -> str:
    if previous is None or current.statistics is None or previous.statistics is None:
        return ""
    now = {n for d in current.statistics.values() for n in _by_name(d)}
    then = {n for d in previous.statistics.values() for n in _by_name(d)}
    if now == then:
        return "<div class=\"d\">the same as before</div>"
    return f"<div class=\"d down\">{len(now - then)} new, {len(then - now)} gone</div>"


def _cards(current: VersionFacts, previous: VersionFacts | None,
           anomalies: Sequence[Anomaly]) -> str:
    counts = current.counts
    written = sum(current.records.values())
    read, rejected = counts.get("read", 0), counts.get("rejected", 0)
    unread = counts.get("unread") or {}
    sizes = [s for split in current.shards.values() for s in split]
    features = _feature_count(current)
    errors = sum(a.severity == "error" for a in anomalies)
    cards = [
        _card(fmt_num(written), "records written",
              _delta(written, sum(previous.records.values()) if previous else None)),
        _card(fmt_num(read), "records read"),
        _card(fmt_num(rejected), f"rejected ({fmt_share(rejected, read)} of read)",
              bad=bool(rejected)),
        _card(format_bytes(unread.get("bytes", 0)),
              f"input unread (in {_count(unread.get('files', 0), 'file')})",
              bad=bool(unread.get("bytes"))),
        _card(fmt_num(len(current.records)), "splits: " + esc(", ".join(current.records))),
        _card("–" if features is None else fmt_num(features), "features",
              _feature_change(current, previous)),
        _card(fmt_num(len(sizes)), f"shards, {format_bytes(sum(sizes))}"),
    ]
    if previous is not None or anomalies:
        cards.append(_card(fmt_num(len(anomalies)), f"anomalies ({fmt_num(errors)} errors)",
                           bad=bool(errors)))
    return "<section class=\"cards\">" + "".join(cards) + "</section>"


def _anomalies(anomalies: Sequence[Anomaly], ids: Mapping[str, str]) -> str:
    if not anomalies:
        return ""
    items = []
    for a in anomalies:
        where = ""
        if a.feature:
            target = ids.get(a.feature)
            name = f"<code>{esc(a.feature, 80)}</code>"
            where = f"<a href=\"#{target}\">{name}</a>: " if target else f"{name}: "
        items.append(f"<li><span class=\"sev {a.severity}\">{a.severity}</span>{where}"
                     f"{esc(a.description, 400)} <span class=\"badge\">{esc(a.kind, 60)}"
                     "</span></li>")
    return ("<h2>Anomalies</h2><ul class=\"anomalies\">" + "".join(items) + "</ul>")


def _splits(current: VersionFacts, previous: VersionFacts | None) -> str:
    head = ["split", "records"] + (["before", "change"] if previous else []) + [
        "shards", "bytes", "smallest", "largest"]
    rows = []
    splits = list(current.records) + [s for s in (previous.records if previous else {})
                                       if s not in current.records]
    for split in splits:
        records = current.records.get(split)
        sizes = current.shards.get(split, ())
        cells = [f"<td>{esc(split)}</td>", f"<td class=\"r\">{fmt_num(records)}</td>"]
        if previous:
            then = previous.records.get(split)
            change = ("" if then is None or records is None else
                      fmt_share(records - then, then) if then else "")
            if change and not change.startswith("-") and records != then:
                change = "+" + change
            cells += [f"<td class=\"r\">{fmt_num(then)}</td>", f"<td class=\"r\">{change}</td>"]
        cells += [f"<td class=\"r\">{fmt_num(len(sizes))}</td>",
                  f"<td class=\"r\">{format_bytes(sum(sizes))}</td>",
                  f"<td class=\"r\">{format_bytes(min(sizes)) if sizes else '–'}</td>",
                  f"<td class=\"r\">{format_bytes(max(sizes)) if sizes else '–'}</td>"]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    header = "".join(f"<th class=\"r\">{h}</th>" if i else f"<th>{h}</th>"
                     for i, h in enumerate(head))
    return f"<h2>Splits</h2><table><tr>{header}</tr>{''.join(rows)}</table>"


def _duplicates(current: VersionFacts) -> str:
    """Duplicate records per split, records in several splits, and a few examples."""
    found = current.duplicates
    if found is None:
        return ""
    splits = found.get("splits") or {}
    exact = found.get("exact", True) is not False

    def counted(c: Mapping[str, Any], key: str) -> str:
        value = fmt_num(c.get(key, 0))
        error = (c.get("standard_error") or {}).get(key)
        return value if exact or error is None else f"≈{value} ± {fmt_num(error)}"

    rows = "".join(
        f"<tr><td>{esc(split)}</td><td class=\"r\">{fmt_num(c.get('records', 0))}</td>"
        f"<td class=\"r\">{'' if exact else '≈'}{fmt_num(c.get('distinct', 0))}</td>"
        f"<td class=\"r{' bad' if c.get('duplicates') else ''}\">"
        f"{counted(c, 'duplicates')}</td>"
        f"<td class=\"r{' bad' if c.get('leaked') else ''}\">{counted(c, 'leaked')}"
        "</td></tr>" for split, c in splits.items())
    several = int(found.get("in_several_splits", 0))
    sample = "" if exact else (
        f" Estimated from a sample of at least {fmt_share(float(found.get('sampled', 0)), 1)}"
        " of the distinct records (each of 32 buckets keeps a fixed number of fingerprints, "
        "the smallest, every copy of a record alike): ± one standard error.")
    items = []
    for example in found.get("examples") or ():
        copies = ", ".join(f"{esc(s)} ×{fmt_num(n)}"
                           for s, n in (example.get("copies") or {}).items())
        shown = (f" <code>{esc(example['preview'], PREVIEW_CHARS)}</code>"
                 if example.get("preview") not in (None, "") else
                 " (its bytes were not sampled: one distinct record in 4,096 is, at most)")
        size = (f", {format_bytes(int(example['bytes']))}" if isinstance(example.get("bytes"), int)
                else "")
        items.append(f"<li>fingerprint <code>{esc(example.get('fingerprint', ''), 16)}</code>"
                     f": {copies}{size}{shown}</li>")
    examples = (f"<p class=\"note\">Examples, smallest fingerprints first:</p><ul>"
                f"{''.join(items)}</ul>") if items else ""
    method = str(found.get("method", ""))
    compared = (f"by the value of <code>{esc(method[4:])}</code> (its 64-bit fingerprint: "
                "two CRCs of different polynomials and the length)"
                if method.startswith("key:") else
                "by a 64-bit fingerprint of their bytes (two CRCs of different polynomials "
                "and the length)")
    return ("<h2>Duplicates and leaks</h2><table><tr><th>split</th><th class=\"r\">records"
            "</th><th class=\"r\">distinct</th><th class=\"r\">duplicates</th>"
            f"<th class=\"r\">also in another split</th></tr>{rows}</table>"
            f"<p class=\"note\">{_count(several, 'distinct record')} in more than one split. "
            f"Records are compared {compared}: about N²/2⁶⁵ false matches are expected among "
            f"N distinct records.{sample}</p>{examples}")


def _shard_sizes(current: VersionFacts) -> str:
    sizes = [s for split in current.shards.values() for s in split]
    if not sizes:
        return "<h2>Shard sizes</h2><p class=\"note\">No shard.</p>"
    top = max(sizes + ([current.band[2]] if current.band else []))
    width = top / 20 or 1
    counts = [0] * 20
    for size in sizes:
        counts[min(int(size / width), 19)] += 1
    buckets = [Bucket(i * width, (i + 1) * width, n) for i, n in enumerate(counts)]
    chart = histogram_svg(buckets, band=current.band, label="shard sizes", fmt=format_bytes)
    note = f"{fmt_num(len(sizes))} shards."
    legend = "<span class=\"sw\"></span>shards"
    if current.band:
        low, target, high = current.band
        inside = sum(low <= s <= high for s in sizes)
        below, above = sum(s < low for s in sizes), sum(s > high for s in sizes)
        note = (f"{fmt_num(inside)} of {fmt_num(len(sizes))} shards within the band "
                f"{format_bytes(low)} – {format_bytes(high)} (target {format_bytes(target)})"
                f"; {fmt_num(below)} below it (a split's remainder, or a split smaller than "
                f"the band), {fmt_num(above)} above it (a single record larger than the band).")
        legend += "<span class=\"sw band\"></span>band"
    return (f"<h2>Shard sizes</h2>{chart}<div class=\"legend\">{legend}</div>"
            f"<p class=\"note\">{note}</p>")


def _unread_regions(facts: VersionFacts) -> int:
    return sum(r.count for r in facts.unread)


def _example(row: Mapping[str, Any], unread: bool) -> str:
    where = esc(row.get("source", ""), PREVIEW_CHARS)
    if row.get("row") not in (None, ""):
        where += f":{esc(row['row'])}"
    parts = [f"<code>{where}</code>"]
    if unread:
        parts.append(f"from byte {esc(row.get('offset', '?'))}, "
                     f"{esc(fmt_num(row.get('bytes')))} bytes")
    else:
        if row.get("feature"):
            parts.append(f"feature <code>{esc(row['feature'], 80)}</code>")
        if row.get("value") not in (None, ""):
            parts.append(f"value <code>{esc(row['value'], PREVIEW_CHARS)}</code>")
        if row.get("record") not in (None, ""):
            parts.append(f"record <code>{esc(row['record'], PREVIEW_CHARS)}</code>")
    return "<li>" + " ".join(parts) + "</li>"


def _reasons(title: str, reasons: Sequence[Reason], total: int, none: str,
             unread: bool = False) -> str:
    if not reasons:
        return f"<h2>{title}</h2><p class=\"note\">{none}</p>"
    rows = "".join(
        f"<tr><td class=\"r\">{fmt_num(r.count)}</td><td>{esc(r.reason, 400)}"
        f"<ul>{''.join(_example(e, unread) for e in r.examples[:EXAMPLES_SHOWN])}</ul>"
        "</td></tr>" for r in reasons)
    what = _count(total, "region" if unread else "record")
    return (f"<h2>{title}</h2><p class=\"note\">{what}, by reason, with "
            f"examples (at most {EXAMPLES_SHOWN} each).</p><table><tr><th class=\"r\">count"
            f"</th><th>reason</th></tr>{rows}</table>")


def _features(current: VersionFacts, previous: VersionFacts | None,
              anomalies: Sequence[Anomaly], ids: Mapping[str, str]) -> str:
    if current.statistics is None:
        return ("<h2>Features</h2><p class=\"note\">This version has no statistics (it was "
                "built without them): no per-feature section.</p>")
    splits = list(current.statistics)
    now = {split: _by_name(current.statistics[split]) for split in splits}
    then_stats = previous.statistics if previous is not None else None
    then = {split: _by_name((then_stats or {}).get(split)) for split in splits}
    names = sorted({n for split in splits for n in now[split]})
    gone = sorted({n for d in (then_stats or {}).values() for n in _by_name(d)} - set(names))
    flagged: dict[str, list[Anomaly]] = {}
    for a in anomalies:
        flagged.setdefault(a.feature, []).append(a)
    parts = ["<h2>Features</h2>"]
    if previous is not None and then_stats is None:
        parts.append("<p class=\"note\">The other version has no statistics: features are not "
                     "compared.</p>")
    parts.append(_overview(names, splits, now, then if then_stats else None, flagged, ids))
    if gone:
        parts.append("<p class=\"note\">No longer present: " + ", ".join(
            f"<code>{esc(n, 80)}</code>" for n in gone) + "</p>")
    if then_stats:
        parts.append("<div class=\"legend\"><span class=\"sw\"></span>this version"
                     "<span class=\"sw b\"></span>the other version</div>")
    for name in names:
        parts.append(_feature_section(name, splits, now, then if then_stats else None,
                                      flagged.get(name, ()), ids[name]))
    return "\n".join(parts)


def _type_of(name: str, splits: Sequence[str], now: Mapping[str, Mapping]) -> str:
    for split in splits:
        if name in now[split]:
            return str(now[split][name].get("type", "INT"))
    return "?"


def _missing(feature: Mapping[str, Any] | None) -> str:
    if feature is None:
        return "–"
    common = _kind(feature)[1].get("common_stats", {})
    missing = common.get("num_missing", 0)
    return fmt_share(missing, common.get("num_non_missing", 0) + missing)


def _overview(names: Sequence[str], splits: Sequence[str], now: Mapping[str, Mapping],
              then: Mapping[str, Mapping] | None, flagged: Mapping[str, Sequence[Anomaly]],
              ids: Mapping[str, str]) -> str:
    head = "".join(f"<th class=\"r\">missing in {esc(s)}</th>" for s in splits)
    rows = []
    for name in names:
        cells = []
        for split in splits:
            text = _missing(now[split].get(name))
            if then is not None:
                before = then[split].get(name)
                text += " <span class=\"sub\">(" + (
                    "new" if before is None else f"was {_missing(before)}") + ")</span>"
            cells.append(f"<td class=\"r\">{text}</td>")
        marks = "".join(f"<span class=\"sev {a.severity}\">{esc(a.kind, 40)}</span>"
                        for a in flagged.get(name, ()))
        rows.append(f"<tr><td><a href=\"#{ids[name]}\">{esc(name, 80)}</a></td>"
                    f"<td>{esc(_type_of(name, splits, now))}</td>{''.join(cells)}"
                    f"<td>{marks}</td></tr>")
    return (f"<table><tr><th>feature</th><th>type</th>{head}<th>anomalies</th></tr>"
            f"{''.join(rows)}</table>")


def _feature_section(name: str, splits: Sequence[str], now: Mapping[str, Mapping],
                     then: Mapping[str, Mapping] | None, anomalies: Sequence[Anomaly],
                     anchor: str) -> str:
    kind = _type_of(name, splits, now)
    badge = f"<span class=\"badge\">{esc(kind)}</span>"
    if then is not None and not any(name in then[s] for s in splits):
        badge += "<span class=\"badge\">new</span>"
    found = "".join(f"<li><span class=\"sev {a.severity}\">{a.severity}</span>"
                    f"{esc(a.description, 400)}</li>" for a in anomalies)
    columns = []
    for split in splits:
        feature = now[split].get(name)
        if feature is None:
            columns.append(f"<div class=\"split\"><h4>{esc(split)}</h4><p class=\"note\">not "
                           "in this split</p></div>")
            continue
        before = then[split].get(name) if then is not None else None
        columns.append(_split_column(split, feature, before))
    flagged = " flagged" if anomalies else ""
    found = f"<ul class=\"anomalies\">{found}</ul>" if found else ""
    return (f"<section class=\"feature{flagged}\" id=\"{anchor}\"><h3>{esc(name, 200)}{badge}"
            f"</h3>{found}"
            f"<div class=\"splits\">{''.join(columns)}</div></section>")


def _split_column(split: str, feature: Mapping[str, Any],
                  before: Mapping[str, Any] | None) -> str:
    kind, stats = _kind(feature)
    chart = ""
    if kind == "number" and stats.get("common_stats", {}).get("num_non_missing"):
        buckets = _histogram(stats)
        if buckets:
            previous = _histogram(_kind(before)[1]) if before is not None else []
            chart = histogram_svg(buckets, previous=previous, label=f"{split} histogram")
    elif kind in ("string", "bytes"):
        bars = _top_bars(feature, before)
        if bars:
            chart = ranked_bars_svg(bars, label=f"{split} top values")
    rows = _rows(feature)
    old = dict(_rows(before)) if before is not None else None
    head = "<tr><th></th><th class=\"r\">value</th>" + (
        "<th class=\"r\">other version</th>" if old is not None else "") + "</tr>"
    body = "".join(
        f"<tr><td>{label}</td><td class=\"r\">{value}</td>"
        + (f"<td class=\"r sub\">{old.get(label, '–')}</td>" if old is not None else "")
        + "</tr>" for label, value in rows)
    return (f"<div class=\"split\"><h4>{esc(split)}</h4>{chart}<table>{head}{body}</table>"
            "</div>")
