"""The fused optimizer steps on tpu (`Adam/AdamW/SGD(fused=True)`, HF Trainer's default
`adamw_torch_fused`): device programs, not CPU fallbacks (every test runs with
TORCHTPU_FALLBACK=error), against PyTorch's CPU fused kernels on the same inputs, every
argument the step writes compared after three steps (rtol 1e-5, atol 1e-6: float32 math in
another order). With a `grad_scale` the gradients are unscaled in place, and a nonzero
`found_inf` leaves every argument as it was, as on CPU."""

from __future__ import annotations

import pytest
import torch

import torchtpu

TPU = "tpu"
TOL = dict(rtol=1e-5, atol=1e-6)


def _params(device):
    torch.manual_seed(0)
    return [
        torch.randn(5, 3, device="cpu").to(device).requires_grad_(),
        torch.randn(7, device="cpu").to(device).requires_grad_(),
    ]


def _run(make_opt, device, steps=3, scaled=False, inf_at=None):
    params = _params(device)
    opt = make_opt(params)
    gen = torch.Generator().manual_seed(1)
    for i in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen).to(device)
        if scaled:
            # What GradScaler hands the fused step: the scale, and whether it found an inf.
            opt.grad_scale = torch.tensor(4.0, device=device)
            opt.found_inf = torch.tensor(1.0 if i == inf_at else 0.0, device=device)
        opt.step()
    state = [opt.state[p] for p in params]
    return params, state


def _same(tpu, cpu):
    (p_t, s_t), (p_c, s_c) = tpu, cpu
    for a, b in zip(p_t, p_c):
        torch.testing.assert_close(a.detach().cpu(), b.detach(), **TOL)
        torch.testing.assert_close(a.grad.cpu(), b.grad, **TOL)
    for a, b in zip(s_t, s_c):
        assert a.keys() == b.keys()
        for k in a:
            torch.testing.assert_close(a[k].cpu(), b[k], **TOL)


ADAM = [
    dict(),
    dict(weight_decay=0.1),
    dict(amsgrad=True, weight_decay=0.01),
    dict(maximize=True),
    dict(lr=torch.tensor(0.01)),
]


@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW])
@pytest.mark.parametrize("kwargs", ADAM, ids=lambda k: ",".join(k) or "defaults")
def test_fused_adam_matches_cpu(cls, kwargs):
    def make(params):
        kw = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        return cls(params, fused=True, **kw)

    _same(_run(make, TPU), _run(make, "cpu"))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(),
        dict(momentum=0.9),
        dict(momentum=0.9, nesterov=True, weight_decay=0.1),
        dict(momentum=0.9, dampening=0.5, maximize=True),
    ],
    ids=lambda k: ",".join(k) or "defaults",
)
def test_fused_sgd_matches_cpu(kwargs):
    def make(params):
        return torch.optim.SGD(params, lr=0.1, fused=True, **kwargs)

    _same(_run(make, TPU), _run(make, "cpu"))


@pytest.mark.parametrize("cls", [torch.optim.AdamW, torch.optim.SGD])
def test_grad_scale_unscales_in_place_and_found_inf_skips_the_step(cls):
    def make(params):
        return cls(params, lr=0.1, fused=True, **({"momentum": 0.9} if cls is torch.optim.SGD else {}))

    tpu = _run(make, TPU, scaled=True, inf_at=1)
    _same(tpu, _run(make, "cpu", scaled=True, inf_at=1))


def test_fused_step_runs_on_the_device_not_the_cpu(monkeypatch):
    monkeypatch.setenv("TORCHTPU_FALLBACK", "eager")  # a fallback is counted here, not raised
    before = torchtpu.stats()
    params, _ = _run(lambda ps: torch.optim.AdamW(ps, fused=True), TPU, steps=1)
    after = torchtpu.stats()
    assert all(p.device.type == TPU for p in params)
    assert after["eager_cpu_fallbacks"] == before["eager_cpu_fallbacks"]
    assert after["executions"] > before["executions"]
