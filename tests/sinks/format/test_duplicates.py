"""Duplicates and leaks counted by fingerprint (sinks/format/duplicates.py), against a
``collections.Counter`` over the records themselves: fingerprints cut into buckets and
bundles, merged in any order, give the reference's counts; the fingerprint's bound rests on
the two CRC polynomials being coprime, which is checked here, not assumed."""

from __future__ import annotations

import collections
import random
import zlib

import crc32c
import numpy as np
from beam_tfrecords_tests_helpers import duplicate_counts

from beam_tfrecords.runtime.serialized_batch import SerializedBatch
from beam_tfrecords.sinks.format import duplicates as dup
from beam_tfrecords.sinks.format import tfrecord_format as tff


def _fps(records: list[bytes]) -> np.ndarray:
    return dup.fingerprints([crc32c.crc32c(r) for r in records],
                            [zlib.crc32(r) for r in records], [len(r) for r in records])


def _planted(seed: int = 3) -> dict[str, list[bytes]]:
    rng = random.Random(seed)
    train = [b"row-%d-" % i + bytes(rng.randrange(256) for _ in range(rng.randrange(30)))
             for i in range(400)]
    eval_ = [b"row-%d-eval" % i for i in range(120)]
    train += train[:25] + train[:5] + eval_[:7]  # duplicates, a triple, leaks from eval
    eval_ += train[100:104] + train[100:102]  # leaks into eval, two of them twice
    test = [b""] * 3 + [train[7]]  # empty records are records too
    for records in (train, eval_, test):
        rng.shuffle(records)
    return {"train": train, "eval": eval_, "test": test}


def _counted(by_split: dict[str, list[bytes]], bundles: int, seed: int = 0,
             capacity: int = dup.CAPACITY, held: list[int] | None = None) -> dict:
    """The records cut into ``bundles`` random bundles, each cut by bucket as a writer hands
    them on, then merged per bucket in a shuffled order, as the combiner may (``held``
    collects how many fingerprints each accumulator held after each step)."""
    rng = random.Random(seed)
    per_bucket: dict[int, list[dup.FingerprintCounts]] = collections.defaultdict(list)
    for b in range(bundles):
        tally = dup.FingerprintCounts(capacity)
        for split, records in by_split.items():
            share = records[b::bundles]
            if share:
                tally.add(split, _fps(share))
        for bucket, part in tally.by_bucket().items():
            per_bucket[bucket].append(part)
    results = []
    for parts in per_bucket.values():
        rng.shuffle(parts)
        acc = dup.FingerprintCounts(capacity)
        for part in parts:
            acc.merge(part)
            if rng.random() < 0.5:
                acc.compact()
            if held is not None:
                held.append(sum(f.size for f, _ in acc.splits.values()) + acc.pending)
        results.append(acc.result())
    rng.shuffle(results)
    return dup.summarize(results, sorted(by_split))


def test_counts_match_a_counter_over_the_records_in_any_bundling_and_merge_order():
    data = _planted()
    want = duplicate_counts(data)
    assert want["splits"]["train"]["duplicates"] == 30  # planted: 25 copies and 5 more
    for bundles in (1, 3, 17):
        got = _counted(data, bundles, seed=bundles)
        assert {k: got[k] for k in want} == want, bundles


def test_clean_data_counts_nothing_and_shows_no_example():
    data = {"train": [b"a%d" % i for i in range(300)], "eval": [b"b%d" % i for i in range(50)]}
    got = _counted(data, 4)
    assert got["in_several_splits"] == 0 and got["examples"] == []
    assert all(c["duplicates"] == 0 and c["leaked"] == 0 for c in got["splits"].values())
    assert got["splits"]["train"]["records"] == 300


def test_a_split_no_record_reached_counts_zeros():
    got = dup.summarize([], ["train", "eval"])
    assert got["splits"] == {s: {"records": 0, "distinct": 0, "duplicates": 0, "leaked": 0}
                             for s in ("eval", "train")}


