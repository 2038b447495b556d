"""GET /metrics: the Prometheus text exposition of what ops/metrics.py measures. Served while
the model loads too."""

from __future__ import annotations

from ..ops.prometheus import CONTENT_TYPE
from .exchange import Exchange


def handle(exchange: Exchange) -> None:
    body = exchange.app.metrics.render().encode()
    exchange.writer.send(200, body, content_type=CONTENT_TYPE)
