"""The table printed after a successful build, computed from its manifest and wall time.

Pure: a manifest (the dict in ``manifest.json``) and seconds in, text out. Per split: records
written, shards, bytes, the smallest and the largest shard; a total row adds records read and
rejected. Those two are counted before a record is given a split (a record that cannot be
parsed has no split), so they exist only as totals -- the footnote says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from beam_tfrecords.pipelines.progress import format_bytes, format_duration

__all__ = ["format_summary", "summary_rows"]

_COLUMNS = ("split", "read", "written", "rejected", "shards", "bytes", "smallest", "largest")
_NONE = "-"


def summary_rows(manifest: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """One row per split (in the manifest's order), then the total; cells are text.

    Args:
        manifest: a committed version's manifest.

    Returns:
        The rows' cells.
    """
    rows = []
    all_sizes: list[int] = []
    for split, info in manifest["splits"].items():
        sizes = [shard["bytes"] for shard in info["shards"]]
        all_sizes += sizes
        rows.append(_row(split, _NONE, info["records"], _NONE, sizes, info["bytes"]))
    counts = manifest["counts"]
    total_bytes = sum(info["bytes"] for info in manifest["splits"].values())
    rows.append(_row("total", f"{counts['read']:,}", counts["written"],
                     f"{counts['rejected']:,}", all_sizes, total_bytes))
    return rows


def _row(name: str, read: str, written: int, rejected: str, sizes: list[int],
         nbytes: int) -> tuple[str, ...]:
    return (name, read, f"{written:,}", rejected, f"{len(sizes):,}", format_bytes(nbytes),
            format_bytes(min(sizes)) if sizes else _NONE,
            format_bytes(max(sizes)) if sizes else _NONE)


def format_summary(manifest: Mapping[str, Any], wall_seconds: float) -> str:
    """The table, a footnote, and a line with wall time and rates.

    Args:
        manifest: the committed version's manifest.
        wall_seconds: how long the command took.

    Returns:
        The text, several lines.
    """
    rows = [_COLUMNS, *summary_rows(manifest)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                       for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.insert(-1, lines[1])
    counts = manifest["counts"]
    total_bytes = sum(info["bytes"] for info in manifest["splits"].values())
    lines.append("read and rejected are counted before a record gets a split: totals only")
    if counts["rejected"]:
        files = [entry["path"] for entry in manifest.get("dead_letter", [])]
        lines.append(f"{counts['rejected']:,} rejected record(s) in {len(files)} dead-letter "
                     f"file(s): {', '.join(files[:3])}{', ...' if len(files) > 3 else ''}")
    rate = counts["read"] / wall_seconds if wall_seconds > 0 else 0.0
    byte_rate = total_bytes / wall_seconds if wall_seconds > 0 else 0.0
    lines.append(f"wall time {format_duration(wall_seconds)}, {rate:,.0f} records/s read, "
                 f"{format_bytes(byte_rate)}/s written")
    return "\n".join(lines)
