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
    # Codex: its environment context and the request as two user turns in a row
    "user_turns_in_a_row": [SYSTEM, {"role": "user", "content": "<environment_context>cwd (env-e1)</environment_context>"},
                            ASK, _call_turn(None, WEATHER_CALL), WEATHER_RESULT],
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


# --- the same conversations as the other dialects send them ---------------------------------

def as_anthropic(messages: list[dict]) -> dict:
    """A /v1/messages body (tools, system, messages) for an OpenAI-shaped conversation."""
    import json
    body: dict = {"model": "m", "max_tokens": 8, "messages": [],
                  "tools": [{"name": t["function"]["name"], "description": t["function"]["description"],
                             "input_schema": t["function"]["parameters"]} for t in TOOLS]}
    rest = messages
    if messages and messages[0]["role"] == "system":
        body["system"], rest = messages[0]["content"], messages[1:]
    out = body["messages"]
    for message in rest:
        if message["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": message["tool_call_id"], "content": message["content"]}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif message.get("tool_calls"):
            blocks = [{"type": "text", "text": message["content"]}] if message.get("content") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                        "input": json.loads(c["function"]["arguments"])} for c in message["tool_calls"]]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": message["role"], "content": message["content"]})
    return body


def as_responses(messages: list[dict]) -> tuple[list[dict], str | None]:
    """Responses input items and instructions for an OpenAI-shaped conversation."""
    instructions = None
    rest = messages
    if messages and messages[0]["role"] == "system":
        instructions, rest = messages[0]["content"], messages[1:]
    items: list[dict] = []
    for message in rest:
        if message["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": message["tool_call_id"],
                          "output": message["content"]})
        elif message.get("tool_calls"):
            if message.get("content"):
                items.append({"role": "assistant", "content": message["content"]})
            items += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                       "arguments": c["function"]["arguments"]} for c in message["tool_calls"]]
        else:
            items.append({"role": message["role"], "content": message["content"]})
    return items, instructions
