"""One command-line option (Option) and the converters that read its value from a flag, a
LOCALSERVE_* variable or the config file; a bad value is argparse's ArgumentTypeError, which
names what was expected."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable

from .. import settings as defaults
from ..models.discovery.sources import parse_sources
from ..models.units import parse_duration, parse_size
from ..wire.server import listen_address, listen_host


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


def _checked(name: str, read: Callable[[str], Any], ok: Callable[[Any], bool], refusal: str,
             returns: str) -> Callable[[str], Any]:
    """A converter named `name`: `read` the text (its ValueError is argparse's "invalid NAME
    value"), then refuse what `ok` says no to. `returns` ("int", "float" or "str") is what the
    config file reader expects (flags.py reads it from the return annotation)."""
    def convert(value: str) -> Any:
        result = read(value)
        if not ok(result):
            raise argparse.ArgumentTypeError(refusal)
        return result
    convert.__name__ = convert.__qualname__ = name
    convert.__annotations__ = {"value": "str", "return": returns}
    return convert


def _one_of(name: str, choices: tuple[str, ...]) -> Callable[[str], str]:
    """A converter that takes one of `choices`, in any case, spaces around it ignored."""
    return _checked(name, lambda value: value.strip().lower(), lambda value: value in choices,
                    f"must be one of {', '.join(choices)}", "str")


def _parsed(name: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A converter from a parser whose ValueError says what is wrong (argparse shows it as is)."""
    def convert(value: str) -> Any:
        try:
            return parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = convert.__qualname__ = name
    convert.__annotations__ = {"value": "str", "return": "str"}   # parses text itself, numbers too
    return convert


def flag(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError("expected true or false")


log_level = _one_of("log_level", ("debug", "info", "warning", "error"))
speculative_mode = _one_of("speculative_mode", defaults.SPECULATIVE_MODES)
pooling_mode = _one_of("pooling_mode", ("mean", "last", "cls"))
non_negative_int = _checked("non_negative_int", int, lambda n: n >= 0, "must not be negative", "int")
positive_int = _checked("positive_int", int, lambda n: n >= 1, "must be at least 1", "int")
# 0: any free port, which the "listening on" line names (a test's server, started with no race)
port_number = _checked("port_number", int, lambda n: 0 <= n < 65536, "must be 0..65535 (0: any free port)", "int")
# NaN is no number of seconds: `n >= 0` and `0 < n` say no to it
non_negative_float = _checked("non_negative_float", float, lambda n: n >= 0, "must not be negative", "float")
positive_seconds = _checked("positive_seconds", float, lambda n: 0 < n < float("inf"),
                            "must be a positive number of seconds", "float")
duration = _parsed("duration", parse_duration)
size = _parsed("size", parse_size)
discovery_sources = _parsed("discovery_sources", parse_sources)
host_name = _parsed("host_name", listen_host)


def listen_address_value(value: str) -> str:
    try:
        host, port = listen_address(value, defaults.DEFAULT_HOST)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


LOOSE = (duration, size)     # a config file may give these as a number or a string ("5m", "8G")
