"""The daemon's clocks (issue 46, items 10 and 11): an idle server sleeps, a systemd watchdog is
pinged at its interval and no faster, and --drain-timeout ends a drain that a stalled client
would hold for ever.

Costs and counts, never durations: the server's CPU time and its threads' wake-ups (context
switches) from /proc, the pings counted on a real sd_notify socket, and an exit awaited with
a margin far wider than the drain (a clock that is ignored takes a minute, or for ever).
"""

from __future__ import annotations

import signal
import socket
import threading
import time

import pytest

from conftest import ServerProcess
from procstat import context_switches, cpu_seconds
from rawhttp import RawConnection, post_json

IDLE_SECONDS = 3.0
# What three idle seconds may cost: a handful of wake-ups a second (the main loop's turn, the
# keep-alive sweeper's look), far from one a millisecond (3,000) or a loop that spins.
IDLE_WAKEUPS = 300
IDLE_CPU_SECONDS = 0.3
WATCHDOG_USEC = 1_000_000       # pinged every half of it: about 6 pings in IDLE_SECONDS
DRAIN_TIMEOUT = 1
EXIT_MARGIN = 20.0              # seconds past the drain's end: the stalled send itself lasts --idle-timeout


def settled(*servers: ServerProcess) -> None:
    """Wait until start-up's work (the first load, the threads' first turns) is over."""
    for srv in servers:
        assert srv.wait_log("serving", timeout=30), srv.log[-2000:]
    time.sleep(1.0)


def idle_costs(*pids: int) -> list[tuple[int, float]]:
    """(wake-ups, CPU seconds) of each process over the same IDLE_SECONDS with nothing to do."""
    before = [(context_switches(pid), cpu_seconds(pid)) for pid in pids]
    time.sleep(IDLE_SECONDS)
    return [(context_switches(pid) - switches, cpu_seconds(pid) - cpu) for pid, (switches, cpu) in zip(pids, before)]


@pytest.fixture(scope="module")
def idle_servers(tmp_path_factory, tiny_model):
    """A plain server and one with a systemd watchdog, idle over the same IDLE_SECONDS (side by side:
    neither does anything, so neither's count is the other's): for each, (wake-ups, CPU seconds),
    and the watchdog's pings in that time."""
    notify = NotifyListener(str(tmp_path_factory.mktemp("notify") / "notify.sock"))
    plain = ServerProcess(tiny_model, "--no-store", wait=False)
    watched = ServerProcess(tiny_model, "--no-store", wait=False,
                            env={"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": str(WATCHDOG_USEC)})
    try:
        for srv in (plain, watched):
            srv.wait_ready()
        settled(plain, watched)
        before = notify.count("WATCHDOG=1")
        costs = idle_costs(plain.proc.pid, watched.proc.pid)
        yield {"plain": costs[0], "watched": costs[1], "pings": notify.count("WATCHDOG=1") - before}
    finally:
        for srv in (plain, watched):
            srv.stop()
        notify.close()


def test_an_idle_server_sleeps(idle_servers):
    wakeups, cpu = idle_servers["plain"]
    assert wakeups < IDLE_WAKEUPS and cpu < IDLE_CPU_SECONDS, (wakeups, cpu)


def test_the_watchdog_is_pinged_at_its_interval_and_no_faster(idle_servers):
    # 6 expected; at least one (systemd would kill a silent service), never a stream of them
    assert 1 <= idle_servers["pings"] <= 15, idle_servers["pings"]
    wakeups, cpu = idle_servers["watched"]
    assert wakeups < IDLE_WAKEUPS and cpu < IDLE_CPU_SECONDS, (wakeups, cpu)


class NotifyListener:
    """systemd's end of NOTIFY_SOCKET, read as fast as datagrams come (a full queue would block
    the sender, and hide a sender that never pauses)."""

    def __init__(self, path: str):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.1)
        self.messages: list[str] = []
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.closed.is_set():
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except socket.timeout:
                pass

    def count(self, message: str) -> int:
        return sum(message in each for each in list(self.messages))

    def close(self) -> None:
        self.closed.set()
        self.thread.join()
        self.sock.close()


def test_sigterm_with_a_stalled_client_exits_once_the_drain_timeout_is_up(tiny_model):
    """A client that stops reading its answer keeps its connection busy (the server's send blocks
    until --idle-timeout, 60 s): the drain gives it DRAIN_TIMEOUT seconds, then the daemon exits 0."""
    srv = ServerProcess(tiny_model, "--no-store", "--drain-timeout", str(DRAIN_TIMEOUT))
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)      # a small window: the send blocks soon
    try:
        stalled.connect(("127.0.0.1", srv.port))
        # every token with its piece: some 25 bytes of JSON per character, far past the socket buffers
        stalled.sendall(post_json("/tokenize", {"content": "abc " * 256 * 1024, "with_pieces": True}))
        stalled.settimeout(30)
        assert stalled.recv(1024).startswith(b"HTTP/1.1 200"), "the answer never started"
        time.sleep(0.5)                 # its send is blocked now: the client reads no more
        srv.proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        try:
            status = srv.proc.wait(DRAIN_TIMEOUT + EXIT_MARGIN)
        except Exception:
            pytest.fail(f"still running {time.monotonic() - started:.0f} s after SIGTERM with --drain-timeout "
                        f"{DRAIN_TIMEOUT}:\n{srv.log[-2000:]}")
        assert status == 0 and "stopped" in srv.log, srv.log[-2000:]
    finally:
        stalled.close()
        srv.stop()


def test_a_busy_connection_is_waited_for_within_the_drain_timeout(tiny_model):
    """The other side of the same clock: a request that finishes inside the drain gets its answer."""
    srv = ServerProcess(tiny_model, "--no-store", "--drain-timeout", "30")
    try:
        conn = RawConnection(srv.port, timeout=60)
        conn.send(post_json("/tokenize", {"content": "abc " * 64 * 1024, "with_pieces": True}))
        head = conn.sock.recv(1024)
        assert head.startswith(b"HTTP/1.1 200")
        srv.proc.send_signal(signal.SIGTERM)
        received = head
        while chunk := conn.sock.recv(1 << 20):
            received += chunk
        assert srv.proc.wait(60) == 0
        assert received.rstrip().endswith(b"]}"), received[-200:]
    finally:
        srv.stop()
