"""`flex_attention` on tpu (torchtpu/compiled/flex_attention.py): eagerly, compiled on tpu tensors (the
default backend routes them to torchtpu) and compiled with backend="torchtpu" on CPU tensors,
each against PyTorch's own CPU result of the same call, for the score_mod / mask_mod forms real
models write (causal, sliding window, ALiBi with a captured per-head buffer, document masking
with a captured tensor, a relative bias, grouped-query attention, a fully masked row), with
gradients for training; and HF Llama with `attn_implementation="flex_attention"`.

Tolerances: outputs and log-sum-exp within 1e-5 (float32; the same dense reference, summed in
another order), gradients within 1e-4. Every graph compiles without a fallback (the suite's
TORCHTPU_FALLBACK=error).
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

B, H, S, D = 2, 4, 16, 8


def causal(b, h, q, kv):
    return q >= kv


def sliding_window(b, h, q, kv):
    return (q >= kv) & (q - kv < 4)


def relative_bias(score, b, h, q, kv):
    return score + (q - kv) * 0.1


def _alibi():
    slopes = torch.exp2(-torch.arange(1, H + 1, dtype=torch.float32))

    def score_mod(score, b, h, q, kv):
        return score - slopes[h] * (q - kv).abs()

    return score_mod, slopes


def _documents():
    doc = torch.tensor([0] * 5 + [1] * 7 + [2] * 4)

    def mask_mod(b, h, q, kv):
        return (doc[q] == doc[kv]) & (q >= kv)

    return mask_mod, doc


def _case(name: str, device: str):
    """(score_mod, mask_mod or None) of a case, its captured tensors on `device`."""
    if name == "causal":
        return None, causal
    if name == "sliding_window":
        return None, sliding_window
    if name == "relative_bias_causal":
        return relative_bias, causal
    if name == "alibi":
        score_mod, slopes = _alibi()
        slopes_on = slopes.to(device)
        return (lambda s, b, h, q, kv: s - slopes_on[h] * (q - kv).abs()), None
    if name == "documents":
        _, doc = _documents()
        doc_on = doc.to(device)
        return None, (lambda b, h, q, kv: (doc_on[q] == doc_on[kv]) & (q >= kv))
    if name == "score_only":
        return relative_bias, None
    if name == "first_row_masked":
        return None, (lambda b, h, q, kv: (q > 0) & (q >= kv))
    raise KeyError(name)


CASES = ["causal", "sliding_window", "relative_bias_causal", "alibi", "documents", "score_only", "first_row_masked"]


def _inputs(kv_heads: int = H):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, S, D, generator=g)
    k = torch.randn(B, kv_heads, S, D, generator=g)
    v = torch.randn(B, kv_heads, S, D, generator=g)
    return q, k, v


def _call(fn, name, device, q, k, v, **kw):
    score_mod, mask_mod = _case(name, device)
    block_mask = None if mask_mod is None else create_block_mask(mask_mod, B, H, S, S, device=device)
    return fn(q, k, v, score_mod=score_mod, block_mask=block_mask, return_lse=True, **kw)


def _close(got, want, tol):
    out, lse = (t.cpu() for t in got)
    torch.testing.assert_close(out, want[0], rtol=tol, atol=tol)
    # Fully masked rows have a log-sum-exp of -inf on both.
    torch.testing.assert_close(lse, want[1], rtol=tol, atol=tol)


# Every case compiled on tpu in `make test`; the other two modes for two cases there, all in
# `make test-slow`.
_QUICK = {"causal", "alibi"}
MATRIX = [
    pytest.param(name, mode, marks=() if mode == "compiled_tpu" or name in _QUICK else pytest.mark.slow)
    for mode in ("eager_tpu", "compiled_tpu", "compiled_cpu_tensors")
    for name in CASES
]


@pytest.mark.parametrize(("name", "mode"), MATRIX)
def test_flex_attention_matches_cpu(name, mode):
    q, k, v = _inputs()
    want = _call(flex_attention, name, "cpu", q, k, v)
    if mode == "compiled_cpu_tensors":
        got = _call(torch.compile(flex_attention, backend="torchtpu"), name, "cpu", q, k, v)
    else:
        fn = flex_attention if mode == "eager_tpu" else torch.compile(flex_attention, backend="torchtpu")
        got = _call(fn, name, "tpu", *(t.to("tpu") for t in (q, k, v)))
    _close(got, want, 1e-5)


def test_grouped_query_attention_matches_cpu():
    q, k, v = _inputs(kv_heads=2)
    want = _call(flex_attention, "causal", "cpu", q, k, v, enable_gqa=True)
    got = _call(
        torch.compile(flex_attention, backend="torchtpu"),
        "causal",
        "tpu",
        *(t.to("tpu") for t in (q, k, v)),
        enable_gqa=True,
    )
    _close(got, want, 1e-5)


@pytest.mark.parametrize("name", ["relative_bias_causal", "alibi", "documents"])
def test_compiled_gradients_match_the_dense_reference_on_cpu(name):
    """The compiled backward (AOTAutograd differentiating the dense form) against the same dense
    reference differentiated eagerly on CPU (PyTorch's CPU flex_attention has no backward)."""
    from torch._higher_order_ops.flex_attention import math_attention

    q, k, v = _inputs()
    score_mod, mask_mod = _case(name, "cpu")
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    block = create_block_mask(mask_mod or (lambda b, h, q, kv: q >= 0), B, H, S, S, device="cpu")
    out, _, _ = math_attention(*cpu, score_mod or (lambda s, *_: s), block.as_tuple(), D**-0.5, {})
    (out * torch.linspace(-1, 1, D)).sum().backward()

    tpu = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    score_mod, mask_mod = _case(name, "tpu")
    block_t = None if mask_mod is None else create_block_mask(mask_mod, B, H, S, S, device="tpu")
    got = torch.compile(flex_attention, backend="torchtpu")(*tpu, score_mod=score_mod, block_mask=block_t)
    (got * torch.linspace(-1, 1, D).to("tpu")).sum().backward()
    torch.testing.assert_close(got.detach().cpu(), out.detach(), rtol=1e-5, atol=1e-5)
    for a, b, which in zip(tpu, cpu, "qkv"):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-4, atol=1e-4, msg=f"grad of {which}")


