"""Recompiles named on the compiled path (issue 49, `torchtpu/recompiles.py`): a frame Dynamo
compiles again and a new program for new sizes of a symbolic graph each leave one record in
`torchtpu.stats()["recompiles"]` and one line on the `torchtpu.recompiles` logger, saying
what changed. Values are checked against eager: exactly for elementwise ops, to 1e-6 for a
sum (XLA adds in another order)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import pytest
import torch

import torchtpu


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    torchtpu.reset_stats()


def _recompiles(kind: str) -> list:
    return [r for r in torchtpu.stats()["recompiles"] if r["kind"] == kind]


def test_a_frame_compiled_again_names_the_input_that_changed(caplog):
    def f(x):
        return x * 2 + 1

    compiled = torch.compile(f, backend="torchtpu", dynamic=False)
    with caplog.at_level(logging.INFO, logger="torchtpu.recompiles"):
        for x in (torch.randn(4, 3), torch.randn(4, 3), torch.randn(8, 3), torch.randn(8, 3, dtype=torch.float64)):
            torch.testing.assert_close(compiled(x), f(x), rtol=0, atol=0)
    recs = _recompiles("dynamo")
    assert len(recs) == 2, recs  # the second call hits; the shape, then the dtype, recompile
    assert "input 0: shape [4, 3] -> [8, 3]" in recs[0]["what"], recs[0]
    assert "size mismatch" in recs[0]["what"], recs[0]  # Dynamo's own reason, the guard that failed
    assert "input 0: dtype torch.float32 -> torch.float64" in recs[1]["what"], recs[1]
    lines = [r.getMessage() for r in caplog.records if r.name == "torchtpu.recompiles"]
    assert len(lines) == 2 and "shape [4, 3] -> [8, 3]" in lines[0], lines


def test_a_new_program_for_new_sizes_names_them_and_its_bucket():
    def f(x):
        return torch.nn.functional.relu(x).sum(-1)

    compiled = torch.compile(f, backend="torchtpu", dynamic=True)
    with torch.no_grad():
        for n in (3, 5, 12):  # 3 and 5 share bucket 8; 12 needs bucket 16: a second program
            x = torch.randn(n, 7)
            torch.testing.assert_close(compiled(x), f(x), rtol=1e-6, atol=1e-6)
    recs = _recompiles("signature")
    assert len(recs) == 1, torchtpu.stats()["recompiles"]
    # The rows' size went from bucket 8 to 16 (the columns' 7 is padded to a bucket too).
    assert re.search(r"shape \[8, 8\] -> \[16, 8\]", recs[0]["what"]) and "bucket" in recs[0]["what"], recs[0]


def test_torch_logs_turns_the_log_line_on():
    # TORCH_LOGS takes the qualified logger name; a new process, as a user sets it.
    code = (
        "import torch, torchtpu\n"
        "f = torch.compile(lambda x: x + 1, backend='torchtpu', dynamic=False)\n"
        "f(torch.randn(2)); f(torch.randn(3))\n"
    )
    env = dict(os.environ, TORCH_LOGS="torchtpu.recompiles")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "torchtpu recompiled frame" in out.stderr and "shape [2] -> [3]" in out.stderr, out.stderr[-2000:]
