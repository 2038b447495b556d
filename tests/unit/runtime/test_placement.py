"""The prefix-sharing chooser alone, without llama.cpp: which free slot a job takes when any
sequence's prefix can be copied into it, what is copied, and when a job waits for a head another
job is prefilling. The real engine runs the copies end to end in tests/e2e/test_prefix_sharing.py."""

from __future__ import annotations

from localserve.generation import ActiveGeneration, GenerationRequest, ImageChunk, placeholder_id
from localserve.runtime.jobs import Job, Slot
from localserve.runtime.placement import MIN_WAIT_TOKENS, Held, place, waits_for, whole_run
from localserve.runtime.promptcache import common_prefix
from localserve.runtime.scheduler import Scheduler, choose_slot

HEAD = list(range(100, 300))         # a 200-token system prompt shared by every conversation


def slot(seq_id, tokens=(), key=None, last_used=0.0) -> Slot:
    return Slot(seq_id, list(tokens), cache_key=key, last_used=last_used)


def held_by(slots, busy=()) -> list[Held]:
    return [Held(s.seq_id, s.tokens) for s in [*slots, *busy] if s.tokens]


def anything(src, n):
    return True


def chosen(free, prompt, busy=(), key=None, can_copy=anything):
    return place(free, held_by(free, busy), prompt, key, can_copy, lambda: choose_slot(free, prompt, key))


def test_a_head_held_by_a_busy_slot_is_copied_into_an_empty_one():
    busy = slot(0, HEAD + [1, 2, 3])
    free = [slot(1), slot(2)]
    p = chosen(free, HEAD + [7, 8], busy=[busy])
    assert (p.slot.seq_id, p.source, p.copied) == (1, 0, len(HEAD))


def test_a_small_share_of_a_busy_conversation_is_still_copied():
    """The issue's Responses turn: 22 of 60 tokens held by a busy slot, too few to claim it."""
    busy = slot(0, list(range(60)))
    p = chosen([slot(1)], list(range(22)) + [999] * 3 + [5], busy=[busy])
    assert (p.source, p.copied) == (0, 22)


def test_a_conversation_continued_keeps_its_own_slot_and_copies_nothing():
    mine = slot(0, HEAD + [1, 2, 3], last_used=5.0)
    p = chosen([mine, slot(1)], HEAD + [1, 2, 3, 4, 5])
    assert (p.slot.seq_id, p.source) == (0, None)


def test_a_recent_conversation_is_not_destroyed_for_a_prompt_sharing_its_head():
    """No empty slot: the slot whose loss costs least goes, not the one the prompt shares most with."""
    recent = slot(0, HEAD + list(range(500, 900)), last_used=9.0)     # 400 tokens of its own
    short = slot(1, HEAD + [1, 2], last_used=8.0)                     # two tokens of its own
    p = chosen([recent, short], HEAD + [3, 4])
    assert p.slot.seq_id == 1
    assert p.copied == 0 or p.source == 0       # its own head is as long as the other's: no copy needed


def test_the_slot_with_least_to_lose_goes_before_the_least_recently_used():
    """A prompt sharing the head: the older slot holds 400 tokens of a conversation no one else has,
    the newer one 2; handing the head to either costs nothing, so the newer one's 2 tokens go."""
    older = slot(0, HEAD + list(range(500, 900)), last_used=1.0)
    newer = slot(1, HEAD + [1, 2], last_used=8.0)
    assert chosen([older, newer], HEAD + [3, 4]).slot.seq_id == 1


def test_a_slot_whose_tokens_another_holds_too_loses_nothing_and_goes_first():
    original = slot(0, HEAD + [1, 2, 3], last_used=1.0)
    duplicate = slot(1, HEAD, last_used=9.0)                 # all of it is in slot 0 as well
    other = slot(2, list(range(900, 950)), last_used=0.0)    # older, but held nowhere else
    p = chosen([original, duplicate, other], list(range(600, 700)))
    assert p.slot.seq_id == 1


def test_the_copy_never_takes_the_prompts_last_token():
    busy = slot(0, HEAD + [1])
    p = chosen([slot(1)], HEAD, busy=[busy])
    assert p.copied == len(HEAD) - 1


def test_nothing_copyable_falls_back_to_todays_choice():
    busy = slot(0, HEAD + [1, 2, 3])
    free = [slot(1, [100, 101, 5, 5, 5, 5, 5, 5], last_used=1.0), slot(2, [9], last_used=0.0)]
    p = chosen(free, HEAD + [7], busy=[busy], can_copy=lambda src, n: False)
    assert p.source is None
    assert p.slot is choose_slot(free, HEAD + [7])


