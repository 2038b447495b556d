"""The Responses API's errors: a whole answer's in OpenAI's shape; in a stream whose head went
out before the response began (comments only so far: a model load's, a long decode's, a
compaction's), its `error` event, the stream's first and last event (sequence_number 0), as
OpenAI's Responses stream sends one: `{"type": "error", "code", "message", "param",
"sequence_number"}`. A failure once the response began is its `response.failed` (stream.py),
stored with it."""

from __future__ import annotations

from typing import Any

from ...errors import ApiError, ErrorShape
from ..openai.errors import openai_error_body


def error_event(error: ApiError) -> dict[str, Any]:
    return {"type": "error", "code": error.code, "message": error.message, "param": error.param,
            "sequence_number": 0, **error.extra}


RESPONSES_ERRORS = ErrorShape(openai_error_body, stream_event="error", stream_body=error_event)
