"""Avro by byte ranges (transforms/readers/avro_ranges.py): on real container files of many
blocks written by fastavro, the blocks the ranges own, in range order, are the blocks
fastavro reads from the whole file; damaged framing is owned once or refused loudly."""

from __future__ import annotations

import io

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.transforms.readers import avro_ranges as ar
from beam_tfrecords.transforms.readers.ranges import (
    ByteRange,
    RangeError,
    bytes_reader,
    check_links,
    plan_ranges,
)

SCHEMA = {"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"},
                                                    {"name": "text", "type": "string"}]}
LIMIT = 1 << 20


def container(codec: str, rows: int = 300, interval: int = 200) -> bytes:
    out = io.BytesIO()
    records = [{"id": i, "text": "x" * (i % 17)} for i in range(rows)]
    fastavro.writer(out, SCHEMA, records, codec=codec, sync_interval=interval,
                    metadata={"note": "m" * 40})
    return out.getvalue()


FILES = {codec: container(codec) for codec in ("null", "deflate")}


def ranged(data: bytes, cuts: list[ByteRange]) -> list[ar.AvroBlock]:
    read_at = bytes_reader(data)
    head = ar.avro_head(read_at, LIMIT)
    blocks, links = [], []
    for span in cuts:
        owned = list(ar.range_blocks(read_at, head, span.start, span.end, LIMIT))
        assert all(span.start <= b.offset < span.end for b in owned)
        first = ar.block_start(read_at, head, span.start)
        links.append(ar.avro_link(first, owned[-1].end if owned else first))
        blocks += owned
    check_links("f.avro", links)
    return blocks


def fastavro_blocks(data: bytes) -> list[tuple[int, int, int]]:
    return [(b.offset, b.size, b.num_records) for b in fastavro.block_reader(io.BytesIO(data))]


@pytest.mark.parametrize("codec", sorted(FILES))
def test_the_header_ends_where_fastavro_finds_the_first_block(codec):
    data = FILES[codec]
    blocks = fastavro_blocks(data)
    assert len(blocks) > 5
    assert ar.avro_head(bytes_reader(data), LIMIT).end == blocks[0][0]


@settings(max_examples=60, deadline=None)
@given(codec=st.sampled_from(sorted(FILES)), split=st.integers(1, 400),
       points=st.lists(st.integers(0, 5000), max_size=8))
def test_ranges_own_fastavros_blocks(codec, split, points):
    """Any cuts -- inside the header, inside a sync marker, at a block's first byte."""
    data = FILES[codec]
    whole = fastavro_blocks(data)
    for cuts in (plan_ranges(len(data), split), _cut(len(data), points)):
        got = ranged(data, cuts)
        assert [(b.offset, b.size, b.count) for b in got] == whole


def test_the_records_of_the_owned_blocks_are_the_files():
    """Decoding each range's blocks gives the file's records, in order."""
    data = FILES["deflate"]
    read_at = bytes_reader(data)
    head = ar.avro_head(read_at, LIMIT)
    prefix = data[:head.end]
    records = []
    for span in plan_ranges(len(data), 700):
        for block in ar.range_blocks(read_at, head, span.start, span.end, LIMIT):
            records += fastavro.reader(io.BytesIO(prefix + data[block.offset:block.end]))
    assert records == list(fastavro.reader(io.BytesIO(data)))
    from beam_tfrecords.transforms.readers.read_avro import _avro_events  # our reader

    assert records == [record for _, record in _avro_events(io.BytesIO(data), LIMIT)]


def test_damaged_framing_is_owned_once_or_refused():
    """A block whose size or sync marker is damaged: every cut either owns the whole-file
    walk's blocks and damaged stretches exactly once, or the join check says where."""
    data = bytearray(FILES["null"])
    blocks = fastavro_blocks(bytes(data))
    data[blocks[2][0] + blocks[2][1] - 3] ^= 0xFF  # the third block's sync marker
    data[blocks[5][0]] = 0x7F  # the sixth block's record count
    data = bytes(data)
    whole = ranged(data, [ByteRange(0, len(data))])
    assert [b.damaged != "" for b in whole].count(True) == 2
    refused = 0
    for point in range(0, len(data), 7):
        try:
            got = ranged(data, [ByteRange(0, point), ByteRange(point, len(data))])
        except RangeError as err:
            assert str(err).startswith("f.avro: byte ")
            refused += 1
            continue
        assert got == whole
    assert refused < len(data) // 7 // 4


def _cut(size: int, points: list[int]) -> list[ByteRange]:
    bounds = sorted({0, size, *(p for p in points if p < size)})
    return [ByteRange(a, b) for a, b in zip(bounds, bounds[1:])]
