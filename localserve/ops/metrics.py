"""Counters, gauges and histograms, and their Prometheus text exposition.

Two kinds of figure: those the server and the runtime record as things happen
(requests, tokens, cancellations, time to first token, decode rate), kept in
thread-safe metric objects; and those read when /metrics is scraped (queue
depth, busy slots, open connections, the RAM prompt cache), kept as callables
that look at the live objects. Histograms use fixed buckets, so a scrape costs
the same however long the server has run. Labels are bounded: requests are
counted by route pattern, never by raw path.

Format: https://prometheus.io/docs/instrumenting/exposition_formats/ (text 0.0.4).
"""

from __future__ import annotations

import bisect
import math
import threading
from typing import Any, Callable, Iterable

from . import memory

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DECODE_RATE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
REQUEST_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
LOAD_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
QUEUE_SECONDS_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))
UNMATCHED = "other"          # endpoint label for paths no route serves (404s, garbage)

LabelValues = tuple[str, ...]


# ---- the metric types ------------------------------------------------------------

class _Metric:
    kind = ""

    def __init__(self, name: str, help: str, labels: Iterable[str] = ()):
        self.name = name
        self.help = help
        self.label_names = tuple(labels)
        self._lock = threading.Lock()

    def _key(self, labels: dict[str, Any]) -> LabelValues:
        if set(labels) != set(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {tuple(labels)}")
        return tuple(str(labels[n]) for n in self.label_names)

    def samples(self) -> list[tuple[str, LabelValues, tuple[tuple[str, str], ...], float]]:
        """(name suffix, label values, extra labels, value) for each sample line."""
        raise NotImplementedError


class Counter(_Metric):
    """A value that only goes up; one per combination of label values."""
    kind = "counter"

    def __init__(self, name: str, help: str, labels: Iterable[str] = ()):
        super().__init__(name, help, labels)
        self._values: dict[LabelValues, float] = {} if self.label_names else {(): 0.0}

    def inc(self, amount: float = 1, **labels: Any) -> None:
        if amount < 0:
            raise ValueError("a counter cannot go down")
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: Any) -> float:
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def samples_by_key(self) -> list[tuple[LabelValues, float]]:
        with self._lock:
            return sorted(self._values.items())

    def samples(self):
        items = self.samples_by_key()
        return [("_total" if not self.name.endswith("_total") else "", key, (), value) for key, value in items]


class Gauge(_Metric):
    """A value read at scrape time from a callable (None = nothing to report yet)."""
    kind = "gauge"

    def __init__(self, name: str, help: str, read: Callable[[], float | None]):
        super().__init__(name, help)
        self.read = read

    def samples(self):
        value = self.read()
        return [] if value is None else [("", (), (), float(value))]


class LabeledGauge(_Metric):
    """Values read at scrape time, one per combination of label values ({(value, ...): number})."""
    kind = "gauge"

    def __init__(self, name: str, help: str, labels: Iterable[str], read: Callable[[], dict[LabelValues, float]]):
        super().__init__(name, help, labels)
        self.read = read

    def samples(self):
        return [("", tuple(str(v) for v in key), (), float(value)) for key, value in sorted(self.read().items())]


class ReadCounter(Gauge):
    """A counter someone else keeps (e.g. the prompt cache's hits), read at scrape time."""
    kind = "counter"


