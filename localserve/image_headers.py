"""What decoding an image will cost, read from its own structure before any decoder sees it.

libmtmd decodes an image with stb_image, which trusts what a file declares: it allocates for
the size the header names, reads zeros past missing data, and walks every scan of a
progressive JPEG over the whole image. So each accepted format is read here, stdlib only,
without decoding a pixel, into :class:`ImageFacts`:

- PNG: IHDR (size, bit depth, colour type, interlacing), every chunk's length against the
  bytes present, and the IDAT stream inflated (and thrown away, a piece at a time) to check
  that it holds exactly the rows the header declares: stb allocates for those rows and would
  grow its buffer for whatever more the stream inflates to;
- JPEG: the segments up to the start of frame (size, components and their sampling), then each
  scan (SOS) to the next marker: how many scans and how many entropy-coded bytes;
- GIF: the logical screen (stb decodes onto a buffer that size), the extension blocks, the
  first image descriptor (stb decodes the first frame only) and its LZW codes followed without
  drawing them (image_lzw.py): what they draw, and that the data ends where the frame is full;
- BMP: the headers against the pixel rows actually present (stb reads zeros past the end).

The facts say the pixels a decode produces, the most the data can fill (a JPEG block takes a
bit, a GIF frame what its codes draw, a BMP row its bytes), and the bytes stb_image and
libmtmd hold at the decode's peak (the largest set of their buffers alive at once, and the
bytes' copy: tests/e2e/test_image_decode_memory.py measures peaks under it). Each image
is held to MAX_IMAGE_PIXELS and MAX_DECODE_BYTES as soon as its header is read, before any
walk whose work grows with the size it declares, and refused when it declares more pixels
than its data holds; a structure stb would refuse is refused here too. Each refusal is an
:class:`ImageRefused`, which the dialects turn into a 400 naming the request part.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass

from . import image_lzw
from .errors import InputRefused

MAX_IMAGE_PIXELS = 8192 * 4096         # width × height of one image: 32 megapixels (a GIF: its screen)
MAX_DECODE_BYTES = 256 * 1024 * 1024   # one decode's buffers (stb_image's and libmtmd's), estimated from the header
MAX_PNG_CHUNKS = 1 << 16       # chunks walked in one PNG (encoders write IDATs of 8-64 KB: a 20 MB image has ~2,500)
MAX_JPEG_SEGMENTS = 1024       # segments in one JPEG (EXIF, ICC in 64 KB pieces, tables, a scan's own tables)
MAX_JPEG_SCANS = 64            # scans in one JPEG: stb walks the image once per scan (libjpeg writes 10, mozjpeg ~20)
MAX_GIF_BLOCKS = 4096          # extension sub-blocks before a GIF's first frame (a loop count, XMP, comments)
GIF_FREE_SCREEN = 1 << 20      # a GIF screen this small costs little (9 MiB) whatever its first frame holds
GIF_SCREEN_PER_FRAME = 4       # a GIF's screen may be this many times its first frame (optimisers crop margins)
DECODE_OVERHEAD = 2 << 20      # beside the pixels and the bytes' copy: tables, the preprocessor's own buffers
MTMD_BYTES_PER_PIXEL = 6       # stb's RGB result and libmtmd's bitmap, then that and the preprocessor's copy
INFLATE_PIECE = 1 << 20        # a PNG's IDAT inflated this much at a time when checked


class ImageRefused(InputRefused):
    """Why an image is not taken; code: invalid_image, unsupported_image_format,
    image_media_type_mismatch, image_too_large, remote_image_url, too_many_images, model_has_no_vision."""
    code = "invalid_image"


@dataclass(frozen=True)
class ImageFacts:
    width: int
    height: int
    decoded_pixels: int        # the buffer the decoder fills: the image's (a GIF's logical screen)
    held_pixels: int           # the most pixels its data can fill
    decode_bytes: int          # stb_image's and libmtmd's buffers at the decode's peak, at most
    scans: int = 1             # a JPEG's scans


def read_facts(data: bytes, media_type: str) -> ImageFacts:
    """The facts of an accepted format's image; ImageRefused when its structure is cut short,
    malformed, beyond this module's limits, or declares more pixels than its data holds."""
    name = media_type.split("/")[1].upper()
    try:
        facts = _READERS[media_type](data, len(data) + DECODE_OVERHEAD)
    except (struct.error, IndexError):
        raise ImageRefused(f"the {name} image is truncated: its header is incomplete") from None
    if facts.decoded_pixels > facts.held_pixels:
        raise ImageRefused(f"the {name} image declares {facts.width}x{facts.height} pixels but its data holds "
                           f"{facts.held_pixels} at most: it is truncated or made to cost memory")
    return facts


