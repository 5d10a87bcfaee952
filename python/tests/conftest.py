"""Shared pytest configuration.

The persistent compilation cache goes to a fresh folder for the session (and subprocesses
inherit it), so tests never read or fill the user's cache. Prints the OpInfo harness totals
when it ran."""

import os
import sys
import tempfile

if "TORCHTPU_CACHE_DIR" not in os.environ or os.environ.get("TORCHTPU_TEST_KEEP_CACHE") != "1":
    os.environ["TORCHTPU_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchtpu-test-cache-")


def pytest_terminal_summary(terminalreporter):
    module = sys.modules.get("test_opinfo")
    if module is not None and (module.RESULTS["passed"] or module.RESULTS["failed"]):
        terminalreporter.write_line(module.summary())
