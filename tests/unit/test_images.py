"""localserve/images.py and media_checks.py: an image's bytes checked from their header alone, before any decoder
sees them (format, declared media type, byte and pixel limits, data URLs, remote URLs)."""

from __future__ import annotations

import hashlib
import struct

import pytest

import imagefiles  # tests/support/
from imagefiles import AVIF, HEIC, SVG, TIFF, WEBP, b64, data_url
from localserve import image_headers, images, media_checks
from localserve.images import ImageRefused, from_bytes
from localserve.media_checks import IMAGE, read_base64, read_data_url


@pytest.mark.parametrize("media_type", sorted(imagefiles.WRITERS))
def test_every_accepted_format_is_read_with_its_size(media_type):
    data = imagefiles.WRITERS[media_type](33, 17, seed=3)
    image = from_bytes(data, media_type, "messages[0].content[1]")
    assert (image.media_type, image.data, image.where) == (media_type, data, "messages[0].content[1]")
    assert image.digest == hashlib.sha256(data).hexdigest()
    assert image_headers.size_of(data, media_type) == (33, 17)
    assert read_data_url(data_url(data, media_type)) == image      # compared by media type and digest


def test_a_declared_type_is_optional_and_its_aliases_agree():
    assert from_bytes(imagefiles.jpeg(), None).media_type == "image/jpeg"
    assert from_bytes(imagefiles.jpeg(), "image/jpg").media_type == "image/jpeg"
    assert from_bytes(imagefiles.png(), " IMAGE/PNG ").media_type == "image/png"


def test_two_images_differ_by_digest_and_the_same_bytes_are_equal():
    a, b = from_bytes(imagefiles.png(seed=1)), from_bytes(imagefiles.png(seed=2))
    assert a != b and a.digest != b.digest
    assert from_bytes(imagefiles.png(seed=1), where="x") == a


@pytest.mark.parametrize("data, name", [(WEBP, "WebP"), (HEIC, "HEIC"), (AVIF, "AVIF"), (TIFF, "TIFF"),
                                        (SVG, "SVG"), (b"\x00\x00\x01\x00" + b"\x00" * 20, "ICO"),
                                        (b"%PDF-1.7\n", "PDF")])
def test_a_format_the_loader_cannot_read_is_named_with_the_accepted_ones(data, name):
    with pytest.raises(ImageRefused) as caught:
        from_bytes(data)
    assert caught.value.code == "unsupported_image_format"
    assert name in str(caught.value) and "PNG, JPEG, GIF or BMP" in str(caught.value)


def test_bytes_that_are_no_image_say_so():
    with pytest.raises(ImageRefused, match="not an image.*PNG, JPEG, GIF or BMP") as caught:
        from_bytes(b"hello, world")
    assert caught.value.code == "invalid_image"
    with pytest.raises(ImageRefused, match="empty"):
        from_bytes(b"")


@pytest.mark.parametrize("media_type, keep", [("image/png", 20), ("image/png", 8), ("image/jpeg", 30),
                                              ("image/jpeg", 3), ("image/gif", 8), ("image/bmp", 20)])
def test_a_truncated_header_is_refused(media_type, keep):
    data = imagefiles.WRITERS[media_type](16, 16)
    with pytest.raises(ImageRefused, match="truncated") as caught:
        from_bytes(data[:keep], media_type)
    assert caught.value.code == "invalid_image"


def test_a_jpeg_without_a_frame_header_before_its_scan_is_refused():
    with pytest.raises(ImageRefused, match="no frame header"):
        from_bytes(b"\xff\xd8\xff\xda\x00\x02" + b"\x00" * 8)


def test_jpeg_codings_and_bmp_compression_the_loader_cannot_read_are_refused():
    lossless = imagefiles.jpeg().replace(b"\xff\xc0", b"\xff\xc3", 1)
    with pytest.raises(ImageRefused, match="lossless") as caught:
        from_bytes(lossless)
    assert caught.value.code == "unsupported_image_format"
    data = bytearray(imagefiles.bmp())
    data[30:34] = struct.pack("<I", 1)      # RLE8
    with pytest.raises(ImageRefused, match="compressed"):
        from_bytes(bytes(data))


def test_a_declared_media_type_the_bytes_contradict_is_refused():
    with pytest.raises(ImageRefused) as caught:
        from_bytes(imagefiles.jpeg(), "image/png")
    assert caught.value.code == "image_media_type_mismatch"
    assert "'image/png'" in str(caught.value) and "JPEG" in str(caught.value)
    with pytest.raises(ImageRefused, match="media type says 'image/webp'"):
        read_data_url(data_url(imagefiles.gif(), "image/webp"))


