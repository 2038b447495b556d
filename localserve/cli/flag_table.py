"""Every option, declared once, by subject (docs/flags.rst has a table for each): argparse, the
environment lookup and the config file all follow from OPTIONS. A new flag goes into its
subject's table here and a row of that table in docs/flags.rst."""

from __future__ import annotations

from .. import settings as defaults
from ..engine.cpu_weights import cpu_weights_mode
from ..engine.rpc_config import rpc_workers, tensor_split
from .option_values import (Option, discovery_sources, duration, flag, host_name, listen_address_value, log_level,
                            non_negative_float, non_negative_int, pooling_mode, port_number, positive_int,
                            positive_seconds, size, speculative_mode)

MODELS: tuple[Option, ...] = (
    Option("model", str, None, "GGUF model file to serve (default: the demo model, SmolLM2-135M-Instruct)", "PATH"),
    Option("model-id", str, None, "model name reported by the API (default: the file's stem)", "NAME"),
    Option("mmproj", str, None, "multimodal projector (an mmproj GGUF) for --model: images and/or audio in "
           "prompts, as its encoders read "
           "(in --models-dir one is paired by its name; per model: mmproj in [models.NAME])", "PATH"),
    Option("lora", str, [], "LoRA adapter GGUF for --model, at SCALE (default 1) unless a request chooses "
           "its own; also served as the model BASE+ADAPTER (repeatable; in --models-dir one is found "
           "beside its base; per model: lora in [models.NAME])", "PATH[:SCALE]", repeat=True),
    Option("models-dir", str, None, "serve every *.gguf in DIR, each named by its file's stem, loaded on "
           "first use", "DIR"),
    Option("no-discover", flag, False, "serve no models found in other tools' stores (Ollama, the Hugging "
           "Face cache, LM Studio, llama.cpp's cache)", "BOOL"),
    Option("discover", discovery_sources, None, "which stores to look in: all (the default), none, names "
           "(ollama,hf,lmstudio,llamacpp) or exclusions (no-lmstudio)", "LIST"),
    Option("hf", str, [], "pull org/repo[:quant] from the Hugging Face Hub (or $HF_ENDPOINT) at start, "
           "then serve it (repeatable)", "REPO", repeat=True),
    Option("max-models", positive_int, None, "models loaded at once; the least recently used idle one is "
           "unloaded to make room (default: no limit)", "N"),
    Option("max-memory", size, None, "memory for all loaded models (weights + KV + compute buffers), "
           "e.g. 12G; idle models are unloaded to make room (default: no limit)", "SIZE"),
    Option("keep-alive", duration, None, f"how long an idle model stays loaded: 30s, 5m, 1h, 0 = unload after "
           f"each request, -1 = never (default: {defaults.DEFAULT_KEEP_ALIVE:g}s; never for --model alone)",
           "DURATION"),
    Option("preload", str, [], "load this model at start (repeatable)", "NAME", repeat=True),
    Option("evict-wait", non_negative_float, defaults.MODEL_EVICT_WAIT, "seconds a load (or /models/unload) "
           "waits for busy models to go idle; then 503 with Retry-After", "SECONDS"),
)

LISTENING: tuple[Option, ...] = (
    Option("host", host_name, defaults.DEFAULT_HOST, "address to listen on (a name, an IPv4 address, an IPv6 one in "
           "brackets or not)"),
    Option("port", port_number, defaults.DEFAULT_PORT, "TCP port to listen on (0: any free port, named in the "
           "'listening on' log line)"),
    Option("ollama-listen", listen_address_value, None, "a second address to serve on, for tools with Ollama's "
           "port built in, e.g. 127.0.0.1:11434 (the same server and API on both)", "HOST:PORT"),
    Option("no-webui", flag, False, "serve no chat and status page at / (then / is a 404 to "
           "browsers, and still 'Ollama is running' to Ollama's clients)", "BOOL"),
)

