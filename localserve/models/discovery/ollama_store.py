"""Ollama's store: `$OLLAMA_MODELS`, else `~/.ollama/models` (and the Linux service's
`/usr/share/ollama/.ollama/models`).

    manifests/<host>/<namespace>/<model>/<tag>    an OCI manifest: a config and layers by digest
    blobs/sha256-<hex>                            each layer's bytes

Layers read (Ollama's server/images.go): `application/vnd.ollama.image.model` the GGUF,
`…image.projector` its projector, `…image.system` the system prompt, `…image.params` the
options (JSON; `num_ctx` becomes the model's context, the rest defaults under each request's
options: defaults.py). `…image.template` is a Go template this server cannot run: the GGUF's
own chat template is used, and a model whose GGUF has none is refused at load (loaded.py). A model with an adapter, or whose model layer is not a GGUF (Ollama's
newer tensor formats), is skipped with a log line. Names as Ollama shows them
(types/model/name.go DisplayShortest): `llama3.2:latest` for registry.ollama.ai/library,
`namespace/model:tag` for its other namespaces, `host/namespace/model:tag` for other hosts
(`hf.co/org/repo:Q4_K_M`).
"""

from __future__ import annotations

import logging
import os
import re
import stat
from pathlib import Path

import orjson

from .. import hf_layout
from ..catalogue import ModelEntry
from ..defaults import ModelDefaults
from ..hf_layout import WalkRefused, shown_path, within

log = logging.getLogger("localserve.models")

SOURCE = "ollama"
DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
SERVICE_STORE = Path("/usr/share/ollama/.ollama/models")
MEDIA = "application/vnd.ollama.image."
LAYOUT = ("host", "namespace", "model", "tag")     # manifests/<host>/<namespace>/<model>/<tag>
DIGEST = re.compile(r"^sha256[:-]([0-9a-fA-F]{64})\Z")
MAX_MANIFEST_BYTES = 1 << 20       # a manifest lists a few layers: a few kB
MAX_TEXT_LAYER_BYTES = 1 << 20     # a system prompt or a params object
GGUF_MAGIC = b"GGUF"
# Ollama's own rules for a name's parts (types/model/name.go): a folder named otherwise (a
# newline, an escape sequence) is no model Ollama made, and would be a name in every log line
HOST_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,349}\Z")
NAME_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}\Z")


def stores(environ: dict[str, str]) -> list[Path]:
    if environ.get("OLLAMA_MODELS"):
        return [Path(os.path.expanduser(environ["OLLAMA_MODELS"]))]
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    return [home / ".ollama" / "models", SERVICE_STORE]


def discover(environ: dict[str, str]) -> list[ModelEntry]:
    entries: list[ModelEntry] = []
    for store in stores(environ):
        if not (store / "manifests").is_dir():
            continue
        try:
            paths = manifest_paths(store)
        except WalkRefused as exc:
            log.warning("discovery: %s: %s; skipped", SOURCE, exc)
            continue
        for path in paths:
            entry = read_model(store, path)
            if entry is not None:
                entries.append(entry)
    return entries


def manifest_paths(store: Path) -> list[Path]:
    """Every manifests/<host>/<namespace>/<model>/<tag> under the store, a level at a time (the
    layout is four deep: MAX_WALK_DEPTH is never reached). A folder that leads outside the store
    (a link to /, to another tree) is none Ollama made: skipped with one line, never listed.
    Past MAX_WALK_FILES entries in all the store holds more than Ollama's does (a huge tree
    linked inside it): WalkRefused, none of it read."""
    level = [store / "manifests"]
    seen = 0
    for _ in LAYOUT:
        below: list[Path] = []
        for folder in level:
            if not within(store, folder):
                log.warning("discovery: %s %s leads outside %s (a linked folder); skipped", SOURCE,
                            shown_path(folder), store)
                continue
            try:
                with os.scandir(folder) as listing:
                    for item in listing:
                        seen += 1
                        if seen > hf_layout.MAX_WALK_FILES:
                            raise WalkRefused(f"{store / 'manifests'} holds more than a model store does (over "
                                              f"{hf_layout.MAX_WALK_FILES} entries); not read")
                        below.append(Path(item.path))
            except WalkRefused:
                raise
            except NotADirectoryError:
                continue            # a file where a folder of the layout should be
            except OSError as exc:
                log.warning("discovery: %s %s: cannot read it: %s; skipped", SOURCE, shown_path(folder),
                            exc.strerror or exc)
        level = sorted(below)
    return level


