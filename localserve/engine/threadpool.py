"""One persistent ggml threadpool per llama context, its workers asleep between graphs.

Without one attached, every graph llama_decode computes makes a threadpool of its own and joins
it after (ggml_graph_compute's "disposable" pool): a thread created and ended per step. This
one lives as long as the context, holds a worker for each thread the model may use, and the
thread count of each step (llama_set_n_threads, at most the pool's) says how many take part.

Polling level 0: between two graphs a worker waits on a condition variable rather than
spinning (ggml's default, 50, spins some 6 million pauses first), so the cores are free for
the runtime's own Python work, for the connection threads, and for whatever else the machine
runs. (Inside a graph, ggml's barriers still spin: thread_policy.py runs fewer threads when
another process holds cores.) The entry points are found as llama.cpp's common code finds them,
through the CPU backend's registry. StepThreads wires a pool and the thread policy to one context.
"""

from __future__ import annotations

import ctypes
import logging

from .ggml_lib import ggml
from .thread_policy import StepCosts, ThreadPolicy

log = logging.getLogger("localserve.engine")

GGML_MAX_N_THREADS = 512        # ggml.h: the size of ggml_threadpool_params.cpumask
WORKER_POLL = 0                 # ggml's polling level between graphs: 0 = sleep at once


class ThreadpoolParams(ctypes.Structure):
    """struct ggml_threadpool_params (ggml.h)."""
    _fields_ = [("cpumask", ctypes.c_bool * GGML_MAX_N_THREADS), ("n_threads", ctypes.c_int),
                ("prio", ctypes.c_int), ("poll", ctypes.c_uint32), ("strict_cpu", ctypes.c_bool),
                ("paused", ctypes.c_bool)]


_V = ctypes.c_void_p


class Threadpool:
    """A ggml threadpool of `n_threads`, attached to a llama context until free()."""

    def __init__(self, ctx, n_threads: int):
        lib = ggml()
        init = lib.base.ggml_threadpool_params_init
        init.restype, init.argtypes = None, [ctypes.POINTER(ThreadpoolParams), ctypes.c_int]
        reg = lib.reg_by_name(b"CPU")
        new_at = lib.reg_proc(reg, b"ggml_threadpool_new") if reg else None
        free_at = lib.reg_proc(reg, b"ggml_threadpool_free") if reg else None
        if not new_at or not free_at:
            raise OSError("this llama.cpp's CPU backend offers no threadpool")
        self._free = ctypes.CFUNCTYPE(None, _V)(free_at)
        params = ThreadpoolParams()
        init(ctypes.byref(params), n_threads)
        params.poll = WORKER_POLL
        self.pool = ctypes.CFUNCTYPE(_V, ctypes.POINTER(ThreadpoolParams))(new_at)(ctypes.byref(params))
        if not self.pool:
            raise OSError("ggml_threadpool_new failed")
        self.n_threads = n_threads
        self.ctx = ctx
        _llama_fn("llama_attach_threadpool", None, _V, _V, _V)(ctx, self.pool, self.pool)

    def free(self) -> None:
        """Detach from the context (still alive) and end the workers."""
        if self.pool:
            _llama_fn("llama_detach_threadpool", None, _V)(self.ctx)
            self._free(self.pool)
            self.pool = None


def _llama_fn(name: str, restype, *argtypes):
    """A libllama function llama_cpp's bindings leave out (they list these as TODO)."""
    from llama_cpp import llama_cpp as ll
    fn = getattr(ll._lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


def attach(ctx, n_threads: int) -> Threadpool | None:
    """A pool for ctx; None (each decode then makes its own, as before) where this build has none."""
    try:
        return Threadpool(ctx, n_threads)
    except (OSError, AttributeError) as exc:
        log.warning("no persistent threadpool (%s): each decode starts its own threads", exc)
        return None


class StepThreads:
    """The threads one context's decode steps run on: a pool with a worker for the most the model
    may get, and how many of them the next step uses (thread_policy.py: fewer while another process
    holds cores; fewer while other models are busy too)."""

    def __init__(self, ctx, threads: int, most: int):
        self.ctx = ctx
        self.pool = attach(ctx, most)
        self.policy = ThreadPolicy(threads, None)      # pinned until the step costs are known
        self.in_use = threads

    def measured(self, costs: StepCosts | None, adaptive: bool) -> None:
        """The step costs are known: the count adapts from here (when asked to)."""
        self.policy = ThreadPolicy(self.policy.most, costs, adaptive=adaptive)

    def before_step(self, wanted: int) -> None:
        """At most `wanted` threads for the next step (models/manager.py shares the cores out)."""
        policy = self.policy
        policy.limit(wanted)
        if policy.threads != self.in_use:
            from llama_cpp import llama_cpp as ll
            self.in_use = policy.threads
            ll.llama_set_n_threads(self.ctx, self.in_use, self.in_use)

    def as_json(self) -> dict:
        """/slots: in use now, the most it may use, whether the count adapts, its pool's workers.
        In use: what the last step ran on, as /metrics says (the policy's next count, which a step's
        cost may have moved since, takes hold at the next step)."""
        return {**self.policy.as_json(), "in_use": self.in_use,
                "pool": self.pool.n_threads if self.pool is not None else None}

    def free(self) -> None:
        if self.pool is not None:
            self.pool.free()
