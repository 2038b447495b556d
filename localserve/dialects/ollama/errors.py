"""Ollama's error shape: `{"error": "message"}`, with the HTTP status Ollama gives.

Ollama's clients read only the `error` text and the status (the Python client raises
ResponseError(error, status_code)). In a stream whose head is out, the same object is one
NDJSON line: the clients check every line for an `error` key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ...errors import ApiError, ErrorShape


def ollama_error_body(error: ApiError) -> dict[str, Any]:
    return {"error": error.message}


@dataclass(frozen=True)
class NdjsonErrorShape(ErrorShape):
    def stream_frame(self, error: ApiError) -> bytes:
        return orjson.dumps(self.body(error)) + b"\n"


OLLAMA_ERRORS = NdjsonErrorShape(ollama_error_body)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, code="invalid_value")
