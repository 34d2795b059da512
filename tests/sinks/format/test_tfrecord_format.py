"""Tests for tfrecord_format (sinks/format): vectors, round trips, corruption, sizes."""

from __future__ import annotations

import gzip
import io
import pickle
import random
import zlib

import crc32c
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_tfrecords.sinks.format import tfrecord_format as tff

# --- Known-answer vectors ------------------------------------------------------------------

# CRC-32C (Castagnoli). b"123456789" -> 0xE3069283 is the standard check value of the
# algorithm (CRC catalogue "CRC-32/ISCSI"); the 32-byte vectors are RFC 3720 (iSCSI),
# Appendix B.4 "CRC Examples", with the CRC read as a little-endian integer.
CRC32C_VECTORS = [
    (b"123456789", 0xE3069283),
    (bytes(32), 0x8A9136AA),
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]

# Masked CRCs from Apache Beam 2.77.0,
# apache_beam/io/tfrecordio_test.py, TestTFRecordUtil.test_masked_crc32c.
MASKED_VECTORS = [
    (bytes(32), 0x0FD7FFFA),
    (b"\xff" * 32, 0xF909B029),
    (b"foo", 0xFEBE8A61),
    (b"\x03\x00\x00\x00\x00\x00\x00\x00", 0x0E4999B0),
]

# Framed records from Apache Beam 2.77.0, apache_beam/io/tfrecordio_test.py
# (FOO_RECORD_BASE64 / FOO_BAR_RECORD_BASE64, written there by TensorFlow's own
# TFRecordWriter for b'foo' and [b'foo', b'bar']); byte values re-typed from the base64.
FOO_FRAMED = bytes.fromhex("0300000000000000 b099490e 666f6f 618abefe")
BAR_FRAMED = bytes.fromhex("0300000000000000 b099490e 626172 4600e5c8")


@pytest.mark.parametrize("data,expected", CRC32C_VECTORS)
def test_crc32c_known_answers(data, expected):
    assert crc32c.crc32c(data) == expected
    assert tff.unmask_crc32c(tff.masked_crc32c(data)) == expected


@pytest.mark.parametrize("data,expected", MASKED_VECTORS)
def test_masked_crc32c_known_answers(data, expected):
    assert tff.masked_crc32c(data) == expected


@pytest.mark.parametrize("value", [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xA282EAD8])
def test_unmask_inverts_mask(value):
    assert tff.unmask_crc32c(tff.mask_crc32c(value)) == value


def test_frame_matches_tensorflow_golden_bytes():
    assert tff.frame(b"foo") == FOO_FRAMED
    assert tff.frame(b"bar") == BAR_FRAMED
    assert list(tff.iter_records(io.BytesIO(FOO_FRAMED + BAR_FRAMED))) == [b"foo", b"bar"]


def test_golden_bytes_readable_gzip_and_zlib():
    for blob in (gzip.compress(FOO_FRAMED + BAR_FRAMED), zlib.compress(FOO_FRAMED + BAR_FRAMED)):
        assert list(tff.iter_records(io.BytesIO(blob))) == [b"foo", b"bar"]


# --- Compression names -----------------------------------------------------------------------

@pytest.mark.parametrize("name,expected", [
    (None, "none"), ("", "none"), ("none", "none"), ("NONE", "none"), ("uncompressed", "none"),
    ("gzip", "gzip"), ("GZIP", "gzip"), ("Gzip", "gzip"), ("zlib", "zlib"), ("ZLIB", "zlib"),
    ("deflate", "zlib"), ("DEFLATE", "zlib"),  # Beam's name for the same stream
])
def test_normalize_compression(name, expected):
    assert tff.normalize_compression(name) == expected


@pytest.mark.parametrize("name,mentions_tf", [
    ("zstd", True), ("BZIP2", True), ("lzma", True), ("auto", False), ("zip", False),
])
def test_normalize_compression_rejects(name, mentions_tf):
    with pytest.raises(ValueError) as info:
        tff.normalize_compression(name)
    message = str(info.value)
    assert repr(name) in message and "'gzip'" in message and "'zlib'" in message
    assert ("TensorFlow" in message) == mentions_tf


@pytest.mark.parametrize("compression,suffix", [
    ("none", ".tfrecord"), ("gzip", ".tfrecord.gz"), ("ZLIB", ".tfrecord.deflate"),
    (None, ".tfrecord"),
])
def test_file_suffix(compression, suffix):
    assert tff.file_suffix(compression) == suffix


