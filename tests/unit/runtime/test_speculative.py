"""Drafting alone, without llama.cpp: the prompt lookup, the adaptive draft length, how a step's
drafts are shared and bounded, and the batch a draft makes. Verification on the real engine is
tested end to end (tests/e2e/test_speculative.py)."""

from __future__ import annotations

import random

from localserve.engine.thread_policy import StepCosts
from localserve.generation import ActiveGeneration, GenerationRequest
from localserve.runtime import speculative
from localserve.runtime.jobs import Job, JobStatus, Slot
from localserve.runtime.ngram import NgramIndex
from localserve.runtime.scheduler import SHARED_PREFILL_CHUNK, draft_room, plan_batch
from localserve.runtime.speculative import NGRAM_PROMPT_WINDOW, JobDrafts, Speculator
from localserve.engine.gguf_meta import ModelShape, estimate
from localserve.settings import MAX_STEP_DRAFTS, step_drafts

EOS = 2


class Text:
    """Single-byte pieces: token t is chr(t)."""
    def piece(self, token):
        return bytes([token])

    def tokenize(self, text, add_special=False, parse_special=False):
        return list(text.encode())

    def is_eog(self, token):
        return token == EOS


def test_lookup_follows_the_longest_latest_match():
    index = NgramIndex([5, 6, 7, 8, 9, 5, 6, 1, 2, 7, 8, 3, 4], sizes=(3, 2))
    assert index.follow([6, 7, 8], 2) == [9, 5]           # the 3-gram (6, 7, 8) beats the later 2-gram (7, 8)
    assert index.follow([0, 7, 8], 5) == [3, 4]           # only the 2-gram: its latest occurrence, cut at the end
    assert index.follow([0, 0, 1], 4) == []               # nothing to copy
    assert index.follow([6, 7, 8], 0) == []


def test_the_sequences_own_end_is_not_a_match_until_something_follows_it():
    index = NgramIndex([1, 2, 3], sizes=(2,))
    assert index.follow(index.tokens, 4) == []
    index.extend([9, 1, 2])
    assert index.follow(index.tokens, 4) == [3, 9, 1, 2]


def test_a_draft_wholly_accepted_grows_a_refused_one_shrinks():
    drafts = JobDrafts([1, 2, 3], None, Text(), draft_max=8)
    drafts.length = 2
    drafts.record(2, 2)
    assert drafts.length == 4
    drafts.record(4, 4)
    drafts.record(8, 8)
    assert drafts.length == 8                               # never past --draft-max
    drafts.record(8, 3)
    assert drafts.length == 6                               # halfway toward what was accepted
    drafts.record(6, 0)
    assert drafts.length == 3
    assert (drafts.drafted, drafts.accepted) == (2 + 4 + 8 + 8 + 6, 2 + 4 + 8 + 3)


def test_a_prediction_is_followed_by_its_text_then_by_lookup_once_the_output_strays():
    prediction = "abcdefgh"
    drafts = JobDrafts([1], prediction, Text(), draft_max=4)
    assert drafts.lookup([], 4) == list(b"abcd")
    assert drafts.lookup(list(b"ab"), 4) == list(b"cdef")
    assert drafts.lookup(list(b"abcdefg"), 4) == list(b"h")
    strays = JobDrafts([1], prediction, Text(), draft_max=4)
    assert strays.lookup(list(b"abXcd"), 4) == list(b"efgh")     # strayed at X; (c, d) found in the prediction


def job_in(slot: Slot, prompt, status=JobStatus.DECODING, speculator: Speculator | None = None, **request) -> Job:
    """A job in the slot as the runtime step leaves it: decoding (its prompt in the cache, 50 written
    and next to decode), or prefilling; with its drafts when a speculator is given."""
    drafts = speculator.start(list(prompt), None) if speculator is not None else None
    job = Job(ActiveGeneration(GenerationRequest(prompt_tokens=list(prompt), **request)), slot, None, 0, drafts=drafts)
    if status is JobStatus.DECODING:
        job.decoded(len(prompt))
        job.reached_choice()
        job.took(50, in_reasoning=False)
        job.chose(50)
    job.start()
    return job


