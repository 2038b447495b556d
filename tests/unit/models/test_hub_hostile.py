"""A pull and discovery attacked: a mirror that lies (a listing that never ends, a range that
starts elsewhere, a Content-Length less than the file, a redirect loop, split parts that lie
about their count), a full disk found before the first byte or during a write, and stores whose
files are not files (a FIFO would block a read for ever)."""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from hub_mirror import Repo  # noqa: E402
from stores import hf_cache, llamacpp_flat, lmstudio, ollama_store  # noqa: E402

from localserve.models import hf_layout  # noqa: E402
from localserve.models.discovery import sources as discovery  # noqa: E402
from localserve.models.hub import client as hub_client  # noqa: E402
from localserve.models.hub import fetch as hub_fetch  # noqa: E402
from localserve.models.hub import listing as hub_listing  # noqa: E402
from localserve.models.hub import pull as hub_pull  # noqa: E402
from localserve.models.hub.client import HubConfig  # noqa: E402
from localserve.models.hub.downloads import Downloads  # noqa: E402
from localserve.models.hub.errors import HubError  # noqa: E402

MODEL = b"GGUF" + os.urandom(200_000)
PART2 = b"GGUF" + os.urandom(100_000)
GGUF = b"GGUF" + b"\0" * 60


def pull(mirror, name):
    prepared = hub_pull.prepare(name, HubConfig(mirror.endpoint, None, False))
    return prepared, list(hub_pull.run(prepared, Downloads()))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def finished(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.name.endswith((".incomplete", ".lock"))]


def test_a_listing_whose_next_page_never_ends_is_refused(mirror, cache):
    mirror.add("org/Loop-GGUF", Repo({"a-Q4_K_M.gguf": MODEL, "b-Q8_0.gguf": PART2, "c.md": b"x"},
                                     mode="looping_pages"))
    with pytest.raises(HubError, match="pages") as caught:
        hub_pull.prepare("org/Loop-GGUF", HubConfig(mirror.endpoint, None, False))
    assert caught.value.status == 502
    assert len([s for s in mirror.seen if "/tree/" in s.path]) == hub_listing.MAX_PAGES


def test_an_api_answer_dripped_a_byte_at_a_time_is_refused(mirror, cache, monkeypatch):
    monkeypatch.setattr(hub_client, "API_DEADLINE", 0.3)
    mirror.add("org/Drip-GGUF", Repo({"a-Q4_K_M.gguf": MODEL}, mode="drip_api"))
    with pytest.raises(HubError, match="took more than 0.3 s") as caught:
        hub_pull.prepare("org/Drip-GGUF", HubConfig(mirror.endpoint, None, False))
    assert caught.value.status == 502


def test_a_redirect_to_a_port_past_65535_is_a_hub_error(mirror, cache):
    mirror.add("org/Port-GGUF", Repo({"a-Q4_K_M.gguf": MODEL}, mode="bad_port"))
    with pytest.raises(HubError, match="redirected to a URL that cannot be opened") as caught:
        hub_pull.prepare("org/Port-GGUF", HubConfig(mirror.endpoint, None, False))
    assert caught.value.status == 502


def test_a_listing_of_too_many_files_is_refused(mirror, cache, monkeypatch):
    monkeypatch.setattr(hub_listing, "MAX_FILES", 3)
    repo = Repo({"a-Q4_K_M.gguf": MODEL})
    repo.extra_listing = [{"type": "file", "path": f"f{i}.txt", "size": 1, "oid": "1" * 40} for i in range(5)]
    mirror.add("org/Many-GGUF", repo)
    with pytest.raises(HubError, match="more than 3 files"):
        hub_pull.prepare("org/Many-GGUF", HubConfig(mirror.endpoint, None, False))