class Histogram(_Metric):
    """Observations counted into fixed cumulative buckets, with their sum and count."""
    kind = "histogram"

    def __init__(self, name: str, help: str, buckets: Iterable[float], labels: Iterable[str] = ()):
        super().__init__(name, help, labels)
        self.buckets = tuple(sorted(float(b) for b in buckets))
        if not self.buckets or len(set(self.buckets)) != len(self.buckets):
            raise ValueError(f"{name}: buckets must be distinct and not empty")
        self._series: dict[LabelValues, list] = {}    # key → [bucket counts..., +Inf count, sum]

    def observe(self, value: float, **labels: Any) -> None:
        if math.isnan(value):
            return
        key = self._key(labels)
        index = bisect.bisect_left(self.buckets, value)   # first bucket with value <= bound
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = [0] * (len(self.buckets) + 1) + [0.0]
            series[index] += 1
            series[-1] += value

    def count(self, **labels: Any) -> int:
        with self._lock:
            series = self._series.get(self._key(labels))
            return sum(series[:-1]) if series else 0

    def samples(self):
        with self._lock:
            snapshot = sorted((key, list(series)) for key, series in self._series.items())
        out = []
        for key, series in snapshot:
            cumulative = 0
            for bound, n in zip(self.buckets + (math.inf,), series[:-1]):
                cumulative += n
                out.append(("_bucket", key, (("le", _number(bound)),), cumulative))
            out.append(("_sum", key, (), series[-1]))
            out.append(("_count", key, (), cumulative))
        return out


class Registry:
    """The metrics of one process, rendered in registration order."""

    def __init__(self):
        self._metrics: dict[str, _Metric] = {}

    def _register(self, metric: _Metric) -> Any:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name} is already registered")
        self._metrics[metric.name] = metric
        return metric

    def counter(self, name: str, help: str, labels: Iterable[str] = ()) -> Counter:
        return self._register(Counter(name, help, labels))

    def histogram(self, name: str, help: str, buckets: Iterable[float], labels: Iterable[str] = ()) -> Histogram:
        return self._register(Histogram(name, help, buckets, labels))

    def gauge(self, name: str, help: str, read: Callable[[], float | None]) -> Gauge:
        return self._register(Gauge(name, help, read))

    def labeled_gauge(self, name: str, help: str, labels: Iterable[str],
                      read: Callable[[], dict[LabelValues, float]]) -> LabeledGauge:
        return self._register(LabeledGauge(name, help, labels, read))

    def read_counter(self, name: str, help: str, read: Callable[[], float | None]) -> ReadCounter:
        return self._register(ReadCounter(name, help, read))

    def render(self) -> str:
        lines: list[str] = []
        for metric in self._metrics.values():
            lines.append(f"# HELP {metric.name} {_escape_help(metric.help)}")
            lines.append(f"# TYPE {metric.name} {metric.kind}")
            for suffix, key, extra, value in metric.samples():
                pairs = list(zip(metric.label_names, key)) + list(extra)
                labels = "{" + ",".join(f'{n}="{_escape_label(v)}"' for n, v in pairs) + "}" if pairs else ""
                lines.append(f"{metric.name}{suffix}{labels} {_number(value)}")
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if float(value).is_integer() and abs(value) < 2 ** 53:
        return str(int(value))
    return repr(float(value))


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


# ---- what localserve measures ----------------------------------------------------

