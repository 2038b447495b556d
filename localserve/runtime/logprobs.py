"""Logprob arithmetic for one step's logits row: the log-softmax, the top alternatives, and the
chosen token's entry. A token's text is its bytes decoded with "replace", but its `bytes` are
always the token's own: a token that is half a UTF-8 character reports that half, not U+FFFD."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np


def distribution(logits: np.ndarray, top_n: int, piece: Callable[[int], bytes]) -> dict:
    """The log-probabilities of every token (kept under "_all" until a token is chosen) and the
    top_n most likely, best first."""
    # float32 as the logits are, one copy of the row: a vocabulary can be 262k tokens, every token
    all_logprobs = logits - logits.max()
    all_logprobs -= np.float32(math.log(float(np.exp(all_logprobs).sum(dtype=np.float64))))
    entry: dict = {"_all": all_logprobs, "top_logprobs": []}
    if top_n:
        best = np.argpartition(-all_logprobs, top_n)[:top_n]
        best = best[np.argsort(-all_logprobs[best])]
        entry["top_logprobs"] = [token_fields(int(t), piece(int(t)), float(all_logprobs[t])) for t in best]
    return entry


def choose(entry: dict, token: int, piece: bytes) -> dict:
    """Complete the entry for the token that was chosen."""
    entry.update(token_fields(token, piece, float(entry.pop("_all")[token])))
    return entry


def token_fields(token: int, piece: bytes, logprob: float) -> dict:
    """A token's entry, with its id as llama-server gives it (in its OpenAI chat logprobs too)."""
    return {"id": token, "token": piece.decode("utf-8", "replace"), "logprob": logprob, "bytes": list(piece)}
