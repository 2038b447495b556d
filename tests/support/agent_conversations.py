"""The conversations an agent sends, and what a rendered prompt must keep of them.

Each conversation is OpenAI-shaped, as every dialect hands its input to the template. A prompt
passes when it renders and shows every tool definition (name and description), every call's
name and argument values, every result, every system and user text, and no literal ``None``.
The conformance tests and contrib/template_table.py use the same checks.
"""

from __future__ import annotations

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather now in a city (desc-w1)",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                   "required": ["city"]}}}
READ_FILE = {"type": "function", "function": {
    "name": "read_file", "description": "Read a text file (desc-r2)",
    "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "where"},
                                                    "limit": {"type": "integer", "description": "lines"}},
                   "required": ["path"]}}}
TOOLS = [WEATHER, READ_FILE]

SYSTEM = {"role": "system", "content": "You are terse (sys-s1)."}
ASK = {"role": "user", "content": "Weather in Paris? (user-u1)"}


def _call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _result(call_id: str, name: str, text: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": text}


WEATHER_CALL = _call("call_W1x2y3z4a", "get_weather", '{"city": "Paris-v1"}')
READ_CALL = _call("toolu_01ReadFile9q", "read_file", '{"path": "/tmp/notes-v2.txt", "limit": 42}')
WEATHER_RESULT = _result("call_W1x2y3z4a", "get_weather", "sunny, 21C (result-r1)")
READ_RESULT = _result("toolu_01ReadFile9q", "read_file", "line one (result-r2)")


def _call_turn(content: object, *calls: dict, **extra: object) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": list(calls), **extra}


CONVERSATIONS: dict[str, list[dict]] = {
    "plain": [SYSTEM, ASK],
    "call_null_content": [SYSTEM, ASK, _call_turn(None, WEATHER_CALL), WEATHER_RESULT],
    "call_empty_content": [SYSTEM, ASK, _call_turn("", WEATHER_CALL), WEATHER_RESULT],
    "parallel_calls": [SYSTEM, ASK, _call_turn(None, WEATHER_CALL, READ_CALL), WEATHER_RESULT, READ_RESULT],
    "reasoning_in_history": [
        SYSTEM, {"role": "user", "content": "Hi (user-u0)"},
        {"role": "assistant", "content": "Hello (answer-a0)", "reasoning_content": "greet back"},
        ASK, _call_turn(None, WEATHER_CALL, reasoning_content="need the weather"), WEATHER_RESULT],
    "no_system": [ASK, _call_turn("", WEATHER_CALL), WEATHER_RESULT],
    "second_system": [SYSTEM, ASK, {"role": "assistant", "content": "Sunny (answer-a1)"},
                      {"role": "system", "content": "Now answer in French (sys-s2)."},
                      {"role": "user", "content": "And Lyon? (user-u2)"}],
}
CHECKS = tuple(CONVERSATIONS)


def required_texts(messages: list[dict]) -> list[str]:
    """What the prompt must show of these messages and TOOLS."""
    texts = []
    for tool in TOOLS:
        texts += [tool["function"]["name"], tool["function"]["description"]]
    for message in messages:
        if message["role"] in ("system", "user", "tool"):
            texts.append(message["content"])
        for call in message.get("tool_calls") or []:
            texts.append(call["function"]["name"])
            texts += _argument_values(call["function"]["arguments"])
    return texts


def _argument_values(arguments: str) -> list[str]:
    import json
    return [str(v) for v in json.loads(arguments).values()]


def problems(prompt: str, messages: list[dict]) -> list[str]:
    """What the prompt lacks (each missing text), or shows wrongly (a literal None)."""
    found = [f"missing {text!r}" for text in required_texts(messages) if text not in prompt]
    if "None" in prompt.replace("= None", ""):    # a default in a Python signature is the template's own
        found.append("a literal None")
    return found
