"""scripts/accelerator_check.sh (benches/README.md, "Accelerator readiness"): its CPU dry run
writes the report a GPU run writes, from a smoke check, one test file and the quick benchmark on
the CPU plugin; without a GPU and without --dry-run it refuses with status 2. The GPU path itself
needs a machine with an NVIDIA GPU."""

import os
import re
import shutil
import subprocess

import pytest
from paths import ROOT

SCRIPT = ROOT / "scripts" / "accelerator_check.sh"


def _env() -> dict:
    # The script runs its own pytest: this session's pytest and xdist variables stay out of it.
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TORCHTPU_PJRT_PLUGIN"))}


def test_dry_run_writes_the_report(tmp_path):
    report = tmp_path / "report.md"
    r = subprocess.run(
        [str(SCRIPT), "--dry-run", "--report", str(report), "--logs", str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=240,
    )
    text = report.read_text() if report.exists() else ""
    assert r.returncode == 0, f"{r.stderr[-3000:]}\n{text}"
    for section in ("## Machine", "## Plugin", "## Steps", "## Tests", "## Benchmark"):
        assert section in text, section
    assert "- Mode: dry run (CPU plugin)" in text
    assert "- Result: PASSED" in text
    assert "- Package: lammps-jax-pjrt-cpu " in text  # setup's CPU plugin, found by the runtime's search
    assert "- Platform: cpu," in text
    for step in ("plugin", "smoke", "tests", "bench"):
        assert re.search(rf"^\| {step} \| ok \| 0 \| \d+ \|$", text, re.M), step
    assert re.search(r"^Summary: `\d+ passed in [\d.]+s`$", text, re.M), text
    # The benchmark's geometric-mean speedup row of each steady-state table.
    speedups = re.findall(r"^\| \*\*geometric mean\*\* \|.*\*\*[\d.]+x\*\* \|$", text, re.M)
    assert len(speedups) == 2, text


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has nvidia-smi")
def test_without_a_gpu_it_refuses_unless_dry_run(tmp_path):
    r = subprocess.run(
        [str(SCRIPT), "--report", str(tmp_path / "report.md")], capture_output=True, text=True, env=_env(), timeout=60
    )
    assert r.returncode == 2, r.stderr
    assert "no NVIDIA GPU found (nvidia-smi" in r.stderr
    assert not (tmp_path / "report.md").exists()
