"""What handlers are given besides their exchange: the server's parts they use, typed.

app.py makes one Services and binds each dialect's handlers to it when it adds their routes
(`add_routes(table, services)` in each dialect's routes module): a handler never sees the app.
The models, the store and the signing key exist once the server has loaded (app.load hands
them over before the server says it is ready); until then ready() is a 503. The store and the
signing key are taken through store_for and signing_key_for, in the scope of the request's key.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import ApiError
from ..ops.metrics import ServerMetrics
from ..settings import Settings
from .exchange import Scope
from .pulls import PullBoard
from .signing import scoped_signing_key

if TYPE_CHECKING:        # importing the manager would load llama.cpp on a connection thread
    from ..models.manager import ModelManager
    from ..store.store import Store


@dataclass
class Services:
    settings: Settings
    metrics: ServerMetrics
    ready_flag: threading.Event            # set once the catalogue is read and the start-up models loaded
    created: int                           # when the server started: a model list's `created`
    models: ModelManager | None = None     # the rest: set by loaded(), before ready_flag
    store: Store | None = None             # None with --no-store
    signing_key: bytes = field(default=b"", repr=False)     # thinking signatures (signing.py)
    stopping: threading.Event = field(default_factory=threading.Event)    # set as the drain starts: open-ended streams end
    pulls: PullBoard = field(default_factory=PullBoard)     # POST /models' downloads, for /models/sse

    def loaded(self, models: ModelManager, store: Store | None, signing_key: bytes) -> None:
        self.models, self.store, self.signing_key = models, store, signing_key

    def store_for(self, scope: Scope) -> Store | None:
        """The store as the request's key sees it: its own responses and conversations (None with
        --no-store). Handlers take this, never `store` itself."""
        return self.store.scoped(scope.owner) if self.store is not None else None

    def signing_key_for(self, scope: Scope) -> bytes:
        """The key that signs and seals what this request's key is handed: one of its own, so a
        blob one key was given does not open for another (signing.py)."""
        return scoped_signing_key(self.signing_key, scope.owner)

    def is_ready(self) -> bool:
        return self.ready_flag.is_set()

    def ready(self) -> ModelManager:
        """The models, once the server is ready; a 503 with Retry-After while it starts."""
        if not self.ready_flag.is_set() or self.models is None:
            raise ApiError(503, "the model is still loading", code="model_loading",
                           headers=[("Retry-After", "1")])
        return self.models

    @property
    def prefill_keepalive(self) -> float:
        return self.settings.prefill_keepalive