@pytest.mark.parametrize("files", [
    {"s-Q4_0-00001-of-00003.gguf": MODEL, "s-Q4_0-00002-of-00003.gguf": PART2},
    {"s-Q4_0-00001-of-00002.gguf": MODEL, "s-Q4_0-00003-of-00002.gguf": PART2},
    {"s-Q4_0-00001-of-00002.gguf": MODEL, "s-Q4_0-00002-of-00002.gguf": PART2, "s-Q4_0-00002-OF-00002.gguf": GGUF}])
def test_split_parts_that_lie_about_their_count(mirror, cache, tmp_path, files):
    mirror.add("org/Split-GGUF", Repo(files))
    with pytest.raises(HubError, match="part 1 of") as caught:
        hub_pull.prepare("org/Split-GGUF", HubConfig(mirror.endpoint, None, False))
    assert caught.value.status == 502
    hf_cache(tmp_path / "disc", "org/Split-GGUF", files)
    assert discovery.discover(("hf",), {"HOME": str(tmp_path), "HF_HUB_CACHE": str(tmp_path / "disc")}) == []


@pytest.mark.parametrize("mode, words", [
    ("redirect_loop", "more than 5 redirects"), ("short_length", "announced"),
    ("cut+wrong_range", "sent the range 'bytes 99000-")])
def test_lying_answers(mirror, cache, mode, words):
    mirror.add("org/Lie-GGUF", Repo({"l-Q4_K_M.gguf": MODEL}, mode=mode, cut_at=100_000))
    if "cut" in mode:
        with pytest.raises(HubError, match="ended the file"):
            pull(mirror, "org/Lie-GGUF")
    with pytest.raises(HubError, match=words) as caught:
        pull(mirror, "org/Lie-GGUF")
    assert caught.value.status == 502 and finished(cache) == []


def test_a_200_where_206_was_asked_starts_again(mirror, cache):
    mirror.add("org/Whole-GGUF", Repo({"w-Q4_K_M.gguf": MODEL}, mode="cut+no_range", cut_at=100_000))
    with pytest.raises(HubError, match="ended the file"):
        pull(mirror, "org/Whole-GGUF")
    pull(mirror, "org/Whole-GGUF")
    assert [s.range for s in mirror.cdn_requests(sha(MODEL))] == [None, "bytes=100000-"]
    assert (cache / "models--org--Whole-GGUF" / "blobs" / sha(MODEL)).read_bytes() == MODEL


def test_the_disk_is_checked_for_every_part_before_the_first_byte(mirror, cache, monkeypatch):
    mirror.add("org/Big-GGUF", Repo({"b-Q4_0-00001-of-00002.gguf": MODEL, "b-Q4_0-00002-of-00002.gguf": PART2}))
    real = shutil.disk_usage
    free = hub_fetch.DISK_MARGIN + len(MODEL) + len(PART2) // 2      # room for the first part, not both
    monkeypatch.setattr(hub_fetch.shutil, "disk_usage", lambda p: real(p)._replace(free=free))
    with pytest.raises(HubError, match="not enough disk space") as caught:
        pull(mirror, "org/Big-GGUF")
    assert caught.value.status == 507 and not [s for s in mirror.seen if "/resolve/" in s.path]


def test_a_disk_that_fills_during_the_download(mirror, cache, monkeypatch):
    mirror.add("org/Full-GGUF", Repo({"f-Q4_K_M.gguf": MODEL}))
    real_fdopen = os.fdopen

    class Filling:
        def __init__(self, f):
            self.f = f

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            if self.f.tell() + len(data) > 50_000:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return self.f.write(data)

    monkeypatch.setattr(hub_fetch.os, "fdopen", lambda fd, mode: Filling(real_fdopen(fd, mode)))
    with pytest.raises(HubError, match="disk") as caught:
        pull(mirror, "org/Full-GGUF")
    assert caught.value.status == 507 and caught.value.code == "insufficient_storage"
    assert finished(cache) == []


