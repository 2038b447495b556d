"""What a draft may cost: each job's drafting pays for itself, and a step shared by several
streams drafts only where every one of them gains.

A drafted token costs a logits row in the step that verifies it: for a large vocabulary most of
a token's work (Gemma 3's output layer has 262k rows), whether it is accepted or not. Its price,
`row_share`, is the share of a one-token step that a further row adds, measured at load
(engine/thread_policy.StepCosts). An accepted token saves a whole step.

- A job's budget is its credit in steps: it starts with START_CREDIT, each verified draft adds
  the tokens accepted and takes away row_share per token drafted. A draft is never longer than
  the longer of what the credit pays for and what the job's own acceptance so far (no prior)
  expects to pay for itself, token by token: a job whose drafts are accepted (a greedy edit)
  drafts at full length. A job whose drafts are refused (a sampled chat with nothing to copy)
  stops drafting once it has spent its start, and then tries one drafted token now and then,
  twice as rarely after each try that did not earn its price back: what it loses is bounded by
  START_CREDIT and those tries, whatever the temperature. The price is the engine's, learned on
  as steps run (a load beside other work measures it high: thread_policy.StepCosts.calmer).
- A step shared with other streams is as slow for each as for all: with a prompt chunk in it,
  it drafts nothing (the prompt gains nothing from a draft); with several decoding streams, its
  drafts are kept only when every stream drafts, cut to one length at which each stream's
  expected accepted tokens make up for the time the drafts add to the step (acceptance: each
  job's recent rate; a job that has verified few drafts is trusted, within its credit).
"""

from __future__ import annotations

START_CREDIT = 1.0          # steps' worth a job may spend on drafts before any is accepted
FIRST_TRY_GAP = 16          # steps an out-of-credit job waits before one drafted token tries again
MAX_TRY_GAP = 256           # doubling after each try that did not earn its price back, up to this
RATE_MEMORY = 0.8           # weight of the past in a job's acceptance rate, per verified draft
PRIOR_WEIGHT = 2.0          # pseudo-tokens of the prior in a job's acceptance rate


class DraftBudget:
    """One job's credit and its recent acceptance."""

    def __init__(self, row_share: float, draft_max: int):
        self.row_share = row_share
        self.credit = START_CREDIT
        self.draft_max = draft_max
        self.gap = FIRST_TRY_GAP
        self.pause = 0
        self.hits = 0.0             # accepted tokens, recent ones weighing most
        self.tested = 0.0           # drafted tokens verified: the accepted and the first refused one

    def reprice(self, row_share: float) -> None:
        """A drafted row's price, learned again as the machine calms (engine/thread_policy.StepCosts)."""
        self.row_share = row_share

    @property
    def most_credit(self) -> float:
        """Savings kept: enough for one whole draft."""
        return START_CREDIT + self.draft_max * self.row_share

    def affordable(self, limit: int) -> int:
        """How many tokens the job may draft this step, at most `limit` (0: none)."""
        if self.pause > 0:
            self.pause -= 1
            if self.pause:
                return 0
            self.credit = max(self.credit, self.row_share)      # one drafted token to try again
        tokens = min(limit, int(self.credit / self.row_share + 1e-9))
        rate = self.acceptance(0.0)
        while tokens < limit and expected_accepted(rate, tokens + 1) >= (tokens + 1) * self.row_share:
            tokens += 1         # expected to pay for itself: its row is worth its chance of being accepted
        if tokens < 1:
            self.pause, self.gap = self.gap, min(MAX_TRY_GAP, self.gap * 2)
        return tokens

    def record(self, drafted: int, accepted: int) -> None:
        self.credit = min(self.most_credit, self.credit + accepted - drafted * self.row_share)
        if self.credit >= START_CREDIT:     # it earns its drafts: tries come soon again if it stops
            self.gap = FIRST_TRY_GAP
        self.hits = self.hits * RATE_MEMORY + accepted
        self.tested = self.tested * RATE_MEMORY + accepted + (accepted < drafted)

    def acceptance(self, prior: float) -> float:
        """The chance that a drafted token is accepted, given the one before it was."""
        return (self.hits + PRIOR_WEIGHT * prior) / (self.tested + PRIOR_WEIGHT)

    @property
    def stopped(self) -> bool:
        """Out of credit, and its acceptance pays for no drafted token: waiting to try again (/slots)."""
        return self.pause > 0 or (self.credit < self.row_share and self.acceptance(0.0) < self.row_share)

    def as_json(self) -> dict:
        return {"credit": round(self.credit, 3), "stopped": self.stopped}


def expected_accepted(rate: float, length: int) -> float:
    """Tokens expected to be accepted of a draft of `length`, each accepted with `rate` after the last."""
    return sum(rate ** i for i in range(1, length + 1))


def shared_length(rates: list[float], row_share: float, longest: int) -> int:
    """The longest draft length up to `longest`, the same for each of the decoding streams
    accepting at `rates`, at which every one of them gains: its 1 + expected accepted tokens make
    up for the step they share growing from 1 + row_share·(streams - 1) to that plus their drafts.
    0 where no length pays."""
    streams = len(rates)
    plain = 1 + row_share * (streams - 1)
    length = 0
    while length < longest:
        step = plain + row_share * streams * (length + 1)
        if any(1 + expected_accepted(rate, length + 1) < step / plain for rate in rates):
            break
        length += 1
    return length
