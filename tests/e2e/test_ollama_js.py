"""The official `ollama` JavaScript client (npm), driven by node against the real server: list,
show, a streamed chat, and a tool call from the scripted model with its arguments as an object."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from agent_clis import ollama_js_module
from conftest import ServerProcess
from scripted_model import tool_loop_script, write_scripted_gguf
from tinymodel import NO_EOG

ARGUMENTS = {"path": "notes.txt"}
TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "read a file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]

SCRIPT = """
import { Ollama } from %(module)s;
const ollama = new Ollama({ host: %(host)s });
const out = {};
out.list = (await ollama.list()).models.map((m) => m.name);
const shown = await ollama.show({ model: "scripted" });
out.capabilities = shown.capabilities;
out.arch = shown.model_info["general.architecture"];
out.parts = [];
for await (const part of await ollama.chat({ model: "tiny", stream: true, options: %(options)s,
                                            messages: [{ role: "user", content: "hi" }] })) {
  out.parts.push(part);
}
const called = await ollama.chat({ model: "scripted", tools: %(tools)s,
                                   messages: [{ role: "user", content: "read my notes" }] });
out.calls = called.message.tool_calls;
console.log(JSON.stringify(out));
"""


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ollama-js")
    shutil.copy(tiny_model, folder / "tiny.gguf")
    write_scripted_gguf(folder / "scripted.gguf", tool_loop_script("read_file", ARGUMENTS, "It says hello."))
    srv = ServerProcess(None, "--models-dir", str(folder), "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def test_the_javascript_client(server, tmp_path):
    module = ollama_js_module() / "dist" / "index.mjs"
    script = tmp_path / "drive.mjs"
    script.write_text(SCRIPT % {"module": json.dumps(module.as_uri()), "host": json.dumps(server.base_url),
                                "options": json.dumps({"num_predict": 5, "logit_bias": NO_EOG}),
                                "tools": json.dumps(TOOLS)})
    done = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["list"] == ["scripted:latest", "tiny:latest"]
    assert "tools" in out["capabilities"] and out["arch"] == "llama"
    parts = out["parts"]
    assert len(parts) > 1 and [p["done"] for p in parts] == [False] * (len(parts) - 1) + [True]
    assert parts[-1]["eval_count"] == 5 and parts[-1]["done_reason"] == "length"
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in out["calls"]] == [("read_file", ARGUMENTS)]
