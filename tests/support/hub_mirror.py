"""A Hugging Face Hub mirror for tests: a real HTTP server on 127.0.0.1 serving the Hub's
documented paths for repos the test fills with bytes (tiny GGUFs), the way huggingface.co
answers them (huggingface_hub's hf_api.py and file_download.py read the same):

    GET /api/models/{repo}/revision/{rev}      {"id", "sha", "gated", "siblings": [{"rfilename"}]}
    GET /api/models/{repo}/tree/{rev}?recursive=true
                                               [{"type": "file", "path", "size", "oid", "lfs": {"oid", "size"}}]
                                               paged with a Link: <...>; rel="next" header
    GET /{repo}/resolve/{rev}/{path}           302 to /cdn/{sha256} (on `cdn_host`, another host name
                                               for the same server), as the Hub sends LFS files to its CDN
    GET /cdn/{sha256}                          the bytes: Range (206, Content-Range), ETag, Accept-Ranges

Errors as the Hub gives them (X-Error-Code RepoNotFound, GatedRepo, EntryNotFound). A repo can
be told to misbehave (Repo.mode) as a hostile or broken mirror would; every request is recorded.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from wiretap import SHUTDOWN_POLL

PAGE_SIZE = 2


@dataclass
class Repo:
    files: dict[str, bytes]
    commit: str = "c0ffee" + "0" * 34
    gated: bool = False
    token: str | None = None              # the token a gated repo takes
    mode: str = ""                        # html, corrupt, cut, redirect_scheme, huge_length, endless, traversal,
    #                                       no_range, slow, relative_redirect, redirect_loop, wrong_range,
    #                                       short_length, looping_pages, drip_api, bad_port; several joined by "+"
    cut_at: int = 0                       # cut: the connection closes after this many body bytes (once per file)
    delay: float = 0.0                    # slow: seconds between chunks
    extra_listing: list[dict] = field(default_factory=list)
    cuts_left: int = 1

    def has(self, mode: str) -> bool:
        return mode in self.mode.split("+")


@dataclass
class Seen:
    method: str
    path: str
    host: str
    range: str | None
    authorization: str | None
    # set once the mirror is done with the request: its answer sent whole, or the client gone
    answered: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)


class Mirror:
    def __init__(self, cdn_host: str = "localhost"):
        self.repos: dict[str, Repo] = {}
        self.blobs: dict[str, bytes] = {}
        self.seen: list[Seen] = []
        self.cdn_host = cdn_host
        handler = type("Handler", (_Handler,), {"mirror": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(SHUTDOWN_POLL,), daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(self, repo_id: str, repo: Repo) -> Repo:
        self.repos[repo_id] = repo
        for data in repo.files.values():
            self.blobs[hashlib.sha256(data).hexdigest()] = data
        return repo

    def cdn_requests(self, sha256: str) -> list[Seen]:
        return [s for s in self.seen if s.path == f"/cdn/{sha256}"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def listing(repo: Repo) -> list[dict]:
    items = [{"type": "directory", "oid": "0" * 40, "size": 0, "path": d}
             for d in sorted({p.rsplit("/", 1)[0] for p in repo.files if "/" in p})]
    for path, data in sorted(repo.files.items()):
        items.append({"type": "file", "oid": hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest(),
                      "size": len(data), "path": path,
                      "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}})
    if repo.has("traversal"):
        data = next(iter(repo.files.values()))
        for bad in ("../../../evil-Q4_K_M.gguf", "/etc/evil-Q4_K_M.gguf", "sub/../../evil-Q4_K_M.gguf"):
            items.append({"type": "file", "oid": "1" * 40, "size": len(data), "path": bad,
                          "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": len(data)}})
    return items + repo.extra_listing


class _Handler(BaseHTTPRequestHandler):
    mirror: Mirror
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        seen = Seen("GET", path, self.headers.get("Host", ""), self.headers.get("Range"),
                    self.headers.get("Authorization"))
        self.mirror.seen.append(seen)
        try:
            if path.startswith("/api/models/"):
                self.api(path[len("/api/models/"):], parse_qs(url.query))
            elif path.startswith("/cdn/"):
                self.cdn(path[len("/cdn/"):])
            elif "/resolve/" in path:
                repo_id, _, rest = path.lstrip("/").partition("/resolve/")
                self.resolve(repo_id, rest.partition("/")[2])
            else:
                self.reply(404, b"<html>not here</html>", "text/html")
        finally:
            seen.answered.set()

    def api(self, rest: str, query: dict) -> None:
        parts = rest.split("/")
        repo_id = "/".join(parts[:2])
        repo = self.mirror.repos.get(repo_id)
        if repo is None:
            return self.error(404, "RepoNotFound", "Repository not found")
        if repo.has("bad_port"):      # a redirect to a URL no client can open (its port past 65535)
            return self.reply(302, b"", None, [("Location", f"http://localhost:99999/api/models/{rest}")])
        if repo.has("drip_api"):      # the API's answer a byte at a time, each well within a read timeout
            body = json.dumps({"id": repo_id, "sha": repo.commit, "padding": " " * 4000}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for i in range(len(body)):
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    time.sleep(0.01)
            except OSError:
                pass
            return
        if repo.has("html"):
            return self.reply(200, b"<!doctype html><html><body>Welcome to the proxy</body></html>", "text/html")
        if parts[2:3] == ["revision"]:
            body = {"id": repo_id, "modelId": repo_id, "sha": repo.commit, "private": False,
                    "gated": "manual" if repo.gated else False,
                    "siblings": [{"rfilename": p} for p in sorted(repo.files)]}
            return self.reply(200, json.dumps(body).encode(), "application/json")
        if parts[2:3] == ["tree"]:
            items = listing(repo)
            start = int(query.get("cursor", ["0"])[0])
            page = items[start:start + PAGE_SIZE]
            headers = []
            if repo.has("looping_pages"):       # a next page that is this page again, for ever
                headers.append(("Link", f'<{self.mirror.endpoint}/api/models/{repo_id}/tree/{repo.commit}'
                                        f'?recursive=true&cursor={start}>; rel="next"'))
            elif start + PAGE_SIZE < len(items):
                headers.append(("Link", f'<{self.mirror.endpoint}/api/models/{repo_id}/tree/{repo.commit}'
                                        f'?recursive=true&cursor={start + PAGE_SIZE}>; rel="next"'))
            return self.reply(200, json.dumps(page).encode(), "application/json", headers)
        self.error(404, "EntryNotFound", "not found")

    def resolve(self, repo_id: str, path: str) -> None:
        repo = self.mirror.repos.get(repo_id)
        if repo is None:
            return self.error(404, "RepoNotFound", "Repository not found")
        if repo.gated and self.headers.get("Authorization") != f"Bearer {repo.token}":
            status = 403 if self.headers.get("Authorization") else 401
            return self.error(status, "GatedRepo", "Access to this model is restricted")
        data = repo.files.get(path)
        if data is None:
            return self.error(404, "EntryNotFound", "Entry not found")
        sha = hashlib.sha256(data).hexdigest()
        if repo.has("redirect_scheme"):
            return self.reply(302, b"", None, [("Location", f"file:///etc/{sha}")])
        if repo.has("redirect_loop"):
            return self.reply(302, b"", None, [("Location", f"/{repo_id}/resolve/{repo.commit}/{path}")])
        if repo.has("relative_redirect"):
            return self.reply(302, b"", None, [("Location", f"/cdn/{sha}")])
        headers = [("Location", f"http://{self.mirror.cdn_host}:{self.mirror.port}/cdn/{sha}"),
                   ("X-Repo-Commit", repo.commit), ("X-Linked-Etag", f'"{sha}"'), ("X-Linked-Size", str(len(data))),
                   ("ETag", f'"{hashlib.sha1(data).hexdigest()}"')]
        self.reply(302, b"", None, headers)

    def cdn(self, sha: str) -> None:
        data = self.mirror.blobs.get(sha)
        repo = next((r for r in self.mirror.repos.values() if any(hashlib.sha256(d).hexdigest() == sha
                                                                   for d in r.files.values())), None)
        if data is None or repo is None:
            return self.reply(404, b"", "text/plain")
        if repo.has("html"):
            return self.reply(200, b"<html>blocked</html>", "text/html")
        if repo.has("corrupt"):
            data = data[:100] + bytes([data[100] ^ 1]) + data[101:]
        start, status, headers = 0, 200, [("ETag", f'"{sha}"'), ("Accept-Ranges", "bytes")]
        wanted = self.headers.get("Range")
        if wanted and not repo.has("no_range"):
            start = int(wanted.removeprefix("bytes=").split("-")[0])
            status = 206
            if repo.has("wrong_range"):     # the answer starts elsewhere than asked (and says so)
                start = max(0, start - 1000)
            headers.append(("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}"))
        body = data[start:]
        length = len(body)
        if repo.has("huge_length"):
            length = 1 << 50
        if repo.has("short_length"):        # a Content-Length less than the file, then the whole file
            length -= 1000
        headers.append(("Content-Length", str(length)) if not repo.has("endless") else ("Connection", "close"))
        self.send_response(status)
        for name, value in headers + [("Content-Type", "application/octet-stream")]:
            self.send_header(name, value)
        self.end_headers()
        if repo.has("cut") and repo.cuts_left > 0:
            repo.cuts_left -= 1
            self.wfile.write(body[:repo.cut_at])
            self.wfile.flush()
            self.close_connection = True
            return
        try:
            if repo.has("endless"):
                self.wfile.write(body)
                for _ in range(1000):
                    self.wfile.write(b"\0" * 65536)
                return
            for i in range(0, len(body), 4096):
                self.wfile.write(body[i:i + 4096])
                if repo.delay:
                    self.wfile.flush()
                    time.sleep(repo.delay)
        except OSError:
            pass
        self.close_connection = repo.has("endless") or repo.has("short_length")

    def error(self, status: int, code: str, message: str) -> None:
        self.reply(status, json.dumps({"error": message}).encode(), "application/json",
                   [("X-Error-Code", code), ("X-Error-Message", message)])

    def reply(self, status: int, body: bytes, content_type: str | None, headers: list = ()) -> None:
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
