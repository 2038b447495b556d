"""A model's stored defaults (Ollama's store: its system prompt and options, models/defaults.py)
under a request of any dialect, as Ollama's own routes put them (ollama/stored.py): Ollama serves
such a model with them whatever asks, and so does this server on every route that generates.

A field the request sets is its own; what it leaves out is filled from the model's options by
the dialect's own field name (`num_predict` is Chat Completions' `max_tokens`, Responses'
`max_output_tokens`, llama-server's `n_predict`; `stop` is Messages' `stop_sequences`). The
stored system prompt comes first in a conversation that has none of its own (a `system` or
`developer` message, Responses' `instructions`, Messages' `system`); a raw completion has no
turns to put it in. A stored temperature past what a dialect takes (Messages: 1) is that
dialect's highest, so a request that set nothing is never refused for the store's value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..models.defaults import ModelDefaults

# Ollama's option names that are every dialect's field names too (fields.read_sampling)
SHARED_OPTIONS = ("temperature", "top_k", "top_p", "min_p", "seed", "presence_penalty", "frequency_penalty",
                  "repeat_penalty", "repeat_last_n")
OWN_SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True)
class StoredFields:
    """Where a dialect's body takes the stored defaults."""
    max_tokens: str | None        # num_predict's field (None: the dialect requires its own)
    stop: str | None
    system: str | None            # "messages": a system message first; else the field it fills; None: none
    temperature_high: float = 2.0


CHAT = StoredFields("max_tokens", "stop", "messages")
COMPLETIONS = StoredFields("max_tokens", "stop", None)
RESPONSES = StoredFields("max_output_tokens", "stop", "instructions")
MESSAGES = StoredFields(None, "stop_sequences", "system", temperature_high=1.0)
LLAMA_COMPLETION = StoredFields("n_predict", "stop", None)


def put_stored(stored: ModelDefaults | None, body: dict, fields: StoredFields) -> None:
    if stored is None:
        return
    options = dict(stored.options)
    for name in SHARED_OPTIONS:
        value = options.get(name)
        if body.get(name) is None and is_number(value):
            body[name] = min(value, fields.temperature_high) if name == "temperature" else value
    predict = options.get("num_predict")
    if fields.max_tokens and body.get(fields.max_tokens) is None and is_number(predict) and predict > 0:
        body[fields.max_tokens] = int(predict)      # -1 and -2 are Ollama's "no limit": the dialect's own
    stop = options.get("stop")
    if fields.stop and body.get(fields.stop) is None and (isinstance(stop, str) or is_text_list(stop)):
        body[fields.stop] = stop
    if stored.system and fields.system:
        put_system(stored.system, body, fields.system)


def put_system(system: str, body: dict, field: str) -> None:
    if field == "messages":
        messages = body.get("messages")
        if isinstance(messages, list) and messages and not has_own_system(messages):
            body["messages"] = [{"role": "system", "content": system}, *messages]
        return
    if body.get(field) is not None:
        return
    turns = body.get("input")        # Responses: a system or developer item is the request's own
    if isinstance(turns, list) and has_own_system(turns):
        return
    body[field] = system


def has_own_system(items: list) -> bool:
    return any(isinstance(item, dict) and item.get("role") in OWN_SYSTEM_ROLES for item in items)


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_text_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
