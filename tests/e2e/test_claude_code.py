"""Claude Code (the real CLI, pinned in tests/support/agent_clis.py) runs a whole tool loop on localserve.

`claude -p` with ANTHROPIC_BASE_URL pointed here, a dummy ANTHROPIC_API_KEY, and the
variables that keep it off the network (docs/clients.rst, "Claude Code"). The model is
scripted (tests/support/scripted_model.py): on the first turn it thinks and calls Bash with
`touch made.txt`; Claude Code runs it, sends the result back, and the model thinks again
and answers. Between Claude Code and the server a wiretap (tests/support/wiretap.py) keeps what Claude Code
really sends, so the test checks its wire as it is, not as documented: ?beta=true, the
betas, thinking with display "omitted" (budget_tokens 31999 on Sonnet 4.5; adaptive
thinking, output_config.effort and a role "system" message on newer models),
context_management, cache_control, metadata.user_id, its dozen-plus tools. The thinking
block comes back with its text left out; the server restores it from the signature, so
the second turn reads the whole first turn from the prompt cache; and a new session in the
same project reads the system prompt and tools from it, the billing-header line that
changes between sessions left out. Claude Code's own `/compact` (a plain /v1/messages turn
asking for an analysis and a summary) works here too, and the session goes on from the summary.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agent_clis import claude_binary
from conftest import ServerProcess
from prompt_words import PROMPT_WORDS
from scripted_model import tool_loop_script, write_scripted_gguf
from sse import parse_sse
from template_corpus import corpus_templates
from wiretap import Wiretap

COMMAND = "touch made.txt"
FINAL = "The file made.txt is created."
REASONING = "The user wants a file; touch makes it."
CONTEXT = 65536           # Claude Code's system prompt and tools: ~12k tokens of PROMPT_WORDS (~30k without)
RUN_TIMEOUT = 300
# The prefill of that prompt is most of these tests' time, and the CLI waits meanwhile: it gets
# two threads (the conftest's servers run on one).
PREFILL_THREADS = ("--threads", "2")


def offline_env(home, base_url: str) -> dict[str, str]:
    """Claude Code against a local server, with nothing else on the network."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-local-dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",   # no autoupdater, telemetry, error reports
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "NO_COLOR": "1",
    }


@pytest.fixture(scope="module")
def claude():
    return claude_binary()


@pytest.fixture(scope="module")
def server(models_dir, tmp_path_factory):
    path = write_scripted_gguf(models_dir / "scripted-claude-code.gguf", tool_loop_script(
        "Bash", {"command": COMMAND, "description": "Create made.txt"}, FINAL,
        reasoning=REASONING, final_reasoning="It ran."), words=PROMPT_WORDS)
    srv = ServerProcess(path, "--model-id", "scripted", "--ctx-size", str(CONTEXT), "--slots", "2",
                        *PREFILL_THREADS, "--data-dir", str(tmp_path_factory.mktemp("claude-code-data")))
    yield srv
    srv.stop()


def harmony_tool_loop() -> list[list[str]]:
    """The same script in gpt-oss' own words (each whole message one piece: a bigram's pieces
    are all distinct)."""
    arguments = json.dumps({"command": COMMAND, "description": "Create made.txt"}, separators=(",", ":"))
    return [[f"<|channel|>analysis<|message|>{REASONING}<|end|>",
             "<|start|>assistant<|channel|>commentary to=functions.Bash <|constrain|>json<|message|>",
             arguments, "<|call|>"],
            ["<|channel|>analysis<|message|>It ran.<|end|>",
             f"<|start|>assistant<|channel|>final<|message|>{FINAL}<|return|>"]]


REAL_TEMPLATE_SCRIPTS = {
    "Qwen-Qwen3-0.6B": lambda: tool_loop_script("Bash", {"command": COMMAND, "description": "Create made.txt"},
                                                FINAL, reasoning=REASONING, final_reasoning="It ran."),
    "openai-gpt-oss-120b": harmony_tool_loop,
}


