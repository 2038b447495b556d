"""Editor priority shared out fairly (runtime/fairness.py, asked by preempt.py): a job editor
completions keep going before is due after MAX_PREEMPTIONS_PER_JOB of them, after
MAX_PREEMPTED_SECONDS, or after one client's share; then it takes the next free slot first and is
not parked again until it ends. One runtime step at a time over the scripted engine of
test_runtime_step; the real engine floods /infill in tests/e2e/test_infill_fairness.py."""

from __future__ import annotations

import time
from types import SimpleNamespace

from localserve.generation import Finished
from localserve.runtime.fairness import MAX_PREEMPTED_SECONDS, MAX_PREEMPTIONS_PER_CLIENT, MAX_PREEMPTIONS_PER_JOB
from localserve.runtime import preempt
from localserve.runtime.runtime import Runtime

from .test_preempt import RecordingEngine, editor
from .test_runtime_step import drained, request


class Flood:
    """Editor completions of one token each, one submitted before every step while none waits:
    a new client each time (`client` None), or always the same one."""

    def __init__(self, rt: Runtime, client: str | None = None):
        self.rt = rt
        self.client = client
        self.sent = 0

    def step(self) -> None:
        if not any(gen.request.editor_completion for gen in self.rt.scheduler.waiting):
            self.sent += 1
            self.rt.submit(editor(max_tokens=1, client=self.client or f"client {self.sent}"))
        self.rt.step()
        self.rt.outbox.deliver()


def finished(gen, seen: list) -> Finished | None:
    """The job's Finished once it came (its events gathered into `seen` as they arrive)."""
    seen.extend(drained(gen))
    return next((e for e in seen if isinstance(e, Finished)), None)


def flood_until_finished(rt: Runtime, chat, flood: Flood, limit: int = 300) -> Finished:
    seen: list = []
    for _ in range(limit):
        flood.step()
        if (end := finished(chat, seen)) is not None:
            return end
    raise AssertionError(f"the chat never finished: {flood.sent} completions went on, "
                         f"{rt.parking.parks} parks, {rt.parking.resumes} resumes")


def test_a_flood_of_completions_from_new_clients_holds_a_chat_back_a_bounded_while():
    rt = Runtime(RecordingEngine(), slots=1, max_queue=4)
    chat = rt.submit(request(max_tokens=20))
    rt.step()
    flood = Flood(rt)
    end = flood_until_finished(rt, chat, flood)
    assert end.output.finish_reason == "length" and end.output.content == "abc" * 6 + "ab"
    # parked once, passed by the next ones, then back for good: completions went before it N times,
    # and one more waited behind it to its end
    assert rt.parking.parks == 1 and rt.parking.resumes == 1
    assert rt.parking.fairness.preemptions(chat) == MAX_PREEMPTIONS_PER_JOB
    assert flood.sent == MAX_PREEMPTIONS_PER_JOB + 1


def test_the_due_chat_takes_the_free_slot_before_the_next_completion_and_stays():
    rt = Runtime(RecordingEngine(), slots=1, max_queue=4)
    chat = rt.submit(request(max_tokens=50))
    rt.step()
    flood = Flood(rt)
    while not rt.parking.parked:
        flood.step()
    job = rt.parking.jobs[0]
    while rt.parking.parked:
        flood.step()
    assert rt.slots[0].job is job and rt.parking.fairness.preemptions(chat) == MAX_PREEMPTIONS_PER_JOB
    for _ in range(10):                         # completions queue behind it now; none parks it
        flood.step()
        assert rt.slots[0].job is job and not rt.parking.parked


def test_one_client_alone_has_a_share_of_the_preemptions_another_client_the_rest():
    rt = Runtime(RecordingEngine(), slots=1, max_queue=4)
    chat = rt.submit(request(max_tokens=50))
    rt.step()
    same = Flood(rt, client="vim 1")
    while not rt.parking.parked:
        same.step()
    while rt.parking.parked:
        same.step()
    assert rt.parking.fairness.preemptions(chat) == MAX_PREEMPTIONS_PER_CLIENT < MAX_PREEMPTIONS_PER_JOB
    for _ in range(5):
        same.step()
        assert not rt.parking.parked            # its client's share is spent: it waits for the chat
    rt.scheduler.take_all_waiting()
    other = rt.submit(editor(max_tokens=2, client="vscode 1"))
    rt.step()
    assert rt.parking.jobs[0].gen is chat and rt.slots[0].job.gen is other


def test_a_chat_parked_past_the_time_limit_is_due(monkeypatch):
    rt = Runtime(RecordingEngine(), slots=1, max_queue=4)
    chat = rt.submit(request(max_tokens=50))
    rt.step()
    flood = Flood(rt)
    flood.step()
    [job] = rt.parking.jobs
    flood.step()
    assert rt.parking.parked                    # one completion went before it: it waits on
    later = time.monotonic() + MAX_PREEMPTED_SECONDS      # the clock is given: parked that long
    monkeypatch.setattr(preempt, "time", SimpleNamespace(monotonic=lambda: later))
    flood.step()
    assert rt.slots[0].job is job and rt.parking.fairness.preemptions(chat) < MAX_PREEMPTIONS_PER_JOB


def test_a_queued_chat_is_not_jumped_forever():
    rt = Runtime(RecordingEngine(), slots=1, max_queue=4)
    rt.submit(editor(max_tokens=3, client="first"))
    rt.step()
    chat = rt.submit(request(max_tokens=5))     # queued behind the running completion
    flood = Flood(rt)
    end = flood_until_finished(rt, chat, flood)
    assert end.output.finish_reason == "length"
    assert rt.parking.fairness.preemptions(chat) == MAX_PREEMPTIONS_PER_JOB
    assert flood.sent == MAX_PREEMPTIONS_PER_JOB + 1


def test_slots_show_parks_resumes_and_a_parked_jobs_preemptions():
    rt = Runtime(RecordingEngine(), slots=1, max_queue=4)
    rt.submit(request(max_tokens=50))
    rt.step()
    flood = Flood(rt)
    flood.step()
    flood.step()
    state = rt.slot_state()
    assert (state["parks"], state["resumes"]) == (1, 0)
    assert state["parked"][0]["preemptions"] == 2
    while rt.parking.parked:
        flood.step()
    state = rt.slot_state()
    assert (state["parks"], state["resumes"]) == (1, 1) and state["parked"] == []
