"""Anthropic's Messages routes, bound to the server's services; every path under /v1/messages
answers in Anthropic's error shape (its clients read even a 404 there)."""

from __future__ import annotations

from functools import partial

from .errors import ANTHROPIC_ERRORS
from ..exchange import RouteTable
from ..services import Services
from . import messages


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/v1/messages", "POST", partial(messages.handle_messages, services), ANTHROPIC_ERRORS)
    table.add("/v1/messages/count_tokens", "POST", partial(messages.handle_count_tokens, services), ANTHROPIC_ERRORS)
    table.add_family("/v1/messages", ANTHROPIC_ERRORS)
