"""The application: reads the model catalogue, wires routes to handlers, runs until a signal.

Order at start: bind the socket first (so /health can say "loading"), then read the
catalogue (models/catalogue.py) and load what must be loaded at start (the one --model,
--preload's), open the store, and mark the app ready. Other models load on first use
(models/manager.py). SIGTERM / SIGINT / SIGHUP: stop accepting, drain, exit 0 (ops/signals.py).
"""

from __future__ import annotations

import logging
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from .dialects import infill, metrics_endpoint, models_and_health, tokens_and_templates
from .ops import memory
from .ops import metrics
from .engine import rpc
from .ops.demo import DEMO_DESCRIPTION, DemoUnavailable, demo_model_path
from .engine.build_info import read_build_info
from .engine.model_load import ModelLoadError, check_model_file, quiet_llama_logs
from .errors import ApiError
from .ops.fatal import at_engine_failure
from .wire.http import Limits
from .dialects.openai import routes as openai_routes
from .dialects.rerank import routes as rerank_routes
from .dialects.responses import routes as responses_routes
from .dialects.responses.runs import ResponseRuns
from .dialects.anthropic import routes as anthropic_routes
from .dialects.llamacpp import routes as llamacpp_routes
from .dialects.ollama import routes as ollama_routes
from .dialects.services import Services
from .webui import page as webui
from .wire.routes import Router
from .wire.access import AccessPolicy, is_body_type, load_api_keys, sent_by_browser
from .ops import systemd
from .ops.signals import StopSignals
from .wire.server import HTTPServer, http_url, listen_address
from .settings import Settings, user_data_dir
from .dialects.signing import load_signing_key
from .store.store import Store
from .models.catalogue import CatalogueError, read_catalogue
from .models.discovery import sources as discovery
from .models.hub import pull as hub_pull
from .models.hub.errors import HubError
from .engine.cpu_weights import describe as describe_buffers
from .models.facts import projector_encoders
from .models.loaded import LoadFailed, human_count, offload_summary
from .models.manager import ModelManager

MAIN_LOOP_WAKE = 1.0    # seconds of one turn of the main loop's wait (a stop signal ends it at once)

log = logging.getLogger("localserve")

EXIT_LOAD_FAILED = 1
EXIT_USAGE = 2


class StartupError(Exception):
    def __init__(self, message: str, status: int = EXIT_LOAD_FAILED):
        super().__init__(message)
        self.status = status


# answered without an API key (probes: Ollama's clients ask GET / if it runs); the page adds its files
PUBLIC_PATHS = ("/health", "/v1/health", "/")


