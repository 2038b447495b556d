"""GET /api/version and GET / as Ollama answers them.

Clients parse the version as integers and refuse an Ollama older than they support (VS Code
Copilot Chat wants at least 0.6.4): the number given is the Ollama API level this dialect
speaks, not localserve's own version. `GET /` is a liveness probe to Ollama's clients
("Ollama is running"), and the built-in page to a browser (it asks for text/html; a 404
under --no-webui).
"""

from __future__ import annotations

from ...errors import ApiError
from ..exchange import Exchange, Handler

OLLAMA_API_VERSION = "0.12.0"
RUNNING = b"Ollama is running"


def version(exchange: Exchange) -> None:
    exchange.send_json({"version": OLLAMA_API_VERSION})


def root(page: Handler | None, exchange: Exchange) -> None:
    """GET / : the built-in page for a browser (`page`, when there is one), the probe's answer
    for the rest."""
    if "text/html" in (exchange.request.header("accept") or "").lower():
        if page is None:
            raise ApiError(404, "no page at /: the built-in page is off (--no-webui)", code="not_found")
        page(exchange)
        return
    exchange.writer.send(200, RUNNING, content_type="text/plain; charset=utf-8")
