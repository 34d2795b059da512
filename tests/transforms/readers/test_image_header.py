"""Image headers read without decoding: every format and mode Pillow writes, hand-built
variants (EXIF, fill bytes, top-down BMP), truncations and garbage."""

from __future__ import annotations

import io
import random
import struct

import pytest
from PIL import Image

from beam_tfrecords.transforms.readers.image_header import (
    ImageHeaderError,
    ImageInfo,
    check_complete,
    read_header,
)

W, H = 13, 7


def encode(mode: str, fmt: str, size=(W, H), **kw) -> bytes:
    image = Image.new(mode, size)
    if mode in ("RGBA", "LA"):  # a transparent pixel, so encoders keep the alpha channel
        image.putpixel((0, 0), (9,) * (len(mode) - 1) + (0,))
    out = io.BytesIO()
    image.save(out, fmt, **kw)
    return out.getvalue()


CASES = [
    # (format, mode, save options, expected channels)
    ("JPEG", "L", {}, 1),
    ("JPEG", "RGB", {}, 3),
    ("JPEG", "CMYK", {}, 4),
    ("JPEG", "L", {"progressive": True}, 1),
    ("JPEG", "RGB", {"progressive": True}, 3),
    ("JPEG", "RGB", {"quality": 95, "subsampling": 0}, 3),
    ("PNG", "1", {}, 1),
    ("PNG", "L", {}, 1),
    ("PNG", "I;16", {}, 1),
    ("PNG", "LA", {}, 2),
    ("PNG", "RGB", {}, 3),
    ("PNG", "P", {}, 3),
    ("PNG", "RGBA", {}, 4),
    ("GIF", "L", {}, 3),
    ("GIF", "RGB", {}, 3),
    ("GIF", "P", {}, 3),
    ("GIF", "RGBA", {}, 3),
    ("BMP", "1", {}, 3),
    ("BMP", "L", {}, 3),
    ("BMP", "P", {}, 3),
    ("BMP", "RGB", {}, 3),
    ("BMP", "RGBA", {}, 4),
    ("WEBP", "RGB", {}, 3),  # VP8
    ("WEBP", "L", {}, 3),
    ("WEBP", "RGBA", {}, 4),  # VP8X with ALPH
    ("WEBP", "LA", {}, 4),
    ("WEBP", "RGB", {"lossless": True}, 3),  # VP8L
    ("WEBP", "RGBA", {"lossless": True}, 4),
    ("WEBP", "P", {"lossless": True}, 3),
]


def _id(case) -> str:
    fmt, mode, kw, _ = case
    return "-".join([fmt, mode, *kw])


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_pillow_files(case):
    fmt, mode, kw, channels = case
    data = encode(mode, fmt, **kw)
    info = read_header(data)
    assert info == ImageInfo(fmt, H, W, channels)
    check_complete(data, info)
    with Image.open(io.BytesIO(data)) as decoded:  # the oracle agrees on the size
        assert decoded.size == (W, H)


@pytest.mark.parametrize("size", [(1, 1), (300, 2), (2, 5000), (16383, 3)])
def test_sizes(size):
    for fmt, mode in (("JPEG", "RGB"), ("PNG", "L"), ("GIF", "P"), ("BMP", "RGB"),
                      ("WEBP", "RGB")):
        if fmt == "JPEG" and size[0] > 5000:
            continue
        info = read_header(encode(mode, fmt, size))
        assert (info.width, info.height) == size, fmt


def test_webp_vp8x_canvas_size_and_alpha_flag():
    data = encode("RGBA", "WEBP", (700, 500))
    assert data[12:16] == b"VP8X"
    assert read_header(data) == ImageInfo("WEBP", 500, 700, 4)
    no_alpha = data[:20] + bytes([data[20] & ~0x10]) + data[21:]
    assert read_header(no_alpha).channels == 3


def test_jpeg_with_exif_comment_and_fill_bytes():
    data = encode("RGB", "JPEG")
    exif = b"Exif\x00\x00" + b"MM\x00\x2a" + b"\xff\xd8\xff\xd9" * 20  # an embedded "thumbnail"
    app1 = b"\xff\xe1" + struct.pack(">H", len(exif) + 2) + exif
    com = b"\xff\xfe" + struct.pack(">H", 7) + b"hello"
    # SOI, APP1 (EXIF), fill bytes, COM, then the rest of Pillow's file after its SOI.
    patched = data[:2] + app1 + b"\xff\xff\xff" + com + data[2:]
    info = read_header(patched)
    assert info == ImageInfo("JPEG", H, W, 3)
    check_complete(patched, info)


def test_jpeg_sof_not_found_and_no_eoi():
    data = encode("RGB", "JPEG")
    sof = data.index(b"\xff\xc0")
    with pytest.raises(ImageHeaderError, match=r"truncated JPEG: no SOF marker before byte"):
        read_header(data[:sof])
    info = read_header(data[:-2])  # the header is intact ...
    with pytest.raises(ImageHeaderError, match="no end-of-image marker"):
        check_complete(data[:-2], info)  # ... but the end is missing
    check_complete(data + b"trailing junk", info)


