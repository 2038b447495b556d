"""Images crafted to cost a decoder far more than their bytes (issue 44), made by the tests.

Each is small on the wire and passes a header check that reads only the size: stb_image, which
libmtmd decodes with, allocates for the size declared, reads zeros past missing data, walks the
whole image once per progressive scan, and inflates a PNG's data however far it goes.

- progressive_scans: a progressive JPEG with a thousand empty AC scans (CPU linear in scans);
- bmp_without_pixels: a 54-byte BMP declaring 8192x4096 and no pixel row;
- gif_big_screen: a 43-byte GIF whose 8192x4096 screen holds a 1x1 frame;
- gif_frame_outside: a GIF whose first frame overhangs its screen (stb refuses it; a libmtmd
  built with video then ran ffprobe and ffmpeg on it), two frames of 655 s each;
- gif_without_clear_code: a GIF every header check passes and stb refuses;
- gif_lzw_chains: a 64x64 GIF whose LZW data goes on naming 4,090-pixel strings after its
  frame is full (stb walks each to its start: 1.7 s of CPU for 234 KB);
- png16: a 16-bit RGBA PNG of one colour (a few hundred KB for 16 megapixels);
- png_inflating: a 1x1 PNG whose data inflates to 64 MiB.
"""

from __future__ import annotations

import struct
import zlib

from imagefiles import DC_TABLE, EOB_RUN_TABLE, blocks_of, eob_runs, pack_bits, pack_lzw, segment


def progressive_scans(side: int = 2048, scans: int = 1000, level: int = 0) -> bytes:
    """A side x side grayscale progressive JPEG: a DC scan of flat blocks of one gray (`level`
    steps from the middle), then `scans` AC scans of end-of-band runs over every block."""
    blocks = blocks_of(side, side)
    first = format(level.bit_length(), "04b") + (format(level, "b") if level else "")
    dc = pack_bits(first + "0000" * (blocks - 1))      # then category 0: no difference, a 4-bit code
    empty = segment(0xDA, bytes((1, 1, 0x00, 1, 63, 0))) + eob_runs(blocks)
    return (b"\xff\xd8" + segment(0xDB, b"\x00" + b"\x01" * 64)
            + segment(0xC2, struct.pack(">BHHB", 8, side, side, 1) + b"\x01\x11\x00")
            + segment(0xC4, DC_TABLE) + segment(0xC4, EOB_RUN_TABLE)
            + segment(0xDA, b"\x01\x01\x00\x00\x00\x00") + dc + empty * scans + b"\xff\xd9")


def bmp_without_pixels(width: int = 8192, height: int = 4096) -> bytes:
    dib = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 54, 0, 0, 54) + dib


def gif_big_screen(width: int = 8192, height: int = 4096) -> bytes:
    """A two-colour screen and a 1x1 frame: clear, pixel 0, end (3-bit codes)."""
    screen = struct.pack("<HHBBB", width, height, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    frame = b"," + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02" + b"\x02\x44\x01" + b"\x00"
    return b"GIF89a" + screen + frame + b";"


def gif_frame_outside(width: int = 256, height: int = 256) -> bytes:
    """A looping GIF of two frames shown 655 s each, the first one pixel wider than the screen."""
    screen = struct.pack("<HHBBB", width, height, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    loop = b"!\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"
    delay = b"!\xf9\x04\x00" + struct.pack("<H", 65535) + b"\x00\x00"
    pixels = pack_lzw_runs(width + 1)
    first = b"," + struct.pack("<HHHHB", 0, 0, width + 1, 1, 0) + b"\x02" + pixels
    second = b"," + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02" + b"\x02\x44\x01\x00"
    return b"GIF89a" + screen + loop + delay + first + delay + second + b";"


def pack_lzw_runs(count: int) -> bytes:
    """LZW sub-blocks of `count` pixels of colour 0, clearing before the codes widen past 3 bits."""
    codes = []
    for start in range(0, count, 2):
        codes += [4] + [0] * min(2, count - start)
    codes.append(5)
    value = sum(code << (3 * i) for i, code in enumerate(codes))
    data = value.to_bytes((3 * len(codes) + 7) // 8, "little")
    return b"".join(bytes((len(data[i:i + 255]),)) + data[i:i + 255] for i in range(0, len(data), 255)) + b"\x00"


def gif_without_clear_code() -> bytes:
    """A GIF whose every field passes a header check, but whose LZW data starts with a pixel,
    not the clear code stb requires: stb refuses it."""
    screen = struct.pack("<HHBBB", 8, 8, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    frame = b"," + struct.pack("<HHHHB", 0, 0, 8, 8, 0) + b"\x02" + b"\x02\x00\x00" + b"\x00"
    return b"GIF89a" + screen + frame + b";"


def png16(width: int = 4096, height: int = 4096) -> bytes:
    """A 16-bit RGBA PNG, every pixel zero, compressed row by row (never whole in memory)."""
    packer = zlib.compressobj(9)
    row = b"\x00" * (1 + width * 8)
    data = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    return png_with(struct.pack(">IIBBBBB", width, height, 16, 6, 0, 0, 0), data)


def png_inflating(inflated: int = 64 << 20) -> bytes:
    """A 1x1 RGB PNG whose data inflates to `inflated` bytes, not the 4 its one row takes."""
    packer = zlib.compressobj(9)
    piece = b"\x00" * (1 << 20)
    data = b"".join(packer.compress(piece) for _ in range(inflated >> 20)) + packer.flush()
    return png_with(struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0), data)


def png_with(header: bytes, data: bytes) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def gif_lzw_chains(side: int = 64, cycles: int = 10) -> bytes:
    """A side x side GIF whose LZW data, after the frame is full, keeps naming the longest string
    its table can hold (4,090 pixels a code): stb walks each one to its start although nothing
    is drawn any more. Each cycle builds the chain (codes 6, 7, ... 4095, each the one just
    made), names it 4,000 times, and clears."""
    codes: list[int] = []
    for _ in range(cycles):
        codes += [4, 0] + list(range(6, 4096)) + [4095] * 4000
    codes.append(5)
    data = pack_lzw(codes, 2)
    blocks = b"".join(bytes((len(data[i:i + 255]),)) + data[i:i + 255] for i in range(0, len(data), 255)) + b"\x00"
    screen = struct.pack("<HHBBB", side, side, 0x80, 0, 0) + b"\x00\x00\x00\xff\xff\xff"
    return b"GIF89a" + screen + b"," + struct.pack("<HHHHB", 0, 0, side, side, 0) + b"\x02" + blocks + b";"