def test_examples_are_the_smallest_repeated_fingerprints_with_their_copies():
    data = _planted()
    got = _counted(data, 5)
    repeated = {}
    for split, records in data.items():
        for fp in _fps(records).tolist():
            repeated.setdefault(fp, collections.Counter())[split] += 1
    want = sorted(fp for fp, c in repeated.items() if sum(c.values()) > 1)[:dup.EXAMPLES_KEPT]
    assert [e["fingerprint"] for e in got["examples"]] == [f"{fp:016x}" for fp in want]
    for example in got["examples"]:
        assert example["copies"] == dict(sorted(repeated[int(example["fingerprint"], 16)].items()))


def test_a_sampled_repeated_record_keeps_its_bytes_for_the_preview():
    """Records whose fingerprint is below SAMPLE_BELOW keep their first bytes, every copy
    alike; a repeated one is then shown with the preview of those bytes."""
    candidates = [b"record %d" % i for i in range(40_000)]
    fps = _fps(candidates)
    (first, *_) = [r for r, fp in zip(candidates, fps.tolist()) if fp < dup.SAMPLE_BELOW]
    records = [b"x%d" % i for i in range(50)] + [first, first]
    payload = b"".join(records)
    offsets = np.cumsum([0] + [len(r) for r in records])
    got_fps, samples = dup.batch_fingerprints(payload, offsets,
                                              tff.record_crcs(payload, offsets))
    assert got_fps.tolist() == _fps(records).tolist()
    fp = int(_fps([first])[0])
    assert samples == {fp: (len(first), first)}
    acc = dup.FingerprintCounts()
    acc.add("train", got_fps)
    acc.add_samples(samples)
    (example,) = dup.summarize([acc.result()], ["train"], preview=lambda b: b.decode())[
        "examples"]
    assert example == {"fingerprint": f"{fp:016x}", "copies": {"train": 2},
                       "bytes": len(first), "preview": first.decode()}


def test_records_as_pieces_get_the_fingerprints_of_the_joined_records():
    records = [b"a" * 5000, b"", b"bc" * 3000, b"a" * 5000]
    pieces = [[r[:7], r[7:100], r[100:]] for r in records]
    batch = SerializedBatch.from_records(records)
    joined, _ = dup.batch_fingerprints(batch.payload, batch.offsets,
                                       tff.record_crcs(batch.payload, batch.offsets))
    split, _ = dup.batch_fingerprints(None, batch.offsets, tff.record_piece_crcs(pieces),
                                      pieces)
    assert joined.tolist() == split.tolist() == _fps(records).tolist()
    assert tff.record_piece_crc32s(pieces).tolist() == [zlib.crc32(r) for r in records]


def _gf2_mod(a: int, b: int) -> int:
    while a and a.bit_length() >= b.bit_length():
        a ^= b << (a.bit_length() - b.bit_length())
    return a


def _gf2_gcd(a: int, b: int) -> int:
    while b:
        a, b = b, _gf2_mod(a, b)
    return a


CRC32 = (1 << 32) | 0x04C11DB7  # zlib's CRC-32 generator
CRC32C = (1 << 32) | 0x1EDC6F41  # Castagnoli's


def test_the_two_crc_polynomials_are_coprime_so_a_collision_needs_a_degree_64_multiple():
    """What the bound in the module's docstring rests on: the generators share no factor, so
    a difference of two same-length records fools both CRCs only when their product (degree
    64) divides it."""
    assert _gf2_gcd(CRC32, CRC32C) == 1


def test_records_of_one_length_differing_within_eight_bytes_never_collide():
    rng = random.Random(7)
    base = bytes(rng.randrange(256) for _ in range(200))
    variants = {base}
    for _ in range(20_000):
        at = rng.randrange(len(base) - 8)
        changed = bytearray(base)
        changed[at:at + 8] = bytes(rng.randrange(256) for _ in range(8))
        variants.add(bytes(changed))
    variants = sorted(variants)
    assert len(set(_fps(variants).tolist())) == len(variants)


def _many(seed: int = 11) -> dict[str, list[bytes]]:
    """20,000 distinct records in three splits, with 2,000 duplicated (some several times)
    and 600 leaked: too many for a small capacity, so the counts come from a sample."""
    rng = random.Random(seed)
    distinct = [b"r%d:%d" % (i, rng.randrange(10**9)) for i in range(20_000)]
    train, eval_, test = distinct[:14_000], distinct[14_000:18_000], distinct[18_000:]
    train = train + train[:1_500] + train[:300] + eval_[:400]
    eval_ = eval_ + eval_[100:300] + train[2_000:2_200]
    return {"train": train, "eval": eval_, "test": test}


