"""OpenAI's Responses and Conversations routes, bound to the server's services and the runs in progress."""

from __future__ import annotations

from functools import partial

from ..exchange import RouteTable
from ..services import Services
from . import compact_endpoint, conversations, handlers
from .errors import RESPONSES_ERRORS
from .runs import ResponseRuns


def add_routes(table: RouteTable, services: Services, runs: ResponseRuns) -> None:
    responses = handlers.ResponsesServices(services, runs)
    table.add("/v1/responses", "POST", partial(handlers.create, responses), RESPONSES_ERRORS)
    table.add("/v1/responses/compact", "POST", partial(compact_endpoint.compact_conversation, services))
    table.add("/v1/responses/{response_id}", "GET", partial(handlers.retrieve, responses))
    table.add("/v1/responses/{response_id}", "DELETE", partial(handlers.delete, responses))
    table.add("/v1/responses/{response_id}/cancel", "POST", partial(handlers.cancel, responses))
    table.add("/v1/responses/{response_id}/input_items", "GET", partial(handlers.input_items, responses))
    conversation = "/v1/conversations/{conversation_id}"
    table.add("/v1/conversations", "POST", partial(conversations.create, services))
    table.add(conversation, "GET", partial(conversations.retrieve, services))
    table.add(conversation, "POST", partial(conversations.update, services))
    table.add(conversation, "DELETE", partial(conversations.delete, services))
    table.add(conversation + "/items", "POST", partial(conversations.add_items, services))
    table.add(conversation + "/items", "GET", partial(conversations.list_items, services))
    table.add(conversation + "/items/{item_id}", "GET", partial(conversations.get_item, services))
    table.add(conversation + "/items/{item_id}", "DELETE", partial(conversations.delete_item, services))
