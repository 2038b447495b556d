"""A model's tool-call format, found from its own chat template (the approach of llama.cpp's
chat-diff-analyzer): render an assistant turn with and without a known call, take the text
the call added, and find in it the known parts — the function's name, the arguments object or
each key and value — and the literal text around them. Calls in other shapes (two calls, the
arguments in the other order, no arguments) tell apart what belongs to a call, to the block
of calls, and to each type of value. The result is checked by parsing the rendered calls back.

Rendering is the caller's (prompt/ sits above parsing/): `render(messages, tools,
generation_prompt)` gives the template's text for a conversation, or raises.
"""

from __future__ import annotations

from collections.abc import Callable

from .call_format import ID_SLOT, KEY_SLOT, NAME_SLOT, OTHER, STRING, CallFormat, common_start
from .format_parser import format_syntax
from .json_stream import strict_loads
from .tools import parse_generated_tools

Render = Callable[[list[dict], list[dict], bool], str]

_HEADER_CONTEXT = 40            # what a template writes before its generation prompt, to look at
_MARKER_LIMIT = 40              # the longest rest of a marker a diff may end inside
CONTENT = "Sure thing"          # the assistant's text beside its calls: ends in no marker
NAME, OTHER_NAME = "get_weather", "get_time"
ARGS = {"city": "Lyonnais", "days": 37}
# the other value first, under keys that sort that way too (some templates sort the keys)
ARGS_REVERSED = {"count": 37, "town": "Lyonnais"}
OTHER_ARGS = {"zone": "UTC"}
IDS = ("call0abcd", "call1abcd")  # nine alphanumerics, as Mistral's templates insist
TOOLS = [{"type": "function", "function": {"name": name, "description": "A tool.", "parameters": {
    "type": "object", "properties": {k: {"type": "string" if isinstance(v, str) else "integer"}
                                     for k, v in args.items()}, "required": list(args)[:1]}}}
         for name, args in ((NAME, {**ARGS, **ARGS_REVERSED}), (OTHER_NAME, OTHER_ARGS))]
TOOL_PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}

# Reasoning a template writes before its calls is the reasoning parser's, not ours.
_REASONING_ENDS = ("</think>", "<|END_THINKING|>", "</seed:think>", "[/THINK]")
# What a derived format is called, by a marker it writes.
_FAMILY_NAMES = (
    ("<arg_key>", "glm"), ("<arg_key:opensource>", "hunyuan"), ("<|tool_calls_section_begin|>", "kimi_k2"),
    ("<|open|>call", "kimi_k3"), ("<minimax:tool_call>", "minimax_m2"), ("]<]minimax[>[", "minimax_m3"),
    ("｜DSML｜", "deepseek_dsml"), ("<seed:tool_call>", "seed_oss"), ("<|START_ACTION|>", "command_r"),
    ("<|tool_call|>", "granite"), ("<|tool_call>call:", "gemma4"), ("<|tools_prefix|>", "apertus"),
    ("<|function_call|>", "gigachat"), ("function call<|role_sep|>", "gigachat"), ("<TOOLCALL>", "nemotron"),
    ("<tool_calls>[", "apriel"), ("<tool_calls>", "minimax_m1"), (">>>", "functionary_v3_2"),
    ("<function=", "functionary_v3_1"), ("<|tool_call:begin|>", "solar"), ("<function name=", "minicpm"),
    ("<|tool_call_start|>", "lfm2"), ("<atem:function_calls>", "muse"), ("<functools>", "phi4_mini"),
)


class NotDerivable(Exception):
    """The template shows no call this module can take apart."""


def _call(name: str, args: dict, index: int) -> dict:
    return {"id": IDS[index], "type": "function", "function": {"name": name, "arguments": args}}


def _conversation(calls: list[dict] | None) -> list[dict]:
    turn = {"role": "assistant", "content": CONTENT}
    if calls:
        turn["tool_calls"] = calls
    return [{"role": "user", "content": "Hello"}, turn]