class App:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.ready = threading.Event()
        self.models: ModelManager | None = None    # the catalogue and what is loaded, set in load()
        self.store: Store | None = None
        self.response_runs = ResponseRuns()
        self.signing_key = b""          # HMAC key for thinking-block signatures (signing.py), set in load()
        self._forget_cleanup: Callable[[], None] = lambda: None    # takes load()'s exit clean-up off again
        self.created = int(time.time())
        self.metrics = metrics.ServerMetrics()
        self.services = Services(settings, self.metrics, self.ready, self.created)   # what handlers are given
        try:
            keys = load_api_keys(settings.api_key, settings.api_key_file)
        except OSError as exc:
            raise StartupError(f"cannot read --api-key-file {settings.api_key_file}: {exc.strerror}", EXIT_USAGE) from None
        self.access = AccessPolicy(keys, settings.allowed_host, settings.cors_origin, settings.shared_cache)
        self.public_paths = PUBLIC_PATHS
        self.router = Router(self)
        self._add_routes()
        self.metrics.register(route_pattern=self.router.pattern_of, ready=self.ready.is_set)

    def _add_routes(self) -> None:
        """The route table: each dialect adds its own routes, bound to what its handlers use."""
        services, router = self.services, self.router
        models_and_health.add_routes(router, services)
        openai_routes.add_routes(router, services)
        infill.add_routes(router, services)
        llamacpp_routes.add_routes(router, services)
        rerank_routes.add_routes(router, services)
        tokens_and_templates.add_routes(router, services)
        metrics_endpoint.add_routes(router, services)
        responses_routes.add_routes(router, services, self.response_runs)
        anthropic_routes.add_routes(router, services)
        # before the page's own routes: GET / answers Ollama's clients, and gives browsers the page
        ollama_routes.add_routes(router, services, page=None if self.settings.no_webui else webui.page_handler("/"))
        if not self.settings.no_webui:
            self.public_paths += webui.register(router)

    # ---- hooks the router calls ---------------------------------------------------

    def check_access(self, exchange) -> None:
        """Host check, CORS headers, the cross-site check, the API key and a browser's JSON body's
        type, before any handler runs."""
        request = exchange.request
        if not self.access.host_ok(request.host):
            raise ApiError(403, f"requests for host '{request.host}' are refused: this server answers "
                                f"only loopback names, IP addresses and --allowed-host names", code="host_not_allowed")
        origin = request.header("origin")
        exchange.writer.extra_headers += self.access.cors_headers(origin)
        if is_preflight(request):
            return                      # a preflight acts on nothing; its answer is the allowlist's
        public = request.path in self.public_paths
        if request.method != "OPTIONS" and not (public and request.method in ("GET", "HEAD")):   # it can act
            refusal = self.access.cross_site_refusal(origin, request.header("sec-fetch-site"), request.host)
            if refusal:
                raise ApiError(403, refusal, code="cross_site_request")
        scope = self.access.key_scope(request.header("authorization"), request.header("x-api-key"))
        if scope is not None:
            exchange.scope = scope      # whose prompts and stored responses it may see (access.py)
        elif not public and self.access.requires_key:
            raise ApiError(401, "invalid or missing API key: send it as 'Authorization: Bearer KEY' or 'x-api-key'",
                           # OpenAI's clients read this type for a bad key (Anthropic's shape names its own)
                           type="invalid_request_error",
                           code="invalid_api_key", headers=[("WWW-Authenticate", "Bearer")])
        body_type = self.router.body_type_of(request.path)
        if request.method not in ("GET", "HEAD") and exchange.has_body() and \
                sent_by_browser(request.header("origin"), request.header("sec-fetch-site")) and \
                not is_body_type(request.header("content-type"), body_type):
            # a browser's body must say it is JSON (which no simple request can), or the form its
            # route takes (the cross-site check above has refused other sites' pages); other
            # clients' (LiteLLM sends none, curl -d a form type) are read as JSON whatever they say
            raise ApiError(415, f"the request body must be sent as Content-Type: {body_type}, not "
                                f"'{(request.header('content-type') or 'none')[:100]}'", code="unsupported_media_type")

    def preflight_headers(self, exchange, allow: str) -> list[tuple[str, str]]:
        request = exchange.request
        return self.access.preflight_headers(request.header("origin"), allow,
                                             request.header("access-control-request-headers"))

    # ---- start-up -----------------------------------------------------------------

    def load(self, signals: StopSignals | None = None) -> None:
        """Read the catalogue; load --preload's models and the one --model (or the demo model).
        `signals`: the stop signals serve() caught (a stop ends a wait for RPC workers)."""
        s = self.settings
        try:
            pulled = [entry for name in s.hf for entry in pull_at_start(name)]
            found = [] if s.no_discover else discovery.discover(s.discover if s.discover is not None else discovery.ALL)
            catalogue = read_catalogue(s, lambda: resolve_model_path(s), found, pulled)
        except CatalogueError as exc:
            raise StartupError(str(exc), EXIT_USAGE) from None
        unknown = [name for name in s.preload if catalogue.find(name) is None]
        if unknown:
            raise StartupError(f"--preload {unknown[0]}: no such model; the catalogue has "
                               f"{', '.join(catalogue.names())}", EXIT_USAGE)
        if s.rpc:   # llama.cpp places layers on the devices registered before the model loads
            try:
                for entry in catalogue:
                    check_model_file(entry.path)
                rpc.attach_workers(s.rpc, s.rpc_wait, signals)     # /health says loading while it waits
            except ModelLoadError as exc:
                raise StartupError(str(exc)) from None
            except rpc.RpcError as exc:
                raise StartupError(str(exc), exc.status) from None
        self.models = ModelManager(s, catalogue, self.metrics)
        self.metrics.register(loaded_models=self.models.loaded_models, all_models=self.models.all_models)
        at_start = [catalogue.find(name).name for name in s.preload]
        if catalogue.any_name:
            at_start.insert(0, next(iter(catalogue)).name)
        for name in dict.fromkeys(at_start):
            try:
                self.models.load_at_start(name)
            except LoadFailed as exc:
                self.models.close()
                raise StartupError(str(exc), EXIT_USAGE if exc.usage else EXIT_LOAD_FAILED) from None
        self.store = open_store(s)
        self._forget_cleanup = at_engine_failure(self._close_stored_state)
        rpc.watch_aborts()          # an abort inside llama.cpp now exits with status 3 and a reason
        self.signing_key = load_signing_key(None if s.no_store else Path(s.data_dir or user_data_dir()))
        self.services.loaded(self.models, self.store, self.signing_key)
        self.models.start()

    def _close_stored_state(self) -> None:
        """The process is about to exit for good: runs still going are stored as failed, the store closed."""
        self.response_runs.close(timeout=0.2)
        if self.store is not None:
            self.store.close()

    def close(self) -> None:
        """Runtimes stopped and models freed (not one a grammar sample is still inside: freeing it
        under the sample could crash the exit), then runs still going stored as failed."""
        if self.models is not None:
            self.models.close()
        self.response_runs.close()      # runs still going fail, and are stored so, before the store closes
        if self.store is not None:
            self.store.close()
        self._forget_cleanup()          # closed: an exit has nothing of this app's left to clean up


