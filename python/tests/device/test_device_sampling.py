"""Sampling on the tpu device as device programs: multinomial, randperm, randint, bernoulli
with tensor and float probabilities, normal with tensor arguments, exponential_, geometric_,
cauchy_, log_normal_, and HF `generate(do_sample=True)`.

The device's generator is not the CPU's (another algorithm), so values are compared with
their distributions, not with CPU eager's draws. Statistical tolerances: N draws give a
frequency with standard error sqrt(p(1-p)/N) <= 0.5/sqrt(N); each bound below is at least 5
standard errors. Every test runs with TORCHTPU_FALLBACK=error (conftest.py): a draw that fell
back to the CPU fails.
"""

from __future__ import annotations

import math

import pytest
import torch
from models import tiny_llama

import torchtpu

TPU = "tpu"
MODES = ["strict", "defer_and_fuse"]


def _freq(samples: torch.Tensor, n: int) -> torch.Tensor:
    return torch.bincount(samples.reshape(-1), minlength=n).double() / samples.numel()


@pytest.mark.parametrize("mode", MODES)
def test_multinomial_without_replacement_follows_the_probabilities(mode):
    torch.manual_seed(0)
    p = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.0])
    rows = 20000
    with torchtpu.eager.mode(mode):
        got = torch.multinomial(p.to(TPU).expand(rows, 5), 1).cpu()
    assert got.shape == (rows, 1) and got.dtype == torch.int64
    freq = _freq(got, 5)
    assert freq[4] == 0  # a zero probability is never drawn
    torch.testing.assert_close(freq[:4], p[:4].double(), atol=0.02, rtol=0)  # 5.7 standard errors
    # k draws from one row are k distinct categories, none of probability zero.
    with torchtpu.eager.mode(mode):
        three = torch.multinomial(p.to(TPU).expand(500, 5), 3).cpu()
    assert all(len(set(r)) == 3 and 4 not in r for r in three.tolist())


def test_multinomial_with_replacement_and_unnormalised_weights():
    torch.manual_seed(1)
    w = torch.tensor([[1.0, 3.0], [2.0, 2.0]])  # weights, not probabilities: normalised per row
    got = torch.multinomial(w.to(TPU), 20000, replacement=True).cpu()
    assert got.shape == (2, 20000)
    torch.testing.assert_close(_freq(got[0], 2), torch.tensor([0.25, 0.75], dtype=torch.float64), atol=0.02, rtol=0)
    torch.testing.assert_close(_freq(got[1], 2), torch.tensor([0.5, 0.5], dtype=torch.float64), atol=0.02, rtol=0)
    # A 1-d distribution and a half-precision one.
    one = torch.multinomial(torch.tensor([0.0, 1.0], dtype=torch.bfloat16, device=TPU), 4, replacement=True)
    assert one.cpu().tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize(
    "probs, kwargs, message",
    [
        ([0.5, -0.1, 0.6], {}, "element < 0"),
        ([0.5, float("nan")], {}, "`inf`, `nan`"),
        ([0.0, 0.0], {}, "sum of probabilities <= 0"),
    ],
)
def test_invalid_distributions_raise_cpu_eagers_error_at_the_next_read(probs, kwargs, message):
    """CPU eager raises at once; the device raises at the next host read, as CUDA's device
    assert does, so a sampling loop costs no round trip per draw."""
    num = kwargs.get("num_samples", 1)
    with pytest.raises(RuntimeError, match="sum of probabilities|inf"):
        torch.multinomial(torch.tensor(probs), num)  # CPU eager refuses it too
    out = torch.multinomial(torch.tensor(probs, device=TPU), num)
    with pytest.raises(RuntimeError, match=message.replace("`", ".")):
        out.cpu()
    # The error was raised once: the device is usable after it.
    assert torch.multinomial(torch.tensor([0.0, 1.0], device=TPU), 1).item() == 1


def test_multinomial_refuses_at_once_what_the_shapes_decide():
    # More samples than nonzero categories: the zero-probability ones come last, as on the CPU.
    got = torch.multinomial(torch.tensor([0.0, 0.5, 0.0], device=TPU), 3).cpu()
    assert got[0] == 1 and sorted(got.tolist()) == [0, 1, 2]
    p = torch.ones(3, device=TPU)
    with pytest.raises(RuntimeError, match="without replacement"):
        torch.multinomial(p, 4)
    with pytest.raises(RuntimeError, match="n_sample <= 0"):
        torch.multinomial(p, 0)


@pytest.mark.parametrize("mode", ["strict", pytest.param("defer_and_fuse", marks=pytest.mark.slow)])
def test_randperm_is_a_uniform_permutation(mode):
    torch.manual_seed(2)
    with torchtpu.eager.mode(mode):
        perms = torch.stack([torch.randperm(6, device=TPU) for _ in range(3000)]).cpu()
    assert all(sorted(r) == list(range(6)) for r in perms.tolist())
    # Each value lands at position 0 with probability 1/6.
    torch.testing.assert_close(_freq(perms[:, 0], 6), torch.full((6,), 1 / 6, dtype=torch.float64), atol=0.04, rtol=0)
    assert torch.randperm(5, dtype=torch.int32, device=TPU).dtype == torch.int32
    assert torch.randperm(0, device=TPU).numel() == 0