def _added_text(base: str, with_call: str) -> str:
    """What the call added to the turn: the common end first (so the end of the turn is not
    taken for the end of the call), then the common beginning; the content before the call
    is cut off where the template writes it inside the changed text."""
    end = 0
    while end < min(len(base), len(with_call)) and base[-1 - end] == with_call[-1 - end]:
        end += 1
    start = 0
    while start < min(len(base), len(with_call)) - end and base[start] == with_call[start]:
        start += 1
    start, stop = _snapped(with_call, start, len(with_call) - end)
    added = with_call[start:stop]
    if CONTENT in added:  # the content written before the calls, or after them (Gemma 4)
        before, _, after = added.partition(CONTENT)
        added = after if NAME in after or OTHER_NAME in after else before
    for marker in _REASONING_ENDS:
        if marker in added:
            added = added[added.rindex(marker) + len(marker):]
    for call_id in IDS:
        added = added.replace(call_id, ID_SLOT)
    return added


def _snapped(text: str, start: int, stop: int) -> tuple[int, int]:
    """The changed span widened to whole markers: a diff may begin or end inside one that
    differs only in its middle (<|START_ACTION|> against <|START_RESPONSE|>)."""
    while (0 < start and not text[:start].endswith(CONTENT) and not text[start - 1].isspace()
           and text[start - 1] not in ">]}" and text[start:start + 1] not in ("<", "[")):
        start -= 1
    widened = stop
    while widened < len(text) and widened - stop < _MARKER_LIMIT and text[widened - 1] not in ">]})" \
            and not text[widened - 1].isspace():
        widened += 1
    return start, widened if text[widened - 1:widened] in (">", "]", "}", ")") else stop


def _renders(render: Render) -> dict[str, str]:
    try:
        base = render(_conversation(None), TOOLS, False)
        one = render(_conversation([_call(NAME, ARGS, 0)]), TOOLS, False)
    except Exception as exc:  # a template may raise anything (prompt/'s TemplateError, above us)
        raise NotDerivable(f"the template did not render a call: {exc}") from None
    found = {"one": _added_text(base, one)}
    for label, calls in (("reversed", [_call(NAME, ARGS_REVERSED, 0)]), ("empty", [_call(OTHER_NAME, {}, 0)]),
                         ("two", [_call(NAME, ARGS, 0), _call(OTHER_NAME, OTHER_ARGS, 1)])):
        try:
            found[label] = _added_text(base, render(_conversation(calls), TOOLS, False))
        except Exception:  # e.g. a template that refuses parallel calls
            found[label] = ""
    found["prompt"] = _generation_prompt(render)
    if OTHER_NAME not in found["two"]:  # a template that writes one call of several
        found["two"] = ""
    if NAME not in found["one"]:
        raise NotDerivable("the template does not write the function's name")
    return found


def shows_tools(render: Render) -> bool:
    """Whether the template writes the tools' definitions itself (else prompt/polyfill writes them)."""
    try:
        return NAME in render(_conversation(None)[:1], TOOLS, True)
    except Exception:  # a template may raise anything (prompt/'s TemplateError, above us)
        return False


def _generation_prompt(render: Render) -> str:
    """What the generation prompt writes, with a little of what comes before it."""
    asked = _conversation(None)[:1]
    try:
        without, with_prompt = render(asked, TOOLS, False), render(asked, TOOLS, True)
    except Exception:  # a template may raise anything (prompt/'s TemplateError, above us)
        return ""
    n = 0
    while n < min(len(without), len(with_prompt)) and without[n] == with_prompt[n]:
        n += 1
    return with_prompt[max(0, n - _HEADER_CONTEXT):]


def _json_objects(text: str) -> list[tuple[int, int, object]]:
    found = []
    for i, ch in enumerate(text):
        end = _bracket_end(text, i) if ch == "{" else None
        if end is not None:
            try:
                found.append((i, end, strict_loads(text[i:end])))
            except ValueError:
                continue
    return found


def _bracket_end(text: str, start: int) -> int | None:
    """Where the bracketed value opened at `start` closes (strings skipped), or None."""
    depth, in_string, escaped = 0, False, False
    for j in range(start, len(text)):
        c = text[j]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
    return None


