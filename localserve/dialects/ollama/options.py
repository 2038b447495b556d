"""The fields Ollama's generating requests share: `options`, `think`, `format`, `stream`.

`options` holds Ollama's sampling and runner settings. The sampling ones map onto the
sampler (llama.cpp's own names, mostly the same), with Ollama's defaults; `num_predict` is the
answer's token limit (-1 and -2: no limit); `stop` the stop strings; llama.cpp's `logit_bias`
and `grammar`, which every dialect accepts, are options here. `num_ctx` is the context the
model must be loaded with (read where the model is chosen: dialects/loading.py); `num_keep` the
prompt tokens a context shift keeps (truncation.py; -1: the whole prompt). Runner
settings this server fixes per model at load (num_batch, num_gpu, num_thread, ...) and sampler settings llama.cpp dropped
(mirostat, tfs_z, penalize_newline) are accepted and ignored, logged at debug level, as are
names Ollama does not know: Ollama's own clients send whatever their user set.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ...errors import ApiError
from ...generation import SamplingParams
from ..fields import (invalid, kind_of, read_bool, read_dict, read_int, read_lora, read_number, read_sampling,
                      read_stop)

log = logging.getLogger("localserve.dialects")

# Ollama's sampling options, read as every dialect reads them; with llama.cpp's extensions
# (logit_bias as a token-id map, a GBNF grammar) that every dialect takes, here among the options
SAMPLING_OPTIONS = ("temperature", "top_k", "top_p", "min_p", "seed", "presence_penalty", "frequency_penalty",
                    "repeat_penalty", "repeat_last_n", "logit_bias", "grammar")
READ_ELSEWHERE = frozenset({"num_ctx"})     # the context the model needs: dialects/loading.py reads it
IGNORED_OPTIONS = frozenset({"num_batch", "num_gpu", "main_gpu", "num_thread", "numa", "low_vram",
                             "f16_kv", "logits_all", "vocab_only", "use_mmap", "use_mlock", "embedding_only",
                             "tfs_z", "mirostat", "mirostat_tau", "mirostat_eta", "penalize_newline",
                             "draft_num_predict"})
THINK_LEVELS = ("low", "medium", "high")
OLLAMA_NUM_KEEP = 4     # api/types.go DefaultOptions: "a minimal num_keep to avoid issues on context shifts"
# Ollama's own defaults (api/types.go DefaultOptions, docs/modelfile): what /api/* samples with
# when a request leaves an option out; llama-server's differ in top_p (0.95) and min_p (0.05)
OLLAMA_SAMPLING = SamplingParams(temperature=0.8, top_k=40, top_p=0.9, min_p=0.0, typical_p=1.0,
                                 repeat_penalty=1.0, repeat_last_n=64, presence_penalty=0.0,
                                 frequency_penalty=0.0)


@dataclass
class Options:
    sampling: SamplingParams
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    num_keep: int = OLLAMA_NUM_KEEP


def read_options(body: dict, n_vocab: int, label: str) -> Options:
    options = read_dict(body, "options") or {}
    try:
        sampling = read_sampling({name: options[name] for name in SAMPLING_OPTIONS if name in options}, n_vocab,
                                 defaults=OLLAMA_SAMPLING)
        sampling.typical_p = read_number(options, "typical_p", low=0, high=1, default=OLLAMA_SAMPLING.typical_p)
        predict = read_int(options, "num_predict", low=-2)
        stop = read_stop(options)
        num_keep = read_int(options, "num_keep", low=-1, default=OLLAMA_NUM_KEEP)
    except ApiError as exc:        # a 400 naming the option: name it as options.NAME
        raise renamed(exc, f"options.{exc.param}") from None
    sampling.lora = read_lora(body)     # beside the options, as on every other route
    left = set(options) - set(SAMPLING_OPTIONS) - {"typical_p", "num_predict", "stop", "num_keep"} - READ_ELSEWHERE
    if left & IGNORED_OPTIONS:
        log.debug("%s: options %s ignored (fixed at load, or not a llama.cpp sampler)", label,
                  ", ".join(sorted(left & IGNORED_OPTIONS)))
    if left - IGNORED_OPTIONS:
        log.debug("%s: unknown options %s ignored", label, ", ".join(sorted(left - IGNORED_OPTIONS)))
    return Options(sampling, None if predict is None or predict < 0 else max(predict, 1), stop, num_keep)


def renamed(exc: ApiError, name: str) -> ApiError:
    """A field error from the shared readers, its param named as Ollama's clients set it."""
    param = exc.param
    if param is None:
        return exc
    exc.param = name
    exc.message = exc.message.replace(f"'{param}'", f"'{name}'", 1)
    if name not in exc.message:
        exc.message = f"invalid '{name}': {exc.message}"
    exc.args = (exc.message,)
    return exc


def read_stream(body: dict) -> bool:
    return read_bool(body, "stream", default=True)     # Ollama streams unless told not to


def read_think(body: dict) -> tuple[bool | None, str | None]:
    """`think`: true/false, or a level ("low", "medium", "high"); (None, None) when absent."""
    value = body.get("think")
    if value is None:
        return None, None
    if isinstance(value, bool):
        return value, None
    if isinstance(value, str) and value in THINK_LEVELS:
        return True, value
    raise invalid("think", f"expected true, false or one of {', '.join(THINK_LEVELS)}, got {kind_of(value)}"
                  + (f" '{value}'" if isinstance(value, str) else ""))


def template_kwargs(think: bool | None, level: str | None) -> dict[str, Any]:
    """What the chat template hears of `think` (Qwen3 and DeepSeek read enable_thinking, gpt-oss
    reasoning_effort)."""
    kwargs: dict[str, Any] = {}
    if think is not None:
        kwargs["enable_thinking"] = think
        kwargs["thinking"] = think
    if level is not None:
        kwargs["reasoning_effort"] = level
    return kwargs


def read_format(body: dict) -> tuple[bool, dict | None]:
    """`format`: "json" (a JSON object) or a JSON Schema; (json_object, schema)."""
    value = body.get("format")
    if value is None or value == "":
        return False, None
    if value == "json":
        return True, None
    if isinstance(value, dict):
        return False, value
    raise invalid("format", f'expected "json" or a JSON Schema object, got {kind_of(value)}')
