"""Before and during a model load: checking the file, and reading llama.cpp's log of the load.

llama.cpp reports why a load failed, and where it put each layer, only in its log; the
callback installed here keeps what the engine needs from it.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import re
import threading
from typing import Callable, Sequence

from llama_cpp import llama_cpp as ll

GGUF_MAGIC = b"GGUF"


class ModelLoadError(Exception):
    """The model file cannot be served; the message is one line for the user."""


_log_callback = None
recent_native_errors: collections.deque[str] = collections.deque(maxlen=16)
capture_only = threading.local()
load_messages: list[str] = []          # llama.cpp's log of the current model load
# A unified KV cache's "n_ctx_seq" is the whole cache's: llama.cpp's warning that it passes the
# training context is about the sum of all sequences then, not one (the engine checks its own).
whole_cache_context = threading.local()
_WHOLE_CACHE_WARNING = "n_ctx_train"
_LAYER_DEVICE = re.compile(r"layer\s+(\d+) assigned to device ([^,\s]+)")


def quiet_llama_logs(level: int = logging.WARNING) -> None:
    """Route llama.cpp's own logging to Python's logger (it prints to stderr otherwise).

    Warnings and errors are remembered so a failed load can name llama.cpp's reason
    in one line instead of a screenful.
    """
    global _log_callback
    native = logging.getLogger("localserve.llama")

    @ll.llama_log_callback
    def callback(lvl, text, _user_data):
        # ggml levels: 1 debug, 2 info, 3 warn, 4 error, 5 continuation of the last line
        message = text.decode("utf-8", "replace").rstrip()
        if not message:
            return
        if getattr(whole_cache_context, "on", False) and _WHOLE_CACHE_WARNING in message:
            return
        if getattr(capture_only, "on", False):
            load_messages.append(message)
        if lvl in (3, 4):
            recent_native_errors.append(message)
            if level <= logging.WARNING and not getattr(capture_only, "on", False):
                native.warning(message)
        elif level <= logging.DEBUG:
            native.debug(message)

    _log_callback = callback      # keep the ctypes thunk alive
    ll.llama_log_set(callback, ctypes.c_void_p(0))


def route_mtmd_logs(mtmd) -> None:
    """libmtmd (the vision projector: vision.py) logs through the same callback as llama.cpp."""
    if _log_callback is not None:
        mtmd.mtmd_log_set(_log_callback, ctypes.c_void_p(0))
        mtmd.mtmd_helper_log_set(_log_callback, ctypes.c_void_p(0))


def layer_devices() -> dict[int, str]:
    """Which device llama.cpp put each layer on, from its load log (its "offloaded N
    layers to GPU" line counts layers it meant to offload even when no GPU exists)."""
    devices = {}
    for message in load_messages:
        found = _LAYER_DEVICE.search(message)
        if found:
            devices[int(found.group(1))] = found.group(2)
    return devices


def progress_callback(report: Callable[[float], None] | None):
    """llama_model_params' progress_callback for `report` (None: none): it hears each fraction
    of the weights read, on the loading thread. It always answers "go on": an exception in
    `report` is logged, never a reason to abort the load."""
    if report is None:
        return None

    @ll.llama_progress_callback
    def callback(value, _user_data):
        try:
            report(float(value))
        except Exception:
            logging.getLogger("localserve.engine").exception("the load's progress report failed")
        return True

    return callback


def tensor_split(proportions: Sequence[float] | None):
    if not proportions:
        return None
    if len(proportions) > ll.LLAMA_MAX_DEVICES:
        raise ModelLoadError(f"--tensor-split has {len(proportions)} values; this llama.cpp handles at most "
                             f"{ll.LLAMA_MAX_DEVICES} devices")
    return (ctypes.c_float * ll.LLAMA_MAX_DEVICES)(*proportions)


def native_reason() -> str:
    for message in recent_native_errors:
        if "failed to load model" not in message and "error loading model" not in message:
            return message.split(": ", 1)[-1]
    return "unknown reason"


def check_model_file(path: str) -> None:
    if not os.path.exists(path):
        raise ModelLoadError(f"model file not found: {path}")
    if os.path.isdir(path):
        raise ModelLoadError(f"model path is a directory, not a GGUF file: {path}")
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise ModelLoadError(f"cannot read model file {path}: {exc.strerror}") from None
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"not a GGUF model file: {path}")
