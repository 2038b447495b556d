"""One command-line option (Option) and the converters that read its value from a flag, a
LOCALSERVE_* variable or the config file; a bad value is argparse's ArgumentTypeError, which
names what was expected."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable

from .. import settings as defaults
from ..models.units import parse_duration, parse_size
from ..wire.server import listen_address


@dataclass(frozen=True)
class Option:
    name: str                  # flag without dashes, e.g. "ctx-size"
    type: Callable[[str], Any]
    default: Any
    help: str
    metavar: str | None = None
    repeat: bool = False       # may be given several times; env and file take a list (env: commas)

    @property
    def attr(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return "LOCALSERVE_" + self.name.replace("-", "_").upper()


def log_level(value: str) -> str:
    value = value.lower()
    if value not in ("debug", "info", "warning", "error"):
        raise argparse.ArgumentTypeError("must be one of debug, info, warning, error")
    return value


def flag(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError("expected true or false")


def speculative_mode(value: str) -> str:
    value = value.strip().lower()
    if value not in defaults.SPECULATIVE_MODES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(defaults.SPECULATIVE_MODES)}")
    return value


def non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return number


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def pooling_mode(value: str) -> str:
    if value not in ("mean", "last", "cls"):
        raise argparse.ArgumentTypeError("must be one of mean, last, cls")
    return value


def non_negative_float(value: str) -> float:
    number = float(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return number


def positive_seconds(value: str) -> float:
    number = float(value)
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return number


def listen_address_value(value: str) -> str:
    try:
        host, port = listen_address(value, defaults.DEFAULT_HOST)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def size(value: str) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


LOOSE = (duration, size)     # a config file may give these as a number or a string ("5m", "8G")


LOOSE = (duration, size)     # a config file may give these as a number or a string ("5m", "8G")
