"""Stable train/eval/test assignment: the same record lands in the same split on every run.

The split is chosen from a hash of the record's key field (or, without a key, of the record's
serialized Example, which our encoder makes deterministic). The hash is BLAKE2b of a canonical
byte form of the key -- never Python's ``hash()``, which is salted per process and would
scatter records differently on every worker and every rebuild. Buckets have a resolution of
1/10,000, so percentages such as 33.33 work.

Pure: no Beam, no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from beam_tfrecords.sinks.format.layout import check_name

__all__ = ["BUCKETS", "HASH_DIGEST_SIZE", "HASH_PERSON", "SplitSpec", "digests", "key_bytes"]

BUCKETS = 10_000


NULL_KEY = b"\x00none"  # key_bytes(None): what a missing key hashes as
INT_PREFIX, BYTES_PREFIX = b"\x02", b"\x04"  # before an integer's digits, text or bytes


def key_bytes(value: Any) -> bytes:
    """A canonical byte form of a key value, equal for equal keys across types and runs.

    Integers of any type hash alike (``7``, ``numpy.int32(7)``, ``True`` is not an integer
    here but a bool); text and bytes hash by their UTF-8 bytes; floats by ``repr``.

    Args:
        value: a split key's value: None, bool, number, text or bytes.

    Returns:
        The canonical bytes, prefixed by the value's kind.
    """
    if value is None:
        return NULL_KEY
    if isinstance(value, (bool, np.bool_)):
        return b"\x01" + (b"1" if value else b"0")
    if isinstance(value, (int, np.integer)):
        return INT_PREFIX + str(int(value)).encode()
    if isinstance(value, (float, np.floating, decimal.Decimal)):
        number = float(value)
        if number.is_integer():  # 3.0 and 3 are the same key
            return INT_PREFIX + str(int(number)).encode()
        return b"\x03" + repr(number).encode()
    if isinstance(value, str):
        return BYTES_PREFIX + value.encode("utf-8", "surrogatepass")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return BYTES_PREFIX + bytes(value)
    if isinstance(value, (datetime.date, np.datetime64)):
        return b"\x05" + str(value).encode()
    if isinstance(value, (list, tuple, np.ndarray)):
        return b"\x06" + b"\x1f".join(key_bytes(v) for v in list(value))
    raise TypeError(f"a split key must be a scalar or a list, got {type(value).__name__}")


# The hash every split key goes through, set up once: copying it is cheaper than passing
# digest_size and person to a new BLAKE2b per key (0.44 s against 0.81 s per 1M keys).
# transforms/split_hash_child.py builds the same hasher from these two.
HASH_DIGEST_SIZE, HASH_PERSON = 8, b"btfr-split"
_HASHER = hashlib.blake2b(digest_size=HASH_DIGEST_SIZE, person=HASH_PERSON)


def _digest(key: bytes | memoryview | list[bytes], _copy=_HASHER.copy) -> bytes:
    """The key's hash; a list is a record's pieces, hashed as if joined."""
    digest = _copy()
    if isinstance(key, list):
        for piece in key:
            digest.update(piece)
    else:
        digest.update(key)
    return digest.digest()


def digests(keys: Sequence[bytes | memoryview]) -> bytes:
    """The split hash of every key (canonical key bytes), joined: 8 bytes each, in order.

    Args:
        keys: canonical key bytes (:func:`key_bytes`).

    Returns:
        ``HASH_DIGEST_SIZE`` bytes per key.
    """
    copy = _HASHER.copy

    def digest(key: bytes | memoryview) -> bytes:
        hasher = copy()
        hasher.update(key)
        return hasher.digest()

    return b"".join(map(digest, keys))


@dataclasses.dataclass(frozen=True)
class SplitSpec:
    """Named shares in percent, in order, and the key path (empty: the whole record).

    With ``field`` set the split is not hashed but read from that field of each record (an
    image folder laid out as ``<split>/<label>/<file>``); the shares then only name the
    splits, and a record naming another split is rejected.
    """

    shares: tuple[tuple[str, float], ...] = (("train", 100.0),)
    key: tuple[str, ...] = ()
    field: tuple[str, ...] = ()
    # What a record whose key is missing (null or absent) gets: "reject" (a dead letter) or
    # the name of a split. Hashing one "missing" value would put every such record in one
    # split, quietly.
    null_key: str = "reject"

    def __post_init__(self) -> None:
        if not self.shares:
            raise ValueError("a split spec needs at least one split")
        names = [name for name, _ in self.shares]
        if len(set(names)) != len(names):
            raise ValueError(f"split names repeat: {names}")
        if len({name.lower() for name in names}) != len(names):  # one folder where case folds
            raise ValueError(f"split names differ only by case: {names}")
        if self.field and self.key:
            raise ValueError("a split spec takes the split from a field or hashes a key, "
                             "not both")
        if self.null_key != "reject" and self.null_key not in names:
            raise ValueError(f"null_key {self.null_key!r} is neither 'reject' nor one of the "
                             f"splits ({', '.join(names)})")
        # Buckets are laid out in split-name order, not in the order the config lists them, so
        # reformatting a YAML file (or a tool that sorts keys) never moves records between
        # splits. The last bound is BUCKETS exactly, so no bucket is lost.
        ordered = sorted(self.shares)
        bounds, total = [], 0.0
        for _, pct in ordered:
            total += pct
            bounds.append(round(total * BUCKETS / 100.0))
        bounds[-1] = BUCKETS
        object.__setattr__(self, "_ranges", tuple(zip((n for n, _ in ordered), bounds)))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.shares)

    def choose(self, key: bytes | list[bytes]) -> str:
        """The split of a record whose key (or serialized content, maybe as pieces) is
        ``key``.

        Args:
            key: the canonical key bytes, or the record's serialized pieces.

        Returns:
            The split's name.
        """
        if len(self.shares) == 1:
            return self.shares[0][0]
        bucket = int.from_bytes(_digest(key), "big") % BUCKETS
        for name, bound in self._ranges:  # type: ignore[attr-defined]
            if bucket < bound:
                return name
        return self._ranges[-1][0]  # type: ignore[attr-defined]

    def null_split(self) -> str | None:
        """The split of a record whose key is missing; None: it is rejected.

        Returns:
            A split's name, or None.
        """
        return None if self.null_key == "reject" else self.null_key

    @property
    def null_reason(self) -> str:
        return (f"split key {'.'.join(self.key)!r} is missing (null or absent); "
                "splits.null_key: reject -- name a split there to keep such records")

    def choose_many(self, keys: Sequence[bytes | memoryview]) -> np.ndarray:
        """For every key, the index in :attr:`names` of :meth:`choose`; one hashing pass and
        whole-array bucket lookups, for a batch of records.

        Args:
            keys: canonical key bytes, one per record.

        Returns:
            int64 split indices.
        """
        if len(self.shares) == 1:
            return np.zeros(len(keys), dtype=np.int64)
        return self.choose_digests(digests(keys))

    def choose_digests(self, joined: bytes) -> np.ndarray:
        """:meth:`choose_many` of keys whose :func:`digests` are ``joined``.

        Args:
            joined: the keys' digests, back to back.

        Returns:
            int64 split indices.
        """
        if len(self.shares) == 1:
            return np.zeros(len(joined) // HASH_DIGEST_SIZE, dtype=np.int64)
        names = list(self.names)
        ranges = self._ranges  # type: ignore[attr-defined]
        buckets = np.frombuffer(joined, dtype=">u8") % np.uint64(BUCKETS)
        bounds = np.asarray([bound for _, bound in ranges], dtype=np.uint64)
        which = np.minimum(np.searchsorted(bounds, buckets, side="right"), len(ranges) - 1)
        codes = np.asarray([names.index(name) for name, _ in ranges], dtype=np.int64)
        return codes[which]

    def named(self, value: Any) -> str:
        """The split a record names in ``field``; ValueError when it is not one of ours.

        Args:
            value: the record's ``field`` value (text or UTF-8 bytes).

        Returns:
            The split's name.

        Raises:
            ValueError: not one of the splits (or not a valid split name).
        """
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, str):
            check_name("split", value)  # the layout's own check first: a value, never a path
        if not isinstance(value, str) or value not in self.names:
            raise ValueError(f"names split {value!r}, expected one of {', '.join(self.names)}")
        return value
