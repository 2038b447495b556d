"""What localserve measures: its metrics, recorded as things happen and read at scrape time.

Two kinds of figure: those the server and the runtime record as things happen
(requests, tokens, cancellations, time to first token, decode rate), kept in
thread-safe metric objects; and those read when /metrics is scraped (queue
depth, busy slots, open connections, the RAM prompt cache), kept as callables
that look at the live objects. Labels are bounded: requests are counted by
route pattern, never by raw path. The metric types and the text format are
prometheus.py's; the /metrics handler is dialects/metrics_endpoint.py.

What is read at scrape time comes through Sources: callables app.py registers (the route
table, the models, readiness, the HTTP server's connections), never the app itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol, Sequence

from . import memory
from .prometheus import LabelValues, Registry

TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
DECODE_RATE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
REQUEST_SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
LOAD_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
QUEUE_SECONDS_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

METHODS = frozenset(("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"))
UNMATCHED = "other"          # endpoint label for paths no route serves (404s, garbage)
FAILED = "error"             # finish_reason label of a generation that ended in an error


# ---- what is read at scrape time ---------------------------------------------------

class PromptCacheFigures(Protocol):
    @property
    def size(self) -> int: ...
    @property
    def limit_bytes(self) -> int: ...
    @property
    def hits(self) -> int: ...
    def __len__(self) -> int: ...


class RuntimeFigures(Protocol):
    """What a model's runtime shows (runtime.Runtime)."""
    @property
    def queue_depth(self) -> int: ...
    @property
    def busy_slots(self) -> int: ...
    @property
    def abandoned_samples(self) -> int: ...
    @property
    def threads(self) -> int: ...
    @property
    def slots(self) -> Sequence[object]: ...
    @property
    def cache(self) -> PromptCacheFigures: ...


class ModelFigures(Protocol):
    """A model of the catalogue (models.Record: its runtime None while unloaded)."""
    @property
    def name(self) -> str: ...
    @property
    def runtime(self) -> RuntimeFigures | None: ...


class LoadedFigures(Protocol):
    """A loaded model (models.LoadedModel)."""
    @property
    def name(self) -> str: ...
    @property
    def runtime(self) -> RuntimeFigures: ...
    @property
    def memory_bytes(self) -> int: ...


@dataclass(frozen=True)
class Sources:
    """What the scrape reads, as app.py registers it; None: not there (yet)."""
    route_pattern: Callable[[str, str], str | None] | None = None      # (path, method) → the serving route's
    loaded_models: Callable[[], Sequence[LoadedFigures]] | None = None
    all_models: Callable[[], Sequence[ModelFigures]] | None = None     # the catalogue, loaded or not
    ready: Callable[[], bool] | None = None
    open_connections: Callable[[], int] | None = None
    inflight_bytes: Callable[[], int] | None = None                   # request bodies read or handled now
    inflight_limit: Callable[[], int] | None = None


# ---- what localserve measures ----------------------------------------------------