def test_a_draft_rides_after_its_jobs_next_token_with_logits_at_every_position():
    slots = [Slot(0), Slot(1)]
    a = job_in(slots[0], [1, 2, 3])
    b = job_in(slots[1], [1, 2, 3, 4])
    plan = plan_batch([a, b], 64, {id(a): [60, 61]})
    assert plan.entries == [(50, 3, 0, True), (60, 4, 0, True), (61, 5, 0, True), (50, 4, 1, True)]
    assert [(r.logits_row, r.n_tokens, r.draft) for r in plan.rows] == [(0, 1, [60, 61]), (3, 1, [])]


def test_drafts_get_no_room_a_step_full_of_prefill_needs():
    slots = [Slot(0), Slot(1)]
    decoding = job_in(slots[0], [1, 2, 3])
    prefilling = job_in(slots[1], list(range(1000)), status=JobStatus.PREFILLING)
    assert draft_room([decoding, prefilling], 512) == 512 - 1 - SHARED_PREFILL_CHUNK
    assert draft_room([decoding, prefilling], 1 + SHARED_PREFILL_CHUNK) == 0


def test_the_step_shares_its_drafts_and_stops_them_at_the_end_of_generation_and_max_tokens():
    speculator = Speculator("ngram", 4, Text())
    slots = [Slot(i) for i in range(3)]
    echo = [10, 11, 50, 12, 13, 14, 15, 16, 11]        # each job then wrote 50: after (11, 50) came 12..16
    jobs = [job_in(slots[0], echo, speculator=speculator), job_in(slots[1], echo, speculator=speculator),
            job_in(slots[2], echo, speculator=speculator, max_tokens=3)]
    alone = speculator.propose([jobs[2]], budget=100, n_ctx_seq=4096)
    assert alone[id(jobs[2])] == [12]                 # max_tokens 3: one token written, one more to choose
    # the step's share (2 x --draft-max) goes where it is wanted: 1, then 3 and 4 of the 4 each asks;
    # shared by three streams, every draft is cut to one length
    assert speculator.propose(jobs, budget=100, n_ctx_seq=4096) == {id(job): [12] for job in jobs}
    ended = job_in(Slot(3), [11, 50, 12, EOS, 13, 11], speculator=speculator)
    assert speculator.propose([ended], budget=100, n_ctx_seq=4096)[id(ended)] == [12]
    assert speculator.propose(jobs[:2], budget=0, n_ctx_seq=4096) == {}
    off = Speculator("off", 4, Text())
    assert off.start([1, 2], None) is None


class Priced(Text):
    """A model whose drafted row costs half a step."""
    step_costs = StepCosts(one=0.010, row=0.005)


def test_a_shared_step_drafts_only_what_pays_every_stream_in_it():
    speculator = Speculator("ngram", 8, Priced())
    slots = [Slot(i) for i in range(3)]
    echo = [10, 11, 50, 12, 13, 14, 15, 16, 17, 18, 19, 11]
    jobs = [job_in(slots[0], echo, speculator=speculator), job_in(slots[1], echo, speculator=speculator)]
    for job in jobs:
        for _ in range(6):          # its drafts were accepted: the next ones are expected to be
            job.drafts.record(8, 8)
    assert {len(d) for d in speculator.propose(jobs, budget=100, n_ctx_seq=4096).values()} == {8}
    for _ in range(20):             # one stream's refused lately: its drafts would slow the other
        jobs[1].drafts.record(1, 0)
        jobs[1].drafts.budget.credit = 8.0
    assert speculator.propose(jobs, budget=100, n_ctx_seq=4096) == {}
    prefilling = job_in(slots[2], list(range(300)), status=JobStatus.PREFILLING)
    assert speculator.propose([jobs[0], prefilling], budget=100, n_ctx_seq=4096) == {}   # a prompt gains nothing
    assert speculator.propose([jobs[0]], budget=100, n_ctx_seq=4096)          # alone, its own credit decides


