"""Shared pytest configuration.

The persistent compilation cache goes to a fresh folder for the session (and subprocesses
inherit it), so tests never read or fill the user's cache. Prints the OpInfo harness totals
when it ran."""

import atexit
import os
import shutil
import sys
import tempfile

_session_cache = tempfile.mkdtemp(prefix="torchtpu-test-cache-")
os.environ["TORCHTPU_CACHE_DIR"] = _session_cache
atexit.register(shutil.rmtree, _session_cache, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    module = sys.modules.get("test_opinfo")
    if module is not None and (module.RESULTS["passed"] or module.RESULTS["failed"]):
        terminalreporter.write_line(module.summary())
