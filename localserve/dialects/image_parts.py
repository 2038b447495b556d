"""Image parts as the dialects read them: localserve/media_checks.py's checks, each refusal a 400
naming the request part (``messages[2].content[1]``) in the route's own error shape.

A dialect only finds its parts: it lists where its body's image parts are (their places, found
by their type alone, :func:`typed_parts`) for :func:`hold_image_count` before any is read, then
reads each one's data with :func:`image_from_url` or :func:`image_from_base64`. Each image read
is charged to the request's MAX_REQUEST_PIXELS (prompt/media.py) at once. Building the request
checks the whole conversation again, stored turns included (media_checks.fit_media)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

from ..conversation import Image
from ..errors import ApiError
from ..errors import InputRefused
from ..generation import PromptRefused
from ..media_checks import IMAGE, hold_count, read_base64, read_data_url
from ..prompt.media import current_request
from .exchange import Exchange

# Say how many images (clips) a prompt showed as text because the model has no vision projector
# (no audio encoder).
IMAGES_OMITTED_HEADER = "x-localserve-images-omitted"
AUDIO_OMITTED_HEADER = "x-localserve-audio-omitted"

log = logging.getLogger("localserve.dialects")


def refused(where: str, reason: str, code: str = "invalid_image") -> ApiError:
    return ApiError(400, f"invalid '{where}': {reason}", param=where, code=code)


def part_refused(exc: InputRefused, where: str) -> ApiError:
    """The 400 for a media part's refusal: the part it names, else `where`."""
    return refused(exc.param or where, str(exc), exc.code)


def image_from_url(url: Any, where: str) -> Image:
    """A data: URL's image (an http(s) URL is refused, not fetched)."""
    try:
        return charged(read_data_url(url, where))
    except InputRefused as exc:
        raise part_refused(exc, where) from None


def image_from_base64(data: Any, media_type: str | None, where: str) -> Image:
    """Base64 data's image, its declared media type checked against the bytes."""
    try:
        return charged(read_base64(IMAGE, data, media_type, where))
    except InputRefused as exc:
        raise part_refused(exc, where) from None


def charged(image: Image) -> Image:
    """The image, its pixels charged to the request's MAX_REQUEST_PIXELS as it is read: the
    header checks of a request's images cost at most that much (and one image more)."""
    scope = current_request()
    if scope is not None:
        try:
            scope.admit([image])
        except PromptRefused as exc:
            raise ApiError(400, str(exc), param=exc.param, code=exc.code) from None
    return image


def hold_image_count(places: Iterable[str]) -> None:
    """A 400 (too_many_images) naming the first image part beyond MAX_IMAGES_PER_REQUEST, from
    the places of a body's image parts, before any is read."""
    try:
        hold_count(IMAGE, places)
    except InputRefused as exc:
        raise part_refused(exc, "messages") from None


def typed_parts(parts: Any, where: str, kind: str) -> Iterator[str]:
    """The places of the parts of type `kind` in a list of content parts (anything else: none)."""
    if isinstance(parts, list):
        for i, part in enumerate(parts):
            if isinstance(part, dict) and part.get("type") == kind:
                yield f"{where}[{i}]"


def report_omitted(exchange: Exchange, omitted: int, label: str, audio: int = 0) -> None:
    """A header and a log line when a prompt showed images (audio: clips) as text, the model
    having no vision projector (no audio encoder)."""
    if omitted:
        log.info("%s: %d image(s) shown as text: the model has no vision projector", label, omitted)
        exchange.writer.extra_headers.append((IMAGES_OMITTED_HEADER, str(omitted)))
    if audio:
        log.info("%s: %d audio clip(s) shown as text: the model has no audio encoder", label, audio)
        exchange.writer.extra_headers.append((AUDIO_OMITTED_HEADER, str(audio)))
