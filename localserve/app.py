"""The application: loads the model, wires routes to handlers, runs until a signal.

Order at start: bind the socket first (so /health can say "loading"), then load
the model, choose the chat template and tool syntax, start the runtime thread,
and mark the app ready. SIGTERM / SIGINT: stop accepting, drain, exit 0.
"""

from __future__ import annotations

import logging
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

from .dialects import endpoints
from .ops import memory
from .ops import metrics
from .engine import rpc
from .ops.demo import DemoUnavailable, demo_model_path
from .engine.cpu_weights import USERS_CHOICE, describe as describe_buffers
from .engine.engine import Engine
from .engine.facade import EngineFacade
from .engine.model_load import ModelLoadError, check_model_file, quiet_llama_logs
from .errors import ApiError
from .ops.fatal import at_engine_failure
from .runtime.pending_sample import abandoned_running
from .wire.http import Limits
from .dialects.openai import chat, completions, embeddings
from .dialects import rerank
from .engine.embed import Embedder, spec_for
from .engine.embedding_spec import EmbeddingSpec
from .dialects.responses import conversations, responses
from .dialects.responses.runs import ResponseRuns
from .dialects.anthropic import messages as anthropic
from .wire.routes import Router
from .parsing.reasoning import REASONING_FORMATS
from .runtime.runtime import Runtime
from .wire.access import AccessPolicy, load_api_keys
from .ops import systemd
from .wire.server import HTTPServer
from .settings import MAX_DEFAULT_CTX, Settings, user_data_dir
from .dialects.signing import load_signing_key
from .store.store import Store
from .prompt.build import ChatModel
from .prompt.templates import TemplateError, choose_template
from .parsing.tool_families import TOOL_SYNTAXES, detect_tool_syntax

log = logging.getLogger("localserve")

EXIT_LOAD_FAILED = 1
EXIT_USAGE = 2


class StartupError(Exception):
    def __init__(self, message: str, status: int = EXIT_LOAD_FAILED):
        super().__init__(message)
        self.status = status


PUBLIC_PATHS = ("/health", "/v1/health")     # answered without an API key (probes)


