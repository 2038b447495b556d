"""A whole generated text split into (reasoning, content), as the runtime's streaming splitter
(localserve/parsing/reasoning.py) splits it when the text comes in one piece."""

from __future__ import annotations

from localserve.parsing.reasoning import ReasoningFormat, ReasoningSplitter


def split_reasoning(text: str, fmt: ReasoningFormat | None, starts_inside: bool = False) -> tuple[str, str]:
    splitter = ReasoningSplitter(fmt, starts_inside=starts_inside)
    pieces = splitter.feed(text) + splitter.finish()
    reasoning = "".join(t for is_reasoning, t in pieces if is_reasoning)
    return reasoning, "".join(t for is_reasoning, t in pieces if not is_reasoning)
