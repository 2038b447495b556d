"""How the loaded llama.cpp was built, as far as serving speed cares: which CPU thread pool it uses.

A llama.cpp built with OpenMP (libgomp) decodes at about its one-thread speed when llama_decode
is called from any thread but the process's main one (measured: docs/performance.rst, "The llama.cpp build"),
and every decode here runs on a runtime thread. ggml's own threadpool (-DGGML_OPENMP=OFF, which
`make install` builds) has no such penalty, so an OpenMP build is reported as the slow kind.
"""

from __future__ import annotations

from dataclasses import dataclass

REBUILD_HINT = ("rebuild llama-cpp-python with ggml's own threads: `make install` does, or "
                "CMAKE_ARGS=\"-DGGML_RPC=ON -DGGML_OPENMP=OFF -DMTMD_VIDEO=OFF\" pip install --no-cache-dir --force-reinstall "
                "llama-cpp-python==<the pinned version>")


@dataclass(frozen=True)
class BuildInfo:
    features: dict[str, dict[str, str]]      # backend name → its feature → value (llama.cpp's words)

    @property
    def openmp(self) -> bool:
        return any(f.get("OPENMP") == "1" for f in self.features.values())

    @property
    def threads(self) -> str:
        return "OpenMP" if self.openmp else "ggml threadpool"

    def describe(self) -> str:
        return f"CPU threads: {self.threads}; backends: {', '.join(self.features) or 'unknown'}"

    def warning(self) -> str | None:
        if not self.openmp:
            return None
        return ("llama.cpp was built with OpenMP: a decode off the main thread (every decode here) runs at "
                "about the one-thread speed; " + REBUILD_HINT)


def parse_system_info(text: str) -> BuildInfo:
    """llama_print_system_info()'s "CPU : SSE3 = 1 | OPENMP = 1 | … | RPC : …" as a BuildInfo."""
    features: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for item in text.split("|"):
        item = item.strip()
        head, colon, rest = item.partition(":")
        if colon and "=" not in head:               # a backend's name opens its features
            current = features.setdefault(head.strip(), {})
            item = rest.strip()
        if current is None or "=" not in item:
            continue
        name, value = (part.strip() for part in item.split("=", 1))
        current[name] = value
    return BuildInfo(features)


def read_build_info() -> BuildInfo:
    from llama_cpp import llama_cpp as ll
    raw = ll.llama_print_system_info()
    return parse_system_info(raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw))
