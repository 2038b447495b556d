"""A model's stored defaults (Ollama's store: its system prompt and options, models/defaults.py)
put under the request before it is read, as Ollama does: an option the request sets is its own;
a chat with no system message gets the stored one first; generate's `system` replaces it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .names import requested_name

if TYPE_CHECKING:
    from ...models.manager import ModelManager


def apply_stored(models: ModelManager, body: dict, chat: bool) -> None:
    entry = models.catalogue.exact(requested_name(body))
    stored = entry.defaults if entry is not None else None
    if stored is None:
        return
    if stored.options and isinstance(body.get("options"), (dict, type(None))):
        body["options"] = stored.options_under(body.get("options"))
    if not stored.system:
        return
    messages = body.get("messages")
    if chat and isinstance(messages, list) and messages and \
            not any(isinstance(m, dict) and m.get("role") == "system" for m in messages):
        body["messages"] = [{"role": "system", "content": stored.system}, *messages]
    elif not chat and body.get("system") is None and body.get("prompt"):
        body["system"] = stored.system