def test_a_holder_that_cannot_hand_its_prefix_on_leaves_the_offer_to_the_next():
    a = slot(0, HEAD + [1, 2, 3])
    b = slot(1, HEAD[:50] + [5])
    p = chosen([slot(2)], HEAD + [9], busy=[a, b], can_copy=lambda src, n: src != 0)
    assert (p.source, p.copied) == (1, 50)


def test_prompt_cache_key_takes_its_own_slot_and_is_handed_a_longer_head():
    keyed = slot(0, HEAD[:10] + [4, 4, 4], key="conv")
    busy = slot(1, HEAD + [1])
    p = chosen([keyed, slot(2)], HEAD + [8], busy=[busy], key="conv")
    assert (p.slot.seq_id, p.source, p.copied) == (0, 1, len(HEAD))


def test_a_copy_never_ends_inside_a_run_of_one_token():
    image = [7000] * 16         # an image: one placeholder id per position, computed whole
    prompt = HEAD + image + [1, 2]
    assert whole_run(prompt, len(HEAD) + 5) == len(HEAD)
    assert whole_run(prompt, len(HEAD) + 16) == len(HEAD) + 16
    prefilling = slot(0, HEAD + image[:5])      # a holder stopped inside the image
    assert chosen([slot(1)], prompt, busy=[prefilling]).copied == len(HEAD)


# ---- waiting for a head another job is prefilling -----------------------------------------------

def test_a_job_waits_for_a_long_head_another_is_prefilling():
    coming = Held(0, HEAD[:40], HEAD + [1, 2])
    assert waits_for(HEAD + [3, 4], [coming]) == (0, len(HEAD))
    almost = Held(0, HEAD[:-3], HEAD + [1, 2])     # a few tokens short: still worth the wait
    assert waits_for(HEAD + [3, 4], [almost]) == (0, len(HEAD))


def test_no_wait_for_a_short_head_or_one_already_held():
    short = Held(0, [], list(range(MIN_WAIT_TOKENS - 2)) + [1])
    assert waits_for(list(range(MIN_WAIT_TOKENS - 2)) + [2], [short]) is None
    done = Held(0, HEAD, HEAD + [1, 2])
    assert waits_for(HEAD + [3], [done]) is None
    idle = Held(1, HEAD[:-10])          # an idle slot holds nearly all of it: copy that, compute the rest
    assert waits_for(HEAD + [3], [Held(0, [], HEAD + [1]), idle]) is None


def gen(prompt) -> ActiveGeneration:
    return ActiveGeneration(GenerationRequest(prompt_tokens=list(prompt)))


def test_the_scheduler_admits_others_past_a_job_waiting_for_a_head_then_hands_it_over():
    s = Scheduler(slots=3, max_queue=8, can_copy=anything, wait_for_prefixes=True)
    first, second, unrelated = gen(HEAD + [1]), gen(HEAD + [2]), gen(list(range(900, 950)))
    for g in (first, second, unrelated):
        s.enqueue(g)
    got, placement = s.next_admission()
    assert got is first
    running = Job(got, placement.slot, sampler=None, n_cached=0)
    running.start()
    got, placement = s.next_admission()
    assert got is unrelated                 # the second waits for the head the first computes
    Job(got, placement.slot, sampler=None, n_cached=0).start()
    assert s.next_admission() is None and list(s.waiting) == [second]
    plan = s.plan([running], n_batch=512)   # the first's prefill pauses where the shared head ends
    assert [row.n_tokens for row in plan.rows] == [len(HEAD)]
    running.decoded(len(HEAD))              # the first has prefilled the shared head
    got, placement = s.next_admission()
    assert got is second
    assert (placement.source, placement.copied, placement.waited) == (running.slot.seq_id, len(HEAD), True)


def test_with_sharing_off_nothing_waits_and_nothing_is_copied():
    s = Scheduler(slots=2, max_queue=8)
    first, second = gen(HEAD + [1]), gen(HEAD + [2])
    s.enqueue(first)
    s.enqueue(second)
    got, placement = s.next_admission()
    Job(got, placement.slot, sampler=None, n_cached=0).start()
    got, placement = s.next_admission()
    assert got is second and placement.source is None


def test_common_prefix_finds_the_first_difference_anywhere():
    import random
    rng = random.Random(7)
    for _ in range(300):
        a = [rng.randrange(3) for _ in range(rng.randrange(40))]
        b = a[:rng.randrange(len(a) + 1)] + [rng.randrange(3) for _ in range(rng.randrange(10))]
        expected = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        assert common_prefix(a, b) == expected == common_prefix(b, a) == common_prefix(tuple(a), b)


class Model:
    def __init__(self, blocker):
        self.copy_blocker = blocker

    def can_copy(self, src, n):
        return True


