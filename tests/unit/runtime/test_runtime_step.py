"""One runtime step at a time, the runtime thread not started, over a scripted stand-in for the
engine (each prompt token decodes to nothing, the sampler answers a scripted token list): a
job's status through its life, and every event of a step, those of jobs that never got a slot
included, going out together after the step. The real engine runs these paths end to end in
test_batching, test_cancel and test_hostile_requests."""

from __future__ import annotations

import threading

import numpy as np

from localserve.engine.engine import GrammarError
from localserve.generation import ActiveGeneration, Chunk, Context, GenerationRequest, InvalidGrammar, SamplingParams
from localserve.runtime.admission import Admitted
from localserve.runtime.jobs import JobStatus
from localserve.runtime.runtime import Runtime

EOS = 2
TEXT = {10: b"a", 11: b"b", 12: b"c"}


class ScriptedSampler:
    has_grammar = False
    grammar_asleep = False

    def __init__(self, tokens):
        self.tokens = list(tokens)

    def sample(self, row):
        return self.tokens.pop(0)

    def accept(self, token):
        pass

    def free(self):
        pass


class ScriptedSequences:
    """What the runtime calls on the KV cache's sequences (engine/sequences.py): every call succeeds."""
    copy_blocker = "--no-prefix-sharing"     # the scripted cache holds nothing to share (prefix_copy.SHARING_OFF)
    n_swa = 0                                   # no sliding window: no checkpoints (swa_checkpoints.py)

    def remove(self, seq_id, start=0, end=-1):
        return True

    def length(self, seq_id):
        return 0

    def can_extend(self, seq_id, keep):
        return True

    def save(self, seq_id):
        return b""

    def restore(self, seq_id, state):
        return True


class ScriptedEngine:
    """What the runtime calls on the engine, answering from a script; it records each batch, and
    the LoRA adapter set it ran under."""
    n_batch = 64
    n_ctx_seq = 256
    lora = None

    def __init__(self, answer=(10, 11, 12), sequences=None):
        self.answer = answer
        self.batches = []
        self.adapter_sets = []      # each batch's
        self.adapters = ()
        self.sequences = sequences or ScriptedSequences()

    def use_adapters(self, adapters):
        self.adapters = adapters

    def decode(self, entries, abort_check=None):
        self.batches.append(list(entries))
        self.adapter_sets.append(self.adapters)

    def new_sampler(self, params: SamplingParams):
        if params.grammar == "bad":
            raise GrammarError("the grammar could not be parsed")
        return ScriptedSampler(self.answer)

    def logits(self, row):
        return np.zeros(16, dtype=np.float32)

    def threads_json(self) -> dict:
        """/slots' threads, as Engine.threads_json shapes them: one thread, pinned, no pool."""
        return {"in_use": 1, "most": 1, "adaptive": False, "pool": None}

    def piece(self, token):
        return TEXT.get(token, b"")

    def is_eog(self, token):
        return token == EOS


def drained(gen) -> list:
    events = []
    while not gen.events.empty():
        events.append(gen.events.get_nowait())
    return events


def request(prompt=(1, 5, 6, 7), **kw) -> GenerationRequest:
    return GenerationRequest(prompt_tokens=list(prompt), **kw)


def test_a_job_goes_prefilling_decoding_finished_and_its_events_leave_after_each_step():
    engine = ScriptedEngine()
    rt = Runtime(engine, slots=1, max_queue=4)
    gen = rt.submit(request(max_tokens=2))
    assert drained(gen) == []                               # nothing is said before a step
    rt.step()
    job = rt.slots[0].job
    assert job.status is JobStatus.DECODING and job.next_token == 10
    assert engine.batches[0] == [(1, 0, 0, False), (5, 1, 0, False), (6, 2, 0, False), (7, 3, 0, True)]
    assert drained(gen) == [], "an event went out in the middle of the step"
    rt.outbox.deliver()
    first = drained(gen)
    assert [type(e) for e in first] == [Context, Chunk, Context] and first[1].text == "a"
    rt.step()                                               # the second token: max_tokens
    assert engine.batches[1] == [(10, 4, 0, True)]
    assert job.status is JobStatus.FINISHED and rt.slots[0].job is None
    assert rt.slots[0].tokens == [1, 5, 6, 7, 10]           # the slot keeps what its cache holds
    assert drained(gen) == []
    rt.outbox.deliver()
    *chunks, end = drained(gen)
    assert [c.text for c in chunks] == ["b"] and end.output.finish_reason == "length"
    assert end.output.content == "ab"


