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

import pytest
from device_opinfo_cases import SKIP, all_cases, run_case
from paths import TESTS

import torchtpu

EXPECTED_FILE = TESTS / "device_opinfo_expected_failures.txt"


def load_expected() -> dict[str, str]:
    out = {}
    for line in EXPECTED_FILE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            case_id, _, reason = line.partition("  # ")
            out[case_id.strip()] = reason.strip()
    return out


EXPECTED = load_expected()
CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_device_opinfo_sample(case, record_property):
    _check_case(case, record_property, "Device OpInfo (tpu vs CPU eager)")


# DeferAndFuse (docs/eager.md): every case again with its ops recorded and run as regions, cut
# by the harness's own `.cpu()` reads. Same expectations: the mode changes when ops run, not
# what they compute. `make test-slow` (another mode of the sweep above; ~105 worker-seconds):
# `make test` covers DeferAndFuse with test_defer.py and the zoo's device modes.


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_device_opinfo_sample_deferred(case, record_property):
    with torchtpu.eager.mode("defer_and_fuse"):
        _check_case(case, record_property, "Device OpInfo (tpu, defer_and_fuse vs CPU eager)")


def _check_case(case, record_property, harness: str) -> None:
    """Runs the case; its outcome (passed, failed, skipped) is tallied per harness by
    conftest.py, which prints the totals (also under pytest-xdist, from the reports)."""
    torchtpu.reset_stats()
    reason = run_case(case)
    outcome = "skipped" if reason == SKIP else "passed" if reason is None else "failed"
    record_property("harness", [harness, outcome, EXPECTED_FILE.name])
    if reason == SKIP:
        assert case.id not in EXPECTED, f"{case.id} no longer runs: remove it from {EXPECTED_FILE.name}"
        pytest.skip("the in-place variant refuses this sample on the CPU too")
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
