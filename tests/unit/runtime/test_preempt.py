"""Editor completions park a running job (runtime/preempt.py), one runtime step at a time over the
scripted stand-in for the engine of test_runtime_step: which job is parked, what its sequence
becomes, and that it goes on from the very token it stopped at. The real engine runs it end to
end in tests/e2e/test_infill_preempt.py."""

from __future__ import annotations

from localserve.generation import ActiveGeneration
from localserve.runtime.jobs import Job, JobStatus, Slot
from localserve.runtime.outcome import finished_output
from localserve.runtime.runtime import Runtime

from .test_runtime_step import ScriptedEngine, ScriptedSequences, drained, request


class RecordingSequences(ScriptedSequences):
    """Saves and restores sequences as llama.cpp would be asked to, noting each call."""

    def __init__(self, calls: list, restores: bool):
        self.calls = calls
        self.restores = restores

    def save(self, seq_id):
        self.calls.append(("save", seq_id))
        return f"state of {seq_id}".encode()

    def restore(self, seq_id, state):
        self.calls.append(("restore", seq_id, state))
        return self.restores


class RecordingEngine(ScriptedEngine):
    """The scripted engine, its sequences' saves and restores noted in `calls`."""

    def __init__(self, answer=(10, 11, 12) * 20, restores=True):
        self.calls = []
        super().__init__(answer, RecordingSequences(self.calls, restores))


def editor(**kw):
    return request(prompt=(1, 3, 4), editor_completion=True, **kw)


def run_until_idle(rt, limit=200):
    for _ in range(limit):
        rt.step()
        rt.outbox.deliver()
        if not rt.scheduler.active() and not rt.parking.parked and not rt.scheduler.waiting:
            return
    raise AssertionError("the runtime did not settle")


def text_of(gen) -> str:
    return drained(gen)[-1].output.content


def test_an_editor_completion_parks_the_chat_which_resumes_at_its_next_token():
    engine = RecordingEngine()
    rt = Runtime(engine, slots=1, max_queue=4)
    chat = rt.submit(request(max_tokens=6))
    rt.step()
    rt.step()                               # the chat has written "a", "b"; "b" is not decoded yet
    job = rt.slots[0].job
    assert job.next_token == 11 and rt.slots[0].tokens == [1, 5, 6, 7, 10]
    completion = rt.submit(editor(max_tokens=1))
    rt.step()                               # the completion in the chat's slot, done in one step
    assert rt.parking.jobs == [job] and engine.calls == [("save", 0)]
    assert engine.batches[-1] == [(1, 0, 0, False), (3, 1, 0, False), (4, 2, 0, True)]   # the completion's prompt
    rt.step()                               # the chat is back, its "b" decoded next
    assert rt.slots[0].job is job and engine.calls[-1] == ("restore", 0, b"state of 0")
    assert engine.batches[-1] == [(11, 5, 0, True)]
    assert rt.slots[0].tokens == [1, 5, 6, 7, 10, 11]
    run_until_idle(rt)
    assert text_of(completion) == "a"
    assert text_of(chat) == "abcabc"        # as alone: the sampler went on where it was


def test_of_two_busy_slots_the_smaller_sequence_is_parked():
    rt = Runtime(RecordingEngine(), slots=2, max_queue=4)
    long_chat = rt.submit(request(prompt=(1, 5, 6, 7, 8, 9), max_tokens=50))
    short_chat = rt.submit(request(prompt=(1, 5), max_tokens=50))
    rt.step()
    completion = rt.submit(editor(max_tokens=2))
    rt.step()
    assert [j.gen for j in rt.parking.jobs] == [short_chat]
    assert {s.job.gen for s in rt.slots} == {long_chat, completion}


def test_a_queued_editor_completion_goes_before_queued_chats_and_the_parked_one_before_them():
    rt = Runtime(RecordingEngine(), slots=1, max_queue=4)
    first = rt.submit(request(max_tokens=50))
    rt.step()
    queued = rt.submit(request(prompt=(1, 9), max_tokens=1))
    completion = rt.submit(editor(max_tokens=2))
    rt.step()
    assert rt.slots[0].job.gen is completion and list(rt.scheduler.waiting) == [queued]
    rt.step()                               # the completion's last token
    rt.step()
    assert rt.slots[0].job.gen is first and list(rt.scheduler.waiting) == [queued]


def test_editor_completions_and_warm_ups_park_nothing():
    rt = Runtime(RecordingEngine(), slots=1, max_queue=4)
    running = rt.submit(editor(max_tokens=50))
    rt.step()
    rt.submit(editor(max_tokens=1))
    rt.step()
    assert rt.slots[0].job.gen is running and not rt.parking.parked
    rt = Runtime(RecordingEngine(), slots=1, max_queue=4)
    chat = rt.submit(request(max_tokens=50))
    rt.step()
    rt.submit(editor(max_tokens=0))
    rt.step()
    assert rt.slots[0].job.gen is chat and not rt.parking.parked


