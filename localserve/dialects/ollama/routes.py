"""Ollama's routes: every /api/* path its clients use, bound to the server's services and
answering in Ollama's error shape."""

from __future__ import annotations

from functools import partial

from ..exchange import Handler, RouteTable
from ..services import Services
from . import chat, embed, generate, manage, models_info, server_info
from .errors import OLLAMA_ERRORS


def add_routes(table: RouteTable, services: Services, page: Handler | None) -> None:
    """`page`: the built-in page's handler, which GET / gives a browser (None: no page)."""
    def add(path: str, method: str, handler) -> None:
        table.add(path, method, partial(handler, services), OLLAMA_ERRORS)

    table.add("/", "GET", partial(server_info.root, page), OLLAMA_ERRORS)
    table.add("/api/version", "GET", server_info.version, OLLAMA_ERRORS)
    add("/api/tags", "GET", models_info.list_tags)
    add("/api/ps", "GET", models_info.list_running)
    add("/api/show", "POST", models_info.show)
    add("/api/chat", "POST", chat.handle)
    add("/api/generate", "POST", generate.handle)
    add("/api/embed", "POST", embed.embed)
    add("/api/embeddings", "POST", embed.embeddings)
    add("/api/pull", "POST", manage.pull)
    for action in ("push", "create", "copy"):
        table.add(f"/api/{action}", "POST", partial(manage.refused, action, services), OLLAMA_ERRORS)
    add("/api/delete", "DELETE", manage.delete)
    table.add_family("/api/", OLLAMA_ERRORS)