def test_randint_and_bernoulli_with_tensor_and_float_probabilities():
    torch.manual_seed(3)
    r = torch.randint(3, 8, (5000,), device=TPU).cpu()
    assert r.min() >= 3 and r.max() <= 7 and set(r.tolist()) == set(range(3, 8))
    p = torch.tensor([0.0, 0.25, 1.0]).expand(20000, 3).contiguous()
    got = torch.bernoulli(p.to(TPU)).cpu()
    torch.testing.assert_close(
        got.mean(0).double(), torch.tensor([0.0, 0.25, 1.0], dtype=torch.float64), atol=0.02, rtol=0
    )
    into = torch.empty(20000, 3, device=TPU).bernoulli_(p.to(TPU)).cpu()
    torch.testing.assert_close(
        into.mean(0).double(), torch.tensor([0.0, 0.25, 1.0], dtype=torch.float64), atol=0.02, rtol=0
    )
    flat = torch.bernoulli(torch.empty(20000, device=TPU), 0.3).cpu()
    assert abs(flat.mean().item() - 0.3) < 0.02 and set(flat.unique().tolist()) <= {0.0, 1.0}


def test_normal_with_tensor_arguments():
    torch.manual_seed(4)
    mean = torch.tensor([[-5.0], [5.0]])
    std = torch.tensor([0.5, 2.0, 0.0])
    n = 20000
    got = torch.normal(mean.expand(2, n).contiguous().to(TPU), 1.0).cpu()
    torch.testing.assert_close(got.mean(1), torch.tensor([-5.0, 5.0]), atol=0.05, rtol=0)  # se 0.007
    both = torch.stack([torch.normal(mean.to(TPU), std.to(TPU)) for _ in range(2000)]).cpu()
    assert both.shape == (2000, 2, 3)  # broadcast of mean (2, 1) and std (3,)
    torch.testing.assert_close(both.std(0), std.expand(2, 3), atol=0.15, rtol=0)
    assert torch.all(both[:, :, 2] == mean.expand(2, 1).reshape(1, 2).expand(2000, 2))  # std 0: the mean
    scale = torch.normal(0.0, torch.full((n,), 3.0, device=TPU)).cpu()
    assert abs(scale.std().item() - 3.0) < 0.1
    out = torch.normal(torch.zeros(2, device=TPU), torch.tensor([1.0, -1.0], device=TPU))
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        out.cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_exponential_geometric_cauchy_log_normal(dtype):
    torch.manual_seed(5)
    n = 40000
    e = torch.empty(n, dtype=dtype, device=TPU).exponential_(2.0).cpu().float()
    assert e.min() >= 0 and abs(e.mean().item() - 0.5) < 0.02  # se 0.0025
    g = torch.empty(n, dtype=dtype, device=TPU).geometric_(0.25).cpu().float()
    assert g.min() >= 1 and torch.equal(g, g.round()) and abs(g.mean().item() - 4.0) < 0.15  # se 0.017
    c = torch.empty(n, dtype=dtype, device=TPU).cauchy_(1.0, 0.5).cpu().float()
    assert abs(c.median().item() - 1.0) < 0.05  # the median's se: pi * sigma / (2 sqrt(n)) = 0.004
    quartiles = torch.quantile(c, torch.tensor([0.25, 0.75]))
    torch.testing.assert_close(quartiles, torch.tensor([0.5, 1.5]), atol=0.08, rtol=0)
    ln = torch.empty(n, dtype=dtype, device=TPU).log_normal_(0.5, 0.25).cpu().float()
    assert ln.min() > 0 and abs(ln.log().mean().item() - 0.5) < 0.02 and abs(ln.log().std().item() - 0.25) < 0.02


def test_a_seed_gives_the_same_draws():
    def draws():
        torch.manual_seed(1234)
        p = torch.tensor([[0.2, 0.3, 0.5]], device=TPU)
        return [
            torch.multinomial(p, 2).cpu(),
            torch.multinomial(p, 5, replacement=True).cpu(),
            torch.randperm(7, device=TPU).cpu(),
            torch.empty(4, device=TPU).exponential_().cpu(),
            torch.normal(p, p).cpu(),
            torch.bernoulli(p).cpu(),
        ]

    first, second = draws(), draws()
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    torch.manual_seed(99)
    assert not torch.equal(torch.randperm(50, device=TPU).cpu(), torch.randperm(50, device=TPU).cpu())


def test_a_generator_of_ones_own_is_refused_with_what_to_use():
    with pytest.raises(NotImplementedError, match="torch.manual_seed"):
        torch.Generator(device=TPU)


@pytest.mark.parametrize("mode", MODES)
def test_hf_sampling_generate_on_tpu_without_fallback_and_reproducible(mode):
    """`generate(do_sample=True, top_k, top_p)`: transformers' sampling (softmax, top-k/top-p
    filtering, multinomial) stays on the device; the same seed gives the same tokens."""
    pytest.importorskip("transformers")
    model = tiny_llama.model(seed=0, hidden_size=64, intermediate_size=128).eval().to(TPU)
    ids = torch.randint(0, 128, (2, 5)).to(TPU)

    def sample(seed):
        torch.manual_seed(seed)
        with torchtpu.eager.mode(mode):
            return model.generate(ids, max_new_tokens=6, do_sample=True, top_k=20, top_p=0.9, temperature=1.0).cpu()

    torchtpu.reset_stats()
    a, b, c = sample(7), sample(7), sample(8)
    assert not torchtpu.stats()["eager_cpu_fallbacks"]
    assert a.shape == (2, 11) and torch.equal(a, b)
    assert torch.equal(a[:, :5], ids.cpu()) and not torch.equal(a, c)
    assert 0 <= int(a.min()) and int(a.max()) < 128
    assert math.isfinite(float(model(a.to(TPU)).logits.float().sum().cpu()))
