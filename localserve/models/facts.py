"""What a catalogue model is, worked out from its file without loading it: the facts model
lists and /api/show describe (family, parameter count, quantization, training context, chat
template, capabilities).

A load would cost seconds and, under --max-models, evict another model: Copilot Chat asks
/api/show of every model it lists. So the facts come from the GGUF header (engine/gguf_header,
which never touches llama.cpp) and the chat template chosen as a load chooses it (the
--chat-template-file override, else the GGUF's, else a builtin), probed as a load probes it.
Kept per file version and settings: asking twice reads nothing twice.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass

from ..engine.gguf_header import Header, HeaderError, read_header
from ..prompt.jinja_env import TemplateError
from ..prompt.templates import choose_template
from ..settings import MAX_DEFAULT_CTX, Settings
from .catalogue import ModelEntry

log = logging.getLogger("localserve.models")

RANK_POOLING = 4        # llama.cpp's LLAMA_POOLING_TYPE_RANK: a reranker's head
# architectures llama.cpp runs as encoders (no KV cache, attention both ways): they only embed
ENCODERS = frozenset({"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "modern-bert",
                      "neo-bert", "t5encoder", "eurobert"})


@dataclass(frozen=True)
class ModelFacts:
    architecture: str
    n_params: int
    quantization: str               # "Q4_K_M", "F16", ...
    n_ctx_train: int                # the model's training context (0: the header names none)
    n_ctx: int                      # the context a load gives each sequence (--ctx-size, else the training one, capped)
    n_layer: int
    template: str                   # the chat template a load serves with
    capabilities: tuple[str, ...]   # Ollama's words: completion, tools, thinking, insert, vision, embedding
    fim: tuple[str, str, str] | None    # the fill-in-the-middle tokens' texts (prefix, suffix, middle)

    @property
    def parameter_size(self) -> str:
        return human_number(self.n_params)


_known: dict[tuple, ModelFacts | None] = {}
_lock = threading.Lock()


def facts_of(entry: ModelEntry, server: Settings) -> ModelFacts | None:
    """The facts of a catalogue model; None for a file whose header cannot be read (its load
    will say what is wrong)."""
    settings = entry.settings(server)
    try:
        stat = os.stat(entry.path)
    except OSError:
        return None
    key = (os.path.realpath(entry.path), stat.st_size, stat.st_mtime_ns, settings.chat_template_file,
           settings.mmproj, settings.embeddings_only, settings.ctx_size)
    with _lock:
        if key in _known:
            return _known[key]
    try:
        found = _facts(read_header(entry.path), settings)
    except HeaderError as exc:
        log.warning("model %s: %s", entry.name, exc)
        found = None
    with _lock:
        _known[key] = found
    return found


def _facts(header: Header, settings: Settings) -> ModelFacts:
    arch = header.architecture
    try:
        template = choose_template(gguf_template=header.chat_template, architecture=arch,
                                   bos_token=header.bos_token, eos_token=header.eos_token,
                                   override_path=settings.chat_template_file)
        text, caps = template.text, template.caps
    except TemplateError:       # a bad --chat-template-file: the load refuses it, naming it
        text, caps = "", None
    except Exception:           # whatever a template does, a model list still answers
        log.exception("probing the chat template of a %s model failed", arch)
        text, caps = "", None
    capabilities: list[str] = []
    if embeds_only(header, settings):
        capabilities.append("embedding")
    else:
        capabilities.append("completion")
        if caps is not None and caps.tools:
            capabilities.append("tools")
        if "<think>" in header.special or (caps is not None and caps.reasoning) or "<think>" in text:
            capabilities.append("thinking")
        if header.fills_in_the_middle:
            capabilities.append("insert")
        if settings.mmproj and os.path.isfile(settings.mmproj):
            capabilities += projector_encoders(settings.mmproj)
    n_ctx_train = header.context_length
    fim = tuple(piece(header, header.fim[part]) for part in ("pre", "suf", "mid")) \
        if header.fills_in_the_middle else None
    block_count = header.arch_value("block_count")
    return ModelFacts(arch, header.n_params, header.quantization, n_ctx_train,
                      settings.ctx_size or min(n_ctx_train or MAX_DEFAULT_CTX, MAX_DEFAULT_CTX),
                      int(block_count) if isinstance(block_count, int) else 0, text, tuple(capabilities), fim)


def piece(header: Header, token: str) -> str:
    """A token's text as the model writes it: a SentencePiece vocabulary (tokenizer "llama")
    writes its spaces as ▁ (CodeLlama's "▁<PRE>")."""
    return token.replace("\u2581", " ") if header.meta.get("tokenizer.ggml.model") == "llama" else token


def embeds_only(header: Header, settings: Settings) -> bool:
    """Whether the model can only embed (or rank): an encoder, a reranker, or kept out of chat."""
    causal = header.arch_value("attention.causal")
    return settings.embeddings_only or header.architecture in ENCODERS or causal is False \
        or header.arch_value("pooling_type") == RANK_POOLING


def human_number(n: int) -> str:
    """A parameter count as Ollama writes it (format.HumanNumber): 8B, 1.5B, 135M, 494.03M."""
    for unit, scale, decimals in (("B", 1e9, 1), ("M", 1e6, 2), ("K", 1e3, 0)):
        if n >= scale:
            number = n / scale
            return f"{number:.0f}{unit}" if number == int(number) or unit == "K" else f"{number:.{decimals}f}{unit}"
    return str(n)


def projector_encoders(path: str) -> tuple[str, ...]:
    """What a projector file reads, from its header (clip.has_vision_encoder,
    clip.has_audio_encoder): ("vision",), ("audio",) or both; ("vision",) when the header cannot
    be read (the load says why)."""
    try:
        meta = read_header(path).meta
    except HeaderError:
        return ("vision",)
    found = tuple(kind for kind in ("vision", "audio") if meta.get(f"clip.has_{kind}_encoder") is True)
    return found or ("vision",)