# --- Helpers ---------------------------------------------------------------------------------

def write_all(records, compression="none", **kwargs):
    buf = io.BytesIO()
    writer = tff.TFRecordWriter(buf, compression, **kwargs)
    for record in records:
        writer.write(record)
    assert writer.close() == len(buf.getvalue())
    return buf.getvalue()


def read_all(blob, compression="auto", **kwargs):
    return list(tff.iter_records(io.BytesIO(blob), compression, **kwargs))


class Trickle(io.RawIOBase):
    """A non-seekable stream that returns at most `step` bytes per read, like a pipe."""

    def __init__(self, blob: bytes, step: int = 7):
        self._data, self._pos, self._step = blob, 0, step

    def readable(self):
        return True

    def read(self, n=-1):
        n = self._step if n is None or n < 0 else min(n, self._step)
        out = self._data[self._pos:self._pos + n]
        self._pos += len(out)
        return out


def batch_of(records):
    offsets = np.zeros(len(records) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in records])
    return b"".join(records), offsets


RNG = random.Random(1234)
RECORD_SETS = {
    "no_records": [],
    "one_empty": [b""],
    "empties_mixed": [b"", b"x", b"", b"yz", b""],
    "large": [RNG.randbytes(200_000), b"tail", RNG.randbytes(tff.CHUNK_SIZE + 1)],
    "compressible_large": [bytes(3_000_000), b"\x01" * 70_000],
    "many_small": [RNG.randbytes(RNG.randrange(0, 120)) for _ in range(3000)],
}


# --- Round trips -----------------------------------------------------------------------------

@pytest.mark.parametrize("compression", tff.COMPRESSIONS)
@pytest.mark.parametrize("set_name", list(RECORD_SETS))
@pytest.mark.slow
def test_round_trip(compression, set_name):
    records = RECORD_SETS[set_name]
    blob = write_all(records, compression)
    assert read_all(blob) == records
    assert read_all(blob, compression) == records
    assert list(tff.iter_records(Trickle(blob, 5), compression)) == records


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
@pytest.mark.parametrize("step", [1, 3, 64, 65, 1000, tff.CHUNK_SIZE])
def test_compressed_read_through_any_read_size(compression, step):
    # ~1000:1 compressible data makes one small input piece inflate to more than a chunk.
    records = RECORD_SETS["compressible_large"]
    assert list(tff.iter_records(Trickle(write_all(records, compression), step))) == records


@pytest.mark.parametrize("compression", tff.COMPRESSIONS)
@pytest.mark.parametrize("set_name", list(RECORD_SETS))
def test_write_batch_equals_write(compression, set_name):
    records = RECORD_SETS[set_name]
    buf = io.BytesIO()
    writer = tff.TFRecordWriter(buf, compression)
    writer.write_batch(*batch_of(records))
    writer.close()
    assert buf.getvalue() == write_all(records, compression)
    assert writer.records == len(records)


@pytest.mark.parametrize("set_name", list(RECORD_SETS))
def test_frame_batch_equals_joined_frames(set_name):
    records = RECORD_SETS[set_name]
    payload, offsets = batch_of(records)
    expected = b"".join(tff.frame(r) for r in records)
    assert tff.frame_batch(payload, offsets) == expected
    assert tff.frame_batch(np.frombuffer(payload, dtype=np.uint8), offsets) == expected
    assert tff.frame_batch(bytearray(payload), offsets.tolist()) == expected


@pytest.mark.parametrize("set_name", list(RECORD_SETS))
def test_frame_pieces_are_the_frames_without_copying_the_data(set_name):
    records = RECORD_SETS[set_name]
    payload, offsets = batch_of(records)
    pieces = tff.frame_pieces(payload, offsets)
    assert len(pieces) == 3 * len(records)
    assert b"".join(bytes(p) for p in pieces) == b"".join(tff.frame(r) for r in records)
    assert all(isinstance(p, memoryview) and p.obj is payload for p in pieces[1::3])


@pytest.mark.parametrize("payload,offsets", [
    (b"abc", [0, 2]), (b"abc", [1, 3]), (b"abc", [0, 2, 1, 3]), (b"abc", []),
])
def test_frame_batch_rejects_bad_offsets(payload, offsets):
    with pytest.raises(ValueError):
        tff.frame_batch(payload, np.array(offsets, dtype=np.int64))


