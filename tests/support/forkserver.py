"""Test servers forked from one process that has already imported localserve.

`python -m localserve` spends most of its start-up importing (llama_cpp with numpy, jinja2,
every dialect): about 0.8 s of the second a tiny model's server takes to answer /health, and
the suite starts some 300 servers. The first ServerProcess (conftest.py) starts this module as
a process of its own (the zygote), which imports localserve.app once; every later server is a
fork of it that runs `localserve.cli.main.main(args)` with the test's environment, working
folder and output pipe, as `python -m localserve ARGS` would, and ends as the interpreter does
(its SystemExit goes up to the interpreter's own exit: non-daemon threads joined, atexit
run, modules finalized). The server's code is the same;
only the imports are shared.

Only a plain start takes this way (conftest.py decides): a server whose environment differs in
more than what localserve reads at run time (RUN_TIME_ENV), or one whose start-up itself is
under test (`wait=False`), is still started with `python -m localserve`, as are servers while
the zygote cannot start (an import error: the server's own start then shows it).

The zygote speaks over a SOCK_SEQPACKET socket pair: a JSON request (args, env, cwd) with the
write end of the server's output pipe; it answers {"pid": N}, and {"exit": N, "code": C} when
that server has ended (C as Popen's returncode: -SIGNAL when a signal ended it). When the test
process goes away the socket closes and the zygote kills what it forked.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading

MESSAGE = 1 << 20          # bytes a request may take (the environment rides along)
# Variables a forked server may have other than the zygote's, besides LOCALSERVE_* (its flags,
# read by cli/flags.py at start): localserve reads them when it runs, never while importing.
# Any other difference (PYTHONPATH, HOME, HF_*, NOTIFY_SOCKET...) starts the server from scratch.
RUN_TIME_ENV = frozenset({"XDG_DATA_HOME", "PYTHONUNBUFFERED"})


class Zygote:
    """The test process's end: starts the zygote, forks servers from it, hears how they end."""

    def __init__(self, root: str, env: dict[str, str]):
        self.env = env
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, str(theirs.fileno())], cwd=root, env=env,
                                     stdin=subprocess.DEVNULL, pass_fds=[theirs.fileno()])
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()              # one spawn at a time: its answer is the next "pid"
        self.changed = threading.Condition()
        self.answers: list[dict] = []
        self.codes: dict[int, int] = {}
        self.alive = True
        ready = json.loads(self.sock.recv(MESSAGE) or b'{"error": "the zygote exited"}')
        if "error" in ready:
            self.alive = False
            self.sock.close()
            self.proc.wait()
            return
        threading.Thread(target=self._hear, name="zygote", daemon=True).start()
        atexit.register(self.close)

    def usable(self, env: dict[str, str]) -> bool:
        """Whether a server with this environment may be forked: it differs from the one the
        zygote imported with only in variables localserve reads once it runs (RUN_TIME_ENV)."""
        changed = {name for name in env.keys() | self.env.keys() if env.get(name) != self.env.get(name)}
        return self.alive and all(name in RUN_TIME_ENV or name.startswith("LOCALSERVE_") for name in changed)

    def spawn(self, args: list[str], env: dict[str, str], cwd: str) -> ForkedProcess:
        read_end, write_end = os.pipe()
        try:
            with self.lock:
                request = json.dumps({"args": args, "env": env, "cwd": cwd}).encode()
                socket.send_fds(self.sock, [request], [write_end])
                with self.changed:
                    self.changed.wait_for(lambda: self.answers or not self.alive, timeout=30)
                    if not self.answers:
                        raise RuntimeError("the zygote did not fork a server")
                    answer = self.answers.pop(0)
        finally:
            os.close(write_end)
        if "pid" not in answer:
            os.close(read_end)
            raise RuntimeError(f"the zygote could not fork a server: {answer}")
        return ForkedProcess(self, answer["pid"], ["localserve", *args], os.fdopen(read_end, "r"))

    def _hear(self) -> None:
        while True:
            try:
                data = self.sock.recv(MESSAGE)
            except OSError:
                data = b""
            with self.changed:
                if not data:
                    self.alive = False
                    self.changed.notify_all()
                    return
                message = json.loads(data)
                if "exit" in message:
                    self.codes[message["exit"]] = message["code"]
                else:
                    self.answers.append(message)
                self.changed.notify_all()

    def close(self) -> None:
        if self.alive:
            self.sock.shutdown(socket.SHUT_RDWR)
            self.sock.close()
            self.proc.wait(timeout=30)