def _admit(width: int, height: int, decode_bytes: int, name: str) -> None:
    """Refuses an image past the per-image limits: called as soon as a reader knows its size."""
    if width <= 0 or height <= 0:
        raise ImageRefused(f"the {name} image has no pixels ({width}x{height})")
    if width * height > MAX_IMAGE_PIXELS:
        raise ImageRefused(f"the image is {width}x{height} pixels, more than MAX_IMAGE_PIXELS "
                           f"({MAX_IMAGE_PIXELS}) allows", "image_too_large")
    if decode_bytes > MAX_DECODE_BYTES:
        raise ImageRefused(f"decoding the {width}x{height} {name} image would take about {decode_bytes >> 20} MiB, "
                           f"more than MAX_DECODE_BYTES ({MAX_DECODE_BYTES >> 20} MiB) allows", "image_too_large")


def size_of(data: bytes, media_type: str) -> tuple[int, int]:
    """(width, height) from the header alone."""
    try:
        return _SIZES[media_type](data)
    except (struct.error, IndexError):
        name = media_type.split("/")[1].upper()
        raise ImageRefused(f"the {name} image is truncated: its header is incomplete") from None


# ---- PNG ------------------------------------------------------------------------------

_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}        # colour type → samples per pixel
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def _png_size(data: bytes) -> tuple[int, int]:
    if data[12:16] != b"IHDR":
        raise ImageRefused("the PNG image is truncated or malformed: no IHDR header")
    return struct.unpack_from(">II", data, 16)


