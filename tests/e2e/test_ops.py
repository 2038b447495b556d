"""Running as a service: config file, --check, systemd notify and socket activation,
API keys, the Host check against DNS rebinding, and CORS."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from clients import anthropic_sdk, openai_sdk
from conftest import ROOT, ServerProcess
from rawhttp import post_json, request

from localserve.cli.flags import build_parser, resolve_settings


def run_cli(*args, env=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "localserve", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def get(port, path, headers=""):
    return request(port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n".encode())


# ---- config file ------------------------------------------------------------------

def test_config_file_precedence(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('model = "/m.gguf"\nport = 9000\nctx_size = 1024\nprefill-keepalive = 2.5\n'
                      'api-key = ["a", "b"]\nno-store = true\n')
    args = build_parser().parse_args(["--config", str(config), "--port", "1234"])
    settings = resolve_settings(args, {"LOCALSERVE_CTX_SIZE": "2048"})
    assert settings.port == 1234                  # flag beats file
    assert settings.ctx_size == 2048              # environment beats file
    assert settings.prefill_keepalive == 2.5 and settings.model == "/m.gguf"   # file beats default
    assert settings.api_key == ["a", "b"] and settings.no_store is True
    assert resolve_settings(build_parser().parse_args([]), {"LOCALSERVE_CONFIG": str(config)}).port == 9000


@pytest.mark.parametrize("text,key", [('nope = 1', "nope"), ('port = "eighty"', "port"),
                                      ('ctx-size = 0', "ctx-size"), ('no_store = "yes"', "no_store")])
def test_bad_config_is_exit_2_naming_file_and_key(tmp_path, text, key):
    config = tmp_path / "bad.toml"
    config.write_text(text + "\n")
    result = run_cli("--config", str(config))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(config) in lines[0] and f"'{key}'" in lines[0]


def test_check_validates_and_prints_settings(tmp_path, tiny_model):
    config = tmp_path / "ok.toml"
    config.write_text(f'model = "{tiny_model}"\nport = 9123\n')
    result = run_cli("--config", str(config), "--check")
    assert result.returncode == 0, result.stderr
    assert "port = 9123" in result.stdout and str(tiny_model) in result.stdout
    broken = run_cli("--model", str(tmp_path / "missing.gguf"), "--check")
    assert broken.returncode == 2 and "not found" in broken.stderr


# ---- systemd ----------------------------------------------------------------------

def notify_socket(tmp_path):
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(30)
    return sock, path


def receive_until(sock, needle: str, timeout: float = 30) -> list[str]:
    messages, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = sock.recv(4096).decode()
        messages.append(message)
        if needle in message:
            return messages
    raise AssertionError(f"{needle} never arrived: {messages}")


def test_sd_notify_ready_watchdog_stopping(tmp_path, tiny_model):
    sock, path = notify_socket(tmp_path)
    srv = ServerProcess(tiny_model, env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"}, wait=False)
    try:
        ready = receive_until(sock, "READY=1")
        assert any("STATUS=serving" in m for m in ready)
        assert get(srv.port, "/health").status == 200          # READY only once it serves
        receive_until(sock, "WATCHDOG=1", timeout=5)
        srv.proc.send_signal(signal.SIGTERM)
        receive_until(sock, "STOPPING=1", timeout=10)
        assert srv.proc.wait(15) == 0
    finally:
        srv.stop()
        sock.close()


def test_socket_activation(tmp_path, tiny_model):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    fd = listener.fileno()
    cmd = ["sh", "-c", f'LISTEN_PID=$$ LISTEN_FDS=1 exec "{sys.executable}" -m localserve --model "{tiny_model}" '
                       f'--port 1 --threads 2']
    proc = subprocess.Popen(cmd, cwd=ROOT, pass_fds=(3,), preexec_fn=lambda: os.dup2(fd, 3),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    listener.close()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if get(port, "/health").status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        assert get(port, "/health").status == 200       # served on the inherited socket, not port 1
    finally:
        proc.terminate()
        proc.wait(15)


# ---- API keys, Host, CORS -----------------------------------------------------------

@pytest.fixture(scope="module")
def guarded(tiny_model, tmp_path_factory):
    key_file = tmp_path_factory.mktemp("keys") / "keys.txt"
    key_file.write_text("# comment\nfrom-file\n")
    srv = ServerProcess(tiny_model, "--api-key", "k1", "--api-key", "k2", "--api-key-file", str(key_file),
                        "--allowed-host", "llm.internal", "--allowed-host", ".lan.example",
                        "--cors-origin", "http://app.example", "--no-store")
    yield srv
    srv.stop()


def test_api_key_required_except_health(guarded):
    assert get(guarded.port, "/health").status == 200
    missing = get(guarded.port, "/v1/models")
    assert missing.status == 401 and missing.json()["error"]["code"] == "invalid_api_key"
    assert get(guarded.port, "/v1/models", "Authorization: Bearer wrong\r\n").status == 401
    for header in ("Authorization: Bearer k1\r\n", "Authorization: bearer k2\r\n", "x-api-key: from-file\r\n"):
        assert get(guarded.port, "/v1/models", header).status == 200


def test_401_in_each_dialect(guarded):
    import anthropic
    import openai
    with pytest.raises(openai.AuthenticationError):
        openai_sdk(guarded, api_key="bad", strict=False).models.list()
    with pytest.raises(anthropic.AuthenticationError) as info:
        anthropic_sdk(guarded, api_key="bad", strict=False).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert info.value.body["error"]["type"] == "authentication_error"
    client = openai_sdk(guarded, api_key="k1")
    assert client.models.list().data


@pytest.mark.parametrize("host,status", [
    ("localhost", 200), ("127.0.0.1:8080", 200), ("[::1]:8080", 200), ("app.localhost", 200),
    ("192.168.1.20", 200), ("llm.internal", 200), ("box.lan.example:8080", 200),
    ("evil.example.com", 403), ("attacker.test:8080", 403), ("lan.example.org", 403),
    # a loopback name or address inside the attacker's own name (DNS rebinding)
    ("localhost.evil.com", 403), ("evil-localhost.com", 403), ("localhost.evil.com:8080", 403),
    ("app.localhost.evil.com", 403), ("127.0.0.1.nip.io", 403), ("llm.internal.evil.com", 403),
    ("xn--lcalhost-nbh", 403), ("localhost.", 200), ("evil.com.", 403),
])
def test_host_check_defends_against_dns_rebinding(guarded, host, status):
    resp = request(guarded.port, f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\nx-api-key: k1\r\n\r\n".encode())
    assert resp.status == status
    if status == 403:
        assert resp.json()["error"]["code"] == "host_not_allowed"


@pytest.mark.parametrize("host", ["localhost:80@evil.com", "user@localhost", "localhost:abc", "[::1]evil.com"])
def test_a_host_with_userinfo_or_junk_is_400(guarded, host):
    resp = request(guarded.port, f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\nx-api-key: k1\r\n\r\n".encode())
    assert resp.status == 400


def test_cors_off_by_default_and_allowlisted(guarded, server):
    plain = get(server.port, "/v1/models", "Origin: http://app.example\r\n")
    assert plain.header("access-control-allow-origin") is None          # off by default
    allowed = get(guarded.port, "/v1/models", "Origin: http://app.example\r\nx-api-key: k1\r\n")
    assert allowed.header("access-control-allow-origin") == "http://app.example"
    other = get(guarded.port, "/v1/models", "Origin: http://evil.example\r\nx-api-key: k1\r\n")
    assert other.header("access-control-allow-origin") is None


def test_cors_preflight(guarded):
    preflight = request(guarded.port, b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
                        b"Origin: http://app.example\r\nAccess-Control-Request-Method: POST\r\n"
                        b"Access-Control-Request-Headers: authorization, content-type\r\n\r\n")
    assert preflight.status == 204                                       # no API key needed for a preflight
    assert preflight.header("access-control-allow-origin") == "http://app.example"
    assert "POST" in preflight.header("access-control-allow-methods")
    assert preflight.header("access-control-allow-headers") == "authorization, content-type"
    refused = request(guarded.port, b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n"
                      b"Origin: http://evil.example\r\nAccess-Control-Request-Method: POST\r\n\r\n")
    assert refused.header("access-control-allow-origin") is None


def test_streams_carry_cors_headers(guarded):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True}
    resp = request(guarded.port, post_json("/v1/chat/completions", body,
                                           "Origin: http://app.example\r\nx-api-key: k1\r\n"))
    assert resp.status == 200 and resp.header("access-control-allow-origin") == "http://app.example"
