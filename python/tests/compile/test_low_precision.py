"""bf16/f16 paths: models under torch.autocast("cpu") and models whose weights are bf16/f16,
compiled with torchtpu (zero fallback ops) vs eager on the same inputs.

Tolerances: compiled and eager round differently at each low-precision op (XLA may keep
intermediates in f32), so outputs are compared with atol = rtol = 3e-2 for bf16 (8-bit
mantissa) and 5e-3 for f16 (11-bit), relative to the output's largest magnitude."""

import warnings

import pytest
import torch
from models import zoo

import torchtpu

TOL = {torch.bfloat16: 3e-2, torch.float16: 5e-3}


def _compiled(model):
    torch._dynamo.reset()
    torchtpu.reset_stats()
    return torch.compile(model, backend="torchtpu")


def _close(ref: torch.Tensor, got: torch.Tensor, dtype) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape
    scale = ref.float().abs().max().item()
    err = (ref.float() - got.float()).abs().max().item()
    assert err <= TOL[dtype] * max(scale, 1.0), f"max abs err {err:.3e} vs scale {scale:.3e}"


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8)
    ).eval()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_mlp_matches_eager(dtype):
    model, x = _mlp(), torch.randn(4, 16)
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        ref = model(x)
        got = _compiled(model)(x)
    assert ref.dtype == dtype
    _close(ref, got, dtype)
    assert not torchtpu.stats()["fallback_ops"]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_weights_match_eager(dtype):
    model, x = _mlp().to(dtype), torch.randn(4, 16).to(dtype)
    with torch.no_grad():
        ref = model(x)
        got = _compiled(model)(x)
    _close(ref, got, dtype)
    assert not torchtpu.stats()["fallback_ops"]


def test_autocast_llama_forward_and_gradients():
    """A Hugging Face Llama under bf16 autocast: logits and the gradients of every weight."""
    spec = zoo.BY_NAME["llama"]
    eager = spec.build().train()
    compiled_model = spec.build().train()
    compiled_model.load_state_dict(eager.state_dict())
    inputs = spec.inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ref = eager(**inputs).logits
            got = _compiled(compiled_model)(**inputs).logits
        _close(ref, got, torch.bfloat16)
        ref.float().pow(2).mean().backward()
        got.float().pow(2).mean().backward()
    assert not torchtpu.stats()["fallback_ops"]
    for (name, p_ref), (_, p) in zip(eager.named_parameters(), compiled_model.named_parameters()):
        scale = p_ref.grad.abs().max().item()
        err = (p_ref.grad - p.grad).abs().max().item()
        assert err <= 5e-2 * max(scale, 1e-6) + 1e-6, f"{name}: grad err {err:.3e} vs scale {scale:.3e}"
