"""llama-server's API pieces that need no model: its error shape, slot file names and files, the
embedding norms, the /models/sse events."""

from __future__ import annotations

import struct

import numpy as np
import orjson
import pytest

from localserve.dialects.llamacpp.embedding import normalised
from localserve.dialects.llamacpp.errors import llama_error_body
from localserve.dialects.llamacpp.models import StreamCount, status_event
from localserve.dialects.llamacpp.slots import MAGIC, key_folder, read_filename, read_slot_file
from localserve.errors import ApiError, context_exceeded
from localserve.runtime.slot_state import fits

FINGERPRINT = {"model": "m", "architecture": "llama", "n_params": 1, "n_vocab": 8, "n_layer": 3, "n_ctx": 4}


def test_the_error_shape_is_llama_servers():
    assert llama_error_body(ApiError(404, "gone", code="model_not_found")) == \
        {"error": {"code": 404, "message": "gone", "type": "not_found_error"}}
    assert llama_error_body(ApiError(503, "busy"))["error"]["type"] == "unavailable_error"
    assert llama_error_body(ApiError(409, "busy"))["error"]["type"] == "invalid_request_error"
    assert llama_error_body(ApiError(500, "oops"))["error"]["type"] == "server_error"
    too_long = llama_error_body(context_exceeded(9000, 4096))["error"]
    assert too_long["type"] == "exceed_context_size_error" and too_long["n_ctx"] == 4096
    assert too_long["n_prompt_tokens"] == 9000 and too_long["code"] == 400


@pytest.mark.parametrize("name", ["slot.bin", "my slot 1", "a.b.c", "x-y_z"])
def test_plain_file_names_pass(name):
    assert read_filename({"filename": name}) == name


@pytest.mark.parametrize("name", ["", "../x", "a/b", "a\\b", "..", ".", ".x", "a..b", " x", "x ", "a\x00b",
                                  "a\nb", "c:x", "x" * 256, None, 5, ["a"]])
def test_anything_else_is_refused(name):
    with pytest.raises(ApiError) as caught:
        read_filename({"filename": name})
    assert caught.value.status == 400 and caught.value.param == "filename"


def slot_file(header: dict, tokens: list[int], state: bytes) -> bytes:
    head = orjson.dumps(header)
    return MAGIC + struct.pack("<I", len(head)) + head + struct.pack(f"<{len(tokens)}i", *tokens) + state


def test_a_slot_file_reads_back():
    data = slot_file({**FINGERPRINT, "scope": "", "n_tokens": 3}, [1, -5, 7], b"STATE")
    assert read_slot_file(data, FINGERPRINT, "", "f") == ([1, -5, 7], b"STATE", [])     # -5: an image's placeholder
    data = slot_file({**FINGERPRINT, "scope": "", "n_tokens": 1, "adapters": [["alpha", 1.0]]}, [1], b"S")
    assert read_slot_file(data, FINGERPRINT, "", "f") == ([1], b"S", [["alpha", 1.0]])


def test_a_slot_file_with_ids_past_the_vocabulary_is_refused():
    data = slot_file({**FINGERPRINT, "scope": "", "n_tokens": 2}, [1, 8], b"STATE")
    with pytest.raises(ApiError, match="vocabulary"):
        read_slot_file(data, FINGERPRINT, "", "f")


def test_a_restored_state_must_hold_the_files_tokens():
    assert fits([1, 2, 3], 3) and not fits([1, 2, 3], 2) and not fits([1, 2], 9)
    assert fits([1, -4, -4, -4, 2], 4) and not fits([1, -4, 2], 4) and not fits([-4], 0)     # M-RoPE images


@pytest.mark.parametrize("data", [
    b"", b"junk", MAGIC, MAGIC + b"\xff\xff\xff\xff{}",
    slot_file({**FINGERPRINT, "scope": ""}, [], b""),                 # no n_tokens
    slot_file({**FINGERPRINT, "scope": "", "n_tokens": 5}, [1, 2], b""),           # fewer tokens than it says
    slot_file({**FINGERPRINT, "scope": "", "n_tokens": -1}, [], b""),
])
def test_what_is_no_slot_file_is_refused(data):
    with pytest.raises(ApiError) as caught:
        read_slot_file(data, FINGERPRINT, "", "f")
    assert caught.value.status == 400 and caught.value.code == "invalid_slot_file"


def test_another_models_file_is_refused_by_name():
    data = slot_file({**FINGERPRINT, "n_ctx": 8, "scope": "", "n_tokens": 0}, [], b"")
    with pytest.raises(ApiError) as caught:
        read_slot_file(data, FINGERPRINT, "", "f")
    assert "another model" in caught.value.message


def test_another_keys_file_is_refused():
    data = slot_file({**FINGERPRINT, "scope": "0123abcd", "n_tokens": 0}, [], b"")
    with pytest.raises(ApiError) as caught:
        read_slot_file(data, FINGERPRINT, "", "f")
    assert "another API key" in caught.value.message
    assert read_slot_file(data, FINGERPRINT, "0123abcd", "f") == ([], b"", [])


def test_the_norms_are_llama_cpps():
    v = np.array([3.0, -4.0])
    assert list(normalised(v, -1)) == [3.0, -4.0]
    assert list(normalised(v, 0)) == pytest.approx([32760 * 3 / 4, -32760.0])
    assert list(normalised(v, 1)) == pytest.approx([3 / 7, -4 / 7])
    assert list(normalised(v, 2)) == pytest.approx([0.6, -0.8])
    assert list(normalised(v, 3)) == pytest.approx(list(v / (27 + 64) ** (1 / 3)))
    assert list(normalised(np.zeros(2), 2)) == [0.0, 0.0]


def test_status_events():
    assert status_event("m", "loading", None) == {"model": "m", "event": "model_status", "data": {"status": "loading"}}
    assert status_event("m", "unloaded", None)["data"] == {"status": "unloaded", "exit_code": 0}
    assert status_event("m", "unloaded", "bad file")["data"] == {"status": "unloaded", "exit_code": 1,
                                                                 "error": "bad file"}
    progress = {"stages": ["text_model"], "current": "text_model", "value": 0.5}
    assert status_event("m", "loading", None, progress)["data"] == {"status": "loading", "progress": progress}


def test_one_client_holds_its_share_of_the_streams_and_all_clients_the_limit():
    streams = StreamCount(5, per_client=2)
    assert streams.take("a@1") is None and streams.take("a@1") is None
    assert "this client" in streams.take("a@1")
    assert streams.take("b@1") is None and streams.take("@2") is None and streams.take("@3") is None
    assert "5 /models/sse streams" in streams.take("@4")
    streams.give_back("a@1")
    assert streams.take("a@1") is None                         # its own place back
    for client in ("a@1", "a@1", "b@1", "@2", "@3"):
        streams.give_back(client)
    assert streams.open == 0 and streams.by_client == {}       # nothing kept for clients gone


def test_each_key_saves_into_its_own_folder(tmp_path):
    """One key or none: llama-server's flat layout; several: a folder per key's scope digest."""
    assert key_folder(tmp_path, "") == tmp_path
    assert key_folder(tmp_path, "0123abcd") == tmp_path / "0123abcd" != key_folder(tmp_path, "4567ef01")
