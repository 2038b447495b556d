"""What the runtime keeps per sequence and per request: a Slot (a sequence of the KV cache and
what it holds) and a Job (one admitted request: its tokens, sampler, text pipeline, progress).

One owner per piece of state (nano-vllm's rule): a job's and a slot's fields change only through
the methods below. A job's state sits in small records, each with one concern: its Progress (its
status, the tokens in its cache, those it generated, the one it decodes next), its Clocks, the
PendingChoice of a grammar's token chosen off-thread, its PrefillStops (an image decoded in
parts, a window checkpoint), its LogprobLedger and its ReasoningBudget. The parts of a step
(token_choice.py, images.py, preempt.py, admission.py, call_wake.py) read them and return what
they decided; the runtime step applies it here (runtime.py, take_token.py).
tests/unit/runtime/test_job_state_owner.py finds any write to these fields outside this module.
"""

from __future__ import annotations

import collections
import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..generation import ActiveGeneration, Chunk, GenerationRequest, ImageChunk, ToolCallDelta, ToolCallStart, position_of
from .promptcache import common_prefix
from .textstream import OutputPipeline

if TYPE_CHECKING:   # types only: the scheduler reads jobs without loading llama.cpp
    from ..engine.sampler import Sampler
    from ..engine.vision import EncodedImage
    from .pending_sample import PendingSample, SampleWorker


class JobStatus(enum.Enum):
    """A job in a slot (one still queued is an ActiveGeneration in the scheduler's queue, no Job yet)."""
    PREFILLING = "prefilling"   # in a slot; prompt tokens still to decode
    DECODING = "decoding"       # the prompt is in the cache; one token per step
    FINISHED = "finished"       # retired, cancelled or failed; its slot is free again


@dataclass
class Slot:
    seq_id: int
    tokens: list[int] = field(default_factory=list)   # what this sequence's KV cache holds
    job: "Job | None" = None
    last_used: float = 0.0
    cache_key: str | None = None                      # the prompt_cache_key of its last job
    kv_length: int = 0          # positions its KV sequence held after the last step that ran it (/slots)
    scope: str = ""             # whose prompt its tokens are (GenerationRequest.scope)

    def shared_with(self, prompt: list[int], scope: str) -> int:
        """How many of the prompt's first tokens this sequence holds for it: none for a prompt of
        another scope, which must not learn what this one holds from its cached_tokens."""
        return common_prefix(self.tokens, prompt) if scope == self.scope else 0

    # ---- what its sequence holds, as kvslots.py, preempt.py and slot_state.py decide ----

    def holds(self, tokens: list[int], kv_length: int | None = None) -> None:
        """Its sequence holds these tokens now (at `kv_length` positions, where that is known)."""
        self.tokens = tokens
        if kv_length is not None:
            self.kv_length = kv_length

    def cut(self, keep: int) -> None:
        """Its sequence was cut after `keep` tokens."""
        del self.tokens[keep:]

    def emptied(self) -> None:
        self.tokens = []
        self.kv_length = 0

    def measured(self, kv_length: int) -> None:
        """The positions its KV sequence holds after a step (/slots)."""
        self.kv_length = kv_length

    def belongs_to(self, scope: str) -> None:
        """Its tokens are a prompt of `scope` from now on (kvslots.py, slot_state.py)."""
        self.scope = scope

    def restored(self, tokens: list[int], kv_length: int, scope: str) -> None:
        """A saved state put back into it (slot_state.py): no prompt_cache_key of its own."""
        self.tokens, self.kv_length, self.scope, self.cache_key = tokens, kv_length, scope, None


@dataclass
class Progress:
    """How far a job got: its status, the tokens of its sequence in the KV cache (n_past), the
    tokens it generated and the one it decodes next (chosen, not yet decoded)."""
    n_cached: int                   # prompt tokens it found in the cache
    n_past: int
    status: JobStatus = JobStatus.PREFILLING
    generated: list[int] = field(default_factory=list)
    next_token: int | None = None
    reasoning_tokens: int = 0


@dataclass
class Clocks:
    """When it was admitted and wrote its first token; its time parked for editor completions
    (preempt.py), before its first token and after it, which counts neither as prefill nor as decoding."""
    admitted: float
    first_token: float | None = None
    parked: float | None = None     # when an editor completion parked it, while it waits
    parked_prefill_s: float = 0.0
    parked_decode_s: float = 0.0


@dataclass(frozen=True)
class PendingChoice:
    """A grammar's token (or draft run) being chosen on the job's worker thread (token_choice.py)."""
    sample: PendingSample
    worker: SampleWorker            # the thread that chooses it, kept for the job's life
    first_entry: dict | None        # the first token's logprob distribution, read before the hand-off
    draft: list[int]                # the draft that sample verifies
    draft_rows: object              # its logits rows after the first, copied (numpy), for logprobs


