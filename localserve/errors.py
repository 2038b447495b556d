"""API errors and the two error shapes clients check: OpenAI's and Anthropic's.

Handlers raise ApiError with an HTTP status and a message; each route carries the
ErrorShape of its dialect, and the router answers in it. The same error in a stream
goes out in-band through the dialect's own error event (dialects/pump.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import orjson

SHOWN_NAME_CHARS = 200             # a client's name (a model's) echoed in an error: cut past this

OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    431: "invalid_request_error",
    501: "not_implemented_error",
    503: "server_error",
    505: "invalid_request_error",
}

ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}


class ClientGone(Exception):
    """The peer closed the connection or a write to it failed: whoever runs a job for it cancels it."""


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, type: str | None = None, param: str | None = None,
                 code: str | None = None, headers: list[tuple[str, str]] | None = None,
                 extra: dict[str, Any] | None = None):
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


def openai_error_body(error: ApiError) -> dict[str, Any]:
    body = {
        "message": error.message,
        "type": error.type or OPENAI_ERROR_TYPES.get(error.status, "server_error"),
        "param": error.param,
        "code": error.code,
    }
    body.update(error.extra)
    return {"error": body}


def anthropic_error_body(error: ApiError) -> dict[str, Any]:
    kind = ANTHROPIC_ERROR_TYPES.get(error.status) or ("api_error" if error.status >= 500 else "invalid_request_error")
    body: dict[str, Any] = {"type": kind, "message": error.message}
    body.update(error.extra)
    return {"type": "error", "error": body}


def anthropic_status(status: int) -> int:
    """Anthropic reports a full queue as 529 overloaded, not 503."""
    return 529 if status == 503 else status



def same_status(status: int) -> int:
    return status


@dataclass(frozen=True)
class ErrorShape:
    """How one dialect's clients read an error: the HTTP status they expect and the JSON body,
    and the SSE event that carries it in a stream whose head is out (None: a bare data line)."""
    body: Callable[[ApiError], dict[str, Any]]
    status: Callable[[int], int] = same_status
    stream_event: str | None = None

    def render(self, error: ApiError) -> tuple[int, bytes]:
        return self.status(error.status), orjson.dumps(self.body(error))

    def stream_frame(self, error: ApiError) -> bytes:
        event = f"event: {self.stream_event}\n".encode() if self.stream_event else b""
        return event + b"data: " + orjson.dumps(self.body(error)) + b"\n\n"


OPENAI_ERRORS = ErrorShape(openai_error_body)
ANTHROPIC_ERRORS = ErrorShape(anthropic_error_body, anthropic_status, "error")
