"""Stopping by signal never hangs (issue 28, items 6 and 7).

A SIGTERM whose handler took the lock of the Event the main thread was waiting on deadlocked the
daemon for good. The handler now takes no lock; these tests send signals at random instants of
the main loop's wait, over many start/stop cycles, and to one server in a burst. SIGHUP (a
terminal closing) drains and exits like SIGTERM instead of killing the process on the spot.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import ROOT, ServerProcess

SUPPORT = Path(__file__).resolve().parent.parent / "support"

CYCLES = 12                 # start/stop cycles, each stopped at a random instant of the 1 s wait
PARALLEL_CYCLES = 4         # of them running at once
BURST = 200                 # signals sent to one server, a few milliseconds apart
EXIT_WITHIN = 20.0          # seconds: a drain of an idle server takes well under one


def wait_exit(srv: ServerProcess) -> int | None:
    try:
        return srv.proc.wait(timeout=EXIT_WITHIN)
    except subprocess.TimeoutExpired:
        return None


def sigterm_cycle(tiny_model, cycle: int, pause: float, gaps: list[float]) -> None:
    """Start a server, wait pause, send SIGTERM once per gap (a gap after each): it drains and exits 0."""
    srv = ServerProcess(tiny_model, "--no-store")
    try:
        time.sleep(pause)
        for gap in gaps:                    # a second SIGTERM, from an impatient supervisor
            srv.proc.send_signal(signal.SIGTERM)
            time.sleep(gap)
        status = wait_exit(srv)
        assert status is not None, f"cycle {cycle}: still running:\n{srv.log[-2000:]}"
        assert srv.wait_log("stopped", timeout=5), srv.log[-2000:]
        # a SIGTERM that lands after the drain, while Python itself winds down, ends it as SIGTERM does
        assert status in (0, -signal.SIGTERM), f"cycle {cycle}: exit {status}:\n{srv.log[-2000:]}"
    finally:
        srv.stop(signal.SIGKILL)


def test_sigterm_at_random_instants_always_drains_and_exits_0(tiny_model):
    rng = random.Random(28)
    plans = []
    for cycle in range(CYCLES):
        pause = rng.uniform(0.0, 1.2)
        plans.append((tiny_model, cycle, pause, [rng.uniform(0.0, 0.02) for _ in range(rng.randint(1, 4))]))
    # The cycles are independent servers: a few at a time, so that their pauses overlap
    with ThreadPoolExecutor(PARALLEL_CYCLES) as pool:
        for done in [pool.submit(sigterm_cycle, *plan) for plan in plans]:
            done.result()


def test_a_burst_of_signals_at_random_instants_stops_the_server_once(tiny_model):
    rng = random.Random(2028)
    srv = ServerProcess(tiny_model, "--no-store")
    try:
        for _ in range(BURST):
            if srv.proc.poll() is not None:
                break
            srv.proc.send_signal(rng.choice([signal.SIGTERM, signal.SIGINT]))
            time.sleep(rng.uniform(0.0, 0.005))
        assert wait_exit(srv) in (0, -signal.SIGTERM, -signal.SIGINT), srv.log[-2000:]
        assert srv.wait_log("stopped", timeout=5) and srv.log.count("shutting down") == 1, srv.log[-2000:]
    finally:
        srv.stop(signal.SIGKILL)


def test_sighup_drains_like_sigterm(tiny_model):
    srv = ServerProcess(tiny_model, "--no-store")
    try:
        srv.proc.send_signal(signal.SIGHUP)
        assert wait_exit(srv) == 0, srv.log[-2000:]
        assert "SIGHUP" in srv.log and "stopped" in srv.log
    finally:
        srv.stop(signal.SIGKILL)


LINES = 16                  # line events of the main loop's wait from its start: more than one turn of its loop
PARALLEL_LINES = 8          # daemons, each stopped at its own line, running at once


def stopped_at_line(tiny_model, line: int) -> tuple[int | None, str]:
    """Run the daemon with SIGTERM at this line of its main loop's wait: its exit status (None when
    it hung) and its output."""
    cmd = [sys.executable, str(SUPPORT / "signal_at_line.py"), str(line), "--model", str(tiny_model),
           "--port", "0", "--threads", "1", "--no-store"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=EXIT_WITHIN + 10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        return None, out
    return proc.returncode, out


@pytest.fixture(scope="module")
def runs_at_each_line(tiny_model):
    """Every line's run, started together a few at a time: the trace puts the signal at its line
    however busy the machine (the harness shortens the wait's turns, so later lines come soon)."""
    with ThreadPoolExecutor(PARALLEL_LINES) as pool:
        yield {line: pool.submit(stopped_at_line, tiny_model, line) for line in range(1, LINES + 1)}


@pytest.mark.parametrize("line", range(1, LINES + 1))
def test_sigterm_at_each_point_of_the_main_loops_wait(runs_at_each_line, line):
    status, out = runs_at_each_line[line].result()
    if status is None:
        pytest.fail(f"SIGTERM at line {line} of the wait hung the daemon:\n{out[-2000:]}")
    assert status == 0 and "stopped" in out, out[-2000:]
