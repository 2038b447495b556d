"""An image's bytes, checked before anything decodes them: media_checks.py's reader of an image.

A client sends an image inline: a ``data:`` URL (OpenAI's ``image_url``, Responses'
``input_image``) or base64 with a declared media type (Anthropic's ``source``, Ollama's
``images``); media_checks.py decodes that text within MAX_IMAGE_BYTES. Here the bytes become a
:class:`~localserve.conversation.Image` or an :class:`ImageRefused` saying why not, from their
own structure alone (stdlib only: the pixels are decoded later, by libmtmd's stb loader, which
reads PNG, JPEG, GIF and BMP):

- the format is sniffed from the magic bytes; a declared media type must agree with them;
- a format the loader cannot read (WebP, HEIC/AVIF, TIFF, SVG, ...) is refused by its name,
  and only the four it reads ever reach libmtmd (none of their magic bytes is one libmtmd's
  helper takes for audio);
- the bytes are held to MAX_IMAGE_BYTES; then image_headers.py reads
  the header and structure: the pixels (MAX_IMAGE_PIXELS), what the decode would allocate
  (MAX_DECODE_BYTES), a progressive JPEG's scans, and whether the data holds the pixels the
  header declares.
The caller names the request part (``messages[2].content[1]``) in the error it makes.
"""

from __future__ import annotations

from .conversation import Image
from .image_headers import ImageRefused, read_facts

MAX_IMAGE_BYTES = 20 * 1024 * 1024     # one image's decoded bytes (OpenAI's and Anthropic's order of size)
MAX_IMAGES_PER_REQUEST = 100           # images in one request's conversation, as Anthropic's API allows

# The formats libmtmd's loader reads, by media type.
ACCEPTED = {"image/png": "PNG", "image/jpeg": "JPEG", "image/gif": "GIF", "image/bmp": "BMP"}
ACCEPTED_NAMES = "PNG, JPEG, GIF or BMP"
MEDIA_TYPE_ALIASES = {"image/jpg": "image/jpeg", "image/x-png": "image/png", "image/x-bmp": "image/bmp",
                      "image/x-ms-bmp": "image/bmp", "image/pjpeg": "image/jpeg"}


def from_bytes(data: bytes, media_type: str | None = None, where: str = "") -> Image:
    """An image from its bytes: a format the loader reads, agreeing with the declared media
    type, within the byte and pixel limits."""
    if len(data) > MAX_IMAGE_BYTES:
        raise too_large(len(data))
    if not data:
        raise ImageRefused("the image is empty")
    found = sniff(data)
    if found is None:
        raise ImageRefused(f"the data is not an image: its first bytes match no image format; accepted formats "
                           f"are {ACCEPTED_NAMES}")
    if found not in ACCEPTED:
        raise ImageRefused(f"the image is {found}, which is not read here; accepted formats are {ACCEPTED_NAMES}",
                           "unsupported_image_format")
    if media_type is not None:
        declared = media_type.strip().lower()
        declared = MEDIA_TYPE_ALIASES.get(declared, declared)
        if declared != found:
            raise ImageRefused(f"the media type says {media_type[:100]!r} but the bytes are {ACCEPTED[found]} ({found})",
                               "image_media_type_mismatch")
    facts = read_facts(data, found)
    return Image(data, found, where=where, pixels=facts.decoded_pixels)


def too_large(size: int) -> ImageRefused:
    return ImageRefused(f"the image is {size} bytes, more than MAX_IMAGE_BYTES ({MAX_IMAGE_BYTES}) allows",
                        "image_too_large")


def reaches_libmtmd(data: bytes) -> bool:
    """Bytes of a format stb reads, as sniff names it: the only ones handed to libmtmd, whose
    helper would take RIFF, ID3, an MPEG sync word or fLaC for audio, and other bytes stb
    cannot read for a video to run ffmpeg on (where it was built with video)."""
    return sniff(data) in ACCEPTED


# ---- formats ----------------------------------------------------------------------------

_HEIF_BRANDS = {b"heic": "HEIC", b"heix": "HEIC", b"hevc": "HEIC", b"heim": "HEIC", b"heis": "HEIC",
                b"mif1": "HEIF", b"msf1": "HEIF", b"avif": "AVIF", b"avis": "AVIF"}


def sniff(data: bytes) -> str | None:
    """The media type the magic bytes say (an accepted one), a name for another format, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data.startswith(b"BM") and len(data) >= 18:
        return "image/bmp"
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "WebP (image/webp)"
    if data[4:8] == b"ftyp" and data[8:12] in _HEIF_BRANDS:
        name = _HEIF_BRANDS[data[8:12]]
        return f"{name} (image/{name.lower()})"
    if data.startswith((b"II*\x00", b"MM\x00*")):
        return "TIFF (image/tiff)"
    if data.startswith(b"\x00\x00\x01\x00"):
        return "ICO (image/x-icon)"
    if data.startswith(b"8BPS"):
        return "PSD (image/vnd.adobe.photoshop)"
    if data.startswith(b"\xff\x0a") or data.startswith(b"\x00\x00\x00\x0cJXL "):
        return "JPEG XL (image/jxl)"
    if data.startswith(b"%PDF"):
        return "PDF (application/pdf)"
    head = data[:1024].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith(b"<") and b"<svg" in head:
        return "SVG (image/svg+xml)"
    return None
