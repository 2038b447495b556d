"""Clients built for Ollama, configured as their docs say (issue 45): LiteLLM's `ollama_chat/` and
`ollama/` providers (completion, streaming sync and async, tools), which send their JSON with no
Content-Type (or application/octet-stream), and LlamaIndex's Ollama LLM, which reads the model's
training context from /api/show, sends it as `num_ctx` and packs a prompt longer than the
context the model is served with.

Tiny models: a ChatML one trained on 4096 tokens and served with --ctx-size 256, and a scripted
one that calls a tool, then answers after its result.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")     # LiteLLM fetches a price list at import
import litellm  # noqa: E402
from llama_index.core.llms import ChatMessage  # noqa: E402
from llama_index.llms.ollama import Ollama  # noqa: E402

from conftest import ServerProcess  # noqa: E402
from rawhttp import request  # noqa: E402
from scripted_model import tool_loop_script, write_scripted_gguf  # noqa: E402
from tinymodel import CHATML_TEMPLATE, NO_EOG, write_tiny_gguf  # noqa: E402

ARGUMENTS = {"cmd": "ls"}
FINAL = "There are two files."
TOOLS = [{"type": "function", "function": {"name": "exec_command", "description": "run a command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]
ASK = [{"role": "user", "content": "What is here?"}]
SERVED, TRAINED = 256, 4096
# some 1,200 tokens: more than the 256 the model is served with, less than the 4,096 it was trained on
RAG_PROMPT = "Context:\n" + "hello world the and to of " * 200 + "\nQuestion: what is it?"


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ollama-clients")
    write_tiny_gguf(folder / "rag.gguf", chat_template=CHATML_TEMPLATE, context_length=TRAINED)
    shutil.copy(tiny_model, folder / "tiny.gguf")
    write_scripted_gguf(folder / "agent.gguf", tool_loop_script("exec_command", ARGUMENTS, FINAL))
    srv = ServerProcess(None, "--models-dir", str(folder), "--ctx-size", str(SERVED), "--slots", "2", "--no-store")
    yield srv
    srv.stop()


def served_context(server, name: str) -> int:
    running = request(server.port, b"GET /api/ps HTTP/1.1\r\nHost: localhost\r\n\r\n").json()["models"]
    return next(m["context_length"] for m in running if m["name"] == name)


# ---- LiteLLM ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("provider", ["ollama_chat", "ollama"])
def test_litellm_completion_and_stream(server, provider):
    # LiteLLM puts a keyword it does not know (grammar) among the options, beside num_predict: forty
    # letters are more than five tokens hold, so the answer cannot end before max_tokens
    kwargs = dict(model=f"{provider}/tiny", messages=ASK, api_base=server.base_url, max_tokens=5,
                  temperature=0, num_retries=0, grammar="root ::= [a-z]{40}")
    whole = litellm.completion(**kwargs)
    assert isinstance(whole.choices[0].message.content, str) and whole.choices[0].message.content
    assert whole.usage.completion_tokens == 5
    chunks = list(litellm.completion(**kwargs, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert streamed == whole.choices[0].message.content


def test_litellm_async_stream(server):
    """LiteLLM's async stream sends its body as application/octet-stream."""
    async def stream() -> str:
        response = await litellm.acompletion(model="ollama_chat/tiny", messages=ASK, api_base=server.base_url,
                                             max_tokens=4, stream=True, num_retries=0,
                                             extra_body={"options": {"logit_bias": NO_EOG}})
        return "".join([c.choices[0].delta.content or "" async for c in response])

    assert asyncio.run(stream())


def test_litellm_tool_loop(server):
    kwargs = dict(model="ollama_chat/agent", api_base=server.base_url, tools=TOOLS, num_retries=0)
    first = litellm.completion(messages=ASK, **kwargs)
    calls = first.choices[0].message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [("exec_command", ARGUMENTS)]
    history = ASK + [first.choices[0].message.model_dump(),
                     {"role": "tool", "tool_call_id": calls[0].id, "content": "a.txt b.txt"}]
    second = litellm.completion(messages=history, **kwargs)
    assert second.choices[0].message.content == FINAL


def test_litellm_streams_the_tool_call(server):
    chunks = list(litellm.completion(model="ollama_chat/agent", messages=ASK, api_base=server.base_url,
                                     tools=TOOLS, stream=True, num_retries=0))
    names = [call.function.name for c in chunks for call in (c.choices[0].delta.tool_calls or [])
             if call.function.name]
    assert names == ["exec_command"]


# ---- LlamaIndex -----------------------------------------------------------------------------------------

def test_llama_index_packs_a_prompt_longer_than_the_served_context(server):
    llm = Ollama(model="rag", base_url=server.base_url, request_timeout=120, temperature=0,
                 additional_kwargs={"num_predict": 4})
    assert llm.metadata.context_window == TRAINED              # read from /api/show, as LlamaIndex does
    answer = llm.complete(RAG_PROMPT)
    assert answer.text and answer.raw["prompt_eval_count"] > SERVED
    assert served_context(server, "rag:latest") == TRAINED     # loaded again with the context it asked
    chat = llm.chat([ChatMessage(role="user", content=RAG_PROMPT)])
    assert chat.message.content
    streamed = "".join(part.delta or "" for part in llm.stream_complete(RAG_PROMPT))
    assert streamed
