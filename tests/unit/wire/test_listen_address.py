"""--ollama-listen's address: HOST:PORT, [IPv6]:PORT, :PORT or PORT (port 0: any free one); anything else
refused by name (a host no socket can bind too, and a port in other digits than ASCII's). --port:
0..65535. --host: a name or address a socket can bind, IPv6 in brackets or not."""

from __future__ import annotations

import pytest

from localserve.cli.flags import build_parser, resolve_settings
from localserve.wire.server import http_url, listen_address, listen_host


@pytest.mark.parametrize("text, address", [
    ("127.0.0.1:11434", ("127.0.0.1", 11434)),
    ("0.0.0.0:8081", ("0.0.0.0", 8081)),
    ("[::1]:11434", ("::1", 11434)),
    (":11434", ("127.0.0.1", 11434)),
    ("11434", ("127.0.0.1", 11434)),
    ("localhost:1", ("localhost", 1)),
    ("localhost:65535", ("localhost", 65535)),
    ("127.0.0.1:0", ("127.0.0.1", 0)),          # any free port: the log's "listening on" line names it
    (":0", ("127.0.0.1", 0)),
])
def test_addresses(text, address):
    assert listen_address(text, "127.0.0.1") == address


@pytest.mark.parametrize("text", ["", "host", "host:", "host:65536", "host:x1", "1.2.3.4:-5", "host:-0",
                                  # digits of other scripts (int() reads them), past the digits a port has
                                  ":\u0661\u0661\u0664\u0663\u0664", ":\u00b2", "host:" + "9" * 5000, "host:000080",
                                  # a bracket left open or closed with no port after it
                                  "[::1", "[::1]", "[::1]x:80", "::1]:80"])
def test_bad_addresses(text):
    with pytest.raises(ValueError, match="not an address|not a host"):
        listen_address(text, "127.0.0.1")


@pytest.mark.parametrize("host", ["a\x00b", "a b", "host\n", "\u00e9" * 70, "[::1", "a]"])
def test_a_host_no_socket_can_bind_is_refused_by_name(host):
    """They raised TypeError from bind() (a traceback at start, not the usage error)."""
    with pytest.raises(ValueError, match="not a host"):
        listen_host(host)
    with pytest.raises(ValueError, match="not an address|not a host"):
        listen_address(f"{host}:80", "127.0.0.1")


@pytest.mark.parametrize("text, host", [("127.0.0.1", "127.0.0.1"), ("[::1]", "::1"), ("::", "::"),
                                        ("localhost", "localhost"), ("b\u00fccher.example", "b\u00fccher.example")])
def test_hosts_taken(text, host):
    assert listen_host(text) == host


@pytest.mark.parametrize("host", ["a\x00b", "host name", "[::1"])
def test_a_bad_host_flag_is_a_usage_error(host, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--host", host])
    assert exited.value.code == 2 and "--host" in capsys.readouterr().err


@pytest.mark.parametrize("host, url", [("127.0.0.1", "http://127.0.0.1:80"), ("::1", "http://[::1]:80"),
                                       ("::", "http://[::]:80")])
def test_an_ipv6_address_is_bracketed_in_a_url(host, url):
    assert http_url(host, 80) == url


def test_the_flag_the_environment_the_config_and_the_default(tmp_path):
    parser = build_parser()
    assert resolve_settings(parser.parse_args([]), {}).ollama_listen is None
    assert resolve_settings(parser.parse_args(["--ollama-listen", ":11434"]), {}).ollama_listen == "127.0.0.1:11434"
    env = {"LOCALSERVE_OLLAMA_LISTEN": "[::1]:11434"}
    assert resolve_settings(parser.parse_args([]), env).ollama_listen == "[::1]:11434"
    config = tmp_path / "localserve.toml"
    config.write_text('ollama-listen = "0.0.0.0:11434"\n')
    assert resolve_settings(parser.parse_args(["--config", str(config)]), {}).ollama_listen == "0.0.0.0:11434"


@pytest.mark.parametrize("port", ["0", "1", "65535"])
def test_port_takes_0_to_65535(port):
    assert resolve_settings(build_parser().parse_args(["--port", port]), {}).port == int(port)


@pytest.mark.parametrize("port", ["-1", "65536", "70000", "x"])
def test_a_port_past_the_range_is_a_usage_error(port, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--port", port])
    assert exited.value.code == 2 and "--port" in capsys.readouterr().err
