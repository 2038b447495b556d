"""The list endpoints' pages (GET /v1/responses/{id}/input_items, a conversation's items):
the query they take and the page object they answer."""

from __future__ import annotations

from ..fields import invalid

PAGE_LIMIT_DEFAULT = 20
PAGE_LIMIT_MOST = 100


def read_page_query(query: dict[str, str]) -> tuple[str | None, int, str]:
    """`after`, `limit` (1..100, default 20) and `order` (asc|desc, default desc) of a list."""
    raw = query.get("limit", str(PAGE_LIMIT_DEFAULT))
    try:
        limit = int(raw)
    except ValueError:
        raise invalid("limit", f"expected an integer, got '{raw}'") from None
    if not 1 <= limit <= PAGE_LIMIT_MOST:
        raise invalid("limit", f"must be from 1 to {PAGE_LIMIT_MOST}, got {limit}")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid("order", f"must be asc or desc, got '{order}'")
    return query.get("after") or None, limit, order


def list_page(items: list[dict], has_more: bool) -> dict:
    return {"object": "list", "data": items, "first_id": items[0]["id"] if items else None,
            "last_id": items[-1]["id"] if items else None, "has_more": has_more}
