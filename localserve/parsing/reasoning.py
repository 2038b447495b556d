"""Splitting reasoning from the answer in generated text. Protocol-neutral: text in,
(is_reasoning, text) pieces out.

Two shapes of reasoning:
- A tag pair such as <think>…</think>. The block counts only at the very start of the output
  (after whitespace), as the chat templates put it; a tag later on is just text. When the
  prompt itself opened the block (Qwen3 and DeepSeek R1 templates end the generation prompt
  with "<think>\n"), the output starts inside it: `starts_inside=True`. Like llama.cpp's
  reasoning parser, whitespace around the reasoning is trimmed (after the start tag and before
  the end tag), and so is whitespace right after the end tag, where the answer begins. An end
  tag alone at the start is an empty block, dropped (MiniMax-M3 opens every turn without
  reasoning with a bare </mm:think>).
- Harmony (GPT-OSS): messages framed as <|start|>assistant<|channel|>NAME<|message|>…<|end|>.
  The analysis channel is reasoning, the final channel (and a commentary preamble) the answer,
  the framing appears in neither. A message with a recipient (to=functions.NAME) is a tool
  call and passes through verbatim, framing and all, for the harmony tool parser.

Strategy: a small state machine over a buffer; each state's step (the `_STEPS` table) consumes what it can decide
and returns True to go on or False to wait for text. A possible partial marker at the end of
the buffer is held back until the next chunk (or the end of input) decides it, so any split
of the text into chunks yields the same pieces, concatenated, as the whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from .json_stream import partial_start


@dataclass(frozen=True)
class ReasoningFormat:
    name: str
    start: str
    end: str
    close: str  # what a runtime injects to end reasoning early (a reasoning budget)
    end_names_it: bool = True  # a template that writes only the end tag has this format (not so
                               # for an end tag many templates write for other ends: <|end|>)
    ended_by: tuple[str, ...] = ()  # text that also ends the reasoning, and begins the answer


HARMONY = ReasoningFormat("harmony", "<|channel|>analysis<|message|>", "<|end|>",
                          "<|end|><|start|>assistant<|channel|>final<|message|>")

# In detection order; harmony is recognised by its framing instead (see detect_reasoning).
REASONING_FORMATS: dict[str, ReasoningFormat] = {f.name: f for f in (
    HARMONY,
    ReasoningFormat("seed", "<seed:think>", "</seed:think>", "</seed:think>"),
    ReasoningFormat("command_r", "<|START_THINKING|>", "<|END_THINKING|>", "<|END_THINKING|>"),
    ReasoningFormat("magistral", "[THINK]", "[/THINK]", "[/THINK]"),
    ReasoningFormat("gemma4", "<|channel>thought", "<channel|>", "<channel|>"),
    ReasoningFormat("minimax_m3", "<mm:think>", "</mm:think>", "</mm:think>"),
    ReasoningFormat("kimi_k3", "<|open|>think<|sep|>", "<|close|>think<|sep|>", "<|close|>think<|sep|>"),
    # Solar Open: <|think|>…<|end|>, then the answer opens <|begin|>assistant<|content|>
    # (parsing/content_markup drops that) or its calls <|begin|>assistant<|tool_calls|>
    ReasoningFormat("solar", "<|think|>", "<|end|>", "<|end|><|begin|>assistant", end_names_it=False),
    ReasoningFormat("hunyuan", "<think:opensource>", "</think:opensource>", "</think:opensource>"),
    # Apriel's template writes a turn of calls with neither reasoning nor the final-response
    # marker, while its generation prompt opens the reasoning: the calls' opening ends it too
    ReasoningFormat("apriel", "Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]",
                    "\n[BEGIN FINAL RESPONSE]\n", ended_by=("<tool_calls>",)),
    ReasoningFormat("think", "<think>", "</think>", "\n</think>\n\n"),
)}

_MESSAGE = "<|message|>"
_MESSAGE_ENDS = ("<|end|>", "<|return|>", "<|call|>")
_PROMPT_TAIL = 64   # how much of a prompt's end may show a reasoning block's opening
_HEADER_LIMIT = 256  # a harmony header longer than this means the output isn't harmony
_ANALYSIS = re.compile(r"<\|channel\|>\s*analysis\b")


def detect_reasoning(chat_template: str | None,
                     rendered_prompt_tail: str = "") -> ReasoningFormat | None:
    """The reasoning format a model's template uses, or None. A template that mentions either
    tag of a pair counts (DeepSeek R1's only strips </think> from history); so does a prompt
    whose end opens the block or shows it (a template that builds its tags from parts)."""
    template = chat_template or ""
    tail = (rendered_prompt_tail or "").rstrip()
    if "<|channel|>" in template and _MESSAGE in template:
        return HARMONY
    for fmt in REASONING_FORMATS.values():
        if fmt is HARMONY:
            continue
        if (fmt.start in template or (fmt.end_names_it and fmt.end in template)
                or fmt.start in tail[-_PROMPT_TAIL:]):
            return fmt
    return None


def prompt_opens_reasoning(fmt: ReasoningFormat | None, rendered_prompt_tail: str) -> bool:
    """Whether the rendered prompt ends inside a reasoning block the template opened
    (the start marker, optionally followed by whitespace): pass as `starts_inside`."""
    return fmt is not None and (rendered_prompt_tail or "").rstrip().endswith(fmt.start)


def _hold_start(text: str, markers: tuple[str, ...]) -> int:
    """Where a possible partial marker begins at the end of `text` (len(text) if none)."""
    start = partial_start(text, markers)
    return len(text) if start is None else start


class ReasoningSplitter:
    """Streams generated text into reasoning and answer pieces.

    For a reasoning budget a runtime watches `in_reasoning` and `reasoning_chunks` (the feeds
    that began or ended inside reasoning: with one token per feed, the reasoning tokens so
    far, the tokens of the tags included), then injects
    `fmt.close` into the generation; fed back here, that text closes the block like any end
    marker."""

    def __init__(self, fmt: ReasoningFormat | None, *, starts_inside: bool = False):
        self.fmt = fmt
        self.reasoning_chunks = 0
        self._buf = ""
        self._eof = False
        self._out: list[tuple[bool, str]] = []
        if fmt is None:
            self._state = "content"
        elif fmt.name == "harmony":
            self._state = "analysis" if starts_inside else "header"
        else:
            self._state = "opening" if starts_inside else "lead"

    @property
    def in_reasoning(self) -> bool:
        return self._state in ("opening", "thinking", "analysis")

    @property
    def held(self) -> str:
        """Text fed but not passed on yet: a possible marker waiting for the next chunk."""
        return self._buf

    def feed(self, text: str) -> list[tuple[bool, str]]:
        if self._eof:
            return []
        inside = self.in_reasoning
        self._buf += text
        pieces = self._run()
        if inside or self.in_reasoning:
            self.reasoning_chunks += 1
        return pieces

    def finish(self) -> list[tuple[bool, str]]:
        if self._eof:
            return []
        self._eof = True
        return self._run()

    def _run(self) -> list[tuple[bool, str]]:
        while self._STEPS[self._state](self):
            pass
        pieces, self._out = self._out, []
        return pieces

    def _emit(self, reasoning: bool, text: str) -> None:
        if not text:
            return
        if self._out and self._out[-1][0] == reasoning:
            self._out[-1] = (reasoning, self._out[-1][1] + text)
        else:
            self._out.append((reasoning, text))

    def _goto(self, state: str) -> bool:
        self._state = state
        return True

    # --- tag pairs ----------------------------------------------------------------------------

    def _step_lead(self) -> bool:
        """The start of the output, where a reasoning block may open after whitespace."""
        body = self._buf.lstrip()
        if body.startswith(self.fmt.start):
            self._buf = body[len(self.fmt.start):]
            return self._goto("opening")
        if body.startswith(self.fmt.end):
            self._buf = body[len(self.fmt.end):]
            return self._goto("after")
        if (self.fmt.start.startswith(body) or self.fmt.end.startswith(body)) and not self._eof:
            return False
        return self._goto("content")

    def _step_opening(self) -> bool:
        """Inside the block before its first visible character: whitespace is trimmed, and a
        start tag the model repeats (the prompt had already opened the block) dropped."""
        self._buf = self._buf.lstrip()
        if self._buf.startswith(self.fmt.start):
            self._buf = self._buf[len(self.fmt.start):]
            return True
        if not self._buf and not self._eof:
            return False
        if self.fmt.start.startswith(self._buf) and not self._eof:
            return False
        return self._goto("thinking")

    def _step_thinking(self) -> bool:
        ends = [(at, marker) for marker in (self.fmt.end, *self.fmt.ended_by) if (at := self._buf.find(marker)) >= 0]
        if ends:
            at, marker = min(ends)
            self._emit(True, self._buf[:at].rstrip())
            self._buf = self._buf[at + len(marker):] if marker == self.fmt.end else self._buf[at:]
            return self._goto("after")
        # Trailing whitespace waits: it is trimmed if the end tag follows.
        safe = self._buf if self._eof else self._buf[:_hold_start(self._buf, (self.fmt.end, *self.fmt.ended_by))]
        text = safe.rstrip()
        self._emit(True, text)
        self._buf = "" if self._eof else self._buf[len(text):]
        return False

    def _step_after(self) -> bool:
        self._buf = self._buf.lstrip()
        return bool(self._buf) and self._goto("content")

    def _step_content(self) -> bool:
        self._emit(False, self._buf)
        self._buf = ""
        return False

    # --- harmony -----------------------------------------------------------------------------

    def _step_header(self) -> bool:
        """Between messages: the header, up to <|message|>, says what the body is."""
        at = self._buf.find(_MESSAGE, 0, _HEADER_LIMIT + len(_MESSAGE))
        if at < 0:
            if self._eof:
                if not self._buf.lstrip().startswith("<|"):  # plain text, not a cut header
                    self._emit(False, self._buf)
                self._buf = ""
                return False
            if len(self._buf) >= _HEADER_LIMIT + len(_MESSAGE):
                return self._goto("content")  # not harmony after all: pass everything on
            return False
        header = self._buf[:at]
        if "to=" in header:
            self._emit(False, self._buf[:at + len(_MESSAGE)])
            state = "call"
        else:
            state = "analysis" if _ANALYSIS.search(header) else "final"
        self._buf = self._buf[at + len(_MESSAGE):]
        return self._goto(state)

    def _message_body(self, reasoning: bool, verbatim: bool) -> bool:
        ends = [(i, m) for m in _MESSAGE_ENDS if (i := self._buf.find(m)) >= 0]
        if ends:
            at, marker = min(ends)
            self._emit(reasoning, self._buf[:at] + (marker if verbatim else ""))
            self._buf = self._buf[at + len(marker):]
            return self._goto("header")
        safe = len(self._buf) if self._eof else _hold_start(self._buf, _MESSAGE_ENDS)
        self._emit(reasoning, self._buf[:safe])
        self._buf = self._buf[safe:]
        return False

    def _step_analysis(self) -> bool:
        return self._message_body(True, False)

    def _step_final(self) -> bool:
        return self._message_body(False, False)

    def _step_call(self) -> bool:
        return self._message_body(False, True)

    # each state's step: what it consumes, and the state it goes to (_goto)
    _STEPS: dict[str, Callable[[ReasoningSplitter], bool]] = {
        "lead": _step_lead, "opening": _step_opening, "thinking": _step_thinking, "after": _step_after,
        "content": _step_content,
        "header": _step_header, "analysis": _step_analysis, "final": _step_final, "call": _step_call,
    }

