"""Chat templates: render a model's Jinja chat template the way Hugging Face does.

A template sees what HF's ``apply_chat_template`` gives it: ``messages``,
``add_generation_prompt``, ``bos_token``, ``eos_token``, ``tools`` (None when
there are none), the globals ``raise_exception`` and ``strftime_now``, the
``tojson`` filter with HF's signature, plus the request's ``chat_template_kwargs``.
It runs in jinja2's immutable sandbox. Every failure, the template's own
``raise_exception`` included, surfaces as one :class:`TemplateError` whose
message can go back to the client in a 400.

OpenAI-shaped messages are normalized first (:func:`normalize_messages`),
because templates are written against HF's conventions, not OpenAI's wire format.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

import jinja2
import jinja2.ext
import orjson
from jinja2.sandbox import ImmutableSandboxedEnvironment

from . import hf_json

__all__ = ["BUILTIN_TEMPLATES", "ChatTemplate", "TemplateError", "ToolArguments",
           "choose_template", "fold_system_turns", "has_later_system_turns", "normalize_messages",
           "shows_every_system_turn"]


class TemplateError(Exception):
    """A chat template could not be loaded or rendered; the message is fit for a 400."""


# --- messages ----------------------------------------------------------------

_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


class ToolArguments(dict):
    """Tool-call arguments: a dict that still reads as the JSON text it came from.

    Templates disagree about arguments. Qwen, Llama and Mistral templates do
    ``arguments | tojson`` or ``arguments.items()`` and need a dict; DeepSeek's
    concatenates ``'```json\\n' + arguments`` and needs the string. This is both:
    a mapping for the first kind, the client's own text under ``str()``, ``~``
    and ``+`` for the second (so the prompt repeats what the model generated).
    """

    def __init__(self, value: dict, text: str) -> None:
        super().__init__(value)
        self._text = text  # underscore: invisible to sandboxed templates

    def __str__(self) -> str:
        return self._text

    def __add__(self, other: Any) -> Any:
        return self._text + other if isinstance(other, str) else NotImplemented

    def __radd__(self, other: Any) -> Any:
        return other + self._text if isinstance(other, str) else NotImplemented


def normalize_messages(messages: list[dict]) -> list[dict]:
    """OpenAI chat messages → the shape HF chat templates expect. Inputs are not mutated.

    - Keys whose value is None are dropped (templates test ``'tool_calls' in message``
      or ``is defined``), except ``content``, which every message then has: text,
      or None only on an assistant turn that makes tool calls (DeepSeek-style
      templates test ``content is none``); missing elsewhere becomes "".
    - A list of content parts becomes one string: the text parts joined with "\\n"
      (as vLLM and llama.cpp do). Any other part type → TemplateError.
    - An empty ``tool_calls`` list is dropped; each call's ``function.arguments``
      becomes a :class:`ToolArguments` (from a JSON object string or a dict; "" and
      None mean {}). A string that is not a JSON object stays a string. A call
      without ``type`` gets ``"function"``.
    - Role ``developer`` becomes ``system``: few templates know it.
    - Everything else (``tool_call_id``, ``name``, ``reasoning_content``) is kept as is.
    """
    if not isinstance(messages, list):
        raise TemplateError("messages must be a list")
    return [_normalize_message(m) for m in messages]


def _normalize_message(message: Any) -> dict:
    if not isinstance(message, dict):
        raise TemplateError("each message must be an object")
    out = {k: v for k, v in message.items() if v is not None}
    if out.get("role") == "developer":
        out["role"] = "system"
    content = out.get("content")
    if isinstance(content, list):
        content = _join_text_parts(content)
    if out.get("tool_calls"):
        if not isinstance(out["tool_calls"], list):
            raise TemplateError("a message's tool_calls must be an array")
        out["tool_calls"] = [_normalize_tool_call(c) for c in out["tool_calls"]]
    else:
        out.pop("tool_calls", None)
    if out.get("role") == "assistant" and "tool_calls" in out and not content:
        out["content"] = None
    else:
        out["content"] = "" if content is None else content
    return out


def _join_text_parts(parts: list) -> str:
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in _TEXT_PART_TYPES:
            texts.append(str(part.get("text") or ""))
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise TemplateError(f"content part of type {kind!r} is not supported by this model")
    return "\n".join(texts)


def _normalize_tool_call(call: Any) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    function = dict(call["function"])
    function["arguments"] = _tool_arguments(function.get("arguments"))
    return {"type": "function", **call, "function": function}


def _tool_arguments(value: Any) -> Any:
    if isinstance(value, ToolArguments):
        return value
    if value is None or (isinstance(value, str) and not value.strip()):
        return ToolArguments({}, "{}")
    if isinstance(value, dict):
        return ToolArguments(value, _tojson(value))
    if isinstance(value, str):
        try:
            parsed = orjson.loads(value)
        except ValueError:
            return value
        if isinstance(parsed, dict):
            return ToolArguments(parsed, value)
    return value


# --- system turns after the first message --------------------------------------
# Anthropic (and OpenAI's developer messages) allow instructions in the middle of a
# conversation. Templates that take a system turn anywhere (ChatML, Qwen, Llama 3) get
# it as it is; for one that refuses it (Mistral) or drops it (one that keeps only
# the last system message), the turn becomes text of the user turn it follows.

def has_later_system_turns(messages: list[dict]) -> bool:
    return any(m.get("role") in ("system", "developer") for m in messages[1:])


def shows_every_system_turn(messages: list[dict], render: Callable[[list[dict]], str]) -> bool:
    """Whether `render` shows every system message: with a private-use mark in place of each one's
    text (which could appear elsewhere in the conversation), the prompt holds every mark."""
    marks = {i: f"\ue001{i}\ue001" for i, m in enumerate(messages) if m.get("role") in ("system", "developer")}
    try:
        text = render([{**m, "content": marks[i]} if i in marks else m for i, m in enumerate(messages)])
    except TemplateError:
        return False
    return all(mark in text for mark in marks.values())


def fold_system_turns(messages: list[dict]) -> list[dict]:
    """A leading system message stays; every later one becomes a user message (wrapped in
    <system> tags) merged with the user message before or after it."""
    out: list[dict] = []
    for i, message in enumerate(messages):
        if i > 0 and message.get("role") in ("system", "developer"):
            message = {"role": "user", "content": f"<system>\n{_system_text(message)}\n</system>"}
        last = out[-1] if out else None
        if last is not None and message.get("role") == "user" and last.get("role") == "user":
            out[-1] = {**last, "content": _joined(last.get("content"), message["content"])}
        else:
            out.append(message)
    return out


def _system_text(message: dict) -> str:
    content = message.get("content")
    return _join_text_parts(content) if isinstance(content, list) else str(content or "")


def _joined(first: Any, second: str) -> str:
    first = _join_text_parts(first) if isinstance(first, list) else str(first or "")
    return f"{first}\n\n{second}" if first else second


# --- the Jinja environment (as HF's transformers/utils/chat_template_utils.py) ---

def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Any = None, sort_keys: bool = False) -> str:
    # Jinja's own tojson escapes HTML characters; HF's does not, and prompts must carry
    # HF's exact text (hf_json writes it).
    return hf_json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                         separators=separators, sort_keys=sort_keys)


def _raise_exception(message: Any) -> None:
    raise TemplateError(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _GenerationTag(jinja2.ext.Extension):
    """HF's ``{% generation %}…{% endgeneration %}`` (a training-mask marker): render the body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> Any:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