@pytest.mark.parametrize("compression", tff.COMPRESSIONS)
def test_write_framed_and_offset_tracking(compression):
    records = [b"a", b"", b"bcdef", RNG.randbytes(1000)]
    seen = []
    buf = io.BytesIO()
    writer = tff.TFRecordWriter(buf, compression, track_offsets=True,
                                on_record=lambda off, n: seen.append((off, n)))
    writer.write(records[0])
    writer.write_batch(*batch_of(records[1:3]))
    writer.write_framed(tff.frame(records[3]), 1)
    writer.write_framed(tff.frame(records[0]), 1, sizes=[1])
    writer.write_pieces(tff.frame_pieces(*batch_of(records[2:4])), 2)
    writer.close()
    expected = list(tff.iter_records_with_offsets(io.BytesIO(buf.getvalue())))
    assert [off for off, _ in expected] == [off for off, _ in seen]
    assert [len(r) + 16 for _, r in expected] == [n for _, n in seen]
    assert writer.records == 7 and writer.uncompressed_bytes == sum(n for _, n in seen)
    assert [r for _, r in expected] == [*records, records[0], *records[2:4]]


def test_write_framed_checks_record_count_and_callback():
    writer = tff.TFRecordWriter(io.BytesIO(), track_offsets=True, on_record=lambda o, n: None)
    with pytest.raises(ValueError):
        writer.write_framed(tff.frame(b"x") + tff.frame(b"y"), 1)
    with pytest.raises(ValueError, match="pieces"):
        writer.write_pieces(tff.frame_pieces(*batch_of([b"x", b"y"])), 1)
    with pytest.raises(ValueError):
        tff.TFRecordWriter(io.BytesIO(), track_offsets=True)


# --- Records too large to hold ------------------------------------------------------------------

@pytest.mark.parametrize("compression", tff.COMPRESSIONS)
@pytest.mark.parametrize("set_name", list(RECORD_SETS))
@pytest.mark.parametrize("max_bytes", [0, 5, tff.CHUNK_SIZE])
def test_spans_hold_only_the_records_up_to_max_bytes(compression, set_name, max_bytes):
    records = RECORD_SETS[set_name]
    blob = write_all(records, compression)
    spans = list(tff.iter_record_spans(Trickle(blob, 1000), max_bytes=max_bytes))
    assert [length for _, length, _ in spans] == [len(r) for r in records]
    assert [data for _, _, data in spans] == [r if len(r) <= max_bytes else None
                                              for r in records]
    assert [offset for offset, _, _ in spans] == [
        offset for offset, _ in tff.iter_records_with_offsets(io.BytesIO(blob))]


def outcomes(blob: bytes, max_bytes: int | None) -> tuple[list[int], tuple | None]:
    """(lengths of the records read, (offset, reason) of the error raised or None)."""
    lengths = []
    try:
        for _, length, _ in tff.iter_record_spans(Trickle(blob, 3), "none", max_bytes=max_bytes):
            lengths.append(length)
    except tff.CorruptRecordError as err:
        return lengths, (err.offset, err.reason)
    return lengths, None


def test_records_passed_through_are_checked_as_held_ones_are():
    """A record read piece by piece (longer than max_bytes) fails every CRC flip and every
    truncation at the same offset, with the same reason, as one read whole."""
    blob = write_all(CORRUPT_RECORDS)
    cases = [blob[:cut] for cut in range(len(blob) + 1)]
    for at in range(len(blob)):
        flipped = bytearray(blob)
        flipped[at] ^= 0x40
        cases.append(bytes(flipped))
    for case in cases:
        held = outcomes(case, None)
        assert outcomes(case, 0) == held, case
        assert outcomes(case, 4) == held, case