def test_a_drafted_rows_price_measured_on_a_busy_machine_comes_down_as_steps_show_it():
    engine = Priced()
    engine.step_costs = StepCosts(one=0.010, row=0.0095, rows=9)      # measured beside other work
    speculator = Speculator("ngram", 8, engine)
    job = job_in(Slot(0), [10, 11, 50, 12, 13, 14, 15, 16, 17, 18, 19, 11], speculator=speculator)
    assert speculator.row_share == 0.95
    assert len(speculator.propose([job], budget=100, n_ctx_seq=4096)[id(job)]) == 1    # its credit pays one
    job.drafts.record(1, 1)
    engine.step_costs.calmer(9, 0.010 + 8 * 0.003)        # a whole draft's step, on a calmer machine
    assert speculator.row_share == 0.3
    assert len(speculator.propose([job], budget=100, n_ctx_seq=4096)[id(job)]) == 3    # its credit, at the new price
    assert speculator.as_json()["row_share"] == 0.3


def test_one_stream_drafts_up_to_draft_max_and_a_shared_step_verifies_at_most_the_steps_share():
    speculator = Speculator("ngram", 32, Text())
    copied = list(range(60, 100))
    prompt = [10, 11, 50] + copied + [11]       # each job wrote 50: the 40 tokens after (11, 50) follow
    jobs = [job_in(Slot(i), prompt, speculator=speculator) for i in range(3)]
    for job in jobs:
        for _ in range(6):
            job.drafts.record(32, 32)           # accepted whole: each asks for --draft-max
    assert len(speculator.propose(jobs[:1], budget=100, n_ctx_seq=4096)[id(jobs[0])]) == 32
    shared = speculator.propose(jobs, budget=100, n_ctx_seq=4096)
    assert sum(len(draft) for draft in shared.values()) <= MAX_STEP_DRAFTS     # not 3 x 32
    assert {len(draft) for draft in shared.values()} == {10}


def test_speculative_mode_from_flag_environment_and_config_file(tmp_path):
    import pytest

    from localserve.cli.flags import UsageError, build_parser, resolve_settings
    parser = build_parser()
    assert resolve_settings(parser.parse_args([]), {}).speculative == "ngram"
    assert resolve_settings(parser.parse_args([]), {"LOCALSERVE_SPECULATIVE": "off"}).speculative == "off"
    config = tmp_path / "localserve.toml"
    config.write_text('speculative = "off"\ndraft-max = 16\n')
    from_file = resolve_settings(parser.parse_args(["--config", str(config)]), {})
    assert (from_file.speculative, from_file.draft_max) == ("off", 16)
    flag = resolve_settings(parser.parse_args(["--config", str(config), "--speculative", "ngram"]), {})
    assert flag.speculative == "ngram"
    assert resolve_settings(parser.parse_args(["--draft-model", "d.gguf"]), {}).speculative == "draft"
    with pytest.raises(UsageError, match="--draft-model"):
        resolve_settings(parser.parse_args(["--speculative", "draft"]), {})
    with pytest.raises(UsageError, match="LOCALSERVE_SPECULATIVE"):
        resolve_settings(parser.parse_args([]), {"LOCALSERVE_SPECULATIVE": "eagle"})
    config.write_text('speculative = "eagle"\n')
    with pytest.raises(UsageError, match="speculative"):
        resolve_settings(parser.parse_args(["--config", str(config)]), {})


