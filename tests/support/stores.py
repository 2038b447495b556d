"""Other tools' model stores, built in a temporary home for discovery's tests: Ollama's
(manifests and sha256 blobs), the Hugging Face cache (blobs, snapshot links, refs), LM Studio's
folder and llama.cpp's flat cache. The files are whatever bytes the test gives (tiny GGUFs from
tinymodel.py where a model must load)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

OLLAMA = "application/vnd.ollama.image."


def ollama_store(root: Path, name: tuple[str, str, str, str], model: bytes, *, system: str | None = None,
                 params: dict | None = None, projector: bytes | None = None, template: str | None = None,
                 extra_layers: list[dict] = ()) -> Path:
    """A model in Ollama's store at `root` (what $OLLAMA_MODELS names): name = (host, namespace,
    model, tag). Returns the model blob's path."""
    layers = [_ollama_blob(root, "model", model)]
    if projector is not None:
        layers.append(_ollama_blob(root, "projector", projector))
    if template is not None:
        layers.append(_ollama_blob(root, "template", template.encode()))
    if system is not None:
        layers.append(_ollama_blob(root, "system", system.encode()))
    if params is not None:
        layers.append(_ollama_blob(root, "params", json.dumps(params).encode()))
    layers += list(extra_layers)
    config = _ollama_blob(root, "config", b'{"model_format":"gguf"}')
    config["mediaType"] = "application/vnd.docker.container.image.v1+json"
    manifest = root / "manifests" / Path(*name)
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "mediaType":
                                    "application/vnd.docker.distribution.manifest.v2+json",
                                    "config": config, "layers": layers}))
    return root / "blobs" / ("sha256-" + hashlib.sha256(model).hexdigest())


def _ollama_blob(root: Path, kind: str, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(data)
    return {"mediaType": OLLAMA + kind, "digest": f"sha256:{digest}", "size": len(data)}


def hf_cache(root: Path, repo_id: str, files: dict[str, bytes], commit: str = "a" * 40,
             write_ref: bool = True) -> Path:
    """A repo in the Hugging Face cache at `root` (huggingface_hub's layout). Returns the snapshot."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    for path, data in files.items():
        oid = hashlib.sha256(data).hexdigest()
        blob = repo / "blobs" / oid
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / path
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    if write_ref:
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(commit)
    return snapshot


def lmstudio(models_root: Path, publisher: str, repo: str, files: dict[str, bytes]) -> Path:
    folder = models_root / publisher / repo
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def llamacpp_flat(cache: Path, org: str, repo: str, tag: str, model_file: str, model: bytes,
                  projector: tuple[str, bytes] | None = None) -> Path:
    """llama.cpp's cache before its hf-cache rewrite: `org_repo_file.gguf` and its manifest."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{org}_{repo}_{model_file}"
    path.write_bytes(model)
    manifest = {"ggufFile": {"rfilename": model_file}}
    if projector is not None:
        (cache / f"{org}_{repo}_{projector[0]}").write_bytes(projector[1])
        manifest["mmprojFile"] = {"rfilename": projector[0]}
    (cache / f"manifest={org}={repo}={tag}.json").write_text(json.dumps(manifest))
    return path