@pytest.mark.slow
def test_a_record_over_a_chunk_is_checked_alike_held_or_passed_through():
    """Records over a chunk are read apart from their footer, held or not."""
    big = RNG.randbytes(tff.CHUNK_SIZE + 10)
    blob = write_all([b"x", big])
    start, end = 17, len(blob)  # the big record's framing
    cases = {"clean": blob}
    for cut in (start + 5, start + 12, start + 13 + tff.CHUNK_SIZE, end - 5, end - 1):
        cases[f"cut {cut}"] = blob[:cut]
    for at in (start, start + 12, start + 12 + tff.CHUNK_SIZE, end - 1):
        flipped = bytearray(blob)
        flipped[at] ^= 1
        cases[f"flip {at}"] = bytes(flipped)
    for name, case in cases.items():
        held = outcomes(case, None)
        assert outcomes(case, 0) == outcomes(case, 2 * tff.CHUNK_SIZE) == held, name
    assert outcomes(cases["clean"], 0) == ([1, len(big)], None)
    assert outcomes(cases[f"cut {end - 5}"], 0)[1] == (
        start, f"truncated record data: {len(big) - 1} of {len(big)} bytes")
    assert outcomes(cases[f"cut {end - 1}"], 0)[1] == (start, "truncated data CRC: 3 of 4 bytes")
    assert outcomes(cases[f"flip {end - 1}"], 0)[1][1].startswith("data CRC mismatch")


# --- Corruption of uncompressed files ----------------------------------------------------------

CORRUPT_RECORDS = [b"alpha", b"bravo-charlie", b"d", b"echo" * 10]
REGIONS = {  # byte to flip, relative to the record start -> expected reason prefix
    "length": (0, "length CRC mismatch"),
    "length_high": (7, "length CRC mismatch"),
    "length_crc": (9, "length CRC mismatch"),
    "data": (12, "data CRC mismatch"),
    "data_crc": (-1, "data CRC mismatch"),
}


@pytest.mark.parametrize("k", range(len(CORRUPT_RECORDS)))
@pytest.mark.parametrize("region", list(REGIONS))
@pytest.mark.parametrize("stream", ["seekable", "trickle"])
def test_byte_flip_reports_record_offset(k, region, stream):
    blob = bytearray(write_all(CORRUPT_RECORDS))
    starts = [0]
    for r in CORRUPT_RECORDS:
        starts.append(starts[-1] + len(r) + 16)
    rel, reason = REGIONS[region]
    blob[(starts[k + 1] - 1) if rel < 0 else starts[k] + rel] ^= 0x40
    source = io.BytesIO(bytes(blob)) if stream == "seekable" else Trickle(bytes(blob))
    records = tff.iter_records(source, "none", path="gs://b/shard-7")
    got = []
    with pytest.raises(tff.CorruptRecordError) as info:
        got.extend(records)
    assert got == CORRUPT_RECORDS[:k]
    err = info.value
    assert (err.path, err.offset) == ("gs://b/shard-7", starts[k])
    assert err.reason.startswith(reason)
    assert str(err) == f"gs://b/shard-7: corrupt TFRecord at byte offset {starts[k]}: {err.reason}"


def test_byte_flip_without_crc_check_reads_flipped_data():
    blob = bytearray(write_all([b"abc"]))
    blob[13] ^= 1
    assert read_all(bytes(blob), "none", verify_crc=False) == [b"acc"]  # b"b" ^ 1 == b"c"


@pytest.mark.parametrize("stream", ["seekable", "trickle"])
def test_absurd_length_with_valid_crc_is_truncation(stream):
    huge = (1 << 62).to_bytes(8, "little")
    blob = huge + tff.masked_crc32c(huge).to_bytes(4, "little") + b"tiny"
    source = io.BytesIO(blob) if stream == "seekable" else Trickle(blob)
    with pytest.raises(tff.CorruptRecordError, match=r"truncated record data: 4 of \d+ bytes"):
        list(tff.iter_records(source, "none"))


TRUNC_RECORDS = [b"ab", b"", b"xyz"]
TRUNC_BLOB = b"".join(tff.frame(r) for r in TRUNC_RECORDS)


def expected_truncation(cut):
    """(records read cleanly, offset of the error or None, reason) for TRUNC_BLOB[:cut]."""
    start = 0
    for i, record in enumerate(TRUNC_RECORDS):
        if cut == start:
            return TRUNC_RECORDS[:i], None, None
        end = start + len(record) + 16
        if cut < end:
            have = cut - start
            if have < 12:
                reason = f"truncated record header: {have} of 12 bytes"
            elif have - 12 < len(record):
                reason = f"truncated record data: {have - 12} of {len(record)} bytes"
            else:
                reason = f"truncated data CRC: {have - 12 - len(record)} of 4 bytes"
            return TRUNC_RECORDS[:i], start, reason
        start = end
    return TRUNC_RECORDS, None, None


