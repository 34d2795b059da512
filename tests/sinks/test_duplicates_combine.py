"""``DuplicatesCombineFn`` under Beam: writers' shares of fingerprints combined per bucket by
``CombinePerKey`` give the document the pure accumulators give -- exact below the capacity,
and the same sampled estimate past it (the combiner's lifting, bundles and merge order do
not change a bucket's level)."""

from __future__ import annotations

import random

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_tfrecords.sinks.duplicates import DuplicatesCombineFn
from beam_tfrecords.sinks.format import duplicates as dup


def _shares(writers: int = 6) -> tuple[list[tuple[int, dup.FingerprintCounts]], dict]:
    """Fingerprints of 12,000 records (2,000 of them again, 500 in a second split) cut
    among ``writers`` writers as they hand them on, and the counts one accumulator of
    unbounded capacity gives."""
    rng = np.random.default_rng(3)
    train = rng.integers(0, 2**63, 10_000, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    eval_ = rng.integers(0, 2**63, 2_000, dtype=np.uint64) * np.uint64(2)
    by_split = {"train": np.concatenate([train, train[:2_000], eval_[:500]]), "eval": eval_}
    whole = dup.FingerprintCounts(capacity=1 << 30)
    shares = []
    for w in range(writers):
        tally = dup.FingerprintCounts()
        for split, fps in by_split.items():
            tally.add(split, fps[w::writers])
            if not w:
                whole.add(split, fps)
        shares += sorted(tally.by_bucket().items())
    random.Random(1).shuffle(shares)
    return shares, dup.summarize([whole.result()], ["eval", "train"])


def _combined_is(shares, capacity: int, want: dict) -> None:
    with TestPipeline() as p:
        got = (p | beam.Create(shares, reshuffle=False)
               | beam.CombinePerKey(DuplicatesCombineFn(capacity))
               | beam.Values()
               | beam.combiners.ToList()
               | beam.Map(dup.summarize, ["eval", "train"]))
        assert_that(got, equal_to([want]))


@pytest.mark.slow  # two pipelines
def test_under_beam_the_buckets_count_exactly_below_their_capacity_and_alike_past_it():
    shares, exact = _shares()
    assert exact["splits"]["train"]["duplicates"] == 2_000 and exact["in_several_splits"] == 500
    _combined_is(shares, dup.CAPACITY, exact)
    pure = dup.summarize([acc.result() for acc in _per_bucket(shares, 128).values()],
                         ["eval", "train"])
    assert pure["exact"] is False
    train = pure["splits"]["train"]
    assert abs(train["duplicates"] - 2_000) <= 4 * train["standard_error"]["duplicates"]
    _combined_is(shares, 128, pure)


def _per_bucket(shares, capacity: int) -> dict[int, dup.FingerprintCounts]:
    accs: dict[int, dup.FingerprintCounts] = {}
    for bucket, part in shares:
        accs.setdefault(bucket, dup.FingerprintCounts(capacity)).merge(part)
    return accs
