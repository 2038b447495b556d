"""Command line: flags and LOCALSERVE_* environment → Settings, then serve.

Every option is declared once in OPTIONS; argparse, the environment lookup and the
README's flag table all follow from it. Precedence: flag > environment > default.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

from .. import __version__
from ..settings import Settings
from .. import settings as defaults
from ..engine.cpu_weights import cpu_weights_mode
from ..engine.rpc_config import rpc_workers, tensor_split
from ..models.catalogue import PER_MODEL
from ..models.units import parse_duration, parse_size
from ..wire.server import listen_address

EXIT_USAGE = 2


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


def _log_level(value: str) -> str:
    value = value.lower()
    if value not in ("debug", "info", "warning", "error"):
        raise argparse.ArgumentTypeError("must be one of debug, info, warning, error")
    return value


def _flag(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise argparse.ArgumentTypeError("expected true or false")


def _speculative(value: str) -> str:
    value = value.strip().lower()
    if value not in defaults.SPECULATIVE_MODES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(defaults.SPECULATIVE_MODES)}")
    return value


def _non_negative_int(value: str) -> int:
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


def _non_negative_float(value: str) -> float:
    number = float(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return number


def _positive_float(value: str) -> float:
    number = float(value)
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return number


def _listen_address(value: str) -> str:
    try:
        host, port = listen_address(value, defaults.DEFAULT_HOST)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _size(value: str) -> int:
    try:
        return parse_size(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


LOOSE = (_duration, _size)     # a config file may give these as a number or a string ("5m", "8G")

OPTIONS: tuple[Option, ...] = (
    Option("model", str, None, "GGUF model file to serve (default: the demo model, SmolLM2-135M-Instruct)", "PATH"),
    Option("model-id", str, None, "model name reported by the API (default: the file's stem)", "NAME"),
    Option("mmproj", str, None, "multimodal projector (an mmproj GGUF) for --model: images and/or audio in prompts, as its encoders read "
           "(in --models-dir one is paired by its name; per model: mmproj in [models.NAME])", "PATH"),
    Option("models-dir", str, None, "serve every *.gguf in DIR, each named by its file's stem, loaded on "
           "first use", "DIR"),
    Option("max-models", positive_int, None, "models loaded at once; the least recently used idle one is "
           "unloaded to make room (default: no limit)", "N"),
    Option("max-memory", _size, None, "memory for all loaded models (weights + KV + compute buffers), "
           "e.g. 12G; idle models are unloaded to make room (default: no limit)", "SIZE"),
    Option("keep-alive", _duration, None, f"how long an idle model stays loaded: 30s, 5m, 1h, 0 = unload after "
           f"each request, -1 = never (default: {defaults.DEFAULT_KEEP_ALIVE:g}s; never for --model alone)",
           "DURATION"),
    Option("preload", str, [], "load this model at start (repeatable)", "NAME", repeat=True),
    Option("evict-wait", _non_negative_float, defaults.MODEL_EVICT_WAIT, "seconds a load (or /models/unload) "
           "waits for busy models to go idle; then 503 with Retry-After", "SECONDS"),
    Option("host", str, defaults.DEFAULT_HOST, "address to listen on"),
    Option("port", int, defaults.DEFAULT_PORT, "TCP port to listen on"),
    Option("ollama-listen", _listen_address, None, "a second address to serve on, for tools with Ollama's "
           "port built in, e.g. 127.0.0.1:11434 (the same server and API on both)", "HOST:PORT"),
    Option("ctx-size", positive_int, None,
           f"context size in tokens (default: the model's training context, at most {defaults.MAX_DEFAULT_CTX})", "N"),
    Option("threads", positive_int, None, "CPU threads for generation, always this many (default: all cores, "
           "fewer while other processes hold cores)", "N"),
    Option("no-thread-adaptation", _flag, False, "keep to all cores even while other processes hold some "
           "(by default a model runs on fewer threads then)", "BOOL"),
    Option("n-gpu-layers", int, 0, "layers to offload to the GPU (-1 = all)", "N"),
    Option("cpu-weights", cpu_weights_mode, defaults.DEFAULT_CPU_WEIGHTS,
           "which CPU buffer types hold the weights: auto (no AMX where llama.cpp's AMX kernels may crash, "
           "CPU_REPACK kept), repack, plain or amx", "MODE"),
    Option("slots", positive_int, defaults.DEFAULT_SLOTS, "sequences the runtime holds at once", "N"),
    Option("max-queue", positive_int, defaults.DEFAULT_MAX_QUEUE,
           "jobs allowed to wait for a slot; beyond it requests get 503", "N"),
    Option("batch-size", positive_int, defaults.DEFAULT_BATCH_SIZE, "prompt tokens per decode call", "N"),
    Option("pooling", pooling_mode, None, "how an embedding sums up its tokens: mean, last or cls "
           "(default: what the GGUF declares, else last)", "MODE"),
    Option("embeddings-only", _flag, False, "serve /v1/embeddings (and /v1/rerank) only; chat requests get a "
           "400 (encoders and rerankers are so without it)", "BOOL"),
    Option("max-embedding-inputs", positive_int, defaults.DEFAULT_MAX_EMBEDDING_INPUTS,
           "inputs one /v1/embeddings call (documents one /v1/rerank call) may carry", "N"),
    Option("cache-ram", int, defaults.DEFAULT_CACHE_RAM_MB,
           "MB of RAM for prompt-cache sequences evicted from slots (0 = off)", "MB"),
    Option("no-prefix-sharing", _flag, False, "let no sequence start from a prompt head another holds or is "
           "computing", "BOOL"),
    Option("kv-unified", _flag, False, "one pool of KV cells for all slots: a shared prompt head is held "
           "once instead of copied (each step then attends over every slot's cells)", "BOOL"),
    Option("prefill-keepalive", _non_negative_float, defaults.DEFAULT_PREFILL_KEEPALIVE,
           "seconds between ': prefill' SSE comments while a prompt is processed", "SECONDS"),
    Option("max-body-bytes", positive_int, defaults.DEFAULT_MAX_BODY_BYTES, "largest request body accepted", "BYTES"),
    Option("header-timeout", _non_negative_float, defaults.DEFAULT_HEADER_TIMEOUT,
           "seconds a client has to send a request's headers", "SECONDS"),
    Option("idle-timeout", _non_negative_float, defaults.DEFAULT_IDLE_TIMEOUT,
           "seconds a keep-alive connection may stay idle, and the most a request body may take",
           "SECONDS"),
    Option("max-connections", positive_int, defaults.DEFAULT_MAX_CONNECTIONS,
           "open connections allowed at once (a thread each); beyond it a 503", "N"),
    Option("max-inflight-bytes", positive_int, None,
           f"request-body bytes read or handled at once, all connections together; beyond it a 503 "
           f"(default: {defaults.INFLIGHT_BODIES} x --max-body-bytes)", "BYTES"),
    Option("speculative", _speculative, defaults.DEFAULT_SPECULATIVE,
           "speculative decoding: off, ngram (drafts looked up in the prompt and output, and the request's "
           "prediction) or draft (drafts from --draft-model)", "MODE"),
    Option("draft-model", str, None, "small GGUF model with the same vocabulary that drafts tokens "
           "(--speculative draft, the default once this is given)", "PATH"),
    Option("draft-max", _non_negative_int, defaults.DEFAULT_DRAFT_MAX,
           "most tokens drafted per sequence per step (0 = no speculative decoding)", "N"),
    Option("sample-time-limit", _positive_float, defaults.DEFAULT_SAMPLE_TIME_LIMIT,
           "seconds one request may take to choose one token (a costly grammar); then it fails, "
           "the others go on", "SECONDS"),
    Option("compact-max-tokens", positive_int, defaults.DEFAULT_COMPACT_MAX_TOKENS,
           "the longest summary a context compaction writes, in tokens (README: Long sessions)", "N"),
    Option("drain-timeout", _non_negative_float, defaults.DEFAULT_DRAIN_TIMEOUT,
           "seconds in-flight requests may finish after SIGTERM", "SECONDS"),
    Option("chat-template-file", str, None, "Jinja chat template to use instead of the model's", "PATH"),
    Option("tool-syntax", str, None, "tool-call syntax (default: recognised from the chat template)", "NAME"),
    Option("data-dir", str, None, "where stored responses and conversations live "
           "(default: $XDG_DATA_HOME/localserve, else ~/.local/share/localserve)", "DIR"),
    Option("no-store", _flag, False, "keep no responses or conversations on disk", "BOOL"),
    Option("slot-save-path", str, None, "directory where POST /slots/ID?action=save writes a slot's KV cache "
           "and action=restore reads it back (without it the slot actions are a 501)", "DIR"),
    Option("no-webui", _flag, False, "serve no chat and status page at / (then / is a 404 to "
           "browsers, and still 'Ollama is running' to Ollama's clients)", "BOOL"),
    Option("api-key", str, [], "require this API key (repeatable); from Authorization: Bearer or x-api-key",
           "KEY", repeat=True),
    Option("api-key-file", str, None, "file with one API key per line", "PATH"),
    Option("shared-cache", _flag, False, "with several API keys, let them share prompt caches (slots, shared "
           "prefixes, the RAM cache): one key's cached_tokens then tell of another's prompts (README: Security)",
           "BOOL"),
    Option("allowed-host", str, [], "Host header to accept besides loopback names and IP addresses "
           "(repeatable; '.example.com' matches subdomains, '*' any)", "HOST", repeat=True),
    Option("cors-origin", str, [], "browser origin allowed by CORS (repeatable; '*' any); off by default",
           "ORIGIN", repeat=True),
    Option("rpc", rpc_workers, [], "RPC workers (`localserve worker`) that hold offloaded layers; "
           "comma-separated or repeated", "HOST:PORT", repeat=True),
    Option("rpc-wait", _non_negative_float, defaults.DEFAULT_RPC_WAIT,
           "seconds to wait at start for unreachable RPC workers (/health says loading meanwhile)", "SECONDS"),
    Option("tensor-split", tensor_split, None, "share of offloaded layers per device, e.g. 3,1 "
           "(RPC workers first, then local GPUs; default: by free memory)", "LIST"),
    Option("log-level", _log_level, "info", "debug, info, warning or error", "LEVEL"),
)


class UsageError(Exception):
    """A configuration problem: printed as one line, exit status 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localserve",
        description="A local LLM daemon: OpenAI and Anthropic APIs over one GGUF model.",
        epilog="Each flag can also be set with an environment variable LOCALSERVE_<NAME>, e.g. LOCALSERVE_CTX_SIZE.",
    )
    parser.add_argument("--version", action="version", version=f"localserve {__version__}")
    parser.add_argument("--config", metavar="PATH", default=None,
                        help="TOML file whose keys are these flags' names [env LOCALSERVE_CONFIG]")
    parser.add_argument("--check", action="store_true",
                        help="validate the configuration and the model, print the settings, exit 0 or 2")
    for option in OPTIONS:
        if option.repeat:
            parser.add_argument(f"--{option.name}", dest=option.attr, type=option.type, action="append",
                                default=None, metavar=option.metavar, help=f"{option.help} [env {option.env}]")
        elif option.type is _flag:
            parser.add_argument(f"--{option.name}", dest=option.attr, action="store_const", const=True,
                                default=None, help=f"{option.help} [env {option.env}]")
        else:
            parser.add_argument(f"--{option.name}", dest=option.attr, type=option.type, default=None,
                                metavar=option.metavar, help=f"{option.help} [env {option.env}]")
    return parser


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
    if option.type is _flag:
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