@pytest.mark.parametrize("cut", range(len(TRUNC_BLOB) + 1))
@pytest.mark.parametrize("compression,stream", [
    ("none", "seekable"), ("auto", "seekable"), ("auto", "trickle"),
])
def test_truncation_at_every_byte(cut, compression, stream):
    blob = TRUNC_BLOB[:cut]
    clean, offset, reason = expected_truncation(cut)
    source = io.BytesIO(blob) if stream == "seekable" else Trickle(blob, 3)
    got = []
    if offset is None:
        got.extend(tff.iter_records(source, compression))
    else:
        with pytest.raises(tff.CorruptRecordError) as info:
            got.extend(tff.iter_records(source, compression, path="f"))
        assert (info.value.offset, info.value.reason) == (offset, reason)
        assert str(info.value) == f"f: corrupt TFRecord at byte offset {offset}: {reason}"
    assert got == clean


# --- Compressed streams ------------------------------------------------------------------------

COMPRESSED_RECORDS = [b"first", RNG.randbytes(300), b"", b"last record"]


def outcome(blob, compression):
    """The records read, or the CorruptRecordError raised; any other exception fails the test."""
    try:
        return read_all(blob, compression)
    except tff.CorruptRecordError as err:
        return err


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
@pytest.mark.parametrize("mode", ["auto", "explicit"])
def test_compressed_truncation_is_corrupt_record_error(compression, mode):
    blob = write_all(COMPRESSED_RECORDS, compression)
    for cut in range(1, len(blob)):
        result = outcome(blob[:cut], "auto" if mode == "auto" else compression)
        assert isinstance(result, tff.CorruptRecordError), cut
        if mode == "explicit":
            assert "(in the decompressed stream)" in str(result)
            assert result.reason.startswith(f"truncated {compression.upper()} stream") or \
                result.reason.startswith(f"corrupt {compression.upper()} stream")


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
@pytest.mark.parametrize("mode", ["auto", "explicit"])
def test_compressed_byte_flips_never_leak_other_errors(compression, mode):
    blob = write_all(COMPRESSED_RECORDS, compression)
    errors = 0
    for pos in range(len(blob)):
        flipped = bytearray(blob)
        flipped[pos] ^= 0x10
        result = outcome(bytes(flipped), "auto" if mode == "auto" else compression)
        if isinstance(result, tff.CorruptRecordError):
            errors += 1
        else:  # only unchecked gzip header fields (mtime, flags, OS) may change harmlessly
            assert result == COMPRESSED_RECORDS, pos
    assert errors >= len(blob) - 10


def test_concatenated_gzip_members_read_in_full():
    first, second = [b"one", b"two"], [b"three", b""]
    blob = write_all(first, "gzip") + write_all(second, "gzip")
    assert read_all(blob) == first + second
    assert read_all(blob + gzip.compress(b""), "gzip") == first + second


def test_gzip_trailing_garbage_is_corrupt():
    blob = write_all([b"one"], "gzip") + b"\x00\x00junk"
    with pytest.raises(tff.CorruptRecordError, match="corrupt GZIP stream"):
        read_all(blob, "gzip")


def test_concatenated_zlib_streams_raise_explanation():
    blob = write_all([b"one"], "zlib") + write_all([b"two"], "zlib")
    with pytest.raises(tff.CorruptRecordError) as info:
        read_all(blob)
    assert "concatenated ZLIB streams are not readable by TensorFlow" in info.value.reason
    assert info.value.offset == len(tff.frame(b"one"))


@pytest.mark.parametrize("set_name", ["many_small", "large", "empties_mixed"])
def test_compressed_output_readable_by_stdlib(set_name):
    records = RECORD_SETS[set_name]
    framed = b"".join(tff.frame(r) for r in records)
    assert gzip.decompress(write_all(records, "gzip")) == framed
    assert zlib.decompress(write_all(records, "zlib")) == framed


