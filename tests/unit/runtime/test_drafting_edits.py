"""Drafting through an edit, without llama.cpp: where a copy is found again after the output
changed something, how long a draft from a place just found may be, which source wins, and what a
`prediction` the output has strayed from may cost (bench/speculative.py's edit rows; the figures
are in docs/performance.rst)."""

from __future__ import annotations

from localserve.runtime.copy_cursor import CopyCursor
from localserve.runtime.ngram import NgramIndex
from localserve.runtime.speculative import STRAYED_DRAFT, JobDrafts


class Text:
    """Single-byte pieces: token t is chr(t)."""
    def piece(self, token):
        return bytes([token])

    def tokenize(self, text, add_special=False, parse_special=False):
        return list(text.encode())


SOURCE = list(range(10, 30))                # the file the output copies
ASKED = [50, 14, 15, 60, 61, 62]            # the request's words about the edit: they name (14, 15) too


def test_after_an_edit_the_copy_is_found_again_near_where_it_was_not_at_the_latest_match():
    index = NgramIndex(SOURCE + ASKED, sizes=(8, 4, 3, 2))
    cursor = CopyCursor()

    def write(*tokens):
        index.extend(tokens)
        return cursor.draft(index, index.tokens, 4)

    assert write(10, 11) == [12, 13, 14, 15]        # the copy found
    assert write(12) == [13, 14, 15, 16]            # followed on
    assert not cursor.fresh
    assert write(90) == []                          # the edit: 90, 91 where the file has 13
    assert write(91, 14) == []                      # one token back in the copy: too little to go on
    assert write(15) == [16, 17, 18, 19]            # (14, 15) near where the copy was, not in ASKED
    assert cursor.fresh
    assert index.follow(index.tokens, 4) == [60, 61, 62, 10]     # what the latest match drafts
    assert write(16) == [17, 18, 19, 20] and not cursor.fresh


def test_a_copy_far_behind_is_not_looked_for_near_where_it_would_be():
    long_file = list(range(1000, 1400))         # (1310, 1311) at 310 of it, and in the request's words
    index = NgramIndex(long_file + [50, 1310, 1311, 60, 61, 62], sizes=(8, 4, 3, 2))
    cursor = CopyCursor()
    index.extend([1000, 1001])
    assert cursor.draft(index, index.tokens, 4) == [1002, 1003, 1004, 1005]
    index.extend([1002])
    assert cursor.draft(index, index.tokens, 4) == [1003, 1004, 1005, 1006]       # the copy holds
    index.extend([90 + i % 7 for i in range(300)] + [1310, 1311])     # the output wrote its own, at length
    assert cursor.draft(index, index.tokens, 3) == [60, 61, 62]        # the latest match, as the lookup has it


def test_a_draft_from_a_place_just_found_is_short_while_the_output_strays():
    file = list(b"def low(self): return self.items\n")
    drafts = JobDrafts(file + list(b"rename low(self) to running(self)\n"), None, Text(), draft_max=16)
    generated = list(b"def ")
    assert len(drafts.lookup(generated, 16)) == 16              # nothing refused yet: the whole draft
    drafts.record(16, 0)
    draft = drafts.lookup(list(b"def running(self"), 16)
    assert draft == list(b")\nde")[:STRAYED_DRAFT]            # the latest match: the request's words, short
    drafts.record(len(draft), 0)
    assert len(drafts.lookup(list(b"def running(self"), 16, shared=True)) == 16    # beside other streams: in full
    drafts.record(4, 4)                                         # a draft wholly accepted: the output copies again
    assert len(drafts.lookup(list(b"def running(self)"), 16)) > STRAYED_DRAFT


def test_a_copy_the_output_keeps_following_wins_over_a_place_just_found_in_the_prediction():
    drafts = JobDrafts(list(b"0123456789"), "ab47xy56q", Text(), draft_max=4)
    assert drafts.lookup(list(b"ab345"), 4) == list(b"6789")    # strayed from the prediction: the prompt's copy
    assert not drafts.from_prediction
    assert drafts.lookup(list(b"ab3456"), 4) == list(b"789a")   # followed on, though (5, 6) is in the prediction
    assert not drafts.from_prediction
    fresh = JobDrafts(list(b"0123456789"), "ab47xy56q", Text(), draft_max=4)
    assert fresh.lookup(list(b"ab3456"), 4) == list(b"q")        # both just found: the prediction's first
    assert fresh.from_prediction


def test_a_prediction_drafts_freely_while_followed_and_pays_once_the_output_strays():
    prediction = "abcdefghijklmnopqrstuvwxyz"
    drafts = JobDrafts([1], prediction, Text(), draft_max=8, row_share=0.5)
    drafts.budget.credit = 0.0                  # nothing earned: the client's drafts go on regardless
    assert drafts.wants(list(b"ab"), 8, 0.5) == 8
    assert drafts.lookup(list(b"abXdef"), 8) == list(b"ghijklmn")     # strayed at X; found again in it
    assert drafts.wants(list(b"abXdef"), 8, 0.5) == 0                  # no credit, nothing accepted: none
    accepted = JobDrafts([1], prediction, Text(), draft_max=8, row_share=0.5)
    for _ in range(6):
        accepted.record(8, 8)                   # a prediction being accepted
    assert accepted.wants(list(b"abXdef"), 8, 0.5) == 8                # after the edit: what it earned pays


def test_an_output_that_repeats_itself_drafts_the_repetition_as_far_as_it_has_gone():
    line = [70, 71, 72, 73]
    index = NgramIndex(SOURCE, sizes=(4, 3, 2))
    cursor = CopyCursor()
    index.extend(line * 2)              # a line written twice: one line's worth, as the lookup has it
    assert cursor.draft(index, index.tokens, 16) == line
    index.extend(line)                  # three times: two lines' worth
    assert cursor.draft(index, index.tokens, 16) == line * 2
    index.extend(line * 3)              # followed on, six times over: the whole draft
    assert cursor.draft(index, index.tokens, 16) == line * 4
    assert not cursor.fresh
    assert cursor.draft(index, index.tokens, 3) == line[:3]
    other = CopyCursor()                # a copy of another sequence (a prediction) ends at its end
    assert other.draft(index, list(SOURCE) + line * 6, 16) == line
    prediction = NgramIndex(line * 2, sizes=(2,))
    assert other.draft(prediction, [5, 72, 73], 16) == line


def test_a_place_found_again_near_the_copy_gives_way_to_a_repetition_that_goes_back_further():
    line = list(range(1, 9))
    early = [90] + line + [20, 21, 22]          # the output wrote the line once, going on one way
    late = [91] + line + [30, 31, 32]           # and now writes it over and over, going on another
    index = NgramIndex(SOURCE + early + list(range(300, 400)) + late * 3 + [91] + line, sizes=(8, 4, 3, 2))
    cursor = CopyCursor()
    cursor.held = (len(SOURCE) + 1 + len(line), len(index.tokens))     # the copy last held in the early line
    assert cursor.draft(index, index.tokens, 3) == [30, 31, 32]         # both match the line; the latest, more
    assert cursor.fresh
    index.extend([60, 61, 62, 63, 64, 65, 66, 67])
    cursor.held = (len(SOURCE), len(index.tokens))
    index.extend([90, 1, 2])                    # near the copy, and as far back as the latest match
    assert cursor.draft(index, index.tokens, 3) == [3, 4, 5]