def test_speculation_is_a_per_model_setting_in_models_tables(tmp_path):
    import pytest

    from localserve.cli.flags import UsageError, build_parser, resolve_settings
    from localserve.models.catalogue import config_entry
    parser = build_parser()
    config = tmp_path / "localserve.toml"
    config.write_text('[models.a]\npath = "a.gguf"\ndraft-model = "d.gguf"\ndraft-max = 4\n\n'
                      '[models.b]\npath = "b.gguf"\nspeculative = "off"\n\n'
                      '[models.c]\npath = "c.gguf"\n')
    base = resolve_settings(parser.parse_args(["--config", str(config)]), {})
    own = {name: config_entry(name, table).settings(base) for name, table in base.models.items()}
    assert (own["a"].speculative, own["a"].draft_model, own["a"].draft_max) == ("draft", "d.gguf", 4)
    assert own["b"].speculative == "off"
    assert (own["c"].speculative, own["c"].draft_max) == ("ngram", base.draft_max)
    # the server's --draft-model serves every model that does not say otherwise
    server_wide = resolve_settings(parser.parse_args(["--config", str(config), "--draft-model", "s.gguf"]), {})
    c = config_entry("c", server_wide.models["c"]).settings(server_wide)
    assert (c.speculative, c.draft_model) == ("draft", "s.gguf")
    config.write_text('[models.a]\npath = "a.gguf"\nspeculative = "draft"\n')
    with pytest.raises(UsageError, match=r"\[models.a\].*draft-model"):
        resolve_settings(parser.parse_args(["--config", str(config)]), {})
    config.write_text('[models.a]\npath = "a.gguf"\nspeculative = "eagle"\n')
    with pytest.raises(UsageError, match=r"\[models.a\] key 'speculative'"):
        resolve_settings(parser.parse_args(["--config", str(config)]), {})


def test_a_copy_is_followed_on_where_a_repeated_line_would_mislead_the_latest_match():
    from localserve.runtime.copy_cursor import CopyCursor
    source = [1, 2, 3, 9, 1, 2, 4, 8]            # (1, 2) twice, followed by 3 then by 4
    index = NgramIndex(source + [5, 1, 2, 3], sizes=(2,))
    cursor = CopyCursor()
    assert cursor.draft(index, index.tokens, 3) == [9, 1, 2]     # found at source[3]
    index.extend([9, 1, 2])                     # 9 and 1 accepted, 2 chosen next
    assert index.follow(index.tokens, 3) == [3, 9, 1]            # the latest (1, 2): the copy's own start
    assert cursor.draft(index, index.tokens, 3) == [4, 8, 5]     # the place being copied
    index.extend([7, 7])                        # the output strays: the lookup takes over
    assert cursor.draft(index, index.tokens, 3) == []


def test_with_a_kv_stream_per_slot_a_steps_drafts_are_cut_to_one_length_or_dropped():
    from localserve.runtime.speculative import lined_up
    assert lined_up({1: [5, 6, 7], 2: [5, 6]}, [1, 2]) == {1: [5, 6], 2: [5, 6]}
    assert lined_up({1: [5, 6, 7]}, [1, 2]) == {}                  # job 2 has none: one pass without drafts
    assert lined_up({1: [5, 6, 7]}, [1]) == {1: [5, 6, 7]}          # alone, any length is one pass
    speculator = Speculator("ngram", 4, Text(), equal_rows=True)
    slots = [Slot(i) for i in range(3)]
    echo = [10, 11, 50, 12, 13, 14, 15, 16, 11]
    jobs = [job_in(slots[0], echo, speculator=speculator), job_in(slots[1], echo, speculator=speculator),
            job_in(slots[2], echo, speculator=speculator, max_tokens=3)]
    assert speculator.propose(jobs, budget=100, n_ctx_seq=4096) == {id(job): [12] for job in jobs}


# The n-gram lookup indexes are built at a job's first lookup (after its prefill), not at its
# admission, and draft exactly what indexes built at admission would.

