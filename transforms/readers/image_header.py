"""Image dimensions from the first bytes of a file, without decoding any pixels.

:func:`read_header` recognises JPEG, PNG, GIF, BMP and WebP by their signatures and reads
height, width and channel count from the header structures the format defines:

- JPEG: the marker segments are walked (APPn/EXIF, tables, comments, fill bytes) up to the
  first start-of-frame segment (SOF0..SOF15 except DHT, JPG and DAC); channels is its
  component count (1 gray, 3 YCbCr, 4 CMYK/YCCK). Baseline and progressive alike.
- PNG: the IHDR chunk; channels from the colour type (gray 1, gray+alpha 2, RGB 3,
  palette 3, RGBA 4).
- GIF: the logical screen descriptor; channels 3.
- BMP: the DIB header (BITMAPCOREHEADER, BITMAPINFOHEADER and its V2..V5 successors); a
  negative height means rows are stored top-down; 32 bits per pixel count as 4 channels
  unless the header's alpha mask says there is no alpha.
- WebP: the first chunk, VP8 (lossy), VP8L (lossless, with its alpha hint) or VP8X
  (extended, with its alpha flag); channels 3, or 4 with alpha.

:func:`check_complete` adds a cheap test that the file was not cut short after its header
(the JPEG end-of-image marker, PNG's IEND chunk, the RIFF and BMP declared sizes).

Every problem -- unknown signature, truncation, an impossible value -- raises
:class:`ImageHeaderError` (a ``ValueError``) with a reason that names the format and the byte
offset; no other exception escapes for any input. Pure Python: no Beam, no I/O.
"""

from __future__ import annotations

import dataclasses
import struct

from beam_tfrecords.errors import UserError

__all__ = ["FORMATS", "ImageHeaderError", "ImageInfo", "check_complete", "read_header"]

FORMATS = ("JPEG", "PNG", "GIF", "BMP", "WEBP")

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # the whole 12-byte end chunk
_PNG_CHANNELS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
# Start-of-frame markers: C0..CF except C4 (DHT), C8 (JPG, reserved) and CC (DAC).
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
# Markers that stand alone (no length field): TEM, RST0..RST7, SOI.
_JPEG_STANDALONE = frozenset([0x01, *range(0xD0, 0xD9)])
_JPEG_SOS, _JPEG_EOI = 0xDA, 0xD9


class ImageHeaderError(UserError, ValueError):
    """The bytes are not an image this module understands, or its header is cut short."""


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    format: str  # one of FORMATS
    height: int
    width: int
    channels: int
    # JPEG: where its frame header ends, found by read_header, so that check_complete does
    # not walk the segments again (not part of equality: the same image is the same info).
    header_end: int = dataclasses.field(default=0, compare=False)


