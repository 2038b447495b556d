"""What a user can set, with its default, and the limits several parts share.

The CLI (cli/flags.py) turns flags, LOCALSERVE_* variables and the config file into one
Settings object; nothing else in the package reads the environment for configuration. A
constant only one part reads lives beside that part (the n-gram sizes in runtime/, a
request's limits in dialects/limits.py and grammar/limits.py, RPC probe timings in engine/rpc.py).
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
DEFAULT_SLOTS = 4
DEFAULT_MAX_QUEUE = 64
DEFAULT_BATCH_SIZE = 512           # tokens per llama_decode call during prefill
DEFAULT_MAX_EMBEDDING_INPUTS = 2048    # inputs one /v1/embeddings call may carry
DEFAULT_CACHE_RAM_MB = 1024        # RAM for sequences evicted from slots (0 = off)
DEFAULT_CPU_WEIGHTS = "auto"       # --cpu-weights: auto | repack | plain | amx (cpu_weights.py)
DEFAULT_SAMPLE_TIME_LIMIT = 2.0    # seconds one job may take to choose one token (grammar cost); then it fails
DEFAULT_COMPACT_MAX_TOKENS = 1024  # --compact-max-tokens: the longest summary a compaction writes
# Speculative decoding (runtime/speculative.py): drafts verified in the decode batch
DEFAULT_SPECULATIVE = "ngram"      # --speculative: off | ngram | draft
SPECULATIVE_MODES = ("off", "ngram", "draft")
DEFAULT_DRAFT_MAX = 32             # --draft-max: most tokens drafted per sequence per step (measured: docs/performance.rst)
DRAFT_STEP_SHARE = 2               # a step verifies at most this many times --draft-max drafted tokens, all sequences,
MAX_STEP_DRAFTS = 32               # and no more than this many (--draft-max itself, where that is more)
DISCONNECT_POLL_INTERVAL = 0.1     # seconds between socket peeks while a non-streaming job runs
RETRY_AFTER_SECONDS = 1            # Retry-After on 503 when the queue is full

# RPC workers (rpc.py, worker.py): llama.cpp's RPC backend
DEFAULT_RPC_PORT = 50052           # llama.cpp's rpc-server uses the same
DEFAULT_RPC_WAIT = 30.0            # --rpc-wait: seconds a front waits at start for its workers

# Several models (models/): the catalogue, loading on demand, unloading when idle
DEFAULT_KEEP_ALIVE = 300.0         # --keep-alive: seconds an idle model stays loaded (models-dir / [models])
MODEL_EVICT_WAIT = 30.0            # --evict-wait: a load waits this long for a busy model to go idle, then 503


def user_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "localserve"


def step_drafts(draft_max: int) -> int:
    """The most drafted tokens one decode step verifies, every sequence's together
    (runtime/speculative.py): the engine reserves a logits row for each, and one per sequence."""
    return min(draft_max * DRAFT_STEP_SHARE, max(draft_max, MAX_STEP_DRAFTS))


def default_inflight_bytes(max_body_bytes: int) -> int:
    """--max-inflight-bytes when not given: room for INFLIGHT_BODIES bodies of the largest size."""
    return INFLIGHT_BODIES * max_body_bytes


@dataclass
class Settings:
    model: str | None = None
    model_id: str | None = None
    mmproj: str | None = None                      # the model's vision projector (an mmproj GGUF)
    lora: list[str] = field(default_factory=list)  # --model's LoRA adapters: PATH[:SCALE] (models/adapter_files.py)
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    ollama_listen: str | None = None               # a second address ("127.0.0.1:11434"), the same app
    ctx_size: int | None = None
    threads: int | None = None                     # given: pinned; else all cores, fewer under load
    no_thread_adaptation: bool = False             # the thread count never adapts to load (engine/thread_policy.py)
    n_gpu_layers: int = 0
    cpu_weights: str = DEFAULT_CPU_WEIGHTS
    slots: int = DEFAULT_SLOTS
    max_queue: int = DEFAULT_MAX_QUEUE
    batch_size: int = DEFAULT_BATCH_SIZE
    cache_ram: int = DEFAULT_CACHE_RAM_MB
    no_prefix_sharing: bool = False                # each sequence computes its own prompt (runtime/placement.py)
    kv_unified: bool = False                       # one pool of KV cells: a shared prefix's cells owned by all
    prefill_keepalive: float = DEFAULT_PREFILL_KEEPALIVE
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_inflight_bytes: int | None = None          # None: the default for max_body_bytes, set at once
    sample_time_limit: float = DEFAULT_SAMPLE_TIME_LIMIT
    compact_max_tokens: int = DEFAULT_COMPACT_MAX_TOKENS
    pooling: str | None = None                     # mean | last | cls; None: the GGUF's, else last
    embeddings_only: bool = False                  # the model answers embeddings (rerank), never chat
    max_embedding_inputs: int = DEFAULT_MAX_EMBEDDING_INPUTS
    chat_template_file: str | None = None
    tool_syntax: str | None = None
    data_dir: str | None = None
    no_store: bool = False
    slot_save_path: str | None = None              # where /slots/{id}?action=save|restore keep their files
    no_webui: bool = False
    api_key: list[str] = field(default_factory=list)
    api_key_file: str | None = None
    shared_cache: bool = False                     # several keys share prompt caches (wire/access.py: scopes)
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
    no_discover: bool = False                      # find no models in other tools' stores (models/discovery/)
    discover: tuple | None = None                  # the stores to look in; None: all of them
    hf: list[str] = field(default_factory=list)    # --hf org/repo[:quant]: pulled from the Hub at start
    models: dict = field(default_factory=dict)     # [models.NAME] tables: {NAME: {"path", "aliases", attr: value}}
    max_models: int | None = None                  # models loaded at once (None: no limit)
    max_memory: int | None = None                  # bytes for weights + KV + compute of all loaded models
    keep_alive: float | None = None                # seconds; None: DEFAULT_KEEP_ALIVE, or never for --model alone
    preload: list[str] = field(default_factory=list)
    evict_wait: float = MODEL_EVICT_WAIT           # seconds a load waits for a busy model to go idle

    def __post_init__(self) -> None:
        if self.max_inflight_bytes is None:
            self.max_inflight_bytes = default_inflight_bytes(self.max_body_bytes)

    def resolved_threads(self) -> int:
        return self.threads or max(1, os.cpu_count() or 1)
