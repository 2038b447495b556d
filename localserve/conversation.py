"""The conversation every dialect reads its request into and the prompt builder reads from.

A conversation is a list of :class:`Message`, each a role and typed parts; the tools it may
call are :class:`ToolDefinition`. Nothing here is any dialect's wire shape: a call keeps the
client's own id, whatever its form (``call_…``, ``toolu_…``, ``fc_…``), and its arguments as
data. The chat-template dicts (OpenAI's shape, HF's conventions) are made from these only
where a template is rendered (prompt/messages.py).

Roles: ``system``, ``developer`` (shown as system), ``user``, ``assistant``, ``tool`` (one
ToolResult), and OpenAI's legacy ``function``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Text:
    text: str


@dataclass(frozen=True, slots=True)
class Reasoning:
    """An earlier turn's reasoning, already verified or unsealed by its dialect (signatures and
    sealed content stay at the edge: a template is shown the text only)."""
    text: str


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the assistant made. arguments: the data (a dict), or the client's string when it
    is not a JSON object. text: the client's own JSON text of a dict, when it sent text (a
    template that shows arguments as text repeats it, as the model wrote it)."""
    id: str | None
    name: str
    arguments: dict | str
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Image:
    """An image in a prompt: its bytes, already checked (localserve/images.py: a format the
    projector's loader reads, within the limits), their media type, and the bytes' sha256 (hex),
    which is what two images are compared by (the prompt cache keys an image by it).
    where: the request part it came from (``messages[2].content[1]``), named in a refusal."""
    data: bytes = field(repr=False, compare=False)
    media_type: str
    digest: str = ""               # sha256 of data, hex; computed when not given
    where: str = field(default="", compare=False)
    pixels: int = field(default=0, compare=False)      # what decoding it fills (images.py reads it from the header)

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(self, "digest", hashlib.sha256(self.data).hexdigest())


@dataclass(frozen=True, slots=True)
class Audio:
    """An audio clip in a prompt: the bytes libmtmd's decoder is handed (localserve/audio.py
    checked them: a canonical WAV, or an MP3 or FLAC stream), their format, and their sha256
    (hex), which two clips are compared by (the prompt cache keys a clip by it). seconds: the
    duration its header declares; most_seconds: at most what libmtmd's decoders make of it (an
    MP3's hidden frames decode too), which a request's limit counts; where: the request part it
    came from."""
    data: bytes = field(repr=False, compare=False)
    format: str
    digest: str = ""
    where: str = field(default="", compare=False)
    seconds: float = field(default=0.0, compare=False)
    most_seconds: float = field(default=0.0, compare=False)

    def __post_init__(self) -> None:
        if not self.digest:
            object.__setattr__(self, "digest", hashlib.sha256(self.data).hexdigest())


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a call returned. call_id: the call it answers (None when the client named none);
    name: the tool's name, where the dialect knows it."""
    call_id: str | None
    content: str | tuple[Text | Image, ...]
    is_error: bool = False
    name: str | None = None


Part = Text | Reasoning | ToolCall | ToolResult | Image | Audio


@dataclass(frozen=True, slots=True)
class Message:
    role: str
    parts: tuple[Part, ...] = ()
    name: str | None = None        # OpenAI's participant name, shown to the templates that read it

    def of(self, kind: type) -> list:
        """The parts of one kind, in order."""
        return [part for part in self.parts if isinstance(part, kind)]

    @property
    def text(self) -> str:
        """The text parts, joined as the templates get them."""
        return "\n".join(part.text for part in self.parts if isinstance(part, Text))


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    name: str
    description: str = ""
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False           # its calls' arguments are held to the schema (runtime/call_wake.py)


def text_message(role: str, text: str) -> Message:
    return Message(role, (Text(text),))


def images_in(messages: list[Message], *, results: bool = True) -> list[Image]:
    """The images of the messages in the order a template shows them (each message's own parts,
    a tool result's inside it); results=False leaves out those inside tool results."""
    found: list[Image] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, Image):
                found.append(part)
            elif results and isinstance(part, ToolResult) and not isinstance(part.content, str):
                found.extend(p for p in part.content if isinstance(p, Image))
    return found


def media_in(messages: list[Message]) -> list[Image | Audio]:
    """The images and clips of the messages in the order a template shows them (each one a media
    marker: prompt/messages.py), a tool result's inside it."""
    found: list[Image | Audio] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, (Image, Audio)):
                found.append(part)
            elif isinstance(part, ToolResult) and not isinstance(part.content, str):
                found.extend(p for p in part.content if isinstance(p, (Image, Audio)))
    return found


def audio_in(messages: list[Message]) -> list[Audio]:
    """The clips of the messages, in order."""
    return [part for part in media_in(messages) if isinstance(part, Audio)]

