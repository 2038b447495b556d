"""What the RAM prompt cache takes: a sequence a new prompt cuts a good share of, not one it
keeps most of (an editor's keystroke), nor a short one, nor one a saved entry already covers."""

from __future__ import annotations

from localserve.runtime.promptcache import PromptCache

SEQUENCE = list(range(1000, 5000))         # a 4,000-token sequence in a slot


def test_another_conversation_taking_the_slot_saves_it():
    assert PromptCache(1 << 20).worth_saving(SEQUENCE, kept=8)      # only a template header shared


def test_an_editor_switching_files_saves_it():
    assert PromptCache(1 << 20).worth_saving(SEQUENCE, kept=2000)   # the repository chunks shared


def test_a_keystroke_that_keeps_most_of_it_saves_nothing():
    assert not PromptCache(1 << 20).worth_saving(SEQUENCE, kept=3500)  # the last 500 tokens recomputed


def test_a_cut_of_a_quarter_saves_it():
    assert PromptCache(1 << 20).worth_saving(SEQUENCE, kept=3000)
    assert not PromptCache(1 << 20).worth_saving(SEQUENCE, kept=3001)


def test_short_losses_short_sequences_and_a_cache_that_is_off_save_nothing():
    assert not PromptCache(1 << 20).worth_saving(list(range(40)), kept=10)     # 30 tokens lost
    assert PromptCache(1 << 20).worth_saving(list(range(40)), kept=8)
    assert not PromptCache(0).worth_saving(SEQUENCE)


def test_a_sequence_a_saved_one_covers_is_not_saved_again():
    cache = PromptCache(1 << 20)
    cache.add(SEQUENCE, b"state")
    assert not cache.worth_saving(SEQUENCE[:3000])
    assert cache.worth_saving(SEQUENCE[:2999] + [7])


def test_a_saved_sequence_is_found_by_its_own_scope_only():
    cache = PromptCache(1 << 20)
    cache.add(SEQUENCE, b"victim's", scope="victim")
    assert cache.best_match(SEQUENCE + [1], "attacker") == (None, 0)
    key, n = cache.best_match(SEQUENCE + [1], "victim")
    assert n == len(SEQUENCE) and cache.take(key).state == b"victim's"


def test_scopes_neither_cover_nor_replace_each_others_entries():
    cache = PromptCache(1 << 20)
    cache.add(SEQUENCE[:3000], b"victim's", scope="victim")
    assert cache.worth_saving(SEQUENCE[:2000], scope="attacker")     # the victim's longer one is no copy of it
    cache.add(SEQUENCE, b"attacker's", scope="attacker")              # it extends the victim's: both stay
    assert len(cache) == 2
    assert cache.best_match(SEQUENCE, "victim")[1] == 3000
