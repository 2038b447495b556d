"""End to end with two coding-agent CLIs that speak Chat Completions, pinned by `make agent-clis`
and configured as their own docs configure a local OpenAI-compatible server (docs/clients.rst):
Qwen Code (`qwen -p`, a `modelProviders.openai` entry in ~/.qwen/settings.json) and Continue's
CLI (`cn -p --config config.yaml`, an `openai` provider with `apiBase`). Each runs a whole tool
loop on a scripted model (tests/support/scripted_model.py): it edits a real file with its own edit
tool, gets the tool's result back and ends with the script's answer.

Both talk to the server through a wiretap (tests/support/wiretap.py), so each test also checks
what the CLI really sent: a streamed request with its tools, then the call and its result.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agent_clis import continue_binary, qwen_binary
from conftest import ServerProcess
from scripted_model import tool_call_token, write_scripted_gguf
from wiretap import Wiretap

CLI_TIMEOUT = 120
ORIGINAL = 'def greet():\n    return "hello"\n'
EDITED = 'def greet():\n    return "hi"\n'


@pytest.fixture
def serve(models_dir, tmp_path_factory):
    started: list = []

    def start(name: str, script) -> Wiretap:
        # the CLIs' system prompts are long: the scripted template leaves them out (the script
        # does not read them), so each turn is a short prefill
        path = write_scripted_gguf(models_dir / f"{name}.gguf", script, render_system=False)
        srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1", "--ctx-size", "32768",
                            env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
        tap = Wiretap(srv.port)
        started.append((srv, tap))
        return tap

    yield start
    for srv, tap in started:
        tap.close()
        srv.stop()


def project(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "greet.py").write_text(ORIGINAL)
    return work


def run(command: list[str], work: Path, env: dict) -> str:
    done = subprocess.run(command, cwd=work, env={**os.environ, "NO_COLOR": "1", **env}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=CLI_TIMEOUT)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return output


def sent_tools(exchange) -> list[str]:
    return [tool["function"]["name"] for tool in exchange.json()["tools"]]


def read_then_edit(read: tuple[str, dict], edit: tuple[str, dict], final: str) -> list[list[str]]:
    """Both CLIs refuse to edit a file the session has not read: read it, edit it, answer (each
    call one whole piece, since the two calls' markers would repeat a bigram's tokens)."""
    return [[tool_call_token(*read)], [tool_call_token(*edit)], [final]]


def assert_tool_loop(tap: Wiretap, calls: list[tuple[str, dict]]) -> None:
    """One streamed Chat Completion per step, each sending the tools; the last carries every call
    back, with the id the server gave it, and a tool result for each id."""
    exchanges = tap.posts("/v1/chat/completions")
    assert len(exchanges) == len(calls) + 1
    for exchange in exchanges:
        sent = exchange.json()
        assert sent["model"] == "scripted" and sent["stream"] is True
        assert sent["stream_options"] == {"include_usage": True}
        assert {name for name, _ in calls} <= set(sent_tools(exchange))
        assert exchange.response.rstrip().endswith(b"data: [DONE]")
    history = exchanges[-1].json()["messages"]
    sent_calls = [call for m in history if m["role"] == "assistant" for call in m.get("tool_calls") or []]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in sent_calls] == calls
    for call, exchange in zip(sent_calls, exchanges):
        assert call["id"].encode() in exchange.response
    assert [m["tool_call_id"] for m in history if m["role"] == "tool"] == [c["id"] for c in sent_calls]


# ---- Qwen Code --------------------------------------------------------------------------------------------

def qwen_settings(base_url: str) -> dict:
    """The ~/.qwen/settings.json its README gives for a local server (plus no usage statistics)."""
    return {
        "modelProviders": {"openai": [{"id": "scripted", "name": "localserve", "baseUrl": f"{base_url}/v1",
                                       "description": "localserve", "generationConfig": {"contextWindowSize": 32768}}]},
        "security": {"auth": {"selectedType": "openai"}},
        "model": {"name": "scripted"},
        "privacy": {"usageStatisticsEnabled": False},
    }


def test_qwen_code_edits_a_file_through_its_edit_tool(serve, tmp_path):
    work = project(tmp_path)
    path = str(work / "greet.py")
    calls = [("read_file", {"file_path": path}),
             ("edit", {"file_path": path, "old_string": '"hello"', "new_string": '"hi"'})]
    final = "greet now says hi."
    tap = serve("qwen-edit", read_then_edit(*calls, final))
    home = tmp_path / "home"
    (home / ".qwen").mkdir(parents=True)
    (home / ".qwen" / "settings.json").write_text(json.dumps(qwen_settings(tap.base_url)))
    output = run([str(qwen_binary()), "--yolo", "-p", "Make greet say hi."], work,
                 {"HOME": str(home), "OPENAI_API_KEY": "unused"})
    assert (work / "greet.py").read_text() == EDITED
    assert final in output
    assert_tool_loop(tap, calls)


# ---- Continue's CLI ---------------------------------------------------------------------------------------

def continue_config(base_url: str) -> str:
    """config.yaml as Continue's docs give it for an OpenAI-compatible provider."""
    return (f"name: localserve\nversion: 0.0.1\nschema: v1\nmodels:\n  - name: localserve\n    provider: openai\n"
            f"    model: scripted\n    apiBase: {base_url}/v1\n    apiKey: unused\n    roles: [chat, edit, apply]\n")


def test_continue_cli_edits_a_file_through_its_edit_tool(serve, tmp_path):
    work = project(tmp_path)
    calls = [("Read", {"filepath": "greet.py"}),
             ("Edit", {"file_path": "greet.py", "old_string": '"hello"', "new_string": '"hi"'})]
    final = "greet now says hi."
    tap = serve("cn-edit", read_then_edit(*calls, final))
    config = tmp_path / "config.yaml"
    config.write_text(continue_config(tap.base_url))
    home = tmp_path / "home"
    home.mkdir()
    output = run([str(continue_binary()), "-p", "Make greet say hi.", "--config", str(config), "--auto"], work,
                 {"HOME": str(home)})
    assert (work / "greet.py").read_text() == EDITED
    assert final in output
    assert_tool_loop(tap, calls)
