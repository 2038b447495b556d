"""llama.cpp's RPC backend (ggml-rpc) through ctypes: workers, probing, registration, devices.

A worker (`localserve worker`) runs ggml's RPC server and computes the layers a front
offloads to it; a front (`localserve --rpc HOST:PORT,...`) registers each worker as a
llama.cpp device before the model loads, as llama-server's `--rpc` does. No distribution
layer of our own: llama.cpp places layers on devices and ships tensors and graphs.

Three traps this module exists for:

* The ggml libraries are opened by soname with RTLD_NOLOAD, so we get the very copy
  llama_cpp already loaded. A second copy opened by full path would keep its own device
  registry, and llama.cpp would never see the workers.
* llama.cpp's RPC client aborts the process when it cannot reach a worker, and again when a
  worker dies while serving ("Remote RPC server crashed or returned malformed response").
  So workers are probed (plain TCP connect) before llama.cpp is asked to add them, and a
  ggml abort callback turns the abort into a logged line naming the worker and a plain exit
  status: 2 while workers are being added, EXIT_WORKER_LOST once serving. The process exits
  either way; its clients see their connections close rather than hang.
* A worker serves one front at a time: a front that finds the worker busy waits in the
  handshake. We say so in the log after a few seconds instead of hanging silently.

Nothing here imports llama_cpp at module level: cli.py uses the argument parsers below.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import logging
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from .. import settings as defaults
from ..ops.fatal import exit_engine_failed, flush_logs

log = logging.getLogger("localserve.rpc")

EXIT_USAGE = 2
EXIT_WORKER_LOST = 3           # an RPC worker went away while the front was serving
REBUILD_HINT = ("this llama-cpp-python was built without RPC support (ggml-rpc); rebuild it: "
                'CMAKE_ARGS="-DGGML_RPC=ON" pip install --no-cache-dir --force-reinstall '
                "llama-cpp-python==0.3.36")

# Sonames of the libraries llama_cpp has loaded (Linux first, then macOS).
_GGML_NAMES = ("libggml.so.0", "libggml.so", "libggml.0.dylib", "libggml.dylib")
_GGML_BASE_NAMES = ("libggml-base.so.0", "libggml-base.so", "libggml-base.0.dylib", "libggml-base.dylib")

# enum ggml_backend_dev_type
_DEVICE_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}


class RpcError(Exception):
    """A configuration or connection problem: printed as one line, exit status `status`."""

    def __init__(self, message: str, status: int = EXIT_USAGE):
        super().__init__(message)
        self.status = status


# ---- parsing (used by the command line; no llama.cpp needed) -------------------------------

def parse_endpoint(text: str) -> tuple[str, int]:
    """HOST:PORT → (host, port). llama.cpp splits at the first colon, so no IPv6 literals."""
    host, sep, port = text.strip().partition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"'{text}' is not HOST:PORT")
    if ":" in port or host.startswith("["):
        raise ValueError(f"'{text}': llama.cpp's RPC client takes an IPv4 address or a host name, not IPv6")
    return host, int(port)


def rpc_workers(text: str) -> str:
    """The --rpc value (argparse type): HOST:PORT[,HOST:PORT...] → the same, normalised."""
    import argparse
    try:
        return ",".join(worker_list([text]))
    except (ValueError, RpcError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def worker_list(values: Iterable[str]) -> tuple[str, ...]:
    """Every --rpc value (each a comma list) → endpoints, each once. ValueError says what is wrong."""
    endpoints: list[str] = []
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            host, port = parse_endpoint(part)
            endpoint = f"{host}:{port}"
            if endpoint in endpoints:
                raise ValueError(f"RPC worker {endpoint} is listed twice")
            endpoints.append(endpoint)
    if len(endpoints) > defaults.RPC_MAX_WORKERS:
        raise ValueError(f"at most {defaults.RPC_MAX_WORKERS} RPC workers")
    return tuple(endpoints)


def tensor_split(text: str) -> str:
    """The --tensor-split value (argparse type): proportions per device, e.g. "3,1"."""
    import argparse
    try:
        return ",".join(f"{p:g}" for p in split_proportions(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def split_proportions(text: str) -> tuple[float, ...]:
    """"3,1" → (3.0, 1.0), in llama.cpp's device order: RPC workers first, then local GPUs."""
    try:
        parts = tuple(float(p) for p in text.replace("/", ",").split(","))
    except ValueError:
        raise ValueError(f"'{text}' is not a comma-separated list of numbers") from None
    if any(p < 0 for p in parts) or not any(p > 0 for p in parts):
        raise ValueError(f"'{text}': proportions must be non-negative, at least one above zero")
    return parts