class ServerMetrics:
    """localserve's metrics. The runtime and the HTTP server call the record_* methods;
    the /metrics handler renders. `app` and `server` are read at scrape time (either may be None)."""

    def __init__(self, app: Any = None):
        self.app = app
        self.server: Any = None
        r = self.registry = Registry()
        self.requests = r.counter("localserve_requests_total", "HTTP requests answered, by route pattern, "
                                  "method and status", ("endpoint", "method", "status"))
        self.request_seconds = r.histogram("localserve_request_duration_seconds", "Time from a request's head "
                                           "to the end of its response", REQUEST_SECONDS_BUCKETS, ("endpoint",))
        self.prompt_tokens = r.counter("localserve_prompt_tokens_total", "Prompt tokens of finished generations, "
                                       "cached ones included")
        self.cached_tokens = r.counter("localserve_cached_prompt_tokens_total", "Prompt tokens served from the "
                                       "KV or RAM cache instead of being prefilled")
        self.generated_tokens = r.counter("localserve_generated_tokens_total", "Tokens generated, cancelled "
                                          "generations included")
        self.prefilled_tokens = r.counter("localserve_prefilled_tokens_total", "Prompt tokens run through the "
                                          "model, cancelled generations included (a prefill cut short counts "
                                          "none of its interrupted batch)")
        self.generations = r.counter("localserve_generations_total", "Generations that ended, by finish reason",
                                     ("finish_reason",))
        self.cancellations = r.counter("localserve_cancellations_total", "Generations cancelled (the client "
                                       "went away or asked), running or still queued")
        self.ttft = r.histogram("localserve_time_to_first_token_seconds", "Time from submission (queue wait "
                                "included) to the first generated token", TTFT_BUCKETS)
        self.queue_wait = r.histogram("localserve_queue_wait_seconds", "Time a generation waited for a slot",
                                      QUEUE_SECONDS_BUCKETS)
        self.decode_rate = r.histogram("localserve_decode_tokens_per_second", "Decode speed of each finished "
                                       "generation of two or more tokens", DECODE_RATE_BUCKETS)
        self.draft_tokens = r.counter("localserve_draft_tokens_total", "Tokens drafted by speculative decoding "
                                      "and verified in a decode step")
        self.draft_accepted = r.counter("localserve_draft_accepted_tokens_total", "Drafted tokens the model's "
                                        "own choice confirmed (kept without a step of their own)")
        r.gauge("localserve_draft_acceptance_rate", "Accepted drafted tokens / drafted tokens, since start",
                self._acceptance_rate)
        self.embedding_requests = r.counter("localserve_embedding_requests_total", "Embedding and rerank calls "
                                            "answered, by endpoint", ("endpoint",))
        self.embedding_inputs = r.counter("localserve_embedding_inputs_total", "Inputs embedded (rerank: "
                                          "query-document pairs scored), by endpoint", ("endpoint",))
        self.embedding_tokens = r.counter("localserve_embedding_tokens_total", "Tokens run through the embedding "
                                          "context, by endpoint", ("endpoint",))
        r.gauge("localserve_queue_depth", "Generations waiting for a slot", self._runtime(lambda rt: rt.queue_depth))
        r.gauge("localserve_slots_busy", "Slots running a generation", self._runtime(lambda rt: rt.busy_slots))
        r.gauge("localserve_abandoned_grammar_samples", "Grammar samples still running in llama.cpp for jobs "
                "that went over --sample-time-limit", self._runtime(lambda rt: rt.abandoned_samples))
        r.gauge("localserve_slots_total", "Slots (sequences the runtime holds at once)",
                self._runtime(lambda rt: len(rt.slots)))
        r.gauge("localserve_open_connections", "Client connections open", self._open_connections)
        r.gauge("localserve_inflight_body_bytes", "Request-body bytes being read or handled (--max-inflight-bytes)",
                self._server(lambda server: server.inflight.used))
        r.gauge("localserve_inflight_body_limit_bytes", "The in-flight body budget (--max-inflight-bytes)",
                self._server(lambda server: server.inflight.limit))
        r.gauge("process_resident_memory_bytes", "Resident set size of the process (from /proc)", memory.rss_bytes)
        r.gauge("localserve_prompt_cache_bytes", "Bytes held by the RAM prompt cache",
                self._runtime(lambda rt: rt.cache.size))
        r.gauge("localserve_prompt_cache_limit_bytes", "The RAM prompt cache's limit (--cache-ram)",
                self._runtime(lambda rt: rt.cache.limit_bytes))
        r.gauge("localserve_prompt_cache_entries", "Sequences held by the RAM prompt cache",
                self._runtime(lambda rt: len(rt.cache)))
        r.read_counter("localserve_prompt_cache_hits_total", "Sequences restored from the RAM prompt cache",
                       self._runtime(lambda rt: rt.cache.hits))
        r.gauge("localserve_ready", "1 once the model is loaded and requests are served", self._ready)
        # the same figures model by model (the unlabelled ones above are their sums)
        self.model_generations = r.counter("localserve_model_generations_total", "Generations that ended, by "
                                           "model and finish reason", ("model", "finish_reason"))
        self.model_prompt_tokens = r.counter("localserve_model_prompt_tokens_total", "Prompt tokens of finished "
                                             "generations, by model", ("model",))
        self.model_generated_tokens = r.counter("localserve_model_generated_tokens_total", "Tokens generated, "
                                                "by model", ("model",))
        self.model_draft_tokens = r.counter("localserve_model_draft_tokens_total", "Tokens drafted by speculative "
                                            "decoding and verified, by model", ("model",))
        self.model_draft_accepted = r.counter("localserve_model_draft_accepted_tokens_total", "Drafted tokens the "
                                              "model's own choice confirmed, by model", ("model",))
        r.labeled_gauge("localserve_model_draft_acceptance_rate", "Accepted drafted tokens / drafted tokens, by "
                        "model, since start", ("model",), self._model_acceptance_rates)
        self.model_embedding_tokens = r.counter("localserve_model_embedding_tokens_total", "Tokens embedded "
                                                "(rerank: of the pairs scored), by model and endpoint",
                                                ("model", "endpoint"))
        self.model_loads = r.counter("localserve_model_loads_total", "Model loads, by model and outcome "
                                     "(loaded, failed)", ("model", "outcome"))
        self.model_unloads = r.counter("localserve_model_unloads_total", "Model unloads, by model and reason "
                                       "(idle, evicted, request, shutdown)", ("model", "reason"))
        self.model_load_seconds = r.histogram("localserve_model_load_seconds", "Time to load a model",
                                              LOAD_SECONDS_BUCKETS, ("model",))
        r.labeled_gauge("localserve_model_loaded", "1 for a loaded model, 0 for one in the catalogue not loaded",
                        ("model",), self._per_model(lambda m: 1.0 if m.runtime is not None else 0.0, all_models=True))
        r.labeled_gauge("localserve_model_slots_busy", "Slots running a generation, by model", ("model",),
                        self._per_model(lambda m: m.runtime.busy_slots))
        r.labeled_gauge("localserve_model_queue_depth", "Generations waiting for a slot, by model", ("model",),
                        self._per_model(lambda m: m.runtime.queue_depth))
        r.labeled_gauge("localserve_model_memory_bytes", "Memory a loaded model holds (weights + KV + compute, "
                        "the larger of the estimate and the measured growth of the process)", ("model",),
                        self._per_model(lambda m: m.memory_bytes))

    # ---- recording (any thread) --------------------------------------------------

    def watch_server(self, server: Any) -> None:
        """Count server's requests here and report its open connections."""
        self.server = server
        server.metrics = self

    def record_request(self, path: str | None, method: str, status: int | None, seconds: float | None) -> None:
        """One answered request (status None: the client left before any answer)."""
        method = method if method in METHODS else "other"
        endpoint = self.endpoint_of(path, method)
        self.requests.inc(endpoint=endpoint, method=method, status=status or 0)
        if seconds is not None:
            self.request_seconds.observe(seconds, endpoint=endpoint)

    def record_generation(self, output: Any) -> None:
        """A GenerationOutput the runtime retired (generation.py)."""
        self.generations.inc(finish_reason=output.finish_reason)
        self.prompt_tokens.inc(output.prompt_tokens)
        self.cached_tokens.inc(output.cached_tokens)
        self.generated_tokens.inc(output.completion_tokens)
        t = output.timings
        self.queue_wait.observe(t.queued_ms / 1000)
        if output.completion_tokens or output.finish_reason == "stop":
            self.ttft.observe((t.queued_ms + t.prefill_ms) / 1000)
        if output.completion_tokens >= 2 and t.decode_ms > 0:
            self.decode_rate.observe((output.completion_tokens - 1) / (t.decode_ms / 1000))

    def record_drafts(self, drafted: int, accepted: int) -> None:
        """One draft verified (speculative decoding)."""
        self.draft_tokens.inc(drafted)
        self.draft_accepted.inc(accepted)

    def _acceptance_rate(self) -> float | None:
        drafted = self.draft_tokens.value()
        return self.draft_accepted.value() / drafted if drafted else None

    def _model_acceptance_rates(self) -> dict[LabelValues, float]:
        drafted = dict(self.model_draft_tokens.samples_by_key())
        accepted = dict(self.model_draft_accepted.samples_by_key())
        return {key: accepted.get(key, 0.0) / n for key, n in drafted.items() if n}

    def record_prefill(self, tokens: int) -> None:
        """Prompt tokens one decode step ran through the model."""
        self.prefilled_tokens.inc(tokens)

    def record_embedding(self, endpoint: str, inputs: int, tokens: int, model: str) -> None:
        """One answered embeddings ("embeddings") or rerank ("rerank") call to `model`."""
        self.embedding_requests.inc(endpoint=endpoint)
        self.embedding_inputs.inc(inputs, endpoint=endpoint)
        self.embedding_tokens.inc(tokens, endpoint=endpoint)
        self.model_embedding_tokens.inc(tokens, model=model, endpoint=endpoint)

    def record_cancellation(self, generated_tokens: int = 0) -> None:
        self.cancellations.inc()
        self.generations.inc(finish_reason="cancelled")
        self.generated_tokens.inc(generated_tokens)

    # ---- reading -----------------------------------------------------------------

    def endpoint_of(self, path: str | None, method: str = "GET") -> str:
        """The route pattern serving path, so labels stay few whatever clients send."""
        router = getattr(self.app, "router", None)
        matches = router.match(path) if router is not None and path else []
        for route, _ in matches:
            if method in route.methods:
                return route.pattern
        return matches[0][0].pattern if matches else UNMATCHED

    def render(self) -> str:
        return self.registry.render()

    def _runtimes(self) -> list[Any]:
        models = getattr(self.app, "models", None)
        return [] if models is None else [m.runtime for m in models.loaded_models()]

    def _runtime(self, read: Callable[[Any], float]) -> Callable[[], float | None]:
        """The sum over every loaded model's runtime (None before any is loaded)."""
        def value() -> float | None:
            runtimes = self._runtimes()
            return sum(read(runtime) for runtime in runtimes) if runtimes else None
        return value

    def _per_model(self, read: Callable[[Any], float], all_models: bool = False) -> Callable[[], dict]:
        """{(model name,): value} for each loaded model (each in the catalogue with all_models)."""
        def values() -> dict:
            models = getattr(self.app, "models", None)
            if models is None:
                return {}
            shown = models.all_models() if all_models else models.loaded_models()
            return {(m.name,): read(m) for m in shown}
        return values

    def _server(self, read: Callable[[Any], float]) -> Callable[[], float | None]:
        def value() -> float | None:
            return None if self.server is None else read(self.server)
        return value

    def _open_connections(self) -> float | None:
        return None if self.server is None else self.server.connection_count()

    def _ready(self) -> float | None:
        ready = getattr(self.app, "ready", None)
        return None if ready is None else float(ready.is_set())


