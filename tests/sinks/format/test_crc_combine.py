"""The CRC-32C of joined pieces from theirs (sinks/format/crc_combine.py), against the
crc32c library over the joined bytes: empty pieces, one-byte pieces, sizes across powers of
two, and many pieces."""

from __future__ import annotations

import os
import random

import crc32c

from beam_tfrecords.sinks.format.crc_combine import crc32c_combine, crc32c_of_joined


def test_two_pieces_combine_to_the_crc_of_their_join():
    rng = random.Random(4)
    sizes = [0, 1, 2, 3, 4, 7, 8, 255, 256, 257, 4095, 4096, 65_537]
    for _ in range(200):
        a = os.urandom(rng.choice(sizes + [rng.randrange(10_000)]))
        b = os.urandom(rng.choice(sizes + [rng.randrange(10_000)]))
        assert crc32c_combine(crc32c.crc32c(a), crc32c.crc32c(b), len(b)) == \
            crc32c.crc32c(a + b), (len(a), len(b))


def test_many_pieces_and_none():
    rng = random.Random(5)
    pieces = [os.urandom(rng.randrange(0, 50_000)) for _ in range(60)] + [b""]
    assert crc32c_of_joined((crc32c.crc32c(p), len(p)) for p in pieces) == \
        crc32c.crc32c(b"".join(pieces))
    assert crc32c_of_joined([]) == 0 == crc32c.crc32c(b"")


def test_a_large_second_piece_by_its_size_alone():
    """A shard's size (150 MB of zeros, whose CRC-32C the library computes chunk by chunk),
    and past 2^32 bytes, where joining in either grouping must agree."""
    chunk = bytes(1 << 20)
    head = b"header"
    zeros, joined = 0, crc32c.crc32c(head)
    for _ in range(150):
        zeros = crc32c.crc32c(chunk, zeros)
        joined = crc32c.crc32c(chunk, joined)
    assert crc32c_combine(crc32c.crc32c(head), zeros, 150 << 20) == joined
    big, size = zeros, 150 << 20
    while size < 1 << 34:  # zeros doubled by combining: 150 MB * 2^7 > 2^34 bytes
        big, size = crc32c_combine(big, big, size), 2 * size
    one_go = crc32c_combine(crc32c.crc32c(head), crc32c_combine(big, zeros, 150 << 20),
                            size + (150 << 20))
    in_two = crc32c_combine(crc32c_combine(crc32c.crc32c(head), big, size), zeros, 150 << 20)
    assert one_go == in_two