def is_preflight(request) -> bool:
    """A browser's CORS preflight: it never carries credentials, so it cannot carry the key.
    A plain OPTIONS (no Origin, no Access-Control-Request-Method) is a request like any other."""
    return request.method == "OPTIONS" and bool(request.header("origin")) \
        and bool(request.header("access-control-request-method"))


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


def pull_at_start(name: str) -> list:
    """--hf NAME: pulled (or found in the cache) before the catalogue is read; progress in the log."""
    try:
        return hub_pull.pull_now(name, lambda line: log.info("--hf %s: %s", name, line))
    except HubError as exc:
        raise StartupError(f"--hf {name}: {exc.message}", EXIT_USAGE if exc.status == 400 else EXIT_LOAD_FAILED) from None
    except OSError as exc:
        raise StartupError(f"--hf {name}: cannot write the Hugging Face cache: {exc.strerror or exc}") from None


def resolve_model_path(settings: Settings) -> str:
    if settings.model:
        return settings.model
    try:
        log.info("no --model given: serving the demo model (%s)", DEMO_DESCRIPTION)
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
    listeners = [listener]
    if settings.ollama_listen:      # a second address for tools with Ollama's port built in
        ollama_host, ollama_port = listen_address(settings.ollama_listen, settings.host)
        try:
            listeners.append(HTTPServer.listen(ollama_host, ollama_port))
        except OSError as exc:
            listener.close()
            print(f"localserve: cannot listen on {settings.ollama_listen} (--ollama-listen): {exc.strerror}",
                  file=sys.stderr)
            return EXIT_USAGE
    servers = [http_server(app, each) for each in listeners]
    server = servers[0]
    app.metrics.register(open_connections=lambda: sum(s.connection_count() for s in servers),
                         inflight_bytes=lambda: sum(s.inflight.used for s in servers),
                         inflight_limit=lambda: sum(s.inflight.limit for s in servers))
    with StopSignals() as signals:      # SIGTERM, SIGINT, SIGHUP: drain and exit (ops/signals.py)
        for each in servers:
            each.start()
        log_listening(servers)
        try:
            app.load(signals)
        except StartupError as exc:
            print(f"localserve: {exc}", file=sys.stderr)
            for each in servers:
                each.shutdown(0)
            return exc.status
        app.ready.set()
        host, port = server.address
        log_serving(app, host, port)
        for each in servers[1:]:
            log.info("also serving on %s (--ollama-listen)", http_url(*each.address))
        systemd.notify(f"READY=1\nSTATUS=serving {', '.join(app.models.catalogue.names())} on {host}:{port}")
        watchdog = systemd.watchdog_interval()
        while not signals.wait(watchdog or MAIN_LOOP_WAKE):
            if watchdog:
                systemd.notify("WATCHDOG=1")
        return drain(app, servers, settings)


