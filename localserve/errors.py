"""API errors, and ErrorShape: the form every dialect's error shape takes.

Handlers raise ApiError with an HTTP status and a message; each route carries the
ErrorShape of its dialect (dialects/openai/errors.py, dialects/anthropic/errors.py), and the
router answers in it. The same error in a stream goes out in-band through the dialect's own
error event (dialects/pump.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import orjson

SHOWN_NAME_CHARS = 200             # a client's name (a model's) echoed in an error: cut past this
MAX_MESSAGE_CHARS = 2000           # an error's whole message: what passes it is cut out of the middle


class ClientGone(Exception):
    """The peer closed the connection or a write to it failed: whoever runs a job for it cancels it."""


class InputRefused(ValueError):
    """Why a reader below the dialects does not take a part of a request (an image, an audio clip,
    a multipart form): code, the error code the answer carries; param, the part it names where the
    reader knows it (None: the caller, which knows where the bytes came from, names it). A dialect
    answers it as a 400 in its own shape."""
    code = "invalid_request"

    def __init__(self, message: str, code: str | None = None, param: str | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.param = param


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, type: str | None = None, param: str | None = None,
                 code: str | None = None, headers: list[tuple[str, str]] | None = None,
                 extra: dict[str, Any] | None = None):
        message = clipped(message)
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or []
        self.extra = extra or {}


def shown(text: str, limit: int = SHOWN_NAME_CHARS) -> str:
    """A client's text as an error message quotes it: whole when short, else its start and how
    long it was (a 1 MB model name echoed whole makes a 1 MB error, and a log line as long)."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def clipped(message: str) -> str:
    """A message as an answer carries it: many quote a client's value (a role, a type, a tool's
    schema keyword), and a 200 KB value quoted whole made a 200 KB error and log line. The
    middle goes, so the field named at the start and the hint at the end stay."""
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    keep = MAX_MESSAGE_CHARS // 2
    return f"{message[:keep]}... ({len(message) - 2 * keep} characters left out) ...{message[-keep:]}"


def context_exceeded(n_prompt_tokens: int, n_ctx: int, *, at_least: bool = False) -> ApiError:
    """at_least: the prompt was too long to be worth tokenizing; n_prompt_tokens is a lower bound."""
    return ApiError(
        400,
        f"the request needs {'at least ' if at_least else ''}{n_prompt_tokens} prompt tokens but the "
        f"context holds {n_ctx}",
        code="context_length_exceeded",
        param="messages",
        extra={"n_prompt_tokens": n_prompt_tokens, "n_ctx": n_ctx},
    )


def same_status(status: int) -> int:
    return status


@dataclass(frozen=True)
class ErrorShape:
    """How one dialect's clients read an error: the HTTP status they expect and the JSON body,
    and the SSE event that carries it in a stream whose head is out (None: a bare data line),
    with its own body where the stream's differs from the whole answer's (Responses' error event)."""
    body: Callable[[ApiError], dict[str, Any]]
    status: Callable[[int], int] = same_status
    stream_event: str | None = None
    stream_body: Callable[[ApiError], dict[str, Any]] | None = None

    def render(self, error: ApiError) -> tuple[int, bytes]:
        return self.status(error.status), orjson.dumps(self.body(error))

    def stream_frame(self, error: ApiError) -> bytes:
        event = f"event: {self.stream_event}\n".encode() if self.stream_event else b""
        body = (self.stream_body or self.body)(error)
        return event + b"data: " + orjson.dumps(body) + b"\n\n"

