"""Running Responses: one ResponseRun per response being generated, shared by the threads
that care about it.

A run owns its event shaper (stream.ResponseEvents), the runtime job,
every event emitted so far (for followers of `GET /v1/responses/{id}?stream=true`) and the
writes to the store: the response when it starts, its events, the final response. Whoever
reads the job's events — a connection thread for a foreground request, a runner thread for
a background one — feeds them to the run; a cancel may come from any other thread. One
condition variable guards the run and wakes followers.

Store writes never raise out of a run: a failed write is logged, and a response left
queued/in_progress by a crash is marked failed when the store is next opened.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
import time
from typing import Any

from ...generation import ActiveGeneration, Finished
from .stream import Compaction, ResponseEvents

log = logging.getLogger("localserve.responses")

ACTIVE = ("queued", "in_progress")
STOPPED_MESSAGE = "the server stopped while this response was running"
RUNNER_POLL_SECONDS = 0.5


class ResponseRun:
    def __init__(self, plan: Any, gen: ActiveGeneration, store: Any, scope: str = ""):
        self.id = plan.response["id"]
        self.scope = scope                  # the store scope of the key that made it: only that key finds it
        self.plan = plan
        self.gen = gen
        self.store = store if plan.store else None
        self.shaper = ResponseEvents(plan.response, summary=plan.summary, parallel=plan.parallel_tool_calls,
                                     logprobs=plan.logprobs, tool_kinds=plan.tool_kinds, seal=plan.seal,
                                     compaction=Compaction(plan.compaction, plan.triggered, plan.seal_compaction,
                                                           plan.compaction_usage))
        self.events: list[dict] = []        # events[i]["sequence_number"] == i
        self.saved = 0                      # events already in the store
        self.cond = threading.Condition()
        self.done = False
        self.error_event: Finished | None = None   # a runtime error, for a plain request to re-raise

    @property
    def response(self) -> dict:
        return self.shaper.response

    # ---- the thread reading the job ---------------------------------------------------

    def begin(self) -> list[dict]:
        """Store the new response and publish its opening events."""
        with self.cond:
            events = self._publish(self.shaper.opening())
            self._save(lambda s: s.create_response(self.shaper.snapshot(), input_items=self.plan.input_items,
                                                   request=self.plan.request))
            self._flush()
            return events

    def feed(self, event: object) -> list[dict]:
        """One event from the job; returns the Responses events it made."""
        with self.cond:
            if self.done:
                return []
            if isinstance(event, Finished):
                events = self._finished(event)
            else:
                was = self.shaper.status
                events = self.shaper.feed(event)
                if was == "queued" and self.shaper.status == "in_progress":
                    self._save(lambda s: s.set_status(self.id, "in_progress", only_if_in=("queued",)))
            events = self._publish(events)
            if self.shaper.terminal:
                self._end()
        if self.shaper.terminal and not isinstance(event, Finished):
            self.gen.cancel((self.response.get("error") or {}).get("message", "the response ended"))
        return events

    def _finished(self, finished: Finished) -> list[dict]:
        if finished.error is not None:
            self.error_event = finished
            return self.shaper.fail(finished.error.message)
        output = finished.output
        if output.finish_reason == "cancelled":    # not through this run: the runtime stopped
            message = f"the generation was cancelled: {self.gen.cancel_reason}" if self.gen.cancelled \
                else STOPPED_MESSAGE
            return self.shaper.fail(message)
        return self.shaper.finish(output)

    # ---- other threads ------------------------------------------------------------------

    def cancel(self, reason: str) -> bool:
        """Stop the run: status cancelled, partial output kept. False when it had ended; its job
        is stopped either way (a run its stream failed has ended, failed, with its job running)."""
        with self.cond:
            ended = self.done
            if not ended:
                self._publish(self.shaper.cancel())
                self._end()
        self.gen.cancel(reason)
        return not ended

    def interrupt(self, message: str = STOPPED_MESSAGE) -> None:
        """The server is stopping: fail the run unless it has ended."""
        with self.cond:
            if self.done:
                return
            self._publish(self.shaper.fail(message))
            self._end()
        self.gen.cancel(message)

    def follow(self, after: int, timeout: float) -> tuple[list[dict], bool]:
        """Events with sequence_number > after (waiting up to timeout for some), and whether
        the run has ended."""
        with self.cond:
            if len(self.events) <= after + 1 and not self.done:
                self.cond.wait(timeout)
            return self.events[after + 1:], self.done

    # ---- inside the lock ----------------------------------------------------------------

    def _publish(self, events: list[dict]) -> list[dict]:
        if events:
            self.events.extend(events)
            self.cond.notify_all()
        return events

    def _end(self) -> None:
        """Record the final state: events first, so a replay always reaches the terminal event,
        then the response (never over a cancel), then the conversation's new items."""
        self._flush()
        response = self.shaper.snapshot()
        status = response["status"]
        written = self._save(lambda s: s.update_response(response, only_if_in=ACTIVE))
        if written is False and status != "cancelled":
            # cancelled meanwhile through the store alone: keep that status, add the output
            self._save(lambda s: s.update_response({**response, "status": "cancelled"}, only_if_in=("cancelled",)))
        if written and status in ("completed", "incomplete") and self.plan.conversation_id:
            items = self.plan.input_items + response["output"]
            self._save(lambda s: s.add_items(self.plan.conversation_id, items))
        self.done = True
        self.cond.notify_all()

    def _flush(self) -> None:
        pending = self.events[self.saved:]
        if pending and self._save(lambda s: s.append_events(self.id, pending)) is not None:
            self.saved = len(self.events)

    def _save(self, write: Any) -> Any:
        if self.store is None:
            return None
        try:
            result = write(self.store)
            return True if result is None else result
        except (sqlite3.Error, ValueError, TypeError, OverflowError) as exc:    # TypeError: orjson's encode error
            log.error("could not store response %s: %s", self.id, exc)
            return None


