"""The servers end-to-end tests of images and audio share, and the helpers those tests share.

Session fixtures, imported by conftest.py so that every module asking for one gets the same
process: the tiny model served with the tiny vision projector (``vision_server``) or the tiny audio
projector (``audio_server``, tests/support/tinyaudio.py), each beside the bare libmtmd reference
for the same pair (``vision_bare``, ``audio_bare``: bench/bare_vision.py) and its projector's path.
Each is also the other kind's model without it: the vision server has no audio encoder, the audio
server no vision. Tests read their counters relative to what they saw first, since other modules
used the server before them.
"""

from __future__ import annotations

import re

import pytest

from clients import openai_sdk
from conftest import ServerProcess
from rawhttp import post_json, request
from tinyaudio import write_tiny_audio_mmproj
from tinymodel import EOG_TEXTS, NO_EOG, token_ids
from tinyvision import write_tiny_mmproj

N = 8                                            # tokens every answer compared with the bare engine's runs
SERVER_MARKER = re.compile(r"<__media_[0-9a-f]+__>")
BANNED = {token_ids()[t] for t in EOG_TEXTS}


def _served(tiny_model, mmproj, tmp_path_factory):
    return ServerProcess(tiny_model, "--model-id", "tiny", "--slots", "2", "--mmproj", str(mmproj),
                         env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})


@pytest.fixture(scope="session")
def vision_mmproj(tmp_path_factory):
    return write_tiny_mmproj(tmp_path_factory.mktemp("mmproj") / "mmproj-tiny.gguf")


@pytest.fixture(scope="session")
def audio_mmproj(tmp_path_factory):
    return write_tiny_audio_mmproj(tmp_path_factory.mktemp("mmproj") / "mmproj-audio.gguf")


@pytest.fixture(scope="session")
def vision_server(tiny_model, vision_mmproj, tmp_path_factory):
    srv = _served(tiny_model, vision_mmproj, tmp_path_factory)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def audio_server(tiny_model, audio_mmproj, tmp_path_factory):
    srv = _served(tiny_model, audio_mmproj, tmp_path_factory)
    yield srv
    srv.stop()


def _bare(tiny_model, mmproj):
    from bench.bare_vision import BareVision     # llama.cpp's bindings: loaded by the tests that use them only
    return BareVision(str(tiny_model), str(mmproj), n_ctx=1024)


@pytest.fixture(scope="session")
def vision_bare(tiny_model, vision_mmproj):
    b = _bare(tiny_model, vision_mmproj)
    yield b
    b.close()


@pytest.fixture(scope="session")
def audio_bare(tiny_model, audio_mmproj):
    b = _bare(tiny_model, audio_mmproj)
    yield b
    b.close()


def bare_answer(server, bare, body: dict | list, media: list[bytes]) -> str:
    """What the bare engine answers to the prompt the server renders for this body (chat messages
    alone, or a body /apply-template reads): the server's own marker, random per process, given
    as libmtmd's default one, greedy for N tokens with no end token."""
    body = {"messages": body} if isinstance(body, list) else body
    shown = request(server.port, post_json("/apply-template", body))
    assert shown.status == 200, shown.body
    prompt, n = SERVER_MARKER.subn(bare.marker.decode(), shown.json()["prompt"])
    assert n == len(media)
    tokens = bare.greedy(prompt, media, N, BANNED)
    return b"".join(bare.piece(t) for t in tokens).decode("utf-8", "replace")


def metric(server, name: str) -> float:
    body = request(server.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").body
    found = re.search(rf"^{name} ([0-9.e+]+)$", body.decode(), re.M)
    return float(found.group(1)) if found else 0.0


def chat(server, messages: list[dict], stream: bool = False):
    """A Chat Completion of N tokens with no end token: the reply, or streamed (text, usage)."""
    client = openai_sdk(server)
    if not stream:
        return client.chat.completions.create(model="tiny", messages=messages, max_tokens=N, temperature=0,
                                              logit_bias=NO_EOG)
    chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=N, temperature=0,
                                                 logit_bias=NO_EOG, stream=True,
                                                 stream_options={"include_usage": True}))
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks[-1].usage
