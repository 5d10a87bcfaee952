"""Shared pytest configuration.

The persistent compilation cache goes to a fresh folder for the session (and subprocesses
inherit it), so tests never read or fill the user's cache. Prints the OpInfo harnesses' totals
when they ran.

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

# The tests are grouped by layer in the folders below; what they share (paths.py, the workers,
# the harnesses, models/) is imported from here.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_session_cache = tempfile.mkdtemp(prefix="torchtpu-test-cache-")
os.environ["TORCHTPU_CACHE_DIR"] = _session_cache
atexit.register(shutil.rmtree, _session_cache, ignore_errors=True)
os.environ["TORCHTPU_FALLBACK"] = "error"
# Reproductions of internal errors go to a session folder, not the system's temp folder.
os.environ.setdefault("TORCHTPU_REPRO_DIR", os.path.join(_session_cache, "repro"))


def pytest_configure(config):
    config.addinivalue_line("markers", "allow_fallback: the test checks fallback to eager on purpose")
    config.addinivalue_line(
        "markers", "slow: a long sweep, or another mode of a path `make test` covers; `make test-slow` runs them"
    )


# The longest files, longest first (seconds of one worker in a full run, 2026-12-07, second): collected
# first, so that `make test`'s two workers (pytest-xdist `--dist loadfile`, which hands out files
# in collection order to whichever worker is free) start them early and end together, instead of
# one worker running a long file alone at the end (measured on a clean clone: TorchTitan's 3.5
# minutes ran last while the other worker sat idle).
_LONGEST_FIRST = (
    "test_opinfo.py",  # 346
    "test_model_zoo.py",  # 168
    "test_device_opinfo.py",  # 161
    "test_distributed.py",  # 157
    "test_serving.py",  # 143
    "test_torchtitan.py",  # 139
    "test_workloads.py",  # 100
    "test_last_mile_models.py",  # 87
    "test_first_hour.py",  # 81
    "test_quantization.py",  # 70
    "test_continuous_batching.py",  # 65
    "test_device_real_use.py",  # 60
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its order


@pytest.fixture(autouse=True)
def _fallback_policy(request, monkeypatch):
    if request.node.get_closest_marker("allow_fallback") is not None:
        monkeypatch.setenv("TORCHTPU_FALLBACK", "eager")
    yield


# Per harness (the OpInfo sweeps): outcome -> count, and the file listing its expected failures.
# Tallied from the test reports, which pytest-xdist's workers send to the controller.
_HARNESS_TOTALS: dict = {}


def pytest_runtest_logreport(report):
    if report.when != "call":
        return
    for name, value in report.user_properties:
        if name == "harness":
            harness, outcome, expected = value
            counts = _HARNESS_TOTALS.setdefault(harness, {"passed": 0, "failed": 0, "skipped": 0, "file": expected})
            counts[outcome] += 1


def pytest_terminal_summary(terminalreporter):
    for harness, c in _HARNESS_TOTALS.items():
        total = c["passed"] + c["failed"]
        rate = 100.0 * c["passed"] / total if total else 0.0
        skipped = f"; {c['skipped']} skipped" if c["skipped"] else ""
        terminalreporter.write_line(
            f"{harness} totals: {c['passed']} passed, {c['failed']} failed of {total} cases ({rate:.1f}% pass rate"
            f"{skipped}; failures expected and listed in {c['file']})"
        )
