"""Image parts as the dialects read them: localserve/images.py's checks, each refusal a 400
naming the request part (``messages[2].content[1]``) in the route's own error shape."""

from __future__ import annotations

import logging
from typing import Any

from ..conversation import Image
from ..errors import ApiError
from ..images import ImageRefused, from_base64, from_url
from .exchange import Exchange

# Says how many images a prompt showed as text because the model has no vision projector.
IMAGES_OMITTED_HEADER = "x-localserve-images-omitted"

log = logging.getLogger("localserve.dialects")


def refused(where: str, reason: str, code: str = "invalid_image") -> ApiError:
    return ApiError(400, f"invalid '{where}': {reason}", param=where, code=code)


def image_from_url(url: Any, where: str) -> Image:
    """A data: URL's image (an http(s) URL is refused, not fetched)."""
    try:
        return from_url(url, where)
    except ImageRefused as exc:
        raise refused(where, str(exc), exc.code) from None


def image_from_base64(data: Any, media_type: str | None, where: str) -> Image:
    """Base64 data's image, its declared media type checked against the bytes."""
    try:
        return from_base64(data, media_type, where)
    except ImageRefused as exc:
        raise refused(where, str(exc), exc.code) from None


def report_omitted(exchange: Exchange, omitted: int, label: str) -> None:
    """A header and a log line when a prompt showed images as text (the model has no vision)."""
    if omitted:
        log.info("%s: %d image(s) shown as text: the model has no vision projector", label, omitted)
        exchange.writer.extra_headers.append((IMAGES_OMITTED_HEADER, str(omitted)))