@pytest.fixture(scope="module", params=sorted(REAL_TEMPLATE_SCRIPTS))
def real_template_server(request, models_dir, tmp_path_factory):
    """The script served with a real model's template (the step token after its generation prompt)."""
    name = request.param
    path = write_scripted_gguf(models_dir / f"scripted-claude-code-{name}.gguf", REAL_TEMPLATE_SCRIPTS[name](),
                               real_template=corpus_templates()[name], words=PROMPT_WORDS)
    srv = ServerProcess(path, "--model-id", "scripted", "--ctx-size", str(2 * CONTEXT), "--slots", "1",
                        *PREFILL_THREADS, "--data-dir", str(tmp_path_factory.mktemp("claude-code-real-template-data")))
    yield srv
    srv.stop()


def message_posts(tap: Wiretap) -> list:
    """The POST /v1/messages exchanges (count_tokens left out), with their JSON bodies."""
    return [e for e in tap.posts("/v1/messages") if e.path.split("?")[0] == "/v1/messages"]


def usage_of(exchange) -> tuple[dict, int]:
    """(the final usage, the prompt's tokens) of a streamed /v1/messages answer."""
    events = parse_sse(exchange.response, comments=True)
    usage = [d for n, d in events if n == "message_delta"][-1]["usage"]
    prompt = usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
    return usage, prompt


def claude_print(claude, server, where: Path, *args: str, model: str = "claude-sonnet-4-5") -> tuple[Wiretap, dict]:
    """`claude -p ARGS` in where/work (HOME where/home): what it sent, and its JSON result."""
    work, home = where / "work", where / "home"
    work.mkdir(parents=True, exist_ok=True)
    home.mkdir(exist_ok=True)
    tap = Wiretap(server.port)
    try:
        done = subprocess.run([str(claude), "-p", *args, "--model", model, "--output-format", "json"],
                              cwd=work, env=offline_env(home, tap.base_url), capture_output=True, text=True,
                              timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    finally:
        tap.close()
    assert done.returncode == 0, done.stdout + done.stderr + server.log[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert not result.get("is_error"), result
    return tap, result


def run_claude(claude, server, where, prompt: str, model: str) -> tuple[Wiretap, Path]:
    """One `claude -p` session in where/work (HOME where/home) that must run a Bash call; the tap
    holds what it sent."""
    work = where / "work"
    (work / "made.txt").unlink(missing_ok=True)
    tap, result = claude_print(claude, server, where, prompt, "--allowedTools", "Bash", model=model)
    assert result["result"] == FINAL
    assert (work / "made.txt").exists()                       # Claude Code ran the Bash call
    return tap, work


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "opus"])
def test_claude_code_runs_a_bash_tool_loop(claude, server, tmp_path, model):
    tap, _ = run_claude(claude, server, tmp_path, "Create the file made.txt", model)
    turns = message_posts(tap)
    assert len(turns) >= 2 and all(t.status == 200 for t in turns), [(t.status, t.response[:300]) for t in turns]
    first, last = turns[0], turns[-1]
    assert first.path.endswith("?beta=true") and "claude-code-20250219" in first.headers.get("anthropic-beta", "")
    body = first.json()
    assert body["stream"] is True and len(body["tools"]) >= 10 and "user_id" in body["metadata"]
    assert body["system"][0]["text"].startswith("x-anthropic-billing-header")
    assert body["thinking"].get("display") == "omitted"
    if model == "opus":   # newer models: adaptive thinking, an effort, the environment as a system message
        assert body["thinking"]["type"] == "adaptive" and body["output_config"]["effort"]
        assert any(m["role"] == "system" for m in body["messages"])
    else:
        assert body["thinking"] == {"type": "enabled", "budget_tokens": 31999, "display": "omitted"}
    assert {"type": "clear_thinking_20251015", "keep": "all"} in body["context_management"]["edits"]

    # the first answer: a thinking block without its text, then the Bash call
    events = parse_sse(first.response, comments=True)
    starts = [d["content_block"] for n, d in events if n == "content_block_start"]
    assert [b["type"] for b in starts] == ["thinking", "tool_use"] and starts[1]["name"] == "Bash"
    assert not [d for n, d in events if n == "content_block_delta" and d["delta"]["type"] == "thinking_delta"]

    # ... came back as it was sent; the restored thinking makes the whole first turn a cache hit
    assistant = [m for m in last.json()["messages"] if m["role"] == "assistant"][0]
    thinking = assistant["content"][0]
    assert thinking["type"] == "thinking" and thinking["thinking"] == "" and thinking["signature"]
    first_usage, first_prompt = usage_of(first)
    last_usage, last_prompt = usage_of(last)
    assert first_usage["cache_creation_input_tokens"] > first_usage["input_tokens"]
    assert last_usage["cache_read_input_tokens"] >= first_prompt + first_usage["output_tokens"] - 1
    assert last_prompt > first_prompt