class App:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.ready = threading.Event()
        self.engine: Engine | None = None
        self.runtime: Runtime | None = None
        self.store: Store | None = None
        self.response_runs = ResponseRuns()
        self.model: ChatModel | None = None   # what connection threads see of the model, set in load()
        self.signing_key = b""          # HMAC key for thinking-block signatures (signing.py), set in load()
        self.model_id = settings.model_id or ""
        self.embedding_spec: EmbeddingSpec | None = None    # set in load()
        self.embeddings_only = settings.embeddings_only
        self.created = int(time.time())
        self.metrics = metrics.ServerMetrics(self)
        try:
            keys = load_api_keys(settings.api_key, settings.api_key_file)
        except OSError as exc:
            raise StartupError(f"cannot read --api-key-file {settings.api_key_file}: {exc.strerror}", EXIT_USAGE) from None
        self.access = AccessPolicy(keys, settings.allowed_host, settings.cors_origin)
        self.router = Router(self)
        self._add_routes()

    def _add_routes(self) -> None:
        add = self.router.add
        add("/health", "GET", endpoints.health)
        add("/v1/health", "GET", endpoints.health)
        add("/v1/models", "GET", endpoints.list_models)
        add("/v1/models/{model}", "GET", endpoints.get_model)
        add("/v1/chat/completions", "POST", chat.handle)
        add("/v1/completions", "POST", completions.handle)
        add("/v1/embeddings", "POST", embeddings.handle)
        add("/v1/rerank", "POST", rerank.handle)
        add("/rerank", "POST", rerank.handle)
        add("/tokenize", "POST", endpoints.tokenize)
        add("/detokenize", "POST", endpoints.detokenize)
        add("/apply-template", "POST", endpoints.apply_template)
        add("/slots", "GET", endpoints.slots)
        add("/metrics", "GET", metrics.handle)
        add("/v1/responses", "POST", responses.create)
        add("/v1/responses/{response_id}", "GET", responses.retrieve)
        add("/v1/responses/{response_id}", "DELETE", responses.delete)
        add("/v1/responses/{response_id}/cancel", "POST", responses.cancel)
        add("/v1/responses/{response_id}/input_items", "GET", responses.input_items)
        add("/v1/conversations", "POST", conversations.create)
        add("/v1/conversations/{conversation_id}", "GET", conversations.retrieve)
        add("/v1/conversations/{conversation_id}", "POST", conversations.update)
        add("/v1/conversations/{conversation_id}", "DELETE", conversations.delete)
        add("/v1/conversations/{conversation_id}/items", "POST", conversations.add_items)
        add("/v1/conversations/{conversation_id}/items", "GET", conversations.list_items)
        add("/v1/conversations/{conversation_id}/items/{item_id}", "GET", conversations.get_item)
        add("/v1/conversations/{conversation_id}/items/{item_id}", "DELETE", conversations.delete_item)
        anthropic.register(self.router)

    # ---- hooks the router calls ---------------------------------------------------

    def check_access(self, exchange) -> None:
        """Host check, CORS headers and the API key, before any handler runs."""
        request = exchange.request
        if not self.access.host_ok(request.host):
            raise ApiError(403, f"requests for host '{request.host}' are refused: this server answers "
                                f"only loopback names, IP addresses and --allowed-host names", code="host_not_allowed")
        exchange.writer.extra_headers += self.access.cors_headers(request.header("origin"))
        if request.method == "OPTIONS" or exchange.request.path in PUBLIC_PATHS or not self.access.requires_key:
            return
        if not self.access.key_ok(request.header("authorization"), request.header("x-api-key")):
            raise ApiError(401, "invalid or missing API key: send it as 'Authorization: Bearer KEY' or 'x-api-key'",
                           # OpenAI's clients read this type for a bad key (Anthropic's shape names its own)
                           type="invalid_request_error",
                           code="invalid_api_key", headers=[("WWW-Authenticate", "Bearer")])

    def preflight_headers(self, exchange, allow: str) -> list[tuple[str, str]]:
        request = exchange.request
        return self.access.preflight_headers(request.header("origin"), allow,
                                             request.header("access-control-request-headers"))

    def require_ready(self) -> None:
        if not self.ready.is_set():
            raise ApiError(503, "the model is still loading", code="model_loading",
                           headers=[("Retry-After", "1")])

    # ---- start-up -----------------------------------------------------------------

    def load(self) -> None:
        s = self.settings
        path = resolve_model_path(s)
        if s.rpc:   # llama.cpp places layers on the devices registered before the model loads
            try:
                check_model_file(path)
                rpc.attach_workers(s.rpc, s.rpc_wait)     # /health says loading while it waits
            except ModelLoadError as exc:
                raise StartupError(str(exc)) from None
            except rpc.RpcError as exc:
                raise StartupError(str(exc), exc.status) from None
        try:
            self.engine = Engine(path, n_ctx=s.ctx_size, n_seq=s.slots, n_batch=s.batch_size,
                                 threads=s.resolved_threads(),
                                 n_gpu_layers=rpc.layers_to_offload(s.n_gpu_layers, s.rpc),
                                 tensor_split=rpc.split_proportions(s.tensor_split) if s.tensor_split else None,
                                 max_default_ctx=MAX_DEFAULT_CTX, cpu_weights_mode=s.cpu_weights)
        except ModelLoadError as exc:
            raise StartupError(str(exc)) from None
        log_weights(self.engine)
        info = self.engine.info
        self.model_id = s.model_id or Path(path).stem
        try:
            template = choose_template(gguf_template=info.chat_template, architecture=info.architecture,
                                       bos_token=info.bos_token, eos_token=info.eos_token,
                                       override_path=s.chat_template_file)
        except TemplateError as exc:
            raise StartupError(f"chat template: {exc}", EXIT_USAGE) from None
        if s.tool_syntax and s.tool_syntax not in TOOL_SYNTAXES:
            raise StartupError(f"unknown --tool-syntax '{s.tool_syntax}'; choose from "
                               f"{', '.join(sorted(TOOL_SYNTAXES))}", EXIT_USAGE)
        # <think> splitting for models whose vocabulary has it as one token
        thinks = len(self.engine.tokenize("<think>", add_special=False)) == 1
        self.model = ChatModel(EngineFacade(self.engine), template,
                               tool_syntax=s.tool_syntax or detect_tool_syntax(template.text),
                               default_reasoning=REASONING_FORMATS["think"] if thinks else None)
        self.embedding_spec = spec_for(self.engine, s.pooling, s.batch_size)
        # an encoder (no KV cache, attention both ways) or a reranker cannot chat
        self.embeddings_only = s.embeddings_only or self.embedding_spec.encoder or self.embedding_spec.ranks
        spec = self.embedding_spec
        log.info("embeddings: pooling %s, %d %s per input, inputs up to %d tokens%s", spec.pooling, spec.n_out,
                 "scores" if spec.ranks else "dimensions", spec.max_tokens,
                 "; chat off (an encoder, a reranker or --embeddings-only)" if self.embeddings_only else "")
        self.store = open_store(s)
        at_engine_failure(self._close_stored_state)
        rpc.watch_aborts()          # an abort inside llama.cpp now exits with status 3 and a reason
        self.signing_key = load_signing_key(None if s.no_store else Path(s.data_dir or user_data_dir()))
        self.runtime = Runtime(self.engine, slots=s.slots, max_queue=s.max_queue,
                               cache_bytes=max(0, s.cache_ram) * 1024 * 1024, metrics=self.metrics,
                               sample_time_limit=s.sample_time_limit,
                               make_embedder=lambda: Embedder(self.engine, self.embedding_spec))
        self.runtime.start()

    def _close_stored_state(self) -> None:
        """The process is about to exit for good: runs still going are stored as failed, the store closed."""
        self.response_runs.close(timeout=0.2)
        if self.store is not None:
            self.store.close()

    def close(self) -> None:
        if self.runtime is not None:
            self.runtime.stop()
        self.response_runs.close()      # runs still going fail, and are stored so, before the store closes
        if self.store is not None:
            self.store.close()
        if self.engine is not None:
            still = abandoned_running()
            if still:   # their grammars point into the model: freeing it under them could crash the exit
                log.info("leaving the model loaded at exit: %d grammar sample(s) still inside llama.cpp", still)
            else:
                self.engine.close()


