"""Run the daemon and send it SIGTERM at the K-th line its main thread runs once it is serving.

    python tests/support/signal_at_line.py K [localserve flags...]

A signal from outside lands wherever the main thread happens to be, and the dangerous places
(inside the wait's own lock) last microseconds; this puts the signal at one chosen point of the
main loop's wait, so a test can try each point in turn. The trace function counts line events
of the main thread only (sys.settrace is per thread), from the first line of a function named
`wait` once log_serving has returned (the main loop's wait, whatever it waits on), sends the
signal at the K-th, and from then on only passes through. The wait's turns are shortened
(MAIN_LOOP_WAKE): the same lines come in the same order, the K-th sooner.
"""

from __future__ import annotations

import os
import signal
import sys

from localserve import app
from localserve.cli.main import main

TURN = 0.05     # seconds: one turn of the main loop's wait here, instead of the daemon's 1 s
target = int(sys.argv[1])
state = {"serving": False, "armed": False, "lines": 0}


def trace(frame, event, arg):
    if event == "return" and frame.f_code.co_name == "log_serving":
        state["serving"] = True
    elif event == "line" and state["serving"] and frame.f_code.co_name == "wait":
        state["serving"], state["armed"] = False, True
    if event == "line" and state["armed"]:
        state["lines"] += 1
        if state["lines"] == target:
            state["armed"] = False
            os.kill(os.getpid(), signal.SIGTERM)
    return trace


app.MAIN_LOOP_WAKE = TURN
sys.settrace(trace)
sys.exit(main(sys.argv[2:]))
