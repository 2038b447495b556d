"""What a chat template can show, learned by rendering small fixed conversations through it.

Real templates differ in what they accept: some fail on a null ``content`` or print ``None``,
some refuse a system role, some never show ``tools``, tool calls or tool results, some refuse
two calls in one turn, some insist on a call-id shape (Mistral's nine alphanumerics). Reading
the template's source for this is guesswork; rendering it is not. Each probe renders one short
conversation whose every piece is a marker no template writes on its own, and looks for the
markers in the output (an error counts as "not shown"). :mod:`.polyfill` makes up for what is
missing. The strategy is llama.cpp's (common/jinja/caps.cpp), which watches which values a
template reads; watching the output is enough here and needs no instrumented interpreter.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass

from .jinja_env import TemplateError
from .messages import ToolArguments

__all__ = ["Render", "TemplateCaps", "probe"]

# (messages, tools, add_generation_prompt) → prompt text; raises TemplateError
Render = Callable[[list[dict], "list[dict] | None", bool], str]

SYSTEM, USER, ANSWER, RESULT, REASONING = ("SYSMARKq1", "USERMARKq2", "ANSWERMARKq3", "RESULTMARKq4",
                                           "REASONMARKq5")
TOOL_NAME, TOOL_DESCRIPTION = "probe_tool_zq", "TOOLDESCMARKq6"
ARG_VALUES = ("ARGVALUEq7", "ARGVALUEq8")
ARGS_TEXT = "ARGSTEXTq10"
# two call ids of each form: OpenAI's, and Mistral's nine alphanumerics
_IDS = {"any": ("call_probe0001", "call_probe0002"), "alnum9": ("aB3dE5gH7", "kL9mN1pQ2")}

_TOOLS = [{"type": "function", "function": {
    "name": TOOL_NAME, "description": TOOL_DESCRIPTION,
    "parameters": {"type": "object", "properties": {"arg": {"type": "string", "description": "ARGDESCq11"}}, "required": ["arg"]}}}]


@dataclass(frozen=True)
class TemplateCaps:
    renders: bool = True              # a plain user turn renders at all
    needs_tools_list: bool = False    # ... only with ``tools`` a list (a tool-use-only template)
    system_role: bool = True          # a system turn renders (is not refused)
    system_after_calls: bool = True   # its text, where shown, is still shown when the conversation
                                      # ends in a tool result (not Mistral's: only in a last user turn)
    tools: bool = True                # tool definitions are shown
    needs_descriptions: bool = False  # ... only where every parameter has a description (Command R+
                                      # adds each to a string)
    tool_calls: bool = True           # an assistant turn's calls (name and arguments) are shown
    tool_results: bool = True         # a tool turn's result is shown
    parallel_tool_calls: bool = True  # two calls in one turn are both shown
    null_content: bool = True         # a tool-call turn with content null renders, without "None"
    empty_content: bool = True        # ... with content "" renders and still shows its calls
    arguments: str = "object"         # "object" or "string": the form of arguments it shows
    call_ids: str = "any"             # "any" or "alnum9" (exactly nine letters and digits)
    reasoning: bool = False           # reasoning_content of an earlier, finished turn is shown
    reasoning_in_tool_loop: bool = False  # ... of the calls' turn in the tool loop under way
    reasoning_field: str = "reasoning_content"  # or "thinking" (gpt-oss), the field it reads
    end_of_turn: str = ""             # the text that closes an assistant turn

    def as_json(self) -> dict:
        return asdict(self)


def probe(render: Render) -> TemplateCaps:
    if _try(render, [_user()], None) is None:
        if _try(render, [_user()], []) is None:
            return TemplateCaps(renders=False)
        # a tool-use-only template: it iterates over ``tools`` unconditionally
        given = render
        render = lambda messages, tools, gen: given(messages, [] if tools is None else tools, gen)  # noqa: E731
        found: dict = {"needs_tools_list": True}
    else:
        found = {}
    with_tools = _try(render, [_user()], _TOOLS)
    found["tools"] = bool(with_tools) and TOOL_NAME in with_tools
    found["needs_descriptions"] = bool(with_tools) and _try(render, [_user()], _undescribed(_TOOLS)) is None
    found.update(_calls(render))
    found.update(_system(render, found))
    found.update(_reasoning(render, found))
    found["end_of_turn"] = _end_of_turn(render)
    return TemplateCaps(**found)


def _calls(render: Render) -> dict:
    """Call ids, null or "" content, calls, results, argument form, parallel calls."""
    found = {"call_ids": "any"}
    if (_try(render, _tool_loop("", [_call(0, _IDS["any"][0])]), _TOOLS) is None
            and _try(render, _tool_loop("", [_call(0, _IDS["alnum9"][0])]), _TOOLS) is not None):
        found["call_ids"] = "alnum9"
    first_id, second_id = _IDS[found["call_ids"]]
    empty = _try(render, _tool_loop("", [_call(0, first_id)]), _TOOLS)
    null = _try(render, _tool_loop(None, [_call(0, first_id)]), _TOOLS)
    found["empty_content"] = _shows_call(empty, 0)
    found["null_content"] = _shows_call(null, 0) and "None" not in null
    found["tool_calls"] = found["empty_content"] or found["null_content"]
    content = _content(found)
    shown = empty if content == "" else null
    found["tool_results"] = bool(shown) and RESULT in shown
    found["arguments"] = _arguments_form(render, content, first_id)
    two = _try(render, _tool_loop(content, [_call(0, first_id), _call(1, second_id)]), _TOOLS)
    found["parallel_tool_calls"] = _shows_call(two, 0) and _shows_call(two, 1)
    return found


def _content(found: dict) -> str | None:
    """The content of a tool-call turn without text that the template takes."""
    return "" if found["empty_content"] or not found["null_content"] else None


def _system(render: Render, found: dict) -> dict:
    with_system = _try(render, [{"role": "system", "content": SYSTEM}, _user()], None)
    shown = bool(with_system) and SYSTEM in with_system
    call_id = _IDS[found["call_ids"]][0]
    open_loop = [{"role": "system", "content": SYSTEM}, *_tool_loop(_content(found), [_call(0, call_id)])[:3]]
    after_calls = _try(render, open_loop, _TOOLS)
    # a template may leave system text out (its author's choice, kept); refusing it is an error
    return {"system_role": with_system is not None,
            "system_after_calls": not shown or after_calls is None or SYSTEM in after_calls}


def _reasoning(render: Render, found: dict) -> dict:
    """Reasoning shown in a finished turn; in the tool loop under way, and under which field name."""
    finished = [_user(), {"role": "assistant", "content": ANSWER, "reasoning_content": REASONING},
                _user("USERMARKq9")]
    text = _try(render, finished, None)
    result = {"reasoning": bool(text) and REASONING in text}
    call_id = _IDS[found["call_ids"]][0]
    for field in ("reasoning_content", "thinking"):
        under_way = [_user(), {"role": "assistant", "content": _content(found), field: REASONING,
                               "tool_calls": [_call(0, call_id)]},
                     {"role": "tool", "tool_call_id": call_id, "name": TOOL_NAME, "content": RESULT}]
        text = _try(render, under_way, _TOOLS)
        if text and REASONING in text:
            return {**result, "reasoning_in_tool_loop": True, "reasoning_field": field}
    return result


def _undescribed(tools: list[dict]) -> list[dict]:
    """The tools with no description on their parameters, as clients often send them."""
    out = []
    for tool in tools:
        params = tool["function"]["parameters"]
        props = {k: {n: v for n, v in p.items() if n != "description"} for k, p in params["properties"].items()}
        out.append({**tool, "function": {**tool["function"], "parameters": {**params, "properties": props}}})
    return out


def _try(render: Render, messages: list[dict], tools: list[dict] | None, gen: bool = True) -> str | None:
    try:
        return render(messages, tools, gen)
    except TemplateError:
        return None


def _user(text: str = USER) -> dict:
    return {"role": "user", "content": text}


def _call(n: int, call_id: str, arguments: object = None) -> dict:
    args = {"arg": ARG_VALUES[n]} if arguments is None else arguments
    return {"id": call_id, "type": "function", "function": {"name": TOOL_NAME, "arguments": args}}


def _tool_loop(content: str | None, calls: list[dict]) -> list[dict]:
    results = [{"role": "tool", "tool_call_id": c["id"], "name": TOOL_NAME, "content": RESULT} for c in calls]
    return [_user(), {"role": "assistant", "content": content, "tool_calls": calls}, *results,
            {"role": "assistant", "content": ANSWER}, _user("USERMARKq9")]


def _shows_call(text: str | None, n: int) -> bool:
    return bool(text) and ARG_VALUES[n] in text and TOOL_NAME in text.replace(TOOL_DESCRIPTION, "")


def _arguments_form(render: Render, content: str | None, call_id: str) -> str:
    """"string" when the template writes the arguments' JSON text (``'```json' + arguments``),
    "object" when it reads them as a mapping (``arguments | tojson``, ``arguments.items()``).
    Arguments reach every template as both (ToolArguments); here the two disagree, to tell."""
    arguments = ToolArguments({"arg": ARG_VALUES[0]}, ARGS_TEXT)
    text = _try(render, _tool_loop(content, [_call(0, call_id, arguments)]), _TOOLS)
    return "string" if text and ARGS_TEXT in text and ARG_VALUES[0] not in text else "object"


def _end_of_turn(render: Render) -> str:
    """The text that closes an answer: what follows it both when it ends the conversation and when
    a user turn comes next (so neither a closing instruction nor the next turn's opening counts),
    cut after the last whole special token; else what follows it at the end (trimmed)."""
    answer = {"role": "assistant", "content": ANSWER}
    last = _try(render, [_user(), answer], None, False)
    if not last or ANSWER not in last:
        return ""
    at_end = last[last.rindex(ANSWER) + len(ANSWER):]
    between = _try(render, [_user(), answer, _user("USERMARKq9")], None, False) or ""
    between = between[between.find(ANSWER) + len(ANSWER):] if ANSWER in between else ""
    common = os.path.commonprefix([at_end, between])
    closed = common[:common.rfind(">") + 1]
    return (closed if closed.strip() else at_end).strip()
