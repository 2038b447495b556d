"""llama-server's error shape: `{"error": {"code": <the HTTP status>, "message", "type"}}`.

Its `code` is the status as a number (OpenAI's is a string); its types are its own
(not_found_error, unavailable_error, exceed_context_size_error). What else an error carries
(n_prompt_tokens and n_ctx of a prompt the context cannot hold, the param it names) goes
along, as llama-server adds the sizes. In a stream whose head is out the same object is one
`data:` line, as llama-server sends it.
"""

from __future__ import annotations

from typing import Any

from ...errors import ApiError, ErrorShape

LLAMA_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    501: "not_supported_error",
    503: "unavailable_error",
}


def llama_error_body(error: ApiError) -> dict[str, Any]:
    if error.code == "context_length_exceeded":
        kind = "exceed_context_size_error"
    else:
        kind = LLAMA_ERROR_TYPES.get(error.status, "invalid_request_error" if error.status < 500 else "server_error")
    body: dict[str, Any] = {"code": error.status, "message": error.message, "type": kind}
    if error.param is not None:
        body["param"] = error.param
    body.update(error.extra)
    return {"error": body}


LLAMA_ERRORS = ErrorShape(llama_error_body)