def http_server(app: App, listener) -> HTTPServer:
    """One listening address's server; every one serves the same app (routes, access, limits)."""
    settings = app.settings
    return HTTPServer(app.router.dispatch, errors_for=app.router.errors_for,
                      refusal_before_body=app.router.refusal_before_body,
                      limits=Limits(max_body_bytes=settings.max_body_bytes), header_timeout=settings.header_timeout,
                      max_connections=settings.max_connections, max_inflight_bytes=settings.max_inflight_bytes,
                      idle_timeout=settings.idle_timeout, listener=listener, metrics=app.metrics)


def drain(app: App, servers: list[HTTPServer], settings: Settings) -> int:
    """Stop accepting, let open requests and background runs finish (up to --drain-timeout), close."""
    systemd.notify("STOPPING=1")
    app.services.stopping.set()     # streams with no end of their own (/models/sse) end now ...
    if app.models is not None:      # ... woken from their wait for the models' next change
        app.models.changes.close()
    log.info("shutting down: draining in-flight requests (up to %.0fs)", settings.drain_timeout)
    drain_started = time.monotonic()
    for each in servers:        # every address stops accepting at once (idle connections closed) ...
        each.shutdown(0)
    for each in servers:        # ... then the busy ones finish, in the drain's time between them
        each.shutdown(max(0.0, settings.drain_timeout - (time.monotonic() - drain_started)))
    left = app.response_runs.drain(max(0.0, settings.drain_timeout - (time.monotonic() - drain_started)))
    if left:
        log.warning("%d background response(s) still running at the end of the drain: stored as failed", left)
    app.close()
    log.info("stopped")
    return 0


def log_listening(servers: list[HTTPServer]) -> None:
    """The addresses bound, before any model loads: with --port 0 (or :0) this names the port."""
    log.info("listening on %s", http_url(*servers[0].address))
    for each in servers[1:]:
        log.info("listening on %s (--ollama-listen)", http_url(*each.address))


def log_serving(app: App, host: str, port: int) -> None:
    build = read_build_info()
    log.info("llama.cpp: %s", build.describe())
    if build.warning():
        log.warning("%s", build.warning())
    settings, loaded = app.settings, app.models.loaded_models()
    if app.models.catalogue.any_name and loaded:       # the one-model server: its line as it always was
        model = loaded[0]
        engine = model.engine
        log.info("serving %s (%s, %s params) as '%s' on %s — n_ctx %d per slot, %d slot(s), %d threads, "
                 "chat template %s, tool syntax %s, %s, weights in %s%s", engine.info.path, engine.info.architecture,
                 human_count(engine.info.n_params), model.name, http_url(host, port), engine.n_ctx_seq, settings.slots,
                 settings.resolved_threads(), model.chat.template.source, model.chat.tool_syntax,
                 offload_summary(engine), describe_buffers(engine.weight_buffers),
                 f", {engine.projector.describe()}" if engine.projector is not None else "")
        return
    log.info("serving %d model(s) on %s (%s loaded) — %d threads, %s", len(app.models.catalogue),
             http_url(host, port), ", ".join(m.name for m in loaded) or "none", settings.resolved_threads(),
             models_summary(app))


def models_summary(app: App) -> str:
    s = app.settings
    limits = [f"--max-models {s.max_models}" if s.max_models else "",
              f"--max-memory {s.max_memory // (1024 * 1024)} MiB" if s.max_memory else ""]
    catalogue = app.models.catalogue
    if catalogue.any_name:
        return "any model name answered by the one model"
    names = [f"{e.name} (+ {' and '.join(projector_encoders(e.settings(s).mmproj))})" if e.settings(s).mmproj
             else e.name for e in catalogue]
    return f"catalogue {', '.join(names)}" + "".join(f", {x}" for x in limits if x)
