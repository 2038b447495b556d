"""Earlier outputs: what a scope's latest finished jobs wrote, for drafting where a job leaves its prompt.

An edit asked again (a retry, an agent's next turn over the same file, the same refactor on a
sibling file) is often answered the same way: where the output departs from the file (the
renamed name, a line of the model's own), it departs as an earlier answer did, and that earlier
answer is in no prompt. llama-server's ngram-mod keeps one pool of every request's 24-grams for
all clients (docs/performance.rst); here each cache scope (an API key's, with its adapters:
generation.cache_scope) keeps its own last few outputs, so one client's text never drafts for
another's. A draft changes no output (speculative.py verifies every drafted token), but the time
a step takes would tell what another scope wrote.

Where the output's own copy is lost or was just found again, an earlier answer drafts when it
drafts more. Where the output follows a copy and an earlier answer went on otherwise from the
same tokens (it departed there), the earlier answer drafts: the output may depart as it did
(an edit asked again), and if it does not, the draft refused where the two part costs one
step's rows; the job then follows its copy for the rest of its life (FromEarlier.trusted).
llama-server's pool does the same without the stop: the latest text after a 24-gram wins.

The lookup matches the job's last EARLIER_MATCH tokens: a shorter match finds the prompt's own
words again (the copy cursor's job), a long one a place where an earlier answer went on as this
one does. The index maps the hash of each such window to the position after it, checked against
the tokens on a hit (a dict of int keys, not a tuple per window): some 0.45 MB for an output of
EARLIER_OUTPUT_TOKENS, built in some 3 ms on the runtime thread as the job retires; a lookup
is a dict read per output kept.
"""

from __future__ import annotations

from collections import OrderedDict, deque

EARLIER_OUTPUTS = 4            # a scope's latest finished outputs kept for drafting
EARLIER_MATCH = 16             # tokens the job's output must end with as an earlier output had them
EARLIER_OUTPUT_TOKENS = 4096   # the most of one output kept (its latest tokens)
EARLIER_SCOPES = 8             # scopes kept at once; the one used least lately goes (14 MB at most)


class OutputIndex:
    """One finished output: each EARLIER_MATCH-token window's latest end."""

    def __init__(self, tokens: list[int]):
        self.tokens = tokens = tokens[-EARLIER_OUTPUT_TOKENS:]
        self._after: dict[int, int] = {}
        for end in range(EARLIER_MATCH, len(tokens)):
            self._after[hash(tuple(tokens[end - EARLIER_MATCH:end]))] = end

    def follow(self, tail: list[int], limit: int) -> list[int]:
        """Up to `limit` tokens that followed the last EARLIER_MATCH tokens of `tail` here."""
        window = tail[-EARLIER_MATCH:]
        if len(window) < EARLIER_MATCH:
            return []
        at = self._after.get(hash(tuple(window)))
        if at is None or self.tokens[at - EARLIER_MATCH:at] != window:
            return []
        return self.tokens[at:at + limit]


class EarlierOutputs:
    """A scope's latest outputs, the latest first."""

    def __init__(self):
        self.outputs: deque[OutputIndex] = deque(maxlen=EARLIER_OUTPUTS)

    def add(self, tokens: list[int]) -> None:
        if len(tokens) > EARLIER_MATCH:
            self.outputs.appendleft(OutputIndex(list(tokens)))

    def follow(self, tail: list[int], limit: int) -> list[int]:
        """What followed `tail`'s last tokens in the latest output that had them; [] where none did."""
        if limit < 1:
            return []
        for output in self.outputs:
            draft = output.follow(tail, limit)
            if draft:
                return draft
        return []


class ScopedOutputs:
    """Every scope's EarlierOutputs, at most EARLIER_SCOPES of them."""

    def __init__(self):
        self._scopes: OrderedDict[str, EarlierOutputs] = OrderedDict()

    def of(self, scope: str) -> EarlierOutputs:
        outputs = self._scopes.pop(scope, None) or EarlierOutputs()
        self._scopes[scope] = outputs
        while len(self._scopes) > EARLIER_SCOPES:
            self._scopes.popitem(last=False)
        return outputs


class FromEarlier:
    """One job's drafting from its scope's earlier outputs, and its finished output added to them."""

    def __init__(self, outputs: EarlierOutputs):
        self.outputs = outputs
        self.trusted = True             # an earlier answer may still part from the copy the output follows
        self.parting: int | None = None     # where the draft taken parted from that copy's

    def choose(self, generated: list[int], own: list[int], limit: int, following: bool) -> list[int]:
        """The draft: `own` (the job's own lookup's, from a copy it `following`s or one just found)
        or an earlier answer's."""
        self.parting = None
        if not following:
            before = self.outputs.follow(generated, limit)
            return before if len(before) > len(own) else own
        if not self.trusted:
            return own
        before = self.outputs.follow(generated, limit)
        if len(before) < len(own) or before[:len(own)] == own:
            return own
        self.parting = next(i for i, (mine, theirs) in enumerate(zip(own, before)) if mine != theirs)
        return before

    def verified(self, drafted: int, accepted: int) -> None:
        """The last draft chosen was verified; refused where it parted from the copy: no more."""
        if self.parting is not None and accepted <= self.parting < drafted:
            self.trusted = False
        self.parting = None

    def finished(self, generated: list[int]) -> None:
        self.outputs.add(generated)
