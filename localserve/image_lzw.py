"""What a GIF frame's LZW data draws, followed code by code without drawing it.

stb_image (libmtmd's loader) writes each LZW code's string by walking the code table back to
the string's start, and goes on walking for every code the data holds, drawn or not: data that
keeps naming the longest string (4,090 pixels) after its frame is full costs stb about 2,000
table steps a byte, seconds for a few hundred KB on a 64x64 frame. Here the codes are followed
as stb's decoder follows them (the same widths, clear and end codes, table limits), counting
the pixels they draw, up to the frame's area: a frame's data must end there (an end code and
its padding), and at most MAX_GIF_CODES codes are followed (about 0.35 s of Python).
"""

from __future__ import annotations

MAX_GIF_CODES = 1 << 20        # LZW codes followed in one GIF frame (a 1-megapixel frame of noise takes as many)
MAX_FRAME_BYTES = MAX_GIF_CODES * 3 // 2 + 1024    # of a frame's data gathered: as many codes of 12 bits
TRAILING_BYTES = 4             # what may follow a frame's last pixel in its data: the end code, padding


def frame_data(data: bytes, at: int, limit: int) -> bytes:
    """The LZW bytes of the sub-blocks starting at `at`, up to the empty one or `limit` bytes."""
    pieces, size = [], 0
    while at < len(data) and data[at] and size <= limit:
        size += data[at]
        pieces.append(data[at + 1:at + 1 + data[at]])
        at += 1 + data[at]
    return b"".join(pieces)


def drawn(data: bytes, code_size: int, area: int) -> tuple[int, int, int]:
    """(pixels drawn, codes followed, bytes of data left) when the codes have drawn `area`
    pixels, reached the end code, ran out, broke a rule stb refuses, or MAX_GIF_CODES."""
    clear = 1 << code_size
    width, avail, old = code_size + 1, clear + 2, -1
    mask = (1 << width) - 1
    lengths = [1] * clear + [0] * (8194 - clear)
    pixels, codes, acc, bits, at, end = 0, 0, 0, 0, 0, len(data)
    while pixels < area and codes < MAX_GIF_CODES:
        while bits < width:
            if at == end:
                return pixels, codes, 0
            acc |= data[at] << bits
            at += 1
            bits += 8
        code = acc & mask
        acc >>= width
        bits -= width
        codes += 1
        if code == clear:
            width, avail, old = code_size + 1, clear + 2, -1
            mask = (1 << width) - 1
            continue
        if code == clear + 1 or code > avail or (old < 0 and code == avail):
            break                      # the end, or a code stb refuses: it stops there
        if old >= 0:
            lengths[avail] = lengths[old] + 1
            avail += 1
            if avail > 8192:
                break
        pixels += lengths[code]
        if avail & mask == 0 and avail <= 0x0FFF:
            width += 1
            mask = (1 << width) - 1
        old = code
    return pixels, codes, end - at
