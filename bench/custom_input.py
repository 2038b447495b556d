"""A custom tool call's input streamed through the Responses shaper: time against the input's length.

Codex sends apply_patch calls of thousands of lines. The model writes them as arguments
{"input":"..."}, a few characters per token; the shaper turns each fragment into a
response.custom_tool_call_input.delta. Each fragment must cost the same however much came
before it: this streams patches of 625 to 5,000 lines in 4-character fragments (about a
token each) and prints the microseconds per line, which should stay flat as the patch grows
(a rescan of the whole input per fragment made them grow with it).

    python -m bench.custom_input [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from localserve.dialects.responses.stream import ResponseEvents
from localserve.dialects.responses.tools import ToolKind
from localserve.generation import GenerationOutput, ToolCallDelta, ToolCallStart
from localserve.parsing.tools import ToolCall

LINES = (625, 1250, 2500, 5000)
FRAGMENT = 4        # characters per fragment: about a token of patch text


def patch(lines: int) -> str:
    body = "".join(f'+    value_{i} = compute("item {i}", limit={i % 97})\n' for i in range(lines))
    return f"*** Begin Patch\n*** Add File: src/generated.py\n{body}*** End Patch\n"


def stream_seconds(arguments: str) -> tuple[float, str]:
    """Seconds to stream the call's arguments through the shaper, and the input its deltas made."""
    shaper = ResponseEvents({"status": "in_progress"}, tool_kinds={"apply_patch": ToolKind("custom", "apply_patch")})
    fragments = [arguments[i:i + FRAGMENT] for i in range(0, len(arguments), FRAGMENT)]
    started = time.perf_counter()
    events = shaper.feed(ToolCallStart(0, "call_1", "apply_patch"))
    for fragment in fragments:
        events += shaper.feed(ToolCallDelta(0, fragment))
    events += shaper.finish(GenerationOutput(tool_calls=[ToolCall("call_1", "apply_patch", arguments)],
                                             finish_reason="tool_calls"))
    seconds = time.perf_counter() - started
    streamed = "".join(e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta")
    return seconds, streamed


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench.custom_input")
    parser.add_argument("--repeat", type=int, default=3, help="rounds per size (the median is reported)")
    args = parser.parse_args()
    print(f"{'lines':>6} {'chars':>9} {'fragments':>9} {'seconds':>8} {'us/line':>8}")
    for lines in LINES:
        text = patch(lines)
        arguments = json.dumps({"input": text}, separators=(",", ":"))
        rounds = []
        for _ in range(args.repeat):
            seconds, streamed = stream_seconds(arguments)
            assert streamed == text, "the streamed input is not the patch"
            rounds.append(seconds)
        seconds = statistics.median(rounds)
        print(f"{lines:>6} {len(text):>9} {len(arguments) // FRAGMENT:>9} {seconds:>8.3f} {seconds / lines * 1e6:>8.1f}")


if __name__ == "__main__":
    main()
