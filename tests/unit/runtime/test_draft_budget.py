"""A job's drafting pays for itself: its credit, its tries after it stops, and what a shared step keeps."""

from __future__ import annotations

from localserve.runtime.draft_budget import (FIRST_TRY_GAP, MAX_TRY_GAP, START_CREDIT, DraftBudget,
                                             expected_accepted, shared_length)


def drafted_steps(budget: DraftBudget, steps: int, accepted_share: float = 0.0) -> list[int]:
    """Each step's draft length; every draft gets `accepted_share` of its tokens accepted."""
    lengths = []
    for _ in range(steps):
        length = budget.affordable(16)
        lengths.append(length)
        if length:
            budget.record(length, int(length * accepted_share))
    return lengths


def test_refused_drafts_stop_once_the_start_is_spent_then_one_token_tries_ever_more_rarely():
    budget = DraftBudget(row_share=0.25, draft_max=16)
    lengths = drafted_steps(budget, 2000)
    assert lengths[0] == START_CREDIT / 0.25               # the start pays for this many tokens, once
    tries = [i for i, n in enumerate(lengths) if n][1:]
    assert all(lengths[i] == 1 for i in tries)              # then a single token now and then
    gaps = [b - a for a, b in zip(tries, tries[1:])]
    assert gaps == sorted(gaps) and gaps[0] >= FIRST_TRY_GAP and gaps[-1] == MAX_TRY_GAP + 1
    assert sum(lengths) * 0.25 <= START_CREDIT + 0.25 * len(tries)    # what it cost, in steps
    assert budget.stopped


def test_accepted_drafts_earn_longer_ones_and_keep_drafting():
    budget = DraftBudget(row_share=0.5, draft_max=16)
    lengths = drafted_steps(budget, 50, accepted_share=1.0)
    assert lengths[0] == 2 and lengths[-1] == 16 and all(lengths)
    assert not budget.stopped
    assert budget.credit <= START_CREDIT + 16 * 0.5        # savings kept: one whole draft's worth


def test_a_job_that_copies_again_gets_its_drafts_back():
    budget = DraftBudget(row_share=0.25, draft_max=16)
    drafted_steps(budget, 300)                              # refused: out of credit, trying rarely
    lengths = drafted_steps(budget, 2 * MAX_TRY_GAP + 40, accepted_share=1.0)
    assert max(lengths[-20:]) > 8                           # one accepted try, and it drafts on


def test_a_shared_step_keeps_a_length_that_pays_every_stream():
    assert expected_accepted(1.0, 4) == 4 and expected_accepted(0.5, 2) == 0.75
    assert shared_length([1.0, 1.0], row_share=0.5, longest=8) == 8        # certain drafts always pay
    assert shared_length([0.9, 0.1], row_share=0.5, longest=8) == 0        # one stream would only wait
    assert 0 < shared_length([0.9, 0.9], row_share=0.5, longest=16) < 16   # long drafts cost more than they give
    assert shared_length([0.9, 0.9], row_share=0.05, longest=16) > shared_length([0.9, 0.9], 0.5, 16)


def test_accepted_drafts_reach_full_length_even_where_a_row_costs_most_of_a_step():
    budget = DraftBudget(row_share=0.8, draft_max=16)
    lengths = drafted_steps(budget, 60, accepted_share=1.0)
    assert lengths[0] == 1 and all(lengths)
    assert lengths[-20:] == [16] * 20                       # its acceptance pays for them: on at full length
    half = DraftBudget(row_share=0.8, draft_max=16)
    assert max(drafted_steps(half, 200, accepted_share=0.5)) < 4   # half refused: long drafts would not pay


def test_a_job_whose_drafts_mostly_pay_drafts_on_when_a_long_one_spent_its_credit():
    budget = DraftBudget(row_share=0.5, draft_max=16)
    for _ in range(5):
        budget.record(16, 4)            # a copy that breaks now and then: four of each draft accepted
    assert budget.credit < budget.row_share
    assert 2 <= budget.affordable(16) < 8 and not budget.stopped    # what its acceptance pays for, not a pause
