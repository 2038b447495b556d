"""llama.cpp's RPC backend (ggml-rpc) through ctypes: workers, probing, registration, aborts.

A worker (`localserve worker`) runs ggml's RPC server and computes the layers a front
offloads to it; a front (`localserve --rpc HOST:PORT,...`) registers each worker as a
llama.cpp device before the model loads, as llama-server's `--rpc` does. No distribution
layer of our own: llama.cpp places layers on devices and ships tensors and graphs.

Three traps this module exists for:

* The ggml libraries are opened by soname with RTLD_NOLOAD (ggml_lib.py), so we get the
  very copy llama_cpp already loaded. A second copy opened by full path would keep its own
  device registry, and llama.cpp would never see the workers.
* llama.cpp's RPC client aborts the process when it cannot reach a worker, and again when a
  worker dies while serving ("Remote RPC server crashed or returned malformed response").
  So workers are probed (plain TCP connect) before llama.cpp is asked to add them, and a
  ggml abort callback turns the abort into a logged line naming the worker and a plain exit
  status: 2 while workers are being added, EXIT_WORKER_LOST once serving. The process exits
  either way; its clients see their connections close rather than hang.
* A worker serves one front at a time: a front that finds the worker busy waits in the
  handshake. We say so in the log after a few seconds instead of hanging silently.

Nothing here imports llama_cpp at module level. The flag values and RpcError are in
rpc_config.py, the ggml libraries and their devices in ggml_lib.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import socket
import sys
import threading
import time
from typing import Callable, Sequence

from ..ops.fatal import exit_engine_failed, flush_logs
from ..ops.signals import StopSignals
from .ggml_lib import AbortCallback, check_support, describe, ggml
from .rpc_config import (EXIT_USAGE, EXIT_WORKER_LOST, RpcError, is_private_address, layers_to_offload,
                         parse_endpoint, split_proportions, worker_list)

RPC_PROBE_TIMEOUT = 2.0            # seconds one TCP probe of a worker may take
RPC_PROBE_BACKOFF_START = 0.25     # first pause between probes; doubles up to the next
RPC_PROBE_BACKOFF_MAX = 2.0
RPC_HANDSHAKE_WARN = 10.0          # say so when a worker takes this long to answer the handshake
RPC_ABORT_PROBE_TIMEOUT = 0.5      # probing the workers to name the one that died,
RPC_ABORT_PROBE_ROUNDS = 5         # this many times, this far apart, while it is still going away
RPC_ABORT_PROBE_PAUSE = 0.2

# What callers reach through this module (app.py, cli/worker.py), defined in its two helpers.
__all__ = ["EXIT_WORKER_LOST", "RpcError", "attach_workers", "check_support", "describe", "is_private_address",
           "layers_to_offload", "probe", "server_devices", "split_proportions", "start_server",
           "wait_for_workers", "watch_aborts", "worker_list"]

log = logging.getLogger("localserve.rpc")

_V = ctypes.c_void_p
_SIZE = ctypes.c_size_t


# ---- probing -------------------------------------------------------------------------------

def probe(endpoint: str, timeout: float) -> str | None:
    """None if something accepts TCP connections at endpoint, else why not (one phrase)."""
    host, port = parse_endpoint(endpoint)
    try:
        with socket.create_connection((host, port), timeout=max(0.05, timeout)):
            return None
    except socket.timeout:
        return "no answer"
    except socket.gaierror as exc:
        return f"cannot resolve {host}: {exc.strerror}"
    except OSError as exc:
        return (exc.strerror or str(exc)).lower()


def wait_for_workers(endpoints: Sequence[str], wait: float, *,
                     probe: Callable[[str, float], str | None] = probe,
                     clock: Callable[[], float] = time.monotonic,
                     sleep: Callable[[float], object] = time.sleep,
                     stopped: Callable[[], bool] = lambda: False) -> None:
    """Probe every endpoint until all answer, with bounded back-off, for at most `wait` seconds.

    Raises RpcError naming the first worker still unreachable when the time is up.
    """
    deadline = clock() + wait
    pending = list(endpoints)
    delay = RPC_PROBE_BACKOFF_START
    reported: set[str] = set()
    while True:
        reasons: dict[str, str] = {}
        for endpoint in pending:
            reason = probe(endpoint, RPC_PROBE_TIMEOUT)
            if reason is None:
                if endpoint in reported:
                    log.info("RPC worker %s is up", endpoint)
            else:
                reasons[endpoint] = reason
        pending = [e for e in pending if e in reasons]
        if not pending:
            return
        left = deadline - clock()
        if left <= 0:
            endpoint = pending[0]
            waited = f" after waiting {wait:g}s" if wait > 0 else ""
            raise RpcError(f"RPC worker {endpoint} is unreachable ({reasons[endpoint]}){waited}; "
                           f"start it with `localserve worker --host HOST --port PORT` on that machine")
        for endpoint in pending:
            if endpoint not in reported:
                reported.add(endpoint)
                log.warning("RPC worker %s is not reachable yet (%s); waiting up to %.0fs more",
                            endpoint, reasons[endpoint], left)
        sleep(min(delay, left))
        if stopped():
            raise RpcError("stopped while waiting for RPC workers", status=0)
        delay = min(delay * 2, RPC_PROBE_BACKOFF_MAX)


# ---- aborts inside llama.cpp -------------------------------------------------------------------

class _AbortWatch:
    """What to say, and how to exit, when ggml aborts the process (ggml_set_abort_callback).

    While a worker is being added an abort is about that worker: one line, exit 2. Once the
    front serves, an RPC abort means a worker went away: probe them all to name it, log, and
    exit EXIT_WORKER_LOST. Any other abort ends the process the same clean way (fatal.py):
    a log line naming llama.cpp's message, stored state closed, exit status 3.
    """

    def __init__(self):
        self.endpoints: tuple[str, ...] = ()
        self.adding: str | None = None
        self._callback = None

    def install(self, endpoints: Sequence[str]) -> None:
        self.endpoints = tuple(endpoints)
        if self._callback is None:
            self._callback = AbortCallback(self._on_abort)     # kept alive: ggml holds the pointer
            ggml().set_abort_callback(self._callback)

    def _on_abort(self, raw: bytes | None) -> None:
        message = (raw or b"").decode("utf-8", "replace").strip()
        reason = message.split(": ", 1)[-1] if ": " in message else message
        if self.adding is not None:
            flush_logs()
            print(f"localserve: RPC worker {self.adding}: llama.cpp's RPC client failed on it ({reason}); is it "
                  f"a `localserve worker` from the same llama-cpp-python version?", file=sys.stderr, flush=True)
            os._exit(EXIT_USAGE)
        if "ggml-rpc" not in message and "RPC" not in message:
            exit_engine_failed(f"llama.cpp aborted ({message})")
        lost = self._unreachable()
        if lost:
            what = "lost RPC worker " + ", ".join(f"{e} ({why})" for e, why in lost)
        else:
            what = f"llama.cpp's RPC client failed though every worker ({', '.join(self.endpoints)}) " \
                   f"still accepts connections"
        log.critical("%s: llama.cpp cannot go on (%s); exiting with status %d, clients' connections close; "
                     "a supervisor restarts the front, which waits for its workers (--rpc-wait)",
                     what, reason, EXIT_WORKER_LOST)
        flush_logs()
        os._exit(EXIT_WORKER_LOST)


    def _unreachable(self) -> list[tuple[str, str]]:
        """The workers that refuse connections now. A worker that has just died may still
        accept them for a moment (its listening socket closes last), so look a few times."""
        for attempt in range(RPC_ABORT_PROBE_ROUNDS):
            if attempt:
                time.sleep(RPC_ABORT_PROBE_PAUSE)
            lost = [(e, why) for e in self.endpoints if (why := probe(e, RPC_ABORT_PROBE_TIMEOUT))]
            if lost:
                return lost
        return []


_abort_watch = _AbortWatch()


def watch_aborts() -> None:
    """From now on an abort inside llama.cpp exits cleanly with a reason (see _AbortWatch)."""
    _abort_watch.install(_abort_watch.endpoints)


# ---- the front: register workers -------------------------------------------------------------

def attach_workers(values: Sequence[str], wait: float, signals: StopSignals | None = None) -> tuple[str, ...]:
    """Probe the --rpc workers (up to `wait` seconds), then register each with llama.cpp.

    After this, llama.cpp's default device selection puts the workers first, so the model's
    offloaded layers (--n-gpu-layers, --tensor-split) land on them. A stop signal while
    waiting (caught by `signals`, or for the wait alone) stops the wait: RpcError with status 0.
    """
    try:
        endpoints = worker_list(values)
    except ValueError as exc:
        raise RpcError(f"--rpc: {exc}") from None
    check_support()
    g = ggml()
    add_server = g.rpc_function("ggml_backend_rpc_add_server", _V, ctypes.c_char_p)
    _abort_watch.install(endpoints)
    with contextlib.nullcontext(signals) if signals is not None else StopSignals() as caught:
        wait_for_workers(endpoints, wait, stopped=caught.requested, sleep=caught.wait)
    for endpoint in endpoints:
        log.info("connecting to RPC worker %s", endpoint)
        busy = threading.Timer(RPC_HANDSHAKE_WARN, log.warning,
                               ("RPC worker %s accepts connections but has not answered for %.0fs: a worker "
                                "serves one front at a time; is another front using it?",
                                endpoint, RPC_HANDSHAKE_WARN))
        busy.daemon = True
        _abort_watch.adding = endpoint
        busy.start()
        try:
            reg = add_server(endpoint.encode())
        finally:
            busy.cancel()
            _abort_watch.adding = None
        if not reg:
            raise RpcError(f"RPC worker {endpoint}: llama.cpp could not add it")
        g.register(reg)
    return endpoints


# ---- the worker: run ggml's RPC server ---------------------------------------------------------

def server_devices() -> list[int]:
    """What a worker offers, as llama.cpp's rpc-server chooses: every GPU, else the CPU."""
    g = ggml()
    devices = g.devices()
    gpus = [d for d in devices if g.dev_type(d) in (1, 2)]
    return gpus or [d for d in devices if g.dev_type(d) == 0][:1]


def start_server(endpoint: str, *, threads: int, cache_dir: str | None, devices: Sequence[int]) -> None:
    """Run ggml's RPC server; returns only if it could not start (it logs why)."""
    check_support()
    # llama-cpp-python 0.3.36's ggml (RPC protocol 7): endpoint, cache_dir, n_threads, n_devices, devices.
    start = ggml().rpc_function("ggml_backend_rpc_start_server", None, ctypes.c_char_p, ctypes.c_char_p,
                                _SIZE, _SIZE, ctypes.POINTER(_V))
    array = (_V * len(devices))(*devices)
    start(endpoint.encode(), cache_dir.encode() if cache_dir else None, threads, len(devices), array)
