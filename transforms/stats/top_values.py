"""The most frequent values of a bytes feature: exact up to a capacity, then Misra-Gries.

The sketch holds at most ``capacity`` counters (value -> count). While the data holds at most
``capacity`` distinct values nothing is ever dropped: every count is exact, and so are the
top values, the rank histogram and their order (ties broken by the value's bytes, the
larger first: TensorFlow Data Validation's order, so a tie cut by its 20 top values keeps the
values TFDV keeps).
That case is deterministic: the same result for any split into bundles and merge order.

Beyond ``capacity`` distinct values the sketch is a mergeable Misra-Gries summary (Agarwal et
al., "Mergeable summaries", 2012): when an update or a merge leaves more than ``capacity``
counters, the ``capacity + 1``-th largest count is subtracted from every counter and those
left at zero or below are dropped. Each reported count ``c`` of a value of true count ``f``
then satisfies ``f - (n - N) / (capacity + 1) <= c <= f``, with ``n`` the values added and
``N`` the sum of the counters; every value more frequent than ``n / (capacity + 1)`` is kept.
Which values are kept and their counts then *may depend on the split into bundles and the
merge order*: documented as not deterministic (:meth:`TopValues.exact` says which case holds;
it is itself deterministic, as it depends only on the number of distinct values in the whole
data: the first merge whose union passes the capacity is reached in every merge tree).

Values longer than :data:`MAX_KEY_BYTES` (image bytes, documents) are counted under a key
made of whether they are UTF-8, their length, a 16-byte BLAKE2b digest and their first 32
bytes, shown as that prefix and their length; shorter values are their own key. Memory: at
most ``capacity`` keys of at most 65 bytes plus a Python int each: about 200 bytes per
counter with the dictionary's own overhead, 50 KiB at the default capacity of 256.

Pure: the standard library and numpy.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np

__all__ = ["DEFAULT_CAPACITY", "MAX_KEY_BYTES", "TopValues", "key_is_utf8", "key_label",
           "value_key"]

DEFAULT_CAPACITY = 256
MAX_KEY_BYTES = 64
_SHORT, _LONG, _LONG_BINARY = b"=", b"#", b"!"


def value_key(value: bytes) -> bytes:
    """The counter key of ``value``: itself (marked) when short, else a digest key (marked
    by whether the whole value is UTF-8, which its preview cannot tell).

    Args:
        value: the value's bytes.

    Returns:
        The key.
    """
    if len(value) <= MAX_KEY_BYTES:
        return _SHORT + value
    digest = hashlib.blake2b(value, digest_size=16).digest()
    try:
        value.decode("utf-8")
        mark = _LONG
    except UnicodeDecodeError:
        mark = _LONG_BINARY
    return mark + len(value).to_bytes(8, "big") + digest + value[:32]


def key_label(key: bytes) -> tuple[bytes, int]:
    """(the value, or the first 32 bytes of a long one; the value's length) of a key.

    Args:
        key: a :func:`value_key`.

    Returns:
        The value's bytes (or a long value's first 32), and its length.
    """
    if key[:1] == _SHORT:
        return key[1:], len(key) - 1
    return key[25:], int.from_bytes(key[1:9], "big")


def key_is_utf8(key: bytes) -> bool:
    """Whether the value of a key is UTF-8 (of a long one, the whole value).

    Args:
        key: a :func:`value_key`.

    Returns:
        Whether the value is UTF-8 text.
    """
    if key[:1] == _LONG_BINARY:
        return False
    try:
        key_label(key)[0].decode("utf-8")
        return True
    except UnicodeDecodeError:
        return key[:1] == _LONG  # a preview may split a character of a UTF-8 value


class TopValues:
    """Counts of the most frequent values; see the module docstring.

    Args:
        capacity: the most counters kept (Misra-Gries); past it, counts are lower bounds.

    Raises:
        ValueError: a capacity below 1.
    """

    __slots__ = ("capacity", "counters", "total", "pruned")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"TopValues needs a capacity of at least 1, got {capacity}")
        self.capacity = capacity
        self.counters: dict[bytes, int] = {}
        self.total = 0  # values added
        self.pruned = False  # True once a counter was dropped: counts are lower bounds

    def __getstate__(self):
        return (self.capacity, self.counters, self.total, self.pruned)

    def __setstate__(self, state) -> None:
        self.capacity, self.counters, self.total, self.pruned = state

    def exact(self) -> bool:
        """True while every count is exact (at most ``capacity`` distinct values seen).

        Returns:
            Whether the counts are exact.
        """
        return not self.pruned

    def add_counts(self, keys: Iterable[bytes], counts: Iterable[int], dropped: int = 0
                   ) -> None:
        """Add ``counts[i]`` occurrences of each :func:`value_key` ``keys[i]``, and
        ``dropped`` occurrences a :meth:`batch_cut` took away (counted in the total only).

        Args:
            keys: :func:`value_key` of each value.
            counts: how often each occurred.
            dropped: occurrences a batch cut removed.
        """
        counters = self.counters
        for key, count in zip(keys, counts):
            counters[key] = counters.get(key, 0) + count
            self.total += count
        if dropped:
            self.total += dropped
            self.pruned = True
        self._prune()

    def batch_cut(self, counts: np.ndarray) -> tuple[np.ndarray | None, int]:
        """A batch's own Misra-Gries summary before its values become Python objects: (the
        values to keep, the count to subtract from each), or (None, 0) while the batch has
        at most ``capacity`` distinct values. Merging that summary keeps the bound stated
        above: Misra-Gries summaries merge (Agarwal et al.).

        Args:
            counts: the batch's count of each distinct value.

        Returns:
            A bool mask of the values to keep and the cut, or ``(None, 0)``.
        """
        if counts.size <= self.capacity:
            return None, 0
        cut = int(np.partition(counts, counts.size - self.capacity - 1)[
            counts.size - self.capacity - 1])  # the (capacity + 1)-th largest count
        return counts > cut, cut

    def merge(self, other: TopValues) -> TopValues:
        """Add ``other``'s counters to these; returns self.

        Args:
            other: counters of the same capacity.

        Returns:
            These counters.

        Raises:
            ValueError: the capacities differ.
        """
        if other.capacity != self.capacity:
            raise ValueError(f"cannot merge top values of capacity {other.capacity} into "
                             f"capacity {self.capacity}")
        counters = self.counters
        for key, count in other.counters.items():
            counters[key] = counters.get(key, 0) + count
        self.total += other.total
        self.pruned = self.pruned or other.pruned
        self._prune()
        return self

    def _prune(self) -> None:
        if len(self.counters) <= self.capacity:
            return
        counts = np.fromiter(self.counters.values(), dtype=np.int64, count=len(self.counters))
        cut = int(np.partition(counts, counts.size - self.capacity - 1)[
            counts.size - self.capacity - 1])  # the (capacity + 1)-th largest count
        self.counters = {k: c - cut for k, c in self.counters.items() if c > cut}
        self.pruned = True

    def ranked(self, limit: int | None = None) -> list[tuple[bytes, int]]:
        """[(key, count)] by count, then by the value's (preview's) bytes, then by key, all
        descending (TFDV's order of ties); at most ``limit``.

        Args:
            limit: the most pairs returned; None for all.

        Returns:
            ``(key, count)`` pairs.
        """
        items = sorted(self.counters.items(), key=lambda kc: (kc[1], key_label(kc[0])[0],
                                                              kc[0]), reverse=True)
        return items if limit is None else items[:limit]
