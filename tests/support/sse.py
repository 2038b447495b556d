"""The one reader of Server-Sent Events bodies for the tests (OpenAI, Anthropic and Responses streams)."""

from __future__ import annotations

import json


def parse_sse(body: bytes, comments: bool = False) -> list[tuple[str | None, dict | None]]:
    """(event name, JSON data) per SSE event of a whole (de-chunked) body.

    By default only the events that carry JSON data: comments (keepalives) and OpenAI's closing
    ``data: [DONE]`` are left out. With comments=True every block comes back, for checks that want
    to see all of them: a comment as (":", None), an event without JSON data as (name, None).
    """
    events = []
    for block in body.decode().split("\n\n"):
        if not block.strip():
            continue
        name, data = None, None
        for line in block.split("\n"):
            if line.startswith(":"):
                name = name or ":"
            elif line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: ") and line != "data: [DONE]":
                data = json.loads(line[len("data: "):])
        if comments or data is not None:
            events.append((name, data))
    return events


def sse_data(body: bytes) -> list[dict]:
    """The JSON data of each event, in order (an OpenAI chat or completion stream's chunks)."""
    return [data for _, data in parse_sse(body)]
