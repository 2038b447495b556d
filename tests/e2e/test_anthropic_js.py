"""The official Anthropic TypeScript SDK (`@anthropic-ai/sdk`, npm), driven by node against the real
server: its `toolRunner` threads the conversation (`thread` create, then continue with only the tool
results). The server holds the thread and serves the continue (with the prompt cache's prefix);
with --no-store it holds none and answers `thread_not_found`, so the SDK replays the whole history.
Whole and streamed, the scripted model calls its tool and then answers."""

from __future__ import annotations

import json
import subprocess

import pytest

from agent_clis import anthropic_js_module
from conftest import ServerProcess
from scripted_model import tool_loop_script, write_scripted_gguf

ARGUMENTS = {"path": "notes.txt"}
ANSWER = "It says hello."

SCRIPT = """
import Anthropic from %(module)s;
const requests = [];
const client = new Anthropic({ baseURL: %(base)s, apiKey: "unused", maxRetries: 0,
  fetch: async (url, init) => { const sent = JSON.parse(init.body); const reply = await fetch(url, init);
    requests.push([sent.thread ? sent.thread.type : null, reply.status, sent.messages.length,
      "system" in sent || "tools" in sent]); return reply; } });
const out = {};
for (const stream of [false, true]) {
  requests.length = 0;
  const ran = [];
  const runner = client.beta.messages.toolRunner({ model: "scripted", max_tokens: 64, stream, max_iterations: 3,
    messages: [{ role: "user", content: "read my notes" }],
    tools: [{ name: "read_file", description: "read a file", input_schema: { type: "object",
      properties: { path: { type: "string" } }, required: ["path"] },
      run: async (input) => { ran.push(input); return "hello"; } }] });
  let last;
  if (stream) { for await (const events of runner) for await (const event of events) {} last = await runner.done(); }
  else last = await runner;
  out[stream ? "streamed" : "whole"] = { ran, requests: [...requests], stop: last.stop_reason, usage: last.usage,
    text: last.content.filter((b) => b.type === "text").map((b) => b.text).join("") };
}
console.log(JSON.stringify(out));
"""


def start(tmp_path_factory, *args: str) -> ServerProcess:
    path = write_scripted_gguf(tmp_path_factory.mktemp("anthropic-js") / "scripted.gguf",
                               tool_loop_script("read_file", ARGUMENTS, ANSWER))
    return ServerProcess(path, "--model-id", "scripted", "--slots", "1", *args)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start(tmp_path_factory, "--data-dir", str(tmp_path_factory.mktemp("anthropic-js-data")))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def storeless(tmp_path_factory):
    srv = start(tmp_path_factory, "--no-store")
    yield srv
    srv.stop()


def drive(server: ServerProcess, tmp_path) -> dict:
    script = tmp_path / "drive.mjs"
    module = anthropic_js_module() / "index.mjs"
    script.write_text(SCRIPT % {"module": json.dumps(module.as_uri()), "base": json.dumps(server.base_url)})
    done = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    for run in out.values():
        assert run["ran"] == [ARGUMENTS]
        assert run["stop"] == "end_turn" and run["text"] == ANSWER
    return out


def test_the_tool_runner_s_continue_is_served_from_the_thread_the_server_holds(server, tmp_path):
    out = drive(server, tmp_path)
    for run in out.values():
        # the first turn creates with the whole conversation; the continue sends the tool result
        # alone, without system or tools, and is answered: two requests, none refused
        assert run["requests"] == [["create", 200, 1, True], ["continue", 200, 1, False]]
        # the continue's prompt is the first turn's prompt and reply: the prompt cache serves it
        assert run["usage"]["cache_read_input_tokens"] > 0
    assert server.log.count("continues the thread at msg_") == 2


def test_without_a_store_the_tool_runner_replays_a_thread_the_server_does_not_hold(storeless, tmp_path):
    for run in drive(storeless, tmp_path).values():
        # the first turn creates; its continue is refused, and the same turn is sent whole again
        assert run["requests"] == [["create", 200, 1, True], ["continue", 404, 1, False], ["create", 200, 3, True]]
