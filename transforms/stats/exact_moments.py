"""Mean and standard deviation from sums held exactly, so they do not depend on merge order.

Floating-point sums depend on the order of the additions: Welford's or Chan et al.'s
parallel update is stable, but a different split into bundles changes the last bits of the
mean, and then the statistics file is not the same bytes on every runner. So the sums are
held exactly, as Python integers in fixed point:

* int64 values: ``sum(v)`` and ``sum(v * v)`` as integers. A batch of small values (the
  common case: every square below 2**62 and their sum below 2**63) is summed in int64; any
  other is split into 16-bit limbs, each product of two limbs below 2**32.
* float values as stored in a FloatList (float32, finite): every float32 is an integer
  significand ``m < 2**24`` times ``2**(e - 150)`` (``e`` its biased exponent, at least 1),
  so ``sum(x) * 2**172`` and ``sum(x * x) * 2**345`` are integers. A batch is summed per
  exponent from the bit patterns (``np.add.at`` in int64 and uint64, which cannot overflow
  in chunks of 2**15 values) and the bins shifted into place.

The mean is the exact ratio rounded once (``float(Fraction)``), and the population standard
deviation is the square root of the exactly rounded population variance
``(n * sum(x*x) - sum(x)**2) / n**2``: within one ulp of the true value for any input, and
the same double whatever the partition. Memory: three integers, below 400 bits each for
float32 data and 200 bits for int64 data (plus the count's own bits).

Pure: numpy and the standard library.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

__all__ = ["ExactMoments"]

_SUM_SCALE = 172  # every float32 is an integer times 2**-149
_SQUARE_SCALE = 345  # every float32 square is an integer times 2**-298
_CHUNK = 1 << 15  # float32 values per set of bins: 2**15 * 2**48 fits in a uint64


def float32_sums(values: np.ndarray) -> tuple[int, int]:
    """(sum * 2**172, sum of squares * 2**345) of finite float32 values, exactly.

    From the bit patterns: a float32 of biased exponent ``e`` and significand ``m`` (the
    implicit leading 1 included, ``m < 2**24``) is ``m * 2**(i - 150)`` with
    ``i = max(e, 1)``. Per ``i``, the signed ``m`` are summed in int64 and the ``m * m``
    (below 2**48) in uint64, ``2**15`` values at a time so neither can overflow; each bin is
    then shifted into place as a Python integer.

    Args:
        values: finite float32 values.

    Returns:
        The two scaled sums as Python integers.
    """
    x = np.ascontiguousarray(values, dtype=np.float32)
    total = 0
    square = 0
    for start in range(0, x.size, _CHUNK):
        bits = x[start:start + _CHUNK].view(np.uint32)
        exponent = (bits >> np.uint32(23)) & np.uint32(0xFF)
        index = np.maximum(exponent, 1).astype(np.intp)
        m = ((bits & np.uint32(0x7FFFFF)) | ((exponent > 0).astype(np.uint32) << 23)
             ).astype(np.int64)
        sums = np.zeros(256, dtype=np.int64)
        np.add.at(sums, index, np.where(bits >> np.uint32(31), -m, m))
        m2 = m.view(np.uint64)
        m2 *= m2
        squares = np.zeros(256, dtype=np.uint64)
        np.add.at(squares, index, m2)
        for i in np.flatnonzero(squares).tolist():
            total += int(sums[i]) << (i + 22)  # m * 2**(i - 150) * 2**172
            square += int(squares[i]) << (2 * i + 45)  # m**2 * 2**(2i - 300) * 2**345
    return total, square


def int64_sums(values: np.ndarray) -> tuple[int, int]:
    """(sum, sum of squares) of int64 values, exactly.

    Args:
        values: int64 values.

    Returns:
        The two sums as Python integers.
    """
    v = np.asarray(values, dtype=np.int64)
    if not v.size:
        return 0, 0
    largest = max(-int(v.min()), int(v.max()))
    if largest < 1 << 31 and largest * largest * v.size < 1 << 63:  # no int64 overflow
        return int(v.sum()), int(np.dot(v, v))
    total = 0
    square = 0
    for start in range(0, v.size, 1 << 30):
        part = v[start:start + (1 << 30)]
        total += (int(np.sum(part >> 32)) << 32) + int(np.sum(part & 0xFFFFFFFF))
        magnitude = np.where(part < 0, (~part.view(np.uint64)) + np.uint64(1),
                             part.view(np.uint64))
        limbs = [((magnitude >> np.uint64(16 * k)) & np.uint64(0xFFFF)).astype(np.int64)
                 for k in range(4)]
        for j in range(4):
            for k in range(j, 4):
                s = int(np.sum(limbs[j] * limbs[k]))
                square += (s << (16 * (j + k))) * (1 if j == k else 2)
    return total, square


class ExactMoments:
    """Count, sum and sum of squares of int64 (``kind="int"``) or float32 values, exact.

    Args:
        kind: ``int`` or ``float``.

    Raises:
        ValueError: another kind.
    """

    __slots__ = ("kind", "count", "total", "square")

    def __init__(self, kind: str) -> None:
        if kind not in ("int", "float"):
            raise ValueError(f"ExactMoments holds 'int' or 'float' values, not {kind!r}")
        self.kind = kind
        self.count = 0
        self.total = 0
        self.square = 0

    def __getstate__(self):
        return (self.kind, self.count, self.total, self.square)

    def __setstate__(self, state) -> None:
        self.kind, self.count, self.total, self.square = state

    def add(self, values: np.ndarray) -> None:
        """Add int64 values, or finite float32 values (NaN and infinities are the caller's).

        Args:
            values: int64 values, or finite float32 values.
        """
        total, square = (int64_sums if self.kind == "int" else float32_sums)(values)
        self.count += int(np.asarray(values).size)
        self.total += total
        self.square += square

    def merge(self, other: ExactMoments) -> ExactMoments:
        """Add ``other``'s sums to these; returns self.

        Args:
            other: moments of the same kind.

        Returns:
            These moments.

        Raises:
            ValueError: the kinds differ.
        """
        if other.kind != self.kind:
            raise ValueError(f"cannot merge {other.kind} moments into {self.kind} moments")
        self.count += other.count
        self.total += other.total
        self.square += other.square
        return self

    def _scales(self) -> tuple[int, int]:
        return (0, 0) if self.kind == "int" else (_SUM_SCALE, _SQUARE_SCALE)

    def mean(self) -> float:
        """The exact mean, rounded once; NaN when empty.

        Returns:
            The mean.
        """
        if not self.count:
            return math.nan
        return float(Fraction(self.total, self.count << self._scales()[0]))

    def std_dev(self) -> float:
        """The population standard deviation (divided by n, as TFDV reports it); NaN when
        empty.

        Returns:
            The standard deviation.
        """
        if not self.count:
            return math.nan
        sum_scale, square_scale = self._scales()
        n = self.count
        # (n * sum(x*x) - sum(x)**2) / n**2, with both terms at the squares' scale.
        numerator = n * self.square - (self.total * self.total << (square_scale - 2 * sum_scale))
        return math.sqrt(float(Fraction(numerator, (n * n) << square_scale)))
