"""`localserve worker`: turn this machine into a compute node for a front's `--rpc`.

It runs ggml's RPC server from the llama.cpp that llama-cpp-python ships (no separate
binary) in the foreground until SIGTERM or SIGINT. The RPC protocol has no
authentication and no encryption: whoever reaches the port can run computations and read
what the worker holds. So it binds 127.0.0.1 by default, and a bind address that is not
loopback or private (10/8, 172.16/12, 192.168/16, 100.64/10, link-local) needs
--allow-public.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
import sys
import threading

from .. import __version__
from .. import settings as defaults
from .option_values import positive_int
from ..engine.rpc_config import RpcError, is_private_address
from ..ops.signals import StopSignals

log = logging.getLogger("localserve.worker")

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="localserve worker",
        description="Serve this machine's CPU or GPUs to a localserve front (localserve --rpc HOST:PORT) "
                    "through llama.cpp's RPC backend.",
        epilog="The RPC protocol has no authentication: bind only addresses that untrusted machines cannot reach.")
    parser.add_argument("--version", action="version", version=f"localserve {__version__}")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; public addresses need --allow-public)")
    parser.add_argument("--port", type=int, default=defaults.DEFAULT_RPC_PORT,
                        help=f"TCP port to listen on (default {defaults.DEFAULT_RPC_PORT})")
    parser.add_argument("--threads", type=positive_int, default=None, metavar="N",
                        help="CPU threads for computation (default: all cores)")
    parser.add_argument("--cache-dir", default=None, metavar="DIR",
                        help="keep large tensors here by hash, so a front restarting sends them only once")
    parser.add_argument("--allow-public", action="store_true",
                        help="allow a bind address that is not loopback or private (the protocol has no auth)")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    return parser


def check_bind_address(host: str, allow_public: bool) -> str:
    """The IPv4 address to bind, or RpcError saying why not (exit 2). Nothing is sent anywhere."""
    if ":" in host:
        raise RpcError(f"--host {host}: llama.cpp's RPC server takes an IPv4 address or a host name, not IPv6")
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise RpcError(f"--host {host}: cannot resolve it ({exc.strerror})") from None
    addresses = sorted({info[4][0] for info in infos})
    public = [a for a in addresses if not is_private_address(a)]
    if public and not allow_public:
        shown = host if host == public[0] else f"{host} ({public[0]})"
        raise RpcError(f"refusing to listen on {shown}: not a loopback or private address, and "
                       f"the RPC protocol has no authentication (anyone who reaches the port can use this "
                       f"machine); pass --allow-public to do it anyway")
    return addresses[0]


def check_port_free(address: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((address, port))
        except OSError as exc:
            raise RpcError(f"cannot listen on {address}:{port}: {exc.strerror}") from None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not 0 < args.port < 65536:
        print(f"localserve worker: --port {args.port}: must be 1..65535", file=sys.stderr)
        return EXIT_USAGE
    try:
        address = check_bind_address(args.host, args.allow_public)
        check_port_free(address, args.port)
        if args.cache_dir:
            os.makedirs(args.cache_dir, exist_ok=True)
        return serve(address, args)
    except RpcError as exc:
        print(f"localserve worker: {exc}", file=sys.stderr)
        return exc.status
    except OSError as exc:
        print(f"localserve worker: --cache-dir {args.cache_dir}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE


def serve(address: str, args: argparse.Namespace) -> int:
    from ..engine import rpc
    from llama_cpp import llama_cpp as ll

    rpc.check_support()
    ll.llama_backend_init()
    devices = rpc.server_devices()
    threads = args.threads or max(1, os.cpu_count() or 1)
    endpoint = f"{address}:{args.port}"
    offered = ", ".join(rpc.describe(dev).label() for dev in devices)
    if not ipaddress.ip_address(address).is_loopback:
        log.warning("the RPC protocol has no authentication: anyone who can reach %s can use this machine", endpoint)
    log.info("localserve worker on %s: %s, %d thread(s)%s", endpoint, offered, threads,
             f", tensor cache in {args.cache_dir}" if args.cache_dir else "")
    # ggml's server blocks in C, where Python's signal handlers cannot run: it gets a thread of
    # its own, and the main thread waits for a stop signal (no lock in a handler: ops/signals.py).
    with StopSignals() as signals:
        server = threading.Thread(target=rpc.start_server, name="rpc-server", daemon=True,
                                  kwargs={"endpoint": endpoint, "threads": threads, "cache_dir": args.cache_dir,
                                          "devices": devices})
        server.start()
        while not signals.wait(0.5):
            if not server.is_alive():
                print(f"localserve worker: the RPC server on {endpoint} stopped (see above)", file=sys.stderr)
                return 1
    log.info("stopped")
    logging.shutdown()
    sys.stdout.flush()
    # The server thread is still inside ggml; skip interpreter teardown and C++ destructors.
    os._exit(0)

