"""Ollama's routes: every /api/* path its clients use, answering in Ollama's error shape."""

from __future__ import annotations

from ..exchange import Handler, RouteTable
from . import chat, embed, generate, manage, models_info, server_info
from .errors import OLLAMA_ERRORS


def register(router: RouteTable, page: Handler | None) -> None:
    """Add the routes; `page`: the built-in page's handler, which GET / gives a browser."""
    add = router.add
    add("/", "GET", server_info.root_handler(page), OLLAMA_ERRORS)
    add("/api/version", "GET", server_info.version, OLLAMA_ERRORS)
    add("/api/tags", "GET", models_info.list_tags, OLLAMA_ERRORS)
    add("/api/ps", "GET", models_info.list_running, OLLAMA_ERRORS)
    add("/api/show", "POST", models_info.show, OLLAMA_ERRORS)
    add("/api/chat", "POST", chat.handle, OLLAMA_ERRORS)
    add("/api/generate", "POST", generate.handle, OLLAMA_ERRORS)
    add("/api/embed", "POST", embed.embed, OLLAMA_ERRORS)
    add("/api/embeddings", "POST", embed.embeddings, OLLAMA_ERRORS)
    add("/api/pull", "POST", manage.pull, OLLAMA_ERRORS)
    add("/api/push", "POST", manage.refused("push"), OLLAMA_ERRORS)
    add("/api/create", "POST", manage.refused("create"), OLLAMA_ERRORS)
    add("/api/copy", "POST", manage.refused("copy"), OLLAMA_ERRORS)
    add("/api/delete", "DELETE", manage.delete, OLLAMA_ERRORS)
    router.add_family("/api/", OLLAMA_ERRORS)
