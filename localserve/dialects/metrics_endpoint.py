"""GET /metrics: the Prometheus text exposition of what ops/metrics.py measures. Served while
the model loads too."""

from __future__ import annotations

from functools import partial

from ..ops.prometheus import CONTENT_TYPE
from .exchange import Exchange, RouteTable
from .services import Services


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/metrics", "GET", partial(handle, services))


def handle(services: Services, exchange: Exchange) -> None:
    body = services.metrics.render().encode()
    exchange.writer.send(200, body, content_type=CONTENT_TYPE)