def test_a_job_cancelled_while_queued_hears_so_after_the_step():
    rt = Runtime(ScriptedEngine(), slots=1, max_queue=4)
    running = rt.submit(request(max_tokens=50))
    left = rt.submit(request(max_tokens=50))
    left.cancel("client left")
    rt.step()
    assert drained(left) == [], "the cancelled job's end went out in the middle of the step"
    rt.outbox.deliver()
    [end] = drained(left)
    assert end.output.finish_reason == "cancelled" and not rt.scheduler.waiting
    assert rt.slots[0].job.gen is running


def test_an_invalid_grammar_fails_its_job_alone_after_the_step():
    rt = Runtime(ScriptedEngine(), slots=2, max_queue=4)
    bad = rt.submit(request(sampling=SamplingParams(grammar="bad")))
    good = rt.submit(request(max_tokens=50))
    rt.step()
    assert drained(bad) == [] and drained(good) == []
    rt.outbox.deliver()
    [end] = drained(bad)
    assert isinstance(end.error, InvalidGrammar)     # the dialects answer it 400 invalid_grammar
    assert [s.job.gen for s in rt.slots if s.job] == [good] and drained(good)


def test_a_sequence_left_in_a_slot_skips_that_much_prefill_next_time():
    engine = ScriptedEngine(answer=(10, EOS))
    rt = Runtime(engine, slots=1, max_queue=4)
    rt.submit(request(prompt=(1, 5, 6, 7), max_tokens=5))
    rt.step()
    rt.step()                                               # EOS: the job ends, the slot keeps 1 5 6 7 10
    rt.outbox.deliver()
    gen = rt.submit(request(prompt=(1, 5, 6, 7, 10, 8, 9), max_tokens=1))
    rt.step()                                               # its one token: max_tokens
    assert engine.batches[-1] == [(8, 5, 0, False), (9, 6, 0, True)]
    rt.outbox.deliver()
    assert drained(gen)[-1].output.cached_tokens == 5


class ScriptedGrammarSampler(ScriptedSampler):
    """As a grammar job's sampler: its tokens are chosen off the runtime thread; it notes on which."""
    has_grammar = True

    def __init__(self, tokens):
        super().__init__(tokens)
        self.threads = set()        # the Thread objects themselves: an ident can be reused by a new thread

    def load(self, row):
        pass

    def choose(self):
        self.threads.add(threading.current_thread())
        return self.tokens.pop(0)


def test_a_grammar_job_s_tokens_are_chosen_on_one_thread_for_its_whole_life():
    engine = ScriptedEngine()
    sampler = ScriptedGrammarSampler([10, 11, 12] * 700)
    engine.new_sampler = lambda params: sampler
    engine.n_ctx_seq = 4096
    rt = Runtime(engine, slots=1, max_queue=4)
    threads_before = threading.active_count()
    gen = rt.submit(request(max_tokens=2000, sampling=SamplingParams(grammar='root ::= "abc"+')))
    for _ in range(20000):
        rt.step()
        rt.outbox.deliver()
        if rt.slots[0].job is None:
            break
        assert threading.active_count() <= threads_before + 1
    end = drained(gen)[-1]
    assert end.output.completion_tokens == 2000
    assert len(sampler.threads) == 1 and threading.main_thread() not in sampler.threads
    [worker] = sampler.threads
    worker.join(5)
    assert not worker.is_alive(), "the job's sample thread outlived the job"


def test_a_job_started_in_a_slot_chosen_elsewhere_starts_with_its_own_prefix():
    """A slot picked outside admission (an editor's preemption) starts a job with no placement."""
    rt = Runtime(ScriptedEngine(), slots=1, max_queue=4)
    gen = ActiveGeneration(GenerationRequest(prompt_tokens=[1, 2, 3]))
    admitted = Admitted()
    rt.admission._start(gen, rt.slots[0], None, admitted)
    assert [g for g, _ in admitted.started] == [gen]
    assert rt.slots[0].job is not None and rt.slots[0].job.progress.n_cached == 0
    assert rt.kv.prefix_json(0) == {"tokens": 0, "source": "own", "slot": None}


def test_a_cancelled_job_logs_its_prompt_share_of_the_cache_not_its_written_tokens_too(caplog):
    engine = ScriptedEngine(answer=(10, 11, 12, 13, 14, 15))
    rt = Runtime(engine, slots=1, max_queue=4)
    gen = rt.submit(request(prompt=(1, 5, 6, 7), max_tokens=50))
    for _ in range(4):
        rt.step()
    gen.cancel("client left")
    with caplog.at_level("INFO", logger="localserve"):
        rt.step()
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cancelled job")]
    assert "(4 of 4 prompt tokens in the cache)" in line, line
