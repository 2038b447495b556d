"""End to end with the real Codex CLI (`codex exec`, pinned by `make agent-clis`) against the
real server running a scripted model: whole tool loops, as a user runs them.

Codex talks to the server through a wiretap (tests/support/wiretap.py) so each test can check what
Codex really sent: its second turn carries the reasoning item it got back, sealed in
`encrypted_content` (store: false), and the server renders it back exactly (the prompt cache
covers the whole first turn).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import orjson
import pytest

from agent_clis import codex_binary
from conftest import ServerProcess
from prompt_words import PROMPT_WORDS
from scripted_model import tool_loop_script, write_scripted_gguf
from template_corpus import corpus_templates
from wiretap import Wiretap

CODEX_TIMEOUT = 180
PATCH = "*** Begin Patch\n*** Add File: patched.txt\n+written by apply_patch\n*** End Patch\n"

# A model catalog entry (model_catalog_json) under which Codex offers its freeform apply_patch tool.
CATALOG_MODEL = {
    "slug": "scripted", "display_name": "scripted", "base_instructions": "You are a scripted test model.",
    "apply_patch_tool_type": "freeform", "shell_type": "shell_command", "supported_reasoning_levels": [],
    "truncation_policy": {"mode": "tokens", "limit": 10000}, "visibility": "list", "supported_in_api": True,
    "priority": 1, "support_verbosity": False, "experimental_supported_tools": [],
}


def codex_config(base_url: str, catalog: Path | None = None) -> str:
    """The config.toml docs/clients.rst documents (plus the test's catalog)."""
    lines = ['model = "scripted"', 'model_provider = "localserve"', "check_for_update_on_startup = false"]
    if catalog is not None:
        lines.append(f'model_catalog_json = "{catalog}"')
    lines += ["", "[model_providers.localserve]", 'name = "localserve"', f'base_url = "{base_url}/v1"',
              'wire_api = "responses"', 'env_key = "LOCALSERVE_API_KEY"']
    return "\n".join(lines) + "\n"


def run_codex(tmp_path: Path, base_url: str, prompt: str, catalog: dict | None = None) -> tuple[Path, str]:
    binary = codex_binary()
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    catalog_path = None
    if catalog is not None:
        catalog_path = home / "catalog.json"
        catalog_path.write_text(json.dumps({"models": [catalog]}))
    (home / "config.toml").write_text(codex_config(base_url, catalog_path))
    env = {**os.environ, "CODEX_HOME": str(home), "LOCALSERVE_API_KEY": "test-key", "NO_COLOR": "1"}
    done = subprocess.run(
        [str(binary), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", prompt],
        cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CODEX_TIMEOUT)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return work, output


def completed_response(answer: bytes) -> dict:
    """The Response object of a streamed answer's response.completed event."""
    for block in answer.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                event = orjson.loads(line[6:])
                if event.get("type") == "response.completed":
                    return event["response"]
    raise AssertionError(f"no response.completed in {answer[-500:]!r}")


@pytest.fixture
def serve(models_dir, tmp_path_factory):
    started: list = []

    def start(name: str, script, real_template: str | None = None) -> Wiretap:
        path = write_scripted_gguf(models_dir / f"{name}.gguf", script, render_system=False,
                                   real_template=real_template, words=PROMPT_WORDS)
        # a real template writes Codex's instructions and tools into the prompt: room for them, and
        # two threads for their prefill (most of such a test's time; Codex waits meanwhile)
        room = ["--ctx-size", "65536", "--threads", "2"] if real_template is not None else []
        srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1", *room,
                            env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
        tap = Wiretap(srv.port)
        started.append((srv, tap))
        return tap

    yield start
    for srv, tap in started:
        tap.close()
        srv.stop()


def test_codex_runs_a_shell_tool_loop_with_sealed_reasoning(serve, tmp_path):
    final = "I created made.txt with echo."
    tap = serve("codex-shell", tool_loop_script("exec_command", {"cmd": "echo made by codex > made.txt"}, final,
                                                reasoning="Use echo to write the file."))
    work, output = run_codex(tmp_path, tap.base_url, "Create the file made.txt.")
    assert (work / "made.txt").read_text() == "made by codex\n"
    assert final in output

    first, second = tap.posts("/v1/responses")
    sent = first.json()
    assert sent["store"] is False and "reasoning.encrypted_content" in sent["include"]
    assert "x-localserve-ignored-tools" in first.response_headers     # Codex always sends web_search
    history = second.json()["input"]
    reasoning = [item for item in history if item.get("type") == "reasoning"]
    assert len(reasoning) == 1 and reasoning[0]["encrypted_content"]
    assert "Use echo" not in reasoning[0]["encrypted_content"]
    outputs = [item for item in history if item.get("type") == "function_call_output"]
    assert len(outputs) == 1
    # the sealed reasoning was opened and rendered as generated: the whole first turn is cached
    turn1, turn2 = completed_response(first.response), completed_response(second.response)
    assert turn2["usage"]["input_tokens_details"]["cached_tokens"] >= \
        turn1["usage"]["input_tokens"] + turn1["usage"]["output_tokens"] - 1
    assert turn2["output"][-1]["content"][0]["text"] == final


def test_codex_applies_a_patch_through_its_custom_tool(serve, tmp_path):
    final = "Patched."
    tap = serve("codex-patch", tool_loop_script("apply_patch", {"input": PATCH}, final))
    work, output = run_codex(tmp_path, tap.base_url, "Add patched.txt.", catalog=CATALOG_MODEL)
    assert (work / "patched.txt").read_text() == "written by apply_patch\n"
    assert final in output

    first, second = tap.posts("/v1/responses")
    custom = [t for t in first.json()["tools"] if t["type"] == "custom"]
    assert [t["name"] for t in custom] == ["apply_patch"] and custom[0]["format"]["syntax"] == "lark"
    call = [i for i in completed_response(first.response)["output"] if i["type"] == "custom_tool_call"]
    assert [(c["name"], c["input"]) for c in call] == [("apply_patch", PATCH)]
    history = second.json()["input"]
    assert [i["input"] for i in history if i.get("type") == "custom_tool_call"] == [PATCH]
    assert [i["call_id"] for i in history if i.get("type") == "custom_tool_call_output"] == [call[0]["call_id"]]


def harmony_tool_loop(name: str, arguments: dict, final: str, reasoning: str) -> list[list[str]]:
    """gpt-oss' own output for the script: an analysis message, the call on the commentary channel,
    then the final message (each whole message one piece: a bigram's pieces are all distinct)."""
    return [[f"<|channel|>analysis<|message|>{reasoning}<|end|>",
             f"<|start|>assistant<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>",
             json.dumps(arguments, separators=(",", ":")), "<|call|>"],
            [f"<|channel|>final<|message|>{final}<|return|>"]]


REAL_TEMPLATE_SCRIPTS = {
    "Qwen-Qwen3-0.6B": lambda cmd, final: tool_loop_script("exec_command", {"cmd": cmd}, final,
                                                           reasoning="Echo into the file."),
    "openai-gpt-oss-120b": lambda cmd, final: harmony_tool_loop("exec_command", {"cmd": cmd}, final,
                                                                "Echo into the file."),
}


@pytest.mark.parametrize("template", sorted(REAL_TEMPLATE_SCRIPTS))
def test_codex_finishes_a_tool_loop_on_a_real_template(serve, tmp_path, template):
    """Every turn Codex sends is rendered by the model's own template (the script's step token
    follows its generation prompt): the call's turn, its output and the reasoning item come back
    through it."""
    final = "Made it with echo."
    script = REAL_TEMPLATE_SCRIPTS[template]("echo real > made.txt", final)
    tap = serve(f"codex-{template}", script, real_template=corpus_templates()[template])
    work, output = run_codex(tmp_path, tap.base_url, "Create the file made.txt.")
    assert (work / "made.txt").read_text() == "real\n"
    assert final in output
    first, second = tap.posts("/v1/responses")
    assert [i["type"] for i in second.json()["input"] if i.get("type") == "function_call_output"]
    assert completed_response(second.response)["output"][-1]["content"][0]["text"] == final
