"""Discovery of models in other tools' stores, on layouts built in a temporary home: each
store's names, projectors paired, split models once, stored defaults, what is skipped."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from stores import hf_cache, llamacpp_flat, lmstudio, ollama_store  # noqa: E402

from localserve.models import hf_layout  # noqa: E402
from localserve.models.discovery import sources as discovery  # noqa: E402
from localserve.models.catalogue import Catalogue, read_catalogue  # noqa: E402
from localserve.settings import Settings  # noqa: E402

GGUF = b"GGUF" + b"\0" * 60


def env_for(home: Path, **extra: str) -> dict[str, str]:
    return {"HOME": str(home), **extra}


def names(entries) -> dict[str, object]:
    return {e.name: e for e in entries}


def test_ollama_names_defaults_and_projector(tmp_path):
    store = tmp_path / "ollama"
    blob = ollama_store(store, ("registry.ollama.ai", "library", "llama3.2", "latest"), GGUF + b"a",
                        system="You are terse.", params={"temperature": 0.2, "stop": ["<|eot|>"], "num_ctx": 4096},
                        projector=GGUF + b"p", template="{{ .Prompt }}")
    ollama_store(store, ("registry.ollama.ai", "alice", "coder", "7b"), GGUF + b"b")
    ollama_store(store, ("hf.co", "org", "repo-GGUF", "Q4_K_M"), GGUF + b"c")
    found = names(discovery.discover(("ollama",), env_for(tmp_path, OLLAMA_MODELS=str(store))))
    assert set(found) == {"llama3.2:latest", "alice/coder:7b", "hf.co/org/repo-GGUF:Q4_K_M"}
    llama = found["llama3.2:latest"]
    assert llama.path == str(blob) and llama.source == "ollama" and llama.origin == str(store)
    overrides = dict(llama.overrides)
    assert overrides["ctx_size"] == 4096 and overrides["mmproj"].startswith(str(store / "blobs" / "sha256-"))
    assert llama.defaults.system == "You are terse."
    assert dict(llama.defaults.options) == {"temperature": 0.2, "stop": ["<|eot|>"]}
    assert found["alice/coder:7b"].defaults is None


def test_ollama_skips_what_it_cannot_serve(tmp_path, caplog):
    store = tmp_path / "ollama"
    ollama_store(store, ("registry.ollama.ai", "library", "gone", "latest"), GGUF + b"g")
    (store / "blobs" / ("sha256-" + __import__("hashlib").sha256(GGUF + b"g").hexdigest())).unlink()
    ollama_store(store, ("registry.ollama.ai", "library", "notgguf", "latest"), b"safetensors...")
    ollama_store(store, ("registry.ollama.ai", "library", "lora", "latest"), GGUF + b"l",
                 extra_layers=[{"mediaType": "application/vnd.ollama.image.adapter", "digest": "sha256:" + "0" * 64}])
    (store / "manifests" / "registry.ollama.ai" / "library" / "broken").mkdir(parents=True)
    (store / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest").write_text("{not json")
    ollama_store(store, ("registry.ollama.ai", "library", "ok", "latest"), GGUF + b"o")
    with caplog.at_level(logging.WARNING, "localserve.models"):
        found = names(discovery.discover(("ollama",), env_for(tmp_path, OLLAMA_MODELS=str(store))))
    assert set(found) == {"ok:latest"}
    lines = [r.getMessage() for r in caplog.records]
    for name in ("gone:latest", "notgguf:latest", "lora:latest", "broken:latest"):
        assert sum(name in line for line in lines) == 1, lines


def test_ollama_folders_linked_outside_are_skipped_and_the_walk_is_bounded(tmp_path, caplog, monkeypatch):
    """The manifests tree is read a level at a time: a manifests, host, namespace or model folder
    that is a link out of the store (to /) one line each and never listed; one linked inside
    the store read; past MAX_WALK_FILES entries in all the store is not read (one line)."""
    store = tmp_path / "ollama"
    library = store / "manifests" / "registry.ollama.ai" / "library"
    ollama_store(store, ("registry.ollama.ai", "library", "kept", "latest"), GGUF + b"k")
    (store / "manifests" / "everything").symlink_to("/", target_is_directory=True)          # a host folder
    (library.parent / "root").symlink_to("/", target_is_directory=True)                     # a namespace
    (library / "etc").symlink_to("/etc", target_is_directory=True)                          # a model
    (library / "twin").symlink_to(library / "kept", target_is_directory=True)              # inside: read
    listed = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: listed.append(str(path)) or real_scandir(path))
    with caplog.at_level(logging.WARNING, "localserve.models"):
        found = names(discovery.discover(("ollama",), env_for(tmp_path, OLLAMA_MODELS=str(store))))
    assert set(found) == {"kept:latest", "twin:latest"}
    said = [r.getMessage() for r in caplog.records]
    for folder in ("manifests/everything", "registry.ollama.ai/root", "library/etc"):
        assert sum(folder in m and "outside" in m for m in said) == 1, (folder, said)
    assert not any(os.path.realpath(path) in ("/", "/etc") for path in listed), listed

    root = tmp_path / "linked"
    (root / "manifests").parent.mkdir()
    (root / "manifests").symlink_to("/", target_is_directory=True)        # the whole manifests folder
    caplog.clear()
    with caplog.at_level(logging.WARNING, "localserve.models"):
        assert discovery.discover(("ollama",), env_for(tmp_path, OLLAMA_MODELS=str(root))) == []
    assert len(caplog.records) == 1 and "outside" in caplog.records[0].getMessage()

    for i in range(30):
        (library / f"m{i}").mkdir()
    monkeypatch.setattr(hf_layout, "MAX_WALK_FILES", 20)
    caplog.clear()
    with caplog.at_level(logging.WARNING, "localserve.models"):
        assert discovery.discover(("ollama",), env_for(tmp_path, OLLAMA_MODELS=str(store))) == []
    said = [r.getMessage() for r in caplog.records if "over 20 entries" in r.getMessage()]
    assert len(said) == 1 and str(store / "manifests") in said[0], said


def test_hf_cache_quants_splits_and_projector(tmp_path):
    root = tmp_path / ".cache" / "huggingface" / "hub"
    snapshot = hf_cache(root, "org/Tiny-GGUF", {
        "tiny-Q4_K_M.gguf": GGUF + b"1", "tiny-Q8_0.gguf": GGUF + b"2",
        "BF16/tiny-BF16-00001-of-00002.gguf": GGUF + b"3", "BF16/tiny-BF16-00002-of-00002.gguf": GGUF + b"4",
        "mmproj-tiny-F16.gguf": GGUF + b"5", "README.md": b"# tiny"})
    found = names(discovery.discover(("hf",), env_for(tmp_path)))
    assert set(found) == {"org/Tiny-GGUF:Q4_K_M", "org/Tiny-GGUF:Q8_0", "org/Tiny-GGUF:BF16"}
    q4 = found["org/Tiny-GGUF:Q4_K_M"]
    assert q4.path == str(snapshot / "tiny-Q4_K_M.gguf") and q4.source == "hf-cache"
    assert "hf.co/org/Tiny-GGUF:Q4_K_M" in q4.aliases and "org/Tiny-GGUF" in q4.aliases     # the default quant
    assert dict(q4.overrides)["mmproj"] == str(snapshot / "mmproj-tiny-F16.gguf")
    assert found["org/Tiny-GGUF:BF16"].path.endswith("BF16/tiny-BF16-00001-of-00002.gguf")
    assert dict(found["org/Tiny-GGUF:BF16"].overrides)["mmproj"] == str(snapshot / "mmproj-tiny-F16.gguf")


def test_hf_cache_env_and_missing_part(tmp_path, caplog):
    root = tmp_path / "hub"
    snapshot = hf_cache(root, "org/Split-GGUF", {"s-Q4_0-00001-of-00002.gguf": GGUF, "s-Q4_0-00002-of-00002.gguf": GGUF,
                                                 "w-Q8_0.gguf": GGUF + b"w"}, write_ref=False)
    os.unlink(snapshot / "s-Q4_0-00002-of-00002.gguf")
    os.symlink("../../blobs/" + "f" * 64, snapshot / "s-Q4_0-00002-of-00002.gguf")     # a dangling link
    with caplog.at_level(logging.WARNING, "localserve.models"):
        found = names(discovery.discover(("hf",), env_for(tmp_path, HF_HUB_CACHE=str(root))))
    assert set(found) == {"org/Split-GGUF:Q8_0"}      # no refs/main: the newest snapshot
    assert sum("s-Q4_0-00002-of-00002.gguf" in r.getMessage() for r in caplog.records) == 1


def linked_snapshot(root: Path, repo_id: str, target: Path, commit: str = "b" * 40) -> None:
    repo = root / ("models--" + repo_id.replace("/", "--"))
    (repo / "snapshots").mkdir(parents=True)
    (repo / "snapshots" / commit).symlink_to(target, target_is_directory=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)


def test_a_linked_snapshot_folder_is_followed_only_inside_the_cache(tmp_path, caplog):
    """A snapshot folder is the Hub's files; one that is a link elsewhere (to /, to a huge tree,
    to a folder of someone else's GGUFs) is no snapshot the cache made: skipped, with one line.
    One linked to another snapshot of the cache is read."""
    root = tmp_path / "hub"
    first = hf_cache(root, "org/In-GGUF", {"in-Q4_K_M.gguf": GGUF})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "out-Q8_0.gguf").write_bytes(GGUF)
    linked_snapshot(root, "org/Out-GGUF", elsewhere)
    linked_snapshot(root, "org/Root-GGUF", Path("/"))
    linked_snapshot(root, "org/Twin-GGUF", first)
    with caplog.at_level(logging.WARNING, "localserve.models"):
        found = names(discovery.discover(("hf", "lmstudio"), env_for(tmp_path, HF_HUB_CACHE=str(root))))
    assert set(found) == {"org/In-GGUF:Q4_K_M", "org/Twin-GGUF:Q4_K_M"}
    said = [r.getMessage() for r in caplog.records]
    assert sum("org/Out-GGUF" in m and "outside" in m for m in said) == 1
    assert sum("org/Root-GGUF" in m and "outside" in m for m in said) == 1


def test_lmstudio_folders_linked_outside_are_skipped_and_walks_are_bounded(tmp_path, caplog, monkeypatch):
    models = tmp_path / ".lmstudio" / "models"
    lmstudio(models, "pub", "Kept-GGUF", {"kept-Q4_K_M.gguf": GGUF})
    (models / "pub" / "Root-GGUF").symlink_to("/", target_is_directory=True)
    (models / "everything").symlink_to("/", target_is_directory=True)    # a publisher folder
    deep = lmstudio(models, "pub", "Deep-GGUF", {})
    (deep / Path(*["d"] * 12)).mkdir(parents=True)
    (deep / Path(*["d"] * 12) / "deep-Q4_K_M.gguf").write_bytes(GGUF)
    wide = lmstudio(models, "pub", "Wide-GGUF", {f"part{i}.txt": b"" for i in range(30)})
    (wide / "wide-Q8_0.gguf").write_bytes(GGUF)
    monkeypatch.setattr(hf_layout, "MAX_WALK_FILES", 20)
    with caplog.at_level(logging.WARNING, "localserve.models"):
        found = names(discovery.discover(("lmstudio",), env_for(tmp_path)))
    assert set(found) == {"pub/Kept-GGUF:Q4_K_M"}
    said = [r.getMessage() for r in caplog.records]
    for folder in ("pub/Root-GGUF", "everything", "Deep-GGUF", "Wide-GGUF"):
        assert sum(folder in m for m in said) == 1, (folder, said)    # one line each, not one per folder of /


def test_lmstudio_both_folders(tmp_path):
    lmstudio(tmp_path / ".lmstudio" / "models", "lmstudio-community", "Tiny-GGUF",
             {"Tiny-Q4_K_M.gguf": GGUF, "mmproj-Tiny-F16.gguf": GGUF + b"p"})
    lmstudio(tmp_path / ".cache" / "lm-studio" / "models", "TheBloke", "Old-GGUF", {"old.Q5_K_S.gguf": GGUF + b"o"})
    found = names(discovery.discover(("lmstudio",), env_for(tmp_path)))
    assert set(found) == {"lmstudio-community/Tiny-GGUF:Q4_K_M", "TheBloke/Old-GGUF:Q5_K_S"}
    tiny = found["lmstudio-community/Tiny-GGUF:Q4_K_M"]
    assert "lmstudio-community/Tiny-GGUF/Tiny-Q4_K_M.gguf" in tiny.aliases
    assert dict(tiny.overrides)["mmproj"].endswith("mmproj-Tiny-F16.gguf")


def test_llamacpp_flat_and_hf_layout(tmp_path):
    cache = tmp_path / "llama-cache"
    llamacpp_flat(cache, "ggml-org", "tiny-GGUF", "Q8_0", "tiny-Q8_0.gguf", GGUF + b"t",
                  projector=("mmproj-tiny.gguf", GGUF + b"m"))
    (cache / "loose-model.gguf").write_bytes(GGUF + b"x")
    hf_cache(cache, "org/Cached-GGUF", {"c-Q4_K_M.gguf": GGUF + b"c"})
    found = names(discovery.discover(("llamacpp",), env_for(tmp_path, LLAMA_CACHE=str(cache))))
    assert set(found) == {"ggml-org/tiny-GGUF:Q8_0", "loose-model", "org/Cached-GGUF:Q4_K_M"}
    assert dict(found["ggml-org/tiny-GGUF:Q8_0"].overrides)["mmproj"] == str(cache / "ggml-org_tiny-GGUF_mmproj-tiny.gguf")
    assert {e.source for e in found.values()} == {"llamacpp-cache"}


def test_one_file_once_and_first_name_wins(tmp_path):
    """llama.cpp's cache set to the HF cache lists the same files: listed once, by the first source."""
    root = tmp_path / "hub"
    hf_cache(root, "org/Tiny-GGUF", {"tiny-Q4_K_M.gguf": GGUF})
    found = discovery.discover(("hf", "llamacpp"), env_for(tmp_path, HF_HUB_CACHE=str(root), LLAMA_CACHE=str(root)))
    assert [(e.name, e.source) for e in found] == [("org/Tiny-GGUF:Q4_K_M", "hf-cache")]