def _png(data: bytes, beside: int) -> ImageFacts:
    width, height = _png_size(data)
    depth, color, _, _, interlace = struct.unpack_from(">BBBBB", data, 24)
    if depth not in _PNG_DEPTHS.get(color, ()):
        raise ImageRefused(f"the PNG image is malformed: colour type {color} with bit depth {depth}")
    idat, transparent = _png_chunks(data)
    bits = _PNG_CHANNELS[color] * depth
    rows = _png_row_bytes(width, height, bits, interlace)
    out = (4 if transparent else 3) if color == 3 else _PNG_CHANNELS[color] + transparent
    pixels = width * height
    out_bytes = pixels * out * (2 if depth == 16 else 1)
    again = 2 if interlace else 1      # an interlaced image's rows outgrow stb's guess; its passes are copied
    # stb's buffers alive at once, stage by stage: the IDATs gathered (doubling) and the rows
    # inflated; the rows and the image unfiltered; the image and its conversion (16 to 8 bits,
    # palette expanded, to RGB); then libmtmd's copies
    decode = beside + max(2 * sum(length for _, length in idat) + again * rows, again * (rows + out_bytes),
                          out_bytes + 6 * pixels, MTMD_BYTES_PER_PIXEL * pixels)
    _admit(width, height, decode, "PNG")
    inflated = _inflated_size(data, idat, rows)
    if inflated > rows:
        raise ImageRefused(f"the PNG image's data inflates to more than the {rows} bytes its {width}x{height} "
                           f"pixels take")
    return ImageFacts(width, height, pixels, pixels * inflated // rows, decode)


def _png_chunks(data: bytes) -> tuple[list[tuple[int, int]], bool]:
    """The IDAT chunks' (start, length), and whether a tRNS chunk adds alpha; each chunk's length
    checked against the bytes present, up to IEND."""
    at, idat, transparent = 8, [], False
    for _ in range(MAX_PNG_CHUNKS):
        length, kind = struct.unpack_from(">I4s", data, at)
        if at + 12 + length > len(data):
            raise ImageRefused(f"the PNG image is truncated: its {kind.decode('latin-1')!r} chunk declares "
                               f"{length} bytes, {max(len(data) - at - 12, 0)} remain")
        if kind == b"IDAT":
            idat.append((at + 8, length))
        elif kind == b"tRNS":
            transparent = True
        elif kind == b"IEND":
            if not idat:
                raise ImageRefused("the PNG image has no image data (IDAT chunk)")
            return idat, transparent
        at += 12 + length
    raise ImageRefused(f"the PNG image has more than MAX_PNG_CHUNKS ({MAX_PNG_CHUNKS}) chunks")


def _png_row_bytes(width: int, height: int, bits: int, interlace: int) -> int:
    """The bytes of the filtered rows the header declares (each row one filter byte more)."""
    if not interlace:
        return height * (1 + (width * bits + 7) // 8)
    total = 0
    for x0, y0, dx, dy in _ADAM7:
        w, h = (width - x0 + dx - 1) // dx, (height - y0 + dy - 1) // dy
        if w > 0 and h > 0:
            total += h * (1 + (w * bits + 7) // 8)
    return total


def _inflated_size(data: bytes, idat: list[tuple[int, int]], limit: int) -> int:
    """What the IDAT stream inflates to, counted a piece at a time, stopping past `limit`."""
    inflater, produced = zlib.decompressobj(), 0
    try:
        for start, length in idat:
            pending = data[start:start + length]
            while pending and produced <= limit:
                produced += len(inflater.decompress(pending, INFLATE_PIECE))
                pending = inflater.unconsumed_tail
            if produced > limit or inflater.eof:
                break
        if produced <= limit:
            produced += len(inflater.flush())      # what the last piece left inside (a match at most)
    except zlib.error:
        raise ImageRefused("the PNG image's data is corrupt: it does not inflate") from None
    return produced


# ---- JPEG -----------------------------------------------------------------------------

# Start-of-frame markers: baseline, extended and progressive Huffman are what stb reads.
_SOF_READ = {0xC0, 0xC1, 0xC2}
_SOF_OTHER = {0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
# Where entropy-coded data ends: a marker (0xFF, then neither a stuffed 0x00, a restart nor fill).
_NEXT_MARKER = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


@dataclass
class _Frame:
    width: int
    height: int
    progressive: bool
    sampling: list[tuple[int, int]]          # each component's (horizontal, vertical) factors


def _jpeg_size(data: bytes) -> tuple[int, int]:
    frame, _ = _jpeg_frame(data)
    return frame.width, frame.height


def _jpeg_frame(data: bytes) -> tuple[_Frame, int]:
    """The start of frame and where the segment after it begins; segments walked up to it."""
    at = 2
    for _ in range(MAX_JPEG_SEGMENTS):
        marker, at = _jpeg_marker(data, at)
        if marker in (0xD9, 0xDA):
            raise ImageRefused("the JPEG image is truncated or malformed: no frame header before its data")
        if marker is None:
            continue
        (length,) = struct.unpack_from(">H", data, at + 2)
        if marker in _SOF_OTHER:
            raise ImageRefused("the JPEG image is lossless, hierarchical or arithmetic-coded; accepted JPEGs "
                               "are baseline or progressive", "unsupported_image_format")
        if marker in _SOF_READ:
            return _jpeg_frame_header(data, at, marker), at + 2 + length
        at += 2 + length
    raise ImageRefused(f"the JPEG image has more than MAX_JPEG_SEGMENTS ({MAX_JPEG_SEGMENTS}) segments")


def _jpeg_marker(data: bytes, at: int) -> tuple[int | None, int]:
    """The marker at `at` (fill bytes skipped) and where it starts; None for a marker without a
    length (SOI, TEM, a restart), with the position after it."""
    if data[at] != 0xFF:
        raise ImageRefused("the JPEG image is malformed: a segment does not start with 0xFF")
    while data[at + 1] == 0xFF:      # fill bytes
        at += 1
    marker = data[at + 1]
    if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
        return None, at + 2
    return marker, at


def _jpeg_frame_header(data: bytes, at: int, marker: int) -> _Frame:
    precision, height, width, count = struct.unpack_from(">BHHB", data, at + 4)
    if precision != 8:
        raise ImageRefused(f"the JPEG image has {precision}-bit samples; accepted JPEGs have 8",
                           "unsupported_image_format")
    if count not in (1, 3, 4):
        raise ImageRefused(f"the JPEG image is malformed: {count} colour components")
    sampling = []
    for i in range(count):
        factors = data[at + 11 + 3 * i]
        h, v = factors >> 4, factors & 15
        if not (1 <= h <= 4 and 1 <= v <= 4):
            raise ImageRefused(f"the JPEG image is malformed: sampling factors {h}x{v}")
        sampling.append((h, v))
    return _Frame(width, height, marker == 0xC2, sampling)


def _jpeg(data: bytes, beside: int) -> ImageFacts:
    frame, at = _jpeg_frame(data)
    decode = beside + _jpeg_decode_bytes(frame)
    _admit(frame.width, frame.height, decode, "JPEG")
    scans, coded, segments = 0, 0, 0
    while at < len(data) - 1:
        marker, at = _jpeg_marker(data, at)
        if marker is None:
            continue
        if marker == 0xD9:           # end of image
            break
        segments += 1
        if segments > MAX_JPEG_SEGMENTS:
            raise ImageRefused(f"the JPEG image has more than MAX_JPEG_SEGMENTS ({MAX_JPEG_SEGMENTS}) segments")
        (length,) = struct.unpack_from(">H", data, at + 2)
        at += 2 + length
        if marker == 0xDA:
            scans += 1
            if scans > MAX_JPEG_SCANS:
                raise ImageRefused(f"the JPEG image has more than MAX_JPEG_SCANS ({MAX_JPEG_SCANS}) scans; a "
                                   f"progressive JPEG's encoder writes about 10", "image_too_large")
            found = _NEXT_MARKER.search(data, at)
            end = found.start() if found else len(data)     # cut short: stb reads the rest as zeros
            coded += end - at
            at = end
    if not scans:
        raise ImageRefused("the JPEG image is truncated: it has no scan")
    return _jpeg_facts(frame, scans, coded, decode)


def _jpeg_decode_bytes(frame: _Frame) -> int:
    """stb's buffers: each component's plane padded to whole MCUs (and its coefficients, 2 bytes
    each, when progressive) beside the RGB output; then libmtmd's copies."""
    h_max, v_max = max(h for h, _ in frame.sampling), max(v for _, v in frame.sampling)
    mcu_x, mcu_y = -(-frame.width // (8 * h_max)), -(-frame.height // (8 * v_max))
    planes = sum(mcu_x * h * 8 * mcu_y * v * 8 for h, v in frame.sampling) * (3 if frame.progressive else 1)
    pixels = frame.width * frame.height
    return max(planes + 3 * pixels, MTMD_BYTES_PER_PIXEL * pixels)


def _jpeg_facts(frame: _Frame, scans: int, coded: int, decode: int) -> ImageFacts:
    width, height = frame.width, frame.height
    h_max, v_max = max(h for h, _ in frame.sampling), max(v for _, v in frame.sampling)
    # every block of every component is coded in a scan with a bit at least (its DC value)
    blocks = sum(-(-width * h // h_max // 8) * -(-height * v // v_max // 8) for h, v in frame.sampling)
    held = width * height if coded * 8 >= blocks else width * height * coded * 8 // blocks
    return ImageFacts(width, height, width * height, held, decode, scans)


# ---- GIF ------------------------------------------------------------------------------

def _gif_size(data: bytes) -> tuple[int, int]:
    return struct.unpack_from("<HH", data, 6)


def _gif(data: bytes, beside: int) -> ImageFacts:
    width, height, flags = struct.unpack_from("<HHB", data, 6)
    screen = width * height
    # stb decodes the first frame onto a screen-sized RGBA image, its background and its history,
    # and converts it to RGB before it frees those two
    decode = beside + screen * max(4 + 4 + 1 + 3, MTMD_BYTES_PER_PIXEL)
    _admit(width, height, decode, "GIF")
    at = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    blocks = 0
    while data[at] == 0x21:          # an extension: its label, then sub-blocks up to an empty one
        at += 2
        while data[at]:
            at += 1 + data[at]
            blocks += 1
            if blocks > MAX_GIF_BLOCKS:
                raise ImageRefused(f"the GIF image has more than MAX_GIF_BLOCKS ({MAX_GIF_BLOCKS}) extension "
                                   f"blocks before its first frame")
        at += 1
    if data[at] != 0x2C:
        raise ImageRefused("the GIF image has no frame: no image descriptor after its header")
    left, top, w, h, frame_flags = struct.unpack_from("<HHHHB", data, at + 1)
    if left + w > width or top + h > height:
        raise ImageRefused(f"the GIF image's first frame ({w}x{h} at {left},{top}) lies outside its {width}x{height} "
                           f"screen")
    if not (flags | frame_flags) & 0x80:
        raise ImageRefused("the GIF image has no colour table")
    at += 10 + (3 << ((frame_flags & 7) + 1) if frame_flags & 0x80 else 0)
    if data[at] > 12:
        raise ImageRefused(f"the GIF image is malformed: an LZW code size of {data[at]}")
    pixels, codes, left_over = image_lzw.drawn(image_lzw.frame_data(data, at + 1, image_lzw.MAX_FRAME_BYTES),
                                               data[at], w * h)
    if codes >= image_lzw.MAX_GIF_CODES:
        raise ImageRefused(f"the GIF image's first frame takes more than MAX_GIF_CODES ({image_lzw.MAX_GIF_CODES}) "
                           f"LZW codes", "image_too_large")
    if left_over > image_lzw.TRAILING_BYTES:
        raise ImageRefused(f"the GIF image's first frame has {left_over} bytes of data after its {w}x{h} pixels "
                           f"(stb would walk every code of them)")
    held = min(GIF_SCREEN_PER_FRAME * min(pixels, w * h), screen)
    return ImageFacts(width, height, screen, screen if screen <= GIF_FREE_SCREEN else held, decode)


# ---- BMP ------------------------------------------------------------------------------

_BMP_DEPTHS = (1, 4, 8, 16, 24, 32)


def _bmp_size(data: bytes) -> tuple[int, int]:
    return _bmp_header(data)[:2]


def _bmp_header(data: bytes) -> tuple[int, int, int]:
    """(width, height, bits per pixel)."""
    (header_size,) = struct.unpack_from("<I", data, 14)
    if header_size == 12:        # OS/2 BITMAPCOREHEADER: 16-bit sizes
        width, height, _, bits = struct.unpack_from("<HHHH", data, 18)
        return width, height, bits
    width, height, _, bits, compression = struct.unpack_from("<iiHHI", data, 18)
    if compression not in (0, 3, 6):     # RGB, bit fields: what stb reads (not RLE, JPEG, PNG)
        raise ImageRefused(f"the BMP image is compressed (method {compression}); accepted BMPs are uncompressed",
                           "unsupported_image_format")
    return width, abs(height), bits      # a negative height is a top-down bitmap


def _bmp(data: bytes, beside: int) -> ImageFacts:
    width, height, bits = _bmp_header(data)
    if bits not in _BMP_DEPTHS:
        raise ImageRefused(f"the BMP image is malformed: {bits} bits a pixel")
    decode = beside + width * height * max(3, MTMD_BYTES_PER_PIXEL)     # stb's RGB image, then libmtmd's copies
    _admit(width, height, decode, "BMP")
    (offset,) = struct.unpack_from("<I", data, 10)
    stride = (width * bits + 31) // 32 * 4
    present = max(len(data) - offset, 0)
    # the last row's padding may be left off
    needed = stride * (height - 1) + (width * bits + 7) // 8 if height > 0 else 0
    held = width * height if present >= needed else present // stride * width
    return ImageFacts(width, height, width * height, held, decode)


_READERS = {"image/png": _png, "image/jpeg": _jpeg, "image/gif": _gif, "image/bmp": _bmp}
_SIZES = {"image/png": _png_size, "image/jpeg": _jpeg_size, "image/gif": _gif_size, "image/bmp": _bmp_size}
