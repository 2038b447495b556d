"""Pulls from a Hub mirror (tests/support/hub_mirror.py, a real HTTP server) into a Hugging Face
cache in a temporary directory: the files chosen, the cache's layout, resume, checksums, the
download shared, a stop, and every hostile answer refused with nothing half-written visible."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from hub_mirror import Repo  # noqa: E402

from localserve.models.hub import pull as hub_pull  # noqa: E402
from localserve.models.hub.client import HubConfig  # noqa: E402
from localserve.models.hub.downloads import Downloads  # noqa: E402
from localserve.models.hub.errors import HubError  # noqa: E402
from localserve.models.hub.names import parse_hub_name  # noqa: E402

MODEL = b"GGUF" + os.urandom(300_000)
OTHER = b"GGUF" + os.urandom(200_000)
PROJECTOR = b"GGUF" + os.urandom(50_000)
FILES = {"tiny-Q4_K_M.gguf": MODEL, "tiny-Q8_0.gguf": OTHER, "mmproj-tiny-F16.gguf": PROJECTOR, "README.md": b"hi"}


def config(mirror, token=None, offline=False) -> HubConfig:
    return HubConfig(mirror.endpoint, token, offline)


def pull(mirror, name, token=None, downloads=None, offline=False):
    prepared = hub_pull.prepare(name, config(mirror, token, offline))
    events = list(hub_pull.run(prepared, downloads or Downloads()))
    return prepared, events


def visible(root: Path) -> list[str]:
    """What other tools see: snapshot entries (the links) and finished blobs."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if ("snapshots" in p.parts and not p.is_dir()) or (p.parent.name == "blobs" and
                                                                     not p.name.endswith(".incomplete")))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("name, repo, quant", [
    ("org/Tiny-GGUF", "org/Tiny-GGUF", None), ("hf.co/org/Tiny-GGUF:q4_k_m", "org/Tiny-GGUF", "q4_k_m"),
    ("huggingface.co/org/Tiny-GGUF:latest", "org/Tiny-GGUF", None),
    ("https://huggingface.co/org/Tiny-GGUF", "org/Tiny-GGUF", None)])
def test_names(name, repo, quant):
    parsed = parse_hub_name(name)
    assert (parsed.repo_id, parsed.quant) == (repo, quant)


@pytest.mark.parametrize("name, words", [
    ("../etc/passwd", "not a Hub repo"), ("org/../x", "not a Hub repo"), ("org/repo/extra", "not a Hub repo"),
    ("https://evil.example/org/repo", "another host"), ("evil.example/org/repo:Q4", "another host"),
    ("org/repo:Q4/../../x", "not a quantization"), ("org\\repo", "not a Hub repo"), ("org/repo:", "empty"),
    ("", "expected a model name"), ("ftp://hf.co/org/repo", "another host"), ("org/re\x00po", "not a Hub repo"),
    # a newline ending the repo part, where a pattern's `$` matches (the repo was asked for with it)
    ("org/repo\n:Q4_K_M", "not a Hub repo"), ("hf.co/org/repo\n:latest", "not a Hub repo")])
def test_bad_names(name, words):
    with pytest.raises(HubError, match=words) as caught:
        parse_hub_name(name)
    assert caught.value.status == 400


def test_default_pull_lays_out_the_cache(mirror, cache):
    mirror.add("org/Tiny-GGUF", Repo(FILES))
    prepared, events = pull(mirror, "hf.co/org/Tiny-GGUF")
    snapshot = cache / "models--org--Tiny-GGUF" / "snapshots" / mirror.repos["org/Tiny-GGUF"].commit
    assert (snapshot / "tiny-Q4_K_M.gguf").read_bytes() == MODEL
    assert os.readlink(snapshot / "tiny-Q4_K_M.gguf") == f"../../blobs/{sha(MODEL)}"
    assert (snapshot / "mmproj-tiny-F16.gguf").read_bytes() == PROJECTOR
    assert not (snapshot / "tiny-Q8_0.gguf").exists()
    assert (cache / "models--org--Tiny-GGUF" / "refs" / "main").read_text() == mirror.repos["org/Tiny-GGUF"].commit
    assert [e.status for e in events][0] == "pulling manifest" and events[-1].status == "success"
    finished = [e for e in events if e.digest == f"sha256:{sha(MODEL)}"]
    assert finished[-1].completed == finished[-1].total == len(MODEL)
    assert [e.name for e in prepared.entries()] == ["org/Tiny-GGUF:Q4_K_M"]
    assert dict(prepared.entries()[0].overrides)["mmproj"] == str(snapshot / "mmproj-tiny-F16.gguf")
    pages = [s for s in mirror.seen if "/tree/" in s.path]
    assert len(pages) == 2        # four files, in pages of two


