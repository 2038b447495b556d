"""Reasoning split out of a whole generated text, for tests (the server only ever streams)."""

from __future__ import annotations

from localserve.parsing.reasoning import ReasoningFormat, ReasoningSplitter


def split_reasoning(text: str, fmt: ReasoningFormat | None, starts_inside: bool = False) -> tuple[str, str]:
    """(reasoning, content) of a whole generated text, fed in one piece."""
    splitter = ReasoningSplitter(fmt, starts_inside=starts_inside)
    pieces = splitter.feed(text) + splitter.finish()
    reasoning = "".join(t for is_reasoning, t in pieces if is_reasoning)
    return reasoning, "".join(t for is_reasoning, t in pieces if not is_reasoning)
