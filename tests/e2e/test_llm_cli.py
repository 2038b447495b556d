"""End to end with Simon Willison's `llm` CLI (the test extra pins it and its `llm-ollama` plugin),
configured as its docs configure a local server (docs/clients.rst): a model in
extra-openai-models.yaml (Chat Completions), `llm openai endpoint URL` with no configuration at all,
and the plugin's Ollama models (OLLAMA_HOST, /api/tags and /api/chat). Each runs a whole tool loop
with llm's built-in `llm_version` tool on a scripted model (tests/support/scripted_model.py):
the model calls the tool, llm runs it and sends its result back, the model answers.

The server sits behind a wiretap (tests/support/wiretap.py), so each test also checks what llm
sent: the tool, then the call and its result in the next request.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ServerProcess
from scripted_model import tool_loop_script, write_scripted_gguf
from wiretap import Exchange, Wiretap

LLM_TIMEOUT = 60
FINAL = "You have llm installed."
PROMPT = "Which llm is installed?"


@pytest.fixture(scope="module")
def tap(models_dir, tmp_path_factory):
    path = write_scripted_gguf(models_dir / "llm-cli.gguf", tool_loop_script("llm_version", {}, FINAL))
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1",
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    tap = Wiretap(srv.port)
    yield tap
    tap.close()
    srv.stop()


def run_llm(args: list[str], home: Path, **env: str) -> str:
    """`llm ARGS` with its own user folder (LLM_USER_PATH: keys, logs.db, extra-openai-models.yaml)."""
    done = subprocess.run([sys.executable, "-m", "llm", *args], cwd=home, stdin=subprocess.DEVNULL,
                          env={**os.environ, "LLM_USER_PATH": str(home), "NO_COLOR": "1", **env},
                          capture_output=True, text=True, timeout=LLM_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def new_posts(tap: Wiretap, seen: int, path: str) -> list[Exchange]:
    return [e for e in tap.exchanges[seen:] if e.method == "POST" and e.path == path]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
def test_llm_runs_a_tool_loop_with_a_model_from_extra_openai_models(tap, tmp_path, stream):
    (tmp_path / "extra-openai-models.yaml").write_text(
        f'- model_id: localserve\n  model_name: scripted\n  api_base: "{tap.base_url}/v1"\n  supports_tools: true\n')
    seen = len(tap.exchanges)
    output = run_llm(["-m", "localserve", "-T", "llm_version", *([] if stream else ["--no-stream"]), PROMPT], tmp_path)
    assert output.strip() == FINAL
    first, second = new_posts(tap, seen, "/v1/chat/completions")
    assert first.json()["stream"] is stream
    assert [t["function"]["name"] for t in first.json()["tools"]] == ["llm_version"]
    call_turn, result = second.json()["messages"][-2:]
    [call] = call_turn["tool_calls"]
    assert call["function"]["name"] == "llm_version" and call["id"].encode() in first.response
    assert result["role"] == "tool" and result["tool_call_id"] == call["id"]
    # llm logged the answer with the usage the server reported
    logged = json.loads(run_llm(["logs", "-n", "1", "--json"], tmp_path))
    assert logged[0]["response"] == FINAL and logged[0]["input_tokens"] > 0 and logged[0]["output_tokens"] > 0


def test_llm_runs_a_tool_loop_against_an_unconfigured_endpoint(tap, tmp_path):
    seen = len(tap.exchanges)
    output = run_llm(["openai", "endpoint", f"{tap.base_url}/v1", "-m", "scripted", "-T", "llm_version", PROMPT],
                     tmp_path)
    assert output.strip() == FINAL
    assert len(new_posts(tap, seen, "/v1/chat/completions")) == 2


def test_llm_ollama_plugin_runs_a_tool_loop(tap, tmp_path):
    """llm-ollama lists the models from /api/tags (as `ollama/NAME`) and chats through /api/chat,
    where a call comes back whole with its arguments as an object and no id: the tool turn names
    the tool instead."""
    seen = len(tap.exchanges)
    output = run_llm(["-m", "ollama/scripted", "-T", "llm_version", PROMPT], tmp_path, OLLAMA_HOST=tap.base_url)
    assert output.strip() == FINAL
    first, second = new_posts(tap, seen, "/api/chat")
    assert first.json()["model"] == "scripted:latest" and first.json()["stream"] is True
    call_turn, result = second.json()["messages"][-2:]
    assert call_turn["tool_calls"] == [{"function": {"name": "llm_version", "arguments": {}}}]
    assert result == {"role": "tool", "content": result["content"], "tool_name": "llm_version"}
