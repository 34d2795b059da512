"""Is a sequence of labels in class order? What the shuffle warning (output.shuffle) asks.

An image folder ``<split>/<label>/<file>`` is read label by label, and without a shuffle it is
written so: the first shards hold the first classes, and a reader that interleaves a few
shards with a shuffle buffer of a few thousand records trains on batches of one or two
classes. Class order shows as far fewer label changes between neighbours than a random order
of the same labels gives: (n - 1) * (1 - sum of p_i**2) on average.

Pure: no Beam, no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

__all__ = ["adjacent_changes", "expected_changes", "is_class_ordered"]


def adjacent_changes(labels: Sequence[object]) -> int:
    """How many neighbours in ``labels`` differ.

    Args:
        labels: the labels in reading order.

    Returns:
        The count.
    """
    return sum(1 for a, b in zip(labels, labels[1:]) if a != b)


def expected_changes(labels: Sequence[object]) -> float:
    """The mean of :func:`adjacent_changes` over random orders of the same labels.

    Args:
        labels: the labels in reading order.

    Returns:
        The expected count.
    """
    n = len(labels)
    if n < 2:
        return 0.0
    counts = Counter(labels).values()
    # P(two neighbours differ) in a random permutation without replacement.
    same = sum(c * (c - 1) for c in counts) / (n * (n - 1))
    return (n - 1) * (1.0 - same)


def is_class_ordered(labels: Sequence[object]) -> bool:
    """True when there are at least two labels and the neighbours change less than half as
    often as at random -- folders read one class after another.

    Args:
        labels: the labels in reading order.

    Returns:
        Whether the order looks sorted by class.
    """
    expected = expected_changes(labels)
    return len(set(labels)) > 1 and adjacent_changes(labels) < 0.5 * expected
