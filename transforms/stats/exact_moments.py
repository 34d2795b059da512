"""Mean and standard deviation from sums held exactly, so they do not depend on merge order.

Floating-point sums depend on the order of the additions: Welford's or Chan et al.'s
parallel update is stable, but a different split into bundles changes the last bits of the
mean, and then the statistics file is not the same bytes on every runner. So the sums are
held exactly, as Python integers in fixed point:

* int64 values: ``sum(v)`` and ``sum(v * v)`` as integers. A batch is summed in numpy without
  overflow by splitting every value into 16-bit limbs (each product of two limbs is below
  2**32; a batch of fewer than 2**31 values sums them in int64).
* float values as stored in a FloatList (float32, finite): every float32 is
  ``m * 2**(e - 24)`` with an integer ``|m| < 2**24`` and ``e - 24 >= -172``, so
  ``sum(x) * 2**172`` is an integer; its square is exact in float64 with a 48-bit
  significand, so ``sum(x * x) * 2**345`` is one too. A batch is summed per exponent with
  ``np.bincount`` (exact: each bin stays below 2**53 for batches under 2**29 values).

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

_SUM_SCALE = 172  # 2**-149 (the smallest float32) is 2**23 * 2**-172
_SQUARE_SCALE = 345  # (2**-149)**2 = 2**-298 is 2**47 * 2**-345
_CHUNK = 1 << 28  # values per bincount: keeps every bin exact in float64


def _bins_total(shift: np.ndarray, weights: np.ndarray) -> int:
    """sum(weights[i] * 2**shift[i]) exactly, for integer-valued float64 weights."""
    total = 0
    for start in range(0, shift.size, _CHUNK):
        part = np.bincount(shift[start:start + _CHUNK], weights=weights[start:start + _CHUNK])
        for s in np.flatnonzero(part).tolist():
            total += int(part[s]) << s
    return total


def float32_sums(values: np.ndarray) -> tuple[int, int]:
    """(sum * 2**172, sum of squares * 2**345) of finite float32 values, exactly."""
    x = np.asarray(values, dtype=np.float32).astype(np.float64)
    if not x.size:
        return 0, 0
    m, e = np.frexp(x)  # x = m * 2**e, 0.5 <= |m| < 1 (or 0)
    total = _bins_total((e - 24 + _SUM_SCALE).astype(np.intp), np.ldexp(m, 24))
    m2, e2 = np.frexp(x * x)  # exact: 48 significant bits
    sig = np.ldexp(m2, 48).astype(np.int64)  # >= 0, below 2**48
    shift = (e2 - 48 + _SQUARE_SCALE).astype(np.intp)
    high = _bins_total(shift + 24, (sig >> 24).astype(np.float64))
    low = _bins_total(shift, (sig & 0xFFFFFF).astype(np.float64))
    return total, high + low


def int64_sums(values: np.ndarray) -> tuple[int, int]:
    """(sum, sum of squares) of int64 values, exactly."""
    v = np.asarray(values, dtype=np.int64)
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
    """Count, sum and sum of squares of int64 (``kind="int"``) or float32 values, exact."""

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
        """Add int64 values, or finite float32 values (NaN and infinities are the caller's)."""
        total, square = (int64_sums if self.kind == "int" else float32_sums)(values)
        self.count += int(np.asarray(values).size)
        self.total += total
        self.square += square

    def merge(self, other: ExactMoments) -> ExactMoments:
        """Add ``other``'s sums to these; returns self."""
        if other.kind != self.kind:
            raise ValueError(f"cannot merge {other.kind} moments into {self.kind} moments")
        self.count += other.count
        self.total += other.total
        self.square += other.square
        return self

    def _scales(self) -> tuple[int, int]:
        return (0, 0) if self.kind == "int" else (_SUM_SCALE, _SQUARE_SCALE)

    def mean(self) -> float:
        """The exact mean, rounded once; NaN when empty."""
        if not self.count:
            return math.nan
        return float(Fraction(self.total, self.count << self._scales()[0]))

    def std_dev(self) -> float:
        """The population standard deviation (divided by n, as TFDV reports it); NaN when
        empty."""
        if not self.count:
            return math.nan
        sum_scale, square_scale = self._scales()
        n = self.count
        # (n * sum(x*x) - sum(x)**2) / n**2, with both terms at the squares' scale.
        numerator = n * self.square - (self.total * self.total << (square_scale - 2 * sum_scale))
        return math.sqrt(float(Fraction(numerator, (n * n) << square_scale)))
