"""A server per model family, started on first use: a tiny model carrying the family's template
and special tokens (family_templates.py), and the family the tool-call table reads it as."""

from __future__ import annotations

import json

import openai

from clients import openai_sdk
from conftest import ServerProcess
from family_templates import FAMILY_TEMPLATES, write_family_gguf

from localserve.parsing.tool_families import TOOL_SYNTAXES, detect_tool_syntax


def template_for(syntax: str) -> str | None:
    """The first test template the server reads as this tool family (TOOL_SYNTAXES' names)."""
    return next((name for name, template in FAMILY_TEMPLATES.items() if detect_tool_syntax(template) == syntax),
                None)


TOOL_FAMILIES = list(TOOL_SYNTAXES)     # every family in the table, in its order

# The tools the family tests offer, and the call they force
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 10},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "unit": {"type": "string", "enum": ["C", "F"]},
            },
            "required": ["city", "days", "unit"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}}, "required": ["zone"]}}}
TOOLS = [WEATHER, TIME]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_weather_arguments(arguments: str) -> None:
    args = json.loads(arguments)
    assert set(args) == {"city", "days", "unit"}
    # (maxLength is not checked: random weights can emit invalid UTF-8 bytes, which a
    # client sees as one U+FFFD each, so the character count can grow)
    assert isinstance(args["city"], str)
    assert isinstance(args["days"], int) and 1 <= args["days"] <= 7
    assert args["unit"] in ("C", "F")


class FamilyServers:
    def __init__(self, models_dir):
        self.models_dir = models_dir
        self.servers: dict[str, ServerProcess] = {}

    def get(self, family: str) -> ServerProcess:
        if family not in self.servers:
            path = write_family_gguf(self.models_dir / f"tiny-{family}.gguf", family)
            self.servers[family] = ServerProcess(path, "--model-id", family, "--no-store")
        return self.servers[family]

    def client(self, family: str) -> openai.OpenAI:
        return openai_sdk(self.get(family), api_key="x")

    def for_syntax(self, syntax: str) -> ServerProcess:
        """A server that writes and reads tool calls in this family: on the test template it is
        recognised from, or else (json: the family of templates with no markers; a family no test
        template teaches yet) on the ChatML one with --tool-syntax."""
        family = template_for(syntax)
        if family is not None:
            return self.get(family)
        key = f"chatml --tool-syntax {syntax}"
        if key not in self.servers:
            path = write_family_gguf(self.models_dir / "tiny-chatml-family.gguf", "chatml")
            self.servers[key] = ServerProcess(path, "--model-id", syntax, "--no-store", "--tool-syntax", syntax)
        return self.servers[key]

    def stop(self):
        for srv in self.servers.values():
            srv.stop()
