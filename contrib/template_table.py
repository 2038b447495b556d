"""The table of real chat templates (docs/tools.rst) × agent conversations, from the conformance checks.

Run from the repository root after `make template-corpus`:
    PYTHONPATH=. python contrib/template_table.py
It prints an RST table: for each template of the corpus, what localserve makes up for (from the
probe) and whether each conversation of tests/support/agent_conversations.py renders with every
tool, call, argument, result and system text shown and no None (tests/unit/prompt/
test_template_corpus.py asserts the same).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from agent_conversations import CHECKS, CONVERSATIONS, TOOLS, problems  # noqa: E402

from localserve.dialects.function_tools import function_definitions  # noqa: E402
from localserve.dialects.openai.chat_input import read_messages  # noqa: E402
from localserve.generation import PromptRefused  # noqa: E402
from localserve.models.loaded import detect_chat_family  # noqa: E402
from localserve.prompt.build import ChatInput, render_chat  # noqa: E402
from localserve.prompt.probe import TemplateCaps  # noqa: E402
from localserve.prompt.templates import ChatTemplate  # noqa: E402

SHORT = {"plain": "plain", "call_null_content": "call, null", "call_empty_content": 'call, ""',
         "parallel_calls": "parallel", "reasoning_in_history": "reasoning", "no_system": "no system",
         "second_system": "2nd system", "user_turns_in_a_row": "2 user turns"}


def polyfills(caps: TemplateCaps) -> str:
    found = []
    if not caps.renders:
        return "does not render"
    if caps.needs_tools_list:
        found.append("tools=[]")
    if caps.needs_descriptions:
        found.append('parameter descriptions ""')
    if not caps.system_role:
        found.append("system in 1st user turn")
    elif not caps.system_after_calls:
        found.append("system in 1st user turn after calls")
    if not caps.tools:
        found.append("tools as text")
    if not caps.tool_calls:
        found.append("calls as text")
    if not caps.tool_results:
        found.append("results as user turns")
    if caps.tool_calls and not caps.parallel_tool_calls:
        found.append("one call per turn")
    if not caps.null_content and caps.tool_calls:
        found.append('null → ""')
    if not caps.empty_content and caps.null_content:
        found.append('"" → null')
    if caps.call_ids != "any":
        found.append(f"ids: {caps.call_ids}")
    if caps.reasoning_field != "reasoning_content":
        found.append(f"reasoning as {caps.reasoning_field}")
    return ", ".join(found) or "—"


def row(name: str, text: str) -> list[str]:
    template = ChatTemplate(name, text, "<s>", "</s>")
    template = dataclasses.replace(template, calls_family=detect_chat_family(template))   # as a model is served
    cells = [name, polyfills(template.caps)]
    for check in CHECKS:
        messages = CONVERSATIONS[check]
        chat = ChatInput(messages=read_messages({"messages": messages}), tools=function_definitions(TOOLS))
        try:
            cells.append("ok" if not problems(render_chat(template, chat), messages) else "FAIL")
        except PromptRefused:
            cells.append("error")
    return cells


def rst_table(rows: list[list[str]]) -> str:
    header = ["template", "localserve makes up for", *(SHORT[c] for c in CHECKS)]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    rule = "  ".join("=" * w for w in widths)
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([rule, line(header), rule, *(line(r) for r in rows), rule])


def main() -> None:
    folder = ROOT / ".cache" / "chat-templates"
    paths = sorted(folder.glob("*.jinja"))
    if not paths:
        sys.exit(f"no templates in {folder}: run `make template-corpus`")
    print(rst_table([row(p.stem, p.read_text(encoding="utf-8")) for p in paths]))


if __name__ == "__main__":
    main()