ENGINE: tuple[Option, ...] = (
    Option("ctx-size", positive_int, None,
           f"context size in tokens (default: the model's training context, at most {defaults.MAX_DEFAULT_CTX})", "N"),
    Option("slots", positive_int, defaults.DEFAULT_SLOTS, "sequences the runtime holds at once", "N"),
    Option("max-queue", positive_int, defaults.DEFAULT_MAX_QUEUE,
           "jobs allowed to wait for a slot; beyond it requests get 503", "N"),
    Option("batch-size", positive_int, defaults.DEFAULT_BATCH_SIZE, "prompt tokens per decode call", "N"),
    Option("threads", positive_int, None, "CPU threads for generation, always this many (default: all cores, "
           "fewer while other processes hold cores)", "N"),
    Option("no-thread-adaptation", flag, False, "keep to all cores even while other processes hold some "
           "(by default a model runs on fewer threads then)", "BOOL"),
    Option("n-gpu-layers", int, 0, "layers to offload to the GPU (-1 = all)", "N"),
    Option("cpu-weights", cpu_weights_mode, defaults.DEFAULT_CPU_WEIGHTS,
           "which CPU buffer types hold the weights: auto (no AMX where llama.cpp's AMX kernels may crash, "
           "CPU_REPACK kept), repack, plain or amx", "MODE"),
    Option("cache-ram", int, defaults.DEFAULT_CACHE_RAM_MB,
           "MB of RAM for prompt-cache sequences evicted from slots (0 = off)", "MB"),
    Option("no-prefix-sharing", flag, False, "let no sequence start from a prompt head another holds or is "
           "computing", "BOOL"),
    Option("kv-unified", flag, False, "one pool of KV cells for all slots: a shared prompt head is held "
           "once instead of copied (each step then attends over every slot's cells)", "BOOL"),
    Option("speculative", speculative_mode, defaults.DEFAULT_SPECULATIVE,
           "speculative decoding: off, ngram (drafts looked up in the prompt and output, and the request's "
           "prediction) or draft (drafts from --draft-model)", "MODE"),
    Option("draft-model", str, None, "small GGUF model with the same vocabulary that drafts tokens "
           "(--speculative draft, the default once this is given)", "PATH"),
    Option("draft-max", non_negative_int, defaults.DEFAULT_DRAFT_MAX,
           "most tokens drafted per sequence per step (0 = no speculative decoding)", "N"),
    Option("sample-time-limit", positive_seconds, defaults.DEFAULT_SAMPLE_TIME_LIMIT,
           "seconds one request may take to choose one token (a costly grammar); then it fails, "
           "the others go on", "SECONDS"),
    Option("pooling", pooling_mode, None, "how an embedding sums up its tokens: mean, last or cls "
           "(default: what the GGUF declares, else last)", "MODE"),
    Option("embeddings-only", flag, False, "serve /v1/embeddings (and /v1/rerank) only; chat requests get a "
           "400 (encoders and rerankers are so without it)", "BOOL"),
    Option("max-embedding-inputs", positive_int, defaults.DEFAULT_MAX_EMBEDDING_INPUTS,
           "inputs one /v1/embeddings call (documents one /v1/rerank call) may carry", "N"),
)

PROMPTS: tuple[Option, ...] = (
    Option("chat-template-file", str, None, "Jinja chat template to use instead of the model's", "PATH"),
    Option("tool-syntax", str, None, "tool-call syntax (default: recognised from the chat template)", "NAME"),
    Option("compact-max-tokens", positive_int, defaults.DEFAULT_COMPACT_MAX_TOKENS,
           "the longest summary a context compaction writes, in tokens (docs/compaction.rst)", "N"),
)

