"""Codex CLI end to end with context compaction on the server (issue 34): the built-in `openai`
provider pointed here with OPENAI_BASE_URL (the provider Codex compacts remotely with), a low
auto-compact limit (`model_auto_compact_token_limit`), and a scripted model whose tool loop
passes it. Codex asks the server to compact (a compaction_trigger, or /v1/responses/compact),
goes on from the compaction item it gets back, and finishes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agent_clis import codex_binary
from conftest import ServerProcess
from scripted_model import tool_call_token, write_scripted_gguf
from wiretap import Wiretap

CODEX_TIMEOUT = 180
FINAL = "All done after compacting."
SUMMARY = "The user asked for two files; one is made."


def codex_config(base_url: str) -> str:
    """The built-in openai provider, its base URL here (this Codex reads `openai_base_url`; older ones
    read OPENAI_BASE_URL, set too)."""
    return "\n".join(['model = "scripted"', f'openai_base_url = "{base_url}/v1"', "model_context_window = 16384",
                      "model_auto_compact_token_limit = 300", "check_for_update_on_startup = false"]) + "\n"


@pytest.fixture
def tap(models_dir, tmp_path_factory):
    script = [[tool_call_token("exec_command", {"cmd": "echo one > one.txt"})],
              [tool_call_token("exec_command", {"cmd": "echo two > two.txt"})],
              [FINAL]]
    path = write_scripted_gguf(models_dir / "codex-compaction.gguf", script, render_system=False,
                               summary=[SUMMARY], summary_step=2)
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1", "--ctx-size", "16384",
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    wiretap = Wiretap(srv.port)
    yield wiretap
    wiretap.close()
    srv.stop()


def run_codex(tmp_path: Path, base_url: str, prompt: str) -> tuple[Path, str]:
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "config.toml").write_text(codex_config(base_url))
    env = {**os.environ, "CODEX_HOME": str(home), "OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": f"{base_url}/v1",
           "NO_COLOR": "1"}
    done = subprocess.run(
        [str(codex_binary()), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", prompt],
        cwd=work, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CODEX_TIMEOUT)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    return work, output


def test_codex_compacts_on_the_server_and_finishes(tap, tmp_path):
    work, output = run_codex(tmp_path, tap.base_url, "Make one.txt and two.txt.")
    assert FINAL in output, output
    assert (work / "one.txt").read_text() == "one\n"
    posts = [(e.path, e.json()) for e in tap.exchanges if e.method == "POST"]
    triggers = [body for path, body in posts if path.endswith("/responses")
                and any(item.get("type") == "compaction_trigger" for item in body.get("input", []))]
    compacts = [body for path, body in posts if path.endswith("/responses/compact")]
    assert len(triggers) + len(compacts) >= 1, [path for path, _ in posts]
    # the turn after the compaction hands back the compaction item, opened and rendered by the server
    after = [body for path, body in posts if path.endswith("/responses")
             and any(item.get("type") == "compaction" for item in body.get("input", []))]
    assert after
