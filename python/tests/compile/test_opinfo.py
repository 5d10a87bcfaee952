"""The OpInfo harness: PyTorch's own OpInfo samples (torch.testing._internal's op_db) through
torch.compile(..., backend="torchtpu", fullgraph=True) in strict mode, compared with eager.

Selection (opinfo_cases.py): every op in op_db, each of float32/int64/bool/complex64/bfloat16
it supports, the first sample: deterministic and within CI's budget. Strict mode makes any
fallback a failure, so a pass means the compiled path computed the op. Tolerance:
rtol=1e-4, atol=1e-4 for float32 and complex64 results (XLA's transcendental approximations
differ from ATen's in the last bits), rtol=2e-2, atol=2e-2 for bfloat16, exact for integers
and bools.

Known failures are listed with their reason in opinfo_expected_failures.txt (regenerate with
`.venv/bin/python python/tests/bless_opinfo.py`). A listed case must still fail and an unlisted
one must pass, so the list stays true. The totals are printed at the end of the session.
"""

from __future__ import annotations

import pytest
from opinfo_cases import all_cases, run_case
from paths import TESTS

EXPECTED_FILE = TESTS / "opinfo_expected_failures.txt"


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
def test_opinfo_sample(case, record_property):
    reason = run_case(case)
    # Tallied by conftest.py, which prints the totals (also under pytest-xdist).
    outcome = "passed" if reason is None else "failed"
    record_property("harness", ["OpInfo harness (torchtpu vs eager)", outcome, EXPECTED_FILE.name])
    if case.id in EXPECTED:
        assert reason is not None, f"{case.id} now passes: remove it from {EXPECTED_FILE.name}"
    else:
        assert reason is None, reason


def test_expected_failures_name_real_cases():
    ids = {c.id for c in CASES}
    stale = sorted(set(EXPECTED) - ids)
    assert not stale, f"expected failures for cases that no longer exist: {stale[:10]}"
