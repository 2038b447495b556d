"""Which of llama.cpp's CPU buffer types hold a model's weights (--cpu-weights).

llama.cpp's CPU backend can keep weights in "extra" buffer types laid out for faster
kernels, tried in this order: AMX (Intel Xeons of the Sapphire Rapids class and later),
then CPU_REPACK (Q4_0, Q4_K, IQ4_NL, ... interleaved for AVX2, AVX-512 or NEON), else
plain CPU memory. The AMX kernels crash on some quantised models, Gemma 3 270M's
Q4_K_M (the benches' model) among them: a segfault in ggml_backend_amx_mul_mat on the first decode
(llama.cpp #20824, closed unfixed). So on a CPU with AMX, `auto` keeps every weight out
of AMX and still repacks what CPU_REPACK takes, through llama.cpp's public parameters:

* use_extra_bufts off: llama.cpp's list for CPU weights becomes plain CPU alone;
* one tensor_buft_override names the weights to repack: llama.cpp uses an override's
  buffer type as given, without asking whether it fits, so the names must be exactly
  the weights CPU_REPACK supports. ggml itself is asked, with the probe llama.cpp makes
  when it chooses (a matrix product on the weight, the weight in a CPU_REPACK buffer,
  offered to the CPU device's supports_op).

Modes: auto (that on a CPU with AMX, llama.cpp's own choice elsewhere), repack (that on
any CPU), plain (no extra buffer types: the slowest, the plainest), amx (llama.cpp's own
choice, AMX first: the user's call, for machines where AMX works).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

log = logging.getLogger("localserve.engine")

MODES = ("auto", "repack", "plain", "amx")
AMX = "AMX"
REPACK = "CPU_REPACK"
UPSTREAM_ISSUE = "llama.cpp #20824"
DEFAULT = "llama.cpp's choice"         # the layouts a plan can choose
NO_AMX = "CPU_REPACK where it applies, no AMX"
PLAIN = "plain CPU"
USERS_CHOICE = f"AMX first, as the user chose; its kernels crash on some quantised models: {UPSTREAM_ISSUE}"
PROBE_ROWS = 512               # the batch llama.cpp's own probe multiplies by

# Weights llama.cpp multiplies with (GGML_OP_MUL_MAT / MUL_MAT_ID in its tensor table),
# by the names it gives them. Another weight is never repacked here: CPU_REPACK only
# serves products, and a weight used otherwise (token_embd's row lookups) would break.
_MUL_MAT = re.compile(r"(?:output|blk\.(\d+)\.(?:attn_(?:q|k|v|qkv|output|gate|q_a|q_b|kv_a_mqa|kv_b|kv)"
                      r"|ffn_(?:up|down|gate)(?:_shexp)?))\.weight")
_MUL_MAT_ID = re.compile(r"blk\.(\d+)\.ffn_(?:up|down|gate|gate_up)_exps\.weight")
_LAYER = re.compile(r"blk\.(\d+)\.")
_BUFFER_LINE = re.compile(r"(\S+) model buffer size\s*=\s*([\d.]+) MiB")

_V = ctypes.c_void_p
GGML_TYPE_F32 = 0
GGML_TYPE_I32 = 26
GGML_DEVICE_CPU = 0


class WeightsError(Exception):
    """ggml could not be asked (a library or an entry point missing)."""


class UnreadableModel(WeightsError):
    """ggml cannot read the file: llama.cpp's load will say why."""


def cpu_weights_mode(value: str) -> str:
    """The --cpu-weights value (argparse type)."""
    import argparse
    lowered = value.strip().lower()
    if lowered not in MODES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(MODES)}")
    return lowered