def test_parse_sources():
    assert discovery.parse_sources("all") == discovery.ALL
    assert discovery.parse_sources("none") == ()
    assert discovery.parse_sources("hf, ollama") == ("hf", "ollama")
    assert discovery.parse_sources("no-lmstudio,no-llamacpp") == ("ollama", "hf")
    with pytest.raises(ValueError, match="unknown source 'docker'"):
        discovery.parse_sources("docker")


def test_catalogue_with_found_models(tmp_path):
    root = tmp_path / "hub"
    hf_cache(root, "org/Tiny-GGUF", {"tiny-Q4_K_M.gguf": GGUF})
    found = discovery.discover(("hf",), env_for(tmp_path, HF_HUB_CACHE=str(root)))
    demo_asked = []
    alone = read_catalogue(Settings(model="/m/own.gguf"), lambda: demo_asked.append(1) or "", found)
    assert alone.any_name and alone.names() == ["own", "org/Tiny-GGUF:Q4_K_M"]
    assert alone.find("org/tiny-gguf:q4_k_m").name == "org/Tiny-GGUF:Q4_K_M"    # case-blind, as Ollama's names
    assert alone.find("hf.co/org/Tiny-GGUF").name == "org/Tiny-GGUF:Q4_K_M"
    assert alone.find("anything").name == "own"       # --model alone answers any other name
    assert dict(alone.entries["org/Tiny-GGUF:Q4_K_M"].overrides)["keep_alive"] == 300.0
    only_found = read_catalogue(Settings(), lambda: demo_asked.append(1) or "", found)
    assert only_found.names() == ["org/Tiny-GGUF:Q4_K_M"] and not only_found.any_name and not demo_asked


