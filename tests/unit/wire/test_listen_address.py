"""--ollama-listen's address: HOST:PORT, [IPv6]:PORT, :PORT or PORT (port 0: any free one); anything else
refused by name. --port: 0..65535."""

from __future__ import annotations

import pytest

from localserve.cli.flags import build_parser, resolve_settings
from localserve.wire.server import listen_address


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


@pytest.mark.parametrize("text", ["", "host", "host:", "host:65536", "host:x1", "1.2.3.4:-5", "host:-0"])
def test_bad_addresses(text):
    with pytest.raises(ValueError, match="not an address"):
        listen_address(text, "127.0.0.1")


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
