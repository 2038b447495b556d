"""Which models are loaded: load on first use, unload when idle, stay inside the limits.

Each model in the catalogue is a Record (record.py; found by name in roster.py):
unloaded → loading → loaded → unloading → unloaded.
- A request holds its model with use(): while it is inside, the model is never unloaded.
  The first request for an unloaded model starts its load on a loader thread; whoever asks
  while it runs waits for the same load, hearing a Loading event now and then (its dialect
  shows it to the client, watches the socket, and may stop the wait: dialects/loading.py).
  A load that fails fails them all and leaves the model unloaded: the next request tries again.
- One load or unload runs at a time (load_lock): a load first makes room under --max-models
  and --max-memory (for the estimate footprint.py makes) by unloading the least recently
  used idle model, waits (at most --evict-wait) while every loaded model is busy, and then
  refuses (ModelBusy: the client is asked to retry shortly).
- What it refuses it says in its own errors (errors.py); dialects/failures.py gives them their
  HTTP status.
  Idle = no request inside use() and no job in its runtime (a background response counts).
- Keep-alive: after its last request a model stays loaded for its keep-alive (--keep-alive,
  the model's own, or the request's `keep_alive` for that one request: keep_alive.py), then
  the sweeper thread unloads it; -1 never. The sweeper also frees the engines of unloaded
  models that were still in use (graveyard.py).
- Threads: --threads is shared among the models busy at once (with a request inside use()):
  each gets threads // busy (at least 1), unless its [models.NAME] table sets its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Iterator

from ..engine.stopwatch import Stopwatch
from ..generation import Loading
from ..ops import memory
from ..ops.metrics import ServerMetrics
from ..settings import DISCONNECT_POLL_INTERVAL, Settings
from .catalogue import Catalogue, ModelEntry
from .context_size import wanted_context
from .errors import ModelBusy, ModelError
from .footprint import estimate_bytes
from .graveyard import Graveyard
from .keep_alive import KeepAlive, expiry
from .load_progress import LoadProgress, load_stages
from .loaded import LoadedModel, LoadFailed, load
from .record import Attempt, Record, load_error
from .roster import Roster
from .room import check_fits_alone, room_for, threads_for
from .served import ServedModel
from .state_feed import StateFeed
from .states import LOADED, LOADING, UNLOADED, UNLOADING

KEEP_ALIVE_SWEEP = 0.25            # seconds between looks for idle models whose keep-alive ran out

log = logging.getLogger("localserve.models")


class ModelManager:
    def __init__(self, settings: Settings, catalogue: Catalogue, metrics: ServerMetrics):
        self.settings = settings
        self.catalogue = catalogue
        self.metrics = metrics
        self.keep_alive = KeepAlive(settings, one_model=catalogue.any_name)
        self.changes = StateFeed()      # each model's state as it changes (GET /models/sse follows it)
        self.roster = Roster(catalogue, self.keep_alive, self.changes)
        self.cond = threading.Condition()
        self.load_lock = threading.Lock()
        self.graveyard = Graveyard()
        self.stopping = False
        self.sweeper = threading.Thread(target=self._sweep, name="models keep-alive", daemon=True)

    # ---- what handlers call -------------------------------------------------------

    def find(self, name: Any) -> Record:
        """The record a request's `model` names (roster.py)."""
        return self.roster.find(name)

    def exact(self, name: str) -> Record | None:
        return self.roster.exact(name)

    @contextlib.contextmanager
    def use(self, name: Any, *, keep_alive: Any = None, n_ctx: int | None = None,
            on_loading: Callable[[Loading], None] | None = None) -> Iterator[ServedModel]:
        """The model a request names, loaded, held for the request's whole life. While it
        loads, on_loading (optional) hears a Loading event as the wait starts and every
        DISCONNECT_POLL_INTERVAL after; what it raises (a client gone) ends the wait.
        `n_ctx`: the context the request asks for (Ollama's num_ctx, context_size.py): a model
        loaded with less is loaded again with that much, once its requests in flight are done."""
        record = self.find(name)
        keep = self.keep_alive.of_request(keep_alive)
        ask = wanted_context(record.entry, self.settings, n_ctx)
        with self.cond:
            record.users += 1
            record.ask_context(ask)
            self._share_threads()
        held = False
        try:
            model = self._ready(record, on_loading, ask)
            held = True
            yield model.served
        finally:
            with self.cond:
                record.let_go(ask, held)
                record.users -= 1
                record.last_used = time.monotonic()
                if record.state == LOADED:
                    self._start_keep_alive(record, record.keep_alive if keep is None else keep)
                self._share_threads()
                self.cond.notify_all()

    def load(self, name: Any) -> ServedModel:
        """POST /models/load: load (or find loaded) and return the model."""
        with self.use(name) as model:
            return model

    def unload(self, name: Any) -> str:
        """POST /models/unload: unload once no request uses the model (waits, bounded; then ModelBusy)."""
        record = self.find(name)
        deadline = time.monotonic() + self.settings.evict_wait
        while True:
            with self.cond:
                if record.state == UNLOADED:
                    return UNLOADED
                if not record.unloadable():
                    if time.monotonic() >= deadline:
                        raise ModelBusy.shortly(f"model '{record.name}' is still busy; it was not unloaded")
                    self.cond.wait(KEEP_ALIVE_SWEEP)
                    continue
            with self.load_lock:
                if self._unload(record, "request"):
                    return UNLOADED

    def add(self, entry: ModelEntry, taking: tuple[str, ...] = ()) -> Record | None:
        """A model pulled while the server runs joins the catalogue (roster.py)."""
        return self.roster.add(entry, taking)

    def loaded_models(self) -> list[LoadedModel]:
        """For the app and its metrics: the models themselves."""
        with self.cond:
            return [r.loaded for r in self.roster.all() if r.loaded is not None]

    def served_models(self) -> list[ServedModel]:
        """For handlers: each loaded model as a connection thread may see it."""
        return [loaded.served for loaded in self.loaded_models()]

    def all_models(self) -> list[Record]:
        return self.roster.all()

    # ---- start and end ----------------------------------------------------------

    def start(self) -> None:
        self.sweeper.start()

    def load_at_start(self, name: str) -> LoadedModel:
        """--preload and the one --model: load now; LoadFailed as it came."""
        record = self.find(name)
        with self.cond:
            record.enter(LOADING)
            attempt = record.attempt = Attempt()
            attempt.at_start = True
        self._load(record, attempt)
        if attempt.failure is not None:
            raise attempt.failure
        if attempt.error is not None:
            raise LoadFailed(attempt.detail or attempt.error.message)
        return record.loaded

    def close(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.changes.close()
        if self.sweeper.is_alive():
            self.sweeper.join(timeout=5)
        for record in self.all_models():
            if record.loaded is not None:
                loaded, record.loaded = record.loaded, None
                record.enter(UNLOADED)
                self._free(loaded, "shutdown")

    # ---- loading ----------------------------------------------------------------

    def _ready(self, record: Record, on_loading: Callable[[Loading], None] | None, ask: int | None) -> LoadedModel:
        """The model, once loaded (with the context every waiting request asks for); the request
        holds it from then (under the same lock: no reload for another's context frees it first)."""
        busy_since = None
        while True:
            with self.cond:
                attempt = None
                if record.state == LOADED and not record.needs_more_context():
                    record.last_used = time.monotonic()
                    record.hold(ask)
                    return record.loaded
                if record.state == LOADED:      # too little context: once nothing runs on it, again
                    if record.holders == 0 and record.loaded.idle:
                        attempt = self._start_load(record, replacing=record.loaded)
                elif record.state == UNLOADING:      # being unloaded: wait, then load it again
                    self.cond.wait(KEEP_ALIVE_SWEEP)
                    continue
                elif record.state == UNLOADED:
                    attempt = self._start_load(record)
                else:
                    attempt = record.attempt
            if attempt is None:
                busy_since = busy_since or time.monotonic()
                self._wait_for_holders(record, busy_since, on_loading)
                continue
            self._wait(attempt, Loading(record.name), on_loading)
            if attempt.error is not None:
                raise attempt.error.again()

    def _start_load(self, record: Record, replacing: LoadedModel | None = None) -> Attempt:
        """Under cond: a loader thread for the record, with the context its waiting requests ask
        for; `replacing`: the same model loaded with less, freed first."""
        record.enter(LOADING)
        record.attempt = Attempt()
        record.n_ctx = record.wanted_context()
        record.loaded = None
        threading.Thread(target=self._load, args=(record, record.attempt, replacing), daemon=True,
                         name=f"load {record.name}").start()
        return record.attempt

    def _wait_for_holders(self, record: Record, since: float,
                          on_loading: Callable[[Loading], None] | None) -> None:
        """A wait for the requests in flight on a model that must load again with more context
        (as a load waits for a busy model to evict: --evict-wait, then ModelBusy); the client is watched."""
        if time.monotonic() - since >= self.settings.evict_wait:
            raise ModelBusy.shortly(f"model '{record.name}' must load again with a context of {record.wanted_context()} "
                             f"tokens (num_ctx), but its requests in flight have not ended")
        if on_loading is not None:
            on_loading(Loading(record.name))
        with self.cond:
            self.cond.wait(DISCONNECT_POLL_INTERVAL)

    @staticmethod
    def _wait(attempt: Attempt, event: Loading, on_loading: Callable[[Loading], None] | None) -> None:
        """Until the load ends, telling on_loading now and then."""
        if on_loading is None:
            attempt.done.wait()
            return
        if not attempt.done.is_set():
            on_loading(event)
        while not attempt.done.wait(DISCONNECT_POLL_INTERVAL):
            on_loading(event)

    def _load(self, record: Record, attempt: Attempt, replacing: LoadedModel | None = None) -> None:
        """The loader: free what it replaces, make room, load, count the memory. Ends the attempt
        either way."""
        entry = record.entry
        loaded = None
        try:
            with self.load_lock:
                if replacing is not None:
                    log.info("model %s: loaded again with a context of %d (num_ctx)", entry.name, record.n_ctx)
                    self._free(replacing, "num_ctx")
                loaded = self._load_locked(record)
            self.metrics.model_loads.inc(model=entry.name, outcome="loaded")
            self.metrics.model_load_seconds.observe(loaded.load_seconds, model=entry.name)
        except LoadFailed as exc:
            attempt.failure = exc
            attempt.error, attempt.detail = load_error(entry.name, entry.path, str(exc))
        except ModelError as exc:
            attempt.error = exc
        except Exception as exc:
            log.exception("loading model %s failed", entry.name)
            attempt.error, attempt.detail = load_error(entry.name, entry.path, f"{type(exc).__name__}: {exc}")
        finally:
            self._end_attempt(record, attempt, loaded)

    def _end_attempt(self, record: Record, attempt: Attempt, loaded: LoadedModel | None) -> None:
        with self.cond:
            if loaded is not None:
                record.loaded = loaded
                record.enter(LOADED)
                record.last_used = time.monotonic()
                self._start_keep_alive(record, record.keep_alive)
                self._share_threads()
            else:
                record.n_ctx = None
                record.enter(UNLOADED, failure=attempt.error.message if attempt.error else "the load failed")
                self.metrics.model_loads.inc(model=record.name, outcome="failed")
                if not attempt.at_start:      # at start the error is the one line the server exits with
                    log.error("%s", attempt.detail or record.last_error)
            attempt.done.set()
            self.cond.notify_all()

    def _load_locked(self, record: Record) -> LoadedModel:
        entry = record.entry
        settings = entry.settings(self.settings)
        if record.n_ctx is not None:        # a request's num_ctx
            settings = dataclasses.replace(settings, ctx_size=record.n_ctx)
        watch = Stopwatch()
        need = estimate_bytes(entry.path, settings, [f.path for f in entry.adapter_files()])
        watch.lap("estimate")
        self._make_room(record, need)
        watch.lap("making room")
        before = memory.rss_bytes() or 0
        threads = threads_for(record, self.all_models(), self.settings)     # a copy: a pull may add one meanwhile
        loaded = load(entry, settings, self.metrics, threads=threads, watch=watch,
                      progress=LoadProgress(load_stages(settings), record.report_progress))
        loaded.estimated_bytes = need
        loaded.measured_bytes = max(0, (memory.rss_bytes() or 0) - before)
        limit = self.settings.max_memory
        if limit is not None and loaded.measured_bytes > need:     # checked after: the estimate was low
            try:
                self._make_room(record, loaded.memory_bytes, wait=0.0)
            except ModelError:
                self._free(loaded, "over --max-memory")
                raise
        return loaded

    def _make_room(self, record: Record, need: int, wait: float | None = None) -> None:
        """Unload least recently used idle models until `need` more bytes and one more model fit
        (room.py); while every loaded model is busy, wait for one (at most `wait`, --evict-wait)."""
        check_fits_alone(record, need, self.settings)
        deadline = time.monotonic() + (self.settings.evict_wait if wait is None else wait)
        while True:
            with self.cond:
                room = room_for(record, self.roster.all(), need, self.settings)
                if room.fits:
                    return
                if room.evict is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise room.refusal
                    self.cond.wait(min(left, KEEP_ALIVE_SWEEP))
                    continue
            self._unload(room.evict, "evicted")

    # ---- unloading --------------------------------------------------------------

    def _unload(self, record: Record, reason: str) -> bool:
        """Unload `record` if it is still idle (the caller holds load_lock)."""
        with self.cond:
            if not record.unloadable():
                return False
            loaded, record.loaded = record.loaded, None
            record.enter(UNLOADING)
        try:
            self._free(loaded, reason)
        finally:
            with self.cond:
                record.expires, record.n_ctx = None, None
                record.enter(UNLOADED)
                self.cond.notify_all()
        return True

    def _free(self, loaded: LoadedModel, reason: str) -> None:
        loaded.close()
        self.graveyard.free(loaded)
        memory.release_free_memory()
        self.metrics.model_unloads.inc(model=loaded.name, reason=reason)
        (log.debug if reason == "shutdown" else log.info)("unloaded model %s (%s)", loaded.name, reason)

    def _sweep(self) -> None:
        """The keep-alive thread: unload models idle past their keep-alive; free buried engines."""
        while True:
            with self.cond:
                self.cond.wait(KEEP_ALIVE_SWEEP)
                if self.stopping:
                    return
                now = time.monotonic()
                due = [r for r in self.roster.all()
                       if r.expires is not None and now >= r.expires and r.unloadable()]
            self.graveyard.sweep()
            for record in due:
                if self.load_lock.acquire(blocking=False):     # a load in progress: next round
                    try:
                        self._unload(record, "idle")
                    finally:
                        self.load_lock.release()

    def _start_keep_alive(self, record: Record, seconds: float) -> None:
        record.expires = expiry(seconds)

    def _share_threads(self) -> None:
        """Under cond, whenever a model's requests start or end: each busy model's share (room.py)."""
        records = self.roster.all()
        for record in records:
            if record.loaded is not None and record.users > 0:
                record.loaded.engine.wanted_threads = threads_for(record, records, self.settings)