def display_name(host: str, namespace: str, model: str, tag: str) -> str:
    if host.lower() != DEFAULT_HOST:
        return f"{host}/{namespace}/{model}:{tag}"
    if namespace.lower() != DEFAULT_NAMESPACE:
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


class Skip(Exception):
    """Why a manifest gives no model (logged once)."""


def read_model(store: Path, manifest: Path) -> ModelEntry | None:
    if not manifest.is_file():
        return None
    host, namespace, model, tag = manifest.relative_to(store / "manifests").parts
    if not HOST_PART.match(host) or not all(NAME_PART.match(part) for part in (namespace, model, tag)):
        log.warning("discovery: %s: %s is not a name Ollama gives; skipped", SOURCE,
                    shown_path("/".join((host, namespace, model, tag))))
        return None
    name = display_name(host, namespace, model, tag)
    try:
        layers = read_layers(store, manifest)
        return entry_of(store, name, layers)
    except Skip as exc:
        log.warning("discovery: %s '%s': %s; skipped", SOURCE, name, exc)
    except OSError as exc:
        log.warning("discovery: %s '%s': cannot read %s: %s; skipped", SOURCE, name, exc.filename or manifest,
                    exc.strerror or exc)
    return None


def read_layers(store: Path, manifest: Path) -> dict[str, list[Path]]:
    """{media type less Ollama's prefix: [blob paths]}."""
    data = read_small(manifest, MAX_MANIFEST_BYTES, "its manifest")
    try:
        body = orjson.loads(data)
        layers = body["layers"]
        if not isinstance(layers, list):
            raise TypeError("layers is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        raise Skip(f"its manifest {manifest} is not Ollama's ({exc})") from None
    found: dict[str, list[Path]] = {}
    for layer in layers:
        media = layer.get("mediaType") if isinstance(layer, dict) else None
        digest = DIGEST.match(str(layer.get("digest"))) if isinstance(layer, dict) else None
        if not isinstance(media, str) or not media.startswith(MEDIA) or digest is None:
            continue
        found.setdefault(media[len(MEDIA):], []).append(store / "blobs" / f"sha256-{digest.group(1).lower()}")
    return found


def entry_of(store: Path, name: str, layers: dict[str, list[Path]]) -> ModelEntry:
    if "model" not in layers:
        raise Skip("it has no GGUF model layer (a format only Ollama's own engine runs)")
    if "adapter" in layers:
        raise Skip("it applies an adapter (LoRA), which this server does not")
    path = regular(layers["model"][0], "model")
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise Skip(f"its model layer {path} is not a GGUF file")
    projector = layers.get("projector", [None])[0]
    if projector is not None and not (os.access(projector, os.R_OK) and regular(projector, "projector")):
        raise Skip(f"its projector layer {projector} is missing or unreadable")
    system = read_text(layers["system"][-1], "system") if "system" in layers else None
    template = read_text(layers["template"][-1], "template") if "template" in layers else None
    params = read_params(layers["params"][-1]) if "params" in layers else {}
    overrides: tuple[tuple[str, object], ...] = (("mmproj", str(projector) if projector else None),)
    num_ctx = params.pop("num_ctx", None)
    if isinstance(num_ctx, int) and not isinstance(num_ctx, bool) and num_ctx > 0:
        overrides += (("ctx_size", num_ctx),)
    defaults = ModelDefaults(system, tuple(sorted(params.items())), template) if system or params or template \
        else None
    return ModelEntry(name, str(path), (), overrides, SOURCE, str(store), defaults)


def regular(path: Path, layer: str) -> Path:
    """The layer's blob, once it is a regular file: a FIFO or a device there would block a read
    (or never end one) and hang the server's start."""
    if not stat.S_ISREG(path.stat().st_mode):
        raise Skip(f"its {layer} layer {path} is not a regular file")
    return path


def read_small(path: Path, limit: int, what: str) -> bytes:
    """A file's bytes, at most `limit`: the size a stat tells is no bound (a /proc file says 0
    and reads on for gigabytes)."""
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Skip(f"{what} {path} is too large")
    return data


def read_text(path: Path, layer: str) -> str:
    data = read_small(regular(path, layer), MAX_TEXT_LAYER_BYTES, f"its {layer} layer")
    return data.decode("utf-8", errors="replace")


def read_params(path: Path) -> dict:
    data = read_small(regular(path, "params"), MAX_TEXT_LAYER_BYTES, "its params layer")
    try:
        params = orjson.loads(data)
    except ValueError as exc:
        raise Skip(f"its params layer {path} is not JSON ({exc})") from None
    if not isinstance(params, dict):
        raise Skip(f"its params layer {path} is not a JSON object")
    return params
