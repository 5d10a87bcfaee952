"""The device OpInfo harness: PyTorch's OpInfo samples (op_db) run on CPU tensors and on the
same tensors moved to the eager `tpu` device, compared after `.cpu()` (docs/eager.md).

Selection and checks: device_opinfo_cases.py (every comparable op of op_db, float32, int64
and bool, the first sample, the function variant and the in-place variant). Every tpu op
runs under `torchtpu.eager.fallback("error")`, so an op that would silently run on the CPU
is a failure (`fallback: aten.<op>`). Tolerances: the compiled harness's (opinfo_cases.py).

Known failures are listed with their reason in device_opinfo_expected_failures.txt
(regenerate with `.venv/bin/python python/tests/bless_device_opinfo.py`). A listed case must
still fail and an unlisted one must pass, so the list stays true. The totals are printed at
the end of the session.
"""

from __future__ import annotations

import pathlib

import pytest

import torchtpu
from device_opinfo_cases import SKIP, all_cases, run_case

EXPECTED_FILE = pathlib.Path(__file__).with_name("device_opinfo_expected_failures.txt")
RESULTS = {"passed": 0, "failed": 0, "skipped": 0}


def load_expected() -> dict[str, str]:
    out = {}
    for line in EXPECTED_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            case_id, _, reason = line.partition("  # ")
            out[case_id.strip()] = reason.strip()
    return out


EXPECTED = load_expected()
CASES = all_cases()


@pytest.fixture(scope="module", autouse=True)
def _print_totals(request):
    """The totals at the end of the module (conftest.py prints only the compiled harness's)."""
    yield
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is not None and capture is not None and summary():
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            for line in summary().splitlines():
                reporter.write_line(line)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_device_opinfo_sample(case):
    _check_case(case, RESULTS)


# DeferAndFuse (docs/eager.md): every case again with its ops recorded and run as regions, cut
# by the harness's own `.cpu()` reads. Same expectations: the mode changes when ops run, not
# what they compute.
RESULTS_DEFERRED = {"passed": 0, "failed": 0, "skipped": 0}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_device_opinfo_sample_deferred(case):
    with torchtpu.eager.mode("defer_and_fuse"):
        _check_case(case, RESULTS_DEFERRED)


def _check_case(case, results: dict) -> None:
    torchtpu.reset_stats()
    reason = run_case(case)
    if reason == SKIP:
        results["skipped"] += 1
        assert case.id not in EXPECTED, f"{case.id} no longer runs: remove it from {EXPECTED_FILE.name}"
        pytest.skip("the in-place variant refuses this sample on the CPU too")
    results["passed" if reason is None else "failed"] += 1
    if case.id in EXPECTED:
        assert reason is not None, f"{case.id} now passes: remove it from {EXPECTED_FILE.name}"
    else:
        assert reason is None, reason
        # Nothing ran on the CPU behind the harness's back.
        assert not torchtpu.stats()["eager_cpu_fallbacks"]


def test_expected_failures_name_real_cases():
    ids = {c.id for c in CASES}
    stale = sorted(set(EXPECTED) - ids)
    assert not stale, f"expected failures for cases that no longer exist: {stale[:10]}"


def summary() -> str:
    lines = []
    for label, results in (("", RESULTS), (", defer_and_fuse", RESULTS_DEFERRED)):
        total = results["passed"] + results["failed"]
        if not total:
            continue
        rate = 100.0 * results["passed"] / total
        lines.append(
            f"Device OpInfo totals (tpu{label} vs CPU eager): {results['passed']} passed, {results['failed']} failed "
            f"of {total} cases ({rate:.1f}% pass rate; {results['skipped']} skipped; failures expected and "
            f"listed in {EXPECTED_FILE.name})"
        )
    return "\n".join(lines)
