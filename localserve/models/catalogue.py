"""The models this server can serve: their names, files and settings.

Three sources, read once at start:
- `--model PATH` (named by --model-id, else the file's stem);
- `--models-dir DIR`: every *.gguf in it, named by its stem; a model split in parts
  (NAME-00001-of-00003.gguf ...) is one model, NAME, loaded from its first part; a file
  named mmproj* is a vision projector, paired with the model it is named after (pairing.py);
  one whose header says it is a LoRA adapter goes to the base model beside it (adapter_files.py);
- `[models.NAME]` tables in the config file: `path`, `aliases` and per-model settings
  (cli/flags.py checks their types; here they become Settings overrides).
`--model PATH` alone (or the demo model, with none of them) is today's server: one model,
and whatever name a request gives is that model. Each model's LoRA adapters (`--lora` for
--model, `lora` in its table, or found beside it) also name it: `base+adapter` is the base
model running that adapter (exact, adapter_named).
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from ..parsing.family_detection import FAMILY_NAMES
from ..settings import DEFAULT_KEEP_ALIVE, Settings
from .adapter_files import ADAPTER_MARK, AdapterFile, AdapterSpecError, adapter_files, is_adapter, pair_adapters
from .defaults import ModelDefaults
from .pairing import is_projector, pair_projectors

SPLIT_PART = re.compile(r"^(?P<name>.+)-(?P<part>\d{5})-of-(?P<parts>\d{5})$")

# Settings a [models.NAME] table may set for its model alone (attribute names)
PER_MODEL = ("ctx_size", "slots", "n_gpu_layers", "threads", "chat_template_file", "tool_syntax", "cache_ram",
             "batch_size", "keep_alive", "pooling", "embeddings_only", "max_embedding_inputs",
             "speculative", "draft_model", "draft_max", "no_prefix_sharing", "kv_unified", "mmproj", "lora")


LATEST_TAG = ":latest"     # Ollama's tag for a name given without one


class CatalogueError(Exception):
    """The catalogue cannot be read (a usage error: one line, exit status 2)."""


@dataclass(frozen=True)
class ModelEntry:
    name: str
    path: str
    aliases: tuple[str, ...] = ()
    overrides: tuple[tuple[str, object], ...] = ()   # (Settings attribute, value) this model sets itself
    source: str = "model"                            # "model", "models-dir", "config", "demo", or where
                                                     # discovery found it ("ollama", "hf-cache", ...), "pulled"
    origin: str = ""                                 # the store it was found in (discovery), or ""
    defaults: ModelDefaults | None = None            # its stored system prompt and options (Ollama's)

    def settings(self, base: Settings) -> Settings:
        """The server's settings with this model's own on top."""
        return dataclasses.replace(base, **dict(self.overrides))

    def own(self, name: str) -> bool:
        return any(key == name for key, _ in self.overrides)

    def adapter_files(self) -> list[AdapterFile]:
        """Its LoRA adapters: its own `lora` setting (--lora is --model's alone, not every model's)."""
        return adapter_files(dict(self.overrides).get("lora", ()))


class Catalogue:
    """`found`: models discovered in other tools' stores (discovery/), after the configured ones;
    with `--model` alone the server stays today's one-model server (any name not found is that
    model), and lists the found ones beside it."""

    def __init__(self, entries: list[ModelEntry], any_name: bool = False, found: list[ModelEntry] = ()):
        self.any_name = any_name and len(entries) == 1     # today's one-model server
        self.entries: dict[str, ModelEntry] = {}
        self._names: dict[str, ModelEntry] = {}
        self._folded: dict[str, ModelEntry | None] = {}    # case-folded names (Ollama's are case-blind)
        self._adapters: dict[str, tuple[ModelEntry, str]] = {}    # base+adapter: the base, the adapter's name
        for entry in entries:
            self._add(entry)
        for entry in found:
            self.add(entry)

    def _add(self, entry: ModelEntry) -> None:
        for name in (entry.name, *entry.aliases):
            other = self._names.get(name)
            if other is not None and other is not entry:
                raise CatalogueError(f"model name '{name}' is used by both {other.path} and {entry.path}")
        self.entries[entry.name] = entry
        for name in (entry.name, *entry.aliases):
            self._names[name] = entry
            folded = name.casefold()
            self._folded[folded] = entry if self._folded.get(folded, entry) is entry else None
        for adapter in entry.adapter_files():
            self._adapters[f"{entry.name}{ADAPTER_MARK}{adapter.name}"] = (entry, adapter.name)

    def add(self, entry: ModelEntry, taking: tuple[str, ...] = ()) -> list[ModelEntry] | None:
        """A model found or pulled while the catalogue stands: None (and nothing added) when one
        of its names is taken already, except the aliases in `taking`, which their holders give
        up to it (a repo's bare name passing to its default quant, pulled later: pulls.py). The
        holders, as they stand now without those names."""
        if not self.can_add(entry, taking):
            return None
        held = {name: self._names[name] for name in (entry.name, *entry.aliases) if name in self._names}
        holders = {id(h): h for h in held.values()}.values()
        changed = [self._give_up(holder, entry, set(held)) for holder in holders]
        self._add(entry)
        return changed

    def can_add(self, entry: ModelEntry, taking: tuple[str, ...] = ()) -> bool:
        """Whether add() takes the entry: none of its names is held, but the aliases in `taking`."""
        held = [name for name in (entry.name, *entry.aliases) if name in self._names]
        return entry.name not in held and all(name in taking for name in held)

    def _give_up(self, holder: ModelEntry, to: ModelEntry, names: set[str]) -> ModelEntry:
        """`holder` without its aliases in `names`, each of those now `to`'s (set before `to` joins:
        a connection thread finds one model or the other by the name, never none)."""
        kept = dataclasses.replace(holder, aliases=tuple(a for a in holder.aliases if a not in names))
        self.entries[holder.name] = kept
        for name in (holder.name, *holder.aliases):
            folded = name.casefold()
            now = to if name in names else kept
            self._names[name] = now
            if self._folded.get(folded) is holder:
                self._folded[folded] = now
        for name, (base, adapter) in list(self._adapters.items()):
            if base is holder:
                self._adapters[name] = (kept, adapter)
        return kept

    def __iter__(self) -> Iterator[ModelEntry]:
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)

    def names(self) -> list[str]:
        return list(self.entries)

    def exact(self, name: str) -> ModelEntry | None:
        """The entry this name or alias is, whatever any_name says (GET /v1/models/{model}).
        Ollama's clients tag every name: `x:latest` is `x` unless a name says otherwise (they send
        the tagged name to the OpenAI endpoints too: Copilot Chat chats there)."""
        entry = self._names.get(name)
        if entry is None and name.endswith(LATEST_TAG):
            entry = self._names.get(name[:-len(LATEST_TAG)])
        if entry is None and ":" not in name.rsplit("/", 1)[-1]:      # Ollama's store names `x` as `x:latest`
            entry = self._names.get(name + LATEST_TAG)
        if entry is None:
            entry = self._folded.get(name.casefold())
        if entry is None and ADAPTER_MARK in name:
            entry = self._adapters.get(name.removesuffix(LATEST_TAG), (None, ""))[0]
        return entry

    def adapter_named(self, name: object) -> str | None:
        """The LoRA adapter a model name picks (`base+adapter`, Ollama's `:latest` or not); None for
        a name that picks none."""
        if not isinstance(name, str) or ADAPTER_MARK not in name or name in self._names:
            return None
        found = self._adapters.get(name.removesuffix(LATEST_TAG))
        return found[1] if found is not None else None

    def adapter_names(self, entry: ModelEntry) -> list[str]:
        """The model names its adapters give `entry` (base+adapter), for the model lists."""
        return [name for name, (base, _) in self._adapters.items() if base is entry]

    def find(self, name: str | None) -> ModelEntry | None:
        """The entry a request's `model` names; None for a name there is not. With one model
        and no name, that model; with one model served as today's server, any name."""
        entry = self.exact(name) if name else None
        if entry is None and (self.any_name or (not name and len(self.entries) == 1)):
            return next(iter(self.entries.values()))
        return entry


def read_catalogue(settings: Settings, demo_path: Callable[[], str], found: list[ModelEntry] = (),
                   pulled: list[ModelEntry] = ()) -> Catalogue:
    """The configured models (--model, `pulled` by --hf, tables, --models-dir), then `found`
    (discovery's). With nothing configured and something found, the found models are served
    and the demo model is not fetched. --model or one --hf alone is the one-model server."""
    if settings.mmproj and not settings.model and (settings.models or settings.models_dir):
        raise CatalogueError("--mmproj is --model's vision projector; with --models-dir or [models.NAME] tables, "
                             "give each model its own (mmproj in its table, or an mmproj*.gguf named after it)")
    if settings.lora and not settings.model and (settings.models or settings.models_dir):
        raise CatalogueError("--lora is --model's LoRA adapter; with --models-dir or [models.NAME] tables, give "
                             "each model its own (lora in its table, or an adapter GGUF beside it)")
    own_lora = (("lora", tuple(settings.lora)),) if settings.lora else ()
    entries: list[ModelEntry] = []
    if settings.model:
        entries.append(ModelEntry(settings.model_id or Path(settings.model).stem, settings.model, overrides=own_lora))
    entries += [e for e in pulled if e.name not in {x.name for x in entries}]
    for name, table in settings.models.items():
        entries.append(config_entry(name, table))
    if settings.models_dir:
        taken = {e.name for e in entries} | {a for e in entries for a in e.aliases}
        known = {os.path.realpath(e.path) for e in entries}
        entries += [e for e in scan_dir(settings.models_dir)
                    if e.name not in taken and os.path.realpath(e.path) not in known]
        if not entries:
            raise CatalogueError(f"--models-dir {settings.models_dir} holds no *.gguf files")
    if not entries and found:
        return Catalogue([], found=list(found))
    if not entries:
        path = demo_path()
        return Catalogue([ModelEntry(settings.model_id or Path(path).stem, path, overrides=own_lora, source="demo")],
                         any_name=True)
    for entry in entries:
        try:
            entry.adapter_files()
        except AdapterSpecError as exc:
            raise CatalogueError(f"model '{entry.name}': {exc}") from None
        syntax = dict(entry.overrides).get("tool_syntax", settings.tool_syntax)
        if syntax and syntax not in FAMILY_NAMES:
            raise CatalogueError(f"model '{entry.name}': unknown tool-syntax '{syntax}'; choose from "
                                 f"{', '.join(sorted(FAMILY_NAMES))}")
    alone = len(entries) == 1 and bool(settings.model or pulled) and not settings.models and not settings.models_dir
    if alone and settings.keep_alive is None:     # --model's stays for good; the found ones go idle as usual
        found = [dataclasses.replace(e, overrides=e.overrides + (("keep_alive", DEFAULT_KEEP_ALIVE),)) for e in found]
    return Catalogue(entries, any_name=alone, found=list(found))


def config_entry(name: str, table: dict) -> ModelEntry:
    path = table.get("path")
    if not isinstance(path, str) or not path:
        raise CatalogueError(f"[models.{name}] needs a path")
    overrides = tuple((key, table[key]) for key in PER_MODEL if key in table)
    if "mmproj" in table:
        overrides = tuple((k, os.path.expanduser(v) if k == "mmproj" else v) for k, v in overrides)
    else:       # --mmproj is --model's projector, not every model's
        overrides += (("mmproj", None),)
    if "lora" in table:            # a tuple: an entry is a frozen value
        overrides = tuple((k, tuple(v) if k == "lora" else v) for k, v in overrides)
    else:                           # likewise --lora
        overrides += (("lora", ()),)
    return ModelEntry(name, os.path.expanduser(path), tuple(table.get("aliases") or ()), overrides, "config")


def scan_dir(directory: str) -> list[ModelEntry]:
    """Every model in a directory, by name; a split model once, from its first part."""
    try:
        files = sorted(f for f in os.listdir(directory) if f.endswith(".gguf"))
    except OSError as exc:
        raise CatalogueError(f"cannot read --models-dir {directory}: {exc.strerror}") from None
    models: dict[str, str] = {}
    projectors = [os.path.join(directory, f) for f in files if is_projector(f)]
    adapters = [os.path.join(directory, f) for f in files
                if not is_projector(f) and is_adapter(os.path.join(directory, f))]
    for filename in files:
        if is_projector(filename) or os.path.join(directory, filename) in adapters:
            continue
        stem = filename[:-len(".gguf")]
        split = SPLIT_PART.match(stem)
        if split is not None:
            if int(split["part"]) != 1:
                continue        # llama.cpp finds the other parts from the first
            stem = split["name"]
        models[stem] = os.path.join(directory, filename)
    paired = pair_projectors(models, projectors)
    lora = pair_adapters(models, adapters)
    return [ModelEntry(stem, path, overrides=(("mmproj", paired.get(stem)), ("lora", tuple(lora.get(stem, ())))),
                       source="models-dir")
            for stem, path in models.items()]
