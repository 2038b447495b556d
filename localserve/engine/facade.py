"""The engine as connection threads see it: the vocabulary and the model's fixed facts.

Only the runtime thread decodes. Connection threads still need the model to read a request
(tokenize a prompt, check a grammar, show a token's bytes, report n_ctx), and they reach it
only through an EngineFacade: every call here is safe off the runtime thread, because it
reads the vocabulary (fixed once loaded) or builds and frees its own grammar sampler, never
the llama context. This module imports no llama_cpp, so a dialect that types against it, or
catches its errors, loads no native library.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .cpu_weights import WeightPlan
    from .ggml_lib import Device


class TooManyTokens(Exception):
    """A text makes more tokens than the caller's limit; at_least: how many it makes at least."""

    def __init__(self, at_least: int):
        super().__init__(f"at least {at_least} tokens")
        self.at_least = at_least


class GrammarError(ValueError):
    """llama.cpp cannot (or must not) run this grammar."""


class ImageUnreadable(ValueError):
    """The vision projector's loader (libmtmd) cannot read these bytes as an image."""


class AudioUnreadable(ValueError):
    """The projector's audio decoder (libmtmd's miniaudio) cannot read these bytes, or what it
    decoded is a clip the encoder must not be handed (engine/audio.py); code as audio.py's."""

    def __init__(self, message: str, code: str = "invalid_audio"):
        super().__init__(message)
        self.code = code


class DecodeStopped(Exception):
    """An image's or a clip's decode stopped between its steps: the caller's stop was set (its
    client left); the message says where it stopped."""


def stop_if(stop: threading.Event | None, where: str) -> None:
    """DecodeStopped, saying `where`, once the caller's stop is set."""
    if stop is not None and stop.is_set():
        raise DecodeStopped(where)


class ImageTooLargeForBatch(ValueError):
    """The projector decodes an image with attention both ways (Gemma 3): its embeddings must go
    into one decode batch, and this image takes more tokens than the server's batch holds."""

    def __init__(self, n_tokens: int, n_batch: int):
        super().__init__(f"the image takes {n_tokens} tokens, which this model decodes with attention both ways, "
                         f"in one batch of at most --batch-size ({n_batch}) tokens: start the server with "
                         f"--batch-size {n_tokens} or more to read it")
        self.n_tokens = n_tokens
        self.n_batch = n_batch


class MediaSegments(Protocol):
    """What the facade reads of the vision projector (vision.Projector)."""

    def image_segments(self, data: bytes, stop: threading.Event | None = None) -> list: ...


@dataclass(frozen=True)
class FimTokens:
    """The model's fill-in-the-middle tokens (None where its vocabulary has none): prefix,
    suffix and middle mark the hole; pad ends a middle; rep and sep lay out repository
    context (a project name, then each file). llama.cpp reads them from the GGUF
    (tokenizer.ggml.fim_*_token_id, or the older prefix/suffix/middle_token_id) or finds
    them by their text, and counts pad, rep and sep as end-of-generation tokens."""
    pre: int | None = None
    suf: int | None = None
    mid: int | None = None
    pad: int | None = None
    rep: int | None = None
    sep: int | None = None

    def missing(self) -> list[str]:
        """The tokens a fill-in-the-middle prompt needs that this model lacks."""
        return [name for name in ("pre", "suf", "mid") if getattr(self, name) is None]


@dataclass
class ModelInfo:
    path: str
    architecture: str
    n_ctx_train: int
    n_params: int
    size: int
    n_vocab: int
    description: str
    chat_template: str | None
    bos_token: str
    eos_token: str


class _LoadedEngine(Protocol):
    """What the facade reads of engine.Engine (named here: engine.py imports this module)."""
    n_ctx_seq: int
    n_vocab: int
    max_piece_bytes: int
    eog_tokens: list[int]
    info: ModelInfo
    devices: list[Device]
    n_layer: int
    gpu_layers: int
    weight_plan: WeightPlan
    weight_buffers: dict[str, float]
    fim: FimTokens
    prompt_start: list[int]
    projector: MediaSegments | None

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True,
                 limit: int | None = None) -> list[int]: ...

    def detokenize(self, tokens: Sequence[int]) -> str: ...

    def piece(self, token: int) -> bytes: ...

    def valid_token(self, token: int) -> bool: ...

    def check_grammar(self, grammar: str) -> frozenset[int]: ...


class EngineFacade:
    """What a connection thread may ask of the loaded engine.

    The facts (n_ctx, n_vocab, eog_tokens, fim, info, devices, layers, weight buffers) are read
    once at start-up: they do not change while the model is loaded."""

    def __init__(self, engine: _LoadedEngine):
        self._engine = engine
        self.n_ctx: int = engine.n_ctx_seq          # each sequence's context
        self.n_vocab: int = engine.n_vocab
        self.max_piece_bytes: int = engine.max_piece_bytes
        self.eog_tokens: list[int] = list(engine.eog_tokens)
        self.fim: FimTokens = engine.fim
        # what tokenize(add_special=True) puts before any text: BOS for most models, nothing for some
        self.prompt_start: list[int] = list(engine.prompt_start)
        self.info: ModelInfo = engine.info
        self.devices: list[Device] = list(engine.devices)
        self.n_layer: int = engine.n_layer
        self.gpu_layers: int = engine.gpu_layers
        self.weight_plan: WeightPlan = engine.weight_plan
        self.weight_buffers: dict[str, float] = dict(engine.weight_buffers)

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True,
                 limit: int | None = None) -> list[int]:
        """The tokens of text; with a limit, TooManyTokens when there would be more."""
        return self._engine.tokenize(text, add_special=add_special, parse_special=parse_special, limit=limit)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self._engine.detokenize(tokens)

    def piece(self, token: int) -> bytes:
        """The bytes of one token, special tokens rendered as their text."""
        return self._engine.piece(token)

    def valid_token(self, token: int) -> bool:
        return self._engine.valid_token(token)

    def check_grammar(self, grammar: str) -> frozenset[int]:
        """GrammarError unless llama.cpp parses the grammar and it is safe to run; the tokens it names whole."""
        return self._engine.check_grammar(grammar)

    @property
    def has_vision(self) -> bool:
        """A projector with a vision encoder is loaded with the model: it reads images."""
        return self._engine.projector is not None and self._engine.projector.vision

    @property
    def has_audio(self) -> bool:
        """A projector with an audio encoder is loaded with the model: it hears audio (engine/audio.py)."""
        return self._engine.projector is not None and self._engine.projector.audio

    def audio_segments(self, data: bytes, stop: threading.Event | None = None) -> list:
        """One clip (bytes audio.py checked) as prompt segments: token lists (the model's own
        wrapping) and one audio chunk per 30-second window (engine/audio.py); AudioUnreadable;
        DecodeStopped once `stop` is set (checked between the decode's steps)."""
        if not self.has_audio:
            raise AudioUnreadable("this model has no audio encoder")
        return self._engine.projector.audio_segments(data, stop)

    def image_segments(self, data: bytes, stop: threading.Event | None = None) -> list:
        """One image as prompt segments (token lists and one image chunk, vision.py);
        ImageUnreadable when its bytes are no image the projector's loader reads,
        ImageTooLargeForBatch when it must be decoded in one batch and the batch is too small;
        DecodeStopped once `stop` is set (checked between the decode's steps)."""
        if self._engine.projector is None:
            raise ImageUnreadable("this model has no vision projector")
        return self._engine.projector.image_segments(data, stop)