class ModelMetrics:
    """What one model's runtime records: the server's figures, and the same under its `model` label."""

    def __init__(self, server: ServerMetrics, model: str):
        self.server = server
        self.model = model

    def record_generation(self, output: Any) -> None:
        self.server.record_generation(output)
        self.server.model_generations.inc(model=self.model, finish_reason=output.finish_reason)
        self.server.model_prompt_tokens.inc(output.prompt_tokens, model=self.model)
        self.server.model_generated_tokens.inc(output.completion_tokens, model=self.model)

    def record_prefill(self, tokens: int) -> None:
        self.server.record_prefill(tokens)

    def record_drafts(self, drafted: int, accepted: int) -> None:
        self.server.record_drafts(drafted, accepted)
        self.server.model_draft_tokens.inc(drafted, model=self.model)
        self.server.model_draft_accepted.inc(accepted, model=self.model)

    def record_cancellation(self, generated_tokens: int = 0) -> None:
        self.server.record_cancellation(generated_tokens)
        self.server.model_generations.inc(model=self.model, finish_reason="cancelled")
        self.server.model_generated_tokens.inc(generated_tokens, model=self.model)


def handle(exchange: Any) -> None:
    """GET /metrics: the Prometheus text exposition. Served while the model loads too."""
    body = exchange.app.metrics.render().encode()
    exchange.writer.send(200, body, content_type=CONTENT_TYPE)