def test_a_new_session_reads_the_system_prompt_and_tools_from_the_cache(claude, server, tmp_path):
    """Claude Code's billing-header line differs between sessions in one project; the rest
    of the system prompt and the tools do not, and the next session finds them in the cache."""
    first, _ = run_claude(claude, server, tmp_path, "Create the file made.txt", "claude-sonnet-4-5")
    second, _ = run_claude(claude, server, tmp_path, "Please make made.txt here", "claude-sonnet-4-5")
    a, b = message_posts(first)[0], message_posts(second)[0]
    a_body, b_body = a.json(), b.json()
    assert a_body["system"][0]["text"] != b_body["system"][0]["text"]      # the line that changes
    assert a_body["system"][1:] == b_body["system"][1:] and a_body["tools"] == b_body["tools"]
    _, a_prompt = usage_of(a)
    usage, _ = usage_of(b)
    assert usage["cache_read_input_tokens"] > a_prompt // 2


def test_claude_code_finishes_a_tool_loop_on_a_real_template(claude, real_template_server, tmp_path):
    """Every turn Claude Code sends (its system prompt, tools, the tool_use and its tool_result,
    thinking) is rendered by the model's own template."""
    tap, _ = run_claude(claude, real_template_server, tmp_path, "Create the file made.txt", "claude-sonnet-4-5")
    turns = message_posts(tap)
    assert len(turns) >= 2 and all(t.status == 200 for t in turns), [(t.status, t.response[:300]) for t in turns]
    assert any(b["type"] == "tool_result" for m in turns[-1].json()["messages"] if isinstance(m["content"], list)
               for b in m["content"])


# ---- Claude Code's own compaction: a plain /v1/messages turn asking for a summary ----------------

SESSION_SUMMARY = "The user said hello and was greeted."


@pytest.fixture(scope="module")
def summarising_server(models_dir, tmp_path_factory):
    """A model whose every answer is in the shape Claude Code's compaction asks for (an analysis,
    then the summary): a greeting in the session, the summary when it compacts."""
    path = write_scripted_gguf(models_dir / "scripted-claude-code-compact.gguf",
                               [["<analysis>A greeting.</analysis>", f"<summary>{SESSION_SUMMARY}</summary>"]],
                               words=PROMPT_WORDS)
    srv = ServerProcess(path, "--model-id", "scripted", "--ctx-size", str(CONTEXT), "--slots", "1",
                        *PREFILL_THREADS, "--data-dir", str(tmp_path_factory.mktemp("claude-code-compact-data")))
    yield srv
    srv.stop()


def text_of(message: dict) -> str:
    content = message["content"]
    return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)


def test_claude_codes_own_compact_command_summarises_through_messages(claude, summarising_server, tmp_path):
    claude_print(claude, summarising_server, tmp_path, "Say hello")
    tap, result = claude_print(claude, summarising_server, tmp_path, "/compact", "--continue")
    assert result.get("local_command") == "compact"
    [request_] = [t for t in message_posts(tap) if "<summary>" in text_of(t.json()["messages"][-1])]
    assert request_.status == 200
    texts = [d["delta"]["text"] for n, d in parse_sse(request_.response) if n == "content_block_delta"]
    assert f"<summary>{SESSION_SUMMARY}</summary>" in "".join(texts)
    _, compacting_prompt = usage_of(request_)

    # the session goes on from the summary: Claude Code sends it in place of the turns it replaced
    tap, _ = claude_print(claude, summarising_server, tmp_path, "And again", "--continue")
    first = message_posts(tap)[0]
    assert first.status == 200 and SESSION_SUMMARY in text_of(first.json()["messages"][0])
    assert "Say hello" not in json.dumps(first.json()["messages"])
    _, continued_prompt = usage_of(first)
    assert continued_prompt < compacting_prompt
