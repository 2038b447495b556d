"""How the KV cache is laid out so sequences can share a prefix, and which models cannot.

With a unified KV cache every sequence lives in one pool of cells, and llama_memory_seq_cp
lets a second sequence own the cells of a first one's prefix: a metadata change, nothing is
computed or copied (llama.cpp's kv cache, "both sequences are in the same stream"). Without it,
each sequence has a stream of its own and llama.cpp copies only whole streams (it asserts on a
partial copy), so prefix sharing needs the unified cache, as llama-server's default does.
"""

from __future__ import annotations

from llama_cpp import llama_cpp as ll

CELL_PAD = 256      # llama.cpp pads the context (and each stream of a split cache) to this many cells


def pad(n: int) -> int:
    return -(-n // CELL_PAD) * CELL_PAD


def context_sizes(n_ctx_seq: int, n_seq: int) -> tuple[int, int]:
    """(cells of the whole cache, positions each sequence may use) for n_ctx_seq asked per sequence:
    the numbers llama.cpp gives a split cache, so a unified one admits exactly the same prompts."""
    per_seq = pad(pad(n_ctx_seq * n_seq) // n_seq)
    return per_seq * n_seq, per_seq


def copy_blocker(model) -> str | None:
    """Why no prefix of this model's sequences can be copied into another, or None when it can.

    A recurrent layer keeps one state per sequence, the sum of every token so far: there is no
    state for "the first n tokens" to hand on, and llama.cpp copies only the whole of it. Such a
    model's sequences each compute their own prompt, as they do with sharing off."""
    if ll.llama_model_is_recurrent(model):
        return "its recurrent state cannot be copied in part"
    if ll.llama_model_is_hybrid(model):
        return "its recurrent layers' state cannot be copied in part"
    return None


def shares_cells(model) -> bool:
    """Whether two sequences may own the same cells. llama.cpp reuses a sliding-window cell once its
    one owner's window has moved past it; a cell two sequences own is never reused, so shared window
    cells would fill that cache. A sliding-window model's prefix is copied as data instead
    (llama_state_seq_get/set_data), and only while its holder's window still covers the prefix's end."""
    return ll.llama_model_n_swa(model) <= 0
