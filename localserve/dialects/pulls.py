"""What the pulling endpoints share (Ollama's /api/pull, llama-server's POST /models): a pull
prepared on the connection thread (a bad name, a missing repo or quant is an error before
anything is written or streamed), its progress, the model joining the catalogue once its
files are whole, and the Hub's errors as the dialect's. PullBoard keeps the pulls running in
the background (POST /models) for /models/sse to report."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..errors import ApiError
from ..models.hub import pull as hub_pull
from ..models.hub.errors import HubError
from ..models.hub.fetch import Cancelled

if TYPE_CHECKING:
    from ..models.manager import ModelManager

log = logging.getLogger("localserve.dialects")

MAX_BOARD_EVENTS = 1000       # events /models/sse may still replay; older ones are dropped


def api_error(exc: HubError) -> ApiError:
    return ApiError(exc.status, exc.message, code=exc.code)


def prepare(name: object) -> hub_pull.Prepared:
    try:
        return hub_pull.prepare(name)
    except HubError as exc:
        raise api_error(exc) from None
    except OSError as exc:
        raise ApiError(500, f"cannot read the Hugging Face cache: {exc.strerror or exc}", code="pull_failed") from None


def progress(prepared: hub_pull.Prepared, models: ModelManager) -> Iterator[hub_pull.Progress]:
    """The pull's progress; once its files are whole (before `success`), the model is served.
    HubError (or OSError) as they come; closing it lets go of the download."""
    for event in hub_pull.run(prepared):
        if event.status == "success":
            names = join_catalogue(prepared, models)
            log.info("pulled %s: serving it as %s", prepared.name, ", ".join(names))
        yield event


def join_catalogue(prepared: hub_pull.Prepared, models: ModelManager) -> list[str]:
    """The pulled model's names served. An alias another model holds stays that model's: the
    repo's bare name belongs to the quant pulled first, though a later pull brings the repo's
    default quant (Q4_K_M after Q8_0); the model joins by its other names."""
    names = []
    for entry in prepared.entries():
        existing = models.catalogue.exact(entry.name)
        if existing is None:
            entry = replace(entry, aliases=tuple(a for a in entry.aliases if models.catalogue.exact(a) is None))
            if models.add(entry) is not None:
                existing = entry
        if existing is not None:
            names.append(existing.name)
    return names


@dataclass
class BoardEvent:
    seq: int
    body: dict


@dataclass
class PullBoard:
    """Pulls started by POST /models, each on its own thread, and what they said (for /models/sse)."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    events: list[BoardEvent] = field(default_factory=list)
    running: dict[str, threading.Event] = field(default_factory=dict)     # name → its stop flag
    seq: int = 0

    def start(self, name: str, prepared: hub_pull.Prepared, models: ModelManager) -> None:
        with self.lock:
            if name in self.running:
                raise ApiError(400, f"model '{name}' is being downloaded already", code="invalid_request_error")
            stop = self.running[name] = threading.Event()
        threading.Thread(target=self._run, args=(name, prepared, models, stop), daemon=True,
                         name=f"pull {name}").start()

    def stop(self, name: str) -> bool:
        """POST /models/unload of a model downloading: the download stops (its partial kept)."""
        with self.lock:
            flag = self.running.get(name)
        if flag is not None:
            flag.set()
        return flag is not None

    def _run(self, name: str, prepared: hub_pull.Prepared, models: ModelManager, stop: threading.Event) -> None:
        events = progress(prepared, models)
        try:
            for event in events:
                if stop.is_set():
                    raise Cancelled()
                if event.url is not None:
                    self.post({"model": name, "event": "download_progress",
                               "data": {event.url: {"done": event.completed, "total": event.total}}})
            self.post({"model": name, "event": "download_finished", "data": {}})
        except Cancelled:
            self.post({"model": name, "event": "download_failed", "data": {"error": "the download was stopped"}})
        except (HubError, OSError) as exc:
            message = exc.message if isinstance(exc, HubError) else f"{exc.strerror or exc}"
            log.warning("pull %s failed: %s", name, message)
            self.post({"model": name, "event": "download_failed", "data": {"error": message}})
        finally:
            events.close()
            with self.lock:
                self.running.pop(name, None)

    def post(self, body: dict) -> None:
        with self.lock:
            self.seq += 1
            self.events.append(BoardEvent(self.seq, body))
            del self.events[:-MAX_BOARD_EVENTS]

    def since(self, seq: int) -> tuple[int, list[dict]]:
        with self.lock:
            return self.seq, [e.body for e in self.events if e.seq > seq]

    def downloading(self) -> list[str]:
        with self.lock:
            return list(self.running)