def read_header(data: bytes) -> ImageInfo:
    """The format, height, width and channel count of an encoded image; never decodes it.

    Args:
        data: the image file's bytes.

    Returns:
        The image's facts.

    Raises:
        ImageHeaderError: not a JPEG, PNG, GIF, WebP or BMP, or a malformed header.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ImageHeaderError(f"not an image: expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if not data:
        raise ImageHeaderError("not an image: the file is empty")
    if data.startswith(b"\xff\xd8"):
        return _jpeg(data)
    if _PNG_SIGNATURE.startswith(data[:8]):
        return _png(data)
    if data[:6] in (b"GIF87a", b"GIF89a") or (
            len(data) < 6 and any(s.startswith(data) for s in (b"GIF87a", b"GIF89a"))):
        return _gif(data)
    if data.startswith(b"BM"):
        return _bmp(data)
    if data.startswith(b"RIFF") and (len(data) < 12 or data[8:12] == b"WEBP"):
        return _webp(data)
    raise ImageHeaderError(
        f"not an image: unrecognised signature 0x{data[:8].hex()} (expected JPEG, PNG, GIF, "
        "BMP or WebP)")


def check_complete(data: bytes, info: ImageInfo) -> None:
    """Raise :class:`ImageHeaderError` when the file visibly ends before its image data does.

    JPEG: no end-of-image marker after the frame header (entropy-coded data never contains
    it, so trailing bytes after the marker are allowed). PNG: no IEND chunk. WebP: fewer
    bytes than the RIFF header declares. BMP: fewer bytes than the file header declares.
    GIF has no size field to check and always passes.

    Args:
        data: the image file's bytes.
        info: its :func:`read_header`.

    Raises:
        ImageHeaderError: the file is truncated.
    """
    data = bytes(data)
    if len(data) < 30 and info.format in ("WEBP", "BMP"):
        raise ImageHeaderError(f"truncated {info.format}: only {len(data)} bytes")
    if info.format == "JPEG":
        end = info.header_end or _jpeg(data).header_end
        # Searched from the end: a complete file ends with the marker, found at once.
        if data.rfind(b"\xff\xd9", end) < 0:
            raise ImageHeaderError(
                f"truncated JPEG: no end-of-image marker (FF D9) in its {len(data)} bytes")
    elif info.format == "PNG":
        if data.rfind(_PNG_IEND, 33) < 0:
            raise ImageHeaderError(
                f"truncated PNG: no complete IEND chunk in its {len(data)} bytes")
    elif info.format == "WEBP":
        declared = 8 + struct.unpack_from("<I", data, 4)[0]
        if len(data) < declared:
            raise ImageHeaderError(
                f"truncated WebP: the RIFF header declares {declared} bytes, the file has "
                f"{len(data)}")
    elif info.format == "BMP":
        declared = struct.unpack_from("<I", data, 2)[0]
        if declared >= 26 and len(data) < declared:
            raise ImageHeaderError(
                f"truncated BMP: the file header declares {declared} bytes, the file has "
                f"{len(data)}")


def _need(data: bytes, end: int, fmt: str, what: str) -> None:
    if len(data) < end:
        raise ImageHeaderError(
            f"truncated {fmt}: {what} needs {end} bytes, the data ends at byte {len(data)}")


def _dims(fmt: str, height: int, width: int, channels: int, header_end: int = 0) -> ImageInfo:
    if height <= 0 or width <= 0:
        raise ImageHeaderError(f"invalid {fmt}: the header says {width}x{height} pixels")
    return ImageInfo(fmt, height, width, channels, header_end)


def _jpeg(data: bytes) -> ImageInfo:
    """The frame header's info, its ``header_end`` just past the SOF segment."""
    pos = 2
    size = len(data)
    while True:
        if pos >= size:
            raise ImageHeaderError(f"truncated JPEG: no SOF marker before byte {size}")
        if data[pos] != 0xFF:
            raise ImageHeaderError(
                f"invalid JPEG: expected a marker at byte {pos}, found 0x{data[pos]:02x}")
        while pos < size and data[pos] == 0xFF:  # fill bytes before a marker code
            pos += 1
        if pos >= size:
            raise ImageHeaderError(f"truncated JPEG: no SOF marker before byte {size}")
        marker = data[pos]
        start = pos - 1
        pos += 1
        if marker in _JPEG_STANDALONE:
            continue
        if marker == _JPEG_EOI:
            raise ImageHeaderError(f"invalid JPEG: end-of-image marker at byte {start} "
                                   "before any SOF marker")
        if marker == _JPEG_SOS:
            raise ImageHeaderError(f"invalid JPEG: scan data at byte {start} before any SOF "
                                   "marker")
        if marker == 0x00:
            raise ImageHeaderError(f"invalid JPEG: stuffed byte FF 00 at byte {start} where "
                                   "a marker segment was expected")
        if pos + 2 > size:
            raise ImageHeaderError(f"truncated JPEG: no SOF marker before byte {size}")
        (length,) = struct.unpack_from(">H", data, pos)
        if length < 2:
            raise ImageHeaderError(f"invalid JPEG: marker 0x{marker:02x} at byte {start} has "
                                   f"segment length {length}")
        if marker in _JPEG_SOF:
            _need(data, pos + 8, "JPEG", f"the SOF{marker - 0xC0} frame header at byte {start}")
            _precision, height, width, components = struct.unpack_from(">BHHB", data, pos + 2)
            if length < 8 + 3 * components:
                raise ImageHeaderError(
                    f"invalid JPEG: SOF{marker - 0xC0} at byte {start} declares {components} "
                    f"components in a {length}-byte segment")
            _need(data, pos + length, "JPEG",
                  f"the SOF{marker - 0xC0} frame header at byte {start}")
            if components == 0:
                raise ImageHeaderError(f"invalid JPEG: SOF{marker - 0xC0} at byte {start} "
                                       "declares 0 components")
            if height == 0:
                raise ImageHeaderError(
                    f"unsupported JPEG: SOF{marker - 0xC0} at byte {start} leaves the height "
                    "to a DNL marker after the scan")
            return _dims("JPEG", height, width, components, pos + length)
        pos += length


