"""OpenAI Conversations: a stored, growing list of items that responses read and extend.

POST /v1/conversations (optional items and metadata), GET / POST (metadata) / DELETE
/v1/conversations/{id}, POST and GET /v1/conversations/{id}/items, GET and DELETE
/v1/conversations/{id}/items/{item_id}. Items are normalized as response input items are
(items.py), so a response created with `conversation` reads them back
as context. All of it lives in the store; with storage off these endpoints answer 400.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import ApiError
from ..exchange import Exchange
from ..fields import invalid
from ..services import Services
from .items import read_items
from .paging import list_page, read_page_query
from .request import read_metadata, storage_off

if TYPE_CHECKING:
    from ...store.store import Store


def create(services: Services, exchange: Exchange) -> None:
    store = stored_state(services, exchange)
    body = optional_json(exchange)
    items = read_items(body.get("items"), "items")
    conversation = store.create_conversation(items=items, metadata=read_metadata(body))
    exchange.send_json(conversation)


def retrieve(services: Services, exchange: Exchange) -> None:
    exchange.send_json(existing(services, exchange))


def update(services: Services, exchange: Exchange) -> None:
    store = stored_state(services, exchange)
    body = exchange.json()
    if "metadata" not in body:
        raise invalid("metadata", "required: the metadata to set")
    conversation = store.update_conversation(conversation_id(exchange), read_metadata(body))
    if conversation is None:
        raise not_found(conversation_id(exchange))
    exchange.send_json(conversation)


def delete(services: Services, exchange: Exchange) -> None:
    store = stored_state(services, exchange)
    conv_id = conversation_id(exchange)
    if not store.delete_conversation(conv_id):
        raise not_found(conv_id)
    exchange.send_json({"id": conv_id, "object": "conversation.deleted", "deleted": True})


def add_items(services: Services, exchange: Exchange) -> None:
    store = stored_state(services, exchange)
    items = read_items(exchange.json().get("items"), "items", required=True)
    stored = store.add_items(conversation_id(exchange), items)
    if stored is None:
        raise not_found(conversation_id(exchange))
    exchange.send_json(list_page(stored, False))


def list_items(services: Services, exchange: Exchange) -> None:
    store = stored_state(services, exchange)
    after, limit, order = read_page_query(exchange.request.query)
    page = store.list_items(conversation_id(exchange), after=after, limit=limit, order=order)
    if page is None:
        raise not_found(conversation_id(exchange))
    exchange.send_json(list_page(*page))


def get_item(services: Services, exchange: Exchange) -> None:
    store = stored_state(services, exchange)
    existing(services, exchange)
    item = store.get_item(conversation_id(exchange), exchange.params["item_id"])
    if item is None:
        raise item_not_found(exchange)
    exchange.send_json(item)


def delete_item(services: Services, exchange: Exchange) -> None:
    store = stored_state(services, exchange)
    conversation = existing(services, exchange)
    if not store.delete_item(conversation["id"], exchange.params["item_id"]):
        raise item_not_found(exchange)
    exchange.send_json(conversation)


# ---- helpers ------------------------------------------------------------------------------

def stored_state(services: Services, exchange: Exchange) -> Store:
    """The store as the request's key sees it: its own conversations only."""
    store = services.store_for(exchange.scope)
    if store is None:
        raise storage_off("the Conversations API")
    return store


def optional_json(exchange: Exchange) -> dict:
    return exchange.json() if exchange.has_body() else {}


def conversation_id(exchange: Exchange) -> str:
    return exchange.params["conversation_id"]


def existing(services: Services, exchange: Exchange) -> dict:
    conversation = stored_state(services, exchange).get_conversation(conversation_id(exchange))
    if conversation is None:
        raise not_found(conversation_id(exchange))
    return conversation


def not_found(conv_id: str) -> ApiError:
    return ApiError(404, f"conversation '{conv_id}' not found", param="conversation_id",
                    code="conversation_not_found")


def item_not_found(exchange: Exchange) -> ApiError:
    return ApiError(404, f"item '{exchange.params['item_id']}' not found in conversation "
                         f"'{conversation_id(exchange)}'", param="item_id", code="item_not_found")
