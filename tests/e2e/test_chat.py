"""Chat Completions and Completions through the openai SDK, on the real engine.

Random weights emit noise; where a test needs exact text it forces it with a
GBNF grammar or a logit bias through the real sampler.
"""

from __future__ import annotations

import openai
import pytest

from clients import openai_sdk
from rawhttp import RawConnection, post_json, request
from sse import sse_data
from tinymodel import NO_EOG, token_ids

MESSAGES = [{"role": "user", "content": "Say hello"}]
IDS = token_ids()
TOKEN_A = IDS["A"]


def chat(client, **kwargs):
    kwargs.setdefault("model", "anything")
    kwargs.setdefault("messages", MESSAGES)
    return client.chat.completions.create(**kwargs)




def test_chat_completion_shape(openai_client):
    reply = chat(openai_client, max_tokens=5, logit_bias=NO_EOG)
    assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    assert reply.model == "tiny"                      # the served model, whatever was asked
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason == "length"
    assert reply.usage.completion_tokens == 5
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + 5
    assert reply.usage.prompt_tokens_details.audio_tokens == 0        # no clip: OpenAI's usage says 0


def test_forced_text_and_finish_reason_stop(openai_client):
    reply = chat(openai_client, extra_body={"grammar": 'root ::= "Hello, world!"'}, max_tokens=50)
    assert reply.choices[0].message.content == "Hello, world!"
    assert reply.choices[0].finish_reason == "stop"


def test_stream_matches_checklist(openai_client):
    stream = chat(openai_client, stream=True, stream_options={"include_usage": True},
                  extra_body={"grammar": 'root ::= "Hello, world!"'}, max_tokens=50)
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({(c.id, c.created, c.model) for c in chunks}) == 1
    roles = [c.choices[0].delta.role for c in chunks if c.choices and c.choices[0].delta.role]
    assert roles == ["assistant"]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello, world!"
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


def test_stream_ends_with_done(server):
    body = {"messages": MESSAGES, "max_tokens": 3, "stream": True}
    resp = request(server.port, post_json("/v1/chat/completions", body))
    assert resp.header("content-type") == "text/event-stream"
    assert resp.body.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string_across_tokens_is_never_emitted(openai_client, stream):
    grammar = 'root ::= "Hello, world! Goodbye"'
    reply = chat(openai_client, stop=["lo, wor", "zzz"], stream=stream, extra_body={"grammar": grammar})
    if stream:
        chunks = list(reply)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finish == ["stop"]
    else:
        text, finish = reply.choices[0].message.content, reply.choices[0].finish_reason
        assert finish == "stop"
    assert text == "Hel"


@pytest.mark.parametrize("stream", [False, True])
def test_utf8_split_across_tokens_comes_out_whole(openai_client, stream):
    grammar = 'root ::= "héllo 世界 ✓"'
    reply = chat(openai_client, stream=stream, extra_body={"grammar": grammar})
    if stream:
        pieces = [c.choices[0].delta.content for c in reply if c.choices and c.choices[0].delta.content]
        assert all("\ufffd" not in p for p in pieces)
        text = "".join(pieces)
    else:
        text = reply.choices[0].message.content
    assert text == "héllo 世界 ✓"


def test_logit_bias_steers(openai_client):
    reply = chat(openai_client, logit_bias={str(TOKEN_A): 100}, max_tokens=4)
    assert reply.choices[0].message.content == "AAAA"


def test_temperature_samples_and_the_seed_decides_what(openai_client):
    def text(**kwargs) -> str:
        reply = chat(openai_client, max_tokens=12, logit_bias=NO_EOG, extra_body={"top_k": 0, "min_p": 0}, **kwargs)
        assert reply.usage.completion_tokens == 12
        return reply.choices[0].message.content

    sampled = [text(temperature=1.0, seed=seed) for seed in (1, 2, 3, 4)]
    assert text(temperature=1.0, seed=1) == sampled[0]            # the same seed repeats
    # Different seeds draw different texts (the random model's distribution is nearly flat), and
    # sampling is not greedy: a sampler that ignored the temperature would give one text for all.
    assert len(set(sampled)) >= 3, sampled
    assert text(temperature=0) not in sampled


def test_sampling_fields_are_accepted(openai_client):
    reply = chat(openai_client, max_completion_tokens=3, temperature=0.7, logit_bias=NO_EOG, top_p=0.9, presence_penalty=0.5,
                 frequency_penalty=0.5, extra_body={"top_k": 10, "min_p": 0.1, "repeat_penalty": 1.1,
                                                    "chat_template_kwargs": {"x": 1}})
    assert reply.usage.completion_tokens == 3


