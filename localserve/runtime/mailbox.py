"""The runtime's mailbox: a step's events, held until the step ends and then put on their jobs'
queues together. Waking a connection thread mid-step would let it take the GIL between the
runtime's native calls, and would let a client see half a step."""

from __future__ import annotations

from ..generation import ActiveGeneration


class Outbox:
    def __init__(self) -> None:
        self._events: list[tuple[ActiveGeneration, object]] = []

    def put(self, gen: ActiveGeneration, event: object) -> None:
        self._events.append((gen, event))

    def deliver(self) -> None:
        for gen, event in self._events:
            gen.events.put(event)
        self._events.clear()