_ENV = ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _GenerationTag])
_ENV.filters["tojson"] = _tojson
_ENV.globals["raise_exception"] = _raise_exception
_ENV.globals["strftime_now"] = _strftime_now

_RESERVED = frozenset({"messages", "tools", "add_generation_prompt", "bos_token",
                       "eos_token", "raise_exception", "strftime_now"})


@functools.lru_cache(maxsize=16)
def _compile(text: str) -> jinja2.Template:
    try:
        return _ENV.from_string(text)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"chat template syntax error on line {e.lineno}: {e.message}") from None


@dataclass
class ChatTemplate:
    source: str  # "gguf:tokenizer.chat_template", "file:PATH", "builtin:NAME"; for the start-up log
    text: str
    bos_token: str
    eos_token: str

    def render(self, messages: list[dict], *, tools: list[dict] | None = None,
               add_generation_prompt: bool = True, extra: dict | None = None) -> str:
        """The prompt text for ``messages`` (OpenAI-shaped; normalized here).

        ``tools``: OpenAI tool objects; an empty list is passed as None, as HF
        passes no tools, so ``{% if tools is not none %}`` blocks stay out.
        ``extra``: the request's ``chat_template_kwargs`` (``enable_thinking``,
        ``reasoning_effort``, ...); they may not replace the variables above.
        """
        extra = dict(extra or {})
        clash = sorted(_RESERVED.intersection(extra))
        if clash:
            raise TemplateError(f"chat_template_kwargs may not set {clash[0]!r}")
        variables = {
            **extra,
            "messages": normalize_messages(messages),
            "tools": tools or None,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        template = _compile(self.text)
        try:
            return template.render(variables)
        except TemplateError:
            raise
        except jinja2.TemplateError as e:
            raise TemplateError(f"chat template error: {e.message or type(e).__name__}") from None
        except Exception as e:  # a template can make Python raise anything (TypeError, ...)
            raise TemplateError(f"chat template error: {type(e).__name__}: {e}") from None


# --- built-in templates, for models whose GGUF has none ----------------------
# Tools for models without a tool format of their own: Hermes / Qwen 2.5 markers.
_TOOLS_PREAMBLE = (
    "{%- macro tools_preamble(tools) -%}\n"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}{{ '\\n' + tool | tojson }}{% endfor %}{{ '\\n' }}</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n'
    "{%- endmacro -%}\n"
    "{%- macro tool_calls(message) -%}\n"
    "{%- for call in message.tool_calls -%}\n"
    "{%- set call = call.function if call.function is defined else call -%}\n"
    "{{ '\\n' if message.content or not loop.first }}<tool_call>\n"
    '{"name": {{ call.name | tojson }}, "arguments": {{ call.arguments | tojson }}}\n</tool_call>'
    "{%- endfor -%}\n"
    "{%- endmacro -%}\n"
    # Consecutive tool results share one user turn (opened by `start`, closed by `end`).
    "{%- macro tool_result(message, loop, start, end) -%}\n"
    "{{ start if loop.first or loop.previtem.role != 'tool' else '\\n' }}<tool_response>\n"
    "{{ message.content }}\n</tool_response>{{ end if loop.last or loop.nextitem.role != 'tool' }}"
    "{%- endmacro -%}\n"
)

