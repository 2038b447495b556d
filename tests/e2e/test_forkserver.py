"""The test servers forked from a process that imported localserve already (support/forkserver.py):
each is a server of its own (its pid, its output, its exit status as Popen gives it) with the
environment it was started with, and a server the zygote cannot give that environment starts
from scratch."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from conftest import ServerProcess
from forkserver import ForkedProcess

pytestmark = pytest.mark.skipif(os.environ.get("LOCALSERVE_TEST_FORK") == "0",
                                reason="LOCALSERVE_TEST_FORK=0: every server starts from scratch")


def test_a_forked_server_serves_logs_and_ends_as_a_process_of_its_own(tiny_model, tmp_path):
    one = ServerProcess(tiny_model, "--no-store", env={"XDG_DATA_HOME": str(tmp_path / "one")})
    two = ServerProcess(tiny_model, env={"XDG_DATA_HOME": str(tmp_path / "two")})
    try:
        assert isinstance(one.proc, ForkedProcess) and isinstance(two.proc, ForkedProcess)
        assert one.proc.pid != two.proc.pid and one.proc.poll() is None
        assert httpx.get(one.base_url + "/health").json()["status"] == "ok"
        reply = httpx.post(two.base_url + "/v1/responses", json={"input": "hi", "max_output_tokens": 2})
        assert reply.status_code == 200
        assert (tmp_path / "two" / "localserve").is_dir() and not (tmp_path / "one").exists()  # its own XDG_DATA_HOME
        assert one.wait_log("serving") and two.wait_log("POST /v1/responses 200")
        one.proc.kill()
        assert one.proc.wait(timeout=10) == -signal.SIGKILL
        assert two.stop(signal.SIGINT) == 0 and "stopped" in two.log
    finally:
        one.stop()
        two.stop()


def test_a_server_whose_environment_the_zygote_lacks_starts_from_scratch(tiny_model, tmp_path):
    srv = ServerProcess(tiny_model, env={"HOME": str(tmp_path)})
    try:
        assert not isinstance(srv.proc, ForkedProcess)
        assert httpx.get(srv.base_url + "/health").status_code == 200
    finally:
        assert srv.stop() == 0
