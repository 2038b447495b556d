"""The ggml libraries llama_cpp loaded, through ctypes: the backend registry, its devices and
the RPC backend's entry points.

The libraries are opened by soname with RTLD_NOLOAD, so we get the very copy llama_cpp
already loaded. A second copy opened by full path would keep its own device registry, and
llama.cpp would never see the RPC workers (rpc.py) registered in it.
"""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass
from typing import Iterable

from .rpc_config import REBUILD_HINT, RpcError

log = logging.getLogger("localserve.rpc")

# Sonames of the libraries llama_cpp has loaded (Linux first, then macOS).
_GGML_NAMES = ("libggml.so.0", "libggml.so", "libggml.0.dylib", "libggml.dylib")
_GGML_BASE_NAMES = ("libggml-base.so.0", "libggml-base.so", "libggml-base.0.dylib", "libggml-base.dylib")

# enum ggml_backend_dev_type
_DEVICE_KINDS = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel"}

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
        self.set_abort_callback = _declare(base, "ggml_set_abort_callback", _V, AbortCallback)

    def rpc_function(self, name: str, restype, *argtypes):
        """An RPC entry point through the registry, as llama.cpp's common code finds it."""
        reg = self.reg_by_name(b"RPC")
        address = self.reg_proc(reg, name.encode()) if reg else None
        if not address:
            raise RpcError(REBUILD_HINT)
        return ctypes.CFUNCTYPE(restype, *argtypes)(address)

    def devices(self) -> list[int]:
        return [self.dev_get(i) for i in range(self.dev_count())]


AbortCallback = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
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
