"""`torch.autocast("tpu")` (issue 28): CUDA's cast policies on the AutocastPrivateUse1 key
(torchtpu/csrc/autocast.cpp), in every eager mode and under `torch.compile` on tpu tensors,
and a bf16 autocast training step of the zoo's Llama against CPU autocast.

Tolerances: an op autocast to bfloat16 is compared with the same op on CPU over inputs cast
to bfloat16 by hand, within 2 bf16 ulps (rtol 1.6e-2, the rounding of one bf16 result twice
over). Ops on the float32 list are compared with CPU float32 at 1e-5. The Llama step: loss
within 1e-3 and every gradient within 2% (relative norm) of CPU autocast; measured 1.1e-4
and 0.7%. CPU's own op lists are not CUDA's (CPU keeps fewer ops in float32), which is why
the gradients are not compared closer.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import torchtpu

TPU = "tpu"
MODES = ["strict", "debug", "defer_and_fuse"]
BF16 = dict(rtol=1.6e-2, atol=1e-2)


def test_default_dtype_is_bfloat16_and_float16_is_accepted():
    assert torch.amp.is_autocast_available(TPU)
    assert torch.get_autocast_dtype(TPU) == torch.bfloat16
    x = torch.randn(3, 4, device=TPU)
    with torch.autocast(TPU):
        assert torch.get_autocast_dtype(TPU) == torch.bfloat16
        assert (x @ x.T).dtype == torch.bfloat16
    with torch.autocast(TPU, dtype=torch.float16):
        assert (x @ x.T).dtype == torch.float16
    assert (x @ x.T).dtype == torch.float32  # outside the region


@pytest.mark.parametrize("mode", MODES)
def test_cuda_policies_in_every_mode(mode):
    torch.manual_seed(0)
    x, w, b = torch.randn(5, 8), torch.randn(6, 8), torch.randn(6)
    t1, t2 = torch.randn(5, 6), torch.randn(5, 6, dtype=torch.float64)
    dev = [v.to(TPU) for v in (x, w, b, t1)]
    with torchtpu.eager.mode(mode), torch.autocast(TPU, dtype=torch.bfloat16):
        lin = torch.nn.functional.linear(*dev[:3])  # lower precision
        mm = dev[0] @ dev[1].T
        soft = torch.softmax(lin, dim=-1)  # float32 (set_opt_dtype)
        ex = torch.exp(lin)  # float32
        ln = torch.nn.functional.layer_norm(lin, (6,))  # float32
        summed = lin.sum()  # float32 (set_opt_dtype)
        promoted = torch.addcmul(dev[3], lin, lin)  # promote: float32 wins
        widest = torch.addcmul(t2.to(TPU), lin, lin)  # promote: float64 wins
        relu = torch.relu(lin)  # not listed: runs in its input's dtype
    assert lin.dtype == mm.dtype == relu.dtype == torch.bfloat16
    assert soft.dtype == ex.dtype == ln.dtype == summed.dtype == promoted.dtype == torch.float32
    assert widest.dtype == torch.float64

    ref_lin = torch.nn.functional.linear(x.bfloat16(), w.bfloat16(), b.bfloat16())
    torch.testing.assert_close(lin.cpu(), ref_lin, **BF16)
    torch.testing.assert_close(mm.cpu(), x.bfloat16() @ w.bfloat16().T, **BF16)
    # The float32 ops see the bf16 result widened, as on CUDA. Inside a DeferAndFuse region XLA
    # may keep the linear's float32 value instead of rounding it to bf16 and back (its
    # excess-precision rule, as Inductor's fusions do), so there the bound is bf16's.
    wide = lin.cpu().float()
    tol = BF16 if mode == "defer_and_fuse" else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(soft.cpu(), torch.softmax(wide, -1), **tol)
    torch.testing.assert_close(ex.cpu(), torch.exp(wide), **tol)
    torch.testing.assert_close(ln.cpu(), torch.nn.functional.layer_norm(wide, (6,)), **tol)
    torch.testing.assert_close(promoted.cpu(), torch.addcmul(t1, wide, wide), **tol)


def test_disabled_region_and_cpu_tensors_are_untouched():
    x = torch.randn(4, 4, device=TPU)
    with torch.autocast(TPU, dtype=torch.bfloat16):
        with torch.autocast(TPU, enabled=False):
            assert (x @ x).dtype == torch.float32
        c = torch.randn(4, 4)
        assert (c @ c).dtype == torch.float32  # tpu autocast leaves CPU tensors alone
        assert (x.double() @ x.double()).dtype == torch.float64  # float64 is never cast, as on CUDA
    with torch.autocast(TPU, dtype=torch.bfloat16):
        i = torch.ones(3, 3, dtype=torch.int64, device=TPU)
        assert (i @ i).dtype == torch.int64  # integers are never cast


def test_binary_cross_entropy_is_refused_with_the_way_out():
    p = torch.rand(4, device=TPU)
    with (
        torch.autocast(TPU, dtype=torch.bfloat16),
        pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"),
    ):
        torch.nn.functional.binary_cross_entropy(p, torch.ones(4, device=TPU))


def test_autocast_backward_gives_float32_gradients_for_float32_parameters():
    torch.manual_seed(0)
    ref = torch.nn.Linear(8, 4)
    lin = torch.nn.Linear(8, 4).to(TPU)
    lin.load_state_dict(ref.state_dict())
    x = torch.randn(3, 8)
    with torch.autocast(TPU, dtype=torch.bfloat16):
        lin(x.to(TPU)).float().square().sum().backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref(x).float().square().sum().backward()
    assert lin.weight.grad.dtype == torch.float32
    torch.testing.assert_close(lin.weight.grad.cpu(), ref.weight.grad, rtol=2e-2, atol=2e-2)


def test_torch_compile_on_tpu_tensors_under_autocast():
    torch._dynamo.reset()
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to(TPU)
    model.load_state_dict(ref.state_dict())
    x = torch.randn(5, 8)

    def run(m, inp):
        with torch.autocast(TPU, dtype=torch.bfloat16):
            return torch.softmax(m(inp), dim=-1), m(inp)

    compiled = torch.compile(run, backend="torchtpu")
    soft, logits = compiled(model, x.to(TPU))
    eager_soft, eager_logits = run(model, x.to(TPU))
    assert logits.dtype == torch.bfloat16 and soft.dtype == torch.float32
    torch.testing.assert_close(logits.cpu(), eager_logits.cpu(), **BF16)
    torch.testing.assert_close(soft.cpu(), eager_soft.cpu(), rtol=1e-2, atol=1e-3)
    # The default backend, as a CUDA user writes it, takes the same path on tpu tensors.
    torch._dynamo.reset()
    soft2, logits2 = torch.compile(run)(model, x.to(TPU))
    assert logits2.dtype == torch.bfloat16
    torch.testing.assert_close(logits2.cpu(), eager_logits.cpu(), **BF16)


def _llama_step(device: str, mode: str | None):
    from models.zoo import BY_NAME

    spec = BY_NAME["llama"]
    model = spec.build().train().to(device)
    ids = spec.inputs()["input_ids"].to(device)
    amp = "cpu" if device == "cpu" else TPU
    ctx = torchtpu.eager.mode(mode) if mode else contextlib.nullcontext()
    with ctx:
        with torch.autocast(amp, dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        grads = {n: p.grad.float().cpu() for n, p in model.named_parameters() if p.grad is not None}
        return out.loss.float().cpu(), out.logits.dtype, grads


@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_llama_bf16_autocast_training_step_matches_cpu_autocast(mode):
    loss_cpu, dtype_cpu, grads_cpu = _llama_step("cpu", None)
    loss, dtype, grads = _llama_step(TPU, mode)
    assert dtype == dtype_cpu == torch.bfloat16
    torch.testing.assert_close(loss, loss_cpu, rtol=0, atol=1e-3)
    assert grads.keys() == grads_cpu.keys() and len(grads) > 10
    worst = max(((grads[n] - grads_cpu[n]).norm() / grads_cpu[n].norm()).item() for n in grads)
    assert worst < 2e-2, worst