def layers_to_offload(n_gpu_layers: int, endpoints: Sequence[str]) -> int:
    """With workers and no --n-gpu-layers, offload every layer: keeping them all local is no use."""
    return -1 if endpoints and n_gpu_layers == 0 else n_gpu_layers


# ---- addresses a worker may bind ---------------------------------------------------------

_SHARED_ADDRESS_SPACE = ipaddress.ip_network("100.64.0.0/10")   # carrier-grade NAT, VPN overlays


def is_private_address(address: str) -> bool:
    """Loopback, private, link-local or shared (100.64/10): not reachable from the internet."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.is_unspecified:
        return False       # 0.0.0.0 binds every interface, public ones included
    if ip.version == 4 and ip in _SHARED_ADDRESS_SPACE:
        return True
    return ip.is_loopback or ip.is_private or ip.is_link_local


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
    delay = defaults.RPC_PROBE_BACKOFF_START
    reported: set[str] = set()
    while True:
        reasons: dict[str, str] = {}
        for endpoint in pending:
            reason = probe(endpoint, defaults.RPC_PROBE_TIMEOUT)
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
        delay = min(delay * 2, defaults.RPC_PROBE_BACKOFF_MAX)


# ---- the ggml libraries --------------------------------------------------------------------

_V = ctypes.c_void_p
_SIZE = ctypes.c_size_t


def _open_loaded(names: Iterable[str]) -> ctypes.CDLL:
    """The copy of a library that is already in the process, never a second one."""
    import llama_cpp  # noqa: F401  (loads libllama and, through it, the ggml libraries)
    mode = getattr(os, "RTLD_NOLOAD", 0)
    for name in names:
        try:
            return ctypes.CDLL(name, mode=mode)
        except OSError:
            continue
    raise RpcError(f"cannot find the ggml library llama_cpp loaded (tried {', '.join(names)})")


def _declare(lib: ctypes.CDLL, name: str, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


class Ggml:
    """ctypes prototypes for the ggml backend registry and the RPC backend's entry points."""

    def __init__(self):
        ggml = _open_loaded(_GGML_NAMES)
        base = _open_loaded(_GGML_BASE_NAMES)
        self.lib, self.base = ggml, base        # for prototypes of other modules (cpu_weights.py)
        self.reg_by_name = _declare(ggml, "ggml_backend_reg_by_name", _V, ctypes.c_char_p)
        self.register = _declare(ggml, "ggml_backend_register", None, _V)
        self.dev_count = _declare(ggml, "ggml_backend_dev_count", _SIZE)
        self.dev_get = _declare(ggml, "ggml_backend_dev_get", _V, _SIZE)
        self.dev_name = _declare(base, "ggml_backend_dev_name", ctypes.c_char_p, _V)
        self.dev_description = _declare(base, "ggml_backend_dev_description", ctypes.c_char_p, _V)
        self.dev_memory = _declare(base, "ggml_backend_dev_memory", None, _V,
                                   ctypes.POINTER(_SIZE), ctypes.POINTER(_SIZE))
        self.dev_type = _declare(base, "ggml_backend_dev_type", ctypes.c_int, _V)
        self.dev_backend_reg = _declare(base, "ggml_backend_dev_backend_reg", _V, _V)
        self.reg_name = _declare(base, "ggml_backend_reg_name", ctypes.c_char_p, _V)
        self.reg_proc = _declare(base, "ggml_backend_reg_get_proc_address", _V, _V, ctypes.c_char_p)
        self.set_abort_callback = _declare(base, "ggml_set_abort_callback", _V, _AbortCallback)

    def rpc_function(self, name: str, restype, *argtypes):
        """An RPC entry point through the registry, as llama.cpp's common code finds it."""
        reg = self.reg_by_name(b"RPC")
        address = self.reg_proc(reg, name.encode()) if reg else None
        if not address:
            raise RpcError(REBUILD_HINT)
        return ctypes.CFUNCTYPE(restype, *argtypes)(address)

    def devices(self) -> list[int]:
        return [self.dev_get(i) for i in range(self.dev_count())]


_AbortCallback = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_ggml: Ggml | None = None


def ggml() -> Ggml:
    global _ggml
    if _ggml is None:
        _ggml = Ggml()
    return _ggml


def check_support() -> None:
    """Raise RpcError (exit 2, how to rebuild) unless this llama.cpp has the RPC backend."""
    import llama_cpp
    if not getattr(llama_cpp, "llama_supports_rpc", lambda: False)():
        raise RpcError(REBUILD_HINT)
    ggml().rpc_function("ggml_backend_rpc_add_server", _V, ctypes.c_char_p)


# ---- devices -------------------------------------------------------------------------------