def discover_within(sources, env, seconds: float = 5.0):
    """Discovery on a thread: a store that blocks a read must not hang it."""
    found: list = []
    thread = threading.Thread(target=lambda: found.append(discovery.discover(sources, env)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert found, "discovery hung on a file that is no regular file"
    return found[0]


@pytest.mark.parametrize("layer", ["model", "system", "params"])
def test_an_ollama_layer_that_is_a_fifo_is_skipped(tmp_path, caplog, layer):
    store = tmp_path / "ollama"
    blob = ollama_store(store, ("registry.ollama.ai", "library", "fifo", "latest"), GGUF + b"f", system="s",
                        params={"temperature": 0.1})
    ollama_store(store, ("registry.ollama.ai", "library", "ok", "latest"), GGUF + b"o")
    if layer != "model":
        data = b"s" if layer == "system" else json.dumps({"temperature": 0.1}).encode()
        blob = store / "blobs" / f"sha256-{sha(data)}"
    blob.unlink()
    os.mkfifo(blob)
    with caplog.at_level(logging.WARNING, "localserve.models"):
        found = discover_within(("ollama",), {"HOME": str(tmp_path), "OLLAMA_MODELS": str(store)})
    assert [e.name for e in found] == ["ok:latest"]
    assert any("fifo:latest" in r.getMessage() for r in caplog.records)


def test_a_llamacpp_manifest_that_is_a_fifo_is_skipped(tmp_path):
    llamacpp_flat(tmp_path / "llama.cpp", "ggml-org", "flat-GGUF", "Q4_0", "flat-Q4_0.gguf", GGUF)
    manifest = next((tmp_path / "llama.cpp").glob("manifest=*.json"))
    manifest.unlink()
    os.mkfifo(manifest)
    found = discover_within(("llamacpp",), {"HOME": str(tmp_path), "LLAMA_CACHE": str(tmp_path / "llama.cpp")})
    assert [e.path for e in found] == [str(tmp_path / "llama.cpp" / "ggml-org_flat-GGUF_flat-Q4_0.gguf")]


def test_concurrent_pulls_in_one_process_record_the_commit_each(tmp_path):
    """Pulls of one repo on several threads finish together: each writes refs/main through its
    own temporary file (one shared name made one of them fail with FileNotFoundError)."""
    from localserve.models.hf_layout import RepoCache
    repo = RepoCache(tmp_path, "org/Tiny-GGUF")
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def write() -> None:
        start.wait()
        for _ in range(50):
            try:
                hub_pull.write_ref(repo, "a" * 40)
            except OSError as exc:
                failures.append(exc)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == [] and repo.read_ref() == "a" * 40
    assert [p.name for p in (repo.path / "refs").iterdir()] == ["main"]


def test_an_ollama_name_ollama_would_not_give_is_skipped(tmp_path, caplog):
    store = tmp_path / "ollama"
    ollama_store(store, ("registry.ollama.ai", "library", "evil", "x\n\x1b[31mINJECTED"), GGUF + b"e")
    ollama_store(store, ("registry.ollama.ai", "library", "ok", "latest"), GGUF + b"o")
    # a newline at the end of a part: a pattern's `$` matches before it (the name was served)
    ollama_store(store, ("registry.ollama.ai", "library", "trailing", "latest\n"), GGUF + b"t")
    ollama_store(store, ("registry.ollama.ai\n", "library", "hosted", "latest"), GGUF + b"h")
    with caplog.at_level(logging.WARNING, "localserve.models"):
        found = discovery.discover(("ollama",), {"HOME": str(tmp_path), "OLLAMA_MODELS": str(store)})
    assert [e.name for e in found] == ["ok:latest"]
    said = [r.getMessage() for r in caplog.records if "evil" in r.getMessage()]
    assert len(said) == 1 and "\n" not in said[0] and "\x1b" not in said[0]


def test_lmstudio_names_with_control_characters_are_skipped_and_logged_escaped(tmp_path, caplog, monkeypatch):
    evil = "x\n\x1b[31mINJECTED"
    home = tmp_path / evil                  # every path a line names holds it
    models = home / ".lmstudio" / "models"
    lmstudio(models, evil, "Repo-GGUF", {"a-Q4_K_M.gguf": GGUF + b"1"})             # a publisher so named
    lmstudio(models, "pub", evil, {"b-Q4_K_M.gguf": GGUF + b"2"})                   # a repo
    lmstudio(models, "pub", "Files-GGUF", {f"{evil}-Q8_0.gguf": GGUF + b"3"})        # a model file
    lmstudio(models, "pub", "Ok-GGUF", {"ok-Q4_K_M.gguf": GGUF + b"4"})
    (models / "pub" / "Root-GGUF").symlink_to("/", target_is_directory=True)        # a link outside
    lmstudio(models, "pub", "Wide-GGUF", {f"part{i}.txt": b"" for i in range(10)})    # a walk refused
    monkeypatch.setattr(hf_layout, "MAX_WALK_FILES", 5)
    with caplog.at_level(logging.WARNING, "localserve.models"):
        found = discovery.discover(("lmstudio",), {"HOME": str(home)})
    assert [e.name for e in found] == ["pub/Ok-GGUF:Q4_K_M"]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 5 and all("INJECTED" in m for m in said), said
    assert not any("\n" in m or "\x1b" in m for m in said), said


def test_looping_and_huge_manifests_are_skipped(tmp_path, caplog):
    store = tmp_path / "ollama"
    ollama_store(store, ("registry.ollama.ai", "library", "ok", "latest"), GGUF + b"o")
    library = store / "manifests" / "registry.ollama.ai" / "library"
    (library / "loop").mkdir()
    (library / "loop" / "latest").symlink_to(library / "loop" / "latest")       # a link to itself
    (library / "huge").mkdir()
    (library / "huge" / "latest").write_bytes(b" " * (2 << 20))
    with caplog.at_level(logging.WARNING, "localserve.models"):
        found = discover_within(("ollama",), {"HOME": str(tmp_path), "OLLAMA_MODELS": str(store)})
    assert [e.name for e in found] == ["ok:latest"]
    assert any("huge:latest" in r.getMessage() and "too large" in r.getMessage() for r in caplog.records)


def _proc_file_past_the_limit() -> str | None:
    """/proc/kallsyms: a regular file whose stat says 0 bytes and which reads some megabytes."""
    try:
        with open("/proc/kallsyms", "rb") as f:
            return "/proc/kallsyms" if len(f.read((1 << 20) + 1)) > 1 << 20 else None
    except OSError:
        return None


@pytest.mark.skipif(_proc_file_past_the_limit() is None, reason="no /proc/kallsyms past 1 MiB here")
@pytest.mark.parametrize("what", ["manifest", "system", "params"])
def test_an_ollama_file_whose_size_says_nothing_is_read_no_further_than_its_limit(tmp_path, caplog, what):
    """A manifest or a text layer linked to a file whose stat says 0 bytes and which holds more
    (a /proc file) is read to its limit (1 MiB) and skipped: the system layer was read whole and
    became a 5 MB system prompt."""
    store = tmp_path / "ollama"
    ollama_store(store, ("registry.ollama.ai", "library", "ok", "latest"), GGUF + b"o")
    ollama_store(store, ("registry.ollama.ai", "library", "proc", "latest"), GGUF + b"p",
                 system="terse", params={"temperature": 0.5})
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "proc" / "latest"
    if what == "manifest":
        target = manifest
    else:
        data = b"terse" if what == "system" else json.dumps({"temperature": 0.5}).encode()
        target = store / "blobs" / ("sha256-" + hashlib.sha256(data).hexdigest())
    target.unlink()
    target.symlink_to(_proc_file_past_the_limit())
    with caplog.at_level(logging.WARNING, "localserve.models"):
        found = discover_within(("ollama",), {"HOME": str(tmp_path), "OLLAMA_MODELS": str(store)})
    assert [e.name for e in found] == ["ok:latest"]
    assert sum("proc:latest" in r.getMessage() and "too large" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.skipif(_proc_file_past_the_limit() is None, reason="no /proc/kallsyms past 1 MiB here")
def test_a_llamacpp_manifest_whose_size_says_nothing_is_read_no_further_than_its_limit(tmp_path, caplog):
    """llama.cpp's flat cache: a manifest linked to a /proc file (stat 0 bytes, megabytes to read)
    is read to MAX_MANIFEST_BYTES and skipped as too large, as Ollama's files are."""
    cache = tmp_path / "llama.cpp"
    llamacpp_flat(cache, "ggml-org", "ok-GGUF", "Q8_0", "ok-Q8_0.gguf", GGUF + b"o")
    llamacpp_flat(cache, "ggml-org", "proc-GGUF", "Q8_0", "proc-Q8_0.gguf", GGUF + b"p")
    manifest = next(cache.glob("manifest=ggml-org=proc-GGUF=*.json"))
    manifest.unlink()
    manifest.symlink_to(_proc_file_past_the_limit())
    with caplog.at_level(logging.WARNING, "localserve.models"):
        found = discover_within(("llamacpp",), {"HOME": str(tmp_path), "LLAMA_CACHE": str(cache)})
    names = [e.name for e in found]
    assert "ggml-org/ok-GGUF:Q8_0" in names and "ggml-org/proc-GGUF:Q8_0" not in names, names
    assert sum("proc-GGUF" in r.getMessage() and "too large" in r.getMessage() for r in caplog.records) == 1


def test_a_name_no_client_could_send_is_never_served(tmp_path, caplog):
    """llama.cpp's flat cache names a model by its manifest's file name, or a loose GGUF by its
    stem: a newline, an escape or a right-to-left override there was listed as a model name
    (and its missing file written raw into the log). Skipped, one escaped line each."""
    cache = tmp_path / "llama.cpp"
    llamacpp_flat(cache, "ggml-org", "ok-GGUF", "Q8_0", "ok-Q8_0.gguf", GGUF + b"o")
    llamacpp_flat(cache, "ggml-org", "evil-GGUF", "Q8_0\n\x1b[31mINJECTED", "evil-Q8_0.gguf", GGUF + b"e")
    llamacpp_flat(cache, "ggml-org", "rlo-GGUF", "Q8_0\u202e", "rlo-Q8_0.gguf", GGUF + b"r")
    (cache / "loose\n\x1b[31mINJECTED.gguf").write_bytes(GGUF + b"l")
    (cache / "manifest=ggml-org=gone-GGUF=Q8_0.json").write_text(json.dumps({"ggufFile": {"rfilename": "x\n\x1b[31m"}}))
    with caplog.at_level(logging.WARNING, "localserve.models"):
        found = discover_within(("llamacpp",), {"HOME": str(tmp_path), "LLAMA_CACHE": str(cache)})
    assert [e.name for e in found] == ["ggml-org/ok-GGUF:Q8_0"]
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "evil" in m or "rlo" in m or "loose" in m or "gone" in m]) == 4, said
    assert not [m for m in said if "\n" in m or "\x1b" in m or "\u202e" in m], said


def test_a_commit_with_a_newline_after_it_is_refused(mirror, cache):
    """A pattern's `$` matches before a last newline: the mirror's commit went into the cache's
    folder and refs/main names."""
    mirror.add("org/Tiny-GGUF", Repo({"tiny-Q4_K_M.gguf": GGUF + b"m"}, commit="c0ffee" + "0" * 34 + "\n"))
    with pytest.raises(HubError, match="commit"):
        pull(mirror, "org/Tiny-GGUF")
    assert not [p for p in cache.rglob("*") if "\n" in p.name]
