"""Shard-size arithmetic: the size band, when a writer rolls a file, how tails are coalesced.

Shard sizes are a band on the bytes *as stored* (after compression): every shard of a split
but at most one lies in ``[min, max]``; the exception is the remainder, and a split smaller
than ``min`` is that one shard. Writers roll their file as soon as it reaches ``target``, so
their full files land in ``[target, max]``; what each bundle has left when it ends (its tail)
is smaller. :func:`plan_shards` groups the tails into whole-file concatenations that land in
the band. No record is ever moved between files here, which is what lets Cloud Storage's
compose and plain byte concatenation do the work; it needs ``max >= 2 * min``, checked by
:class:`ShardSize`.

Pure: no Beam, no I/O.
"""

from __future__ import annotations

import dataclasses
import decimal
import re
from collections.abc import Mapping, Sequence

__all__ = ["Part", "ShardSize", "derive_band", "format_bytes", "parse_size", "plan_shards",
           "should_roll_before"]

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | str) -> int:
    """Bytes from ``150MB`` (10**6), ``64MiB`` (2**20), ``1.5GB`` or a plain integer.

    Args:
        value: an int (bytes) or text: a number with an optional unit (B, KB, MB, GB, TB, KiB,
            MiB, GiB, TiB; any case).

    Returns:
        The size in bytes; ValueError for anything else.
    """
    if isinstance(value, bool):
        raise ValueError("a size must be a number of bytes or a string such as '150MB'")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("a size must be positive")
        return value
    match = _SIZE.match(str(value))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(
            "a size must be a number of bytes or a number with a unit "
            "(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), e.g. '150MB'"
        )
    # Decimal, not float: "1.001MB" is 1001000 bytes, not float's 1000999.
    size = int(decimal.Decimal(match.group(1)) * _UNITS[match.group(2).lower()])
    if size <= 0:
        raise ValueError("a size must be positive")
    return size


def format_bytes(n: float) -> str:
    """Decimal units, as in the config's sizes (``150MB`` is 150 * 10**6 bytes): what
    :func:`parse_size` reads.

    Args:
        n: a size in bytes.

    Returns:
        The size with a decimal unit, such as ``150.0 MB``.
    """
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


@dataclasses.dataclass(frozen=True)
class ShardSize:
    """The band on stored bytes per shard. Defaults: target 150 MB within [100 MB, 200 MB]."""

    target: int = 150 * 10**6
    min: int = 100 * 10**6
    max: int = 200 * 10**6

    def __post_init__(self) -> None:
        if not 0 < self.min <= self.target <= self.max:
            raise ValueError(
                f"need 0 < min <= target <= max, got min={self.min}, target={self.target}, "
                f"max={self.max}"
            )
        if self.max < 2 * self.min:
            raise ValueError(
                f"max ({self.max}) must be at least twice min ({self.min}): small per-bundle "
                "tails are joined whole, and two tails just under min must fit under max"
            )


def derive_band(given: Mapping[str, int]) -> ShardSize:
    """The band from whichever of ``target``, ``min`` and ``max`` are given, the others
    derived in the default band's proportions (min : target : max = 2 : 3 : 4, so max is twice
    min): a target alone of 30 MB gives [20 MB, 40 MB]; min alone gives target 1.5x and max 2x
    it; max alone gives target 0.75x and min 0.5x; min and max give their midpoint as target.
    Derived values never break what was given (max stays at least twice min and at least the
    target); a band that cannot hold from the given values is ShardSize's ValueError. Nothing
    given: the default band.

    Args:
        given: any of ``target``, ``min`` and ``max``, in bytes.

    Returns:
        The ShardSize band.
    """
    unknown = set(given) - {"target", "min", "max"}
    if unknown:
        raise ValueError(f"unknown shard size keys {sorted(unknown)}; use target, min, max")
    target, low, high = given.get("target"), given.get("min"), given.get("max")
    if target is None and low is None and high is None:
        return ShardSize()
    if target is None:
        if low is not None and high is not None:
            target = (low + high) // 2
        elif low is not None:
            target = low * 3 // 2
        else:
            target = high * 3 // 4
    if low is None:
        low = max(1, target * 2 // 3 if high is None else min(target * 2 // 3, high // 2))
    if high is None:
        high = max(target * 4 // 3, 2 * low, target)
    return ShardSize(target=target, min=low, max=high)


def should_roll_before(current: int, incoming: int, size: ShardSize) -> bool:
    """Close the open file before adding ``incoming`` stored bytes to its ``current`` ones?

    Only when the file already holds something and the record would push it past ``max``.
    (After each record the writer also rolls once ``current >= target``.)

    Args:
        current: the stored bytes the open file holds.
        incoming: the stored bytes the next record adds.
        size: the shard-size band.

    Returns:
        True when the file should be closed first.
    """
    return current > 0 and current + incoming > size.max


@dataclasses.dataclass(frozen=True)
class Part:
    """One file a writer produced: where, how many records, how many stored bytes."""

    path: str
    records: int
    bytes: int
    crc32c: int | None = None  # of the whole file, when the writer knows it


def plan_shards(parts: Sequence[Part], size: ShardSize) -> list[list[Part]]:
    """Group one split's parts into final shards, each an ordered list of parts to join.

    Parts of at least ``min`` bytes stay alone (a writer's full file, a large tail, or a lone
    record above ``max``). Smaller tails are joined in path order until a group reaches
    ``min``; as each tail is below ``min``, a group stays below ``2 * min <= max``. A last
    group still below ``min`` joins the smallest shard it fits into without passing ``max``;
    otherwise it is the one shard allowed outside the band. Output order is deterministic.

    Args:
        parts: one split's staged parts (path, records, bytes, crc32c).
        size: the shard-size band.

    Returns:
        The final shards in order, each the list of parts to join.
    """
    parts = sorted(parts, key=lambda p: p.path)
    shards: list[list[Part]] = [[p] for p in parts if p.bytes >= size.min]
    group: list[Part] = []
    group_bytes = 0
    for part in (p for p in parts if p.bytes < size.min):
        group.append(part)
        group_bytes += part.bytes
        if group_bytes >= size.min:
            shards.append(group)
            group, group_bytes = [], 0
    if group:
        fits = [s for s in shards if sum(p.bytes for p in s) + group_bytes <= size.max]
        if fits:
            smallest = min(fits, key=lambda s: (sum(p.bytes for p in s), s[0].path))
            smallest.extend(group)
        else:
            shards.append(group)
    shards.sort(key=lambda s: s[0].path)
    return shards
