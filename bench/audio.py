"""Audio: a clip's decode, encode and prefill through the API against the bare engine doing the
same libmtmd calls (bare_vision.py: mtmd_helper_bitmap_init_from_buf decodes and resamples the
clip, mtmd_tokenize cuts it into windows, mtmd_helper_eval_chunks encodes and decodes them), and
a second turn carrying the same clip against the first.

The projector is a synthetic one as wide as the model's embedding (tests/support/tinyaudio.py:
an Ultravox projector, random weights, a Whisper encoder of four blocks 256 wide over 80 mel
bins, frames stacked 4 at a time: 375 positions a 30-second window), so the figure is the
server's overhead around libmtmd's work (HTTP, base64, the header checks of localserve/audio.py,
the runtime's chunk evaluation), not a real encoder's cost. The clip is a speech-like glide
of 45 seconds at 16 kHz (two windows: two audio chunks), each round its own.

- chat, first turn: a prompt with an input_audio part never heard before, max_tokens 1, against
  BareVision.prefill of the prompt /apply-template shows (the server's media marker given as
  libmtmd's default). Target: <= 1.05 x the bare engine.
- transcription, first turn: POST /v1/audio/transcriptions (a multipart form, max_tokens 1)
  against the bare prefill of the transcription prompt. Target: <= 1.05 x the bare engine.
- second turn: the chat, its answer and one more user turn: the clip's KV is the slot's
  already. Target: <= 0.2 x the first turn.
Rounds alternate which side runs first; each ratio is the median of ratios within a round.

Run alone with ``python -m bench --audio-only`` (or ``python -m bench.audio``); ``make bench``
runs it after the images table.
"""

from __future__ import annotations

import base64
import http.client
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from localserve.dialects.openai.transcriptions import TRANSCRIBE
from localserve.engine import cpu_weights
from localserve.engine.gguf_meta import read_shape

from . import table
from .bare_vision import BareVision
from .server import RunningServer
from .versus_bare import seconds_row, standalone
from .vision import SERVER_MARKER, post

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
import tinyaudio  # noqa: E402  (the synthetic projector's writer and the clips)

FIRST_TARGET = 1.05
SECOND_TARGET = 0.2
MAX_ROUNDS = 3
CTX = 4096
CLIP_SECONDS = 45.0                  # two 30-second windows: two audio chunks
STACK_FACTOR = 4                     # 375 positions a window (a factor libmtmd counts as its graph makes)
BOUNDARY = "bench-audio"


def synthetic_projector(model: str, directory: str) -> str:
    n_embd = read_shape(model).n_embd
    return str(tinyaudio.write_tiny_audio_mmproj(Path(directory) / "mmproj-audio-bench.gguf", n_embd_text=n_embd,
                                                 n_embd=256, n_head=4, n_ff=1024, n_layer=4,
                                                 stack_factor=STACK_FACTOR, hidden=1024))


def clip(seed: int) -> bytes:
    """A speech-like glide of CLIP_SECONDS, its pitch and loudness the round's own."""
    return tinyaudio.wav_bytes(tinyaudio.tone(CLIP_SECONDS, freq=120 + seed * 17 % 200, glide=3.0 + seed % 5,
                                              amplitude=0.3 + seed % 7 / 20))


def audio_part(data: bytes) -> dict:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": "wav"}}


def first_turn(data: bytes) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "What is said in this recording?"},
                                         audio_part(data)]}]


def timed_chat(port: int, messages: list[dict]) -> tuple[float, str]:
    started = time.perf_counter()
    reply = post(port, "/v1/chat/completions", {"messages": messages, "max_tokens": 1, "temperature": 0})
    return time.perf_counter() - started, reply["choices"][0]["message"]["content"]


