"""ATen's GEMM inside compiled programs (torchtpu/host_kernels.py, the `host-matmul` pass,
`torchtpu_aten_matmul_*`): values and gradients against eager on the same inputs, and which
kernel each matmul got.

- Forced (`host-matmul{kernel=aten}` in the pipeline): every mm / bmm / addmm runs ATen's
  kernel on XLA's buffers; the IR after the passes (dump_dir) shows `tpu.matmul {form = "aten"}`.
- Measured (the default): each new shape is timed in both kernels at compile time; a program
  where ATen's won some is raced whole against the all-XLA program and the faster kept; the
  choices, with their timings, are in `torchtpu.stats()["kernel_choices"]`.

Tolerances: f32 rtol 1e-5 / atol 1e-5 (the same products summed in another order), bf16 2e-2.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from models.small import MLP, MHABlock
from paths import TESTS

import torchtpu
from torchtpu import _C

FORCED = {"passes": _C.DEFAULT_PIPELINE + ",host-matmul{kernel=aten}"}


@pytest.fixture(autouse=True)
def _fresh():
    torch._dynamo.reset()
    torchtpu.reset_stats()


def _lowered_ir(dump: str) -> str:
    return "\n".join(open(p).read() for p in sorted(glob.glob(os.path.join(dump, "*[0-9].ir"))))


@pytest.mark.parametrize("make", [MLP, MHABlock], ids=["mlp", "attention"])
def test_forced_aten_training_matches_eager(make, tmp_path):
    torch.manual_seed(0)
    model = make()
    x = torch.randn(6, 12) if make is MLP else torch.randn(3, 7, 16)
    compiled_model = make()
    compiled_model.load_state_dict(model.state_dict())
    compiled = torch.compile(
        compiled_model, backend="torchtpu", options={**FORCED, "strict": True, "dump_dir": str(tmp_path)}
    )
    want = model(x)
    got = compiled(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    want.square().mean().backward()
    got.square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), compiled_model.parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-5, atol=1e-5, msg=name)
    ir = _lowered_ir(str(tmp_path))
    assert "tpu.matmul" in ir and 'form = "aten"' in ir
    # Every product went to ATen: none is left for XLA's dot, forward or backward.
    assert "aten.mm" not in ir and "aten.addmm" not in ir and "aten.bmm" not in ir
    # The backward's transposed operands are read as stored, not copied.
    assert "transpose_a = true" in ir or "transpose_b = true" in ir


def test_forced_aten_bf16_inference(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 48), nn.GELU(), nn.Linear(48, 8)).to(torch.bfloat16).eval()
    x = torch.randn(5, 32, dtype=torch.bfloat16)
    compiled = torch.compile(model, backend="torchtpu", options={**FORCED, "strict": True, "dump_dir": str(tmp_path)})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=2e-2, atol=2e-2)
    assert 'form = "aten"' in _lowered_ir(str(tmp_path))


def test_measured_choice_is_recorded_and_correct():
    # A shape no other test compiles: measured here, in this process.
    torch.manual_seed(0)
    model = nn.Linear(72, 1032).eval()
    x = torch.randn(136, 72)
    compiled = torch.compile(model, backend="torchtpu", options={"strict": True})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    choices = [c for c in torchtpu.stats()["kernel_choices"] if c["shape"] == "[136x72] @ [72x1032]T f32"]
    assert len(choices) == 1, torchtpu.stats()["kernel_choices"]
    (choice,) = choices
    assert choice["op"] == "mm" and choice["note"] is None
    assert choice["xla_us"] > 0 and choice["aten_us"] > 0
    assert choice["kernel"] == ("aten" if choice["aten_us"] < choice["xla_us"] else "xla")
    # Where ATen's won the product alone, the whole program raced the all-XLA one too.
    programs = [c for c in torchtpu.stats()["kernel_choices"] if c["op"] == "program"]
    if choice["kernel"] == "aten":
        assert programs and all(p["xla_us"] > 0 and p["aten_us"] > 0 for p in programs), programs
        assert programs[-1]["kernel"] == ("aten" if programs[-1]["aten_us"] < programs[-1]["xla_us"] else "xla")


def test_a_program_found_in_the_graph_cache_lists_its_race(tmp_path):
    """A later process that finds a raced program in the graph cache (no race of its own) still
    lists the choice, with the timings measured when it was compiled."""
    code = (
        "import json, torch, torchtpu\n"
        "from models.small import MLP\n"
        "torch.manual_seed(0)\n"
        "m = MLP().eval()\n"
        f"c = torch.compile(m, backend='torchtpu', options={{**{FORCED!r}, 'strict': True}})\n"
        "x = torch.randn(6, 12)\n"
        "with torch.no_grad():\n"
        "    torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)\n"
        "s = torchtpu.stats()\n"
        "print(json.dumps([s['disk_hits'], [k for k in s['kernel_choices'] if k['op'] == 'program']]))\n"
    )
    tests = str(TESTS)
    env = dict(
        os.environ, TORCHTPU_CACHE_DIR=str(tmp_path), PYTHONPATH=tests + os.pathsep + os.environ.get("PYTHONPATH", "")
    )

    def run():
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    _, (raced,) = run()
    assert raced["note"] is None and raced["xla_us"] > 0 and raced["aten_us"] > 0
    hits, (listed,) = run()
    assert hits >= 1
    assert "found in the graph cache" in listed["note"] and raced["shape"] in listed["note"]
    assert (listed["xla_us"], listed["aten_us"], listed["kernel"]) == (
        raced["xla_us"],
        raced["aten_us"],
        raced["kernel"],
    )


def test_off_keeps_xla_everywhere():
    # TORCHTPU_HOST_KERNELS=0 (every host kernel off) or the option: nothing measured, XLA's dot.
    code = (
        "import torch, torchtpu\n"
        "m = torch.nn.Linear(40, 24)\n"
        "c = torch.compile(m, backend='torchtpu', options={'strict': True})\n"
        "x = torch.randn(9, 40)\n"
        "torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)\n"
        "d = torch.compile(torch.nn.Linear(40, 16), backend='torchtpu', options={'host_kernels': False})\n"
        "d(x)\n"
        "print(len(torchtpu.stats()['kernel_choices']))\n"
    )
    env = dict(os.environ, TORCHTPU_HOST_KERNELS="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "0"
