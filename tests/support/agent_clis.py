"""The coding-agent CLIs (Codex CLI, Claude Code, Qwen Code, Continue's `cn`) that end-to-end tests drive.

`make agent-clis` (a prerequisite of `make test`) installs the pinned versions from the npm
registry into .cache/agent-clis. A test asks for a binary with :func:`codex_binary`,
:func:`claude_binary`, :func:`qwen_binary` or :func:`continue_binary`: without node, or without the install, it fails saying which command
installs it; LOCALSERVE_TEST_SKIP=agent-clis skips these tests (needs.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from needs import check_skip, missing

ROOT = Path(__file__).resolve().parents[2]
AGENT_CLIS = ROOT / ".cache" / "agent-clis"
CODEX_VERSION = "0.171.0"
CLAUDE_CODE_VERSION = "2.1.332"
OLLAMA_JS_VERSION = "0.6.4"
ANTHROPIC_JS_VERSION = "1.17.0"
QWEN_CODE_VERSION = "0.15.10"
CONTINUE_CLI_VERSION = "1.5.47"

__all__ = ["AGENT_CLIS", "ANTHROPIC_JS_VERSION", "CLAUDE_CODE_VERSION", "CODEX_VERSION", "CONTINUE_CLI_VERSION",
           "OLLAMA_JS_VERSION", "QWEN_CODE_VERSION", "anthropic_js_module", "claude_binary", "codex_binary",
           "continue_binary", "ollama_js_module", "qwen_binary"]


def _binary(name: str, package: str, version: str) -> Path:
    check_skip("agent-clis")
    if shutil.which("node") is None:
        missing("agent-clis", f"node is not installed: the {package} end-to-end test needs it")
    path = AGENT_CLIS / "node_modules" / ".bin" / name
    if not path.exists():
        pytest.fail(f"{package}@{version} is not installed in {AGENT_CLIS}: run `make agent-clis`")
    found = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60,
                           env={**os.environ, "NO_COLOR": "1"})
    if version not in found.stdout:
        pytest.fail(f"{path} is {found.stdout.strip() or found.stderr.strip()!r}, not {version}: "
                    "run `make agent-clis`")
    return path


def codex_binary() -> Path:
    return _binary("codex", "@openai/codex", CODEX_VERSION)


def claude_binary() -> Path:
    return _binary("claude", "@anthropic-ai/claude-code", CLAUDE_CODE_VERSION)


def qwen_binary() -> Path:
    return _binary("qwen", "@qwen-code/qwen-code", QWEN_CODE_VERSION)


def continue_binary() -> Path:
    return _binary("cn", "@continuedev/cli", CONTINUE_CLI_VERSION)


def ollama_js_module() -> Path:
    """The official `ollama` npm package's folder, for a node script to import (node's own path:
    the package is a library, not a binary)."""
    return _js_package("ollama", OLLAMA_JS_VERSION)


def anthropic_js_module() -> Path:
    """The official Anthropic TypeScript SDK's folder (`@anthropic-ai/sdk`), for a node script."""
    return _js_package("@anthropic-ai/sdk", ANTHROPIC_JS_VERSION)


def _js_package(name: str, version: str) -> Path:
    check_skip("agent-clis")
    if shutil.which("node") is None:
        missing("agent-clis", f"node is not installed: the {name} JavaScript client's test needs it")
    package = AGENT_CLIS / "node_modules" / name
    try:
        found = json.loads((package / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        pytest.fail(f"{name}@{version} (npm) is not installed in {AGENT_CLIS}: run `make agent-clis`")
    if found != version:
        pytest.fail(f"{package} is {name}@{found}, not {version}: run `make agent-clis`")
    return package
