"""The n-gram lookup indexes are built at a job's first lookup (after its prefill), not at its
admission, and draft exactly what indexes built at admission would."""

from __future__ import annotations

import random

from localserve.runtime import speculative
from localserve.runtime.speculative import NGRAM_PROMPT_WINDOW, JobDrafts, Speculator


class Text:
    """Single-byte pieces: token t is chr(t)."""
    def piece(self, token):
        return bytes([token])

    def tokenize(self, text, add_special=False, parse_special=False):
        return list(text.encode())

    def is_eog(self, token):
        return False


class CountingIndex(speculative.NgramIndex):
    built = 0

    def __init__(self, *args, **kwargs):
        CountingIndex.built += 1
        super().__init__(*args, **kwargs)


def test_no_index_is_built_until_the_first_lookup(monkeypatch):
    monkeypatch.setattr(speculative, "NgramIndex", CountingIndex)
    CountingIndex.built = 0
    drafts = Speculator("ngram", 4, Text()).start(list(b"abcabcabc"), "abcd")
    drafts.wants(4)                     # what a step asks before it looks a draft up
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
