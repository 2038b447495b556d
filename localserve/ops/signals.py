"""Stop signals (SIGTERM, SIGINT, SIGHUP), received without a lock in their handlers.

Python runs a signal handler in the main thread between two bytecodes, wherever that thread
is. A handler that called threading.Event.set() while the main thread was inside that same
Event's wait(), holding its lock, waited for the lock for ever: a SIGTERM once hung the daemon
so, and each further SIGTERM stacked another blocked handler. So the handlers here do nothing:
signal.set_wakeup_fd has CPython's C-level handler write the signal's number into a pipe, and
the main thread waits on that pipe with poll(). No lock is taken anywhere on the signal's way.

SIGHUP stops the daemon like SIGTERM, draining first: a terminal closing or a naive `systemctl
reload` sends it, and there is nothing to reload (flags and the config file are read once, at
start), while dying on the spot would cut open requests and fail running background responses.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time

log = logging.getLogger("localserve")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _do_nothing(signum, frame) -> None:
    """The Python-level handler: the wakeup pipe carries the signal (see the module's comment)."""


class StopSignals:
    """`with StopSignals() as signals:` the stop signals caught; signals.wait(t) waits up to t
    seconds for one. Outside the main thread (where handlers cannot be set) it only waits."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._active = threading.current_thread() is threading.main_thread()
        if not self._active:
            return
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._poll = select.poll()
        self._poll.register(self._read, select.POLLIN)
        self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._previous = {sig: signal.signal(sig, _do_nothing) for sig in STOP_SIGNALS}

    def __enter__(self) -> "StopSignals":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ""

    def requested(self) -> bool:
        """Whether a stop signal has come, without waiting."""
        return self.wait(0)

    def wait(self, timeout: float) -> bool:
        """True once a stop signal has come (now or before); False after `timeout` without one."""
        if self.received is not None:
            return True
        if not self._active:
            time.sleep(timeout)
            return False
        if self._poll.poll(max(0, int(timeout * 1000))):
            try:
                numbers = os.read(self._read, 256)
            except BlockingIOError:
                numbers = b""
            for number in numbers:
                if number in STOP_SIGNALS:
                    self.received = number
                    log.info("received %s%s", self.name, ": it stops the server as SIGTERM does (there is "
                             "nothing to reload)" if number == signal.SIGHUP else "")
                    break
        return self.received is not None

    def close(self) -> None:
        """The handlers and wakeup descriptor from before put back, the pipe closed."""
        if not self._active:
            return
        self._active = False
        for sig, before in self._previous.items():
            signal.signal(sig, before)
        signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read)
        os.close(self._write)
