"""Request fields every dialect shares: typed reads that fail with a 400 naming the param.

Also the llama.cpp extensions (grammar, top_k, min_p, repeat_penalty, seed,
logit_bias, chat_template_kwargs, lora) that every dialect accepts.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from ..errors import ApiError
from ..generation import SamplingParams
from ..grammar.limits import GrammarTooCostly, check_client_grammar
from ..models.adapter_files import LORA_SCALE_LIMIT
from .limits import MAX_INT_PARAM

SEED_LOW, SEED_HIGH = -(2**63), 2**64 - 1     # any 64-bit seed; llama.cpp uses its low 32 bits

_MISSING = object()

# Names the tool types a request carried that cannot run here and were left out of the prompt.
IGNORED_TOOLS_HEADER = "x-localserve-ignored-tools"
_HEADER_SAFE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def ignored_tools_value(names: list[str]) -> str:
    """The ignored-tools header's value. A tool type is the client's own text: one a header
    cannot carry as it is (control characters, non-Latin-1) is written as "?"."""
    return ", ".join(name if _HEADER_SAFE_NAME.fullmatch(name) else "?" for name in names)


def invalid(param: str, message: str) -> ApiError:
    return ApiError(400, f"invalid '{param}': {message}", param=param, code="invalid_value")


def read_number(body: dict, name: str, *, low: float | None = None, high: float | None = None,
                default: Any = None, integer: bool = False) -> Any:
    value = body.get(name, _MISSING)
    if value is _MISSING or value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(name, f"expected {'an integer' if integer else 'a number'}, got {kind_of(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise invalid(name, "must be finite")
    if integer and isinstance(value, float):
        if not value.is_integer():
            raise invalid(name, "expected an integer")
        if high is not None and value > high:       # before int(): 1e308 would be a 1024-bit integer
            raise invalid(name, f"must be at most {high}, got {value:g}")
        value = int(value)
    if low is not None and value < low:
        raise invalid(name, f"must be at least {low}, got {value}")
    if high is not None and value > high:
        raise invalid(name, f"must be at most {high}, got {value}")
    return value


def read_int(body: dict, name: str, *, low: int | None = None, high: int | None = MAX_INT_PARAM,
             default: Any = None) -> Any:
    """An integer (2.0 counts as 2); by default at most MAX_INT_PARAM, so nothing wraps in llama.cpp's int32."""
    return read_number(body, name, low=low, high=high, default=default, integer=True)


def read_num_ctx(body: dict) -> int | None:
    """The context a request asks for: Ollama's `options.num_ctx`, or `num_ctx` beside the other
    fields (Goose sends it so on OpenAI-shaped requests); None when it asks none (0 or less:
    the model's own, as some clients send by default)."""
    options = body.get("options")
    if isinstance(options, dict) and options.get("num_ctx") is not None:
        value = read_int({"options.num_ctx": options["num_ctx"]}, "options.num_ctx")     # named as sent
    else:
        value = read_int(body, "num_ctx")
    return value if value is not None and value > 0 else None


def read_bool(body: dict, name: str, default: bool = False) -> bool:
    value = _typed(body, name, bool, "a boolean")
    return default if value is None else value


def read_str(body: dict, name: str, default: str | None = None, *, choices: tuple[str, ...] | None = None) -> Any:
    value = _typed(body, name, str, "a string")
    if value is None:
        return default
    if choices is not None and value not in choices:
        raise invalid(name, f"must be one of {', '.join(choices)}; got '{value}'")
    return value


def read_dict(body: dict, name: str) -> dict | None:
    return _typed(body, name, dict, "an object")


def _typed(body: dict, name: str, kind: type, expected: str) -> Any:
    """body[name] when it is a `kind`, None when absent or null; a 400 naming it otherwise."""
    value = body.get(name)
    if value is not None and not isinstance(value, kind):
        raise invalid(name, f"expected {expected}, got {kind_of(value)}")
    return value


def read_stop(body: dict, name: str = "stop", max_count: int = 16) -> list[str]:
    value = body.get(name)
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        if len(value) > max_count:
            raise invalid(name, f"at most {max_count} stop sequences are allowed")
        return [s for s in value if s]
    raise invalid(name, "expected a string or a list of strings")


