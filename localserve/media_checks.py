"""What an image or an audio clip must pass before libmtmd sees it, for both kinds in one place.

A request's media are checked in three steps, each here and the same for both kinds (a
:class:`MediaKind` says what differs: the limits, the names and codes, the reader of the bytes):

1. before any part is decoded, the places of a body's parts of a kind are counted
   (:func:`hold_count`, called by the dialects): a body of thousands of tiny images costs no
   base64 decoding and sniffing before its 400;
2. each part a dialect extracts is read from its base64 (:func:`read_base64`, held to the kind's
   byte limit before it is decoded) or its ``data:`` URL (:func:`read_data_url`,
   :func:`read_audio_data_url`) by the kind's
   own reader: images.py (format, then header and structure: image_headers.py), audio.py
   (format, header and length: audio_headers.py);
3. building the request (prompt/build.py's fit_images, one call for every dialect) takes the whole
   conversation, stored turns included, through :func:`fit_media`: each kind's count again, the
   clips' total length, and, for a model that cannot take a kind (no vision projector, no audio
   encoder), a refusal of such a part in the turn being answered (the model cannot read what it
   is asked about: a 400 naming the model, as OpenAI answers for a text-only model) and the
   kind's placeholder text for one in an earlier turn or a tool result, so an agent loop that
   read a screenshot goes on. A turn that answers tool calls is a tool loop going on, its media
   what the tools saw: clients put them in a user message beside the results where the dialect
   has no media in a tool result (Chat Completions), so those become text too.

Each refusal is the kind's InputRefused (ImageRefused, AudioRefused) with its code and, where
it is known here, the part it names; a dialect answers it as a 400 in its own shape, request
building as a PromptRefused. What the images of one request add up to (MAX_REQUEST_PIXELS),
and decoding each distinct image or clip once, is the request's media scope (prompt/media.py).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

from . import audio, images
from .audio_headers import AudioRefused
from .conversation import Audio, Image, Message, Text, ToolResult, media_in
from .errors import InputRefused
from .image_headers import ImageRefused

IMAGE_OMITTED = "[image omitted: this model has no vision]"
AUDIO_OMITTED = "[audio omitted: this model has no audio encoder]"
AUDIO_DATA_URL = "data:audio/wav;base64,..."
MAX_DATA_URL_HEAD = 256               # "data:<media type>;<parameters>," before the data: a header, not a body
# URLs llama-server reads a part from (file: under its --media-path): never read here
REMOTE_SCHEMES = ("http://", "https://", "file:")
_WHITESPACE = b" \t\r\n"            # what base64 text may carry between its characters


@dataclass(frozen=True)
class MediaKind:
    """What differs between an image and a clip in the checks they pass. Its limits are named
    settings of its reader's module (images.py, audio.py), read when a check runs."""
    noun: str                               # "image", "audio": the data, as refusals name it
    plural: str                             # "images", "audio clips": a request's parts, counted
    part: type                              # its part in the conversation
    refused: type[InputRefused]
    reader: ModuleType                      # from_bytes(data, declared, where), too_large(size), the limits
    bytes_setting: str                      # one part's bytes, held before its base64 is decoded
    count_setting: str                      # parts in one request's conversation
    count_code: str
    omitted: str                            # what a model that cannot take it is shown instead
    lacking: str                            # why such a model refuses it, after "model 'x' "
    lacking_code: str
    seconds_setting: str | None = None      # the request's parts together, each distinct one once

    @property
    def max_bytes(self) -> int:
        return getattr(self.reader, self.bytes_setting)

    @property
    def max_per_request(self) -> int:
        return getattr(self.reader, self.count_setting)

    def of(self, messages: list[Message], *, results: bool = True) -> list:
        """The parts of this kind in the messages, in the order a template shows them; results=False
        leaves out those inside tool results."""
        if results:
            return [p for p in media_in(messages) if isinstance(p, self.part)]
        return [p for m in messages for p in m.of(self.part)]


