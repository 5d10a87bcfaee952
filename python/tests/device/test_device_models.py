"""Whole models on the eager `tpu` device (python/torchtpu/device), against CPU eager from the
same weights and data: an MLP and the zoo's Llama trained three AdamW steps in each mode
("strict" and "debug"), Hugging Face models moved with `.to("tpu")` run forward, and
`model.generate` (greedy) gives the CPU's tokens.

Every test runs with TORCHTPU_FALLBACK=error (conftest.py), so an op that would run on the
CPU raises; `eager_cpu_fallbacks` is also asserted empty. After the first training step, a
step compiles no new one-op program (the learning rate and Adam's bias corrections are
program inputs, not constants).

Tolerances, float32 throughout: a one-op program computes as XLA's CPU backend does, which
may order a reduction or a matmul's sums differently from ATen, so results agree to a few
ulps of their magnitude, not bit for bit:
- losses: rtol 1e-5, atol 1e-6 (a mean over a few hundred f32 terms: ~1e-7 relative);
- gradients: rtol 1e-4, atol 1e-5 (backward sums over more terms: a few ulps of the largest);
- parameters after AdamW: Adam divides by sqrt(v), so where a gradient is ~0 a 1e-9 difference
  in it can move that parameter by up to lr per step. The MLP (lr 1e-3, no near-zero
  gradients at these sizes) within rtol 1e-5, atol 1e-5 (1% of one step); the Llama, whose
  near-zero gradients do hit this, within rtol 1e-4, atol 5e-5 as test_sharding.py does (lr
  1e-3, 3 steps).
- forward outputs: rtol 1e-5, atol 1e-5; generated tokens: equal (greedy argmax over logits
  that agree to ~1e-7: a tie within that would be needed to change a token).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from models import harness, zoo

import torchtpu

TPU = "tpu"
MODES = ("strict", "debug")

LOSS_TOL = dict(rtol=1e-5, atol=1e-6)
GRAD_TOL = dict(rtol=1e-4, atol=1e-5)


def compiled_programs() -> int:
    return torchtpu.stats()["eager_programs_compiled"]


def cpu_fallbacks() -> dict:
    return torchtpu.stats()["eager_cpu_fallbacks"]


def to_tpu(x):
    if isinstance(x, torch.Tensor):
        return x.to(TPU)
    if isinstance(x, dict):
        return {k: to_tpu(v) for k, v in x.items()}
    return x


@pytest.fixture(autouse=True)
def _fresh_stats():
    torchtpu.reset_stats()
    with warnings.catch_warnings():
        # transformers warns about its small configs (token ids outside the vocabulary).
        warnings.simplefilter("ignore")
        yield


def train_both(model, ref, batch: dict, loss_of, steps: int = 3, lr: float = 1e-3, param_tol=None, **adam):
    """Trains `model` (on tpu) and `ref` (its CPU twin, same weights) `steps` AdamW steps on
    `batch` (CPU tensors; the tpu run gets copies), comparing each step's loss and gradients
    and the final parameters. Returns the programs compiled in each tpu step."""
    assert all(p.device.type == TPU for p in model.parameters())
    tpu_batch = to_tpu(batch)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, **adam)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=lr, **adam)
    compiles = []
    for step in range(steps):
        before = compiled_programs()
        ops_before = torchtpu.stats()["eager_ops"]
        loss = loss_of(model, tpu_batch)
        opt.zero_grad()
        loss.backward()
        grads = [p.grad.cpu() for p in model.parameters()]
        opt.step()
        got_loss = loss.detach().cpu()
        compiles.append(compiled_programs() - before)
        assert torchtpu.stats()["eager_ops"] > ops_before, "the step ran no op on the tpu device"

        ref_loss = loss_of(ref, batch)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        assert got_loss.device.type == "cpu" and loss.device.type == TPU
        torch.testing.assert_close(
            got_loss, ref_loss.detach(), **LOSS_TOL, msg=lambda m, s=step: f"loss, step {s}: {m}"
        )
        for (n, q), g in zip(ref.named_parameters(), grads):
            torch.testing.assert_close(g, q.grad, **GRAD_TOL, msg=lambda m, n=n, s=step: f"grad {n}, step {s}: {m}")
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.device.type == TPU
        torch.testing.assert_close(p.detach().cpu(), q.detach(), **param_tol, msg=lambda m, n=n: f"param {n}: {m}")
    assert cpu_fallbacks() == {}
    return compiles


# ---------------------------------------------------------------- an MLP


def _mlp_and_data():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 5))
    g = torch.Generator().manual_seed(1)
    batch = {"x": torch.randn(8, 16, generator=g), "y": torch.randint(0, 5, (8,), generator=g)}
    return ref, batch


def _mlp_loss(model, batch):
    return F.cross_entropy(model(batch["x"]), batch["y"])


@pytest.mark.parametrize("foreach", [None, False], ids=["default_optimizer", "foreach_off"])
@pytest.mark.parametrize("mode", MODES)
def test_mlp_trains_with_adamw_like_cpu(mode, foreach):
    # foreach=None: PyTorch's default, the _foreach_* AdamW on tpu (tpu is a foreach device)
    # and the per-tensor loop on CPU; foreach=False: the per-tensor loop on both.
    ref, batch = _mlp_and_data()
    model = copy.deepcopy(ref).to(TPU)
    with torchtpu.eager.mode(mode):
        assert torchtpu.eager.current_mode() == mode
        compiles = train_both(
            model, ref, batch, _mlp_loss, lr=1e-3, param_tol=dict(rtol=1e-5, atol=1e-5), foreach=foreach
        )
    # Requirement: compiles per training step after the first: 0.
    assert compiles[1:] == [0, 0], compiles


def test_mlp_trains_in_debug_mode_with_finite_checks():
    # check_finite reads every op's result back to the host: nothing in this step makes a
    # NaN or an infinity, so it must not raise, and the numbers are the same.
    ref, batch = _mlp_and_data()
    model = copy.deepcopy(ref).to(TPU)
    before = torchtpu.eager.current_mode()
    with torchtpu.eager.mode("debug", check_finite=True):
        compiles = train_both(model, ref, batch, _mlp_loss, lr=1e-3, param_tol=dict(rtol=1e-5, atol=1e-5))
    assert compiles[1:] == [0, 0], compiles
    assert torchtpu.eager.current_mode() == before  # the context manager restored the mode


# ---------------------------------------------------------------- the zoo's Llama


def _llama_loss(model, batch):
    # Causal-LM loss: labels are the inputs (transformers shifts them), as test_sharding.py.
    return model(input_ids=batch["input_ids"], labels=batch["input_ids"]).loss


@pytest.mark.parametrize("mode", MODES)
def test_zoo_llama_trains_with_adamw_like_cpu(mode):
    pytest.importorskip("transformers")
    ref = zoo.BY_NAME["llama"].build()  # 2 layers, hidden 32, 4 heads (2 KV), vocab 128
    ref.train()  # dropout is 0 in this config: train mode changes no numbers
    model = copy.deepcopy(ref).to(TPU)
    ids = zoo.BY_NAME["llama"].inputs()["input_ids"]  # (2, 8)
    batch = {"input_ids": ids}
    with torchtpu.eager.mode(mode):
        compiles = train_both(model, ref, batch, _llama_loss, lr=1e-3, param_tol=dict(rtol=1e-4, atol=5e-5))
    assert compiles[1:] == [0, 0], compiles


# ---------------------------------------------------------------- Hugging Face forward


# gpt2: a causal LM with learned positions (made with torch.arange on the device); bert
# (masked LM): an encoder with a padded row in its attention mask. Both are built offline
# from small configs with random weights (zoo.py).
@pytest.mark.parametrize("name", ["gpt2", "bert"])
def test_hf_model_to_tpu_forward_matches_cpu(name):
    pytest.importorskip("transformers")
    spec = zoo.BY_NAME[name]
    ref = spec.build()
    model = copy.deepcopy(ref).to(TPU)
    assert all(p.device.type == TPU for p in model.parameters())
    assert all(b.device.type == TPU for b in model.buffers())
    inputs = spec.inputs()
    with torch.no_grad():
        got = harness.tensor_leaves(model(**to_tpu(inputs)))
        want = harness.tensor_leaves(ref(**inputs))
    assert len(got) == len(want) > 0
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.device.type == TPU
        torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-5, msg=lambda m, i=i: f"output {i}: {m}")
    assert cpu_fallbacks() == {}


# ViT's patch embedding is a Conv2d: aten::convolution reaches a PrivateUse1 device as
# convolution_overrideable, which the device implements with the lowered convolution.
def test_hf_vit_to_tpu_forward_matches_cpu():
    pytest.importorskip("transformers")
    spec = zoo.BY_NAME["vit"]
    ref = spec.build()
    model = copy.deepcopy(ref).to(TPU)
    inputs = spec.inputs()
    with torch.no_grad():
        got = model(**to_tpu(inputs)).logits
        want = ref(**inputs).logits
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    assert cpu_fallbacks() == {}


# ---------------------------------------------------------------- generate


GENERATE = dict(max_new_tokens=4, do_sample=False, use_cache=True, pad_token_id=0)


def _generate_both(name: str = "llama"):
    pytest.importorskip("transformers")
    spec = zoo.BY_NAME[name]
    ref = spec.build()
    model = copy.deepcopy(ref).to(TPU)
    ids = spec.inputs()["input_ids"]  # (2, 8)
    mask = torch.ones_like(ids)
    want = ref.generate(ids, attention_mask=mask, **GENERATE)
    got = model.generate(ids.to(TPU), attention_mask=mask.to(TPU), **GENERATE)
    assert got.device.type == TPU
    assert want.shape == (2, 8 + GENERATE["max_new_tokens"])
    assert torch.equal(got.cpu(), want), (got.cpu().tolist(), want.tolist())


@pytest.mark.parametrize("mode", MODES)
def test_llama_generate_matches_cpu(mode):
    # Greedy, with the KV cache (DynamicCache: torch.cat on tpu tensors each token), cache
    # positions from torch.arange on the device, an attention mask extended each step, argmax
    # and the stopping criteria read on the host.
    with torchtpu.eager.mode(mode):
        _generate_both("llama")
    assert cpu_fallbacks() == {}