class CountingIndex(speculative.NgramIndex):
    built = 0

    def __init__(self, *args, **kwargs):
        CountingIndex.built += 1
        super().__init__(*args, **kwargs)


def test_no_index_is_built_until_the_first_lookup(monkeypatch):
    monkeypatch.setattr(speculative, "NgramIndex", CountingIndex)
    CountingIndex.built = 0
    drafts = Speculator("ngram", 4, Text()).start(list(b"abcabcabc"), "abcd")
    drafts.wants([], 4, 0.5)            # what a step asks before it looks a draft up
    drafts.record(0, 0)
    drafts.counts()
    assert CountingIndex.built == 0
    assert drafts.lookup([], 4) == list(b"abcd")
    assert CountingIndex.built == 2     # the prompt's and the prediction's, once
    drafts.lookup(list(b"a"), 4)
    assert CountingIndex.built == 2


def eager(prompt, prediction) -> JobDrafts:
    """Indexes built at once, as admission built them before."""
    drafts = JobDrafts(prompt, prediction, Text(), draft_max=8)
    drafts.history, drafts.predicted     # noqa: B018 (building them is the point)
    return drafts


def test_drafts_are_those_of_indexes_built_at_admission():
    rng = random.Random(7)
    lines = [[rng.randrange(32, 127) for _ in range(rng.randrange(3, 9))] for _ in range(40)]
    prompt = [token for _ in range(NGRAM_PROMPT_WINDOW // 4 + 50) for token in rng.choice(lines)]
    assert len(prompt) > NGRAM_PROMPT_WINDOW      # only the latest window is indexed, in both
    for prediction in (None, bytes(rng.choice(lines) + rng.choice(lines)).decode()):
        given = list(prompt)
        lazy, reference = JobDrafts(given, prediction, Text(), draft_max=8), eager(prompt, prediction)
        given[-40:] = [0] * 40          # a caller's list changed after admission: the job keeps its prompt
        generated = []
        for _ in range(300):
            limit = rng.randrange(1, 9)
            assert lazy.lookup(generated, limit) == reference.lookup(generated, limit)
            assert lazy.from_prediction == reference.from_prediction
            generated += rng.choice(lines)[:rng.randrange(1, 4)]


def test_no_step_verifies_more_drafted_rows_than_the_engine_reserves():
    """The engine reserves logits rows for one token a sequence and step_drafts(--draft-max) drafted
    ones (engine.py), not --draft-max for every sequence: no step, alone or shared, drafts more."""
    copied = list(range(60, 200))
    prompt = [10, 11, 50] + copied + [11]
    for draft_max in (4, 32, 64):
        speculator = Speculator("ngram", draft_max, Text())
        jobs = [job_in(Slot(i), prompt, speculator=speculator) for i in range(4)]
        for job in jobs:
            for _ in range(8):
                job.drafts.record(draft_max, draft_max)      # accepted whole: each asks for --draft-max
        for n in (1, 2, 4):
            drafts = speculator.propose(jobs[:n], budget=512, n_ctx_seq=4096)
            assert sum(len(draft) for draft in drafts.values()) <= step_drafts(draft_max)
        assert len(speculator.propose(jobs[:1], budget=512, n_ctx_seq=4096)[id(jobs[0])]) == draft_max
    assert step_drafts(64) == 64 and step_drafts(32) == 32 and step_drafts(4) == 8    # 4 x 65 rows before


def test_the_memory_estimate_counts_the_step_s_drafted_rows_once():
    shape = ModelShape(file_bytes=0, n_layer=2, n_embd=64, n_head=2, n_head_kv=1, n_ctx_train=256, n_vocab=1000)
    one = estimate(shape, n_ctx_seq=256, n_seq=4, n_batch=64, reserve=0)
    drafting = estimate(shape, n_ctx_seq=256, n_seq=4, n_batch=64, reserve=0, drafted_rows=step_drafts(32))
    assert drafting.total - one.total == 32 * 1000 * 4