def test_hf_llama_with_flex_attention_matches_cpu():
    """`attn_implementation="flex_attention"`: transformers compiles flex_attention itself (the
    default backend, which sends tpu graphs to torchtpu) and builds its causal BlockMask."""

    from models import tiny_llama

    model = tiny_llama.model(seed=0, attn_implementation="flex_attention").eval()
    ids = torch.randint(3, tiny_llama.VOCAB, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids).logits
        got = model.to("tpu")(ids.to("tpu")).logits.cpu()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_flex_attention_inside_activation_checkpointing_compiles_without_fallback():
    """The op inside a higher-order op's body (`torch.utils.checkpoint` under compile makes a
    `wrap_body` subgraph; TorchTitan's selective activation checkpointing does): decomposed
    there too, forward and backward."""
    from torch.utils.checkpoint import checkpoint

    q, k, v = _inputs()
    block = create_block_mask(causal, B, H, S, S, device="tpu")

    def layer(q, k, v):
        return checkpoint(lambda a, b, c: flex_attention(a, b, c, block_mask=block) * 2, q, k, v, use_reentrant=False)

    tpu = [t.to("tpu").requires_grad_() for t in (q, k, v)]
    out = torch.compile(layer, backend="torchtpu")(*tpu)
    out.sum().backward()
    want = flex_attention(q, k, v, block_mask=create_block_mask(causal, B, H, S, S, device="cpu")) * 2
    torch.testing.assert_close(out.detach().cpu(), want, rtol=1e-5, atol=1e-5)
    assert all(t.grad is not None and torch.isfinite(t.grad.cpu()).all() for t in tpu)