def test_logprobs(openai_client):
    reply = chat(openai_client, logprobs=True, top_logprobs=3, max_tokens=4, temperature=0, logit_bias=NO_EOG)
    content = reply.choices[0].logprobs.content
    assert len(content) == 4
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob
        # greedy: the chosen token is the most likely one
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob)
    assert chat(openai_client, max_tokens=2).choices[0].logprobs is None


def test_logprob_bytes_of_a_character_split_across_byte_tokens(openai_client):
    # The tiny vocabulary has no piece for "é": the grammar forces it as the byte
    # tokens <0xC3> <0xA9>, each half a UTF-8 character. Each entry's bytes are its
    # token's own bytes (not U+FFFD re-encoded), as top_logprobs report them.
    reply = chat(openai_client, extra_body={"grammar": 'root ::= "\u00e9!"'}, max_tokens=10,
                 logprobs=True, top_logprobs=1)
    assert reply.choices[0].message.content == "\u00e9!"
    content = reply.choices[0].logprobs.content
    assert [entry.bytes for entry in content] == [[0xC3], [0xA9], [ord("!")]]
    assert b"".join(bytes(entry.bytes) for entry in content).decode() == "\u00e9!"


@pytest.mark.parametrize("field,value", [
    ("temperature", "hot"), ("temperature", 5), ("top_p", 1.5), ("max_tokens", 0), ("max_tokens", "ten"),
    ("n", 0), ("n", 17), ("logit_bias", {"abc": 1}), ("logit_bias", {"99999999": 1}), ("stop", 5), ("top_k", -1),
    ("seed", 1.5), ("grammar", "root ::= ("), ("grammar", "root ::= \"hi\" <|im_end|>"),
    ("response_format", {"type": "xml"}), ("tool_choice", "sometimes"), ("messages", []),
])
def test_bad_fields_are_400_naming_the_param(server, field, value):
    body = {"messages": MESSAGES, field: value}
    resp = request(server.port, post_json("/v1/chat/completions", body))
    assert resp.status == 400, resp.body
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert field in (error["param"] or "") or field in error["message"]


def test_unknown_fields_are_ignored(openai_client):
    assert chat(openai_client, max_tokens=1, logit_bias=NO_EOG,
                extra_body={"frobnicate": True}).usage.completion_tokens == 1


def test_prompt_cache_reports_cached_tokens(openai_client):
    messages = [{"role": "user", "content": "the same question about the cache, asked twice"}]
    first = chat(openai_client, messages=messages, max_tokens=2)
    second = chat(openai_client, messages=messages, max_tokens=2)
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1
    assert second.usage.prompt_tokens_details.cached_tokens > 0


def test_context_overflow_is_400_with_counts(server):
    body = {"messages": [{"role": "user", "content": "word " * 5000}]}
    resp = request(server.port, post_json("/v1/chat/completions", body))
    assert resp.status == 400
    error = resp.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["n_prompt_tokens"] > error["n_ctx"] > 0
    assert error["param"] == "messages"


def test_completions_context_overflow_names_the_prompt(server):
    resp = request(server.port, post_json("/v1/completions", {"prompt": "word " * 5000}))
    error = resp.json()["error"]
    assert resp.status == 400 and error["code"] == "context_length_exceeded" and error["param"] == "prompt"


def test_template_error_is_400(tiny_model, tmp_path):
    from conftest import ServerProcess
    template = tmp_path / "strict.jinja"
    # (a system role refused is made up for, merged into the first user turn: a template error
    # that no polyfill mends is one about the content itself)
    template.write_text("{% for m in messages %}{% if m.content == 'forbidden' %}"
                        "{{ raise_exception('this word is not allowed') }}{% endif %}"
                        "{{ m.content }}{% endfor %}")
    srv = ServerProcess(tiny_model, "--chat-template-file", str(template))
    try:
        body = {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "forbidden"}]}
        resp = request(srv.port, post_json("/v1/chat/completions", body))
        assert resp.status == 400 and "this word is not allowed" in resp.json()["error"]["message"]
        assert f"file:{template}" in srv.log
    finally:
        srv.stop()


# ---- legacy completions --------------------------------------------------------

def test_completion_with_string_and_token_prompt(openai_client):
    reply = openai_client.completions.create(model="x", prompt="Once upon", max_tokens=4, logit_bias=NO_EOG)
    assert reply.object == "text_completion" and reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 4
    tokens = openai_client.completions.create(model="x", prompt=[1, IDS["A"], IDS["B"]], max_tokens=2)
    assert tokens.usage.prompt_tokens == 3


