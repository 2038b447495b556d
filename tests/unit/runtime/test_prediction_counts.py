"""usage's accepted/rejected_prediction_tokens count the request's prediction alone (issue 28,
item 7): drafts from the n-gram lookup or a draft model are the server's own, in timings."""

from __future__ import annotations

from localserve.runtime.speculative import JobDrafts


class Text:
    """Single-byte pieces: token t is chr(t)."""
    def piece(self, token):
        return bytes([token])

    def tokenize(self, text, add_special=False, parse_special=False):
        return list(text.encode())


def test_lookup_drafts_without_a_prediction_are_no_prediction_tokens():
    drafts = JobDrafts(list(b"abcabcabc"), None, Text(), draft_max=4)
    draft = drafts.lookup(list(b"ab"), 4)
    assert draft                                      # the prompt's own n-grams
    drafts.verifying(len(draft), 1)
    assert drafts.prediction_counts() == (0, 0) and drafts.counts() == (len(draft), 1)
    drafts.record(len(draft), 2)
    assert drafts.prediction_counts() == (0, 0) and drafts.counts() == (len(draft), 2)


def test_only_the_drafts_the_prediction_made_count():
    drafts = JobDrafts(list(b"xyzxyz"), "abcd", Text(), draft_max=4)
    assert drafts.lookup([], 4) == list(b"abcd")
    drafts.verifying(4, 3)                            # a job ending inside this draft counts it
    assert drafts.prediction_counts() == (4, 3)
    drafts.record(4, 3)
    strayed = drafts.lookup(list(b"abcQxy"), 4)      # strayed at Q: the n-grams of prompt and output now
    assert len(strayed) == 4 and not drafts.from_prediction
    drafts.record(4, 4)
    assert drafts.prediction_counts() == (4, 3) and drafts.counts() == (8, 7)


def test_a_draft_not_from_lookup_is_not_the_predictions():
    drafts = JobDrafts([1], "abcd", Text(), draft_max=4)
    drafts.lookup([], 4)
    drafts.from_prediction = False                    # what propose() does for a draft model's or forced draft
    drafts.record(4, 4)
    assert drafts.prediction_counts() == (0, 0)
