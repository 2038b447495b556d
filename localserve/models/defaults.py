"""What a model brings of its own to every request: a system prompt and sampling options.

Ollama's store keeps them beside each model (its manifest's `system` and `params` layers, a
Modelfile's SYSTEM and PARAMETER lines); a model found there is served with them, as Ollama
serves it. A request's own fields win: an option it sets is its own, a system message it sends
replaces the stored one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelDefaults:
    system: str | None = None
    options: tuple[tuple[str, object], ...] = ()      # Ollama's option names: temperature, stop, top_k, ...
    template: str | None = None     # Ollama's Go template (never run: a GGUF without its own is refused at load)

    def options_under(self, given: dict | None) -> dict:
        """The request's options with this model's beneath them."""
        return {**dict(self.options), **(given or {})}
