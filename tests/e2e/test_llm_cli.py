"""End to end with Simon Willison's `llm` CLI (the test extra pins it and its `llm-ollama` plugin),
configured as its docs configure a local server (docs/clients.rst): a model in
extra-openai-models.yaml (Chat Completions), `llm openai endpoint URL` with no configuration at all,
and the plugin's Ollama models (OLLAMA_HOST, /api/tags and /api/chat). Each runs a whole tool loop
with llm's built-in `llm_version` tool on a scripted model (tests/support/scripted_model.py):
the model calls the tool, llm runs it and sends its result back, the model answers. And a Ctrl-C
while llm streams cancels the generation on the server.

The server sits behind a wiretap (tests/support/wiretap.py), so each test also checks what llm
sent: the tool, then the call and its result in the next request.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ServerProcess
from scripted_model import tool_loop_script, write_scripted_gguf
from tinymodel import NO_EOG
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


def extra_model(home: Path, base_url: str, name: str) -> None:
    """llm's extra-openai-models.yaml with one model, `localserve`, as its docs give it."""
    (home / "extra-openai-models.yaml").write_text(
        f'- model_id: localserve\n  model_name: {name}\n  api_base: "{base_url}/v1"\n  supports_tools: true\n')


def llm_env(home: Path, **env: str) -> dict:
    return {**os.environ, "LLM_USER_PATH": str(home), "NO_COLOR": "1", **env}


def run_llm(args: list[str], home: Path, **env: str) -> str:
    """`llm ARGS` with its own user folder (LLM_USER_PATH: keys, logs.db, extra-openai-models.yaml)."""
    done = subprocess.run([sys.executable, "-m", "llm", *args], cwd=home, stdin=subprocess.DEVNULL,
                          env=llm_env(home, **env), capture_output=True, text=True, timeout=LLM_TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def new_posts(tap: Wiretap, seen: int, path: str) -> list[Exchange]:
    return [e for e in tap.exchanges[seen:] if e.method == "POST" and e.path == path]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
def test_llm_runs_a_tool_loop_with_a_model_from_extra_openai_models(tap, tmp_path, stream):
    extra_model(tmp_path, tap.base_url, "scripted")
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


def test_interrupting_llm_mid_answer_cancels_the_generation(tiny_model, tmp_path, tmp_path_factory):
    """Ctrl-C while llm streams: the server sees the connection go and frees the sequence. The
    tiny model never ends its turn (llm's own logit_bias option), so only the interrupt stops it."""
    srv = ServerProcess(tiny_model, "--slots", "1", "--ctx-size", "4096",
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    try:
        extra_model(tmp_path, srv.base_url, "tiny")
        llm = subprocess.Popen([sys.executable, "-m", "llm", "-m", "localserve", "-o", "max_tokens", "4000",
                                "-o", "logit_bias", json.dumps(NO_EOG), "Talk."],
                               cwd=tmp_path, env=llm_env(tmp_path), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert llm.stdout.read(1), "llm printed nothing"         # the answer is streaming
            llm.send_signal(signal.SIGINT)
            llm.wait(timeout=LLM_TIMEOUT)
        finally:
            llm.kill()
        assert cancelled_line(srv, "client went away during the stream")
        # the one slot is free again: the next prompt is answered
        assert run_llm(["-m", "localserve", "-o", "max_tokens", "3", "Again."], tmp_path)
    finally:
        srv.stop()


def cancelled_line(srv: ServerProcess, reason: str, timeout: float = 10.0) -> str | None:
    """The server's one cancellation line (the server ran only this request)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in list(srv.lines):
            if "cancelled job" in line and reason in line:
                return line
        time.sleep(0.05)
    return None