def test_a_model_that_cannot_copy_says_so_once_and_nothing_is_shared(caplog):
    import logging
    from localserve.engine.prefix_copy import SHARING_OFF
    from localserve.runtime.kvslots import PrefixSharing
    with caplog.at_level(logging.INFO, logger="localserve.runtime"):
        recurrent = PrefixSharing(Model("its recurrent state cannot be copied in part"))
        off = PrefixSharing(Model(SHARING_OFF))
        on = PrefixSharing(Model(None))
    said = [r.getMessage() for r in caplog.records if "prefix sharing is off for this model" in r.getMessage()]
    assert len(said) == 1 and "recurrent" in said[0]
    assert (recurrent.on, recurrent.can_copy, off.on, off.can_copy) == (False, None, False, None)
    assert on.on and on.can_copy is not None


class MropeImage:
    """An image's engine chunk as an M-RoPE model has it: 16 tokens in 4 positions."""
    n_tokens, n_pos = 16, 4
    audio = False


def test_a_head_with_an_image_is_offered_whole_and_asked_for_in_positions():
    image = ImageChunk(len(HEAD), 16, "ab" * 32, MropeImage())
    tokens = HEAD + [placeholder_id(image.digest)] * 16

    def with_image(*rest):
        return ActiveGeneration(GenerationRequest(prompt_tokens=tokens + list(rest), images=[image]))

    asked = []
    s = Scheduler(slots=3, max_queue=8, can_copy=lambda src, n: asked.append(n) or True)
    s.enqueue(with_image(1, 2, 3))
    got, placement = s.next_admission()
    holder = Job(got, placement.slot, sampler=None, n_cached=0)
    holder.start()
    holder.decoded(len(HEAD) + 5)           # the image decoded in part: the head before it is all it holds
    assert s.held()[0].tokens == HEAD
    s.enqueue(with_image(1, 9))
    got, placement = s.next_admission()
    Job(got, placement.slot, sampler=None, n_cached=0).start()
    assert (placement.source, placement.copied, asked[-1]) == (0, len(HEAD), len(HEAD))
    holder.decoded(11 + 1)                  # the image whole, and one token past it
    s.enqueue(with_image(1, 7))
    _, placement = s.next_admission()
    # 217 tokens, the image's 16 in 4 positions: the sequence is asked for 205
    assert (placement.source, placement.copied, asked[-1]) == (0, len(HEAD) + 17, len(HEAD) + 5)


def test_a_job_taken_out_of_its_turn_is_no_longer_counted_as_waiting_for_a_head():
    """An editor completion withdrawn from the queue (preempt.py) while it waited for a head."""
    s = Scheduler(slots=2, max_queue=8, can_copy=anything, wait_for_prefixes=True)
    first, editor = gen(HEAD + [1]), gen(HEAD + [2])
    s.enqueue(first)
    s.enqueue(editor)
    got, placement = s.next_admission()
    Job(got, placement.slot, sampler=None, n_cached=0).start()
    assert s.next_admission() is None and id(editor) in s.prefix_waiters
    s.withdraw(editor)
    assert not s.prefix_waiters and not s.waiting


# ---- scopes: one API key's prompts are no other key's cache (issue 44) ------------------------

def test_a_prefix_held_for_another_scope_is_neither_copied_nor_continued():
    theirs = Slot(0, HEAD + [1, 2], scope="victim")
    free = [theirs, slot(1)]
    held = [Held(0, theirs.tokens, scope="victim")]
    p = place(free, held, HEAD + [1, 3], None, anything, lambda: choose_slot(free, HEAD + [1, 3], None, "attacker"),
              "attacker")
    assert p.source is None and p.copied == 0
    assert theirs.shared_with(HEAD + [1, 3], "attacker") == 0
    mine = place(free, held, HEAD + [1, 3], None, anything, lambda: choose_slot(free, HEAD + [1, 3], None, "victim"),
                 "victim")
    assert (mine.source, mine.copied) == (0, len(HEAD) + 1)     # its own scope's sequence is copied


def test_a_job_never_waits_for_another_scopes_head():
    coming = Held(0, HEAD[:40], HEAD + [1, 2], scope="victim")
    assert waits_for(HEAD + [3, 4], [coming], "attacker") is None
    assert waits_for(HEAD + [3, 4], [coming], "victim") == (0, len(HEAD))


def test_a_choice_waits_for_its_siblings_head_however_short():
    """OpenAI's n: the choices of one request compute their prompt once, even a short one."""
    prompt = list(range(10))
    sibling = Held(0, [], prompt, group="req-1")
    assert waits_for(prompt, [sibling], group="req-1") == (0, len(prompt) - 1)
    assert waits_for(prompt, [sibling], group="req-2") is None       # another request's: too short to wait for
    assert waits_for(prompt, [Held(0, [], prompt)], group="req-1") is None
    done = Held(0, prompt[:-1], prompt, group="req-1")               # its head is whole: copy it now
    assert waits_for(prompt, [done], group="req-1") is None
