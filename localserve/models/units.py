"""Durations and sizes as people write them: "5m", "1h30m", "-1", "8G", "512MiB".

Durations follow Ollama's keep_alive: a number is seconds, a string is Go-style
(number + unit, several in a row), a negative value means forever (KEEP_ALIVE_NEVER), and
nothing is longer than Ollama's longest duration (MAX_DURATION_SECONDS: Go's time.Duration,
which refuses "99999999999h" too): a deadline always has a date.
"""

from __future__ import annotations

import math
import re

KEEP_ALIVE_NEVER = -1.0            # keep-alive -1: never unload when idle
MAX_DURATION_SECONDS = (2**63 - 1) / 1e9     # int64 nanoseconds: about 292 years

# ASCII digits only: \d and float() also take "９" or "٣" (any Unicode digit), which no client
# means as a number and a log or a config reader would show differently.
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]*)?)[ \t]*([kmgt]?)(i?b?)", re.IGNORECASE)
_SIZE_FACTOR = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}


def parse_duration(value: object) -> float:
    """Seconds; KEEP_ALIVE_NEVER for any negative value. ValueError names what is wrong."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s, 5m, 1h, 0 or -1")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _duration_text(value.strip())
    else:
        raise ValueError("expected a duration such as 30s, 5m, 1h, 0 or -1")
    if math.isnan(seconds):
        raise ValueError("expected a duration such as 30s, 5m, 1h, 0 or -1")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"at most {MAX_DURATION_SECONDS:.0f} seconds (MAX_DURATION_SECONDS, about 292 years: "
                         f"Ollama's longest duration); a negative value keeps the model loaded for good")
    return KEEP_ALIVE_NEVER if seconds < 0 else seconds


def _duration_text(text: str) -> float:
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if _NUMBER.fullmatch(body):
        return sign * float(body)            # a bare number: seconds
    parts = _DURATION_PART.findall(body)
    if not body or "".join(n + u for n, u in parts) != body:
        raise ValueError(f"'{text}' is not a duration such as 30s, 5m, 1h30m, 0 or -1")
    return sign * sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)


def parse_size(text: str) -> int:
    """Bytes from "8G", "512M", "1.5GiB", "1048576" (powers of 1024)."""
    match = _SIZE.fullmatch(text.strip())
    if not match or (match.group(3) and not match.group(2) and match.group(3).lower() != "b"):
        raise ValueError(f"'{text}' is not a size such as 8G, 512M or 1073741824")
    size = int(float(match.group(1)) * _SIZE_FACTOR[match.group(2).lower()])
    if size < 1:
        raise ValueError("must be at least one byte")
    return size


def describe_duration(seconds: float) -> str:
    if seconds < 0:
        return "never"
    return f"{seconds:g}s"
