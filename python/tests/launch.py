"""Launching what users launch (torchrun, `accelerate launch`, a second node, a server), for the
multi-process tests: each command in its own session under a hard timeout, the whole session
killed afterwards, so no process or port is left behind on the shared CI machine."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list, cwd, env: dict, stdout=subprocess.PIPE) -> subprocess.Popen:
    """`cmd` in a new session, its stdout and stderr together as text (to `stdout`: a pipe, or a
    file for a process that outlives `communicate`, whose output would fill a pipe)."""
    return subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


def _end_session(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM to `proc`'s session, `grace` seconds to shut down, then SIGKILL to whatever is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the session's other processes too
    except ProcessLookupError:
        pass
    proc.wait()


def finish(procs: list, timeout: float, expect_ok: bool = True) -> list[str]:
    """Waits for every process (each within `timeout`), then kills each one's session; their
    outputs. A timeout fails the test with the outputs' tails; with `expect_ok` so does a
    non-zero exit."""
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            os.killpg(p.pid, signal.SIGKILL)
        tails = "\n".join(p.communicate()[0][-4000:] for p in procs)
        pytest.fail(f"{procs[0].args[:6]} did not finish within {timeout} s:\n{tails}")
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # whatever a launch left (workers, agents)
            except ProcessLookupError:
                pass
    if expect_ok:
        for p, out in zip(procs, outs):
            assert p.returncode == 0, f"{p.args} failed ({p.returncode}):\n{out[-10000:]}"
    return outs


def run(cmd: list, cwd, env: dict, timeout: float, expect_ok: bool = True) -> tuple[int, str]:
    """One command: its exit status and output."""
    proc = start(cmd, cwd, env)
    (out,) = finish([proc], timeout, expect_ok)
    return proc.returncode, out


class Server:
    """A running server: its `url` (``http://127.0.0.1:PORT``), its process, and its output so far."""

    def __init__(self, proc: subprocess.Popen, url: str, log):
        self.proc, self.url, self._log = proc, url, log

    def output(self) -> str:
        self._log.flush()
        with open(self._log.name, errors="replace") as f:
            return f.read()

    def alive(self) -> bool:
        return self.proc.poll() is None


@contextlib.contextmanager
def server(cmd: list, cwd, env: dict, port: int, ready_path: str = "/health", timeout: float = 300.0):
    """Starts `cmd` (which listens on 127.0.0.1:`port`) in its own session, waits until
    `ready_path` answers 200 (failing the test with the output's tail if the server exits or
    `timeout` passes first), yields a `Server`, and always ends the session afterwards: SIGTERM
    so it shuts down, then SIGKILL for anything left, so neither process nor port outlives it."""
    with tempfile.NamedTemporaryFile("w+", prefix="server-", suffix=".log") as log:
        proc = start(cmd, cwd, env, stdout=log)
        srv = Server(proc, f"http://127.0.0.1:{port}", log)
        try:
            deadline = time.monotonic() + timeout
            while True:
                if not srv.alive():
                    pytest.fail(f"{cmd[:6]} exited ({proc.returncode}) before answering:\n{srv.output()[-6000:]}")
                if time.monotonic() > deadline:
                    pytest.fail(f"{cmd[:6]} did not answer {ready_path} within {timeout} s:\n{srv.output()[-6000:]}")
                try:
                    with urllib.request.urlopen(srv.url + ready_path, timeout=5) as r:
                        if r.status == 200:
                            break
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass
                time.sleep(0.25)
            yield srv
        finally:
            _end_session(proc, grace=5.0)
