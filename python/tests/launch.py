"""Launching what users launch (torchrun, `accelerate launch`, a second node), for the
multi-process tests: each command in its own session under a hard timeout, the whole session
killed afterwards, so no process or port is left behind on the shared CI machine."""

from __future__ import annotations

import os
import signal
import socket
import subprocess

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd: list, cwd, env: dict) -> subprocess.Popen:
    """`cmd` in a new session, its stdout and stderr together as text."""
    return subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


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
