"""Anthropic's error shape: `{"type": "error", "error": {type, message}}`; a full queue is 529
overloaded, not 503; in a stream, an `event: error`."""

from __future__ import annotations

from typing import Any

from ...errors import ApiError, ErrorShape

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


def anthropic_error_body(error: ApiError) -> dict[str, Any]:
    kind = ANTHROPIC_ERROR_TYPES.get(error.status) or ("api_error" if error.status >= 500 else "invalid_request_error")
    body: dict[str, Any] = {"type": kind, "message": error.message}
    body.update(error.extra)
    return {"type": "error", "error": body}


def anthropic_status(status: int) -> int:
    """Anthropic reports a full queue as 529 overloaded, not 503."""
    return 529 if status == 503 else status


ANTHROPIC_ERRORS = ErrorShape(anthropic_error_body, anthropic_status, "error")
