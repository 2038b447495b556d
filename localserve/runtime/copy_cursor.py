"""Following a copy: where in a sequence (the prompt, a prediction) the output is copying from now.

A model asked for a file back with one change copies it: drafts are what comes next in the
source. The place is followed on from draft to draft; after the change (a name renamed) the
output comes back to the source a little further on, and the place is found again near where
it was, not at the latest match anywhere, which in an edit request is mostly the request's own
words about the change ("rename `low_stock` to `running_low`").
"""

from __future__ import annotations

from .ngram import NgramIndex

COPY_CHECK_TOKENS = 2              # a copy is followed on while the last tokens written match it this far
RESYNC_WINDOW = 64                 # after an edit, the copy is looked for this far either side of where it would be,
RESYNC_SPAN = 256                  # while the output has written at most this many tokens since the copy last held
MAX_RESYNC_MATCH = 8               # the longest match that counts there (as the lookup's longest n-gram)
LONG_MATCH = 32                    # how far back a place found again and the latest match are compared


class CopyCursor:
    """Follows a copy on from where the last draft came from, while the output still copies it.

    Copied text repeats itself (a file's `with self.lock:` lines): the latest occurrence of the
    output's last tokens may be a line written a moment ago, not the place being copied. So the
    place a draft came from is kept, moved on by what was written since, and used again as long
    as the last tokens written match the tokens before it there. Once they do not (an edit: a
    name renamed), the copy is looked for again near where it would be now, for it goes on after
    the edit: the latest match anywhere (the lookup's) is often the request's own words about the
    edit, and drafts from there are refused until the output finds its way back.

    Where the place is in the output itself, near its end (the output repeats a line it just
    wrote, over and over), the draft would stop at the output's end: it goes on as the
    repetition does, for as many tokens as the output has already repeated (ahead())."""

    def __init__(self):
        self.source: int | None = None      # the source position the next token was expected at
        self.mark = 0                       # the output's length then
        self.held: tuple[int, int] | None = None    # (source, mark) where the copy last held
        self.fresh = False                  # whether the last draft came from a place just found

    def draft(self, index: NgramIndex, tail: list[int], limit: int) -> list[int]:
        tokens = index.tokens
        if self.source is not None:
            at = self.source + len(tail) - self.mark
            check = min(COPY_CHECK_TOKENS, len(tail) - self.mark)
            if check > 0 and at < len(tokens) and tokens[at - check:at] == tail[len(tail) - check:]:
                self.source, self.mark = at, len(tail)
                self.held, self.fresh = (at, len(tail)), False
                return ahead(tokens, at, limit, tail is tokens)
        at, latest = self._near(tokens, tail), index.find(tail)
        self.fresh = True
        # near where the copy would be, unless the latest match goes back further: an output that
        # repeats a block of its own (imports written over and over) matches its last block in
        # full, and an earlier, different one near the copy in part
        if at is None or (latest is not None and matched(tokens, latest, tail) > matched(tokens, at, tail)):
            at = latest
        self.source, self.mark = at, len(tail)
        return ahead(tokens, at, limit, tail is tokens) if at is not None else []

    def _near(self, tokens: list[int], tail: list[int]) -> int | None:
        """Where the output's last tokens (2 or more of them, the more the better, then the
        nearest) end within RESYNC_WINDOW of where the copy that last held would be now; None
        without such a place, or once the output has gone on too far from it."""
        if self.held is None or len(tail) < COPY_CHECK_TOKENS:
            return None
        source, mark = self.held
        written = len(tail) - mark
        if written > RESYNC_SPAN:
            self.held = None
            return None
        at = source + written
        last, best, best_key = tail[-1], None, None
        lo, hi = max(COPY_CHECK_TOKENS, at - RESYNC_WINDOW), min(len(tokens), at + RESYNC_WINDOW)
        for end in range(lo, hi):
            if tokens[end - 1] != last:
                continue
            n = 1
            while n < MAX_RESYNC_MATCH and n < end and n < len(tail) and tokens[end - 1 - n] == tail[-1 - n]:
                n += 1
            key = (n, -abs(end - at))
            if n >= COPY_CHECK_TOKENS and (best_key is None or key > best_key):
                best, best_key = end, key
        return best


def matched(tokens: list[int], end: int, tail: list[int]) -> int:
    """How many of `tail`'s last tokens (at most LONG_MATCH) the tokens before `end` are."""
    n = 0
    while n < LONG_MATCH and n < end and n < len(tail) and tokens[end - 1 - n] == tail[-1 - n]:
        n += 1
    return n


def ahead(tokens: list[int], at: int, limit: int, own: bool) -> list[int]:
    """Up to `limit` tokens from `at` on. In the output's own sequence (`own`), a draft that reaches
    its end goes on as a repetition: the output wrote tokens[at:] after the same tokens that end it
    now, so what follows is that span again, and again. It goes on for as many tokens as the
    output has repeated that span already (a line written fifteen times over drafts in full; a line
    written twice, one line's worth): a long repetition ends seldom, a short one often."""
    draft = tokens[at:at + limit]
    if not own or len(draft) >= limit or not draft:
        return draft
    period, end = len(draft), len(tokens)
    repeated = 0            # the output's last tokens that repeat those one span before them
    while (repeated < limit and end - period - repeated > 0
           and tokens[end - 1 - repeated] == tokens[end - period - 1 - repeated]):
        repeated += 1
    length = min(limit, max(period, repeated))
    return (draft * (length // period + 1))[:length]
