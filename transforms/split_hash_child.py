"""The split-key hashing process: BLAKE2b of a batch's keys on another core, beside the build.

Run by :mod:`transforms.split_hasher` as ``python -I -S split_hash_child.py DIGEST_SIZE
PERSON_HEX`` -- by path, with the standard library only, so it starts in milliseconds and never
imports Beam. It reads requests from stdin (:data:`codec.split_keys.REQUEST_HEADER`, then the
payload) and answers each with one digest per key, in order, on stdout. The bytes hashed are
exactly ``splits.key_bytes`` of each key: ``0x02`` + the decimal digits of an integer or of a
whole float, ``0x03`` + the ``repr`` of any other float, ``0x04`` + the bytes of a string or
binary value. End of input ends the process.
"""

import hashlib
import os
import struct
import sys

HEADER = struct.Struct("<cqq")  # == codec.split_keys.REQUEST_HEADER (a test holds them equal)


def _read(fd: int, size: int) -> bytearray | None:
    """Exactly ``size`` bytes, or None at the end of input before the first."""
    buf = bytearray(size)
    view, got = memoryview(buf), 0
    while got < size:
        n = os.readv(fd, [view[got:]])
        if n == 0:
            if got == 0:
                return None
            raise EOFError(f"input ended {size - got} bytes into a request")
        got += n
    return buf


def digests(kind: bytes, count: int, payload: bytearray, ints, texts, floats=None) -> bytes:
    """The digests of one request's keys, joined; ``ints``, ``texts`` and ``floats`` are the
    split hasher with the integer, the bytes and the float prefix already absorbed.

    Args:
        kind: ``b"i"`` (int64), ``b"u"`` (uint64), ``b"f"`` (float64) or ``b"b"`` (binary)
            keys.
        count: how many keys the payload holds.
        payload: the keys: packed numbers, or offsets then bytes.
        ints: a BLAKE2b hasher fed the integer prefix.
        texts: a BLAKE2b hasher fed the bytes prefix.
        floats: a BLAKE2b hasher fed the prefix of a float that is not whole.

    Returns:
        The digests, back to back.
    """
    view = memoryview(payload)
    if kind in (b"i", b"u"):
        copy = ints.copy

        def one(value: int) -> bytes:
            hasher = copy()
            hasher.update(b"%d" % value)
            return hasher.digest()

        return b"".join(map(one, view.cast("q" if kind == b"i" else "Q")))
    if kind == b"f":
        whole, fraction = ints.copy, floats.copy

        def one_float(value: float) -> bytes:
            if value.is_integer():  # 3.0 and 3 are the same key, as in key_bytes
                hasher = whole()
                hasher.update(b"%d" % int(value))
            else:
                hasher = fraction()
                hasher.update(repr(value).encode())
            return hasher.digest()

        return b"".join(map(one_float, view.cast("d")))
    if kind == b"b":
        offsets = view[:8 * (count + 1)].cast("q")
        data = view[8 * (count + 1):]
        copy = texts.copy

        def one_slice(start: int, stop: int) -> bytes:
            hasher = copy()
            hasher.update(data[start:stop])
            return hasher.digest()

        return b"".join(map(one_slice, offsets[:-1], offsets[1:]))
    raise ValueError(f"unknown request kind {kind!r}")


def main(argv: list[str]) -> int:
    """Answer hashing requests from stdin on stdout until stdin ends.

    Args:
        argv: the command line: program, digest size in bytes, BLAKE2b personalization in hex.

    Returns:
        0, the exit status.

    Raises:
        EOFError: the input ended inside a request.
    """
    base = hashlib.blake2b(digest_size=int(argv[1]), person=bytes.fromhex(argv[2]))
    ints, texts, floats = base.copy(), base.copy(), base.copy()
    ints.update(b"\x02")
    texts.update(b"\x04")
    floats.update(b"\x03")
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    while True:
        header = _read(stdin, HEADER.size)
        if header is None:
            return 0
        kind, count, size = HEADER.unpack(header)
        payload = _read(stdin, size) if size else bytearray()
        if payload is None:
            raise EOFError("input ended before a request's payload")
        out = memoryview(digests(kind, count, payload, ints, texts, floats))
        while out:
            out = out[os.write(stdout, out):]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
