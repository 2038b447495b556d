"""The scheduler's rules alone, without llama.cpp: admission and the queue limit, slot choice
(prompt_cache_key affinity, prefix reuse, empty before least recently used), the batch plan with
chunked prefill, and which jobs a cancel ends. Jobs here never run: the scheduler only plans
them; the runtime and the real engine are covered end to end (test_batching, test_cancel)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from localserve.generation import ActiveGeneration, GenerationRequest
from localserve.runtime.jobs import Job, JobStatus, PendingChoice, Slot
from localserve.runtime.scheduler import (SHARED_PREFILL_CHUNK, QueueFull, RuntimeStopped, Scheduler,
                                          choose_slot, plan_batch)

ROOT = Path(__file__).resolve().parents[3]


def gen(prompt, key=None) -> ActiveGeneration:
    return ActiveGeneration(GenerationRequest(prompt_tokens=list(prompt), cache_key=key))


def admitted(scheduler: Scheduler, prompt, n_cached=0, seq_id=None) -> Job:
    """A job in a slot, as the runtime leaves it after admission (no sampler: it never samples here)."""
    slot = scheduler.slots[seq_id] if seq_id is not None else next(s for s in scheduler.slots if s.job is None)
    job = Job(gen(prompt), slot, sampler=None, n_cached=n_cached)
    job.start()
    return job


def decoding(scheduler: Scheduler, prompt, next_token: int) -> Job:
    job = admitted(scheduler, prompt, n_cached=len(prompt))
    job.reached_choice()
    job.chose(next_token)
    return job


# ---- the queue and admission ------------------------------------------------------------

def test_queue_limit_counts_the_jobs_free_slots_will_take_at_once():
    s = Scheduler(slots=2, max_queue=1)
    for _ in range(3):                      # two go straight to free slots, one waits
        s.enqueue(gen([1, 2]))
    with pytest.raises(QueueFull):
        s.enqueue(gen([1, 2]))
    assert len(s.waiting) == 3


def test_a_stopping_scheduler_takes_nothing():
    s = Scheduler(slots=1, max_queue=4)
    s.stopping = True
    with pytest.raises(RuntimeStopped):
        s.enqueue(gen([1]))
    assert not s.waiting


def test_admission_in_order_into_free_slots_then_none():
    s = Scheduler(slots=2, max_queue=4)
    first, second, third = gen([1]), gen([2]), gen([3])
    for g in (first, second, third):
        s.enqueue(g)
    got, placement = s.next_admission()
    slot = placement.slot
    assert got is first and slot.job is None
    Job(got, slot, sampler=None, n_cached=0).start()
    got, placement = s.next_admission()
    slot2 = placement.slot
    assert got is second and slot2 is not slot
    Job(got, slot2, sampler=None, n_cached=0).start()
    assert s.next_admission() is None       # no slot free: the third keeps its place
    assert list(s.waiting) == [third]


def test_a_cancelled_waiting_job_is_handed_back_without_a_slot():
    s = Scheduler(slots=1, max_queue=4)
    left = gen([1])
    s.enqueue(left)
    left.cancel("client left")
    assert s.next_admission() == (left, None)


def test_jobs_that_left_the_queue_give_their_places_back_and_the_rest_keep_their_order():
    s = Scheduler(slots=1, max_queue=8)
    Job(gen([9]), s.slots[0], sampler=None, n_cached=0).start()   # busy: everyone waits
    gens = [gen([i]) for i in range(5)]
    for g in gens:
        s.enqueue(g)
    gens[1].cancel()
    gens[3].cancel()
    assert s.drop_cancelled_waiting() == [gens[1], gens[3]]
    assert list(s.waiting) == [gens[0], gens[2], gens[4]]
    assert s.drop_cancelled_waiting() == []


# ---- slot choice -----------------------------------------------------------------------

def slot(seq_id, tokens=(), key=None, last_used=0.0) -> Slot:
    return Slot(seq_id, list(tokens), cache_key=key, last_used=last_used)


def test_a_slot_whose_sequence_the_prompt_continues_is_chosen():
    free = [slot(0, [7, 7, 7, 7]), slot(1, [1, 2, 3, 4]), slot(2)]
    assert choose_slot(free, [1, 2, 3, 4, 5]).seq_id == 1


def test_a_few_shared_template_tokens_do_not_claim_another_conversations_slot():
    free = [slot(0, [1, 2, 3, 4, 5, 6, 7, 8]), slot(1)]       # shares 2 of 8: less than half
    assert choose_slot(free, [1, 2, 9, 9]).seq_id == 1        # the empty slot, not slot 0


def test_with_no_empty_slot_the_least_recently_used_is_taken():
    free = [slot(0, [5, 5], last_used=20.0), slot(1, [6, 6], last_used=10.0), slot(2, [8, 8], last_used=30.0)]
    assert choose_slot(free, [1, 2, 3]).seq_id == 1


def test_prompt_cache_key_takes_its_slot_back_even_when_the_history_was_rewritten():
    free = [slot(0, [1, 2, 3, 4, 5, 6, 7, 8], key="conv-a"), slot(1, [1, 2, 3, 4, 5, 6, 7, 9], key="conv-b")]
    # without the key the longer shared prefix (slot 1) would win; the key names slot 0
    assert choose_slot(free, [1, 2, 3, 4, 5, 6, 7, 9, 10], key="conv-a").seq_id == 0
    assert choose_slot(free, [1, 2, 3, 4, 5, 6, 7, 9, 10]).seq_id == 1
    # a key whose slot shares nothing at all does not claim it
    assert choose_slot([slot(0, [4, 4], key="k"), slot(1)], [1, 2], key="k").seq_id == 1


# ---- the batch plan ----------------------------------------------------------------------

def test_a_prompt_alone_is_fed_a_whole_batch_at_a_time_and_only_its_last_token_is_sampled():
    s = Scheduler(slots=1, max_queue=1)
    job = admitted(s, range(100, 400))
    plan = plan_batch([job], n_batch=256)
    assert len(plan.entries) == 256 and plan.prefill_jobs == [job]
    assert plan.entries[0] == (100, 0, 0, False) and plan.entries[-1] == (355, 255, 0, False)
    assert [(r.job, r.logits_row, r.n_tokens) for r in plan.rows] == [(job, None, 256)]
    job.decoded(256)
    plan = plan_batch([job], n_batch=256)
    assert len(plan.entries) == 44 and plan.entries[-1] == (399, 299, 0, True)
    assert [(r.logits_row, r.n_tokens) for r in plan.rows] == [(43, 44)]


def test_decoding_jobs_come_first_and_a_prompt_beside_them_is_fed_in_small_chunks():
    s = Scheduler(slots=3, max_queue=1)
    a = decoding(s, [1, 2, 3], next_token=50)
    b = decoding(s, [4, 5], next_token=60)
    long_prompt = admitted(s, range(1000))
    plan = plan_batch([long_prompt, a, b], n_batch=512)
    assert plan.entries[:2] == [(50, 3, a.slot.seq_id, True), (60, 2, b.slot.seq_id, True)]
    assert [(r.job, r.logits_row, r.n_tokens) for r in plan.rows] == [
        (a, 0, 1), (b, 1, 1), (long_prompt, None, SHARED_PREFILL_CHUNK)]
    assert len(plan.entries) == 2 + SHARED_PREFILL_CHUNK


def test_prefill_resumes_from_the_cached_prefix():
    s = Scheduler(slots=1, max_queue=1)
    job = admitted(s, [10, 11, 12, 13, 14], n_cached=3)
    plan = plan_batch([job], n_batch=64)
    assert plan.entries == [(13, 3, 0, False), (14, 4, 0, True)]


def test_prompts_share_what_is_left_of_the_batch_and_one_that_does_not_fit_waits():
    s = Scheduler(slots=3, max_queue=1)
    first, second, third = admitted(s, range(50)), admitted(s, range(50)), admitted(s, range(50))
    plan = plan_batch([first, second, third], n_batch=80)
    assert [(r.job, r.n_tokens, r.logits_row) for r in plan.rows] == [(first, 50, 49), (second, 30, None)]
    assert plan.prefill_jobs == [first, second] and len(plan.entries) == 80
    assert plan.jobs == [first, second, third]      # the third is still the step's: a decode failure fails it too


# ---- cancels --------------------------------------------------------------------------

def test_cancelled_jobs_are_ended_before_the_step_and_a_cancel_aborts_a_prompt_chunk():
    s = Scheduler(slots=2, max_queue=1)
    running = decoding(s, [1, 2], next_token=5)
    prefilling = admitted(s, range(300))
    plan = s.plan(s.runnable(), n_batch=64)
    abort = plan.abort_check()
    assert s.cancelled() == [] and abort() is False
    prefilling.gen.cancel("client left")
    assert abort() is True and s.cancelled() == [prefilling]
    assert plan_batch([running], n_batch=64).abort_check() is None     # only tokens: nothing long to stop


def test_a_job_waiting_on_its_grammar_sample_sits_out_of_the_batch():
    s = Scheduler(slots=2, max_queue=1)
    busy = decoding(s, [1], next_token=3)
    busy.awaits(PendingChoice(object(), None, None, [], None))     # its token is being chosen off-thread
    other = decoding(s, [2], next_token=4)
    assert s.runnable() == [other]


def test_the_scheduler_loads_no_llama_cpp():
    code = ("import sys, localserve.runtime.scheduler; "
            "assert not [m for m in sys.modules if m.startswith(('llama_cpp', 'localserve.engine'))], "
            "sorted(sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_slot_of_another_scope_continues_nothing():
    theirs = Slot(0, [1, 2, 3, 4], scope="victim")
    assert choose_slot([theirs, slot(1)], [1, 2, 3, 4, 5], scope="attacker").seq_id == 1
    assert choose_slot([theirs, slot(1)], [1, 2, 3, 4, 5], scope="victim").seq_id == 0
    keyed = Slot(0, [1, 2, 3, 4], cache_key="conv", scope="victim")      # a prompt_cache_key claims nothing across
    assert choose_slot([keyed, slot(1)], [1, 2, 9], key="conv", scope="attacker").seq_id == 1


def test_admission_places_a_job_by_sequences_of_its_own_scope_only():
    s = Scheduler(2, 8, can_copy=lambda seq_id, n: True, wait_for_prefixes=True)
    s.slots[0].holds(list(range(50)))
    s.slots[0].belongs_to("victim")
    s.enqueue(ActiveGeneration(GenerationRequest(list(range(50)) + [99], scope="attacker")))
    _, placement = s.next_admission()
    assert (placement.slot.seq_id, placement.source, placement.copied) == (1, None, 0)
    s.enqueue(ActiveGeneration(GenerationRequest(list(range(50)) + [99], scope="victim")))
    _, placement = s.next_admission()
    assert placement.slot.seq_id == 0 and placement.copied == 0      # its own slot, continued in place


def test_a_job_pinned_to_a_slot_takes_that_slot_and_waits_while_it_is_busy():
    s = Scheduler(slots=3, max_queue=8)
    s.slots[2].holds([1, 2, 3])           # the slot any job with this prompt would choose
    pinned = ActiveGeneration(GenerationRequest(prompt_tokens=[1, 2, 3, 4], slot_id=1))
    s.enqueue(pinned)
    got, placement = s.next_admission()
    assert got is pinned and placement.slot is s.slots[1]
    busy = admitted(s, [9], seq_id=1)
    again = ActiveGeneration(GenerationRequest(prompt_tokens=[5], slot_id=4))      # 4 wraps to slot 1
    other = gen([6])
    s.enqueue(again)
    s.enqueue(other)
    got, placement = s.next_admission()           # the pinned job waits; the one behind it goes on
    assert got is other and placement.slot is not s.slots[1]
    assert s.next_admission() is None and list(s.waiting) == [again]
    busy.end()
    got, placement = s.next_admission()
    assert got is again and placement.slot is s.slots[1]


def test_a_requests_choices_are_queued_all_or_none():
    s = Scheduler(slots=2, max_queue=2)
    s.enqueue_all([gen([1]) for _ in range(4)])         # two take slots at once, two wait
    with pytest.raises(QueueFull):
        s.enqueue_all([gen([1])])
    s = Scheduler(slots=2, max_queue=2)
    s.enqueue(gen([1]))
    with pytest.raises(QueueFull):
        s.enqueue_all([gen([1]) for _ in range(4)])       # three would fit, four do not: none is queued
    assert len(s.waiting) == 1


def test_choices_wait_for_the_first_ones_prompt_and_copy_it():
    """n = 3 on a short prompt: the first choice prefills, the others wait for its head (all but
    the last token), then each copies it and decodes only its last prompt token."""
    s = Scheduler(slots=4, max_queue=8, can_copy=lambda seq_id, n: True, wait_for_prefixes=True)
    prompt = list(range(20, 30))
    choices = [ActiveGeneration(GenerationRequest(list(prompt), choice_group="g")) for _ in range(3)]
    s.enqueue_all(choices)
    first, placement = s.next_admission()
    assert first is choices[0] and placement.source is None
    job = Job(first, placement.slot, sampler=None, n_cached=0)
    job.start()
    assert s.next_admission() is None                     # the siblings wait for its head
    assert s.stops == {placement.slot.seq_id: len(prompt) - 1}
    plan = s.plan(s.runnable(), n_batch=64)
    assert plan.rows[0].n_tokens == len(prompt) - 1      # its prefill pauses where the head ends
    job.decoded(plan.rows[0].n_tokens)
    for sibling in choices[1:]:
        got, copy = s.next_admission()
        assert got is sibling and copy.copied == len(prompt) - 1 and copy.waited
        Job(got, copy.slot, sampler=None, n_cached=copy.copied).start()
    assert [row.n_tokens for row in s.plan(s.runnable(), n_batch=64).rows] == [1, 1, 1]