def _common_end(a: str, b: str) -> str:
    """The longest common suffix, begun at the start of a whole marker or word."""
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    if n < min(len(a), len(b)) or len(a) != len(b):
        while n and not (a[-n].isspace() or a[-n] in "<[{(" or n == len(a)
                         or a[-n - 1].isspace() or a[-n - 1] in ">]}"):
            n -= 1
    return a[len(a) - n:]


def _frame(head: str, tail: str, between: str | None) -> dict[str, str]:
    """Split the text before the first call's name (or object), the text after its end, and the
    text between two calls into the block's and each call's literals."""
    if not between:
        return {"block_open": "", "call_open": head, "call_sep": "", "block_close": "", "call_end": tail}
    call_end = common_start(tail, between)
    rest = between[len(call_end):]
    call_open = _common_end(head, rest)
    return {"block_open": head[:len(head) - len(call_open)], "call_open": call_open,
            "call_sep": rest[:len(rest) - len(call_open)], "block_close": tail[len(call_end):],
            "call_end": call_end}


def _json_format(texts: dict[str, str]) -> CallFormat | None:
    one, two = texts["one"], texts["two"]
    for layout, fits in (("object", lambda v: NAME in v.values() and ARGS in v.values()),
                         ("keyed", lambda v: v == {NAME: ARGS}), ("json_args", lambda v: v == ARGS)):
        spans = [(s, e) for s, e, v in _json_objects(one) if isinstance(v, dict) and fits(v)]
        if not spans:
            continue
        start, end = spans[0]
        others = [(s, e) for s, e, v in _json_objects(two) if isinstance(v, dict) and (
            fits(v) or (layout == "object" and OTHER_NAME in v.values()) or v == {OTHER_NAME: OTHER_ARGS}
            or (layout == "json_args" and v == OTHER_ARGS))]
        if layout == "json_args":
            name_at = one.rfind(NAME, 0, start)
            if name_at < 0:
                return None
            head, name_close = one[:name_at], one[name_at + len(NAME):start]
            between = None
            if len(others) >= 2 and (second := two.rfind(OTHER_NAME, 0, others[1][0])) >= 0:
                between = two[others[0][1]:second]
            return CallFormat("json_args", name_close=name_close.replace(NAME, NAME_SLOT),
                              **_frame(head, one[end:], between))
        between = two[others[0][1]:others[1][0]] if len(others) >= 2 else None
        return CallFormat(layout, **_frame(one[:start], one[end:], between))
    return None


def _pairs_format(texts: dict[str, str]) -> CallFormat | None:
    """NAME, then KEY/VALUE pairs in markup: anchors found in order in each render."""
    def anchors(text: str, parts: list[str]) -> list[int] | None:
        at, found = 0, []
        for part in parts:
            at = text.find(part, at)
            if at < 0:
                return None
            found.append(at)
            at += len(part)
        return found

    one, rev, two, empty = texts["one"], texts["reversed"], texts["two"], texts["empty"]
    days = str(ARGS["days"])
    parts = [NAME, "city", ARGS["city"], "days", days]
    a, b = anchors(one, parts), anchors(rev, [NAME, "count", days, "town", ARGS["city"]])
    if a is None or b is None:
        return None
    after = [a[i] + len(parts[i]) for i in range(5)]
    name_close, kv_string, next_string = one[after[0]:a[1]], one[after[1]:a[2]], one[after[2]:a[3]]
    kv_other, end_other = one[after[3]:a[4]], one[after[4]:]
    next_other, end_string = rev[b[2] + len(days):b[3]], rev[b[4] + len(ARGS["city"]):]
    c = anchors(two, [NAME, days, OTHER_NAME])
    between = two[c[1] + len(days):c[2]] if c else None
    frame = _frame(one[:a[0]], end_other, between)
    close = frame.pop("block_close")
    value_end = (_less_suffix(end_string, close), frame.pop("call_end"))
    z = empty.find(OTHER_NAME)
    zero_args = _less_suffix(empty[z + len(OTHER_NAME):], close) if z >= 0 else ""
    return CallFormat(  # the name again inside the markup (muse: `to=NAME<|message|><invoke name="NAME">`)
        "pairs", block_close=close, name_close=name_close.replace(NAME, NAME_SLOT),
        zero_args=zero_args.replace(OTHER_NAME, NAME_SLOT),
        key_value=(kv_string.replace("city", KEY_SLOT), kv_other.replace("days", KEY_SLOT)),
        value_next=(next_string.replace("city", KEY_SLOT), next_other.replace("count", KEY_SLOT)),
        value_end=(value_end[STRING].replace("town", KEY_SLOT), value_end[OTHER].replace("days", KEY_SLOT)),
        **frame)


