"""Models already on disk in other tools' stores, served read-only under the names those tools
give them (on by default; --no-discover turns it off, --discover names or excludes sources).

Sources, in order (a file found by an earlier one is not listed again by a later one, and a
name the configuration or an earlier source took keeps its first owner):
- ollama: Ollama's store, `name:tag` (ollama_store.py);
- hf: the Hugging Face cache, `org/repo:QUANT` (hf_cache.py);
- lmstudio: LM Studio's folder, `publisher/repo:QUANT` (lmstudio.py);
- llamacpp: llama.cpp's own download cache (llamacpp_cache.py).
Nothing here writes: a store that cannot be read is skipped with one log line, and so is
each model whose files are gone or unreadable, or whose name holds characters no client sends.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Callable

from ..catalogue import ModelEntry
from ..hf_layout import shown_path
from . import hf_cache, llamacpp_cache, lmstudio, ollama_store

log = logging.getLogger("localserve.models")

SOURCES: dict[str, Callable[[dict[str, str]], list[ModelEntry]]] = {
    "ollama": ollama_store.discover,
    "hf": hf_cache.discover,
    "lmstudio": lmstudio.discover,
    "llamacpp": llamacpp_cache.discover,
}
ALL = tuple(SOURCES)
REPO_STORES = (hf_cache.SOURCE, lmstudio.SOURCE, llamacpp_cache.SOURCE)    # named as the Hub names repos
NONE = "none"
EXCLUDE = "no-"


def parse_sources(value: str) -> tuple[str, ...]:
    """`--discover`: "all", "none", names ("ollama,hf"), or exclusions ("no-lmstudio"); ValueError
    naming what is wrong."""
    items = [item.strip().lower() for item in value.split(",") if item.strip()]
    if items in ([], [NONE]):
        return ()
    named = [i for i in items if not i.startswith(EXCLUDE) and i != "all"]
    excluded = [i[len(EXCLUDE):] for i in items if i.startswith(EXCLUDE)]
    for name in named + excluded:
        if name not in SOURCES:
            raise ValueError(f"unknown source '{name}'; choose from {', '.join(ALL)} (or all, none, no-NAME)")
    chosen = named if named else list(ALL)
    return tuple(name for name in chosen if name not in excluded)


def sendable(name: str) -> bool:
    """A name a client can send and a log line can hold: no control or formatting characters (a
    newline, an escape, a right-to-left override), which a store's file names may hold."""
    return name.isprintable()


def discover(sources: tuple[str, ...], environ: dict[str, str] | None = None) -> list[ModelEntry]:
    """Every model the named sources hold, each once."""
    env = dict(os.environ if environ is None else environ)
    found: list[ModelEntry] = []
    names: set[str] = set()
    files: set[str] = set()
    for source in sources:
        earlier = set(files)        # a file an earlier source listed (one tag may name a file twice)
        try:
            entries = SOURCES[source](env)
        except OSError as exc:
            log.warning("discovery: %s: cannot read its store: %s; skipped", source, exc)
            continue
        for entry in entries:
            if not sendable(entry.name):
                log.warning("discovery: %s %s: the name holds characters no client sends (control or "
                            "formatting characters); skipped", source, shown_path(entry.name))
                continue
            entry = dataclasses.replace(entry, aliases=tuple(a for a in entry.aliases if sendable(a)))
            real = os.path.realpath(entry.path)
            taken = [n for n in (entry.name, *entry.aliases) if n in names]
            if real in earlier:
                continue
            if entry.name in names:
                log.info("discovery: %s '%s' (%s): the name is taken by an earlier source; skipped",
                         source, entry.name, entry.path)
                continue
            if taken:
                entry = dataclasses.replace(entry, aliases=tuple(a for a in entry.aliases if a not in names))
            names.update((entry.name, *entry.aliases))
            files.add(real)
            found.append(entry)
    if found:
        log.info("discovery: %d model(s) found (%s)", len(found),
                 ", ".join(f"{s} {sum(e.source == s for e in found)}" for s in sources if any(e.source == s for e in found)))
    return found
