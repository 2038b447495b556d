"""Whether text read so far is the start of some JSON value: the grammar, one character at a time.

A tool call's arguments stream to clients that parse every prefix they get (the Anthropic SDK
reads input_json_delta with jiter's partial mode, openai-python's stream helpers read a strict
tool's arguments the same way): a fragment that no JSON value could begin with (`{"a":1,,`)
makes them raise. The reader (json_stream.Cursor.json_value) asks this, character by
character, before it passes text on, and stops where the text stops being JSON.

Strategy: a stack of the open containers' closing brackets, what may come next (a value, a key,
a colon, a comma or a closing bracket), and the token under way (a string with its escape, a
number as a small state machine, a literal as a prefix of true/false/null). A character that
no JSON text could have there is refused and changes nothing. Whitespace outside strings ends
a number or a literal and is otherwise nothing. A raw control character inside a string is
taken (the reader writes it escaped).
"""

from __future__ import annotations

VALUE, KEY, COLON, MORE, END = "value", "key", "colon", "more", "end"
LITERALS = ("true", "false", "null")
WHITESPACE = " \t\r\n"
HEX = frozenset("0123456789abcdefABCDEF")
ESCAPES = frozenset('"\\/bfnrtu')

# a number's states: what has been read of -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
_NUMBER = {
    ("start", "-"): "sign", ("start", "0"): "zero", ("sign", "0"): "zero",
    ("int", "."): "dot", ("zero", "."): "dot", ("frac", "e"): "exp", ("frac", "E"): "exp",
    ("int", "e"): "exp", ("int", "E"): "exp", ("zero", "e"): "exp", ("zero", "E"): "exp",
    ("exp", "+"): "exp_sign", ("exp", "-"): "exp_sign",
}
# where a digit (other than a leading 0: _NUMBER) leads; none after a leading 0
_DIGIT_STEP = {"start": "int", "sign": "int", "int": "int", "dot": "frac", "frac": "frac",
               "exp": "exp_digits", "exp_sign": "exp_digits", "exp_digits": "exp_digits"}
_NUMBER_ENDS = ("zero", "int", "frac", "exp_digits")


class JsonPrefix:
    """One JSON value read a character at a time. take(ch) says whether the text stays the start
    of a JSON value; `complete` once the value has ended."""

    def __init__(self) -> None:
        self.closers: list[str] = []    # the open containers' closing brackets, innermost last
        self.want = VALUE
        self.may_close = False          # a container has just opened: its bracket may close it
        self.in_string = False
        self.escape = ""                # an escape under way: "\\", or "\\u" and its hex digits so far
        self.low_surrogate = False      # a high surrogate's \uXXXX was read: its low half must follow
        self.number = ""                # a number's state while one is under way
        self.literal = ""               # a literal's text while one is under way

    @property
    def complete(self) -> bool:
        return self.want == END

    def take(self, ch: str) -> bool:
        if self.in_string:
            return self._string(ch)
        if self.number or self.literal:
            return self._scalar(ch) or self._after_scalar(ch)
        return ch in WHITESPACE or self._between(ch)

    # ---- between tokens --------------------------------------------------------------

    def _between(self, ch: str) -> bool:
        want = self.want
        if self.closers and ch == self.closers[-1] and (want == MORE or (self.may_close and want in (KEY, VALUE))):
            self.closers.pop()
            self._value_ended()
        elif want == MORE and ch == ",":
            self.want, self.may_close = (KEY if self.closers[-1] == "}" else VALUE), False
        elif want == COLON and ch == ":":
            self.want = VALUE
        elif want == KEY and ch == '"':
            self.in_string, self.may_close = True, False
        elif want == VALUE and ch in "{[":
            self.closers.append("}" if ch == "{" else "]")
            self.want, self.may_close = (KEY if ch == "{" else VALUE), True
        elif want == VALUE and ch == '"':
            self.in_string, self.may_close = True, False
        elif want == VALUE and (ch == "-" or ch.isdigit() and ch.isascii()):
            self.number, self.may_close = "start", False
            return self._scalar(ch)
        elif want == VALUE and any(literal.startswith(ch) for literal in LITERALS):
            self.literal, self.may_close = ch, False
        else:
            return False
        return True

    def _value_ended(self) -> None:
        self.want, self.may_close = (MORE if self.closers else END), False

    # ---- tokens ------------------------------------------------------------------------

    def _string(self, ch: str) -> bool:
        if self.escape:
            return self._escape(ch)
        if self.low_surrogate:              # only the low half's escape may follow a high half
            if ch != "\\":
                return False
            self.escape = ch
            return True
        if ch == "\\":
            self.escape = ch
        elif ch == '"':
            self.in_string = False
            if self.want == KEY:
                self.want = COLON
            else:
                self._value_ended()
        return True

    def _escape(self, ch: str) -> bool:
        if self.escape == "\\":
            if ch not in ESCAPES or (self.low_surrogate and ch != "u"):
                return False
            self.escape = "\\u" if ch == "u" else ""
            return True
        if ch not in HEX:
            return False
        digits = self.escape + ch
        if len(digits) < 6:
            self.escape = digits
            return True
        code = int(digits[2:], 16)
        if (0xDC00 <= code <= 0xDFFF) != self.low_surrogate:    # a surrogate's half without its other half
            return False
        self.escape, self.low_surrogate = "", 0xD800 <= code <= 0xDBFF
        return True

    def _scalar(self, ch: str) -> bool:
        """Whether `ch` continues the number or literal under way."""
        if self.literal:
            if any(literal.startswith(self.literal + ch) for literal in LITERALS):
                self.literal += ch
                return True
            return False
        digit = ch.isascii() and ch.isdigit()
        step = _NUMBER.get((self.number, ch)) or (_DIGIT_STEP.get(self.number) if digit else None)
        if step is None:
            return False
        self.number = step
        return True

    def _after_scalar(self, ch: str) -> bool:
        """`ch` ends the number or literal under way, if it may end there, and is what may follow it."""
        if self.literal and self.literal not in LITERALS or self.number and self.number not in _NUMBER_ENDS:
            return False
        before = (self.number, self.literal, self.want, self.may_close)
        self.number = self.literal = ""
        self._value_ended()
        if ch in WHITESPACE or self._between(ch):
            return True
        self.number, self.literal, self.want, self.may_close = before
        return False
