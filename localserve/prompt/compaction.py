"""Context compaction, as a prompt: the model itself writes a summary of a conversation, and
later turns start from that summary instead of the turns it replaced.

The summarisation request is the conversation as it is (the same template, tools and system
turns, so the prefix the last turn left in the KV cache is reused), then one user turn: the
instructions (SUMMARY_PROMPT, or the client's own where its API lets it give them) and
SUMMARY_REQUEST_END, always last. That fixed last line is the control a model can key on
(the scripted test models do).

A conversation too long for the model to read whole with room left for the summary is compacted
in pieces, oldest first: the longest head that fits is summarised, the head is replaced by
its summary, and the rest is tried again (build_compaction says how much one step covers;
dialects/compaction.py runs the steps). A summary is later shown to the model as a user turn
headed SUMMARY_HEADING (summary_message). At most MAX_COMPACTION_PIECES jobs are run, and before
any of them the token counts tell whether that can be enough (fewest_jobs): a conversation that
cannot be compacted in so many is refused before any summary is written, not after.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

from ..conversation import Message, Text, text_message
from ..engine.facade import EngineFacade
from ..generation import ContextOverflow, GenerationRequest, SamplingParams
from ..media_checks import AUDIO, IMAGE, without_media
from .build import ChatInput, ChatModel, ToolChoice, build_chat_request, render_chat

SUMMARY_PROMPT = (
    "The conversation above is about to be compacted: it will be replaced by the summary you write now, "
    "and the work will go on from that summary alone. Write it for whoever continues: the user's goal and "
    "every request they made, the decisions taken and why, what has been done so far (files, commands, tool "
    "results that matter, with exact names, paths and values), what is still to do, and anything the user "
    "asked to keep. Be concise and concrete. Write only the summary.")
SUMMARY_REQUEST_END = "Write the summary now."
SUMMARY_HEADING = "Summary of the conversation so far (its earlier turns were compacted into it):"

# The most of the context a summary may take: a small context must leave its prompt room.
SUMMARY_SHARE_OF_CONTEXT = 4       # at most n_ctx // this many tokens
# Summarisation jobs one compaction may run, the last (whole) one included: each piece shortens the rest.
MAX_COMPACTION_PIECES = 32
# A conversation is counted (fewest_jobs) this many characters of its rendered prompt at a time.
COUNT_SLICE_CHARS = 64 * 1024


def summary_request_text(instructions: str | None = None) -> str:
    """The last user turn of a summarisation request."""
    return f"{instructions or SUMMARY_PROMPT}\n\n{SUMMARY_REQUEST_END}"


def summary_message(summary: str) -> Message:
    """A summary as the model is shown it in the turns after a compaction."""
    return text_message("user", f"{SUMMARY_HEADING}\n\n{summary}")


def join_user_turn(messages: list[Message], message: Message) -> list[Message]:
    """messages, then `message` (a user turn of text): joined to a last user turn of text alone, so
    that a summary, or the request for one, never makes two user turns in a row (the templates that
    insist turns alternate refuse them)."""
    last = messages[-1] if messages else None
    if last is not None and last.role == "user" and _text_only(last) and _text_only(message):
        return [*messages[:-1], text_message("user", f"{last.text}\n\n{message.text}")]
    return [*messages, message]


def _text_only(message: Message) -> bool:
    return all(isinstance(part, Text) for part in message.parts)


def readable(model: ChatModel, messages: list[Message]) -> list[Message]:
    """The messages as a model summarises them: every image a model without vision cannot see
    and every clip one without an audio encoder cannot hear (the newest turn's too, since the
    turn being answered is the summary request) is its kind's placeholder text."""
    for kind, takes in ((IMAGE, model.vision), (AUDIO, model.audio)):
        if not takes:
            messages = [without_media(m, kind) for m in messages]
    return messages


