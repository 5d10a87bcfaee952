"""Shared pytest configuration.

The persistent compilation cache goes to a fresh folder for the session (and subprocesses
inherit it), so tests never read or fill the user's cache. Prints the OpInfo harness totals
when it ran.

Every fallback is an error in the test suite (TORCHTPU_FALLBACK=error, see
torchtpu/policy.py): a test that compiles something torchtpu runs eagerly fails, unless it is
marked `@pytest.mark.allow_fallback` because it checks fallback on purpose (or passes
options={"strict": False} itself)."""

import atexit
import os
import shutil
import sys
import tempfile

import pytest

_session_cache = tempfile.mkdtemp(prefix="torchtpu-test-cache-")
os.environ["TORCHTPU_CACHE_DIR"] = _session_cache
atexit.register(shutil.rmtree, _session_cache, ignore_errors=True)
os.environ["TORCHTPU_FALLBACK"] = "error"
# Reproductions of internal errors go to a session folder, not the system's temp folder.
os.environ.setdefault("TORCHTPU_REPRO_DIR", os.path.join(_session_cache, "repro"))


def pytest_configure(config):
    config.addinivalue_line("markers", "allow_fallback: the test checks fallback to eager on purpose")


@pytest.fixture(autouse=True)
def _fallback_policy(request, monkeypatch):
    if request.node.get_closest_marker("allow_fallback") is not None:
        monkeypatch.setenv("TORCHTPU_FALLBACK", "eager")
    yield


def pytest_terminal_summary(terminalreporter):
    module = sys.modules.get("test_opinfo")
    if module is not None and (module.RESULTS["passed"] or module.RESULTS["failed"]):
        terminalreporter.write_line(module.summary())