def _png(data: bytes) -> ImageInfo:
    _need(data, 8, "PNG", "the signature")
    _need(data, 16, "PNG", "the first chunk header")
    length, kind = struct.unpack_from(">I4s", data, 8)
    if kind != b"IHDR" or length != 13:
        raise ImageHeaderError(
            f"invalid PNG: the first chunk must be a 13-byte IHDR, found {kind!r} of "
            f"{length} bytes")
    _need(data, 29, "PNG", "the IHDR chunk")
    width, height, depth, colour = struct.unpack_from(">IIBB", data, 16)
    if colour not in _PNG_CHANNELS:
        raise ImageHeaderError(f"invalid PNG: unknown colour type {colour}")
    if depth not in _PNG_DEPTHS[colour]:
        raise ImageHeaderError(f"invalid PNG: bit depth {depth} with colour type {colour}")
    if width > 2**31 - 1 or height > 2**31 - 1:
        raise ImageHeaderError(f"invalid PNG: the header says {width}x{height} pixels")
    return _dims("PNG", height, width, _PNG_CHANNELS[colour])


def _gif(data: bytes) -> ImageInfo:
    _need(data, 13, "GIF", "the logical screen descriptor")
    width, height = struct.unpack_from("<HH", data, 6)
    return _dims("GIF", height, width, 3)


def _bmp(data: bytes) -> ImageInfo:
    _need(data, 18, "BMP", "the file header and the DIB header size")
    (header_size,) = struct.unpack_from("<I", data, 14)
    if header_size == 12:  # BITMAPCOREHEADER (OS/2 1.x): unsigned 16-bit sizes
        _need(data, 26, "BMP", "the 12-byte BITMAPCOREHEADER")
        width, height, _planes, bits = struct.unpack_from("<HHHH", data, 18)
        alpha_mask = None
    elif header_size in (16, 40, 52, 56, 64, 108, 124):
        _need(data, 14 + min(header_size, 40), "BMP", f"the {header_size}-byte DIB header")
        if header_size == 16:  # OS/2 2.x short form
            width, height, _planes, bits = struct.unpack_from("<iiHH", data, 18)
            compression = 0
        else:
            width, height, _planes, bits, compression = struct.unpack_from("<iiHHI", data, 18)
        alpha_mask = None
        if header_size >= 56 and compression in (3, 6):  # BI_BITFIELDS / BI_ALPHABITFIELDS
            _need(data, 70, "BMP", "the DIB header's alpha mask")
            (alpha_mask,) = struct.unpack_from("<I", data, 66)
    else:
        raise ImageHeaderError(f"invalid BMP: unknown DIB header size {header_size}")
    if bits not in (1, 2, 4, 8, 16, 24, 32, 64) and not (bits == 0 and header_size >= 40):
        raise ImageHeaderError(f"invalid BMP: {bits} bits per pixel")
    height = abs(height)  # negative: rows stored top-down
    channels = 4 if bits in (32, 64) and alpha_mask != 0 else 3
    return _dims("BMP", height, width, channels)


def _webp(data: bytes) -> ImageInfo:
    _need(data, 12, "WebP", "the RIFF header")
    _need(data, 20, "WebP", "the first chunk header")
    kind = data[12:16]
    if kind == b"VP8 ":
        _need(data, 30, "WebP", "the VP8 frame header")
        if data[20] & 1:
            raise ImageHeaderError("invalid WebP: the VP8 frame is not a key frame")
        if data[23:26] != b"\x9d\x01\x2a":
            raise ImageHeaderError(
                f"invalid WebP: bad VP8 start code 0x{data[23:26].hex()} at byte 23")
        width, height = struct.unpack_from("<HH", data, 26)
        return _dims("WEBP", height & 0x3FFF, width & 0x3FFF, 3)
    if kind == b"VP8L":
        _need(data, 25, "WebP", "the VP8L header")
        if data[20] != 0x2F:
            raise ImageHeaderError(
                f"invalid WebP: bad VP8L signature 0x{data[20]:02x} at byte 20")
        (bits,) = struct.unpack_from("<I", data, 21)
        if bits >> 29:
            raise ImageHeaderError(f"invalid WebP: VP8L version {bits >> 29}")
        width = (bits & 0x3FFF) + 1
        height = ((bits >> 14) & 0x3FFF) + 1
        return _dims("WEBP", height, width, 4 if bits >> 28 & 1 else 3)
    if kind == b"VP8X":
        _need(data, 30, "WebP", "the VP8X header")
        flags = data[20]
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return _dims("WEBP", height, width, 4 if flags & 0x10 else 3)
    raise ImageHeaderError(f"invalid WebP: unknown first chunk {kind!r} at byte 12")