def test_base64_is_checked_whitespace_and_missing_padding_aside():
    data = imagefiles.png()
    text = b64(data)
    assert read_base64(IMAGE, text.rstrip("=")).data == data
    assert read_base64(IMAGE, "\n".join(text[i:i + 76] for i in range(0, len(text), 76))).data == data
    for bad in ("not base64!", "iVBORw0KGgo=é", "a"):
        with pytest.raises(ImageRefused, match="not valid base64"):
            read_base64(IMAGE, bad)
    with pytest.raises(ImageRefused, match="expected base64"):
        read_base64(IMAGE, 5)


def test_data_urls_must_be_base64_and_remote_urls_are_not_fetched():
    with pytest.raises(ImageRefused) as caught:
        read_data_url("https://example.com/cat.png")
    assert caught.value.code == "remote_image_url"
    assert "not fetched" in str(caught.value) and "air-gapped" in str(caught.value)
    with pytest.raises(ImageRefused, match="not fetched"):
        read_data_url("HTTP://10.0.0.1/admin")
    with pytest.raises(ImageRefused, match="nor reads files") as caught:
        read_data_url("file:///etc/passwd")         # llama-server reads one under its --media-path
    assert caught.value.code == "remote_image_url"
    with pytest.raises(ImageRefused, match="must be base64"):
        read_data_url("data:image/png,%89PNG")
    with pytest.raises(ImageRefused, match="expected a data: URL string"):
        read_data_url(None)
    assert read_data_url("data:;base64," + b64(imagefiles.bmp())).media_type == "image/bmp"
    assert read_data_url("DATA:image/gif;name=a.gif;base64," + b64(imagefiles.gif())).media_type == "image/gif"


def test_a_data_url_s_head_is_read_only_so_far():
    """Where the comma should end the head: a megabyte of parameters is refused, not parsed."""
    with pytest.raises(ImageRefused, match="expected a data: URL"):
        read_data_url("data:image/png" + ";base64" * 1_000_000 + "," + b64(imagefiles.png()))
    long_head = "data:image/png;" + "x" * (media_checks.MAX_DATA_URL_HEAD - 30) + ";base64,"
    assert read_data_url(long_head + b64(imagefiles.png())).media_type == "image/png"


def test_the_byte_limit_is_named_and_checked_before_decoding(monkeypatch):
    monkeypatch.setattr(images, "MAX_IMAGE_BYTES", 100)
    data = imagefiles.png(16, 16)
    assert len(data) > 100
    for read in (lambda: from_bytes(data), lambda: read_base64(IMAGE, b64(data))):
        with pytest.raises(ImageRefused, match=r"MAX_IMAGE_BYTES \(100\)") as caught:
            read()
        assert caught.value.code == "image_too_large"
    with pytest.raises(ImageRefused, match="MAX_IMAGE_BYTES"):
        read_base64(IMAGE, "A" * 1000)      # refused by its length alone: never decoded


def test_the_pixel_limit_is_read_from_the_header():
    width, height = 8193, 4096      # one column more than MAX_IMAGE_PIXELS allows
    assert width * height > image_headers.MAX_IMAGE_PIXELS >= 8192 * 4096
    header = imagefiles.png(1, 1)
    huge = header[:16] + struct.pack(">II", width, height) + header[24:]
    with pytest.raises(ImageRefused, match=r"8193x4096 pixels.*MAX_IMAGE_PIXELS") as caught:
        from_bytes(huge)
    assert caught.value.code == "image_too_large"
    wide_gif = bytearray(imagefiles.gif())
    wide_gif[6:10] = struct.pack("<HH", 0, 8)
    with pytest.raises(ImageRefused, match="no pixels"):
        from_bytes(bytes(wide_gif))


def test_bmp_heights_may_be_negative_and_os2_headers_are_read():
    data = bytearray(imagefiles.bmp(5, 7))
    data[22:26] = struct.pack("<i", -7)                 # top-down
    assert image_headers.size_of(bytes(data), "image/bmp") == (5, 7)
    core = b"BM" + b"\x00" * 12 + struct.pack("<IHHHH", 12, 9, 4, 1, 24)
    assert image_headers.size_of(core, "image/bmp") == (9, 4)
