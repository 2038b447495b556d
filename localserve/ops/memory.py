"""Handing freed memory back to the system after a big request, and reading our RSS.

glibc's malloc keeps what Python frees for reuse, and two of its habits keep a big
request's memory after the request is gone:
- Its mmap threshold is dynamic: once a 30 MB block that was mmapped is freed, blocks up
  to 30 MB come from the heap from then on, and the heap is only shrunk when twice that is
  free at its top. A fixed threshold (MALLOC_MMAP_THRESHOLD, set once at start) keeps the
  trim threshold at its small default.
- Free chunks inside a heap stay resident. malloc_trim(0) gives their pages back; it costs
  a few milliseconds on a large heap, so it runs only after requests of TRIM_AFTER_BYTES or
  more.
The threshold is glibc's largest (32 MiB), not a small one: llama.cpp's buffers (a
context's KV cache and compute buffer, repacked weights, its work buffer) then come from the
heap. Each in its own mapping (all of them then start at the same offset in a page: the
likely cause, not confirmed), a prefill ran 13 % slower: Gemma 3 270M at 8192 tokens of
context, two contexts side by side in one process, 1.21-1.27 s against 1.08-1.12 s for the
same 495 tokens. A block over 32 MiB (a large model's KV cache) has its own mapping whatever
the setting.
Where libc is not glibc (musl, macOS) neither call exists and nothing is done.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import os
import threading

TRIM_AFTER_BYTES = 1024 * 1024     # a request body this large: give freed memory back afterwards
MALLOC_MMAP_THRESHOLD = 32 * 1024 * 1024    # glibc: blocks this large get their own mapping (its maximum)

M_MMAP_THRESHOLD = -3      # mallopt parameter number (malloc.h)


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


_LIBC = _libc()
_malloc_trim = getattr(_LIBC, "malloc_trim", None)
_mallopt = getattr(_LIBC, "mallopt", None)


def configure_malloc() -> None:
    """Fix glibc's mmap threshold (see above); call once, early."""
    if _mallopt is not None:
        _mallopt(ctypes.c_int(M_MMAP_THRESHOLD), ctypes.c_int(MALLOC_MMAP_THRESHOLD))


def release_free_memory() -> None:
    if _malloc_trim is not None:
        _malloc_trim(ctypes.c_size_t(0))


_gc_pauses = 0             # threads inside gc_paused() now
_gc_resume = False         # whether the collector was on when the first of them came in
_gc_lock = threading.Lock()


@contextlib.contextmanager
def gc_paused():
    """No cyclic collection inside: for building a tree of millions of objects (a parsed JSON
    body has no cycles), where collections triggered by the allocations cost 5x the parse."""
    global _gc_pauses, _gc_resume
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_resume = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_resume:
                gc.enable()


def rss_bytes() -> int | None:
    """The resident set size of this process (Linux), None where /proc is not there."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
