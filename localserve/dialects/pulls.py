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
from ..models.catalogue import ModelEntry
from ..models.discovery.repo_models import hub_aliases
from ..models.discovery.sources import REPO_STORES
from ..models.hub.errors import HubError
from ..models.hub.fetch import Cancelled
from ..models.hub.names import parse_hub_name

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
    """The pulled model's names served. An alias another model holds stays that model's, but
    for the repo's bare name (`org/repo`, `hf.co/org/repo`): it belongs to the repo's default
    quant, as discovery names the cache at start, so a quant pulled first (Q8_0) gives it up to
    the default (Q4_K_M) once that is pulled."""
    names = []
    for entry in prepared.entries():
        existing = models.catalogue.exact(entry.name)
        if existing is None:
            bare = (prepared.name.repo_id, *hub_aliases(prepared.name.repo_id))
            taking = tuple(a for a in entry.aliases if a in bare and same_store(models.catalogue.exact(a), entry))
            entry = replace(entry, aliases=tuple(a for a in entry.aliases
                                                 if a in taking or models.catalogue.exact(a) is None))
            if models.add(entry, taking) is not None:
                existing = entry
        if existing is not None:
            names.append(existing.name)
    return names


def same_store(holder: ModelEntry | None, entry: ModelEntry) -> bool:
    """Whether `holder` came from the store `entry` was pulled into (a name the configuration or
    another tool's store gave a model is that model's)."""
    return holder is not None and (holder.source, holder.origin) == (entry.source, entry.origin)


def asks_for_the_default(name: str, served: ModelEntry) -> bool:
    """Whether a pull of `name`, which the catalogue serves, still has to ask the Hub: a repo's
    bare name (no quant, or `:latest`) that a store of repos gave to the default of the quants it
    holds. Which quant is the repo's default only the Hub's listing says (Ollama fetches it; a
    cache that holds Q8_0 alone gave the name to Q8_0)."""
    if served.source not in REPO_STORES:
        return False
    try:
        return parse_hub_name(name).quant is None
    except HubError:
        return False


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
