"""Drafting from a scope's earlier outputs (runtime/earlier_outputs.py): where a job departs from its
prompt as an earlier answer did, that answer drafts; another scope's answers never do; what is
kept is bounded. The figures are in docs/performance.rst."""

from __future__ import annotations

from localserve.runtime import earlier_outputs
from localserve.runtime.earlier_outputs import EARLIER_MATCH, EARLIER_OUTPUTS, EarlierOutputs, ScopedOutputs
from localserve.runtime.runtime import Runtime
from localserve.runtime.speculative import JobDrafts, Speculator

from .test_drafting_edits import Text
from .test_runtime_step import ScriptedEngine, request

FILE = list(range(100, 160))            # the file the prompt holds
RENAMED = list(range(200, 210))         # what an earlier answer wrote in place of FILE[20:30]
ANSWER = FILE[:20] + RENAMED + FILE[30:]


def test_an_earlier_answer_drafts_where_the_output_departs_from_the_file_as_it_did():
    earlier = EarlierOutputs()
    earlier.add(ANSWER)
    drafts = JobDrafts(FILE, None, Text(), draft_max=8, earlier=earlier)
    alone = JobDrafts(FILE, None, Text(), draft_max=8)
    written = FILE[:20]
    # the copy holds: the file drafts what follows there, as it would without earlier answers
    assert drafts.lookup(written, 8) == alone.lookup(written, 8) == FILE[20:28]
    written = FILE[:20] + RENAMED[:2]       # the departure: the file has no such place
    assert alone.lookup(written, 8) == []
    assert drafts.lookup(written, 8) == RENAMED[2:10]
    written = ANSWER[:30]                   # back in the file, the copy just found there again
    assert drafts.lookup(written, 8) == FILE[30:38]


class Asked(EarlierOutputs):
    """Earlier answers that count the lookups asked of them."""
    def __init__(self):
        super().__init__()
        self.asked = 0

    def follow(self, tail, limit):
        self.asked += 1
        return super().follow(tail, limit)


def test_where_an_earlier_answer_parted_from_the_copy_followed_it_drafts_until_it_is_refused_there():
    earlier = Asked()
    earlier.add(FILE[:20] + [300, 301, 302, 303, 304] + FILE[20:])
    drafts = JobDrafts(FILE, None, Text(), draft_max=4, earlier=earlier)
    assert drafts.lookup(FILE[:10], 3) == FILE[10:13]          # the copy found; the earlier answer agrees
    drafts.record(3, 3)
    assert drafts.lookup(FILE[:14], 3) == FILE[14:17]          # followed on; the earlier answer agrees
    drafts.record(3, 3)
    assert drafts.lookup(FILE[:18], 3) == [FILE[18], FILE[19], 300]     # it parts from the copy: it drafts
    drafts.record(3, 2)                                         # refused where it parted: the output copies
    asked = earlier.asked
    assert drafts.lookup(FILE[:21], 3) == FILE[21:24]
    assert earlier.asked == asked                               # and the earlier answer is not asked again
    trusting = JobDrafts(FILE, None, Text(), draft_max=4, earlier=earlier)
    trusting.lookup(FILE[:14], 3)
    assert trusting.lookup(FILE[:18], 3) == [FILE[18], FILE[19], 300]
    trusting.record(3, 3)                                       # accepted: the output departs as it did
    assert trusting.lookup(FILE[:20] + [300, 301], 3) == [302, 303, 304]
    as_long = JobDrafts(FILE, None, Text(), draft_max=4, earlier=earlier)
    assert as_long.lookup(FILE[:20], 3) == FILE[20:23]         # just found, no longer than the copy: the copy


def test_an_earlier_answer_needs_the_output_to_end_as_it_did_for_a_long_match():
    earlier = EarlierOutputs()
    earlier.add(ANSWER)
    assert earlier.follow(ANSWER[:22], 4) == ANSWER[22:26]
    assert earlier.follow(ANSWER[22 - EARLIER_MATCH + 1:22], 4) == []     # a token short of the match
    assert earlier.follow([1] + ANSWER[22 - EARLIER_MATCH + 1:22], 4) == []
    assert earlier.follow(ANSWER[:22], 0) == []


def test_the_latest_answer_drafts_first_and_only_the_latest_few_are_kept():
    earlier = EarlierOutputs()
    older = FILE[:20] + [400, 401, 402]
    earlier.add(older)
    earlier.add(ANSWER)
    assert earlier.follow(FILE[:20], 3) == RENAMED[:3]
    for n in range(EARLIER_OUTPUTS - 1):
        earlier.add([500 + n] * 20)
    assert earlier.follow(FILE[:20], 3) == RENAMED[:3]     # the latest few: the older one went first
    earlier.add([600] * 20)
    assert earlier.follow(FILE[:20], 3) == []              # and now this one
    earlier.add(list(range(EARLIER_MATCH)))                 # too short to go on from: not kept
    assert len(earlier.outputs) == EARLIER_OUTPUTS


def test_an_answer_keeps_its_latest_tokens(monkeypatch):
    monkeypatch.setattr(earlier_outputs, "EARLIER_OUTPUT_TOKENS", 40)
    earlier = EarlierOutputs()
    earlier.add(ANSWER)
    assert earlier.outputs[0].tokens == ANSWER[-40:]
    assert earlier.follow(ANSWER[:20], 4) == []
    assert earlier.follow(ANSWER[:40], 4) == FILE[40:44]


def test_scopes_keep_their_answers_apart_and_the_least_used_goes(monkeypatch):
    monkeypatch.setattr(earlier_outputs, "EARLIER_SCOPES", 2)
    scopes = ScopedOutputs()
    scopes.of("a").add(ANSWER)
    assert scopes.of("b").follow(ANSWER[:22], 4) == []
    assert scopes.of("a").follow(ANSWER[:22], 4) == RENAMED[2:6]
    scopes.of("c")                                          # "b" was used least lately
    assert scopes.of("a").outputs
    assert not scopes.of("b").outputs


def test_a_finished_job_s_output_drafts_for_its_own_scope_alone():
    answer = list(range(20, 40))            # more than EARLIER_MATCH tokens, none in the prompt
    engine = ScriptedEngine(answer=answer)
    speculator = Speculator("ngram", 4, engine)
    rt = Runtime(engine, slots=1, max_queue=4, speculator=speculator)
    rt.submit(request(max_tokens=len(answer), scope="key-a"))
    rt.step()
    job = rt.slots[0].job
    while rt.slots[0].job is not None:
        rt.step()
    assert job.generated == answer
    assert speculator.earlier.of("key-a").follow(answer[:18], 4) == answer[18:]
    assert speculator.earlier.of("key-b").follow(answer[:18], 4) == []
    theirs, mine = speculator.start(FILE, None, "key-b"), speculator.start(FILE, None, "key-a")
    assert theirs.earlier.outputs is not mine.earlier.outputs
    assert mine.earlier.outputs is speculator.earlier.of("key-a")
    assert Speculator("draft", 4, engine).start(FILE, None, "key-a").earlier is None


def test_a_window_that_only_shares_a_hash_drafts_nothing(monkeypatch):
    monkeypatch.setattr(earlier_outputs, "hash", lambda window: 0, raising=False)   # every window collides
    earlier = EarlierOutputs()
    earlier.add(ANSWER)
    assert earlier.follow(ANSWER[:22], 4) == []            # the index holds another window's end
    assert earlier.follow(ANSWER[:-1], 4) == ANSWER[-1:]   # the last window's own
