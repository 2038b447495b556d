"""Handing freed memory back to the system after a big request, and reading our RSS.

glibc's malloc keeps what Python frees for reuse, and two of its habits keep a big
request's memory after the request is gone:
- Its mmap threshold is dynamic: once a 30 MB block that was mmapped is freed, blocks up
  to 30 MB come from the heap from then on, and the heap is only shrunk when twice that is
  free at its top. A fixed threshold (MALLOC_MMAP_THRESHOLD, set once at start) keeps every
  big block in its own mapping, returned to the kernel the moment it is freed, and keeps the
  trim threshold at its small default.
- Free chunks inside a heap stay resident. malloc_trim(0) gives their pages back; it costs
  a few milliseconds on a large heap, so it runs only after requests of TRIM_AFTER_BYTES or
  more.
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
MALLOC_MMAP_THRESHOLD = 1024 * 1024    # glibc: blocks this large get their own mapping

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
