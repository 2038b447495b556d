"""A lean streaming client: raw sockets, so the client costs the 2-core box little."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable


# generated text in a chunk, with or without a space after the colon (servers differ)
FIRST_TEXT = re.compile(rb'"text":\s?"(?!")')


@dataclass
class StreamResult:
    ttft: float               # seconds from sending the request to the first generated text
    total: float              # seconds from sending the request to the end of the stream
    completion_tokens: int
    cached_tokens: int
    accepted: int = 0         # drafted tokens accepted / rejected (speculative decoding), from usage
    rejected: int = 0
    text: str = ""            # the generated text (collect_text=True)

    @property
    def decode_rate(self) -> float:
        decode_time = self.total - self.ttft
        return (self.completion_tokens - 1) / decode_time if decode_time > 0 else 0.0


def post_streaming(port: int, path: str, body: dict) -> tuple[socket.socket, float]:
    """A JSON POST on a connection of its own, its answer left to read from the socket, and when it
    was sent (perf_counter): the streaming figures are read straight off the wire."""
    payload = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=600)
    started = time.perf_counter()
    sock.sendall(head + payload)
    return sock, started


def read_stream(sock: socket.socket, started: float, first_text: Callable[[bytes], bool],
                end_mark: bytes | None = None) -> tuple[bytes, float, float]:
    """Read a streamed answer to its end (end_mark seen, or the connection closed) and close it: the
    bytes, and the seconds from `started` to the first output text (first_text(bytes so far) turned
    true; the end when it never did) and to the end."""
    buffer, first = b"", None
    while True:
        data = sock.recv(65536)
        if not data:
            break
        buffer += data
        if first is None and first_text(buffer):
            first = time.perf_counter()
        if end_mark is not None and end_mark in buffer:
            break
    end = time.perf_counter()
    sock.close()
    return buffer, (first or end) - started, end - started


def stream_completion(port: int, body: dict, path: str = "/v1/completions", collect_text: bool = False) -> StreamResult:
    texts = body.pop("text_prompts", None)
    if texts is not None:         # a server that takes only text: send the prompt's text
        body = {**body, "prompt": texts.get(tuple(body["prompt"])) or _text_of(body["prompt"], texts)}
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    buffer, ttft, total = read_stream(*post_streaming(port, path, body), FIRST_TEXT.search, b"data: [DONE]")
    usage = None
    for line in buffer.split(b"\n"):
        if line.startswith(b"data: {") and b'"usage"' in line and b'"choices":[]' in line:
            usage = json.loads(line[6:])["usage"]
        elif usage is None and line.startswith(b"data: {") and b'"usage":{' in line:
            usage = json.loads(line[6:])["usage"]       # llama-server: on the last chunk, beside its choice
    if usage is None:       # a server without stream_options.include_usage: one chunk per token
        chunks = sum(1 for line in buffer.split(b"\n")
                     if line.startswith(b"data: {") and any(c.get("text") for c in json.loads(line[6:])["choices"]))
        usage = {"completion_tokens": chunks, "prompt_tokens_details": {"cached_tokens": 0}}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    details = usage.get("completion_tokens_details") or {}
    text = "".join(c.get("text") or "" for line in buffer.split(b"\n") if line.startswith(b"data: {")
                   for c in json.loads(line[6:])["choices"]) if collect_text else ""
    return StreamResult(ttft, total, usage["completion_tokens"],
                        cached, details.get("accepted_prediction_tokens") or 0,
                        details.get("rejected_prediction_tokens") or 0, text)


def _text_of(tokens: list[int], texts: dict) -> str:
    """Text for a prompt the workload derived from a known one (a marker token spliced in)."""
    for known, text in texts.items():
        if len(known) > 2 and tuple(tokens[-(len(known) - 1):]) == known[1:]:
            return f"[{tokens[1]}] " + text
    raise KeyError("no text for this prompt")


def concurrent_streams(port: int, base: dict, prompts: list[list[int]]) -> tuple[list[StreamResult], float]:
    """A stream per prompt, all at once: their results, and the seconds until the last one ended."""
    results: list[StreamResult | None] = [None] * len(prompts)

    def one(i: int) -> None:
        results[i] = stream_completion(port, {**base, "prompt": prompts[i]})

    started = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - started