# --- Sizes ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("compression", tff.COMPRESSIONS)
def test_sizes_match_file_on_disk(compression, tmp_path):
    path = tmp_path / "shard"
    records = RECORD_SETS["many_small"]
    with open(path, "wb") as f:
        writer = tff.TFRecordWriter(f, compression)
        writer.write_batch(*batch_of(records[:1500]))
        assert writer.estimated_bytes_on_disk() >= writer.bytes_on_disk
        synced = writer.sync()
        assert synced == writer.bytes_on_disk == writer.estimated_bytes_on_disk()
        assert path.stat().st_size == synced
        for record in records[1500:]:
            writer.write(record)
        assert writer.estimated_bytes_on_disk() >= writer.bytes_on_disk
        if compression == "none":
            assert writer.bytes_on_disk == writer.uncompressed_bytes
            assert writer.estimated_bytes_on_disk() == writer.bytes_on_disk
        total = writer.close()
        assert not f.closed
    assert total == path.stat().st_size == writer.bytes_on_disk
    assert total == writer.estimated_bytes_on_disk()
    assert writer.uncompressed_bytes == sum(len(r) + 16 for r in records)
    with open(path, "rb") as f:
        assert list(tff.iter_records(f)) == records


def test_estimate_uses_ratio_seen_at_last_sync():
    stream = tff.StreamCompressor(io.BytesIO(), "zlib")
    stream.write(bytes(100_000))
    assert stream.estimated_size() >= 100_000  # no ratio observed yet: assume none
    synced = stream.sync()
    stream.write(bytes(100_000))
    assert stream.estimated_size() == max(stream.bytes_out, 2 * synced)


@pytest.mark.parametrize("close_file", [False, True])
def test_stream_compressor_close_file_option(close_file):
    buf = io.BytesIO()
    stream = tff.StreamCompressor(buf, "gzip", level=1, close_file=close_file)
    stream.write(b"data")
    size = stream.close()
    assert buf.closed == close_file
    assert stream.close() == size
    with pytest.raises(ValueError):
        stream.write(b"more")


# --- Detection and errors ---------------------------------------------------------------------

@pytest.mark.parametrize("head,expected", [
    (b"", "none"),
    (FOO_FRAMED, "none"),
    (FOO_FRAMED[:12], "none"),
    (FOO_FRAMED[:5], "none"),  # too short to judge: the reader reports the truncation
    (tff.frame(bytes(35615))[:12], "none"),  # length bytes start 1f 8b, the gzip magic
    (gzip.compress(FOO_FRAMED, mtime=0), "gzip"),
    (b"\x1f\x8b", "gzip"),
    (zlib.compress(FOO_FRAMED), "zlib"),
    (zlib.compress(FOO_FRAMED, 1)[:2], "zlib"),
])
def test_detect_compression(head, expected):
    assert tff.detect_compression(head) == expected


@pytest.mark.parametrize("head", [b"not a tfrecord file", bytes(FOO_FRAMED[:8]) + b"\0\0\0\0"])
def test_detect_compression_rejects(head):
    with pytest.raises(tff.CorruptRecordError) as info:
        tff.detect_compression(head, "x.bin")
    assert info.value.offset == 0 and info.value.path == "x.bin"
    assert "not a TFRecord file" in str(info.value)


def test_corrupt_record_error_pickles_with_attributes():
    err = tff.CorruptRecordError("p", 17, "reason here", decompressed=True)
    assert str(err) == ("p: corrupt TFRecord at byte offset 17 (in the decompressed stream): "
                        "reason here")
    clone = pickle.loads(pickle.dumps(err))
    assert (clone.path, clone.offset, clone.reason) == ("p", 17, "reason here")
    assert str(clone) == str(err)
    assert isinstance(clone, ValueError)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=60))
def test_vectorised_frame_batch_equals_frame_per_record(records):
    """frame_batch places headers, data and footers with whole-array operations; it must give
    exactly the bytes of framing each record on its own (empty records and repeated lengths
    included)."""
    payload, offsets = batch_of(records)
    assert tff.frame_batch(payload, offsets) == b"".join(tff.frame(r) for r in records)


def test_frame_batch_of_large_records_equals_frame_per_record():
    """Large records take the record-by-record copy; the bytes must not change."""
    records = [bytes([i]) * (3000 + 17 * i) for i in range(12)] + [b"", b"x"]
    payload, offsets = batch_of(records)
    assert tff.frame_batch(payload, offsets) == b"".join(tff.frame(r) for r in records)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.one_of(st.binary(max_size=40), st.integers(4090, 9000)),
                         max_size=5), max_size=12))
