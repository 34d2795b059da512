"""The CRC-32C of a concatenation from its pieces' CRC-32Cs and sizes, without their bytes.

A CRC is linear over GF(2): appending ``n`` bytes to a message multiplies the message's
register by ``x^(8n)`` modulo the generator, then adds the appended bytes' own CRC. So a
shard joined from staged parts whose CRC-32Cs the writers computed gets its CRC-32C in a few
thousand integer operations, and the join itself can be a copy the kernel does
(``os.copy_file_range``) with no byte read back into Python. The arithmetic is zlib's
``crc32_combine`` (multiplication modulo the reflected generator, with ``x^(2^k)`` kept for
every ``k``), on Castagnoli's polynomial.

Pure: the standard library only; no Beam, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["crc32c_combine", "crc32c_of_joined"]

_POLY = 0x82F63B78  # CRC-32C's generator, reflected (bit 31 is x^0)
_TOP = 0x80000000  # x^0 in the reflected representation


def _multiply(a: int, b: int) -> int:
    """``a(x) * b(x)`` modulo the generator, both reflected."""
    product = 0
    m = _TOP
    while m:
        if a & m:
            product ^= b
            if not (a & (m - 1)):
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return product


def _powers() -> list[int]:
    """``x^(2^k)`` modulo the generator for k = 0..63 (sizes below 2^61 bytes)."""
    table = [_TOP >> 1]  # x^1
    for _ in range(63):
        table.append(_multiply(table[-1], table[-1]))
    return table


_X2N = _powers()  # _X2N[k] = x^(2^k) mod P


def _x8n(n: int) -> int:
    """``x^(8 n)`` modulo the generator (appending ``n`` zero bytes)."""
    power, k = _TOP, 3  # x^0; 8 n = n * 2^3
    while n:
        if n & 1:
            power = _multiply(_X2N[k], power)
        n >>= 1
        k += 1
    return power


def crc32c_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32C of ``A + B`` from ``crc32c(A)``, ``crc32c(B)`` and ``len(B)``.

    Args:
        crc1: the first piece's CRC-32C.
        crc2: the second piece's CRC-32C.
        len2: the second piece's size in bytes.

    Returns:
        The CRC-32C of the two pieces joined.
    """
    if len2 <= 0:
        return crc1
    return _multiply(_x8n(len2), crc1) ^ crc2


def crc32c_of_joined(pieces: Iterable[tuple[int, int]]) -> int:
    """The CRC-32C of pieces joined in order, from each one's ``(crc32c, size)``.

    Args:
        pieces: each piece's CRC-32C and size in bytes.

    Returns:
        The CRC-32C of their concatenation (0 for none).
    """
    crc = 0
    for piece_crc, size in pieces:
        crc = crc32c_combine(crc, piece_crc, size)
    return crc