def _less_suffix(text: str, suffix: str) -> str:
    return text[:len(text) - len(suffix)] if suffix and text.endswith(suffix) else text


def _with_object_text(fmt: CallFormat, one: str) -> CallFormat:
    """The object's own text around the arguments, for writing a forced call."""
    if fmt.layout not in ("object", "keyed"):
        return fmt
    objects = _json_objects(one)
    outer = next(((s, e) for s, e, v in objects if isinstance(v, dict) and (
        ARGS in v.values() and NAME in v.values() or v == {NAME: ARGS})), None)
    inner = next(((s, e) for s, e, v in objects if v == ARGS and outer and s > outer[0]), None)
    if outer is None or inner is None:
        raise NotDerivable("the call object's own text")
    head = one[outer[0]:inner[0]].replace(NAME, NAME_SLOT)
    return CallFormat(**{**fmt.__dict__, "object_head": head, "object_tail": one[inner[1]:outer[1]]})


def _less_turn_header(fmt: CallFormat, prompt: str) -> CallFormat:
    """The block without the assistant's turn header, where a template writes the calls as a
    turn of their own (`prompt`: what the generation prompt writes, and a little before it):
    the generation prompt has already written that header."""
    opening = (fmt.block_open + fmt.call_open).lstrip()
    block = len(opening) - len(fmt.call_open)
    cut = 0
    for k in range(1, len(opening)):
        at_marker = opening[k - 1] == "\n" or (opening[k - 1] == ">" and opening[k] in "<[\n")
        if at_marker and opening[:k].strip() in prompt:
            cut = k
    if not cut:
        return fmt
    if cut <= block:
        return CallFormat(**{**fmt.__dict__, "block_open": opening[cut:block]})
    return CallFormat(**{**fmt.__dict__, "block_open": "", "call_open": opening[cut:]})


def family_name(fmt: CallFormat) -> str:
    text = fmt.block_open + fmt.call_open + fmt.name_close + "".join(fmt.key_value)
    return next((name for marker, name in _FAMILY_NAMES if marker in text), "derived")


def derive_format(render: Render) -> CallFormat:
    """The template's call format, checked by parsing its own renders back; NotDerivable else."""
    texts = _renders(render)
    try:
        fmt = _json_format(texts) or _pairs_format(texts)
        if fmt is None:
            raise NotDerivable("no known argument layout in the rendered call")
        fmt = _with_object_text(_less_turn_header(fmt, texts["prompt"]), texts["one"])
    except (ValueError, IndexError, KeyError, TypeError) as exc:  # a render this reading misjudged
        raise NotDerivable(f"the rendered call could not be taken apart: {exc}") from None
    syntax = format_syntax("derived", fmt)
    if not syntax.starts:
        raise NotDerivable("the call has no marker of its own")
    checks = [(texts["one"], [(NAME, ARGS)]), (texts["reversed"], [(NAME, ARGS_REVERSED)]),
              (texts["empty"], [(OTHER_NAME, {})]), (texts["two"], [(NAME, ARGS), (OTHER_NAME, OTHER_ARGS)])]
    for text, expected in checks:
        if not text:
            continue  # a shape the template does not write (parallel calls)
        _, calls = parse_generated_tools(text.replace(ID_SLOT, "abc123XYZ"), syntax, TOOL_PARAMETERS)
        if [(c.name, strict_loads(c.arguments)) for c in calls] != expected:
            raise NotDerivable(f"the derived format does not read the template's own call back: {fmt}")
    return fmt



