"""The vocabulary shared by the dialects and the runtime: requests in, events out.

A dialect reads its JSON into a GenerationRequest; the runtime
answers on the job's own queue with the events below, and says why it refused or
failed a job with the domain errors at the end. Nothing here knows about HTTP or any
dialect's wire format: each dialect maps the errors to its status and error shape.
It names the tool-call families' and reasoning formats' types (parsing/), so it sits
on parsing's floor, not below it.
"""

from __future__ import annotations

import queue
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Protocol, Union

from .parsing.content_markup import ContentMarkup
from .parsing.reasoning import ReasoningFormat
from .parsing.tool_families import ToolSyntax


@dataclass
class SamplingParams:
    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    typical_p: float = 1.0          # locally typical sampling (1.0: off); Ollama's option
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    logit_bias: dict[int, float] = field(default_factory=dict)
    grammar: str | None = None
    # A grammar that sleeps until the model opens a tool call on its own, then holds the call to
    # it from its first marker on (strict tools under tool_choice auto: runtime/call_wake.py).
    call_grammar: str | None = None
    grammar_tokens: frozenset[int] | None = None    # the tokens `grammar` names whole, found when it was checked
    # llama-server's per-request `lora`: (adapter id, scale) pairs as the request lists them; None when
    # it lists none. The model's adapters turn it into GenerationRequest.adapters (models/adapters.py).
    lora: tuple[tuple[int, float], ...] | None = None


# The LoRA adapters a job runs under: (adapter id, scale) for each at work, by id; () for none.
# Jobs of different sets never share a decode batch (runtime/adapter_turns.py).
AdapterSet = tuple[tuple[int, float], ...]
ADAPTER_SCOPE = "\x00lora "     # between a cache scope's key part and its adapter set's


def cache_scope(key_scope: str, adapters: AdapterSet) -> str:
    """The prompt-cache scope of a job: its API key's, and its adapter set's when it has one (the
    KV cache of a prefix computed under one set is not that prefix's under another)."""
    if not adapters:
        return key_scope
    return key_scope + ADAPTER_SCOPE + ",".join(f"{i}:{scale!r}" for i, scale in adapters)


def scope_parts(scope: str) -> tuple[str, AdapterSet]:
    """cache_scope's inverse: the key's scope and the adapter set (a slot saved or erased is its
    key's whichever set its prompt ran under: runtime/slot_state.py)."""
    key, _, adapters = scope.partition(ADAPTER_SCOPE)
    pairs = (pair.split(":") for pair in adapters.split(",")) if adapters else ()
    return key, tuple((int(i), float(scale)) for i, scale in pairs)


@dataclass
class ToolSpec:
    """What the runtime needs to split tool calls out of generated text."""
    syntax: ToolSyntax
    names: dict[str, dict]           # function name → its parameters schema
    parallel: bool = True
    starts_inside: bool = False      # the prompt ends with the family's start marker (functionary v3.2's >>>)


# Where an image stands in a rendered prompt: prompt/ writes it, libmtmd (engine/vision.py) reads
# it. Random per process, as llama-server's is: no client's text can forge one.
MEDIA_MARKER = f"<__media_{secrets.token_hex(8)}__>"


class MediaHandle(Protocol):
    """The engine's image chunk (engine/vision.py's MediaChunk), as the prompt carries it."""
    n_tokens: int
    n_pos: int
    audio: bool             # an audio chunk (a window of a clip), evaluated as an image's is


@dataclass(frozen=True)
class ImageChunk:
    """An image's positions in a prompt: prompt_tokens[start:end] all hold placeholder_id(digest),
    a negative id made from the hash of its bytes, so prefix matching (slots, the RAM cache) tells
    two images apart and reuses a repeated one. handle: the engine's chunk (engine/vision.py),
    read by the engine alone."""
    start: int
    n_tokens: int
    digest: str                                  # sha256 of the image's bytes, hex
    handle: MediaHandle = field(compare=False, repr=False)

    @property
    def end(self) -> int:
        return self.start + self.n_tokens

    @property
    def saved_positions(self) -> int:
        """Positions it takes fewer than tokens: 0, but for M-RoPE (Qwen2-VL), where an image of
        w x h tokens takes max(w, h) positions."""
        return self.n_tokens - self.handle.n_pos


def placeholder_id(digest: str) -> int:
    """The id every position of an image holds in prompt_tokens: negative, never a real token."""
    return -1 - int(digest[:8], 16) % (2 ** 31 - 2)