def test_a_sequence_that_cannot_be_restored_is_decoded_again():
    engine = RecordingEngine(restores=False)
    rt = Runtime(engine, slots=1, max_queue=4)
    chat = rt.submit(request(max_tokens=4))
    rt.step()
    rt.step()
    rt.submit(editor(max_tokens=1))
    rt.step()
    rt.step()
    assert engine.calls[-1][0] == "restore"
    assert engine.batches[-2] == [(1, 0, 0, False), (5, 1, 0, False), (6, 2, 0, False), (7, 3, 0, False),
                                  (10, 4, 0, False)]
    assert engine.batches[-1] == [(11, 5, 0, True)]
    run_until_idle(rt)
    assert text_of(chat) == "abca"


def test_a_parked_job_whose_client_left_ends_cancelled_and_its_slot_stays_with_the_completion():
    rt = Runtime(RecordingEngine(), slots=1, max_queue=4)
    chat = rt.submit(request(max_tokens=50))
    rt.step()
    completion = rt.submit(editor(max_tokens=3))
    rt.step()
    [job] = rt.parking.jobs
    chat.cancel("client went away")
    rt.step()
    rt.outbox.deliver()
    assert not rt.parking.parked and job.status is JobStatus.FINISHED
    assert drained(chat)[-1].output.finish_reason == "cancelled"
    assert rt.slots[0].job.gen is completion
    run_until_idle(rt)
    assert drained(completion)[-1].output.completion_tokens == 3


def test_what_the_completion_left_goes_to_the_ram_cache_for_the_next_keystroke():
    engine = RecordingEngine()
    rt = Runtime(engine, slots=1, max_queue=4, cache_bytes=1 << 20)
    rt.submit(request(max_tokens=50))
    rt.step()
    keystroke = [1] + [3] * 40
    rt.submit(request(prompt=keystroke, editor_completion=True, max_tokens=1))
    rt.step()
    rt.step()                               # the chat resumes: the completion's sequence is saved first
    assert [e.tokens for e in rt.cache.entries.values()] == [keystroke]
    assert engine.calls[-2:] == [("save", 0), ("restore", 0, b"state of 0")]
    rt.submit(request(prompt=keystroke + [4], editor_completion=True, max_tokens=1))
    rt.step()                               # the next keystroke parks the chat and finds its prefix
    assert engine.calls[-1] == ("restore", 0, b"state of 0") and rt.cache.hits == 1


def test_an_editor_completion_takes_the_free_slot_holding_its_last_keystroke():
    rt = Runtime(RecordingEngine(), slots=2, max_queue=4)
    rt.submit(request(max_tokens=1))
    run_until_idle(rt)                      # slot 0 holds a finished chat
    first = [1, 3, 4, 5, 6]
    rt.submit(request(prompt=first, editor_completion=True, max_tokens=1))
    run_until_idle(rt)                      # slot 1, the empty one, holds the first keystroke
    assert rt.slots[1].tokens[:len(first)] == first
    nxt = rt.submit(request(prompt=first + [7], editor_completion=True, max_tokens=2))
    rt.step()
    assert rt.slots[1].job.gen is nxt
    run_until_idle(rt)
    assert drained(nxt)[-1].output.cached_tokens == len(first)


def test_a_parked_job_counts_as_waiting_so_its_model_is_not_idle():
    rt = Runtime(RecordingEngine(), slots=1, max_queue=4)
    rt.submit(request(max_tokens=50))
    rt.step()
    rt.submit(editor(max_tokens=1))
    rt.step()                               # the completion ran and ended; the chat is still parked
    assert rt.busy_slots == 0 and rt.queue_depth == 1


def test_a_parked_jobs_timings_leave_its_pauses_out():
    """The clock is given: each pause counts apart (parked_ms), neither as prefill nor as decoding."""
    job = Job(ActiveGeneration(request(max_tokens=4)), Slot(0), sampler=None, n_cached=0, now=100.0)
    job.resume(job.park(101.0))
    job.resumed(105.0)                      # parked while prefilling: 4 s
    job.taking(10, 106.0)                   # its first token
    job.resume(job.park(110.0))
    job.resumed(130.0)                      # parked while decoding: 20 s
    t = finished_output(job, "length", 140.0).timings
    assert (t.prefill_ms, t.decode_ms, t.parked_ms) == (2000.0, 14000.0, 24000.0)
    job.park(150.0)                         # it ends while parked (its client left): that pause too
    t = finished_output(job, "cancelled", 153.0).timings
    assert (t.prefill_ms, t.decode_ms, t.parked_ms) == (2000.0, 24000.0, 27000.0)