@dataclass
class WeightPlan:
    mode: str                          # the setting: auto, repack, plain or amx
    layout: str                        # what is done: DEFAULT, NO_AMX or PLAIN
    why: str                           # one phrase for the start-up log
    use_extra_bufts: bool = True
    repack: tuple[str, ...] = ()       # weights overridden to CPU_REPACK
    repack_buft: int | None = None

    def apply(self, mparams) -> object:
        """Set llama_model_params; returns what must stay alive until the model is loaded."""
        mparams.use_extra_bufts = self.use_extra_bufts
        if not self.repack:
            return None
        pattern = ctypes.create_string_buffer(override_pattern(self.repack).encode())
        overrides = (_BuftOverride * 2)()
        overrides[0].pattern = ctypes.cast(pattern, ctypes.c_char_p)
        overrides[0].buft = self.repack_buft
        mparams.tensor_buft_overrides = ctypes.cast(overrides, _V)     # [1] stays NULL: the end
        return pattern, overrides


class _BuftOverride(ctypes.Structure):       # struct llama_model_tensor_buft_override
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", _V)]


def plan(path: str, mode: str, *, n_gpu_layers: int = 0) -> WeightPlan:
    """The weight layout for this model on this machine, by the --cpu-weights mode."""
    if mode == "plain":
        return WeightPlan(mode, PLAIN, "as set", use_extra_bufts=False)
    try:
        g = _lib()
        bufts = extra_buffer_types(g)
    except WeightsError as exc:
        if mode == "amx" or (mode == "auto" and not cpu_has_amx()):
            return WeightPlan(mode, DEFAULT, f"CPU buffer types unknown ({exc})")
        log.warning("cannot list llama.cpp's CPU buffer types (%s): keeping weights in plain CPU memory", exc)
        return WeightPlan(mode, PLAIN, "CPU buffer types unknown", use_extra_bufts=False)
    if mode == "amx":
        why = USERS_CHOICE if AMX in bufts else "asked for, but this CPU or llama.cpp build has no AMX"
        return WeightPlan(mode, DEFAULT, why)
    if mode == "auto" and AMX not in bufts:
        return WeightPlan(mode, DEFAULT, "no AMX on this CPU")
    why = f"this CPU has AMX, whose kernels crash on some quantised models: {UPSTREAM_ISSUE}" \
        if AMX in bufts and mode == "auto" else "as set"
    if REPACK not in bufts:
        return WeightPlan(mode, PLAIN, why + "; no CPU_REPACK in this llama.cpp build", use_extra_bufts=False)
    try:
        names = repackable(g, path, bufts[REPACK], n_gpu_layers=_offloading(n_gpu_layers))
    except WeightsError as exc:
        if not isinstance(exc, UnreadableModel):
            log.warning("cannot ask ggml which weights CPU_REPACK takes (%s): plain CPU memory instead", exc)
        return WeightPlan(mode, PLAIN, why, use_extra_bufts=False)
    return WeightPlan(mode, NO_AMX, why, use_extra_bufts=False, repack=tuple(names), repack_buft=bufts[REPACK])


def cpu_has_amx(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the kernel lists AMX among the CPU's flags (Linux; elsewhere False)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as handle:
            return any(line.startswith("flags") and " amx_int8" in line for line in handle)
    except OSError:
        return False


def override_pattern(names: Iterable[str]) -> str:
    """One regular expression (ECMAScript, as llama.cpp's std::regex reads it) for exactly these names.

    llama.cpp compiles an override's pattern once per tensor it creates: one short
    pattern, the layers of each weight kind in one group, keeps that cheap.
    """
    layers: dict[str, list[str]] = defaultdict(list)
    others = []
    for name in names:
        found = _LAYER.match(name)
        if found:
            layers[name[found.end():]].append(found.group(1))
        else:
            others.append(re.escape(name))
    parts = [f"blk\\.(?:{'|'.join(ids)})\\.{re.escape(kind)}" for kind, ids in sorted(layers.items())]
    return f"^(?:{'|'.join(parts + others)})$"


def buffer_sizes(load_log: Iterable[str]) -> dict[str, float]:
    """{buffer type: MiB} of the model's weights, from llama.cpp's load log.

    CPU_Mapped (the file mapped into memory) is plain CPU memory: reported as CPU.
    """
    sizes: dict[str, float] = {}
    for line in load_log:
        found = _BUFFER_LINE.search(line)
        if found:
            name = "CPU" if found.group(1) == "CPU_Mapped" else found.group(1)
            sizes[name] = round(sizes.get(name, 0.0) + float(found.group(2)), 2)
    return sizes


def describe(buffers: dict[str, float]) -> str:
    return ", ".join(f"{name} {mib:.0f} MiB" for name, mib in buffers.items()) or "unknown"


# ---- asking ggml ----------------------------------------------------------------------------

class _InitParams(ctypes.Structure):         # struct ggml_init_params
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", _V), ("no_alloc", ctypes.c_bool)]


class _GgufParams(ctypes.Structure):         # struct gguf_init_params
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.POINTER(_V))]