def position_of(images: list[ImageChunk], index: int) -> int:
    """The KV position of prompt_tokens[index] (never inside an image): its index, less what the
    images before it saved (M-RoPE)."""
    return index - sum(image.saved_positions for image in images if image.end <= index)


def outside_images(images: list[ImageChunk], n: int) -> int:
    """n, or the start of the image it would end inside: a cached prefix never ends mid-image."""
    for image in images:
        if image.start < n < image.end:
            return image.start
    return n


@dataclass
class GenerationRequest:
    prompt_tokens: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    logprobs: bool = False
    top_logprobs: int = 0
    reasoning: ReasoningFormat | None = None
    reasoning_starts_inside: bool = False
    reasoning_budget: int | None = None
    content_markup: ContentMarkup | None = None   # the template's own markup around the answer, dropped
    tools: ToolSpec | None = None
    label: str = ""                  # for logs: endpoint and request id
    # A compaction: the model writes a summary of the conversation (prompt/compaction.py); its
    # text ends the job as a Compacted event, before Finished, and counts as a compaction.
    compaction: bool = False
    cache_key: str | None = None     # prompt_cache_key: prefer the slot this key last used
    # Whose prompt caches it may use and fill (the API key's scope, wire/access.py): a cached
    # prefix of another scope's prompt would show in cached_tokens, and so tell that prompt.
    scope: str = ""
    prediction: str | None = None    # OpenAI's prediction: the text the output likely repeats; drafts come from it first
    # Editor completions (llama-server's /infill): past this many seconds of generation the answer
    # ends at its next line break; a line indented less than min_indent ends it before that line.
    line_time_limit: float | None = None
    min_indent: int = 0
    # A fill-in-the-middle completion (every FIM route marks its own): with every slot busy it
    # parks a running chat rather than wait behind it (runtime/preempt.py).
    editor_completion: bool = False
    # Who sent an editor completion (its X-Client-Id, else its User-Agent; dialects/fim.py): one
    # client's completions may take only a share of the preemptions of one job (runtime/fairness.py).
    client: str | None = None
    images: list[ImageChunk] = field(default_factory=list)   # in prompt order; their ids in prompt_tokens
    images_omitted: int = 0          # images the prompt shows as text (the model has no vision): said in a header
    audio_omitted: int = 0           # clips it shows as text (no audio encoder): said in a header too
    # llama-server's id_slot: the job runs in this slot (modulo the slots there are), waiting for
    # it while it is busy; it neither parks another job nor is parked (runtime/preempt.py)
    slot_id: int | None = None
    # Ollama's shift: at the context's end the job keeps its first `context_shift` tokens, drops
    # half of the rest and goes on (runtime/context_shift.py); None: it stops there ("length")
    context_shift: int | None = None
    adapters: AdapterSet = ()        # its LoRA adapters, resolved at submit (models/adapters.py)
    # The choices of one request (OpenAI's `n`) share this id: each waits for a sibling's prompt
    # head whatever its length and copies it (runtime/placement.waits_for), so the prompt is
    # computed once
    choice_group: str | None = None


# ---- events, one queue per job -------------------------------------------------

@dataclass
class Context:
    used: int
    n_ctx: int


@dataclass
class Chunk:
    reasoning: bool
    text: str
    logprobs: list[dict] | None = None


@dataclass
class ToolCallStart:
    index: int
    id: str            # the model's own id (or its family's form), else one minted neutral:
    name: str
    minted: bool = False   # ... which each dialect shows in its own form (call_…, toolu_…)


@dataclass
class ToolCallDelta:
    index: int
    fragment: str


@dataclass
class Compacted:
    """A compaction job's summary, whole (sent once, just before its Finished); each dialect
    turns it into its own item or block (dialects/compaction.py)."""
    summary: str


@dataclass
class Loading:
    """The model a request names is loading: no job yet (models/manager.py sends it while the
    request waits; each dialect shows it its own way, or not at all)."""
    model: str


@dataclass
class ToolCall:
    id: str            # as ToolCallStart's
    name: str
    arguments: str  # a JSON object: the generated text less insignificant whitespace
    minted: bool = False
    # False: the call was cut off (max_tokens, a stop, its text turned malformed) after its start
    # went out; `arguments` is then what it got, maybe no JSON (parsing/partial_json closes it)
    complete: bool = True


@dataclass
class Timings:
    queued_ms: float = 0.0
    prefill_ms: float = 0.0
    decode_ms: float = 0.0          # neither counts the time the job was parked (runtime/preempt.py):
    parked_ms: float = 0.0          # that is here
    draft_n: int = 0                # tokens drafted (speculative decoding), and how many were accepted
    draft_n_accepted: int = 0


