"""Reading Ollama's request fields: messages into the chat input, options into sampling, think,
format, names with tags; every bad field a 400 naming it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import imagefiles  # tests/support/
from tinyaudio import mp3_bytes, tone, wav_bytes

from localserve.audio import MAX_AUDIO_PER_REQUEST
from localserve.conversation import Reasoning, Text, ToolCall, ToolResult, text_message
from localserve.dialects.ollama.messages import read_chat, read_messages
from localserve.dialects.ollama.names import catalogue_name, tagged
from localserve.dialects.ollama.options import read_format, read_options, read_think
from localserve.errors import ApiError
from localserve.models.catalogue import Catalogue, ModelEntry


def test_messages_become_the_typed_conversation():
    messages = read_messages([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "thinking": "look it up",
         "tool_calls": [{"function": {"name": "get", "arguments": {"city": "Paris"}}},
                        {"function": {"name": "time", "arguments": '{"zone": "UTC"}'}}]},
        {"role": "tool", "tool_name": "time", "content": "noon"},
        {"role": "tool", "content": "sunny"},
        {"role": "tool", "tool_call_id": "mine", "content": "later"},
    ])
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool", "tool", "tool"]
    assert messages[0].text == "be brief"
    calls = messages[2].of(ToolCall)
    assert messages[2].of(Reasoning) == [Reasoning("look it up")]
    # arguments are data, whether sent as an object (Ollama's) or as JSON text (OpenAI's)
    assert [(c.name, c.arguments) for c in calls] == [("get", {"city": "Paris"}), ("time", {"zone": "UTC"})]
    assert len({c.id for c in calls}) == 2
    # results find their calls by name, else in order; a client's own id is kept
    results = [m.parts[0] for m in messages[3:]]
    assert all(isinstance(r, ToolResult) for r in results)
    assert (results[0].call_id, results[0].name, results[0].content) == (calls[1].id, "time", (Text("noon"),))
    assert (results[1].call_id, results[1].name) == (calls[0].id, None)
    assert results[2].call_id == "mine"


def test_a_tool_message_takes_images_before_its_text():
    """A screenshot in a tool result (issue 46): Ollama's tool messages take images, as user ones do."""
    png, jpeg = imagefiles.png(8, 8), imagefiles.progressive_jpeg(16, 8)
    messages = read_messages([
        {"role": "user", "content": "take a screenshot"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "shot", "arguments": {}}}]},
        {"role": "tool", "tool_name": "shot", "content": "done", "images": [imagefiles.b64(png), imagefiles.b64(jpeg)]}])
    (result,) = messages[2].of(ToolResult)
    assert [type(part).__name__ for part in result.content] == ["Image", "Image", "Text"]
    assert [part.media_type for part in result.content[:2]] == ["image/png", "image/jpeg"]
    assert result.content[1].where == "messages[2].images[1]"


def test_a_clip_among_images_is_audio_as_ollama_tells_it():
    """Ollama sends audio in `images`: a WAV or an MP3 by its first bytes (llm/media.go)."""
    png, wav, mp3 = imagefiles.png(8, 8), wav_bytes(tone(0.1)), mp3_bytes(tone(0.2))
    (message,) = read_messages([{"role": "user", "content": "hear this",
                                 "images": [imagefiles.b64(png), imagefiles.b64(wav), imagefiles.b64(mp3)]}])
    assert [type(part).__name__ for part in message.parts] == ["Image", "Audio", "Audio", "Text"]
    assert [message.parts[1].format, message.parts[2].format] == ["wav", "mp3"]
    assert message.parts[2].where == "messages[0].images[2]"


def test_clips_and_images_among_images_are_counted_apart():
    wav = imagefiles.b64(wav_bytes(tone(0.01)))
    png = imagefiles.b64(imagefiles.png(8, 8))
    (message,) = read_messages([{"role": "user", "content": "x", "images": [png] * 30 + [wav] * MAX_AUDIO_PER_REQUEST}])
    assert len(message.parts) == 30 + MAX_AUDIO_PER_REQUEST + 1
    with pytest.raises(ApiError) as caught:
        read_messages([{"role": "user", "content": "x", "images": [png] + [wav] * (MAX_AUDIO_PER_REQUEST + 1)}])
    assert caught.value.code == "too_many_audio_clips"
    assert caught.value.param == f"messages[0].images[{MAX_AUDIO_PER_REQUEST + 1}]"


