"""n_indent: a completion ends before the first new line indented less than asked."""

from __future__ import annotations

from localserve.runtime.textstream import IndentLimit


def feed_all(limit: IndentLimit, pieces: list[str]) -> str:
    return "".join(limit.feed(p) for p in pieces) + limit.flush()


def test_off_passes_everything():
    assert feed_all(IndentLimit(0), ["a\n", "b\n", "c"]) == "a\nb\nc"


def test_stops_before_a_line_indented_less():
    limit = IndentLimit(4)
    assert feed_all(limit, ["x = 1\n", "    y = 2\n", "  z", " = 3\n"]) == "x = 1\n    y = 2"
    assert limit.stopped


def test_the_first_line_is_not_judged():
    limit = IndentLimit(4)
    assert feed_all(limit, ["return x"]) == "return x"
    assert not limit.stopped


def test_indentation_is_held_until_the_line_shows_itself():
    limit = IndentLimit(2)
    assert limit.feed("a\n ") == "a"
    assert limit.feed(" ") == ""
    assert limit.feed("b") == "\n  b"


def test_blank_lines_pass_and_tabs_count():
    limit = IndentLimit(1)
    assert feed_all(limit, ["a\n\n\tb\nc"]) == "a\n\n\tb"
    assert limit.stopped


def test_after_the_stop_nothing_more():
    limit = IndentLimit(2)
    assert limit.feed("a\nb") == "a"
    assert limit.feed("  more\n") == ""
    assert limit.flush() == ""