class ForkedProcess:
    """What ServerProcess and the tests use of a Popen, for a server the zygote forked."""

    def __init__(self, zygote: Zygote, pid: int, args: list[str], stdout):
        self.zygote, self.pid, self.args, self.stdout = zygote, pid, args, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        with self.zygote.changed:
            return self._code()

    def wait(self, timeout: float | None = None) -> int:
        with self.zygote.changed:
            if not self.zygote.changed.wait_for(lambda: self._code() is not None, timeout=timeout):
                raise subprocess.TimeoutExpired(self.args, timeout)
            return self.returncode

    def _code(self) -> int | None:
        if self.returncode is None:
            if self.pid in self.zygote.codes:
                self.returncode = self.zygote.codes.pop(self.pid)
            elif not self.zygote.alive:
                self.returncode = -signal.SIGKILL      # the zygote killed it as it went
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


# ---- the zygote's side ----------------------------------------------------------------------

def serve(fd: int) -> None:
    """The zygote: import localserve, then fork a server for each request until the socket closes."""
    sock = socket.socket(fileno=fd)
    try:
        import localserve.app  # noqa: F401  (what `serve` needs: the engine, llama_cpp, every dialect)
        from localserve.cli.main import main
    except BaseException as exc:       # the servers are started as processes of their own instead
        sock.send(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        return
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)       # a byte on wake_write when a server ends
    sock.send(b'{"ready": true}')
    children: set[int] = set()
    while True:
        readable, _, _ = select.select([sock, wake_read], [], [])
        if wake_read in readable:
            os.read(wake_read, 4096)
        _reap(sock, children)
        if sock in readable:
            try:
                data, fds, _, _ = socket.recv_fds(sock, MESSAGE, 1)
            except OSError:
                data, fds = b"", []
            if not data:
                break
            request = json.loads(data)
            pid = os.fork()
            if pid == 0:
                sock.close()
                os.close(wake_read)
                os.close(wake_write)
                _server(main, request, fds[0])
            os.close(fds[0])
            children.add(pid)
            sock.send(json.dumps({"pid": pid}).encode())
    for pid in children:               # the tests are gone: so are their servers
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _reap(sock: socket.socket, children: set[int]) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            try:
                sock.send(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}).encode())
            except OSError:
                pass


def _server(main, request: dict, out: int) -> None:
    """In the forked child: become `python -m localserve ARGS`; never returns."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # PYTHONUNBUFFERED, as the servers started with `python -m` have it
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True, line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True, line_buffering=True,
                                  errors="backslashreplace")
    sys.argv = [os.path.join(request["cwd"], "localserve", "__main__.py"), *request["args"]]
    # as localserve/__main__.py: its SystemExit (or exception) goes up through the zygote's frames,
    # which catch nothing, to the interpreter's own exit: threads joined, atexit, finalization
    sys.exit(main(request["args"]))


# The zygote itself: `python -c _BOOT FD` from the repository root. sys.path[0] is then the root,
# as for `python -m localserve`; this file is read by path, so tests/support stays off the path.
_BOOT = ("import os, sys; sys.path[0] = os.getcwd(); "
         f"zygote = {{'__name__': '__zygote__', '__file__': {__file__!r}}}; "
         f"exec(compile(open({__file__!r}).read(), {__file__!r}, 'exec'), zygote); "
         "zygote['serve'](int(sys.argv[1]))")
