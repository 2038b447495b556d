"""localserve/image_headers.py: what decoding an image will cost, read from its structure alone,
and the images refused for it (issue 44): each crafted bomb of tests/support/hostile_images.py
is refused with its reason, and valid images of every format (progressive JPEGs included) pass."""

from __future__ import annotations

import struct
import zlib

import pytest

import hostile_images
import imagefiles
from localserve import image_headers, image_lzw
from localserve.image_headers import ImageRefused, read_facts
from localserve.images import from_bytes


@pytest.mark.parametrize("media_type", sorted(imagefiles.WRITERS))
def test_valid_images_hold_every_pixel_they_declare(media_type):
    facts = read_facts(imagefiles.WRITERS[media_type](33, 17, seed=2), media_type)
    assert (facts.width, facts.height, facts.decoded_pixels, facts.held_pixels) == (33, 17, 561, 561)
    assert 0 < facts.decode_bytes < image_headers.MAX_DECODE_BYTES


@pytest.mark.parametrize("data", [imagefiles.png(21, 13, interlaced=True), imagefiles.png(1, 1, interlaced=True),
                                  imagefiles.png(3, 9, interlaced=True), imagefiles.jpeg(40, 24, restart=1),
                                  imagefiles.jpeg(40, 24, restart=7)], ids=["adam7", "adam7-1x1", "adam7-3x9",
                                                                           "rst-1", "rst-7"])
def test_interlaced_pngs_and_jpegs_with_restart_markers_are_read(data):
    facts = read_facts(data, "image/png" if data.startswith(b"\x89PNG") else "image/jpeg")
    assert facts.held_pixels == facts.decoded_pixels == facts.width * facts.height


@pytest.mark.parametrize("ac_scans", [1, 2, 9])
def test_a_progressive_jpeg_with_a_sane_scan_count_is_read(ac_scans):
    data = imagefiles.progressive_jpeg(40, 24, seed=1, ac_scans=ac_scans)
    facts = read_facts(data, "image/jpeg")
    assert (facts.width, facts.height, facts.scans) == (40, 24, 1 + ac_scans)
    assert from_bytes(data).pixels == 40 * 24


def refusal(data: bytes, media_type: str | None = None) -> ImageRefused:
    with pytest.raises(ImageRefused) as caught:
        from_bytes(data, media_type)
    return caught.value


def test_a_progressive_jpeg_past_the_scan_limit_is_refused_before_its_scans_are_walked():
    error = refusal(hostile_images.progressive_scans(side=256, scans=1000))
    assert "MAX_JPEG_SCANS (64)" in str(error) and error.code == "image_too_large"
    limit = image_headers.MAX_JPEG_SCANS
    assert read_facts(hostile_images.progressive_scans(side=64, scans=limit - 1), "image/jpeg").scans == limit
    assert "MAX_JPEG_SCANS" in str(refusal(hostile_images.progressive_scans(side=64, scans=limit)))


def test_a_bmp_without_its_pixel_rows_is_refused():
    small = hostile_images.bmp_without_pixels(64, 32)
    assert "declares 64x32 pixels but its data holds 0" in str(refusal(small))
    whole = imagefiles.bmp(63, 32)                           # rows of 189 bytes, padded to 192
    assert from_bytes(whole[:-3]).pixels == 63 * 32          # the last row's padding may be left off
    assert "holds 1953" in str(refusal(whole[:-4]))          # 31 of its 32 rows
    assert "declares 8192x4096 pixels but its data holds 0" in str(refusal(hostile_images.bmp_without_pixels()))


def test_a_gif_screen_its_first_frame_does_not_fill_is_refused():
    assert "declares 2048x2048 pixels but its data holds 4 at most" in str(
        refusal(hostile_images.gif_big_screen(2048, 2048)))
    assert refusal(hostile_images.gif_big_screen()).code == "image_too_large"     # 8192x4096: past the budget
    small = hostile_images.gif_big_screen(1000, 1000)           # under GIF_FREE_SCREEN: cheap whatever it holds
    assert from_bytes(small).pixels == 1000 * 1000


def test_a_gif_frame_outside_its_screen_is_refused():
    assert "first frame (257x1 at 0,0) lies outside its 256x256 screen" in str(
        refusal(hostile_images.gif_frame_outside()))


def test_gif_data_past_its_frame_is_refused_before_stb_walks_it():
    """stb walks every code's string to its start, drawn or not: 2,000 steps a byte of codes
    naming the longest string after the frame is full."""
    error = refusal(hostile_images.gif_lzw_chains(64, 2))
    assert "first frame has" in str(error) and "bytes of data after its 64x64 pixels" in str(error)
    assert from_bytes(imagefiles.gif(200, 150)).pixels == 200 * 150      # data ends with the frame


