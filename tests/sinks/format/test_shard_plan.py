"""Tests for shard_plan (sinks/format): sizes, the band, rolling, and planning tails."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.sinks.format.shard_plan import (
    Part,
    ShardSize,
    derive_band,
    parse_size,
    plan_shards,
    should_roll_before,
)

MB = 10**6
MiB = 2**20

# --- parse_size ---------------------------------------------------------------------------------

SIZES = [
    ("int", 1234, 1234),
    ("one", 1, 1),
    ("digits", "1234", 1234),
    ("bytes_unit", "10B", 10),
    ("MB", "150MB", 150 * MB),
    ("MiB", "64MiB", 64 * MiB),
    ("KB", "2KB", 2000),
    ("KiB", "2KiB", 2048),
    ("GB_fraction", "1.5GB", 1_500_000_000),
    ("GiB", "1GiB", 2**30),
    ("TB", "2TB", 2 * 10**12),
    ("TiB", "1TiB", 2**40),
    ("lower_case", "150mb", 150 * MB),
    ("mixed_case", "64mib", 64 * MiB),
    ("spaces", "  150 MB ", 150 * MB),
    ("decimal_exact", "1.001MB", 1_001_000),  # float arithmetic would give 1000999
    ("decimal_exact_2", "4.35MB", 4_350_000),
    ("fraction_of_byte_truncated", "0.1KiB", 102),
    ("float_whole", 150e6, 150 * MB),
]


@pytest.mark.parametrize("value, expected", [s[1:] for s in SIZES], ids=[s[0] for s in SIZES])
def test_parse_size(value, expected):
    assert parse_size(value) == expected


BAD_SIZES = [
    ("bool", True),
    ("zero", 0),
    ("negative", -1),
    ("zero_text", "0MB"),
    ("below_one_byte", "0.5B"),
    ("negative_text", "-5MB"),
    ("empty", ""),
    ("unit_only", "MB"),
    ("unknown_unit", "150XB"),
    ("bits", "150Mb/s"),
    ("exponent", "1e8"),
    ("two_points", "1.5.2MB"),
    ("two_numbers", "1 2MB"),
    ("list", [150]),
    ("none", None),
]


@pytest.mark.parametrize("value", [s[1] for s in BAD_SIZES], ids=[s[0] for s in BAD_SIZES])
def test_parse_size_refuses(value):
    with pytest.raises(ValueError, match="size must"):
        parse_size(value)


# --- ShardSize ----------------------------------------------------------------------------------

def test_shard_size_defaults():
    size = ShardSize()
    assert (size.min, size.target, size.max) == (100 * MB, 150 * MB, 200 * MB)


GOOD_BANDS = [
    ("all_equal_min_half", (10, 5, 10)),  # (target, min, max)
    ("tight", (2, 1, 2)),
    ("wide", (150 * MB, 1, 10**12)),
]


@pytest.mark.parametrize("band", [b[1] for b in GOOD_BANDS], ids=[b[0] for b in GOOD_BANDS])
def test_shard_size_accepts(band):
    target, min_, max_ = band
    size = ShardSize(target=target, min=min_, max=max_)
    assert (size.target, size.min, size.max) == band


BAD_BANDS = [
    ("min_zero", (10, 0, 20), "0 < min"),
    ("min_negative", (10, -1, 20), "0 < min"),
    ("min_above_target", (10, 11, 40), "min <= target"),
    ("target_above_max", (30, 10, 20), "target <= max"),
    ("max_below_twice_min", (15, 10, 19), "twice min"),
    ("max_equal_min", (10, 10, 10), "twice min"),
]


@pytest.mark.parametrize("band, reason", [b[1:] for b in BAD_BANDS],
                         ids=[b[0] for b in BAD_BANDS])
def test_shard_size_refuses(band, reason):
    target, min_, max_ = band
    with pytest.raises(ValueError, match=reason) as info:
        ShardSize(target=target, min=min_, max=max_)
    assert f"min={min_}" in str(info.value) or f"min ({min_})" in str(info.value)
    assert f"max={max_}" in str(info.value) or f"max ({max_})" in str(info.value)


# --- should_roll_before -------------------------------------------------------------------------

BAND = ShardSize(target=150, min=100, max=200)
ROLLS = [
    # (id, current stored bytes, incoming record bytes, roll first?)
    ("empty_file_small_record", 0, 10, False),
    ("empty_file_oversize_record", 0, 500, False),  # alone in its own file
    ("fits", 100, 50, False),
    ("fits_exactly_max", 150, 50, False),
    ("one_past_max", 150, 51, True),
    ("oversize_record_after_data", 1, 500, True),
    ("already_at_max", 200, 1, True),
    ("empty_record", 200, 0, False),
]


@pytest.mark.parametrize("current, incoming, expected", [r[1:] for r in ROLLS],
                         ids=[r[0] for r in ROLLS])
def test_should_roll_before(current, incoming, expected):
    assert should_roll_before(current, incoming, BAND) is expected


# --- plan_shards: tables ------------------------------------------------------------------------

def parts(*sizes: int) -> list[Part]:
    return [Part(path=f"p{i:03d}", records=1, bytes=b) for i, b in enumerate(sizes)]


def layout(plan: list[list[Part]]) -> list[list[int]]:
    return [[p.bytes for p in shard] for shard in plan]


PLANS = [
    # (id, part sizes in path order, expected shards as part sizes); band [100, 200], target 150
    ("nothing", (), []),
    ("one_small_part", (5,), [[5]]),
    ("below_min_is_one_shard", (30, 30, 30), [[30, 30, 30]]),
    ("full_parts_stay_alone", (150, 160, 200), [[150], [160], [200]]),
    ("tails_joined_to_min", (60, 50, 70, 40), [[60, 50], [70, 40]]),
    ("large_tail_alone", (120, 30), [[120, 30]]),  # leftover joins the only shard it fits
    ("leftover_joins_smallest", (150, 160, 30), [[150, 30], [160]]),
    ("leftover_does_not_fit", (190, 195, 30), [[190], [195], [30]]),
    ("oversize_alone", (500, 30), [[500], [30]]),
    ("oversize_and_tails", (500, 60, 60), [[500], [60, 60]]),
    ("exactly_min", (100,), [[100]]),
]


@pytest.mark.parametrize("sizes, expected", [p[1:] for p in PLANS], ids=[p[0] for p in PLANS])
def test_plan_shards_table(sizes, expected):
    assert layout(plan_shards(parts(*sizes), BAND)) == expected


def test_plan_shards_orders_by_path_not_input():
    given_parts = [Part("b", 1, 60), Part("c", 1, 150), Part("a", 1, 50)]
    plan = plan_shards(given_parts, BAND)
    assert [[p.path for p in shard] for shard in plan] == [["a", "b"], ["c"]]


# --- plan_shards: properties --------------------------------------------------------------------

@st.composite
def bands(draw) -> ShardSize:
    min_ = draw(st.integers(1, 1000))
    max_ = draw(st.integers(2 * min_, 4 * min_ + 10))
    target = draw(st.integers(min_, max_))
    return ShardSize(target=target, min=min_, max=max_)


@st.composite
def writer_outputs(draw) -> tuple[ShardSize, list[Part]]:
    """A band and the parts writers that respect it would produce.

    Full files land in [target, max]; a bundle's tail is below target (possibly empty); a
    record bigger than max sits alone in a file of its own.
    """
    size = draw(bands())
    kinds = draw(st.lists(st.sampled_from(["full", "tail", "oversize"]), max_size=40))
    out = []
    for i, kind in enumerate(kinds):
        if kind == "full":
            nbytes = draw(st.integers(size.target, size.max))
        elif kind == "tail":
            nbytes = draw(st.integers(0, size.target - 1)) if size.target > 0 else 0
        else:
            nbytes = draw(st.integers(size.max + 1, 3 * size.max))
        out.append(Part(path=f"w{draw(st.integers(0, 99)):02d}-{i:03d}", records=1,
                        bytes=nbytes))
    return size, out


PROPERTY = settings(max_examples=200, deadline=None)


def check_every_part_used_once(given_parts, plan):
    used = [p for shard in plan for p in shard]
    assert sorted(used, key=lambda p: p.path) == sorted(given_parts, key=lambda p: p.path)
    assert all(shard for shard in plan)  # no empty shard


def check_deterministic(given_parts, plan, size, rnd):
    shuffled = list(given_parts)
    rnd.shuffle(shuffled)
    assert plan_shards(shuffled, size) == plan


def check_all_but_one_in_band(plan, size):
    outside = []
    for shard in plan:
        if any(p.bytes > size.max for p in shard):
            assert len(shard) == 1, layout(plan)  # an oversize record's file is never joined
            continue  # ... and counts as its own shard, allowed outside the band
        total = sum(p.bytes for p in shard)
        assert total <= size.max, layout(plan)  # nothing is ever joined past max
        if total < size.min:
            outside.append(shard)
    assert len(outside) <= 1, layout(plan)


# One generated run checks every property of a plan (generation is the expensive part).
@PROPERTY
@given(writer_outputs(), st.randoms(use_true_random=False))
def test_plan_properties(case, rnd: random.Random):
    size, given_parts = case
    plan = plan_shards(given_parts, size)
    check_every_part_used_once(given_parts, plan)
    check_deterministic(given_parts, plan, size, rnd)
    check_all_but_one_in_band(plan, size)


@PROPERTY
@given(bands(), st.data())
def test_plan_of_a_split_below_min_is_one_shard(size, data):
    drawn = data.draw(st.lists(st.integers(0, size.min - 1), min_size=1, max_size=30))
    sizes = []
    for nbytes in drawn:  # the longest prefix whose total stays below min
        if sum(sizes) + nbytes >= size.min:
            break
        sizes.append(nbytes)
    given_parts = [Part(path=f"t{i:03d}", records=1, bytes=b) for i, b in enumerate(sizes)]
    plan = plan_shards(given_parts, size)
    assert len(plan) == 1
    assert sorted(p.path for p in plan[0]) == [p.path for p in given_parts]


# -- a band from part of it (issue #15: a target alone is enough) --------------------------------

@pytest.mark.parametrize("given,band", [
    ({}, (150 * MB, 100 * MB, 200 * MB)),
    ({"target": 30 * MB}, (30 * MB, 20 * MB, 40 * MB)),
    ({"target": 150 * MB}, (150 * MB, 100 * MB, 200 * MB)),  # the default band's proportions
    ({"min": 10 * MB}, (15 * MB, 10 * MB, 20 * MB)),
    ({"max": 40 * MB}, (30 * MB, 20 * MB, 40 * MB)),
    ({"min": 10 * MB, "max": 40 * MB}, (25 * MB, 10 * MB, 40 * MB)),
    ({"target": 30 * MB, "max": 45 * MB}, (30 * MB, 20 * MB, 45 * MB)),
    ({"target": 30 * MB, "max": 32 * MB}, (30 * MB, 16 * MB, 32 * MB)),  # min yields to max
    ({"target": 30 * MB, "min": 25 * MB}, (30 * MB, 25 * MB, 50 * MB)),  # max twice min
    ({"target": 1}, (1, 1, 2)),
])
def test_derive_band_fills_in_what_is_missing(given, band):
    size = derive_band(given)
    assert (size.target, size.min, size.max) == band


@pytest.mark.parametrize("given", [{"target": 250 * MB, "max": 200 * MB},
                                   {"min": 100 * MB, "max": 150 * MB},
                                   {"average": 5}])
def test_derive_band_refuses_what_cannot_hold(given):
    with pytest.raises(ValueError):
        derive_band(given)
