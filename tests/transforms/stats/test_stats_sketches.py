"""The sketches on their own: the hash, the exact regimes and their edges, the tie rule."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from beam_tfrecords.transforms.stats.distinct import DistinctSketch, hash_bytes
from beam_tfrecords.transforms.stats.order_sketch import OrderSketch
from beam_tfrecords.transforms.stats.top_values import TopValues, key_label, value_key

# Known answers: unique counts of versions built at different times are compared by the
# drift gate, so the hash must never change silently.
HASHES = {b"": 0, b"a": 10426612676483016578, b"abcdefgh": 16797570122790768132,
          b"abcdefghi": 13990931924227368700, "zoë".encode(): 1588726104098446173,
          b"x" * 64: 1266570799022700303, b"x" * 65: 3947904110462928320}


def test_the_hash_is_pinned_and_long_values_use_blake2b():
    assert dict(zip(HASHES, hash_bytes(list(HASHES)).tolist())) == HASHES
    digest = hashlib.blake2b(b"x" * 65, digest_size=8).digest()
    assert HASHES[b"x" * 65] == int.from_bytes(digest, "little")


def test_a_value_hashes_the_same_in_any_batch():
    rng = np.random.default_rng(2)
    values = [bytes(rng.integers(0, 256, rng.integers(0, 80)).astype(np.uint8))
              for _ in range(3000)]
    together = hash_bytes(values).tolist()
    alone = [int(hash_bytes([v])[0]) for v in values[:200]]
    assert together[:200] == alone
    assert len(set(together)) == len(set(values))  # no collision among 3,000 values


def test_distinct_counts_are_exact_up_to_the_capacity_then_estimated():
    sketch = DistinctSketch(exact_capacity=100)
    sketch.add_hashes(hash_bytes([b"%d" % i for i in range(100)] * 3))
    assert sketch.exact() and sketch.count() == 100
    sketch.add_hashes(hash_bytes([b"one more"]))
    assert not sketch.exact() and abs(sketch.count() - 101) <= 3


def test_order_sketch_is_exact_up_to_its_capacity():
    sketch = OrderSketch("int", capacity=16)
    sketch.add(np.arange(16) * 1000)
    assert sketch.exact() and sketch.quantile(0.5) == 7000.0
    sketch.add(np.array([5]))
    assert not sketch.exact() and sketch.keys.size <= 16
    assert (sketch.min_value(), sketch.max_value()) == (0.0, 15000.0)  # still exact
    with pytest.raises(ValueError, match="cannot merge a float sketch"):
        sketch.merge(OrderSketch("float", capacity=16))


def test_top_values_break_ties_as_tfdv_does_and_key_long_values_by_digest():
    """Ties go to the larger value first, as TFDV's ``Top.PerKey`` of (count, value) does,
    so the values a tie cut at its 20th keeps are TFDV's (tests/consumers/test_stats_tfdv.py)."""
    top = TopValues(capacity=8)
    long = b"L" * 100
    top.add_counts([value_key(v) for v in (b"b", b"a", long, b"c")], [2, 2, 5, 1])
    ranked = [(key_label(k), c) for k, c in top.ranked()]
    assert ranked == [((b"L" * 32, 100), 5), ((b"b", 1), 2), ((b"a", 1), 2), ((b"c", 1), 1)]
    assert value_key(long) != value_key(b"L" * 99 + b"M")  # same preview, other value
