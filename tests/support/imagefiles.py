"""Small real image files made by the tests themselves (no Pillow): PNG, JPEG, GIF and BMP that
stb's loader (libmtmd's) decodes, plus headers of the formats the server refuses.

Each writer takes a size and a colour seed: two different seeds give different pixels (a test
with a projector can tell two images apart). The JPEG is baseline, grayscale, one flat 8×8
block after another (DC coefficients only), which is all a decoder needs to read it; the
progressive JPEG codes the same blocks in a DC scan, then AC scans that are all end-of-band
runs (what most phone and web JPEGs are: progressive, DC first).
"""

from __future__ import annotations

import base64
import struct
import zlib


ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def png(width: int = 8, height: int = 8, seed: int = 0, interlaced: bool = False) -> bytes:
    """RGB, 8 bits; interlaced: Adam7's seven passes, each its own rows."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    def row(y: int, xs: range) -> bytes:
        return b"\x00" + bytes((x * 31 + y * 17 + seed * 101 + c * 53) % 256 for x in xs for c in range(3))
    if not interlaced:
        rows = b"".join(row(y, range(width)) for y in range(height))
    else:
        rows = b"".join(row(y, range(x0, width, dx)) for x0, y0, dx, dy in ADAM7 if x0 < width
                        for y in range(y0, height, dy))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, int(interlaced)))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def bmp(width: int = 8, height: int = 8, seed: int = 0) -> bytes:
    stride = (width * 3 + 3) // 4 * 4
    rows = b"".join(bytes((x * 29 + y * 13 + seed * 97 + c * 41) % 256 for x in range(width) for c in range(3))
                    .ljust(stride, b"\x00") for y in range(height))
    dib = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(rows), 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + len(dib) + len(rows), 0, 0, 14 + len(dib)) + dib + rows


def gif(width: int = 8, height: int = 8, seed: int = 0) -> bytes:
    """128 colours, LZW codes kept 8 bits wide by a clear code every 100 pixels."""
    palette = bytes((i * 2 + seed * 37 + c * 85) % 256 for i in range(128) for c in range(3))
    pixels = [(x + y * 3 + seed) % 128 for y in range(height) for x in range(width)]
    codes = []
    for start in range(0, len(pixels), 100):
        codes += [128] + pixels[start:start + 100]
    codes.append(129)
    data = bytes(codes)          # every code is 8 bits: the bit stream is the bytes themselves
    blocks = b"".join(bytes((len(data[i:i + 255]),)) + data[i:i + 255] for i in range(0, len(data), 255)) + b"\x00"
    screen = struct.pack("<HHBBB", width, height, 0xF6, 0, 0)       # global table of 128 colours
    image = b"," + struct.pack("<HHHHB", 0, 0, width, height, 0) + b"\x07" + blocks
    return b"GIF89a" + screen + palette + image + b";"


def compressed_gif(width: int = 8, height: int = 8, seed: int = 0) -> bytes:
    """8 colours in runs, LZW-compressed as encoders do (strings of many pixels, codes widening
    to 12 bits, a clear when the table is full)."""
    palette = bytes((i * 32 + seed * 37 + c * 85) % 256 for i in range(8) for c in range(3))
    pixels = [(x // 5 + y // 3 + seed) % 8 for y in range(height) for x in range(width)]
    data = pack_lzw(lzw_codes(pixels, 3), 3)
    blocks = b"".join(bytes((len(data[i:i + 255]),)) + data[i:i + 255] for i in range(0, len(data), 255)) + b"\x00"
    screen = struct.pack("<HHBBB", width, height, 0xF2, 0, 0)       # global table of 8 colours
    image = b"," + struct.pack("<HHHHB", 0, 0, width, height, 0) + b"\x03" + blocks
    return b"GIF89a" + screen + palette + image + b";"


def lzw_codes(pixels: list[int], code_size: int) -> list[int]:
    clear = 1 << code_size
    codes, table, following = [clear], {}, clear + 2
    prefix = pixels[0]
    for pixel in pixels[1:]:
        if (prefix, pixel) in table:
            prefix = table[prefix, pixel]
            continue
        codes.append(prefix)
        if following < 4096:
            table[prefix, pixel] = following
            following += 1
        else:                              # the table is full: start again
            codes.append(clear)
            table, following = {}, clear + 2
        prefix = pixel
    return codes + [prefix, clear + 1]


def pack_lzw(codes: list[int], code_size: int) -> bytes:
    """Codes packed least significant bit first, each as wide as a GIF decoder reads it then."""
    clear = 1 << code_size
    value, bits, width, avail, old = 0, 0, code_size + 1, clear + 2, -1
    for code in codes:
        value |= code << bits
        bits += width
        if code == clear:
            width, avail, old = code_size + 1, clear + 2, -1
            continue
        if old >= 0:
            avail += 1
        if avail & ((1 << width) - 1) == 0 and avail <= 0x0FFF:
            width += 1
        old = code
    return value.to_bytes((bits + 7) // 8, "little")


def jpeg(width: int = 8, height: int = 8, seed: int = 0, restart: int = 0) -> bytes:
    """A baseline grayscale JPEG whose 8×8 blocks are flat grays (DC only); restart: a restart
    marker (RST0-7) after every that many blocks, as cameras write them."""
    interval = segment(0xDD, struct.pack(">H", restart)) if restart else b""
    return (b"\xff\xd8" + segment(0xDB, b"\x00" + b"\x01" * 64) + interval
            + segment(0xC0, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
            + segment(0xC4, DC_TABLE) + segment(0xC4, b"\x10" + bytes((1,) + (0,) * 15) + b"\x00")
            + segment(0xDA, b"\x01\x01\x00\x00\x3f\x00") + dc_scan(width, height, seed, eob=True, restart=restart)
            + b"\xff\xd9")


def progressive_jpeg(width: int = 8, height: int = 8, seed: int = 0, ac_scans: int = 2) -> bytes:
    """A progressive grayscale JPEG: the DC scan, then `ac_scans` scans splitting bands 1-63,
    each one end-of-band run over every block."""
    bands = [(1 + 63 * i // ac_scans, 63 * (i + 1) // ac_scans) for i in range(ac_scans)]
    scans = b"".join(segment(0xDA, bytes((1, 1, 0x00, start, end, 0))) + eob_runs(blocks_of(width, height))
                     for start, end in bands)
    return (b"\xff\xd8" + segment(0xDB, b"\x00" + b"\x01" * 64)
            + segment(0xC2, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
            + segment(0xC4, DC_TABLE) + segment(0xC4, EOB_RUN_TABLE)
            + segment(0xDA, b"\x01\x01\x00\x00\x00\x00") + dc_scan(width, height, seed, eob=False)
            + scans + b"\xff\xd9")


# DC differences: categories 0..11, each a 4-bit code. AC (progressive): EOBr, a run of 2^r
# blocks and r more bits of it, for r = 0..14, each a 4-bit code.
DC_TABLE = b"\x00" + bytes((0, 0, 0, 12) + (0,) * 12) + bytes(range(12))
EOB_RUN_TABLE = b"\x10" + bytes((0, 0, 0, 15) + (0,) * 12) + bytes(r << 4 for r in range(15))


def segment(marker: int, data: bytes) -> bytes:
    return bytes((0xFF, marker)) + struct.pack(">H", len(data) + 2) + data


def blocks_of(width: int, height: int) -> int:
    return ((width + 7) // 8) * ((height + 7) // 8)


def dc_scan(width: int, height: int, seed: int, *, eob: bool, restart: int = 0) -> bytes:
    """Flat 8×8 grays, block by block: each its DC difference (and a baseline block's end); with
    `restart`, the blocks in intervals, each packed and ended by its marker, the DC reset."""
    blocks_x, blocks_y = (width + 7) // 8, (height + 7) // 8
    levels = [((bx * 3 + by * 5 + seed * 7) % 15 - 7) * 64 for by in range(blocks_y) for bx in range(blocks_x)]
    if restart:
        intervals = [levels[i:i + restart] for i in range(0, len(levels), restart)]
        return b"".join(coded_blocks(part, eob) + (bytes((0xFF, 0xD0 + k % 8)) if k < len(intervals) - 1 else b"")
                        for k, part in enumerate(intervals))
    return coded_blocks(levels, eob)


def coded_blocks(levels: list[int], eob: bool) -> bytes:
    bits, previous = [], 0
    for level in levels:
        diff, previous = level - previous, level
        size = abs(diff).bit_length()
        bits.append(format(size, "04b"))
        if size:
            bits.append(format(diff if diff > 0 else diff + (1 << size) - 1, f"0{size}b"))
        if eob:
            bits.append("0")                 # baseline AC table: end of block, a 1-bit code
    return pack_bits("".join(bits))


def eob_runs(blocks: int) -> bytes:
    """An AC scan of `blocks` blocks with nothing in them: end-of-band runs."""
    bits = []
    while blocks:
        r = min(blocks.bit_length() - 1, 14)
        run = min(blocks, (1 << (r + 1)) - 1)
        bits.append(format(r, "04b") + (format(run - (1 << r), f"0{r}b") if r else ""))
        blocks -= run
    return pack_bits("".join(bits))


def pack_bits(bits: str) -> bytes:
    """Bits to entropy-coded bytes: padded with ones, each 0xFF stuffed with a 0x00."""
    bits += "1" * (-len(bits) % 8)
    return bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8)).replace(b"\xff", b"\xff\x00")


WRITERS = {"image/png": png, "image/jpeg": jpeg, "image/gif": gif, "image/bmp": bmp}

# Headers of formats libmtmd's loader cannot read (enough for the server to name them).
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x00" * 24
HEIC = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic"
AVIF = b"\x00\x00\x00\x1cftypavif\x00\x00\x00\x00avifmif1miaf"
TIFF = b"II*\x00\x08\x00\x00\x00" + b"\x00" * 16
SVG = b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"></svg>'


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{b64(data)}"