def test_quant_chosen_and_unknown(mirror, cache):
    mirror.add("org/Tiny-GGUF", Repo(FILES))
    prepared, _ = pull(mirror, "org/Tiny-GGUF:q8_0")
    assert [e.name for e in prepared.entries()] == ["org/Tiny-GGUF:Q8_0"]
    with pytest.raises(HubError, match="no 'Q2_K' quant; it has Q4_K_M, Q8_0") as caught:
        hub_pull.prepare("org/Tiny-GGUF:Q2_K", config(mirror))
    assert caught.value.status == 404


def test_missing_repo(mirror, cache):
    with pytest.raises(HubError, match="no such repo") as caught:
        hub_pull.prepare("org/Nothing-GGUF", config(mirror))
    assert caught.value.status == 404 and not cache.exists()


def test_cut_download_resumes_with_range(mirror, cache):
    mirror.add("org/Tiny-GGUF", Repo({"tiny-Q4_K_M.gguf": MODEL}, mode="cut", cut_at=123_456))
    prepared = hub_pull.prepare("org/Tiny-GGUF", config(mirror))
    with pytest.raises(HubError, match="ended the file at 123456"):
        list(hub_pull.run(prepared, Downloads()))
    partial = cache / "models--org--Tiny-GGUF" / "blobs" / f"{sha(MODEL)}.incomplete"
    assert partial.stat().st_size == 123_456 and visible(cache) == []
    pull(mirror, "org/Tiny-GGUF")
    assert [s.range for s in mirror.cdn_requests(sha(MODEL))] == [None, "bytes=123456-"]
    assert not partial.exists() and (cache / "models--org--Tiny-GGUF" / "blobs" / sha(MODEL)).read_bytes() == MODEL


def test_corrupted_byte_refused(mirror, cache):
    mirror.add("org/Tiny-GGUF", Repo({"tiny-Q4_K_M.gguf": MODEL}, mode="corrupt"))
    with pytest.raises(HubError, match="do not match the checksum") as caught:
        pull(mirror, "org/Tiny-GGUF")
    assert caught.value.code == "checksum_mismatch"
    assert visible(cache) == [] and not list(cache.rglob("*.incomplete"))


@pytest.mark.parametrize("mode, words", [("html", "HTML page"), ("redirect_scheme", "redirected to a file: URL"),
                                         ("huge_length", "announced 1125899906842624 bytes"),
                                         ("endless", "sent more than")])
def test_hostile_mirror(mirror, cache, mode, words):
    mirror.add("org/Tiny-GGUF", Repo({"tiny-Q4_K_M.gguf": MODEL}, mode=mode))
    with pytest.raises(HubError, match=words) as caught:
        pull(mirror, "org/Tiny-GGUF")
    assert caught.value.status == 502 and visible(cache) == []


def test_listing_paths_outside_the_repo_left_out(mirror, cache, tmp_path):
    mirror.add("org/Tiny-GGUF", Repo({"z/tiny-Q8_0.gguf": MODEL}, mode="traversal"))
    prepared, _ = pull(mirror, "org/Tiny-GGUF")
    assert [e.name for e in prepared.entries()] == ["org/Tiny-GGUF:Q8_0"]
    assert not list(tmp_path.rglob("evil*")) and not Path("/etc/evil-Q4_K_M.gguf").exists()


def test_gated_repo(mirror, cache):
    mirror.add("org/Gated-GGUF", Repo({"g-Q4_K_M.gguf": MODEL}, gated=True, token="hf_right"))
    with pytest.raises(HubError, match="gated: accept its terms on the Hub and set HF_TOKEN") as caught:
        hub_pull.prepare("org/Gated-GGUF", config(mirror))
    assert caught.value.status == 401
    with pytest.raises(HubError, match="HF_TOKEN has no access") as caught:
        pull(mirror, "org/Gated-GGUF", token="hf_wrong")
    assert caught.value.status == 403 and visible(cache) == []
    pull(mirror, "org/Gated-GGUF", token="hf_right")
    cdn = mirror.cdn_requests(sha(MODEL))
    assert cdn and all(s.authorization is None for s in cdn)      # the token never goes to the CDN's host
    assert all(s.authorization == "Bearer hf_right" for s in mirror.seen[-3:] if s.host.startswith("127.0.0.1"))


def test_not_enough_disk_space(mirror, cache):
    repo = Repo({"tiny-Q4_K_M.gguf": MODEL})
    repo.extra_listing = [{"type": "file", "path": "huge-Q2_K.gguf", "size": 1 << 60, "oid": "2" * 40,
                           "lfs": {"oid": "3" * 64, "size": 1 << 60}}]
    mirror.add("org/Tiny-GGUF", repo)
    with pytest.raises(HubError, match="not enough disk space") as caught:
        pull(mirror, "org/Tiny-GGUF:Q2_K")
    assert caught.value.status == 507 and not [s for s in mirror.seen if "/resolve/" in s.path]