@pytest.mark.parametrize("width, height", [(1, 1), (40, 30), (300, 200), (1200, 1000)])
def test_the_pixels_a_compressed_gif_frame_draws_are_counted_exactly(width, height):
    """Codes of many pixels each, widening to 12 bits, clears when the table is full."""
    data = imagefiles.compressed_gif(width, height)
    start = 13 + 24 + 10
    pixels, codes, left_over = image_lzw.drawn(image_lzw.frame_data(data, start + 1, 1 << 30), data[start],
                                               10 ** 9)
    assert pixels == width * height and left_over == 0
    assert codes < width * height // 3 or width * height < 100       # compressed
    assert read_facts(data, "image/gif").held_pixels == width * height


def test_a_gif_frame_past_the_code_limit_is_refused(monkeypatch):
    monkeypatch.setattr(image_lzw, "MAX_GIF_CODES", 1000)
    error = refusal(imagefiles.gif(40, 40))        # a code a pixel: 1,600 of them, and clears
    assert "MAX_GIF_CODES (1000)" in str(error) and error.code == "image_too_large"


def test_a_16_bit_png_counts_its_16_bits():
    data = hostile_images.png16(2048, 2048)
    facts = read_facts(data, "image/png")
    assert facts.decode_bytes >= 2048 * 2048 * 16        # 8 bytes a pixel inflated, 8 unfiltered
    assert refusal(hostile_images.png16()).code == "image_too_large"
    assert "MAX_DECODE_BYTES (256 MiB)" in str(refusal(hostile_images.png16()))


def test_png_data_must_inflate_to_exactly_its_rows():
    assert "inflates to more than the 4 bytes" in str(refusal(hostile_images.png_inflating(8 << 20)))
    header = struct.pack(">IIBBBBB", 64, 64, 8, 2, 0, 0, 0)
    rows = (bytes(range(256)) * 64)[:64 * (1 + 64 * 3)]
    assert from_bytes(hostile_images.png_with(header, zlib.compress(rows))).pixels == 64 * 64
    short = hostile_images.png_with(header, zlib.compress(rows[:len(rows) // 2]))
    assert "declares 64x64 pixels but its data holds 2048" in str(refusal(short))
    assert "does not inflate" in str(refusal(hostile_images.png_with(header, b"\x78\x9c\xff\xff\xff")))


@pytest.mark.parametrize("keep", [45, 60, 100])
def test_a_png_cut_inside_a_chunk_names_the_chunk(keep):
    data = imagefiles.png(16, 16)
    error = refusal(data[:keep])
    assert "truncated" in str(error) and "'IDAT' chunk declares" in str(error)


def test_a_jpeg_whose_scan_codes_fewer_bits_than_blocks_is_refused():
    data = imagefiles.jpeg(64, 64)
    header = data[:data.index(b"\xff\xda")]
    wide = header.replace(struct.pack(">HH", 64, 64), struct.pack(">HH", 4096, 4096), 1)
    error = refusal(wide + b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00" + b"\x00" * 64 + b"\xff\xd9")
    assert "declares 4096x4096 pixels but its data holds" in str(error)


@pytest.mark.parametrize("data, reason", [
    (b"GIF89a" + struct.pack("<HHBBB", 8, 8, 0, 0, 0) + b"," + struct.pack("<HHHHB", 0, 0, 8, 8, 0) + b"\x02\x00;",
     "no colour table"),
    (b"GIF89a" + struct.pack("<HHBBB", 8, 8, 0, 0, 0) + b";", "no frame"),
])
def test_gif_structures_stb_refuses_are_refused_first(data, reason):
    assert reason in str(refusal(data))


def test_jpeg_and_png_fields_stb_refuses_are_refused_first():
    twelve_bit = imagefiles.jpeg().replace(b"\xff\xc0\x00\x0b\x08", b"\xff\xc0\x00\x0b\x0c", 1)
    assert refusal(twelve_bit).code == "unsupported_image_format"
    png = bytearray(imagefiles.png())
    png[24] = 3                     # a 3-bit RGB sample
    assert "bit depth 3" in str(refusal(bytes(png)))


def test_segment_and_chunk_walks_are_bounded(monkeypatch):
    monkeypatch.setattr(image_headers, "MAX_JPEG_SEGMENTS", 2)
    assert "MAX_JPEG_SEGMENTS (2)" in str(refusal(imagefiles.jpeg()))
    monkeypatch.setattr(image_headers, "MAX_PNG_CHUNKS", 2)
    assert "MAX_PNG_CHUNKS (2)" in str(refusal(imagefiles.png()))
