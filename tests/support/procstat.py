"""What a server process has cost, read from /proc: CPU seconds (user + system, every thread) and
memory (resident now, and its peak). Tests bound these rather than wall-clock time, which a busy
shared machine stretches at will."""

from __future__ import annotations

import os

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all its threads, finished ones too)."""
    with open(f"/proc/{pid}/stat") as handle:
        # the command name (field 2) is in parentheses and may hold spaces: split after it
        fields = handle.read().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])       # fields 14 and 15 of proc(5)
    return (utime + stime) / CLOCK_TICKS


def memory_bytes(pid: int) -> dict[str, int]:
    """VmRSS (resident now) and VmHWM (the peak since the process started), in bytes."""
    found = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                found[name] = int(value.split()[0]) * 1024
    return found


def context_switches(pid: int) -> int:
    """The times the process's threads living now gave up or lost the CPU: each wake-up of an idle
    thread is one, so a loop that wakes every millisecond shows here however little it does."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as handle:
                for line in handle:
                    if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                        total += int(line.split()[1])
        except FileNotFoundError:       # a thread that ended meanwhile
            pass
    return total


def live_threads_cpu_seconds(pid: int) -> float:
    """CPU seconds of the process's threads living now, each to the nanosecond (schedstat's first
    field). cpu_seconds less this is what threads that ended cost."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as handle:
                total += int(handle.read().split()[0])
        except FileNotFoundError:       # a thread that ended meanwhile
            pass
    return total / 1e9