def test_completion_stream_and_grammar(server):
    # Not strict: the SDK's Completion type forbids the null finish_reason that the
    # API itself (and every server) sends on all but the last streamed chunk.
    client = openai_sdk(server, api_key="x", strict=False)
    stream = client.completions.create(model="x", prompt="Say:", stream=True, max_tokens=30,
                                              extra_body={"grammar": 'root ::= "fine, thanks"'})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "fine, thanks"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_completion_logprobs(openai_client):
    reply = openai_client.completions.create(model="x", prompt="Hi", max_tokens=3, logprobs=2, logit_bias=NO_EOG)
    logprobs = reply.choices[0].logprobs
    assert len(logprobs.tokens) == 3 and len(logprobs.top_logprobs[0]) <= 2


@pytest.mark.parametrize("body", [{"prompt": "x", "echo": True, "logprobs": 1}, {"prompt": "x", "suffix": "y"},
                                  {"prompt": 5}, {}, {"prompt": ["a", "b"]}])
def test_completion_unsupported_fields_are_400(server, body):
    assert request(server.port, post_json("/v1/completions", body)).status == 400


# ---- tokenizer and template endpoints ----------------------------------------------

def test_tokenize_detokenize_and_apply_template(server):
    tokens = request(server.port, post_json("/tokenize", {"content": "Hello world"})).json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    text = request(server.port, post_json("/detokenize", {"tokens": tokens})).json()["content"]
    assert text == "Hello world"
    pieces = request(server.port, post_json("/tokenize", {"content": "Hi", "with_pieces": True})).json()["tokens"]
    assert "".join(p["piece"] for p in pieces) == "Hi"
    prompt = request(server.port, post_json("/apply-template", {"messages": MESSAGES})).json()["prompt"]
    assert "<|im_start|>user\nSay hello<|im_end|>" in prompt and prompt.endswith("<|im_start|>assistant\n")
    history = request(server.port, post_json("/apply-template", {"messages": MESSAGES,
                                                                "add_generation_prompt": False})).json()["prompt"]
    assert history.endswith("Say hello<|im_end|>\n") and prompt.startswith(history)
    bad = request(server.port, post_json("/apply-template", {"messages": MESSAGES, "add_generation_prompt": "no"}))
    assert bad.status == 400 and bad.json()["error"]["param"] == "add_generation_prompt"
    assert request(server.port, post_json("/detokenize", {"tokens": [10 ** 9]})).status == 400


def test_raw_stream_carries_role_first(server):
    conn = RawConnection(server.port)
    conn.send(post_json("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2, "stream": True}))
    resp = conn.read_response()
    events = sse_data(resp.body)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    conn.close()


# ---- an error after the stream started ----------------------------------------------

UNSAMPLEABLE = {"grammar": f"root ::= <[{TOKEN_A}]>", "logit_bias": {str(TOKEN_A): -100}}   # fails at the first token


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_the_unsampleable_grammar_alone_admits_its_one_token(server, path):
    """What makes UNSAMPLEABLE fail is the bias banning the one token the grammar allows: the
    grammar alone is answered with that token (it refused every token once, so the error came
    without the bias too: engine/sampler.py's TokenRefGuard)."""
    body = {"messages": MESSAGES, "prompt": "Hi", "max_tokens": 5, "grammar": UNSAMPLEABLE["grammar"]}
    body.pop("prompt" if path.endswith("chat/completions") else "messages")
    resp = request(server.port, post_json(path, body))
    assert resp.status == 200, resp.body
    choice = resp.json()["choices"][0]
    assert choice.get("text", choice.get("message", {}).get("content")) == "A" and choice["finish_reason"] == "stop"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_error_after_the_head_is_an_in_band_error_in_the_openai_shape(server, path):
    """The head is out when sampling fails: the error goes in a data event shaped as a whole
    error response (dialects/openai/errors.py's openai_error_body, as before the stream), then [DONE]."""
    body = {"messages": MESSAGES, "prompt": "Hi", "max_tokens": 5, "stream": True, **UNSAMPLEABLE}
    body.pop("prompt" if path.endswith("chat/completions") else "messages")
    resp = request(server.port, post_json(path, body))
    assert resp.status == 200 and resp.body.endswith(b"data: [DONE]\n\n")
    events = sse_data(resp.body)
    assert events[-1] == {"error": {"message": "no token is allowed by both the grammar and logit_bias: the bias "
                                               "bans every token the grammar allows next",
                                    "type": "invalid_request_error", "param": None, "code": "no_allowed_token"}}


def test_the_sdk_raises_the_in_band_error(openai_client):
    stream = chat(openai_client, stream=True, max_tokens=5, logit_bias=UNSAMPLEABLE["logit_bias"],
                  extra_body={"grammar": UNSAMPLEABLE["grammar"]})
    with pytest.raises(openai.APIError) as caught:
        list(stream)
    assert caught.value.code == "no_allowed_token" and caught.value.type == "invalid_request_error"
