"""What RPC set-up is told and what it reports: the --rpc and --tensor-split values, which
addresses a worker may bind, and RpcError. No llama.cpp here: the command line uses these."""

from __future__ import annotations

import ipaddress
from typing import Iterable, Sequence

RPC_MAX_WORKERS = 16               # GGML_RPC_MAX_SERVERS

EXIT_USAGE = 2
EXIT_WORKER_LOST = 4           # an RPC worker went away while the front was serving (docs/operations.rst: Exit status)
REBUILD_HINT = ("this llama-cpp-python was built without RPC support (ggml-rpc); rebuild it: "
                'CMAKE_ARGS="-DGGML_RPC=ON -DGGML_OPENMP=OFF -DMTMD_VIDEO=OFF" pip install --no-cache-dir --force-reinstall '
                "llama-cpp-python==0.3.36")


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
    if len(endpoints) > RPC_MAX_WORKERS:
        raise ValueError(f"at most {RPC_MAX_WORKERS} RPC workers")
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
