"""A lean streaming client: raw sockets, so the client costs the 2-core box little."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass


@dataclass
class StreamResult:
    ttft: float               # seconds from sending the request to the first generated text
    total: float              # seconds from sending the request to the end of the stream
    completion_tokens: int
    cached_tokens: int

    @property
    def decode_rate(self) -> float:
        decode_time = self.total - self.ttft
        return (self.completion_tokens - 1) / decode_time if decode_time > 0 else 0.0


def stream_completion(port: int, body: dict, path: str = "/v1/completions") -> StreamResult:
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    payload = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=600)
    started = time.perf_counter()
    sock.sendall(head + payload)
    buffer, first, usage = b"", None, None
    while True:
        data = sock.recv(65536)
        if not data:
            break
        buffer += data
        if first is None and b'"text":"' in buffer.replace(b'"text":""', b""):
            first = time.perf_counter()
        if b"data: [DONE]" in buffer:
            break
    end = time.perf_counter()
    sock.close()
    for line in buffer.split(b"\n"):
        if line.startswith(b"data: {") and b'"usage"' in line and b'"choices":[]' in line:
            usage = json.loads(line[6:])["usage"]
    if usage is None:
        raise RuntimeError("no usage in the stream: " + buffer[-500:].decode("utf-8", "replace"))
    return StreamResult(first - started if first else end - started, end - started, usage["completion_tokens"],
                        usage["prompt_tokens_details"]["cached_tokens"])
