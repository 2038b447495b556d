"""The catalogue's models and their records, as a request finds them by name.

Every model in the catalogue has a Record (record.py), the manager's (manager.py) to move between
states; a model pulled while the server runs joins both (add). Connection threads find and list
without a lock, so an add puts the record in before the catalogue names its entry (a name found
has its record), and the records are read as a copy taken at once (a dict changed while a loop
walks it ends the loop). Adds take turns under a lock of their own.
"""

from __future__ import annotations

import threading
from typing import Any

from ..errors import shown
from .catalogue import Catalogue, ModelEntry
from .errors import BadModelRequest, UnknownModel
from .keep_alive import KeepAlive
from .record import Record
from .state_feed import StateFeed


class Roster:
    def __init__(self, catalogue: Catalogue, keep_alive: KeepAlive, feed: StateFeed):
        self.catalogue = catalogue
        self.keep_alive = keep_alive
        self.feed = feed
        self.records = {e.name: Record(e, keep_alive.of_entry(e), feed) for e in catalogue}
        self._adding = threading.Lock()

    def find(self, name: Any) -> Record:
        """The record a request's `model` names; UnknownModel naming the models there are."""
        if name is not None and not isinstance(name, str):
            raise BadModelRequest("model: expected a string naming one of the models", param="model")
        entry = self.catalogue.find(name)
        if entry is None:
            if not name:
                raise BadModelRequest(f"model is required: this server serves {self.names()}", param="model",
                                      code="missing_model")
            raise UnknownModel(f"model '{shown(name)}' does not exist; this server serves {self.names()}")
        return self.records[entry.name]

    def exact(self, name: str) -> Record | None:
        """The record this name or alias is (Catalogue.exact), whatever the one-model server says."""
        entry = self.catalogue.exact(name)
        return None if entry is None else self.records[entry.name]

    def add(self, entry: ModelEntry, taking: tuple[str, ...] = ()) -> Record | None:
        """A model pulled while the server runs joins the catalogue (None: one of its names is
        taken), with the aliases in `taking` from the models that hold them (Catalogue.add)."""
        with self._adding:
            if not self.catalogue.can_add(entry, taking):
                return None
            record = self.records[entry.name] = Record(entry, self.keep_alive.of_entry(entry, added=True), self.feed)
            for other in self.catalogue.add(entry, taking):
                self.records[other.name].entry = other
            return record

    def all(self) -> list[Record]:
        """The records as they stand (a copy, taken at once: a pull may add one while it is read)."""
        return list(self.records.values())

    def names(self) -> str:
        """The models' names, quoted, for an error that says which there are."""
        return ", ".join(f"'{name}'" for name in self.catalogue.names())