def test_link_planted_in_the_cache_refused(mirror, cache, tmp_path):
    mirror.add("org/Tiny-GGUF", Repo({"tiny-Q4_K_M.gguf": MODEL}))
    outside = tmp_path / "outside"
    outside.mkdir()
    (cache / "models--org--Tiny-GGUF").mkdir(parents=True)
    (cache / "models--org--Tiny-GGUF" / "blobs").symlink_to(outside)
    with pytest.raises(HubError, match="leads outside"):
        pull(mirror, "org/Tiny-GGUF")
    assert list(outside.iterdir()) == []


def test_concurrent_pulls_share_one_download(mirror, cache):
    mirror.add("org/Tiny-GGUF", Repo({"tiny-Q4_K_M.gguf": MODEL}, mode="slow", delay=0.002))
    downloads, results = Downloads(), []
    threads = [threading.Thread(target=lambda: results.append(pull(mirror, "org/Tiny-GGUF", downloads=downloads)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 3 and all(r[1][-1].status == "success" for r in results)
    assert len(mirror.cdn_requests(sha(MODEL))) == 1


def test_stop_keeps_the_partial_then_resume(mirror, cache):
    mirror.add("org/Tiny-GGUF", Repo({"tiny-Q4_K_M.gguf": MODEL}, mode="slow", delay=0.005))
    downloads = Downloads()
    events = hub_pull.run(hub_pull.prepare("org/Tiny-GGUF", config(mirror)), downloads)
    for event in events:
        if event.completed:
            break
    events.close()               # the client left
    partial = cache / "models--org--Tiny-GGUF" / "blobs" / f"{sha(MODEL)}.incomplete"
    for _ in range(100):
        if downloads.active() == 0:
            break
        threading.Event().wait(0.05)
    kept = partial.stat().st_size
    assert downloads.active() == 0 and 0 < kept < len(MODEL) and visible(cache) == []
    mirror.repos["org/Tiny-GGUF"].delay = 0
    pull(mirror, "org/Tiny-GGUF", downloads=downloads)
    assert mirror.cdn_requests(sha(MODEL))[-1].range == f"bytes={kept}-"
    assert (cache / "models--org--Tiny-GGUF" / "blobs" / sha(MODEL)).read_bytes() == MODEL


def test_offline(mirror, cache):
    mirror.add("org/Tiny-GGUF", Repo(FILES))
    pull(mirror, "org/Tiny-GGUF")
    seen = len(mirror.seen)
    prepared, events = pull(mirror, "org/Tiny-GGUF", offline=True)
    assert len(mirror.seen) == seen and events[-1].status == "success"
    assert [e.name for e in prepared.entries()] == ["org/Tiny-GGUF:Q4_K_M"]
    with pytest.raises(HubError, match="HF_HUB_OFFLINE") as caught:
        hub_pull.prepare("org/Other-GGUF", config(mirror, offline=True))
    assert caught.value.status == 503


def test_links_planted_in_a_snapshot_or_for_a_partial_refused(mirror, cache, tmp_path):
    mirror.add("org/Deep-GGUF", Repo({"sub/deep-Q4_K_M.gguf": MODEL}))
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim"
    victim.write_bytes(b"precious")
    repo = cache / "models--org--Deep-GGUF"
    (repo / "snapshots" / mirror.repos["org/Deep-GGUF"].commit).mkdir(parents=True)
    (repo / "snapshots" / mirror.repos["org/Deep-GGUF"].commit / "sub").symlink_to(outside)
    with pytest.raises(HubError, match="leads outside"):
        pull(mirror, "org/Deep-GGUF")
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    mirror.add("org/Part-GGUF", Repo({"p-Q4_K_M.gguf": OTHER}))
    (cache / "models--org--Part-GGUF" / "blobs").mkdir(parents=True)
    (cache / "models--org--Part-GGUF" / "blobs" / f"{sha(OTHER)}.incomplete").symlink_to(victim)
    with pytest.raises(HubError):
        pull(mirror, "org/Part-GGUF")
    assert victim.read_bytes() == b"precious"


def test_redirects_never_downgrade_or_leave_http():
    from localserve.models.hub.client import HubClient
    client = HubClient(HubConfig("https://hub.example", None, False))
    assert client._redirect_target("https://hub.example/a", "https://cdn.example/b", "x") == "https://cdn.example/b"
    assert client._redirect_target("https://hub.example/a", "/b", "x") == "https://hub.example/b"
    for location, words in (("http://cdn.example/b", "down to http"), ("file:///etc/passwd", "file: URL"),
                            ("ftp://cdn.example/b", "ftp: URL")):
        with pytest.raises(HubError, match=words):
            client._redirect_target("https://hub.example/a", location, "x")