@dataclass
class GenerationOutput:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str = "stop"                         # stop | length | tool_calls | cancelled
    stop_sequence: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    audio_tokens: int = 0            # of prompt_tokens, the positions its clips' chunks take
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    accepted_prediction_tokens: int = 0     # tokens drafted from the request's prediction the model confirmed
    rejected_prediction_tokens: int = 0     # those it did not: decoded, then dropped (other drafts: timings)
    logprobs: list[dict] | None = None
    timings: Timings = field(default_factory=Timings)
    token_ids: list[int] = field(default_factory=list)     # the tokens generated (llama-server's return_tokens)
    slot_id: int = -1                # the slot it ran in (-1: none, it never started)


@dataclass
class Finished:
    output: GenerationOutput | None = None
    error: GenerationFailure | None = None


Event = Union[Context, Chunk, ToolCallStart, ToolCallDelta, Compacted, Finished]


# ---- why a job was refused or failed -------------------------------------------------
# Raised by submit() on the connection thread, or carried by Finished.error; each dialect
# maps them to its HTTP status and error shape (dialects/failures.py).

class GenerationFailure(Exception):
    """Something inside the runtime or the engine went wrong; the message says what."""

    def __init__(self, message: str = ""):
        super().__init__(message)
        self.message = message


class QueueFull(GenerationFailure):
    """Too many jobs are waiting already (submit)."""


class RuntimeStopped(GenerationFailure):
    """The runtime is stopping: a job submitted now, or still queued, will never run."""


class GrammarBacklog(GenerationFailure):
    """Too many abandoned grammar samples are still running: no new grammar job for now."""


class InvalidGrammar(GenerationFailure):
    """llama.cpp refused the job's grammar; the message is its reason."""


class SamplingTooSlow(GenerationFailure):
    """Choosing one token took longer than --sample-time-limit: the grammar is too costly."""


class NoAllowedToken(GenerationFailure):
    """The grammar and logit_bias together leave no token to choose."""


class EmbeddingsUnavailable(GenerationFailure):
    """The model's embedding context could not be made."""


class JobCancelled(GenerationFailure):
    """An embedding job ended because it was cancelled (its client went away)."""


class PromptRefused(GenerationFailure):
    """The request's prompt cannot be built from what the client sent: the template fails on it,
    a text is too long to count, a grammar or schema cannot be used. code: what went wrong
    (template_error, text_too_long, invalid_grammar, grammar_too_costly, invalid_schema,
    invalid_image, image_too_large_for_batch);
    param: the request field at fault, as the caller named it."""

    def __init__(self, message: str, *, code: str, param: str):
        super().__init__(message)
        self.code = code
        self.param = param


class ContextOverflow(GenerationFailure):
    """The prompt needs more tokens than the context holds (raised while the prompt is built).
    at_least: the prompt was too long to be worth tokenizing; n_prompt_tokens is a lower bound."""

    def __init__(self, n_prompt_tokens: int, n_ctx: int, *, at_least: bool = False):
        super().__init__(f"the request needs {'at least ' if at_least else ''}{n_prompt_tokens} prompt tokens "
                         f"but the context holds {n_ctx}")
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx
        self.at_least = at_least


class ChoiceEvents:
    """One choice's events (a request's `n`), put on the queue the request's choices share as
    ChoiceEvents; the runtime puts on it as on any job's queue."""

    def __init__(self, shared: queue.SimpleQueue, index: int):
        self.shared = shared
        self.index = index

    def put(self, event: Event) -> None:
        self.shared.put(ChoiceEvent(self.index, event))


@dataclass(frozen=True)
class ChoiceEvent:
    """An event of the choice `index` of a request's `n`."""
    index: int
    event: Event


class ActiveGeneration:
    """One job's handle, shared by the connection thread and the runtime thread. `events`: where
    the runtime puts its events (its own queue unless given: a choice's ChoiceEvents)."""

    def __init__(self, request: GenerationRequest, events: ChoiceEvents | None = None):
        self.id = uuid.uuid4().hex[:12]
        self.request = request
        self.events: queue.SimpleQueue[Event] | ChoiceEvents = queue.SimpleQueue() if events is None else events
        self.cancel_flag = threading.Event()
        self.created = time.monotonic()
        self.cancel_reason = ""

    def cancel(self, reason: str = "client went away") -> None:
        if not self.cancel_flag.is_set():
            self.cancel_reason = reason
            self.cancel_flag.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel_flag.is_set()