def test_jpeg_scan_before_frame_is_an_error():
    with pytest.raises(ImageHeaderError, match="scan data at byte 2 before any SOF"):
        read_header(b"\xff\xd8\xff\xda\x00\x08" + bytes(6))


def test_bmp_top_down_and_core_header():
    data = bytearray(encode("RGB", "BMP"))
    struct.pack_into("<i", data, 22, -H)  # a negative height: rows stored top-down
    assert read_header(bytes(data)) == ImageInfo("BMP", H, W, 3)
    core = b"BM" + struct.pack("<IHHI", 26 + 4, 0, 0, 26) + struct.pack("<IHHHH", 12, 4, 2, 1,
                                                                         24) + bytes(4)
    assert read_header(core) == ImageInfo("BMP", 2, 4, 3)


def test_bmp_v5_bitfields_without_alpha():
    header = struct.pack("<IiiHHIIiiII", 124, 3, 2, 1, 32, 3, 0, 0, 0, 0, 0)
    masks = struct.pack("<IIII", 0xFF0000, 0xFF00, 0xFF, 0)  # alpha mask 0
    body = header + masks + bytes(124 - len(header) - len(masks))
    data = b"BM" + struct.pack("<IHHI", 14 + len(body), 0, 0, 14 + len(body)) + body
    assert read_header(data) == ImageInfo("BMP", 2, 3, 3)
    with_alpha = data[:66] + struct.pack("<I", 0xFF000000) + data[70:]
    assert read_header(with_alpha).channels == 4


def test_png_check_complete():
    data = encode("RGB", "PNG")
    info = read_header(data)
    with pytest.raises(ImageHeaderError, match="truncated PNG: no complete IEND"):
        check_complete(data[:-12], info)


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_every_truncation_is_an_image_header_error(case):
    fmt, mode, kw, _ = case
    data = encode(mode, fmt, **kw)
    info = read_header(data)
    for end in range(len(data)):
        cut = data[:end]
        try:
            got = read_header(cut)
        except ImageHeaderError as err:
            assert str(err)
            continue
        # Only cuts after the header may parse, and then they must parse the same.
        assert got == info, (fmt, end)
        assert end >= 13, (fmt, end)  # GIF has the shortest header
        if fmt != "GIF":  # GIF declares no size; the others notice the missing end
            with pytest.raises(ImageHeaderError, match=f"(?i)truncated {fmt}"):
                check_complete(cut, got)


@pytest.mark.parametrize("data, reason", [
    (b"", "the file is empty"),
    (b"hello, world\n", r"not an image: unrecognised signature 0x68656c6c6f2c2077"),
    (b"\x89PNG\r\n\x1a\n" + struct.pack(">I4s", 13, b"IDAT") + bytes(17), "13-byte IHDR"),
    (b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sIIBB", 13, b"IHDR", 1, 1, 8, 5) + bytes(7),
     "unknown colour type 5"),
    (b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sIIBB", 13, b"IHDR", 0, 1, 8, 2) + bytes(7),
     r"0x1 pixels"),
    (b"GIF89a" + bytes(7), r"0x0 pixels"),
    (b"RIFF\x10\x00\x00\x00WEBPABCD\x00\x00\x00\x00", "unknown first chunk"),
    (b"RIFF\x10\x00\x00\x00WAVEfmt \x00\x00\x00\x00", "unrecognised signature"),
    (b"BM" + bytes(12) + struct.pack("<I", 99) + bytes(30), "unknown DIB header size 99"),
    (b"\xff\xd8\x00\x00", r"expected a marker at byte 2, found 0x00"),
    (b"\xff\xd8\xff\xd9", "end-of-image marker at byte 2 before any SOF"),
    ("not bytes", "expected bytes, got str"),
])
def test_garbage(data, reason):
    with pytest.raises(ImageHeaderError, match=reason):
        read_header(data)


def test_random_mutations_raise_only_image_header_errors():
    rng = random.Random(1234)
    seeds = [encode(mode, fmt, **kw) for fmt, mode, kw, _ in CASES]
    for _ in range(3000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 8)):
            position = rng.randrange(min(len(data), 64))  # the header lives up front
            data[position] = rng.randrange(256)
        data = bytes(data[:rng.randint(0, len(data))])
        try:
            info = read_header(data)
        except ImageHeaderError:
            continue
        assert info.format in ("JPEG", "PNG", "GIF", "BMP", "WEBP")
        assert info.height > 0 and info.width > 0 and 1 <= info.channels <= 255
        try:
            check_complete(data, info)
        except ImageHeaderError:
            pass
    for _ in range(2000):
        data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
        try:
            read_header(data)
        except ImageHeaderError:
            pass
