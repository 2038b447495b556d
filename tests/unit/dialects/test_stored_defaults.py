"""An Ollama model's stored system prompt and options under a request of every dialect: the
request's own fields win, each dialect's names take them, nothing the store holds is refused."""

from __future__ import annotations

from localserve.dialects import stored_defaults as sd
from localserve.models.defaults import ModelDefaults

STORED = ModelDefaults("Be terse.", (("num_predict", 3), ("stop", ["END"]), ("temperature", 1.5), ("top_k", 7),
                                     ("mirostat", 2)))
ASK = [{"role": "user", "content": "hi"}]


def test_chat_takes_everything_under_its_own_fields():
    body = {"messages": list(ASK), "top_k": 50}
    sd.put_stored(STORED, body, sd.CHAT)
    assert body == {"messages": [{"role": "system", "content": "Be terse."}, *ASK], "top_k": 50, "max_tokens": 3,
                    "stop": ["END"], "temperature": 1.5}
    own = {"messages": [{"role": "developer", "content": "x"}, *ASK], "max_tokens": 9, "stop": "."}
    sd.put_stored(STORED, own, sd.CHAT)
    assert own["messages"][0]["content"] == "x" and len(own["messages"]) == 2
    assert own["max_tokens"] == 9 and own["stop"] == "."


def test_each_dialect_by_its_own_names():
    messages = {"messages": list(ASK), "max_tokens": 5}
    sd.put_stored(STORED, messages, sd.MESSAGES)
    assert messages["system"] == "Be terse." and messages["stop_sequences"] == ["END"]
    assert messages["temperature"] == 1.0 and messages["max_tokens"] == 5       # Messages' highest; its own limit
    responses = {"input": "hi"}
    sd.put_stored(STORED, responses, sd.RESPONSES)
    assert responses["instructions"] == "Be terse." and responses["max_output_tokens"] == 3
    developer = {"input": [{"role": "developer", "content": "mine"}, {"role": "user", "content": "hi"}]}
    sd.put_stored(STORED, developer, sd.RESPONSES)
    assert "instructions" not in developer
    raw = {"prompt": "hi"}
    sd.put_stored(STORED, raw, sd.LLAMA_COMPLETION)
    assert raw == {"prompt": "hi", "n_predict": 3, "stop": ["END"], "temperature": 1.5, "top_k": 7}


def test_what_a_dialect_cannot_take_is_left_out():
    body = {"messages": list(ASK)}
    sd.put_stored(ModelDefaults(None, (("num_predict", -1), ("temperature", True), ("stop", [1]))), body, sd.CHAT)
    assert body == {"messages": ASK}
    sd.put_stored(None, body, sd.CHAT)
    assert body == {"messages": ASK}
