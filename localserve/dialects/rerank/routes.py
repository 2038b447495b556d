"""The rerank routes (Jina's and Cohere's shape, as llama-server serves it), bound to the server's services."""

from __future__ import annotations

from functools import partial

from ..exchange import RouteTable
from ..services import Services
from . import handlers


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/v1/rerank", "POST", partial(handlers.handle, services))
    table.add("/rerank", "POST", partial(handlers.handle, services))