IMAGE = MediaKind(
    "image", "images", Image, ImageRefused, images, "MAX_IMAGE_BYTES", "MAX_IMAGES_PER_REQUEST", "too_many_images",
    IMAGE_OMITTED, "has no vision projector, so it cannot read images; use a model with one, or send text",
    "model_has_no_vision")
AUDIO = MediaKind(
    "audio", "audio clips", Audio, AudioRefused, audio, "MAX_AUDIO_BYTES", "MAX_AUDIO_PER_REQUEST",
    "too_many_audio_clips", AUDIO_OMITTED,
    "has no audio encoder, so it cannot hear audio; use a model whose projector has one, or send text",
    "model_has_no_audio", "MAX_REQUEST_AUDIO_SECONDS")
KINDS = (AUDIO, IMAGE)                      # the order a conversation's refusals are looked for in


# ---- before decoding: the count -----------------------------------------------------------

def hold_count(kind: MediaKind, places: Iterable[str]) -> None:
    """The kind's refusal (too many) naming the first place past its limit per request."""
    places = list(places)
    if len(places) > kind.max_per_request:
        raise count_refused(kind, len(places), places[kind.max_per_request])


def count_refused(kind: MediaKind, count: int, where: str) -> InputRefused:
    return kind.refused(f"the request carries {count} {kind.plural}, more than {kind.count_setting} "
                        f"({kind.max_per_request}) allows", kind.count_code, where or "messages")


# ---- one part: its bytes -------------------------------------------------------------------