def summary_room(n_ctx: int, max_tokens: int) -> int:
    """The tokens a summary may take in a context of n_ctx (--compact-max-tokens, capped)."""
    return max(1, min(max_tokens, n_ctx // SUMMARY_SHARE_OF_CONTEXT))


@dataclass
class CompactionStep:
    """One summarisation job: its request, and how many of the conversation's messages it covers
    (all of them, or the head a piece summarises: the caller replaces that head by the summary,
    with replace_head, and builds the next step)."""
    request: GenerationRequest
    covered: int
    whole: bool


class TooManyPieces(Exception):
    """The conversation takes more summarisation jobs than the compaction may still run (at least
    `jobs`, counted from its tokens before any job runs)."""

    def __init__(self, jobs: int):
        super().__init__(f"the conversation could not be compacted in {MAX_COMPACTION_PIECES} pieces")
        self.jobs = jobs


def build_compaction(model: ChatModel, chat: ChatInput, *, instructions: str | None, max_tokens: int,
                     sampling: SamplingParams | None = None, label: str = "compaction",
                     check_client: Callable[[], None] = lambda: None,
                     jobs_left: int = MAX_COMPACTION_PIECES, summary_tokens: int = 0) -> CompactionStep:
    """The next summarisation job for chat's conversation: the whole of it when the model can read
    it and still write max_tokens (capped by summary_room), else the longest head that can.
    ContextOverflow when not even the first turn fits; TooManyPieces, before any head is searched,
    when the conversation takes more than jobs_left jobs (fewest_jobs, each later summary taken
    as summary_tokens long: 0 before any is written)."""
    room = summary_room(model.engine.n_ctx, max_tokens)
    messages = readable(model, chat.messages)

    def attempt(covered: int) -> ChatInput:
        request = text_message("user", summary_request_text(instructions))
        return ChatInput(messages=join_user_turn(messages[:covered], request), tools=chat.tools,
                         tool_choice=ToolChoice("auto"), template_kwargs=chat.template_kwargs,
                         reasoning_budget=chat.reasoning_budget)

    def request_for(covered: int) -> GenerationRequest:
        return build_chat_request(model, attempt(covered), dataclasses.replace(sampling or SamplingParams()),
                                  max_tokens=room, stop=[], label=label)

    def size(covered: int) -> int:
        """The prompt tokens of the job covering `covered` messages, counted up to what jobs_left
        jobs could read at all (each reads less than the context)."""
        text = render_chat(model.template, attempt(covered))
        return count_tokens(model.engine, text, enough=jobs_left * model.engine.n_ctx)

    def build(covered: int) -> GenerationRequest:
        request = request_for(covered)
        if len(request.prompt_tokens) + room > model.engine.n_ctx:
            raise ContextOverflow(len(request.prompt_tokens) + room, model.engine.n_ctx)
        request.tools = None             # a call the model writes is summary text, not a call
        request.sampling.call_grammar = None
        request.compaction = True
        return request

    try:
        return CompactionStep(build(len(messages)), len(messages), True)
    except ContextOverflow:
        cuts = head_cuts(messages)
        if not cuts:
            raise
    # What one job reads of the conversation: the context less the summary's room and what every
    # job's prompt holds besides (the system turns and the request for a summary).
    # (Where that is nothing, the search below says by how much the first turn does not fit.)
    fixed = size(leading_system(messages))
    reads = model.engine.n_ctx - room - fixed
    jobs = fewest_jobs(size(len(messages)) - fixed, reads, summary_tokens) if reads > 0 else 2
    jobs = max(2, jobs)         # not whole: this piece and the last at least
    if jobs > jobs_left:
        raise TooManyPieces(jobs)
    return _longest_head(cuts, build, check_client)


def count_tokens(engine: EngineFacade, text: str, *, enough: int) -> int:
    """The tokens of a rendered prompt, counted a slice at a time and only until there are more than
    `enough`: the tokenizer's working memory (some 40 bytes a byte) is one slice's, and its time no
    more than the answer needs. A slice ends after a newline where there is one, so that a
    template's special token is seldom cut (one that is counts a few tokens more). Images count
    as their marker's text: fewer tokens than the positions they take."""
    count, at = 0, 0
    while at < len(text) and count <= enough:
        end = at + COUNT_SLICE_CHARS
        if end < len(text):
            newline = text.rfind("\n", at, end)
            end = newline + 1 if newline > at else end
        count += len(engine.tokenize(text[at:end], add_special=at == 0, parse_special=True))
        at = end
    return count


def fewest_jobs(conversation: int, reads: int, summary_tokens: int) -> int:
    """How many summarisation jobs a conversation of `conversation` tokens takes at least, when
    one job reads at most `reads` of them and every job after the first also reads the summary
    before it (`summary_tokens` long): the first reads `reads`, each later one `reads -
    summary_tokens` more, the last the rest whole."""
    if conversation <= reads:
        return 1
    later = reads - summary_tokens
    if later <= 0:
        return sys.maxsize          # no job after the first gets any further
    return 1 + math.ceil((conversation - reads) / later)


def _longest_head(cuts: list[int], build: Callable[[int], GenerationRequest],
                  check_client: Callable[[], None]) -> CompactionStep:
    """A binary search over where the head may end (the prompt grows with the head)."""
    check_client()
    best = CompactionStep(build(cuts[0]), cuts[0], False)     # the shortest head: if it does not fit, none does
    low, high = 1, len(cuts) - 1
    while low <= high:
        middle = (low + high) // 2
        check_client()
        try:
            attempt = build(cuts[middle])
        except ContextOverflow:
            high = middle - 1
        else:
            best, low = CompactionStep(attempt, cuts[middle], False), middle + 1
    return best


def leading_system(messages: list[Message]) -> int:
    """How many system (or developer) turns open the conversation: they stay in every piece."""
    n = 0
    while n < len(messages) and messages[n].role in ("system", "developer"):
        n += 1
    return n


def head_cuts(messages: list[Message]) -> list[int]:
    """Where a head to summarise may end, shortest first: before a user or assistant turn (a tool
    result stays with its call), after at least two turns past the system ones (so each piece
    shortens the conversation), never after the last turn (a piece never covers everything)."""
    start = leading_system(messages)
    return [i for i in range(start + 2, len(messages)) if messages[i].role in ("user", "assistant")]


def replace_head(messages: list[Message], covered: int, summary: str) -> list[Message]:
    """The conversation once its first `covered` messages are summarised (system turns kept)."""
    joined = join_user_turn(messages[:leading_system(messages)], summary_message(summary))
    rest = messages[covered:]
    return [*join_user_turn(joined, rest[0]), *rest[1:]] if rest and rest[0].role == "user" else [*joined, *rest]
