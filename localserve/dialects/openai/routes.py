"""OpenAI's Chat Completions, Completions and Embeddings routes, bound to the server's services."""

from __future__ import annotations

from functools import partial

from ..exchange import FORM_BODY, RouteTable
from ..services import Services
from . import chat, completions, embeddings, transcriptions


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/v1/chat/completions", "POST", partial(chat.handle, services))
    # llama-server answers Chat Completions without the /v1 too, and clients given the server's bare
    # address post there: DSPy's ollama_chat/ models, the openai SDK (LiteLLM, Aider) with that base URL
    table.add("/chat/completions", "POST", partial(chat.handle, services))
    table.add("/v1/completions", "POST", partial(completions.handle, services))
    table.add("/v1/embeddings", "POST", partial(embeddings.handle, services))
    table.add("/v1/audio/transcriptions", "POST", partial(transcriptions.handle, services), body_type=FORM_BODY)
    table.add("/v1/audio/translations", "POST", partial(transcriptions.handle, services, translate=True),
              body_type=FORM_BODY)