class _TensorHead(ctypes.Structure):         # the first fields of struct ggml_tensor
    _fields_ = [("type", ctypes.c_int), ("buffer", _V), ("ne", ctypes.c_int64 * 4)]


class _Lib:
    """ctypes prototypes of the ggml entry points this module uses (public ggml API)."""

    def __init__(self):
        from .ggml_lib import ggml
        from .rpc_config import RpcError
        try:
            registry = ggml()
        except (RpcError, OSError) as exc:
            raise WeightsError(str(exc)) from None
        lib, base = registry.lib, registry.base
        try:
            self.dev_by_type = _declare(lib, "ggml_backend_dev_by_type", _V, ctypes.c_int)
            self.dev_backend_reg = _declare(base, "ggml_backend_dev_backend_reg", _V, _V)
            self.reg_proc = _declare(base, "ggml_backend_reg_get_proc_address", _V, _V, ctypes.c_char_p)
            self.buft_name = _declare(base, "ggml_backend_buft_name", ctypes.c_char_p, _V)
            self.buft_alloc = _declare(base, "ggml_backend_buft_alloc_buffer", _V, _V, ctypes.c_size_t)
            self.buffer_free = _declare(base, "ggml_backend_buffer_free", None, _V)
            self.supports_op = _declare(base, "ggml_backend_dev_supports_op", ctypes.c_bool, _V, _V)
            self.init = _declare(base, "ggml_init", _V, _InitParams)
            self.free = _declare(base, "ggml_free", None, _V)
            self.overhead = _declare(base, "ggml_tensor_overhead", ctypes.c_size_t)
            self.new_2d = _declare(base, "ggml_new_tensor_2d", _V, _V, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
            self.new_3d = _declare(base, "ggml_new_tensor_3d", _V, _V, ctypes.c_int, ctypes.c_int64,
                                   ctypes.c_int64, ctypes.c_int64)
            self.mul_mat = _declare(base, "ggml_mul_mat", _V, _V, _V, _V)
            self.mul_mat_id = _declare(base, "ggml_mul_mat_id", _V, _V, _V, _V, _V)
            self.n_dims = _declare(base, "ggml_n_dims", ctypes.c_int, _V)
            self.first_tensor = _declare(base, "ggml_get_first_tensor", _V, _V)
            self.next_tensor = _declare(base, "ggml_get_next_tensor", _V, _V, _V)
            self.tensor_name = _declare(base, "ggml_get_name", ctypes.c_char_p, _V)
            self.gguf_init = _declare(base, "gguf_init_from_file", _V, ctypes.c_char_p, _GgufParams)
            self.gguf_free = _declare(base, "gguf_free", None, _V)
        except AttributeError as exc:
            raise WeightsError(f"ggml lacks an entry point: {exc}") from None

    def cpu_device(self) -> int:
        dev = self.dev_by_type(GGML_DEVICE_CPU)
        if not dev:
            raise WeightsError("llama.cpp has no CPU device")
        return dev


def _declare(lib: ctypes.CDLL, name: str, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_lib_instance: _Lib | None = None


def _lib() -> _Lib:
    global _lib_instance
    if _lib_instance is None:
        _lib_instance = _Lib()
    return _lib_instance


_ExtraBufts = ctypes.CFUNCTYPE(ctypes.POINTER(_V), _V)     # ggml_backend_dev_get_extra_bufts_t


def extra_buffer_types(g: _Lib | None = None) -> dict[str, int]:
    """{name: buffer type} of the CPU device's extra buffer types, in the order llama.cpp tries them."""
    g = g or _lib()
    dev = g.cpu_device()
    address = g.reg_proc(g.dev_backend_reg(dev), b"ggml_backend_dev_get_extra_bufts")
    if not address:
        return {}
    listed = _ExtraBufts(address)(dev)
    found: dict[str, int] = {}
    i = 0
    while listed and listed[i]:
        found[(g.buft_name(listed[i]) or b"?").decode()] = listed[i]
        i += 1
    return found


def _offloading(n_gpu_layers: int) -> int:
    """n_gpu_layers if there is a device to put layers on (a GPU, an RPC worker), else 0."""
    if n_gpu_layers == 0:
        return 0
    from .ggml_lib import list_devices
    from .rpc_config import RpcError
    try:
        return n_gpu_layers if any(d.kind in ("gpu", "igpu", "rpc") for d in list_devices()) else 0
    except (RpcError, OSError, AttributeError):
        return n_gpu_layers          # devices unknown: assume offloading, repack less


@contextlib.contextmanager
def gguf_tensors(g: _Lib, path: str):
    """The tensors of a GGUF file as ggml tensors without data: (name, tensor) pairs."""
    meta = _V()
    gguf = g.gguf_init(path.encode(), _GgufParams(True, ctypes.pointer(meta)))
    try:
        if not gguf or not meta.value:
            raise UnreadableModel(f"ggml cannot read {path}")
        tensors = []
        tensor = g.first_tensor(meta)
        while tensor:
            tensors.append(((g.tensor_name(tensor) or b"").decode("utf-8", "replace"), tensor))
            tensor = g.next_tensor(meta, tensor)
        yield tensors
    finally:
        if gguf:
            g.gguf_free(gguf)
        if meta.value:
            g.free(meta)


def repackable(g: _Lib, path: str, repack_buft: int, *, n_gpu_layers: int = 0) -> list[str]:
    """Names of the model's weights that CPU_REPACK takes, in the layers kept on the CPU.

    llama.cpp offloads the last n_gpu_layers layers, the output layer (n_layer) counting
    as one: an override there would pull a weight off its device.
    """
    dev = g.cpu_device()
    names = []
    with gguf_tensors(g, path) as tensors:
        n_layer = 1 + max((int(m.group(1)) for name, _ in tensors if (m := _LAYER.match(name))), default=-1)
        on_cpu = 0 if n_gpu_layers < 0 else max(n_layer + 1 - n_gpu_layers, 0)    # layers 0 .. on_cpu-1
        for name, tensor in tensors:
            if (found := _MUL_MAT.fullmatch(name)) and g.n_dims(tensor) == 2:
                by_id = False
            elif (found := _MUL_MAT_ID.fullmatch(name)) and g.n_dims(tensor) == 3:
                by_id = True
            else:
                continue
            layer = int(found.group(1)) if found.group(1) is not None else n_layer
            if layer < on_cpu and _supported(g, dev, tensor, repack_buft, by_id):
                names.append(name)
    return names


def _supported(g: _Lib, dev: int, weight: int, buft: int, by_id: bool) -> bool:
    """Whether the CPU device runs a product with `weight` held in `buft` (llama.cpp's own probe)."""
    head = _TensorHead.from_address(weight)
    ctx = g.init(_InitParams(g.overhead() * 8, None, True))
    if not ctx:
        raise WeightsError("ggml_init failed")
    try:
        if by_id:
            b = g.new_3d(ctx, GGML_TYPE_F32, head.ne[0], 1, PROBE_ROWS)
            ids = g.new_2d(ctx, GGML_TYPE_I32, 1, PROBE_ROWS)
            op = g.mul_mat_id(ctx, weight, b, ids)
        else:
            op = g.mul_mat(ctx, weight, g.new_2d(ctx, GGML_TYPE_F32, head.ne[0], PROBE_ROWS))
        head.buffer = g.buft_alloc(buft, 0)       # an empty buffer: supports_op looks at its type
        try:
            return bool(g.supports_op(dev, op))
        finally:
            g.buffer_free(head.buffer)
            head.buffer = None
    finally:
        g.free(ctx)