def read_base64(kind: MediaKind, data: object, declared: object = None, where: str = "") -> Image | Audio:
    """A part from base64 text and the format the client declared (None: none declared), by the
    kind's reader; its refusal when the text is too long, not base64, or the bytes are refused."""
    if not isinstance(data, (str, bytes)):
        raise kind.refused(f"expected base64 {kind.noun} data as a string")
    # bytes.translate, not a regex substitution: a 2 MB clip's text in 1 ms instead of 20
    raw = (data.encode("ascii", "replace") if isinstance(data, str) else data).translate(None, _WHITESPACE)
    if len(raw) * 3 // 4 > kind.max_bytes:      # refused before it is decoded
        raise kind.reader.too_large(len(raw) * 3 // 4)
    try:
        decoded = base64.b64decode(raw + b"=" * (-len(raw) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise kind.refused(f"the {kind.noun} data is not valid base64") from None
    return kind.reader.from_bytes(decoded, declared, where)


def read_data_url(url: object, where: str = "") -> Image:
    """An image from an ``image_url``: a base64 ``data:`` URL. A remote ``http(s)`` URL is refused,
    never fetched: the server is meant to run with no network at all, and a fetch on a client's
    behalf would be a request forgery."""
    if not isinstance(url, str):
        raise ImageRefused("expected a data: URL string")
    refuse_remote(IMAGE, url, "a base64 data: URL")
    media_type, data = split_data_url(IMAGE, url, "data:image/png;base64,...")
    return read_base64(IMAGE, data, media_type or None, where)


def read_audio_data_url(url: str, declared: object = None, where: str = "") -> Audio:
    """A clip from a base64 ``data:audio/...`` URL (llama-server takes one in ``input_audio.data``):
    its media type names the format, which a `declared` one beside it must agree with; then
    every check a clip's base64 passes (read_base64)."""
    media_type, data = split_data_url(AUDIO, url, AUDIO_DATA_URL)
    if not media_type.lower().startswith("audio/"):
        raise AudioRefused(f"a data: URL of a clip must name an audio media type ({AUDIO_DATA_URL}), "
                           f"not {media_type[:40]!r}", "unsupported_audio_format")
    named = audio.declared_format(media_type)
    if declared is not None and audio.declared_format(declared) != named:
        raise AudioRefused(f"the format says {str(declared)[:40]!r} but the data: URL says {media_type[:40]!r}",
                           "audio_format_mismatch")
    return read_base64(AUDIO, data, named, where)


def refuse_remote(kind: MediaKind, url: str, inline: str) -> None:
    """The kind's refusal (remote_image_url, remote_audio_url) of a URL the part would be fetched
    from, never fetched: the server is meant to run with no network at all, and a fetch (or a
    file read) on a client's behalf would be a request forgery. `inline`: how to send it instead."""
    if url[:8].lower().startswith(REMOTE_SCHEMES):
        raise kind.refused(f"remote {kind.noun} URLs are not fetched: this server does not reach the network "
                           f"(air-gapped by design) nor reads files for a client; send the {kind.noun} inline as "
                           f"{inline}", f"remote_{kind.noun}_url")


def is_data_url(text: object) -> bool:
    return isinstance(text, str) and text[:5].lower() == "data:"


def split_data_url(kind: MediaKind, url: str, example: str) -> tuple[str, str]:
    """A base64 ``data:`` URL's media type ("" for none) and its base64 text; the kind's refusal
    for another URL. Its head (before the comma) is looked for in MAX_DATA_URL_HEAD characters."""
    comma = url.find(",", 0, MAX_DATA_URL_HEAD)
    if not is_data_url(url) or comma < 0:
        raise kind.refused(f"expected a data: URL ({example})")
    media_type, *params = url[5:comma].split(";")
    if "base64" not in (p.strip().lower() for p in params):
        raise kind.refused(f"a data: URL of {kind.noun} data must be base64 ({example})")
    return media_type.strip(), url[comma + 1:]


# ---- the whole conversation, as one model can take it --------------------------------------

def fit_media(messages: list[Message], *, takes: Iterable[MediaKind], model_name: str
              ) -> tuple[list[Message], dict[str, int]]:
    """The messages as a model that takes the kinds `takes` can take their media, and how many
    parts of each kind (by noun) became its placeholder text; the refusal naming the part past a
    limit, or one of a kind the model cannot take in the turn being answered."""
    takes = set(takes)
    for kind in KINDS:
        hold_request(kind, kind.of(messages))
    answered = messages[answered_from(messages):]
    in_a_tool_loop = any(m.of(ToolResult) for m in answered)
    omitted: dict[str, int] = {}
    for kind in KINDS:
        parts = kind.of(messages)
        if kind in takes or not parts:
            continue
        asked = [] if in_a_tool_loop else kind.of(answered, results=False)
        if asked:
            where = asked[0].where or "messages"
            raise kind.refused(f"model '{model_name}' {kind.lacking}", kind.lacking_code, where)
        messages = [without_media(message, kind) for message in messages]
        omitted[kind.noun] = len(parts)
    return messages, omitted


def hold_request(kind: MediaKind, parts: list) -> None:
    """The refusal naming the first part past the kind's count, or its total length (each
    distinct clip once)."""
    if len(parts) > kind.max_per_request:
        raise count_refused(kind, len(parts), parts[kind.max_per_request].where)
    if kind.seconds_setting is None:
        return
    limit = getattr(kind.reader, kind.seconds_setting)
    seen: set[str] = set()
    seconds = 0.0
    for part in parts:
        if part.digest in seen:
            continue
        seen.add(part.digest)
        seconds += max(part.seconds, part.most_seconds)      # what the decoders may make of it
        if seconds > limit:
            raise kind.refused(f"the request's clips decode to as much as {seconds:.1f} seconds, more than "
                               f"{kind.seconds_setting} ({limit:g}) allows", "audio_too_long", part.where or "messages")


def answered_from(messages: list[Message]) -> int:
    """Where the turn being answered starts: after the last assistant message."""
    for i in reversed(range(len(messages))):
        if messages[i].role == "assistant":
            return i + 1
    return 0


def without_media(message: Message, kind: MediaKind) -> Message:
    """The message with each part of the kind (its own, its tool results') as the kind's placeholder."""
    if not kind.of([message]):
        return message
    return dataclasses.replace(message, parts=tuple(_placeholders(part, kind) for part in message.parts))


def _placeholders(part, kind: MediaKind):
    if isinstance(part, kind.part):
        return Text(kind.omitted)
    if isinstance(part, ToolResult) and not isinstance(part.content, str):
        return dataclasses.replace(part, content=tuple(Text(kind.omitted) if isinstance(p, kind.part) else p
                                                       for p in part.content))
    return part
