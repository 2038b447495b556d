"""Which tool-call family a model's chat template speaks.

Derived from the template's own rendered calls first (derive_family). Where the format
derived is one of the hand-written families, that family serves it (they read more variants
than the template shows: DeepSeek R1 and V3.1 heads, Mistral's ids, Qwen3-Coder's typed values
streamed as they come). Harmony is recognised by its markers (each call is a message of its
own, which derivation cannot express); a template that renders no call (it fails on the probe,
or leaves calls out of the history) falls back to the formats known by a marker the template
mentions, then to the hand-written families' markers. A template with no marker at all either
shows no tools, and then the model learns them from prompt/polyfill's text, whose instructions
teach Hermes' `<tool_call>` markup (so that is what is read back), or shows them in its own words
with no call format, read as the generic `json`.
"""

from __future__ import annotations

from .call_format import CallFormat
from .derive_family import NotDerivable, Render, derive_format, family_name, shows_tools
from .format_parser import format_syntax
from .tool_families import (DEEPSEEK, DS_CALL_BEGIN, HARMONY, HERMES, JSON, MISTRAL, QWEN3_CODER, TOOL_SYNTAXES,
                            ToolSyntax, detect_tool_syntax)

# Formats known by a marker, for templates whose calls do not render today (any of the markers
# names the format: LFM2.5's plain "List of tools: [" says LFM2's Python calls as well as LFM2's
# <|tool_list_start|> does, as llama.cpp reads it).
KNOWN_FORMATS: dict[str, tuple[tuple[str, ...], CallFormat]] = {
    "kimi_k2": (("<|tool_calls_section_begin|>",), CallFormat(
        "json_args", "<|tool_calls_section_begin|>", "<|tool_call_begin|>functions.", "",
        "<|tool_calls_section_end|>", call_end="<|tool_call_end|>", name_close=":0<|tool_call_argument_begin|>")),
    "lfm2": (("<|tool_list_start|>", "List of tools: ["), CallFormat(
        "pairs", "<|tool_call_start|>[", "", ", ", "]<|tool_call_end|>", name_close="(", zero_args="()",
        key_value=("='", "="), value_next=("', ", ", "), value_end=("')", ")"))),
    "command_r_plus": (("json-formatted list of actions",), CallFormat(
        "object", "Action:\n```json\n[\n", "", ",\n", "\n]\n```", call_end="",
        object_head='{\n    "tool_name": "\ue000",\n    "parameters": ', object_tail="\n}")),
    "firefunction": (("functools[",), CallFormat(
        "object", "functools[", "", ", ", "]", call_end="",
        object_head='{"name": "\ue000", "arguments": ', object_tail="}")),
    "granite": (("<|tool_call|>",), CallFormat(
        "object", "<|tool_call|>[", "", ", ", "]", call_end="",
        object_head='{"name": "\ue000", "arguments": ', object_tail="}")),
}


def _hand_written(fmt: CallFormat) -> ToolSyntax | None:
    opening = (fmt.block_open + fmt.call_open).strip()
    if fmt.layout == "object" and opening == "<tool_call>" and fmt.call_end.strip() == "</tool_call>":
        return HERMES
    if (fmt.layout == "pairs" and opening.startswith("<tool_call>") and opening.endswith("<function=")
            and "<parameter=" in fmt.name_close):
        return QWEN3_CODER
    if "[TOOL_CALLS]" in opening:
        return MISTRAL
    if DS_CALL_BEGIN in opening:
        return DEEPSEEK
    return None


def derived_syntax(fmt: CallFormat, name: str | None = None) -> ToolSyntax:
    name = name or family_name(fmt)
    return format_syntax(name, fmt)


def named_family(name: str) -> ToolSyntax:
    """A family by name, for --tool-syntax: a hand-written one or a known format."""
    if name in KNOWN_FORMATS:
        return derived_syntax(KNOWN_FORMATS[name][1], name)
    return TOOL_SYNTAXES[name]


FAMILY_NAMES = frozenset(TOOL_SYNTAXES) | frozenset(KNOWN_FORMATS)


def detect_family(template_text: str | None, render: Render | None) -> ToolSyntax:
    """The family for a template; `render(messages, tools)` renders it (None: markers only)."""
    text = template_text or ""
    if detect_tool_syntax(text) == "harmony":
        return HARMONY
    if render is not None and text:
        try:
            fmt = derive_format(render)
        except NotDerivable:
            pass
        else:
            return _hand_written(fmt) or derived_syntax(fmt)
    for name, (markers, fmt) in KNOWN_FORMATS.items():
        if any(marker in text for marker in markers):
            return derived_syntax(fmt, name)
    found = TOOL_SYNTAXES[detect_tool_syntax(text)]
    if found is JSON and render is not None and not shows_tools(render):
        return HERMES       # what prompt/polyfill's tools text teaches
    return found