CONNECTIONS: tuple[Option, ...] = (
    Option("prefill-keepalive", non_negative_float, defaults.DEFAULT_PREFILL_KEEPALIVE,
           "seconds between ': prefill' SSE comments while a prompt is processed", "SECONDS"),
    Option("max-body-bytes", positive_int, defaults.DEFAULT_MAX_BODY_BYTES, "largest request body accepted", "BYTES"),
    Option("header-timeout", non_negative_float, defaults.DEFAULT_HEADER_TIMEOUT,
           "seconds a client has to send a request's headers", "SECONDS"),
    Option("idle-timeout", non_negative_float, defaults.DEFAULT_IDLE_TIMEOUT,
           "seconds a keep-alive connection may stay idle, and the most a request body may take",
           "SECONDS"),
    Option("max-connections", positive_int, defaults.DEFAULT_MAX_CONNECTIONS,
           "open connections allowed at once (a thread each); beyond it a 503", "N"),
    Option("max-inflight-bytes", positive_int, None,
           f"request-body bytes read or handled at once, all connections together; beyond it a 503 "
           f"(default: {defaults.INFLIGHT_BODIES} x --max-body-bytes)", "BYTES"),
    Option("drain-timeout", non_negative_float, defaults.DEFAULT_DRAIN_TIMEOUT,
           "seconds in-flight requests may finish after SIGTERM", "SECONDS"),
)

STORAGE_AND_ACCESS: tuple[Option, ...] = (
    Option("data-dir", str, None, "where stored responses and conversations live "
           "(default: $XDG_DATA_HOME/localserve, else ~/.local/share/localserve)", "DIR"),
    Option("no-store", flag, False, "keep no responses or conversations on disk", "BOOL"),
    Option("slot-save-path", str, None, "directory where POST /slots/ID?action=save writes a slot's KV cache "
           "and action=restore reads it back (without it the slot actions are a 501)", "DIR"),
    Option("api-key", str, [], "require this API key (repeatable); from Authorization: Bearer or x-api-key",
           "KEY", repeat=True),
    Option("api-key-file", str, None, "file with one API key per line", "PATH"),
    Option("shared-cache", flag, False, "with several API keys, let them share prompt caches (slots, shared "
           "prefixes, the RAM cache): one key's cached_tokens then tell of another's prompts (docs/security.rst)",
           "BOOL"),
    Option("allowed-host", str, [], "Host header to accept besides loopback names and IP addresses "
           "(repeatable; '.example.com' matches subdomains, '*' any)", "HOST", repeat=True),
    Option("cors-origin", str, [], "browser origin allowed by CORS (repeatable; '*' any); off by default",
           "ORIGIN", repeat=True),
)

SEVERAL_MACHINES: tuple[Option, ...] = (
    Option("rpc", rpc_workers, [], "RPC workers (`localserve worker`) that hold offloaded layers; "
           "comma-separated or repeated", "HOST:PORT", repeat=True),
    Option("rpc-wait", non_negative_float, defaults.DEFAULT_RPC_WAIT,
           "seconds to wait at start for unreachable RPC workers (/health says loading meanwhile)", "SECONDS"),
    Option("tensor-split", tensor_split, None, "share of offloaded layers per device, e.g. 3,1 "
           "(RPC workers first, then local GPUs; default: by free memory)", "LIST"),
)

THE_COMMAND: tuple[Option, ...] = (
    Option("log-level", log_level, "info", "debug, info, warning or error", "LEVEL"),
)

# (heading, options): the --help groups, in the order docs/flags.rst gives them
SUBJECTS: tuple[tuple[str, tuple[Option, ...]], ...] = (
    ("Models", MODELS),
    ("Listening", LISTENING),
    ("The engine", ENGINE),
    ("Prompts", PROMPTS),
    ("Connections and limits", CONNECTIONS),
    ("Storage and access", STORAGE_AND_ACCESS),
    ("Several machines", SEVERAL_MACHINES),
    ("The command itself", THE_COMMAND),
)

OPTIONS: tuple[Option, ...] = tuple(option for _, options in SUBJECTS for option in options)