@dataclass
class Device:
    name: str                 # llama.cpp's: CPU, CUDA0, RPC0, ...
    description: str          # RPC devices: the worker's HOST:PORT
    kind: str                 # cpu, gpu, igpu, accel or rpc
    memory_free: int
    memory_total: int
    endpoint: str | None = None
    layers: int = 0           # model layers llama.cpp placed on it

    def as_json(self) -> dict:
        body = {"name": self.name, "type": self.kind, "description": self.description,
                "memory_total": self.memory_total, "memory_free": self.memory_free, "layers": self.layers}
        if self.endpoint:
            body["endpoint"] = self.endpoint
        return body

    def label(self) -> str:
        return f"{self.name} ({self.description}, {_mib(self.memory_total)})"

    def summary(self) -> str:
        where = f" at {self.endpoint}" if self.endpoint else f" ({self.description})"
        layers = f"{self.layers} layer{'s' if self.layers != 1 else ''}"
        return (f"{self.name}{where}: {layers}, {_mib(self.memory_free)} free of "
                f"{_mib(self.memory_total)}")


def describe(dev: int) -> Device:
    """One registry device, with its memory as of now (an RPC device asks its worker)."""
    g = ggml()
    free, total = _SIZE(0), _SIZE(0)
    g.dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    reg = g.dev_backend_reg(dev)
    is_rpc = bool(reg) and (g.reg_name(reg) or b"").startswith(b"RPC")
    description = (g.dev_description(dev) or b"").decode("utf-8", "replace")
    return Device(name=(g.dev_name(dev) or b"?").decode("utf-8", "replace"), description=description,
                  kind="rpc" if is_rpc else _DEVICE_KINDS.get(g.dev_type(dev), "other"),
                  memory_free=free.value, memory_total=total.value, endpoint=description if is_rpc else None)


def list_devices() -> list[Device]:
    """Every device in llama.cpp's registry."""
    return [describe(dev) for dev in ggml().devices()]


def device_report(layer_devices: dict[int, str]) -> list[Device]:
    """The registry's devices with how many layers llama.cpp put on each ([] if unreadable)."""
    try:
        devices = list_devices()
    except (RpcError, OSError, AttributeError) as exc:
        log.debug("cannot list llama.cpp devices: %s", exc)
        return []
    for device in devices:
        device.layers = sum(1 for name in layer_devices.values() if name == device.name)
    return devices


def _mib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


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
            self._callback = _AbortCallback(self._on_abort)     # kept alive: ggml holds the pointer
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
        for attempt in range(defaults.RPC_ABORT_PROBE_ROUNDS):
            if attempt:
                time.sleep(defaults.RPC_ABORT_PROBE_PAUSE)
            lost = [(e, why) for e in self.endpoints if (why := probe(e, defaults.RPC_ABORT_PROBE_TIMEOUT))]
            if lost:
                return lost
        return []


_abort_watch = _AbortWatch()


def watch_aborts() -> None:
    """From now on an abort inside llama.cpp exits cleanly with a reason (see _AbortWatch)."""
    _abort_watch.install(_abort_watch.endpoints)


# ---- the front: register workers -------------------------------------------------------------

def attach_workers(values: Sequence[str], wait: float) -> tuple[str, ...]:
    """Probe the --rpc workers (up to `wait` seconds), then register each with llama.cpp.

    After this, llama.cpp's default device selection puts the workers first, so the model's
    offloaded layers (--n-gpu-layers, --tensor-split) land on them. SIGTERM or SIGINT while
    waiting stops the wait: RpcError with status 0.
    """
    try:
        endpoints = worker_list(values)
    except ValueError as exc:
        raise RpcError(f"--rpc: {exc}") from None
    check_support()
    g = ggml()
    add_server = g.rpc_function("ggml_backend_rpc_add_server", _V, ctypes.c_char_p)
    _abort_watch.install(endpoints)
    with _signals_stop_waiting() as stopped:
        wait_for_workers(endpoints, wait, stopped=stopped.is_set, sleep=stopped.wait)
    for endpoint in endpoints:
        log.info("connecting to RPC worker %s", endpoint)
        busy = threading.Timer(defaults.RPC_HANDSHAKE_WARN, log.warning,
                               ("RPC worker %s accepts connections but has not answered for %.0fs: a worker "
                                "serves one front at a time; is another front using it?",
                                endpoint, defaults.RPC_HANDSHAKE_WARN))
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


@contextlib.contextmanager
def _signals_stop_waiting():
    """An Event set by SIGTERM / SIGINT for the duration; the handlers before still run."""
    stopped = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stopped
        return
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(signum, frame):
        stopped.set()
        before = previous.get(signum)
        if callable(before) and before is not signal.default_int_handler:
            before(signum, frame)

    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield stopped
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


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