def read_logit_bias(body: dict, n_vocab: int) -> dict[int, float]:
    value = body.get("logit_bias")
    if value is None:
        return {}
    if isinstance(value, list):       # llama.cpp also accepts [[token, bias], ...]
        try:
            value = {str(t): b for t, b in value}
        except (TypeError, ValueError):
            raise invalid("logit_bias", "expected an object mapping token ids to biases") from None
    if not isinstance(value, dict):
        raise invalid("logit_bias", "expected an object mapping token ids to biases")
    bias: dict[int, float] = {}
    for key, amount in value.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise invalid("logit_bias", f"key '{key}' is not a token id") from None
        if not 0 <= token < n_vocab:
            raise invalid("logit_bias", f"token id {token} is outside the vocabulary (0..{n_vocab - 1})")
        if amount is False:
            amount = -100
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not -100 <= amount <= 100:
            raise invalid("logit_bias", f"bias for token {token} must be a number from -100 to 100")
        bias[token] = float(amount)
    return bias


def read_sampling(body: dict, n_vocab: int, *, temperature_high: float = 2.0,
                  defaults: SamplingParams | None = None) -> SamplingParams:
    """The sampling fields shared by every dialect, validated; what the body leaves out is
    `defaults`' (llama-server's unless a dialect has its own: Ollama's)."""
    p = dataclasses.replace(defaults) if defaults is not None else SamplingParams()
    p.temperature = read_number(body, "temperature", low=0, high=temperature_high, default=p.temperature)
    p.top_p = read_number(body, "top_p", low=0, high=1, default=p.top_p)
    p.top_k = read_int(body, "top_k", low=0, default=p.top_k)
    p.min_p = read_number(body, "min_p", low=0, high=1, default=p.min_p)
    p.seed = read_int(body, "seed", low=SEED_LOW, high=SEED_HIGH, default=None)
    p.presence_penalty = read_number(body, "presence_penalty", low=-2, high=2, default=p.presence_penalty)
    p.frequency_penalty = read_number(body, "frequency_penalty", low=-2, high=2, default=p.frequency_penalty)
    p.repeat_penalty = read_number(body, "repeat_penalty", low=0, high=10, default=p.repeat_penalty)
    if p.repeat_penalty == 0:
        raise invalid("repeat_penalty", "must be greater than 0 (1.0 disables it)")
    p.repeat_last_n = read_int(body, "repeat_last_n", low=-1, default=p.repeat_last_n)
    if p.repeat_last_n == -1:
        p.repeat_last_n = 0x7FFFFFFF
    p.logit_bias = read_logit_bias(body, n_vocab)
    p.lora = read_lora(body)
    p.grammar = read_str(body, "grammar")
    if p.grammar:
        try:
            check_client_grammar(p.grammar)
        except GrammarTooCostly as exc:
            raise ApiError(400, f"invalid 'grammar': {exc}", param="grammar", code="grammar_too_costly") from None
    return p


def read_lora(body: dict) -> tuple[tuple[int, float], ...] | None:
    """llama-server's per-request `lora: [{"id", "scale"}]` (the model checks the ids at submit)."""
    value = body.get("lora")
    return None if value is None else read_adapter_scales(value)


def read_adapter_scales(value: Any, param: str = "lora") -> tuple[tuple[int, float], ...]:
    """`[{"id": 0, "scale": 0.5}, ...]` as (id, scale) pairs by id; a scale left out is 1 (the
    adapter on); an id listed twice, its last scale. Every scale within ±LORA_SCALE_LIMIT."""
    if not isinstance(value, list):
        raise bad_lora(param, "expected an array of {\"id\", \"scale\"} objects")
    pairs: dict[int, float] = {}
    for item in value:
        if not isinstance(item, dict):
            raise bad_lora(param, f"each entry is an object {{\"id\", \"scale\"}}, got {kind_of(item)}")
        adapter_id, scale = item.get("id"), item.get("scale", 1.0)
        if isinstance(adapter_id, bool) or not isinstance(adapter_id, int) or adapter_id < 0:
            raise bad_lora(param, f"an adapter's id is a whole number from 0 (GET /lora-adapters lists them), "
                                  f"got {kind_of(adapter_id)}")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
            raise bad_lora(param, f"the scale of adapter {adapter_id} must be a finite number")
        if abs(scale) > LORA_SCALE_LIMIT:
            raise bad_lora(param, f"the scale of adapter {adapter_id} is {scale:g}, outside -{LORA_SCALE_LIMIT:g} "
                                  f"to {LORA_SCALE_LIMIT:g} (LORA_SCALE_LIMIT)")
        pairs[adapter_id] = float(scale)
    return tuple(sorted(pairs.items()))


def bad_lora(param: str, message: str) -> ApiError:
    return ApiError(400, f"invalid '{param}': {message}", param=param, code="invalid_lora")


def read_template_kwargs(body: dict) -> dict:
    kwargs = read_dict(body, "chat_template_kwargs")
    return dict(kwargs or {})


def kind_of(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), type(value).__name__)
