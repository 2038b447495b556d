"""A prompt with images: each media marker in the rendered text becomes the image's chunk.

The template renders an image as generation.MEDIA_MARKER (messages.py), in the conversation's
order. Here the text between markers is tokenized as any prompt is (the first piece with the
model's start tokens), and each image goes through the vision projector (libmtmd: decoded,
preprocessed, wrapped in the tokens its model expects around an image) into an image chunk of
n positions. The prompt's tokens hold, at those n positions, the image's placeholder id (made
from the hash of its bytes), and GenerationRequest.images says where each chunk starts:
prefix matching in the slots and the RAM cache then reuses a repeated image and stops at a
different one, and the runtime evaluates the chunk when its sequence reaches it.

A request decodes each distinct image or clip once, however many times its conversation shows
it or its prompt is built (a truncation's attempts, a count then a run): the decodes live in
the request's :class:`RequestImages`, which the router opens around each request
(request_images), since the decoding happens deep under each dialect's prompt build. That scope
also holds the request to MAX_REQUEST_PIXELS, each image charged as the dialect reads it
(image_parts.py: the header checks' work is bounded too) and again before a first one is
decoded, and asks after the client between two decodes: a client that has left stops the
decoding, and no job is made. Each decode, an image's (a large PNG's inflate and resize: half
a second) as a clip's (seconds for a long one), runs through the scope's one path
(RequestImages.decode, then `run_decode`): the router opens every request's scope with a
runner that takes it off the connection thread and watches the client meanwhile, a stop set
when it leaves (dialects/media_wait.py), whatever route decodes (a count of tokens, a template
shown, a generation); a streaming dialect's cycle swaps in one that also sends the stream's
head and keepalives, for as long as decodes_run_by holds. Outside a request (no scope) a decode
runs on the thread that asks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from ..conversation import Audio, Image
from ..engine.facade import EngineFacade, ImageTooLargeForBatch, ImageUnreadable, TooManyTokens
from ..generation import MEDIA_MARKER, ContextOverflow, ImageChunk, PromptRefused, placeholder_id
from .audio_media import clip_segments

MAX_REQUEST_PIXELS = 128 * 1024 * 1024  # pixels of one request's images, each distinct one once (100 of 1.3 MP)

Decode = Callable[[threading.Event], list]       # a decode, stopped between its steps once the event is set


def decode_here(decode: Decode) -> list:
    return decode(threading.Event())


@dataclass
class RequestImages:
    """One request's image and clip decodes, by digest, how to ask whether its client is still
    there (raises ClientGone when it is not), and how a decode runs (decode_here, or the
    dialect's runner: decodes_run_by)."""
    check_client: Callable[[], None] = lambda: None
    run_decode: Callable[[Decode], list] = decode_here
    segments: dict[str, list] = field(default_factory=dict)
    admitted: set[str] = field(default_factory=set)
    pixels: int = 0                  # of the images admitted, each once

    def admit(self, images: list[Image]) -> None:
        """PromptRefused (image_too_large) naming the first image past MAX_REQUEST_PIXELS."""
        for image in images:
            if image.digest in self.admitted:
                continue
            self.admitted.add(image.digest)
            self.pixels += image.pixels
            if self.pixels > MAX_REQUEST_PIXELS:
                where = image.where or "messages"
                raise PromptRefused(f"invalid '{where}': the request's images come to {self.pixels} pixels, more "
                                    f"than MAX_REQUEST_PIXELS ({MAX_REQUEST_PIXELS}) allows", code="image_too_large",
                                    param=where)

    def decode(self, digest: str, decode: Decode) -> list:
        """The segments of the image or clip of this digest: decoded through run_decode once a
        request, the client asked after first."""
        if digest not in self.segments:
            self.check_client()
            self.segments[digest] = self.run_decode(decode)
        return self.segments[digest]


_request: ContextVar[RequestImages | None] = ContextVar("request_images", default=None)


def current_request() -> RequestImages | None:
    """The scope of the request this thread serves (None outside one)."""
    return _request.get()


@contextmanager
def request_images(check_client: Callable[[], None],
                   run_decode: Callable[[Decode], list] = decode_here) -> Iterator[RequestImages]:
    """The scope of one request's images, on the thread that serves it, each decode run by
    `run_decode` (the router's: off the connection thread, dialects/media_wait.py)."""
    token = _request.set(RequestImages(check_client, run_decode))
    try:
        yield _request.get()
    finally:
        _request.reset(token)


@contextmanager
def decodes_run_by(run: Callable[[Decode], list]) -> Iterator[None]:
    """The request's clips decoded through `run` while this holds (outside a request: no change)."""
    scope = _request.get()
    if scope is None:
        yield
        return
    before, scope.run_decode = scope.run_decode, run
    try:
        yield
    finally:
        scope.run_decode = before


def tokenize_with_images(engine: EngineFacade, text: str, images: list[Image], *, fit: bool = True,
                         text_after: bool = True) -> tuple[list[int], list[ImageChunk]]:
    """The prompt's tokens with each image's placeholder ids, and its image chunks. fit: the
    prompt must fit the context (ContextOverflow); text_after: it must not end with an image
    (a prompt to run; a count need not). PromptRefused for an image the projector cannot read
    or must decode in one batch larger than the server's (image_too_large_for_batch), or a
    template that did not show each image once."""
    pieces = text.split(MEDIA_MARKER)
    if len(pieces) - 1 != len(images):
        raise PromptRefused(f"the chat template showed {len(pieces) - 1} image(s) of the {len(images)} the "
                            f"conversation has: it cannot place them", code="template_error", param="messages")
    scope = _request.get() or RequestImages()
    scope.admit([image for image in images if isinstance(image, Image)])
    tokens = _text_tokens(engine, pieces[0], fit, first=True)
    chunks: list[ImageChunk] = []
    for part, piece in zip(images, pieces[1:]):
        if isinstance(part, Audio):             # a clip stands at a marker too (prompt/audio_media.py)
            _place(clip_segments(engine, scope, part), part.digest, tokens, chunks)
        else:
            _place(_image_segments(engine, scope, part), part.digest, tokens, chunks)
        tokens += _text_tokens(engine, piece, fit, first=False)
    if fit and len(tokens) >= engine.n_ctx:
        raise ContextOverflow(len(tokens), engine.n_ctx)
    if text_after and chunks and chunks[-1].end == len(tokens):
        # the runtime reads the next token's logits off the prompt's last token: it must be text
        raise PromptRefused("the prompt ends with an image: put text (or the generation prompt) after it",
                            code="invalid_image", param="messages")
    return tokens, chunks


def shown_prompt(engine: EngineFacade, tokens: list[int], images: list[ImageChunk]) -> str:
    """The prompt as text, each image the media marker (never its placeholder ids detokenized)."""
    parts, at = [], 0
    for image in images:
        parts += [engine.detokenize(tokens[at:image.start]), MEDIA_MARKER]
        at = image.end
    return "".join(parts) + engine.detokenize(tokens[at:])


def _text_tokens(engine: EngineFacade, text: str, fit: bool, *, first: bool) -> list[int]:
    if not text and not first:
        return []
    try:
        return engine.tokenize(text, add_special=first, parse_special=True, limit=engine.n_ctx if fit else None)
    except TooManyTokens as exc:
        raise ContextOverflow(exc.at_least, engine.n_ctx, at_least=True) from None


def _image_segments(engine: EngineFacade, scope: RequestImages, image: Image) -> list:
    where = image.where or "messages"
    try:
        return scope.decode(image.digest, lambda stop: engine.image_segments(image.data, stop))
    except ImageUnreadable as exc:
        raise PromptRefused(f"invalid '{where}': {exc}", code="invalid_image", param=where) from None
    except ImageTooLargeForBatch as exc:
        raise PromptRefused(f"invalid '{where}': {exc}", code="image_too_large_for_batch", param=where) from None


def _place(segments: list, digest: str, tokens: list[int], chunks: list[ImageChunk]) -> None:
    """An image's or clip's segments onto the prompt: token lists as they are, each media chunk
    at the placeholder ids of its digest."""
    for segment in segments:
        if isinstance(segment, list):
            tokens += segment
            continue
        chunks.append(ImageChunk(len(tokens), segment.n_tokens, digest, segment))
        tokens += [placeholder_id(digest)] * segment.n_tokens
