"""Shared by the Responses API tests: tiny models that can call tools and reason, SDK
clients in strict mode, raw-socket helpers and grammars that force exact output."""

from __future__ import annotations

import json
import time
from pathlib import Path

import openai

from clients import openai_sdk
from conftest import ServerProcess, slow_model  # noqa: F401 (slow_model: for the response tests)
from family_templates import write_family_gguf
from rawhttp import request
from tinymodel import NO_EOG  # noqa: F401 (NO_EOG: for the response tests)

TERMINAL = ("response.completed", "response.incomplete", "response.failed")
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
                          "required": ["city"]}}


def hermes_model(models_dir: Path) -> Path:
    path = models_dir / "responses-hermes.gguf"
    if not path.exists():
        write_family_gguf(path, "hermes")
    return path


def qwen3_model(models_dir: Path) -> Path:
    path = models_dir / "responses-qwen3.gguf"
    if not path.exists():
        write_family_gguf(path, "qwen3")
    return path


def start(model: Path, data_dir: Path | None, *args: str) -> ServerProcess:
    flags = ["--model-id", "tiny", *args]
    if data_dir is not None:
        flags += ["--data-dir", str(data_dir)]
    return ServerProcess(model, *flags)


def client(server: ServerProcess) -> openai.OpenAI:
    return openai_sdk(server)


def forced(text: str) -> dict:
    """extra_body that makes the model write exactly `text`."""
    return {"grammar": "root ::= " + json.dumps(text)}


def call_text(name: str, arguments: dict) -> str:
    """One call in the Hermes syntax the tiny models' templates teach."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def check_event_stream(events: list[tuple[str | None, dict]], first: int = 0) -> None:
    """event: lines match types, sequence numbers count up by one, one terminal event, last."""
    assert events
    for name, data in events:
        assert name == data["type"]
    assert [d["sequence_number"] for _, d in events] == list(range(first, first + len(events)))
    terminals = [d["type"] for _, d in events if d["type"] in TERMINAL]
    assert len(terminals) == 1 and events[-1][1]["type"] == terminals[0]


def get_json(port: int, path: str):
    return request(port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode(), timeout=30)


def wait_status(c: openai.OpenAI, response_id: str, statuses: tuple[str, ...], timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = c.responses.retrieve(response_id)
        if response.status in statuses:
            return response
        time.sleep(0.02)
    raise AssertionError(f"{response_id} never reached {statuses}; last {response.status}")
