"""The names a pull takes, as llama-server and Ollama take them:

    org/repo            org/repo:Q4_K_M          (llama-server's -hf, POST /models)
    hf.co/org/repo      hf.co/org/repo:q4_k_m    (Ollama's; huggingface.co/ too; `:latest` = no quant)
    https://huggingface.co/org/repo              (a repo's page, as copied from a browser)

Anything else is refused before any request: another host, a path (`..`, `/` beyond org/repo,
a backslash), a quant that is not a plain word.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..hf_layout import valid_repo_id
from .errors import bad_name

HUB_HOSTS = ("hf.co", "huggingface.co")
HOSTNAME = re.compile(r"^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+(:\d+)?\Z")
QUANT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}\Z")
LATEST = "latest"
MAX_NAME = 300


@dataclass(frozen=True)
class HubName:
    repo_id: str
    quant: str | None        # None: llama-server's default choice

    def __str__(self) -> str:
        return self.repo_id + (f":{self.quant}" if self.quant else "")


def is_hub_name(name: str) -> bool:
    """Whether a name is meant for the Hub (has an org/repo shape or a Hub host), right or wrong."""
    return "/" in name or "://" in name


def parse_hub_name(name: object, endpoint_host: str | None = None) -> HubName:
    if not isinstance(name, str) or not name.strip():
        raise bad_name("expected a model name: org/repo[:quant] or hf.co/org/repo[:quant]")
    if len(name) > MAX_NAME:
        raise bad_name(f"a model name is at most {MAX_NAME} characters")
    rest = name.strip()
    hosts = HUB_HOSTS + ((endpoint_host,) if endpoint_host else ())
    if "://" in rest:
        url = urlsplit(rest)
        if url.scheme not in ("http", "https") or (url.hostname or "").lower() not in hosts:
            raise bad_name(f"'{shorten(name)}' names another host: a pull fetches from the Hugging Face Hub "
                           f"(or $HF_ENDPOINT) only, as org/repo[:quant]")
        rest = url.path.strip("/")
        if url.query or url.fragment:
            raise bad_name(f"'{shorten(name)}': a model name has no query or fragment")
    else:
        first, _, after = rest.partition("/")
        if first.lower() in hosts:
            rest = after
        elif HOSTNAME.match(first) and after.count("/") >= 1:
            raise bad_name(f"'{shorten(name)}' names another host ({first}): a pull fetches from the Hugging Face "
                           f"Hub (or $HF_ENDPOINT) only")
    repo_part, _, quant = rest.partition(":")
    if not valid_repo_id(repo_part):
        raise bad_name(f"'{shorten(name)}' is not a Hub repo: expected org/repo[:quant] (letters, digits, "
                       f"'-', '_', '.'; no path)")
    if quant == "" and rest.endswith(":"):
        raise bad_name(f"'{shorten(name)}': the quant after ':' is empty")
    if quant and not QUANT.match(quant):
        raise bad_name(f"'{shorten(name)}': the quant '{shorten(quant)}' is not a quantization name "
                       f"(such as Q4_K_M)")
    return HubName(repo_part, None if not quant or quant.lower() == LATEST else quant)


def shorten(text: str, limit: int = 80) -> str:
    shown = text.encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= limit else shown[:limit] + "…"