def open_store(settings: Settings) -> Store | None:
    if settings.no_store:
        return None
    data_dir = Path(settings.data_dir) if settings.data_dir else user_data_dir()
    try:
        store = Store(str(data_dir / "localserve.db"))
    except (OSError, sqlite3.Error) as exc:
        raise StartupError(f"cannot open the store in {data_dir}: {exc}", EXIT_USAGE) from None
    if store.recovered:
        log.warning("marked %d response(s) failed: they were running when the server last stopped",
                    store.recovered)
    return store


def resolve_model_path(settings: Settings) -> str:
    if settings.model:
        return settings.model
    try:
        log.info("no --model given: serving the demo model (Gemma 3 270M Q4_K_M)")
        return demo_model_path()
    except DemoUnavailable as exc:
        raise StartupError(str(exc), EXIT_USAGE) from None


def serve(settings: Settings) -> int:
    memory.configure_malloc()
    quiet_llama_logs(logging.DEBUG if settings.log_level == "debug" else logging.WARNING)
    try:
        app = App(settings)
    except StartupError as exc:
        print(f"localserve: {exc}", file=sys.stderr)
        return exc.status
    try:
        listener = systemd.activated_listener() or HTTPServer.listen(settings.host, settings.port)
    except OSError as exc:
        print(f"localserve: cannot listen on {settings.host}:{settings.port}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    limits = Limits(max_body_bytes=settings.max_body_bytes)
    server = HTTPServer(app.router.dispatch, errors_for=app.router.errors_for, limits=limits,
                        header_timeout=settings.header_timeout,
                        max_connections=settings.max_connections, max_inflight_bytes=settings.max_inflight_bytes,
                        idle_timeout=settings.idle_timeout, listener=listener)
    app.metrics.watch_server(server)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server.start()
    try:
        app.load()
    except StartupError as exc:
        print(f"localserve: {exc}", file=sys.stderr)
        server.shutdown(0)
        return exc.status
    app.ready.set()
    host, port = server.address
    engine = app.engine
    log.info("serving %s (%s, %s params) as '%s' on http://%s:%d — n_ctx %d per slot, %d slot(s), %d threads, "
             "chat template %s, tool syntax %s, %s, weights in %s", engine.info.path, engine.info.architecture,
             _human(engine.info.n_params), app.model_id, host, port, engine.n_ctx_seq, settings.slots,
             settings.resolved_threads(), app.model.template.source, app.model.tool_syntax, offload_summary(engine),
             describe_buffers(engine.weight_buffers))
    systemd.notify(f"READY=1\nSTATUS=serving {app.model_id} on {host}:{port}")
    watchdog = systemd.watchdog_interval()
    while not stop.wait(watchdog or 1.0):
        if watchdog:
            systemd.notify("WATCHDOG=1")
    systemd.notify("STOPPING=1")
    log.info("shutting down: draining in-flight requests (up to %.0fs)", settings.drain_timeout)
    drain_started = time.monotonic()
    server.shutdown(settings.drain_timeout)
    left = app.response_runs.drain(max(0.0, settings.drain_timeout - (time.monotonic() - drain_started)))
    if left:
        log.warning("%d background response(s) still running at the end of the drain: stored as failed", left)
    app.close()
    log.info("stopped")
    return 0


def log_weights(engine: Engine) -> None:
    plan = engine.weight_plan
    say = log.warning if plan.why == USERS_CHOICE else log.info
    say("weights: %s — --cpu-weights %s: %s (%s); warm-up decode %.0f ms", describe_buffers(engine.weight_buffers),
        plan.mode, plan.layout, plan.why, engine.warmup_seconds * 1000)


def offload_summary(engine: Engine) -> str:
    if engine.gpu_layers:
        devices = sorted({d for d in engine.layer_devices.values() if d != "CPU"})
        return f"{engine.gpu_layers}/{len(engine.layer_devices)} layers offloaded to {', '.join(devices)}"
    return "CPU only" if engine.gpu_available else "CPU only (this llama-cpp-python build has no GPU backend)"


def _human(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def check(settings: Settings) -> int:
    """--check: validate the configuration and the model, print the resolved settings."""
    quiet_llama_logs(logging.WARNING)
    try:
        app = App(settings)
        app.load()
    except StartupError as exc:
        print(f"localserve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for name, value in sorted(vars(settings).items()):
        if name in ("api_key",) and value:
            value = [f"<{len(value)} key(s)>"]
        print(f"{name.replace('_', '-')} = {value!r}")
    info = app.engine.info
    print(f"# model {info.path}: {info.architecture}, {info.n_params} params, n_ctx {app.engine.n_ctx_seq}, "
          f"chat template {app.model.template.source}, tool syntax {app.model.tool_syntax}")
    app.close()
    return 0
