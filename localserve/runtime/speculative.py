"""Speculative decoding: guess a sequence's next tokens, verify them all in one decode step.

A decoding sequence normally adds one token per step. With a draft, the step decodes its next
token and the drafted tokens after it, with logits at each position; the runtime step
(runtime.py, token_choice.py) then chooses token by token with the job's own sampler chain and goes on while
the chosen token equals the draft's: every accepted token is one the model would have chosen
anyway, from the same logits, with the same sampler state. So the output is what plain
decoding gives (for sampling, the same distribution: a draft never depends on the random draw
that tests it). What was decoded past the first mismatch is cut from the KV cache after.

Where drafts come from (--speculative): "ngram", the job's own prompt and output (ngram.py),
after the OpenAI ``prediction`` text when the request gave one, and where the output leaves
its prompt, its cache scope's latest outputs (earlier_outputs.py); "draft", a small model with
the same vocabulary (engine/draft_model.py). Each job adapts its draft length: a draft wholly
accepted doubles it (up to --draft-max), a partial one moves it toward what was accepted, a
draft with nothing accepted halves it. And drafts must pay (draft_budget.py): a job drafts no
more than its accepted tokens have earned, at the price of a drafted row on this model, so
text with nothing to copy (a sampled chat) soon stops drafting and decodes as fast as without
speculation; a step shared by several streams drafts only where each of them gains.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from ..engine.thread_policy import MIN_ROW_SHARE
from ..settings import step_drafts
from .copy_cursor import CopyCursor
from .draft_budget import DraftBudget, shared_length
from .earlier_outputs import EarlierOutputs, FromEarlier, ScopedOutputs
from .jobs import JobStatus
from .ngram import NgramIndex

if TYPE_CHECKING:
    from .jobs import Job

STRAYED_DRAFT = 4                  # the most drafted from a place just found while the output strays from a copy
NGRAM_PROMPT_WINDOW = 16384        # prompt tokens the lookup indexes (the latest); more costs the runtime thread
PREDICTION_BYTES_PER_TOKEN = 16    # a prediction's text is tokenized this many bytes per wanted draft token at a time

log = logging.getLogger("localserve.runtime")


class DraftSource(Protocol):
    """A draft model (engine/draft_model.py): drafts for many sequences at once."""

    def draft(self, wanted: list[tuple[int, list[int], int, dict[int, float]]]) -> dict[int, list[int]]: ...


class TextCodec(Protocol):
    """What drafting from text needs of the engine (engine.Engine is one)."""

    def piece(self, token: int) -> bytes: ...

    def tokenize(self, text: str) -> list[int]: ...


class JobDrafts:
    """One job's drafting: its lookup indexes, its adaptive draft length, its counts."""

    def __init__(self, prompt: list[int], prediction: str | None, text: TextCodec, draft_max: int,
                 row_share: float = MIN_ROW_SHARE, earlier: EarlierOutputs | None = None):
        # The lookup indexes are built at the first lookup, after the prefill, not here: a job is
        # admitted on the runtime thread before its prefill (at every editor keystroke), and a
        # job that never looks one up (drafts from a draft model) never pays for them.
        self._prompt_window = prompt[-NGRAM_PROMPT_WINDOW:]
        self._history: NgramIndex | None = None
        self._predicted_index: NgramIndex | None = None
        self._prediction_text = prediction
        self.text = text
        self.earlier = FromEarlier(earlier) if earlier is not None else None     # its scope's latest outputs
        self.prediction = prediction.encode("utf-8") if prediction else None
        self.aligned = 0                # the output is the prediction's first `matched` bytes, in this
        self.matched = 0                # many tokens (-1: the output strayed from it)
        self.indexed = 0                # generated tokens already in self.history
        self.copying = CopyCursor()     # where the last draft from the history came from
        self.copying_prediction = CopyCursor()
        self.strayed = False            # whether the last draft verified was refused in part (an edit)
        self.shared = False             # whether this step's lookup is for a step with other streams
        self.draft_max = draft_max
        self.length = draft_max         # what the next draft may be
        self.budget = DraftBudget(row_share, draft_max)     # what the next draft may cost
        self.drafted = 0
        self.accepted = 0
        self.run = (0, 0)               # the draft being verified now: (drafted, accepted so far)
        # OpenAI's accepted/rejected_prediction_tokens count the client's prediction alone; the
        # n-gram lookup's and the draft model's drafts are the server's own (timings, /metrics)
        self.from_prediction = False    # whether the draft being verified came from the prediction
        self.predicted_drafted = 0
        self.predicted_accepted = 0

    @property
    def history(self) -> NgramIndex:
        """The prompt's latest NGRAM_PROMPT_WINDOW tokens and the output indexed so far."""
        if self._history is None:
            self._history, self._prompt_window = NgramIndex(self._prompt_window), []
        return self._history

    @property
    def predicted(self) -> NgramIndex | None:
        """The prediction's tokens, as the tokenizer spells its text; None without one."""
        if self._predicted_index is None and self.prediction is not None:
            self._predicted_index = NgramIndex(self.text.tokenize(self._prediction_text))
        return self._predicted_index

    def finished(self, generated: list[int]) -> None:
        """The job's output is complete: later jobs of its scope may draft from it."""
        if self.earlier is not None:
            self.earlier.finished(generated)

    def verifying(self, drafted: int, accepted: int) -> None:
        """A job can finish inside a draft it is verifying: its usage counts that draft too."""
        self.run = (drafted, accepted)

    def counts(self) -> tuple[int, int]:
        """(drafted, accepted) so far, the draft being verified included."""
        return self.drafted + self.run[0], self.accepted + self.run[1]

    def acceptance(self, prior: float) -> float:
        """The chance that its next drafted token is accepted (draft_budget.py)."""
        return self.budget.acceptance(prior)

    def prediction_counts(self) -> tuple[int, int]:
        """(drafted, accepted) of the drafts the request's prediction made, as counts() does."""
        drafted, accepted = self.run if self.from_prediction else (0, 0)
        return self.predicted_drafted + drafted, self.predicted_accepted + accepted

    def lookup(self, generated: list[int], limit: int, shared: bool = False) -> list[int]:
        """Prompt lookup: the prediction while the output follows it (its beginning, or a place
        in it the output goes on copying), else a copy the output goes on following in its own
        prompt and output, else a place just found in either, the prediction's first. (After an
        edit a model may write its own: it often repeats what it just wrote, which the prediction
        cannot foresee.) An earlier output of the scope that went on from the same last tokens
        drafts where the copy was just found again or is lost and it drafts more, or where it
        departs from the copy followed (the output may depart from the prompt as an earlier
        answer did: earlier_outputs.py). `shared`: the step decodes other streams too (see _wary)."""
        self.from_prediction = False
        self.shared = shared
        if self.earlier is not None:
            self.earlier.parting = None
        self.history.extend(generated[self.indexed:])
        self.indexed = len(generated)
        predicted, fresh = self._predicted(generated, limit) if self.prediction is not None else ([], True)
        if predicted and not fresh:
            self.from_prediction = True
            return predicted
        own = self._wary(self.copying.draft(self.history, self.history.tokens, limit), self.copying)
        if self.earlier is not None:
            own = self.earlier.choose(generated, own, limit, following=bool(own) and not self.copying.fresh)
        if predicted and (self.copying.fresh or not own):
            self.from_prediction = True
            return predicted
        return own

    def _wary(self, draft: list[int], cursor: CopyCursor) -> list[int]:
        """A draft from a place just found, while the output strays from what it copied (an edit),
        is short: there the latest match is often the request's own words about the edit, and a
        place found near the copy may be a line like it. Not in a step shared with other streams:
        their drafts are cut to the shortest (lined_up), so a short one would cost them theirs,
        where a long one refused costs only its own rows."""
        return draft[:STRAYED_DRAFT] if self.strayed and cursor.fresh and not self.shared else draft

    def _predicted(self, generated: list[int], limit: int) -> tuple[list[int], bool]:
        """From the prediction, and whether from a place just found there: first as the tokenizer
        spells it (its beginning while the output is that, else what followed the output's last
        tokens there), which is how a model copying text tends to spell it; else, while the
        output's text is the prediction's beginning, the next of its text as tokens (the model
        may spell the same text with other tokens)."""
        tokens = self.predicted.tokens
        if len(generated) < len(tokens) and tokens[:len(generated)] == generated:
            return tokens[len(generated):len(generated) + limit], False
        draft = self.copying_prediction.draft(self.predicted, generated, limit)
        if draft:
            return self._wary(draft, self.copying_prediction), self.copying_prediction.fresh
        return self._by_text(generated, limit), False

    def _by_text(self, generated: list[int], limit: int) -> list[int]:
        if not self.follows(generated):
            return []
        window = self.prediction[self.matched:self.matched + limit * PREDICTION_BYTES_PER_TOKEN]
        try:
            draft = self.text.tokenize(window.decode("utf-8"))
        except UnicodeDecodeError:      # the output ends inside a character, or the window does
            return []
        if self.matched + len(window) < len(self.prediction):
            draft = draft[:-1]          # the window's last token may be cut short
        return draft[:limit]

    def follows(self, generated: list[int]) -> bool:
        """Whether the output's text so far is the prediction's beginning (each token's piece read once)."""
        while 0 <= self.aligned < len(generated):
            piece = self.text.piece(generated[self.aligned])
            if not self.prediction.startswith(piece, self.matched):
                self.aligned = -1
                break
            self.matched += len(piece)
            self.aligned += 1
        return self.aligned >= 0

    def wants(self, generated: list[int], limit: int, row_share: float) -> int:
        """How many tokens this job drafts this step, given room for `limit` (0: none) and a drafted
        row's price now. While the output is still the prediction's text, its drafts are what the
        client asked for: no budget stops them. Once it strays (an edit; a model writing its own),
        they pay as every draft does: a prediction still accepted after an edit drafts on at full
        length on what it earned, one refused stops (a prediction followed past where the output
        left it drafted a token or two every step, most refused: each step 1.5-2 times a plain one)."""
        if self.prediction is not None and self.follows(generated):
            return min(limit, self.length)
        self.budget.reprice(row_share)
        return self.budget.affordable(min(limit, self.length))

    def record(self, drafted: int, accepted: int) -> None:
        self.run = (0, 0)
        if self.earlier is not None:
            self.earlier.verified(drafted, accepted)
        from_prediction, self.from_prediction = self.from_prediction, False
        if not drafted:
            return
        self.drafted += drafted
        self.accepted += accepted
        if from_prediction:
            self.predicted_drafted += drafted
            self.predicted_accepted += accepted
        self.budget.record(drafted, accepted)
        self.strayed = accepted < drafted
        if accepted == drafted:
            self.length = min(self.draft_max, self.length * 2)
        elif accepted == 0:
            self.length = max(1, self.length // 2)
        else:
            self.length = max(1, (self.length + accepted + 1) // 2)

    def as_json(self) -> dict:
        """Its drafting so far (/slots)."""
        drafted, accepted = self.counts()
        return {"drafted": drafted, "accepted": accepted, "length": self.length, **self.budget.as_json()}


class Speculator:
    """The runtime's drafting: which jobs draft in a step, and how much."""

    def __init__(self, mode: str, draft_max: int, engine, draft_model: DraftSource | None = None,
                 equal_rows: bool = False):
        self.mode = mode if draft_max > 0 else "off"
        self.equal_rows = equal_rows    # a KV stream per slot: see lined_up()
        self.draft_max = draft_max
        self.is_eog = engine.is_eog
        self.text = _Text(engine)
        self.draft_model = draft_model
        self.costs = getattr(engine, "step_costs", None)    # measured at load, learned on (engine/thread_policy.py)
        self.drafted = 0                # every job's, since start (/metrics)
        self.accepted = 0
        self.earlier = ScopedOutputs()  # finished outputs by cache scope, drafted from (earlier_outputs.py)

    @property
    def row_share(self) -> float:
        """A drafted row's price now: a load on a busy machine measures it high, calmer steps correct it."""
        return self.costs.row_share if self.costs is not None else MIN_ROW_SHARE

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def start(self, prompt: list[int], prediction: str | None, scope: str = "") -> JobDrafts | None:
        """A job's drafting (None: speculation off); `scope` is its cache scope (GenerationRequest.scope)."""
        if not self.on:
            return None
        earlier = self.earlier.of(scope) if self.mode == "ngram" else None
        return JobDrafts(prompt, prediction, self.text, self.draft_max, self.row_share, earlier)

    def propose(self, jobs: list[Job], budget: int, n_ctx_seq: int) -> dict[int, list[int]]:
        """Drafts for the step's decoding jobs, by id(job), within `budget` batch entries in all."""
        # Verifying a drafted token costs a logits row (for a large vocabulary, most of a token's
        # work): several sequences share a step's drafts, so more of them do not slow every stream.
        asking = [(job, self._room(job, self.draft_max, n_ctx_seq)) for job in jobs]
        row_share = self.row_share
        asking = [(job, job.drafts.wants(job.generated, room, row_share)) for job, room in asking if room > 0]
        asking = [(job, want) for job, want in asking if want > 0]
        budget = min(budget, step_drafts(self.draft_max))
        wanted: dict[int, tuple[Job, int]] = {}
        asking.sort(key=lambda pair: pair[1])      # the smallest wants first: what they leave goes to the rest
        for n, (job, want) in enumerate(asking):
            limit = min(want, budget // (len(asking) - n))
            if limit > 0:
                wanted[id(job)] = (job, limit)
                budget -= limit
        drafts: dict[int, list[int]] = {}
        from_model = self._from_model([(job, limit) for job, limit in wanted.values() if not job.forced])
        for key, (job, limit) in wanted.items():
            job.drafts.from_prediction = False          # lookup() says when it is
            if job.forced:          # tokens the job must write next: the surest draft there is
                draft = list(job.forced)[:limit]
            elif self.mode == "draft" and self.draft_model is not None:
                draft = from_model.get(key, [])
            else:
                draft = job.drafts.lookup(job.generated, limit, shared=len(jobs) > 1)
            draft = self._before_end(draft)
            if draft:
                drafts[key] = draft
        drafts = self._paying(jobs, drafts)
        if self.equal_rows:
            drafts = lined_up(drafts, [id(job) for job in jobs if job.status is JobStatus.DECODING])
        return drafts

    def _paying(self, jobs: list[Job], drafts: dict[int, list[int]]) -> dict[int, list[int]]:
        """The drafts of a step shared by several streams, kept only where each of them gains (draft_budget.py)."""
        if len(jobs) < 2 or not drafts:
            return drafts
        decoding = [job for job in jobs if job.status is JobStatus.DECODING]
        if len(decoding) < len(jobs) or len(drafts) < len(decoding):     # a prompt chunk, or a stream without one
            return {}
        # a job with few drafts verified is trusted (its credit bounds what that may cost): a prior from
        # other jobs' drafts kept a step of four copying streams from ever drafting after a bad tail
        rates = [1.0 if job.forced else job.drafts.acceptance(1.0) for job in decoding]
        length = shared_length(rates, self.row_share, min(len(draft) for draft in drafts.values()))
        return {key: draft[:length] for key, draft in drafts.items()} if length else {}

    def _room(self, job: Job, limit: int, n_ctx_seq: int) -> int:
        """A draft never runs past the context or max_tokens: those tokens could not be kept."""
        if job.drafts is None or job.next_token is None:
            return 0
        limit = min(limit, n_ctx_seq - job.n_past - 2)
        if job.request.max_tokens is not None:
            limit = min(limit, job.request.max_tokens - len(job.generated) - 1)
        return limit

    def _from_model(self, wanted: list[tuple[Job, int]]) -> dict[int, list[int]]:
        # the draft model never saw a prompt's images (its sequence would hold their placeholder ids)
        wanted = [(job, limit) for job, limit in wanted if not job.request.images]
        if self.mode != "draft" or self.draft_model is None or not wanted:
            return {}
        asked = [(job.slot.seq_id, job.slot.tokens + [job.next_token], limit, job.request.sampling.logit_bias)
                 for job, limit in wanted]
        try:
            by_seq = self.draft_model.draft(asked)
        except Exception:       # a draft is only a guess: without one, the step decodes as it would anyway
            log.exception("the draft model failed; this step decodes without drafts")
            return {}
        return {id(job): by_seq.get(job.slot.seq_id, []) for job, _ in wanted}

    def _before_end(self, draft: list[int]) -> list[int]:
        """An end-of-generation token ends the job when chosen: nothing after it is worth drafting."""
        for i, token in enumerate(draft):
            if self.is_eog(token):
                return draft[:i]
        return draft

    def record(self, job: Job, drafted: int, accepted: int) -> None:
        if job.drafts is not None:
            job.drafts.record(drafted, accepted)
        self.drafted += drafted
        self.accepted += accepted

    def as_json(self) -> dict:
        """The server's drafting (/slots): its mode, a drafted token's price, its counts."""
        return {"mode": self.mode, "row_share": round(self.row_share, 3), "drafted": self.drafted,
                "accepted": self.accepted}


def lined_up(drafts: dict[int, list[int]], decoding: list[int]) -> dict[int, list[int]]:
    """The step's drafts cut to one length, or none when a decoding job has none.

    With a KV stream per slot, llama.cpp splits a batch into passes of as many tokens for every
    sequence (llama_batch_allocr::split_equal): drafts of 8, 0, 8 and 0 tokens beside four next
    tokens cost three passes through the weights, where drafts of one length cost one."""
    if len(decoding) < 2 or not drafts:
        return drafts
    if len(drafts) < len(decoding):
        return {}
    length = min(len(draft) for draft in drafts.values())
    return {key: draft[:length] for key, draft in drafts.items()}


class _Text:
    """The engine's pieces and a plain tokenizer (no BOS, no special tokens parsed): the prediction is text."""

    def __init__(self, engine):
        self.piece = engine.piece
        self._tokenize = getattr(engine, "tokenize", None)

    def tokenize(self, text: str) -> list[int]:
        return self._tokenize(text, add_special=False, parse_special=False) if text else []
