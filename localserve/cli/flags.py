"""Command line: flags, LOCALSERVE_* environment and the config file → Settings.

Every option is declared once, by subject, in flag_table.py; argparse (one --help group per
subject), the environment lookup and the config file all follow from it. Precedence: flag >
environment > config file > default.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Callable

from .. import __version__
from ..models.catalogue import PER_MODEL
from ..settings import Settings
from .flag_table import OPTIONS, SUBJECTS
from .option_values import LOOSE, Option, flag

EXIT_USAGE = 2


class UsageError(Exception):
    """A configuration problem: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localserve",
        description="A local LLM daemon: GGUF models over the OpenAI, Anthropic, Ollama and llama-server APIs.",
        epilog="Each flag can also be set with an environment variable LOCALSERVE_<NAME>, e.g. LOCALSERVE_CTX_SIZE.",
    )
    parser.add_argument("--version", action="version", version=f"localserve {__version__}")
    parser.add_argument("--config", metavar="PATH", default=None,
                        help="TOML file whose keys are these flags' names [env LOCALSERVE_CONFIG]")
    parser.add_argument("--check", action="store_true",
                        help="validate the configuration and the model, print the settings, exit 0 or 2")
    for heading, options in SUBJECTS:
        group = parser.add_argument_group(heading)
        for option in options:
            _add(group, option)
    return parser


def _add(group: argparse._ArgumentGroup, option: Option) -> None:
    help_text = f"{option.help} [env {option.env}]"
    if option.repeat:
        group.add_argument(f"--{option.name}", dest=option.attr, type=option.type, action="append",
                           default=None, metavar=option.metavar, help=help_text)
    elif option.type is flag:
        group.add_argument(f"--{option.name}", dest=option.attr, action="store_const", const=True,
                           default=None, help=help_text)
    else:
        group.add_argument(f"--{option.name}", dest=option.attr, type=option.type, default=None,
                           metavar=option.metavar, help=help_text)


def resolve_settings(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Settings:
    """Flags beat LOCALSERVE_* variables, which beat the config file, which beats the defaults."""
    environ = os.environ if environ is None else environ
    config_path = getattr(args, "config", None) or environ.get("LOCALSERVE_CONFIG") or None
    from_file = read_config(config_path) if config_path else {}
    values: dict[str, Any] = {}
    defaulted: set[str] = set()
    for option in OPTIONS:
        value = getattr(args, option.attr)
        if value is None and environ.get(option.env, "") != "":
            value = _from_env(option, environ[option.env])
        if value is None:
            value = from_file.get(option.attr)
        if value is None:
            value = list(option.default) if option.repeat else option.default
            defaulted.add(option.attr)
        values[option.attr] = value
    values["models"] = from_file.get("models", {})
    _resolve_speculative(values, defaulted, config_path)
    settings = Settings(**values)      # an absent --max-inflight-bytes takes its default here
    if settings.max_inflight_bytes < settings.max_body_bytes:
        raise UsageError(f"--max-inflight-bytes ({settings.max_inflight_bytes}) must be at least "
                         f"--max-body-bytes ({settings.max_body_bytes}): a largest request could never be served")
    return settings


def _resolve_speculative(values: dict[str, Any], defaulted: set[str], config_path: str | None) -> None:
    """A draft model given is a draft model used, unless --speculative says otherwise; the
    same within each [models.NAME] table, whose draft model may also come from the server's."""
    if values["draft_model"] and "speculative" in defaulted:
        values["speculative"] = "draft"
    if values["speculative"] == "draft" and not values["draft_model"]:
        raise UsageError("--speculative draft needs --draft-model PATH")
    for name, table in values["models"].items():
        if table.get("draft_model") and "speculative" not in table:
            table["speculative"] = "draft"
        if table.get("speculative") == "draft" and not table.get("draft_model", values["draft_model"]):
            raise UsageError(f"config file {config_path}: [models.{name}] speculative = \"draft\" needs a "
                             f"draft-model (in the table or --draft-model)")


def _from_env(option: Option, raw: str) -> Any:
    try:
        if option.repeat:
            return [option.type(part.strip()) for part in raw.split(",") if part.strip()]
        return option.type(raw)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise UsageError(f"{option.env}={raw!r}: {exc}") from None


def read_config(path: str) -> dict[str, Any]:
    """The TOML config file as option values; one-line UsageError naming the file and the key."""
    import tomllib
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"config file {path} is not valid TOML: {exc}") from None
    by_name = {o.name: o for o in OPTIONS}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key == "models":
            values["models"] = _model_tables(path, value, by_name)
            continue
        option = by_name.get(key.replace("_", "-"))
        if option is None:
            raise UsageError(f"config file {path}: unknown key '{key}'")
        try:
            values[option.attr] = _config_value(option, value)
        except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
            raise UsageError(f"config file {path}: key '{key}': {exc}") from None
    return values