# Gemma 3's own template (system text prepended to the first turn, "model" for
# the assistant, contents trimmed), without its strict role-alternation check,
# plus Hermes-style tools.
_GEMMA = _TOOLS_PREAMBLE + """\
{{- bos_token }}
{%- set ns = namespace(prefix="") %}
{%- if messages and messages[0].role == "system" %}
    {%- set ns.prefix = messages[0].content + "\\n\\n" %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if tools %}
    {%- set ns.prefix = ns.prefix + tools_preamble(tools) + "\\n\\n" %}
{%- endif %}
{%- for message in loop_messages %}
    {%- set prefix = ns.prefix if loop.first else "" %}
    {%- if message.role == "tool" %}
        {{- tool_result(message, loop, "<start_of_turn>user\\n" + prefix, "<end_of_turn>\\n") }}
    {%- else %}
        {%- set role = "model" if message.role == "assistant" else message.role %}
        {{- "<start_of_turn>" + role + "\\n" + prefix + (message.content or "") | trim }}
        {%- if message.tool_calls %}
            {{- tool_calls(message) }}
        {%- endif %}
        {{- "<end_of_turn>\\n" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- "<start_of_turn>model\\n" }}
{%- endif %}
"""

# Plain ChatML; with tools, the Hermes / Qwen 2.5 system block and markers.
_CHATML = _TOOLS_PREAMBLE + """\
{%- set has_system = messages and messages[0].role == "system" %}
{%- set loop_messages = messages[1:] if has_system else messages %}
{%- if tools %}
    {{- "<|im_start|>system\\n" }}
    {%- if has_system %}
        {{- messages[0].content + "\\n\\n" }}
    {%- endif %}
    {{- tools_preamble(tools) + "<|im_end|>\\n" }}
{%- elif has_system %}
    {{- "<|im_start|>system\\n" + messages[0].content + "<|im_end|>\\n" }}
{%- endif %}
{%- for message in loop_messages %}
    {%- if message.role == "tool" %}
        {{- tool_result(message, loop, "<|im_start|>user\\n", "<|im_end|>\\n") }}
    {%- else %}
        {{- "<|im_start|>" + message.role + "\\n" + (message.content or "") }}
        {%- if message.tool_calls %}
            {{- tool_calls(message) }}
        {%- endif %}
        {{- "<|im_end|>\\n" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- "<|im_start|>assistant\\n" }}
{%- endif %}
"""

BUILTIN_TEMPLATES: dict[str, str] = {"gemma": _GEMMA, "chatml": _CHATML}


def _builtin_for(architecture: str) -> str:
    return "gemma" if architecture.lower().startswith("gemma") else "chatml"


def choose_template(*, gguf_template: str | None, architecture: str, bos_token: str,
                    eos_token: str, override_path: str | None = None) -> ChatTemplate:
    """The template to serve with: the override file, else the GGUF's, else a builtin.

    An unreadable or unparsable override file raises TemplateError (a start-up
    error). A GGUF template that does not parse falls back to the builtin, and
    ``source`` says why, as llama.cpp's server does.
    """
    if override_path:
        try:
            text = Path(override_path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise TemplateError(f"cannot read chat template file {override_path}: {e}") from None
        try:
            _compile(text)
        except TemplateError as e:
            raise TemplateError(f"chat template file {override_path}: {e}") from None
        return ChatTemplate(f"file:{override_path}", text, bos_token, eos_token)
    note = ""
    if gguf_template and gguf_template.strip():
        try:
            _compile(gguf_template)
            return ChatTemplate("gguf:tokenizer.chat_template", gguf_template, bos_token, eos_token)
        except TemplateError as e:
            note = f" (tokenizer.chat_template not usable: {e})"
    name = _builtin_for(architecture)
    return ChatTemplate(f"builtin:{name}{note}", BUILTIN_TEMPLATES[name], bos_token, eos_token)