def test_records_framed_from_their_pieces_equal_the_framed_batch(shapes):
    """frame_record_pieces: large pieces (an image) passed on uncopied, small ones gathered
    with headers and footers -- the same stream as framing the joined records."""
    records = [[bytes([p % 251]) * p if isinstance(p, int) else p for p in parts]
               for parts in shapes]
    sizes = [sum(map(len, parts)) for parts in records]
    buffers, starts = tff.frame_record_pieces(records, sizes)
    offsets = np.zeros(len(records) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    joined = b"".join(b"".join(parts) for parts in records)
    assert b"".join(bytes(b) for b in buffers) == bytes(tff.frame_batch(joined, offsets))
    assert starts[0] == 0 and starts[-1] == len(buffers) and len(starts) == len(records) + 1
    for k, parts in enumerate(records):  # record k's buffers frame record k alone
        alone = b"".join(bytes(b) for b in buffers[starts[k]:starts[k + 1]])
        assert alone == tff.frame(b"".join(parts))
        big = [p for p in parts if len(p) >= 4096]
        assert all(any(b is p for b in buffers[starts[k]:starts[k + 1]]) for p in big)


class SeekableTrickle(Trickle):
    """A trickle whose size can be known, as a local file's is: no chunk ever holds a whole
    record, so every record takes the reader's general path."""

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=0):
        self._pos = {0: offset, 1: self._pos + offset, 2: len(self._data) + offset}[whence]
        return self._pos


def _spans(source, verify_crc, max_bytes):
    got = []
    try:
        for span in tff.iter_record_spans(source, "none", verify_crc=verify_crc,
                                          max_bytes=max_bytes):
            got.append(span)
    except tff.CorruptRecordError as err:
        return got, (err.offset, err.reason)
    return got, None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=40), st.sampled_from(
    ["none", "flip", "cut", "garbage"]), st.integers(0, 10**6), st.booleans(),
    st.sampled_from([None, 100, tff.CHUNK_SIZE]))
@pytest.mark.slow
def test_records_whole_in_a_chunk_read_as_the_general_path_reads_them(records, damage, where,
                                                                     verify_crc, max_bytes):
    """The tight loop over records lying whole in a chunk yields, and fails, exactly as the
    record-by-record path does: same spans, same data, same offset and reason."""
    blob = bytearray(write_all(records))
    if blob and damage == "flip":
        blob[where % len(blob)] ^= 1 << (where % 8)
    elif damage == "cut":
        del blob[where % (len(blob) + 1):]
    elif damage == "garbage":
        blob += bytes([where % 256]) * (where % 40 + 1)
    fast = _spans(io.BytesIO(bytes(blob)), verify_crc, max_bytes)
    general = _spans(SeekableTrickle(bytes(blob), 5), verify_crc, max_bytes)
    assert fast == general


# -- telling a TFRecord file from others (verify's unlisted files) --

@pytest.mark.parametrize("name, expected", [
    ("demo-00000-of-00002.tfrecord", True),
    ("x.tfrecord.gz", True),
    ("x.tfrecord.deflate", True),
    ("x.tfrecord.zlib", True),
    ("X.TFRecord.GZ", True),
    ("train.tfrecords", True),
    ("train.tfr", True),
    ("mnist-train.tfrecord-00000-of-00010", True),
    ("dir/sub/x.tfrecord", True),
    ("x.tfrecord.index", False),  # a sidecar: its content decides
    ("tfrecord.txt", False),
    ("x.tfrx", False),
    ("notes.txt", False),
    ("x.tfrecord/notes.txt", False),
])
def test_named_like_tfrecord(name, expected):
    assert tff.named_like_tfrecord(name) is expected


@pytest.mark.parametrize("head, expected", [
    (tff.frame(b"record"), True),
    (tff.frame(b""), True),
    (tff.frame(b"x" * 100_000)[:tff.SNIFF_BYTES], True),  # only the start is needed
    (gzip.compress(tff.frame(b"record") * 3, mtime=0), True),
    (zlib.compress(tff.frame(b"record")), True),
    (b"", False),
    (tff.frame(b"record")[:11], False),
    (b'{"reason": "bad"}\n' * 10, False),
    (b"0 30\n30 30\n", False),
    (gzip.compress(b"just text\n" * 100, mtime=0), False),
    (zlib.compress(b"just text\n"), False),
    (b"\x1f\x8b" + b"\x00" * 30, False),  # gzip magic, no stream
    (bytes(12), False),  # a zero length's masked CRC is not zero
])
def test_starts_like_tfrecord(head, expected):
    assert tff.starts_like_tfrecord(head) is expected
