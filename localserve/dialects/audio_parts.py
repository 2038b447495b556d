"""Audio parts as the dialects read them: localserve/media_checks.py's checks, each refusal a 400 naming
the request part (``messages[2].content[1]``) in the route's own error shape.

OpenAI's shape, which Chat Completions and Responses share:
``{"type": "input_audio", "input_audio": {"data": "<base64>", "format": "wav" | "mp3"}}`` (FLAC
is taken too, a ``data:audio/...;base64,`` URL as the data, and `url` in place of `data`, as
llama-server takes them; a URL to fetch is refused). A dialect that defines no audio (Anthropic) refuses the
part by its place (:func:`no_audio_here`). MAX_AUDIO_PER_REQUEST is held before any clip's base64
is decoded (:func:`hold_audio_count`), as image_parts.py holds the image count."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any

from ..audio import FORMATS, sniff
from ..conversation import Audio
from ..errors import ApiError, InputRefused
from ..media_checks import (AUDIO, AUDIO_DATA_URL, hold_count, is_data_url, read_audio_data_url, read_base64,
                            refuse_remote)
from .fields import invalid
from .image_parts import part_refused, refused

INPUT_AUDIO = "input_audio"
AUDIO_KINDS = (INPUT_AUDIO, "audio", "input_file_audio")   # what clients call an audio part, in dialects without one


def input_audio(part: dict, where: str) -> Audio:
    """{"type": "input_audio", "input_audio": {"data": base64, "format": "wav" | "mp3" | "flac"}};
    `data` may be a base64 ``data:audio/...`` URL too, whose media type then names the format
    (`format` beside it, optional, must agree). As llama-server reads a clip, `url` stands for a
    `data` not given and is read the same way; one it would fetch (http, https, file) is refused."""
    value = part.get(INPUT_AUDIO)
    if not isinstance(value, dict):
        raise invalid(f"{where}.{INPUT_AUDIO}", 'expected {"data": "<base64>", "format": "wav"}')
    data = value.get("data") if value.get("data") is not None else value.get("url")
    declared = value.get("format")
    if isinstance(data, str):
        try:
            refuse_remote(AUDIO, data, f"base64 `data` or a base64 data: URL ({AUDIO_DATA_URL})")
        except InputRefused as exc:
            raise part_refused(exc, where) from None
    if not is_data_url(data):
        if declared is None:
            raise invalid(f"{where}.{INPUT_AUDIO}.format", "expected the clip's format: wav, mp3 or flac")
        return audio_from_base64(data, declared, where)
    try:
        return read_audio_data_url(data, declared, where)
    except InputRefused as exc:
        raise part_refused(exc, where) from None


def audio_from_base64(data: Any, audio_format: Any, where: str) -> Audio:
    try:
        return read_base64(AUDIO, data, audio_format, where)
    except InputRefused as exc:
        raise part_refused(exc, where) from None


def is_audio_base64(data: Any) -> bool:
    """Whether base64 text starts with an audio format's magic bytes (RIFF/WAVE, ID3, an MPEG
    sync word, fLaC): llama-server's multimodal_data holds images and clips alike."""
    if not isinstance(data, str):
        return False
    head = "".join(data[:64].split())[:24]
    try:
        return sniff(base64.b64decode(head + "=" * (-len(head) % 4))) in FORMATS
    except (binascii.Error, ValueError):
        return False


def hold_audio_count(places: Iterable[str]) -> None:
    """A 400 (too_many_audio_clips) naming the first audio part beyond MAX_AUDIO_PER_REQUEST,
    before any is read."""
    try:
        hold_count(AUDIO, places)
    except InputRefused as exc:
        raise part_refused(exc, "messages") from None


def no_audio_here(where: str, dialect: str) -> ApiError:
    """The 400 for an audio part in a dialect that defines none."""
    return refused(where, f"{dialect} defines no audio content; send audio through /v1/chat/completions "
                   "(input_audio parts) or /v1/audio/transcriptions", "unsupported_content_type")