@pytest.mark.parametrize("messages, param", [
    ("hi", "messages"),
    ([{"role": "user", "content": "x", "images": [imagefiles.b64(b"RIFF\x04\x00\x00\x00WAVE")]}],
     "messages[0].images[0]"),
    ([5], "messages[0]"),
    ([{"role": "bot", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": ["x"]}], "messages[0].content"),
    ([{"role": "user", "content": "x", "images": ["aGk="]}], "messages[0].images[0]"),
    ([{"role": "user", "content": "x", "images": "aGk="}], "messages[0].images"),
    ([{"role": "assistant", "content": "x", "images": ["aGk="]}], "messages[0].images"),
    ([{"role": "assistant", "thinking": 3}], "messages[0].thinking"),
    ([{"role": "assistant", "tool_calls": {}}], "messages[0].tool_calls"),
    ([{"role": "assistant", "tool_calls": [{"function": {"arguments": {}}}]}], "messages[0].tool_calls[0]"),
    ([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{x"}}]}],
     "messages[0].tool_calls[0].function.arguments"),
    ([{"role": "tool", "content": "x", "tool_name": 5}], "messages[0].tool_name"),
])
def test_bad_messages_name_their_field(messages, param):
    with pytest.raises(ApiError) as caught:
        read_messages(messages)
    assert caught.value.status == 400 and caught.value.param == param and param in caught.value.message


def test_options_map_onto_the_sampler_and_ignore_what_is_fixed_at_load():
    options = read_options({"options": {"temperature": 0.2, "top_k": 7, "top_p": 0.5, "min_p": 0.1, "typical_p": 0.9,
                                        "repeat_penalty": 1.2, "repeat_last_n": -1, "presence_penalty": 0.5,
                                        "frequency_penalty": 0.25, "seed": 42, "stop": ["\n\n"], "num_predict": 12,
                                        "num_ctx": 8192, "num_keep": 4, "mirostat": 2, "something_new": True}},
                           n_vocab=300, label="t")
    s = options.sampling
    assert (s.temperature, s.top_k, s.top_p, s.min_p, s.typical_p) == (0.2, 7, 0.5, 0.1, 0.9)
    assert (s.repeat_penalty, s.repeat_last_n, s.presence_penalty, s.frequency_penalty, s.seed) == (
        1.2, 0x7FFFFFFF, 0.5, 0.25, 42)
    assert options.stop == ["\n\n"] and options.max_tokens == 12
    assert read_options({"options": {"num_predict": -1}}, 300, "t").max_tokens is None
    assert read_options({}, 300, "t").max_tokens is None


@pytest.mark.parametrize("options, param", [
    ({"temperature": "hot"}, "options.temperature"),
    ({"top_p": 2}, "options.top_p"),
    ({"typical_p": -1}, "options.typical_p"),
    ({"num_predict": "ten"}, "options.num_predict"),
    ({"stop": 5}, "options.stop"),
    ({"seed": 1.5}, "options.seed"),
])
def test_bad_options_name_their_field(options, param):
    with pytest.raises(ApiError) as caught:
        read_options({"options": options}, 300, "t")
    assert caught.value.status == 400 and caught.value.param == param and f"'{param}'" in caught.value.message


def test_think_format_and_tools():
    assert read_think({}) == (None, None)
    assert read_think({"think": False}) == (False, None)
    assert read_think({"think": "high"}) == (True, "high")
    for bad in ("max", 1, ["x"]):
        with pytest.raises(ApiError, match="think"):
            read_think({"think": bad})
    assert read_format({"format": "json"}) == (True, None)
    assert read_format({"format": ""}) == (False, None)
    assert read_format({"format": {"type": "object"}}) == (False, {"type": "object"})
    with pytest.raises(ApiError, match="format"):
        read_format({"format": "xml"})
    chat = read_chat({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
                     False, None, [text_message("user", "x")])
    assert [t.name for t in chat.tools] == ["f"] and chat.template_kwargs["enable_thinking"] is False


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("sent, mode, name", [
    (None, "auto", None),
    ("required", "required", None),
    ("none", "none", None),
    ({"type": "function", "name": "f"}, "named", "f"),                     # the AI SDK's Ollama provider
    ({"type": "function", "function": {"name": "f"}}, "named", "f"),
])
def test_tool_choice_is_read_as_chat_completions_reads_it(sent, mode, name):
    chat = read_chat({"tools": TOOLS, "tool_choice": sent}, None, None, [text_message("user", "x")])
    assert (chat.tool_choice.mode, chat.tool_choice.name) == (mode, name)


@pytest.mark.parametrize("body", [{"tools": TOOLS, "tool_choice": "any"}, {"tool_choice": "required"},
                                  {"tools": TOOLS, "tool_choice": {"type": "function", "name": "g"}},
                                  {"tools": TOOLS, "tool_choice": 1}])
def test_a_tool_choice_it_cannot_honour_is_a_400(body):
    with pytest.raises(ApiError) as caught:
        read_chat(body, None, None, [text_message("user", "x")])
    assert caught.value.status == 400 and caught.value.param == "tool_choice"


def test_names_answer_with_and_without_latest():
    catalogue = Catalogue([ModelEntry("qwen", "/q.gguf", aliases=("qwen3:8b",)), ModelEntry("llama", "/l.gguf")])
    models = SimpleNamespace(catalogue=catalogue)
    assert catalogue_name(models, "qwen:latest") == "qwen"
    assert catalogue_name(models, "qwen3:8b") == "qwen"            # an alias with its own tag
    assert catalogue_name(models, "llama") == "llama"
    with pytest.raises(ApiError) as caught:
        catalogue_name(models, "absent:latest")
    assert caught.value.status == 404 and caught.value.message == "model 'absent:latest' not found"
    alone = SimpleNamespace(catalogue=Catalogue([ModelEntry("tiny", "/t.gguf")], any_name=True))
    assert catalogue_name(alone, "tiny:latest") == "tiny"
    with pytest.raises(ApiError, match="not found"):       # a one-model server's Ollama routes too
        catalogue_name(alone, "llama3.2")


def test_ollamas_sampling_defaults_where_the_request_leaves_them_out():
    s = read_options({"options": {"stop": ["x"]}}, 300, "t").sampling
    assert (s.temperature, s.top_k, s.top_p, s.min_p, s.typical_p) == (0.8, 40, 0.9, 0.0, 1.0)
    assert (s.repeat_penalty, s.repeat_last_n, s.presence_penalty, s.frequency_penalty) == (1.0, 64, 0.0, 0.0)
    assert read_options({}, 300, "t").sampling.top_p == 0.9
    assert (tagged("qwen"), tagged("qwen3:8b")) == ("qwen:latest", "qwen3:8b")