def _model_tables(path: str, tables: Any, by_name: dict[str, Option]) -> dict[str, dict[str, Any]]:
    """[models.NAME] tables: {NAME: {"path", "aliases", attribute: value}}, each value checked
    as its flag's would be."""
    if not isinstance(tables, dict) or not all(isinstance(t, dict) for t in tables.values()):
        raise UsageError(f"config file {path}: 'models' must hold [models.NAME] tables")
    models: dict[str, dict[str, Any]] = {}
    for name, table in tables.items():
        entry: dict[str, Any] = {}
        for key, value in table.items():
            where = f"config file {path}: [models.{name}] key '{key}'"
            attr = key.replace("-", "_")
            if attr == "path":
                if not isinstance(value, str) or not value:
                    raise UsageError(f"{where}: expected a file path")
                entry["path"] = value
            elif attr == "aliases":
                if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
                    raise UsageError(f"{where}: expected a list of names")
                entry["aliases"] = value
            elif attr in PER_MODEL:
                try:
                    entry[attr] = _config_value(by_name[attr.replace("_", "-")], value)
                except (TypeError, ValueError, argparse.ArgumentTypeError) as exc:
                    raise UsageError(f"{where}: {exc}") from None
            else:
                raise UsageError(f"{where}: not a per-model setting; one of path, aliases, "
                                 f"{', '.join(a.replace('_', '-') for a in PER_MODEL)}")
        if "path" not in entry:
            raise UsageError(f"config file {path}: [models.{name}] needs a path")
        models[name] = entry
    return models


def _config_value(option: Option, value: Any) -> Any:
    if option.type in LOOSE:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"expected a number or a string, got {type(value).__name__}")
        return option.type(str(value))
    if option.repeat:
        items = value if isinstance(value, list) else [value]
        if not all(isinstance(v, str) for v in items):
            raise TypeError("expected a string or a list of strings")
        return [option.type(v) for v in items]
    if option.type is flag:
        if not isinstance(value, bool):
            raise TypeError(f"expected true or false, got {type(value).__name__}")
        return value
    kind = _value_kind(option.type)
    accepted = {"int": (int,), "float": (int, float), "str": (str,)}[kind]
    if isinstance(value, bool) or not isinstance(value, accepted):
        raise TypeError(f"expected {'a number' if kind == 'float' else 'an integer' if kind == 'int' else 'a string'}, "
                        f"got {type(value).__name__}")
    return option.type(value if kind == "str" else str(value))   # the converter also checks ranges


def _value_kind(converter: Callable[[str], Any]) -> str:
    """"int", "float" or "str": what a converter returns (its return annotation for our own)."""
    kind = converter.__name__ if converter in (int, float, str) else \
        str(getattr(converter, "__annotations__", {}).get("return", "str"))
    return kind if kind in ("int", "float") else "str"   # other converters parse text themselves


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )

