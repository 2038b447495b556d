"""llama-server's own routes, bound to the server's services; each answers errors in its shape."""

from __future__ import annotations

from ..exchange import RouteTable
from ..services import Services
from . import completion, downloads, embedding, input_tokens, lora_adapters, models, props, slots


def add_routes(table: RouteTable, services: Services) -> None:
    for module in (completion, props, embedding, input_tokens, models, downloads, slots, lora_adapters):
        module.add_routes(table, services)
