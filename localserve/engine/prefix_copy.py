"""How one sequence is handed another's prefix, and which models cannot be.

By default each sequence has a KV stream of its own: the prefix is copied as data
(llama_state_seq_get_data from the holder, set_data into the taker, cut at the prefix's end),
some milliseconds of memory copying where computing it takes seconds, and a sequence's logits
never depend on the others' cells. llama_memory_seq_cp copies only whole streams across streams
(it asserts on a partial copy). With --kv-unified every sequence lives in one pool of cells and
seq_cp lets the taker own the holder's prefix cells: nothing copied, the prefix's memory held
once; but every step's attention then spans the cells of all sequences, idle ones included.
"""

from __future__ import annotations

from llama_cpp import llama_cpp as ll

SHARING_OFF = "--no-prefix-sharing"    # the copy blocker when the user turned sharing off
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