class ResponseRuns:
    """The runs in progress, by response id, and the threads running background ones."""

    def __init__(self) -> None:
        self._runs: dict[str, ResponseRun] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def add(self, run: ResponseRun) -> None:
        with self._lock:
            self._runs[run.id] = run

    def get(self, response_id: str, scope: str) -> ResponseRun | None:
        """The run of that id, if the key of `scope` made it (another key's is not found)."""
        with self._lock:
            run = self._runs.get(response_id)
        return run if run is not None and run.scope == scope else None

    def discard(self, run: ResponseRun) -> None:
        with self._lock:
            if self._runs.get(run.id) is run:
                del self._runs[run.id]

    def start_background(self, run: ResponseRun) -> None:
        thread = threading.Thread(target=self._drive, args=(run,), name=f"response-{run.id[-8:]}", daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _drive(self, run: ResponseRun) -> None:
        try:
            while not run.done:
                try:
                    event = run.gen.events.get(timeout=RUNNER_POLL_SECONDS)
                except queue.Empty:
                    continue
                run.feed(event)
        except Exception:
            log.exception("background response %s failed", run.id)
            run.interrupt("internal error while running the response")
        finally:
            self.discard(run)

    def drain(self, timeout: float) -> int:
        """Let background runs finish for up to `timeout` seconds (SIGTERM); how many are still going."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                alive = [t for t in self._threads if t.is_alive()]
            if not alive or time.monotonic() >= deadline:
                return len(alive)
            time.sleep(0.05)

    def close(self, timeout: float = 5.0) -> None:
        """Fail every run still going (the runtime has stopped) and wait for their threads."""
        with self._lock:
            runs, threads = list(self._runs.values()), list(self._threads)
        for run in runs:
            run.interrupt()
        for thread in threads:
            thread.join(timeout)