def timed_transcription(port: int, data: bytes) -> float:
    fields = {"model": "bench", "max_tokens": "1", "temperature": "0"}
    body = b"".join(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
                    for k, v in fields.items())
    body += (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="clip.wav"\r\n'
             "Content-Type: audio/wav\r\n\r\n").encode() + data + f"\r\n--{BOUNDARY}--\r\n".encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    try:
        conn.request("POST", "/v1/audio/transcriptions", body,
                     {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
        resp = conn.getresponse()
        answer = resp.read()
    finally:
        conn.close()
    if resp.status != 200:
        raise RuntimeError(f"/v1/audio/transcriptions answered {resp.status}: {answer[:300]!r}")
    return time.perf_counter() - started


def bare_seconds(port: int, bare: BareVision, messages: list[dict], data: bytes) -> float:
    prompt, n = SERVER_MARKER.subn(bare.marker.decode(),
                                   post(port, "/apply-template", {"messages": messages})["prompt"])
    assert n == 1, "one media marker per clip"
    return bare.prefill(prompt, [data])[1]


def transcription_messages(data: bytes) -> list[dict]:
    """The transcription's prompt as the server builds it (transcriptions.py: one user turn)."""
    return [{"role": "user", "content": [{"type": "text", "text": TRANSCRIBE}, audio_part(data)]}]


def paired(ours: list[float], bares: list[float]) -> float:
    return statistics.median(o / b for o, b in zip(ours, bares))


def measure(model: str, mmproj: str, threads: int, repeat: int) -> dict:
    bare = BareVision(model, mmproj, n_ctx=CTX, threads=threads, weights=cpu_weights.plan(model, "auto"))
    chats, chat_bares, seconds, heard, heard_bares = [], [], [], [], []
    with RunningServer(model, "--threads", str(threads), "--ctx-size", str(CTX), "--slots", "1",
                       "--mmproj", mmproj, "--model-id", "bench") as server:
        timed_chat(server.port, first_turn(clip(999)))        # warm-up: the first encode's buffers
        bare.prefill("warm-up " + bare.marker.decode() + " done", [clip(998)])
        for r in range(repeat):
            data, other = clip(2 * r), clip(2 * r + 1)
            messages, heard_messages = first_turn(data), transcription_messages(other)
            if r % 2 == 0:
                chat_bares.append(bare_seconds(server.port, bare, messages, data))
                heard_bares.append(bare_seconds(server.port, bare, heard_messages, other))
            ours, answer = timed_chat(server.port, messages)
            again, _ = timed_chat(server.port, messages + [{"role": "assistant", "content": answer},
                                                           {"role": "user", "content": "And the speaker?"}])
            heard.append(timed_transcription(server.port, other))
            if r % 2 == 1:
                chat_bares.append(bare_seconds(server.port, bare, messages, data))
                heard_bares.append(bare_seconds(server.port, bare, heard_messages, other))
            chats.append(ours)
            seconds.append(again)
    bare.close()
    return {"bare": statistics.median(chat_bares), "first": statistics.median(chats),
            "first_ratio": paired(chats, chat_bares), "heard_bare": statistics.median(heard_bares),
            "heard": statistics.median(heard), "heard_ratio": paired(heard, heard_bares),
            "second": statistics.median(seconds), "second_ratio": paired(seconds, chats)}


def print_table(result: dict) -> None:
    windows = math.ceil(CLIP_SECONDS / 30)
    header = (f"audio (synthetic {windows} x {tinyaudio.audio_tokens(STACK_FACTOR)}-position clip)", "bare s",
              "localserve s", "ratio", "target")
    rows = [seconds_row("decode + encode + prefill, chat", result["bare"], result["first"], result["first_ratio"],
                        f"<= {FIRST_TARGET}"),
            seconds_row("the same, transcription form", result["heard_bare"], result["heard"], result["heard_ratio"],
                        f"<= {FIRST_TARGET}"),
            seconds_row("second turn, same clip", f"{result['first']:.3f} (first)", result["second"],
                        result["second_ratio"], f"<= {SECOND_TARGET}", against="first")]
    table.print_table(header, rows)


def run(model: str, args, rounds: int | None = None) -> None:
    """The table, in `rounds` rounds (default: --repeat, at most MAX_ROUNDS inside make bench)."""
    with tempfile.TemporaryDirectory() as directory:
        print_table(measure(model, synthetic_projector(model, directory), args.threads,
                            rounds or min(args.repeat, MAX_ROUNDS)))


def main() -> int:
    return standalone("bench.audio", lambda model, args, directory: print_table(
        measure(model, synthetic_projector(model, directory), args.threads, args.repeat)))


if __name__ == "__main__":
    sys.exit(main())