@dataclass
class PrefillStops:
    """Where its prefill stands apart from plain tokens: an image encoded and decoded part by part
    (images.py), and where it pauses for a window checkpoint (kvslots.py)."""
    image_in_parts: EncodedImage | None = None
    checkpoint_at: int = 0


@dataclass
class LogprobLedger:
    """Its tokens' logprob entries: those sent (None when it asked for none), those whose text is
    still held back."""
    sent: list[dict] | None
    unsent: list[dict] = field(default_factory=list)


@dataclass
class ReasoningBudget:
    """Past its thinking budget a job is made to close its reasoning: the tokens it must write
    next instead of sampling."""
    forced: collections.deque[int] = field(default_factory=collections.deque)
    spent: bool = False


class Job:
    """One admitted request: its tokens, sampler, text pipeline and progress."""

    def __init__(self, gen: ActiveGeneration, slot: Slot, sampler: Sampler, n_cached: int, *,
                 drafts=None, checkpoint_at: int = 0, now: float | None = None):
        self.gen = gen
        self.request: GenerationRequest = gen.request
        self.slot = slot
        self.sampler = sampler
        self.prompt = gen.request.prompt_tokens
        self.pipeline = OutputPipeline(gen.request)
        self.drafts = drafts        # speculative.JobDrafts (which imports this module), when drafting is on
        self.progress = Progress(n_cached, n_past=n_cached)
        self.clocks = Clocks(time.monotonic() if now is None else now)
        self.choice: PendingChoice | None = None
        self.sample_worker: SampleWorker | None = None
        self.stops = PrefillStops(checkpoint_at=checkpoint_at)
        self.ledger = LogprobLedger([] if gen.request.logprobs else None)
        self.budget = ReasoningBudget()
        self.call_refused: int | None = None     # the block of calls whose text its grammar refused (call_wake.py)

    # ---- read by the parts of a step ---------------------------------------------------

    @property
    def status(self) -> JobStatus:
        """Where it is in its life: prefilling, decoding, finished (read by scheduler.py and the others)."""
        return self.progress.status

    @property
    def n_past(self) -> int:
        """Tokens of this sequence already in the KV cache."""
        return self.progress.n_past

    @property
    def next_token(self) -> int | None:
        """The token chosen last, which the next step decodes (None while one is being chosen)."""
        return self.progress.next_token

    @property
    def generated(self) -> list[int]:
        return self.progress.generated

    @property
    def forced(self) -> collections.deque[int]:
        """Tokens it must write next instead of sampling."""
        return self.budget.forced

    @property
    def pending(self) -> PendingSample | None:
        """A grammar's token being chosen off-thread."""
        return self.choice.sample if self.choice is not None else None

    @property
    def prefilling(self) -> bool:
        return self.progress.status is JobStatus.PREFILLING

    @property
    def prompt_left(self) -> int:
        return len(self.prompt) - self.progress.n_past

    # ---- its state, moved by the runtime step alone ------------------------------------

    def start(self) -> None:
        """The job takes its slot."""
        self.slot.job = self
        self.slot.last_used = time.monotonic()
        self.slot.cache_key = self.request.cache_key

    def decoded(self, n_tokens: int) -> None:
        """The step put n_tokens more of its tokens (prompt tokens, or its next token) in the cache."""
        self.progress.n_past += n_tokens

    def image_advanced(self, n_tokens: int, in_parts: EncodedImage | None) -> None:
        """An image's positions (all, or a part) went into its sequence (images.py); `in_parts`: the
        encoded image still being decoded part by part, None once whole."""
        self.progress.n_past += n_tokens
        self.stops.image_in_parts = in_parts

    def reached_choice(self) -> None:
        """Its next token is being chosen: what was decoded before it (the whole prompt, or the
        token chosen last) is what its slot's sequence holds now."""
        progress = self.progress
        if progress.status is JobStatus.DECODING:
            self.slot.tokens.append(progress.next_token)
        else:
            self.slot.tokens = list(self.prompt)
            progress.status = JobStatus.DECODING
        progress.next_token = None

    def kept_draft_token(self) -> None:
        """The drafted token before the one being chosen was accepted: decoded in this step, it is
        the sequence's now (speculative.py)."""
        self.progress.n_past += 1
        self.reached_choice()

    def prompt_done(self, now: float) -> None:
        """A job that asked for no tokens (an editor warming the cache): its prompt is in the cache."""
        self.reached_choice()
        self.clocks.first_token = now

    def taking(self, token: int, now: float) -> None:
        """A chosen token is being taken (take_token.py): the clock of its first token starts, and a
        forced token is written."""
        if self.clocks.first_token is None:
            self.clocks.first_token = now
        forced = self.budget.forced
        if forced and forced[0] == token:
            forced.popleft()

    def took(self, token: int, in_reasoning: bool) -> None:
        """A token it generated (not an end-of-generation token)."""
        self.progress.generated.append(token)
        if in_reasoning:
            self.progress.reasoning_tokens += 1

    def force(self, tokens: list[int]) -> None:
        """Its thinking budget is spent: these tokens close its reasoning."""
        self.budget.spent = True
        self.budget.forced.extend(tokens)

    def hold_logprob(self, entry: dict) -> None:
        """A token's logprob entry, held until its text is released."""
        self.ledger.unsent.append(entry)

    def release_logprobs(self, events: list) -> None:
        """Give the tokens whose text these events release their logprob entries.

        A token whose text is held back (half a character, a possible stop string or tool call)
        waits in the ledger; the first chunk that releases text carries every entry waiting, so
        a stream's entries, joined, are the whole answer's (ledger.sent). Tokens a tool call
        took, or a stop string swallowed, released no text: their entries are dropped.
        """
        ledger = self.ledger
        if not ledger.unsent:
            return
        for event in events:
            if isinstance(event, Chunk) and event.text:
                event.logprobs = ledger.unsent
                ledger.sent.extend(ledger.unsent)
                break
            if isinstance(event, (ToolCallStart, ToolCallDelta)):
                break
        else:
            return
        ledger.unsent = []

    def chose(self, token: int) -> None:
        """The token it decodes in the next step."""
        self.progress.next_token = token

    def refused_call(self, number: int) -> None:
        """Its call grammar refused the text of this block of calls (call_wake.py): it sleeps on."""
        self.call_refused = number

    def awaits(self, choice: PendingChoice) -> None:
        """Its next token is being chosen off-thread: it sits out of the batch until taken."""
        self.choice = choice
        self.sample_worker = choice.worker

    def choice_taken(self) -> None:
        """What its worker chose is being taken (token_choice.take_ready)."""
        self.choice = None

    def park(self, now: float) -> Slot:
        """Set aside for an editor completion (preempt.py): it keeps a slot of its own (what its
        slot listed, and nothing ending it can reach) and its clock stops. The slot it left."""
        left = self.slot
        self.slot = Slot(left.seq_id, list(left.tokens), self, left.last_used, left.cache_key, scope=left.scope)
        left.job = None
        self.clocks.parked = now
        return left

    def resume(self, slot: Slot) -> None:
        """Back in a slot, which takes what it held while parked (its tokens, its cache key)."""
        held = self.slot
        slot.tokens, slot.cache_key, slot.last_used, slot.scope = held.tokens, held.cache_key, held.last_used, held.scope
        slot.job, self.slot = self, slot

    def resumed(self, now: float) -> None:
        """Its sequence is back: the pause counts neither as prefill nor as decoding (outcome.py)."""
        clocks = self.clocks
        clocks.parked_prefill_s, clocks.parked_decode_s = self.parked_seconds(now)
        clocks.parked = None

    def parked_seconds(self, now: float) -> tuple[float, float]:
        """Its time parked before its first token and after, a pause going on at `now` included."""
        clocks = self.clocks
        pause = now - clocks.parked if clocks.parked is not None else 0.0
        if clocks.first_token is None:
            return clocks.parked_prefill_s + pause, clocks.parked_decode_s
        return clocks.parked_prefill_s, clocks.parked_decode_s + pause

    def end(self) -> tuple[PendingSample | None, SampleWorker | None]:
        """Retired, cancelled or failed: its slot is free again. What it held off-thread, for the
        runtime to let go: a sample still being chosen (its sampler with it), its worker."""
        progress = self.progress
        progress.status = JobStatus.FINISHED
        progress.next_token = None
        self.slot.job = None
        self.slot.last_used = time.monotonic()
        pending, worker = self.pending, self.sample_worker
        self.choice = self.sample_worker = None
        return pending, worker

    def progress_json(self) -> dict:
        """How far it got (/slots): its request, its prompt processed, its tokens generated."""
        drafts = self.drafts
        return {"request": self.request.label, "status": self.status.value, "prompt_tokens": len(self.prompt),
                "prompt_processed": min(self.n_past, len(self.prompt)), "generated_tokens": len(self.generated),
                "drafting": drafts.as_json() if drafts is not None else None}

    def position(self, index: int) -> int:
        """Where its token `index` sits in its KV sequence: the index, unless an M-RoPE image
        before it took fewer positions than tokens."""
        return position_of(self.request.images, index) if self.request.images else index

    @property
    def image_here(self) -> ImageChunk | None:
        """The image its prefill is at: reached, or decoded in part (runtime/images.py)."""
        for image in self.request.images:
            if image.start <= self.n_past < image.end:
                return image
        return None

    @property
    def text_left(self) -> int:
        """Prompt tokens it can decode as tokens before its next image (or the prompt's end)."""
        if self.image_here is not None:
            return 0
        ahead = [image.start for image in self.request.images if image.start >= self.n_past]
        return (min(ahead) if ahead else len(self.prompt)) - self.n_past
