"""A loaded model as a connection thread sees it: what a handler may read and call, nothing more.

Only the runtime thread touches the llama.cpp context. A handler needs the model's name and
settings, its ChatModel (the template, the tool syntax, and the engine through EngineFacade:
tokenize, detokenize, check a grammar, read the model's facts) to build a request, and the calls
into its runtime, each safe off the runtime thread: hand over a generation (or a request's `n`
choices together), an embedding or a slot request, and read the slots' state. ModelManager.use()
yields a ServedModel, never the LoadedModel behind it (whose Engine is the runtime thread's
alone), and the ServedModel holds those calls, not the Runtime: a handler cannot name a runtime
attribute through it (only through a bound method's `__self__`, which test_layout.py refuses in
every handler module).
This module imports neither the engine nor the runtime: a dialect may import it.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..engine.embedding_spec import EmbeddingSpec
from ..prompt.build import ChatModel
from ..generation import AdapterSet
from ..settings import Settings
from .adapter_files import ADAPTER_MARK
from .adapters import AdapterTable
from .errors import BadAdapter
from .catalogue import ModelEntry

if TYPE_CHECKING:
    from ..generation import ActiveGeneration, GenerationRequest
    from ..runtime.embedding_jobs import EmbeddingJob
    from ..runtime.slot_state import SlotRequest


@dataclass(frozen=True)
class ServedModel:
    """One loaded model, for handlers: facts fixed at load, and the calls its runtime takes."""
    entry: ModelEntry
    settings: Settings                  # the server's, with this model's own on top
    chat: ChatModel                     # the prompt builder's view: template, tool syntax, EngineFacade
    embedding_spec: EmbeddingSpec       # how it embeds (or ranks): engine/embed.py
    embeddings_only: bool               # an encoder, a reranker, or embeddings-only: no chat
    loaded_at: float                    # time.time() of the load
    load_seconds: float
    estimated_bytes: int
    measured_bytes: int                 # how much the process grew while it loaded
    memory_bytes: int                   # the larger of the two
    # the runtime's calls (runtime.Runtime): QueueFull or RuntimeStopped when it takes no more
    submit: Callable[[GenerationRequest], ActiveGeneration]
    # jobs queued together or not at all (a request's `n` choices), their events on the queue when given
    submit_all: Callable[[list[GenerationRequest], queue.SimpleQueue | None], list[ActiveGeneration]]
    submit_embedding: Callable[[EmbeddingJob], EmbeddingJob]
    submit_slot_request: Callable[[SlotRequest], SlotRequest]      # wait on request.done
    slot_state: Callable[[], dict]                                  # what /slots and /health show
    adapters: AdapterTable | None = None    # its LoRA adapters (adapters.py); None: it has none
    adapter: str | None = None              # the adapter the request's model name picks (`base+adapter`)

    @property
    def name(self) -> str:
        """The name answers carry (model_id): the catalogue's, and the adapter the request named."""
        return self.entry.name if self.adapter is None else f"{self.entry.name}{ADAPTER_MARK}{self.adapter}"

    model_id = name

    def adapter_set(self, requested: tuple[tuple[int, float], ...] | None) -> AdapterSet:
        """The LoRA adapters a request runs under, given what its `lora` lists (None: nothing);
        BadAdapter naming what is wrong."""
        if self.adapters is not None:
            return self.adapters.resolve(requested, self.adapter)
        if requested and any(scale != 0.0 for _, scale in requested):
            raise BadAdapter(f"invalid 'lora': model '{self.entry.name}' has no LoRA adapters")
        return ()
