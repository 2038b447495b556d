"""Every mutant in tests/mutants.py still finds its source string exactly once.

`make mutants` is too slow for the suite, so a merge or a refactor that moves a mutant's code
would otherwise go unnoticed until someone runs it (two API-key mutants did, after the key scopes).
"""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

import mutants  # noqa: E402


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_the_mutants_source_is_found_exactly_once(mutant):
    text = (ROOT / mutant.path).read_text()
    for find in [mutant.find] + [find for find, _ in mutant.also]:
        assert text.count(find) == 1, f"{mutant.name}: {find!r} found {text.count(find)} times in {mutant.path}"


def test_mutant_names_are_unique():
    names = [m.name for m in mutants.MUTANTS]
    assert len(names) == len(set(names))
