"""What the runtime keeps per sequence and per request: a Slot (a sequence of the KV cache and
what it holds) and a Job (one admitted request: its tokens, sampler, text pipeline, progress).

A job's state (its status, the tokens in its cache, the token it decodes next) moves only
through the Job methods below; the runtime step calls them as it applies what a step decoded
and what was chosen from it."""

from __future__ import annotations

import collections
import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..generation import ActiveGeneration, GenerationRequest, ImageChunk, position_of
from .promptcache import common_prefix
from .textstream import OutputPipeline

if TYPE_CHECKING:   # types only: the scheduler reads jobs without loading llama.cpp
    from ..engine.sampler import Sampler
    from ..engine.vision import EncodedImage
    from .pending_sample import PendingSample, SampleWorker


class JobStatus(enum.Enum):
    WAITING = "waiting"         # queued, no slot yet (an ActiveGeneration in the scheduler's queue)
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


class Job:
    """One admitted request: its tokens, sampler, text pipeline and progress."""

    def __init__(self, gen: ActiveGeneration, slot: Slot, sampler: Sampler, n_cached: int):
        self.gen = gen
        self.request: GenerationRequest = gen.request
        self.slot = slot
        self.sampler = sampler
        self.status = JobStatus.PREFILLING
        self.prompt = gen.request.prompt_tokens
        self.n_cached = n_cached
        self.n_past = n_cached              # tokens of this sequence already in the KV cache
        self.generated: list[int] = []
        self.next_token: int | None = None  # sampled, not yet decoded
        self.pipeline = OutputPipeline(gen.request)
        self.logprobs: list[dict] | None = [] if gen.request.logprobs else None   # those sent, in order
        self.unsent_logprobs: list[dict] = []         # tokens whose text is still held back
        self.reasoning_tokens = 0
        self.forced: collections.deque[int] = collections.deque()   # tokens to emit instead of sampling
        self.budget_spent = False
        self.t_admitted = time.monotonic()
        self.t_first_token: float | None = None
        self.t_parked: float | None = None      # when an editor completion parked it, while it waits (preempt.py)
        self.parked_prefill_s = 0.0             # time parked before its first token, and after it
        self.parked_decode_s = 0.0
        self.pending: PendingSample | None = None     # a grammar's token being chosen off-thread
        self.sample_worker: SampleWorker | None = None  # the thread that chooses it, for the job's life
        self.pending_logprobs: dict | None = None
        self.pending_draft: list[int] = []            # the draft that pending sample verifies
        self.pending_rows = None                      # its logits rows after the first, copied (logprobs)
        self.call_refused: int | None = None     # the block of calls whose text its grammar refused
        self.drafts = None          # speculative.JobDrafts (which imports this module), when drafting is on
        self.image_in_parts: EncodedImage | None = None   # an image encoded, decoded part by part (images.py)
        self.checkpoint_at = 0      # its prefill pauses at this many tokens for a window checkpoint (kvslots.py)

    # ---- its state, moved by the runtime step alone ------------------------------------

    def start(self) -> None:
        """The job takes its slot."""
        self.slot.job = self
        self.slot.last_used = time.monotonic()
        self.slot.cache_key = self.request.cache_key

    def decoded(self, n_tokens: int) -> None:
        """The step put n_tokens more of its tokens (prompt tokens, or its next token) in the cache."""
        self.n_past += n_tokens

    def reached_choice(self) -> None:
        """Its next token is being chosen: what was decoded before it (the whole prompt, or the
        token chosen last) is what its slot's sequence holds now."""
        if self.status is JobStatus.DECODING:
            self.slot.tokens.append(self.next_token)
        else:
            self.slot.tokens = list(self.prompt)
            self.status = JobStatus.DECODING
        self.next_token = None

    def kept_draft_token(self) -> None:
        """The drafted token before the one being chosen was accepted: decoded in this step, it is
        the sequence's now (speculative.py)."""
        self.n_past += 1
        self.reached_choice()

    def dropped(self, keep: int, n: int) -> None:
        """Its sequence lost the n tokens after its first `keep`, the rest moved back n positions
        (a context shift: context_shift.py)."""
        del self.slot.tokens[keep:keep + n]
        self.n_past -= n

    def chose(self, token: int) -> None:
        """The token it decodes in the next step."""
        self.next_token = token

    def park(self, now: float) -> None:
        """Set aside for an editor completion (preempt.py): its clock stops."""
        self.t_parked = now

    def resume(self, now: float) -> None:
        """Back in a slot: the pause counts neither as prefill nor as decoding (outcome.py)."""
        prefill, decode = self.parked_seconds(now)
        self.parked_prefill_s, self.parked_decode_s, self.t_parked = prefill, decode, None

    def parked_seconds(self, now: float) -> tuple[float, float]:
        """Its time parked before its first token and after, a pause going on at `now` included."""
        pause = now - self.t_parked if self.t_parked is not None else 0.0
        if self.t_first_token is None:
            return self.parked_prefill_s + pause, self.parked_decode_s
        return self.parked_prefill_s, self.parked_decode_s + pause

    def end(self) -> None:
        """Retired, cancelled or failed: its slot is free again."""
        self.status = JobStatus.FINISHED
        self.slot.job = None
        self.slot.last_used = time.monotonic()
        self.next_token = None

    def progress_json(self) -> dict:
        """How far it got (/slots): its request, its prompt processed, its tokens generated."""
        drafts = self.drafts
        return {"request": self.request.label, "status": self.status.value, "prompt_tokens": len(self.prompt),
                "prompt_processed": min(self.n_past, len(self.prompt)), "generated_tokens": len(self.generated),
                "drafting": drafts.as_json() if drafts is not None else None}

    @property
    def prefilling(self) -> bool:
        return self.status is JobStatus.PREFILLING

    @property
    def prompt_left(self) -> int:
        return len(self.prompt) - self.n_past

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
