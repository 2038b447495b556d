"""systemd integration with the standard library: sd_notify and socket activation."""

from __future__ import annotations

import os
import socket

SD_LISTEN_FDS_START = 3


def notify(message: str) -> bool:
    """Send one sd_notify datagram (READY=1, STOPPING=1, WATCHDOG=1, STATUS=…); False when not under systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]           # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
    except OSError:
        return False
    return True


def watchdog_interval() -> float | None:
    """Seconds between WATCHDOG=1 pings (half systemd's WatchdogSec), or None when not asked."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        return max(int(usec) / 2_000_000, 0.05)
    except ValueError:
        return None


def activated_listener() -> socket.socket | None:
    """The listening socket systemd passed (LISTEN_FDS), or None."""
    if os.environ.get("LISTEN_PID") != str(os.getpid()):
        return None
    try:
        count = int(os.environ.get("LISTEN_FDS", "0"))
    except ValueError:
        return None
    if count < 1:
        return None
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)              # not for our children
    sock = socket.socket(fileno=SD_LISTEN_FDS_START)
    sock.setblocking(True)
    return sock