class ServerMetrics:
    """localserve's metrics. The runtime and the HTTP server call the record_* methods;
    the /metrics handler renders, reading what register() was given."""

    def __init__(self) -> None:
        self.sources = Sources()
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
        self.reused_tokens = r.counter("localserve_prompt_tokens_reused_total", "Prompt tokens a generation "
                                       "started with instead of prefilling them, by where they came from: own "
                                       "(its slot's sequence), slot (a prefix copied from another sequence), "
                                       "ram (the RAM prompt cache)", ("source",))
        self.prefix_waits = r.counter("localserve_prefix_waits_total", "Generations that waited for another to "
                                      "prefill the prompt head they share, then copied it")
        self.images_encoded = r.counter("localserve_images_encoded_total", "Images encoded by a vision "
                                        "projector and decoded into a sequence (a cached image counts none)")
        self.image_seconds = r.counter("localserve_image_seconds_total", "Seconds spent encoding images and "
                                       "decoding their embeddings")
        self.audio_encoded = r.counter("localserve_audio_chunks_encoded_total", "Audio chunks (a clip's windows, "
                                       "30 s each for Whisper-style encoders) encoded by an audio encoder and "
                                       "decoded into a sequence (a cached clip counts none)")
        self.audio_seconds = r.counter("localserve_audio_seconds_total", "Seconds spent encoding audio chunks "
                                       "and decoding their embeddings")
        self.generations = r.counter("localserve_generations_total", "Generations that ended, by finish reason "
                                     "(error: the generation failed)", ("finish_reason",))
        self.compactions = r.counter("localserve_compactions_total", "Context compactions: summaries the model "
                                     "wrote of a conversation (each piece of a long one counts)")
        self.parks = r.counter("localserve_parked_jobs_total", "Running jobs an editor completion parked "
                               "(set aside, their KV sequence copied to RAM) to take their slot")
        self.resumes = r.counter("localserve_resumed_jobs_total", "Parked jobs put back into a slot, going on "
                                 "where they stopped")
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
        r.gauge("localserve_threads", "CPU threads the loaded models' decode steps run on now (fewer than "
                "--threads' default while other processes hold cores)", self._runtime(lambda rt: rt.threads))
        r.gauge("localserve_slots_total", "Slots (sequences the runtime holds at once)",
                self._runtime(lambda rt: len(rt.slots)))
        r.gauge("localserve_open_connections", "Client connections open", self._source(lambda s: s.open_connections))
        r.gauge("localserve_inflight_body_bytes", "Request-body bytes being read or handled (--max-inflight-bytes)",
                self._source(lambda s: s.inflight_bytes))
        r.gauge("localserve_inflight_body_limit_bytes", "The in-flight body budget (--max-inflight-bytes)",
                self._source(lambda s: s.inflight_limit))
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
        self.model_compactions = r.counter("localserve_model_compactions_total", "Context compactions, by model",
                                           ("model",))
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
        r.labeled_gauge("localserve_model_threads", "CPU threads a model's decode steps run on now", ("model",),
                        self._per_model(lambda m: m.runtime.threads))
        r.labeled_gauge("localserve_model_queue_depth", "Generations waiting for a slot, by model", ("model",),
                        self._per_model(lambda m: m.runtime.queue_depth))
        r.labeled_gauge("localserve_model_memory_bytes", "Memory a loaded model holds (weights + KV + compute, "
                        "the larger of the estimate and the measured growth of the process)", ("model",),
                        self._per_model(lambda m: m.memory_bytes))

    def register(self, **sources: Callable[..., Any]) -> None:
        """app.py: what the scrape reads (Sources' fields), as each part comes to exist."""
        self.sources = replace(self.sources, **sources)

    # ---- recording (any thread) --------------------------------------------------

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

    def record_prefix(self, source: str, tokens: int, waited: bool) -> None:
        """Where a started generation's cached prompt tokens came from (runtime/kvslots.py)."""
        if tokens:
            self.reused_tokens.inc(tokens, source=source)
        if waited:
            self.prefix_waits.inc()

    def record_image(self, seconds: float, audio: bool = False) -> None:
        """One image (or audio chunk) evaluated into a sequence: encoded, its embeddings decoded."""
        if audio:
            self.audio_encoded.inc()
            self.audio_seconds.inc(seconds)
            return
        self.images_encoded.inc()
        self.image_seconds.inc(seconds)

    def record_embedding(self, endpoint: str, inputs: int, tokens: int, model: str) -> None:
        """One answered embeddings ("embeddings") or rerank ("rerank") call to `model`."""
        self.embedding_requests.inc(endpoint=endpoint)
        self.embedding_inputs.inc(inputs, endpoint=endpoint)
        self.embedding_tokens.inc(tokens, endpoint=endpoint)
        self.model_embedding_tokens.inc(tokens, model=model, endpoint=endpoint)

    def record_compaction(self) -> None:
        """A compaction job ended with its summary (its tokens count as a generation's too)."""
        self.compactions.inc()

    def record_park(self) -> None:
        """A running job set aside for an editor completion (runtime/preempt.py)."""
        self.parks.inc()

    def record_resume(self) -> None:
        """A parked job back in a slot."""
        self.resumes.inc()

    def record_cancellation(self, generated_tokens: int = 0) -> None:
        self.cancellations.inc()
        self.generations.inc(finish_reason="cancelled")
        self.generated_tokens.inc(generated_tokens)

    def record_failure(self, generated_tokens: int = 0) -> None:
        """A generation that ended in an error (its client got the error, not an answer)."""
        self.generations.inc(finish_reason=FAILED)
        self.generated_tokens.inc(generated_tokens)

    # ---- reading -----------------------------------------------------------------

    def endpoint_of(self, path: str | None, method: str = "GET") -> str:
        """The route pattern serving path, so labels stay few whatever clients send."""
        route_pattern = self.sources.route_pattern
        pattern = route_pattern(path, method) if route_pattern is not None and path else None
        return pattern or UNMATCHED

    def render(self) -> str:
        return self.registry.render()

    def _runtimes(self) -> list[RuntimeFigures]:
        loaded = self.sources.loaded_models
        return [] if loaded is None else [m.runtime for m in loaded()]

    def _runtime(self, read: Callable[[RuntimeFigures], float]) -> Callable[[], float | None]:
        """The sum over every loaded model's runtime (None before any is loaded)."""
        def value() -> float | None:
            runtimes = self._runtimes()
            return sum(read(runtime) for runtime in runtimes) if runtimes else None
        return value

    def _per_model(self, read: Callable[[Any], float], all_models: bool = False) -> Callable[[], dict]:
        """{(model name,): value} for each loaded model (each in the catalogue with all_models)."""
        def values() -> dict:
            models = self.sources.all_models if all_models else self.sources.loaded_models
            return {} if models is None else {(m.name,): read(m) for m in models()}
        return values

    def _source(self, pick: Callable[[Sources], Callable[[], int] | None]) -> Callable[[], float | None]:
        def value() -> float | None:
            read = pick(self.sources)
            return None if read is None else read()
        return value

    def _ready(self) -> float | None:
        ready = self.sources.ready
        return None if ready is None else float(ready())


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

    def record_prefix(self, source: str, tokens: int, waited: bool) -> None:
        self.server.record_prefix(source, tokens, waited)

    def record_image(self, seconds: float, audio: bool = False) -> None:
        self.server.record_image(seconds, audio)

    def record_compaction(self) -> None:
        self.server.record_compaction()
        self.server.model_compactions.inc(model=self.model)

    def record_drafts(self, drafted: int, accepted: int) -> None:
        self.server.record_drafts(drafted, accepted)
        self.server.model_draft_tokens.inc(drafted, model=self.model)
        self.server.model_draft_accepted.inc(accepted, model=self.model)

    def record_park(self) -> None:
        self.server.record_park()

    def record_resume(self) -> None:
        self.server.record_resume()

    def record_cancellation(self, generated_tokens: int = 0) -> None:
        self.server.record_cancellation(generated_tokens)
        self.server.model_generations.inc(model=self.model, finish_reason="cancelled")
        self.server.model_generated_tokens.inc(generated_tokens, model=self.model)

    def record_failure(self, generated_tokens: int = 0) -> None:
        self.server.record_failure(generated_tokens)
        self.server.model_generations.inc(model=self.model, finish_reason=FAILED)
        self.server.model_generated_tokens.inc(generated_tokens, model=self.model)
