"""OpenAI's error shape: `{"error": {message, type, param, code}}`, the status as it is.

Every OpenAI route carries it, and so does every route of the server's own (health, tokenize,
the model list) and every error the wire answers before a route is known."""

from __future__ import annotations

from typing import Any

from ...errors import ApiError, ErrorShape

OPENAI_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    426: "invalid_request_error",
    429: "rate_limit_error",
    431: "invalid_request_error",
    501: "not_implemented_error",
    503: "server_error",
    505: "invalid_request_error",
}


def openai_error_body(error: ApiError) -> dict[str, Any]:
    body = {
        "message": error.message,
        "type": error.type or OPENAI_ERROR_TYPES.get(error.status, "server_error"),
        "param": error.param,
        "code": error.code,
    }
    body.update(error.extra)
    return {"error": body}


OPENAI_ERRORS = ErrorShape(openai_error_body)
