"""The official SDK clients the tests drive a server with: strict response validation, no retries.

Strict validation makes the SDK reject any field or type the API does not define; no retries
keeps one request one request, so an error status reaches the test as it was sent.
"""

from __future__ import annotations

import anthropic
import ollama
import openai


def openai_sdk(server, api_key: str = "test", strict: bool = True) -> openai.OpenAI:
    """An OpenAI client for a ServerProcess (or anything with a base_url); strict=False only where
    the SDK's own types forbid what the API sends (said at the call)."""
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=api_key, max_retries=0,
                         _strict_response_validation=strict)


def anthropic_sdk(server, api_key: str = "x", strict: bool = True) -> anthropic.Anthropic:
    """An Anthropic client for a ServerProcess (or anything with a base_url)."""
    return anthropic.Anthropic(base_url=server.base_url, api_key=api_key, max_retries=0,
                               _strict_response_validation=strict)


def ollama_client(server, headers: dict | None = None) -> ollama.Client:
    """The official Ollama client for a ServerProcess (Ollama's own API at the server's root)."""
    return ollama.Client(host=server.base_url, headers=headers)


def ollama_async_client(server) -> ollama.AsyncClient:
    return ollama.AsyncClient(host=server.base_url)
