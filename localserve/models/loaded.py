"""One loaded model: its engine, its runtime thread, and what connection threads see of it (served).

load() does what the one-model server did at start (engine, chat template, tool syntax,
speculative decoding and its draft model, runtime); close() undoes all of it: the runtime thread
joined, the draft model, the llama.cpp context and model freed. Handlers reach a LoadedModel
through ModelManager.use() (manager.py).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

from ..engine import rpc
from ..engine.cpu_weights import USERS_CHOICE, describe as describe_buffers
from ..engine.draft_model import DraftModel
from ..engine.embed import Embedder, spec_for
from ..engine.embedding_spec import EmbeddingSpec
from ..engine.engine import Engine
from ..engine.facade import EngineFacade
from ..engine.lora import LoraAdapters
from ..engine.model_load import ModelLoadError
from ..engine.stopwatch import Stopwatch
from ..engine.vision import Projector
from ..ops.metrics import ModelMetrics, ServerMetrics
from ..parsing.family_detection import detect_family, named_family
from ..parsing.reasoning import REASONING_FORMATS
from ..parsing.tool_families import ToolSyntax
from ..prompt.build import ChatModel
from ..prompt.templates import ChatTemplate, TemplateError, choose_template
from ..runtime.runtime import Runtime
from ..runtime.speculative import Speculator
from ..settings import MAX_DEFAULT_CTX, Settings
from .adapters import Adapter, AdapterTable
from .catalogue import ModelEntry
from .load_progress import MMPROJ_MODEL, SPEC_MODEL, TEXT_MODEL, LoadProgress, load_stages
from .served import ServedModel

log = logging.getLogger("localserve.models")


class LoadFailed(Exception):
    """The model cannot be loaded; `usage` when its configuration is wrong (a template, a flag)."""

    def __init__(self, message: str, usage: bool = False):
        super().__init__(message)
        self.usage = usage


@dataclass
class LoadedModel:
    entry: ModelEntry
    settings: Settings          # the server's, with this model's own on top
    engine: Engine
    chat: ChatModel
    runtime: Runtime
    embedding_spec: EmbeddingSpec   # how it embeds (or ranks): engine/embed.py
    draft_model: DraftModel | None = None   # --draft-model's context, used by the runtime thread alone
    adapters: AdapterTable | None = None    # its LoRA adapters (adapters.py); None: it has none
    loaded_at: float = field(default_factory=time.time)
    load_seconds: float = 0.0
    estimated_bytes: int = 0
    measured_bytes: int = 0     # how much the process grew while it loaded

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def embeddings_only(self) -> bool:
        """An encoder (no KV cache, attention both ways) or a reranker cannot chat; any model
        can be kept out of chat with embeddings-only."""
        return self.settings.embeddings_only or self.embedding_spec.encoder or self.embedding_spec.ranks

    @property
    def memory_bytes(self) -> int:
        return max(self.estimated_bytes, self.measured_bytes)

    @property
    def served(self) -> ServedModel:
        """What a connection thread may see and call of it (served.py): never the Engine."""
        return ServedModel(self.entry, self.settings, self.chat, self.embedding_spec, self.embeddings_only,
                           self.loaded_at, self.load_seconds, self.estimated_bytes, self.measured_bytes,
                           self.memory_bytes, submit=self.runtime.submit, submit_all=self.runtime.submit_all,
                           submit_embedding=self.runtime.submit_embedding,
                           submit_slot_request=self.runtime.submit_slot_request,
                           slot_state=self.runtime.slot_state, adapters=self.adapters)

    @property
    def idle(self) -> bool:
        """No job running or waiting (a background response's included)."""
        return self.runtime.busy_slots == 0 and self.runtime.queue_depth == 0

    def close(self) -> None:
        """Stop and join the runtime thread; the engine is the caller's to free (free_engine,
        once engine_in_use says no)."""
        self.runtime.stop()
        if self.runtime.thread.is_alive():
            log.warning("model %s: the runtime thread did not stop within its timeout", self.name)
        elif self.draft_model is not None:      # only the runtime thread drafts: free once it is gone
            self.draft_model.close()

    @property
    def engine_in_use(self) -> bool:
        """A grammar sample the runtime abandoned past its time limit may still be inside llama.cpp:
        the engine must not be freed under it."""
        return self.runtime.abandoned_samples > 0

    def free_engine(self) -> None:
        self.engine.close()


def load(entry: ModelEntry, settings: Settings, metrics: ServerMetrics, threads: int,
         watch: Stopwatch | None = None, progress: LoadProgress | None = None) -> LoadedModel:
    """Load `entry` with `settings` (already the model's own) on `threads` cores; `watch`
    times each step (the manager's own steps before this one on it); `progress` hears how far
    each stage is (load_progress.py)."""
    started = time.perf_counter()
    watch = watch or Stopwatch()
    progress = progress or LoadProgress(load_stages(settings), lambda *_: None)
    drafting = settings.speculative != "off"
    progress(TEXT_MODEL, 0.0)
    try:
        engine = Engine(entry.path, n_ctx=settings.ctx_size, n_seq=settings.slots, n_batch=settings.batch_size,
                        threads=threads, n_gpu_layers=rpc.layers_to_offload(settings.n_gpu_layers, settings.rpc),
                        tensor_split=rpc.split_proportions(settings.tensor_split) if settings.tensor_split else None,
                        max_default_ctx=MAX_DEFAULT_CTX, cpu_weights_mode=settings.cpu_weights,
                        draft_max=settings.draft_max if drafting else 0, stopwatch=watch,
                        share_prefixes=not settings.no_prefix_sharing, kv_unified=settings.kv_unified,
                        max_threads=settings.resolved_threads(),
                        adapt_threads=settings.threads is None and not settings.no_thread_adaptation,
                        on_progress=progress.stage(TEXT_MODEL))
    except ModelLoadError as exc:
        raise LoadFailed(str(exc)) from None
    draft_model = None
    try:
        progress(MMPROJ_MODEL, 0.0)
        engine.projector = _projector(engine, settings, threads)
        progress(MMPROJ_MODEL, 1.0)
        watch.lap("vision projector")
        adapters = _adapters(engine, entry)
        watch.lap("LoRA adapters")
        chat = _chat_model(engine, settings, entry.name,
                           go_template=entry.defaults is not None and bool(entry.defaults.template))
        watch.lap("chat template")
        spec = spec_for(engine, settings.pooling, settings.batch_size)
        progress(SPEC_MODEL, 0.0)
        draft_model = _draft_model(engine, settings, threads)
        progress(SPEC_MODEL, 1.0)
        watch.lap("draft model")
        runtime = Runtime(engine, slots=settings.slots, max_queue=settings.max_queue,
                          cache_bytes=max(0, settings.cache_ram) * 1024 * 1024,
                          metrics=ModelMetrics(metrics, entry.name), sample_time_limit=settings.sample_time_limit,
                          make_embedder=lambda: Embedder(engine, spec),
                          speculator=Speculator(settings.speculative, settings.draft_max, engine, draft_model,
                                                 equal_rows=not settings.kv_unified))
    except BaseException:
        if draft_model is not None:
            draft_model.close()
        engine.close()
        raise
    runtime.thread.name = f"runtime {entry.name}"
    runtime.start()
    watch.lap("runtime start")
    loaded = LoadedModel(entry, settings, engine, chat, runtime, spec, draft_model, adapters,
                         load_seconds=time.perf_counter() - started)
    _log_loaded(loaded)
    log.debug("load steps of %s: %s", entry.name, watch)
    return loaded


def _projector(engine: Engine, settings: Settings, threads: int) -> Projector | None:
    """The model's vision projector (--mmproj, paired in --models-dir, or its [models] table's),
    on the devices its weights are on; one that cannot be loaded is a configuration error."""
    if not settings.mmproj:
        return None
    try:
        projector = Projector(settings.mmproj, engine.model, engine.ctx, n_batch=engine.n_batch, threads=threads,
                              use_gpu=engine.gpu_layers > 0)
    except ModelLoadError as exc:
        raise LoadFailed(str(exc), usage=True) from None
    image_tokens = projector.one_batch_image_tokens()
    if image_tokens is not None and image_tokens > engine.n_batch:
        log.warning("%s: its images take at least %d tokens each, decoded in one batch (attention both ways), "
                    "more than --batch-size %d: every image will be refused; start with --batch-size %d or more "
                    "to read them",
                    settings.mmproj, image_tokens, engine.n_batch, image_tokens)
    return projector


def _adapters(engine: Engine, entry: ModelEntry) -> AdapterTable | None:
    """The model's LoRA adapters, loaded onto it; one llama.cpp refuses is kept with its reason
    (a request for it is refused, the model serves on)."""
    files = entry.adapter_files()
    if not files:
        return None
    engine.lora = LoraAdapters(engine.model, engine.info.architecture, [f.path for f in files])
    adapters = []
    for i, (file, loaded) in enumerate(zip(files, engine.lora.adapters)):
        if loaded.error is not None:
            log.warning("model %s: LoRA adapter %s cannot run: %s", entry.name, file.name, loaded.error)
        adapters.append(Adapter(i, file.name, file.path, file.scale if loaded.error is None else 0.0, loaded.error))
    return AdapterTable(entry.name, adapters)


def _draft_model(engine: Engine, settings: Settings, threads: int) -> DraftModel | None:
    """--speculative draft's model; one whose vocabulary differs is a configuration error (usage)."""
    if settings.speculative != "draft":
        return None
    try:
        return DraftModel(settings.draft_model, engine, threads=threads,
                          n_gpu_layers=rpc.layers_to_offload(settings.n_gpu_layers, settings.rpc),
                          cpu_weights_mode=settings.cpu_weights)
    except ModelLoadError as exc:
        raise LoadFailed(str(exc), usage=True) from None


def _chat_model(engine: Engine, settings: Settings, name: str, go_template: bool = False) -> ChatModel:
    """go_template: Ollama's store keeps a Go template for the model (its template layer), which
    this server cannot run: a model whose GGUF has no usable template of its own is refused
    rather than served with a builtin one its maker never wrote it for."""
    info = engine.info
    try:
        template = choose_template(gguf_template=info.chat_template, architecture=info.architecture,
                                   bos_token=info.bos_token, eos_token=info.eos_token,
                                   override_path=settings.chat_template_file)
    except TemplateError as exc:
        raise LoadFailed(f"chat template: {exc}", usage=True) from None
    if go_template and template.source.startswith("builtin:"):
        raise LoadFailed(f"chat template: '{name}' has no usable chat template in its GGUF, and the one Ollama "
                         f"keeps for it is a Go template, which this server does not run; give it a Jinja one: a "
                         f"[models.\"{name}\"] table with its path and chat_template_file",
                         usage=True)
    template.caps  # noqa: B018  (probed now, at load, not on the first request)
    # <think> splitting for models whose vocabulary has it as one token
    thinks = len(engine.tokenize("<think>", add_special=False)) == 1
    family = named_family(settings.tool_syntax) if settings.tool_syntax else detect_chat_family(template)
    template = replace(template, calls_family=family)   # calls shown as text in its words
    return ChatModel(EngineFacade(engine), template, tool_syntax=family.name, tool_family=family,
                     default_reasoning=REASONING_FORMATS["think"] if thinks else None, name=name,
                     vision=engine.projector is not None and engine.projector.vision,
                     audio=engine.projector is not None and engine.projector.audio)


def detect_chat_family(template: ChatTemplate) -> ToolSyntax:
    """The tool-call family of a chat template, derived from its own rendered calls."""
    def render(messages: list[dict], tools: list[dict], generation_prompt: bool) -> str:
        return template.render_as_is(messages, tools=tools, add_generation_prompt=generation_prompt)
    return detect_family(template.text, render)


def _log_loaded(model: LoadedModel) -> None:
    engine, plan = model.engine, model.engine.weight_plan
    say = log.warning if plan.why == USERS_CHOICE else log.info
    say("weights: %s — --cpu-weights %s: %s (%s); warm-up decode %.0f ms", describe_buffers(engine.weight_buffers),
        plan.mode, plan.layout, plan.why, engine.warmup_seconds * 1000)
    log.info("loaded %s as '%s' in %.2fs (%s, %s params) — n_ctx %d per slot, %d slot(s), chat template %s, "
             "tool syntax %s, %s%s", engine.info.path, model.name, model.load_seconds, engine.info.architecture,
             human_count(engine.info.n_params), engine.n_ctx_seq, model.settings.slots, model.chat.template.source,
             model.chat.tool_syntax, offload_summary(engine),
             f", {engine.projector.describe()}" if engine.projector is not None else "")
    spec = model.embedding_spec
    log.info("'%s' embeds: pooling %s, %d %s per input, inputs up to %d tokens%s", model.name, spec.pooling,
             spec.n_out, "scores" if spec.ranks else "dimensions", spec.max_tokens,
             "; chat off (an encoder, a reranker or embeddings-only)" if model.embeddings_only else "")


def offload_summary(engine: Engine) -> str:
    if engine.gpu_layers:
        devices = sorted({d for d in engine.layer_devices.values() if d != "CPU"})
        return f"{engine.gpu_layers}/{len(engine.layer_devices)} layers offloaded to {', '.join(devices)}"
    return "CPU only" if engine.gpu_available else "CPU only (this llama-cpp-python build has no GPU backend)"


def human_count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)
