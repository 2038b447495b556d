"""Chat templates: which one a model is served with, and rendering it the way Hugging Face does.

A template sees what HF's ``apply_chat_template`` gives it: ``messages``,
``add_generation_prompt``, ``bos_token``, ``eos_token``, ``tools`` (None when
there are none), the globals ``raise_exception`` and ``strftime_now``, the
``tojson`` filter with HF's signature, plus the request's ``chat_template_kwargs``
and the few variables real templates read without HF passing them (:data:`COMMON_VARIABLES`).

:meth:`ChatTemplate.render` first makes up for what the template cannot show (its
capabilities are probed once, :mod:`.probe`; the rewriting is :mod:`.polyfill`);
:meth:`ChatTemplate.render_as_is` hands the messages over only normalized.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from ..parsing.tool_families import ToolSyntax
from .jinja_env import TEMPLATES_CACHED, OutputTooLong, TemplateError, at_moment, compile_template, now, render, tojson
from .polyfill import fit_to_template
from .probe import TemplateCaps, probe
from .messages import (ToolArguments, fold_system_turns, has_later_system_turns, has_user_runs,
                       normalize_messages, shows_every_system_turn)

__all__ = ["BUILTIN_TEMPLATES", "ChatTemplate", "OutputTooLong", "TemplateError", "ToolArguments",
           "choose_template", "fold_system_turns", "has_later_system_turns", "has_user_runs", "normalize_messages",
           "shows_every_system_turn"]

_RESERVED = frozenset({"messages", "tools", "add_generation_prompt", "bos_token",
                       "eos_token", "raise_exception", "strftime_now"})


def _common_variables(text: str, tools: list[dict] | None) -> dict:
    """Variables real templates read that HF's renderer does not pass, each only for a template
    that names it: ``functions`` (firefunction: the definitions as JSON text), ``xml_tools``
    (SmolLM3: the tool objects), ``date_string`` (Llama 3.x), ``datetime`` (firefunction)."""
    moment = now()
    found = {"date_string": lambda: moment.strftime("%d %b %Y"),
             "datetime": lambda: moment.strftime("%Y-%m-%d %H:%M:%S")}
    found["functions"] = lambda: tojson([t.get("function", t) for t in tools or []], indent=4)
    found["xml_tools"] = lambda: list(tools or [])
    return {name: make() for name, make in found.items() if name in text}


@dataclass
class ChatTemplate:
    source: str  # "gguf:tokenizer.chat_template", "file:PATH", "builtin:NAME"; for the start-up log
    text: str
    bos_token: str
    eos_token: str
    # the family the model writes calls in (models/loaded sets it): calls and tools the template
    # cannot show are written as text in its words (polyfill)
    calls_family: ToolSyntax | None = None

    @functools.cached_property
    def caps(self) -> TemplateCaps:
        """What the template shows and refuses, probed once per template text."""
        return _probed(self.text, self.bos_token, self.eos_token)

    def render(self, messages: list[dict], *, tools: list[dict] | None = None,
               add_generation_prompt: bool = True, extra: dict | None = None, max_chars: int | None = None) -> str:
        """The prompt text for ``messages`` (OpenAI-shaped), with what the template cannot show
        (null content, a system turn, tools, calls, parallel calls, free-form call ids) made up
        for as :mod:`.polyfill` describes. OutputTooLong past ``max_chars``."""
        fitted, fitted_tools = fit_to_template(normalize_messages(messages), tools or None, self.caps,
                                               self.calls_family)
        if fitted_tools is None and self.caps.needs_tools_list:
            fitted_tools = []
        return self.render_as_is(fitted, tools=fitted_tools, add_generation_prompt=add_generation_prompt,
                                 extra=extra, max_chars=max_chars)

    def render_as_is(self, messages: list[dict], *, tools: list[dict] | None = None,
                     add_generation_prompt: bool = True, extra: dict | None = None,
                     max_chars: int | None = None) -> str:
        """The prompt text for ``messages`` (OpenAI-shaped; normalized here, nothing else).

        ``tools``: OpenAI tool objects or None, as given (:meth:`render` passes no tools as
        None, as HF does, so ``{% if tools is not none %}`` blocks stay out).
        ``extra``: the request's ``chat_template_kwargs`` (``enable_thinking``,
        ``reasoning_effort``, ...); they may not replace the variables above.
        """
        extra = dict(extra or {})
        clash = sorted(_RESERVED.intersection(extra))
        if clash:
            raise TemplateError(f"chat_template_kwargs may not set {clash[0]!r}")
        variables = {
            **_common_variables(self.text, tools),
            **extra,
            "messages": normalize_messages(messages),
            "tools": tools,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
        }
        return render(self.text, variables, max_chars)


@functools.lru_cache(maxsize=TEMPLATES_CACHED)
def _probed(text: str, bos_token: str, eos_token: str) -> TemplateCaps:
    template = ChatTemplate("probe", text, bos_token, eos_token)
    with at_moment():       # the probes compare renders: one time shown in all of them
        return probe(lambda messages, tools, gen: template.render_as_is(messages, tools=tools,
                                                                        add_generation_prompt=gen))


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
            compile_template(text)
        except TemplateError as e:
            raise TemplateError(f"chat template file {override_path}: {e}") from None
        return ChatTemplate(f"file:{override_path}", text, bos_token, eos_token)
    note = ""
    if gguf_template and gguf_template.strip():
        try:
            compile_template(gguf_template)
            return ChatTemplate("gguf:tokenizer.chat_template", gguf_template, bos_token, eos_token)
        except TemplateError as e:
            note = f" (tokenizer.chat_template not usable: {e})"
    name = _builtin_for(architecture)
    return ChatTemplate(f"builtin:{name}{note}", BUILTIN_TEMPLATES[name], bos_token, eos_token)