def test_past_its_capacity_a_bucket_keeps_a_sample_whose_counts_are_the_same_in_any_order():
    """Memory is bounded: an accumulator holds at most its capacity of fingerprints, plus what
    waits to be folded (less than the capacity again); past it the counts are estimated from
    the records whose fingerprints are smallest, and the estimate is a function of the data:
    the same document whatever the bundles and merge order."""
    data = _many()
    want = duplicate_counts(data)
    held: list[int] = []
    runs = [_counted(data, bundles, seed=bundles, capacity=256, held=held)
            for bundles in (1, 4, 23)]
    assert runs[0] == runs[1] == runs[2]
    assert max(held) < 2 * 256
    got = runs[0]
    assert got["exact"] is False and got["sampled"] in (1 / 4, 1 / 8)
    for split, counts in want["splits"].items():
        mine = got["splits"][split]
        assert mine["records"] == counts["records"]  # records are counted, not sampled
        assert mine["distinct"] == mine["records"] - mine["duplicates"]
        for key in ("duplicates", "leaked"):
            error = mine["standard_error"][key]
            assert abs(mine[key] - counts[key]) <= 4 * error + 1, (split, key, mine, counts)
            if counts[key] >= 400:
                assert 0 < error < counts[key] / 3, (split, key, error)


def test_a_sample_keeps_the_smallest_repeated_fingerprints_as_its_examples():
    data = _many()
    exact = _counted(data, 3)
    sampled = _counted(data, 3, capacity=256)
    assert exact["exact"] is True and "sampled" not in exact
    assert sampled["examples"] == exact["examples"] and len(exact["examples"]) == 5


def test_kept_samples_are_bounded_and_the_same_in_any_order():
    """Sampled records' bytes: at most SAMPLES_KEPT per accumulator, the smallest
    fingerprints, whichever bundles carried them."""
    rng = random.Random(5)
    samples = {rng.randrange(dup.SAMPLE_BELOW): (3, b"abc") for _ in range(4_000)}
    kept = []
    for bundles in (1, 5):
        rng = random.Random(bundles)
        acc = dup.FingerprintCounts(samples_kept=16)
        parts = [dup.FingerprintCounts(samples_kept=16) for _ in range(bundles)]
        for fp, sample in samples.items():
            parts[rng.randrange(bundles)].add_samples({fp: sample})
        for part in parts:
            acc.merge(part)
        assert len(acc.samples) <= 16
        kept.append(sorted(acc.samples))
    assert kept[0] == kept[1] and kept[0] == sorted(samples)[:len(kept[0])]
    assert len(kept[0]) >= 8  # the bound halves at each step: at least half of it is used


def test_an_accumulator_crosses_between_workers_in_about_eight_bytes_a_distinct_record():
    """Beam pickles accumulators between the workers and through the runner: the counts of a
    bucket whose records are mostly distinct travel as their few entries other than 1, and
    every count, pending or folded, comes back as it was."""
    import pickle

    data = _many()
    acc = dup.FingerprintCounts()
    for split, records in data.items():
        acc.add(split, _fps(records))
    acc.compact()
    acc.add("train", _fps(data["train"][:500]))  # waiting, with repeats of folded ones
    kept = sum(fps.size for fps, _ in acc.splits.values()) + acc.pending
    repeated = sum(int((counts != 1).sum()) for _, counts in acc.splits.values()
                   if counts is not None)
    assert 0 < repeated < kept / 5
    wire = pickle.dumps(acc, pickle.HIGHEST_PROTOCOL)
    assert len(wire) < 8 * kept + 12 * repeated + 4_000  # dense: 16 bytes a record
    back = pickle.loads(wire)
    for split, (fps, counts) in acc.splits.items():
        got_fps, got_counts = back.splits[split]
        assert np.array_equal(got_fps, fps)
        assert (got_counts is None) == (counts is None)
        if counts is not None:
            assert got_counts.dtype == np.int64 and np.array_equal(got_counts, counts)
    assert back.pending == acc.pending and back.records == acc.records
    assert back.result() == acc.result()
