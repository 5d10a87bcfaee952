"""The decomposition table AOTAutograd uses: PyTorch's core ATen decompositions, minus the
ops torchtpu lowers whole, plus torchtpu's own decompositions of the fused CPU attention pair.

Scaled dot-product attention on CPU traces to `_scaled_dot_product_flash_attention_for_cpu`
and, in training, its fused backward. PyTorch's decomposition of the forward returns the
attention matrix where the backward expects the logsumexp, so decomposing one and not the
other gives wrong gradients. Both are decomposed here, consistently: the forward returns
(output, logsumexp) and the backward recomputes the probabilities from the logsumexp.
"""

from __future__ import annotations

import functools
import math

import torch

aten = torch.ops.aten

# Lowered whole by torchtpu even where the core table would decompose them.
KEEP_WHOLE = (aten.hardtanh,)


def _scores(query, key, is_causal, attn_mask, scale):
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    s = torch.matmul(query, key.transpose(-2, -1)) * scale
    L, S = query.shape[-2], key.shape[-2]
    if is_causal:
        keep = torch.arange(L).unsqueeze(-1) >= torch.arange(S).unsqueeze(0)
        s = torch.where(keep, s, float("-inf"))
    if attn_mask is not None:
        s = torch.where(attn_mask, s, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
    return s, scale


def _probs(s, logsumexp):
    # Rows masked entirely have logsumexp -inf: give them probability 0, as the kernel does.
    lse = torch.where(torch.isinf(logsumexp), 0.0, logsumexp).unsqueeze(-1)
    return torch.exp(s - lse)


def sdpa_cpu_forward(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    if dropout_p != 0.0:
        return NotImplemented  # the mask could not be shared with the backward: stay fused
    s, _ = _scores(query, key, is_causal, attn_mask, scale)
    m = torch.amax(s, dim=-1, keepdim=True)
    m = torch.where(torch.isinf(m), 0.0, m)
    logsumexp = (m + torch.log(torch.sum(torch.exp(s - m), dim=-1, keepdim=True))).squeeze(-1)
    out = torch.matmul(_probs(s, logsumexp), value)
    return out, logsumexp


def sdpa_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None):
    if dropout_p != 0.0:
        return NotImplemented
    s, scale = _scores(query, key, is_causal, attn_mask, scale)
    p = _probs(s, logsumexp)
    grad_value = torch.matmul(p.transpose(-2, -1), grad_out)
    grad_p = torch.matmul(grad_out, value.transpose(-2, -1))
    grad_s = p * (grad_p - torch.sum(grad_out * out, dim=-1, keepdim=True))
    grad_query = torch.matmul(grad_s, key) * scale
    grad_key = torch.matmul(grad_s.transpose(-2, -1), query) * scale
    return grad_query, grad_key, grad_value


@functools.lru_cache(maxsize=1)
def decomposition_table() -> dict:
    from torch._decomp import core_aten_decompositions

    table = dict(core_aten_decompositions())
    for packet in KEEP_WHOLE:
        for overload in packet.overloads():
            table.pop(getattr(packet, overload), None)
    table[aten._scaled_dot_product_flash_attention_for_cpu.default] = sdpa_cpu_forward
    table[aten._scaled_dot_product_flash_attention_for_cpu_backward.default] = sdpa_cpu_backward
    return table