def test_catalogue_add_refuses_taken_names():
    from localserve.models.catalogue import ModelEntry
    catalogue = Catalogue([ModelEntry("a", "/a.gguf")])
    assert catalogue.add(ModelEntry("b", "/b.gguf", aliases=("a",))) is None
    assert catalogue.add(ModelEntry("b", "/b.gguf")) == [] and catalogue.exact("b").path == "/b.gguf"
    assert catalogue.exact("b:latest").name == "b"


def test_two_tags_of_one_blob_both_listed(tmp_path):
    store = tmp_path / "ollama"
    ollama_store(store, ("registry.ollama.ai", "library", "qwen3", "latest"), GGUF + b"q")
    ollama_store(store, ("registry.ollama.ai", "library", "qwen3", "8b"), GGUF + b"q")
    found = discovery.discover(("ollama",), env_for(tmp_path, OLLAMA_MODELS=str(store)))
    assert sorted(e.name for e in found) == ["qwen3:8b", "qwen3:latest"]


def test_request_options_win_over_stored():
    from localserve.models.defaults import ModelDefaults
    stored = ModelDefaults("sys", (("temperature", 0.1), ("stop", ["x"])))
    assert stored.options_under({"temperature": 0.9}) == {"temperature": 0.9, "stop": ["x"]}
    assert stored.options_under(None) == {"temperature": 0.1, "stop": ["x"]}


def test_projector_choice_deepest_then_closest_bits():
    from localserve.models.gguf_files import best_projector
    files = ["mmproj-F16.gguf", "Q8/m-Q8_0.gguf", "Q8/mmproj-Q8_0.gguf", "Q8/mmproj-F32.gguf", "other/mmproj-F16.gguf",
             "m-Q4_K_M.gguf", "mmproj-Q4_0.gguf"]
    assert best_projector(files, "Q8/m-Q8_0.gguf") == "Q8/mmproj-Q8_0.gguf"      # its own folder, nearest bits
    assert best_projector(files, "m-Q4_K_M.gguf") == "mmproj-Q4_0.gguf"          # never another folder's
    assert best_projector(["a/mmproj.gguf"], "m-Q4_K_M.gguf") is None
