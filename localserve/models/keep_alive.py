"""How long a model stays loaded after its last request (its keep-alive, in seconds; -1 never).

The server's --keep-alive, a model's own `keep_alive` ([models.NAME]), and a request's
`keep_alive` for that one request, in that order of strength. With --model alone (one model,
today's server) the model is loaded at start and kept whatever a request says, unless
--keep-alive asks otherwise.
"""

from __future__ import annotations

import time
from typing import Any

from ..settings import DEFAULT_KEEP_ALIVE, Settings
from .catalogue import ModelEntry
from .errors import BadModelRequest
from .units import KEEP_ALIVE_NEVER, parse_duration


class KeepAlive:
    def __init__(self, settings: Settings, one_model: bool):
        self.pinned = one_model and settings.keep_alive is None    # requests' keep_alive ignored
        default = KEEP_ALIVE_NEVER if one_model else DEFAULT_KEEP_ALIVE
        self.at_start = settings.keep_alive if settings.keep_alive is not None else default
        # a model pulled while the server runs is not the one --model: the plain default
        self.added = settings.keep_alive if settings.keep_alive is not None else DEFAULT_KEEP_ALIVE

    def of_entry(self, entry: ModelEntry, *, added: bool = False) -> float:
        """A model's own keep-alive: its [models.NAME] value, else the server's."""
        return dict(entry.overrides).get("keep_alive", self.added if added else self.at_start)

    def of_request(self, value: Any) -> float | None:
        """A request's `keep_alive` in seconds; None: the model's own. BadModelRequest names it."""
        if value is None:
            return None
        seconds = _parsed(value)      # a bad value is a 400 even where it would be ignored
        return None if self.pinned else seconds


def _parsed(value: Any) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise BadModelRequest(f"keep_alive: {exc}", param="keep_alive") from None


def expiry(seconds: float) -> float | None:
    """The monotonic time a model idle from now unloads at; None: never."""
    return None if seconds < 0 else time.monotonic() + seconds
